/* db_skip.c: attn_db_lookup's unmeasured_skip ("impl=wgmma": the Hopper template's rows serve only once measured)
 * and exclude. The model's wgmma row ranks first; with the option the best other row is found (at a farther shape;
 * the tie rule judged among the rows left, not against the skipped row's time), skipped says so; a measured wgmma
 * row is still served first; only skipped rows stored: a miss with skipped set; a word is matched whole ("impl=wgmm"
 * skips nothing). exclude ("dq=atomic", the runtime's backward): such rows are never returned, measured or not.
 * Usage: db_skip WORKDIR */
#include "check.h"
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "attn.h"
#include "db.h"
#include "spec.h"
#include "spec_bwd_cuda.h"
#include "spec_sm90.h"

static const char *dev = "H100";

static const char *pass = "fwd";

static int put(attn_db *db, const attn_spec *s, int n, const char *prov, double ms, long long io) {
  char text[512];
  if (attn_spec_format(s, text, sizeof text) < 0) return ATTN_EINVAL;
  attn_db_meas m;
  memset(&m, 0, sizeof m);
  m.device = dev;
  m.spec = text;
  m.n = m.n_kv = n;
  m.d = s->d;
  m.causal = s->causal;
  m.batch = 1;
  m.heads = m.heads_kv = 16;
  m.dtype = s->dtype;
  m.time_ms = ms;
  m.has_error = strcmp(prov, "measured") == 0;
  m.error = 1e-3;
  m.reads = io, m.writes = io < 0 ? -1 : 0;
  m.status = "ok";
  m.provenance = prov;
  m.pass = pass;
  int rc = attn_db_meas_put(db, &m);
  if (rc != ATTN_OK) fprintf(stderr, "put: %s\n", attn_db_errmsg(db));
  return rc;
}

static int look_ex(attn_db *db, const char *skip, const char *exclude, attn_db_best *b) {
  attn_db_query q = {.device = dev, .d = 128, .n = 4096, .dtype = ATTN_BF16, .batch = 1, .heads = 16,
                     .unmeasured_skip = skip, .exclude = exclude, .pass = pass};
  return attn_db_lookup(db, &q, b);
}

static int look(attn_db *db, const char *skip, attn_db_best *b) { return look_ex(db, skip, NULL, b); }

/* exclude: the backward's rows of dQ by atomics are never returned to a caller that excludes them, measured or not */
static void backward(attn_db *db) {
  char err[256] = "", at[512], dt[512];
  attn_spec det;
  CHECK(attn_spec_backward_cuda(ATTN_BF16, 128, 128, 0, "sm_90", &det, err, sizeof err) == ATTN_OK, "%s", err);
  attn_spec atomic = det;
  atomic.dq = 1;
  attn_spec_format(&atomic, at, sizeof at);
  attn_spec_format(&det, dt, sizeof dt);
  CHECK(strstr(at, " dq=atomic") != NULL, "atomic text: %s", at);
  pass = "bwd";
  attn_db_best b;
  CHECK(put(db, &atomic, 4096, "measured", 1.0, 100) == ATTN_OK, "put atomic");
  CHECK(look_ex(db, NULL, "dq=atomic", &b) == ATTN_EUNSUPPORTED, "only an atomic row: %s", b.spec);
  CHECK(put(db, &det, 4096, "model", 2.0, 100) == ATTN_OK, "put deterministic");
  CHECK(look_ex(db, "impl=wgmma", "dq=atomic", &b) == ATTN_OK && strcmp(b.spec, dt) == 0 && !b.skipped,
        "excluded: %s", b.spec);
  CHECK(look_ex(db, NULL, NULL, &b) == ATTN_OK && strcmp(b.spec, at) == 0, "not excluded: %s", b.spec);
  CHECK(look_ex(db, NULL, "dq=atom", &b) == ATTN_OK && strcmp(b.spec, at) == 0, "part word: %s", b.spec);
  pass = "fwd";
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: db_skip WORKDIR\n");
    return 2;
  }
  mkdir(argv[1], 0755);
  char path[4200];
  snprintf(path, sizeof path, "%s/skip.db", argv[1]);
  unlink(path);
  attn_db *db = NULL;
  char err[512];
  CHECK(attn_db_open(path, 1, &db, err, sizeof err) == ATTN_OK, "open: %s", err);
  if (!db) return 1;
  attn_spec w = attn_spec_default_sm90(ATTN_BF16, 128, 0);
  attn_spec a = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, ATTN_BF16, 128, 0), b2 = a;
  b2.bc = a.bc == 32 ? 64 : 32;
  char wt[512], at[512], bt[512];
  CHECK(attn_spec_format(&w, wt, sizeof wt) > 0 && strstr(wt, " impl=wgmma"), "wgmma text: %s", wt);
  attn_spec_format(&a, at, sizeof at);
  attn_spec_format(&b2, bt, sizeof bt);
  attn_db_best b;
  /* only the model's wgmma row: a miss that says a row was skipped; without the option it is the best */
  CHECK(put(db, &w, 4096, "model", 0.5, 100) == ATTN_OK, "put wgmma");
  CHECK(look(db, "impl=wgmma", &b) == ATTN_EUNSUPPORTED && b.skipped == 1 && !b.spec[0], "wgmma only: skipped %d",
        b.skipped);
  CHECK(look(db, NULL, &b) == ATTN_OK && strcmp(b.spec, wt) == 0 && b.skipped == 0, "no option: %s", b.spec);
  /* two mma.sync model rows at a farther shape, n = 2048: a (0.5 ms, 500 entries) and b2 (0.75 ms, 100). Had the
   * skipped row's 0.25 ms at 2048 set the fastest time, neither would be within the tie factor and b2 would win by its
   * entries; among the rows left, a is the fastest */
  CHECK(put(db, &w, 2048, "model", 0.25, 100) == ATTN_OK, "put wgmma 2048");
  CHECK(put(db, &a, 2048, "model", 0.5, 500) == ATTN_OK && put(db, &b2, 2048, "model", 0.75, 100) == ATTN_OK,
        "put mma");
  CHECK(look(db, "impl=wgmma", &b) == ATTN_OK && strcmp(b.spec, at) == 0 && b.n == 2048 && b.skipped == 1 &&
            strcmp(b.provenance, "model") == 0,
        "model rows: %s n=%d skipped %d", b.spec, b.n, b.skipped);
  CHECK(look(db, "", &b) == ATTN_OK && strcmp(b.spec, wt) == 0 && b.skipped == 0, "empty word: %s", b.spec);
  /* a word is matched whole */
  CHECK(look(db, "impl=wgmm", &b) == ATTN_OK && strcmp(b.spec, wt) == 0 && b.skipped == 0, "part word: %s", b.spec);
  /* measured on the device: a measured wgmma row is served first (measured before model), nothing skipped */
  CHECK(put(db, &b2, 4096, "measured", 2.0, 100) == ATTN_OK && put(db, &w, 4096, "measured", 1.2, 100) == ATTN_OK,
        "put measured");
  CHECK(look(db, "impl=wgmma", &b) == ATTN_OK && strcmp(b.spec, wt) == 0 && b.skipped == 0 &&
            strcmp(b.provenance, "measured") == 0,
        "measured wgmma: %s %s skipped %d", b.spec, b.provenance, b.skipped);
  backward(db);
  attn_db_close(db);
  unlink(path);
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
