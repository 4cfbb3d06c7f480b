# GPU validation kit (scripts/gpu/, docs/gpu-validation.md): gpukit_run is the one-plan driver validate.sh runs on a
# device (alone, under compute-sanitizer and ncu); pack.sh carries it with the gpu tests.
add_executable(gpukit_run ${PROJECT_SOURCE_DIR}/scripts/gpu/gpukit_run.c ${PROJECT_SOURCE_DIR}/tuner/io_theory.c)
target_include_directories(gpukit_run PRIVATE ${PROJECT_SOURCE_DIR}/tuner)
target_link_libraries(gpukit_run PRIVATE attn_core m)
# Without a GPU (the driver made absent): validate.sh runs every step before the device step, writes a report that
# says no GPU was found and exits 77; pack.sh's folder runs from another path (ldd resolves everything, the pack's
# libraries first) and validate.sh finds it there; gpukit_check's modes refuse (77, the reason) without a driver and
# sm90 on an sm_80 device. A few seconds each.
foreach(mode nogpu pack refuse)
  add_test(NAME gpukit_${mode} COMMAND ${CMAKE_CURRENT_LIST_DIR}/gpukit.sh ${mode} ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  set_tests_properties(gpukit_${mode} PROPERTIES LABELS cuda TIMEOUT 120 SKIP_RETURN_CODE 77)
endforeach()
# The GPU path on the fake driver (sm_90, kernels do not run): the device opens, the pack's cubins seed the cache, the
# selected gpu test runs from the pack's list, wrong outputs fail. About 10 s of mostly NVRTC: nightly.
add_test(NAME gpukit_fakegpu COMMAND ${CMAKE_CURRENT_LIST_DIR}/gpukit.sh fakegpu ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR})
set_tests_properties(gpukit_fakegpu PROPERTIES LABELS nightly TIMEOUT 300 SKIP_RETURN_CODE 77)
# gpukit_check: the CUDA code validate.sh checks first on a GPU (the sm_90a template against fp64 and its speed, the
# backward's tile variants, varlen and paged, decode's split-KV and GQA-packed plans and an async paged call), one
# gpu-labelled test a mode; exit 77 with the reason without a device.
add_executable(gpukit_check ${PROJECT_SOURCE_DIR}/scripts/gpu/gpukit_check.c)
target_include_directories(gpukit_check PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(gpukit_check PRIVATE attn_core attn_tuner Threads::Threads ${CMAKE_DL_LIBS} m)
foreach(mode sm90 sm90-time bwd serve decode)
  string(REPLACE "-" "_" name "gpu_check_${mode}")
  add_test(NAME ${name} COMMAND gpukit_check ${mode})
  set_tests_properties(${name} PROPERTIES LABELS gpu TIMEOUT 600 SKIP_RETURN_CODE 77 ENVIRONMENT "${ATTN_CUDA_ENV}")
endforeach()
# Nightly: gpukit_check sm90 on the fake driver fails every case with the reason (it cannot pass where no kernel
# runs); validate.sh with a kernel that never ends (the fake's hang=1) reports the step that hung and the rest within
# its budget (about 45 s).
foreach(mode fakecheck hang)
  add_test(NAME gpukit_${mode} COMMAND ${CMAKE_CURRENT_LIST_DIR}/gpukit.sh ${mode} ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  set_tests_properties(gpukit_${mode} PROPERTIES LABELS nightly TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${ATTN_CUDA_ENV}")
endforeach()
