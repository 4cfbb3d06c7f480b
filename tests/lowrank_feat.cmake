# lowrank's feature map, one text on both targets (templates/lowrank_feat.h, embedded into lowrank.cu as into the CPU
# templates): CUDA's source holds it between #line markers (NVRTC's errors name the header's lines), and attn_init on
# the PTX interpreter writes the CPU's directions and Taylor table bit for bit (tests/emu_lowrank_feat.c; 77 without
# NVRTC).
add_executable(emu_lowrank_feat ${CMAKE_CURRENT_LIST_DIR}/emu_lowrank_feat.c)
target_include_directories(emu_lowrank_feat PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(emu_lowrank_feat PRIVATE attn_ptx attn_core m)
add_test(NAME emu_lowrank_feat COMMAND emu_lowrank_feat ${PROJECT_SOURCE_DIR}/templates)
set_tests_properties(emu_lowrank_feat PROPERTIES LABELS cuda TIMEOUT 120 SKIP_RETURN_CODE 77)
