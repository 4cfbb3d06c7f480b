/* cpu_bwd_lowrank: lowrank's backward on the CPU (templates/lowrank_bwd.c), the gradient of the approximation the
 * forward computes, against the fp64 gradient of the same approximation (attn_reference_lowrank: the same features,
 * rank and seed), on fresh random inputs with every gradient poisoned (NaN) before each run. argv[1] picks a group:
 *   ref    the fp64 gradient of the approximation against central finite differences of its fp64 forward, random
 *          and Taylor features, causal both ways (rows that see no key), GQA, d_v != d, n_kv != n; no kernel;
 *   ci     random features (rank 64, causal, GQA 4/2, d = 16, d_v = 24, f32) and Taylor features (degree 2, not
 *          causal, d = 8, d_v = 5, f16) through attn_plan_create_backward_spec: the gradients, the same bits twice
 *          and with one thread, NaN in one KV head's keys making exactly that head's gradients NaN; end to end, a
 *          database row that serves lowrank to attn_plan_create makes attn_plan_create_backward serve lowrank's
 *          gradient (the forward kernel's O matches the fp64 approximation: the same features), lse may be NULL;
 *          without a row both serve flash; the measured distance of lowrank's gradient from exact attention's;
 *   sweep  (nightly) d in {1, 3, 32, 64}, both feature maps, causal both ways, f32, f16 and bf16, GQA, the forward
 *          kernel's O.
 * Limits: f32 1e-4 relative (Frobenius, floored at an RMS of 0.01: sums of exp features over up to a few hundred
 * keys in fp32; measured ~1e-6), f16 3e-3 and bf16 2e-2 (the rounded O and gradients; measured ~5e-4 and ~4e-3). */
#define _POSIX_C_SOURCE 200809L
#include <unistd.h>
#include "bwd_case.h"
#include "spec_bwd.h"

static int cases;

static double tol_of(attn_dtype t) { return t == ATTN_F32 ? 1e-4 : t == ATTN_F16 ? 3e-3 : 2e-2; }

/* A lowrank CPU spec for p: random features of rank `rank` (0: Taylor features of degree 2). */
static attn_spec lr_spec(const attn_problem *p, int rank) {
  attn_spec s = attn_spec_default(ATTN_ALGO_LOWRANK, ATTN_TARGET_CPU, p->dtype, p->d, p->causal);
  s.dv = p->d_v && p->d_v != p->d ? p->d_v : 0;
  if (rank) s.rank = rank;
  else s.feature = ATTN_FEAT_TAYLOR, s.degree = 2;
  return s;
}

/* Fresh inputs rounded to the dtype, the fp64 approximation's O and gradients (c->ro, rq, rk, rv), and c->o: that O
 * rounded to the dtype (the typed copy in c->to); the caller may replace it with a forward kernel's. */
static int lsetup(const attn_problem *p0, const attn_spec *s, unsigned long long seed, bwd_case *c) {
  if (bwd_setup(p0, seed, 13, c) != 0) return -1;
  c->ro = malloc(c->no * 8 + 8), c->rq = malloc(c->nq * 8 + 8), c->rk = malloc(c->nk * 8 + 8);
  c->rv = malloc(c->nv * 8 + 8);
  if (!c->ro || !c->rq || !c->rk || !c->rv || bwd_round(c) != 0) return -1;
  const attn_problem *p = &c->p;
  if (attn_reference_lowrank(p, s, c->q, c->k, c->v, c->g, c->ro, c->rq, c->rk, c->rv) != ATTN_OK) return -1;
  for (size_t i = 0; i < c->no; i++) c->o[i] = (float)c->ro[i];
  attn_round_dtype(p->dtype, c->o, c->no);
  attn_to_dtype(p->dtype, c->o, c->no, c->to);
  return 0;
}

/* One backward run into poisoned buffers (lse NULL: lowrank reads none). */
static int lrun(attn_plan *plan, bwd_case *c, float **dq, float **dk, float **dv) {
  return bwd_run(plan->rt, plan, NULL, c, NULL, dq, dk, dv);
}

/* Relative Frobenius error of out against ref, floored at an RMS of 0.01 (gradients that cancel near 0). */
static double rel(const double *ref, const float *out, size_t count) {
  double num = 0, den = 0;
  for (size_t i = 0; i < count; i++) {
    if (isnan(out[i]) != isnan(ref[i])) return INFINITY;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  const double floor = 0.01 * sqrt((double)count);
  return sqrt(num) / (sqrt(den) > floor ? sqrt(den) : floor);
}

/* The plan's gradients against the fp64 approximation's; the same bits again, and from plan1 (one thread). */
static void check_grads(attn_plan *plan, attn_plan *plan1, bwd_case *c, float **keep) {
  const attn_problem *p = &c->p;
  float *dq = NULL, *dk = NULL, *dv = NULL, *dq2 = NULL, *dk2 = NULL, *dv2 = NULL;
  if (lrun(plan, c, &dq, &dk, &dv) == 0) {
    const double eq = rel(c->rq, dq, c->nq), ek = rel(c->rk, dk, c->nk), ev = rel(c->rv, dv, c->nv);
    const double tol = tol_of(p->dtype);
    CHECK(eq <= tol && ek <= tol && ev <= tol, "%s [%s]: errors dq %.3g dk %.3g dv %.3g > %g", shape(p),
          attn_plan_describe(plan), eq, ek, ev, tol);
    printf("%s [%s]: err dq %.2e dk %.2e dv %.2e\n", shape(p), attn_plan_describe(plan), eq, ek, ev);
    cases++;
    for (int pass = 0; pass < 2; pass++) {
      attn_plan *pl = pass ? plan1 : plan;
      if (!pl) continue;
      free(dq2), free(dk2), free(dv2);
      dq2 = dk2 = dv2 = NULL;
      if (lrun(pl, c, &dq2, &dk2, &dv2) == 0)
        CHECK(!memcmp(dq, dq2, c->nq * 4) && !memcmp(dk, dk2, c->nk * 4) && !memcmp(dv, dv2, c->nv * 4),
              "%s: %s gave other bits", shape(p), pass ? "one thread" : "a second run");
    }
  }
  if (keep) keep[0] = dq, keep[1] = dk, keep[2] = dv;
  else free(dq), free(dk), free(dv);
  free(dq2), free(dk2), free(dv2);
}

/* How far the approximation is from exact attention (fp64 softmax attention and its backward), relative Frobenius:
 * O, dq, dk, dv into e[4]. */
static void exact_distance(const bwd_case *c, const float *const g[3], double e[4]) {
  const attn_problem *p = &c->p;
  double *xo = malloc(c->no * 8 + 8), *eq = malloc(c->nq * 8 + 8), *ek = malloc(c->nk * 8 + 8);
  double *ev = malloc(c->nv * 8 + 8);
  e[0] = e[1] = e[2] = e[3] = INFINITY;
  if (xo && eq && ek && ev) {
    attn_reference(p, c->q, c->k, c->v, xo);
    attn_reference_backward(p, c->q, c->k, c->v, NULL, c->g, eq, ek, ev);
    e[0] = attn_rel_error(xo, c->o, c->no);
    e[1] = attn_rel_error(eq, g[0], c->nq), e[2] = attn_rel_error(ek, g[1], c->nk), e[3] = attn_rel_error(ev, g[2], c->nv);
  }
  free(xo), free(eq), free(ek), free(ev);
}

/* L = sum(dO ∘ O) of the fp64 approximation of spec user (bwd_case.h's bwd_loss_fn). */
static double loss(const void *user, const bwd_case *c, double *o) {
  const attn_problem *p = &c->p;
  attn_reference_lowrank(p, user, c->q, c->k, c->v, NULL, o, NULL, NULL, NULL);
  double sum = 0;
  for (long i = 0; i < (long)p->batch * p->heads * p->n * p->d_v; i++) sum += c->g[i] * o[i];
  return sum;
}

static void check_reference(void) {
  const attn_problem ps[] = {
      {.batch = 1, .heads = 2, .heads_kv = 1, .n = 4, .n_kv = 5, .d = 3, .d_v = 2, .causal = 1, .scale = 0.9f},
      {.batch = 1, .heads = 2, .heads_kv = 1, .n = 5, .n_kv = 3, .d = 3, .d_v = 2, .causal = 1, .scale = 0.9f},
      {.batch = 2, .heads = 1, .n = 4, .n_kv = 6, .d = 2, .d_v = 3, .causal = 0, .scale = 1.2f}};
  for (size_t t = 0; t < sizeof ps / sizeof ps[0]; t++)
    for (int feat = 0; feat < 2; feat++) {
      const attn_spec s = lr_spec(&ps[t], feat ? 16 : 0);
      bwd_case c;
      if (lsetup(&ps[t], &s, 5 + t, &c) != 0) {
        CHECK(0, "setup failed");
        bwd_free(&c);
        continue;
      }
      const attn_problem *p = &c.p;
      double mag;
      const double worst = bwd_check_fd(&c, c.rq, c.rk, c.rv, loss, &s, feat ? "random" : "taylor", &mag);
      CHECK(mag > 1e-3, "%s: gradients all near 0: nothing measured", shape(p));
      printf("%s %s features: fp64 gradient of the approximation within %.2e of finite differences (largest %.3f)\n",
             shape(p), feat ? "random" : "taylor", worst, mag);
      cases++;
      bwd_free(&c);
    }
}

/* NaN in one key of batch 0's KV head 0: that item's gradients (its query heads' dq, its dk and dv) all NaN, every
 * other item's finite. */
static void check_nan(attn_plan *plan, const attn_problem *p0, const attn_spec *s) {
  bwd_case c;
  if (lsetup(p0, s, 77, &c) != 0) {
    CHECK(0, "setup failed");
    bwd_free(&c);
    return;
  }
  const attn_problem *p = &c.p;
  c.k[3 * p->d + 1] = NAN;
  attn_to_dtype(p->dtype, c.k, c.nk, c.tk);
  float *dq = NULL, *dk = NULL, *dv = NULL;
  if (lrun(plan, &c, &dq, &dk, &dv) == 0) {
    const long G = p->heads / p->heads_kv;
    size_t wrong = 0;
    for (size_t i = 0; i < c.nq; i++) wrong += ((long)(i / ((size_t)p->n * p->d)) < G) != !!isnan(dq[i]);
    for (size_t i = 0; i < c.nk; i++) wrong += (i / ((size_t)p->n_kv * p->d) == 0) != !!isnan(dk[i]);
    for (size_t i = 0; i < c.nv; i++) wrong += (i / ((size_t)p->n_kv * p->d_v) == 0) != !!isnan(dv[i]);
    CHECK(wrong == 0, "%s: NaN in KV head 0's key 3: %zu gradient elements NaN where they should not be or not NaN "
          "where they should", shape(p), wrong);
    printf("NaN in batch 0's KV head 0's key 3: its gradients NaN, the other items' finite\n");
    cases++;
  }
  free(dq), free(dk), free(dv);
  bwd_free(&c);
}

/* A database holding one measured lowrank row (within tolerance) for p on this runtime's device and threads. */
static int make_db(attn_runtime *rt, const char *path, const attn_problem *p, const attn_spec *s) {
  attn_db *db = NULL;
  char err[256], text[512];
  unlink(path);
  if (attn_db_open(path, 1, &db, err, sizeof err) != ATTN_OK) {
    CHECK(0, "database: %s", err);
    return -1;
  }
  attn_spec_format(s, text, sizeof text);
  attn_db_meas m;
  memset(&m, 0, sizeof m);
  m.device = rt->device, m.spec = text;
  m.n = p->n, m.n_kv = p->n_kv, m.d = p->d, m.d_v = p->d_v, m.batch = p->batch, m.heads = p->heads;
  m.heads_kv = p->heads_kv, m.causal = p->causal, m.dtype = p->dtype;
  m.time_ms = 1.0, m.has_error = 1, m.error = 0.01, m.reads = m.writes = -1;
  m.status = "ok", m.provenance = "measured", m.threads = rt->threads, m.pass = "fwd", m.variant = "";
  const int rc = attn_db_meas_put(db, &m);
  CHECK(rc == ATTN_OK, "row: %s", attn_db_errmsg(db));
  attn_db_close(db);
  return rc == ATTN_OK ? 0 : -1;
}

/* End to end: a lowrank row serves the forward, so the backward serves lowrank's gradient of the same spec. */
static void check_served(const attn_problem *p0, const attn_spec *s, const char *dir) {
  attn_runtime *rt = NULL, *rdb = NULL;
  char path[4096];
  snprintf(path, sizeof path, "%s/cpu_bwd_lowrank.db", dir);
  if (attn_open(NULL, ATTN_TARGET_CPU, &rt) != ATTN_OK || make_db(rt, path, p0, s) != 0 ||
      attn_open(path, ATTN_TARGET_CPU, &rdb) != ATTN_OK) {
    CHECK(0, "runtimes: %s", attn_last_error(NULL));
    attn_close(rt);
    return;
  }
  bwd_case c;
  attn_plan *fw = NULL, *bw = NULL;
  float *g[3] = {0};
  if (lsetup(p0, s, 31, &c) != 0) {
    CHECK(0, "setup failed");
    goto out;
  }
  const attn_problem *p = &c.p;
  int rc = attn_plan_create(rdb, p, &fw);
  CHECK(rc == ATTN_OK && !strncmp(attn_plan_describe(fw), "lowrank", 7), "forward plan: %s %s",
        rc ? attn_last_error(rdb) : "", rc ? "" : attn_plan_describe(fw));
  rc = attn_plan_create_backward(rdb, p, &bw);
  CHECK(rc == ATTN_OK && !strncmp(attn_plan_describe(bw), "lowrank", 7) && strstr(attn_plan_describe(bw), "backward"),
        "backward plan: %s %s", rc ? attn_last_error(rdb) : "", rc ? "" : attn_plan_describe(bw));
  if (!fw || !bw) goto out;
  printf("served: forward [%s], backward [%s]\n", attn_plan_describe(fw), attn_plan_describe(bw));
  /* the forward kernel's O is the fp64 approximation's (the same features): the backward gets it */
  rc = attn_execute(fw, c.tq, c.tk, c.tv, c.to);
  CHECK(rc == ATTN_OK, "forward: %s", attn_last_error(rdb));
  attn_from_dtype(p->dtype, c.to, c.no, c.o);
  const double eo = attn_rel_error(c.ro, c.o, c.no);
  CHECK(eo <= 1e-5, "%s: the forward kernel's O is %.3g from the fp64 approximation's", shape(p), eo);
  printf("forward kernel's O within %.2e of the fp64 approximation\n", eo);
  /* the lse attn_execute_lse refuses for lowrank: no lse needed */
  float lse[1];
  CHECK(attn_execute_lse(fw, c.tq, c.tk, c.tv, c.to, lse) == ATTN_EUNSUPPORTED, "lowrank gave an lse");
  check_grads(bw, NULL, &c, g);
  /* how far the approximation's gradient is from exact attention's: random features of rank 64 are a coarse one */
  if (g[0]) {
    double e[4];
    exact_distance(&c, (const float *const *)g, e);
    printf("lowrank [%s] against exact attention: O %.3f, dq %.3f, dk %.3f, dv %.3f (relative Frobenius)\n",
           attn_plan_describe(bw), e[0], e[1], e[2], e[3]);
  }
  /* lowrank with tolerance 0 is refused by the backward as by the forward */
  attn_problem z = *p;
  z.tolerance = 0;
  attn_plan *zp = NULL;
  CHECK(attn_plan_create_backward_spec(rdb, &z, s, 0, "test", &zp) == ATTN_EUNSUPPORTED && !zp,
        "lowrank backward with tolerance 0 accepted");
  cases++;
out:
  free(g[0]), free(g[1]), free(g[2]);
  attn_plan_destroy(fw);
  attn_plan_destroy(bw);
  bwd_free(&c);
  attn_close(rt);
  attn_close(rdb);
  unlink(path);
}

/* Without a lowrank row the forward runs flash (attn_plan_choose: what attn_plan_create would build), and so does
 * the backward (its exact gradient, lse required). */
static void check_fallback(attn_runtime *rt) {
  const attn_problem p0 = {.batch = 1, .heads = 2, .n = 5, .d = 64, .causal = 1, .algo = ATTN_ALGO_LOWRANK,
                           .tolerance = 0.1};
  attn_problem p;
  attn_spec fs;
  char origin[128];
  attn_plan *bw = NULL;
  CHECK(attn_problem_normalize(rt, &p0, &p) == ATTN_OK && attn_plan_choose(rt, &p, &fs, origin, sizeof origin) == 0 &&
            fs.algo == ATTN_ALGO_FLASH, "no lowrank row: the forward would not run flash");
  const int rc = attn_plan_create_backward(rt, &p0, &bw);
  CHECK(rc == ATTN_OK && !strncmp(attn_plan_describe(bw), "flash", 5), "no lowrank row: backward %s",
        rc ? attn_last_error(rt) : attn_plan_describe(bw));
  if (bw) {
    printf("no lowrank row: forward %s (%s), backward [%s]\n", attn_algo_name(fs.algo), origin,
           attn_plan_describe(bw));
    float buf[640];
    attn_fill_random(buf, 640, 1);
    CHECK(attn_execute_backward(bw, buf, buf, buf, buf, NULL, buf, buf, buf, buf) == ATTN_EINVAL,
          "flash's backward ran without lse");
  }
  attn_plan_destroy(bw);
  cases++;
}

static void run_spec(attn_runtime *rt, attn_runtime *rt1, const attn_problem *p0, const attn_spec *s,
                     unsigned long long seed, int fwd) {
  bwd_case c;
  attn_plan *plan = NULL, *plan1 = NULL;
  if (lsetup(p0, s, seed, &c) != 0) {
    CHECK(0, "%s: setup failed", shape(p0));
    bwd_free(&c);
    return;
  }
  int rc = attn_plan_create_backward_spec(rt, &c.p, s, 0, "test", &plan);
  CHECK(rc == ATTN_OK, "%s: backward plan: %s", shape(&c.p), attn_last_error(rt));
  if (rt1 && attn_plan_create_backward_spec(rt1, &c.p, s, 0, "test", &plan1) != ATTN_OK) plan1 = NULL;
  if (plan && fwd) { /* the forward kernel's O */
    attn_plan *fp = NULL;
    rc = attn_plan_create_spec(rt, &c.p, s, 0, "test", &fp);
    CHECK(rc == ATTN_OK, "%s: forward plan: %s", shape(&c.p), attn_last_error(rt));
    if (rc == ATTN_OK && attn_execute(fp, c.tq, c.tk, c.tv, c.to) == ATTN_OK) attn_from_dtype(c.p.dtype, c.to, c.no, c.o);
    attn_plan_destroy(fp);
  }
  float *g[3] = {0};
  if (plan) check_grads(plan, plan1, &c, g);
  if (g[0]) {
    double e[4];
    exact_distance(&c, (const float *const *)g, e);
    printf("  against exact attention: O %.3g, dq %.3g, dk %.3g, dv %.3g\n", e[0], e[1], e[2], e[3]);
    /* Taylor features of degree 2 at |scale q.k| <= 0.2 sqrt(d) / 2: exp's series error is ~|s|^3/6, a few percent
       in O and dV. dQ and dK go through dS = P (dP - D), whose difference cancels, so their relative error is
       several times larger (up to 0.09 over 400 draws at n = 1); a wrong gradient is off by ~1, as random
       features' are. */
    if (s->feature == ATTN_FEAT_TAYLOR && c.p.scale * c.p.d <= 2.0f)
      CHECK(e[0] < 0.05 && e[3] < 0.05 && e[1] < 0.3 && e[2] < 0.3,
            "%s: Taylor's O %.3g and gradient %.3g %.3g %.3g from exact attention's", shape(&c.p), e[0], e[1], e[2],
            e[3]);
  }
  free(g[0]), free(g[1]), free(g[2]);
  attn_plan_destroy(plan);
  attn_plan_destroy(plan1);
  bwd_free(&c);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: cpu_bwd_lowrank ref|ci|sweep\n");
    return 2;
  }
  attn_runtime *rt = NULL, *rt1 = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CPU, &rt);
  if (rc != ATTN_OK) {
    fprintf(stderr, "attn_open: %s: %s\n", attn_strerror(rc), attn_last_error(NULL));
    return 1;
  }
  const char *g = argv[1];
  unsigned long long seed = 1;
  if (!strcmp(g, "ref")) {
    check_reference();
  } else if (!strcmp(g, "ci")) {
    const char *dir = getenv("ATTN_CACHE_DIR") ? getenv("ATTN_CACHE_DIR") : ".";
    setenv("ATTN_THREADS", "1", 1);
    rc = attn_open(NULL, ATTN_TARGET_CPU, &rt1);
    CHECK(rc == ATTN_OK && rt1->threads == 1, "one-thread runtime: %s", attn_last_error(NULL));
    setenv("ATTN_THREADS", "2", 1);
    const attn_problem pr[] = {
        {.batch = 2, .heads = 4, .heads_kv = 2, .n = 37, .n_kv = 53, .d = 16, .d_v = 24, .causal = 1, .tolerance = 0.1},
        {.batch = 1, .heads = 4, .heads_kv = 2, .n = 60, .n_kv = 41, .d = 16, .d_v = 24, .causal = 1, .tolerance = 0.1},
        {.batch = 1, .heads = 2, .heads_kv = 1, .n = 1, .n_kv = 70, .d = 16, .d_v = 24, .causal = 1, .tolerance = 0.1}};
    const attn_spec sr = lr_spec(&pr[0], 64);
    for (size_t i = 0; i < sizeof pr / sizeof pr[0]; i++) run_spec(rt, rt1, &pr[i], &sr, seed++, 0);
    const attn_problem pt[] = {
        {.batch = 1, .heads = 4, .heads_kv = 1, .n = 45, .n_kv = 31, .d = 8, .d_v = 5, .dtype = ATTN_F16,
         .tolerance = 0.1, .scale = 0.2f},
        {.batch = 1, .heads = 2, .n = 1, .n_kv = 20, .d = 8, .d_v = 5, .dtype = ATTN_F16, .tolerance = 0.1,
         .scale = 0.2f}};
    const attn_spec st = lr_spec(&pt[0], 0);
    for (size_t i = 0; i < sizeof pt / sizeof pt[0]; i++) run_spec(rt, rt1, &pt[i], &st, seed++, 0);
    attn_plan *plan = NULL;
    attn_problem np;
    if (attn_problem_normalize(rt, &pr[0], &np) == ATTN_OK &&
        attn_plan_create_backward_spec(rt, &np, &sr, 0, "test", &plan) == ATTN_OK)
      check_nan(plan, &np, &sr);
    attn_plan_destroy(plan);
    check_served(&pr[1], &sr, dir);
    check_fallback(rt);
  } else if (!strcmp(g, "sweep")) {
    static const int ds[] = {1, 3, 32, 64};
    for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++)
      for (int t = ATTN_F32; t <= ATTN_BF16; t++)
        for (int causal = 0; causal <= 1; causal++)
          for (int feat = 0; feat < 2; feat++) {
            if (!feat && ds[di] > 32) continue; /* Taylor's rank C(d+2, 2): 2145 at d = 64 is slow in fp64 */
            const attn_problem p = {.batch = 2, .heads = 4, .heads_kv = 2, .n = 77, .n_kv = 90, .d = ds[di],
                                    .d_v = ds[di] + 3, .causal = causal, .dtype = (attn_dtype)t, .tolerance = 0.1,
                                    .scale = feat ? 0.0f : 0.3f / sqrtf((float)ds[di])};
            const attn_spec s = lr_spec(&p, feat ? 256 : 0);
            run_spec(rt, NULL, &p, &s, seed++, 1);
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
