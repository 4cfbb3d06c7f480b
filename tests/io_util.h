/* io_util.h: shared by the io_* tests — one counted run of a spec on a problem shape through the runtime. */
#ifndef IO_UTIL_H
#define IO_UTIL_H

#include "check.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "io_theory.h"




/* Counting build of s on (batch, heads, heads_kv, n, n_kv): io and relative error vs fp64. */
__attribute__((unused)) static int io_run(attn_runtime *rt, const attn_spec *s, int batch, int heads, int heads_kv, int n, int n_kv,
                  attn_io *io, double *err) {
  attn_problem p0 = {0};
  p0.batch = batch;
  p0.heads = heads;
  p0.heads_kv = heads_kv;
  p0.n = n;
  p0.n_kv = n_kv;
  p0.d = s->d;
  p0.d_v = attn_spec_dv(s);
  p0.causal = s->causal;
  p0.dtype = ATTN_F32;
  p0.tolerance = s->algo == ATTN_ALGO_LOWRANK ? 1.0 : 0.0;
  attn_plan *plan = NULL;
  int rc = attn_plan_create_spec(rt, &p0, s, 1, "test", &plan);
  if (rc != ATTN_OK) {
    fprintf(stderr, "plan: %s\n", attn_last_error(rt));
    return rc;
  }
  const attn_problem *p = &plan->p;
  size_t nq = (size_t)p->batch * p->heads * p->n * p->d, nk = (size_t)p->batch * p->heads_kv * p->n_kv * p->d;
  size_t nv = (size_t)p->batch * p->heads_kv * p->n_kv * p->d_v, no = (size_t)p->batch * p->heads * p->n * p->d_v;
  float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nv * 4), *o = malloc(no * 4);
  double *ref = malloc(no * 8);
  static unsigned long long bump;
  unsigned long long seed = test_seed() * 7919 + ++bump * 3;
  rc = ATTN_ENOMEM;
  if (q && k && v && o && ref) {
    attn_fill_random(q, nq, seed);
    attn_fill_random(k, nk, seed + 1);
    attn_fill_random(v, nv, seed + 2);
    attn_poison(o, no);
    attn_kargs a = {.q = q, .k = k, .v = v, .o = o, .batch = p->batch, .heads = p->heads, .heads_kv = p->heads_kv,
                    .n = p->n, .n_kv = p->n_kv, .scale = p->scale};
    rc = attn_cpu_run(rt, plan->cpu, &a, io);
    if (rc == ATTN_OK) {
      attn_reference(p, q, k, v, ref);
      *err = attn_rel_error(ref, o, no);
    } else {
      fprintf(stderr, "run: %s\n", attn_last_error(rt));
    }
  }
  free(q);
  free(k);
  free(v);
  free(o);
  free(ref);
  attn_plan_destroy(plan);
  return rc;
}

__attribute__((unused)) static attn_spec io_spec(attn_algo algo, int d, int br, int bc, int tile, int causal) {
  attn_spec s = attn_spec_default(algo, ATTN_TARGET_CPU, ATTN_F32, d, causal);
  s.br = br;
  s.bc = bc;
  s.tile = tile;
  return s;
}

static attn_runtime *io_open(void) {
  attn_runtime *rt = NULL;
  if (attn_open(NULL, ATTN_TARGET_CPU, &rt) != ATTN_OK) {
    fprintf(stderr, "attn_open: %s\n", attn_last_error(NULL));
    exit(1);
  }
  return rt;
}

#endif
