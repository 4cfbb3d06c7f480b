# gen/: spec validation, canonical text round trip, instantiation and hashing (no compiler needed).
add_executable(gen_spec ${CMAKE_CURRENT_LIST_DIR}/gen_spec.c)
target_link_libraries(gen_spec PRIVATE attn_gen)
add_test(NAME gen_spec COMMAND gen_spec)
set_tests_properties(gen_spec PROPERTIES LABELS "cpu")
