# model_window: the performance model counts a sliding window's work by the key blocks the kernel visits (prefill
# causal and not, GQA-packed and paged windowed decode, varlen), a window that hides nothing as none; no timing, the
# model's own terms (under 0.5 s).
add_executable(model_window ${CMAKE_CURRENT_LIST_DIR}/model_window.c)
target_link_libraries(model_window PRIVATE attn_tuner m)
add_test(NAME model_window COMMAND model_window)
set_tests_properties(model_window PROPERTIES LABELS tuner TIMEOUT 60)
