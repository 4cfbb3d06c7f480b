/* internal.h: libattn's insides, shared by the runtime's files, the tuner and the tests (never installed). */
#ifndef ATTN_INTERNAL_H
#define ATTN_INTERNAL_H

#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "attn.h"
#include "spec.h"
#include "db.h"
#include "kernel_abi.h"
#include "error.h"
#include "launch.h"

/* $ATTN_THREADS is clamped to min(4 x cores, this): OpenMP exits the process when it cannot start the threads. */
#define ATTN_THREADS_CAP 1024
/* Most rows (n, n_kv) of a problem: block counts (n + B - 1) / B are taken in int, with blocks B <= 1024. */
#define ATTN_MAX_ROWS (INT_MAX - 1024)

typedef struct attn_cuda attn_cuda;               /* CUDA context + loaded driver API (runtime/cuda.c) */
typedef struct attn_cpu_kernel attn_cpu_kernel;   /* a dlopen'ed CPU kernel (runtime/cpu.c) */
typedef struct attn_cuda_kernel attn_cuda_kernel; /* a loaded CUDA module + function (runtime/cuda.c) */

struct attn_runtime {
  attn_target target;      /* CPU or CUDA (AUTO resolved at open) */
  attn_db *db;             /* NULL when there is no database: plans use defaults */
  char db_path[4096];
  char cache_dir[4096];    /* compiled shared objects: $ATTN_CACHE_DIR or ~/.cache/attntune/so */
  /* cache_dir, cache_note: written only by attn_cache_dir_ready, under its lock, before cache_checked is set */
  atomic_int cache_checked; /* cache_dir passed the checks of artifact.h (or was replaced by a private one) */
  char cache_note[3200];   /* why cache_dir was replaced; "" when it was not */
  char device[256];        /* device name as stored in database rows */
  int threads;             /* CPU worker threads ($ATTN_THREADS or all cores, at most ATTN_THREADS_CAP) */
  char threads_note[160];  /* why $ATTN_THREADS was ignored or clamped; "" when used as given or unset */
  attn_cuda *cuda;         /* NULL on CPU */
  unsigned long long id;   /* attn_error_runtime_id: names the runtime in a thread's error record (error.c) */
  char note[1536];         /* attn_last_error(rt) after a successful open (bad $ATTN_THREADS, unused database) */
  atomic_int refs;         /* 1 for the handle until attn_close, + 1 per live plan; the last release frees */
  atomic_int closed;       /* set by attn_close: the handle is gone, its plans still run */
};

struct attn_plan {
  attn_runtime *rt;        /* holds a reference (refs): valid until the plan is destroyed, even after attn_close */
  attn_problem p;          /* normalised: n_kv, heads_kv, scale filled in */
  attn_spec spec;
  char describe[512];
  attn_cpu_kernel *cpu;
  attn_cuda_kernel *cuda;
  int backward;            /* attn_plan_create_backward's: spec's tiles, templates/flash_bwd.c's kernel */
  float *alibi;            /* the plan's copy of the ALiBi slopes (p.alibi_slopes points here); NULL without */
  /* CUDA flash: the varlen, paged and packed paged decode kernels (spec.layout 1, 2, 3), each loaded by the plan's
   * first call that needs it */
  _Atomic(attn_cuda_kernel *) serve[3];
  /* CUDA: the staging of their host tables (attn_cuda_tables), made by the first such call */
  _Atomic(struct attn_cuda_tables *) serve_tables;
  /* CPU flash: the paged kernel (spec.layout 2, runtime/paged.c), loaded by the plan's first attn_execute_paged
   * unless the plan's own kernel is it (a plan made for pages: p.page_size > 0) */
  _Atomic(attn_cpu_kernel *) cpu_paged;
  int count_io;            /* the plan's kernels are the counting builds */
};

/* Validates and normalises a problem (fills n_kv, heads_kv, scale; a window that hides nothing becomes 0);
 * ATTN_EINVAL with a reason otherwise. */
int attn_problem_normalize(attn_runtime *rt, const attn_problem *in, attn_problem *out);
/* The canonical variant text of a normalised problem's modifiers, the database key's variant: "window=128,
 * softcap=30,alibi" (those present, in that order; softcap the shortest decimal that reads back as the same float),
 * "" when dense. snprintf's return convention. */
int attn_problem_variant(const attn_problem *p, char *buf, size_t len);
/* 1 when a normalised problem has a score modifier (window, softcap or ALiBi). */
static inline int attn_problem_has_mods(const attn_problem *p) {
  return p->window > 0 || p->softcap > 0 || p->alibi_slopes != NULL;
}
/* Grouped-query attention on CUDA's dense flash kernel, K and V read once per KV head: q [batch][heads][n][d] is the
 * same memory as [batch][heads_kv][G·n][d] with G = heads/heads_kv (o and lse likewise), so the kernel launched with
 * heads' = heads_kv and n' = G·n takes a KV head's G query heads (each n rows, in order) as rows of its blocks. Valid
 * where a row's position does not matter: no causal mask (not causal, or n = 1, whose one row sees every key: the
 * plan then compiles the non-causal kernel), no window unless n = 1 (every packed row is then the one query at
 * n_kv - 1, which the launch tells the kernel: templates/flash.cu's FA_WPACK), no ALiBi (slopes per query head);
 * softcap is per score.
 * 1 when a launch of spec s for problem p (heads_kv 0: heads) runs so (runtime/cuda.c; tuner/model.c models it). */
static inline int attn_cuda_gqa_packs(const attn_problem *p, const attn_spec *s) {
  return s->target == ATTN_TARGET_CUDA && s->algo == ATTN_ALGO_FLASH && s->layout == 0 && (!s->window || p->n == 1) &&
         !s->alibi && p->heads_kv > 0 && p->heads > p->heads_kv && p->heads % p->heads_kv == 0 &&
         (!p->causal || p->n == 1) && (long long)p->n * (p->heads / p->heads_kv) <= ATTN_MAX_ROWS;
}
/* A causal CUDA flash plan with n = 1 (its row sees every key at the bottom right) builds the kernel without causal,
 * its spec keeping causal: the same kernel serves causal and non-causal decode, split-KV included. */
static inline int attn_cuda_decode_unmasked(const attn_problem *p, const attn_spec *s) {
  return s->target == ATTN_TARGET_CUDA && s->algo == ATTN_ALGO_FLASH && s->causal && p->causal && p->n == 1 &&
         !s->window && s->layout == 0;
}
/* The problem a CUDA launch of spec s for p (heads_kv filled) runs as: where attn_cuda_gqa_packs holds, a KV head's G
 * query heads as one head's G·n rows with no causal mask among them (heads' = heads_kv, n' = G·n); else p. 1 when
 * packed. The launch (runtime/cuda.c), the untuned split, the tuner's space and its models all take it from here. */
static inline int attn_cuda_launch_problem(const attn_problem *p, const attn_spec *s, attn_problem *out) {
  *out = *p;
  if (!attn_cuda_gqa_packs(p, s)) return 0;
  out->n = p->n * (p->heads / p->heads_kv);
  out->heads = p->heads_kv;
  out->causal = 0;
  return 1;
}
/* The query blocks (work items before any split) of that launch: gen/launch.c's geometry over the launch problem's
 * batch x heads' heads of n' rows; -1 when it is beyond one launch. */
static inline long long attn_cuda_query_blocks(const attn_problem *p, const attn_spec *s) {
  attn_problem lp;
  attn_spec t = *s;
  t.split = 0;
  attn_cuda_launch_problem(p, &t, &lp);
  attn_cuda_geom g;
  char err[256];
  return attn_cuda_geometry(&t, (long long)lp.batch * lp.heads, lp.n, lp.n_kv, 0, &g, err, sizeof err) == ATTN_OK
             ? g.items
             : -1;
}
/* The work items of a CPU flash call before any split: templates/flash.c packs a KV head's G query heads into one
 * block when n < Br (its fl_packed: batch x heads_kv x ceil(G·n / Br)), else batch x heads x ceil(n / Br). */
static inline long attn_cpu_query_blocks(const attn_problem *p, const attn_spec *s) {
  const long hkv = p->heads_kv > 0 ? p->heads_kv : p->heads, group = p->heads / hkv;
  return p->n < s->br && group > 1 ? (long)p->batch * hkv * (((long)p->n * group + s->br - 1) / s->br)
                                   : (long)p->batch * p->heads * (((long)p->n + s->br - 1) / s->br);
}
/* A CPU kernel's arguments for problem p on q, k, v and o: its sizes, scale and score modifiers, the rest zero (lse,
 * partials and the backward's arrays are the caller's to set). */
static inline attn_kargs attn_problem_kargs(const attn_problem *p, const void *q, const void *k, const void *v,
                                            void *o) {
  attn_kargs a = {.q = q, .k = k, .v = v, .o = o, .batch = p->batch, .heads = p->heads, .heads_kv = p->heads_kv,
                  .n = p->n, .n_kv = p->n_kv, .scale = p->scale, .window = p->window, .softcap = p->softcap,
                  .alibi = p->alibi_slopes};
  return a;
}

/* The configuration attn_plan_create uses for a normalised problem, without compiling it: the stored row (tuned or
 * model, nearest problem) or the default, and its origin for describe ("tuned", "tuned at n=4096 n_kv=4096: nearest
 * stored shape", "default: no decode row ...", ...).
 * ATTN_EUNSUPPORTED for lowrank asked with tolerance <= 0. */
int attn_plan_choose(attn_runtime *rt, const attn_problem *p, attn_spec *s, char *origin, size_t olen);

/* The untuned default configuration of a normalised problem for algo (AUTO and LOWRANK: flash), as attn_plan_choose
 * uses it when no row fits: the template's default tiles, and split-K where query blocks leave threads idle (CUDA:
 * decode's split-KV where they leave the device's SMs idle). */
void attn_plan_default(const attn_runtime *rt, const attn_problem *p, attn_algo algo, attn_spec *s);

/* A plan with an explicit spec (the tuner's entry point); origin is "tuned", "default", ... for describe. */
int attn_plan_create_spec(attn_runtime *rt, const attn_problem *p, const attn_spec *s, int count_io,
                          const char *origin, attn_plan **out);
/* The backward's: a plan of attn_execute_backward with the spec's tiles (attn_spec_check_backward's specs); describe
 * says "<spec> backward (<origin>)". */
int attn_plan_create_backward_spec(attn_runtime *rt, const attn_problem *p, const attn_spec *s, int count_io,
                                   const char *origin, attn_plan **out);

/* The device name the runtime files rows under for its target. */
int attn_device_name(attn_target t, char *buf, size_t len);

/* CPU backend (runtime/cpu.c, runtime/cc.c). A compile that failed for the environment's sake (the compiler could
 * not be started or was killed) says ATTN_CC_ENV_MARK in its ATTN_ECOMPILE message: the tuner retries those. */
#define ATTN_CC_ENV_MARK "[environment]"
int  attn_cpu_load(attn_runtime *rt, const attn_spec *s, int count_io, attn_cpu_kernel **out);
int  attn_cpu_run(attn_runtime *rt, const attn_cpu_kernel *k, const attn_kargs *a, attn_io *io);
void attn_cpu_unload(attn_cpu_kernel *k);
/* The backward kernel of a CPU flash spec (attn_spec_source_backward). */
int  attn_cpu_load_backward(attn_runtime *rt, const attn_spec *s, int count_io, attn_cpu_kernel **out);
/* 1 when a CPU forward plan's own kernel (plan->cpu) is flash's paged kernel (spec.layout 2): a plan made for pages
 * (p.page_size > 0) or given a layout=2 spec. Other CPU flash plans load it on their first paged call. */
static inline int attn_cpu_plan_paged(const attn_problem *p, const attn_spec *s) {
  return s->target == ATTN_TARGET_CPU && s->algo == ATTN_ALGO_FLASH && (s->layout == 2 || p->page_size > 0);
}
/* 1 when the last attn_cpu_load found a compiled object in the cache instead of compiling. */
int  attn_cpu_was_cached(const attn_cpu_kernel *k);

/* CUDA backend (runtime/cuda.c, runtime/nvrtc.c). attn_cuda_open: ATTN_ENODEV when no driver or device, other
 * codes for a broken driver or an unusable device (attn.h, attn_open). */
int  attn_cuda_open(attn_runtime *rt, attn_cuda **out);
void attn_cuda_close(attn_cuda *c);
/* Compiles (or finds in the cache directory or the database's artifacts) and loads s for the device's arch. */
int  attn_cuda_load(attn_runtime *rt, const attn_spec *s, int count_io, attn_cuda_kernel **out);
/* One launch on device pointers, synchronous. io (counting builds): entries moved; ms: kernel time by CUDA events.
 * Either may be NULL. */
int  attn_cuda_run(attn_runtime *rt, const attn_cuda_kernel *k, const attn_problem *p, const void *q, const void *kk,
                   const void *v, void *o, attn_io *io, double *ms);
/* attn_cuda_run's timing for other work: what queue(user, stream) queues on stream (a CUstream; NULL: the legacy
 * default stream), then the stream waited for ("<what> failed: ..." when that fails); ms (NULL: none): the time
 * between CUDA events recorded on stream before and after the queueing. The tuner's serving layouts' calls. */
int  attn_cuda_time_queued(attn_runtime *rt, void *stream, int (*queue)(void *user, void *stream), void *user,
                           const char *what, double *ms);
/* One launch queued on stream (a CUstream; NULL: the default stream), not waited for (attn_execute_async): scratch
 * is allocated and freed in the stream's order (cuMemAllocAsync); a driver or device without memory pools makes a
 * kernel that needs scratch wait for its launch instead. */
int  attn_cuda_launch(attn_runtime *rt, attn_cuda_kernel *k, const attn_problem *p, void *stream, const void *q,
                      const void *kk, const void *v, void *o);
void attn_cuda_unload(attn_cuda_kernel *k);
/* attn_cuda_run with lse written too (flash kernels only: ATTN_EUNSUPPORTED for the others). */
int  attn_cuda_run_lse(attn_runtime *rt, const attn_cuda_kernel *k, const attn_problem *p, const void *q,
                       const void *kk, const void *v, void *o, float *lse);
/* The flash backward (templates/flash_bwd.cu) for a normalised problem: its spec (gen/spec_bwd_cuda.h's tiles, the
 * device's arch) in *spec; and its run, waited for (delta scratch allocated per call). */
int  attn_cuda_load_backward(attn_runtime *rt, const attn_problem *p, attn_spec *spec, attn_cuda_kernel **out);
/* The backward module of a given spec (a tuned row): attn_spec_check_backward_cuda against the device, then loaded;
 * the spec it runs (the device's arch) in *used. */
int  attn_cuda_load_backward_spec(attn_runtime *rt, const attn_spec *s, attn_spec *used, attn_cuda_kernel **out);
int  attn_cuda_run_backward(attn_runtime *rt, const attn_cuda_kernel *k, const attn_problem *p, const void *q,
                            const void *kk, const void *v, const void *o, const float *lse, const void *dout,
                            void *dq, void *dk, void *dv);
/* attn_cuda_run_backward with its time: ms (NULL: none) between CUDA events recorded on the legacy default stream
 * before and after its launches (attn_cuda_time_queued's), as attn_cuda_run times the forward. */
int  attn_cuda_run_backward_timed(attn_runtime *rt, const attn_cuda_kernel *k, const attn_problem *p, const void *q,
                                  const void *kk, const void *v, const void *o, const float *lse, const void *dout,
                                  void *dq, void *dk, void *dv, double *ms);
/* The plan's ALiBi slopes (heads floats) copied to the device, where the kernel's launches read them: once, at plan
 * creation (NULL: none). */
int  attn_cuda_set_alibi(attn_runtime *rt, attn_cuda_kernel *k, const float *slopes, int heads);
/* Serving layouts (runtime/cuda_serve.c): attn_execute_varlen and attn_execute_paged of a CUDA plan (their checks,
 * then the layout's kernel reading the arrays in place), and the release of those kernels (attn_plan_destroy). */
/* The serving layouts' argument checks, shared by the CPU (varlen.c, paged.c) and CUDA (cuda_serve.c): ATTN_EINVAL
 * with one line, else the longest sequence in *longest. */
int  attn_varlen_check_cu(attn_runtime *rt, const char *what, const char *name, const int *cu, int batch, int most,
                          long *longest);
int  attn_paged_check_layout(const attn_plan *plan, const char *what, int num_pages, int page_size,
                             const int *block_table, int max_pages, const int *seq_lens_kv, long *longest);
/* stream: a CUstream (NULL: the legacy default stream); sync 1: waited for (attn_execute_varlen, attn_execute_paged),
 * 0: queued only (their _async forms). what: the public call's name for messages. */
int  attn_cuda_execute_varlen(const attn_plan *plan, void *stream, int sync, const char *what,
                              const int *cu_seqlens_q, const int *cu_seqlens_kv, const void *q, const void *k,
                              const void *v, void *o);
int  attn_cuda_execute_paged(const attn_plan *plan, void *stream, int sync, const char *what, const void *q,
                             const void *k_pages, const void *v_pages, int num_pages, int page_size,
                             const int *block_table, int max_pages, const int *seq_lens_kv, void *o);
void attn_cuda_serve_release(attn_plan *plan);
struct attn_cuda_kargs; /* templates/kernel_abi_cuda.h */
/* A plan's staging of the serving layouts' host tables (runtime/cuda.c): pinned host and device blocks, each reused
 * once the event recorded after its last launch has passed, so that a call reads its host arrays before it returns
 * and allocates nothing once the blocks exist. Made by the plan's first serving call, freed with the plan. */
typedef struct attn_cuda_tables attn_cuda_tables;
int  attn_cuda_tables_new(attn_runtime *rt, attn_cuda_tables **out);
void attn_cuda_tables_free(attn_cuda_tables *t);   /* waits for the blocks' launches; NULL is fine */
/* One launch of a layout's kernel on stream (a CUstream; NULL: the legacy default stream): p's sizes (n, n_kv: the
 * grid's), max_pages and page_size from lay; the nparts host int arrays parts[i] (count[i] ints) copied into a
 * staging block of t, their device addresses set at byte offsets fields[i] of the kernel's attn_cuda_kargs; the copy,
 * the launch and the block's event queued on stream in that order. sync: then the stream waited for. */
int  attn_cuda_launch_layout(attn_runtime *rt, attn_cuda_tables *t, attn_cuda_kernel *k, const attn_problem *p,
                             void *stream, int sync, const void *q, const void *kk, const void *v, void *o,
                             const struct attn_cuda_kargs *lay, const int *const *parts, const size_t *count,
                             const size_t *fields, int nparts, const char *what);
/* Compiles s into the caches without loading it (the tuner's parallel compiles); thread-safe with its own rt copy. */
int  attn_cuda_precompile(attn_runtime *rt, const attn_spec *s, int count_io);
int  attn_cuda_was_cached(const attn_cuda_kernel *k);
/* The spec as loaded: its arch is the device's. */
const attn_spec *attn_cuda_kernel_spec(const attn_cuda_kernel *k);
/* The spec table's name for a CUDA device name ("NVIDIA H100 80GB HBM3" -> "H100"); 0, or -1 and "cuda:<name>". */
int  attn_cuda_family(const char *device_name, char *out, size_t len);
typedef struct attn_cuda_info_t {
  char name[256], arch[16];
  int sms, smem_optin, l2_bytes;
} attn_cuda_info_t;
int  attn_cuda_info(const attn_runtime *rt, attn_cuda_info_t *info);
/* Device memory (pointers are CUdeviceptr values); to_device 1: host -> device. */
int  attn_cuda_alloc(attn_runtime *rt, size_t bytes, void **dptr);
void attn_cuda_free(attn_runtime *rt, void *dptr);
int  attn_cuda_copy(attn_runtime *rt, void *dst, const void *src, size_t bytes, int to_device);
/* NVRTC, loaded with dlopen: source → cubin for arch ("sm_80"). ATTN_ENODEV when libnvrtc is absent (the log
 * says why), ATTN_ECOMPILE with the log. *cubin and *log malloc'd (caller frees; either may be NULL on return).
 * A successful compile's log holds ptxas's resource report (read it with attn_nvrtc_resources). */
int  attn_nvrtc_compile(const char *src, const char *name, const char *arch, void **cubin, size_t *len, char **log);
/* The PTX NVRTC generates for the virtual architecture of arch ("sm_90" -> compute_90), with the same options as
 * attn_nvrtc_compile: the kernel's instruction stream before ptxas, for counting its instructions. Same return
 * convention; *ptx is NUL-terminated. */
int  attn_nvrtc_ptx(const char *src, const char *name, const char *arch, char **ptx, char **log);
/* The PTX that attn_nvrtc_compile's own compile generates on the way to the cubin (the same NVRTC call); tests
 * compare it with attn_nvrtc_ptx's. ATTN_EUNSUPPORTED when this NVRTC does not keep it. */
int  attn_nvrtc_cubin_ptx(const char *src, const char *name, const char *arch, char **ptx, char **log);
/* NVRTC's version; ATTN_ENODEV with the reason when it cannot be loaded. */
int  attn_nvrtc_version(int *major, int *minor, char *why, size_t len);
typedef struct attn_cuda_resources {
  int registers;                    /* per thread; -1 when the log has no report for the entry */
  long smem_static, stack, spill_stores, spill_loads;   /* bytes */
} attn_cuda_resources;
/* Reads ptxas's report for one entry function from a compile log; 0, or -1 when the log has none. */
int  attn_nvrtc_resources(const char *log, const char *entry, attn_cuda_resources *out);

/* Runs a plan on host fp32 arrays (the problem's layout) whatever its target: on CUDA the inputs are converted to the
 * plan's dtype, copied to the device and the output back (rounded through the dtype). io: the counting build's
 * transfers; ms: the kernel's time (CUDA events on a GPU, wall clock on the CPU). Either may be NULL. */
int attn_plan_run_f32(const attn_plan *plan, const float *q, const float *k, const float *v, float *o, attn_io *io,
                      double *ms);

/* count floats into dtype t's elements at dst (a copy for f32; round to nearest even for f16, bf16), and back. */
void   attn_to_dtype(attn_dtype t, const float *x, size_t count, void *dst);
void   attn_from_dtype(attn_dtype t, const void *src, size_t count, float *x);
/* x rounded to dtype t and back (no-op for f32): the inputs a half-precision plan really sees, for the reference. */
void   attn_round_dtype(attn_dtype t, float *x, size_t count);

/* Checking (runtime/reference.c): fp64 reference on a normalised problem, inputs f32 in the problem's layout, with
 * attn.h's definitions of the mask and the score modifiers. */
void   attn_reference(const attn_problem *p, const float *q, const float *k, const float *v, double *o);
/* The keys query row i sees: [*lo, *hi) (empty when *hi <= *lo), from causal and window (attn.h). */
void   attn_visible_keys(const attn_problem *p, long i, long *lo, long *hi);
/* A scaled score s of query head h, row i, key j after softcap and ALiBi (attn.h's order), in fp64. */
double attn_score_mod(const attn_problem *p, double s, long h, long i, long j);
/* fp64 backward of the same problem from the definition: P = softmax(S) over the keys a row sees, dV = Pᵀ dO,
 * dP = dO Vᵀ, dS = P∘(dP − rowsum(dO∘O)), dQ = scale·dS K, dK = scale·dSᵀ Q (GQA: dK, dV summed over the query heads
 * of a KV head). o: the forward output the kernel is given (the problem's layout), or NULL for the fp64 forward's.
 * The window, softcap and ALiBi as attn_reference applies them; softcap c multiplies dS by 1 − tanh²(s/c). */
void   attn_reference_backward(const attn_problem *p, const float *q, const float *k, const float *v, const float *o,
                               const float *dout, double *dq, double *dk, double *dv);
/* The same two on up to `threads` threads (the runtime's: rt->threads), bit for bit the single-threaded result: the
 * forward splits by head and row block; the backward by KV head, or, with at least twice as many threads as
 * batch x heads_kv, in two passes (row blocks: dQ; key blocks: dK, dV; about 1.4x the work). A thread that cannot be
 * started leaves its share to the others; out of memory gives NaN (o, dq) as above. */
void   attn_reference_threads(const attn_problem *p, int threads, const float *q, const float *k, const float *v,
                              double *o);
void   attn_reference_backward_threads(const attn_problem *p, int threads, const float *q, const float *k,
                                       const float *v, const float *o, const float *dout, double *dq, double *dk,
                                       double *dv);
/* lowrank's approximation (templates/lowrank.c, spec s: its features, rank and seed) in fp64: o as the kernel's
 * O_i = sum_j a_ij v_j / sum_j a_ij with a_ij = phi(q_i).phi(k_j) over the keys row i sees (0 for none); and, when dq
 * is not NULL, the gradients of L = sum(dout ∘ O) in q, k and v (GQA: dk, dv summed over the query heads), the
 * definition templates/lowrank_bwd.c computes. ATTN_OK, or ATTN_ENOMEM. */
int    attn_reference_lowrank(const attn_problem *p, const attn_spec *s, const float *q, const float *k, const float *v,
                              const float *dout, double *o, double *dq, double *dk, double *dv);
/* ||out - ref||_F / ||ref||_F; INFINITY when out holds a NaN or Inf. */
double attn_rel_error(const double *ref, const float *out, size_t count);
/* Fresh uniform(-1, 1) values from a seed (xoshiro-style; reproducible per seed). */
void   attn_fill_random(float *x, size_t count, unsigned long long seed);
/* Poison: fills with NaN so unwritten outputs are caught. */
void   attn_poison(float *x, size_t count);

/* Half-precision conversions for host-side data (runtime/half.c), round to nearest even. */
unsigned short attn_f32_to_f16(float x);
float          attn_f16_to_f32(unsigned short h);
unsigned short attn_f32_to_bf16(float x);
float          attn_bf16_to_f32(unsigned short h);

#endif
