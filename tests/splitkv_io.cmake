# Split-KV CUDA flash's counting build (tests/cuda_splitkv_io.c): the counted reads and writes of both launches (the
# parts, then attn_combine) through the runtime's counting path on the fake driver, each launch on the PTX interpreter,
# equal tuner/io_theory.c's closed form, parts without key blocks included (they read no Q); and windowed GQA decode's. CI: f16, S = 2, 3 and 8
# on 37 keys (one key block of 64: parts without keys) and 200 (four: S = 8's even parts have none), GQA-packed
# (heads 4/2) and a block a query head (2/2), n = 1 and 3; and a mutant whose empty parts read Q must fail. Without
# NVRTC they exit 77 (skipped).
add_executable(cuda_splitkv_io ${CMAKE_CURRENT_LIST_DIR}/cuda_splitkv_io.c)
target_include_directories(cuda_splitkv_io PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(cuda_splitkv_io PRIVATE attn_ptx attn_tuner m ${CMAKE_DL_LIBS})
set(ATTN_SPLITKV_IO_ENV "ATTN_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache-emu"
    "ATTN_DB=${CMAKE_BINARY_DIR}/test-cache-emu/no-database.db" "ATTN_THREADS=1")
add_test(NAME cuda_splitkv_io_f16 COMMAND cuda_splitkv_io $<TARGET_FILE:fake_libcuda> f16 heads=4/2,2/2 n=1,3
                                          n_kv=37,200 2 3 8)
# windowed decode (no split): GQA-packed at n = 1 (every row at n_kv - 1), K and V counted once per KV head, exactly
# one query head's; a block a query head for MHA (nightly: n = 2, not packed)
add_test(NAME cuda_splitkv_io_window_f16 COMMAND cuda_splitkv_io $<TARGET_FILE:fake_libcuda> f16 heads=8/2,2/2
                                                 n_kv=1000 window=333 1)
# a part without key blocks must not read Q: with the skip gone its Q_i read is counted (and made)
add_test(NAME cuda_splitkv_io_mutation_empty_part_q
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/ptx_mutation.sh $<TARGET_FILE:cuda_splitkv_io>
                 ${PROJECT_SOURCE_DIR}/templates/flash.cu "s/if (nb > jb0) {/if (1) {/" "counted .* closed form"
                 $<TARGET_FILE:fake_libcuda> f16 n_kv=37 8)
set_tests_properties(cuda_splitkv_io_f16 cuda_splitkv_io_window_f16 cuda_splitkv_io_mutation_empty_part_q PROPERTIES
                     LABELS cuda TIMEOUT 300 SKIP_RETURN_CODE 77 ENVIRONMENT "${ATTN_SPLITKV_IO_ENV}")
# nightly: f32 (d = 32, Bc = 32), bf16 d = 40 with d_v = 24 (element loads, padded rows) and G = 8, ALiBi (a block a
# query head), bf16 d = 128 with G = 8 and n = 9 (72 packed rows: two query blocks a KV head), 1 to 1000 keys
set(ATTN_SPLITKV_IO_NIGHTLY
    "f32|f32 d=32 heads=4/1,3/3 n=1,5 n_kv=1,37,300 2 3 8"
    "bf16_dv|bf16 d=40 dv=24 heads=8/1,2/2 n=1,3 n_kv=1,37,1000 2 3 8"
    "f16_alibi|f16 alibi heads=4/2 n=1,2 n_kv=1,100 2 8"
    "bf16_d128|bf16 d=128 heads=16/2 n=1,9 n_kv=5,777 3 16"
    "window|bf16 heads=160/1,8/2 n=1,2 n_kv=1,100,1000 window=77 causal 1"
    "window_f32_alibi|f32 d=32 heads=4/2 n=1 n_kv=300 window=50 alibi 1")
foreach(t ${ATTN_SPLITKV_IO_NIGHTLY})
  string(REPLACE "|" ";" parts "${t}")
  list(GET parts 0 name)
  list(GET parts 1 args)
  separate_arguments(args UNIX_COMMAND "${args}")
  add_test(NAME cuda_splitkv_io_nightly_${name} COMMAND cuda_splitkv_io $<TARGET_FILE:fake_libcuda> ${args})
  set_tests_properties(cuda_splitkv_io_nightly_${name} PROPERTIES LABELS nightly TIMEOUT 600 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${ATTN_SPLITKV_IO_ENV}")
endforeach()
