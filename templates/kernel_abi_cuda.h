/* kernel_abi_cuda.h: what every generated CUDA kernel takes, the shared memory each template needs, and the
 * I/O-counting macros of the CUDA templates. Prepended to each generated CUDA source (NVRTC: no system headers,
 * so nothing is included here); the generator and the runtime include it too (C), so the argument layout and the
 * shared-memory sizes have a single definition.
 *
 * Entry points of a CUDA module (extern "C", looked up by name):
 *   __global__ void attn_kernel(attn_cuda_kargs a)  the attention itself; 1-D grid and block and dynamic shared
 *                                                   memory as attn_cuda_geometry (gen/launch.h) says
 *   __global__ void attn_init(attn_cuda_kargs a)    only when the geometry has consts > 0: fills a.consts (per-plan
 *                                                   constants, e.g. lowrank's random directions) once at load;
 *                                                   q, k, v, o, scratch, io are NULL then
 *   __global__ void attn_combine(attn_cuda_kargs a) only in a split-KV flash module (spec split > 1): merges the
 *                                                   parts attn_kernel left in a.scratch into a.o (and a.lse), launched
 *                                                   after it with the geometry's combine_grid and combine_block */
#ifndef ATTN_KERNEL_ABI_CUDA_H
#define ATTN_KERNEL_ABI_CUDA_H

#define ATTN_CUDA_ABI_VERSION 2

typedef struct attn_cuda_kargs {
  const void *q, *k, *v;   /* device pointers, [batch][heads|heads_kv][n|n_kv][d] (v: [d_v]), the spec's dtype */
  void *o;                 /* [batch][heads][n][d_v], same dtype (d_v: the kernel's ATTN_DV) */
  void *scratch;           /* slow-memory scratch of the geometry's scratch bytes; NULL when 0 */
  void *consts;            /* per-plan constants of the geometry's consts bytes, written by attn_init; NULL when 0 */
  unsigned long long *io;  /* counting build: {reads, writes} in entries, summed over blocks; NULL otherwise */
  long long batch, heads, heads_kv, n, n_kv;
  float scale;             /* never 0: the runtime resolves the default 1/sqrt(d) */
  int grid_items;          /* work items (query blocks x heads, or heads); the grid may be smaller and loop */
  /* score modifiers (attn.h), read only by kernels built with them (flash: ATTN_WINDOW, ATTN_SOFTCAP, ATTN_ALIBI) */
  const float *alibi;      /* device pointer: one slope per query head, copied at plan creation; NULL without */
  int window;              /* > 0 in a windowed kernel; -w: a GQA-packed decode, every row the query at n_kv - 1 */
  float softcap;           /* > 0 in a soft-capping kernel */
  float *lse;              /* flash: NULL, or [batch][heads][n] fp32 written with O (attn_execute_lse) */
#if !(defined(__CUDACC__) || defined(__CUDACC_RTC__)) || defined(ATTN_LAYOUT)
  /* Serving layouts (flash built with ATTN_LAYOUT; runtime/cuda_serve.c), device arrays of ints. Only the kernels
   * built for them declare these fields: the dense kernels' parameters (and PTX) are the fields above, a prefix of
   * the host's struct (ATTN_CUDA_KARGS_DENSE_BYTES).
   *   varlen (1): q [total_q][heads][d], k [total_kv][heads_kv][d], v [total_kv][heads_kv][d_v], o [total_q][heads]
   *     [d_v]; cu_q, cu_kv: batch + 1 cumulative lengths each; n, n_kv the longest sequence's.
   *   paged (2): q, o as dense; k, v pages [num_pages][page_size][heads_kv][d or d_v]; block_table [batch]
   *     [max_pages] of page indices; seq_kv[b]: sequence b's keys (n_kv: the most). */
  const int *cu_q, *cu_kv;
  const int *block_table, *seq_kv;
  int max_pages, page_size;
#endif
} attn_cuda_kargs;
#if !(defined(__CUDACC__) || defined(__CUDACC_RTC__))
#define ATTN_CUDA_KARGS_DENSE_BYTES __builtin_offsetof(attn_cuda_kargs, cu_q)
#endif

/* Head dimensions that are not multiples of the templates' granularity are padded at compile time: the padded
 * columns live only in shared memory (zero-filled, never read from or written to global memory).
 *   flash: d and d_v to multiples of 16 (the mma K granularity and whole 16-byte chunks); on the tensor cores a
 *     d_v past 256 is split over ATTN_FLASH_VS warps that share the query rows (each owns d_v/VS columns of O),
 *     d_v then padded to a multiple of 16*VS.
 *   lowrank: d to a multiple of 8 (the random features' 8-column steps), d_v to a multiple of 4 (float4 tiles). */
/* plain int arithmetic: the templates use these in #if */
#define ATTN_CUDA_RUP(x, m) ((((x) + (m) - 1) / (m)) * (m))
#define ATTN_FLASH_VS(esize, dv) \
  ((esize) == 4 || ATTN_CUDA_RUP(dv, 16) <= 256 ? 1 : ATTN_CUDA_RUP(dv, 16) <= 512 ? 2 : 4)
#define ATTN_FLASH_DP(d) ATTN_CUDA_RUP(d, 16)
#define ATTN_FLASH_DVP(esize, dv) ATTN_CUDA_RUP(dv, 16 * ATTN_FLASH_VS(esize, dv))
#define ATTN_LOWRANK_DP(d) ATTN_CUDA_RUP(d, 8)
#define ATTN_LOWRANK_DVP(dv) ATTN_CUDA_RUP(dv, 4)

/* Dynamic shared memory in bytes; esize = bytes per input element (4: f32, 2: f16/bf16); dp, dvp: padded d, d_v.
 * flash: Q_i (Br x dp; the tensor-core kernels stage O there too: Br x max(dp, dvp)) and `stages` buffers of K_j
 *   (Bc x dp) and V_j (Bc x dvp) in the input type; the f32 kernel also keeps P (Br x Bc floats) there (its threads
 *   own O by rows, so P goes through shared memory).
 * smallcache: three T x T fp32 tiles (Q|P, K|V, accumulator) and m, l for Br rows, T = tile (0: Br).
 * lowrank: all fp32, r4 = r rounded up to 4, rs = r4 + 4 or r4 + 8 (rs/4 odd): the state KV | z (r4 x (dvp+1)),
 *   the features of a key block and of a query group (2 x Bc x rs), their K, Q or V rows (Bc x max(dp, dvp)),
 *   S (Bc x Bc), 3 x Bc.
 * The _DV forms take d_v; the others are the d_v = d case. */
#define ATTN_CUDA_MAX2(a, b) ((a) > (b) ? (a) : (b))
#define ATTN_FLASH_SMEM_DV(esize, d, dv, br, bc, stages)                                                         \
  ((esize) == 4                                                                                                  \
       ? 4LL * ((long long)(br) * ATTN_FLASH_DP(d) +                                                             \
                (long long)(stages) * (bc) * (ATTN_FLASH_DP(d) + ATTN_FLASH_DVP(4, dv)) + (long long)(br) * (bc)) \
       : 2LL * ((long long)(br) * ATTN_CUDA_MAX2(ATTN_FLASH_DP(d), ATTN_FLASH_DVP(2, dv)) +                      \
                (long long)(stages) * (bc) * (ATTN_FLASH_DP(d) + ATTN_FLASH_DVP(2, dv))))
#define ATTN_FLASH_SMEM(esize, d, br, bc, stages) ATTN_FLASH_SMEM_DV(esize, d, d, br, bc, stages)
#define ATTN_SC_TILE(br, tile) ((tile) > 0 ? (tile) : (br))
#define ATTN_SMALLCACHE_SMEM(d, br, tile) \
  (4LL * (3LL * ATTN_SC_TILE(br, tile) * ATTN_SC_TILE(br, tile) + 2LL * (br)))
#define ATTN_LOWRANK_R4(r) (((long long)(r) + 3) / 4 * 4)
#define ATTN_LOWRANK_SMEM_DV(d, dv, r, bc)                                                                        \
  (4LL * (ATTN_LOWRANK_R4(r) * (ATTN_LOWRANK_DVP(dv) + 1) +                                                       \
          2LL * (bc) * (ATTN_LOWRANK_R4(r) + 4 + (ATTN_LOWRANK_R4(r) & 4)) +                                      \
          (long long)(bc) * ATTN_CUDA_MAX2(ATTN_LOWRANK_DP(d), ATTN_LOWRANK_DVP(dv)) + (long long)(bc) * (bc) +     \
          3LL * (bc)))
#define ATTN_LOWRANK_SMEM(d, r, bc) ATTN_LOWRANK_SMEM_DV(d, d, r, bc)

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
/* Counting build. Every thread of a block keeps the block's count (the same uniform value in each thread: call
 * the macros from code all threads run, with the block's transfer, not the thread's share); thread 0 adds it to
 * a.io at the end of the block. Entries are counted, not bytes, as in the CPU templates. */
#ifdef ATTN_COUNT_IO
#define ATTN_CIO_DECL unsigned long long attn_cio_r_ = 0, attn_cio_w_ = 0
#define ATTN_CIO_READ(cnt) (attn_cio_r_ += (unsigned long long)(cnt))
#define ATTN_CIO_WRITE(cnt) (attn_cio_w_ += (unsigned long long)(cnt))
#define ATTN_CIO_FLUSH(a)                          \
  do {                                             \
    if (threadIdx.x == 0 && (a).io) {              \
      atomicAdd((a).io, attn_cio_r_);              \
      atomicAdd((a).io + 1, attn_cio_w_);          \
    }                                              \
  } while (0)
#else
#define ATTN_CIO_DECL
#define ATTN_CIO_READ(cnt) ((void)0)
#define ATTN_CIO_WRITE(cnt) ((void)0)
#define ATTN_CIO_FLUSH(a) ((void)0)
#endif
#endif

#endif
