/* cpu_backward: attn_execute_lse and the CPU flash backward against fp64 on fresh random inputs (never zeros), with
 * every output poisoned (NaN) before each run and checked written. argv[1] picks a group:
 *   ref    the fp64 reference backward against central finite differences of the fp64 forward (so that it cannot be
 *          wrong the way the kernel is), bad input (NULL pointers, plans of the wrong kind), lowrank with no row, and
 *          smallcache's lse;
 *   f32    shape classes: n = 1, odd n, n not a multiple of a block, n_kv != n both ways (rows that see no key),
 *          causal both ways, GQA 4/2, batch > 1, d_v != d, d in {3, 64}; the same bits twice with 2 threads and
 *          once with 1; lse through attn_execute_lse in the causal cases; Br and Bc apart from the spec (16 x 96,
 *          96 x 16, 7 x 13) and the sizes the template does not take refused;
 *   half   f16 and bf16;
 *   nan    NaN in q, k, v and dout: the gradients' NaN pattern is the fp64 backward's, element by element;
 *   sweep  (nightly) d in 1..576 (1, 3, 111, ...), d_v != d, larger n, packed and split-K forwards, half precision,
 *          all through attn_execute_lse.
 * Where a case takes the fp64 forward's O and lse (rounded) instead of the forward kernel's, it says so: a forward
 * kernel costs ~5 s to compile, and CI keeps to a few.
 * Limits: f32 1e-5 relative (Frobenius; fp32 sums of at most a few hundred terms against fp64); f16 1e-3 and bf16
 * 8e-3, twice the unit roundoff (2^-11, 2^-8) of the rounded outputs (measured: 2e-4 and 1.4e-3; O and lse are the
 * same rounded ones on both sides). */
#include "bwd_case.h"
#include "spec_bwd.h"

static int cases;

static double tol_of(attn_dtype t) { return t == ATTN_F32 ? 1e-5 : t == ATTN_F16 ? 1e-3 : 8e-3; }

/* out against ref (bwd_case.h's bwd_compare), its error printed. */
static void compare(const char *what, const attn_problem *p, const double *ref, const float *out, size_t count,
                    double tol, long zd) {
  printf("  %-4s err %.2e\n", what, bwd_compare(what, p, ref, out, count, tol, zd));
}

/* A backward plan for p with Br = br and Bc = bc (0, 0: attn_plan_create_backward's own): the default plan with its
 * kernel swapped for the spec's (what a tuned row gives the runtime). */
static int bwd_plan(attn_runtime *rt, const attn_problem *p, int br, int bc, attn_plan **out) {
  int rc = attn_plan_create_backward(rt, p, out);
  if (rc != ATTN_OK || !br) return rc;
  attn_plan *plan = *out;
  attn_spec s = plan->spec;
  s.br = br, s.bc = bc;
  attn_cpu_kernel *k = NULL;
  rc = attn_cpu_load_backward(rt, &s, 0, &k);
  if (rc != ATTN_OK) {
    attn_plan_destroy(plan);
    *out = NULL;
    return rc;
  }
  attn_cpu_unload(plan->cpu);
  plan->cpu = k;
  plan->spec = s;
  return ATTN_OK;
}

/* One problem: lse against fp64 (fwd: through attn_execute_lse, else the fp64 forward's), the gradients against the
 * fp64 backward, and the same bits on a second run (and on rt1, a one-thread runtime, when given); Br, Bc as
 * bwd_plan's. */
static void run_bwd_tiles(attn_runtime *rt, attn_runtime *rt1, const attn_problem *p0, unsigned long long seed, int fwd,
                          int br, int bc) {
  bwd_case c;
  if (bwd_setup(p0, seed, 7, &c) != 0 || bwd_forward(rt, &c, fwd) != 0) {
    CHECK(0, "%s: setup failed", shape(p0));
    bwd_free(&c);
    return;
  }
  const attn_problem *p = &c.p;
  cases++;
  printf("%s %s%s", shape(p), attn_dtype_name(p->dtype), br ? "" : "\n");
  if (br) printf(" Br=%d Bc=%d\n", br, bc);
  double *lref = malloc(c.nl * sizeof(double)), *rq = malloc(c.nq * 8), *rk = malloc(c.nk * 8), *rv = malloc(c.nv * 8);
  if (!lref || !rq || !rk || !rv) {
    CHECK(0, "out of memory");
    goto out;
  }
  ref_lse(p, c.q, c.k, lref);
  size_t bad = 0;
  for (size_t i = 0; i < c.nl; i++)
    if (!(lref[i] == c.lse[i] || fabs(lref[i] - c.lse[i]) <= 2e-5 * (1 + fabs(lref[i])))) bad++;
  CHECK(bad == 0, "%s: %zu of %zu lse entries off the fp64 lse by > 2e-5 (or unwritten)", shape(p), bad, c.nl);
  attn_reference_backward(p, c.q, c.k, c.v, c.o, c.g, rq, rk, rv);
  attn_plan *plan = NULL;
  int rc = bwd_plan(rt, p, br, bc, &plan);
  CHECK(rc == ATTN_OK, "%s: backward plan: %s", shape(p), attn_last_error(rt));
  if (rc != ATTN_OK) goto out;
  float *dq = NULL, *dk = NULL, *dv = NULL, *dq2 = NULL, *dk2 = NULL, *dv2 = NULL;
  if (bwd_run(plan->rt, plan, NULL, &c, c.lse, &dq, &dk, &dv) == 0) {
    const double tol = tol_of(p->dtype);
    compare("dq", p, rq, dq, c.nq, tol, p->d);
    compare("dk", p, rk, dk, c.nk, tol, 0);
    compare("dv", p, rv, dv, c.nv, tol, 0);
    if (bwd_run(plan->rt, plan, NULL, &c, c.lse, &dq2, &dk2, &dv2) == 0)
      CHECK(!memcmp(dq, dq2, c.nq * 4) && !memcmp(dk, dk2, c.nk * 4) && !memcmp(dv, dv2, c.nv * 4),
            "%s: a second run gave other bits", shape(p));
    free(dq2), free(dk2), free(dv2);
    dq2 = dk2 = dv2 = NULL;
    attn_plan *plan1 = NULL;
    if (rt1 && bwd_plan(rt1, p, br, bc, &plan1) == ATTN_OK &&
        bwd_run(rt1, plan1, NULL, &c, c.lse, &dq2, &dk2, &dv2) == 0)
      CHECK(!memcmp(dq, dq2, c.nq * 4) && !memcmp(dk, dk2, c.nk * 4) && !memcmp(dv, dv2, c.nv * 4),
            "%s: one thread gave other bits than two", shape(p));
    else
      CHECK(!rt1, "%s: one-thread run failed: %s", shape(p), attn_last_error(rt1));
    attn_plan_destroy(plan1);
  }
  free(dq), free(dk), free(dv), free(dq2), free(dk2), free(dv2);
  attn_plan_destroy(plan);
out:
  free(lref), free(rq), free(rk), free(rv);
  bwd_free(&c);
}

static void run_bwd(attn_runtime *rt, attn_runtime *rt1, const attn_problem *p0, unsigned long long seed, int fwd) {
  run_bwd_tiles(rt, rt1, p0, seed, fwd, 0, 0);
}

/* Br and Bc from the spec, apart: the sizes the template takes are checked and built, the others refused with a
 * reason by the check and by the runtime. */
static void check_tiles(attn_runtime *rt, attn_runtime *rt1, unsigned long long *seed) {
  /* causal both ways (rows that see no key, keys no row sees), blocks that do not divide n, odd d and d_v */
  static const struct { int br, bc; } t[] = {{16, 96}, {96, 16}, {7, 13}};
  const attn_problem ps[] = {
      {.batch = 1, .heads = 4, .heads_kv = 2, .n = 101, .n_kv = 70, .d = 64, .causal = 1},
      {.batch = 1, .heads = 2, .n = 50, .n_kv = 123, .d = 64, .causal = 1, .scale = 0.4f},
      {.batch = 2, .heads = 1, .n = 45, .d = 3, .d_v = 5}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    run_bwd_tiles(rt, i == 2 ? rt1 : NULL, &ps[i], (*seed)++, 0, t[i].br, t[i].bc);
  attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, ATTN_F32, 64, 0);
  char err[256];
  s.br = 1, s.bc = ATTN_BWD_MAX_BLOCK;
  CHECK(attn_spec_check_backward(&s, err, sizeof err) == ATTN_OK, "Br=1 Bc=%d refused: %s", s.bc, err);
  const struct { int br, bc, d, split, unroll, algo; } bad[] = {
      {0, 64, 64, 0, 0, ATTN_ALGO_FLASH},     {64, 0, 64, 0, 0, ATTN_ALGO_FLASH},
      {ATTN_BWD_MAX_BLOCK + 1, 64, 64, 0, 0, ATTN_ALGO_FLASH}, {64, ATTN_BWD_MAX_BLOCK + 1, 64, 0, 0, ATTN_ALGO_FLASH},
      {512, 512, 576, 0, 0, ATTN_ALGO_FLASH}, {64, 64, 64, 2, 0, ATTN_ALGO_FLASH},
      {64, 64, 64, 0, 4, ATTN_ALGO_FLASH},    {64, 64, 64, 0, 0, ATTN_ALGO_SMALLCACHE}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    attn_spec b = attn_spec_default((attn_algo)bad[i].algo, ATTN_TARGET_CPU, ATTN_F32, bad[i].d, 0);
    b.br = bad[i].br, b.bc = bad[i].bc, b.split = bad[i].split, b.unroll = bad[i].unroll;
    err[0] = '\0';
    CHECK(attn_spec_check_backward(&b, err, sizeof err) != ATTN_OK && err[0] && !strchr(err, '\n'),
          "backward spec %zu (Br=%d Bc=%d d=%d) accepted", i, b.br, b.bc, b.d);
    char *src = attn_spec_source_backward(&b, 0, err, sizeof err);
    CHECK(!src, "backward source of spec %zu generated", i);
    free(src);
    attn_cpu_kernel *k = NULL;
    CHECK(attn_cpu_load_backward(rt, &b, 0, &k) != ATTN_OK && !k, "backward kernel of spec %zu loaded", i);
    printf("refused: %s\n", err);
  }
  cases++;
}

/* NaN planted in q (row iq), k (key jk), v (key jv, column 0) and dout (row ig) of head 0: the kernel's gradients are
 * NaN exactly where the fp64 backward's are (given the kernel's forward O and lse, as the kernel is). */
static void run_nan(attn_runtime *rt, const attn_problem *p0, long iq, long jk, long jv, long ig) {
  bwd_case c;
  if (bwd_setup(p0, 99, 7, &c) != 0) {
    CHECK(0, "%s: setup failed", shape(p0));
    bwd_free(&c);
    return;
  }
  const attn_problem *p = &c.p;
  if (iq >= 0) c.q[iq * p->d] = NAN;
  if (jk >= 0) c.k[jk * p->d + p->d - 1] = NAN;
  if (jv >= 0) c.v[jv * p->d_v] = NAN;
  if (ig >= 0) c.g[ig * p->d_v] = NAN;
  if (bwd_forward(rt, &c, 0) != 0) {
    bwd_free(&c);
    return;
  }
  cases++;
  double *rq = malloc(c.nq * 8), *rk = malloc(c.nk * 8), *rv = malloc(c.nv * 8);
  attn_plan *plan = NULL;
  float *dq = NULL, *dk = NULL, *dv = NULL;
  if (rq && rk && rv && attn_plan_create_backward(rt, p, &plan) == ATTN_OK &&
      bwd_run(rt, plan, NULL, &c, c.lse, &dq, &dk, &dv) == 0) {
    attn_reference_backward(p, c.q, c.k, c.v, c.o, c.g, rq, rk, rv);
    const struct { const char *name; const double *r; const float *o; size_t n; } a[] = {
        {"dq", rq, dq, c.nq}, {"dk", rk, dk, c.nk}, {"dv", rv, dv, c.nv}};
    for (int t = 0; t < 3; t++) {
      size_t diff = 0, nans = 0;
      for (size_t i = 0; i < a[t].n; i++) {
        diff += !isnan(a[t].r[i]) != !isnan(a[t].o[i]);
        nans += isnan(a[t].r[i]) != 0;
      }
      CHECK(diff == 0, "%s nan(q %ld, k %ld, v %ld, dout %ld): %s: %zu elements differ in NaN-ness from fp64", shape(p),
            iq, jk, jv, ig, a[t].name, diff);
      printf("%s nan(q %ld, k %ld, v %ld, dout %ld): %s has %zu NaN, as fp64\n", shape(p), iq, jk, jv, ig, a[t].name,
             nans);
    }
  } else {
    CHECK(0, "%s: backward failed: %s", shape(p), attn_last_error(rt));
  }
  free(dq), free(dk), free(dv), free(rq), free(rk), free(rv);
  attn_plan_destroy(plan);
  bwd_free(&c);
}

/* The fp64 backward against central differences of L = sum(dO ∘ O) (bwd_case.h's bwd_check_fd): its derivative in
 * each input is the backward's gradient. */
static void check_reference(void) {
  static const attn_problem ps[] = {
      {.batch = 1, .heads = 2, .heads_kv = 1, .n = 3, .n_kv = 4, .d = 3, .d_v = 2, .causal = 1, .scale = 0.9f},
      {.batch = 1, .heads = 2, .heads_kv = 1, .n = 4, .n_kv = 3, .d = 3, .d_v = 2, .causal = 1, .scale = 0.9f},
      {.batch = 2, .heads = 1, .n = 3, .d = 2, .d_v = 3, .causal = 0, .scale = 1.3f}};
  for (size_t t = 0; t < sizeof ps / sizeof ps[0]; t++) {
    bwd_case c;
    if (bwd_setup(&ps[t], 7 + t, 7, &c) != 0) {
      CHECK(0, "setup failed");
      bwd_free(&c);
      continue;
    }
    double mag;
    const double worst = bwd_check_exact_fd(&c, "", &mag);
    if (worst < INFINITY) {
      printf("%s: fp64 backward within %.2e of finite differences\n", shape(&c.p), worst);
      cases++;
    }
    bwd_free(&c);
  }
}

static void check_bad(attn_runtime *rt) {
  const attn_problem p = {.batch = 1, .heads = 2, .n = 5, .d = 64, .causal = 1}; /* the f32 group's kernels */
  float buf[640], lse[10];
  attn_fill_random(buf, 640, 3);
  attn_plan *fw = NULL, *bw = NULL, *sc = NULL;
  attn_plan *out = (attn_plan *)&out; /* must come back NULL on failure */
  CHECK(attn_plan_create_backward(NULL, &p, &out) == ATTN_EINVAL && !out, "NULL runtime accepted");
  CHECK(attn_plan_create_backward(rt, NULL, &out) == ATTN_EINVAL, "NULL problem accepted");
  CHECK(attn_plan_create_backward(rt, &p, NULL) == ATTN_EINVAL, "NULL out accepted");
  attn_problem lr = p;
  lr.algo = ATTN_ALGO_LOWRANK;
  lr.tolerance = 0.1;
  /* lowrank without a measured row: the forward runs flash, so the backward is flash's (lowrank's own gradient:
   * tests/cpu_bwd_lowrank.c) */
  attn_plan *lrp = NULL;
  CHECK(attn_plan_create_backward(rt, &lr, &lrp) == ATTN_OK && !strncmp(attn_plan_describe(lrp), "flash", 5),
        "lowrank with no row: backward %s", lrp ? attn_plan_describe(lrp) : attn_last_error(rt));
  printf("lowrank with no row: %s\n", attn_plan_describe(lrp));
  attn_plan_destroy(lrp);
  attn_problem sp = p;
  sp.algo = ATTN_ALGO_SMALLCACHE;
  if (attn_plan_create(rt, &p, &fw) != ATTN_OK || attn_plan_create_backward(rt, &p, &bw) != ATTN_OK ||
      attn_plan_create(rt, &sp, &sc) != ATTN_OK) {
    CHECK(0, "plans: %s", attn_last_error(rt));
  } else {
    float *b = buf;
    CHECK(attn_execute_lse(NULL, b, b, b, b, lse) == ATTN_EINVAL, "NULL plan accepted");
    CHECK(attn_execute_lse(fw, b, b, b, b, NULL) == ATTN_EINVAL, "NULL lse accepted");
    CHECK(attn_execute_lse(fw, NULL, b, b, b, lse) == ATTN_EINVAL, "NULL q accepted");
    CHECK(attn_execute_lse(bw, b, b, b, b, lse) == ATTN_EINVAL, "a backward plan ran attn_execute_lse");
    CHECK(attn_execute(bw, b, b, b, b) == ATTN_EINVAL, "a backward plan ran attn_execute");
    /* smallcache keeps an lse too */
    float o[640];
    double lref[10];
    attn_problem np;
    attn_poison(lse, 10);
    CHECK(attn_problem_normalize(NULL, &p, &np) == ATTN_OK, "normalize");
    ref_lse(&np, b, b, lref);
    CHECK(attn_execute_lse(sc, b, b, b, o, lse) == ATTN_OK, "smallcache lse: %s", attn_last_error(rt));
    for (int i = 0; i < 10; i++)
      CHECK(lref[i] == lse[i] || fabs(lref[i] - lse[i]) <= 2e-5 * (1 + fabs(lref[i])), "smallcache lse[%d] %g, fp64 %g",
            i, lse[i], lref[i]);
    CHECK(attn_execute_backward(NULL, b, b, b, b, lse, b, b, b, b) == ATTN_EINVAL, "NULL plan accepted");
    CHECK(attn_execute_backward(fw, b, b, b, b, lse, b, b, b, b) == ATTN_EINVAL, "a forward plan ran the backward");
    for (int i = 0; i < 9; i++) {
      const void *x[9] = {b, b, b, b, lse, b, b, b, b};
      x[i] = NULL;
      CHECK(attn_execute_backward(bw, x[0], x[1], x[2], x[3], x[4], x[5], (void *)x[6], (void *)x[7], (void *)x[8]) ==
                ATTN_EINVAL,
            "argument %d NULL accepted", i);
    }
    printf("bad input refused: %s\n", attn_last_error(rt));
  }
  attn_plan_destroy(fw);
  attn_plan_destroy(bw);
  attn_plan_destroy(sc);
  cases++;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: cpu_backward ref|f32|half|nan|sweep\n");
    return 2;
  }
  attn_runtime *rt = NULL, *rt1 = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CPU, &rt);
  if (rc != ATTN_OK) {
    fprintf(stderr, "attn_open: %s: %s\n", attn_strerror(rc), attn_last_error(NULL));
    return 1;
  }
  unsigned long long seed = 1;
  const char *g = argv[1];
  if (!strcmp(g, "ref")) {
    check_reference();
    check_bad(rt);
  } else if (!strcmp(g, "f32")) {
    CHECK(rt->threads == 2, "the test expects ATTN_THREADS=2 (has %d)", rt->threads);
    setenv("ATTN_THREADS", "1", 1);
    rc = attn_open(NULL, ATTN_TARGET_CPU, &rt1);
    CHECK(rc == ATTN_OK && rt1->threads == 1, "one-thread runtime: %s", attn_last_error(NULL));
    for (int causal = 0; causal <= 1; causal++) {
      const attn_problem ps[] = {
          {.batch = 1, .heads = 2, .n = 1, .d = 64, .causal = causal},
          {.batch = 1, .heads = 2, .n = 67, .d = 64, .causal = causal},
          {.batch = 1, .heads = 1, .n = 100, .n_kv = 37, .d = 64, .causal = causal},
          {.batch = 1, .heads = 1, .n = 37, .n_kv = 150, .d = 64, .causal = causal},
          {.batch = 1, .heads = 4, .heads_kv = 2, .n = 70, .n_kv = 90, .d = 64, .causal = causal},
          {.batch = 2, .heads = 2, .n = 45, .d = 64, .causal = causal, .scale = 0.3f},
      };
      /* the forward kernel's lse and O where causal (rows that see no key: -inf); the fp64 forward's otherwise */
      for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) run_bwd(rt, i == 4 ? rt1 : NULL, &ps[i], seed++, causal);
    }
    /* d and d_v of other sizes (d = 1 and 111 nightly: each head dimension is a kernel to compile) */
    const attn_problem more = {.batch = 1, .heads = 4, .heads_kv = 2, .n = 29, .n_kv = 31, .d = 3, .d_v = 5,
                               .causal = 1};
    run_bwd(rt, rt1, &more, seed++, 0);
    check_tiles(rt, rt1, &seed);
  } else if (!strcmp(g, "half")) {
    const attn_problem ps[] = {
        {.batch = 1, .heads = 4, .heads_kv = 2, .n = 67, .n_kv = 80, .d = 64, .causal = 1, .dtype = ATTN_F16},
        {.batch = 1, .heads = 2, .n = 90, .n_kv = 47, .d = 64, .causal = 1, .dtype = ATTN_F16},
        {.batch = 1, .heads = 4, .heads_kv = 2, .n = 67, .n_kv = 80, .d = 64, .d_v = 24, .dtype = ATTN_BF16},
        {.batch = 1, .heads = 2, .n = 1, .d = 64, .d_v = 24, .dtype = ATTN_BF16},
    };
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) run_bwd(rt, NULL, &ps[i], seed++, 0);
  } else if (!strcmp(g, "nan")) {
    /* head 0's rows and keys: q row 5, k key 20, v key 3, dout row 40; causal: row 5 sees keys 0..5 + n_kv - n */
    for (int causal = 0; causal <= 1; causal++) {
      const attn_problem p = {.batch = 1, .heads = 2, .heads_kv = 1, .n = 70, .n_kv = 66, .d = 64, .causal = causal};
      run_nan(rt, &p, 5, -1, -1, -1);
      run_nan(rt, &p, -1, 20, -1, -1);
      run_nan(rt, &p, -1, -1, 3, -1);
      run_nan(rt, &p, -1, -1, -1, 40);
      run_nan(rt, &p, 2, 60, 3, 40); /* causal: row 2 sees no key (2 + 66 - 70 < 0), key 60 only late rows */
    }
  } else if (!strcmp(g, "sweep")) {
    static const int ds[] = {1, 2, 3, 8, 16, 31, 64, 80, 111, 128, 192, 256, 576};
    for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++)
      for (int causal = 0; causal <= 1; causal++) {
        const attn_problem ps[] = {
            {.batch = 2, .heads = 6, .heads_kv = 2, .n = 129, .n_kv = 200, .d = ds[di], .causal = causal},
            {.batch = 1, .heads = 3, .n = 257, .n_kv = 63, .d = ds[di], .causal = causal},
            /* packed rows and split-K in the forward (its merge writes lse) */
            {.batch = 1, .heads = 8, .heads_kv = 1, .n = 1, .n_kv = 300, .d = ds[di], .causal = causal},
            {.batch = 1, .heads = 2, .n = 71, .n_kv = 65, .d = ds[di], .d_v = ds[di] / 2 + 1, .causal = causal},
        };
        for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) run_bwd(rt, NULL, &ps[i], seed++, 1);
      }
    for (int t = ATTN_F16; t <= ATTN_BF16; t++) {
      const attn_problem p = {.batch = 1, .heads = 4, .heads_kv = 1, .n = 300, .d = 128, .d_v = 96, .causal = 1,
                              .dtype = (attn_dtype)t};
      run_bwd(rt, NULL, &p, seed++, 1);
    }
  } else {
    fprintf(stderr, "unknown group %s\n", g);
    attn_close(rt);
    return 2;
  }
  attn_close(rt);
  attn_close(rt1);
  printf("%d cases, %d checks, %d failures\n", cases, checks, failures);
  return failures ? 1 : 0;
}
