# The Hopper template (impl=wgmma) wired into tuning and serving. sm90_tune_space: an sm_90 GPU's CUDA forward space
# holds wgmma configurations, an sm_80 or sm_89 one's none. sm90_tune_cli: `attntune tune --gpu H100 --model` ranks
# and stores them with provenance model (A100: none). sm90_tune_serve_90: on the fake sm_90 driver a model wgmma row
# is not served and a measured one is; _80: an impl=wgmma plan on sm_80 is refused with the reason.
add_executable(sm90_tune ${CMAKE_CURRENT_LIST_DIR}/sm90_tune.c)
target_link_libraries(sm90_tune PRIVATE attn_tuner)
add_test(NAME sm90_tune_space COMMAND sm90_tune space)
set_tests_properties(sm90_tune_space PROPERTIES LABELS cuda TIMEOUT 60)
if(TARGET attntune)
  add_test(NAME sm90_tune_cli COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/sm90_tune.sh $<TARGET_FILE:attntune>
                                         ${CMAKE_BINARY_DIR}/test-sm90-tune)
  set_tests_properties(sm90_tune_cli PROPERTIES LABELS cuda TIMEOUT 60)
endif()
foreach(cc 90 80)
  add_test(NAME sm90_tune_serve_${cc} COMMAND sm90_tune serve)
  set_tests_properties(sm90_tune_serve_${cc} PROPERTIES LABELS cuda TIMEOUT 120 SKIP_RETURN_CODE 77
                       ENVIRONMENT "ATTN_LIBCUDA=$<TARGET_FILE:fake_libcuda>;FAKE_LIBCUDA=cc=${cc};ATTN_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache-cuda;ATTN_DB=${CMAKE_BINARY_DIR}/test-sm90-tune-serve-${cc}.db")
endforeach()
