/* bench_ceiling.c: bench's ceilings: sgemm rate, FMA peak and read bandwidth, each row's fraction of them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"
#include "measure.h"
#ifdef ATTN_HAVE_OPENBLAS
#include <cblas.h>
#endif

#define BENCH_PEAK_CAP_S 2.0  /* at most this much timed running per ceiling (FMA variant, bandwidth) */

#ifdef ATTN_HAVE_OPENBLAS
typedef struct sgemm_job {
  const float *a, *b;
  float *c;
  int m;
} sgemm_job;

static int sgemm_run(void *user, int side, int timed, double *ms, double *delay) {
  (void)side, (void)timed;
  const sgemm_job *j = user;
  double t0 = bench_now_s();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, j->m, j->m, j->m, 1.0f, j->a, j->m, j->b, j->m, 0.0f, j->c,
              j->m);
  *ms = (bench_now_s() - t0) * 1e3;
  *delay = -1; /* OpenBLAS's threads are not probed: the wall median */
  return 0;
}

/* GFLOP/s of a square sgemm of side m (the rounds of timing.h: a warm-up, then the median of 3); cached per side. */
double attn_bench_sgemm_rate(int m) {
  static int cached_m;
  static double cached;
  if (m == cached_m) return cached;
  size_t cnt = (size_t)m * m;
  float *a = malloc(cnt * sizeof *a), *b = malloc(cnt * sizeof *b), *c = malloc(cnt * sizeof *c);
  double rate = -1;
  if (a && b && c) {
    attn_fill_random(a, cnt, 11), attn_fill_random(b, cnt, 12);
    sgemm_job j = {a, b, c, m};
    attn_rounds_caps k = {.min_rounds = 3, .min_rounds_at_cap = 3, .cap_s = 0, .warmup = 1, .threads = 1};
    attn_timing_stats st;
    attn_rounds_out o;
    if (attn_rounds(&k, 1, sgemm_run, &j, &st, &o) == 0 && st.median_ms > 0)
      rate = 2.0 * m * (double)m * m / st.median_ms * 1e-6;
  }
  free(a), free(b), free(c);
  cached_m = m, cached = rate;
  return rate;
}
#endif

/* A row's fractions of this run's ceilings (peak.h). A fraction above 1 shows the ceiling was measured slower than
 * the machine runs (a slowdown the run delay does not show): flagged like one measured under load. */
static void finish_row(bench_row *row, const attn_peak *pk) {
  row->fma_peak_gflops = pk->fma_gflops, row->read_bw_gbs = pk->read_gbs, row->fma_isa = pk->fma_isa;
  const int fma = !strcmp(row->peak_kind, "fma");
  if (fma)
    row->peak_frac = pk->fma_gflops > 0 && row->plan_gflops > 0 ? row->plan_gflops / pk->fma_gflops : -1;
  else
    row->peak_frac = pk->read_gbs > 0 && row->kv_gbs > 0 ? row->kv_gbs / pk->read_gbs : -1;
  row->ceiling_under_load = (fma ? pk->fma_under_load : pk->read_under_load) || row->peak_frac > 1;
}

/* Timed running per ceiling: --time-cap, at most BENCH_PEAK_CAP_S. */
static double peak_cap(void) { return attn_bench_cap_s < BENCH_PEAK_CAP_S ? attn_bench_cap_s : BENCH_PEAK_CAP_S; }

/* The ceilings first, on the kernels' threads and before any point's buffers exist; not fatal: unknown ones show
 * as '-' and null. */
void attn_bench_ceilings(int threads, int reps, attn_peak *pk) {
  if (attn_peak_measure(threads, reps, peak_cap(), pk) != 0)
    fprintf(stderr, "attntune bench: the FMA peak or the read bandwidth could not be measured (out of memory)\n");
}

/* Each row's fractions; the ceilings measured again after the points when the first measurement was under load or
 * a row exceeds it (the rows are printed then): each ceiling is the highest clean measurement, else flagged.
 * Returns whether any row's ceiling stays flagged. */
int attn_bench_ceilings_again(int threads, int reps, attn_peak *pk, bench_row *all, int nall) {
  int again = pk->fma_under_load || pk->read_under_load;
  for (int r = 0; r < nall; r++) {
    finish_row(&all[r], pk);
    again |= all[r].ceiling_under_load;
  }
  if (again && nall > 0) {
    attn_peak later;
    if (attn_peak_measure(threads, reps, peak_cap(), &later) == 0) attn_peak_merge(pk, &later);
    for (int r = 0; r < nall; r++) finish_row(&all[r], pk);
  }
  int flagged = 0;
  for (int r = 0; r < nall; r++) flagged |= all[r].ceiling_under_load;
  return flagged;
}
