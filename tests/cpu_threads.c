/* cpu_threads: one plan executed from 4 threads at once, each on its own inputs, every result checked: a
 * grouped-query causal plan, then the untuned decode plan (n = 1), which on 2 or more threads splits the key range
 * (and so gets a partials buffer per call, which concurrent calls must not share). */
#include <pthread.h>
#include <string.h>
#include "cpu_util.h"

#define THREADS 4
#define ROUNDS 4

typedef struct {
  const attn_plan *plan;
  const attn_problem *p;
  int id, bad;
  double worst;
} job;

static void *worker(void *arg) {
  job *j = arg;
  for (int r = 0; r < ROUNDS; r++) {
    case_bufs c;
    if (case_alloc(j->p, (unsigned long long)(j->id * 100 + r), &c) != 0) {
      j->bad++;
      continue;
    }
    int rc = attn_execute(j->plan, c.q, c.k, c.v, c.o);
    double err = rc == ATTN_OK ? attn_rel_error(c.ref, c.o, c.no) : INFINITY;
    if (!(err <= TOL)) j->bad++;
    if (!(err <= j->worst)) j->worst = err;
    case_free(&c);
  }
  return NULL;
}

int main(void) {
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CPU, &rt);
  if (rc != ATTN_OK) {
    fprintf(stderr, "attn_open: %s: %s\n", attn_strerror(rc), attn_last_error(NULL));
    return 1;
  }
  const attn_problem probs[] = {
      {.batch = 2, .heads = 4, .heads_kv = 2, .n = 200, .n_kv = 230, .d = 64, .causal = 1},
      {.batch = 1, .heads = 1, .n = 1, .n_kv = 3000, .d = 64},
  };
  for (int pi = 0; pi < 2; pi++) {
    const attn_problem *p = &probs[pi];
    attn_plan *plan = NULL;
    rc = attn_plan_create(rt, p, &plan);
    CHECK(rc == ATTN_OK, "attn_plan_create: %s: %s", attn_strerror(rc), attn_last_error(rt));
    if (rc != ATTN_OK) continue;
    const char *desc = attn_plan_describe(plan);
    printf("plan %d: %s\n", pi, desc);
    if (pi == 1) CHECK(strstr(desc, "split=") != NULL, "the untuned decode plan does not split: %s", desc);
    pthread_t t[THREADS];
    job j[THREADS];
    for (int i = 0; i < THREADS; i++) {
      j[i] = (job){.plan = plan, .p = p, .id = i + 1 + 10 * pi};
      CHECK(pthread_create(&t[i], NULL, worker, &j[i]) == 0, "pthread_create");
    }
    for (int i = 0; i < THREADS; i++) {
      pthread_join(t[i], NULL);
      printf("thread %d: %d rounds, worst relative error %.3g\n", i, ROUNDS, j[i].worst);
      CHECK(j[i].bad == 0, "thread %d: %d of %d rounds wrong (worst error %.3g)", i, j[i].bad, ROUNDS, j[i].worst);
    }
    attn_plan_destroy(plan);
  }
  attn_close(rt);
  printf("cpu_threads: %d failures\n", failures);
  return failures ? 1 : 0;
}
