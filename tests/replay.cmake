# attntune replay: strategies replayed against a database of whole spaces (tests/replay.sh; the fixture is the
# performance model's, stored in a fraction of a second, so each case takes about a second). The sweep over every
# shipped space (tests/data/spaces), every strategy and 20 seeds is nightly; replay_fresh checks that the shipped model
# spaces are this build's model's.
if(TARGET attntune)
  foreach(c same optimum missing bayes history bad_args lua_error model_api shipped fresh sweep)
    add_test(NAME replay_${c}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/replay.sh ${c} $<TARGET_FILE:attntune>
                     ${CMAKE_CURRENT_BINARY_DIR}/replay-${c})
    set_tests_properties(replay_${c} PROPERTIES LABELS tuner TIMEOUT 60
      ENVIRONMENT "ATTN_DB=${CMAKE_CURRENT_BINARY_DIR}/replay-no-database.db;\
ATTN_SCRIPTS_DIR=${PROJECT_SOURCE_DIR}/scripts/strategies;REPLAY_SPACES=${PROJECT_SOURCE_DIR}/tests/data/spaces")
  endforeach()
  # 540 s under load 9 on 2 cores with H100's spaces of 89 to 111 configurations since the Hopper template's points
  # (bayes, whose every step scores each candidate, is about 100 s of the 270 s CPU): room for a busier machine
  set_tests_properties(replay_sweep PROPERTIES LABELS "tuner;nightly" TIMEOUT 1200)
endif()
