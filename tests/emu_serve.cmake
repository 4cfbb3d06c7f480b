# The serving layouts' CUDA flash kernels (templates/flash.cu with ATTN_LAYOUT: attn_execute_varlen's packed rows,
# attn_execute_paged's pages) on the PTX interpreter against fp64 sequence by sequence (tests/cuda_emu_serve.c), their
# cubins without spills, and the CUDA API's checks on the fake driver. Without NVRTC these tests exit 77 (skipped).
add_executable(cuda_emu_serve ${CMAKE_CURRENT_LIST_DIR}/cuda_emu_serve.c)
target_include_directories(cuda_emu_serve PRIVATE ${CMAKE_CURRENT_LIST_DIR})
find_package(Threads REQUIRED)
target_link_libraries(cuda_emu_serve PRIVATE attn_ptx attn_core m ${CMAKE_DL_LIBS} Threads::Threads)

set(ATTN_EMU_SERVE_ENV "ATTN_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache-emu" "ATTN_DB=${CMAKE_BINARY_DIR}/test-cache-emu/no-database.db"
    "ATTN_THREADS=1")
# name|arguments. CI: tiny shapes (the interpreter runs some 10^7 thread instructions a second); nightly: the rest.
# CI: varlen with two query and three key blocks a sequence (Br = Bc = 32), causal, GQA and every modifier; paged
# prefill with d_v != d, causal, pages of 7; both with NaN in V where a hidden key spoils rows (fa_fix); paged decode
# (no mask) with four query heads a KV head packed in one block (each key read once per KV head), pages of 16.
set(ATTN_EMU_SERVE_TESTS
    "varlen_f16_causal_mods|varlen f16 d=32 causal=1 br=32 bc=32 warps=2 window=20 softcap=5 alibi=1 nan=1"
    "paged_bf16_causal_dv|paged bf16 d=40 dv=24 causal=1 n=5 page=7 nan=1"
    "paged_f16_decode|paged f16 d=32 n=1 heads=8/2 page=16")
set(ATTN_EMU_SERVE_NIGHTLY
    "nightly_varlen_f16|varlen f16 d=64"
    "nightly_varlen_bf16_dv_mods|varlen bf16 d=24 dv=40 window=9 softcap=5 alibi=1"
    "nightly_varlen_f32_causal|varlen f32 d=16 causal=1"
    "nightly_varlen_f32_mods|varlen f32 d=37 dv=77 causal=1 window=20 softcap=3 alibi=1 nan=1"
    "nightly_paged_f16_window_nan|paged f16 d=32 n=19 window=20 softcap=5 alibi=1 nan=1 page=7,16"
    "nightly_varlen_f16_d128|varlen f16 d=128 causal=1 order=2"
    "nightly_varlen_bf16_stages1|varlen bf16 d=64 stages=1 causal=1 window=40 heads=3/1"
    "nightly_varlen_f16_sm90|varlen f16 d=64 arch=sm_90 softcap=20"
    "nightly_varlen_bf16_mla|varlen bf16 d=576 dv=512 causal=1"
    "nightly_paged_f32|paged f32 d=16 causal=1 n=19 page=16,7,3"
    "nightly_paged_f32_decode_mods|paged f32 d=64 n=1 heads=8/2 window=33 softcap=30 alibi=1"
    "nightly_paged_f16_decode_mha|paged f16 d=64 n=1 heads=4/4 page=16"
    "nightly_paged_bf16_decode_packed_mods|paged bf16 d=40 dv=24 n=1 heads=6/2 causal=1 alibi=1 window=9 nan=1 page=7,16"
    "nightly_paged_f16_decode_packed_wide|paged f16 d=64 n=1 heads=160/1 br=64 page=16"
    "nightly_paged_f16_prefill|paged f16 d=64 n=70 causal=1 page=16,7 order=1"
    "nightly_paged_bf16_mods|paged bf16 d=59 dv=37 causal=1 n=19 window=17 softcap=10 alibi=1 page=7,64"
    "nightly_paged_f16_stages1|paged f16 d=128 stages=1 n=5 page=16,5"
    "nightly_paged_bf16_sm90|paged bf16 d=128 n=1 heads=8/1 arch=sm_90"
    "nightly_compile_sm80|compile sm_80"
    "nightly_compile_sm90|compile sm_90")
foreach(t ${ATTN_EMU_SERVE_TESTS} ${ATTN_EMU_SERVE_NIGHTLY})
  string(REPLACE "|" ";" parts "${t}")
  list(GET parts 0 name)
  list(GET parts 1 args)
  separate_arguments(args UNIX_COMMAND "${args}")
  if(name MATCHES "^nightly_")
    set(label nightly)
  else()
    set(label cuda)
  endif()
  add_test(NAME emu_serve_${name} COMMAND cuda_emu_serve ${args})
  set_tests_properties(emu_serve_${name} PROPERTIES LABELS ${label} TIMEOUT 3600 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${ATTN_EMU_SERVE_ENV}")
endforeach()
# Traffic (cuda_emu_serve traffic): GQA decode (heads 8/2, batch 2, n_kv = 1000, not a multiple of a page) on the
# paged kernel, pages in shuffled order, against the dense kernel (a block a KV head) on the same data: the
# interpreter's global read sectors within 10% of the dense kernel's (3% with pages of 8 keys or more: the table read
# once a warp for each copy of a key block) and both within 1.10x of the compulsory bytes.
# CI: f16 d=64 with pages of 16 and 64; nightly: bf16, d=128, pages of 1 (the table read per copy), and the kernel a
# block a query head (layout 2, each page read 4 times), which must fail.
set(ATTN_EMU_SERVE_TRAFFIC
    "traffic_f16_d64|f16 d=64 page=16,64"
    "nightly_traffic_bf16_d64|bf16 d=64 page=16,64,1"
    "nightly_traffic_f16_d128|f16 d=128 page=16,64"
    "nightly_traffic_bf16_d128|bf16 d=128 page=64,16,3")
foreach(t ${ATTN_EMU_SERVE_TRAFFIC})
  string(REPLACE "|" ";" parts "${t}")
  list(GET parts 0 name)
  list(GET parts 1 args)
  separate_arguments(args UNIX_COMMAND "${args}")
  if(name MATCHES "^nightly_")
    set(label nightly)
  else()
    set(label cuda)
  endif()
  add_test(NAME emu_serve_${name} COMMAND cuda_emu_serve traffic ${args})
  set_tests_properties(emu_serve_${name} PROPERTIES LABELS ${label} TIMEOUT 600 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${ATTN_EMU_SERVE_ENV}")
endforeach()
add_test(NAME nightly_emu_serve_traffic_per_query_head
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/expect_exit.sh --skip77 1 "paged/dense reads 4\\.[0-9]+ .*at most 1\\.03x"
                 $<TARGET_FILE:cuda_emu_serve> traffic f16 d=64 page=16 pack=0)
set_tests_properties(nightly_emu_serve_traffic_per_query_head PROPERTIES LABELS nightly TIMEOUT 600
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${ATTN_EMU_SERVE_ENV}")
# Mutants the tests above must catch (tests/ptx_mutation.sh; nightly): a page's slot dropped from a key's address,
# varlen's Q rows read as dense ones, the block table read by every copy instruction (paged decode 6.4% above dense),
# fa_fix not called in the layouts, a sequence with no key not given zero rows.
set(ATTN_EMU_SERVE_MUTATIONS
    "page_slot|s/\\* ps + (unsigned)j % ps/* ps + 0u/|relative error|paged f16 d=32 n=1 heads=8/2 page=16"
    "varlen_q_stride|s/fa_load_q_rows(sbase, q, heads \\* FA_D,/fa_load_q_rows(sbase, q, FA_D,/|relative error|varlen f16 d=32 causal=1 br=32 bc=32 warps=2"
    "layout_fix_dropped|/#elif FA_MASK/,+1 s/if (__any_sync(0xffffffffu, bad)) {/if (0) {/|the reference's|paged bf16 d=40 dv=24 causal=1 n=5 page=7 nan=1"
    "table_per_copy|/one read a warp, lane l/,/^#endif/ s/if (npg <= 32) {/if (0) {/|paged/dense reads 1\\.0[4-9].*at most 1\\.03x|traffic f16 d=64 page=16"
    "no_key_rows|s/if (n_kv == 0) ev = -FA_BR - 1/if (n_kv == 0) ev = 0/|no key has row value|paged f16 d=32 n=1 heads=8/2 page=16")
foreach(t ${ATTN_EMU_SERVE_MUTATIONS})
  string(REPLACE "|" ";" parts "${t}")
  list(GET parts 0 name)
  list(GET parts 1 script)
  list(GET parts 2 expect)
  list(GET parts 3 args)
  separate_arguments(args UNIX_COMMAND "${args}")
  add_test(NAME nightly_ptx_mutation_serve_${name}
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/ptx_mutation.sh $<TARGET_FILE:cuda_emu_serve>
                   ${PROJECT_SOURCE_DIR}/templates/flash.cu "${script}" "${expect}" ${args})
  set_tests_properties(nightly_ptx_mutation_serve_${name} PROPERTIES LABELS nightly TIMEOUT 600 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${ATTN_EMU_SERVE_ENV}")
endforeach()
# the layout in a spec's text and source (no compiler); the API on the fake driver: CI compiles a dense and a varlen
# kernel with NVRTC, nightly also a paged and a smallcache one
add_test(NAME cuda_serve_spec COMMAND cuda_emu_serve spec)
set_tests_properties(cuda_serve_spec PROPERTIES LABELS cuda TIMEOUT 60)
add_test(NAME cuda_serve_fake COMMAND cuda_emu_serve fake $<TARGET_FILE:fake_libcuda>)
set_tests_properties(cuda_serve_fake PROPERTIES LABELS cuda TIMEOUT 600 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${ATTN_EMU_SERVE_ENV}")
add_test(NAME nightly_cuda_serve_fake_full COMMAND cuda_emu_serve fake $<TARGET_FILE:fake_libcuda> full)
set_tests_properties(nightly_cuda_serve_fake_full PROPERTIES LABELS nightly TIMEOUT 600 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${ATTN_EMU_SERVE_ENV}")
