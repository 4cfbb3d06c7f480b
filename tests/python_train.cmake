# Training from Python, on the source tree's package and this build's libattn (tests/python_train.sh):
# python_grad: attention_backward on NumPy against an fp64 backward (d = 16: a few kernels, what CI runs), then with
# torch the autograd function against torch's float64 autograd and gradcheck (skipped, exit 77, without torch);
# python_llama: a small transformers Llama with attntune's attention against sdpa, logits and one training step's
# gradients (skipped without torch and transformers).
set(ATTN_TRAIN_CACHE ${CMAKE_BINARY_DIR}/test-cache)
file(MAKE_DIRECTORY ${ATTN_TRAIN_CACHE})
foreach(t grad llama)
  add_test(NAME python_${t} COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/python_train.sh python_${t}.py $<TARGET_FILE:attn>)
  set_tests_properties(python_${t} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "ATTN_CACHE_DIR=${ATTN_TRAIN_CACHE};ATTN_DB=${ATTN_TRAIN_CACHE}/no-database.db")
endforeach()
set_tests_properties(python_grad PROPERTIES LABELS python)
set_tests_properties(python_llama PROPERTIES LABELS "python;torch")
