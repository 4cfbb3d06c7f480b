# bwd_gpu_meas: the CUDA backward measured on the device present (the fake driver posing as an H100, the checked
# launches run on the PTX interpreter through a wrapped attn_cuda_run_lse and attn_cuda_run_backward): attn_measure's
# rows ok with their real error against fp64 and the events' time, for the untuned tiles and dq=atomic; wrong for one
# changed dK element or kernels that write nothing (tests/bwd_gpu_meas.c).
# bwd_gpu_tune_fake: `attntune tune --pass bwd --gpu H100` on the fake H100 measures (provenance measured, 1 ms by
# events; the fake's kernels write nothing: rows wrong with the reason); bwd_gpu_tune_interp: the same tune
# in-process with the checked launches on the interpreter, rows ok (tests/bwd_gpu_meas.sh); nightly_bwd_gpu_tune_sweep:
# that over f32 and bf16, d_v != d, n = 1 and 33, GQA, causal and not, with dq=atomic (one SM: the untuned forward of
# n = 1 does not split, so its one launch runs on the interpreter; about 60 s)
add_executable(bwd_gpu_meas ${CMAKE_CURRENT_LIST_DIR}/bwd_gpu_meas.c)
target_include_directories(bwd_gpu_meas PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(bwd_gpu_meas PRIVATE attn_tuner attn_ptx m ${CMAKE_DL_LIBS})
target_link_options(bwd_gpu_meas PRIVATE "LINKER:--wrap=attn_cuda_run_lse" "LINKER:--wrap=attn_cuda_run_backward")
set(ATTN_BWD_MEAS_ENV "ATTN_LIBCUDA=$<TARGET_FILE:fake_libcuda>" "FAKE_LIBCUDA=cc=90"
    "FAKE_LIBCUDA_NAME=NVIDIA H100 80GB HBM3" "ATTN_CACHE_DIR=${ATTN_TEST_CACHE}" "ATTN_TIMING_REEXEC=1"
    "ATTN_DB=${CMAKE_CURRENT_BINARY_DIR}/bwd-gpu-meas-no.db")
add_test(NAME bwd_gpu_meas COMMAND bwd_gpu_meas measure)
set_tests_properties(bwd_gpu_meas PROPERTIES LABELS "tuner;cuda" TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${ATTN_BWD_MEAS_ENV}")
if(TARGET attntune)
  foreach(c fake interp)
    add_test(NAME bwd_gpu_tune_${c}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/bwd_gpu_meas.sh ${c} $<TARGET_FILE:attntune>
                     ${CMAKE_CURRENT_BINARY_DIR}/bwd-gpu-tune-${c} $<TARGET_FILE:bwd_gpu_meas>)
    set_tests_properties(bwd_gpu_tune_${c} PROPERTIES LABELS "tuner;cuda" TIMEOUT 300 SKIP_RETURN_CODE 77
                         ENVIRONMENT "${ATTN_BWD_MEAS_ENV}")
  endforeach()
  add_test(NAME nightly_bwd_gpu_tune_sweep
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/bwd_gpu_meas.sh sweep $<TARGET_FILE:attntune>
                   ${CMAKE_CURRENT_BINARY_DIR}/bwd-gpu-tune-sweep $<TARGET_FILE:bwd_gpu_meas>)
  set(ATTN_BWD_SWEEP_ENV ${ATTN_BWD_MEAS_ENV})
  list(TRANSFORM ATTN_BWD_SWEEP_ENV REPLACE "^FAKE_LIBCUDA=cc=90$" "FAKE_LIBCUDA=cc=90,sms=1")
  set_tests_properties(nightly_bwd_gpu_tune_sweep PROPERTIES LABELS nightly TIMEOUT 900 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${ATTN_BWD_SWEEP_ENV}")
endif()
