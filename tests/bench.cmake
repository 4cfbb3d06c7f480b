# attntune bench: JSON contract, plan vs OpenBLAS agreement, usage errors (a few small points: seconds); the measured
# ceilings (FMA peak, read bandwidth) and each row's fraction of them, checked for consistency, never for speed.
if(TARGET attntune)
  file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/bench-work)
  add_executable(bench_json ${CMAKE_CURRENT_LIST_DIR}/bench_json.c)
  target_link_libraries(bench_json PRIVATE PkgConfig::JANSSON)
  add_test(NAME bench_json COMMAND bench_json $<TARGET_FILE:attntune> ${CMAKE_CURRENT_BINARY_DIR}/bench-work/none.db)
  set_tests_properties(bench_json PROPERTIES LABELS "cpu" TIMEOUT 300
    ENVIRONMENT "ATTN_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/bench-work/cache;ATTN_DB=${CMAKE_CURRENT_BINARY_DIR}/bench-work/none.db")
  add_executable(bench_peak ${CMAKE_CURRENT_LIST_DIR}/bench_peak.c)
  target_link_libraries(bench_peak PRIVATE PkgConfig::JANSSON m)
  add_test(NAME bench_peak COMMAND bench_peak $<TARGET_FILE:attntune> ${CMAKE_CURRENT_BINARY_DIR}/bench-work/none.db)
  set_tests_properties(bench_peak PROPERTIES LABELS "cpu;bench" TIMEOUT 120
    ENVIRONMENT "ATTN_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/bench-work/cache;ATTN_DB=${CMAKE_CURRENT_BINARY_DIR}/bench-work/none.db")
endif()
