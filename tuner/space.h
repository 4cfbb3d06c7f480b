/* space.h: the tuner's search space for one (target, dtype, d, d_v, causal) and a set of algorithms: the grid of
 * tunables (Br, Bc, unroll and flash's split-K on the CPU; warps, stages on CUDA; smallcache's tile; lowrank's
 * feature map, degree and rank) minus what the constraints rule out (fast-memory footprint against the device's fast
 * memory, registers and spills of the compiled kernel or their estimate, divisibility, the spec's own validity). On an
 * sm_90 GPU the CUDA forward's space also holds the Hopper template's configurations (impl=wgmma, arch sm_90a). */
#ifndef ATTN_SPACE_H
#define ATTN_SPACE_H

#include <stddef.h>
#include "gpus.h"
#include "spec.h"

#define ATTN_ALGO_BIT(a) (1u << (unsigned)(a))

/* What a compiled CUDA kernel needs (ptxas's report). */
typedef struct attn_kernel_res {
  int registers;           /* per thread */
  long spill_bytes;        /* local-memory spill stores + loads + stack */
  long smem_static;        /* static shared memory, on top of the template's dynamic size */
} attn_kernel_res;

typedef struct attn_space_opts {
  attn_target target;      /* CPU or CUDA */
  attn_dtype dtype;
  int d, causal;
  unsigned algos;          /* ATTN_ALGO_BIT(ATTN_ALGO_FLASH) | ... */
  double tolerance;        /* lowrank enters only when > 0 */
  double fast_mem_bytes;   /* CPU: one core's L2; CUDA: shared memory per block */
  const attn_gpu *gpu;     /* CUDA: registers and shared memory per SM; NULL on the CPU */
  char arch[16];           /* CUDA: "sm_90" */
  /* The problem, for flash's split (0: unknown, and every split value stays in the space). When known, split > 1
   * is admitted only where the query blocks leave threads idle (CPU: attn_cpu_query_blocks < threads, a KV head's
   * G query heads one block's rows when n < Br; CUDA: decode, the launch's blocks < SMs) and every part gets a key
   * block (split <= ceil(n_kv / Bc)). */
  long n, n_kv;            /* query rows and keys per head */
  long heads;              /* batch * query heads */
  /* batch * KV heads (0: heads). CUDA counts its query blocks as the runtime launches them: a KV head's query heads
   * packed as the rows of its blocks where attn_cuda_gqa_packs holds, so split-KV is admitted where those leave SMs
   * idle. */
  long heads_kv;
  int threads;             /* CPU worker threads */
  /* CUDA: the compiled kernel's resources (0 and *out filled, or nonzero when unknown: the estimate is used). With
   * it, admission rules out what really spills or does not fit; without it, attn_cuda_regs_estimate decides. */
  int (*resources)(void *ctx, const attn_spec *c, attn_kernel_res *out);
  void *resources_ctx;
  int dv;                  /* head dimension of V and O; 0: same as d */
  /* Told of each point attn_space_build rules out, with the reason (NULL: not told). */
  void (*pruned)(void *ctx, const attn_spec *c, const char *why);
  void *pruned_ctx;
  /* 1: the backward's space (CPU flash, templates/flash_bwd.c): Br and Bc each on its own (FlashAttention-2 tunes
   * them apart from the forward's), admitted by attn_spec_check_backward; algos and the forward's constraints do not
   * apply. CUDA (templates/flash_bwd.cu): Br and Bc in 16..128, 2, 4 or 8 warps, 1 or 2 stages, admitted by
   * attn_spec_check_backward_cuda within fast_mem_bytes (shared memory per block) */
  int backward;
  /* CUDA backward: 1 admits each tile with dQ summed by fp32 atomics too (spec dq=atomic: no dQ blocks, faster, but
   * the sum's order, and so dQ's last bits, vary from run to run); 0 (the default) the deterministic kernels only.
   * Rows of dq=atomic points belong under a variant that no deterministic problem asks for. */
  int nondeterministic;
  /* The problem's score modifiers (attn_problem's window, softcap, alibi_slopes; 0: none): every point is the kernel
   * that applies them (spec window, softcap, alibi 1), admitted as such from the start (attn_spec_check refuses CUDA
   * split-KV and impl=wgmma with a window), so a --compiled probe compiles only those; window is the problem's w (as
   * attn_problem_normalize leaves it: one that hides no key is 0), which the model's estimates count the visited key
   * blocks of. A configuration whose flags are not these is not of the space. */
  int window;
  int softcap, alibi;      /* 1: on */
} attn_space_opts;

typedef struct attn_space {
  attn_space_opts o;
  attn_spec *cfg;          /* the admitted configurations, in grid order */
  int count;
  int considered;          /* grid points before the constraints */
  char pruned_example[256];/* why the first pruned point was pruned ("" when none was) */
} attn_space;

/* 0 when (d, d_v) are head dimensions the target's templates take (CPU: each in 1..ATTN_MAX_D; CUDA: d a multiple of
 * 16 in 16..256 and d_v = d); -1 with a one-line reason otherwise. dv 0 means d_v = d. */
int attn_space_dims_ok(attn_target t, int d, int dv, char *why, size_t len);

/* Builds the space; ATTN_OK even when it is empty (count 0, with pruned_example saying why). */
int  attn_space_build(const attn_space_opts *o, attn_space *out, char *err, size_t errlen);
void attn_space_free(attn_space *s);

/* 0 when a configuration satisfies the constraints of o; -1 with a one-line reason otherwise. Used for the grid
 * and for configurations a strategy makes up. */
int attn_space_admit(const attn_space_opts *o, const attn_spec *c, char *why, size_t len);

/* Index of c in the space, or -1. */
int attn_space_find(const attn_space *s, const attn_spec *c);

/* Configurations one step away from cfg[idx]: the same in every tunable but one, which moves to the next value
 * up or down among those in the space. Writes up to max indices; returns how many. */
int attn_space_neighbours(const attn_space *s, int idx, int *out, int max);

/* Fast-memory bytes a configuration needs (flash (Br + Bc)(d + d_v) + Br Bc floats on the CPU; on CUDA the dynamic
 * shared memory of templates/kernel_abi_cuda.h); shared by the constraints and the performance model. */
double attn_space_fast_bytes(const attn_spec *c);

/* Per-thread registers of a CUDA configuration, estimated without compiling it (space.c says how). */
double attn_cuda_regs_estimate(const attn_spec *c);

/* One core's L2 in bytes from /sys (the smallest unified level-2 cache of cpu0), or 1 MiB when unknown. */
double attn_cpu_l2_bytes(void);
/* Vector registers and the vector width in floats the kernels get on this CPU with -march=native for head
 * dimension d (as templates/flash.c picks them: AVX-512 32 x 16, AVX/AVX2 16 x 8, otherwise 16 x 4). */
void attn_cpu_vectors(int d, int *regs, int *width);
/* The last-level cache in bytes (for sizing rotating input buffers), or 32 MiB when unknown. */
double attn_cpu_llc_bytes(void);

/* Tunables by name, for the Lua host and the neighbourhood: "algo", "br", "bc", "unroll", "warps", "stages",
 * "tile", "feature", "degree", "rank", "split" (0: no split; set maps 1 to 0, the same kernel). */
#define ATTN_SPACE_NPARAMS 11
extern const char *const attn_space_param_names[ATTN_SPACE_NPARAMS];
int  attn_space_param_get(const attn_spec *c, int i);
void attn_space_param_set(attn_spec *c, int i, int v);

#endif
