/* emu_case.h: the files tests/cuda_emu.c (C) and the emulator's driver (tests/emu/cuda_emu.cpp, C++) exchange.
 * Case file: attn_emu_case, then q, k, v as raw elements of esize bytes ([batch][heads|heads_kv][n|n_kv][d]).
 * Result file: attn_emu_result, then o as raw elements. */
#ifndef ATTN_EMU_CASE_H
#define ATTN_EMU_CASE_H

#include <stdint.h>

#define ATTN_EMU_MAGIC 0x756d6541u /* "Aemu" */
#define ATTN_EMU_VERSION 1

typedef struct attn_emu_case {
  uint32_t magic, version;
  int32_t esize;                     /* bytes per element: 4 (f32) or 2 (f16, bf16) */
  int32_t d;
  int64_t batch, heads, heads_kv, n, n_kv;
  float scale;
  int32_t grid_items;
  uint32_t grid, block, init_grid, init_block; /* gen/launch.h's geometry */
  int64_t smem, scratch, consts;     /* bytes */
  int32_t order;                     /* threads and blocks: 0 forward, 1 reverse, >= 2 random from this seed */
  int32_t deferred;                  /* cp.async: 0 lands at issue, 1 at the wait_group that requires it */
} attn_emu_case;

typedef struct attn_emu_result {
  uint32_t magic, version;
  uint64_t io_reads, io_writes;      /* the counting build's a.io */
  uint64_t ldsm_phases, ldsm_conflicts; /* ldmatrix 8-address phases, and those with a bank-group conflict */
  uint64_t switches;                 /* fiber switches (the emulation's cost) */
} attn_emu_result;

#endif
