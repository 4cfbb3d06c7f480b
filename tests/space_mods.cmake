# space_mods: the space built with the problem's score modifiers (attn_space_opts window, softcap, alibi): the dense
# space's points as the kernels that apply them, the model's estimates (space:model) the windowed problem's; the CLI:
# a Lua strategy's space:model equals the row tune.evaluate stores, --compiled compiles each windowed candidate once
# (a stand-in NVRTC counts the compiles). Under 1 s.
add_executable(space_mods ${CMAKE_CURRENT_LIST_DIR}/space_mods.c)
target_link_libraries(space_mods PRIVATE attn_tuner m)
add_test(NAME space_mods COMMAND space_mods)
set_tests_properties(space_mods PROPERTIES LABELS tuner TIMEOUT 60)
if(TARGET attntune)
  add_library(fake_nvrtc MODULE ${CMAKE_CURRENT_LIST_DIR}/fake_nvrtc.c)
  foreach(c lua compiled)
    add_test(NAME space_mods_${c}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/space_mods.sh ${c} $<TARGET_FILE:attntune>
                     ${CMAKE_CURRENT_BINARY_DIR}/space-mods-${c} $<TARGET_FILE:fake_nvrtc>)
    set_tests_properties(space_mods_${c} PROPERTIES LABELS tuner TIMEOUT 60
                         ENVIRONMENT "ATTN_CACHE_DIR=${ATTN_TEST_CACHE};ATTN_DB=${CMAKE_CURRENT_BINARY_DIR}/space-mods-no.db")
  endforeach()
endif()
