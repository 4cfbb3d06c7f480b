/* tuner_plan.c: after a tuning run, the runtime's plan for a tuned shape comes from the database:
 * usage: tuner_plan DB D N HEADS [N_KV]; prints the plan's describe; exit 0 when the plan is a tuned one and
 * computes correctly, 3 when it computes correctly but is not tuned (describe says why), 1 otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

int main(int argc, char **argv) {
  if (argc != 5 && argc != 6) {
    fprintf(stderr, "usage: tuner_plan DB D N HEADS [N_KV]\n");
    return 2;
  }
  attn_problem p = {.batch = 1, .heads = atoi(argv[4]), .n = atoi(argv[3]), .d = atoi(argv[2]), .dtype = ATTN_F32,
                    .n_kv = argc == 6 ? atoi(argv[5]) : 0};
  attn_runtime *rt = NULL;
  attn_plan *plan = NULL;
  if (attn_open(argv[1], ATTN_TARGET_CPU, &rt) != ATTN_OK) {
    fprintf(stderr, "attn_open: %s\n", attn_last_error(NULL));
    return 1;
  }
  if (attn_plan_create(rt, &p, &plan) != ATTN_OK) {
    fprintf(stderr, "attn_plan_create: %s\n", attn_last_error(rt));
    attn_close(rt);
    return 1;
  }
  const char *desc = attn_plan_describe(plan);
  printf("plan: %s\n", desc);
  size_t nq = (size_t)p.heads * p.n * p.d;
  size_t nk = (size_t)p.heads * (p.n_kv ? p.n_kv : p.n) * p.d;
  float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4), *o = malloc(nq * 4);
  double *ref = malloc(nq * sizeof(double));
  int ok = q && k && v && o && ref;
  if (ok) {
    attn_fill_random(q, nq, 1);
    attn_fill_random(k, nk, 2);
    attn_fill_random(v, nk, 3);
    attn_poison(o, nq);
    ok = attn_execute(plan, q, k, v, o) == ATTN_OK;
    attn_problem np;
    attn_problem_normalize(rt, &p, &np);
    attn_reference(&np, q, k, v, ref);
    double e = attn_rel_error(ref, o, nq);
    printf("rel error %.3g\n", e);
    ok = ok && e <= 1e-4;
  }
  int tuned = strstr(desc, "(tuned") != NULL;
  if (!tuned) fprintf(stderr, "plan is not the tuned one: %s\n", desc);
  free(q), free(k), free(v), free(o), free(ref);
  attn_plan_destroy(plan);
  attn_close(rt);
  return !ok ? 1 : tuned ? 0 : 3;
}
