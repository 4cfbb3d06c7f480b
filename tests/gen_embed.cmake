# gen/embed.cmake: a header the templates share is embedded in place of their #include, so that kernels compile from
# the embedded text alone and their cache key covers it (no compiler needed).
add_executable(gen_embed ${CMAKE_CURRENT_LIST_DIR}/gen_embed.c)
target_link_libraries(gen_embed PRIVATE attn_gen)
add_test(NAME gen_embed COMMAND gen_embed ${PROJECT_SOURCE_DIR}/templates)
set_tests_properties(gen_embed PROPERTIES LABELS "cpu" TIMEOUT 60)
