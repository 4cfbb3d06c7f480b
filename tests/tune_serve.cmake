# `attntune --page-size` and `--varlen`: the serving layouts tuned as problems of their own (rows of variant paged=P
# and varlen), carried by show/export/import/merge, and served to the plans made for them. Kernels compile into the
# tests' shared cache (ATTN_TEST_CACHE, tests/CMakeLists.txt).
if(TARGET attntune)
  add_executable(tune_serve_plan ${CMAKE_CURRENT_LIST_DIR}/tune_serve_plan.c)
  target_link_libraries(tune_serve_plan PRIVATE attn_core m)
  foreach(c run usage)
    add_test(NAME tune_serve_${c}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/tune_serve.sh ${c} $<TARGET_FILE:attntune>
                     ${CMAKE_CURRENT_BINARY_DIR}/tune-serve-${c} $<TARGET_FILE:tune_serve_plan>)
    set_tests_properties(tune_serve_${c} PROPERTIES LABELS tuner TIMEOUT 120
      # two threads: the default configuration (no split-K for these shapes) is the same on every machine
      ENVIRONMENT "ATTN_THREADS=2;ATTN_CACHE_DIR=${ATTN_TEST_CACHE};ATTN_DB=${CMAKE_CURRENT_BINARY_DIR}/tuner-no-database.db")
  endforeach()
endif()
