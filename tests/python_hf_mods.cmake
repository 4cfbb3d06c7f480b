# python_hf_mods: attntune.hf passing transformers' sliding_window and softcap to attention() as window= and softcap=:
# a small Mistral against sdpa and a small Gemma 2 against eager, logits and greedy decoding with a KV cache, and
# training (the gradients, or the clear refusal where the backward lacks the modifiers). Nightly: it compiles about
# six kernels and builds four models. Exit 77 (skipped) without torch or transformers.
add_test(NAME python_hf_mods
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/python_train.sh python_hf_mods.py $<TARGET_FILE:attn>)
set_tests_properties(python_hf_mods PROPERTIES LABELS "python;torch;nightly" TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "ATTN_CACHE_DIR=${ATTN_TEST_CACHE};ATTN_DB=${ATTN_TEST_CACHE}/no-database.db")
