# space_cpu_gqa: the CPU space counts its split rule's query blocks as templates/flash.c runs them (a KV head's query
# heads packed into one block when n < Br), as the untuned default split does (under 0.1 s)
add_executable(space_cpu_gqa ${CMAKE_CURRENT_LIST_DIR}/space_cpu_gqa.c)
target_link_libraries(space_cpu_gqa PRIVATE attn_tuner)
add_test(NAME space_cpu_gqa COMMAND space_cpu_gqa)
set_tests_properties(space_cpu_gqa PROPERTIES LABELS tuner TIMEOUT 60)
