/* harden CASE: input from outside the program must not take it down or corrupt it.
 *   threads   ATTN_THREADS=100000, 0, -3, abc, 2x: attn_open succeeds with a sane count and says why; a plan with more
 *             work items than 100000 executes correctly (OpenMP used to exit the process asking for 100000 threads).
 *   lifetime  plans outlive attn_close: execute after it (the runtime used to be freed under them), then destroy
 *             them from several threads at once; the last one frees the runtime.
 *   sizes     n = INT_MAX and element counts past PTRDIFF_MAX / 8 are refused with a one-line reason; the largest
 *             accepted n plans without int overflow.
 *   model     I/O counts and model times at n = 2^29 .. 2^31-1: positive, monotone in n, never wrapped past 2^64.
 * api.c, model.c and io_theory.c are compiled into this test with -fsanitize=undefined (tests/harden.cmake). */
#include <limits.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include "cpu_util.h"
#include "io_theory.h"
#include "model.h"

static int expected_cap(void) {
  int procs = omp_get_num_procs() > 0 ? omp_get_num_procs() : 1;
  return 4 * procs < ATTN_THREADS_CAP ? 4 * procs : ATTN_THREADS_CAP;
}

/* ---- threads */

static void test_threads(void) {
  const int cap = expected_cap(), procs = omp_get_num_procs() > 0 ? omp_get_num_procs() : 1;
  const int dflt = procs < cap ? procs : cap;
  /* n = 1 over 128 x 1024 heads: 131072 work items, so that nothing but the cap keeps a huge count from OpenMP */
  const attn_problem p = {.batch = 128, .heads = 1024, .n = 1, .n_kv = 3, .d = 8};
  case_bufs c;
  if (case_alloc(&p, 1, &c) != 0) {
    CHECK(0, "out of memory for the test problem");
    return;
  }
  const struct {
    const char *value;
    int want;         /* threads */
    const char *note; /* in attn_last_error after the open; NULL: "" */
  } cases[] = {{"100000", cap, "clamped"}, {"0", dflt, "ignored"},      {"-3", dflt, "ignored"},
               {"abc", dflt, "ignored"},   {"2x", dflt, "ignored"},     {"", dflt, NULL},
               {"1", 1, NULL},             {"99999999999999999999", cap, "clamped"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *v = cases[i].value;
    if (setenv("ATTN_THREADS", v, 1) != 0) {
      CHECK(0, "setenv");
      continue;
    }
    attn_runtime *rt = NULL;
    int rc = attn_open(NULL, ATTN_TARGET_CPU, &rt);
    CHECK(rc == ATTN_OK, "ATTN_THREADS=%s: attn_open: %s: %s", v, attn_strerror(rc), attn_last_error(NULL));
    if (rc != ATTN_OK) continue;
    const char *note = attn_last_error(rt);
    CHECK(rt->threads == cases[i].want, "ATTN_THREADS=%s: %d threads, want %d", v, rt->threads, cases[i].want);
    if (cases[i].note)
      CHECK(strstr(note, "ATTN_THREADS") && strstr(note, cases[i].note) && !strchr(note, '\n'),
            "ATTN_THREADS=%s: the reason is not recorded: \"%s\"", v, note);
    else
      CHECK(note[0] == '\0', "ATTN_THREADS=%s: unexpected note \"%s\"", v, note);
    attn_plan *plan = NULL;
    rc = attn_plan_create(rt, &p, &plan);
    CHECK(rc == ATTN_OK, "ATTN_THREADS=%s: attn_plan_create: %s: %s", v, attn_strerror(rc), attn_last_error(rt));
    if (rc == ATTN_OK) {
      attn_poison(c.o, c.nq);
      rc = attn_execute(plan, c.q, c.k, c.v, c.o);
      double err = rc == ATTN_OK ? attn_rel_error(c.ref, c.o, c.nq) : INFINITY;
      CHECK(rc == ATTN_OK && err <= TOL, "ATTN_THREADS=%s: execute %s, error %g", v, attn_strerror(rc), err);
      printf("ATTN_THREADS=%-20s -> %4d threads, error %.2e  %s\n", v, rt->threads, err, note);
    }
    attn_plan_destroy(plan);
    attn_close(rt);
  }
  if (unsetenv("ATTN_THREADS") != 0) CHECK(0, "unsetenv");
  case_free(&c);
}

/* ---- lifetime */

#define PLANS 3

typedef struct {
  attn_plan *plan;
  const case_bufs *c;
  float *o;
  int bad;
} destroy_job;

/* One more execution, then the destroy: the threads race to drop the last reference. */
static void *run_and_destroy(void *arg) {
  destroy_job *j = arg;
  int rc = attn_execute(j->plan, j->c->q, j->c->k, j->c->v, j->o);
  if (rc != ATTN_OK || !(attn_rel_error(j->c->ref, j->o, j->c->nq) <= TOL)) j->bad = 1;
  attn_plan_destroy(j->plan);
  return NULL;
}

static void test_lifetime(void) {
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CPU, &rt);
  CHECK(rc == ATTN_OK, "attn_open: %s: %s", attn_strerror(rc), attn_last_error(NULL));
  if (rc != ATTN_OK) return;
  const attn_problem p = {.batch = 2, .heads = 4, .heads_kv = 2, .n = 100, .n_kv = 130, .d = 32, .causal = 1};
  case_bufs c; /* the reference is computed now, before the close */
  if (case_alloc(&p, 2, &c) != 0) {
    CHECK(0, "out of memory");
    attn_close(rt);
    return;
  }
  attn_plan *plans[PLANS] = {0};
  for (int i = 0; i < PLANS; i++) {
    rc = attn_plan_create(rt, &p, &plans[i]);
    CHECK(rc == ATTN_OK, "attn_plan_create: %s: %s", attn_strerror(rc), attn_last_error(rt));
  }
  for (int i = 0; i < PLANS; i++)
    if (!plans[i]) {
      for (int k = 0; k < PLANS; k++) attn_plan_destroy(plans[k]);
      attn_close(rt);
      case_free(&c);
      return;
    }
  CHECK(atomic_load(&rt->refs) == 1 + PLANS, "refs %d, want %d", atomic_load(&rt->refs), 1 + PLANS);
  char describe[512], device[256];
  snprintf(describe, sizeof describe, "%s", attn_plan_describe(plans[0]));
  snprintf(device, sizeof device, "%s", rt->device);
  const int threads = rt->threads;

  attn_close(rt); /* the handle is gone from here on; the plans hold the runtime */
  /* Freed memory of this size is what the next allocations of it get: scribble over it, so that a runtime freed
   * under its plans shows as changed fields (and as a read after free under ASan). */
  void *junk[8];
  for (int i = 0; i < 8; i++) {
    junk[i] = malloc(sizeof(attn_runtime));
    if (junk[i]) memset(junk[i], 0x5a, sizeof(attn_runtime));
  }
  const attn_runtime *held = plans[0]->rt;
  CHECK(atomic_load(&held->closed) == 1 && atomic_load(&held->refs) == PLANS, "after close: closed %d refs %d",
        atomic_load(&held->closed), atomic_load(&held->refs));
  CHECK(held->threads == threads && strcmp(held->device, device) == 0 && held->db == NULL,
        "the runtime changed under its plans after attn_close (freed?): threads %d device \"%.40s\"", held->threads,
        held->device);
  CHECK(strcmp(attn_plan_describe(plans[0]), describe) == 0, "describe changed: %s", attn_plan_describe(plans[0]));
  attn_poison(c.o, c.nq);
  rc = attn_execute(plans[0], c.q, c.k, c.v, c.o);
  double err = rc == ATTN_OK ? attn_rel_error(c.ref, c.o, c.nq) : INFINITY;
  CHECK(rc == ATTN_OK && err <= TOL, "execute after attn_close: %s, error %g", attn_strerror(rc), err);
  printf("execute after attn_close: %s, error %.2e\n", attn_strerror(rc), err);
  /* a new plan on the closed handle is refused while the old ones keep its memory (a use after close) */
  attn_plan *late = NULL;
  rc = attn_plan_create(plans[0]->rt, &p, &late);
  CHECK(rc == ATTN_EINVAL && late == NULL, "attn_plan_create after attn_close: %s", attn_strerror(rc));
  attn_plan_destroy(late);

  /* the plans destroyed from several threads at once, each after one more run; the last frees the runtime */
  pthread_t t[PLANS];
  destroy_job j[PLANS];
  int started[PLANS] = {0};
  for (int i = 0; i < PLANS; i++) {
    j[i] = (destroy_job){.plan = plans[i], .c = &c, .o = malloc(c.nq * sizeof(float))};
    if (!j[i].o) {
      CHECK(0, "out of memory");
      attn_plan_destroy(plans[i]);
      continue;
    }
    started[i] = pthread_create(&t[i], NULL, run_and_destroy, &j[i]) == 0;
    CHECK(started[i], "pthread_create");
    if (!started[i]) attn_plan_destroy(plans[i]);
  }
  for (int i = 0; i < PLANS; i++) {
    if (started[i]) CHECK(pthread_join(t[i], NULL) == 0, "pthread_join");
    CHECK(!j[i].bad, "thread %d: execute before its destroy failed", i);
    free(j[i].o);
  }
  for (int i = 0; i < 8; i++) free(junk[i]);
  case_free(&c);
}

/* ---- sizes */

static void test_sizes(void) {
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CPU, &rt);
  CHECK(rc == ATTN_OK, "attn_open: %s: %s", attn_strerror(rc), attn_last_error(NULL));
  if (rc != ATTN_OK) return;
  const struct {
    attn_problem p;
    const char *why; /* NULL: accepted */
  } cases[] = {
      {{.batch = 1, .heads = 1, .n = INT_MAX, .d = 64}, "rows"},
      {{.batch = 1, .heads = 1, .n = 1, .n_kv = INT_MAX, .d = 64}, "rows"},
      {{.batch = 1, .heads = 1, .n = ATTN_MAX_ROWS + 1, .d = 64}, "rows"},
      /* 2^61 elements: 2^64 bytes of fp64 reference, past size_t (4e18 elements passed before) */
      {{.batch = 1 << 20, .heads = 1 << 20, .n = 1 << 18, .d = 8}, "too large"},
      {{.batch = INT_MAX, .heads = INT_MAX, .n = ATTN_MAX_ROWS, .d = 256}, "too large"},
      {{.batch = 1 << 19, .heads = 1 << 19, .n = 1 << 19, .d = 8}, "too large"}, /* 2^60 = limit + 1 */
      {{.batch = 1 << 18, .heads = 1 << 19, .n = 1 << 19, .d = 8}, NULL},        /* 2^59 */
      {{.batch = 1, .heads = 1, .n = ATTN_MAX_ROWS, .d = 64}, NULL},
      {{.batch = 1, .heads = 1, .n = 1, .n_kv = ATTN_MAX_ROWS, .d = 64}, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const attn_problem *p = &cases[i].p;
    attn_problem out = {0};
    rc = attn_problem_normalize(rt, p, &out);
    const char *msg = attn_last_error(rt);
    if (cases[i].why) {
      CHECK(rc == ATTN_EINVAL && strstr(msg, cases[i].why) && !strchr(msg, '\n'),
            "batch=%d heads=%d n=%d n_kv=%d d=%d: %s \"%s\", want EINVAL \"...%s...\"", p->batch, p->heads, p->n,
            p->n_kv, p->d, attn_strerror(rc), msg, cases[i].why);
      printf("refused: %s\n", msg);
      continue;
    }
    CHECK(rc == ATTN_OK, "batch=%d heads=%d n=%d n_kv=%d: %s: %s", p->batch, p->heads, p->n, p->n_kv,
          attn_strerror(rc), msg);
    if (rc != ATTN_OK || out.batch > 1) continue;
    /* the default plan's split: (n + Br - 1) / Br query blocks, in int, must not wrap (it used to at INT_MAX, and
     * wrapped block counts asked for the largest split) */
    attn_spec s;
    char origin[128];
    rc = attn_plan_choose(rt, &out, &s, origin, sizeof origin);
    CHECK(rc == ATTN_OK, "plan_choose n=%d: %s", out.n, attn_last_error(rt));
    const long blocks = ((long)out.n + s.br - 1) / s.br;
    if (rc == ATTN_OK && blocks >= rt->threads)
      CHECK(s.split == 0, "n=%d: %ld query blocks for %d threads, yet split=%d", out.n, blocks, rt->threads, s.split);
  }
  attn_close(rt);
}

/* ---- model */

static int check_series(const char *what, const attn_gpu *g, attn_spec s, attn_problem p) {
  static const long ns[] = {1L << 20, 1L << 24, 1L << 28, 1L << 29, 1L << 30, (1L << 31) - 1};
  attn_model_result prev = {0};
  unsigned long long pr = 0, pw = 0;
  for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
    p.n = p.n_kv = (int)ns[i];
    char err[256] = "";
    attn_model_result r;
    int rc = attn_model_time(g, &p, &s, &r, err, sizeof err);
    CHECK(rc == ATTN_OK, "%s n=%ld: %s", what, ns[i], err);
    if (rc != ATTN_OK) return -1;
    const long bh = (long)p.batch * p.heads;
    unsigned long long fr = 0, fw = 0;
    CHECK(attn_io_formula(&s, bh, ns[i], ns[i], &fr, &fw) == ATTN_OK, "%s: formula", what);
    printf("%-16s n=%-10ld reads %-20llu writes %-14llu time %.6g ms (memory %.4g, compute %.4g)\n", what, ns[i],
           r.reads, r.writes, r.time_ms, r.t_memory_ms, r.t_compute_ms);
    CHECK(isfinite(r.time_ms) && r.time_ms > 0 && r.t_memory_ms > 0 && r.t_compute_ms > 0 && r.blocks > 0 &&
              r.waves > 0 && r.reads > 0 && r.writes > 0,
          "%s n=%ld: time %g reads %llu writes %llu blocks %d waves %d", what, ns[i], r.time_ms, r.reads, r.writes, r.blocks,
          r.waves);
    CHECK(r.reads == fr && r.writes == fw, "%s n=%ld: model I/O %llu/%llu, formula %llu/%llu", what, ns[i], r.reads,
          r.writes, fr, fw);
    /* a count that cannot be exact is saturated, never wrapped: compare with the double estimate of one head,
     * Q + O once and K, V once per query block */
    const double est = (double)bh * ((double)ns[i] * s.d * (2.0 + 2.0 * ceil((double)ns[i] / s.br)));
    if (est < 0.5 * 18446744073709551615.0 && s.algo == ATTN_ALGO_FLASH)
      CHECK((double)(r.reads + r.writes) > 0.9 * est && (double)(r.reads + r.writes) < 1.1 * est,
            "%s n=%ld: transfers %llu, about %.4g expected", what, ns[i], r.reads + r.writes, est);
    if (est > 2.0 * 18446744073709551615.0)
      CHECK(r.reads == ULLONG_MAX, "%s n=%ld: %.3g reads do not fit 64 bits, yet reads = %llu", what, ns[i], est,
            r.reads);
    if (i > 0) {
      CHECK(r.reads >= pr && r.writes >= pw, "%s: reads/writes fall from n=%ld to n=%ld: %llu/%llu -> %llu/%llu",
            what, ns[i - 1], ns[i], pr, pw, r.reads, r.writes);
      CHECK(r.time_ms > prev.time_ms && r.t_memory_ms >= prev.t_memory_ms,
            "%s: model time falls from n=%ld to n=%ld: %g -> %g ms (memory %g -> %g)", what, ns[i - 1], ns[i],
            prev.time_ms, r.time_ms, prev.t_memory_ms, r.t_memory_ms);
    }
    prev = r;
    pr = r.reads;
    pw = r.writes;
  }
  return 0;
}

static void test_model(void) {
  char err[256];
  const attn_gpu *h100 = attn_gpu_find("H100", err, sizeof err);
  CHECK(h100 != NULL, "H100: %s", err);
  if (!h100) return;
  /* 32 heads: the total passes 2^64 from n = 2^29 */
  const attn_problem p = {.batch = 4, .heads = 8, .d = 128, .dtype = ATTN_F16};
  attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, ATTN_F16, 128, 0);
  s.br = 128, s.bc = 64, s.warps = 8, s.stages = 2;
  check_series("flash d=128", h100, s, p);
  attn_problem p64 = p;
  p64.d = 64;
  attn_spec s64 = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, ATTN_F16, 64, 0);
  check_series("flash d=64", h100, s64, p64);
  attn_spec sc = attn_spec_default(ATTN_ALGO_SMALLCACHE, ATTN_TARGET_CUDA, ATTN_F16, 128, 0);
  check_series("smallcache", h100, sc, p);
  /* one head, and a huge head count: the formula alone, monotone in bh */
  unsigned long long r1 = 0, w1 = 0, rb = 0, wb = 0;
  CHECK(attn_io_formula(&s, 1, (1L << 31) - 1, (1L << 31) - 1, &r1, &w1) == ATTN_OK && r1 > 0 && w1 > 0,
        "one head at 2^31-1: %llu/%llu", r1, w1);
  CHECK(attn_io_formula(&s, 1L << 40, (1L << 31) - 1, (1L << 31) - 1, &rb, &wb) == ATTN_OK && rb == ULLONG_MAX &&
            wb >= w1,
        "2^40 heads at 2^31-1: %llu/%llu", rb, wb);
  CHECK(attn_io_formula(&s, -1, 100, 100, &rb, &wb) == ATTN_EINVAL && rb == 0 && wb == 0,
        "negative batch*heads accepted: %llu/%llu", rb, wb);
  attn_spec lr = attn_spec_default(ATTN_ALGO_LOWRANK, ATTN_TARGET_CUDA, ATTN_F16, 64, 0);
  CHECK(attn_io_formula(&lr, 1L << 40, (1L << 31) - 1, (1L << 31) - 1, &rb, &wb) == ATTN_OK && rb > 0 && wb > 0,
        "lowrank at 2^31-1: %llu/%llu", rb, wb);
}

int main(int argc, char **argv) {
  const char *c = argc > 1 ? argv[1] : "";
  if (strcmp(c, "threads") == 0) test_threads();
  else if (strcmp(c, "lifetime") == 0) test_lifetime();
  else if (strcmp(c, "sizes") == 0) test_sizes();
  else if (strcmp(c, "model") == 0) test_model();
  else {
    fprintf(stderr, "usage: harden threads|lifetime|sizes|model\n");
    return 2;
  }
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
