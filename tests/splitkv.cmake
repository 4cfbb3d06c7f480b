# Split-KV CUDA flash (spec split = S > 1: the parts, then attn_combine) on the runtime's launch path
# (tests/cuda_splitkv.c): real plans on the fake driver (tests/cuda.cmake's fake_libcuda), each launch run on the PTX
# interpreter through fake_cuda_set_hook; O and lse against fp64, the same bits from attn_execute, attn_execute_lse and
# attn_execute_async. CI: f16 decode (heads 4/2, packed) on 37 and 200 keys with S = 2, 3 and 8 (S past the key
# blocks: parts without keys), NaN in V and +inf in Q (the NaN pattern exactly fp64's) with ALiBi (unpacked), and the
# combine without the rescale of its parts (a mutant that must fail), causal n = 1 (packed, and MHA with ALiBi: the
# kernel built without causal) and causal n = 3 (refused: no causal split kernel); nightly: bf16 n = 3, f32, d_v != d, softcap,
# 1000 keys, NaN, ALiBi. Without NVRTC these tests exit 77 (skipped).
add_executable(cuda_splitkv ${CMAKE_CURRENT_LIST_DIR}/cuda_splitkv.c)
target_include_directories(cuda_splitkv PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(cuda_splitkv PRIVATE attn_ptx attn_core m ${CMAKE_DL_LIBS})
set(ATTN_SPLITKV_ENV "ATTN_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache-emu"
    "ATTN_DB=${CMAKE_BINARY_DIR}/test-cache-emu/no-database.db" "ATTN_THREADS=1")
set(ATTN_SPLITKV_TESTS
    "f16|f16 n_kv=37,200 2 3 8"
    "f16_nan_alibi|f16 nan alibi n_kv=200 3"
    "f16_causal|f16 causal n_kv=200 3"
    "f16_causal_mha_alibi|f16 causal alibi heads=2/2 n_kv=37 2"
    "f16_causal_n3_refused|f16 causal n=3 2")
set(ATTN_SPLITKV_NIGHTLY
    "nightly_bf16_n3|bf16 n=3 n_kv=1,37,1000 2 3 8"
    "nightly_f32|f32 n_kv=1,37,1000 2 3 8"
    "nightly_f16_dv_softcap|f16 d=40 dv=24 heads=8/1 softcap=30 n_kv=1,37,1000 2 3 8"
    "nightly_bf16_d128_mha|bf16 d=128 heads=2/2 batch=2 n=3 n_kv=1000 3"
    "nightly_nan|bf16 nan n=3 n_kv=37,1000 2 8"
    "nightly_alibi|bf16 alibi n=3 n_kv=1,1000 3"
    "nightly_f32_nan|f32 d=32 nan n_kv=1000 8")
foreach(t ${ATTN_SPLITKV_TESTS} ${ATTN_SPLITKV_NIGHTLY})
  string(REPLACE "|" ";" parts "${t}")
  list(GET parts 0 name)
  list(GET parts 1 args)
  separate_arguments(args UNIX_COMMAND "${args}")
  if(name MATCHES "^nightly_")
    set(label nightly)
  else()
    set(label cuda)
  endif()
  add_test(NAME cuda_splitkv_${name} COMMAND cuda_splitkv $<TARGET_FILE:fake_libcuda> ${args})
  set_tests_properties(cuda_splitkv_${name} PROPERTIES LABELS ${label} TIMEOUT 600 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${ATTN_SPLITKV_ENV}")
endforeach()
# the combine must rescale each part by 2^(m_s - M): without it the parts' sums are mixed at their own maxima
add_test(NAME cuda_splitkv_mutation_no_rescale
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/ptx_mutation.sh $<TARGET_FILE:cuda_splitkv>
                 ${PROJECT_SOURCE_DIR}/templates/flash.cu "s/fa_ex2(pm\\[s \\* R + r\\] - mu)/1.0f/" "relative error"
                 $<TARGET_FILE:fake_libcuda> f16 n_kv=200 2)
set_tests_properties(cuda_splitkv_mutation_no_rescale PROPERTIES LABELS cuda TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${ATTN_SPLITKV_ENV}")
# The tuner's CUDA space offers split for decode (n <= 16, not causal) where the query blocks leave SMs idle, and the
# model ranks it: one sequence of 8 heads, n = 1, 8192 keys on an H100 (8 blocks for 132 SMs) picks a split.
if(TARGET attntune)
  set(splitkv_db ${CMAKE_BINARY_DIR}/test-splitkv-tune.db)
  add_test(NAME cuda_splitkv_tune_h100_decode
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/expect_exit.sh 0 "^best n=1 n_kv=8192 .* split=[0-9]+ cuda"
                   sh -c "rm -f '${splitkv_db}' && ATTN_DB='${splitkv_db}' \"$1\" tune --gpu H100 --n 1 --n-kv 8192 --heads 8 --d 128 --dtype bf16"
                   sh $<TARGET_FILE:attntune>)
  set_tests_properties(cuda_splitkv_tune_h100_decode PROPERTIES LABELS cuda TIMEOUT 60)
  # causal decode too (n = 1: its kernel is built without causal), and never a split for causal n = 2
  add_test(NAME cuda_splitkv_tune_h100_causal_decode
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/expect_exit.sh 0 "^best n=1 n_kv=8192 .*causal=1: .* split=[0-9]+ cuda"
                   sh -c "rm -f '${splitkv_db}.causal' && ATTN_DB='${splitkv_db}.causal' \"$1\" tune --gpu H100 --n 1 --n-kv 8192 --heads 8 --d 128 --dtype bf16 --causal 1"
                   sh $<TARGET_FILE:attntune>)
  add_test(NAME cuda_splitkv_tune_h100_causal_n2
           COMMAND sh -c "rm -f '${splitkv_db}.n2' && ATTN_DB='${splitkv_db}.n2' \"$1\" tune --gpu H100 --n 2 --n-kv 8192 --heads 8 --d 128 --dtype bf16 --causal 1 > '${splitkv_db}.n2.out' 2>&1 && grep -q '^best n=2 ' '${splitkv_db}.n2.out' && ! grep -q 'split=' '${splitkv_db}.n2.out'"
                   sh $<TARGET_FILE:attntune>)
  set_tests_properties(cuda_splitkv_tune_h100_causal_decode cuda_splitkv_tune_h100_causal_n2 PROPERTIES LABELS cuda
                       TIMEOUT 60)
endif()
