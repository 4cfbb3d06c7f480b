# slurm: scripts/slurm/ on a single-node Slurm cluster the test starts and stops itself (tests/slurm.sh): a 2-task
# job array tunes two CPU problems with `tune --shard K/2`, a dependent job merges the parts. Needs root and Debian's
# slurm-wlm and munge (scripts/setup.sh installs them); reported as skipped (77) without them.
if(TARGET attntune)
  set(ATTN_SLURM_CACHE ${ATTN_TEST_CACHE}) # the shared kernel cache (tests/CMakeLists.txt): compiled once
  add_test(NAME slurm_shards
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/slurm.sh $<TARGET_FILE:attntune> ${CMAKE_CURRENT_BINARY_DIR}/slurm-work)
  set_tests_properties(slurm_shards PROPERTIES LABELS slurm TIMEOUT 180 SKIP_RETURN_CODE 77
                       ENVIRONMENT "ATTN_CACHE_DIR=${ATTN_SLURM_CACHE}")
endif()
