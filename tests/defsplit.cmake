# The untuned CUDA flash plan's split-KV for decode (runtime/api.c, default_split_cuda; tests/cuda_defsplit.c): with
# no database row, on the fake driver (tests/cuda.cmake's fake_libcuda) posed as 4 and 132 SMs: which shapes split
# and in how many parts, and the two 4-SM splits (one head; GQA-packed causal decode) run as real plans with both
# launches on the PTX interpreter, O and lse against fp64. Without NVRTC it exits 77 once the choices are checked.
add_executable(cuda_defsplit ${CMAKE_CURRENT_LIST_DIR}/cuda_defsplit.c)
target_include_directories(cuda_defsplit PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(cuda_defsplit PRIVATE attn_ptx attn_core m ${CMAKE_DL_LIBS})
add_test(NAME cuda_defsplit COMMAND cuda_defsplit $<TARGET_FILE:fake_libcuda>)
set_tests_properties(cuda_defsplit PROPERTIES LABELS cuda TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "ATTN_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache-emu;ATTN_DB=${CMAKE_BINARY_DIR}/test-cache-emu/no-database.db;ATTN_THREADS=1")
