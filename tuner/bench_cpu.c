/* bench_cpu.c: bench's CPU points: plans, default and OpenBLAS baseline timed in alternation, checked against fp64. */
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"
#include "measure.h"
#include "space.h"
#include "timing_env.h"
#ifdef ATTN_HAVE_OPENBLAS
#include <cblas.h>
#endif

#define BENCH_FAIL_ERROR 1e-4 /* fp32 flash vs fp32 BLAS differ by ~1e-6; beyond this the kernel is wrong */

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
double attn_bench_ref_error(const attn_problem *p, const float *q, const float *k, const float *v, const float *o) {
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
#endif

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
  double d0 = attn_sched_delay_ms(&b->sp), t0 = bench_now_s();
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
  *ms = (bench_now_s() - t0) * 1e3;
  double d1 = attn_sched_delay_ms(&b->sp);
  *delay = d0 >= 0 && d1 >= 0 ? d1 - d0 : -1;
  return 0;
}

/* The rounds' parameters of a bench point (docs/tuning.md): at least reps rounds, the cap never cuts below them, the
 * load gate as the finalist round's (within half the cap). */
void attn_bench_caps(int reps, int threads, attn_rounds_caps *k) {
  memset(k, 0, sizeof *k);
  k->min_rounds = k->min_rounds_at_cap = reps;
  k->rel_tol = ATTN_MEAS_REL_TOL;
  k->cap_s = attn_bench_cap_s;
  k->wait_clean = 1;
  k->threads = threads;
  k->retries = ATTN_MEAS_RETRIES;
  k->retry_wait_s = ATTN_MEAS_RETRY_WAIT_S;
  k->retry_budget_s = attn_bench_cap_s / 2;
}

/* One (n, n_kv, d, d_v, dtype) point: one row per plan (rows[0 .. *nrows)). All plans (aligned and at BENCH_OFFSET),
 * the default and the baseline are timed in alternation, the order rotating each repetition. Returns 0, or 1 after
 * printing the reason. A half dtype: the fp32 inputs are rounded through it (the reference and the baseline see what
 * the plan reads), the plans run on copies in the dtype made once per input set, and their output is converted back
 * for the checks. The fractions of the ceilings are the caller's (bench_ceiling.c). */
int attn_bench_point(attn_runtime *rt, int n, int n_kv, int d, int dv, attn_dtype dt, int heads, int causal,
                     int reps, int no_blas, const int *splits, int nsplit, bench_row *rows, int *nrows) {
  const int maxv = nsplit > 0 ? nsplit : 1;
  *nrows = 0;
  attn_problem p = {0};
  const int hkv = attn_bench_heads_kv > 0 ? attn_bench_heads_kv : heads;
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
      const double err = attn_bench_ref_error(&p, q, k, v, o);
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
        rows[i].rel_error = attn_bench_rel_diff(o, ob, ocnt);
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
  attn_bench_caps(reps, rt->threads, &caps);
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
    row->kv_gbs = (attn_bench_heads_kv > 0 ? attn_bench_heads_kv : heads) * (double)n_kv * (d + dv) * (double)es /
                  row->plan_ms * 1e-6;
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
      row->sgemm_gflops = attn_bench_sgemm_rate(n < 256 ? 256 : n > 2048 ? 2048 : n);
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
