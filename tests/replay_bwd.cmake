# attntune replay --pass (tests/replay_bwd.sh): the backward's rows (tune --pass bwd) replayed over the backward's
# own space beside the same shape's forward, the forward's report unchanged by --pass fwd, tune --nondeterministic's
# dq=atomic points, bad values refused. The model's spaces: well under a second each
if(TARGET attntune)
  foreach(c space fwd nondet usage)
    add_test(NAME replay_bwd_${c}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/replay_bwd.sh ${c} $<TARGET_FILE:attntune>
                     ${CMAKE_CURRENT_BINARY_DIR}/replay-bwd-${c})
    set_tests_properties(replay_bwd_${c} PROPERTIES LABELS tuner TIMEOUT 60
      ENVIRONMENT "ATTN_DB=${CMAKE_CURRENT_BINARY_DIR}/replay-no-database.db")
  endforeach()
endif()
