# The Hopper flash template (templates/flash_sm90.cu: wgmma, TMA, mbarriers; spec impl=wgmma arch=sm_90a).
# cuda_sm90_unit: its specs, refusals, source, geometry and tensor-map parameters (no NVRTC). cuda_sm90_compile: one
# default through NVRTC for sm_90a with no spills and no wgmma serialized by ptxas; nightly: the defaults of d = 64,
# 128, 256 in f16 and bf16, causal and not, and d_v != d.
add_executable(cuda_sm90 ${CMAKE_CURRENT_LIST_DIR}/cuda_sm90.c)
target_link_libraries(cuda_sm90 PRIVATE attn_tuner)
add_test(NAME cuda_sm90_unit COMMAND cuda_sm90 unit)
set_tests_properties(cuda_sm90_unit PROPERTIES LABELS cuda TIMEOUT 60)
add_test(NAME cuda_sm90_compile COMMAND cuda_sm90 compile bf16:128:causal)
set_tests_properties(cuda_sm90_compile PROPERTIES LABELS cuda TIMEOUT 300 SKIP_RETURN_CODE 77)
foreach(dtype f16 bf16)
  add_test(NAME cuda_sm90_compile_all_${dtype} COMMAND cuda_sm90 compile ${dtype}:64,128,256 ${dtype}:64,128,256:causal
                                                      ${dtype}:72/40,256/128,64/256:causal)
  set_tests_properties(cuda_sm90_compile_all_${dtype} PROPERTIES LABELS nightly TIMEOUT 900 SKIP_RETURN_CODE 77)
endforeach()
# the runtime's launch of an impl=wgmma kernel on the fake driver (an sm_90 device, and an sm_80 one that refuses it)
foreach(cc 90 80)
  add_test(NAME cuda_sm90_fake_${cc} COMMAND cuda_sm90 fake)
  set_tests_properties(cuda_sm90_fake_${cc} PROPERTIES LABELS cuda TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "ATTN_LIBCUDA=$<TARGET_FILE:fake_libcuda>;FAKE_LIBCUDA=cc=${cc};ATTN_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache-cuda;ATTN_DB=${CMAKE_BINARY_DIR}/test-cache-cuda/no-database.db")
endforeach()
