/* tsan_plans: plans created and executed from several threads on one runtime, in a build with -fsanitize=thread
 * (tests/tsan.cmake), so that any data race in the runtime is a ThreadSanitizer report and fails the test.
 * THREADS threads start together on a cold kernel cache (a fresh directory under DIR) and a fresh database: each
 * creates a (smallcache) plan that every thread asks for (the same kernel compiled by several at once) and one that
 * it shares with one other thread, executes both against the fp64 reference, and fails a call on purpose to check
 * that attn_last_error(rt) and attn_last_error(NULL) give this thread's own failure whatever the others did
 * meanwhile. All of them also execute one plan made before they started, at once; one opens and closes a runtime of
 * its own. ATTN_THREADS=1 (tests/tsan.cmake): OpenMP's runtime is not instrumented, so its barriers would be reported
 * as races; the threads here are the concurrency under test.
 *   tsan_plans DIR */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cpu_util.h"

#define THREADS 6

typedef struct {
  attn_runtime *rt;
  const attn_plan *shared; /* created before the threads start, executed by all of them at once */
  const attn_problem *shared_p;
  int id, bad;
} job;

static pthread_barrier_t start;

/* Runs one problem through a fresh plan; 0 when the result matches the reference. */
static int plan_case(job *j, const attn_problem *p, unsigned long long seed) {
  attn_plan *plan = NULL;
  int rc = attn_plan_create(j->rt, p, &plan);
  if (rc != ATTN_OK) {
    fprintf(stderr, "thread %d: attn_plan_create(d=%d): %s: %s\n", j->id, p->d, attn_strerror(rc),
            attn_last_error(j->rt));
    return -1;
  }
  case_bufs c;
  int bad = case_alloc(p, seed, &c) != 0;
  if (!bad) {
    rc = attn_execute(plan, c.q, c.k, c.v, c.o);
    const double err = rc == ATTN_OK ? attn_rel_error(c.ref, c.o, c.no) : INFINITY;
    if (!(err <= TOL)) {
      fprintf(stderr, "thread %d: %s: %s, relative error %.3g\n", j->id, attn_plan_describe(plan),
              attn_strerror(rc), err);
      bad = 1;
    }
  }
  case_free(&c);
  attn_plan_destroy(plan);
  return bad ? -1 : 0;
}

/* A failure of this thread's own (batch = -id): the messages name it, whoever else failed since. */
static int own_failure(job *j) {
  const attn_problem bad = {.batch = -j->id, .heads = 1, .n = 4, .d = 4};
  attn_plan *plan = NULL;
  char want[64];
  snprintf(want, sizeof want, "batch=%d ", -j->id);
  if (attn_plan_create(j->rt, &bad, &plan) != ATTN_EINVAL || plan) return -1;
  for (int r = 0; r < 50; r++) {
    const char *mine = attn_last_error(j->rt), *any = attn_last_error(NULL);
    if (!strstr(mine, want) || !strstr(any, want)) {
      fprintf(stderr, "thread %d: attn_last_error gives another failure: \"%s\" / \"%s\"\n", j->id, mine, any);
      return -1;
    }
    sched_yield();
  }
  return 0;
}

static void *worker(void *arg) {
  job *j = arg;
  /* every thread: the same kernel; pairs of threads: one more each (d = 2, 3, 5) */
  /* smallcache: its kernels compile in a fraction of flash's time */
  const attn_problem same = {.batch = 1, .heads = 2, .n = 5, .n_kv = 7, .d = 4, .causal = 1,
                             .algo = ATTN_ALGO_SMALLCACHE};
  const attn_problem pair = {.batch = 1, .heads = 1, .n = 3, .d = j->id % 3 == 0 ? 2 : j->id % 3 == 1 ? 3 : 5,
                             .algo = ATTN_ALGO_SMALLCACHE};
  pthread_barrier_wait(&start);
  if (plan_case(j, &same, (unsigned long long)j->id) != 0) j->bad++;
  if (own_failure(j) != 0) j->bad++;
  case_bufs c;
  if (case_alloc(j->shared_p, 200ULL + (unsigned long long)j->id, &c) != 0 ||
      attn_execute(j->shared, c.q, c.k, c.v, c.o) != ATTN_OK || !(attn_rel_error(c.ref, c.o, c.no) <= TOL)) {
    fprintf(stderr, "thread %d: the shared plan failed or was wrong\n", j->id);
    j->bad++;
  }
  case_free(&c);
  if (plan_case(j, &pair, 100ULL + (unsigned long long)j->id) != 0) j->bad++;
  if (j->id == 1) { /* a runtime opened and closed while the others work */
    attn_runtime *rt = NULL;
    if (attn_open(NULL, ATTN_TARGET_CPU, &rt) != ATTN_OK) j->bad++;
    attn_close(rt);
  }
  if (own_failure(j) != 0) j->bad++;
  return NULL;
}

/* Empties and removes the test's cache directory (plain files only: what the runtime writes there). */
static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  char path[4400];
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: tsan_plans DIR\n");
    return 2;
  }
  test_seed(); /* printed once, before the threads read it */
  char cache[4096], db[4200];
  snprintf(cache, sizeof cache, "%s/cache-XXXXXX", argv[1]);
  CHECK(mkdtemp(cache) != NULL, "mkdtemp under %s", argv[1]);
  if (failures) return 1;
  snprintf(db, sizeof db, "%s/t.db", cache);
  /* a cold cache: the directory exists but is empty, and the database's artifacts table too */
  setenv("ATTN_CACHE_DIR", cache, 1);
  attn_db *h = NULL;
  char err[256];
  CHECK(attn_db_open(db, 1, &h, err, sizeof err) == ATTN_OK, "creating %s: %s", db, err);
  attn_db_close(h);
  attn_runtime *rt = NULL;
  int rc = attn_open(db, ATTN_TARGET_CPU, &rt);
  CHECK(rc == ATTN_OK, "attn_open: %s: %s", attn_strerror(rc), attn_last_error(NULL));
  const attn_problem shared_p = {.batch = 2, .heads = 2, .heads_kv = 1, .n = 9, .d = 6,
                                 .algo = ATTN_ALGO_SMALLCACHE};
  attn_plan *shared = NULL;
  if (rc == ATTN_OK) {
    rc = attn_plan_create(rt, &shared_p, &shared);
    CHECK(rc == ATTN_OK, "attn_plan_create: %s: %s", attn_strerror(rc), attn_last_error(rt));
  }
  if (rc == ATTN_OK) {
    pthread_barrier_init(&start, NULL, THREADS);
    pthread_t t[THREADS];
    job j[THREADS];
    for (int i = 0; i < THREADS; i++) {
      j[i] = (job){.rt = rt, .shared = shared, .shared_p = &shared_p, .id = i + 1};
      CHECK(pthread_create(&t[i], NULL, worker, &j[i]) == 0, "pthread_create");
    }
    for (int i = 0; i < THREADS; i++) {
      pthread_join(t[i], NULL);
      CHECK(j[i].bad == 0, "thread %d: %d of its checks failed", j[i].id, j[i].bad);
    }
    pthread_barrier_destroy(&start);
  }
  attn_plan_destroy(shared);
  attn_close(rt);
  remove_dir(cache);
  printf("tsan_plans: %d threads, %d failures\n", THREADS, failures);
  return failures ? 1 : 0;
}
