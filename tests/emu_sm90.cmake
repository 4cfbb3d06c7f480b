# On the PTX interpreter against fp64 (tests/cuda_emu_sm90.c): CI a sample of shapes for two small-tile specs (a
# ring of one and of two stages, padded d and d_v, causal and not), nightly every shape for the defaults and more.
add_executable(cuda_emu_sm90 ${CMAKE_CURRENT_LIST_DIR}/cuda_emu_sm90.c)
target_include_directories(cuda_emu_sm90 PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(cuda_emu_sm90 PRIVATE attn_ptx attn_tuner m)
set(ATTN_SM90_EMU_REST "unroll=0 tile=0 feature=taylor degree=0 rank=0 seed=0 arch=sm_90a")
add_test(NAME emu_sm90 COMMAND cuda_emu_sm90
         "flash cuda f16 d=64 br=64 bc=32 causal=1 warps=8 stages=2 ${ATTN_SM90_EMU_REST} impl=wgmma"
         "flash cuda bf16 d=72 dv=40 br=64 bc=16 causal=0 warps=8 stages=1 ${ATTN_SM90_EMU_REST} impl=wgmma")
set_tests_properties(emu_sm90 PROPERTIES LABELS cuda TIMEOUT 300 SKIP_RETURN_CODE 77)
add_test(NAME emu_sm90_all COMMAND cuda_emu_sm90 --all
         "flash cuda f16 d=64 br=64 bc=32 causal=0 warps=8 stages=2 ${ATTN_SM90_EMU_REST} impl=wgmma"
         "flash cuda bf16 d=64 br=64 bc=32 causal=1 warps=8 stages=1 ${ATTN_SM90_EMU_REST} impl=wgmma"
         "flash cuda f16 d=72 dv=40 br=128 bc=48 causal=1 warps=12 stages=3 ${ATTN_SM90_EMU_REST} impl=wgmma"
         "flash cuda bf16 d=128 br=128 bc=128 causal=1 warps=12 stages=2 ${ATTN_SM90_EMU_REST} impl=wgmma"
         "flash cuda f16 d=128 br=128 bc=128 causal=0 warps=12 stages=2 ${ATTN_SM90_EMU_REST} impl=wgmma"
         "flash cuda bf16 d=256 br=128 bc=80 causal=1 warps=12 stages=2 ${ATTN_SM90_EMU_REST} impl=wgmma"
         "flash cuda f16 d=64 br=192 bc=64 causal=1 warps=16 stages=2 ${ATTN_SM90_EMU_REST} impl=wgmma")
set_tests_properties(emu_sm90_all PROPERTIES LABELS nightly TIMEOUT 3600 SKIP_RETURN_CODE 77)
# Mutations of the template the interpreter run must catch (tests/ptx_mutation.sh): a wgmma.wait_group count one too
# high (S read before its wgmma completes; CI), the descriptors' swizzle mode other than the TMA's 128B, the
# consumers' K-full wait on the wrong phase parity (nightly).
set(ATTN_SM90_MUT_SPEC "flash cuda f16 d=64 br=64 bc=32 causal=1 warps=8 stages=2 ${ATTN_SM90_EMU_REST} impl=wgmma")
function(attn_sm90_mutation name label script expect)
  add_test(NAME ptx_mutation_sm90_${name}
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/ptx_mutation.sh $<TARGET_FILE:cuda_emu_sm90>
                   ${PROJECT_SOURCE_DIR}/templates/flash_sm90.cu ${script} ${expect} ${ATTN_SM90_MUT_SPEC})
  set_tests_properties(ptx_mutation_sm90_${name} PROPERTIES LABELS ${label} TIMEOUT 300 SKIP_RETURN_CODE 77)
endfunction()
attn_sm90_mutation(wait_group cuda "s/f9_wg_wait<1>()/f9_wg_wait<2>()/" "not yet waited for")
attn_sm90_mutation(swizzle nightly "s/(1ull << 62)/(0ull << 62)/" "wgmma.mma_async .B. reads|relative error")
attn_sm90_mutation(phase nightly "s/F9_BAR_K(s), ph)/F9_BAR_K(s), ph ^ 1u)/" "deadlock|before")
# the fence after the mbarriers' init dropped: TMA completes on barriers the async proxy may not see initialised
attn_sm90_mutation(init_fence nightly "s/^    f9_fence_init()//" "may not see the initialisation")
