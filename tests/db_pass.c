/* db_pass.c: schema 8's pass ('fwd' | 'bwd') and variant ('' for dense attention) in the problem key: a version-7
 * database migrates with its rows as fwd and ''; the lookup, the best view, the finalist marks and the key of a row
 * never cross a pass or a variant; a backward row's gflops count 2.5 times the forward's flops; export and import
 * carry both, and an export written before schema 8 imports as forward, dense rows.
 * Usage: db_pass WORKDIR */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "db.h"
#include "json_io.h"

static char dir[2048];

static const char *path_of(const char *name) {
  static char buf[4][4096];
  static int k;
  char *p = buf[k++ % 4];
  snprintf(p, 4096, "%s/%s", dir, name);
  unlink(p);
  return p;
}

static int raw_int(const char *path, const char *sql) {
  sqlite3 *h;
  int v = -12345;
  if (sqlite3_open(path, &h) == SQLITE_OK) {
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(h, sql, -1, &s, NULL) == SQLITE_OK) {
      if (sqlite3_step(s) == SQLITE_ROW) v = sqlite3_column_int(s, 0);
      sqlite3_finalize(s);
    }
  }
  sqlite3_close(h);
  return v;
}

static const char *spec(int br) {
  static char buf[4][256];
  static int k;
  char *p = buf[k++ % 4];
  snprintf(p, 256, "flash cpu f32 d=64 br=%d bc=64 causal=0 unroll=0 warps=0 stages=0 arch=- tile=0 feature=taylor "
           "degree=0 rank=0 seed=0", br);
  return p;
}

static attn_db_meas row(const char *sp, double t, const char *pass, const char *variant) {
  attn_db_meas m;
  memset(&m, 0, sizeof m);
  m.device = "cpu:pass";
  m.spec = sp;
  m.n = m.n_kv = 256;
  m.d = 64;
  m.batch = 1;
  m.heads = m.heads_kv = 2;
  m.dtype = ATTN_F32;
  m.time_ms = t;
  m.reads = m.writes = -1;
  m.status = "ok";
  m.provenance = "measured";
  m.threads = 2;
  m.pass = pass;
  m.variant = variant;
  return m;
}

static int put(attn_db *db, attn_db_meas m) {
  int rc = attn_db_meas_put(db, &m);
  if (rc != ATTN_OK) fprintf(stderr, "put: %s\n", attn_db_errmsg(db));
  return rc;
}

/* The time the lookup serves for (pass, variant), -1 when none. */
static double served(attn_db *db, const char *pass, const char *variant) {
  attn_db_query q = {.device = "cpu:pass", .d = 64, .n = 256, .dtype = ATTN_F32, .heads = 2, .threads = 2,
                     .pass = pass, .variant = variant};
  attn_db_best b;
  return attn_db_lookup(db, &q, &b) == ATTN_OK ? b.time_ms : -1;
}

typedef struct {
  int rows, fwd, bwd, variant;
  double gflops_fwd, gflops_bwd;
} count_ctx;

static int count_cb(void *ctx, const attn_db_meas *m) {
  count_ctx *c = ctx;
  c->rows++;
  c->fwd += strcmp(m->pass, "fwd") == 0 && !m->variant[0];
  c->bwd += strcmp(m->pass, "bwd") == 0;
  c->variant += m->variant[0] != '\0';
  if (strcmp(m->pass, "fwd") == 0 && !m->variant[0] && m->time_ms == 1.0) c->gflops_fwd = m->gflops;
  if (strcmp(m->pass, "bwd") == 0 && m->time_ms == 1.0) c->gflops_bwd = m->gflops;
  return 0;
}

/* A database of schema 7 (the table as it was: no pass, no variant, their UNIQUE key) with one row opens as fwd, ''. */
static void test_migrate(void) {
  char err[1024];
  const char *p = path_of("v7.db");
  attn_db *db = NULL;
  CHECK(attn_db_open(p, 1, &db, err, sizeof err) == ATTN_OK, "%s", err);
  if (!db) return;
  CHECK(put(db, row(spec(32), 0.75, NULL, NULL)) == ATTN_OK, "put");
  attn_db_close(db);
  db = NULL;
  static const char back_to_7[] =
      "DROP VIEW best; DROP INDEX measurements_lookup;"
      "CREATE TABLE m7 (id INTEGER PRIMARY KEY, run_id INTEGER, device_id INTEGER NOT NULL, kernel_id INTEGER NOT "
      "NULL, n INTEGER NOT NULL, n_kv INTEGER NOT NULL, d INTEGER NOT NULL, dtype TEXT NOT NULL, causal INTEGER NOT "
      "NULL, batch INTEGER NOT NULL, heads INTEGER NOT NULL, heads_kv INTEGER NOT NULL, time_ms REAL NOT NULL, gflops "
      "REAL, reads INTEGER, writes INTEGER, error REAL, status TEXT NOT NULL, log TEXT NOT NULL DEFAULT '', "
      "provenance TEXT NOT NULL, created TEXT NOT NULL DEFAULT '', threads INTEGER NOT NULL DEFAULT 0, reps INTEGER, "
      "iqr_ms REAL, load REAL, final INTEGER NOT NULL DEFAULT 0, chosen INTEGER NOT NULL DEFAULT 0, is_default "
      "INTEGER NOT NULL DEFAULT 0, bound TEXT, d_v INTEGER NOT NULL DEFAULT 0, UNIQUE (device_id, kernel_id, n, n_kv, "
      "dtype, causal, batch, heads, heads_kv, threads, provenance));"
      "INSERT INTO m7 SELECT id, run_id, device_id, kernel_id, n, n_kv, d, dtype, causal, batch, heads, heads_kv, "
      "time_ms, gflops, reads, writes, error, status, log, provenance, created, threads, reps, iqr_ms, load, final, "
      "chosen, is_default, bound, d_v FROM measurements;"
      "DROP TABLE measurements; ALTER TABLE m7 RENAME TO measurements;"
      "CREATE INDEX measurements_lookup ON measurements(device_id, d, d_v, dtype, causal, status);"
      "CREATE VIEW best AS SELECT * FROM measurements; PRAGMA user_version = 7;";
  sqlite3 *h = NULL;
  CHECK(sqlite3_open(p, &h) == SQLITE_OK && sqlite3_exec(h, back_to_7, NULL, NULL, NULL) == SQLITE_OK,
        "back to version 7: %s", sqlite3_errmsg(h));
  sqlite3_close(h);
  CHECK(raw_int(p, "SELECT count(*) FROM pragma_table_info('measurements') WHERE name IN ('pass', 'variant')") == 0,
        "the version-7 table has no pass");
  CHECK(attn_db_schema_version() == 8, "schema %d", attn_db_schema_version());
  CHECK(attn_db_open(p, 0, &db, err, sizeof err) == ATTN_OK, "open v7: %s", err);
  CHECK(raw_int(p, "PRAGMA user_version") == attn_db_schema_version(), "v7 migrated to %d",
        raw_int(p, "PRAGMA user_version"));
  CHECK(raw_int(p, "SELECT count(*) FROM measurements WHERE pass = 'fwd' AND variant = '' AND time_ms = 0.75") == 1,
        "the old row is fwd, dense");
  CHECK(raw_int(p, "SELECT count(*) FROM best WHERE pass = 'fwd'") == 1, "best view carries pass");
  if (!db) return;
  CHECK(served(db, NULL, NULL) == 0.75, "a dense forward lookup finds the old row");
  CHECK(served(db, "bwd", NULL) == -1, "a backward lookup does not");
  count_ctx c = {0};
  CHECK(attn_db_meas_foreach(db, count_cb, &c) == 0 && c.rows == 1 && c.fwd == 1, "foreach: %d rows, %d fwd", c.rows,
        c.fwd);
  /* the rebuilt key takes a bwd row of the same kernel beside it */
  CHECK(put(db, row(spec(32), 2.0, "bwd", NULL)) == ATTN_OK, "bwd row beside the migrated one");
  CHECK(served(db, "bwd", "") == 2.0 && served(db, "fwd", "") == 0.75, "both served apart after the migration");
  attn_db_close(db);
}

static void test_key(void) {
  char err[1024];
  const char *p = path_of("key.db");
  attn_db *db = NULL;
  CHECK(attn_db_open(p, 1, &db, err, sizeof err) == ATTN_OK, "%s", err);
  if (!db) return;
  /* one kernel text, four problems: the forward, the backward, a variant's forward; the fastest is the variant's */
  CHECK(put(db, row(spec(64), 1.0, "fwd", "")) == ATTN_OK, "fwd");
  CHECK(put(db, row(spec(64), 1.0, "bwd", NULL)) == ATTN_OK, "bwd");
  CHECK(put(db, row(spec(32), 3.0, "bwd", NULL)) == ATTN_OK, "bwd, another kernel");
  CHECK(put(db, row(spec(64), 0.25, NULL, "window=128")) == ATTN_OK, "variant");
  CHECK(served(db, NULL, NULL) == 1.0, "dense fwd: %g", served(db, NULL, NULL));
  CHECK(served(db, "bwd", "") == 1.0, "bwd: %g", served(db, "bwd", ""));
  CHECK(served(db, "fwd", "window=128") == 0.25, "the variant's row");
  CHECK(served(db, "bwd", "window=128") == -1, "no bwd row of the variant");
  CHECK(served(db, "fwd", "softcap=30") == -1, "another variant");
  /* a slower fwd row of the same key replaces the fwd row only */
  CHECK(put(db, row(spec(64), 5.0, "fwd", "")) == ATTN_OK, "fwd replaced");
  CHECK(served(db, "fwd", "") == 5.0 && served(db, "bwd", "") == 1.0, "replacing fwd left bwd");
  CHECK(raw_int(p, "SELECT count(*) FROM measurements") == 4, "4 rows");
  /* exists finds by pass */
  attn_db_meas m = row(spec(32), 0, "fwd", NULL), got;
  CHECK(attn_db_meas_exists(db, &m, &got) == 0, "no fwd row of the second kernel");
  m.pass = "bwd";
  CHECK(attn_db_meas_exists(db, &m, &got) == 1 && got.time_ms == 3.0, "its bwd row");
  /* the finalist mark of a bwd row leaves the fwd problem's mark alone */
  attn_db_meas f = row(spec(64), 0, "fwd", NULL);
  CHECK(attn_db_meas_choose(db, &f) == ATTN_OK, "choose fwd: %s", attn_db_errmsg(db));
  CHECK(attn_db_meas_choose(db, &m) == ATTN_OK, "choose bwd: %s", attn_db_errmsg(db));
  CHECK(raw_int(p, "SELECT count(*) FROM measurements WHERE chosen = 1") == 2, "a mark per pass");
  CHECK(served(db, "bwd", "") == 3.0, "bwd: the chosen row (%g)", served(db, "bwd", ""));
  /* gflops: a backward counts 2.5 times the forward's flops */
  CHECK(put(db, row(spec(64), 1.0, "fwd", "")) == ATTN_OK, "fwd at 1 ms");
  count_ctx c = {0};
  CHECK(attn_db_meas_foreach(db, count_cb, &c) == 0 && c.rows == 4 && c.bwd == 2 && c.variant == 1,
        "foreach: %d rows, %d bwd, %d variant", c.rows, c.bwd, c.variant);
  CHECK(c.gflops_fwd > 0 && c.gflops_bwd > 2.49 * c.gflops_fwd && c.gflops_bwd < 2.51 * c.gflops_fwd,
        "gflops fwd %g bwd %g", c.gflops_fwd, c.gflops_bwd);
  count_ctx b = {0};
  CHECK(attn_db_best_foreach(db, count_cb, &b) == 0 && b.rows == 3 && b.fwd == 1 && b.bwd == 1 && b.variant == 1,
        "best: a row per pass and variant (%d rows)", b.rows);
  /* bad keys */
  CHECK(attn_db_meas_put(db, &(attn_db_meas){0}) != ATTN_OK, "an empty row");
  attn_db_meas bad = row(spec(64), 1.0, "sideways", NULL);
  CHECK(attn_db_meas_put(db, &bad) == ATTN_EINVAL && strstr(attn_db_errmsg(db), "pass 'sideways'"), "%s",
        attn_db_errmsg(db));
  bad = row(spec(64), 1.0, NULL, "tab\there");
  CHECK(attn_db_meas_put(db, &bad) == ATTN_EINVAL, "a variant with a control character");

  /* export -> import: both carried; an older file (no pass, no variant) imports as fwd, dense */
  json_t *doc = attn_export_doc(db, p, err, sizeof err);
  CHECK(doc != NULL, "export: %s", err);
  if (doc) {
    const char *q = path_of("imported.db");
    attn_db *db2 = NULL;
    attn_import_counts n;
    CHECK(attn_db_open(q, 1, &db2, err, sizeof err) == ATTN_OK, "%s", err);
    CHECK(db2 && attn_import_doc(db2, doc, "doc", q, &n, err, sizeof err) == 0 && n.added == 4, "import: %s", err);
    count_ctx c2 = {0};
    CHECK(db2 && attn_db_meas_foreach(db2, count_cb, &c2) == 0 && c2.rows == 4 && c2.bwd == 2 && c2.variant == 1,
          "imported: %d rows, %d bwd, %d variant", c2.rows, c2.bwd, c2.variant);
    CHECK(db2 && served(db2, "bwd", "") == 3.0, "the imported bwd row is served to bwd");
    attn_db_close(db2);
    /* a bad pass is refused with its field named, nothing imported */
    json_t *m0 = json_array_get(json_object_get(doc, "measurements"), 0);
    json_object_set_new(m0, "pass", json_string("sideways"));
    const char *r = path_of("refused.db");
    CHECK(attn_db_open(r, 1, &db2, err, sizeof err) == ATTN_OK, "%s", err);
    CHECK(db2 && attn_import_doc(db2, doc, "doc", r, &n, err, sizeof err) != 0 && strstr(err, "\"pass\""),
          "a bad pass: %s", err);
    attn_db_close(db2);
    /* the fields removed: a file from before schema 8 */
    size_t i;
    json_t *o;
    json_array_foreach(json_object_get(doc, "measurements"), i, o) {
      json_object_del(o, "pass");
      json_object_del(o, "variant");
    }
    const char *old = path_of("old-file.db");
    CHECK(attn_db_open(old, 1, &db2, err, sizeof err) == ATTN_OK, "%s", err);
    CHECK(db2 && attn_import_doc(db2, doc, "doc", old, &n, err, sizeof err) == 0, "old file: %s", err);
    const int all = raw_int(old, "SELECT count(*) FROM measurements");
    CHECK(all > 0 && raw_int(old, "SELECT count(*) FROM measurements WHERE pass = 'fwd' AND variant = ''") == all,
          "an older file's rows are fwd, dense");
    attn_db_close(db2);
    json_decref(doc);
  }
  attn_db_close(db);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: db_pass WORKDIR\n");
    return 2;
  }
  snprintf(dir, sizeof dir, "%s", argv[1]);
  char cmd[2200];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
  if (system(cmd) != 0) return 1;
  test_migrate();
  test_key();
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
