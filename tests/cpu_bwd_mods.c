/* cpu_bwd_mods: the CPU flash backward with score modifiers (window, softcap, ALiBi) against the fp64 backward of the
 * same definition (runtime/reference.c), on fresh random inputs with every gradient poisoned (NaN) before each run.
 * argv[1] picks a group:
 *   ref    the fp64 backward with each modifier, alone and together, against central finite differences of the fp64
 *          forward (tiny shapes, causal both ways, GQA, d_v != d, n_kv != n); no kernel;
 *   ci     two kernels with all three modifiers compiled in, each modifier turned on alone at run time, all together
 *          and none: f32 causal GQA d = 16 through attn_plan_create_backward (its own 64 x 64 tiles, the ALiBi slopes
 *          copied into the plan), bf16 not causal (the window on both sides) d = 16 d_v = 24 with 16 x 16 tiles;
 *          windows of 5 (shorter than a tile) and 90 (longer), odd n, n_kv != n both ways, rows that see no key;
 *          the same bits twice and with one thread; +Inf in a key under a softcap (finite capped scores, NaN in dq
 *          exactly where fp64 has it);
 *   cuda   on tests/fake_libcuda.c (ATTN_LIBCUDA; exit 77 when it cannot be opened): CUDA backward plans refuse
 *          each modifier and lowrank with one line saying so, before anything is compiled;
 *   sweep  (nightly) every modifier alone and together through attn_plan_create_backward (its own kernel), f32, f16
 *          and bf16, d_v != d, GQA, causal both ways, windows from 1 to past n_kv, with the forward kernel's O and lse
 *          (attn_execute_lse) in f32.
 * The fp64 O and lse (rounded to the dtype and fp32) stand in for the forward's where a case says fwd=0: a forward
 * kernel costs seconds to compile. Limits as tests/cpu_backward.c's: f32 1e-5, f16 1e-3, bf16 8e-3 (relative
 * Frobenius error, floored at an RMS of 0.1). */
#include "bwd_case.h"
#include "spec_bwd.h"

static int cases;
static const float slopes[8] = {0.5f, 0.25f, 0.125f, 0.0625f, 0.03125f, 0.75f, 0.2f, 0.01f};

static double tol_of(attn_dtype t) { return t == ATTN_F32 ? 1e-5 : t == ATTN_F16 ? 1e-3 : 8e-3; }

/* Fresh inputs rounded to the dtype; O and lse from the forward kernel (fwd) or the fp64 forward. */
static int msetup(attn_runtime *rt, const attn_problem *p0, unsigned long long seed, int fwd, bwd_case *c) {
  if (bwd_setup(p0, seed, 11, c) != 0) return -1;
  for (size_t i = 0; i < c->nq; i++) c->q[i] *= 2.0f; /* scores of a few units: the softcaps below bite */
  return bwd_forward(rt, c, fwd);
}

/* out against ref (bwd_case.h), within the dtype's limit. */
static double compare(const char *what, const attn_problem *p, const double *ref, const float *out, size_t count,
                      long zd) {
  return bwd_compare(what, p, ref, out, count, tol_of(p->dtype), zd);
}

/* One case: the gradients against fp64, and the same bits on a second run and on rt1 (one thread) when given. */
static void run_case_mod(attn_runtime *rt, attn_runtime *rt1, attn_plan *plan, const attn_cpu_kernel *kern,
                         const attn_cpu_kernel *kern1, const attn_problem *p0, unsigned long long seed, int fwd) {
  bwd_case c;
  if (msetup(rt, p0, seed, fwd, &c) != 0) {
    CHECK(0, "%s: setup failed", shape(p0));
    bwd_free(&c);
    return;
  }
  const attn_problem *p = &c.p;
  cases++;
  double *rq = malloc(c.nq * 8 + 8), *rk = malloc(c.nk * 8 + 8), *rv = malloc(c.nv * 8 + 8);
  float *dq = NULL, *dk = NULL, *dv = NULL, *dq2 = NULL, *dk2 = NULL, *dv2 = NULL;
  if (!rq || !rk || !rv) {
    CHECK(0, "out of memory");
  } else if (bwd_run(rt, plan, kern, &c, c.lse, &dq, &dk, &dv) == 0) {
    attn_reference_backward(p, c.q, c.k, c.v, c.o, c.g, rq, rk, rv);
    const double eq = compare("dq", p, rq, dq, c.nq, p->d), ek = compare("dk", p, rk, dk, c.nk, 0),
                 ev = compare("dv", p, rv, dv, c.nv, 0);
    printf("%s %s %s%s: err dq %.2e dk %.2e dv %.2e\n", shape(p), mods(p), kern ? "kernel" : "plan",
           fwd ? " fwd" : "", eq, ek, ev);
    if (bwd_run(rt, plan, kern, &c, c.lse, &dq2, &dk2, &dv2) == 0)
      CHECK(!memcmp(dq, dq2, c.nq * 4) && !memcmp(dk, dk2, c.nk * 4) && !memcmp(dv, dv2, c.nv * 4),
            "%s %s: a second run gave other bits", shape(p), mods(p));
    if (rt1 && kern1) {
      free(dq2), free(dk2), free(dv2);
      dq2 = dk2 = dv2 = NULL;
      if (bwd_run(rt1, NULL, kern1, &c, c.lse, &dq2, &dk2, &dv2) == 0)
        CHECK(!memcmp(dq, dq2, c.nq * 4) && !memcmp(dk, dk2, c.nk * 4) && !memcmp(dv, dv2, c.nv * 4),
              "%s %s: one thread gave other bits than two", shape(p), mods(p));
    }
  }
  free(dq), free(dk), free(dv), free(dq2), free(dk2), free(dv2), free(rq), free(rk), free(rv);
  bwd_free(&c);
}

/* +Inf in key 10 of KV head 0 (column 0) with a softcap: the capped scores are finite (±c), so the rows that see the
 * key stay finite in O; dS there is multiplied by 1 - tanh²(±inf) = 0, and dq = dS K takes 0·inf = NaN. The kernel's
 * gradients are NaN exactly where the fp64 backward's are, and the finite ones within the limit. */
static void run_inf(attn_runtime *rt, const attn_cpu_kernel *kern, const attn_problem *p0) {
  bwd_case c;
  if (msetup(rt, p0, 5, 0, &c) != 0) {
    CHECK(0, "%s: setup failed", shape(p0));
    bwd_free(&c);
    return;
  }
  const attn_problem *p = &c.p;
  c.k[10 * p->d] = INFINITY;
  attn_to_dtype(p->dtype, c.k, c.nk, c.tk);
  double *o = malloc(c.no * 8 + 8), *l = malloc(c.nl * 8 + 8);
  double *rq = malloc(c.nq * 8 + 8), *rk = malloc(c.nk * 8 + 8), *rv = malloc(c.nv * 8 + 8);
  float *dq = NULL, *dk = NULL, *dv = NULL;
  if (o && l && rq && rk && rv) {
    attn_reference(p, c.q, c.k, c.v, o);
    ref_lse(p, c.q, c.k, l);
    size_t nan_o = 0;
    for (size_t i = 0; i < c.no; i++) nan_o += !isfinite(o[i]), c.o[i] = (float)o[i];
    for (size_t i = 0; i < c.nl; i++) c.lse[i] = (float)l[i];
    CHECK(nan_o == 0, "%s: the capped forward is not finite (%zu)", shape(p), nan_o);
    attn_round_dtype(p->dtype, c.o, c.no);
    attn_to_dtype(p->dtype, c.o, c.no, c.to);
    attn_reference_backward(p, c.q, c.k, c.v, c.o, c.g, rq, rk, rv);
    if (bwd_run(rt, NULL, kern, &c, c.lse, &dq, &dk, &dv) == 0) {
      const struct { const char *name; const double *r; float *x; size_t n; long zd; } a[] = {
          {"dq", rq, dq, c.nq, p->d}, {"dk", rk, dk, c.nk, 0}, {"dv", rv, dv, c.nv, 0}};
      for (int t = 0; t < 3; t++) {
        size_t diff = 0, nans = 0;
        double *r = malloc(a[t].n * 8 + 8);
        if (!r) continue;
        for (size_t i = 0; i < a[t].n; i++) {
          diff += !isnan(a[t].r[i]) != !isnan(a[t].x[i]);
          nans += isnan(a[t].r[i]) != 0;
          r[i] = isnan(a[t].r[i]) ? 0 : a[t].r[i]; /* the finite ones compared */
          if (isnan(a[t].x[i])) a[t].x[i] = 0;
        }
        CHECK(diff == 0, "%s %s: %s: %zu elements differ in NaN-ness from fp64", shape(p), mods(p), a[t].name, diff);
        const double err = compare(a[t].name, p, r, a[t].x, a[t].n, a[t].zd);
        printf("%s %s +inf in a key: %s has %zu NaN as fp64, the rest within %.2e\n", shape(p), mods(p), a[t].name,
               nans, err);
        free(r);
      }
      cases++;
    }
  }
  free(o), free(l), free(rq), free(rk), free(rv), free(dq), free(dk), free(dv);
  bwd_free(&c);
}

/* The fp64 backward with modifiers against central differences of L = sum(dO ∘ O) (bwd_case.h's bwd_check_fd). */
static void check_reference(void) {
  const attn_problem base[] = {
      {.batch = 1, .heads = 2, .heads_kv = 1, .n = 5, .n_kv = 6, .d = 3, .d_v = 2, .causal = 1, .scale = 0.9f},
      {.batch = 1, .heads = 2, .heads_kv = 1, .n = 6, .n_kv = 4, .d = 3, .d_v = 2, .causal = 0, .scale = 1.3f},
      {.batch = 2, .heads = 1, .n = 5, .d = 2, .d_v = 3, .causal = 0, .scale = 1.1f}};
  const struct { int window; float softcap; int alibi; } m[] = {{2, 0, 0}, {0, 0.8f, 0}, {0, 0, 1}, {3, 1.5f, 1}};
  for (size_t t = 0; t < sizeof base / sizeof base[0]; t++)
    for (size_t mi = 0; mi < sizeof m / sizeof m[0]; mi++) {
      attn_problem p0 = base[t];
      p0.window = m[mi].window, p0.softcap = m[mi].softcap, p0.alibi_slopes = m[mi].alibi ? slopes : NULL;
      bwd_case c;
      if (msetup(NULL, &p0, 7 + t * 5 + mi, 0, &c) != 0) {
        CHECK(0, "setup failed");
        bwd_free(&c);
        continue;
      }
      const attn_problem *p = &c.p;
      double mag;
      const double worst = bwd_check_exact_fd(&c, mods(p), &mag);
      if (worst < INFINITY) {
        CHECK(mag > 1e-3, "%s %s: gradients all near 0: nothing measured", shape(p), mods(p));
        printf("%s %s: fp64 backward within %.2e of finite differences (largest %.3f)\n", shape(p), mods(p), worst,
               mag);
        cases++;
      }
      bwd_free(&c);
    }
  /* the softcap's derivative is there: without it (the capped scores' backward taken as the plain one) the
   * reference would differ from finite differences; check that it differs from the plain backward at all */
  attn_problem p0 = base[2];
  p0.softcap = 0.5f;
  bwd_case c;
  if (msetup(NULL, &p0, 3, 0, &c) == 0) {
    double *r1 = malloc(c.nq * 8), *r2 = malloc(c.nq * 8), *k1 = malloc(c.nk * 8), *v1 = malloc(c.nv * 8);
    if (r1 && r2 && k1 && v1) {
      attn_reference_backward(&c.p, c.q, c.k, c.v, NULL, c.g, r1, k1, v1);
      attn_problem plain = c.p;
      plain.softcap = 0;
      attn_reference_backward(&plain, c.q, c.k, c.v, NULL, c.g, r2, k1, v1);
      double diff = 0;
      for (size_t i = 0; i < c.nq; i++) diff += fabs(r1[i] - r2[i]);
      CHECK(diff > 1e-3, "softcap 0.5 leaves dq as without it (%.3g)", diff);
    }
    free(r1), free(r2), free(k1), free(v1);
  }
  bwd_free(&c);
}

/* A backward plan for p: attn_plan_create_backward's own (tile 0), or one with Br = Bc = tile made from the default
 * spec with those tiles (what a tuned row gives the runtime). */
static int mplan(attn_runtime *rt, const attn_problem *p, int tile, attn_plan **out) {
  int rc;
  if (!tile) {
    rc = attn_plan_create_backward(rt, p, out);
  } else {
    attn_problem np;
    rc = attn_problem_normalize(rt, p, &np);
    attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, np.dtype, np.d, np.causal);
    s.dv = np.d_v != np.d ? np.d_v : 0;
    s.window = np.window > 0, s.softcap = np.softcap > 0, s.alibi = np.alibi_slopes != NULL;
    s.br = s.bc = tile;
    if (rc == ATTN_OK) rc = attn_plan_create_backward_spec(rt, p, &s, 0, "test tiles", out);
  }
  CHECK(rc == ATTN_OK, "%s %s: backward plan: %s", shape(p), mods(p), attn_last_error(rt));
  return rc;
}

/* Every modifier alone and together on a kernel with all three compiled in, for the shapes of p0 (p0's modifiers
 * are the kernel's: all on). */
static void ci_kernel(attn_runtime *rt, attn_runtime *rt1, const attn_problem *p0, int tile,
                      const attn_problem *shapes, size_t nshapes, unsigned long long *seed) {
  attn_plan *plan = NULL, *plan1 = NULL;
  if (mplan(rt, p0, tile, &plan) != ATTN_OK) return;
  if (mplan(rt1, p0, tile, &plan1) != ATTN_OK) plan1 = NULL;
  printf("kernel: %s\n", attn_plan_describe(plan));
  const struct { int window; float softcap; int alibi; } m[] = {
      {5, 0, 0}, {90, 0, 0}, {0, 1.5f, 0}, {0, 0, 1}, {5, 2.0f, 1}, {90, 1.0f, 1}, {0, 0, 0}};
  for (size_t s = 0; s < nshapes; s++)
    for (size_t mi = 0; mi < sizeof m / sizeof m[0]; mi++) {
      attn_problem p = shapes[s];
      p.d = p0->d, p.d_v = p0->d_v, p.causal = p0->causal, p.dtype = p0->dtype;
      p.window = m[mi].window, p.softcap = m[mi].softcap, p.alibi_slopes = m[mi].alibi ? slopes : NULL;
      run_case_mod(rt, rt1, NULL, plan->cpu, plan1 ? plan1->cpu : NULL, &p, (*seed)++, 0);
    }
  for (int all = 0; all < 2; all++) { /* the softcap alone, and with the window and ALiBi */
    attn_problem p = shapes[0];
    p.d = p0->d, p.d_v = p0->d_v, p.causal = p0->causal, p.dtype = p0->dtype;
    p.softcap = 1.5f, p.window = all ? 90 : 0, p.alibi_slopes = all ? slopes : NULL;
    run_inf(rt, plan->cpu, &p);
  }
  attn_plan_destroy(plan);
  attn_plan_destroy(plan1);
}

/* CUDA backward plans refuse what only the CPU backward applies, each with one line naming it. */
static int cuda_refusals(void) {
  attn_runtime *rt = NULL;
  if (attn_open(NULL, ATTN_TARGET_CUDA, &rt) != ATTN_OK) {
    printf("skipped: no CUDA runtime on the fake driver: %s\n", attn_last_error(NULL));
    return 77;
  }
  const attn_problem base = {.batch = 1, .heads = 2, .n = 64, .d = 64, .causal = 1};
  for (int t = 0; t < 4; t++) {
    attn_problem p = base;
    if (t == 0) p.window = 16;
    if (t == 1) p.softcap = 30.0f;
    if (t == 2) p.alibi_slopes = slopes;
    if (t == 3) p.algo = ATTN_ALGO_LOWRANK, p.tolerance = 0.1;
    attn_plan *plan = (attn_plan *)&plan;
    const int rc = attn_plan_create_backward(rt, &p, &plan);
    const char *msg = attn_last_error(rt);
    CHECK(rc == ATTN_EUNSUPPORTED && !plan && !strchr(msg, '\n') &&
              strstr(msg, t < 3 ? "the CUDA backward applies no window, softcap or ALiBi" : "CUDA backward has no lowrank"),
          "CUDA backward %d: %s: %s", t, attn_strerror(rc), msg);
    printf("CUDA backward %s: %s\n", t == 0 ? "window" : t == 1 ? "softcap" : t == 2 ? "alibi" : "lowrank", msg);
    cases++;
  }
  attn_close(rt);
  printf("%d cases, %d checks, %d failures\n", cases, checks, failures);
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: cpu_bwd_mods ref|ci|cuda|sweep\n");
    return 2;
  }
  if (!strcmp(argv[1], "cuda")) return cuda_refusals();
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
  } else if (!strcmp(g, "ci")) {
    setenv("ATTN_THREADS", "1", 1);
    rc = attn_open(NULL, ATTN_TARGET_CPU, &rt1);
    CHECK(rc == ATTN_OK && rt1->threads == 1, "one-thread runtime: %s", attn_last_error(NULL));
    if (rc != ATTN_OK) goto done;
    /* causal GQA: odd n, n_kv != n both ways (n > n_kv: rows that see no key) */
    const attn_problem pc = {.batch = 1, .heads = 4, .heads_kv = 2, .n = 67, .n_kv = 150, .d = 16, .causal = 1,
                             .window = 5, .softcap = 1.0f, .alibi_slopes = slopes};
    const attn_problem sc[] = {{.batch = 1, .heads = 4, .heads_kv = 2, .n = 67, .n_kv = 150},
                               {.batch = 2, .heads = 2, .heads_kv = 1, .n = 140, .n_kv = 45}};
    ci_kernel(rt, rt1, &pc, 0, sc, 2, &seed); /* attn_plan_create_backward's own kernel: 64 x 64 tiles */
    /* not causal (the window on both sides), bf16, d_v != d, 16 x 16 tiles */
    const attn_problem pn = {.batch = 1, .heads = 2, .n = 61, .n_kv = 120, .d = 16, .d_v = 24, .dtype = ATTN_BF16,
                             .window = 5, .softcap = 1.0f, .alibi_slopes = slopes};
    const attn_problem sn[] = {{.batch = 1, .heads = 2, .n = 61, .n_kv = 120},
                               {.batch = 1, .heads = 2, .n = 100, .n_kv = 33}};
    ci_kernel(rt, rt1, &pn, 16, sn, 2, &seed);
    /* the plan's ALiBi slopes are its own copy: the caller's array rewritten after plan creation changes nothing */
    float mine[4] = {0.5f, 0.25f, 0.125f, 0.0625f};
    attn_problem pe = pc;
    pe.alibi_slopes = mine;
    attn_plan *plan = NULL;
    if (mplan(rt, &pe, 0, &plan) == ATTN_OK) {
      printf("plan: %s\n", attn_plan_describe(plan));
      mine[0] = mine[1] = mine[2] = mine[3] = 100.0f;
      attn_problem pr = pc;
      pr.alibi_slopes = slopes; /* what the plan was made with */
      run_case_mod(rt, NULL, plan, NULL, NULL, &pr, seed++, 0);
    }
    attn_plan_destroy(plan);
  } else if (!strcmp(g, "sweep")) {
    const struct { int window; float softcap; int alibi; } m[] = {
        {1, 0, 0}, {7, 0, 0}, {100, 0, 0}, {0, 0.7f, 0}, {0, 5.0f, 0}, {0, 0, 1}, {9, 1.5f, 1}};
    for (int t = ATTN_F32; t <= ATTN_BF16; t++)
      for (int causal = 0; causal <= 1; causal++)
        for (size_t mi = 0; mi < sizeof m / sizeof m[0]; mi++) {
          const attn_problem ps[] = {
              {.batch = 2, .heads = 4, .heads_kv = 2, .n = 131, .n_kv = 97, .d = 64, .d_v = 40},
              {.batch = 1, .heads = 3, .n = 1, .n_kv = 130, .d = 64, .d_v = 40},
              {.batch = 1, .heads = 2, .n = 200, .n_kv = 257, .d = 64, .d_v = 40}};
          for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
            attn_problem p = ps[i];
            p.dtype = (attn_dtype)t, p.causal = causal;
            p.window = m[mi].window, p.softcap = m[mi].softcap, p.alibi_slopes = m[mi].alibi ? slopes : NULL;
            attn_plan *plan = NULL;
            if (mplan(rt, &p, 0, &plan) != ATTN_OK) continue;
            run_case_mod(rt, NULL, plan, NULL, NULL, &p, seed++, t == ATTN_F32);
            attn_plan_destroy(plan);
          }
        }
  } else {
    fprintf(stderr, "unknown group %s\n", g);
    attn_close(rt);
    return 2;
  }
done:
  attn_close(rt);
  attn_close(rt1);
  printf("%d cases, %d checks, %d failures\n", cases, checks, failures);
  return failures ? 1 : 0;
}
