# ThreadSanitizer: tsan_plans (tests/tsan_plans.c) creates and executes plans from six threads on one runtime, on a
# cold kernel cache. The runtime's sources are compiled into it with -fsanitize=thread (the libraries below them,
# gen and cache_db, stay as built: their locks are pthread calls, which TSan sees); any report fails the test
# (exit 66). Not in the ASan build (-DATTN_SANITIZE=ON: the two sanitizers do not combine), nor where the compiler
# cannot link -fsanitize=thread.
if(NOT ATTN_SANITIZE)
  include(CheckCSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS -fsanitize=thread)
  set(CMAKE_REQUIRED_LINK_OPTIONS -fsanitize=thread)
  check_c_source_compiles("int main(void) { return 0; }" ATTN_HAVE_TSAN)
  unset(CMAKE_REQUIRED_FLAGS)
  unset(CMAKE_REQUIRED_LINK_OPTIONS)
  if(NOT ATTN_HAVE_TSAN)
    message(WARNING "tests/tsan.cmake: ${CMAKE_C_COMPILER} cannot link -fsanitize=thread (libtsan missing?): "
                    "cpu_tsan_plans is not built")
  endif()
endif()
if(ATTN_HAVE_TSAN AND NOT ATTN_SANITIZE)
  file(GLOB ATTN_TSAN_RT_SRC CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/runtime/*.c)
  add_executable(tsan_plans ${CMAKE_CURRENT_LIST_DIR}/tsan_plans.c ${ATTN_TSAN_RT_SRC})
  target_include_directories(tsan_plans PRIVATE ${PROJECT_SOURCE_DIR}/runtime ${PROJECT_SOURCE_DIR}/templates)
  target_compile_options(tsan_plans PRIVATE -fsanitize=thread -O1 -g)
  target_link_options(tsan_plans PRIVATE -fsanitize=thread)
  target_link_libraries(tsan_plans PRIVATE attn_gen attn_dbmod OpenMP::OpenMP_C Threads::Threads ${CMAKE_DL_LIBS} m)
  set(ATTN_TSAN_DIR ${CMAKE_BINARY_DIR}/test-tsan)
  file(MAKE_DIRECTORY ${ATTN_TSAN_DIR})
  add_test(NAME cpu_tsan_plans COMMAND tsan_plans ${ATTN_TSAN_DIR})
  set_tests_properties(cpu_tsan_plans PROPERTIES LABELS cpu TIMEOUT 120
                       ENVIRONMENT "ATTN_THREADS=1;TSAN_OPTIONS=exitcode=66:second_deadlock_stack=1")
endif()
# The fp64 references' threads (tests/ref_par.c's tiny group): reference.c under TSan, the rest of attn_core as built.
if(ATTN_HAVE_TSAN AND NOT ATTN_SANITIZE)
  add_executable(tsan_ref_par ${CMAKE_CURRENT_LIST_DIR}/ref_par.c ${PROJECT_SOURCE_DIR}/runtime/reference.c)
  target_compile_options(tsan_ref_par PRIVATE -fsanitize=thread -O1 -g)
  target_link_options(tsan_ref_par PRIVATE -fsanitize=thread)
  target_link_libraries(tsan_ref_par PRIVATE attn_core m)
  add_test(NAME cpu_tsan_ref_par COMMAND tsan_ref_par tiny)
  set_tests_properties(cpu_tsan_ref_par PROPERTIES LABELS cpu TIMEOUT 60 ENVIRONMENT "TSAN_OPTIONS=exitcode=66")
endif()
