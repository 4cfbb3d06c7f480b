# ldmatrix bank conflicts in the CUDA backward (tests/cuda_emu_bwd.c reports and checks its ldmatrix wavefronts apart
# from its other shared accesses): Q's and K's rows unpadded (128 bytes apart at d = 64, so the 8 rows of each
# fragment matrix fall in one group of 4 banks) (the layout's size assert off: the kernel then uses less shared memory than it gets) move as
# conflict-free as before and give right gradients, but the
# fragment loads take 4.6x the wavefronts they need, which only the ldmatrix count shows.
add_test(NAME ptx_mutation_bwd_ldmatrix_unpadded
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/ptx_mutation.sh $<TARGET_FILE:cuda_emu_bwd>
                 ${PROJECT_SOURCE_DIR}/templates/flash_bwd.cu
                 "s/#define FB_SQ (FB_DP + FB_PE)/#define FB_SQ FB_DP/;s/static_assert(FB_ELEMS \\* FB_ES/static_assert(1 || FB_ELEMS * FB_ES/"
                 "ldmatrix wavefronts where"
                 --quick f16 d=64 causal=0)
set_tests_properties(ptx_mutation_bwd_ldmatrix_unpadded PROPERTIES LABELS cuda TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "ATTN_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache-emu;ATTN_THREADS=1")
