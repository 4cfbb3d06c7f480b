/* bwd_case.h: what the CPU backward's tests share (tests/cpu_backward.c, cpu_bwd_mods.c, cpu_bwd_lowrank.c), so that
 * each draws, rounds and runs its cases the same way: one problem's inputs, fresh random and rounded through the
 * dtype, with their typed copies; the forward's O and lse from the forward kernel or the fp64 forward; the fp64 lse
 * (with the problem's score modifiers); one backward run into poisoned gradients; and the gradients' comparison with
 * the fp64 backward's. */
#ifndef ATTN_TEST_BWD_CASE_H
#define ATTN_TEST_BWD_CASE_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "cpu_util.h"

/* A typed copy (the problem's dtype) of count floats; NULL when out of memory. */
__attribute__((unused)) static void *typed(attn_dtype t, const float *x, size_t count) {
  void *p = malloc(count * attn_dtype_size(t) + 1);
  if (p) attn_to_dtype(t, x, count, p);
  return p;
}

/* A typed buffer full of NaN. */
__attribute__((unused)) static void *poisoned(attn_dtype t, size_t count) {
  float *f = malloc(count * sizeof(float) + 1);
  if (!f) return NULL;
  attn_poison(f, count);
  void *p = typed(t, f, count);
  free(f);
  return p;
}

__attribute__((unused)) static float *as_f32(attn_dtype t, const void *x, size_t count) {
  float *f = malloc(count * sizeof(float) + 1);
  if (f) attn_from_dtype(t, x, count, f);
  return f;
}

/* The problem's score modifiers, for messages. */
__attribute__((unused)) static const char *mods(const attn_problem *p) {
  static char buf[128];
  snprintf(buf, sizeof buf, "window=%d softcap=%g alibi=%s", p->window, (double)p->softcap,
           p->alibi_slopes ? "on" : "off");
  return buf;
}

/* fp64 lse with the modifiers: log sum over the keys row i sees of exp(mod(scale q.k)), -inf for none. */
__attribute__((unused)) static void ref_lse(const attn_problem *p, const float *q, const float *k, double *lse) {
  const long G = p->heads / p->heads_kv;
  double *s = malloc(sizeof(double) * (size_t)(p->n_kv + 1));
  for (long bh = 0; bh < (long)p->batch * p->heads; bh++) {
    const long bkv = bh / p->heads * p->heads_kv + bh % p->heads / G, h = bh % p->heads;
    for (long i = 0; i < p->n; i++) {
      long lo, hi;
      attn_visible_keys(p, i, &lo, &hi);
      double mx = -INFINITY, sum = 0;
      if (!s) {
        lse[bh * p->n + i] = NAN;
        continue;
      }
      for (long j = lo; j < hi; j++) {
        double a = 0;
        for (long c = 0; c < p->d; c++) a += (double)q[(bh * p->n + i) * p->d + c] * k[(bkv * p->n_kv + j) * p->d + c];
        s[j] = attn_score_mod(p, a * p->scale, h, i, j);
        if (s[j] > mx) mx = s[j];
      }
      for (long j = lo; j < hi; j++) sum += exp(s[j] - mx);
      lse[bh * p->n + i] = hi > lo ? mx + log(sum) : -INFINITY;
    }
  }
  free(s);
}

typedef struct {
  attn_problem p;                /* normalised */
  size_t nq, nk, nv, no, nl;     /* elements of q, k, v, o (and dO), lse */
  float *q, *k, *v, *g;          /* inputs (rounded through the dtype by bwd_round); g = dO */
  float *o, *lse;                /* the forward's O (fp32) and lse */
  void *tq, *tk, *tv, *tg, *to;  /* typed copies; to = the forward's O */
  double *ro, *rq, *rk, *rv;     /* fp64 O and gradients, where a test keeps them (freed with the case) */
} bwd_case;

__attribute__((unused)) static void bwd_free(bwd_case *c) {
  free(c->q), free(c->k), free(c->v), free(c->g), free(c->o), free(c->lse);
  free(c->tq), free(c->tk), free(c->tv), free(c->tg), free(c->to);
  free(c->ro), free(c->rq), free(c->rk), free(c->rv);
}

/* Fresh random q, k, v and dO (dout) of p0 from seed, mixed with the test seed times salt (each file its own, so
 * that they draw apart); o and lse allocated, not set. The callers plant NaN or scale the inputs before bwd_round. */
__attribute__((unused)) static int bwd_setup(const attn_problem *p0, unsigned long long seed, unsigned salt,
                                             bwd_case *c) {
  memset(c, 0, sizeof *c);
  if (attn_problem_normalize(NULL, p0, &c->p) != ATTN_OK) return -1;
  const attn_problem *p = &c->p;
  c->nq = (size_t)p->batch * p->heads * p->n * p->d;
  c->nk = (size_t)p->batch * p->heads_kv * p->n_kv * p->d;
  c->nv = (size_t)p->batch * p->heads_kv * p->n_kv * p->d_v;
  c->no = (size_t)p->batch * p->heads * p->n * p->d_v;
  c->nl = (size_t)p->batch * p->heads * p->n;
  c->q = malloc(c->nq * 4 + 4), c->k = malloc(c->nk * 4 + 4), c->v = malloc(c->nv * 4 + 4);
  c->g = malloc(c->no * 4 + 4), c->o = malloc(c->no * 4 + 4), c->lse = malloc(c->nl * 4 + 4);
  if (!c->q || !c->k || !c->v || !c->g || !c->o || !c->lse) return -1;
  seed = seed * 1000003ULL + test_seed() * salt;
  attn_fill_random(c->q, c->nq, seed * 5 + 1);
  attn_fill_random(c->k, c->nk, seed * 5 + 2);
  attn_fill_random(c->v, c->nv, seed * 5 + 3);
  attn_fill_random(c->g, c->no, seed * 5 + 4);
  return 0;
}

/* Rounds the inputs through the dtype and makes their typed copies; to is poisoned until a forward fills it. */
__attribute__((unused)) static int bwd_round(bwd_case *c) {
  const attn_problem *p = &c->p;
  attn_round_dtype(p->dtype, c->q, c->nq);
  attn_round_dtype(p->dtype, c->k, c->nk);
  attn_round_dtype(p->dtype, c->v, c->nv);
  attn_round_dtype(p->dtype, c->g, c->no);
  c->tq = typed(p->dtype, c->q, c->nq), c->tk = typed(p->dtype, c->k, c->nk);
  c->tv = typed(p->dtype, c->v, c->nv), c->tg = typed(p->dtype, c->g, c->no);
  c->to = poisoned(p->dtype, c->no);
  return c->tq && c->tk && c->tv && c->tg && c->to ? 0 : -1;
}

/* bwd_round, then c->o, c->to and c->lse: fwd 1, the flash forward kernel's (attn_execute_lse); 0, the fp64
 * forward's rounded to the dtype and fp32 (no forward kernel to compile: each costs seconds). */
__attribute__((unused)) static int bwd_forward(attn_runtime *rt, bwd_case *c, int fwd) {
  const attn_problem *p = &c->p;
  if (bwd_round(c) != 0) return -1;
  if (!fwd) {
    double *o = malloc(c->no * 8 + 8), *l = malloc(c->nl * 8 + 8);
    if (o && l) {
      attn_reference(p, c->q, c->k, c->v, o);
      ref_lse(p, c->q, c->k, l);
      for (size_t i = 0; i < c->no; i++) c->o[i] = (float)o[i];
      for (size_t i = 0; i < c->nl; i++) c->lse[i] = (float)l[i];
      attn_round_dtype(p->dtype, c->o, c->no);
      attn_to_dtype(p->dtype, c->o, c->no, c->to);
    }
    free(o), free(l);
    return o && l ? 0 : -1;
  }
  attn_problem fp = *p;
  fp.algo = ATTN_ALGO_FLASH;
  attn_plan *plan = NULL;
  int rc = attn_plan_create(rt, &fp, &plan);
  CHECK(rc == ATTN_OK, "%s %s: forward plan: %s", shape(p), mods(p), attn_last_error(rt));
  if (rc != ATTN_OK) return -1;
  attn_poison(c->lse, c->nl);
  rc = attn_execute_lse(plan, c->tq, c->tk, c->tv, c->to, c->lse);
  CHECK(rc == ATTN_OK, "%s %s: attn_execute_lse: %s", shape(p), mods(p), attn_last_error(rt));
  attn_plan_destroy(plan);
  if (rc != ATTN_OK) return -1;
  attn_from_dtype(p->dtype, c->to, c->no, c->o);
  return 0;
}

/* One backward run into freshly poisoned gradients, fp32 copies of them in *dq, *dk, *dv: through the plan, or (kern)
 * that kernel with the case's modifiers as its run-time arguments (a kernel with every modifier compiled in serves
 * each alone: 0 or NULL there is off). lse: the forward's, or NULL (lowrank reads none). */
__attribute__((unused)) static int bwd_run(attn_runtime *rt, attn_plan *plan, const attn_cpu_kernel *kern,
                                           bwd_case *c, float *lse, float **dq, float **dk, float **dv) {
  const attn_dtype t = c->p.dtype;
  void *tq = poisoned(t, c->nq), *tk = poisoned(t, c->nk), *tv = poisoned(t, c->nv);
  int rc = -1;
  if (tq && tk && tv) {
    if (kern) {
      attn_kargs a = attn_problem_kargs(&c->p, c->tq, c->tk, c->tv, c->to);
      a.lse = lse, a.dout = c->tg, a.dq = tq, a.dk = tk, a.dv = tv;
      rc = attn_cpu_run(rt, kern, &a, NULL);
    } else {
      rc = attn_execute_backward(plan, c->tq, c->tk, c->tv, c->to, lse, c->tg, tq, tk, tv);
    }
    CHECK(rc == ATTN_OK, "%s %s: backward: %s", shape(&c->p), mods(&c->p), attn_last_error(rt));
    if (rc == ATTN_OK) {
      *dq = as_f32(t, tq, c->nq), *dk = as_f32(t, tk, c->nk), *dv = as_f32(t, tv, c->nv);
      rc = *dq && *dk && *dv ? 0 : -1;
    }
  }
  free(tq), free(tk), free(tv);
  return rc;
}

/* out against ref: relative Frobenius error within tol, every element written (no poison left where ref is finite),
 * and exact zeros in the rows of dq that see no key (zd = d; 0 for dk and dv). The error is relative to
 * max(||ref||, 0.1 sqrt(count)): dS = P (dP - D) is a difference of terms of order 1 (inputs in [-1, 1)), so fp32
 * leaves an absolute error of ~1e-7 in gradients that cancel to 0 (one visible key: P = 1 and dP = D, so
 * dq = dk = 0 exactly); an RMS of 0.1 is the floor they are measured against. Returns the error. */
__attribute__((unused)) static double bwd_compare(const char *what, const attn_problem *p, const double *ref,
                                                  const float *out, size_t count, double tol, long zd) {
  size_t unwritten = 0, nonzero = 0;
  double num = 0, den = 0;
  for (size_t i = 0; i < count; i++) {
    if (isnan(out[i]) && !isnan(ref[i])) unwritten++;
    if (zd > 0) {
      long lo, hi;
      attn_visible_keys(p, (long)(i / (size_t)zd) % p->n, &lo, &hi);
      if (hi <= lo && out[i] != 0.0f) nonzero++;
    }
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  const double floor = 0.1 * sqrt((double)count);
  const double err = sqrt(num) / (sqrt(den) > floor ? sqrt(den) : floor);
  CHECK(unwritten == 0, "%s %s: %s: %zu of %zu elements NaN (unwritten?)", shape(p), mods(p), what, unwritten, count);
  CHECK(nonzero == 0, "%s %s: %s: %zu elements nonzero in rows that see no key", shape(p), mods(p), what, nonzero);
  CHECK(err <= tol, "%s %s: %s relative error %.3g > %g", shape(p), mods(p), what, err, tol);
  return err;
}

/* L = sum(dO ∘ O) in fp64 of the definition a test differentiates, at c's inputs (user: what else it needs); O
 * into o (c->no). */
typedef double (*bwd_loss_fn)(const void *user, const bwd_case *c, double *o);

/* Exact attention's (with the problem's modifiers): attn_reference. */
__attribute__((unused)) static double bwd_loss_exact(const void *user, const bwd_case *c, double *o) {
  (void)user;
  const attn_problem *p = &c->p;
  attn_reference(p, c->q, c->k, c->v, o);
  double s = 0;
  for (long i = 0; i < (long)p->batch * p->heads * p->n * p->d_v; i++) s += c->g[i] * o[i];
  return s;
}

/* A fp64 backward's gradients rq, rk, rv of c's inputs against central differences of loss with h = 2^-10 (inputs
 * on a 2^-23 grid in [-1, 1): x ± h exact in fp32; truncation error O(h^2) ~ 1e-6), each within 1e-5 (1 + |fd|);
 * what: the case's words in messages. Returns the largest difference (INFINITY: out of memory), *mag the largest
 * |fd| (a test whose gradients are all near 0 measures nothing). */
__attribute__((unused)) static double bwd_check_fd(bwd_case *c, const double *rq, const double *rk, const double *rv,
                                                   bwd_loss_fn loss, const void *user, const char *what, double *mag) {
  const attn_problem *p = &c->p;
  double *o = malloc(c->no * 8 + 8), worst = 0;
  *mag = 0;
  if (!o) return INFINITY;
  const struct { const char *name; float *x; const double *r; size_t n; } a[] = {
      {"dq", c->q, rq, c->nq}, {"dk", c->k, rk, c->nk}, {"dv", c->v, rv, c->nv}};
  const float h = 1.0f / 1024;
  for (int w = 0; w < 3; w++)
    for (size_t i = 0; i < a[w].n; i++) {
      const float x = a[w].x[i];
      a[w].x[i] = x + h;
      const double up = loss(user, c, o);
      a[w].x[i] = x - h;
      const double down = loss(user, c, o);
      a[w].x[i] = x;
      const double fd = (up - down) / (2.0 * h), e = fabs(fd - a[w].r[i]);
      if (e > worst) worst = e;
      if (fabs(fd) > *mag) *mag = fabs(fd);
      CHECK(e <= 1e-5 * (1 + fabs(fd)), "%s %s: reference %s[%zu] = %.9f, finite differences %.9f", shape(p), what,
            a[w].name, i, a[w].r[i], fd);
    }
  free(o);
  return worst;
}

/* Exact attention's fp64 backward (the fp64 forward's own O: NULL) into c->rq, rk, rv, against central differences
 * (bwd_check_fd). Returns the largest difference, INFINITY when out of memory (a failed check). */
__attribute__((unused)) static double bwd_check_exact_fd(bwd_case *c, const char *what, double *mag) {
  c->rq = malloc(c->nq * 8 + 8), c->rk = malloc(c->nk * 8 + 8), c->rv = malloc(c->nv * 8 + 8);
  *mag = 0;
  if (!c->rq || !c->rk || !c->rv) {
    CHECK(0, "out of memory");
    return INFINITY;
  }
  attn_reference_backward(&c->p, c->q, c->k, c->v, NULL, c->g, c->rq, c->rk, c->rv);
  return bwd_check_fd(c, c->rq, c->rk, c->rv, bwd_loss_exact, NULL, what, mag);
}

#endif
