# CUDA backend: attn_open(ATTN_TARGET_CUDA) on a machine without a driver or device fails cleanly with ATTN_ENODEV.
set(ATTN_CUDA_TEST_CACHE ${CMAKE_BINARY_DIR}/test-cache-cuda)
file(MAKE_DIRECTORY ${ATTN_CUDA_TEST_CACHE})
add_executable(cuda_nodev ${CMAKE_CURRENT_LIST_DIR}/cuda_nodev.c)
target_link_libraries(cuda_nodev PRIVATE attn_core)
add_test(NAME cuda_nodev COMMAND cuda_nodev)
set_tests_properties(cuda_nodev PROPERTIES LABELS cuda
  ENVIRONMENT "ATTN_CACHE_DIR=${ATTN_CUDA_TEST_CACHE};ATTN_DB=${ATTN_CUDA_TEST_CACHE}/no-database.db")
