/* measure.h: the one timing harness of tune, bench's tuned side and Lua's tune.evaluate. One measurement of one
 * configuration on one problem (on the CPU, or on the CUDA device present): compile (through the runtime), check
 * against the fp64 reference on fresh random inputs with a poisoned output, time (warm-up, then repetitions rotating
 * among input buffers that together exceed the last-level cache until the median is known within a few percent or a
 * time cap is spent; statistics in timing.h), and count I/O with the counting build. The finalist round re-times a
 * few configurations interleaved, round after round, in one process. Never fatal: every failure becomes a status
 * with a message. */
#ifndef ATTN_MEASURE_H
#define ATTN_MEASURE_H

#include <stddef.h>
#include "internal.h"
#include "timing.h"

typedef struct attn_meas_ctx {
  attn_runtime *rt;
  attn_problem p;              /* normalised */
  int reps;                    /* minimum timed repetitions */
  double rel_tol;              /* stop once the median's 95% interval is within this fraction of it */
  double cap_s;                /* ... or after this much timed running per configuration */
  double load;                 /* other processes' CPU use (cores) over the latest window of >= 0.25 s; -1 unknown */
  double load_t0;              /* that window's start */
  attn_load_probe load_probe;
  size_t q_count, kv_count, o_count, set_count; /* elements per tensor (kv_count: K), per input set (q, k, v) */
  size_t v_count;              /* elements of V: n_kv x d_v per head (d_v may differ from d) */
  float *arena;                /* fp32 input sets, set 0 is the checked one (a half dtype: set 0 only, rounded
                                * through the dtype, so that the reference sees the inputs the kernel sees) */
  int sets, next_set;
  float *out;                  /* fp32 output of the checked run */
  /* The timed CPU runs' inputs and output in the kernel's dtype: arena and out themselves for f32; for f16/bf16
   * every set converted once (set 0 from the rounded fp32 set) */
  void *karena, *kout;
  double *ref;                 /* fp64 reference for set 0 (the checked rows), made on first use */
  int check_rows;              /* the last check_rows query rows of each head are checked (all when n is small) */
  float *check_out;            /* those rows of the output, gathered */
  /* CUDA: input sets in the problem's dtype on the device, rotated past the L2 cache, and the output */
  void *dev_arena, *dev_out;
  int dev_sets, dev_next;
  size_t dev_set_bytes;
  void (*sleep_s)(double seconds); /* the load gate's waits; NULL: nanosleep (tests pass a fake clock) */
  /* tests: a fake measurement source in place of the timed runs of the plans (which are still made and checked) */
  attn_rounds_run run_hook;
  void *run_hook_user;
  /* 1: the backward pass (attn_execute_backward's kernel of each spec, checked against attn_reference_backward; set
   * before the first measurement); its inputs are measure_bwd.c's */
  int backward;
  struct attn_meas_bwd *bwd;
  /* Serving layouts (p.page_size > 0: attn_execute_paged; p.varlen: attn_execute_varlen), measure_serve.c: each
   * sequence's queries and keys (p.batch of each; NULL: every sequence n and n_kv), set before the first measurement
   * and kept by the caller; serve holds their input sets */
  const int *serve_lq, *serve_lk;
  struct attn_meas_serve *serve;
} attn_meas_ctx;

typedef struct attn_meas_result {
  char status[16];             /* "ok" | "wrong" | "compile_error" | "invalid" | "error" (environmental: retried) */
  double time_ms;              /* the median (timing.h); 0 unless ok/wrong */
  double iqr_ms, ci_rel;       /* its spread and the relative half-width of its 95% interval */
  int reps, clean;             /* timed repetitions, and those no other process delayed */
  double load;                 /* other processes' CPU use meanwhile, in cores; -1 unknown */
  const char *method;          /* how the median was taken: "clean", "corrected", "wall", "events" (CUDA) */
  double error;                /* relative Frobenius error vs fp64 (INFINITY: NaN/Inf in the output) */
  unsigned long long reads, writes; /* entries, from the counting build */
  int have_io;
  double stolen;               /* the threads' share of time spent waiting for a CPU meanwhile; -1 unknown */
  int attempts, worthless;     /* the rounds' attempts (the load gate, timing.h), and whether the kept one was
                                * worthless too */
  char message[4096];          /* one line, or the compiler's log for compile_error */
} attn_meas_result;

#define ATTN_MEAS_MIN_REPS 5
/* The input sets rotated between runs hold this many times the last-level cache: at 1.25x, a memory-bound decode
 * kernel (n = 1, n_kv = 8192) still found part of its inputs in a 32 MiB victim L3 and ran 0.23 or 0.6 ms depending
 * on which other kernels shared the rotation. */
#define ATTN_MEAS_COLD_FACTOR 3.0
#define ATTN_MEAS_REL_TOL 0.02
/* The load gate of the finalist round and the confirmation (timing.h): attempts run again after 0.5, 1, 2 s */
#define ATTN_MEAS_RETRIES 3
#define ATTN_MEAS_RETRY_WAIT_S 0.5
#define ATTN_MEAS_CAP_S 1.0        /* per configuration while screening (tune --time-cap; the finalist round 4x) */

/* How many input sets of set_bytes each to rotate so that, between two uses of one, the others hold
 * ATTN_MEAS_COLD_FACTOR times the last-level cache (at least 2; at most 1 GiB of them). tune and bench alike. */
int attn_meas_cold_sets(double set_bytes);

/* reps <= 0: ATTN_MEAS_MIN_REPS. ATTN_OK, or an error code with err (out of memory, problem invalid for the runtime). */
int  attn_meas_init(attn_meas_ctx *c, attn_runtime *rt, const attn_problem *p, int reps, char *err, size_t errlen);
void attn_meas_free(attn_meas_ctx *c);

/* Largest relative error an exact algorithm may show in a dtype before it is recorded as wrong. */
double attn_meas_exact_tolerance(attn_dtype t);

/* Measures s on the context's problem into *r (status and message always set). */
void attn_measure(attn_meas_ctx *c, const attn_spec *s, attn_meas_result *r);

/* The finalist round: the configurations (each measured and ok before) re-timed interleaved, one run of each per
 * round in a rotating order, for at least the context's minimum repetitions (three for runs over 2 s) and then until
 * every median is known within rel_tol or cap_s is spent (attn_meas_final_caps); an attempt the load made worthless
 * is run again after a wait (timing.h's gate). out[i] gets status and the timing fields (error and I/O are the
 * caller's from the earlier measurement). ATTN_OK, or an error code when no timing could be made (out[i].status says
 * which failed). */
int attn_meas_finalists(attn_meas_ctx *c, const attn_spec *specs, int count, double cap_s, attn_meas_result *out);

/* The rounds' parameters (timing.h) of screening one configuration, and of the finalist round and the
 * confirmation with their cap. */
void attn_meas_screen_caps(const attn_meas_ctx *c, attn_rounds_caps *k);
void attn_meas_final_caps(const attn_meas_ctx *c, double cap_s, attn_rounds_caps *k);

/* Whether a finalist row (round_ms, its relative 95% half-width round_ci_rel; < 0 unknown) takes the confirmation
 * pass's figure: a lower one always (interference only adds time), a higher one when it is beyond both estimates'
 * noise (at least ATTN_MEAS_REL_TOL) and the load did not make the confirmation worthless. */
int attn_meas_confirm_keeps(double round_ms, double round_ci_rel, const attn_meas_result *conf);

/* measure_bwd.c: the backward's input sets (q, k, v, dout and the forward's o and lse, made by the default forward
 * plan on set 0 and copied to the others, rotated like the forward's; on CUDA on the device), its outputs, and its
 * check: the largest relative error of dq, dk and dv against the fp64 backward on set 0, the outputs poisoned
 * before. */
int  attn_meas_bwd_ensure(attn_meas_ctx *c, char *err, size_t errlen);
attn_kargs attn_meas_bwd_kargs(const attn_meas_ctx *c, int set); /* CPU: set's arrays */
void attn_meas_bwd_poison(attn_meas_ctx *c);
int  attn_meas_bwd_error(attn_meas_ctx *c, double *error, char *err, size_t errlen);
/* The checked run: the gradients poisoned, plan run on set 0 (CUDA: untimed, the gradients copied back), *error. */
int  attn_meas_bwd_check(attn_meas_ctx *c, const attn_plan *plan, double *error, char *err, size_t errlen);
/* A CUDA plan's timed run on set: attn_cuda_run_backward_timed, its launches between CUDA events, the time in *ms. */
int  attn_meas_bwd_time(attn_meas_ctx *c, const attn_plan *plan, int set, double *ms);
int  attn_meas_bwd_count(attn_meas_ctx *c, const attn_plan *counting, attn_io *io); /* counting build, set 0 */
void attn_meas_bwd_free(attn_meas_ctx *c);

/* measure_serve.c: the serving layouts' input sets (set 0's fp32 values kept for the reference; the rest made in the
 * kernel's dtype and layout: pages of p.page_size in shuffled order, or the packed varlen batch), a timed run of a
 * plan on one set, the checked run on set 0 (output poisoned; each sequence's rows, its last CHECK rows beyond 1024,
 * against the fp64 reference of that sequence alone) and the counting build on each sequence as the call runs it. */
int  attn_meas_serve_ensure(attn_meas_ctx *c, char *err, size_t errlen);
int  attn_meas_serve_run(attn_meas_ctx *c, const attn_plan *plan, int set);
/* A CUDA plan's timed run on set: its call between CUDA events (attn_cuda_time_queued), the time in *ms. */
int  attn_meas_serve_time(attn_meas_ctx *c, const attn_plan *plan, int set, double *ms);
int  attn_meas_serve_check(attn_meas_ctx *c, const attn_plan *plan, double *error, char *err, size_t errlen);
int  attn_meas_serve_count(attn_meas_ctx *c, const attn_plan *counting, attn_io *io);
void attn_meas_serve_free(attn_meas_ctx *c);
/* On CUDA (device sets, host tables, the output copied back for the check; no counting build): whether the layout's
 * kernel runs s's own tiles (cuda_serve.c builds it on flash.cu from them): ATTN_OK, or an error code with the reason
 * (impl=wgmma and other templates have no layout kernel; tiles flash.cu's layout refuses). ATTN_OK for a CPU spec. */
int  attn_meas_serve_spec(const attn_meas_ctx *c, const attn_spec *s, char *err, size_t errlen);

/* Compiles s (and its counting build) into the runtime's cache without running it, so that a later attn_measure
 * finds it compiled; safe to call from several threads at once (each uses its own runtime copy). */
int attn_meas_precompile(const attn_runtime *rt, const attn_spec *s);

#endif
