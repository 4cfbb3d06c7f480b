# Windowed GQA decode on the runtime's dense CUDA flash plans (tests/cuda_gqa_decode.c, whose other cases
# tests/gqa_decode.cmake runs): at n = 1 a window packs a KV head's query heads as the rows of one block, every row
# the one query at n_kv - 1 (the launch's negative window tells templates/flash.cu so). CI: f16 (heads 8/2, 1000
# keys, window 333), causal too (the same non-causal kernel), and NaN in V just below the window (hidden from every
# row, in a loaded block: the kernel's fix-up with the packed rows' positions); O and lse against fp64, K and V read
# exactly what one query head of each KV head reads. Nightly: f32, 160 query heads a KV head (two blocks), n = 3
# (not packed). Without NVRTC these tests exit 77 (skipped).
set(ATTN_GQA_WINDOW_ENV "ATTN_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache-emu"
    "ATTN_DB=${CMAKE_BINARY_DIR}/test-cache-emu/no-database.db" "ATTN_THREADS=1")
set(ATTN_GQA_WINDOW_TESTS
    "window_f16|f16 window causal_window window_nan")
set(ATTN_GQA_WINDOW_NIGHTLY
    "nightly_window_f32|f32 d=32 n_kv=300 window causal_window window_nan"
    "nightly_window_g160|bf16 heads=160/1 n_kv=333 window causal_window window_nan"
    "nightly_window_n3|f16 n=3 n_kv=200 window causal_window")
foreach(t ${ATTN_GQA_WINDOW_TESTS} ${ATTN_GQA_WINDOW_NIGHTLY})
  string(REPLACE "|" ";" parts "${t}")
  list(GET parts 0 name)
  list(GET parts 1 args)
  separate_arguments(args UNIX_COMMAND "${args}")
  if(name MATCHES "^nightly_")
    set(label nightly)
  else()
    set(label cuda)
  endif()
  add_test(NAME gqa_decode_${name} COMMAND cuda_gqa_decode $<TARGET_FILE:fake_libcuda> ${args})
  set_tests_properties(gqa_decode_${name} PROPERTIES LABELS ${label} TIMEOUT 600 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${ATTN_GQA_WINDOW_ENV}")
endforeach()
# nightly mutants: the kernel not told the rows are packed (row positions), and the fix-up not told so
add_test(NAME gqa_decode_nightly_window_mutation_pk
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/ptx_mutation.sh $<TARGET_FILE:cuda_gqa_decode>
                 ${PROJECT_SOURCE_DIR}/templates/flash.cu "s/const bool pk = a.window < 0;/const bool pk = false;/"
                 "relative error|o entry" $<TARGET_FILE:fake_libcuda> f16 window)
add_test(NAME gqa_decode_nightly_window_mutation_fix_pk
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/ptx_mutation.sh $<TARGET_FILE:cuda_gqa_decode>
                 ${PROJECT_SOURCE_DIR}/templates/flash.cu "s/const bool pk = w < 0;/const bool pk = false;/"
                 "relative error|o entry" $<TARGET_FILE:fake_libcuda> f16 window_nan)
set_tests_properties(gqa_decode_nightly_window_mutation_pk gqa_decode_nightly_window_mutation_fix_pk PROPERTIES
                     LABELS nightly TIMEOUT 300 SKIP_RETURN_CODE 77 ENVIRONMENT "${ATTN_GQA_WINDOW_ENV}")
