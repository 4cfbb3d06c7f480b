# gpukit_check's times on the fake driver (tests/gpukit_events.sh): the backward's variants and the forward (bwd), paged
# and dense decode (serve) timed by CUDA events, method events and the fake's event time in every time row. The
# modes' correctness cases compile and fail there first (bwd about 70 s, serve 20 s on two busy cores): nightly.
foreach(mode bwd serve)
  add_test(NAME gpukit_events_${mode} COMMAND ${CMAKE_CURRENT_LIST_DIR}/gpukit_events.sh ${mode} ${CMAKE_BINARY_DIR})
  set_tests_properties(gpukit_events_${mode} PROPERTIES LABELS nightly TIMEOUT 600 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${ATTN_CUDA_ENV}")
endforeach()
