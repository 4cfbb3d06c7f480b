# space_gqa: the CUDA space counts decode's query blocks as the runtime launches them (GQA-packed where
# attn_cuda_gqa_packs holds), so batch 8 of 32/8 heads at n = 1 on an H100 (64 packed blocks, 132 SMs) gets split
# points and the model ranks one first among what the runtime serves; MHA, prefill and 136 packed blocks get none.
add_executable(space_gqa ${CMAKE_CURRENT_LIST_DIR}/space_gqa.c)
target_link_libraries(space_gqa PRIVATE attn_tuner)
add_test(NAME space_gqa COMMAND space_gqa)
set_tests_properties(space_gqa PROPERTIES LABELS tuner TIMEOUT 60)
# the same decode tuned by the CLI: the row the runtime serves (model impl=wgmma rows passed over) has split > 1
if(TARGET attntune)
  set(space_gqa_db ${CMAKE_BINARY_DIR}/test-space-gqa.db)
  add_test(NAME space_gqa_tune_h100
           COMMAND sh -c "rm -f '${space_gqa_db}' && ATTN_DB='${space_gqa_db}' \"$1\" tune --gpu H100 --n 1 --n-kv 4096 --heads 32 --heads-kv 8 --batch 8 --d 128 --dtype bf16 > '${space_gqa_db}.out' 2>&1 && grep -q 'split=[0-9]* cuda' '${space_gqa_db}.out' && \"$2\" '${space_gqa_db}'"
                   sh $<TARGET_FILE:attntune> $<TARGET_FILE:space_gqa>)
  set_tests_properties(space_gqa_tune_h100 PROPERTIES LABELS tuner TIMEOUT 60)
endif()
