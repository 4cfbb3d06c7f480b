# attntune replay --heads-kv (tests/replay_gqa.sh): GQA and MHA rows of one shape replayed apart, each over its own
# space (GQA decode's split-KV points included); backward rows kept out of the forward's; bad values refused. The
# model's spaces: about a second each
if(TARGET attntune)
  foreach(c groups passes usage)
    add_test(NAME replay_gqa_${c}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/replay_gqa.sh ${c} $<TARGET_FILE:attntune>
                     ${CMAKE_CURRENT_BINARY_DIR}/replay-gqa-${c})
    set_tests_properties(replay_gqa_${c} PROPERTIES LABELS tuner TIMEOUT 60
      ENVIRONMENT "ATTN_DB=${CMAKE_CURRENT_BINARY_DIR}/replay-no-database.db")
  endforeach()
endif()
