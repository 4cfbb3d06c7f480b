# CPU runtime: correctness against fp64 (one CTest entry per head dimension, so they run in parallel), bad input,
# compiler failure, the cross-process kernel cache, concurrent execution of one plan, half conversions.
# Every test compiles into the shared test cache (tests/CMakeLists.txt) and sees no database unless it makes one.
set(ATTN_CPU_ENV "ATTN_CACHE_DIR=${ATTN_TEST_CACHE}" "ATTN_DB=${ATTN_TEST_CACHE}/no-database.db")
foreach(t correct bad compile cache threads half plans)
  add_executable(cpu_${t} ${CMAKE_CURRENT_LIST_DIR}/cpu_${t}.c)
  target_link_libraries(cpu_${t} PRIVATE attn_core m)
endforeach()
foreach(d 16 32 64 80 96 128 256)
  add_test(NAME cpu_correct_d${d} COMMAND cpu_correct d${d})
  set_tests_properties(cpu_correct_d${d} PROPERTIES LABELS cpu TIMEOUT 300 ENVIRONMENT "${ATTN_CPU_ENV}")
endforeach()
add_test(NAME cpu_correct_shapes COMMAND cpu_correct shapes)
add_test(NAME cpu_correct_algos COMMAND cpu_correct algos)
add_test(NAME cpu_correct_split COMMAND cpu_correct split)
add_test(NAME cpu_correct_split_all COMMAND cpu_correct split_all)
add_test(NAME cpu_correct_packed COMMAND cpu_correct packed)
add_test(NAME cpu_bad COMMAND cpu_bad ${ATTN_TEST_CACHE})
add_test(NAME cpu_compile_fail COMMAND cpu_compile ${ATTN_TEST_CACHE})
add_test(NAME cpu_cache_two_processes COMMAND cpu_cache ${ATTN_TEST_CACHE})
add_test(NAME cpu_cache_database COMMAND cpu_cache ${ATTN_TEST_CACHE} db)
add_test(NAME cpu_cache_race COMMAND cpu_cache ${ATTN_TEST_CACHE} race)
add_test(NAME cpu_cache_fifo COMMAND cpu_cache ${ATTN_TEST_CACHE} fifo)
add_test(NAME cpu_threads COMMAND cpu_threads)
add_test(NAME cpu_plans COMMAND cpu_plans)
add_test(NAME cpu_half COMMAND cpu_half)
set_tests_properties(cpu_correct_shapes cpu_correct_algos cpu_correct_split cpu_correct_packed cpu_bad cpu_compile_fail cpu_cache_two_processes
                     cpu_cache_database cpu_cache_race cpu_threads cpu_half cpu_plans
                     PROPERTIES LABELS cpu TIMEOUT 300 ENVIRONMENT "${ATTN_CPU_ENV}")
# split-K: CI half of the (S, tiling, causal) kernels, every causal value of each S and tiling; nightly all of them
set_tests_properties(cpu_correct_split_all PROPERTIES LABELS nightly TIMEOUT 900 ENVIRONMENT "${ATTN_CPU_ENV}")
# a FIFO under a cached name blocked the open that reads it: the timeout is what fails that
set_tests_properties(cpu_cache_fifo PROPERTIES LABELS cpu TIMEOUT 60 ENVIRONMENT "${ATTN_CPU_ENV}")
# attn_execute_async on the CPU is attn_execute (tests/cuda.cmake runs the same program on the fake CUDA driver)
add_executable(execute_async ${CMAKE_CURRENT_LIST_DIR}/execute_async.c)
target_link_libraries(execute_async PRIVATE attn_core m ${CMAKE_DL_LIBS})
add_test(NAME cpu_execute_async COMMAND execute_async cpu)
set_tests_properties(cpu_execute_async PROPERTIES LABELS cpu TIMEOUT 120 ENVIRONMENT "${ATTN_CPU_ENV}")
set_tests_properties(cpu_threads PROPERTIES ENVIRONMENT "${ATTN_CPU_ENV};ATTN_THREADS=2")
# The example application, through the shared library (only the public API is visible there).
if(TARGET quickstart)
  add_test(NAME cpu_quickstart COMMAND quickstart - 1 2 300 64 1)
  set_tests_properties(cpu_quickstart PROPERTIES LABELS cpu TIMEOUT 120 ENVIRONMENT "${ATTN_CPU_ENV}"
                       PASS_REGULAR_EXPRESSION "rel error .*, PASS")
endif()
# The kernel cache's trust model (runtime/artifact.h): truncated, planted and linked objects, replaced database
# blobs, a cache directory others can write, and the temporaries a killed compile leaves (cache_sweep.c).
if(TARGET attntune)
  foreach(c truncated planted blob shared_dir killed)
    add_test(NAME cpu_cache_trust_${c}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/cache_trust.sh ${c} $<TARGET_FILE:attntune> $<TARGET_FILE:tuner_plan>
                     ${CMAKE_CURRENT_BINARY_DIR}/cache-trust-${c})
    set_tests_properties(cpu_cache_trust_${c} PROPERTIES LABELS cpu TIMEOUT 120)
  endforeach()
endif()
# NaN and infinity propagation: every CPU algorithm (split-K flash too) against the fp64 reference, element by element.
# Split-K compiles a kernel per d and tiling: CI each d with one of the two (flash_split), nightly all (_all).
add_executable(cpu_nan ${CMAKE_CURRENT_LIST_DIR}/cpu_nan.c)
target_link_libraries(cpu_nan PRIVATE attn_core m)
foreach(g flash flash_split flash_split_all smallcache lowrank)
  add_test(NAME cpu_nan_${g} COMMAND cpu_nan ${g})
  set_tests_properties(cpu_nan_${g} PROPERTIES LABELS cpu TIMEOUT 300 ENVIRONMENT "${ATTN_CPU_ENV}")
endforeach()
set_tests_properties(cpu_nan_flash_split_all PROPERTIES LABELS nightly TIMEOUT 900)
# Element-aligned arrays (0, one element and 16 bytes past a 64-byte line): every algorithm and dtype against fp64,
# the same bits and entries moved at every offset, and no unaligned access in the hot loops (ATTN_CHECK_ALIGN).
# Half precision's other algorithm and dtype pairs (flash's two compile slowly) nightly.
add_executable(cpu_align ${CMAKE_CURRENT_LIST_DIR}/cpu_align.c)
target_link_libraries(cpu_align PRIVATE attn_core m ${CMAKE_DL_LIBS})
foreach(g f32 half half_all)
  add_test(NAME cpu_align_${g} COMMAND cpu_align ${g})
  set_tests_properties(cpu_align_${g} PROPERTIES LABELS cpu TIMEOUT 300 ENVIRONMENT "${ATTN_CPU_ENV}")
endforeach()
set_tests_properties(cpu_align_half_all PROPERTIES LABELS nightly)
# The backward (attn_execute_lse, attn_plan_create_backward, attn_execute_backward) against fp64, the fp64 backward
# against finite differences, NaN patterns, the same bits from run to run and across thread counts; the d sweep
# nightly.
add_executable(cpu_backward ${CMAKE_CURRENT_LIST_DIR}/cpu_backward.c)
target_link_libraries(cpu_backward PRIVATE attn_core m)
foreach(g ref f32 half nan sweep)
  add_test(NAME cpu_backward_${g} COMMAND cpu_backward ${g})
  set_tests_properties(cpu_backward_${g} PROPERTIES LABELS cpu TIMEOUT 300 ENVIRONMENT "${ATTN_CPU_ENV};ATTN_THREADS=2")
endforeach()
set_tests_properties(cpu_backward_sweep PROPERTIES LABELS nightly TIMEOUT 1800)
# attn_execute_paged: decode (GQA) and causal n = 5 (flash, smallcache) over shuffled pages of 16 and 7 keys against
# fp64, bad input.
add_executable(cpu_paged ${CMAKE_CURRENT_LIST_DIR}/cpu_paged.c)
target_link_libraries(cpu_paged PRIVATE attn_core m)
add_test(NAME cpu_paged COMMAND cpu_paged)
set_tests_properties(cpu_paged PROPERTIES LABELS cpu TIMEOUT 120 ENVIRONMENT "${ATTN_CPU_ENV};ATTN_THREADS=2")
# attn_execute_varlen: packed sequences of 0, 1, odd and full n rows (and one with no keys) against fp64 per sequence,
# causal both ways, GQA, d_v != d, f32 flash and f16 smallcache; bad cu_seqlens leave o untouched.
add_executable(cpu_varlen ${CMAKE_CURRENT_LIST_DIR}/cpu_varlen.c)
target_link_libraries(cpu_varlen PRIVATE attn_core m)
add_test(NAME cpu_varlen COMMAND cpu_varlen)
set_tests_properties(cpu_varlen PROPERTIES LABELS cpu TIMEOUT 120 ENVIRONMENT "${ATTN_CPU_ENV};ATTN_THREADS=2")
