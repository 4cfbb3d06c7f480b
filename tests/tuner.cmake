# tuner: RANGE parsing, GPU table, search space, performance model (unit), and `attntune tune` end to end:
# measured CPU rows used by the runtime (d_v != d and half precision too), model rows for an absent GPU, bad input, Lua strategies (errors, runaway,
# nonsense, anneal, genetic), SIGINT and resume, parallel compiles. Kernels compile into the shared test cache
# (tests/CMakeLists.txt); the cases that need real compiles (sigint, jobs, env_retry, compile_error) use their own.
set(ATTN_TUNER_CACHE ${ATTN_TEST_CACHE})
add_executable(tuner_unit ${CMAKE_CURRENT_LIST_DIR}/tuner_unit.c)
target_link_libraries(tuner_unit PRIVATE attn_tuner m)
add_test(NAME tuner_unit COMMAND tuner_unit)
set_tests_properties(tuner_unit PROPERTIES LABELS tuner TIMEOUT 60)
# the rounds loop, its load gate and the figures kept, on a fake measurement source and clock
add_executable(meas_rounds ${CMAKE_CURRENT_LIST_DIR}/meas_rounds.c)
target_link_libraries(meas_rounds PRIVATE attn_tuner m)
add_test(NAME meas_rounds COMMAND meas_rounds)
set_tests_properties(meas_rounds PROPERTIES LABELS tuner TIMEOUT 60
                     ENVIRONMENT "ATTN_CACHE_DIR=${ATTN_TUNER_CACHE};ATTN_DB=${CMAKE_CURRENT_BINARY_DIR}/meas-rounds-none.db")
add_executable(tuner_plan ${CMAKE_CURRENT_LIST_DIR}/tuner_plan.c)
target_link_libraries(tuner_plan PRIVATE attn_core m)
# which stored row a plan uses and what describe says of it (nearest shape, decode/prefill regimes)
add_executable(tuner_plan_describe ${CMAKE_CURRENT_LIST_DIR}/plan_describe.c)
target_link_libraries(tuner_plan_describe PRIVATE attn_core m)
add_test(NAME tuner_plan_describe COMMAND tuner_plan_describe ${CMAKE_CURRENT_BINARY_DIR}/plan-describe-work)
set_tests_properties(tuner_plan_describe PROPERTIES LABELS tuner TIMEOUT 120
                     ENVIRONMENT "ATTN_CACHE_DIR=${ATTN_TUNER_CACHE}")
if(TARGET attntune)
  foreach(c cpu model model_bound model_compiled unknown_gpu empty_space bad_args lua_error lua_runaway lua_nonsense anneal genetic sigint jobs verbs concurrent
          compile_error large_n decode env_retry remeasure lua_gc lua_xpcall lua_pattern lua_sigint
          shard no_gpu gpu_alias help xdg io_svg doc_refs dv cpu_half too_many row_limit small_d compiled_rerank)
    add_test(NAME tuner_cli_${c}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/tuner_cli.sh ${c} $<TARGET_FILE:attntune>
                     ${CMAKE_CURRENT_BINARY_DIR}/tuner-${c} $<TARGET_FILE:tuner_plan>)
    set_tests_properties(tuner_cli_${c} PROPERTIES LABELS tuner TIMEOUT 120
      ENVIRONMENT "ATTN_CACHE_DIR=${ATTN_TUNER_CACHE};ATTN_DB=${CMAKE_CURRENT_BINARY_DIR}/tuner-no-database.db;ATTN_SCRIPTS_DIR=${PROJECT_SOURCE_DIR}/scripts/strategies")
  endforeach()
  # --pass fwd,bwd: both passes of one tiny problem, each under its own key; the runtime's backward plan from its row
  add_executable(tuner_bwd_plan ${CMAKE_CURRENT_LIST_DIR}/tuner_bwd_plan.c)
  target_link_libraries(tuner_bwd_plan PRIVATE attn_core m)
  foreach(c run usage)
    add_test(NAME tune_pass_${c}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/tune_pass.sh ${c} $<TARGET_FILE:attntune>
                     ${CMAKE_CURRENT_BINARY_DIR}/tune-pass-${c} $<TARGET_FILE:tuner_bwd_plan>)
    set_tests_properties(tune_pass_${c} PROPERTIES LABELS tuner TIMEOUT 120
      ENVIRONMENT "ATTN_CACHE_DIR=${ATTN_TUNER_CACHE};ATTN_DB=${CMAKE_CURRENT_BINARY_DIR}/tuner-no-database.db")
  endforeach()
  # they compile a kernel per configuration, dtype and counting build: on two loaded cores that is minutes
  set_tests_properties(tuner_cli_dv tuner_cli_cpu_half PROPERTIES TIMEOUT 300)
  # nightly (about 20 s each, cold compiles): the Lua annealer measured on the CPU (CI keeps the Lua strategies on the
  # model, genetic, and the lua_* host tests) and --jobs 2's parallel compiles in a cache of their own
  set_tests_properties(tuner_cli_anneal tuner_cli_jobs PROPERTIES LABELS "tuner;nightly")
  # a few NVRTC compiles; skipped without NVRTC
  set_tests_properties(tuner_cli_compiled_rerank PROPERTIES SKIP_RETURN_CODE 77)
endif()
