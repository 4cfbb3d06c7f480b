/* execute_async: attn_execute_async (attn.h).
 *   execute_async cpu        a CPU plan: the same output as attn_execute, bit for bit (a split-K decode plan too),
 *                            the stream ignored; a NULL plan or pointer gives ATTN_EINVAL naming it.
 *   execute_async cuda FAKE  on the fake driver (tests/fake_libcuda.c, its record in fake_libcuda.h): the launch goes
 *                            to the caller's stream and nothing waits for it (no synchronize, no host copy), scratch
 *                            is allocated and freed in that stream's order, and nothing a queued launch uses is freed
 *                            under it (attn_plan_destroy waits first); attn_execute still waits for its launch; a
 *                            device without memory pools makes a kernel with scratch wait instead. Flash (no
 *                            scratch) and smallcache (scratch) at a small d. Then a FIFO under the cubin's name in
 *                            a fresh cache directory: refused (an open for reading would wait for a writer forever),
 *                            compiled again and replaced. Exit 77 without NVRTC: the fake driver needs real cubins to
 *                            get as far as a launch. */
#include <dirent.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cpu_util.h"
#include "fake_libcuda.h"

static int cpu(void) {
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CPU, &rt);
  if (rc != ATTN_OK) {
    fprintf(stderr, "attn_open: %s: %s\n", attn_strerror(rc), attn_last_error(NULL));
    return 1;
  }
  const attn_problem probs[] = {
      {.batch = 2, .heads = 4, .heads_kv = 2, .n = 37, .n_kv = 53, .d = 24, .causal = 1},
      {.batch = 1, .heads = 1, .n = 1, .n_kv = 3000, .d = 16}, /* split-K where there are threads to split for */
  };
  for (int i = 0; i < 2; i++) {
    attn_plan *plan = NULL;
    rc = attn_plan_create(rt, &probs[i], &plan);
    CHECK(rc == ATTN_OK, "attn_plan_create: %s: %s", attn_strerror(rc), attn_last_error(rt));
    if (rc != ATTN_OK) continue;
    case_bufs c;
    CHECK(case_alloc(&probs[i], (unsigned long long)i + 1, &c) == 0, "out of memory");
    float *o2 = malloc(c.no * sizeof *o2);
    CHECK(o2 != NULL, "out of memory");
    if (!o2) return 1;
    attn_poison(o2, c.no);
    rc = attn_execute(plan, c.q, c.k, c.v, c.o);
    CHECK(rc == ATTN_OK, "attn_execute: %s", attn_last_error(rt));
    int stream_object; /* any stream value: the CPU ignores it */
    rc = attn_execute_async(plan, &stream_object, c.q, c.k, c.v, o2);
    CHECK(rc == ATTN_OK, "attn_execute_async: %s", attn_last_error(rt));
    CHECK(memcmp(c.o, o2, c.no * sizeof *o2) == 0, "%s: attn_execute_async's output differs from attn_execute's",
          attn_plan_describe(plan));
    const double err = attn_rel_error(c.ref, o2, c.no);
    CHECK(err <= TOL, "%s: relative error %.3g", attn_plan_describe(plan), err);
    printf("cpu: %s: attn_execute_async = attn_execute bit for bit, relative error %.3g\n",
           attn_plan_describe(plan), err);
    /* NULL arguments: ATTN_EINVAL with the argument named, o untouched */
    const void *args[4] = {c.q, c.k, c.v, o2};
    for (int a = 0; a < 4; a++) {
      const void *x[4] = {args[0], args[1], args[2], args[3]};
      x[a] = NULL;
      rc = attn_execute_async(plan, NULL, x[0], x[1], x[2], (void *)x[3]);
      char want[48];
      snprintf(want, sizeof want, "attn_execute_async: %c is NULL", "qkvo"[a]);
      CHECK(rc == ATTN_EINVAL && strstr(attn_last_error(rt), want), "NULL %c: %s, \"%s\"", "qkvo"[a],
            attn_strerror(rc), attn_last_error(rt));
    }
    free(o2);
    case_free(&c);
    attn_plan_destroy(plan);
  }
  float x[4] = {0};
  rc = attn_execute_async(NULL, NULL, x, x, x, x);
  CHECK(rc == ATTN_EINVAL && strstr(attn_last_error(NULL), "attn_execute_async: plan is NULL"), "NULL plan: %s, \"%s\"",
        attn_strerror(rc), attn_last_error(NULL));
  attn_close(rt);
  printf("execute_async cpu: %d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}

static fake_cuda_record_fn record;

static fake_cuda_calls take(void) {
  fake_cuda_calls r;
  record(&r, 1);
  return r;
}

/* One plan on the fake device: async on a stream, then synchronous. 77 when NVRTC cannot make its cubin. */
static int cuda_plan(attn_runtime *rt, attn_algo algo, int pools, int *skipped) {
  const attn_problem p = {.batch = 1, .heads = 2, .n = 40, .d = 16, .dtype = ATTN_F16, .algo = algo};
  attn_plan *plan = NULL;
  int rc = attn_plan_create(rt, &p, &plan);
  if (rc == ATTN_ECOMPILE && strstr(attn_last_error(rt), "NVRTC is not available")) {
    printf("SKIP: %s\n", attn_last_error(rt));
    *skipped = 1;
    return 0;
  }
  CHECK(rc == ATTN_OK, "attn_plan_create: %s: %s", attn_strerror(rc), attn_last_error(rt));
  if (rc != ATTN_OK) return -1;
  const char *desc = attn_plan_describe(plan);
  /* device memory is host memory on the fake; 16-byte aligned like cuMemAlloc's */
  void *buf = aligned_alloc(256, 4 * 4096);
  CHECK(buf != NULL, "out of memory");
  if (!buf) return -1;
  char *q = buf, *k = q + 4096, *v = k + 4096, *o = v + 4096;
  void *stream = (void *)(uintptr_t)0x5150; /* a CUstream handle the fake takes as it comes */
  take();
  rc = attn_execute_async(plan, stream, q, k, v, o);
  fake_cuda_calls r = take();
  CHECK(rc == ATTN_OK, "%s: attn_execute_async: %s: %s", desc, attn_strerror(rc), attn_last_error(rt));
  printf("cuda (pools=%d): %s: async: %d launch on stream %p, %d stream and %d context synchronizations, %d "
         "stream-ordered allocations, %d frees (on %p), %d launches pending\n", pools, desc, r.launches,
         r.last_stream, r.stream_syncs, r.ctx_syncs, r.async_allocs, r.async_frees, r.async_stream, r.pending);
  CHECK(r.launches == 1 && r.last_stream == stream, "%s: %d launches, the last on stream %p, want 1 on %p", desc,
        r.launches, r.last_stream, stream);
  CHECK(r.freed_in_use == 0, "%s: memory freed while its launch was queued", desc);
  if (pools || algo != ATTN_ALGO_SMALLCACHE) {
    CHECK(r.stream_syncs == 0 && r.ctx_syncs == 0 && r.pending == 1,
          "%s: attn_execute_async waited (%d stream, %d context synchronizations; %d pending)", desc, r.stream_syncs,
          r.ctx_syncs, r.pending);
    if (algo == ATTN_ALGO_SMALLCACHE)
      CHECK(r.async_allocs == 1 && r.async_frees == 1 && r.async_stream == stream,
            "%s: scratch not in the stream's order: %d cuMemAllocAsync, %d cuMemFreeAsync on %p", desc,
            r.async_allocs, r.async_frees, r.async_stream);
    else
      CHECK(r.async_allocs == 0, "%s: scratch allocated for a kernel that needs none", desc);
  } else {
    /* no memory pools: the scratch must outlive the launch, so the launch is waited for on the caller's stream */
    CHECK(r.async_allocs == 0 && r.stream_syncs == 1 && r.last_synced == stream && r.pending == 0,
          "%s without memory pools: %d cuMemAllocAsync, %d synchronizations (the last of %p), %d pending", desc,
          r.async_allocs, r.stream_syncs, r.last_synced, r.pending);
  }
  /* attn_execute: waits for its launch, on the default stream */
  rc = attn_execute(plan, q, k, v, o);
  r = take();
  CHECK(rc == ATTN_OK && r.launches == 1 && r.last_stream == NULL && r.stream_syncs == 1 && r.last_synced == NULL,
        "%s: attn_execute: %s, %d launches (stream %p), %d synchronizations (of %p)", desc, attn_strerror(rc),
        r.launches, r.last_stream, r.stream_syncs, r.last_synced);
  CHECK(r.freed_in_use == 0, "%s: attn_execute freed memory its launch used before waiting", desc);
  /* NULL and misaligned pointers: refused before any launch */
  rc = attn_execute_async(plan, stream, q, NULL, v, o);
  CHECK(rc == ATTN_EINVAL && strstr(attn_last_error(rt), "k is NULL"), "NULL k: %s", attn_strerror(rc));
  rc = attn_execute_async(plan, stream, q, k, v, o + 8);
  CHECK(rc == ATTN_EINVAL && strstr(attn_last_error(rt), "16-byte aligned"), "misaligned o: %s: %s",
        attn_strerror(rc), attn_last_error(rt));
  r = take();
  CHECK(r.launches == 0, "%d launches for refused arguments", r.launches);
  /* a plan destroyed with a launch queued: the device is waited for before its module goes */
  rc = attn_execute_async(plan, stream, q, k, v, o);
  CHECK(rc == ATTN_OK, "attn_execute_async again: %s", attn_last_error(rt));
  attn_plan_destroy(plan);
  r = take();
  CHECK(r.unloaded_in_use == 0 && r.freed_in_use == 0, "%s destroyed under its queued launch", desc);
  free(buf);
  return 0;
}

/* The cubins in dir, replaced by FIFOs (at most max; their paths in paths); the count. */
static int plant_fifos(const char *dir, char paths[][4400], int max) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d)) != NULL && n < max;) {
    if (!strstr(e->d_name, ".cubin")) continue;
    snprintf(paths[n], sizeof paths[0], "%s/%s", dir, e->d_name);
    CHECK(unlink(paths[n]) == 0 && mkfifo(paths[n], 0600) == 0, "cannot plant a FIFO at %s", paths[n]);
    n++;
  }
  if (d) closedir(d);
  return n;
}

/* A FIFO under a cached cubin's name: the plan is made all the same, and the FIFO replaced by the cubin. */
static void cubin_fifo(void) {
  const char *parent = getenv("ATTN_CACHE_DIR");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/fifo-XXXXXX", parent && *parent ? parent : "/tmp");
  CHECK(mkdtemp(dir) != NULL, "mkdtemp %s", dir);
  setenv("ATTN_CACHE_DIR", dir, 1);
  setenv("FAKE_LIBCUDA", "cc=80", 1);
  const attn_problem p = {.batch = 1, .heads = 1, .n = 8, .d = 8, .algo = ATTN_ALGO_SMALLCACHE};
  char paths[4][4400];
  int planted = 0;
  for (int round = 0; round < 2; round++) {
    attn_runtime *rt = NULL;
    attn_plan *plan = NULL;
    int rc = attn_open(NULL, ATTN_TARGET_CUDA, &rt);
    if (rc == ATTN_OK) rc = attn_plan_create(rt, &p, &plan);
    CHECK(rc == ATTN_OK, "%s: %s: %s", round ? "with a FIFO in the cache" : "first plan", attn_strerror(rc),
          rc == ATTN_OK || !rt ? attn_last_error(NULL) : attn_last_error(rt));
    attn_plan_destroy(plan);
    attn_close(rt);
    if (round == 0) {
      planted = plant_fifos(dir, paths, 4);
      CHECK(planted == 1, "%d cubins in %s, want the plan's one", planted, dir);
      printf("cuda: planted a FIFO under the cached cubin's name; the next plan must compile again\n");
    }
  }
  struct stat st;
  for (int i = 0; i < planted; i++) {
    CHECK(lstat(paths[i], &st) == 0 && S_ISREG(st.st_mode), "%s was not replaced by the cubin", paths[i]);
    unlink(paths[i]);
  }
  rmdir(dir);
  if (parent) setenv("ATTN_CACHE_DIR", parent, 1);
}

static int cuda(const char *fake) {
  void *h = dlopen(fake, RTLD_NOW | RTLD_LOCAL);
  record = h ? (fake_cuda_record_fn)dlsym(h, "fake_cuda_record") : NULL;
  if (!record) {
    fprintf(stderr, "%s: no fake_cuda_record: %s\n", fake, dlerror());
    return 1;
  }
  setenv("ATTN_LIBCUDA", fake, 1);
  int skipped = 0;
  for (int pools = 1; pools >= 0 && !skipped; pools--) {
    setenv("FAKE_LIBCUDA", pools ? "cc=80,pools=1" : "cc=80,pools=0", 1);
    attn_runtime *rt = NULL;
    int rc = attn_open(NULL, ATTN_TARGET_CUDA, &rt);
    CHECK(rc == ATTN_OK, "attn_open on the fake driver: %s: %s", attn_strerror(rc), attn_last_error(NULL));
    if (rc != ATTN_OK) break;
    const attn_algo algos[] = {ATTN_ALGO_FLASH, ATTN_ALGO_SMALLCACHE};
    for (int a = 0; a < 2 && !skipped; a++)
      if (pools || algos[a] == ATTN_ALGO_SMALLCACHE) cuda_plan(rt, algos[a], pools, &skipped);
    attn_close(rt);
  }
  if (skipped) return 77;
  cubin_fifo();
  printf("execute_async cuda: %d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "cpu")) return cpu();
  if (argc == 3 && !strcmp(argv[1], "cuda")) return cuda(argv[2]);
  fprintf(stderr, "usage: execute_async cpu | execute_async cuda FAKE_LIBCUDA\n");
  return 2;
}
