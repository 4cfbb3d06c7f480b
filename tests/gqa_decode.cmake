# Grouped-query attention on the runtime's dense CUDA flash plans, K and V read once per KV head (tests/cuda_gqa_decode.c):
# real plans on the fake driver (tests/cuda.cmake's fake_libcuda), each launch run on the PTX interpreter through
# fake_cuda_set_hook; O and lse against fp64, and the packed launches' K and V read sectors: 1.000x their bytes where
# rows are whole 32-byte sectors and a KV head's rows fit one block, else within the bound cuda_gqa_decode.c states.
# Without NVRTC these tests exit 77 (skipped).
add_executable(cuda_gqa_decode ${CMAKE_CURRENT_LIST_DIR}/cuda_gqa_decode.c)
target_include_directories(cuda_gqa_decode PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(cuda_gqa_decode PRIVATE attn_ptx attn_core m ${CMAKE_DL_LIBS})
set(ATTN_GQA_DECODE_ENV "ATTN_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache-emu"
    "ATTN_DB=${CMAKE_BINARY_DIR}/test-cache-emu/no-database.db" "ATTN_THREADS=1")
# name|arguments. CI: f16 decode (heads 8/2, n_kv = 1000, d = 64), not causal and causal (the same non-causal kernel),
# and ALiBi, which stays a block a query head; nightly: softcap, a window, bf16, d = 128, d_v != d, batch 2, 8 query
# heads a KV head, 160 (more than a block's Br rows: two blocks a KV head), non-causal n = 3 (packed) and causal n = 3
# (not).
set(ATTN_GQA_DECODE_TESTS
    "f16|f16 plain causal alibi")
set(ATTN_GQA_DECODE_NIGHTLY
    "nightly_f16_mods|f16 softcap window"
    "nightly_bf16_d128|bf16 d=128 n_kv=777 batch=2 plain causal softcap"
    "nightly_f16_dv_g8|f16 d=40 dv=24 heads=8/1 n_kv=301 causal alibi"
    "nightly_f16_n3|f16 n=3 n_kv=500 plain causal softcap"
    "nightly_f16_g160|f16 heads=160/1 n_kv=200 plain causal"
    "nightly_f32|f32 d=32 n_kv=300 causal window")
foreach(t ${ATTN_GQA_DECODE_TESTS} ${ATTN_GQA_DECODE_NIGHTLY})
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
                       ENVIRONMENT "${ATTN_GQA_DECODE_ENV}")
endforeach()
