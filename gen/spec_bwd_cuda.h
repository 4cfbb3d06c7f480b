/* spec_bwd_cuda.h: the CUDA flash backward (templates/flash_bwd.cu): its tiles for a problem, its source text and
 * its launch geometry. */
#ifndef ATTN_SPEC_BWD_CUDA_H
#define ATTN_SPEC_BWD_CUDA_H

#include "spec.h"

/* The backward's untuned spec for (dtype, d, d_v, causal) on arch ("sm_80", ...): flash, cuda, Br = Bc: 64 or 32,
 * the largest whose shared memory fits 99 KiB with one stage (two blocks an SM on an H100) and whose accumulators
 * attn_spec_check_backward_cuda admits with 4 warps, else 8, else 16 within an A100's 163 KiB; stages 2 (the next
 * block's rows load while one is computed) where that fits 99 KiB, else 1. ATTN_OK, or ATTN_EUNSUPPORTED /
 * ATTN_EINVAL with the reason in err. */
int attn_spec_backward_cuda(attn_dtype t, int d, int dv, int causal, const char *arch, attn_spec *out, char *err,
                            size_t errlen);

/* A backward spec the CUDA template takes (a tuned row, or one given): flash cuda; Br and Bc multiples of 16 in
 * 16..128, each on its own; 2, 4 or 8 warps; stages 1 or 2; no forward-only fields or score modifiers; its shared
 * memory within smem_limit (the device's per-block opt-in; <= 0: an A100's 163 KiB); its dK/dV and dQ fp32
 * accumulators within what the registers hold without spilling (as attn_spec_backward_cuda); dq 0 or 1 (dq=atomic:
 * no dQ blocks, so only dK/dV's accumulators count). ATTN_OK, or ATTN_EUNSUPPORTED / ATTN_EINVAL with a one-line
 * reason naming what does not fit. */
int attn_spec_check_backward_cuda(const attn_spec *s, long long smem_limit, char *err, size_t errlen);

/* Dynamic shared memory per block of a backward spec (ATTN_FLASH_BWD_SMEM). */
long long attn_spec_backward_cuda_smem(const attn_spec *s);

/* Source text: the #defines of attn_spec_source (and ATTN_DQ_ATOMIC 1 with dq=atomic, nothing without it),
 * kernel_abi_cuda.h, kernel_abi_cuda_bwd.h and flash_bwd.cu; malloc'd, or NULL with err. */
char *attn_spec_source_backward_cuda(const attn_spec *s, char *err, size_t errlen);

typedef struct attn_cuda_bwd_geom {
  unsigned pre_grid, grid, block; /* attn_bwd_pre's grid, attn_kernel's grid; both take `block` threads */
  long long smem;                 /* attn_kernel's dynamic shared memory */
  long long scratch;              /* bytes of delta: batch*heads*n floats; dq=atomic: rounded up to 4, then the fp32
                                     dQ, batch*heads*n*d floats (attn_bwd_pre zeroes it) */
  int items_kv, items_q;          /* attn_kernel's dK/dV blocks, then its dQ blocks (none with dq=atomic) */
  unsigned post_grid;             /* dq=atomic: attn_bwd_post's grid (`block` threads, an element of dq each), after
                                     attn_kernel; 0 otherwise */
} attn_cuda_bwd_geom;

/* ATTN_OK, or ATTN_EINVAL / ATTN_EUNSUPPORTED with a reason (a problem too large for one launch). */
int attn_cuda_backward_geometry(const attn_spec *s, long long batch, long long heads, long long heads_kv, long long n,
                                long long n_kv, attn_cuda_bwd_geom *g, char *err, size_t errlen);

#endif
