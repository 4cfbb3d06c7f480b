/* cpu_shapes: every CPU algorithm at head dimensions off the tuned grid (d = 1, 3, 59, 111, 320, 512, 576, and
 * d_v != d: (576, 512), (192, 128), (64, 128), (3, 5), (128, 64)) in f32, f16 and bf16, against the fp64 reference
 * on fresh random inputs (rounded through the dtype first for half precision, so only the kernel's own error
 * counts) with a poisoned output.
 *
 *   cpu_shapes ALGO DTYPE      ALGO: flash, smallcache or lowrank; DTYPE: f32, f16 or bf16
 *
 * Each head-dimension pair compiles one kernel (about a second; most of the test's time) and runs it on several
 * shapes that combine the conditions: n = 1 (decode), odd n and n_kv that are multiples of no block, n_kv < n
 * (causal: rows that see no key) and n_kv > n, grouped-query heads, batch 2. f32 runs every pair, f16 and bf16 half
 * of them each (together all). Over each dtype's pairs, causal and a second configuration take all four
 * combinations: split-K flash, smallcache with small tiles that divide neither n nor d, lowrank with Taylor
 * features (where their rank stays small).
 * Bounds: relative Frobenius error 1e-4 for exact algorithms in f32, 1e-2 in half precision; lowrank 0.1, with V
 * shifted to mean 0.5 (below; its errors then stay under 0.03), random features at cpu_nan's scale 0.2/sqrt(d)
 * (at most 1.6/d) and Taylor features of degree 2 at 1/sqrt(d).
 * The half-precision tests load smallcache's and lowrank's counting builds and check the entries they move against
 * the closed forms in the templates' header comments, with d on the Q, K side and d_v on the V, O side. */
#include <string.h>
#include "cpu_util.h"

typedef struct {
  int batch, heads, heads_kv, n, n_kv;
} shape_t;

static const shape_t shapes[] = {
    {1, 4, 2, 37, 37},   /* odd n, grouped-query */
    {2, 2, 1, 1, 70},    /* decode */
    {1, 2, 2, 70, 37},   /* n > n_kv: causal rows that see no key */
    {1, 4, 2, 37, 131},  /* several key blocks, the last partial */
};

static const int dims[][2] = {{1, 1},     {3, 3},     {59, 59},   {111, 111}, {320, 320}, {512, 512},
                              {576, 576}, {576, 512}, {192, 128}, {64, 128},  {3, 5},     {128, 64}};

/* Smallcache's entries (templates/smallcache.c): per item of R rows from i0 with C visible keys, tile T. */
static void io_smallcache(const attn_spec *s, const attn_problem *p, unsigned long long *rd, unsigned long long *wr) {
  const long T = s->tile > 0 ? s->tile : s->br, d = p->d, dv = p->d_v, off = (long)p->n_kv - p->n;
  unsigned long long r = 0, w = 0;
  for (long i0 = 0; i0 < p->n; i0 += s->br) {
    const long R = p->n - i0 < s->br ? p->n - i0 : s->br;
    long C = p->n_kv;
    if (p->causal) C = i0 + R + off < 0 ? 0 : i0 + R + off < p->n_kv ? i0 + R + off : p->n_kv;
    const long nr = (R + T - 1) / T, nc = (C + T - 1) / T, ndv = (dv + T - 1) / T;
    r += (unsigned long long)(d * R * nc + d * C * nr + R * C * ndv + dv * C * nr);
    w += (unsigned long long)(R * C + R * dv);
  }
  const unsigned long long bh = (unsigned long long)p->batch * p->heads;
  *rd = r * bh;
  *wr = w * bh;
}

/* Lowrank's: per head, K and V once, Q once, O once. */
static void io_lowrank(const attn_problem *p, unsigned long long *rd, unsigned long long *wr) {
  const unsigned long long bh = (unsigned long long)p->batch * p->heads;
  *rd = bh * ((unsigned long long)p->n_kv * (p->d + p->d_v) + (unsigned long long)p->n * p->d);
  *wr = bh * (unsigned long long)p->n * p->d_v;
}

static double worst;
static int cases;

/* One spec on one shape: fresh inputs, rounded through the dtype; output poisoned; error against fp64. */
static void run_one(attn_runtime *rt, const attn_plan *plan, const attn_spec *s, const attn_problem *p0,
                    int count_io, double tol, float v_shift, unsigned long long seed) {
  attn_problem p;
  const int nrc = attn_problem_normalize(NULL, p0, &p);
  CHECK(nrc == ATTN_OK, "normalize: %s", attn_last_error(NULL));
  if (nrc != ATTN_OK) return;
  const size_t nq = (size_t)p.batch * p.heads * p.n * p.d, nk = (size_t)p.batch * p.heads_kv * p.n_kv * p.d;
  const size_t nv = (size_t)p.batch * p.heads_kv * p.n_kv * p.d_v, no = (size_t)p.batch * p.heads * p.n * p.d_v;
  float *q = malloc(nq * sizeof *q), *k = malloc(nk * sizeof *k), *v = malloc(nv * sizeof *v);
  float *o = malloc(no * sizeof *o);
  double *ref = malloc(no * sizeof *ref);
  char sum[256], ctx[768];
  attn_spec_summary(s, sum, sizeof sum);
  snprintf(ctx, sizeof ctx, "%s [%s]", shape(&p), sum);
  cases++;
  if (!q || !k || !v || !o || !ref) {
    CHECK(0, "%s: out of memory", ctx);
  } else {
    attn_fill_random(q, nq, seed * 4 + 1);
    attn_fill_random(k, nk, seed * 4 + 2);
    attn_fill_random(v, nv, seed * 4 + 3);
    for (size_t x = 0; x < nv; x++) v[x] += v_shift;
    attn_round_dtype(p.dtype, q, nq);
    attn_round_dtype(p.dtype, k, nk);
    attn_round_dtype(p.dtype, v, nv);
    attn_poison(o, no);
    attn_reference(&p, q, k, v, ref);
    attn_io io = {0, 0};
    const int rc = attn_plan_run_f32(plan, q, k, v, o, count_io ? &io : NULL, NULL);
    CHECK(rc == ATTN_OK, "%s: run: %s: %s", ctx, attn_strerror(rc), attn_last_error(rt));
    if (rc == ATTN_OK) {
      const double err = attn_rel_error(ref, o, no);
      CHECK(err <= tol, "%s: relative error %.3g > %g", ctx, err, tol);
      if (err > worst) worst = err;
      char iotxt[96] = "";
      if (count_io) {
        unsigned long long fr = 0, fw = 0;
        if (s->algo == ATTN_ALGO_SMALLCACHE) io_smallcache(s, &p, &fr, &fw);
        else io_lowrank(&p, &fr, &fw);
        CHECK(io.reads == fr && io.writes == fw, "%s: counted %llu reads / %llu writes, formula %llu / %llu", ctx,
              io.reads, io.writes, fr, fw);
        snprintf(iotxt, sizeof iotxt, "  io %llu/%llu%s", io.reads, io.writes,
                 io.reads == fr && io.writes == fw ? " (= formula)" : " (formula differs)");
      }
      printf("%s %s err %.2e%s\n", err <= tol ? "ok  " : "FAIL", ctx, err, iotxt);
    }
  }
  free(q);
  free(k);
  free(v);
  free(o);
  free(ref);
}

int main(int argc, char **argv) {
  attn_algo algo = ATTN_ALGO_AUTO;
  int dt = -1;
  if (argc == 3) {
    algo = !strcmp(argv[1], "flash") ? ATTN_ALGO_FLASH
           : !strcmp(argv[1], "smallcache") ? ATTN_ALGO_SMALLCACHE
           : !strcmp(argv[1], "lowrank") ? ATTN_ALGO_LOWRANK
                                             : ATTN_ALGO_AUTO;
    dt = attn_dtype_parse(argv[2]);
  }
  if (algo == ATTN_ALGO_AUTO || dt < 0) {
    fprintf(stderr, "usage: cpu_shapes flash|smallcache|lowrank f32|f16|bf16\n");
    return 2;
  }
  const attn_dtype dtype = (attn_dtype)dt;
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CPU, &rt);
  if (rc != ATTN_OK) {
    fprintf(stderr, "attn_open: %s: %s\n", attn_strerror(rc), attn_last_error(NULL));
    return 1;
  }
  const double exact_tol = dtype == ATTN_F32 ? 1e-4 : 1e-2;
  const int count_io = dtype != ATTN_F32 && algo != ATTN_ALGO_FLASH;
  const unsigned long long base = test_seed() * 1000003ULL + (unsigned long long)algo * 101 + (unsigned long long)dt;
  const int ndims = (int)(sizeof dims / sizeof dims[0]);
  for (int di = dtype == ATTN_BF16; di < ndims; di += dtype == ATTN_F32 ? 1 : 2) {
    const int kk = dtype == ATTN_F32 ? di : di / 2; /* index among this dtype's pairs */
    const int d = dims[di][0], dv = dims[di][1], causal = kk & 1, alt = (kk + kk / 2) & 1;
    attn_spec s = attn_spec_default(algo, ATTN_TARGET_CPU, dtype, d, causal);
    s.dv = dv != d ? dv : 0;
    float scale = 0.0f, v_shift = 0.0f; /* 1/sqrt(d); V uniform in (-1, 1) */
    double tol = exact_tol;
    if (algo == ATTN_ALGO_FLASH && alt) s.split = 2;
    if (algo == ATTN_ALGO_SMALLCACHE && alt) {
      s.br = 24; /* blocks of 24 rows, tiles of 7: partial ones along n, n_kv, d and d_v */
      s.tile = 7;
    }
    if (algo == ATTN_ALGO_LOWRANK) {
      if (alt && d <= 64) { /* Taylor rank C(d+2, 2) <= 2145 */
        s.feature = ATTN_FEAT_TAYLOR;
        s.degree = 2;
        s.br = s.bc = 16;
      } else {
        /* cpu_nan's 0.2/sqrt(d), capped at its d = 64 size of sqrt(scale) q (|x|^2 ~ 0.5): the features' variance
         * grows as exp(|x + y|^2), so the uncapped scale leaves little margin at d = 576 */
        scale = d <= 64 ? 0.2f / sqrtf((float)d) : 1.6f / (float)d;
      }
      tol = 0.1;
      /* V of mean 0.5: with zero-mean V and near-uniform weights the outputs of a small d_v can all be near zero
       * on some seeds, and any absolute approximation error then reads as a large relative one */
      v_shift = 0.5f;
    }
    attn_problem p0 = {.batch = 1, .heads = 1, .n = 1, .d = d, .d_v = dv, .dtype = dtype, .causal = causal,
                       .scale = scale, .tolerance = algo == ATTN_ALGO_LOWRANK ? 0.5 : 0.0, .algo = algo};
    char sum[256];
    attn_spec_summary(&s, sum, sizeof sum);
    /* one kernel per (d, d_v, causal, dtype) and configuration: the plans of later shapes find it compiled */
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
      attn_problem p = p0;
      p.batch = shapes[si].batch;
      p.heads = shapes[si].heads;
      p.heads_kv = shapes[si].heads_kv;
      p.n = shapes[si].n;
      p.n_kv = shapes[si].n_kv;
      attn_plan *sp = NULL;
      rc = attn_plan_create_spec(rt, &p, &s, count_io, "test", &sp);
      CHECK(rc == ATTN_OK, "%s [%s]: plan: %s: %s", shape(&p), sum, attn_strerror(rc), attn_last_error(rt));
      const unsigned long long seed = base + (unsigned long long)(di * 16) + si;
      if (rc == ATTN_OK) run_one(rt, sp, &s, &p, count_io, tol, v_shift, seed);
      attn_plan_destroy(sp);
    }
  }
  attn_close(rt);
  printf("cpu_shapes %s %s: %d cases, worst relative error %.2e, %d of %d checks failed\n", argv[1], argv[2], cases,
         worst, failures, checks);
  return failures ? 1 : 0;
}
