/* tuner_plan.c: after a tuning run, the runtime's plan for a tuned shape comes from the database:
 * usage: tuner_plan DB D[/DV][:DTYPE] N HEADS [N_KV]; prints the plan's describe; exit 0 when the plan is a tuned
 * one and computes correctly, 3 when it computes correctly but is not tuned (describe says why), 1 otherwise.
 * D/DV: a d_v other than d (64/128); :DTYPE f16 or bf16 runs on fp32 arrays converted (attn_plan_run_f32), checked
 * against the reference on the rounded inputs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "spec.h"

int main(int argc, char **argv) {
  if (argc != 5 && argc != 6) {
    fprintf(stderr, "usage: tuner_plan DB D[/DV][:DTYPE] N HEADS [N_KV]\n");
    return 2;
  }
  char *end = NULL;
  const int d = (int)strtol(argv[2], &end, 10);
  int dv = 0, dtype = ATTN_F32;
  if (*end == '/') dv = (int)strtol(end + 1, &end, 10);
  if (*end == ':') dtype = attn_dtype_parse(end + 1);
  else if (*end) dtype = -1;
  if (d <= 0 || dv < 0 || dtype < 0) {
    fprintf(stderr, "tuner_plan: bad D[/DV][:DTYPE] '%s'\n", argv[2]);
    return 2;
  }
  attn_problem p = {.batch = 1, .heads = atoi(argv[4]), .n = atoi(argv[3]), .d = d, .dtype = (attn_dtype)dtype,
                    .n_kv = argc == 6 ? atoi(argv[5]) : 0, .d_v = dv};
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
  const int w = dv > 0 ? dv : d, nkv = p.n_kv ? p.n_kv : p.n;
  size_t nq = (size_t)p.heads * p.n * d, nk = (size_t)p.heads * nkv * d, nv = (size_t)p.heads * nkv * w;
  size_t no = (size_t)p.heads * p.n * w;
  float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nv * 4), *o = malloc(no * 4);
  double *ref = malloc(no * sizeof(double));
  int ok = q && k && v && o && ref;
  if (ok) {
    attn_fill_random(q, nq, 1);
    attn_fill_random(k, nk, 2);
    attn_fill_random(v, nv, 3);
    attn_round_dtype(p.dtype, q, nq);
    attn_round_dtype(p.dtype, k, nk);
    attn_round_dtype(p.dtype, v, nv);
    attn_poison(o, no);
    ok = (p.dtype == ATTN_F32 ? attn_execute(plan, q, k, v, o) : attn_plan_run_f32(plan, q, k, v, o, NULL, NULL)) ==
         ATTN_OK;
    attn_problem np;
    attn_problem_normalize(rt, &p, &np);
    attn_reference(&np, q, k, v, ref);
    double e = attn_rel_error(ref, o, no);
    printf("rel error %.3g\n", e);
    ok = ok && e <= (p.dtype == ATTN_F32 ? 1e-4 : 1e-2);
  }
  int tuned = strstr(desc, "(tuned") != NULL;
  if (!tuned) fprintf(stderr, "plan is not the tuned one: %s\n", desc);
  free(q), free(k), free(v), free(o), free(ref);
  attn_plan_destroy(plan);
  attn_close(rt);
  return !ok ? 1 : tuned ? 0 : 3;
}
