/* plan_describe.c: which stored row the runtime's plan uses, and what attn_plan_describe says about it: the exact
 * problem ("tuned", "model"), the nearest stored shape (only the fields that differ), and the default where only
 * rows of the other regime (decode n < ATTN_DB_DECODE_BELOW, or prefill) are stored.
 * Usage: plan_describe WORKDIR (kernels compile into $ATTN_CACHE_DIR). */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "internal.h"

static char device[256];

static void put(attn_db *db, const attn_spec *s, int n, int n_kv, int d, int heads, int heads_kv, int threads,
                const char *prov) {
  char text[512];
  attn_spec_format(s, text, sizeof text);
  attn_db_meas m;
  memset(&m, 0, sizeof m);
  m.device = device;
  m.spec = text;
  m.n = n, m.n_kv = n_kv, m.d = d, m.batch = 1, m.heads = heads, m.heads_kv = heads_kv, m.threads = threads;
  m.dtype = ATTN_F32;
  m.time_ms = 1.0;
  m.reads = m.writes = -1;
  m.status = "ok";
  m.provenance = prov;
  CHECK(attn_db_meas_put(db, &m) == ATTN_OK, "put n=%d d=%d: %s", n, d, attn_db_errmsg(db));
}

static attn_spec tiles(int d, int br, int bc) {
  attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, ATTN_F32, d, 0);
  s.br = br, s.bc = bc;
  return s;
}

/* attn_plan_choose's origin (and tile sizes) for a problem, without compiling. */
static void expect(attn_runtime *rt, int d, int n, int n_kv, int heads, int heads_kv, const char *want_origin,
                   int want_br) {
  attn_problem in = {.batch = 1, .heads = heads, .heads_kv = heads_kv, .n = n, .n_kv = n_kv, .d = d,
                     .dtype = ATTN_F32},
               p;
  CHECK(attn_problem_normalize(rt, &in, &p) == ATTN_OK, "normalize: %s", attn_last_error(rt));
  attn_spec s;
  char origin[128];
  CHECK(attn_plan_choose(rt, &p, &s, origin, sizeof origin) == ATTN_OK, "choose: %s", attn_last_error(rt));
  CHECK(strcmp(origin, want_origin) == 0, "d=%d n=%d n_kv=%d heads=%d/%d: origin '%s', want '%s'", d, n, n_kv, heads,
        heads_kv, origin, want_origin);
  CHECK(s.br == want_br, "d=%d n=%d n_kv=%d heads=%d/%d: Br=%d, want %d", d, n, n_kv, heads, heads_kv, s.br, want_br);
}

/* The whole describe text of a compiled plan. */
static void expect_describe(attn_runtime *rt, int n, const attn_spec *s, const char *origin) {
  attn_problem p = {.batch = 1, .heads = 2, .n = n, .d = s->d, .dtype = ATTN_F32};
  attn_plan *plan = NULL;
  CHECK(attn_plan_create(rt, &p, &plan) == ATTN_OK, "plan n=%d: %s", n, attn_last_error(rt));
  char sum[384], want[600];
  attn_spec_summary(s, sum, sizeof sum);
  snprintf(want, sizeof want, "%s (%s)", sum, origin);
  const char *got = attn_plan_describe(plan);
  CHECK(strcmp(got, want) == 0, "describe '%s', want '%s'", got, want);
  printf("n=%d: %s\n", n, got);
  attn_plan_destroy(plan);
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "plan-describe-work";
  mkdir(dir, 0755);
  char path[4096], b[4200];
  snprintf(path, sizeof path, "%s/describe.db", dir);
  unlink(path);
  snprintf(b, sizeof b, "%s-wal", path);
  unlink(b);
  snprintf(b, sizeof b, "%s-shm", path);
  unlink(b);
  attn_device_name(ATTN_TARGET_CPU, device, sizeof device);

  char err[1024];
  attn_db *db = NULL;
  if (attn_db_open(path, 1, &db, err, sizeof err) != ATTN_OK) {
    fprintf(stderr, "open: %s\n", err);
    return 1;
  }
  /* d=64: one prefill row on 2 threads; d=32: one decode row; d=128: a model row; d=16: nothing */
  const attn_spec t64 = tiles(64, 32, 64), t32 = tiles(32, 16, 64), t128 = tiles(128, 16, 32);
  put(db, &t64, 512, 512, 64, 2, 2, 2, "measured");
  put(db, &t32, 1, 4096, 32, 2, 2, 2, "measured");
  put(db, &t128, 1024, 1024, 128, 2, 2, 0, "model");
  attn_db_close(db);
  const int br64 = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, ATTN_F32, 64, 0).br;
  const int br32 = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, ATTN_F32, 32, 0).br;
  const int br16 = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, ATTN_F32, 16, 0).br;
  CHECK(br64 != 32 && br32 != 16, "the stored tiles must differ from the defaults (%d %d)", br64, br32);

  setenv("ATTN_THREADS", "2", 1);
  attn_runtime *rt = NULL;
  if (attn_open(path, ATTN_TARGET_CPU, &rt) != ATTN_OK) {
    fprintf(stderr, "attn_open: %s\n", attn_last_error(NULL));
    return 1;
  }
  /* the exact problem, and each field that can differ */
  expect(rt, 64, 512, 0, 2, 0, "tuned", 32);
  expect(rt, 64, 1024, 0, 2, 0, "tuned at n=512 n_kv=512: nearest stored shape", 32);
  expect(rt, 64, 512, 2048, 2, 0, "tuned at n_kv=512: nearest stored shape", 32);
  expect(rt, 64, 512, 0, 8, 0, "tuned at batch*heads=2: nearest stored shape", 32);
  expect(rt, 64, 512, 0, 4, 1, "tuned at batch*heads=2 heads_kv=2: nearest stored shape", 32);
  expect(rt, 64, 4096, 1024, 16, 0, "tuned at n=512 n_kv=512 batch*heads=2: nearest stored shape", 32);
  /* regimes: decode never takes the prefill row, nor the reverse; the default serves and says why */
  expect(rt, 64, 1, 512, 2, 0, "default: no decode row (n < 64) stored; prefill rows do not apply", br64);
  expect(rt, 32, 1, 4096, 2, 0, "tuned", 16);
  expect(rt, 32, 8, 1024, 2, 0, "tuned at n=1 n_kv=4096: nearest stored shape", 16);
  expect(rt, 32, 512, 0, 2, 0, "default: no prefill row (n >= 64) stored; decode rows do not apply", br32);
  /* model rows say so; nothing stored: plain default */
  expect(rt, 128, 1024, 0, 2, 0, "model", 16);
  expect(rt, 128, 2048, 0, 2, 0, "model at n=1024 n_kv=1024: nearest stored shape", 16);
  expect(rt, 16, 512, 0, 2, 0, "default", br16);
  /* the whole describe line of compiled plans */
  expect_describe(rt, 512, &t64, "tuned");
  expect_describe(rt, 256, &t64, "tuned at n=512 n_kv=512: nearest stored shape");
  attn_close(rt);

  /* another thread count than the row's: the same problem otherwise, so only threads differ */
  setenv("ATTN_THREADS", "4", 1);
  if (attn_open(path, ATTN_TARGET_CPU, &rt) != ATTN_OK) {
    fprintf(stderr, "attn_open: %s\n", attn_last_error(NULL));
    return 1;
  }
  expect(rt, 64, 512, 0, 2, 0, "tuned at threads=2: nearest stored shape", 32);
  expect(rt, 128, 1024, 0, 2, 0, "model", 16); /* a row without threads is taken as run on ours */
  attn_close(rt);
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
