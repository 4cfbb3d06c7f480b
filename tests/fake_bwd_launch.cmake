# fake_bwd_launch: the fake driver copies a backward launch's 136-byte attn_cuda_bwd_kargs, not the forward's 168
# bytes (tests/fake_bwd_launch.c; in the sanitizer stage too, where the overread is AddressSanitizer's to see)
add_executable(fake_bwd_launch ${CMAKE_CURRENT_LIST_DIR}/fake_bwd_launch.c)
target_include_directories(fake_bwd_launch PRIVATE ${CMAKE_CURRENT_LIST_DIR} ${PROJECT_SOURCE_DIR}/templates)
target_link_libraries(fake_bwd_launch PRIVATE ${CMAKE_DL_LIBS})
add_test(NAME fake_bwd_launch COMMAND fake_bwd_launch $<TARGET_FILE:fake_libcuda>)
set_tests_properties(fake_bwd_launch PROPERTIES LABELS cuda TIMEOUT 60)
