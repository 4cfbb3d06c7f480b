/* cpu_plans: several plans alive at once each run their own kernel. Plans with different head dimensions and tile
 * sizes are created one after another (each compiled kernel loaded through the descriptor of its checked file) and
 * executed in turn, every output checked against fp64: a loader that handed one plan another's kernel fails here.
 * Then one kernel loaded by two runtimes, the first runtime's plan and handle gone, and a plan of another kernel made
 * next: the loader knows the shared object by the first load's descriptor name, which the next kernel's file would
 * get if that descriptor were closed. */
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

  /* the same kernel (d = 24) loaded by two runtimes, the first gone, then another kernel (d = 40) */
  case_bufs x, y;
  attn_problem px = {.batch = 1, .heads = 2, .n = 45, .d = 24, .dtype = ATTN_F32};
  attn_problem py = {.batch = 1, .heads = 2, .n = 51, .n_kv = 70, .d = 40, .dtype = ATTN_F32, .causal = 1};
  if (case_alloc(&px, 21, &x) == 0) {
    if (case_alloc(&py, 22, &y) == 0) {
      attn_plan *x1 = NULL, *x2 = NULL, *y1 = NULL;
      attn_runtime *rt2 = NULL;
      rc = attn_open(NULL, ATTN_TARGET_CPU, &rt2);
      CHECK(rc == ATTN_OK, "attn_open: %s", attn_last_error(NULL));
      if (rc == ATTN_OK) rc = attn_plan_create(rt2, &x.p, &x1);
      if (rc == ATTN_OK) rc = attn_plan_create(rt, &x.p, &x2);
      CHECK(rc == ATTN_OK, "shared kernel: %s", attn_last_error(rt));
      attn_plan_destroy(x1);
      attn_close(rt2);
      rc = attn_plan_create(rt, &y.p, &y1);
      CHECK(rc == ATTN_OK, "next kernel: %s", attn_last_error(rt));
      if (y1) {
        attn_poison(y.o, y.no);
        rc = attn_execute(y1, y.q, y.k, y.v, y.o);
        double err = rc == ATTN_OK ? attn_rel_error(y.ref, y.o, y.no) : INFINITY;
        CHECK(err <= TOL, "the kernel loaded after a shared one's first plan went [%s]: relative error %.3g",
              attn_plan_describe(y1), err);
      }
      if (x2) {
        attn_poison(x.o, x.no);
        rc = attn_execute(x2, x.q, x.k, x.v, x.o);
        double err = rc == ATTN_OK ? attn_rel_error(x.ref, x.o, x.no) : INFINITY;
        CHECK(err <= TOL, "the shared kernel's second plan [%s]: relative error %.3g", attn_plan_describe(x2), err);
      }
      attn_plan_destroy(x2);
      attn_plan_destroy(y1);
      case_free(&y);
    }
    case_free(&x);
  }
  attn_close(rt);
  printf("cpu_plans: %d failures\n", failures);
  return failures ? 1 : 0;
}
