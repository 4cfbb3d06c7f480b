/* source_verb_plan.c: a CPU plan of a given spec, so that the compiler it runs (a stand-in that keeps the source it is
 * given and fails: tests/source_verb.sh) shows what the runtime compiles for it.
 * usage: source_verb_plan DB SPEC COUNT_IO fwd|bwd; exit 3 when the plan failed to compile (what the stand-in makes
 * it do), 0 when it was made, 2 for bad arguments, 1 otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

int main(int argc, char **argv) {
  if (argc != 5 || (strcmp(argv[4], "fwd") != 0 && strcmp(argv[4], "bwd") != 0)) {
    fprintf(stderr, "usage: source_verb_plan DB SPEC COUNT_IO fwd|bwd\n");
    return 2;
  }
  char err[512];
  attn_spec s;
  if (attn_spec_parse_fields(argv[2], &s, err, sizeof err) != ATTN_OK) {
    fprintf(stderr, "source_verb_plan: %s\n", err);
    return 2;
  }
  /* the problem the spec serves: its head dimensions, dtype, mask and score modifiers */
  static const float slopes[1] = {0.5f};
  attn_problem p = {.batch = 1, .heads = 1, .n = 8, .d = s.d, .d_v = attn_spec_dv(&s), .dtype = s.dtype,
                    .causal = s.causal, .window = s.window ? 4 : 0, .softcap = s.softcap ? 30.0f : 0.0f,
                    .alibi_slopes = s.alibi ? slopes : NULL, .tolerance = s.algo == ATTN_ALGO_LOWRANK ? 0.5 : 0};
  attn_runtime *rt = NULL;
  if (attn_open(argv[1], ATTN_TARGET_CPU, &rt) != ATTN_OK) {
    fprintf(stderr, "attn_open: %s\n", attn_last_error(NULL));
    return 1;
  }
  attn_plan *plan = NULL;
  const int count_io = atoi(argv[3]);
  const int rc = strcmp(argv[4], "bwd") == 0 ? attn_plan_create_backward_spec(rt, &p, &s, count_io, "test", &plan)
                                             : attn_plan_create_spec(rt, &p, &s, count_io, "test", &plan);
  if (rc != ATTN_OK) printf("plan: %s\n", attn_last_error(rt));
  attn_plan_destroy(plan);
  attn_close(rt);
  return rc == ATTN_OK ? 0 : rc == ATTN_ECOMPILE ? 3 : 1;
}
