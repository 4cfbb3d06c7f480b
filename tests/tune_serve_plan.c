/* tune_serve_plan.c: the runtime's plan for a serving layout, as an application makes it (attn_plan_create with
 * page_size or varlen set), on a database the tuner filled: prints "plan: " and attn_plan_describe, and runs it once
 * through attn_execute_paged or attn_execute_varlen (every sequence full length) so that a served row is one the call
 * takes. Usage: tune_serve_plan DB D N N_KV HEADS BATCH CAUSAL PAGE_SIZE VARLEN; exit 0, or 1 with the reason. */
#include <stdio.h>
#include <stdlib.h>
#include "attn.h"

int main(int argc, char **argv) {
  if (argc != 10) {
    fprintf(stderr, "usage: tune_serve_plan DB D N N_KV HEADS BATCH CAUSAL PAGE_SIZE VARLEN\n");
    return 2;
  }
  attn_problem p = {.d = atoi(argv[2]), .n = atoi(argv[3]), .n_kv = atoi(argv[4]), .heads = atoi(argv[5]),
                    .batch = atoi(argv[6]), .causal = atoi(argv[7]), .page_size = atoi(argv[8]),
                    .varlen = atoi(argv[9]), .dtype = ATTN_F32};
  attn_runtime *rt = NULL;
  attn_plan *plan = NULL;
  if (attn_open(argv[1], ATTN_TARGET_CPU, &rt) != ATTN_OK) {
    fprintf(stderr, "tune_serve_plan: %s\n", attn_last_error(NULL));
    return 1;
  }
  if (attn_plan_create(rt, &p, &plan) != ATTN_OK) {
    fprintf(stderr, "tune_serve_plan: %s\n", attn_last_error(rt));
    attn_close(rt);
    return 1;
  }
  printf("plan: %s\n", attn_plan_describe(plan));
  /* inputs of ones: the layouts' sizes matter here, not the values (the tuner checked the values) */
  const size_t rows_q = (size_t)p.batch * p.n, dim = (size_t)p.d * p.heads;
  const int ps = p.page_size > 0 ? p.page_size : 1, pages = (p.n_kv + ps - 1) / ps;
  float *q = malloc(rows_q * dim * sizeof *q), *o = malloc(rows_q * dim * sizeof *o);
  const size_t kv = (size_t)p.batch * pages * ps * dim;
  float *k = malloc(kv * sizeof *k), *v = malloc(kv * sizeof *v);
  int *table = malloc(sizeof *table * (size_t)p.batch * pages), *lens = malloc(sizeof *lens * (size_t)p.batch);
  int *cu_q = malloc(sizeof *cu_q * ((size_t)p.batch + 1)), *cu_kv = malloc(sizeof *cu_kv * ((size_t)p.batch + 1));
  int rc = q && o && k && v && table && lens && cu_q && cu_kv ? ATTN_OK : ATTN_ENOMEM;
  if (rc == ATTN_OK) {
    for (size_t i = 0; i < rows_q * dim; i++) q[i] = 1.0f;
    for (size_t i = 0; i < kv; i++) k[i] = v[i] = 1.0f;
    for (int i = 0; i < p.batch * pages; i++) table[i] = i;
    cu_q[0] = cu_kv[0] = 0;
    for (int b = 0; b < p.batch; b++) lens[b] = p.n_kv, cu_q[b + 1] = cu_q[b] + p.n, cu_kv[b + 1] = cu_kv[b] + p.n_kv;
    if (p.page_size > 0)
      rc = attn_execute_paged(plan, q, k, v, p.batch * pages, p.page_size, table, pages, lens, o);
    else if (p.varlen)
      rc = attn_execute_varlen(plan, cu_q, cu_kv, q, k, v, o);
    else
      rc = attn_execute(plan, q, k, v, o);
    /* every value is 1: so is every output (softmax weights sum to 1) */
    for (size_t i = 0; rc == ATTN_OK && i < rows_q * dim; i++)
      if (!(o[i] > 0.999f && o[i] < 1.001f)) {
        fprintf(stderr, "tune_serve_plan: output %zu is %g, not 1\n", i, (double)o[i]);
        rc = ATTN_ERUNTIME;
      }
    if (rc != ATTN_OK && rc != ATTN_ERUNTIME) fprintf(stderr, "tune_serve_plan: %s\n", attn_last_error(rt));
  }
  free(q), free(o), free(k), free(v), free(table), free(lens), free(cu_q), free(cu_kv);
  attn_plan_destroy(plan);
  attn_close(rt);
  return rc == ATTN_OK ? 0 : 1;
}
