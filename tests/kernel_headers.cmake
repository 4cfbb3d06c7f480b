# tests/kernel_headers.c: the CPU kernels that need no <immintrin.h> do not include it (a fifth of their compile
# time), on AVX2 and AVX-512 targets, and the f16 backward's builtins compile clean with cc and clang. The
# preprocessor and -fsyntax-only only (no object built): about 2 s.
add_executable(kernel_headers ${CMAKE_CURRENT_LIST_DIR}/kernel_headers.c)
target_link_libraries(kernel_headers PRIVATE attn_gen)
add_test(NAME kernel_headers COMMAND kernel_headers ${CMAKE_CURRENT_BINARY_DIR})
set_tests_properties(kernel_headers PROPERTIES LABELS cpu TIMEOUT 60 SKIP_RETURN_CODE 77)
