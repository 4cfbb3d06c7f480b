/* cpu_plans: several plans alive at once each run their own kernel. Plans with different head dimensions and tile
 * sizes are created one after another (each compiled kernel loaded through the descriptor of its checked file) and
 * executed in turn, every output checked against fp64: a loader that handed one plan another's kernel fails here. */
#include "cpu_util.h"

int main(void) {
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CPU, &rt);
  if (rc != ATTN_OK) {
    fprintf(stderr, "attn_open: %s: %s\n", attn_strerror(rc), attn_last_error(NULL));
    return 1;
  }
  enum { NPLANS = 5 };
  static const int ds[NPLANS] = {32, 64, 32, 16, 64};
  static const int brs[NPLANS] = {0, 0, 16, 32, 128}; /* 0: the default configuration */
  attn_plan *plans[NPLANS] = {0};
  case_bufs c[NPLANS];
  int have[NPLANS] = {0};
  for (int i = 0; i < NPLANS; i++) {
    attn_problem p = {.batch = 1, .heads = 2, .n = 97, .n_kv = 130, .d = ds[i], .dtype = ATTN_F32, .causal = i & 1};
    have[i] = case_alloc(&p, 11 + (unsigned long long)i, &c[i]) == 0;
    CHECK(have[i], "plan %d: buffers", i);
    if (!have[i]) continue;
    if (brs[i]) {
      attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, ATTN_F32, ds[i], p.causal);
      s.br = brs[i];
      rc = attn_plan_create_spec(rt, &c[i].p, &s, 0, "given", &plans[i]);
    } else {
      rc = attn_plan_create(rt, &c[i].p, &plans[i]);
    }
    CHECK(rc == ATTN_OK, "plan %d (d=%d): %s", i, ds[i], attn_last_error(rt));
  }
  for (int round = 0; round < 2; round++)
    for (int i = NPLANS - 1; i >= 0; i--) {
      if (!plans[i] || !have[i]) continue;
      attn_poison(c[i].o, c[i].no);
      rc = attn_execute(plans[i], c[i].q, c[i].k, c[i].v, c[i].o);
      double err = rc == ATTN_OK ? attn_rel_error(c[i].ref, c[i].o, c[i].no) : INFINITY;
      CHECK(err <= TOL, "plan %d [%s] round %d: relative error %.3g", i, attn_plan_describe(plans[i]), round, err);
    }
  for (int i = 0; i < NPLANS; i++) {
    attn_plan_destroy(plans[i]);
    if (have[i]) case_free(&c[i]);
  }
  attn_close(rt);
  printf("cpu_plans: %d failures\n", failures);
  return failures ? 1 : 0;
}
