/* model.h: the performance model for GPUs that are not present: time from the kernel's I/O closed form (the same
 * count the counting build reproduces), its FLOPs and the spec table's peak rates, with tile-size efficiency,
 * occupancy/waves and launch overheads. Rows made with it carry provenance "model". */
#ifndef ATTN_MODEL_H
#define ATTN_MODEL_H

#include "gpus.h"
#include "internal.h"

typedef struct attn_model_result {
  double time_ms;
  double flops;                       /* useful FLOPs (4 n n_kv d per head, causal: visible pairs only) */
  unsigned long long reads, writes;   /* entries, from the kernel's closed form */
  double t_compute_ms, t_memory_ms, t_overhead_ms;
  int blocks, blocks_per_sm, waves;
} attn_model_result;

/* ATTN_OK, or ATTN_EINVAL with a reason (spec not for CUDA, problem invalid). p need not be normalised. */
int attn_model_time(const attn_gpu *g, const attn_problem *p, const attn_spec *s, attn_model_result *out, char *err,
                    size_t errlen);

#endif
