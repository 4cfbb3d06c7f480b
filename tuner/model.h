/* model.h: the performance model for GPUs that are not present (docs/model.md): a per-SM cycle count per key block
 * from the kernel's own instruction counts (tuner/kcount.c, checked against its PTX) at the spec table's per-SM
 * rates, occupancy from the compiled kernel's registers and shared memory (or their estimate), the causal work per
 * query block and the order blocks are scheduled in, DRAM and L2 traffic from the I/O closed form with the K/V
 * resident at once against the L2. Rows made with it carry provenance "model" and the bound that limits them. */
#ifndef ATTN_MODEL_H
#define ATTN_MODEL_H

#include "gpus.h"
#include "internal.h"
#include "space.h"

typedef struct attn_model_result {
  double time_ms;
  double flops;                       /* useful FLOPs (2 n n_kv (d + d_v) per head, causal: visible pairs only) */
  unsigned long long reads, writes;   /* entries, from the kernel's closed form */
  double t_compute_ms, t_memory_ms, t_overhead_ms;
  int blocks, blocks_per_sm, waves;
  /* what limits the time: "tensor_cores", "special_functions", "fp32_alu", "shared_memory" (the unit that
   * dominates a key block), "occupancy" (too few blocks or warps to fill the SMs, or the tail of the last wave),
   * "dram", "l2", "launch" */
  const char *bound;
  /* one key block of one thread block, in SM cycles at the unit's full rate */
  double cyc_tensor, cyc_sfu, cyc_alu, cyc_smem, cyc_key_block;
  double t_dram_ms, t_l2_ms;
  double l2_resident_bytes;           /* K and V of the heads being worked on at once */
  int registers;                      /* per thread, used for occupancy */
  const char *resources_from;         /* "ptxas" (the compiled kernel) or "estimate" */
} attn_model_result;

/* 1 when name is one of the bounds above (import accepts only these), else 0. */
int attn_model_bound_known(const char *name);

/* ATTN_OK, or ATTN_EINVAL with a reason (spec not for CUDA, problem invalid, the kernel does not fit an SM).
 * res: the compiled kernel's registers, spills and static shared memory; NULL: the estimate of space.c. p need not be
 * normalised. */
int attn_model_time_res(const attn_gpu *g, const attn_problem *p, const attn_spec *s, const attn_kernel_res *res,
                        attn_model_result *out, char *err, size_t errlen);
int attn_model_time(const attn_gpu *g, const attn_problem *p, const attn_spec *s, attn_model_result *out, char *err,
                    size_t errlen);

/* A serving layout as templates/flash.cu's ATTN_LAYOUT kernels run it (model.c's serving part): page_size > 0, paged
 * (every sequence the problem's n_kv keys; decode with grouped-query heads on the packed kernel, a block per KV head);
 * nseq > 0, varlen, sequence b with lq[b] queries and lk[b] keys (the problem's batch, n and n_kv then taken from
 * them). */
typedef struct attn_model_layout {
  int page_size;
  const int *lq, *lk;
  int nseq;
} attn_model_layout;

/* attn_model_time_res of the layout's kernel: ATTN_EINVAL with a reason also for a spec without that kernel (not
 * mma.sync flash, or tiles the layout's attn_spec_check refuses). lay NULL or neither layout: the dense model. */
int attn_model_time_layout(const attn_gpu *g, const attn_problem *p, const attn_spec *s, const attn_kernel_res *res,
                           const attn_model_layout *lay, attn_model_result *out, char *err, size_t errlen);

/* The CUDA backward (templates/flash_bwd.cu) of spec s for the problem: the same result fields, flops counted as 2.5
 * times the forward's (FlashAttention's convention), the cycle fields for one inner step of a dK/dV block. ATTN_OK,
 * or ATTN_EINVAL with a reason (attn_spec_check_backward_cuda against the GPU's per-block shared memory, a problem
 * that does not fit the spec, a block that does not fit an SM). */
int attn_model_time_bwd(const attn_gpu *g, const attn_problem *p, const attn_spec *s, attn_model_result *out,
                        char *err, size_t errlen);

#endif
