# attntune bench: JSON contract, plan vs OpenBLAS agreement, usage errors (a few small points: seconds); the measured
# ceilings (FMA peak, read bandwidth) and each row's fraction of them, checked for consistency, never for speed.
if(TARGET attntune)
  file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/bench-work)
  add_executable(bench_json ${CMAKE_CURRENT_LIST_DIR}/bench_json.c)
  target_link_libraries(bench_json PRIVATE PkgConfig::JANSSON)
  add_test(NAME bench_json COMMAND bench_json $<TARGET_FILE:attntune> ${CMAKE_CURRENT_BINARY_DIR}/bench-work/none.db)
  set_tests_properties(bench_json PROPERTIES LABELS "cpu" TIMEOUT 300
    ENVIRONMENT "ATTN_CACHE_DIR=${ATTN_TEST_CACHE};ATTN_DB=${CMAKE_CURRENT_BINARY_DIR}/bench-work/none.db")
  add_executable(bench_peak ${CMAKE_CURRENT_LIST_DIR}/bench_peak.c)
  target_link_libraries(bench_peak PRIVATE PkgConfig::JANSSON m)
  add_test(NAME bench_peak COMMAND bench_peak $<TARGET_FILE:attntune> ${CMAKE_CURRENT_BINARY_DIR}/bench-work/none.db)
  set_tests_properties(bench_peak PROPERTIES LABELS "cpu;bench" TIMEOUT 120
    ENVIRONMENT "ATTN_CACHE_DIR=${ATTN_TEST_CACHE};ATTN_DB=${CMAKE_CURRENT_BINARY_DIR}/bench-work/none.db")
  # --pass bwd: a row only when the gradients agree with the BLAS backward and fp64 (GQA, causal); usage errors exit 2
  add_test(NAME bench_bwd COMMAND $<TARGET_FILE:attntune> bench --pass bwd --n 80 --d 32 --heads 2 --heads-kv 1
           --causal --reps 1 --time-cap 0.1 --no-torch --json)
  set_tests_properties(bench_bwd PROPERTIES LABELS "cpu" TIMEOUT 120 PASS_REGULAR_EXPRESSION "\"pass\": \"bwd\""
    ENVIRONMENT "ATTN_CACHE_DIR=${ATTN_TEST_CACHE};ATTN_DB=${CMAKE_CURRENT_BINARY_DIR}/bench-work/none.db")
  foreach(args "--pass bwd --target cuda" "--pass nosuch" "--pass bwd --split 2")
    string(REGEX REPLACE "[- ]+" "_" name "${args}")
    add_test(NAME bench_bwd_usage${name} COMMAND sh -c "$<TARGET_FILE:attntune> bench ${args} --n 64 --d 64; test $? -eq 2")
    set_tests_properties(bench_bwd_usage${name} PROPERTIES LABELS "cpu" TIMEOUT 30)
  endforeach()
endif()
