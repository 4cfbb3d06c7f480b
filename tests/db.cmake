# db: cache_db against SQLite (open, migrations, lookup, artifacts, bad files, locks, two writer processes) and the
# show/export/import/merge verbs end to end (keep_better: the rule for which of two rows with one key stays).
add_executable(db_unit ${CMAKE_CURRENT_LIST_DIR}/db_unit.c)
# attn_core (which brings attn_dbmod): the read-only case opens the runtime too
target_link_libraries(db_unit PRIVATE attn_core)
add_test(NAME db_unit COMMAND db_unit ${CMAKE_CURRENT_BINARY_DIR}/db-unit-work)
set_tests_properties(db_unit PROPERTIES LABELS tuner TIMEOUT 60)
# schema 8: pass and variant in the key (migration from 7, lookups never crossed, export/import)
add_executable(db_pass ${CMAKE_CURRENT_LIST_DIR}/db_pass.c)
target_link_libraries(db_pass PRIVATE attn_tuner)
add_test(NAME db_pass COMMAND db_pass ${CMAKE_CURRENT_BINARY_DIR}/db-pass-work)
set_tests_properties(db_pass PROPERTIES LABELS tuner TIMEOUT 60)
if(TARGET attntune)
  foreach(c roundtrip import_bad show merge keep_better locked)
    add_test(NAME db_cli_${c}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/db_cli.sh ${c} $<TARGET_FILE:attntune> ${CMAKE_CURRENT_BINARY_DIR}/db-${c})
    set_tests_properties(db_cli_${c} PROPERTIES LABELS tuner TIMEOUT 60)
  endforeach()
  # a database the user cannot write (the runtime's part runs tuner_plan), a tuner killed mid-run, a damaged file
  foreach(c readonly_user run_killed damaged)
    add_test(NAME db_cli_${c}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/db_cli.sh ${c} $<TARGET_FILE:attntune> ${CMAKE_CURRENT_BINARY_DIR}/db-${c}
                     $<TARGET_FILE:tuner_plan>)
    set_tests_properties(db_cli_${c} PROPERTIES LABELS tuner TIMEOUT 120)
  endforeach()
endif()
# unmeasured_skip: the best row a caller can serve when the best stored is a model impl=wgmma row
add_executable(db_skip ${CMAKE_CURRENT_LIST_DIR}/db_skip.c)
target_link_libraries(db_skip PRIVATE attn_core)
add_test(NAME db_skip COMMAND db_skip ${CMAKE_CURRENT_BINARY_DIR}/db-skip-work)
set_tests_properties(db_skip PROPERTIES LABELS tuner TIMEOUT 60)
