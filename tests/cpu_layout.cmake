# CPU flash's paged kernel apart from the dense one (spec layout=2): tests/cpu_layout.c loads it lazily, once per
# plan, two threads racing (dlopen and dlclose wrapped at link time to count the loads); tests/cpu_layout.sh shows a
# dense spec's source, preprocessed, holds none of the paged code, and that it is what a dense plan compiles. ~2 s.
add_executable(cpu_layout ${CMAKE_CURRENT_LIST_DIR}/cpu_layout.c)
target_link_libraries(cpu_layout PRIVATE attn_core Threads::Threads m)
target_link_options(cpu_layout PRIVATE -Wl,--wrap=dlopen,--wrap=dlclose)
add_test(NAME cpu_layout_lazy COMMAND cpu_layout)
set_tests_properties(cpu_layout_lazy PROPERTIES LABELS cpu TIMEOUT 120 ENVIRONMENT "${ATTN_CPU_ENV};ATTN_THREADS=2")
if(TARGET attntune) # source_verb_plan: tests/source_verb.cmake, built with attntune
  add_test(NAME cpu_layout_source
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/cpu_layout.sh $<TARGET_FILE:attntune> ${CMAKE_CURRENT_BINARY_DIR}/cpu-layout
                   $<TARGET_FILE:source_verb_plan>)
  set_tests_properties(cpu_layout_source PROPERTIES LABELS cpu TIMEOUT 60
    ENVIRONMENT "ATTN_DB=${CMAKE_CURRENT_BINARY_DIR}/cpu-layout-no-database.db")
endif()
