# install: `cmake --install` into a prefix that is then moved (install_prefix, the fixture the others use): the
# moved CLI runs a Lua strategy by name, and a C program builds against the prefix with find_package(attntune) and
# with pkg-config and checks an attention against a plain loop (tests/install.sh).
# python: `pip install ./python` into a venv, bundling libattn from that prefix, then NumPy fp64 comparisons (and
# torch's when it is importable) and `python -m attntune` (tests/python_pkg.sh, tests/python_attention.py); the
# Python scripts: scripts/tuning_check.py (tests/python_tuning_check.sh), scripts/gpu/torch_compare.py
# (tests/python_torch_compare.sh); docs/strategies.md's worked example (tests/python_doc_example.sh).
set(ATTN_INSTALL_WORK ${CMAKE_CURRENT_BINARY_DIR}/install-work)
set(ATTN_INSTALL_CACHE ${ATTN_TEST_CACHE}) # the shared kernel cache (tests/CMakeLists.txt)
set(ATTN_INSTALL_ENV "ATTN_CACHE_DIR=${ATTN_INSTALL_CACHE};ATTN_DB=${ATTN_INSTALL_WORK}/no-database.db")
if(TARGET attntune)
  foreach(c prefix strategy cmake pkgconfig)
    add_test(NAME install_${c}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/install.sh ${c} ${CMAKE_BINARY_DIR} ${ATTN_INSTALL_WORK}
                     ${CMAKE_COMMAND} ${CMAKE_C_COMPILER} ${PKG_CONFIG_EXECUTABLE} ${CMAKE_INSTALL_LIBDIR})
    set_tests_properties(install_${c} PROPERTIES LABELS install TIMEOUT 120 ENVIRONMENT "${ATTN_INSTALL_ENV}")
    if(c STREQUAL prefix)
      set_tests_properties(install_${c} PROPERTIES FIXTURES_SETUP attn_install)
    else()
      set_tests_properties(install_${c} PROPERTIES FIXTURES_REQUIRED attn_install)
    endif()
  endforeach()
  add_test(NAME python_package
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/python_pkg.sh ${PROJECT_SOURCE_DIR}/python ${ATTN_INSTALL_WORK}/prefix
                   ${CMAKE_INSTALL_LIBDIR} ${CMAKE_BINARY_DIR} ${CMAKE_CURRENT_BINARY_DIR}/python-work)
  set_tests_properties(python_package PROPERTIES LABELS python TIMEOUT 180 SKIP_RETURN_CODE 77
                       FIXTURES_REQUIRED attn_install ENVIRONMENT "${ATTN_INSTALL_ENV};ATTN_TEST_TORCH=0")
  # the same with torch's checks (CPU tensors against SDPA, autograd, CUDA tensors where a GPU is): nightly
  add_test(NAME python_package_torch
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/python_pkg.sh ${PROJECT_SOURCE_DIR}/python ${ATTN_INSTALL_WORK}/prefix
                   ${CMAKE_INSTALL_LIBDIR} ${CMAKE_BINARY_DIR} ${CMAKE_CURRENT_BINARY_DIR}/python-work-torch)
  set_tests_properties(python_package_torch PROPERTIES LABELS "python;torch;nightly" TIMEOUT 300 SKIP_RETURN_CODE 77
                       FIXTURES_REQUIRED attn_install ENVIRONMENT "${ATTN_INSTALL_ENV}")
  # scripts/tuning_check.py on a half-precision d_v != d database; after tuner_cli_cpu_half, whose kernels (the same
  # problem's) it finds compiled in the shared cache
  add_test(NAME python_tuning_check
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/python_tuning_check.sh $<TARGET_FILE:attntune>
                   ${CMAKE_CURRENT_BINARY_DIR}/python-tuning-check)
  set_tests_properties(python_tuning_check PROPERTIES LABELS "tuner;python" TIMEOUT 180 SKIP_RETURN_CODE 77
                       DEPENDS tuner_cli_cpu_half
                       ENVIRONMENT "ATTN_CACHE_DIR=${ATTN_TEST_CACHE};ATTN_DB=${ATTN_INSTALL_WORK}/no-database.db")
  # docs/strategies.md's worked example, run as the page writes it, prints what the page shows
  add_test(NAME python_doc_example
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/python_doc_example.sh $<TARGET_FILE:attntune>
                   ${CMAKE_CURRENT_BINARY_DIR}/python-doc-example)
  set_tests_properties(python_doc_example PROPERTIES LABELS tuner TIMEOUT 60 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${ATTN_INSTALL_ENV}")
  # scripts/gpu/torch_compare.py: its parts without torch; on a GPU with torch, a small comparison (else 77)
  add_test(NAME python_torch_compare
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/python_torch_compare.sh $<TARGET_FILE:attn>
                   ${CMAKE_CURRENT_BINARY_DIR}/python-torch-compare)
  set_tests_properties(python_torch_compare PROPERTIES LABELS "python;gpu" TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${ATTN_INSTALL_ENV}")
endif()
