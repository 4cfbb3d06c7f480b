/* cmd_bench.c: `attntune bench`: the runtime's plan (tuned or default) against the standard three-pass attention
 * on OpenBLAS (S = Q K^T, row softmax, O = P V) on the same data, with medians of alternating runs, GFLOP/s, the
 * square-sgemm rate as the machine's ceiling, peak extra memory of each, and a cross-check of the outputs; the fp32
 * FMA peak and the read bandwidth measured in the same run (peak.c), and each result as a fraction of its ceiling. */
#include <errno.h>
#include <jansson.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "artifact.h"
#include "attn.h"
#include "cmds.h"
#include "gpus.h"
#include "internal.h"
#include "measure.h"
#include "peak.h"
#include "range.h"
#include "space.h"
#include "timing.h"
#include "timing_env.h"
#include <unistd.h>
#ifdef ATTN_HAVE_OPENBLAS
#include <cblas.h>
#endif

#define BENCH_FAIL_ERROR 1e-4 /* fp32 flash vs fp32 BLAS differ by ~1e-6; beyond this the kernel is wrong */
#define BENCH_MAX_SPLITS 16   /* --split values per point */
#define BENCH_CAP_S 20.0      /* default --time-cap: timed running per point beyond --reps rounds while a median is
                               * not yet known */
static double g_cap_s = BENCH_CAP_S;
/* --heads-kv: KV heads of the CPU points (0: as many as query heads) */
static int g_heads_kv;
#define BENCH_PEAK_CAP_S 2.0  /* at most this much timed running per ceiling (FMA variant, bandwidth) */

static const char bench_usage[] =
    "usage: attntune bench [--target cpu|cuda] --n RANGE --d RANGE [--heads H] [--causal] [--db PATH] [--reps R]\n"
    "                      [--dtype LIST] [--no-blas] [--json] [--n-kv RANGE] [--split LIST] [--time-cap S]\n"
    "                      [--dv RANGE] [--heads-kv HK]\n"
    "  RANGE: 64..256 (doubling), 64..256:32 (step), 64,80,128 (list)\n"
    "  --reps R: at least R interleaved rounds (default 5), more until every median is known within 2%, or\n"
    "  --time-cap S seconds of timed running per point are spent (default 20); the timing harness of `attntune\n"
    "  tune` (docs/tuning.md)\n"
    "  cpu: the plan against the untuned default and the standard algorithm on OpenBLAS (f32), on input sets\n"
    "       rotated through more than the last-level cache; vs def = default ms / plan ms; plan ms with Q, K, V\n"
    "       and O 64-byte aligned, +16B ms each 16 bytes past (what malloc returns for large blocks)\n"
    "       the fp32 FMA peak and the read bandwidth are measured first, on the kernels' threads; 'of peak':\n"
    "       prefill (n >= 64) plan GFLOP/s / FMA peak, decode (n < 64) K+V bytes per second / read bandwidth;\n"
    "       a ceiling measured under load is measured again after the points and, without a clean measurement,\n"
    "       flagged '*' (JSON ceiling_under_load)\n"
    "       the header names the database read (--db, else ATTN_DB, else the cache's), or says there was none:\n"
    "       then every plan is the untuned default (JSON database: null)\n"
    "       PyTorch's CPU attention is compared by scripts/torch_compare_cpu.py\n"
    "       --n-kv: keys per head (default n; every n with every n_kv)\n"
    "       --heads-kv: KV heads shared by the query heads (grouped-query attention; default --heads); decode's\n"
    "                bytes count K and V once per KV head\n"
    "       --dv: head dimension of V and O (default: d; every d with every d_v), d and d_v in 1..576\n"
    "       --dtype f32 (default), f16, bf16 or a list: a half dtype's plan runs on inputs converted once, the\n"
    "                baseline in fp32 on the same rounded inputs; outputs agree within 1e-2 (f32: 1e-4)\n"
    "       --split: the plan's configuration with each split-K value (1: none, up to 64), one row each, all timed in\n"
    "                alternation with the baseline\n"
    "  cuda: the plan (tuned or default) against the default flash kernel on device buffers, CUDA events, TFLOP/s\n"
    "        against the GPU's dense peak (--dtype f16 by default; f16,bf16,f32); PyTorch's attention is compared by\n"
    "        scripts/gpu/torch_compare.py\n";

static int usage(const char *fmt, const char *arg) {
  fprintf(stderr, "attntune bench: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, " (attntune bench --help)\n");
  return 2;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Process memory from /proc/self/status in KiB ("VmRSS", "VmHWM"); -1 when unreadable. */
static long status_kib(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long v = -1;
  size_t len = strlen(field);
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, field, len) && line[len] == ':') {
      v = strtol(line + len + 1, NULL, 10);
      break;
    }
  fclose(f);
  return v;
}

/* Peak-memory probe: returns freed heap to the system and resets the RSS high-water mark (Linux clear_refs 5), so
 * that VmHWM afterwards minus VmRSS now is the peak extra resident memory of what runs in between. */
static long mem_probe_start(void) {
  malloc_trim(0);
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (!f) return -1;
  int ok = fputs("5", f) >= 0;
  if (fclose(f) != 0 || !ok) return -1;
  return status_kib("VmRSS");
}

static double mem_probe_mib(long start_kib) {
  long hwm = status_kib("VmHWM");
  if (start_kib < 0 || hwm < 0) return -1;
  return hwm > start_kib ? (double)(hwm - start_kib) / 1024.0 : 0.0;
}

/* fp64 attention for one query row i of head (b, h): the independent check of both outputs. */
static void ref_row(const attn_problem *p, const float *q, const float *k, const float *v, long bh, long i,
                    double *s, double *out) {
  const long d = p->d, dv = p->d_v, n = p->n, nkv = p->n_kv;
  const long hk = (bh % p->heads) / (p->heads / p->heads_kv), b = bh / p->heads;
  const float *qi = q + (bh * n + i) * d, *kb = k + (b * p->heads_kv + hk) * nkv * d;
  const float *vb = v + (b * p->heads_kv + hk) * nkv * dv;
  const long last = p->causal ? i + nkv - n : nkv - 1;
  double mx = -INFINITY, l = 0;
  for (long c = 0; c < dv; c++) out[c] = 0;
  for (long j = 0; j <= last && j < nkv; j++) {
    double acc = 0;
    for (long c = 0; c < d; c++) acc += (double)qi[c] * kb[j * d + c];
    s[j] = acc * p->scale;
    if (s[j] > mx) mx = s[j];
  }
  for (long j = 0; j <= last && j < nkv; j++) {
    double e = exp(s[j] - mx);
    l += e;
    for (long c = 0; c < dv; c++) out[c] += e * vb[j * dv + c];
  }
  for (long c = 0; c < dv; c++) out[c] = l > 0 ? out[c] / l : 0.0;
}

/* Relative Frobenius error of o against the fp64 reference on up to 16 rows per head (first, last, spread). */
static double ref_error(const attn_problem *p, const float *q, const float *k, const float *v, const float *o) {
  double *s = malloc(sizeof(double) * ((size_t)p->n_kv + 1)), *r = malloc(sizeof(double) * (size_t)p->d_v);
  if (!s || !r) {
    free(s), free(r);
    return INFINITY;
  }
  double num = 0, den = 0;
  const long rows = p->n < 16 ? p->n : 16;
  for (long bh = 0; bh < (long)p->batch * p->heads; bh++)
    for (long t = 0; t < rows; t++) {
      long i = rows > 1 ? t * (p->n - 1) / (rows - 1) : 0;
      ref_row(p, q, k, v, bh, i, s, r);
      for (long c = 0; c < p->d_v; c++) {
        double e = o[(bh * p->n + i) * p->d_v + c] - r[c];
        num += e * e, den += r[c] * r[c];
      }
    }
  free(s), free(r);
  if (num != num) return INFINITY;
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

#ifdef ATTN_HAVE_OPENBLAS
static double rel_diff(const float *a, const float *ref, size_t cnt) {
  double num = 0, den = 0;
  for (size_t i = 0; i < cnt; i++) {
    double e = (double)a[i] - ref[i];
    num += e * e, den += (double)ref[i] * ref[i];
  }
  if (num != num) return INFINITY;
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* The standard algorithm, one head at a time: S = scale Q K^T (sgemm), causal mask, row softmax, O = P V (sgemm).
 * s holds n x n_kv floats. In fp32 whatever the plan's dtype: a half-precision plan is compared with it on the same
 * (rounded) inputs. */
static void blas_attention(const attn_problem *p, const float *q, const float *k, const float *v, float *o, float *s) {
  const long n = p->n, nkv = p->n_kv, d = p->d, dv = p->d_v, off = nkv - n;
  for (long bh = 0; bh < (long)p->batch * p->heads; bh++) {
    const long b = bh / p->heads, hk = (bh % p->heads) / (p->heads / p->heads_kv);
    const float *qh = q + bh * n * d, *kh = k + (b * p->heads_kv + hk) * nkv * d;
    const float *vh = v + (b * p->heads_kv + hk) * nkv * dv;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)nkv, (int)d, p->scale, qh, (int)d, kh, (int)d,
                0.0f, s, (int)nkv);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
      float *row = s + i * nkv;
      long vis = p->causal ? i + off + 1 : nkv; /* keys 0..vis-1 are visible */
      if (vis > nkv) vis = nkv;
      if (vis < 0) vis = 0;
      float mx = -INFINITY;
      for (long j = 0; j < vis; j++) mx = row[j] > mx ? row[j] : mx;
      float sum = 0;
      for (long j = 0; j < vis; j++) sum += (row[j] = expf(row[j] - mx));
      float inv = sum > 0 ? 1.0f / sum : 0.0f;
      for (long j = 0; j < vis; j++) row[j] *= inv;
      for (long j = vis; j < nkv; j++) row[j] = 0;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)dv, (int)nkv, 1.0f, s, (int)nkv, vh, (int)dv,
                0.0f, o + bh * n * dv, (int)dv);
  }
}

typedef struct sgemm_job {
  const float *a, *b;
  float *c;
  int m;
} sgemm_job;

static int sgemm_run(void *user, int side, int timed, double *ms, double *delay) {
  (void)side, (void)timed;
  const sgemm_job *j = user;
  double t0 = now_s();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, j->m, j->m, j->m, 1.0f, j->a, j->m, j->b, j->m, 0.0f, j->c,
              j->m);
  *ms = (now_s() - t0) * 1e3;
  *delay = -1; /* OpenBLAS's threads are not probed: the wall median */
  return 0;
}

/* GFLOP/s of a square sgemm of side m (the rounds of timing.h: a warm-up, then the median of 3); cached per side. */
static double sgemm_rate(int m) {
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
} bench_row;

static json_t *num_or_null(double x) { return x >= 0 && isfinite(x) ? json_real(x) : json_null(); }

static json_t *row_json(const bench_row *r) {
  json_t *o = json_object();
  json_object_set_new(o, "n", json_integer(r->n));
  json_object_set_new(o, "d", json_integer(r->d));
  json_object_set_new(o, "heads", json_integer(r->heads));
  json_object_set_new(o, "heads_kv", json_integer(r->heads_kv));
  json_object_set_new(o, "causal", json_boolean(r->causal));
  json_object_set_new(o, "plan", json_string(r->plan));
  json_object_set_new(o, "plan_ms", num_or_null(r->plan_ms));
  json_object_set_new(o, "plan_gflops", num_or_null(r->plan_gflops));
  json_object_set_new(o, "blas_ms", num_or_null(r->blas_ms));
  json_object_set_new(o, "blas_gflops", num_or_null(r->blas_gflops));
  json_object_set_new(o, "ratio", num_or_null(r->ratio));
  json_object_set_new(o, "sgemm_gflops", num_or_null(r->sgemm_gflops));
  json_object_set_new(o, "plan_peak_mib", num_or_null(r->plan_peak_mib));
  json_object_set_new(o, "blas_peak_mib", num_or_null(r->blas_peak_mib));
  /* rel_error: plan vs BLAS output when the baseline ran, else plan vs the fp64 reference rows */
  json_object_set_new(o, "rel_error", json_real(isfinite(r->rel_error) ? r->rel_error : 1e300));
  json_object_set_new(o, "ref_error", json_real(isfinite(r->ref_error) ? r->ref_error : 1e300));
  if (r->blas_note) json_object_set_new(o, "blas_note", json_string(r->blas_note));
  json_object_set_new(o, "n_kv", json_integer(r->n_kv));
  json_object_set_new(o, "split", json_integer(r->split)); /* key-range parts per query block; 1: none */
  json_object_set_new(o, "default", json_string(r->def));
  json_object_set_new(o, "default_ms", num_or_null(r->default_ms));
  json_object_set_new(o, "vs_default", num_or_null(r->vs_default)); /* default_ms / plan_ms */
  json_object_set_new(o, "plan_iqr_ms", num_or_null(r->plan_iqr_ms));
  json_object_set_new(o, "rounds", json_integer(r->rounds));
  json_object_set_new(o, "load", num_or_null(r->load));
  json_object_set_new(o, "fma_peak_gflops", num_or_null(r->fma_peak_gflops));
  json_object_set_new(o, "fma_isa", json_string(r->fma_isa ? r->fma_isa : ""));
  json_object_set_new(o, "read_bw_gbs", num_or_null(r->read_bw_gbs));
  json_object_set_new(o, "kv_gbs", num_or_null(r->kv_gbs));
  json_object_set_new(o, "peak_kind", json_string(r->peak_kind ? r->peak_kind : ""));
  json_object_set_new(o, "fraction_of_peak", num_or_null(r->peak_frac));
  json_object_set_new(o, "d_v", json_integer(r->d_v));
  json_object_set_new(o, "dtype", json_string(attn_dtype_name(r->dtype)));
  json_object_set_new(o, "plan_ms_misaligned", num_or_null(r->plan_ms_misaligned));
  json_object_set_new(o, "ceiling_under_load", json_boolean(r->ceiling_under_load));
  json_object_set_new(o, "database", r->database ? json_string(r->database) : json_null());
  return o;
}

static void fmt_num(char *buf, size_t len, const char *f, double x) {
  if (x >= 0 && isfinite(x))
    snprintf(buf, len, f, x);
  else
    snprintf(buf, len, "-");
}

static void row_text(const bench_row *r) {
  char pm[32], pg[32], bm[32], bg[32], ra[32], sg[32], pp[32], bp[32], dm[32], vd[32], pf[48], mm[32];
  fmt_num(pm, sizeof pm, "%.3f", r->plan_ms), fmt_num(pg, sizeof pg, "%.1f", r->plan_gflops);
  fmt_num(bm, sizeof bm, "%.3f", r->blas_ms), fmt_num(bg, sizeof bg, "%.1f", r->blas_gflops);
  fmt_num(ra, sizeof ra, "%.2fx", r->ratio), fmt_num(sg, sizeof sg, "%.1f", r->sgemm_gflops);
  fmt_num(pp, sizeof pp, "%.1f", r->plan_peak_mib), fmt_num(bp, sizeof bp, "%.1f", r->blas_peak_mib);
  fmt_num(dm, sizeof dm, "%.3f", r->default_ms), fmt_num(vd, sizeof vd, "%.3fx", r->vs_default);
  fmt_num(mm, sizeof mm, "%.3f", r->plan_ms_misaligned);
  char frac[32];
  fmt_num(frac, sizeof frac, "%.1f%%", 100 * r->peak_frac);
  /* '*': the ceiling was measured under load (footnote under the table) */
  snprintf(pf, sizeof pf, "%s %s%s", frac, !strcmp(r->peak_kind, "fma") ? "fma" : "bw",
           r->ceiling_under_load ? "*" : "");
  printf("%6d %6d %4d %5d %6s %10s %8s %10s %10s %10s %8s %7s %10s %8s %7s %9s %9s %9.1e  %s%s%s\n", r->n, r->n_kv,
         r->d, r->heads, r->causal ? "yes" : "no", pm, pg, pf, mm, dm, vd, sg, bm, bg, ra, pp, bp, r->rel_error,
         r->plan,
         r->blas_note ? "; blas: " : "", r->blas_note ? r->blas_note : "");
}

/* --split: the configuration the runtime would use for p (tuned or default) and its origin, so that each split
 * value varies that configuration only. */
static int base_spec(attn_runtime *rt, const attn_problem *p, attn_spec *s, char *origin, size_t len) {
  attn_problem np;
  char from[128];
  int e = attn_problem_normalize(rt, p, &np);
  if (e == ATTN_OK) e = attn_plan_choose(rt, &np, s, from, sizeof from);
  if (e != ATTN_OK) {
    fprintf(stderr, "attntune bench: n=%d n_kv=%d d=%d: %s: %s\n", p->n, p->n_kv, p->d, attn_strerror(e),
            attn_last_error(rt));
    return 1;
  }
  snprintf(origin, len, "%s, split from --split", from);
  return 0;
}

#define BENCH_ALIGN 64  /* the aligned runs' boundary: a cache line, an AVX-512 register */
#define BENCH_OFFSET 16 /* the other runs: Q, K, V and O this far past it, as glibc's malloc returns large blocks */

/* The plans' input sets in the kernel's dtype: each set's Q, K and V in slots that start on a BENCH_ALIGN boundary
 * with BENCH_ALIGN spare bytes (zeros: valid inputs), so that a run reads them aligned or BENCH_OFFSET past. */
typedef struct kslots {
  char *arena;
  size_t q, k, v, stride; /* slot bytes of each tensor, and of a set */
} kslots;

static size_t slot_bytes(size_t bytes) { return (bytes + 2 * BENCH_ALIGN - 1) / BENCH_ALIGN * BENCH_ALIGN; }

/* which: 0 Q, 1 K, 2 V */
static char *kslot(const kslots *ks, int set, int which, size_t off) {
  const size_t at = which == 0 ? 0 : which == 1 ? ks->q : ks->q + ks->k;
  return ks->arena + (size_t)set * ks->stride + at + off;
}

/* One set's fp32 Q, K, V (contiguous) converted into its slots at offset off. */
static void kslot_fill(const kslots *ks, int set, size_t off, attn_dtype dt, const float *x, size_t cnt, size_t kvcnt,
                       size_t vcnt) {
  attn_to_dtype(dt, x, cnt, kslot(ks, set, 0, off));
  attn_to_dtype(dt, x + cnt, kvcnt, kslot(ks, set, 1, off));
  attn_to_dtype(dt, x + cnt + kvcnt, vcnt, kslot(ks, set, 2, off));
}

/* The rounds' runs of a point (timing.h's attn_rounds): sides [0, nv) the plans aligned, [nv, 2 nv) the plans at
 * BENCH_OFFSET, 2 nv the default, 2 nv + 1 the baseline; each run on the next input set. */
typedef struct bench_runs {
  attn_plan **plans, *dplan;
  int nv, sets, n, n_kv, d;
  unsigned long long runs;
  const attn_problem *p;
  const kslots *ks;
  char *ko;                       /* the plans' output slot */
  const float *q, *extra;         /* fp32 sets for the baseline: set 0, then sets 1.. */
  size_t set_floats, cnt, kvcnt;
  float *ob, *s;                  /* the baseline's output and S */
  attn_sched_probe sp;
} bench_runs;

static int bench_run(void *user, int side, int timed, double *ms, double *delay) {
  (void)timed;
  bench_runs *b = user;
  const int set = (int)(b->runs++ % (unsigned long long)b->sets);
  double d0 = attn_sched_delay_ms(&b->sp), t0 = now_s();
  if (side <= 2 * b->nv) {
    const size_t off = side >= b->nv && side < 2 * b->nv ? BENCH_OFFSET : 0;
    attn_plan *pl = side < 2 * b->nv ? b->plans[side % b->nv] : b->dplan;
    int e = attn_execute(pl, kslot(b->ks, set, 0, off), kslot(b->ks, set, 1, off), kslot(b->ks, set, 2, off),
                         b->ko + off);
    if (e != ATTN_OK) {
      fprintf(stderr, "attntune bench: n=%d n_kv=%d d=%d: execute: %s: %s\n", b->n, b->n_kv, b->d, attn_strerror(e),
              attn_last_error(pl->rt));
      return 1;
    }
  } else {
#ifdef ATTN_HAVE_OPENBLAS
    const float *sq = set ? b->extra + (size_t)(set - 1) * b->set_floats : b->q;
    blas_attention(b->p, sq, sq + b->cnt, sq + b->cnt + b->kvcnt, b->ob, b->s);
#endif
  }
  *ms = (now_s() - t0) * 1e3;
  double d1 = attn_sched_delay_ms(&b->sp);
  *delay = d0 >= 0 && d1 >= 0 ? d1 - d0 : -1;
  return 0;
}

/* The rounds' parameters of a bench point (docs/tuning.md): at least reps rounds, the cap never cuts below them, the
 * load gate as the finalist round's (within half the cap). */
static void bench_caps(int reps, int threads, attn_rounds_caps *k) {
  memset(k, 0, sizeof *k);
  k->min_rounds = k->min_rounds_at_cap = reps;
  k->rel_tol = ATTN_MEAS_REL_TOL;
  k->cap_s = g_cap_s;
  k->wait_clean = 1;
  k->threads = threads;
  k->retries = ATTN_MEAS_RETRIES;
  k->retry_wait_s = ATTN_MEAS_RETRY_WAIT_S;
  k->retry_budget_s = g_cap_s / 2;
}

/* One (n, n_kv, d, d_v, dtype) point: one row per plan (rows[0 .. *nrows)). All plans (aligned and at BENCH_OFFSET),
 * the default and the baseline are timed in alternation, the order rotating each repetition. Returns 0, or 1 after
 * printing the reason. A half dtype: the fp32 inputs are rounded through it (the reference and the baseline see what
 * the plan reads), the plans run on copies in the dtype made once per input set, and their output is converted back
 * for the checks. The fractions of the ceilings are the caller's (finish_row). */
static int bench_point(attn_runtime *rt, int n, int n_kv, int d, int dv, attn_dtype dt, int heads, int causal,
                       int reps, int no_blas, const int *splits, int nsplit, bench_row *rows, int *nrows) {
  const int maxv = nsplit > 0 ? nsplit : 1;
  *nrows = 0;
  attn_problem p = {0};
  const int hkv = g_heads_kv > 0 ? g_heads_kv : heads;
  p.batch = 1, p.heads = heads, p.n = n, p.d = d, p.n_kv = n_kv, p.heads_kv = hkv, p.dtype = dt, p.d_v = dv;
  p.causal = causal, p.algo = ATTN_ALGO_AUTO;
  const int half = dt != ATTN_F32;
  const size_t es = attn_dtype_size(dt);
  const size_t cnt = (size_t)heads * n * d, kvcnt = (size_t)hkv * n_kv * d, vcnt = (size_t)hkv * n_kv * dv;
  const size_t ocnt = (size_t)heads * n * dv;
  const size_t set_floats = cnt + kvcnt + vcnt;
  /* set 0 in fp32 (q, k, v contiguous: the reference's and the baseline's) */
  float *q = malloc(set_floats * sizeof *q), *k = q ? q + cnt : NULL, *v = q ? q + cnt + kvcnt : NULL;
  float *o = malloc(ocnt * sizeof *o), *ob = NULL, *s = NULL;
  char *ko = aligned_alloc(BENCH_ALIGN, slot_bytes(ocnt * es));
  kslots ks = {.q = slot_bytes(cnt * es), .k = slot_bytes(kvcnt * es), .v = slot_bytes(vcnt * es)};
  ks.stride = ks.q + ks.k + ks.v;
  /* Input sets rotated through more than the last-level cache, as the tuner times (measure.c); one more slot set
   * holds set 0 at BENCH_OFFSET for the check at that alignment. */
  int sets = attn_meas_cold_sets(4.0 * (double)set_floats);
  ks.arena = aligned_alloc(BENCH_ALIGN, (size_t)(sets + 1) * ks.stride);
  if (!ks.arena) sets = 1, ks.arena = aligned_alloc(BENCH_ALIGN, 2 * ks.stride); /* not fatal: warm inputs then */
  attn_plan *plans[BENCH_MAX_SPLITS] = {0};
  int nv = 0;
  attn_plan *dplan = NULL;
  float *extra = NULL;
  attn_timing_stats *st = NULL;
  int rc = 1, e;
  for (int i = 0; i < maxv; i++) {
    bench_row *row = &rows[i];
    memset(row, 0, sizeof *row);
    row->n = n, row->n_kv = n_kv, row->d = d, row->heads = heads, row->causal = causal, row->d_v = dv, row->dtype = dt;
    row->heads_kv = hkv;
    row->blas_ms = row->blas_gflops = row->ratio = row->sgemm_gflops = row->blas_peak_mib = -1;
    row->peak_kind = n < ATTN_DB_DECODE_BELOW ? "read_bw" : "fma"; /* the database's decode/prefill line */
    row->kv_gbs = row->peak_frac = row->plan_ms_misaligned = -1;
    row->fma_peak_gflops = row->read_bw_gbs = -1;
    row->database = rt->db ? rt->db_path : NULL;
  }
  if (!q || !o || !ko || !ks.arena) {
    fprintf(stderr, "attntune bench: out of memory for n=%d n_kv=%d d=%d d_v=%d\n", n, n_kv, d, dv);
    goto done;
  }
  attn_fill_random(q, cnt, 1), attn_fill_random(k, kvcnt, 2), attn_fill_random(v, vcnt, 3);
  if (half) attn_round_dtype(dt, q, set_floats);
  memset(ks.arena, 0, (size_t)(sets + 1) * ks.stride);
  kslot_fill(&ks, 0, 0, dt, q, cnt, kvcnt, vcnt);
  kslot_fill(&ks, sets, BENCH_OFFSET, dt, q, cnt, kvcnt, vcnt);
  p.scale = 1.0f / sqrtf((float)d);

  attn_spec spec;
  char origin[256];
  if (nsplit > 0 && base_spec(rt, &p, &spec, origin, sizeof origin)) goto done;
  /* Each plan: creation and first run under the memory probe (inputs and output already resident), its output
   * poisoned first (an output the kernel never writes shows as NaN) and checked against fp64 rows; then once more on
   * set 0 at BENCH_OFFSET, checked too. */
  long m0;
  for (int i = 0; i < maxv; i++, nv++) {
    bench_row *row = &rows[i];
    for (int a = 0; a < 2; a++) {
      const size_t off = a ? BENCH_OFFSET : 0;
      const int set = a ? sets : 0;
      if (half) memset(ko + off, 0xff, ocnt * es); /* all-ones: NaN in f16 and bf16 */
      else for (size_t j = 0; j < ocnt; j++) ((float *)(void *)(ko + off))[j] = NAN;
      if (a == 0) {
        m0 = mem_probe_start();
        if (nsplit > 0) {
          spec.split = splits[i] > 1 ? splits[i] : 0;
          e = attn_plan_create_spec(rt, &p, &spec, 0, origin, &plans[i]);
        } else {
          e = attn_plan_create(rt, &p, &plans[i]);
        }
        if (e != ATTN_OK) {
          fprintf(stderr, "attntune bench: n=%d n_kv=%d d=%d%s: %s: %s\n", n, n_kv, d, nsplit ? " (--split)" : "",
                  attn_strerror(e), attn_last_error(rt));
          goto done;
        }
      }
      if ((e = attn_execute(plans[i], kslot(&ks, set, 0, off), kslot(&ks, set, 1, off), kslot(&ks, set, 2, off),
                            ko + off)) != ATTN_OK) {
        fprintf(stderr, "attntune bench: n=%d n_kv=%d d=%d: execute: %s: %s\n", n, n_kv, d, attn_strerror(e),
                attn_last_error(rt));
        goto done;
      }
      if (a == 0) row->plan_peak_mib = mem_probe_mib(m0);
      attn_from_dtype(dt, ko + off, ocnt, o);
      const double err = ref_error(&p, q, k, v, o);
      /* the worse of the two alignments */
      if (a == 0 || !(err <= row->ref_error)) row->ref_error = err;
    }
    snprintf(row->plan, sizeof row->plan, "%s", attn_plan_describe(plans[i]));
    row->split = plans[i]->spec.split > 1 ? plans[i]->spec.split : 1;
    row->rel_error = row->ref_error;
  }

  int blas = 0;
#ifdef ATTN_HAVE_OPENBLAS
  const double s_bytes = (double)n * n_kv * sizeof(float);
  const char *note = NULL;
  if (no_blas) {
    note = "skipped (--no-blas)";
  } else if (s_bytes > 16.0 * (1 << 30)) {
    note = "skipped: S would need more than 16 GiB";
  } else {
    m0 = mem_probe_start();
    ob = malloc(ocnt * sizeof *ob); /* the baseline's output is an output, not extra memory, but it is new here */
    s = malloc((size_t)n * n_kv * sizeof *s);
    if (!ob || !s) {
      note = "skipped: cannot allocate S";
    } else {
      blas_attention(&p, q, k, v, ob, s);
      double peak = mem_probe_mib(m0);
      if (peak >= 0) peak -= ocnt * sizeof(float) / 1048576.0;
      if (peak < 0 && m0 >= 0) peak = 0;
      for (int i = 0; i < nv; i++) {
        rows[i].blas_peak_mib = peak;
        if ((e = attn_execute(plans[i], kslot(&ks, 0, 0, 0), kslot(&ks, 0, 1, 0), kslot(&ks, 0, 2, 0), ko)) !=
            ATTN_OK) {
          fprintf(stderr, "attntune bench: n=%d n_kv=%d d=%d: execute: %s: %s\n", n, n_kv, d, attn_strerror(e),
                  attn_last_error(rt));
          goto done;
        }
        attn_from_dtype(dt, ko, ocnt, o);
        rows[i].rel_error = rel_diff(o, ob, ocnt);
      }
      blas = 1;
    }
  }
  for (int i = 0; i < nv; i++) rows[i].blas_note = note;
#else
  (void)no_blas;
  for (int i = 0; i < nv; i++) rows[i].blas_note = "unavailable: built without OpenBLAS";
#endif

  /* The untuned default, timed beside the plan: what tuning bought on this very run. */
  attn_problem np;
  attn_spec dspec;
  if ((e = attn_problem_normalize(rt, &p, &np)) != ATTN_OK) goto done;
  attn_plan_default(rt, &np, ATTN_ALGO_FLASH, &dspec);
  if ((e = attn_plan_create_spec(rt, &p, &dspec, 0, "default", &dplan)) != ATTN_OK ||
      (e = attn_execute(dplan, kslot(&ks, 0, 0, 0), kslot(&ks, 0, 1, 0), kslot(&ks, 0, 2, 0), ko)) != ATTN_OK) {
    fprintf(stderr, "attntune bench: n=%d n_kv=%d d=%d: the default: %s: %s\n", n, n_kv, d, attn_strerror(e),
            attn_last_error(rt));
    goto done;
  }
  /* The rotated sets 1.., in fp32 for the baseline and converted once into the plans' slots: the timed runs never
   * pay for a conversion. */
  if (sets > 1 && !(extra = malloc((size_t)(sets - 1) * set_floats * sizeof *extra))) sets = 1;
  for (int i = 0; i + 1 < sets; i++) {
    float *x = extra + (size_t)i * set_floats;
    attn_fill_random(x, set_floats, 100 + (unsigned)i);
    if (half) attn_round_dtype(dt, x, set_floats);
    kslot_fill(&ks, i + 1, 0, dt, x, cnt, kvcnt, vcnt);
  }
  /* Rounds (timing.h): the plans at both alignments, the default and the baseline. */
  const int sides = 2 * nv + 1 + blas;
  st = calloc((size_t)sides, sizeof *st);
  if (!st) goto done;
  bench_runs br = {.plans = plans, .dplan = dplan, .nv = nv, .sets = sets, .n = n, .n_kv = n_kv, .d = d, .p = &p,
                   .ks = &ks, .ko = ko, .q = q, .extra = extra, .set_floats = set_floats, .cnt = cnt, .kvcnt = kvcnt,
                   .ob = ob, .s = s};
  attn_sched_open(&br.sp);
  attn_load_probe lp;
  attn_load_start(&lp);
  attn_rounds_caps caps;
  bench_caps(reps, rt->threads, &caps);
  attn_rounds_out ro;
  const int rr = attn_rounds(&caps, sides, bench_run, &br, st, &ro);
  attn_sched_close(&br.sp);
  if (rr != 0) {
    if (rr < 0) fprintf(stderr, "attntune bench: out of memory for timings\n");
    goto done;
  }
  const double load = attn_load_end(&lp);
  /* Q K^T is d deep, P V d_v wide: 2 n n_kv (d + d_v) per head (4 n n_kv d when d_v = d) */
  const double flops = 2.0 * n * (double)n_kv * (d + dv) * heads * (causal ? 0.5 : 1.0);
  double blas_ms = blas ? st[2 * nv + 1].median_ms : -1;
  rc = 0;
  for (int i = 0; i < nv; i++) {
    bench_row *row = &rows[i];
    row->plan_ms = st[i].median_ms;
    row->plan_ms_misaligned = st[nv + i].median_ms;
    row->plan_iqr_ms = st[i].iqr_ms;
    row->plan_gflops = flops / row->plan_ms * 1e-6;
    /* decode streams K and V once per call (every query of a head reads all of its keys): bytes over time */
    row->kv_gbs = (g_heads_kv > 0 ? g_heads_kv : heads) * (double)n_kv * (d + dv) * (double)es / row->plan_ms * 1e-6;
    row->default_ms = st[2 * nv].median_ms;
    row->vs_default = row->default_ms / row->plan_ms;
    snprintf(row->def, sizeof row->def, "%s", attn_plan_describe(dplan));
    row->rounds = ro.rounds;
    row->load = load;
    if (blas) {
      row->blas_ms = blas_ms;
      row->blas_gflops = flops / row->blas_ms * 1e-6;
      row->ratio = row->blas_ms / row->plan_ms;
#ifdef ATTN_HAVE_OPENBLAS
      row->sgemm_gflops = sgemm_rate(n < 256 ? 256 : n > 2048 ? 2048 : n);
#endif
    }
    const double tol = half ? attn_meas_exact_tolerance(dt) : BENCH_FAIL_ERROR;
    if (!(row->rel_error <= tol) || !(row->ref_error <= tol)) {
      fprintf(stderr,
              "attntune bench: n=%d n_kv=%d d=%d: outputs disagree (vs BLAS %.3g, vs fp64 reference %.3g at either "
              "alignment): %s is wrong\n",
              n, n_kv, d, row->rel_error, row->ref_error, row->plan);
      rc = 1;
    }
  }
  if (rc == 0) *nrows = nv;
done:
  for (int i = 0; i < maxv; i++) attn_plan_destroy(plans[i]);
  attn_plan_destroy(dplan);
  free(st), free(extra);
  free(q), free(o), free(ob), free(s), free(ko), free(ks.arena);
  return rc;
}

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

/* ---- --target cuda: the plan against the default flash kernel on the device present. */

typedef struct cuda_row {
  int n, d, heads, causal;
  attn_dtype dtype;
  char plan[512], base[512];
  double plan_ms, base_ms, plan_tflops, base_tflops, ratio, peak_frac, ref_error;
  const char *database; /* the database the runtime read, or NULL */
} cuda_row;

static json_t *cuda_row_json(const cuda_row *r) {
  json_t *o = json_object();
  json_object_set_new(o, "n", json_integer(r->n));
  json_object_set_new(o, "d", json_integer(r->d));
  json_object_set_new(o, "heads", json_integer(r->heads));
  json_object_set_new(o, "causal", json_boolean(r->causal));
  json_object_set_new(o, "dtype", json_string(attn_dtype_name(r->dtype)));
  json_object_set_new(o, "plan", json_string(r->plan));
  json_object_set_new(o, "plan_ms", num_or_null(r->plan_ms));
  json_object_set_new(o, "plan_tflops", num_or_null(r->plan_tflops));
  json_object_set_new(o, "baseline", json_string(r->base));
  json_object_set_new(o, "baseline_ms", num_or_null(r->base_ms));
  json_object_set_new(o, "baseline_tflops", num_or_null(r->base_tflops));
  json_object_set_new(o, "ratio", num_or_null(r->ratio));
  json_object_set_new(o, "peak_fraction", num_or_null(r->peak_frac));
  json_object_set_new(o, "ref_error", json_real(isfinite(r->ref_error) ? r->ref_error : 1e300));
  json_object_set_new(o, "database", r->database ? json_string(r->database) : json_null());
  return o;
}

typedef struct cuda_runs {
  attn_runtime *rt;
  const attn_plan *const *both;
  void *dq, *dk, *dv, *dout;
  int n, d;
} cuda_runs;

static int cuda_run(void *user, int side, int timed, double *ms, double *delay) {
  (void)timed;
  cuda_runs *c = user;
  const attn_plan *pl = c->both[side];
  *delay = 0;
  int e = attn_cuda_run(c->rt, pl->cuda, &pl->p, c->dq, c->dk, c->dv, c->dout, NULL, ms);
  if (e == ATTN_OK) return 0;
  fprintf(stderr, "attntune bench: n=%d d=%d: %s: %s\n", c->n, c->d, attn_plan_describe(pl), attn_last_error(c->rt));
  return 1;
}

/* One point: both plans checked on sample rows against fp64, then alternating timed runs on device buffers. */
static int cuda_point(attn_runtime *rt, const attn_gpu *gpu, int n, int d, int heads, int causal, attn_dtype t,
                      int reps, cuda_row *row) {
  memset(row, 0, sizeof *row);
  row->n = n, row->d = d, row->heads = heads, row->causal = causal, row->dtype = t;
  row->peak_frac = -1;
  row->database = rt->db ? rt->db_path : NULL;
  attn_problem p = {.batch = 1, .heads = heads, .n = n, .d = d, .dtype = t, .causal = causal};
  const size_t cnt = (size_t)heads * n * d, es = attn_dtype_size(t);
  float *hq = malloc(cnt * sizeof(float)), *hk = malloc(cnt * sizeof(float)), *hv = malloc(cnt * sizeof(float));
  float *ho = malloc(cnt * sizeof(float));
  attn_timing_stats stp, stb;
  void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL;
  attn_plan *plan = NULL, *base = NULL;
  int rc = 1, e = ATTN_OK;
  if (!hq || !hk || !hv || !ho) {
    fprintf(stderr, "attntune bench: out of memory for n=%d d=%d\n", n, d);
    goto done;
  }
  attn_fill_random(hq, cnt, 1), attn_fill_random(hk, cnt, 2), attn_fill_random(hv, cnt, 3);
  /* the reference sees the inputs as the kernel does: rounded to the dtype */
  for (size_t i = 0; i < cnt && t != ATTN_F32; i++) {
    float *x[3] = {&hq[i], &hk[i], &hv[i]};
    for (int j = 0; j < 3; j++)
      *x[j] = t == ATTN_F16 ? attn_f16_to_f32(attn_f32_to_f16(*x[j])) : attn_bf16_to_f32(attn_f32_to_bf16(*x[j]));
  }
  attn_spec ds = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, t, d, causal);
  if ((e = attn_plan_create(rt, &p, &plan)) != ATTN_OK ||
      (e = attn_plan_create_spec(rt, &p, &ds, 0, "default", &base)) != ATTN_OK) {
    fprintf(stderr, "attntune bench: n=%d d=%d %s: %s: %s\n", n, d, attn_dtype_name(t), attn_strerror(e),
            attn_last_error(rt));
    goto done;
  }
  snprintf(row->plan, sizeof row->plan, "%s", attn_plan_describe(plan));
  snprintf(row->base, sizeof row->base, "%s", attn_plan_describe(base));
  p = plan->p; /* normalised: the reference needs the scale */
  const double tol = t == ATTN_F32 ? 1e-4 : 1e-2;
  const attn_plan *both[2] = {plan, base};
  for (int w = 0; w < 2; w++) {
    attn_poison(ho, cnt);
    if ((e = attn_plan_run_f32(both[w], hq, hk, hv, ho, NULL, NULL)) != ATTN_OK) {
      fprintf(stderr, "attntune bench: n=%d d=%d: %s: %s\n", n, d, attn_plan_describe(both[w]), attn_last_error(rt));
      goto done;
    }
    double err = ref_error(&p, hq, hk, hv, ho);
    if (w == 0) row->ref_error = err;
    if (!(err <= tol)) {
      fprintf(stderr, "attntune bench: n=%d d=%d: %s is wrong: relative error %.3g against fp64 (limit %g)\n", n, d,
              attn_plan_describe(both[w]), err, tol);
      goto done;
    }
  }
  if ((e = attn_cuda_alloc(rt, cnt * es, &dq)) || (e = attn_cuda_alloc(rt, cnt * es, &dk)) ||
      (e = attn_cuda_alloc(rt, cnt * es, &dv)) || (e = attn_cuda_alloc(rt, cnt * es, &dout))) {
    fprintf(stderr, "attntune bench: n=%d d=%d: %s\n", n, d, attn_last_error(rt));
    goto done;
  }
  /* device inputs in the dtype (random bits are fine for timing; correctness was checked above) */
  {
    unsigned short *h = malloc(cnt * es);
    const float *src[3] = {hq, hk, hv};
    void *dst[3] = {dq, dk, dv};
    for (int j = 0; j < 3 && h && e == ATTN_OK; j++) {
      for (size_t i = 0; i < cnt && t != ATTN_F32; i++)
        h[i] = t == ATTN_F16 ? attn_f32_to_f16(src[j][i]) : attn_f32_to_bf16(src[j][i]);
      e = attn_cuda_copy(rt, dst[j], t == ATTN_F32 ? (const void *)src[j] : h, cnt * es, 1);
    }
    if (!h) e = ATTN_ENOMEM;
    free(h);
    if (e != ATTN_OK) {
      fprintf(stderr, "attntune bench: n=%d d=%d: uploading inputs: %s\n", n, d, attn_last_error(rt));
      goto done;
    }
  }
  /* The rounds (timing.h): a warm-up round, then both in alternation. CUDA events do not see the host's scheduler:
   * every repetition counts as clean. */
  {
    cuda_runs cr = {.rt = rt, .both = both, .dq = dq, .dk = dk, .dv = dv, .dout = dout, .n = n, .d = d};
    attn_rounds_caps caps;
    bench_caps(reps, 1, &caps);
    caps.warmup = 1;
    attn_timing_stats st2[2];
    attn_rounds_out ro;
    if (attn_rounds(&caps, 2, cuda_run, &cr, st2, &ro) != 0) goto done;
    stp = st2[0], stb = st2[1];
  }
  const double flops = 4.0 * n * (double)n * d * heads * (causal ? 0.5 : 1.0);
  row->plan_ms = stp.median_ms;
  row->base_ms = stb.median_ms;
  row->plan_tflops = flops / row->plan_ms * 1e-9;
  row->base_tflops = flops / row->base_ms * 1e-9;
  row->ratio = row->base_ms / row->plan_ms;
  if (gpu) row->peak_frac = row->plan_tflops * 1e12 / attn_gpu_peak(gpu, t);
  rc = 0;
done:
  attn_cuda_free(rt, dq), attn_cuda_free(rt, dk), attn_cuda_free(rt, dv), attn_cuda_free(rt, dout);
  attn_plan_destroy(plan);
  attn_plan_destroy(base);
  free(hq), free(hk), free(hv), free(ho);
  return rc;
}

/* The header's line on what the plans come from: the database read, or none (the untuned defaults). */
static void print_database(const attn_runtime *rt) {
  if (rt->db)
    printf("database: %s\n", rt->db_path);
  else
    printf("no database: untuned defaults (none usable at %s; --db PATH to bench a tuned one)\n", rt->db_path);
}

static int bench_cuda(const char *db, const int *ns, int nn, const int *ds, int nd, int heads, int causal, int reps,
                      unsigned dtypes, int json) {
  attn_runtime *rt = NULL;
  int e = attn_open(db, ATTN_TARGET_CUDA, &rt);
  if (e != ATTN_OK) {
    fprintf(stderr, "attntune bench: --target cuda: %s\n", attn_last_error(NULL));
    return 1;
  }
  attn_cuda_info_t info;
  attn_cuda_info(rt, &info);
  char err[256];
  const attn_gpu *gpu = attn_gpu_find(rt->device, err, sizeof err); /* NULL: not in the table, no peak column */
  if (!json) {
    printf("device %s (%s, %s, %d SMs); baseline: the default flash kernel; medians of at least %d interleaved "
           "rounds (CUDA events); TFLOP/s count 4*n*n_kv*d*heads%s%s\n",
           rt->device, info.name, info.arch, info.sms, reps, causal ? "/2 (causal)" : "",
           gpu ? "; peak: the spec table's dense rate" : "");
    print_database(rt);
    printf("%6s %4s %5s %6s %5s %10s %8s %6s %10s %8s %7s %9s  %s\n", "n", "d", "heads", "causal", "dtype", "plan ms",
           "TFLOP/s", "peak", "base ms", "TFLOP/s", "ratio", "ref err", "plan");
  }
  json_t *arr = json_array();
  int rc = 0;
  for (int t = 0; t < 3; t++) {
    if (!((dtypes >> t) & 1)) continue;
    for (int i = 0; i < nn; i++)
      for (int j = 0; j < nd; j++) {
        cuda_row row;
        if (cuda_point(rt, gpu, ns[i], ds[j], heads, causal, (attn_dtype)t, reps, &row)) {
          rc = 1;
          continue;
        }
        if (json) {
          json_array_append_new(arr, cuda_row_json(&row));
          continue;
        }
        char pk[16];
        fmt_num(pk, sizeof pk, "%.0f%%", row.peak_frac * 100);
        printf("%6d %4d %5d %6s %5s %10.3f %8.1f %6s %10.3f %8.1f %6.2fx %9.1e  %s\n", row.n, row.d, row.heads,
               row.causal ? "yes" : "no", attn_dtype_name(row.dtype), row.plan_ms, row.plan_tflops, pk, row.base_ms,
               row.base_tflops, row.ratio, row.ref_error, row.plan);
        fflush(stdout);
      }
  }
  if (json) {
    char *text = json_dumps(arr, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
    if (text) puts(text), free(text);
    else rc = 1;
  }
  json_decref(arr);
  attn_close(rt);
  return rc;
}

int attn_cmd_bench(int argc, char **argv) {
  const char *n_s = NULL, *d_s = NULL, *db = NULL, *nkv_s = NULL, *split_s = NULL, *dv_s = NULL;
  int heads = 2, causal = 0, reps = 5, json = 0, no_blas = 0;
  const char *dtype_s = NULL;
  attn_target target = ATTN_TARGET_CPU;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(bench_usage, stdout);
      return 0;
    } else if (!strcmp(a, "--causal")) {
      causal = 1;
    } else if (!strcmp(a, "--json")) {
      json = 1;
    } else if (!strcmp(a, "--no-blas")) {
      no_blas = 1;
    } else if (!strcmp(a, "--target") || !strcmp(a, "--n") || !strcmp(a, "--d") || !strcmp(a, "--heads") ||
               !strcmp(a, "--db") || !strcmp(a, "--reps") || !strcmp(a, "--dtype") || !strcmp(a, "--n-kv") ||
               !strcmp(a, "--split") || !strcmp(a, "--time-cap") || !strcmp(a, "--dv") || !strcmp(a, "--heads-kv")) {
      if (!val) return usage("%s needs a value", a);
      i++;
      if (!strcmp(a, "--target")) {
        int t = attn_target_parse(val);
        if (t != ATTN_TARGET_CPU && t != ATTN_TARGET_CUDA) return usage("--target %s: expected cpu or cuda", val);
        target = (attn_target)t;
      } else if (!strcmp(a, "--n")) {
        n_s = val;
      } else if (!strcmp(a, "--d")) {
        d_s = val;
      } else if (!strcmp(a, "--dv")) {
        dv_s = val;
      } else if (!strcmp(a, "--n-kv")) {
        nkv_s = val;
      } else if (!strcmp(a, "--split")) {
        split_s = val;
      } else if (!strcmp(a, "--time-cap")) {
        char *end;
        errno = 0;
        g_cap_s = strtod(val, &end);
        if (errno || end == val || *end || !(g_cap_s >= 0) || g_cap_s > 86400)
          return usage("--time-cap %s: expected seconds in 0..86400", val);
      } else if (!strcmp(a, "--db")) {
        db = val;
      } else if (!strcmp(a, "--dtype")) {
        dtype_s = val;
      } else if (!strcmp(a, "--heads")) {
        if (attn_parse_int(val, 1, 4096, &heads)) return usage("--heads %s: expected an integer in 1..4096", val);
      } else if (!strcmp(a, "--heads-kv")) {
        if (attn_parse_int(val, 1, 4096, &g_heads_kv))
          return usage("--heads-kv %s: expected an integer in 1..4096", val);
      } else if (attn_parse_int(val, 1, 1000, &reps)) {
        return usage("--reps %s: expected an integer in 1..1000", val);
      }
    } else {
      return usage("unknown argument '%s'", a);
    }
  }
  unsigned dtypes = 0;
  if (dtype_s) {
    char buf[64];
    snprintf(buf, sizeof buf, "%s", dtype_s);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
      int v = attn_dtype_parse(t);
      if (v < 0) return usage("--dtype %s: expected f32, f16, bf16 or a list of them", dtype_s);
      dtypes |= 1u << v;
    }
    if (!dtypes) return usage("--dtype %s: expected f32, f16, bf16 or a list of them", dtype_s);
  } else {
    dtypes = target == ATTN_TARGET_CUDA ? 1u << ATTN_F16 : 1u << ATTN_F32;
  }
  if (!n_s) return usage("%s", "--n RANGE is required");
  if (!d_s) return usage("%s", "--d RANGE is required");
  int *ns = NULL, *ds = NULL, nn = 0, nd = 0;
  char err[256];
  if (attn_range_parse(n_s, &ns, &nn, err, sizeof err) != ATTN_OK) return usage("--n: %s", err);
  if (attn_range_parse(d_s, &ds, &nd, err, sizeof err) != ATTN_OK) {
    free(ns);
    return usage("--d: %s", err);
  }
  if (target == ATTN_TARGET_CUDA && (nkv_s || split_s || dv_s || g_heads_kv)) {
    free(ns);
    free(ds);
    return usage("%s applies to --target cpu only",
                 nkv_s ? "--n-kv" : split_s ? "--split" : dv_s ? "--dv" : "--heads-kv");
  }
  if (g_heads_kv > heads || (g_heads_kv && heads % g_heads_kv)) {
    char hk[16];
    snprintf(hk, sizeof hk, "%d", g_heads_kv);
    free(ns);
    free(ds);
    return usage("--heads-kv %s: must divide --heads", hk);
  }
  int *dvs = NULL, ndv = 0;
  if (dv_s && attn_range_parse(dv_s, &dvs, &ndv, err, sizeof err) != ATTN_OK) {
    free(ns);
    free(ds);
    return usage("--dv: %s", err);
  }
  for (int i = 0; i < nd && target == ATTN_TARGET_CPU; i++)
    for (int j = 0; j < (dvs ? ndv : 1); j++)
      if (attn_space_dims_ok(ATTN_TARGET_CPU, ds[i], dvs ? dvs[j] : 0, err, sizeof err) != 0) {
        free(ns), free(ds), free(dvs);
        return usage("%s", err);
      }
  int *nkvs = NULL, nnkv = 0, *splits = NULL, nsplit = 0;
  if (nkv_s && attn_range_parse(nkv_s, &nkvs, &nnkv, err, sizeof err) != ATTN_OK) {
    free(ns);
    free(ds);
    free(dvs);
    return usage("--n-kv: %s", err);
  }
  if (split_s) {
    int bad = attn_range_parse(split_s, &splits, &nsplit, err, sizeof err) != ATTN_OK;
    if (!bad && nsplit > BENCH_MAX_SPLITS) snprintf(err, sizeof err, "more than %d values", BENCH_MAX_SPLITS), bad = 1;
    for (int i = 0; i < nsplit && !bad; i++)
      if (splits[i] > 64) snprintf(err, sizeof err, "%d is not in 1..64", splits[i]), bad = 1;
    if (bad) {
      free(ns), free(ds), free(nkvs), free(splits), free(dvs);
      return usage("--split: %s", err);
    }
  }
  if (target == ATTN_TARGET_CUDA) {
    int rc = bench_cuda(db, ns, nn, ds, nd, heads, causal, reps, dtypes, json);
    free(ns);
    free(ds);
    return rc;
  }
  attn_timing_env("bench", json);
  /* Large buffers straight from mmap and back to the system on free, so that each memory probe starts clean. */
  mallopt(M_MMAP_THRESHOLD, 1 << 20);

  attn_runtime *rt = NULL;
  int e = attn_open(db, target, &rt);
  if (e != ATTN_OK) {
    fprintf(stderr, "attntune bench: cannot open the runtime: %s: %s\n", attn_strerror(e), attn_last_error(rt));
    free(ns), free(ds), free(nkvs), free(splits), free(dvs);
    return 1;
  }
  if (attn_cache_dir_ready(rt) == ATTN_OK && rt->cache_note[0]) fprintf(stderr, "attntune bench: %s\n", rt->cache_note);
  /* The ceilings first, on the kernels' threads and before any point's buffers exist; not fatal: unknown ones show
   * as '-' and null. Measured again after the points when the first measurement was under load or a row exceeds it
   * (the rows are printed then): each ceiling is the highest clean measurement, else flagged. */
  const double peak_cap = g_cap_s < BENCH_PEAK_CAP_S ? g_cap_s : BENCH_PEAK_CAP_S;
  attn_peak pk;
  if (attn_peak_measure(rt->threads, reps, peak_cap, &pk) != 0)
    fprintf(stderr, "attntune bench: the FMA peak or the read bandwidth could not be measured (out of memory)\n");
  bench_row *all = NULL;
  int nall = 0, capall = 0, rc = 0;
  for (int t = 0; t < 3; t++)
    for (int i = 0; (dtypes >> t) & 1 && i < nn; i++)
      for (int kv = 0; kv < (nkvs ? nnkv : 1); kv++)
        for (int j = 0; j < nd * (dvs ? ndv : 1); j++) {
          const int d = ds[dvs ? j / ndv : j], dv = dvs ? dvs[j % ndv] : d;
          if (nall + BENCH_MAX_SPLITS > capall) {
            int cap = capall ? 2 * capall : 4 * BENCH_MAX_SPLITS;
            bench_row *x = realloc(all, sizeof *x * (size_t)cap);
            if (!x) {
              fprintf(stderr, "attntune bench: out of memory for the rows\n");
              rc = 1;
              goto points_done;
            }
            all = x, capall = cap;
          }
          int nrows = 0;
          if (bench_point(rt, ns[i], nkvs ? nkvs[kv] : ns[i], d, dv, (attn_dtype)t, heads, causal, reps, no_blas,
                          splits, nsplit, all + nall, &nrows))
            rc = 1;
          nall += nrows;
        }
points_done:;
  int again = pk.fma_under_load || pk.read_under_load;
  for (int r = 0; r < nall; r++) {
    finish_row(&all[r], &pk);
    again |= all[r].ceiling_under_load;
  }
  if (again && nall > 0) {
    attn_peak later;
    if (attn_peak_measure(rt->threads, reps, peak_cap, &later) == 0) attn_peak_merge(&pk, &later);
    for (int r = 0; r < nall; r++) finish_row(&all[r], &pk);
  }
  int flagged = 0;
  for (int r = 0; r < nall; r++) flagged |= all[r].ceiling_under_load;
  if (!json) {
#ifdef ATTN_HAVE_OPENBLAS
    const int blas_threads = openblas_get_num_threads();
#else
    const int blas_threads = 0;
#endif
    char base[128] = "none (built without OpenBLAS)";
    if (blas_threads) snprintf(base, sizeof base, "OpenBLAS sgemm + softmax + sgemm (%d threads)", blas_threads);
    printf("device %s, %d threads (%s); baseline: %s; the untuned default beside the plan; medians of at least %d "
           "interleaved rounds on rotating inputs, more until each is known within %.0f%% (at most %.0f s); GFLOP/s "
           "count 2*n*n_kv*(d+d_v)*heads%s\n",
           rt->device, rt->threads, attn_timing_env_text(), base, reps, ATTN_MEAS_REL_TOL * 100, g_cap_s,
           causal ? "/2 (causal)" : "");
    print_database(rt);
    char fp[32], bw[32];
    fmt_num(fp, sizeof fp, "%.1f", pk.fma_gflops), fmt_num(bw, sizeof bw, "%.1f", pk.read_gbs);
    printf("ceilings measured %s on %d threads: fp32 FMA peak %s GFLOP/s%s (%s, %d chains per thread), read bandwidth "
           "%s GB/s%s (streaming sum over %.0f MiB); of peak: prefill (n >= %d) GFLOP/s / FMA peak, decode (n < %d) "
           "K+V bytes/s / read bandwidth\n",
           pk.measurements > 1 ? "before and after the points" : "before the points", pk.threads, fp,
           pk.fma_under_load ? " (under load)" : "", pk.fma_isa[0] ? pk.fma_isa : "-", pk.fma_chains, bw,
           pk.read_under_load ? " (under load)" : "", pk.read_mib > 0 ? pk.read_mib : 0.0, ATTN_DB_DECODE_BELOW,
           ATTN_DB_DECODE_BELOW);
    printf("%6s %6s %4s %5s %6s %10s %8s %10s %10s %10s %8s %7s %10s %8s %7s %9s %9s %9s  %s\n", "n", "n_kv", "d",
           "heads", "causal", "plan ms", "GFLOP/s", "of peak", "+16B ms", "default ms", "vs def", "sgemm", "blas ms",
           "GFLOP/s", "ratio", "plan MiB", "blas MiB", "rel err", "plan");
    for (int r = 0; r < nall; r++) row_text(&all[r]);
    printf("plan ms: Q, K, V and O each %d-byte aligned; +16B ms: each %d bytes past such a boundary (what malloc "
           "returns for large blocks)\n",
           BENCH_ALIGN, BENCH_OFFSET);
    if (flagged)
      printf("* ceiling measured under load (no clean measurement, or a row above it): the fraction is an upper "
             "bound\n");
  } else {
    json_t *arr = json_array();
    for (int r = 0; r < nall; r++) json_array_append_new(arr, row_json(&all[r]));
    char *text = json_dumps(arr, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
    if (text) {
      puts(text);
      free(text);
    } else {
      rc = 1;
    }
    json_decref(arr);
  }
  fflush(stdout);
  free(all);
  attn_close(rt);
  free(ns), free(ds), free(nkvs), free(splits), free(dvs);
  return rc;
}
