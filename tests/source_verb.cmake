# attntune source SPEC (tests/source_verb.sh): the printed source is what the runtime compiles for the spec (a
# stand-in compiler keeps its input: no compile), the CUDA source's #defines, NVRTC's PTX (two compiles, about 2 s;
# skipped without NVRTC), bad input, the help and the manual page. About 3 s in all.
if(TARGET attntune)
  add_executable(source_verb_plan ${CMAKE_CURRENT_LIST_DIR}/source_verb_plan.c)
  target_link_libraries(source_verb_plan PRIVATE attn_core m)
  foreach(c cpu cuda ptx usage)
    add_test(NAME source_verb_${c}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/source_verb.sh ${c} $<TARGET_FILE:attntune>
                     ${CMAKE_CURRENT_BINARY_DIR}/source-verb-${c} $<TARGET_FILE:source_verb_plan>)
    set_tests_properties(source_verb_${c} PROPERTIES LABELS tuner TIMEOUT 60 SKIP_RETURN_CODE 77
      ENVIRONMENT "ATTN_DB=${CMAKE_CURRENT_BINARY_DIR}/source-verb-no-database.db")
  endforeach()
endif()
