# The fp64 references on several threads (tests/ref_par.c): the same bits as on one, and thread creation or scratch
# failing (pthread_create and malloc wrapped at link time, so the runtime has no test hook). tests/tsan.cmake runs
# one small case of the bits group under ThreadSanitizer.
add_executable(ref_par ${CMAKE_CURRENT_LIST_DIR}/ref_par.c)
target_link_libraries(ref_par PRIVATE attn_core m)
target_compile_definitions(ref_par PRIVATE REF_PAR_WRAP)
target_link_options(ref_par PRIVATE -Wl,--wrap=pthread_create,--wrap=malloc)
foreach(g bits fail)
  add_test(NAME cpu_ref_par_${g} COMMAND ref_par ${g})
  set_tests_properties(cpu_ref_par_${g} PROPERTIES LABELS cpu TIMEOUT 60)
endforeach()
