# The CUDA templates on the PTX interpreter (label cuda; no GPU): tests/cuda_emu generates each kernel's source with
# attn_spec_source, compiles it with NVRTC to the PTX of its architecture (the options the runtime compiles cubins
# with), and runs that PTX on tests/ptx (a PTX interpreter: warps, divergence, barriers, collectives, cp.async, blocks
# resident several at a time, and checks for races on shared memory and on global memory across blocks,
# uninitialised reads, out-of-bounds and misaligned accesses). It checks the output against fp64 within limits from
# the dtype's unit roundoff, unwritten outputs, the kernel's global traffic in 32-byte sectors against the closed form,
# and bank conflicts where docs/cuda.md says there are none, on fixed shapes and on shapes at the edges of the spec's
# tiles (--quick: three; otherwise, as in the nightly runs, all nine of n = Br-1..Br+1 by n_kv = m Bc-1..m Bc+1).
# Without NVRTC these tests exit 77 (skipped).
add_library(attn_ptx STATIC ${CMAKE_CURRENT_LIST_DIR}/ptx/ptx_parse.c ${CMAKE_CURRENT_LIST_DIR}/ptx/ptx_exec.c
            ${CMAKE_CURRENT_LIST_DIR}/ptx/ptx_ops.c)
target_link_libraries(attn_ptx PRIVATE m)

add_executable(cuda_emu ${CMAKE_CURRENT_LIST_DIR}/cuda_emu.c)
target_include_directories(cuda_emu PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(cuda_emu PRIVATE attn_ptx attn_tuner m)

set(ATTN_EMU_CACHE ${CMAKE_BINARY_DIR}/test-cache-emu)
file(MAKE_DIRECTORY ${ATTN_EMU_CACHE})
set(ATTN_EMU_ENV "ATTN_CACHE_DIR=${ATTN_EMU_CACHE}" "ATTN_DB=${ATTN_EMU_CACHE}/no-database.db" "ATTN_THREADS=1")

# name|arguments. CI (label cuda), sized to the suite's time budget (the interpreter runs some 10^7 thread
# instructions a second): the default spec of every d for each dtype of flash and smallcache (flash f32, the slowest
# to interpret: every third d), causal alternating (nightly: both), and of a spread of d for lowrank (whose kernels
# take NVRTC 1-9 s each),
# a sample of the tuner's space per algorithm, NaN and infinity in the inputs for each algorithm and dtype (the nan
# mode, as tests/cpu_nan.c), the approximate instructions at their largest error (--approx-worst), and the io mode
# (counting build, sectors and closed form side by side).
set(ATTN_EMU_TESTS
    "flash_defaults_f16|--quick defaults flash f16"
    "flash_defaults_bf16|--quick defaults flash bf16"
    "flash_defaults_f32|--quick defaults flash f32 every=3"
    "smallcache_defaults_f16|--quick defaults smallcache f16"
    "smallcache_defaults_bf16|--quick defaults smallcache bf16"
    "smallcache_defaults_f32|--quick defaults smallcache f32"
    "lowrank_default_f16_d128_causal|--quick lowrank f16 d=128 causal=1"
    "lowrank_default_bf16_d64|--quick lowrank bf16 d=64"
    "lowrank_defaults_f32|--quick defaults lowrank f32 every=15"
    "flash_space_f16_d128_causal|--quick space flash f16 d=128 causal=1 stride=6"
    "flash_space_bf16_d80_causal|--quick space flash bf16 d=80 causal=1 stride=6 offset=1"
    "flash_space_f32_d64_causal|--quick space flash f32 d=64 causal=1 stride=4"
    "smallcache_space_bf16_d64_causal|--quick space smallcache bf16 d=64 causal=1 stride=4"
    "lowrank_space_f16_d16_causal|--quick space lowrank f16 d=16 causal=1 stride=4"
    "lowrank_taylor_bf16_d16|--quick lowrank bf16 d=16 feature=taylor"
    "flash_sm90_bf16_d128_causal|--quick flash bf16 d=128 causal=1 arch=sm_90"
    "smallcache_sm90_f32_d64|--quick smallcache f32 d=64 arch=sm_90"
    "approx_worst_flash_f16|--quick --approx-worst flash f16 d=64"
    "approx_worst_smallcache_f32|--quick --approx-worst smallcache f32 d=64 causal=1"
    "approx_worst_lowrank_f32|--quick --approx-worst lowrank f32 d=32"
    "io_flash_bf16|--quick io flash bf16 d=64 causal=1"
    "io_smallcache_f32|--quick io smallcache f32 d=64"
    "io_lowrank_f16|--quick io lowrank f16 d=16")
# every head dimension (padded tails, rows by element) and d_v != d (DeepSeek MLA's 576/512, 192/128, 64/128): the
# defaults attn_spec_fit sizes for them, on the --quick shapes (n = 1, odd n, n != n_kv both ways, grouped-query
# heads), causal alternating; lowrank's large d (slow to interpret) nightly
list(APPEND ATTN_EMU_TESTS
     "dims_flash_f16|--quick defaults flash f16 d=1,59,320,576"
     "dims_flash_bf16|--quick defaults flash bf16 d=3,111,512"
     "dims_flash_f32|--quick defaults flash f32 d=3,111"
     "dv_flash_f16_576_512_causal|--quick flash f16 d=576 dv=512 causal=1"
     "dv_flash_bf16_192_128|--quick flash bf16 d=192 dv=128"
     "dv_flash_f32_64_128_causal_4rows|--quick flash f32 d=64 dv=128 causal=1 br=16"
     "dims_smallcache_f16|--quick defaults smallcache f16 d=1,111,576"
     "dims_smallcache_bf16|--quick defaults smallcache bf16 d=3,59,320"
     "dv_smallcache_bf16_576_512_causal|--quick smallcache bf16 d=576 dv=512 causal=1"
     "dv_smallcache_f32_192_128|--quick smallcache f32 d=192 dv=128"
     "dv_smallcache_f16_64_128_causal|--quick smallcache f16 d=64 dv=128 causal=1"
     "dims_lowrank_f32|--quick defaults lowrank f32 d=3,111"
     "dv_lowrank_bf16_64_128_causal|--quick lowrank bf16 d=64 dv=128 causal=1"
     "io_flash_f16_d59_dv37|--quick io flash f16 d=59 dv=37 causal=1")
foreach(dtype f16 bf16)
  list(APPEND ATTN_EMU_TESTS "nan_flash_${dtype}|nan flash ${dtype} d=16,64")
endforeach()
foreach(dtype f16 bf16 f32)
  list(APPEND ATTN_EMU_TESTS "nan_smallcache_${dtype}|nan smallcache ${dtype} d=16")
endforeach()
# the fp32 flash kernel is the interpreter's slowest (its products on CUDA cores): one d in CI
list(APPEND ATTN_EMU_TESTS "nan_flash_f32|nan flash f32 d=16")
list(APPEND ATTN_EMU_TESTS "nan_lowrank_f32_d16|nan lowrank f32 d=16 causal=1")
# score modifiers (flash's): CI a non-causal window alone (1, Bc - 1, Bc, Bc + 1 and past two tiles, f16 d=64: its
# sectors are the closed form's, which counts only the key blocks a window reaches) and everything together with
# causal, odd d, d_v != d and tanh.approx at its worst (the shapes have grouped-query heads and n_kv != n both ways)
list(APPEND ATTN_EMU_TESTS
     "mods_window_f16|--quick flash f16 d=64 window=63,130,1,64,65"
     "mods_all_bf16_causal|--quick --approx-worst flash bf16 d=59 dv=37 causal=1 window=5,64,70 softcap=20 alibi=1")
# nightly: every default of every (algorithm, d, dtype, causal), whole spaces under every block and warp order,
# NaN at the other d
set(ATTN_EMU_NIGHTLY
    "nightly_nan_lowrank_f16_d64|nan lowrank f16 d=64"
    "nightly_nan_lowrank_bf16_d64|nan lowrank bf16 d=64"
    "nightly_nan_lowrank_taylor_f32|nan lowrank f32 d=16 feature=taylor"
    "nightly_nan_smallcache_bf16_d64|nan smallcache bf16 d=64"
    "nightly_nan_flash_f32_d64|nan flash f32 d=64")
# every head dimension class (1..15, odd, multiples of 8 but not 16, past 256, the largest) and d_v != d both ways
set(ATTN_EMU_DIMS "1,2,3,5,7,8,9,15,17,24,33,40,59,72,100,111,136,200,257,264,320,385,448,512,520,575,576")
foreach(algo flash smallcache lowrank)
  foreach(dtype f16 bf16 f32)
    list(APPEND ATTN_EMU_NIGHTLY
         "nightly_${algo}_${dtype}_dims|defaults ${algo} ${dtype} d=${ATTN_EMU_DIMS}"
         "nightly_${algo}_${dtype}_dv_mla|defaults ${algo} ${dtype} d=576 dv=512"
         "nightly_${algo}_${dtype}_dv_192_128|defaults ${algo} ${dtype} d=192 dv=128"
         "nightly_${algo}_${dtype}_dv_64_128|defaults ${algo} ${dtype} d=64 dv=128"
         "nightly_${algo}_${dtype}_dv_odd|defaults ${algo} ${dtype} d=37,300,5 dv=77"
         "nightly_nan_${algo}_${dtype}_dims|nan ${algo} ${dtype} d=3,59,576 dv=512"
         "nightly_io_${algo}_${dtype}_dims|--quick io ${algo} ${dtype} d=59 dv=200")
  endforeach()
endforeach()
foreach(algo flash smallcache lowrank)
  foreach(dtype f16 bf16 f32)
    list(APPEND ATTN_EMU_NIGHTLY
         "nightly_${algo}_${dtype}_defaults|defaults ${algo} ${dtype} causal=0"
         "nightly_${algo}_${dtype}_defaults_causal|defaults ${algo} ${dtype} causal=1"
         "nightly_${algo}_${dtype}_d64|--all-orders space ${algo} ${dtype} d=64 causal=0"
         "nightly_${algo}_${dtype}_d128_causal|--all-orders space ${algo} ${dtype} d=128 causal=1")
  endforeach()
endforeach()
# nightly: each modifier alone and together in every dtype, causal and not, on every shape with every window, one
# pipeline stage, MLA's d_v, sm_90's PTX, NaN and infinity, the counting build, tanh at its worst
foreach(dtype f16 bf16 f32)
  if(dtype STREQUAL "f32")
    set(dv "d=192 dv=128")
  else()
    set(dv "d=576 dv=512")
  endif()
  list(APPEND ATTN_EMU_NIGHTLY
       "nightly_mods_window_${dtype}|flash ${dtype} d=64 window=1,31,32,33,63,64,65,200"
       "nightly_mods_window_${dtype}_causal|flash ${dtype} d=80 causal=1 window=1,47,48,49,129"
       "nightly_mods_softcap_${dtype}|flash ${dtype} d=64 softcap=5"
       "nightly_mods_softcap_${dtype}_causal|--approx-worst flash ${dtype} d=128 causal=1 softcap=50"
       "nightly_mods_alibi_${dtype}|flash ${dtype} d=128 alibi=1"
       "nightly_mods_alibi_${dtype}_causal|flash ${dtype} d=64 causal=1 alibi=1"
       "nightly_mods_all_${dtype}|flash ${dtype} d=40 window=17,33,100 softcap=3 alibi=1"
       "nightly_mods_all_${dtype}_stages1|flash ${dtype} d=64 stages=1 causal=1 window=3,64,65 softcap=30 alibi=1"
       "nightly_mods_all_${dtype}_dv|flash ${dtype} ${dv} causal=1 window=40 softcap=10 alibi=1"
       "nightly_mods_all_${dtype}_sm90|flash ${dtype} d=128 window=100 softcap=30 alibi=1 arch=sm_90"
       "nightly_nan_mods_${dtype}|nan flash ${dtype} d=16,64 window=2,30 softcap=4 alibi=1"
       "nightly_io_mods_${dtype}|io flash ${dtype} d=59 dv=37 causal=1 window=3,64,65 alibi=1"
       "nightly_mods_space_${dtype}|--quick space flash ${dtype} d=64 causal=0 stride=3 window=1,31,33,65,100 softcap=3 alibi=1"
       "nightly_mods_space_${dtype}_causal|--quick space flash ${dtype} d=128 causal=1 stride=3 window=1,63,64,65,200 softcap=20 alibi=1")
endforeach()
foreach(t ${ATTN_EMU_TESTS} ${ATTN_EMU_NIGHTLY})
  string(REPLACE "|" ";" parts "${t}")
  list(GET parts 0 name)
  list(GET parts 1 args)
  separate_arguments(args UNIX_COMMAND "${args}")
  if(name MATCHES "^nightly_")
    set(label nightly)
    set(timeout 7200)
  else()
    set(label cuda)
    set(timeout 600)
  endif()
  add_test(NAME emu_${name} COMMAND cuda_emu ${args})
  set_tests_properties(emu_${name} PROPERTIES LABELS ${label} TIMEOUT ${timeout} SKIP_RETURN_CODE 77
                       ENVIRONMENT "${ATTN_EMU_ENV}")
endforeach()

# The interpreter's own checks on hand-written kernels.
add_executable(ptx_unit ${CMAKE_CURRENT_LIST_DIR}/ptx_unit.c)
target_include_directories(ptx_unit PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(ptx_unit PRIVATE attn_ptx attn_core m)
add_test(NAME ptx_unit COMMAND ptx_unit)
set_tests_properties(ptx_unit PROPERTIES LABELS cuda TIMEOUT 60)

# Mutations of the templates the interpreter tests must catch, by a numerical or a semantic failure:
# name|template|sed script|what the failure says|cuda_emu arguments. The last four are the classes the fixed shapes,
# the 1e-2 limit and one block at a time let pass: a key block's mask skipped when n_kv is one below a multiple of Bc
# (only the shapes at the tiles' edges have it), the swizzle dropped (8x bank conflicts, right results), every
# smallcache block on the first block's scratch slice (a race across blocks), one key in 64 weighted 3.5% too much.
# lowrank.cu's mutant compiles only with its #include of lowrank_feat.h inlined (emu_util.h's emu_substitute).
set(ATTN_PTX_MUTATIONS
    "mma_bf16_a_operands|flash.cu|/f32.bf16.bf16.f32/,/r\"(b1)/ s/\"r\"(a\\[1\\]), \"r\"(a\\[2\\])/\"r\"(a[2]), \"r\"(a[1])/|relative error|--quick flash bf16 d=64"
    "ldmatrix_no_trans|flash.cu|s/x4\\.trans\\.shared/x4.shared/|relative error|--quick flash f16 d=64"
    "missing_syncthreads|flash.cu|/block j visible to all/ s/__syncthreads()/(void)0/|race|--quick flash f16 d=64"
    "causal_off_by_one|flash.cu|s/min(cols, lb + rr)/min(cols, lb + rr + 1)/|relative error|--quick flash f16 d=64 causal=1"
    "key_block_edge|flash.cu|s/masked = j0 > diag - FA_BC + 1/masked = j0 > diag - FA_BC + 2/|relative error|--quick flash f16 d=64"
    "no_swizzle|flash.cu|s/return (r >> SH) & (G - 1)/return 0 * r/|bank conflicts|--quick flash f16 d=64"
    "shared_scratch|smallcache.cu|s/a.scratch + (long long)blockIdx.x/a.scratch + 0 * (long long)blockIdx.x/|race across blocks|--quick smallcache f32 d=16"
    "misweighted_key|flash.cu|s/fa_ex2(sc.s\\[mt\\]\\[nt\\]\\[2 \\* h\\] - mu)/fa_ex2(sc.s[mt][nt][2 * h] - mu + (nt + t == 0 ? 0.05f : 0.0f))/|relative error|--quick flash f16 d=64"
    "window_off_by_one|flash.cu|s/md.lw + rr :/md.lw + rr - 1 :/|relative error|--quick flash f16 d=64 window=63,130,1,64,65"
    "lowrank_half_denominator|lowrank.cu|s/z += FK\\[j \\* LR_RS + t\\]/z += 0.5f * FK[j * LR_RS + t]/|relative error|--quick lowrank f16 d=16")
# the score modifiers' other mutants, nightly: a window that skips a key block it reaches, one that loads a block it
# does not reach (traffic), the upper bound of a non-causal window off by one, ALiBi's sign, soft-capping dropped
list(APPEND ATTN_PTX_MUTATIONS
     "nightly_window_skips_a_block|flash.cu|s/e = e0 - w + 1/e = e0 - w + 1 + FA_BC/|relative error|--quick flash f16 d=64 window=63,130,1,64,65"
     "nightly_window_loads_a_block_more|flash.cu|s/e = e0 - w + 1/e = e0 - w + 1 - FA_BC/|global traffic|--quick flash f16 d=64 window=63,130,1,64,65"
     "nightly_window_upper_off_by_one|flash.cu|s/wr0 + (ATTN_CAUSAL ? 0 : w - 1)/wr0 + (ATTN_CAUSAL ? 0 : w)/|relative error|--quick flash f16 d=64 window=63,130,1,64,65"
     "nightly_alibi_sign|flash.cu|s/fmaf(-md.al, dist, v)/fmaf(md.al, dist, v)/|relative error|--quick flash bf16 d=64 alibi=1"
     "nightly_softcap_dropped|flash.cu|s/md.co \\* fa_tanh(x \\* md.ci)/x * sl2/|relative error|--quick flash f16 d=64 softcap=5")
foreach(t ${ATTN_PTX_MUTATIONS})
  string(REPLACE "|" ";" parts "${t}")
  list(GET parts 0 name)
  list(GET parts 1 template)
  list(GET parts 2 script)
  list(GET parts 3 expect)
  list(GET parts 4 args)
  separate_arguments(args UNIX_COMMAND "${args}")
  if(name MATCHES "^nightly_")
    set(label nightly)
  else()
    set(label cuda)
  endif()
  add_test(NAME ptx_mutation_${name}
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/ptx_mutation.sh $<TARGET_FILE:cuda_emu>
                   ${PROJECT_SOURCE_DIR}/templates/${template} "${script}" "${expect}" ${args})
  set_tests_properties(ptx_mutation_${name} PROPERTIES LABELS ${label} TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${ATTN_EMU_ENV}")
endforeach()

# smallcache and lowrank on CUDA refuse the score modifiers with the reason (attn_spec_check), before any compile
foreach(algo smallcache lowrank)
  add_test(NAME emu_mods_refused_${algo}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/expect_exit.sh 1 "${algo} on cuda applies no window, softcap or alibi"
                   $<TARGET_FILE:cuda_emu> --quick ${algo} f16 d=64 window=5 softcap=3 alibi=1)
  set_tests_properties(emu_mods_refused_${algo} PROPERTIES LABELS cuda TIMEOUT 60 ENVIRONMENT "${ATTN_EMU_ENV}")
endforeach()
