# CUDA backend. Without a GPU: attn_open(ATTN_TARGET_CUDA) fails cleanly with ATTN_ENODEV (and with its other codes
# on fake drivers), and NVRTC compiles the templates to cubin for sm_80 and sm_90 with no spills (defaults of every
# algorithm, d and dtype, causal alternating, lowrank's on a spread of d; defaults of odd d and d_v != d; a spread
# sample of the tuner's space; every d of lowrank, d and d_v across 1..576, both causal values and the whole space
# under the nightly label). Exit 77 (skipped) without NVRTC.
set(ATTN_CUDA_TEST_CACHE ${CMAKE_BINARY_DIR}/test-cache-cuda)
file(MAKE_DIRECTORY ${ATTN_CUDA_TEST_CACHE})
set(ATTN_CUDA_ENV "ATTN_CACHE_DIR=${ATTN_CUDA_TEST_CACHE}" "ATTN_DB=${ATTN_CUDA_TEST_CACHE}/no-database.db")
add_executable(cuda_nodev ${CMAKE_CURRENT_LIST_DIR}/cuda_nodev.c)
target_link_libraries(cuda_nodev PRIVATE attn_core)
add_test(NAME cuda_nodev COMMAND cuda_nodev)
set_tests_properties(cuda_nodev PROPERTIES LABELS cuda ENVIRONMENT "${ATTN_CUDA_ENV}")

add_executable(cuda_compile ${CMAKE_CURRENT_LIST_DIR}/cuda_compile.c)
target_link_libraries(cuda_compile PRIVATE attn_tuner)
# lowrank's kernels take 1-9 s each to compile (d >= 144 the most), so CI compiles a spread of d, one test per dtype,
# that takes each default rank (256 up to d=112, 240 at d=128, 128 from d=144) and the smallest and largest d;
# cuda_compile_defaults_all_lowrank_* (nightly) compiles every d.
set(ATTN_LOWRANK_CI_D "f16:16,256" "bf16:112,128" "f32:144")
# Cubins in CI: a spread of d per dtype and arch, every tile shape of the defaults among them (the interpreter tests
# compile and run the PTX of every default d of flash and smallcache, tests/emu.cmake); every d of every arch is
# nightly's cuda_compile_defaults_all_*.
set(ATTN_SM80_CI_D "f16:16,64,112,128,144,256" "bf16:32,80,160,224" "f32:48,96,128,192,256")
set(ATTN_SM90_CI_D "f16:16,128,256" "bf16:64,192" "f32:32,256")
foreach(arch sm_80 sm_90)
  foreach(algo flash smallcache)
    foreach(sel ${ATTN_SM80_CI_D})
      if(arch STREQUAL "sm_90")
        break()
      endif()
      string(REGEX REPLACE ":.*" "" dtype "${sel}")
      add_test(NAME cuda_compile_defaults_${algo}_${dtype}_${arch} COMMAND cuda_compile defaults ${arch} ${algo} ${sel})
      set_tests_properties(cuda_compile_defaults_${algo}_${dtype}_${arch} PROPERTIES LABELS cuda TIMEOUT 900
                           SKIP_RETURN_CODE 77 ENVIRONMENT "${ATTN_CUDA_ENV}")
    endforeach()
    if(arch STREQUAL "sm_90")
      foreach(sel ${ATTN_SM90_CI_D})
        string(REGEX REPLACE ":.*" "" dtype "${sel}")
        add_test(NAME cuda_compile_defaults_${algo}_${dtype}_${arch} COMMAND cuda_compile defaults ${arch} ${algo} ${sel})
        set_tests_properties(cuda_compile_defaults_${algo}_${dtype}_${arch} PROPERTIES LABELS cuda TIMEOUT 900
                             SKIP_RETURN_CODE 77 ENVIRONMENT "${ATTN_CUDA_ENV}")
      endforeach()
    endif()
  endforeach()
  foreach(sel ${ATTN_LOWRANK_CI_D})
    string(REGEX REPLACE ":.*" "" dtype "${sel}")
    # sm_90: f16 at d=16 only (the Taylor default); its d=256 kernels (rank 128, 9 s each) are f32:144's rank there
    if(arch STREQUAL "sm_90" AND dtype STREQUAL "f16")
      set(sel "f16:16")
    endif()
    add_test(NAME cuda_compile_defaults_lowrank_${dtype}_${arch} COMMAND cuda_compile defaults ${arch} lowrank ${sel})
    set_tests_properties(cuda_compile_defaults_lowrank_${dtype}_${arch} PROPERTIES LABELS cuda TIMEOUT 600
                         SKIP_RETURN_CODE 77 ENVIRONMENT "${ATTN_CUDA_ENV}")
  endforeach()
  foreach(algo flash smallcache lowrank)
    add_test(NAME cuda_compile_defaults_all_${algo}_${arch} COMMAND cuda_compile defaults ${arch} ${algo} all)
    set_tests_properties(cuda_compile_defaults_all_${algo}_${arch} PROPERTIES LABELS nightly TIMEOUT 3600
                         SKIP_RETURN_CODE 77 ENVIRONMENT "${ATTN_CUDA_ENV}")
  endforeach()
  # any d and d_v (padded tails, the tensor cores' d_v split): the defaults attn_spec_fit sizes compile without
  # spills; CI one odd d and MLA's 576/512 of flash on sm_80, nightly a spread for every algorithm and arch
  if(arch STREQUAL "sm_80")
    add_test(NAME cuda_compile_dims_flash_${arch} COMMAND cuda_compile dims ${arch} flash 59,576/512)
    set_tests_properties(cuda_compile_dims_flash_${arch} PROPERTIES LABELS cuda TIMEOUT 600 SKIP_RETURN_CODE 77
                         ENVIRONMENT "${ATTN_CUDA_ENV}")
  endif()
  foreach(algo flash smallcache lowrank)
    if(algo STREQUAL "lowrank")
      set(dims "1,3,59,111,320,576,576/512,192/128,64/128")
    else()
      set(dims "1,3,59,111,320,512,576,576/512,192/128,64/128,37/300")
    endif()
    add_test(NAME cuda_compile_dims_all_${algo}_${arch} COMMAND cuda_compile dims ${arch} ${algo} ${dims})
    set_tests_properties(cuda_compile_dims_all_${algo}_${arch} PROPERTIES LABELS nightly TIMEOUT 3600
                         SKIP_RETURN_CODE 77 ENVIRONMENT "${ATTN_CUDA_ENV}")
  endforeach()
  # the score modifiers (window, softcap and ALiBi together: the most registers) on flash's defaults of d = 64, 128
  # and 256 in every dtype compile without spills (nightly; the interpreter tests compile their PTX in CI)
  foreach(cfg "f32 d=64 br=64 bc=32 causal=0 unroll=0 warps=4 stages=2"
              "f16 d=64 br=128 bc=64 causal=1 unroll=0 warps=4 stages=2"
              "bf16 d=64 br=128 bc=64 causal=0 unroll=0 warps=4 stages=2"
              "f32 d=128 br=64 bc=32 causal=1 unroll=0 warps=4 stages=2"
              "f16 d=128 br=128 bc=32 causal=0 unroll=0 warps=4 stages=2"
              "bf16 d=128 br=128 bc=32 causal=1 unroll=0 warps=4 stages=2"
              "f32 d=256 br=64 bc=32 causal=0 unroll=0 warps=4 stages=1"
              "f16 d=256 br=128 bc=48 causal=1 unroll=0 warps=8 stages=1"
              "bf16 d=256 br=128 bc=48 causal=0 unroll=0 warps=8 stages=1")
    string(REGEX REPLACE "^([a-z0-9]+) d=([0-9]+).*" "\\1_d\\2" tag "${cfg}")
    add_test(NAME cuda_compile_mods_${tag}_${arch} COMMAND cuda_compile spec
             "flash cuda ${cfg} arch=${arch} tile=0 feature=taylor degree=0 rank=0 seed=0 window=1 softcap=1 alibi=1")
    set_tests_properties(cuda_compile_mods_${tag}_${arch} PROPERTIES LABELS nightly TIMEOUT 600 SKIP_RETURN_CODE 77
                         ENVIRONMENT "${ATTN_CUDA_ENV}")
  endforeach()
  # the PTX the interpreter tests run (tests/emu.cmake) is the PTX of the cubin compile, byte for byte
  add_test(NAME cuda_compile_same_ptx_${arch} COMMAND cuda_compile ptx ${arch})
  set_tests_properties(cuda_compile_same_ptx_${arch} PROPERTIES LABELS cuda TIMEOUT 600 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${ATTN_CUDA_ENV}")
  if(arch STREQUAL "sm_80")
    set(every 41)
  else()
    set(every 97)
  endif()
  add_test(NAME cuda_compile_space_${arch} COMMAND cuda_compile space ${arch} ${every})
  set_tests_properties(cuda_compile_space_${arch} PROPERTIES LABELS cuda TIMEOUT 900 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${ATTN_CUDA_ENV}")
  add_test(NAME cuda_compile_space_all_${arch} COMMAND cuda_compile space ${arch} 1)
  set_tests_properties(cuda_compile_space_all_${arch} PROPERTIES LABELS nightly TIMEOUT 7200 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${ATTN_CUDA_ENV}")
endforeach()
# A run that compiles nothing fails (exit 1), it does not pass.
add_test(NAME cuda_compile_nothing COMMAND ${CMAKE_CURRENT_LIST_DIR}/expect_exit.sh --skip77 1
         "FAIL: nothing was compiled" $<TARGET_FILE:cuda_compile> defaults sm_80 nosuch)
set_tests_properties(cuda_compile_nothing PROPERTIES LABELS cuda TIMEOUT 60 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${ATTN_CUDA_ENV}")
# The toolkit's stub libcuda (no driver behind it) must also give ATTN_ENODEV, not a crash.
find_file(ATTN_CUDA_STUB libcuda.so PATHS /usr/local/cuda/lib64/stubs /usr/local/cuda/targets/x86_64-linux/lib/stubs
          NO_DEFAULT_PATH)
if(ATTN_CUDA_STUB)
  add_test(NAME cuda_nodev_stub COMMAND cuda_nodev)
  set_tests_properties(cuda_nodev_stub PROPERTIES LABELS cuda ENVIRONMENT "${ATTN_CUDA_ENV};ATTN_LIBCUDA=${ATTN_CUDA_STUB}")
endif()
add_test(NAME cuda_nodev_missing COMMAND cuda_nodev)
set_tests_properties(cuda_nodev_missing PROPERTIES LABELS cuda
                     ENVIRONMENT "${ATTN_CUDA_ENV};ATTN_LIBCUDA=/nonexistent/libcuda.so.1")
# Fake drivers (tests/fake_libcuda.c, through ATTN_LIBCUDA): ATTN_ENODEV only for no device or the stub; a broken
# driver, a failed context, a missing entry point, a pre-sm_80 device and a bad ATTN_CUDA_DEVICE are errors with a
# one-line reason; a working driver opens.
foreach(lib fake_libcuda fake_libcuda_noctx)
  add_library(${lib} MODULE ${CMAKE_CURRENT_LIST_DIR}/fake_libcuda.c)
  set_target_properties(${lib} PROPERTIES PREFIX "" C_VISIBILITY_PRESET default)
endforeach()
target_compile_definitions(fake_libcuda_noctx PRIVATE FAKE_NO_CTX)
foreach(lib fake_libcuda fake_libcuda_noctx)
  target_include_directories(${lib} PRIVATE ${PROJECT_SOURCE_DIR}/templates)
  target_link_libraries(${lib} PRIVATE Threads::Threads)
endforeach()
add_executable(cuda_open ${CMAKE_CURRENT_LIST_DIR}/cuda_open.c)
target_link_libraries(cuda_open PRIVATE attn_core)
add_test(NAME cuda_open COMMAND cuda_open $<TARGET_FILE:fake_libcuda> $<TARGET_FILE:fake_libcuda_noctx>)
set_tests_properties(cuda_open PROPERTIES LABELS cuda ENVIRONMENT "${ATTN_CUDA_ENV}")
# attn_execute_async on the fake driver: the caller's stream, no synchronization, scratch in the stream's order
# (tests/execute_async.c; NVRTC makes the cubins, exit 77 without it)
add_test(NAME cuda_execute_async COMMAND execute_async cuda $<TARGET_FILE:fake_libcuda>)
set_tests_properties(cuda_execute_async PROPERTIES LABELS cuda TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${ATTN_CUDA_ENV}")
# plans with score modifiers (tests/cuda_mods.c): on the fake driver, the launch's window, cap and the plan's slopes
# on the device (exit 77 without NVRTC); on a GPU (label gpu), against fp64, the counted entries against the windowed
# closed form, and the time of a windowed prefill printed
add_executable(cuda_mods ${CMAKE_CURRENT_LIST_DIR}/cuda_mods.c)
target_link_libraries(cuda_mods PRIVATE attn_core m ${CMAKE_DL_LIBS})
add_test(NAME cuda_mods_fake COMMAND cuda_mods fake $<TARGET_FILE:fake_libcuda>)
set_tests_properties(cuda_mods_fake PROPERTIES LABELS cuda TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${ATTN_CUDA_ENV}")
add_test(NAME gpu_mods COMMAND cuda_mods gpu)
set_tests_properties(gpu_mods PROPERTIES LABELS gpu TIMEOUT 900 SKIP_RETURN_CODE 77 ENVIRONMENT "${ATTN_CUDA_ENV}")

# On a GPU (label gpu; exit 77 = skipped, with the reason, where there is none): correctness against fp64 for the
# foundation's sizes in f16, bf16 and f32, odd shapes, counted I/O against the closed forms, the API on a device.
add_executable(cuda_correct ${CMAKE_CURRENT_LIST_DIR}/cuda_correct.c ${PROJECT_SOURCE_DIR}/tuner/io_theory.c)
target_include_directories(cuda_correct PRIVATE ${PROJECT_SOURCE_DIR}/tuner)
target_link_libraries(cuda_correct PRIVATE attn_core m)
set(ATTN_GPU_TESTS "io" "api")
foreach(group flash smallcache lowrank shapes dims)
  foreach(dtype f16 bf16 f32)
    list(APPEND ATTN_GPU_TESTS "${group} ${dtype}")
  endforeach()
endforeach()
foreach(t ${ATTN_GPU_TESTS})
  string(REPLACE " " "_" name "cuda_correct_${t}")
  separate_arguments(args UNIX_COMMAND "${t}")
  add_test(NAME ${name} COMMAND cuda_correct ${args})
  set_tests_properties(${name} PROPERTIES LABELS gpu TIMEOUT 1800 SKIP_RETURN_CODE 77 ENVIRONMENT "${ATTN_CUDA_ENV}")
endforeach()
# cuda_correct itself on the fake driver: it skips only on ATTN_ENODEV, fails a driver that is there but broken or a
# device it cannot use, a failed device allocation, and a run that checked no case (a d= selection that matches none).
set(ATTN_CUDA_FAKE_CASES
    "nodev|init=100|77|^SKIP: .*no CUDA device|api"
    "broken|init=999|1|^FAIL: attn_open\\(cuda\\): runtime error: .*cuInit: unknown error|api"
    "sm75|cc=75|1|^FAIL: attn_open\\(cuda\\): not supported: .*sm_75|api"
    "alloc|alloc=2|1|FAIL: .*device buffers for the API checks: out of memory|api"
    "nocases|cc=80|1|^FAIL: no case ran|flash f16 d=48")
foreach(c ${ATTN_CUDA_FAKE_CASES})
  string(REPLACE "|" ";" f "${c}")
  list(GET f 0 name)
  list(GET f 1 fake)
  list(GET f 2 code)
  list(GET f 3 pattern)
  list(GET f 4 args)
  separate_arguments(args UNIX_COMMAND "${args}")
  add_test(NAME cuda_correct_fake_${name} COMMAND ${CMAKE_CURRENT_LIST_DIR}/expect_exit.sh ${code} "${pattern}"
           $<TARGET_FILE:cuda_correct> ${args})
  set_tests_properties(cuda_correct_fake_${name} PROPERTIES LABELS cuda TIMEOUT 300 ENVIRONMENT
                       "${ATTN_CUDA_ENV};ATTN_LIBCUDA=$<TARGET_FILE:fake_libcuda>;FAKE_LIBCUDA=${fake}")
endforeach()
