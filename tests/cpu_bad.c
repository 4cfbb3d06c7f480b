/* cpu_bad: bad input gets its error code and a message, never a crash, and *out stays NULL. */
#include <string.h>
#include <unistd.h>
#include "cpu_util.h"

#define SENTINEL ((attn_plan *)(void *)&failures)

/* attn_plan_create on p must return want, leave *out NULL and say something that contains needle. */
static void expect_plan(attn_runtime *rt, const attn_problem *p, int want, const char *needle, const char *what) {
  attn_plan *plan = SENTINEL;
  int rc = attn_plan_create(rt, p, &plan);
  CHECK(rc == want, "%s: got %s, want %s", what, attn_strerror(rc), attn_strerror(want));
  CHECK(plan == NULL, "%s: *out not NULL", what);
  const char *msg = attn_last_error(rt);
  CHECK(msg && *msg, "%s: empty message", what);
  CHECK(!needle || (msg && strstr(msg, needle)), "%s: message '%s' lacks '%s'", what, msg ? msg : "", needle);
  CHECK(msg && !strchr(msg, '\n'), "%s: message is not one line: '%s'", what, msg ? msg : "");
  printf("%-40s -> %s: %s\n", what, attn_strerror(rc), msg ? msg : "");
  if (plan != SENTINEL) attn_plan_destroy(plan);
}

int main(int argc, char **argv) {
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CPU, &rt);
  if (rc != ATTN_OK) {
    fprintf(stderr, "attn_open: %s: %s\n", attn_strerror(rc), attn_last_error(NULL));
    return 1;
  }
  const attn_problem good = {.batch = 1, .heads = 2, .n = 33, .d = 32};
  attn_problem p;

  expect_plan(rt, NULL, ATTN_EINVAL, "NULL", "NULL problem");
  p = good, p.d = 0;
  expect_plan(rt, &p, ATTN_EINVAL, "d=0", "d=0");
  p = good, p.d = -64;
  expect_plan(rt, &p, ATTN_EINVAL, "d=-64", "d<0");
  p = good, p.d = 577;
  expect_plan(rt, &p, ATTN_EUNSUPPORTED, "d=577 is not supported on cpu: head dimensions must be in 1..576", "d=577");
  p = good, p.d_v = 1000;
  expect_plan(rt, &p, ATTN_EUNSUPPORTED, "d_v=1000 is not supported on cpu", "d_v=1000");
  p = good, p.d_v = -2;
  expect_plan(rt, &p, ATTN_EINVAL, "d_v=-2 must be >= 0", "d_v<0");
  p = good, p.n = -5;
  expect_plan(rt, &p, ATTN_EINVAL, "n=-5", "n<0");
  p = good, p.n = 0;
  expect_plan(rt, &p, ATTN_EINVAL, "n=0", "n=0");
  p = good, p.batch = 0;
  expect_plan(rt, &p, ATTN_EINVAL, "batch=0", "batch=0");
  p = good, p.heads = -1;
  expect_plan(rt, &p, ATTN_EINVAL, "heads=-1", "heads<0");
  p = good, p.n_kv = -1;
  expect_plan(rt, &p, ATTN_EINVAL, "n_kv=-1", "n_kv<0");
  p = good, p.heads = 6, p.heads_kv = 4;
  expect_plan(rt, &p, ATTN_EINVAL, "heads_kv=4 must divide heads=6", "heads_kv not dividing heads");
  p = good, p.heads_kv = 3;
  expect_plan(rt, &p, ATTN_EINVAL, "heads_kv=3", "heads_kv > heads");
  p = good, p.dtype = (attn_dtype)7;
  expect_plan(rt, &p, ATTN_EINVAL, "dtype", "unknown dtype");
  p = good, p.algo = (attn_algo)9;
  expect_plan(rt, &p, ATTN_EINVAL, "algorithm", "unknown algorithm");
  p = good, p.tolerance = -1;
  expect_plan(rt, &p, ATTN_EINVAL, "tolerance", "negative tolerance");
  p = good, p.tolerance = NAN;
  expect_plan(rt, &p, ATTN_EINVAL, "tolerance", "NaN tolerance");
  p = good, p.scale = NAN;
  expect_plan(rt, &p, ATTN_EINVAL, "scale", "NaN scale");
  p = good, p.scale = INFINITY;
  expect_plan(rt, &p, ATTN_EINVAL, "scale", "infinite scale");
  p = good, p.algo = ATTN_ALGO_LOWRANK;
  expect_plan(rt, &p, ATTN_EUNSUPPORTED, "tolerance", "lowrank with tolerance 0");

  /* NULL runtime and NULL out. */
  attn_plan *plan = SENTINEL;
  rc = attn_plan_create(NULL, &good, &plan);
  CHECK(rc == ATTN_EINVAL && plan == NULL, "NULL runtime: %s", attn_strerror(rc));
  CHECK(*attn_last_error(NULL), "NULL runtime: no message");
  rc = attn_plan_create(rt, &good, NULL);
  CHECK(rc == ATTN_EINVAL, "NULL out: %s", attn_strerror(rc));
  CHECK(strstr(attn_last_error(rt), "out"), "NULL out: message '%s'", attn_last_error(rt));

  /* Execute with NULL pointers, and with a NULL plan. */
  plan = NULL;
  rc = attn_plan_create(rt, &good, &plan);
  CHECK(rc == ATTN_OK && plan, "good problem: %s: %s", attn_strerror(rc), attn_last_error(rt));
  if (plan) {
    CHECK(strstr(attn_plan_describe(plan), "(default)") != NULL, "describe '%s' does not say default",
          attn_plan_describe(plan));
    float *buf = calloc(2 * 33 * 32, sizeof(float));
    const char *names[] = {"q", "k", "v", "o"};
    for (int i = 0; i < 4; i++) {
      const float *a[4] = {buf, buf, buf, buf};
      a[i] = NULL;
      rc = attn_execute(plan, a[0], a[1], a[2], (float *)a[3]);
      CHECK(rc == ATTN_EINVAL, "execute with NULL %s: %s", names[i], attn_strerror(rc));
      CHECK(strstr(attn_last_error(rt), names[i]), "execute with NULL %s: message '%s'", names[i],
            attn_last_error(rt));
    }
    rc = attn_execute(plan, buf, buf, buf, buf + 0);
    CHECK(rc == ATTN_OK, "execute on zeros: %s", attn_strerror(rc));
    free(buf);
  }
  attn_plan_destroy(plan);
  rc = attn_execute(NULL, &p, &p, &p, &p);
  CHECK(rc == ATTN_EINVAL && *attn_last_error(NULL), "execute NULL plan: %s", attn_strerror(rc));
  attn_plan_destroy(NULL);
  attn_close(NULL);

  /* attn_open: NULL out, bad target; CUDA where there is none. */
  CHECK(attn_open(NULL, ATTN_TARGET_CPU, NULL) == ATTN_EINVAL, "attn_open NULL out");
  attn_runtime *r2 = (attn_runtime *)SENTINEL;
  CHECK(attn_open(NULL, (attn_target)5, &r2) == ATTN_EINVAL && r2 == NULL, "attn_open bad target");
  r2 = (attn_runtime *)SENTINEL;
  rc = attn_open(NULL, ATTN_TARGET_CUDA, &r2);
  if (rc == ATTN_OK) {
    printf("a CUDA device is present: ENODEV case not checked\n");
    attn_close(r2);
  } else {
    CHECK(rc == ATTN_ENODEV && r2 == NULL, "attn_open CUDA without a device: %s", attn_strerror(rc));
    CHECK(*attn_last_error(NULL), "attn_open CUDA: empty message");
    printf("%-40s -> %s: %s\n", "CUDA without a device", attn_strerror(rc), attn_last_error(NULL));
  }

  /* A database file that is not SQLite: ATTN_EDB, naming the file. */
  if (argc > 1) {
    char path[4096];
    snprintf(path, sizeof path, "%s/not-a-database.db", argv[1]);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "cannot create %s", path);
    if (f) {
      for (int i = 0; i < 512; i++) fputs("this is not an SQLite database\n", f);
      fclose(f);
      r2 = (attn_runtime *)SENTINEL;
      rc = attn_open(path, ATTN_TARGET_CPU, &r2);
      CHECK(rc == ATTN_EDB && r2 == NULL, "corrupt database: %s", attn_strerror(rc));
      CHECK(strstr(attn_last_error(NULL), path) != NULL, "corrupt database: message '%s'", attn_last_error(NULL));
      printf("%-40s -> %s: %s\n", "not a database", attn_strerror(rc), attn_last_error(NULL));
      if (rc == ATTN_OK) attn_close(r2);
      unlink(path);
    }
  }
  /* Every code has a name. */
  for (int c = ATTN_OK; c <= ATTN_EUNSUPPORTED; c++) CHECK(*attn_strerror(c), "attn_strerror(%d) empty", c);

  attn_close(rt);
  printf("cpu_bad: %d failures\n", failures);
  return failures ? 1 : 0;
}
