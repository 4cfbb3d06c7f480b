# Head dimensions off the tuned grid (1..576, d_v != d) in every CPU dtype: one CTest entry per algorithm and dtype,
# so they run in parallel (tests/cpu_shapes.c). The shared kernel cache (tests/CMakeLists.txt), no database.
add_executable(cpu_shapes ${CMAKE_CURRENT_LIST_DIR}/cpu_shapes.c)
target_link_libraries(cpu_shapes PRIVATE attn_core m)
set(ATTN_SHAPES_CACHE ${ATTN_TEST_CACHE})
foreach(algo flash smallcache lowrank)
  foreach(dtype f32 f16 bf16)
    add_test(NAME cpu_shapes_${algo}_${dtype} COMMAND cpu_shapes ${algo} ${dtype})
    # f16 and bf16 share the staging, and f16's conversions run in CI in cpu_half, cpu_align_half and the packed
    # cases of cpu_correct: CI runs bf16, the nightly run f16 on every algorithm
    set(label cpu)
    if(dtype STREQUAL "f16")
      set(label nightly)
    endif()
    set_tests_properties(cpu_shapes_${algo}_${dtype} PROPERTIES LABELS ${label} TIMEOUT 300 ENVIRONMENT
                         "ATTN_CACHE_DIR=${ATTN_SHAPES_CACHE};ATTN_DB=${ATTN_SHAPES_CACHE}/no-database.db")
  endforeach()
endforeach()
