# I/O counting: the counting builds of flash (also split-K), smallcache and lowrank against their closed forms, the
# theory's regimes, lowrank's measured error, and `attntune io` (tile choice, JSON, bad input).
set(ATTN_IO_CACHE ${ATTN_TEST_CACHE}) # the shared kernel cache (tests/CMakeLists.txt): the tuner's counting builds too
set(ATTN_IO_ENV "ATTN_CACHE_DIR=${ATTN_IO_CACHE}" "ATTN_DB=${ATTN_IO_CACHE}/no-database.db")
foreach(t exact scaling window)
  add_executable(io_${t} ${CMAKE_CURRENT_LIST_DIR}/io_${t}.c ${PROJECT_SOURCE_DIR}/tuner/io_theory.c)
  target_include_directories(io_${t} PRIVATE ${PROJECT_SOURCE_DIR}/tuner)
  target_link_libraries(io_${t} PRIVATE attn_core m)
endforeach()
# split-K: a counting build per tiling, S and causal; CI one causal value of each tiling and S (split), nightly both
foreach(a flash split split_all smallcache lowrank dv)
  add_test(NAME io_exact_${a} COMMAND io_exact ${a})
  set_tests_properties(io_exact_${a} PROPERTIES LABELS io TIMEOUT 180 ENVIRONMENT "${ATTN_IO_ENV}")
endforeach()
set_tests_properties(io_exact_split_all PROPERTIES LABELS "io;nightly" TIMEOUT 600)
# the backward's counting build against its closed form (tests/io_bwd.c)
add_executable(io_bwd ${CMAKE_CURRENT_LIST_DIR}/io_bwd.c ${PROJECT_SOURCE_DIR}/tuner/io_theory.c)
target_include_directories(io_bwd PRIVATE ${PROJECT_SOURCE_DIR}/tuner)
target_link_libraries(io_bwd PRIVATE attn_core m)
add_test(NAME io_bwd COMMAND io_bwd)
set_tests_properties(io_bwd PROPERTIES LABELS io TIMEOUT 120 ENVIRONMENT "${ATTN_IO_ENV}")
# a sliding window: the counted transfers equal the windowed closed forms (tests/io_window.c)
add_test(NAME io_window COMMAND io_window)
set_tests_properties(io_window PROPERTIES LABELS io TIMEOUT 60 ENVIRONMENT "${ATTN_IO_ENV}")
add_test(NAME io_scaling COMMAND io_scaling)
set_tests_properties(io_scaling PROPERTIES LABELS io TIMEOUT 60 ENVIRONMENT "${ATTN_IO_ENV}")
if(TARGET attntune)
  set(T $<TARGET_FILE:attntune>)
  # exit 2 with a reason for each bad input
  set(ATTN_IO_BAD
      "io --algo nosuch --n 64 --d 64 --M 4096"
      "io --algo flash --n 64 --d 64 --M 100"
      "io --algo smallcache --n 64 --d 64 --M 4"
      "io --algo lowrank --n 64 --d 64 --M 1000"
      "io --algo flash --n 64 --d 577 --M 4096"
      "io --algo flash --d 64 --M 4096"
      "io --algo flash --n 64 --d 64"
      "io --algo flash --n 64 --d 64 --M -5"
      "io --algo lowrank --feature taylor --degree 3 --n 64 --d 8 --M 100000"
      "io --algo flash --n 64 --d 64 --M 4096 --bogus 1"
      "io --algo flash --n 64 --d 0 --M 4096"
      "io --algo flash --n 64 --d 64 --dv 577 --M 4096"
      "io --algo flash --n 64 --d 64 --dv 0 --M 4096"
      "io --pass bwd --algo smallcache --n 64 --d 64 --M 4096"
      "io --pass nosuch --n 64 --d 64 --M 4096"
      "io --pass bwd --n 64 --d 64 --M 100"
      "io --pass bwd --n 64 --d 64 --M 100000 --br 600 --bc 64"
      "io --algo flash --n 64 --d 64 --M 4096 --window -1"
      "io --algo flash --n 64 --d 64 --M 4096 --window 1.5")
  set(i 0)
  foreach(args ${ATTN_IO_BAD})
    math(EXPR i "${i} + 1")
    add_test(NAME io_cli_bad_${i} COMMAND sh -c "${T} ${args}; test $? -eq 2")
    set_tests_properties(io_cli_bad_${i} PROPERTIES LABELS io TIMEOUT 60 ENVIRONMENT "${ATTN_IO_ENV}")
  endforeach()
  add_test(NAME io_cli_too_small_message COMMAND ${T} io --algo flash --n 64 --d 64 --M 100)
  set_tests_properties(io_cli_too_small_message PROPERTIES LABELS io TIMEOUT 60 ENVIRONMENT "${ATTN_IO_ENV}"
                       WILL_FAIL FALSE PASS_REGULAR_EXPRESSION "M=100 is too small: flash needs at least 257")
  # JSON with the contract's fields, counted transfers equal to the closed form
  add_test(NAME io_cli_json COMMAND ${T} io --algo smallcache --n 100 --d 64 --M 1024 --json)
  set_tests_properties(io_cli_json PROPERTIES LABELS io TIMEOUT 60 ENVIRONMENT "${ATTN_IO_ENV}"
    PASS_REGULAR_EXPRESSION "\"algo\": \"smallcache\", \"n\": 100, \"d\": 64, \"M\": 1024, \"br\": 16, \"bc\": 16, \"reads\": [0-9]+, \"writes\": [0-9]+, \"formula\": [0-9]+, \"lower_bound\": [0-9]+")
  # d_v != d: the closed form with d for Q K^T and d_v for P V and O, equal to the count, and "d_v" in the JSON
  add_test(NAME io_cli_json_dv COMMAND ${T} io --algo flash --n 100 --d 32 --dv 48 --M 8192 --json)
  set_tests_properties(io_cli_json_dv PROPERTIES LABELS io TIMEOUT 60 ENVIRONMENT "${ATTN_IO_ENV}"
    PASS_REGULAR_EXPRESSION "\"algo\": \"flash\", \"n\": 100, \"d\": 32, .*\"reads\": 11200, \"writes\": 4800, \"formula\": 16000, .*\"d_v\": 48}")
  # the backward: counted equal to its closed form; the pass in the JSON
  set(ATTN_IO_BWD io --pass bwd --n 45 --n-kv 100 --d 32 --M 8192 --br 16 --bc 24 --causal)
  add_test(NAME io_cli_bwd COMMAND ${T} ${ATTN_IO_BWD})
  set_tests_properties(io_cli_bwd PROPERTIES LABELS io TIMEOUT 60 ENVIRONMENT "${ATTN_IO_ENV}"
                       PASS_REGULAR_EXPRESSION "flash backward n=45 .*\\(equal\\)" FAIL_REGULAR_EXPRESSION "MISMATCH")
  add_test(NAME io_cli_bwd_json COMMAND ${T} ${ATTN_IO_BWD} --json)
  set_tests_properties(io_cli_bwd_json PROPERTIES LABELS io TIMEOUT 60 ENVIRONMENT "${ATTN_IO_ENV}"
                       PASS_REGULAR_EXPRESSION "\"br\": 16, \"bc\": 24, .*\"pass\": \"bwd\", \"n_kv\": 100}")
  # a window: the count equals the windowed closed form (keys [31, 150) of the one query block: 3200 + 119 * 64)
  add_test(NAME io_cli_window COMMAND ${T} io --algo flash --n 100 --n-kv 150 --d 32 --M 8192 --causal --window 20 --json)
  set_tests_properties(io_cli_window PROPERTIES LABELS io TIMEOUT 60 ENVIRONMENT "${ATTN_IO_ENV}"
    PASS_REGULAR_EXPRESSION "\"reads\": 10816, \"writes\": 3200, \"formula\": 14016, .*\"window\": 20, \"n_kv\": 150}")
  add_test(NAME io_cli_text COMMAND ${T} io --algo flash --n 200 --d 32 --M 4096)
  set_tests_properties(io_cli_text PROPERTIES LABELS io TIMEOUT 60 ENVIRONMENT "${ATTN_IO_ENV}"
                       PASS_REGULAR_EXPRESSION "\\(equal\\)" FAIL_REGULAR_EXPRESSION "MISMATCH")
  # the sweep's points against the tiles and closed forms, and the SVG against the points (tests/io_sweep.c)
  add_executable(io_sweep ${CMAKE_CURRENT_LIST_DIR}/io_sweep.c ${PROJECT_SOURCE_DIR}/tuner/io_theory.c)
  target_include_directories(io_sweep PRIVATE ${PROJECT_SOURCE_DIR}/tuner)
  target_link_libraries(io_sweep PRIVATE attn_core m PkgConfig::JANSSON)
  add_test(NAME io_cli_sweep COMMAND io_sweep ${T} ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(io_cli_sweep PROPERTIES LABELS io TIMEOUT 60 ENVIRONMENT "${ATTN_IO_ENV}")
endif()
