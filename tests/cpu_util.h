/* cpu_util.h: shared by the cpu_* tests — run one problem through a plan and compare with the fp64 reference. */
#ifndef CPU_UTIL_H
#define CPU_UTIL_H

#include "check.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "internal.h"

#define TOL 1e-5




/* Buffers for one problem: fresh random q, k, v from seed (rounded through the problem's dtype, so the reference sees
 * what a half-precision kernel sees); o poisoned with NaN. Counts: nq (Q), nkv (K), nv (V), no (O). */
typedef struct {
  attn_problem p; /* normalised */
  size_t nq, nkv, nv, no;
  float *q, *k, *v, *o;
  double *ref;
} case_bufs;

__attribute__((unused)) static int case_alloc(const attn_problem *p0, unsigned long long seed, case_bufs *c) {
  memset(c, 0, sizeof *c);
  if (attn_problem_normalize(NULL, p0, &c->p) != ATTN_OK) return -1;
  const attn_problem *p = &c->p;
  c->nq = (size_t)p->batch * p->heads * p->n * p->d;
  c->nkv = (size_t)p->batch * p->heads_kv * p->n_kv * p->d;
  c->nv = (size_t)p->batch * p->heads_kv * p->n_kv * p->d_v;
  c->no = (size_t)p->batch * p->heads * p->n * p->d_v;
  c->q = malloc(c->nq * sizeof(float));
  c->o = malloc(c->no * sizeof(float));
  c->k = malloc(c->nkv * sizeof(float));
  c->v = malloc(c->nv * sizeof(float));
  c->ref = malloc(c->no * sizeof(double));
  if (!c->q || !c->o || !c->k || !c->v || !c->ref) return -1;
  seed = seed * 1000003ULL + test_seed() * 3;
  attn_fill_random(c->q, c->nq, seed * 3 + 1);
  attn_fill_random(c->k, c->nkv, seed * 3 + 2);
  attn_fill_random(c->v, c->nv, seed * 3 + 3);
  attn_round_dtype(p->dtype, c->q, c->nq);
  attn_round_dtype(p->dtype, c->k, c->nkv);
  attn_round_dtype(p->dtype, c->v, c->nv);
  attn_poison(c->o, c->no);
  attn_reference(p, c->q, c->k, c->v, c->ref);
  return 0;
}

/* Executes a plan on the case's fp32 arrays: directly for f32, through half-precision copies otherwise. */
__attribute__((unused)) static int case_run(attn_plan *plan, case_bufs *c) {
  if (c->p.dtype == ATTN_F32) return attn_execute(plan, c->q, c->k, c->v, c->o);
  return attn_plan_run_f32(plan, c->q, c->k, c->v, c->o, NULL, NULL);
}

__attribute__((unused)) static void case_free(case_bufs *c) {
  free(c->q);
  free(c->k);
  free(c->v);
  free(c->o);
  free(c->ref);
}

__attribute__((unused)) static const char *shape(const attn_problem *p) {
  static char buf[256];
  snprintf(buf, sizeof buf, "batch=%d heads=%d heads_kv=%d n=%d n_kv=%d d=%d d_v=%d %s causal=%d scale=%g", p->batch,
           p->heads, p->heads_kv, p->n, p->n_kv, p->d, p->d_v ? p->d_v : p->d, attn_dtype_name(p->dtype), p->causal,
           (double)p->scale);
  return buf;
}

/* Plans, executes and compares one problem; returns the relative error (INFINITY on any failure). */
__attribute__((unused)) static double run_case(attn_runtime *rt, const attn_problem *p, unsigned long long seed) {
  case_bufs c;
  if (case_alloc(p, seed, &c) != 0) {
    CHECK(0, "%s: cannot set up buffers", shape(p));
    return INFINITY;
  }
  attn_plan *plan = NULL;
  int rc = attn_plan_create(rt, p, &plan);
  double err = INFINITY;
  if (rc != ATTN_OK) {
    CHECK(0, "%s: attn_plan_create: %s: %s", shape(p), attn_strerror(rc), attn_last_error(rt));
  } else {
    rc = case_run(plan, &c);
    CHECK(rc == ATTN_OK, "%s: attn_execute: %s: %s", shape(p), attn_strerror(rc), attn_last_error(rt));
    if (rc == ATTN_OK) err = attn_rel_error(c.ref, c.o, c.no);
    const double tol = c.p.dtype == ATTN_F32 ? TOL : 1e-2;
    CHECK(err <= tol, "%s [%s]: relative error %.3g > %g", shape(p), attn_plan_describe(plan), err, tol);
    if (err <= tol) printf("ok   %-80s %-40s err %.2e\n", shape(p), attn_plan_describe(plan), err);
  }
  attn_plan_destroy(plan);
  case_free(&c);
  return err;
}

#endif
