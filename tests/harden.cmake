# harden: bad input from outside the program. ATTN_THREADS values that are not a sane thread count, plans used after
# attn_close (reference-counted runtime), problem sizes at INT_MAX and I/O counts past 2^64 (api.c, model.c and
# io_theory.c compiled into the test with -fsanitize=undefined, so a signed overflow there aborts it), and the CLI:
# export through a planted symlink, show of device names with terminal escapes (db_cli.sh cases).
set(ATTN_HARDEN_CACHE ${ATTN_TEST_CACHE}) # the shared kernel cache (tests/CMakeLists.txt)
add_executable(harden ${CMAKE_CURRENT_LIST_DIR}/harden.c ${PROJECT_SOURCE_DIR}/runtime/api.c
               ${PROJECT_SOURCE_DIR}/tuner/model.c ${PROJECT_SOURCE_DIR}/tuner/io_theory.c)
# these objects come before the static libraries on the link line, so the libraries' copies of the three files are
# never pulled in: every call into them runs the instrumented code
target_compile_options(harden PRIVATE -fsanitize=undefined -fno-sanitize-recover=all)
target_link_options(harden PRIVATE -fsanitize=undefined)
target_link_libraries(harden PRIVATE attn_tuner m Threads::Threads)
foreach(c threads lifetime sizes model)
  add_test(NAME harden_${c} COMMAND harden ${c})
  set_tests_properties(harden_${c} PROPERTIES LABELS cpu TIMEOUT 300
    ENVIRONMENT "ATTN_CACHE_DIR=${ATTN_HARDEN_CACHE};ATTN_DB=${ATTN_HARDEN_CACHE}/no-database.db;UBSAN_OPTIONS=print_stacktrace=1")
endforeach()
if(TARGET attntune)
  foreach(c export_symlink show_escape)
    add_test(NAME harden_${c}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/db_cli.sh ${c} $<TARGET_FILE:attntune> ${CMAKE_CURRENT_BINARY_DIR}/harden-${c})
    set_tests_properties(harden_${c} PROPERTIES LABELS tuner TIMEOUT 60)
  endforeach()
endif()
