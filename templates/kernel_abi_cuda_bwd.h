/* kernel_abi_cuda_bwd.h: what the CUDA flash backward (templates/flash_bwd.cu) takes, and its shared memory.
 * Prepended to the backward's generated source after kernel_abi_cuda.h (gen/spec_bwd_cuda.c); the generator and
 * the runtime include it too, so the argument layout and the shared-memory size have one definition.
 *
 * Entry points of a backward module (extern "C"):
 *   __global__ void attn_bwd_pre(attn_cuda_bwd_kargs a)  delta[row] = rowsum(dO∘O) of every query row, a warp a
 *                                                        row; grid ceil(batch*heads*n / warps), ATTN_WARPS warps
 *   __global__ void attn_kernel(attn_cuda_bwd_kargs a)   blocks [0, items_kv): dK and dV of one key block of one KV
 *                                                        head; blocks [items_kv, items_kv + items_q): dQ of one
 *                                                        query block of one head; ATTN_WARPS warps, dynamic shared
 *                                                        memory ATTN_FLASH_BWD_SMEM */
#ifndef ATTN_KERNEL_ABI_CUDA_BWD_H
#define ATTN_KERNEL_ABI_CUDA_BWD_H

typedef struct attn_cuda_bwd_kargs {
  const void *q, *k, *v, *o, *dout; /* device pointers, the forward's layouts and dtype (o, dout: [..][n][d_v]) */
  const float *lse;                 /* [batch][heads][n], the forward's (attn_execute_lse) */
  void *dq, *dk, *dv;               /* like q, k, v */
  float *delta;                     /* scratch [batch][heads][n]: attn_bwd_pre writes it, attn_kernel reads it */
  long long batch, heads, heads_kv, n, n_kv;
  float scale;                      /* never 0: the runtime resolves the default 1/sqrt(d) */
  int items_kv, items_q;            /* attn_kernel's blocks of each kind: batch*heads_kv*ceil(n_kv/Bc), batch*heads*
                                       ceil(n/Br) */
} attn_cuda_bwd_kargs;

/* Shared memory in bytes: Q_i and dO_i (Br rows), K_j and V_j (Bc rows), with 2 stages a second set of max(Br, Bc)
 * rows (the next block's), P and dS (Br x Bc), all in the input type (esize bytes) with d and d_v padded to
 * multiples of 16 and every row by 16 bytes, then lse and delta of the Br rows per stage (fp32). */
#define ATTN_FLASH_BWD_SMEM(esize, d, dv, br, bc, stages)                                                   \
  ((long long)(esize) * (((long long)(br) + (bc) + ((stages) > 1 ? ATTN_CUDA_MAX2(br, bc) : 0)) *             \
                             (ATTN_CUDA_RUP(d, 16) + ATTN_CUDA_RUP(dv, 16) + 32 / (esize)) +                  \
                         2LL * (br) * ((bc) + 16 / (esize))) +                                                \
   8LL * (br) * (stages))

#endif
