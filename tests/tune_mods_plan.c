/* tune_mods_plan.c: the configuration a problem with score modifiers is served on a database the tuner filled, as
 * attn_plan_create chooses it (attn_plan_choose: nothing compiled), printed "choice: SPEC (ORIGIN)", SPEC the canonical
 * text the database's kernels table holds; with MODE create (CPU) the plan is also made and printed "plan: " and
 * attn_plan_describe. CUDA runs on the driver ATTN_LIBCUDA names (the fake one, named as a GPU of the spec table, so
 * that rows tuned with --gpu NAME apply). ALiBi's slopes are not the tuner's: the key holds "alibi", not its values.
 * Usage: tune_mods_plan cpu|cuda choose|create DB D N N_KV HEADS HEADS_KV CAUSAL DTYPE WINDOW SOFTCAP ALIBI
 * (ALIBI 0 or 1); exit 0, or 1 with the reason. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

int main(int argc, char **argv) {
  if (argc != 14 || (strcmp(argv[1], "cpu") && strcmp(argv[1], "cuda")) ||
      (strcmp(argv[2], "choose") && strcmp(argv[2], "create"))) {
    fprintf(stderr, "usage: tune_mods_plan cpu|cuda choose|create DB D N N_KV HEADS HEADS_KV CAUSAL DTYPE WINDOW "
                    "SOFTCAP ALIBI\n");
    return 2;
  }
  float slopes[4096];
  attn_problem in = {.d = atoi(argv[4]), .n = atoi(argv[5]), .n_kv = atoi(argv[6]), .heads = atoi(argv[7]),
                     .heads_kv = atoi(argv[8]), .causal = atoi(argv[9]), .window = atoi(argv[11]),
                     .softcap = strtof(argv[12], NULL), .alibi_slopes = atoi(argv[13]) ? slopes : NULL, .batch = 1};
  in.dtype = !strcmp(argv[10], "bf16") ? ATTN_BF16 : !strcmp(argv[10], "f16") ? ATTN_F16 : ATTN_F32;
  if (in.heads < 1 || in.heads > 4096) {
    fprintf(stderr, "tune_mods_plan: heads %d not in 1..4096\n", in.heads);
    return 2;
  }
  for (int h = 0; h < in.heads; h++) slopes[h] = 0.25f / (float)(h + 1);
  attn_runtime *rt = NULL;
  if (attn_open(argv[3], strcmp(argv[1], "cpu") ? ATTN_TARGET_CUDA : ATTN_TARGET_CPU, &rt) != ATTN_OK) {
    fprintf(stderr, "tune_mods_plan: %s\n", attn_last_error(NULL));
    return 1;
  }
  attn_problem p;
  attn_spec s;
  char origin[128], text[512];
  int rc = attn_problem_normalize(rt, &in, &p);
  if (rc == ATTN_OK) rc = attn_plan_choose(rt, &p, &s, origin, sizeof origin);
  if (rc == ATTN_OK) {
    attn_spec_format(&s, text, sizeof text);
    printf("choice: %s (%s)\n", text, origin);
  }
  attn_plan *plan = NULL;
  if (rc == ATTN_OK && strcmp(argv[2], "create") == 0 && (rc = attn_plan_create(rt, &in, &plan)) == ATTN_OK)
    printf("plan: %s\n", attn_plan_describe(plan));
  if (rc != ATTN_OK) fprintf(stderr, "tune_mods_plan: %s\n", attn_last_error(rt));
  attn_plan_destroy(plan);
  attn_close(rt);
  return rc == ATTN_OK ? 0 : 1;
}
