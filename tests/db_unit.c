/* db_unit.c: cache_db against SQLite directly: open/create, migrations from user_version 0, 1, 5 and 6, lookup
 * (nearest n, measured over model, lowrank tolerance, d_v never crossed), measurements, runs, devices, artifacts, a
 * file that is not a database, a locked database, and three writer processes at once, each creating the database if
 * it is not there yet.
 * Usage: db_unit WORKDIR */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <grp.h>
#include "attn.h"
#include "db.h"

extern const char attn_schema_sql[];


static char dir[2048];

static const char *path_of(const char *name) {
  static char buf[8][4096];
  static int k;
  char *p = buf[k++ % 8];
  snprintf(p, 4096, "%s/%s", dir, name);
  return p;
}

static void rm_db(const char *p) {
  char b[4200];
  unlink(p);
  snprintf(b, sizeof b, "%s-wal", p);
  unlink(b);
  snprintf(b, sizeof b, "%s-shm", p);
  unlink(b);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
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

static char spec_buf[64][512];
static const char *spec(const char *algo, int d, int br, const char *dtype, int causal) {
  static int k;
  char *p = spec_buf[k++ % 64];
  snprintf(p, 512,
           "%s cpu %s d=%d br=%d bc=64 causal=%d unroll=0 warps=0 stages=0 arch=- tile=0 feature=taylor degree=%d "
           "rank=0 seed=0",
           algo, dtype, d, br, causal, strcmp(algo, "lowrank") == 0 ? 2 : 0);
  return p;
}

static attn_db_meas row(const char *device, const char *sp, int n, int d, int causal, double t, const char *status,
                        const char *prov) {
  attn_db_meas m;
  memset(&m, 0, sizeof m);
  m.device = device;
  m.spec = sp;
  m.n = m.n_kv = n;
  m.d = d;
  m.causal = causal;
  m.batch = 1;
  m.heads = m.heads_kv = 2;
  m.dtype = ATTN_F32;
  m.time_ms = t;
  m.has_error = 1;
  m.error = 1e-7;
  m.reads = m.writes = -1;
  m.status = status;
  m.provenance = prov;
  return m;
}

static int put(attn_db *db, attn_db_meas m) {
  int rc = attn_db_meas_put(db, &m);
  if (rc != ATTN_OK) fprintf(stderr, "put: %s\n", attn_db_errmsg(db));
  return rc;
}

static void test_open(void) {
  char err[1024];
  attn_db *db = (attn_db *)1;
  const char *p = path_of("missing.db");
  rm_db(p);
  int rc = attn_db_open(p, 0, &db, err, sizeof err);
  CHECK(rc == ATTN_EDB && db == NULL, "rc %d", rc);
  CHECK(strstr(err, "no such database") && strstr(err, p), "err '%s'", err);
  struct stat sb;
  CHECK(stat(p, &sb) != 0, "create=0 made a file");

  rc = attn_db_open(p, 1, &db, err, sizeof err);
  CHECK(rc == ATTN_OK && db, "create: %s", err);
  CHECK(attn_db_schema_version() >= 2, "version %d", attn_db_schema_version());
  attn_db_close(db);
  CHECK(raw_int(p, "PRAGMA user_version") == attn_db_schema_version(), "user_version %d",
        raw_int(p, "PRAGMA user_version"));
  sqlite3 *h;
  char mode[32] = "";
  if (sqlite3_open(p, &h) == SQLITE_OK) {
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(h, "PRAGMA journal_mode", -1, &s, NULL) == SQLITE_OK) {
      if (sqlite3_step(s) == SQLITE_ROW) snprintf(mode, sizeof mode, "%s", sqlite3_column_text(s, 0));
      sqlite3_finalize(s);
    }
  }
  sqlite3_close(h);
  CHECK(strcmp(mode, "wal") == 0, "journal mode %s", mode);
  /* reopen with create=0 works and keeps the version */
  rc = attn_db_open(p, 0, &db, err, sizeof err);
  CHECK(rc == ATTN_OK, "reopen: %s", err);
  attn_db_close(db);
  attn_db_close(NULL);
  rc = attn_db_open(NULL, 1, &db, err, sizeof err);
  CHECK(rc == ATTN_EINVAL && !db, "NULL path rc %d", rc);
  rc = attn_db_open(dir, 1, &db, err, sizeof err);
  CHECK(rc == ATTN_EDB && !db && strstr(err, "directory"), "dir: %d %s", rc, err);
}

static void test_not_a_db(void) {
  const char *p = path_of("text.db");
  FILE *f = fopen(p, "w");
  for (int i = 0; i < 200; i++) fputs("this is a plain text file, not SQLite\n", f);
  fclose(f);
  char err[1024];
  attn_db *db = NULL;
  int rc = attn_db_open(p, 0, &db, err, sizeof err);
  CHECK(rc == ATTN_EDB && !db, "rc %d", rc);
  CHECK(strstr(err, "file is not a database") && strstr(err, p), "err '%s'", err);
  rc = attn_db_open(p, 1, &db, err, sizeof err);
  CHECK(rc == ATTN_EDB && !db && strstr(err, "file is not a database"), "create=1: rc %d '%s'", rc, err);
  /* the file is untouched */
  struct stat sb;
  CHECK(stat(p, &sb) == 0 && sb.st_size == 200 * 38, "size %lld", (long long)sb.st_size);
}

static void test_migrate(void) {
  char err[1024];
  attn_db *db = NULL;
  /* version 0: a SQLite file with someone's table and no schema */
  const char *p0 = path_of("v0.db");
  rm_db(p0);
  sqlite3 *h;
  CHECK(sqlite3_open(p0, &h) == SQLITE_OK, "raw open");
  CHECK(sqlite3_exec(h, "CREATE TABLE notes(x); INSERT INTO notes VALUES (42);", NULL, NULL, NULL) == SQLITE_OK, "raw");
  sqlite3_close(h);
  CHECK(raw_int(p0, "PRAGMA user_version") == 0, "starts at 0");
  int rc = attn_db_open(p0, 0, &db, err, sizeof err);
  CHECK(rc == ATTN_OK, "open v0: %s", err);
  attn_db_close(db);
  CHECK(raw_int(p0, "PRAGMA user_version") == attn_db_schema_version(), "v0 migrated to %d",
        raw_int(p0, "PRAGMA user_version"));
  CHECK(raw_int(p0, "SELECT x FROM notes") == 42, "other table kept");
  CHECK(raw_int(p0, "SELECT count(*) FROM sqlite_master WHERE name IN ('devices','kernels','artifacts','runs',"
                    "'measurements','best')") == 6,
        "tables after v0");

  /* version 1: the initial schema with a row in it */
  const char *p1 = path_of("v1.db");
  rm_db(p1);
  CHECK(sqlite3_open(p1, &h) == SQLITE_OK, "raw open");
  CHECK(sqlite3_exec(h, attn_schema_sql, NULL, NULL, NULL) == SQLITE_OK, "schema: %s", sqlite3_errmsg(h));
  char sql[2048];
  snprintf(sql, sizeof sql,
           "PRAGMA user_version = 1;"
           "INSERT INTO devices(name, kind) VALUES ('cpu:old', 'cpu');"
           "INSERT INTO kernels(spec, algo, target, dtype, d) VALUES ('%s', 'flash', 'cpu', 'f32', 64);"
           "INSERT INTO measurements(device_id, kernel_id, n, n_kv, d, dtype, causal, batch, heads, heads_kv, time_ms,"
           " status, provenance) VALUES (1, 1, 512, 512, 64, 'f32', 0, 1, 1, 1, 0.5, 'ok', 'measured');",
           spec("flash", 64, 32, "f32", 0));
  CHECK(sqlite3_exec(h, sql, NULL, NULL, NULL) == SQLITE_OK, "v1 rows: %s", sqlite3_errmsg(h));
  sqlite3_close(h);
  CHECK(raw_int(p1, "SELECT count(*) FROM sqlite_master WHERE name = 'best'") == 0, "no view at v1");
  rc = attn_db_open(p1, 0, &db, err, sizeof err);
  CHECK(rc == ATTN_OK, "open v1: %s", err);
  if (rc == ATTN_OK) {
    attn_db_query q = {.device = "cpu:old", .d = 64, .n = 500, .dtype = ATTN_F32};
    attn_db_best b;
    rc = attn_db_lookup(db, &q, &b);
    CHECK(rc == ATTN_OK && b.n == 512 && b.time_ms == 0.5 && b.error == -1, "lookup after migration rc %d", rc);
    CHECK(attn_db_meas_count(db) == 1, "row kept");
    attn_db_close(db);
  }
  CHECK(raw_int(p1, "PRAGMA user_version") == attn_db_schema_version(), "v1 migrated");
  CHECK(raw_int(p1, "SELECT count(*) FROM best") == 1, "best view after migration");

  /* a newer schema than this build: refused, not damaged */
  CHECK(sqlite3_open(p1, &h) == SQLITE_OK && sqlite3_exec(h, "PRAGMA user_version = 99", NULL, NULL, NULL) == SQLITE_OK,
        "raw");
  sqlite3_close(h);
  rc = attn_db_open(p1, 0, &db, err, sizeof err);
  CHECK(rc == ATTN_EDB && strstr(err, "newer"), "v99: rc %d '%s'", rc, err);
  CHECK(raw_int(p1, "PRAGMA user_version") == 99, "v99 untouched");
}

static int count_cb(void *ctx, const attn_db_meas *m) {
  (void)m;
  (*(int *)ctx)++;
  return 0;
}

typedef struct {
  int rows, lowrank_rows;
  char first[512];
} best_ctx;

static int best_cb(void *ctx, const attn_db_meas *m) {
  best_ctx *b = ctx;
  if (strcmp(m->device, "cpu:test") == 0 && m->d == 64 && !m->causal && m->n == 1024)
    snprintf(b->first, sizeof b->first, "%s %.3f %s", m->spec, m->time_ms, m->provenance);
  b->rows++;
  if (strncmp(m->spec, "lowrank", 7) == 0) b->lowrank_rows++;
  return 0;
}

typedef struct {
  int cpu, cuda_sm90;
} dev_count;
static int dcb(void *ctx, const attn_db_device *d);

static void test_lookup(void) {
  char err[1024];
  attn_db *db = NULL;
  const char *p = path_of("lookup.db");
  rm_db(p);
  CHECK(attn_db_open(p, 1, &db, err, sizeof err) == ATTN_OK, "%s", err);
  if (!db) return;
  const char *dev = "cpu:test";
  long long did = 0;
  CHECK(attn_db_device_id(db, dev, "{\"kind\": \"cpu\", \"threads\": 2}", &did) == ATTN_OK && did > 0, "device");
  long long did2 = 0;
  CHECK(attn_db_device_id(db, dev, NULL, &did2) == ATTN_OK && did2 == did, "same device id");
  const char *f32 = spec("flash", 64, 32, "f32", 0), *f64 = spec("flash", 64, 64, "f32", 0);
  const char *lr = spec("lowrank", 64, 64, "f32", 0);
  /* n = 256, 1024, 4096; two kernels each; the second is faster at 1024 */
  CHECK(put(db, row(dev, f32, 256, 64, 0, 0.10, "ok", "measured")) == ATTN_OK, "put");
  CHECK(put(db, row(dev, f64, 256, 64, 0, 0.20, "ok", "measured")) == ATTN_OK, "put");
  CHECK(put(db, row(dev, f32, 1024, 64, 0, 2.0, "ok", "measured")) == ATTN_OK, "put");
  CHECK(put(db, row(dev, f64, 1024, 64, 0, 1.5, "ok", "measured")) == ATTN_OK, "put");
  CHECK(put(db, row(dev, f32, 4096, 64, 0, 30.0, "ok", "measured")) == ATTN_OK, "put");
  /* a wrong row, faster than all: never chosen */
  CHECK(put(db, row(dev, spec("flash", 64, 16, "f32", 0), 1024, 64, 0, 0.01, "wrong", "measured")) == ATTN_OK, "put");
  /* lowrank: faster, error 1e-3 */
  attn_db_meas l = row(dev, lr, 1024, 64, 0, 0.5, "ok", "measured");
  l.error = 1e-3;
  CHECK(put(db, l) == ATTN_OK, "put lowrank");

  attn_db_best b;
  attn_db_query q = {.device = dev, .d = 64, .n = 1000, .dtype = ATTN_F32};
  CHECK(attn_db_lookup(db, &q, &b) == ATTN_OK && b.n == 1024 && strcmp(b.spec, f64) == 0 && b.time_ms == 1.5,
        "n=1000 -> 1024 fastest exact: n=%d %s", b.n, b.spec);
  CHECK(strcmp(b.provenance, "measured") == 0 && b.error == 1e-7, "fields %s %g", b.provenance, b.error);
  q.n = 300;
  CHECK(attn_db_lookup(db, &q, &b) == ATTN_OK && b.n == 256 && strcmp(b.spec, f32) == 0, "n=300 -> 256: %d", b.n);
  q.n = 1; /* decode: no decode row, and prefill rows do not serve it; the miss names the nearest prefill n */
  CHECK(attn_db_lookup(db, &q, &b) == ATTN_EUNSUPPORTED && b.n == 256 && !b.spec[0], "n=1 -> miss: n=%d", b.n);
  q.n = 100000;
  CHECK(attn_db_lookup(db, &q, &b) == ATTN_OK && b.n == 4096, "n=1e5 -> 4096: %d", b.n);
  q.n = 2048; /* log distance 1024..2048 = 2048..4096: the tie goes to the smaller problem */
  CHECK(attn_db_lookup(db, &q, &b) == ATTN_OK && b.n == 1024, "tie -> faster: %d", b.n);
  /* tolerance: lowrank only when tolerance > 0 and its error fits */
  q.n = 1024;
  q.tolerance = 1e-2;
  CHECK(attn_db_lookup(db, &q, &b) == ATTN_OK && strcmp(b.spec, lr) == 0 && b.error == 1e-3, "tol 1e-2 -> lowrank");
  q.tolerance = 1e-4;
  CHECK(attn_db_lookup(db, &q, &b) == ATTN_OK && strcmp(b.spec, f64) == 0, "tol 1e-4 -> flash: %s", b.spec);
  q.tolerance = 0;
  CHECK(attn_db_lookup(db, &q, &b) == ATTN_OK && strcmp(b.spec, f64) == 0, "tol 0 -> flash");
  /* exact (device, d, dtype, causal) */
  attn_db_query miss[] = {{.device = "cpu:other", .d = 64, .n = 1024},
                          {.device = dev, .d = 128, .n = 1024},
                          {.device = dev, .d = 64, .n = 1024, .causal = 1},
                          {.device = dev, .d = 64, .n = 1024, .dtype = ATTN_F16}};
  for (int i = 0; i < 4; i++)
    CHECK(attn_db_lookup(db, &miss[i], &b) == ATTN_EUNSUPPORTED, "miss %d matched", i);

  /* measured before model: a model row at the exact n, faster, loses to a measured row far away */
  const char *gpu = "H100";
  const char *c64 = "flash cuda f16 d=64 br=64 bc=64 causal=0 unroll=0 warps=4 stages=2 arch=sm_90 tile=0 "
                    "feature=taylor degree=0 rank=0 seed=0";
  const char *c128 = "flash cuda f16 d=64 br=128 bc=64 causal=0 unroll=0 warps=8 stages=2 arch=sm_90 tile=0 "
                     "feature=taylor degree=0 rank=0 seed=0";
  attn_db_meas g = row(gpu, c64, 1024, 64, 0, 0.01, "ok", "model");
  g.dtype = ATTN_F16;
  g.has_error = 0;
  CHECK(put(db, g) == ATTN_OK, "model row");
  attn_db_query gq = {.device = gpu, .d = 64, .n = 1024, .dtype = ATTN_F16};
  CHECK(attn_db_lookup(db, &gq, &b) == ATTN_OK && strcmp(b.provenance, "model") == 0 && b.error == -1,
        "model only -> model");
  g = row(gpu, c128, 8192, 64, 0, 3.0, "ok", "measured");
  g.dtype = ATTN_F16;
  CHECK(put(db, g) == ATTN_OK, "measured row");
  CHECK(attn_db_lookup(db, &gq, &b) == ATTN_OK && strcmp(b.provenance, "measured") == 0 && b.n == 8192,
        "measured preferred: %s n=%d", b.provenance, b.n);
  long long gid = 0;
  CHECK(attn_db_device_id(db, gpu, "{\"kind\": \"gpu\", \"arch\": \"sm_90\"}", &gid) == ATTN_OK, "gpu device");

  /* devices: kinds from the description or the name, arch from the description */
  dev_count k = {0, 0};
  CHECK(attn_db_device_foreach(db, dcb, &k) == 0 && k.cpu == 1 && k.cuda_sm90 == 1, "devices %d %d", k.cpu,
        k.cuda_sm90);

  /* best view: one row per (device, d, n, dtype, causal); exact before lowrank */
  best_ctx bc = {0};
  CHECK(attn_db_best_foreach(db, best_cb, &bc) == 0, "best: %s", attn_db_errmsg(db));
  CHECK(bc.rows == 5 && bc.lowrank_rows == 0, "best rows %d lowrank %d", bc.rows, bc.lowrank_rows);
  char want[600];
  snprintf(want, sizeof want, "%s 1.500 measured", f64);
  CHECK(strcmp(bc.first, want) == 0, "best at 1024: '%s'", bc.first);

  /* replace: same key, new values; count unchanged; exists sees the new row */
  long long before = attn_db_meas_count(db);
  attn_db_meas r = row(dev, f32, 1024, 64, 0, 1.25, "ok", "measured");
  r.reads = 1000;
  r.writes = 10;
  r.log = "second try";
  CHECK(put(db, r) == ATTN_OK, "replace");
  CHECK(attn_db_meas_count(db) == before, "count %lld vs %lld", attn_db_meas_count(db), before);
  attn_db_meas got;
  CHECK(attn_db_meas_exists(db, &r, &got) == 1 && got.time_ms == 1.25 && got.reads == 1000 && got.writes == 10 &&
            strcmp(got.log, "second try") == 0 && strcmp(got.status, "ok") == 0 && got.created[0] == '2' &&
            got.gflops > 0,
        "exists after replace");
  r.provenance = "model";
  CHECK(attn_db_meas_exists(db, &r, &got) == 0, "other provenance is another key");
  r.provenance = "measured";
  r.heads_kv = 1;
  CHECK(attn_db_meas_exists(db, &r, NULL) == 0, "other heads_kv is another key");
  r.heads_kv = 2;
  r.spec = spec("flash", 64, 128, "f32", 0);
  CHECK(attn_db_meas_exists(db, &r, NULL) == 0, "unknown kernel: 0");
  CHECK(attn_db_meas_count(db) == before, "exists created nothing");
  /* ids instead of names */
  long long kid = 0;
  CHECK(attn_db_kernel_id(db, f32, "abcdef", &kid) == ATTN_OK && kid > 0, "kernel id");
  attn_db_meas byid = row(NULL, NULL, 1024, 64, 0, 0, "ok", "measured");
  byid.device_id = did;
  byid.kernel_id = kid;
  CHECK(attn_db_meas_exists(db, &byid, &got) == 1 && got.time_ms == 1.25, "exists by id");

  /* gflops computed: 4 d n n_kv batch heads / t = 4*64*1000*1000*2 / 1 ms */
  attn_db_meas gf = row(dev, f32, 1000, 64, 0, 1.0, "ok", "model");
  CHECK(put(db, gf) == ATTN_OK && attn_db_meas_exists(db, &gf, &got) == 1, "gflops row");
  CHECK(got.gflops > 511.9 && got.gflops < 512.1, "gflops %g (want 512)", got.gflops);
  gf.causal = 1; /* bottom-right aligned, n = n_kv: n(n+1)/2 visible pairs */
  CHECK(put(db, gf) == ATTN_OK && attn_db_meas_exists(db, &gf, &got) == 1, "causal gflops row");
  CHECK(got.gflops > 256.1 && got.gflops < 256.4, "causal gflops %g (want 256.256)", got.gflops);

  /* bad rows are refused, nothing stored */
  before = attn_db_meas_count(db);
  attn_db_meas bad = row(dev, f32, 64, 64, 0, 1, "great", "measured");
  CHECK(attn_db_meas_put(db, &bad) == ATTN_EINVAL && strstr(attn_db_errmsg(db), "status"), "bad status");
  bad = row(dev, f32, 64, 64, 0, 1, "ok", "guessed");
  CHECK(attn_db_meas_put(db, &bad) == ATTN_EINVAL, "bad provenance");
  bad = row(dev, "not a spec", 64, 64, 0, 1, "ok", "measured");
  CHECK(attn_db_meas_put(db, &bad) == ATTN_EINVAL && strstr(attn_db_errmsg(db), "canonical"), "bad spec: %s",
        attn_db_errmsg(db));
  bad = row(dev, f32, 0, 64, 0, 1, "ok", "measured");
  CHECK(attn_db_meas_put(db, &bad) == ATTN_EINVAL, "n=0");
  CHECK(attn_db_meas_count(db) == before, "nothing stored");

  /* runs */
  long long run = 0;
  CHECK(attn_db_run_begin(db, did, "attntune --gpu cpu", &run) == ATTN_OK && run > 0, "run begin");
  attn_db_meas rr = row(dev, f32, 128, 64, 1, 0.05, "ok", "measured");
  rr.run_id = run;
  CHECK(put(db, rr) == ATTN_OK, "row with run");
  CHECK(attn_db_meas_exists(db, &rr, &got) == 1 && got.run_id == run, "run id stored");
  CHECK(attn_db_run_end(db, run, "interrupted") == ATTN_OK, "run end");
  CHECK(raw_int(p, "SELECT count(*) FROM runs WHERE status = 'interrupted' AND ended IS NOT NULL") == 1, "run row");

  int n = 0;
  CHECK(attn_db_meas_foreach(db, count_cb, &n) == 0 && n == attn_db_meas_count(db), "foreach %d", n);

  /* an explicit transaction: rolled back rows are gone, committed ones stay */
  before = attn_db_meas_count(db);
  CHECK(attn_db_begin(db) == ATTN_OK, "begin");
  CHECK(put(db, row(dev, f32, 77, 64, 0, 0.1, "ok", "measured")) == ATTN_OK, "put in tx");
  attn_db_rollback(db);
  CHECK(attn_db_meas_count(db) == before, "rolled back");
  CHECK(attn_db_begin(db) == ATTN_OK, "begin");
  CHECK(put(db, row(dev, f32, 77, 64, 0, 0.1, "ok", "measured")) == ATTN_OK, "put in tx");
  CHECK(put(db, row(dev, f32, 78, 64, 0, 0.1, "ok", "measured")) == ATTN_OK, "put in tx");
  CHECK(attn_db_commit(db) == ATTN_OK, "commit");
  CHECK(attn_db_meas_count(db) == before + 2, "committed");
  attn_db_close(db);
}

static int dcb(void *ctx, const attn_db_device *d) {
  dev_count *k = ctx;
  if (strcmp(d->name, "cpu:test") == 0 && strcmp(d->kind, "cpu") == 0 && strstr(d->info, "threads")) k->cpu++;
  if (strcmp(d->name, "H100") == 0 && strcmp(d->kind, "cuda") == 0 && d->arch && strcmp(d->arch, "sm_90") == 0)
    k->cuda_sm90++;
  return 0;
}

static void test_artifacts(void) {
  char err[1024];
  attn_db *db = NULL;
  const char *p = path_of("art.db");
  rm_db(p);
  CHECK(attn_db_open(p, 1, &db, err, sizeof err) == ATTN_OK, "%s", err);
  if (!db) return;
  unsigned char blob[70000];
  for (size_t i = 0; i < sizeof blob; i++) blob[i] = (unsigned char)(i * 131 + (i >> 8));
  blob[5] = 0;
  CHECK(attn_db_artifact_put(db, "h1", "cc", "-O3", "x86_64", blob, sizeof blob) == ATTN_OK, "put");
  void *got = NULL;
  size_t len = 0;
  CHECK(attn_db_artifact_get(db, "h1", "cc", "-O3", "x86_64", &got, &len) == ATTN_OK && len == sizeof blob &&
            memcmp(got, blob, len) == 0,
        "round trip len %zu", len);
  free(got);
  CHECK(attn_db_artifact_get(db, "h1", "cc", "-O2", "x86_64", &got, &len) == ATTN_EUNSUPPORTED && !got && !len,
        "other flags absent");
  CHECK(attn_db_artifact_get(db, "h1", "gcc", "-O3", "x86_64", &got, &len) == ATTN_EUNSUPPORTED, "other compiler");
  CHECK(attn_db_artifact_put(db, "h1", "cc", "-O3", "x86_64", "new", 3) == ATTN_OK, "replace");
  CHECK(attn_db_artifact_get(db, "h1", "cc", "-O3", "x86_64", &got, &len) == ATTN_OK && len == 3 &&
            memcmp(got, "new", 3) == 0,
        "replaced");
  free(got);
  CHECK(attn_db_artifact_put(db, "h2", "nvrtc", "", NULL, "", 0) == ATTN_OK, "empty blob");
  CHECK(attn_db_artifact_get(db, "h2", "nvrtc", "", NULL, &got, &len) == ATTN_OK && got && len == 0, "empty back");
  free(got);
  attn_db_close(db);
  /* another connection (a second process would be the same) sees it */
  CHECK(attn_db_open(p, 0, &db, err, sizeof err) == ATTN_OK, "%s", err);
  CHECK(attn_db_artifact_get(db, "h1", "cc", "-O3", "x86_64", &got, &len) == ATTN_OK && len == 3, "persisted");
  free(got);
  attn_db_close(db);
}

static void test_locked(void) {
  char err[1024];
  attn_db *db = NULL;
  const char *p = path_of("locked.db");
  rm_db(p);
  setenv("ATTN_DB_TIMEOUT_MS", "300", 1);
  CHECK(attn_db_open(p, 1, &db, err, sizeof err) == ATTN_OK, "%s", err);
  if (!db) return;
  const char *dev = "cpu:test", *f = spec("flash", 32, 32, "f32", 0);
  for (int n = 16; n <= 64; n *= 2) CHECK(put(db, row(dev, f, n, 32, 0, 0.1, "ok", "measured")) == ATTN_OK, "put");
  /* another connection takes the write lock and keeps it */
  sqlite3 *h;
  CHECK(sqlite3_open(p, &h) == SQLITE_OK, "raw");
  CHECK(sqlite3_exec(h, "BEGIN EXCLUSIVE; DELETE FROM runs;", NULL, NULL, NULL) == SQLITE_OK, "lock: %s",
        sqlite3_errmsg(h));
  attn_db_meas m = row(dev, f, 128, 32, 0, 0.1, "ok", "measured");
  double t0 = now_s();
  int rc = attn_db_meas_put(db, &m);
  double dt = now_s() - t0;
  CHECK(rc == ATTN_EDB && strstr(attn_db_errmsg(db), "locked"), "rc %d '%s'", rc, attn_db_errmsg(db));
  CHECK(dt >= 0.25 && dt < 3.0, "waited %.3f s for a 300 ms timeout", dt);
  /* readers still read in WAL mode while the writer holds its lock */
  CHECK(attn_db_meas_count(db) == 3, "count while locked %lld", attn_db_meas_count(db));
  sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL);
  sqlite3_close(h);
  CHECK(attn_db_meas_count(db) == 3, "no rows lost");
  CHECK(attn_db_meas_put(db, &m) == ATTN_OK && attn_db_meas_count(db) == 4, "put after release: %s",
        attn_db_errmsg(db));
  attn_db_close(db);

  /* a connection in exclusive locking mode keeps even readers out: open fails past the timeout */
  CHECK(sqlite3_open(p, &h) == SQLITE_OK, "raw");
  CHECK(sqlite3_exec(h, "PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE; DELETE FROM runs; COMMIT;", NULL, NULL,
                     NULL) == SQLITE_OK,
        "exclusive: %s", sqlite3_errmsg(h));
  t0 = now_s();
  rc = attn_db_open(p, 0, &db, err, sizeof err);
  dt = now_s() - t0;
  CHECK(rc == ATTN_EDB && !db && strstr(err, "locked") && strstr(err, p), "open locked: rc %d '%s'", rc, err);
  CHECK(dt < 3.0, "open waited %.3f s", dt);
  sqlite3_close(h);
  CHECK(attn_db_open(p, 0, &db, err, sizeof err) == ATTN_OK, "open after release: %s", err);
  CHECK(attn_db_meas_count(db) == 4, "rows intact");
  attn_db_close(db);
  unsetenv("ATTN_DB_TIMEOUT_MS");
}

/* Each child creates (or opens) the same fresh database and writes its own rows, each committed alone. */
static int writer(const char *p, int who, int rows) {
  char err[1024];
  attn_db *db = NULL;
  if (attn_db_open(p, 1, &db, err, sizeof err) != ATTN_OK) {
    fprintf(stderr, "writer %d: open: %s\n", who, err);
    return 1;
  }
  char dev[64];
  snprintf(dev, sizeof dev, "cpu:writer%d", who);
  long long did, run;
  if (attn_db_device_id(db, dev, NULL, &did) != ATTN_OK || attn_db_run_begin(db, did, "writer", &run) != ATTN_OK) {
    fprintf(stderr, "writer %d: %s\n", who, attn_db_errmsg(db));
    attn_db_close(db);
    return 1;
  }
  for (int i = 0; i < rows; i++) {
    /* both writers share kernels: the kernel upserts race too */
    attn_db_meas m = row(NULL, spec("flash", 64, 16 * (1 + i % 4), "f32", 0), 100 + i, 64, 0, 0.1 + i, "ok",
                         "measured");
    m.device_id = did;
    m.run_id = run;
    if (attn_db_meas_put(db, &m) != ATTN_OK) {
      fprintf(stderr, "writer %d row %d: %s\n", who, i, attn_db_errmsg(db));
      attn_db_close(db);
      return 1;
    }
  }
  int rc = attn_db_run_end(db, run, "done");
  attn_db_close(db);
  return rc == ATTN_OK ? 0 : 1;
}

static void test_concurrent(void) {
  const char *p = path_of("concurrent.db");
  rm_db(p);
  enum { ROWS = 150, WRITERS = 3 };
  pid_t pid[WRITERS];
  for (int w = 0; w < WRITERS; w++) {
    pid[w] = fork();
    if (pid[w] == 0) _exit(writer(p, w, ROWS));
    CHECK(pid[w] > 0, "fork");
  }
  for (int w = 0; w < WRITERS; w++) {
    int st = -1;
    if (pid[w] > 0) waitpid(pid[w], &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "writer %d status %d", w, st);
  }
  CHECK(raw_int(p, "SELECT count(*) FROM measurements") == WRITERS * ROWS, "rows %d",
        raw_int(p, "SELECT count(*) FROM measurements"));
  CHECK(raw_int(p, "SELECT count(DISTINCT device_id) FROM measurements") == WRITERS, "devices");
  CHECK(raw_int(p, "SELECT count(*) FROM kernels") == 4, "kernels %d", raw_int(p, "SELECT count(*) FROM kernels"));
  CHECK(raw_int(p, "SELECT count(*) FROM runs WHERE status = 'done'") == WRITERS, "runs");
  CHECK(raw_int(p, "PRAGMA user_version") == attn_db_schema_version(), "created once, migrated once");
}

/* The whole problem in the lookup (db.h): the decode/prefill regimes, the parallel width per thread, n_kv, the
 * finalist round's choice within a problem, and lowrank rows beside it. */
static attn_db_best lookup_shape(attn_db *db, int n, int n_kv, int heads, int threads, double tol, int *rc) {
  attn_db_query q = {.device = "cpu:shape", .d = 64, .n = n, .n_kv = n_kv, .batch = 1, .heads = heads,
                     .threads = threads, .dtype = ATTN_F32, .tolerance = tol};
  attn_db_best b;
  *rc = attn_db_lookup(db, &q, &b);
  return b;
}

static void test_lookup_shape(void) {
  char err[1024];
  attn_db *db = NULL;
  const char *p = path_of("shape.db");
  rm_db(p);
  CHECK(attn_db_open(p, 1, &db, err, sizeof err) == ATTN_OK, "open: %s", err);
  if (!db) return;
  const char *dev = "cpu:shape";
  const char *k16 = spec("flash", 64, 16, "f32", 0), *k32 = spec("flash", 64, 32, "f32", 0);
  const char *k64 = spec("flash", 64, 64, "f32", 0), *k128 = spec("flash", 64, 128, "f32", 0);
  const char *lr = spec("lowrank", 64, 64, "f32", 0);
  int rc;
  attn_db_best b;

  /* (a) decode key: a prefill row alone does not serve n = 1 */
  attn_db_meas m = row(dev, k64, 512, 64, 0, 1.0, "ok", "measured");
  CHECK(put(db, m) == ATTN_OK, "put prefill");
  b = lookup_shape(db, 1, 512, 2, 0, 0, &rc);
  CHECK(rc == ATTN_EUNSUPPORTED && b.n == 512, "decode with only prefill rows: rc %d n=%d", rc, b.n);
  m = row(dev, k16, 1, 64, 0, 0.1, "ok", "measured");
  m.n_kv = 512;
  CHECK(put(db, m) == ATTN_OK, "put decode");
  b = lookup_shape(db, 1, 512, 2, 0, 0, &rc);
  CHECK(rc == ATTN_OK && b.n == 1 && strcmp(b.spec, k16) == 0, "n=1 -> decode row: rc %d n=%d", rc, b.n);
  b = lookup_shape(db, 4, 512, 2, 0, 0, &rc);
  CHECK(rc == ATTN_OK && b.n == 1, "n=4 -> decode row: n=%d", b.n);
  b = lookup_shape(db, 512, 512, 2, 0, 0, &rc);
  CHECK(rc == ATTN_OK && b.n == 512 && strcmp(b.spec, k64) == 0, "n=512 -> prefill row: n=%d", b.n);
  b = lookup_shape(db, 64, 512, 2, 0, 0, &rc); /* the bound is prefill, however near n = 1 is in the other */
  CHECK(rc == ATTN_OK && b.n == 512, "n=64 -> prefill row: n=%d", b.n);
  b = lookup_shape(db, 63, 512, 2, 0, 0, &rc);
  CHECK(rc == ATTN_OK && b.n == 1, "n=63 -> decode row: n=%d", b.n);

  /* (b) width: rows at heads 2 and 32, same n, n_kv; each query gets its own width */
  m = row(dev, k32, 2048, 64, 0, 5.0, "ok", "measured");
  CHECK(put(db, m) == ATTN_OK, "put heads=2");
  m = row(dev, k128, 2048, 64, 0, 40.0, "ok", "measured");
  m.heads = m.heads_kv = 32;
  CHECK(put(db, m) == ATTN_OK, "put heads=32");
  b = lookup_shape(db, 2048, 2048, 32, 0, 0, &rc);
  CHECK(rc == ATTN_OK && b.heads == 32 && strcmp(b.spec, k128) == 0, "heads=32 -> heads=32 row: heads=%d", b.heads);
  CHECK(b.n == 2048 && b.n_kv == 2048 && b.batch == 1 && b.heads_kv == 32 && b.threads == 0 && b.id > 0,
        "fields n=%d n_kv=%d batch=%d heads_kv=%d threads=%d id=%lld", b.n, b.n_kv, b.batch, b.heads_kv, b.threads,
        b.id);
  b = lookup_shape(db, 2048, 2048, 2, 0, 0, &rc);
  CHECK(rc == ATTN_OK && b.heads == 2 && strcmp(b.spec, k32) == 0, "heads=2 -> heads=2 row: heads=%d", b.heads);
  /* rows without threads count as run on the query's: the width compares batch*heads alone */
  b = lookup_shape(db, 2048, 2048, 32, 16, 0, &rc);
  CHECK(rc == ATTN_OK && b.heads == 32, "heads=32 on 16 threads -> heads=32 row: heads=%d", b.heads);
  /* a row that recorded its threads has its own width (heads=32 on 16 threads: 2 per thread, as heads=2 on 1); at
   * equal distance the row on the query's threads wins */
  m = row(dev, k16, 2048, 64, 0, 4.0, "ok", "measured");
  m.heads = m.heads_kv = 32;
  m.threads = 16;
  CHECK(put(db, m) == ATTN_OK, "put heads=32 threads=16");
  b = lookup_shape(db, 2048, 2048, 2, 1, 0, &rc);
  CHECK(rc == ATTN_OK && b.heads == 2 && b.threads == 0, "heads=2 on 1 thread: heads=%d threads=%d", b.heads,
        b.threads);
  b = lookup_shape(db, 2048, 2048, 32, 16, 0, &rc);
  CHECK(rc == ATTN_OK && b.heads == 32 && b.threads == 16, "heads=32 on 16 threads -> its own row: %d %d", b.heads,
        b.threads);
  b = lookup_shape(db, 2048, 2048, 2, 16, 0, &rc); /* 1/8 per thread: the heads=2 row (also 1/8) over 2 per thread */
  CHECK(rc == ATTN_OK && b.heads == 2 && b.threads == 0, "heads=2 on 16 threads: heads=%d threads=%d", b.heads,
        b.threads);
  b = lookup_shape(db, 2048, 2048, 64, 32, 0, &rc); /* 2 per thread: the threads=16 row (2), not the 0 rows (1, 1/16) */
  CHECK(rc == ATTN_OK && b.heads == 32 && b.threads == 16, "heads=64 on 32 threads: heads=%d threads=%d", b.heads,
        b.threads);

  /* (c) n_kv: decode rows at n_kv 8192 and 512; a query at 4096 is nearer 8192 (2x against 8x) */
  m = row(dev, k32, 1, 64, 0, 0.9, "ok", "measured");
  m.n_kv = 8192;
  CHECK(put(db, m) == ATTN_OK, "put n_kv=8192");
  b = lookup_shape(db, 1, 4096, 2, 0, 0, &rc);
  CHECK(rc == ATTN_OK && b.n_kv == 8192 && strcmp(b.spec, k32) == 0, "n_kv=4096 -> 8192: %d", b.n_kv);
  b = lookup_shape(db, 1, 1024, 2, 0, 0, &rc);
  CHECK(rc == ATTN_OK && b.n_kv == 512, "n_kv=1024 -> 512: %d", b.n_kv);

  /* (d) the finalist round's choice within a problem: 10% slower, chosen, beats the faster row */
  m = row(dev, k16, 256, 64, 0, 1.00, "ok", "measured");
  CHECK(put(db, m) == ATTN_OK, "put fast");
  m = row(dev, k32, 256, 64, 0, 1.10, "ok", "measured");
  m.chosen = 1;
  CHECK(put(db, m) == ATTN_OK, "put chosen");
  b = lookup_shape(db, 256, 256, 2, 0, 0, &rc);
  CHECK(rc == ATTN_OK && strcmp(b.spec, k32) == 0 && b.chosen == 1, "chosen wins: %s", b.spec);
  /* a lowrank row within tolerance, faster than the chosen row, wins when the tolerance allows it */
  m = row(dev, lr, 256, 64, 0, 0.5, "ok", "measured");
  m.error = 1e-3;
  CHECK(put(db, m) == ATTN_OK, "put lowrank");
  b = lookup_shape(db, 256, 256, 2, 0, 1e-2, &rc);
  CHECK(rc == ATTN_OK && strcmp(b.spec, lr) == 0, "tol 1e-2 -> lowrank: %s", b.spec);
  b = lookup_shape(db, 256, 256, 2, 0, 1e-4, &rc);
  CHECK(rc == ATTN_OK && strcmp(b.spec, k32) == 0, "tol 1e-4 -> chosen: %s", b.spec);
  /* a slower lowrank row does not displace the choice */
  m = row(dev, lr, 256, 64, 0, 2.0, "ok", "measured");
  m.error = 1e-3;
  CHECK(put(db, m) == ATTN_OK, "put slow lowrank");
  b = lookup_shape(db, 256, 256, 2, 0, 1e-2, &rc);
  CHECK(rc == ATTN_OK && strcmp(b.spec, k32) == 0, "slow lowrank -> chosen: %s", b.spec);
  /* a problem the round did not judge: the tie rule alone, and the faster exact row beats the slow lowrank one */
  m = row(dev, k16, 128, 64, 0, 1.0, "ok", "measured");
  CHECK(put(db, m) == ATTN_OK, "put unjudged");
  m = row(dev, lr, 128, 64, 0, 2.0, "ok", "measured");
  m.error = 1e-3;
  CHECK(put(db, m) == ATTN_OK, "put unjudged lowrank");
  b = lookup_shape(db, 128, 128, 2, 0, 1e-2, &rc);
  CHECK(rc == ATTN_OK && strcmp(b.spec, k16) == 0 && b.chosen == 0, "unjudged -> fastest: %s", b.spec);
  attn_db_close(db);
}

/* The tie rule of db.h, in attn_db_lookup and in the best view alike: within the tie factor of the fastest time,
 * fewer transfers win; unknown transfers lose every tie; a row faster by more than the factor wins regardless. */
typedef struct {
  char spec[512];
} tie_ctx;

static int tie_cb(void *ctx, const attn_db_meas *m) {
  if (strcmp(m->device, "cpu:tie") == 0) snprintf(((tie_ctx *)ctx)->spec, sizeof ((tie_ctx *)ctx)->spec, "%s", m->spec);
  return 0;
}

static void expect_best(attn_db *db, const char *want, const char *what) {
  attn_db_query q = {.device = "cpu:tie", .d = 64, .n = 4096, .dtype = ATTN_F32};
  attn_db_best b;
  int rc = attn_db_lookup(db, &q, &b);
  CHECK(rc == ATTN_OK && strcmp(b.spec, want) == 0, "%s: lookup chose '%s'", what, rc == ATTN_OK ? b.spec : "");
  tie_ctx t = {""};
  CHECK(attn_db_best_foreach(db, tie_cb, &t) == 0 && strcmp(t.spec, want) == 0, "%s: best view has '%s'", what,
        t.spec);
}

static void test_tie(void) {
  char err[1024];
  attn_db *db = NULL;
  const char *p = path_of("tie.db");
  unlink(p);
  CHECK(attn_db_open(p, 1, &db, err, sizeof err) == ATTN_OK, "open: %s", err);
  if (!db) return;
  const char *a = spec("flash", 64, 16, "f32", 0), *b = spec("flash", 64, 32, "f32", 0);
  const char *c = spec("flash", 64, 64, "f32", 0), *d = spec("flash", 64, 128, "f32", 0);
  const char *u = spec("flash", 64, 256, "f32", 0);
  attn_db_meas m = row("cpu:tie", a, 4096, 64, 0, 10.0, "ok", "measured");
  m.reads = 900, m.writes = 100;
  CHECK(put(db, m) == ATTN_OK, "put a");
  expect_best(db, a, "one row");
  m = row("cpu:tie", b, 4096, 64, 0, 10.2, "ok", "measured"); /* 2% slower, half the transfers */
  m.reads = 400, m.writes = 100;
  CHECK(put(db, m) == ATTN_OK, "put b");
  expect_best(db, b, "within the factor, fewer transfers");
  m = row("cpu:tie", c, 4096, 64, 0, 9.5, "ok", "measured"); /* 5% faster than a, more transfers */
  m.reads = 1900, m.writes = 100;
  CHECK(put(db, m) == ATTN_OK, "put c");
  expect_best(db, c, "faster beyond the factor");
  m = row("cpu:tie", u, 4096, 64, 0, 9.6, "ok", "measured"); /* within the factor of c, transfers unknown */
  CHECK(put(db, m) == ATTN_OK, "put u");
  expect_best(db, c, "unknown transfers lose the tie");
  m = row("cpu:tie", d, 4096, 64, 0, 9.7, "ok", "measured"); /* within the factor of c, fewer transfers */
  m.reads = 500, m.writes = 100;
  CHECK(put(db, m) == ATTN_OK, "put d");
  expect_best(db, d, "within the factor of the new fastest, fewer transfers");
  attn_db_close(db);
}

/* ---- read-only opens, the integrity check, interrupted runs */

static int raw_text(const char *path, const char *sql, char *buf, size_t len) {
  sqlite3 *h;
  int ok = 0;
  buf[0] = '\0';
  if (sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(h, sql, -1, &s, NULL) == SQLITE_OK) {
      if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0)) {
        snprintf(buf, len, "%s", (const char *)sqlite3_column_text(s, 0));
        ok = 1;
      }
      sqlite3_finalize(s);
    }
  }
  sqlite3_close(h);
  return ok;
}

static int exists(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0;
}

/* A fresh database at the current schema with one CPU row, closed (no -wal or -shm left). */
static void make_small_db(const char *p) {
  char err[1024];
  attn_db *db = NULL;
  rm_db(p);
  CHECK(attn_db_open(p, 1, &db, err, sizeof err) == ATTN_OK, "create %s: %s", p, err);
  if (!db) return;
  CHECK(put(db, row("cpu:ro", spec("flash", 64, 32, "f32", 0), 512, 64, 0, 0.5, "ok", "measured")) == ATTN_OK, "row");
  attn_db_close(db);
}

/* What a user who cannot write the file or its directory sees (run in a child as another user; exit status: its
 * failures). cur: current schema, WAL, no -wal/-shm; old: schema version 0. */
static int readonly_child(const char *cur, const char *old) {
  char err[1024], shm[4400], wal[4400];
  attn_db *db = NULL;
  snprintf(shm, sizeof shm, "%s-shm", cur);
  snprintf(wal, sizeof wal, "%s-wal", cur);
  /* a writer cannot, and says what to do */
  int rc = attn_db_open(cur, 0, &db, err, sizeof err);
  CHECK(rc == ATTN_EDB && !db && strstr(err, "readonly") && strstr(err, "a writer needs to write"), "writer: %d '%s'",
        rc, err);
  /* a reader can: read-only, and immutable as no -shm can be made in the directory */
  rc = attn_db_open_ex(cur, ATTN_DB_READER, &db, err, sizeof err);
  CHECK(rc == ATTN_OK && db && attn_db_readonly(db) == 1, "reader on a file it cannot write: %d '%s'", rc, err);
  if (db) {
    attn_db_query q = {.device = "cpu:ro", .d = 64, .n = 512, .dtype = ATTN_F32};
    attn_db_best b;
    CHECK(attn_db_lookup(db, &q, &b) == ATTN_OK && b.n == 512, "lookup read-only: %s", attn_db_errmsg(db));
    CHECK(attn_db_meas_count(db) == 1, "count read-only");
    CHECK(put(db, row("cpu:ro", spec("flash", 64, 64, "f32", 0), 512, 64, 0, 0.4, "ok", "measured")) == ATTN_EDB,
          "a write through a read-only handle fails");
    attn_db_close(db);
  }
  CHECK(!exists(shm) && !exists(wal), "no -wal/-shm made");
  /* an older schema: a clear refusal, not a write */
  rc = attn_db_open_ex(old, ATTN_DB_READER, &db, err, sizeof err);
  CHECK(rc == ATTN_EUNSUPPORTED && !db && strstr(err, old) &&
            strstr(err, "schema version 0 is older than this build's") &&
            strstr(err, "open it once with a writer (attntune tune/import) to migrate") && !strchr(err, '\n'),
        "old schema, read-only: %d '%s'", rc, err);
  /* the runtime opens anyway and serves defaults, saying why */
  attn_runtime *rt = NULL;
  rc = attn_open(old, ATTN_TARGET_CPU, &rt);
  CHECK(rc == ATTN_OK && rt, "attn_open on an old read-only database: %d %s", rc, attn_last_error(NULL));
  if (rt) {
    CHECK(strstr(attn_last_error(rt), "default configurations serve") && strstr(attn_last_error(rt), "is older"),
          "note '%s'", attn_last_error(rt));
    attn_close(rt);
  }
  rc = attn_open(cur, ATTN_TARGET_CPU, &rt);
  CHECK(rc == ATTN_OK && rt && !strstr(attn_last_error(rt), "database"), "attn_open read-only: %d '%s'", rc,
        rt ? attn_last_error(rt) : attn_last_error(NULL));
  attn_close(rt);
  return failures;
}

static void test_readonly_check(void) {
  char err[1024], txt[256];
  attn_db *db = NULL;
  sqlite3 *h;

  /* ATTN_DB_READONLY: no journal-mode switch, no migration, no writes */
  const char *p = path_of("ro.db");
  make_small_db(p);
  CHECK(sqlite3_open(p, &h) == SQLITE_OK && sqlite3_exec(h, "PRAGMA journal_mode = DELETE", NULL, NULL, NULL) == 0,
        "raw");
  sqlite3_close(h);
  int rc = attn_db_open_ex(p, ATTN_DB_READONLY, &db, err, sizeof err);
  CHECK(rc == ATTN_OK && db && attn_db_readonly(db) == 1, "read-only open: %d '%s'", rc, err);
  if (db) {
    CHECK(attn_db_meas_count(db) == 1, "reads");
    long long id = 0;
    CHECK(attn_db_run_begin(db, 0, "x", &id) == ATTN_EDB && strstr(attn_db_errmsg(db), "readonly"), "write: '%s'",
          attn_db_errmsg(db));
    attn_db_close(db);
  }
  CHECK(raw_text(p, "PRAGMA journal_mode", txt, sizeof txt) && strcmp(txt, "delete") == 0, "journal mode '%s'", txt);
  rc = attn_db_open_ex(path_of("ro-missing.db"), ATTN_DB_READONLY | ATTN_DB_CREATE, &db, err, sizeof err);
  CHECK(rc == ATTN_EDB && !db && strstr(err, "no such database") && !exists(path_of("ro-missing.db")),
        "read-only never creates: '%s'", err);

  /* an older schema: ATTN_EUNSUPPORTED read-only, the file untouched; a reader that can write migrates it */
  const char *old = path_of("ro-old.db");
  rm_db(old);
  CHECK(sqlite3_open(old, &h) == SQLITE_OK && sqlite3_exec(h, "CREATE TABLE t(x)", NULL, NULL, NULL) == 0, "raw");
  sqlite3_close(h);
  rc = attn_db_open_ex(old, ATTN_DB_READONLY, &db, err, sizeof err);
  CHECK(rc == ATTN_EUNSUPPORTED && !db && strstr(err, "schema version 0 is older than this build's"), "%d '%s'", rc,
        err);
  CHECK(raw_int(old, "PRAGMA user_version") == 0 && raw_int(old, "SELECT count(*) FROM sqlite_master") == 1,
        "the old file was changed");
  const char *p99 = path_of("ro-99.db");
  make_small_db(p99);
  CHECK(sqlite3_open(p99, &h) == SQLITE_OK && sqlite3_exec(h, "PRAGMA user_version = 99", NULL, NULL, NULL) == 0,
        "raw");
  sqlite3_close(h);
  rc = attn_db_open_ex(p99, ATTN_DB_READONLY, &db, err, sizeof err);
  CHECK(rc == ATTN_EDB && !db && strstr(err, "newer"), "v99 read-only: %d '%s'", rc, err);

  /* as a user who cannot write the directory or the files (root: a child as nobody) */
  char rodir[4200], cur[4300], old2[4300];
  snprintf(rodir, sizeof rodir, "%s", path_of("rodir"));
  snprintf(cur, sizeof cur, "%s/cur.db", rodir);
  snprintf(old2, sizeof old2, "%s/old.db", rodir);
  mkdir(rodir, 0755);
  CHECK(chmod(rodir, 0755) == 0, "chmod");
  make_small_db(cur);
  rm_db(old2);
  CHECK(sqlite3_open(old2, &h) == SQLITE_OK && sqlite3_exec(h, "CREATE TABLE t(x)", NULL, NULL, NULL) == 0, "raw");
  sqlite3_close(h);
  CHECK(raw_text(cur, "PRAGMA journal_mode", txt, sizeof txt) && strcmp(txt, "wal") == 0, "WAL: '%s'", txt);
  /* the raw read-only connection left -wal and -shm (it may not delete them); nothing is open now */
  unlink(path_of("rodir/cur.db-wal"));
  unlink(path_of("rodir/cur.db-shm"));
  CHECK(chmod(cur, 0444) == 0 && chmod(old2, 0444) == 0 && chmod(rodir, 0555) == 0, "chmod");
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    failures = 0;
    setenv("ATTN_CACHE_DIR", path_of("ro-cache"), 1);
    if (geteuid() == 0 && (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0)) {
      printf("test_readonly_check: SKIP the other-user part: cannot become uid 65534 (nobody)\n");
      _exit(0);
    }
    if (access(cur, R_OK) != 0) {
      printf("test_readonly_check: SKIP the other-user part: uid %d cannot reach %s\n", (int)getuid(), cur);
      _exit(0);
    }
    if (access(cur, W_OK) == 0) {
      printf("test_readonly_check: SKIP the other-user part: %s is still writable\n", cur);
      _exit(0);
    }
    _exit(readonly_child(cur, old2) > 0 ? 1 : 0);
  }
  int st = 0;
  CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
        "the read-only user's checks (above) failed: status %d", st);
  CHECK(chmod(rodir, 0755) == 0 && chmod(cur, 0644) == 0 && chmod(old2, 0644) == 0, "chmod back");
  /* the owner, who can write: a reader migrates like a writer */
  rc = attn_db_open_ex(old2, ATTN_DB_READER, &db, err, sizeof err);
  CHECK(rc == ATTN_OK && db && attn_db_readonly(db) == 0, "reader that can write: %d '%s'", rc, err);
  attn_db_close(db);
  CHECK(raw_int(old2, "PRAGMA user_version") == attn_db_schema_version(), "migrated by a reader that can write");

  /* the integrity check: a page damaged in the middle (the header still good) */
  const char *good = path_of("qc.db"), *bad = path_of("qc-bad.db");
  rm_db(good);
  CHECK(attn_db_open(good, 1, &db, err, sizeof err) == ATTN_OK, "%s", err);
  if (!db) return;
  CHECK(attn_db_begin(db) == ATTN_OK, "begin");
  for (int i = 0; i < 600; i++)
    put(db, row(i % 2 ? "cpu:qc" : "cpu:qc2", spec(i % 3 ? "flash" : "smallcache", 64, 16 << (i % 4), "f32", i & 1),
                64 + i, 64, i & 1, 0.5 + i, i % 5 ? "ok" : "wrong", "measured"));
  CHECK(attn_db_commit(db) == ATTN_OK, "commit");
  attn_db_close(db);
  FILE *f = fopen(good, "rb");
  long size = -1;
  unsigned char *bytes = NULL;
  if (f && fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
      (bytes = malloc((size_t)size)) && fread(bytes, 1, (size_t)size, f) != (size_t)size)
    size = -1;
  if (f) fclose(f);
  const long page = raw_int(good, "PRAGMA page_size");
  CHECK(size > 8 * page && bytes && page > 0, "database of %ld bytes, pages of %ld", size, page);
  int found = 0;
  /* 16 bytes of 0xff in the middle of a page, from the middle of the file on, until quick_check objects */
  for (long pg = size / page / 2; bytes && size > 0 && !found && pg < size / page; pg++) {
    rm_db(bad);
    unsigned char *copy = malloc((size_t)size);
    if (!copy) break;
    memcpy(copy, bytes, (size_t)size);
    memset(copy + pg * page + page / 2, 0xff, 16);
    f = fopen(bad, "wb");
    int wrote = f && fwrite(copy, 1, (size_t)size, f) == (size_t)size;
    if (f && fclose(f) != 0) wrote = 0;
    free(copy);
    CHECK(wrote, "writing %s", bad);
    found = raw_text(bad, "PRAGMA quick_check", txt, sizeof txt) && strcmp(txt, "ok") != 0 &&
            raw_int(bad, "PRAGMA user_version") == attn_db_schema_version() &&
            raw_int(bad, "SELECT count(*) FROM measurements") == 600;
  }
  free(bytes);
  CHECK(found, "no page whose damage quick_check sees");
  if (found) {
    rc = attn_db_open(bad, 0, &db, err, sizeof err);
    CHECK(rc == ATTN_EDB && !db && strstr(err, bad) && strstr(err, "damaged database (PRAGMA quick_check: ") &&
              !strchr(err, '\n'),
          "a writer refuses a damaged file: %d '%s'", rc, err);
    rc = attn_db_open_ex(bad, ATTN_DB_CHECK, &db, err, sizeof err);
    CHECK(rc == ATTN_EDB && !db, "ATTN_DB_CHECK: %d", rc);
    /* readers (the runtime, show) do not pay for the check */
    rc = attn_db_open_ex(bad, ATTN_DB_READONLY, &db, err, sizeof err);
    CHECK(rc == ATTN_OK && db, "read-only open is not checked: %d '%s'", rc, err);
    attn_db_close(db);
    rc = attn_db_open_ex(bad, ATTN_DB_READER, &db, err, sizeof err);
    CHECK(rc == ATTN_OK && db, "reader open is not checked: %d '%s'", rc, err);
    attn_db_close(db);
  }
  rc = attn_db_open(good, 0, &db, err, sizeof err);
  CHECK(rc == ATTN_OK && db, "the good file passes: %s", err);

  /* a run whose process died: marked interrupted only while still running */
  long long r1 = 0, r2 = 0;
  int changed = -1;
  if (db) {
    CHECK(attn_db_run_begin(db, 0, "tune a", &r1) == ATTN_OK && attn_db_run_begin(db, 0, "tune b", &r2) == ATTN_OK,
          "runs");
    CHECK(attn_db_run_end(db, r2, "done") == ATTN_OK, "end");
    CHECK(attn_db_run_interrupt(db, r1, &changed) == ATTN_OK && changed == 1, "interrupt a running run: %d", changed);
    CHECK(attn_db_run_interrupt(db, r2, &changed) == ATTN_OK && changed == 0, "a done run: %d", changed);
    attn_db_close(db);
  }
  char sql[128];
  snprintf(sql, sizeof sql, "SELECT status || ' ' || ifnull(ended, '-') FROM runs WHERE id = %lld", r1);
  CHECK(raw_text(good, sql, txt, sizeof txt) && strcmp(txt, "interrupted -") == 0, "run a: '%s'", txt);
  snprintf(sql, sizeof sql, "SELECT status FROM runs WHERE id = %lld", r2);
  CHECK(raw_text(good, sql, txt, sizeof txt) && strcmp(txt, "done") == 0, "run b: '%s'", txt);
}

/* Schema 6: a model row's bound round-trips through put, exists, foreach and the best view (NULL on rows without one);
 * compiled resources by (spec, compiler); a version-5 database gains both in place. */
typedef struct { int rows, with_bound; char first[32]; } bound_seen;
static int see_bound(void *ctx, const attn_db_meas *m) {
  bound_seen *b = ctx;
  b->rows++;
  if (m->bound) {
    if (!b->with_bound++) snprintf(b->first, sizeof b->first, "%s", m->bound);
  }
  return 0;
}

static void test_model_schema(void) {
  char err[1024];
  attn_db *db = NULL;
  const char *p = path_of("model6.db");
  rm_db(p);
  CHECK(attn_db_open(p, 1, &db, err, sizeof err) == ATTN_OK, "%s", err);
  if (!db) return;
  attn_db_meas m = row("H100", spec("flash", 128, 128, "f32", 0), 4096, 128, 0, 0.4, "ok", "model");
  m.bound = "tensor_cores";
  CHECK(put(db, m) == ATTN_OK, "model row with a bound");
  attn_db_meas got;
  CHECK(attn_db_meas_exists(db, &m, &got) == 1 && got.bound && strcmp(got.bound, "tensor_cores") == 0,
        "bound back: %s", got.bound ? got.bound : "(null)");
  attn_db_meas r = row("H100", spec("flash", 128, 64, "f32", 0), 4096, 128, 0, 0.5, "ok", "measured");
  CHECK(put(db, r) == ATTN_OK && attn_db_meas_exists(db, &r, &got) == 1 && got.bound == NULL, "no bound: NULL");
  bound_seen all = {0}, best = {0};
  CHECK(attn_db_meas_foreach(db, see_bound, &all) == 0 && all.rows == 2 && all.with_bound == 1 &&
            strcmp(all.first, "tensor_cores") == 0,
        "foreach: %d rows, %d with a bound", all.rows, all.with_bound);
  CHECK(attn_db_best_foreach(db, see_bound, &best) == 0 && best.rows == 1 && best.with_bound == 0,
        "best: the measured row, without a bound (%d rows, %d bounds)", best.rows, best.with_bound);
  int regs = 0;
  long spill = -1, smem = -1;
  const char *ks = "flash cuda bf16 d=128 br=128 bc=64 causal=0 unroll=0 warps=4 stages=2 arch=sm_90 tile=0 "
                   "feature=taylor degree=0 rank=0 seed=0";
  CHECK(attn_db_kres_get(db, ks, "nvrtc 13.0", &regs, &spill, &smem) == ATTN_EUNSUPPORTED, "resources absent");
  CHECK(attn_db_kres_put(db, ks, "nvrtc 13.0", 254, 0, 16) == ATTN_OK &&
            attn_db_kres_get(db, ks, "nvrtc 13.0", &regs, &spill, &smem) == ATTN_OK && regs == 254 && spill == 0 &&
            smem == 16,
        "resources %d %ld %ld", regs, spill, smem);
  CHECK(attn_db_kres_get(db, ks, "nvrtc 12.4", &regs, &spill, &smem) == ATTN_EUNSUPPORTED, "another compiler");
  attn_db_close(db);
  /* a version-5 database: its rows stay, and gain both */
  p = path_of("model5.db");
  rm_db(p);
  CHECK(attn_db_open(p, 1, &db, err, sizeof err) == ATTN_OK, "%s", err);
  attn_db_close(db);
  sqlite3 *h = NULL;
  CHECK(sqlite3_open(p, &h) == SQLITE_OK, "raw open");
  CHECK(sqlite3_exec(h,
                     "DROP TABLE kernel_resources; DROP VIEW best; ALTER TABLE measurements DROP COLUMN bound; "
                     "DROP INDEX measurements_lookup; ALTER TABLE measurements DROP COLUMN d_v; "
                     "ALTER TABLE kernels DROP COLUMN d_v; "
                     "CREATE INDEX measurements_lookup ON measurements(device_id, d, dtype, causal, status); "
                     "PRAGMA user_version = 5;",
                     NULL, NULL, NULL) == SQLITE_OK,
        "back to version 5: %s", sqlite3_errmsg(h));
  sqlite3_close(h);
  db = NULL;
  CHECK(attn_db_open(p, 1, &db, err, sizeof err) == ATTN_OK, "reopen v5: %s", err);
  CHECK(raw_int(p, "PRAGMA user_version") == attn_db_schema_version(), "migrated to %d",
        raw_int(p, "PRAGMA user_version"));
  if (db) {
    CHECK(put(db, m) == ATTN_OK && attn_db_kres_put(db, ks, "nvrtc 13.0", 200, 8, 0) == ATTN_OK, "after migration");
    attn_db_close(db);
  }
}

/* d_v (schema 7): a version-6 database migrates with d_v = d (or its kernel's " dv=N"); d_v is part of the problem,
 * so the lookup, the best view and the finalist round's marks never mix a d_v = d row with a d_v != d one. */
static const char *spec_dv(int d, int dv, int br) {
  static char buf[8][512];
  static int k;
  char *p = buf[k++ % 8];
  snprintf(p, 512, "%s dv=%d", spec("flash", d, br, "f32", 0), dv);
  return p;
}

typedef struct {
  int rows, dv64, dv128;
} dv_ctx;

static int dv_cb(void *ctx, const attn_db_meas *m) {
  dv_ctx *c = ctx;
  if (strcmp(m->device, "cpu:dv") != 0) return 0;
  c->rows++;
  c->dv64 += m->d_v == 64;
  c->dv128 += m->d_v == 128;
  return 0;
}

static void test_dv(void) {
  char err[1024];
  attn_db *db = NULL;
  /* a version-6 database with a d_v = d row and one whose kernel text names dv */
  const char *p6 = path_of("dv6.db");
  rm_db(p6);
  CHECK(attn_db_open(p6, 1, &db, err, sizeof err) == ATTN_OK, "%s", err);
  attn_db_close(db);
  db = NULL;
  sqlite3 *h = NULL;
  char sql[4096];
  snprintf(sql, sizeof sql,
           "DROP VIEW best; DROP INDEX measurements_lookup; ALTER TABLE measurements DROP COLUMN d_v; "
           "ALTER TABLE kernels DROP COLUMN d_v; "
           "CREATE INDEX measurements_lookup ON measurements(device_id, d, dtype, causal, status); "
           "CREATE VIEW best AS SELECT * FROM measurements; "
           "INSERT INTO devices(name, kind) VALUES ('cpu:old', 'cpu'); "
           "INSERT INTO kernels(spec, algo, target, dtype, d) VALUES ('%s', 'flash', 'cpu', 'f32', 64); "
           "INSERT INTO kernels(spec, algo, target, dtype, d) VALUES ('%s', 'flash', 'cpu', 'f32', 64); "
           "INSERT INTO measurements(device_id, kernel_id, n, n_kv, d, dtype, causal, batch, heads, heads_kv, time_ms,"
           " status, provenance) VALUES (1, 1, 512, 512, 64, 'f32', 0, 1, 1, 1, 0.5, 'ok', 'measured'), "
           "(1, 2, 512, 512, 64, 'f32', 0, 1, 1, 1, 0.25, 'ok', 'measured'); "
           "PRAGMA user_version = 6;",
           spec("flash", 64, 32, "f32", 0), spec_dv(64, 128, 32));
  CHECK(sqlite3_open(p6, &h) == SQLITE_OK && sqlite3_exec(h, sql, NULL, NULL, NULL) == SQLITE_OK,
        "back to version 6: %s", sqlite3_errmsg(h));
  sqlite3_close(h);
  CHECK(attn_db_open(p6, 0, &db, err, sizeof err) == ATTN_OK, "open v6: %s", err);
  CHECK(raw_int(p6, "PRAGMA user_version") == attn_db_schema_version(), "v6 migrated to %d",
        raw_int(p6, "PRAGMA user_version"));
  CHECK(raw_int(p6, "SELECT d_v FROM measurements WHERE kernel_id = 1") == 64, "old row: d_v = d");
  CHECK(raw_int(p6, "SELECT d_v FROM measurements WHERE kernel_id = 2") == 128, "old dv= row: its kernel's d_v");
  CHECK(raw_int(p6, "SELECT count(*) FROM measurements WHERE d_v = 0") == 0, "no d_v 0 after the migration");
  CHECK(raw_int(p6, "SELECT count(*) FROM best") == 2, "best view: two problems");
  if (db) {
    attn_db_best b;
    attn_db_query q = {.device = "cpu:old", .d = 64, .n = 512, .dtype = ATTN_F32};
    CHECK(attn_db_lookup(db, &q, &b) == ATTN_OK && b.time_ms == 0.5, "d_v 0 -> the d_v = d row (%g)", b.time_ms);
    q.d_v = 64;
    CHECK(attn_db_lookup(db, &q, &b) == ATTN_OK && b.time_ms == 0.5, "d_v = d -> the d_v = d row (%g)", b.time_ms);
    q.d_v = 128;
    CHECK(attn_db_lookup(db, &q, &b) == ATTN_OK && b.time_ms == 0.25 && strstr(b.spec, " dv=128"),
          "d_v 128 -> its row: %s", b.spec);
    q.d_v = 32;
    CHECK(attn_db_lookup(db, &q, &b) == ATTN_EUNSUPPORTED, "d_v 32: no row");
    attn_db_close(db);
    db = NULL;
  }

  /* rows put now: d_v from the row, else from the kernel text */
  const char *p = path_of("dv.db");
  rm_db(p);
  CHECK(attn_db_open(p, 1, &db, err, sizeof err) == ATTN_OK, "%s", err);
  if (!db) return;
  const char *dev = "cpu:dv", *same = spec("flash", 64, 64, "f32", 0), *wide = spec_dv(64, 128, 64);
  attn_db_meas m = row(dev, same, 1024, 64, 0, 2.0, "ok", "measured");
  CHECK(put(db, m) == ATTN_OK, "put d_v = d");
  attn_db_meas w = row(dev, wide, 1024, 64, 0, 1.0, "ok", "measured"); /* d_v 0: the kernel's 128 */
  CHECK(put(db, w) == ATTN_OK, "put d_v from the kernel");
  attn_db_meas w2 = row(dev, spec_dv(64, 128, 32), 1024, 64, 0, 1.5, "ok", "measured");
  w2.d_v = 128;
  CHECK(put(db, w2) == ATTN_OK, "put d_v given");
  dv_ctx all = {0}, best = {0};
  CHECK(attn_db_meas_foreach(db, dv_cb, &all) == 0 && all.rows == 3 && all.dv64 == 1 && all.dv128 == 2,
        "foreach d_v: %d rows, %d d_v=64, %d d_v=128", all.rows, all.dv64, all.dv128);
  CHECK(attn_db_best_foreach(db, dv_cb, &best) == 0 && best.rows == 2 && best.dv64 == 1 && best.dv128 == 1,
        "best: one row per d_v (%d rows)", best.rows);
  attn_db_best b;
  attn_db_query q = {.device = dev, .d = 64, .n = 1024, .dtype = ATTN_F32};
  CHECK(attn_db_lookup(db, &q, &b) == ATTN_OK && strcmp(b.spec, same) == 0,
        "d_v = d never served the faster d_v = 128 row: %s", b.spec);
  q.d_v = 128;
  CHECK(attn_db_lookup(db, &q, &b) == ATTN_OK && strcmp(b.spec, wide) == 0, "d_v = 128 -> %s", b.spec);
  q.n = 4000; /* nearest n within the same d_v only */
  CHECK(attn_db_lookup(db, &q, &b) == ATTN_OK && strcmp(b.spec, wide) == 0, "d_v = 128, n 4000 -> %s", b.spec);
  q.d_v = 256;
  CHECK(attn_db_lookup(db, &q, &b) == ATTN_EUNSUPPORTED, "d_v = 256: no row");
  q.d_v = 64;
  q.d = 128; /* d and d_v swapped: another problem */
  CHECK(attn_db_lookup(db, &q, &b) == ATTN_EUNSUPPORTED, "d 128 d_v 64: no row");
  /* a d_v = d problem served by no row when only d_v != d rows are stored */
  attn_db_meas o = row("cpu:dvonly", wide, 1024, 64, 0, 1.0, "ok", "measured");
  CHECK(put(db, o) == ATTN_OK, "put");
  attn_db_query qo = {.device = "cpu:dvonly", .d = 64, .n = 1024, .dtype = ATTN_F32};
  CHECK(attn_db_lookup(db, &qo, &b) == ATTN_EUNSUPPORTED, "only d_v != d rows: a d_v = d miss");
  /* the finalist round's marks are per problem: choosing in d_v = 128 leaves d_v = d's choice alone */
  CHECK(attn_db_meas_choose(db, &m) == ATTN_OK && attn_db_meas_choose(db, &w2) == ATTN_OK, "choose");
  attn_db_meas got;
  CHECK(attn_db_meas_exists(db, &m, &got) == 1 && got.chosen == 1, "d_v = d row still chosen");
  CHECK(attn_db_meas_exists(db, &w2, &got) == 1 && got.chosen == 1, "d_v = 128 row chosen");
  CHECK(attn_db_meas_exists(db, &w, &got) == 1 && got.chosen == 0, "the other d_v = 128 row not chosen");
  q.d = 64;
  q.d_v = 128;
  q.n = 1024;
  CHECK(attn_db_lookup(db, &q, &b) == ATTN_OK && b.chosen && strstr(b.spec, "br=32"), "chosen d_v=128: %s", b.spec);
  attn_db_meas bad = w;
  bad.d_v = -1;
  CHECK(attn_db_meas_put(db, &bad) == ATTN_EINVAL, "d_v -1 refused");
  attn_db_close(db);
}

int main(int argc, char **argv) {
  snprintf(dir, sizeof dir, "%s", argc > 1 ? argv[1] : "db-unit-work");
  mkdir(dir, 0755);
  unsetenv("ATTN_DB_TIMEOUT_MS");
  test_open();
  test_not_a_db();
  test_migrate();
  test_lookup();
  test_lookup_shape();
  test_tie();
  test_artifacts();
  test_model_schema();
  test_dv();
  test_locked();
  test_concurrent();
  test_readonly_check();
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
