/* gpus.h: the GPU spec table (tuner/gpus.json, embedded at build time) and lookup by name. */
#ifndef ATTN_GPUS_H
#define ATTN_GPUS_H

#include <stddef.h>
#include "attn.h"

typedef struct attn_gpu {
  char name[32];          /* table name, as stored in database rows: "H100" */
  char full_name[64];
  char arch[16];          /* "sm_90" */
  int sms;
  double smem_per_sm_kb, smem_per_block_kb;
  int regs_per_sm;
  double l2_mb, bandwidth_tbs, fp16_tflops, bf16_tflops, fp32_tflops;
  /* Per SM and clock, for the performance model (tuner/model.c, docs/model.md); entries without them get figures
   * derived from the peaks at 1.4 GHz. */
  double clock_mhz;
  double mma_flops_clk_sm;   /* f16/bf16 mma.sync, fp32 accumulate */
  double fp32_flops_clk_sm;  /* fma = 2 */
  double sfu_clk_sm;         /* ex2 per clock */
  double smem_bytes_clk_sm;  /* shared-memory bandwidth */
  int max_threads_sm;
} attn_gpu;

/* The whole table (parsed once); NULL with err when the embedded JSON is broken. */
const attn_gpu *attn_gpus(int *count, char *err, size_t errlen);

/* Lookup by name or alias, case-insensitive, ignoring spaces, '-' and '_' ("h100", "RTX 4090", "rtx4090").
 * NULL when unknown, with "unknown GPU 'X': known: A100, H100, ..." in err. */
const attn_gpu *attn_gpu_find(const char *name, char *err, size_t errlen);
/* attn_gpu_find, and when the name matched only a full name or an alias ("H100-SXM", "a100-80gb"), a one-line
 * note in note naming the table entry it was taken as ("" for the table name itself, in any case or spacing). */
const attn_gpu *attn_gpu_match(const char *name, char *note, size_t notelen, char *err, size_t errlen);

/* The dense peak rate for a dtype, in FLOP/s. */
double attn_gpu_peak(const attn_gpu *g, attn_dtype t);

#endif
