# attntune tune --heads-kv (tests/tune_gqa.sh): grouped-query problems tuned under their own key, bad values refused
if(TARGET attntune)
  foreach(c run usage)
    add_test(NAME tune_gqa_${c}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/tune_gqa.sh ${c} $<TARGET_FILE:attntune>
                     ${CMAKE_CURRENT_BINARY_DIR}/tune-gqa-${c})
    set_tests_properties(tune_gqa_${c} PROPERTIES LABELS tuner TIMEOUT 120
      ENVIRONMENT "ATTN_CACHE_DIR=${ATTN_TUNER_CACHE};ATTN_DB=${CMAKE_CURRENT_BINARY_DIR}/tuner-no-database.db")
  endforeach()
endif()
