/* bench_bwd.c: bench's backward points (--pass bwd): the backward plan against the standard backward on OpenBLAS
 * (P materialised by the forward and kept, as PyTorch's math path keeps it: dV = Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP - D),
 * dQ = scale dS K, dK = scale dSᵀ Q, four sgemm a head) and the forward plan, timed in alternation, then PyTorch's CPU
 * SDPA backward on the same shape and threads when python3 imports torch. Checked: the gradients against the
 * baseline's (all of them) and dQ against fp64 on 16 rows of the first head. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bench.h"
#include "measure.h"
#ifdef ATTN_HAVE_OPENBLAS
#include <cblas.h>
#endif

#define BWD_BLAS_MAX_BYTES (8.0 * (1 << 30)) /* P of every head and one dP: the baseline's extra memory */

typedef struct bwd_bufs {
  const attn_problem *p;
  size_t nq, nk, nv, no, nl;
  float *q, *k, *v, *g, *o, *lse;  /* fp32 (rounded through the dtype); o is the forward plan's */
  void *tq, *tk, *tv, *tg, *to;    /* the plans' inputs in the dtype */
  void *tdq, *tdk, *tdv;           /* the backward plan's outputs */
  float *P, *dP, *bq, *bk, *bv, *D; /* the baseline: P of every head, one head's dP, its gradients, D */
  attn_plan *bplan, *fplan;
  int blas;
  attn_sched_probe sp;
} bwd_bufs;

#ifdef ATTN_HAVE_OPENBLAS
/* P = softmax(scale Q Kᵀ) of every head over the keys each row sees (hidden: 0), fp32: the forward's saved P. */
static void blas_probs(bwd_bufs *b) {
  const attn_problem *p = b->p;
  const long n = p->n, nkv = p->n_kv, d = p->d, G = p->heads / p->heads_kv;
  for (long bh = 0; bh < (long)p->batch * p->heads; bh++) {
    const long bkv = bh / p->heads * p->heads_kv + bh % p->heads / G;
    float *P = b->P + (size_t)bh * n * nkv;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)nkv, (int)d, p->scale, b->q + bh * n * d,
                (int)d, b->k + bkv * nkv * d, (int)d, 0.0f, P, (int)nkv);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
      float *row = P + i * nkv;
      long vis = p->causal ? i + nkv - n + 1 : nkv;
      vis = vis < 0 ? 0 : vis > nkv ? nkv : vis;
      float mx = -INFINITY, sum = 0;
      for (long j = 0; j < vis; j++) mx = row[j] > mx ? row[j] : mx;
      for (long j = 0; j < vis; j++) sum += (row[j] = expf(row[j] - mx));
      const float inv = sum > 0 ? 1.0f / sum : 0.0f;
      for (long j = 0; j < vis; j++) row[j] *= inv;
      for (long j = vis; j < nkv; j++) row[j] = 0;
    }
  }
}

/* The timed standard backward, one head at a time (GQA: dK, dV summed over a KV head's query heads). */
static void blas_backward(bwd_bufs *b) {
  const attn_problem *p = b->p;
  const long n = p->n, nkv = p->n_kv, d = p->d, dv = p->d_v, G = p->heads / p->heads_kv;
  for (long bh = 0; bh < (long)p->batch * p->heads; bh++) {
    const long bkv = bh / p->heads * p->heads_kv + bh % p->heads / G;
    const float beta = bh % p->heads % G ? 1.0f : 0.0f;
    const float *P = b->P + (size_t)bh * n * nkv, *g = b->g + bh * n * dv, *o = b->o + bh * n * dv;
    const float *q = b->q + bh * n * d, *k = b->k + bkv * nkv * d, *v = b->v + bkv * nkv * dv;
    float *dq = b->bq + bh * n * d, *dk = b->bk + bkv * nkv * d, *dvv = b->bv + bkv * nkv * dv, *dP = b->dP;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nkv, (int)dv, (int)n, 1.0f, P, (int)nkv, g, (int)dv,
                beta, dvv, (int)dv);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)nkv, (int)dv, 1.0f, g, (int)dv, v, (int)dv, 0.0f,
                dP, (int)nkv);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
      float D = 0;
      for (long x = 0; x < dv; x++) D += g[i * dv + x] * o[i * dv + x];
      float *row = dP + i * nkv;
      const float *pr = P + i * nkv;
      for (long j = 0; j < nkv; j++) row[j] = pr[j] * (row[j] - D);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)d, (int)nkv, p->scale, dP, (int)nkv, k,
                (int)d, 0.0f, dq, (int)d);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nkv, (int)d, (int)n, p->scale, dP, (int)nkv, q, (int)d,
                beta, dk, (int)d);
  }
}
#endif

/* dQ of up to 16 rows of head 0 against fp64 from the definition (lse, P, dP and D recomputed in fp64). */
static double dq_rows_error(const bwd_bufs *b, const float *dq) {
  const attn_problem *p = b->p;
  const long n = p->n, nkv = p->n_kv, d = p->d, dv = p->d_v, rows = n < 16 ? n : 16;
  double *s = malloc(sizeof(double) * (size_t)(nkv + 1)), *r = malloc(sizeof(double) * (size_t)d);
  double num = 0, den = 0;
  for (long t = 0; s && r && t < rows; t++) {
    const long i = rows > 1 ? t * (n - 1) / (rows - 1) : 0;
    long vis = p->causal ? i + nkv - n + 1 : nkv;
    vis = vis < 0 ? 0 : vis > nkv ? nkv : vis;
    double mx = -INFINITY, l = 0, D = 0;
    for (long j = 0; j < vis; j++) {
      double a = 0;
      for (long c = 0; c < d; c++) a += (double)b->q[i * d + c] * b->k[j * d + c];
      s[j] = a * p->scale;
      mx = s[j] > mx ? s[j] : mx;
    }
    for (long j = 0; j < vis; j++) l += exp(s[j] - mx);
    for (long c = 0; c < dv; c++) D += (double)b->g[i * dv + c] * b->o[i * dv + c];
    for (long c = 0; c < d; c++) r[c] = 0;
    for (long j = 0; j < vis; j++) {
      double dp = 0;
      for (long c = 0; c < dv; c++) dp += (double)b->g[i * dv + c] * b->v[j * dv + c];
      const double ds = exp(s[j] - mx) / l * (dp - D) * p->scale;
      for (long c = 0; c < d; c++) r[c] += ds * b->k[j * d + c];
    }
    for (long c = 0; c < d; c++) {
      const double e = dq[i * d + c] - r[c];
      num += e * e, den += r[c] * r[c];
    }
  }
  const int ok = s && r;
  free(s), free(r);
  if (!ok || num != num) return INFINITY;
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* sides: 0 the backward plan, 1 the forward plan, 2 the baseline */
static int bwd_run(void *user, int side, int timed, double *ms, double *delay) {
  (void)timed;
  bwd_bufs *b = user;
  const double d0 = attn_sched_delay_ms(&b->sp), t0 = bench_now_s();
  int e = ATTN_OK;
  if (side == 0)
    e = attn_execute_backward(b->bplan, b->tq, b->tk, b->tv, b->to, b->lse, b->tg, b->tdq, b->tdk, b->tdv);
  else if (side == 1)
    e = attn_execute_lse(b->fplan, b->tq, b->tk, b->tv, b->to, b->lse);
#ifdef ATTN_HAVE_OPENBLAS
  else
    blas_backward(b);
#endif
  if (e != ATTN_OK) {
    fprintf(stderr, "attntune bench: n=%d d=%d: %s: %s\n", b->p->n, b->p->d, side ? "forward" : "backward",
            attn_last_error(b->bplan->rt));
    return 1;
  }
  *ms = (bench_now_s() - t0) * 1e3;
  const double d1 = attn_sched_delay_ms(&b->sp);
  *delay = d0 >= 0 && d1 >= 0 ? d1 - d0 : -1;
  return 0;
}

/* PyTorch's CPU SDPA backward (torch.autograd.grad of scaled_dot_product_attention), median of reps runs after one
 * warm-up on the same threads; causal aligned to the last key as attntune's (an explicit mask when n != n_kv). */
static const char torch_py[] =
    "n, nkv, d, dv, h, hk, causal, threads, reps = (int(x) for x in sys.argv[1:10])\n"
    "dt = {'f32': torch.float32, 'f16': torch.float16, 'bf16': torch.bfloat16}[sys.argv[10]]\n"
    "torch.set_num_threads(threads)\n"
    "g = torch.Generator().manual_seed(1)\n"
    "r = lambda *s: (torch.rand(*s, generator=g) * 2 - 1).to(dt).requires_grad_()\n"
    "q, k, v = r(1, h, n, d), r(1, hk, nkv, d), r(1, hk, nkv, dv)\n"
    "kw = {'enable_gqa': True} if hk != h else {}\n"
    "if causal and n != nkv:\n"
    "    kw['attn_mask'] = torch.arange(nkv).unsqueeze(0) <= torch.arange(n).unsqueeze(1) + (nkv - n)\n"
    "elif causal:\n"
    "    kw['is_causal'] = True\n"
    "o = F.scaled_dot_product_attention(q, k, v, **kw)\n"
    "go = torch.rand(o.shape, generator=g).to(dt) * 2 - 1\n"
    "ts = []\n"
    "for i in range(reps + 1):\n"
    "    t0 = time.perf_counter()\n"
    "    torch.autograd.grad(o, (q, k, v), go, retain_graph=True)\n"
    "    if i: ts.append((time.perf_counter() - t0) * 1e3)\n"
    "print('ms %.6f %s' % (statistics.median(ts), torch.__version__))\n";

/* Keeps the last line python3 printed (512 bytes at user). */
static void keep_last(void *user, const char *text) { snprintf(user, 512, "%s", text); }

static void torch_point(const attn_problem *p, int threads, int reps, bench_row *row) {
  char args[256], last[512] = "";
  snprintf(args, sizeof args, "%d %d %d %d %d %d %d %d %d %s", p->n, p->n_kv, p->d, p->d_v, p->heads, p->heads_kv,
           p->causal, threads, reps, attn_dtype_name(p->dtype));
  int st;
  if (attn_bench_python(torch_py, "bwd", args, keep_last, last, &st) != 0) {
    row->torch_note = "skipped: cannot write its script";
    return;
  }
  double ms = -1;
  char ver[32] = "";
  if (st == 0 && sscanf(last, "ms %lf %31s", &ms, ver) == 2 && ms > 0) {
    row->torch_ms = ms;
    row->vs_torch = ms / row->plan_ms;
    snprintf(row->torch_version, sizeof row->torch_version, "%s", ver);
  } else {
    row->torch_note = !strncmp(last, "skip torch not importable", 25) ? "skipped: python3 cannot import torch"
                                                                        : "failed (python3 exited with an error)";
    if (st != 0 || strncmp(last, "skip", 4)) fprintf(stderr, "attntune bench: PyTorch's backward: %s", last);
  }
}

int attn_bench_point_bwd(attn_runtime *rt, int n, int n_kv, int d, int dv, attn_dtype dt, int heads, int causal,
                         int reps, int no_blas, int no_torch, bench_row *row) {
  const int hkv = attn_bench_heads_kv > 0 ? attn_bench_heads_kv : heads;
  attn_problem p0 = {.batch = 1, .heads = heads, .heads_kv = hkv, .n = n, .n_kv = n_kv, .d = d, .d_v = dv,
                     .dtype = dt, .causal = causal}, p;
  memset(row, 0, sizeof *row);
  row->bwd = 1;
  row->n = n, row->n_kv = n_kv, row->d = d, row->heads = heads, row->causal = causal, row->d_v = dv, row->dtype = dt;
  row->heads_kv = hkv, row->split = 1;
  row->blas_ms = row->blas_gflops = row->ratio = row->sgemm_gflops = row->blas_peak_mib = row->plan_peak_mib = -1;
  row->torch_ms = row->vs_torch = row->default_ms = row->vs_default = row->plan_ms_misaligned = -1;
  row->kv_gbs = row->peak_frac = row->fma_peak_gflops = row->read_bw_gbs = -1;
  row->peak_kind = "fma";
  row->database = rt->db ? rt->db_path : NULL;
  if (attn_problem_normalize(rt, &p0, &p) != ATTN_OK) {
    fprintf(stderr, "attntune bench: n=%d d=%d: %s\n", n, d, attn_last_error(rt));
    return 1;
  }
  bwd_bufs b = {.p = &p};
  b.nq = (size_t)heads * n * d, b.nk = (size_t)hkv * n_kv * d, b.nv = (size_t)hkv * n_kv * dv;
  b.no = (size_t)heads * n * dv, b.nl = (size_t)heads * n;
  const size_t es = attn_dtype_size(dt);
  int rc = 1;
  attn_timing_stats st[3];
  b.q = malloc(b.nq * 4), b.k = malloc(b.nk * 4), b.v = malloc(b.nv * 4), b.g = malloc(b.no * 4);
  b.o = malloc(b.no * 4), b.lse = malloc(b.nl * 4);
  b.tq = malloc(b.nq * es), b.tk = malloc(b.nk * es), b.tv = malloc(b.nv * es), b.tg = malloc(b.no * es);
  b.to = malloc(b.no * es), b.tdq = malloc(b.nq * es), b.tdk = malloc(b.nk * es), b.tdv = malloc(b.nv * es);
  float *gq = malloc(b.nq * 4), *gk = malloc(b.nk * 4), *gv = malloc(b.nv * 4);
  if (!b.q || !b.k || !b.v || !b.g || !b.o || !b.lse || !b.tq || !b.tk || !b.tv || !b.tg || !b.to || !b.tdq ||
      !b.tdk || !b.tdv || !gq || !gk || !gv) {
    fprintf(stderr, "attntune bench: out of memory for the backward at n=%d d=%d\n", n, d);
    goto done;
  }
  attn_fill_random(b.q, b.nq, 1), attn_fill_random(b.k, b.nk, 2), attn_fill_random(b.v, b.nv, 3);
  attn_fill_random(b.g, b.no, 4);
  attn_round_dtype(dt, b.q, b.nq), attn_round_dtype(dt, b.k, b.nk), attn_round_dtype(dt, b.v, b.nv);
  attn_round_dtype(dt, b.g, b.no);
  attn_to_dtype(dt, b.q, b.nq, b.tq), attn_to_dtype(dt, b.k, b.nk, b.tk), attn_to_dtype(dt, b.v, b.nv, b.tv);
  attn_to_dtype(dt, b.g, b.no, b.tg);
  attn_problem fp = p0;
  fp.algo = ATTN_ALGO_FLASH;
  if (attn_plan_create(rt, &fp, &b.fplan) != ATTN_OK || attn_plan_create_backward(rt, &p0, &b.bplan) != ATTN_OK ||
      attn_execute_lse(b.fplan, b.tq, b.tk, b.tv, b.to, b.lse) != ATTN_OK) {
    fprintf(stderr, "attntune bench: n=%d d=%d: %s\n", n, d, attn_last_error(rt));
    goto done;
  }
  attn_from_dtype(dt, b.to, b.no, b.o);
  memset(b.tdq, 0xff, b.nq * es), memset(b.tdk, 0xff, b.nk * es), memset(b.tdv, 0xff, b.nv * es); /* NaN */
  if (attn_execute_backward(b.bplan, b.tq, b.tk, b.tv, b.to, b.lse, b.tg, b.tdq, b.tdk, b.tdv) != ATTN_OK) {
    fprintf(stderr, "attntune bench: n=%d d=%d: backward: %s\n", n, d, attn_last_error(rt));
    goto done;
  }
  attn_from_dtype(dt, b.tdq, b.nq, gq), attn_from_dtype(dt, b.tdk, b.nk, gk), attn_from_dtype(dt, b.tdv, b.nv, gv);
  row->ref_error = row->rel_error = dq_rows_error(&b, gq);
  snprintf(row->plan, sizeof row->plan, "%s", attn_plan_describe(b.bplan));
  snprintf(row->def, sizeof row->def, "%s", attn_plan_describe(b.fplan));
#ifdef ATTN_HAVE_OPENBLAS
  const double pbytes = ((double)heads + 1) * n * (double)n_kv * 4;
  if (no_blas) {
    row->blas_note = "skipped (--no-blas)";
  } else if (pbytes > BWD_BLAS_MAX_BYTES) {
    row->blas_note = "skipped: P of every head would need more than 8 GiB";
  } else if (!(b.P = malloc((size_t)heads * n * n_kv * 4)) || !(b.dP = malloc((size_t)n * n_kv * 4)) ||
             !(b.bq = malloc(b.nq * 4)) || !(b.bk = malloc(b.nk * 4)) || !(b.bv = malloc(b.nv * 4))) {
    row->blas_note = "skipped: cannot allocate P";
  } else {
    blas_probs(&b);
    blas_backward(&b);
    b.blas = 1;
    const double e = fmax(attn_bench_rel_diff(gq, b.bq, b.nq),
                          fmax(attn_bench_rel_diff(gk, b.bk, b.nk), attn_bench_rel_diff(gv, b.bv, b.nv)));
    row->rel_error = e;
  }
#else
  (void)no_blas;
  row->blas_note = "unavailable: built without OpenBLAS";
#endif
  attn_rounds_caps caps;
  attn_bench_caps(reps, rt->threads, &caps);
  attn_rounds_out ro;
  attn_sched_open(&b.sp);
  attn_load_probe lp;
  attn_load_start(&lp);
  const int rr = attn_rounds(&caps, 2 + b.blas, bwd_run, &b, st, &ro);
  attn_sched_close(&b.sp);
  if (rr != 0) goto done;
  row->load = attn_load_end(&lp);
  /* 2.5x the forward's 2 n n_kv (d + d_v) a head, as FlashAttention counts its backward */
  const double flops = 2.5 * 2.0 * n * (double)n_kv * (d + dv) * heads * (causal ? 0.5 : 1.0);
  row->plan_ms = st[0].median_ms, row->plan_iqr_ms = st[0].iqr_ms, row->fwd_ms = st[1].median_ms;
  row->plan_gflops = flops / row->plan_ms * 1e-6;
  row->bwd_vs_fwd = row->plan_ms / row->fwd_ms;
  row->rounds = ro.rounds;
  if (b.blas) {
    row->blas_ms = st[2].median_ms;
    row->blas_gflops = flops / row->blas_ms * 1e-6;
    row->ratio = row->blas_ms / row->plan_ms;
  }
  if (no_torch) row->torch_note = "skipped (--no-torch)";
  else torch_point(&p, rt->threads, reps, row);
  const double tol = dt == ATTN_F32 ? 1e-4 : 2e-2;
  rc = 0;
  if (!(row->rel_error <= tol) || !(row->ref_error <= tol)) {
    fprintf(stderr, "attntune bench: n=%d n_kv=%d d=%d: gradients disagree (vs the BLAS backward %.3g, dq vs fp64 "
                    "%.3g): %s is wrong\n", n, n_kv, d, row->rel_error, row->ref_error, row->plan);
    rc = 1;
  }
done:
  attn_plan_destroy(b.bplan), attn_plan_destroy(b.fplan);
  free(b.q), free(b.k), free(b.v), free(b.g), free(b.o), free(b.lse), free(b.tq), free(b.tk), free(b.tv), free(b.tg);
  free(b.to), free(b.tdq), free(b.tdk), free(b.tdv), free(b.P), free(b.dP), free(b.bq), free(b.bk), free(b.bv);
  free(gq), free(gk), free(gv);
  return rc;
}
