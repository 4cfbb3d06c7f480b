# Score modifiers (window, softcap, ALiBi) on the CPU: the fp64 reference against attn.h's definitions and the
# refusals of bad modifiers (tests/cpu_mods.c).
add_executable(cpu_mods ${CMAKE_CURRENT_LIST_DIR}/cpu_mods.c)
target_link_libraries(cpu_mods PRIVATE attn_core m)
add_test(NAME cpu_mods_ref COMMAND cpu_mods ref)
set_tests_properties(cpu_mods_ref PROPERTIES LABELS cpu TIMEOUT 120 ENVIRONMENT "${ATTN_CPU_ENV}")
add_test(NAME cpu_mods_flash COMMAND cpu_mods flash)
set_tests_properties(cpu_mods_flash PROPERTIES LABELS cpu TIMEOUT 300 ENVIRONMENT "${ATTN_CPU_ENV}")
add_test(NAME cpu_mods_sweep COMMAND cpu_mods sweep)
set_tests_properties(cpu_mods_sweep PROPERTIES LABELS "cpu;nightly" TIMEOUT 1800 ENVIRONMENT "${ATTN_CPU_ENV}")
