# The CUDA flash backward on the PTX interpreter (tests/cuda_emu_bwd.c; no GPU): NVRTC's PTX of
# templates/flash_bwd.cu against the fp64 backward on the shape classes of the forward's tests, each dtype.
# Without NVRTC these tests exit 77 (skipped).
add_executable(cuda_emu_bwd ${CMAKE_CURRENT_LIST_DIR}/cuda_emu_bwd.c)
target_include_directories(cuda_emu_bwd PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(cuda_emu_bwd PRIVATE attn_ptx attn_core m)

set(ATTN_EMU_BWD_ENV "ATTN_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache-emu" "ATTN_THREADS=1")
# name|arguments. CI (label cuda): one d per dtype on the --quick shapes, causal one way each (f32 d = 128: one
# stage), f32's and bf16's with the forward kernel's O and lse handed to the backward (--chain), and tiles a tuned row
# may hold (Br != Bc, 8 warps); nightly: every shape, both masks, the head-dimension classes, d_v != d, MLA's
# 576/512, sm_90's PTX, the chain in every dtype and more tuned tiles.
set(ATTN_EMU_BWD_TESTS
    "f16_d40_causal|--quick f16 d=40 causal=1"
    "chain_f32_d128_causal_1stage|--quick --chain f32 d=128 causal=1"
    "chain_bf16_d16|--quick --chain bf16 d=16 causal=0"
    "tiles_f16_d32_causal|--quick f16 d=32 causal=1 tiles=32x64w8s1"
    "atomic_f16_d40_causal|--quick f16 d=40 causal=1 dq=atomic"
    "atomic_bf16_d16_tiles|--quick bf16 d=16 causal=0 tiles=32x64w8s1 dq=atomic")
set(ATTN_EMU_BWD_NIGHTLY
    "nightly_f16|f16 d=1,16,40,59,64,128 causal=2"
    "nightly_bf16|bf16 d=3,64,111,128 causal=2"
    "nightly_f32|f32 d=1,16,37,64,128 causal=2"
    "nightly_dv_f16|f16 d=192 dv=128 causal=2"
    "nightly_dv_bf16|bf16 d=64 dv=128 causal=2"
    "nightly_dv_f32|f32 d=37 dv=77 causal=2"
    "nightly_mla_bf16|bf16 d=576 dv=512 causal=1"
    "nightly_sm90_f16|f16 d=128 causal=2 arch=sm_90"
    "nightly_sm90_bf16|bf16 d=59 dv=37 causal=2 arch=sm_90"
    "nightly_sm90_f32|f32 d=64 causal=2 arch=sm_90"
    "nightly_chain_f16|--chain f16 d=16,128 causal=2"
    "nightly_bf16_dv|bf16 d=59 dv=37 causal=2"
    "nightly_chain_bf16|--chain bf16 d=59 dv=37 causal=2"
    "nightly_chain_f32|--chain f32 d=64 causal=2"
    "nightly_tiles_bf16|bf16 d=128 causal=2 tiles=128x64w8s1 arch=sm_90"
    "nightly_tiles_f16|f16 d=59 dv=37 causal=2 tiles=128x16w2s2"
    "nightly_tiles_f32|f32 d=64 causal=2 tiles=64x16w8s2"
    "nightly_atomic_f16|f16 d=1,16,59,64,128 causal=2 dq=atomic"
    "nightly_atomic_bf16|bf16 d=3,111,128 causal=2 dq=atomic"
    "nightly_atomic_f32|f32 d=16,37,128 causal=2 dq=atomic"
    "nightly_atomic_dv_bf16|bf16 d=59 dv=37 causal=2 dq=atomic"
    "nightly_atomic_mla_bf16|bf16 d=576 dv=512 causal=1 dq=atomic"
    "nightly_atomic_sm90_f16|f16 d=128 causal=2 arch=sm_90 dq=atomic"
    "nightly_atomic_chain_bf16|--chain bf16 d=64 causal=2 dq=atomic"
    "nightly_atomic_tiles_f16|f16 d=59 dv=37 causal=2 tiles=128x16w2s2 dq=atomic"
    "nightly_atomic_tiles_f32|f32 d=64 causal=2 tiles=64x16w8s2 dq=atomic")
foreach(t ${ATTN_EMU_BWD_TESTS} ${ATTN_EMU_BWD_NIGHTLY})
  string(REPLACE "|" ";" parts "${t}")
  list(GET parts 0 name)
  list(GET parts 1 args)
  separate_arguments(args UNIX_COMMAND "${args}")
  if(name MATCHES "^nightly_")
    set(label nightly)
    set(timeout 7200)
  else()
    set(label cuda)
    set(timeout 300)
  endif()
  add_test(NAME emu_bwd_${name} COMMAND cuda_emu_bwd ${args})
  set_tests_properties(emu_bwd_${name} PROPERTIES LABELS ${label} TIMEOUT ${timeout} SKIP_RETURN_CODE 77
                       ENVIRONMENT "${ATTN_EMU_BWD_ENV}")
endforeach()

# The backward through NVRTC to cubins (no spills, shared memory within the arch's limit): in CI one kernel per arch
# (sm_90's with padded d and d_v != d), nightly the head-dimension classes in every dtype; and through libattn on the fake
# driver (tests/fake_libcuda.c): plan, launches, scratch and refusals.
add_executable(cuda_backward ${CMAKE_CURRENT_LIST_DIR}/cuda_backward.c)
target_include_directories(cuda_backward PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(cuda_backward PRIVATE attn_core ${CMAKE_DL_LIBS})
add_test(NAME cuda_backward_compile_sm_80 COMMAND cuda_backward compile sm_80 f16:64)
add_test(NAME cuda_backward_compile_sm_90 COMMAND cuda_backward compile sm_90 bf16:59/37)
set_tests_properties(cuda_backward_compile_sm_80 cuda_backward_compile_sm_90 PROPERTIES LABELS cuda TIMEOUT 300
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${ATTN_CUDA_ENV}")
foreach(arch sm_80 sm_90)
  add_test(NAME cuda_backward_compile_all_${arch}
           COMMAND cuda_backward compile ${arch} f16:1,3,16,32,59,64,96,111,128,192,256,320,512,576,576/512,64/128
                   bf16:1,3,16,32,59,64,96,111,128,192,256,320,512,576,576/512,192/128
                   f32:1,3,16,32,59,64,96,111,128,192,256,320,512,576,576/512,37/77)
  set_tests_properties(cuda_backward_compile_all_${arch} PROPERTIES LABELS nightly TIMEOUT 3600 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${ATTN_CUDA_ENV}")
endforeach()
# tuned tiles through NVRTC: what attn_spec_check_backward_cuda admits must not spill (nightly: the largest)
foreach(arch sm_80 sm_90)
  add_test(NAME cuda_backward_compile_tiles_${arch}
           COMMAND cuda_backward compile ${arch} bf16:64@128x128w8s1,128@128x64w8s1,128@64x64w4s1,256@64x32w8s1
                   f16:96@64x64w4s1,111@64x64w4s2 f32:111@64x64w4s1,96@64x64w4s1)
  set_tests_properties(cuda_backward_compile_tiles_${arch} PROPERTIES LABELS nightly TIMEOUT 3600 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${ATTN_CUDA_ENV}")
endforeach()
# dq=atomic through NVRTC (cuda_emu_bwd --compile): no entry spills, its spec text round-trips; CI one kernel per
# arch, nightly the tiles at the accumulator limits
set(ATTN_BWD_ATOMIC_COMPILE
    "sm_80|f16 d=64 causal=1"
    "sm_90|bf16 d=59 dv=37 causal=0"
    "nightly_sm_80_f32|f32 d=111 causal=1 tiles=64x64w4s1"
    "nightly_sm_90_f32|f32 d=111 causal=1 tiles=64x64w4s1 arch=sm_90"
    "nightly_sm_80_bf16|bf16 d=128 causal=1"
    "nightly_sm_90_bf16|bf16 d=128 causal=1 arch=sm_90"
    "nightly_sm_80_f16|f16 d=111 causal=1 tiles=64x64w4s2"
    "nightly_sm_90_mla|bf16 d=576 dv=512 causal=1 arch=sm_90")
foreach(t ${ATTN_BWD_ATOMIC_COMPILE})
  string(REPLACE "|" ";" parts "${t}")
  list(GET parts 0 name)
  list(GET parts 1 args)
  separate_arguments(args UNIX_COMMAND "${args}")
  if(name MATCHES "^nightly_")
    set(label nightly)
  else()
    set(label cuda)
    list(APPEND args arch=${name})
  endif()
  add_test(NAME cuda_backward_compile_atomic_${name} COMMAND cuda_emu_bwd --compile ${args} dq=atomic)
  set_tests_properties(cuda_backward_compile_atomic_${name} PROPERTIES LABELS ${label} TIMEOUT 300
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${ATTN_EMU_BWD_ENV}")
endforeach()
add_test(NAME cuda_backward_fake COMMAND cuda_backward fake)
set_tests_properties(cuda_backward_fake PROPERTIES LABELS cuda TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${ATTN_CUDA_ENV};ATTN_LIBCUDA=$<TARGET_FILE:fake_libcuda>")
# On a GPU (label gpu; exit 77, skipped with the reason, without one): the forward's lse and the backward against
# fp64, bitwise the same twice, and the times at n = 4096
add_test(NAME gpu_backward COMMAND cuda_backward gpu)
set_tests_properties(gpu_backward PROPERTIES LABELS gpu TIMEOUT 900 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${ATTN_CUDA_ENV}")
# Mutations of templates/flash_bwd.cu the interpreter tests must catch (tests/ptx_mutation.sh): name|sed script|what
# the failure says|cuda_emu_bwd arguments. CI: a barrier dropped (a race), the causal mask off by one; nightly: dK
# and dV of one query head only (GQA), two A-fragment registers swapped in the bf16 mma.sync, delta 1% off.
set(ATTN_BWD_MUTATIONS
    "bwd_missing_syncthreads|/block t visible to all/ s/__syncthreads()/(void)0/|race|--quick f16 d=16 causal=0"
    "bwd_causal_off_by_one|s/j0 + c <= e0 + r/j0 + c < e0 + r/|relative error|--quick f16 d=16 causal=1"
    "nightly_bwd_gqa_one_head|s/count = G \\* nq/count = nq/|relative error|--quick f16 d=16 causal=0"
    "nightly_bwd_mma_bf16_a_operands|/f32.bf16.bf16.f32/,/r\"(b1)/ s/\"r\"(a\\[1\\]), \"r\"(a\\[2\\])/\"r\"(a[2]), \"r\"(a[1])/|relative error|--quick bf16 d=16 causal=0"
    "nightly_bwd_delta|s/(dp\\[u\\]\\[e\\] - sd\\[r\\])/(dp[u][e] - 0.99f * sd[r])/|relative error|--quick f32 d=16 causal=0")
foreach(t ${ATTN_BWD_MUTATIONS})
  string(REPLACE "|" ";" parts "${t}")
  list(GET parts 0 name)
  list(GET parts 1 script)
  list(GET parts 2 expect)
  list(GET parts 3 args)
  separate_arguments(args UNIX_COMMAND "${args}")
  if(name MATCHES "^nightly_")
    set(label nightly)
  else()
    set(label cuda)
  endif()
  add_test(NAME ptx_mutation_${name}
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/ptx_mutation.sh $<TARGET_FILE:cuda_emu_bwd>
                   ${PROJECT_SOURCE_DIR}/templates/flash_bwd.cu "${script}" "${expect}" ${args})
  set_tests_properties(ptx_mutation_${name} PROPERTIES LABELS ${label} TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${ATTN_EMU_BWD_ENV}")
endforeach()

# dq=atomic through libattn on the fake driver: three launches, the last attn_bwd_post's
add_executable(cuda_bwd_atomic_fake ${CMAKE_CURRENT_LIST_DIR}/cuda_bwd_atomic_fake.c)
target_include_directories(cuda_bwd_atomic_fake PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(cuda_bwd_atomic_fake PRIVATE attn_core ${CMAKE_DL_LIBS})
add_test(NAME cuda_bwd_atomic_fake COMMAND cuda_bwd_atomic_fake)
set_tests_properties(cuda_bwd_atomic_fake PROPERTIES LABELS cuda TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${ATTN_CUDA_ENV};ATTN_LIBCUDA=$<TARGET_FILE:fake_libcuda>")

# The model's backward with dq=atomic against the deterministic kernel's (no GPU, no NVRTC)
add_executable(model_bwd_atomic ${CMAKE_CURRENT_LIST_DIR}/model_bwd_atomic.c)
target_link_libraries(model_bwd_atomic PRIVATE attn_tuner)
add_test(NAME model_bwd_atomic COMMAND model_bwd_atomic)
set_tests_properties(model_bwd_atomic PROPERTIES LABELS tuner TIMEOUT 60)

# `attntune --gpu H100 --pass bwd` without that GPU: the CUDA backward's space ranked by the model, its rows stored
if(TARGET attntune)
  add_test(NAME tune_bwd_gpu_model
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/tune_bwd_gpu.sh $<TARGET_FILE:attntune>
                   ${CMAKE_CURRENT_BINARY_DIR}/tune-bwd-gpu-model)
  set_tests_properties(tune_bwd_gpu_model PROPERTIES LABELS tuner TIMEOUT 60
                       ENVIRONMENT "ATTN_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache-emu;ATTN_DB=${CMAKE_CURRENT_BINARY_DIR}/tuner-no-database.db")
endif()
