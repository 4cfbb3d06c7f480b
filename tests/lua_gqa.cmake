# lua_gqa: a Lua strategy sees the problem tune tunes. space:model of a GQA decode equals the row tune.evaluate stores
# (the model's three best and a split-KV configuration); in a d_v != d space a configuration named by its tiles is of
# the space and stored with its d_v. H100 ranked by the model, no GPU; under 1 s.
if(TARGET attntune)
  foreach(c model dv)
    add_test(NAME lua_gqa_${c}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/lua_gqa.sh ${c} $<TARGET_FILE:attntune>
                     ${CMAKE_CURRENT_BINARY_DIR}/lua-gqa-${c})
    set_tests_properties(lua_gqa_${c} PROPERTIES LABELS tuner TIMEOUT 60
                         ENVIRONMENT "ATTN_CACHE_DIR=${ATTN_TEST_CACHE};ATTN_DB=${CMAKE_CURRENT_BINARY_DIR}/lua-gqa-no.db")
  endforeach()
endif()
