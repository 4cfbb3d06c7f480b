# The serving layouts' async forms and GPU tuning. The CUDA queueing itself (copy, launch and event on the caller's
# stream, the host tables read before the call returns, no wait) is tests/emu_serve.cmake's cuda_serve_fake.
# serve_async: on the CPU the async forms are the synchronous calls (same bits; errors name the async call).
add_executable(serve_async ${CMAKE_CURRENT_LIST_DIR}/serve_async.c)
target_link_libraries(serve_async PRIVATE attn_core m)
add_test(NAME serve_async COMMAND serve_async)
set_tests_properties(serve_async PROPERTIES LABELS cpu TIMEOUT 120
                     ENVIRONMENT "ATTN_CACHE_DIR=${ATTN_TEST_CACHE};ATTN_DB=${ATTN_TEST_CACHE}/no-database.db;ATTN_THREADS=2")
# serve_gpu_run, serve_gpu_usage: `attntune tune --gpu NAME --page-size P` and `--varlen LENS` ranked by the model,
# rows of the layout's variant served to CUDA plans made for them (the fake driver named as an H100; nothing compiled)
if(TARGET attntune)
  add_executable(serve_gpu_plan ${CMAKE_CURRENT_LIST_DIR}/serve_gpu_plan.c)
  target_link_libraries(serve_gpu_plan PRIVATE attn_core m)
  foreach(c run usage)
    add_test(NAME serve_gpu_${c}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/serve_gpu.sh ${c} $<TARGET_FILE:attntune>
                     ${CMAKE_CURRENT_BINARY_DIR}/serve-gpu-${c} $<TARGET_FILE:serve_gpu_plan>
                     $<TARGET_FILE:fake_libcuda>)
    set_tests_properties(serve_gpu_${c} PROPERTIES LABELS "tuner;cuda" TIMEOUT 60
                         ENVIRONMENT "ATTN_CACHE_DIR=${ATTN_TEST_CACHE};ATTN_DB=${CMAKE_CURRENT_BINARY_DIR}/serve-gpu-no.db")
  endforeach()
endif()
# python_serve_stream: attention()'s layouts on CUDA tensors queue on torch's current stream through the _async forms
# (a stand-in torch and libattn, no GPU: tests/python_serve_stream.py)
add_test(NAME python_serve_stream
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/python_train.sh python_serve_stream.py $<TARGET_FILE:attn>)
set_tests_properties(python_serve_stream PROPERTIES LABELS python TIMEOUT 60 SKIP_RETURN_CODE 77)
# serve_gpu_model: attn_model_time_layout alone (packed GQA decode, varlen's per-sequence transfers, page runs, refusals)
add_executable(serve_gpu_model ${CMAKE_CURRENT_LIST_DIR}/serve_gpu_model.c)
target_link_libraries(serve_gpu_model PRIVATE attn_tuner)
add_test(NAME serve_gpu_model COMMAND serve_gpu_model)
set_tests_properties(serve_gpu_model PROPERTIES LABELS tuner TIMEOUT 60)
# serve_gpu_meas: the layouts measured on the CUDA device present (the fake driver posing as an H100, the layouts'
# launches run on the PTX interpreter through a wrapped attn_cuda_launch_layout): attn_measure's rows ok with their
# real error, wrong for a kernel that writes nothing or one wrong element, invalid for impl=wgmma (tests/
# serve_gpu_meas.c). serve_gpu_tune_fake: `attntune tune --gpu H100 --page-size P` / `--varlen` on the fake H100
# measures (provenance measured, the fake's kernels write nothing: rows wrong with the reason); nightly: the same
# runs in-process with every launch on the interpreter, rows ok (tests/serve_gpu_meas.sh)
add_executable(serve_gpu_meas ${CMAKE_CURRENT_LIST_DIR}/serve_gpu_meas.c)
target_include_directories(serve_gpu_meas PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(serve_gpu_meas PRIVATE attn_tuner attn_ptx m ${CMAKE_DL_LIBS})
target_link_options(serve_gpu_meas PRIVATE "LINKER:--wrap=attn_cuda_launch_layout")
set(ATTN_SERVE_MEAS_ENV "ATTN_LIBCUDA=$<TARGET_FILE:fake_libcuda>" "FAKE_LIBCUDA=cc=90"
    "FAKE_LIBCUDA_NAME=NVIDIA H100 80GB HBM3" "ATTN_CACHE_DIR=${ATTN_TEST_CACHE}" "ATTN_TIMING_REEXEC=1"
    "ATTN_DB=${CMAKE_CURRENT_BINARY_DIR}/serve-gpu-meas-no.db")
add_test(NAME serve_gpu_meas COMMAND serve_gpu_meas measure)
set_tests_properties(serve_gpu_meas PROPERTIES LABELS "tuner;cuda" TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${ATTN_SERVE_MEAS_ENV}")
if(TARGET attntune)
  foreach(c fake interp)
    set(name serve_gpu_tune_${c})
    if(c STREQUAL "interp")
      set(name nightly_serve_gpu_tune_interp)
    endif()
    add_test(NAME ${name}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/serve_gpu_meas.sh ${c} $<TARGET_FILE:attntune>
                     ${CMAKE_CURRENT_BINARY_DIR}/serve-gpu-tune-${c} $<TARGET_FILE:serve_gpu_meas>)
    set_tests_properties(${name} PROPERTIES LABELS "tuner;cuda" TIMEOUT 600 SKIP_RETURN_CODE 77
                         ENVIRONMENT "${ATTN_SERVE_MEAS_ENV}")
    if(c STREQUAL "interp")
      set_tests_properties(${name} PROPERTIES LABELS nightly)
    endif()
  endforeach()
endif()
