# Serving layouts on the CPU, every case (tests/cpu.cmake runs the CI subset of the same programs): paged KV
# (split-K, one query per head, prefill, smallcache's counted transfers, f16 decode with every modifier) and varlen
# (split-K flash, smallcache with the modifiers). Nightly: each case compiles kernels of its own.
add_test(NAME cpu_paged_all COMMAND cpu_paged all)
add_test(NAME cpu_varlen_all COMMAND cpu_varlen all)
set_tests_properties(cpu_paged_all cpu_varlen_all PROPERTIES LABELS "cpu;nightly" TIMEOUT 600
                     ENVIRONMENT "${ATTN_CPU_ENV};ATTN_THREADS=2")
# attntune bench --serve: usage errors exit 2 with a reason before anything runs
if(TARGET attntune)
  set(ATTN_SERVE_BAD
      "--serve --pass bwd" "--serve --split 2" "--serve --target cuda" "--serve --page-size 0" "--serve --batch 65"
      "--serve --window x" "--serve --dv 32" "--window 16" "--page-size 16" "--batch 2")
  set(i 0)
  foreach(args IN LISTS ATTN_SERVE_BAD)
    math(EXPR i "${i} + 1")
    add_test(NAME bench_serve_usage${i}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/expect_exit.sh 2 "attntune bench: .*--" sh -c
                     "$<TARGET_FILE:attntune> bench ${args} --n 64 --d 64")
    set_tests_properties(bench_serve_usage${i} PROPERTIES LABELS "cpu" TIMEOUT 30)
  endforeach()
endif()
