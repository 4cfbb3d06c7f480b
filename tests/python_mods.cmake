# python_mods: attention()'s score modifiers (window=, softcap=, alibi_slopes=) on NumPy against an fp64 reference,
# plan() and describe() with them, their refusals (tests/python_mods.py, run by tests/python_train.sh on the source
# tree's package and this build's libattn; three kernels).
set(ATTN_MODS_CACHE ${ATTN_TEST_CACHE}) # the shared kernel cache (tests/CMakeLists.txt)
add_test(NAME python_mods COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/python_train.sh python_mods.py $<TARGET_FILE:attn>)
set_tests_properties(python_mods PROPERTIES LABELS python TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "ATTN_CACHE_DIR=${ATTN_MODS_CACHE};ATTN_DB=${ATTN_MODS_CACHE}/no-database.db")
