# fuzz: libFuzzer targets for the input that comes from outside (tests/fuzz/README.md): RANGE arguments (fuzz_range),
# kernel spec text (fuzz_spec), `attntune import` files (fuzz_import) and database files (fuzz_db). clang only. Per
# target two CTest tests, label `fuzz`: fuzz_<t>_seeds runs every seed of tests/fuzz/<t>/ once; fuzz_<t> fuzzes for
# ATTN_FUZZ_SECONDS. Both work on a fresh copy of the seeds under the build tree (the source tree is never written);
# new inputs and crashes stay there (<build>/tests/fuzz/<t>/).
# The code under test (the files in ATTN_FUZZ_SRC_<t>) is compiled into each target with -fsanitize=fuzzer (coverage
# for libFuzzer) and ASan/UBSan, whether ATTN_SANITIZE is on or not; these objects come before the static libraries
# on the link line, so the libraries' copies of those files are never linked. The rest (SQLite calls of other files,
# Jansson, ...) runs as the libraries were built: instrumented when ATTN_SANITIZE is on, plain otherwise.
option(ATTN_FUZZ "build libFuzzer targets (clang)" OFF)
set(ATTN_FUZZ_SECONDS 18 CACHE STRING "seconds each fuzz_<target> test fuzzes (4 of them: about 80 s, 40 with -j2)")
if(ATTN_FUZZ AND NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(WARNING "ATTN_FUZZ=ON needs clang (libFuzzer); the C compiler is ${CMAKE_C_COMPILER_ID}: no fuzz targets "
                  "and no fuzz tests. Configure a new build directory with CC=clang.")
elseif(ATTN_FUZZ)
  set(ATTN_FUZZ_DIR ${CMAKE_CURRENT_LIST_DIR}/fuzz)
  set(ATTN_FUZZ_FLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g)
  set(ATTN_FUZZ_SRC_range tuner/range.c gen/spec.c)
  set(ATTN_FUZZ_SRC_spec gen/spec.c)
  file(GLOB ATTN_FUZZ_DB_C RELATIVE ${PROJECT_SOURCE_DIR} CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/cache_db/*.c)
  set(ATTN_FUZZ_SRC_import tuner/cmd_json.c ${ATTN_FUZZ_DB_C})
  set(ATTN_FUZZ_SRC_db ${ATTN_FUZZ_DB_C} tuner/cmd_show.c tuner/cmd_json.c tuner/cmd_merge.c runtime/api.c gen/spec.c)
  set(ATTN_FUZZ_LIBS_range attn_gen)
  set(ATTN_FUZZ_LIBS_spec attn_gen)
  set(ATTN_FUZZ_LIBS_import attn_tuner)
  set(ATTN_FUZZ_LIBS_db attn_tuner)
  # longest input: a RANGE argument, a spec (the parser's limit is 512), an export file, a database of a few pages
  set(ATTN_FUZZ_MAXLEN_range 4096)
  set(ATTN_FUZZ_MAXLEN_spec 600)
  set(ATTN_FUZZ_MAXLEN_import 16384)
  set(ATTN_FUZZ_MAXLEN_db 65536)
  # fuzz_db: show's messages on stderr and tables on stdout would drown the log
  set(ATTN_FUZZ_ARGS_db -close_fd_mask=3)
  foreach(t range spec import db)
    set(srcs ${ATTN_FUZZ_DIR}/fuzz_${t}.c)
    foreach(f ${ATTN_FUZZ_SRC_${t}})
      list(APPEND srcs ${PROJECT_SOURCE_DIR}/${f})
    endforeach()
    add_executable(fuzz_${t} ${srcs})
    target_compile_options(fuzz_${t} PRIVATE ${ATTN_FUZZ_FLAGS})
    target_link_options(fuzz_${t} PRIVATE ${ATTN_FUZZ_FLAGS})
    target_compile_definitions(fuzz_${t} PRIVATE ATTN_VERSION="${PROJECT_VERSION}")
    target_include_directories(fuzz_${t} PRIVATE ${PROJECT_SOURCE_DIR}/tuner)
    target_link_libraries(fuzz_${t} PRIVATE ${ATTN_FUZZ_LIBS_${t}})
    set(work ${CMAKE_CURRENT_BINARY_DIR}/fuzz/${t})
    set(common -DFUZZER=$<TARGET_FILE:fuzz_${t}> -DSEEDS=${ATTN_FUZZ_DIR}/${t} -DDICT=${ATTN_FUZZ_DIR}/${t}.dict
               -DMAXLEN=${ATTN_FUZZ_MAXLEN_${t}} "-DARGS=${ATTN_FUZZ_ARGS_${t}}")
    add_test(NAME fuzz_${t}_seeds
             COMMAND ${CMAKE_COMMAND} ${common} -DWORK=${work}/replay -DMODE=replay -P ${ATTN_FUZZ_DIR}/run.cmake)
    add_test(NAME fuzz_${t}
             COMMAND ${CMAKE_COMMAND} ${common} -DWORK=${work}/run -DMODE=fuzz -DSECONDS=${ATTN_FUZZ_SECONDS}
                     -P ${ATTN_FUZZ_DIR}/run.cmake)
    # no ENVIRONMENT: scripts/sanitize.sh's ASAN_OPTIONS / UBSAN_OPTIONS (log files it checks) apply as they are; UBSan
    # stops at the first finding anyway (-fno-sanitize-recover)
    math(EXPR limit "${ATTN_FUZZ_SECONDS} + 120")
    set_tests_properties(fuzz_${t}_seeds PROPERTIES LABELS fuzz TIMEOUT 120)
    set_tests_properties(fuzz_${t} PROPERTIES LABELS fuzz TIMEOUT ${limit})
  endforeach()
endif()
