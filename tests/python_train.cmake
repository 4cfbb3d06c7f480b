# Training from Python, on the source tree's package and this build's libattn (tests/python_train.sh):
# python_grad: attention_backward on NumPy against an fp64 backward (d = 16: 6 kernels); python_grad_torch: the
# autograd function against torch's float64 autograd and gradcheck, f32, f16 and bf16 (about 20 kernels: nightly);
# python_llama: a small transformers Llama with attntune's attention against sdpa, logits and one training step's
# gradients (nightly). The torch ones exit 77 (skipped, saying why) without torch or transformers.
set(ATTN_TRAIN_CACHE ${ATTN_TEST_CACHE})
set(ATTN_TRAIN_SH sh ${CMAKE_CURRENT_LIST_DIR}/python_train.sh)
add_test(NAME python_grad COMMAND ${ATTN_TRAIN_SH} python_grad.py $<TARGET_FILE:attn> numpy)
add_test(NAME python_grad_torch COMMAND ${ATTN_TRAIN_SH} python_grad.py $<TARGET_FILE:attn> torch)
add_test(NAME python_llama COMMAND ${ATTN_TRAIN_SH} python_llama.py $<TARGET_FILE:attn>)
set_tests_properties(python_grad python_grad_torch python_llama PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "ATTN_CACHE_DIR=${ATTN_TRAIN_CACHE};ATTN_DB=${ATTN_TRAIN_CACHE}/no-database.db")
set_tests_properties(python_grad PROPERTIES LABELS python)
set_tests_properties(python_grad_torch PROPERTIES LABELS "python;torch;nightly")
set_tests_properties(python_llama PROPERTIES LABELS "python;torch;nightly")
