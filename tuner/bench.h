/* bench.h: what the parts of `attntune bench` share (rows, settings from the arguments, each part's calls). */
#ifndef ATTN_BENCH_H
#define ATTN_BENCH_H
#include <stddef.h>
#include <time.h>
#include "attn.h"
#include "gpus.h"
#include "internal.h"
#include "peak.h"
#include "timing.h"
#include <jansson.h>

#define BENCH_MAX_SPLITS 16   /* --split values per point */
#define BENCH_ALIGN 64  /* the aligned runs' boundary: a cache line, an AVX-512 register */
#define BENCH_OFFSET 16 /* the other runs: Q, K, V and O this far past it, as glibc's malloc returns large blocks */

/* --time-cap: timed running per point beyond --reps rounds while a median is not yet known */
extern double attn_bench_cap_s;
/* --heads-kv: KV heads of the CPU points (0: as many as query heads) */
extern int attn_bench_heads_kv;

typedef struct bench_row {
  int n, n_kv, d, heads, causal, split;
  int d_v;                 /* head dimension of V and O */
  int heads_kv;            /* KV heads (grouped-query attention: fewer than heads) */
  attn_dtype dtype;        /* the plan's; the baseline computes in fp32 on the same rounded inputs */
  char plan[512], def[512];
  double plan_ms, plan_gflops, blas_ms, blas_gflops, ratio, sgemm_gflops, plan_peak_mib, blas_peak_mib;
  double default_ms, vs_default, plan_iqr_ms, load; /* the untuned default, timed in the same rounds */
  double fma_peak_gflops, read_bw_gbs;                /* this run's ceilings (peak.h); -1 unknown */
  double kv_gbs;                                      /* bytes of K and V over the plan's time */
  double peak_frac;                                   /* plan_gflops / fma peak, or (decode) kv_gbs / read bw */
  const char *fma_isa, *peak_kind;                    /* peak_kind: "fma" (prefill) or "read_bw" (decode) */
  int rounds;
  double rel_error, ref_error;
  const char *blas_note; /* why the baseline did not run, or NULL */
  double plan_ms_misaligned; /* the plan with Q, K, V and O each 16 bytes past a 64-byte boundary (plan_ms: aligned) */
  int ceiling_under_load;    /* the ceiling of peak_kind had no clean measurement (peak.h) */
  const char *database;      /* the database the runtime read, or NULL: none (untuned defaults) */
  /* --pass bwd (bench_bwd.c): plan_* are the backward's (GFLOP/s count 2.5x the forward's flops), blas_* the
   * standard backward on OpenBLAS from a materialised P */
  int bwd;
  double fwd_ms, bwd_vs_fwd;  /* the forward plan (attn_execute_lse) timed in the same rounds; bwd ms / fwd ms */
  double torch_ms, vs_torch;  /* PyTorch's CPU SDPA backward on the same shape and threads; torch ms / plan ms */
  const char *torch_note;     /* why PyTorch did not run, or NULL */
  char torch_version[32];
} bench_row;

static inline double bench_now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* bench_cpu.c */
double attn_bench_ref_error(const attn_problem *p, const float *q, const float *k, const float *v, const float *o);
void attn_bench_caps(int reps, int threads, attn_rounds_caps *k);
int attn_bench_point(attn_runtime *rt, int n, int n_kv, int d, int dv, attn_dtype dt, int heads, int causal,
                     int reps, int no_blas, const int *splits, int nsplit, bench_row *rows, int *nrows);
/* bench_bwd.c: one backward point (--pass bwd) into *row; 0, or 1 after printing the reason */
int attn_bench_point_bwd(attn_runtime *rt, int n, int n_kv, int d, int dv, attn_dtype dt, int heads, int causal,
                         int reps, int no_blas, int no_torch, bench_row *row);
/* bench_serve.c (--serve): paged decode, varlen prefill and windowed prefill against the dense kernel, and PyTorch */
typedef struct bench_serve_args {
  int batch;          /* --batch: sequences (default 4) */
  int heads, heads_kv, causal, reps, no_torch;
  int page_size;      /* --page-size (default 16) */
  const int *windows; /* --window list (NULL: n/16, n/8, n/4) */
  int nwindows;
} bench_serve_args;
int attn_bench_serve(attn_runtime *rt, const attn_peak *pk, const bench_serve_args *a, const int *ns, int nn,
                     const int *nkvs, int nnkv, const int *ds, int nd, unsigned dtypes, int json);
/* bench_python.c: runs python3 on script (written to a private temporary file named for tag, removed afterwards,
 * after an import of sys, time, statistics, torch and torch.nn.functional as F that prints "skip torch not
 * importable: ..." and exits 0 when torch is missing) with args, stderr joined to stdout, handing each line of its
 * output to line(user, text); *status: python3's as pclose gives it, -1 when it did not start. -1 when the script
 * could not be written (nothing run), else 0. */
typedef void (*attn_bench_line_fn)(void *user, const char *text);
int attn_bench_python(const char *script, const char *tag, const char *args, attn_bench_line_fn line, void *user,
                      int *status);
/* bench_cuda.c */
int attn_bench_cuda(const char *db, const int *ns, int nn, const int *ds, int nd, int heads, int causal, int reps,
                    unsigned dtypes, int json);
/* bench_ceiling.c */
double attn_bench_sgemm_rate(int m);
void attn_bench_ceilings(int threads, int reps, attn_peak *pk);
int attn_bench_ceilings_again(int threads, int reps, attn_peak *pk, bench_row *all, int nall);
/* bench_report.c */
/* Relative Frobenius distance of a from ref (INFINITY for NaN; the absolute one when ref is 0): the agreement every
 * bench part reports between the plan and its baseline */
double attn_bench_rel_diff(const float *a, const float *ref, size_t cnt);
json_t *attn_bench_num_or_null(double x);
void attn_bench_fmt_num(char *buf, size_t len, const char *f, double x);
void attn_bench_print_database(const attn_runtime *rt);
int attn_bench_report(const attn_runtime *rt, const attn_peak *pk, const bench_row *all, int nall, int reps,
                      int causal, int flagged, int json);
/* --pass bwd's rows: their table or JSON (the forward's fields, "pass": "bwd" and the backward's own) */
int attn_bench_report_bwd(const attn_runtime *rt, const attn_peak *pk, const bench_row *all, int nall, int reps,
                          int causal, int flagged, int json);

#endif
