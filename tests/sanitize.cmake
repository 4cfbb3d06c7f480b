# sanitize: the tests that scripts/sanitize.sh runs in its AddressSanitizer + UBSan build (-DATTN_SANITIZE=ON), by
# the extra label `sanitize`. A subset sized for CI (about 75-130 s of tests at -j2 on 2 cores under ASan, where every
# non-CUDA test would take 4 min): every library area, the CLI's verbs and a real tune on tiny sizes, the CPU backend's
# shapes (n = 1, odd n, causal, GQA, split-K and packed decode), NaN handling and cache, the untrusted-input paths (import, damaged and
# locked databases, truncated kernel objects, escapes). Left out: cuda/emu/io/bench/nightly/gpu (NVRTC or slow) and the
# longest CPU and tuner cases (cpu_nan_flash and _split, cpu_nan_lowrank, tuner_cli_cpu/jobs/sigint/decode/..., db_cli_readonly_user: 15-45 s each
# under ASan, for code the subset reaches already).
set(ATTN_SANITIZE_TESTS
    gen_spec db_unit tuner_unit tuner_plan_describe
    harden_threads harden_lifetime harden_sizes harden_model harden_export_symlink harden_show_escape
    cpu_bad cpu_compile_fail cpu_half cpu_plans cpu_threads cpu_quickstart
    cpu_correct_d16 cpu_correct_d80 cpu_correct_shapes cpu_correct_algos cpu_correct_packed
    cpu_nan_smallcache
    cpu_cache_two_processes cpu_cache_database cpu_cache_race cpu_cache_trust_truncated
    db_cli_roundtrip db_cli_import_bad db_cli_show db_cli_merge db_cli_keep_better db_cli_locked db_cli_run_killed
    db_cli_damaged
    tuner_cli_model tuner_cli_unknown_gpu tuner_cli_empty_space tuner_cli_bad_args tuner_cli_verbs tuner_cli_concurrent
    tuner_cli_compile_error tuner_cli_anneal tuner_cli_shard tuner_cli_help tuner_cli_gpu_alias
    tuner_cli_lua_error tuner_cli_lua_runaway tuner_cli_lua_nonsense tuner_cli_lua_gc tuner_cli_lua_xpcall
    tuner_cli_lua_pattern tuner_cli_lua_sigint
    meas_rounds cpu_cache_fifo tuner_cli_too_many tuner_cli_row_limit fake_bwd_launch)
function(attn_label_sanitize)
  foreach(t ${ATTN_SANITIZE_TESTS})
    if(TEST ${t})
      # appended: the test keeps its area's labels
      set_property(TEST ${t} APPEND PROPERTY LABELS sanitize)
    else()
      message(WARNING "tests/sanitize.cmake: no test named ${t} (renamed? update the list)")
    endif()
  endforeach()
endfunction()
# at the end of tests/: the lists included after this one (tuner.cmake, ...) have defined their tests by then
cmake_language(DEFER CALL attn_label_sanitize)
