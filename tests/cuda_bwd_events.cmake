# The CUDA backward timed by CUDA events (attn_cuda_run_backward_timed) through libattn on the fake driver: every
# launch between two events on its stream, the fake's event time (tests/cuda_bwd_events.c; the same kernels as
# cuda_bwd_atomic_fake, a second or two).
add_executable(cuda_bwd_events ${CMAKE_CURRENT_LIST_DIR}/cuda_bwd_events.c)
target_include_directories(cuda_bwd_events PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(cuda_bwd_events PRIVATE attn_core ${CMAKE_DL_LIBS})
add_test(NAME cuda_bwd_events COMMAND cuda_bwd_events)
set_tests_properties(cuda_bwd_events PROPERTIES LABELS cuda TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${ATTN_CUDA_ENV};ATTN_LIBCUDA=$<TARGET_FILE:fake_libcuda>")
