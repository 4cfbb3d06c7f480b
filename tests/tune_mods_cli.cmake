# `attntune tune --window W --softcap C --alibi`: the score modifiers tuned as problems of their own (rows of variant
# window=W, softcap=C, alibi) and served to the plans made with them (tests/tune_mods_cli.sh). gpu: the model for H100,
# plans on the fake driver named as one (nothing compiled); cpu: one kernel measured, a plan made from its row;
# cpu_bwd (nightly): the CPU backward; usage: exit 2, one line. Kernels compile into the tests' shared cache.
if(TARGET attntune)
  add_executable(tune_mods_plan ${CMAKE_CURRENT_LIST_DIR}/tune_mods_plan.c)
  target_link_libraries(tune_mods_plan PRIVATE attn_core m)
  foreach(c gpu cpu cpu_bwd usage)
    set(name tune_mods_${c})
    if(c STREQUAL "cpu_bwd")
      set(name nightly_tune_mods_cpu_bwd)
    endif()
    add_test(NAME ${name}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/tune_mods_cli.sh ${c} $<TARGET_FILE:attntune>
                     ${CMAKE_CURRENT_BINARY_DIR}/tune-mods-${c} $<TARGET_FILE:tune_mods_plan>
                     $<TARGET_FILE:fake_libcuda>)
    set_tests_properties(${name} PROPERTIES LABELS tuner TIMEOUT 120
      # two threads: the CPU rows' key, and the default configuration the same on every machine
      ENVIRONMENT
      "ATTN_THREADS=2;ATTN_CACHE_DIR=${ATTN_TEST_CACHE};ATTN_DB=${CMAKE_CURRENT_BINARY_DIR}/tune-mods-no.db")
    if(c STREQUAL "cpu_bwd")
      set_tests_properties(${name} PROPERTIES LABELS nightly)
    endif()
  endforeach()
endif()
