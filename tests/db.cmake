# db: cache_db against SQLite (open, migrations, lookup, artifacts, bad files, locks, two writer processes) and the
# show/export/import/merge verbs end to end (keep_better: the rule for which of two rows with one key stays).
add_executable(db_unit ${CMAKE_CURRENT_LIST_DIR}/db_unit.c)
target_link_libraries(db_unit PRIVATE attn_dbmod)
add_test(NAME db_unit COMMAND db_unit ${CMAKE_CURRENT_BINARY_DIR}/db-unit-work)
set_tests_properties(db_unit PROPERTIES LABELS tuner TIMEOUT 60)
if(TARGET attntune)
  foreach(c roundtrip import_bad show merge keep_better locked)
    add_test(NAME db_cli_${c}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/db_cli.sh ${c} $<TARGET_FILE:attntune> ${CMAKE_CURRENT_BINARY_DIR}/db-${c})
    set_tests_properties(db_cli_${c} PROPERTIES LABELS tuner TIMEOUT 60)
  endforeach()
endif()
