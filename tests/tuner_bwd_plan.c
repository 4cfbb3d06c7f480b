/* tuner_bwd_plan.c: after `attntune --pass bwd`, attn_plan_create_backward serves the tuned backward row:
 * usage: tuner_bwd_plan DB D N HEADS; prints the plan's describe; exit 0 when the plan is a tuned one and its gradients
 * match the fp64 backward, 3 when they match but the plan is not tuned (describe says why), 1 otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: tuner_bwd_plan DB D N HEADS\n");
    return 2;
  }
  attn_problem p = {.batch = 1, .heads = atoi(argv[4]), .n = atoi(argv[3]), .d = atoi(argv[2]), .dtype = ATTN_F32};
  attn_runtime *rt = NULL;
  attn_plan *fwd = NULL, *bwd = NULL;
  if (attn_open(argv[1], ATTN_TARGET_CPU, &rt) != ATTN_OK) {
    fprintf(stderr, "attn_open: %s\n", attn_last_error(NULL));
    return 1;
  }
  if (attn_plan_create(rt, &p, &fwd) != ATTN_OK || attn_plan_create_backward(rt, &p, &bwd) != ATTN_OK) {
    fprintf(stderr, "plan: %s\n", attn_last_error(rt));
    attn_plan_destroy(fwd);
    attn_close(rt);
    return 1;
  }
  const char *desc = attn_plan_describe(bwd);
  printf("forward: %s\nbackward: %s\n", attn_plan_describe(fwd), desc);
  const size_t nq = (size_t)p.heads * p.n * p.d, nl = (size_t)p.heads * p.n;
  float *q = malloc(nq * 4), *k = malloc(nq * 4), *v = malloc(nq * 4), *o = malloc(nq * 4), *dout = malloc(nq * 4);
  float *lse = malloc(nl * 4), *g = malloc(3 * nq * 4);
  double *ref = malloc(3 * nq * sizeof(double));
  int ok = q && k && v && o && dout && lse && g && ref;
  if (ok) {
    attn_fill_random(q, nq, 1);
    attn_fill_random(k, nq, 2);
    attn_fill_random(v, nq, 3);
    attn_fill_random(dout, nq, 4);
    attn_poison(g, 3 * nq);
    ok = attn_execute_lse(fwd, q, k, v, o, lse) == ATTN_OK &&
         attn_execute_backward(bwd, q, k, v, o, lse, dout, g, g + nq, g + 2 * nq) == ATTN_OK;
    attn_problem np;
    ok = ok && attn_problem_normalize(rt, &p, &np) == ATTN_OK;
    if (ok) attn_reference_backward(&np, q, k, v, o, dout, ref, ref + nq, ref + 2 * nq);
    const double e = ok ? attn_rel_error(ref, g, 3 * nq) : 1;
    printf("gradients' rel error %.3g\n", e);
    ok = ok && e <= 1e-4;
  }
  const int tuned = strstr(desc, "backward (tuned") != NULL;
  if (!tuned) fprintf(stderr, "the backward plan is not the tuned one: %s\n", desc);
  free(q), free(k), free(v), free(o), free(dout), free(lse), free(g), free(ref);
  attn_plan_destroy(fwd);
  attn_plan_destroy(bwd);
  attn_close(rt);
  return !ok ? 1 : tuned ? 0 : 3;
}
