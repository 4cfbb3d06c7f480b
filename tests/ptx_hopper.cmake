# The PTX interpreter's sm_90 instructions (wgmma, mbarriers, cp.async.bulk.tensor through ptx_tmap.h's tensor maps,
# fence.proxy.async, elect.sync, stmatrix, setmaxnreg) on hand-written kernels against plain C references, and the
# misuses it reports as errors (label cuda; no GPU, no NVRTC: a few seconds).
add_executable(ptx_hopper ${CMAKE_CURRENT_LIST_DIR}/ptx_hopper.c)
target_include_directories(ptx_hopper PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(ptx_hopper PRIVATE attn_ptx attn_core m)
add_test(NAME ptx_hopper COMMAND ptx_hopper)
set_tests_properties(ptx_hopper PROPERTIES LABELS cuda TIMEOUT 60)
