# model: the performance model's per-key-block instruction counts (tuner/kcount.c) against the PTX NVRTC generates
# (label cuda: needs NVRTC, no GPU; skipped without it). The model's orderings and predictions are in tuner_unit.
add_executable(model_ptx ${CMAKE_CURRENT_LIST_DIR}/model_ptx.c)
target_link_libraries(model_ptx PRIVATE attn_tuner m)
add_test(NAME model_ptx_counts COMMAND model_ptx)
set_tests_properties(model_ptx_counts PROPERTIES LABELS cuda TIMEOUT 120 SKIP_RETURN_CODE 77)
# the predictions docs/model.md shows (not a test): build/tests/model_table [GPU ...]
add_executable(model_table ${CMAKE_CURRENT_LIST_DIR}/model_table.c)
target_link_libraries(model_table PRIVATE attn_tuner m)
