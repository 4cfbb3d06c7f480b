/* schema.c: the schema's history. Migration 1 is schema.sql (embedded by CMake); every later one is here, applied in
 * order, each recorded in PRAGMA user_version, all in one transaction, so that a database of any past version opens
 * at this build's. A migration once shipped is never edited: databases in the field have been through it. */
#include "db_int.h"

extern const char attn_schema_sql[]; /* schema.sql, embedded by CMake */

/* Migration i takes a database from user_version i to i + 1. 1: schema.sql (the initial tables).
 * 2: the lookup index and the `best` view (kept apart so a version-1 database gains them in place). */
static const char migration2[] =
    "CREATE INDEX measurements_lookup ON measurements(device_id, d, dtype, causal, status);\n"
    "CREATE VIEW best AS\n"
    "SELECT id, run_id, device, spec, source_hash, n, n_kv, d, dtype, causal, batch, heads, heads_kv, time_ms,\n"
    "       gflops, reads, writes, error, status, log, provenance, created, device_id, kernel_id, algo\n"
    "FROM (SELECT m.*, dv.name AS device, k.spec AS spec, k.source_hash AS source_hash, k.algo AS algo,\n"
    "             row_number() OVER (PARTITION BY m.device_id, m.d, m.n, m.dtype, m.causal\n"
    "                                ORDER BY k.algo = 'lowrank', m.provenance <> 'measured', m.time_ms, m.id) AS pos\n"
    "      FROM measurements m JOIN kernels k ON k.id = m.kernel_id JOIN devices dv ON dv.id = m.device_id\n"
    "      WHERE m.status = 'ok' AND m.time_ms > 0)\n"
    "WHERE pos = 1;\n";

/* The best view from version 3 on (db.h's rule): per problem (key; key_m: the same on m), times within the tie factor
 * of the fastest of the same class (exact or lowrank, measured or modelled) are equal; then fewer entries moved, then
 * time. more_cols: the columns later versions add; chosen: the finalist round's choice first (version 4 on). */
#define BEST_VIEW(more_cols, key, key_m, chosen)                                                                     \
  "CREATE VIEW best AS\n"                                                                                            \
  "SELECT id, run_id, device, spec, source_hash, n, n_kv, d, dtype, causal, batch, heads, heads_kv, time_ms,\n"      \
  "       gflops, reads, writes, error, status, log, provenance, created, device_id, kernel_id, algo" more_cols "\n"  \
  "FROM (SELECT *, row_number() OVER (PARTITION BY " key "\n"                                                         \
  "                                   ORDER BY algo = 'lowrank', provenance <> 'measured'," chosen "\n"              \
  "                                            time_ms > " ATTN_DB_TIE_FACTOR_SQL " * tmin, io, time_ms, id) AS pos\n" \
  "      FROM (SELECT m.*, dv.name AS device, k.spec AS spec, k.source_hash AS source_hash, k.algo AS algo,\n"       \
  "                   coalesce(m.reads + m.writes, 9e18) AS io,\n"                                                   \
  "                   min(m.time_ms) OVER (PARTITION BY " key_m ",\n"                                                 \
  "                                        k.algo = 'lowrank', m.provenance <> 'measured') AS tmin\n"                \
  "            FROM measurements m JOIN kernels k ON k.id = m.kernel_id JOIN devices dv ON dv.id = m.device_id\n"    \
  "            WHERE m.status = 'ok' AND m.time_ms > 0))\n"                                                           \
  "WHERE pos = 1;\n"

/* 3: the best view with the transfer tie-break. */
static const char migration3[] =
    "DROP VIEW best;\n"
    BEST_VIEW("", "device_id, d, n, dtype, causal", "m.device_id, m.d, m.n, m.dtype, m.causal", "");

/* 4: the harness's statistics and the finalist round (db.h): repetitions, spread and load behind each time, the thread
 * count in the key (a row tuned on 2 threads is another problem than one on 32), and the round's marks. The table is
 * rebuilt because SQLite cannot change a UNIQUE constraint in place; rows keep their ids. The best view partitions by
 * the whole problem (n_kv, batch, heads, heads_kv, threads too) and puts the finalist round's choice first. */
#define BEST_KEY "device_id, d, dtype, causal, n, n_kv, batch, heads, heads_kv, threads"
#define BEST_KEY_M "m.device_id, m.d, m.dtype, m.causal, m.n, m.n_kv, m.batch, m.heads, m.heads_kv, m.threads"
#define BEST_COLS4 ",\n       threads, reps, iqr_ms, load, final, chosen, is_default"
static const char migration4[] =
    "DROP VIEW best;\n"
    "CREATE TABLE measurements4 (\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  run_id INTEGER REFERENCES runs(id) ON DELETE SET NULL,\n"
    "  device_id INTEGER NOT NULL REFERENCES devices(id),\n"
    "  kernel_id INTEGER NOT NULL REFERENCES kernels(id),\n"
    "  n INTEGER NOT NULL, n_kv INTEGER NOT NULL, d INTEGER NOT NULL,\n"
    "  dtype TEXT NOT NULL CHECK (dtype IN ('f32', 'f16', 'bf16')),\n"
    "  causal INTEGER NOT NULL CHECK (causal IN (0, 1)),\n"
    "  batch INTEGER NOT NULL, heads INTEGER NOT NULL, heads_kv INTEGER NOT NULL,\n"
    "  time_ms REAL NOT NULL, gflops REAL, reads INTEGER, writes INTEGER, error REAL,\n"
    "  status TEXT NOT NULL CHECK (status IN ('ok', 'wrong', 'compile_error', 'launch_error', 'skipped',\n"
    "                                         'invalid', 'error')),\n"
    "  log TEXT NOT NULL DEFAULT '',\n"
    "  provenance TEXT NOT NULL CHECK (provenance IN ('measured', 'model')),\n"
    "  created TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),\n"
    "  threads INTEGER NOT NULL DEFAULT 0,      -- CPU threads the kernel ran on; 0: a GPU, or not recorded\n"
    "  reps INTEGER,                            -- timed repetitions behind time_ms (NULL: not recorded)\n"
    "  iqr_ms REAL,                             -- their interquartile range\n"
    "  load REAL,                               -- other processes' CPU use meanwhile, in cores\n"
    "  final INTEGER NOT NULL DEFAULT 0,        -- 1: time_ms is from the finalist round (interleaved with the default)\n"
    "  chosen INTEGER NOT NULL DEFAULT 0,       -- 1: the finalist round's choice for this problem\n"
    "  is_default INTEGER NOT NULL DEFAULT 0,   -- 1: the untuned default configuration of this problem\n"
    "  UNIQUE (device_id, kernel_id, n, n_kv, dtype, causal, batch, heads, heads_kv, threads, provenance)\n"
    ");\n"
    "INSERT INTO measurements4(id, run_id, device_id, kernel_id, n, n_kv, d, dtype, causal, batch, heads, heads_kv,\n"
    "  time_ms, gflops, reads, writes, error, status, log, provenance, created)\n"
    "SELECT id, run_id, device_id, kernel_id, n, n_kv, d, dtype, causal, batch, heads, heads_kv, time_ms, gflops,\n"
    "  reads, writes, error, status, log, provenance, created FROM measurements;\n"
    "DROP TABLE measurements;\n"
    "ALTER TABLE measurements4 RENAME TO measurements;\n"
    "CREATE INDEX measurements_kernel ON measurements(kernel_id);\n"
    "CREATE INDEX measurements_run ON measurements(run_id);\n"
    "CREATE INDEX measurements_lookup ON measurements(device_id, d, dtype, causal, status);\n"
    BEST_VIEW(BEST_COLS4, BEST_KEY, BEST_KEY_M, " chosen DESC,");

/* 5: the content hash of every artifact, checked before its bytes are handed out (db.h). Rows from before have
 * none and are never handed out: the kernel is compiled again and stored with one. */
static const char migration5[] = "ALTER TABLE artifacts ADD COLUMN sha256 TEXT;\n";

/* 6: the performance model's account of its rows (db.h): `bound`, what limits a model row's time (NULL on measured
 * rows and on rows from before), in the table and the best view; and `kernel_resources`, what ptxas reports for a
 * compiled configuration (registers, spills, static shared memory) per compiler, so that the model and the search
 * space read a kernel's real needs without compiling it again. */
static const char migration6[] =
    "ALTER TABLE measurements ADD COLUMN bound TEXT;\n"
    "DROP VIEW IF EXISTS best;\n"
    BEST_VIEW(BEST_COLS4 ", bound", BEST_KEY, BEST_KEY_M, " chosen DESC,")
    "CREATE TABLE kernel_resources (\n"
    "  spec        TEXT NOT NULL,      -- canonical spec text (it names the arch)\n"
    "  compiler    TEXT NOT NULL,      -- \"nvrtc 13.0\"\n"
    "  registers   INTEGER NOT NULL,   -- per thread\n"
    "  spill_bytes INTEGER NOT NULL,   -- spill stores + loads\n"
    "  smem_static INTEGER NOT NULL,   -- bytes, beyond the template's dynamic shared memory\n"
    "  created     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),\n"
    "  PRIMARY KEY (spec, compiler)\n"
    ");\n";

/* 7: the head dimension of V and O, d_v, in the problem key (MLA: d = 576, d_v = 512). Rows from before get the d_v of
 * their kernel: the " dv=N" of its spec text, else d (every row stored before d_v existed has d_v = d); the column is
 * never 0 after this migration. kernels gain d_v the same way. The kernel in the unique key already tells rows of two
 * d_v apart; the lookup index, the finalist round's marks and the best view take d_v as part of the problem. */
#define BEST_KEY7 "device_id, d, d_v, dtype, causal, n, n_kv, batch, heads, heads_kv, threads"
#define BEST_KEY7_M "m.device_id, m.d, m.d_v, m.dtype, m.causal, m.n, m.n_kv, m.batch, m.heads, m.heads_kv, m.threads"
#define SPEC_DV(spec, d)                                                                                             \
  "coalesce(CASE WHEN instr(" spec ", ' dv=') > 0 "                                                                    \
  "THEN CAST(substr(" spec ", instr(" spec ", ' dv=') + 4) AS INTEGER) END, " d ")"
static const char migration7[] =
    "ALTER TABLE kernels ADD COLUMN d_v INTEGER;\n"
    "UPDATE kernels SET d_v = " SPEC_DV("spec", "d") ";\n"
    "ALTER TABLE measurements ADD COLUMN d_v INTEGER NOT NULL DEFAULT 0;\n"
    "UPDATE measurements SET d_v = coalesce((SELECT k.d_v FROM kernels k WHERE k.id = kernel_id), d);\n"
    "DROP INDEX IF EXISTS measurements_lookup;\n"
    "CREATE INDEX measurements_lookup ON measurements(device_id, d, d_v, dtype, causal, status);\n"
    "DROP VIEW IF EXISTS best;\n"
    BEST_VIEW(BEST_COLS4 ", bound, d_v", BEST_KEY7, BEST_KEY7_M, " chosen DESC,");

/* 8: the pass (fwd: the forward, bwd: the backward, attn_execute_backward's kernel) and the variant (a canonical text
 * of score modifiers and KV layout: window, softcap, ALiBi, paged, varlen; '' for dense attention) in the problem key:
 * a backward's row has the forward's kernel text (gen/spec.h), and neither a pass nor a variant ever serves another's
 * problem. The table is rebuilt (a UNIQUE constraint cannot change in place); rows keep their ids and become fwd ''. */
#define BEST_KEY8 BEST_KEY7 ", pass, variant"
#define BEST_KEY8_M BEST_KEY7_M ", m.pass, m.variant"
static const char migration8[] =
    "DROP VIEW IF EXISTS best;\n"
    "CREATE TABLE measurements8 (\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  run_id INTEGER REFERENCES runs(id) ON DELETE SET NULL,\n"
    "  device_id INTEGER NOT NULL REFERENCES devices(id),\n"
    "  kernel_id INTEGER NOT NULL REFERENCES kernels(id),\n"
    "  n INTEGER NOT NULL, n_kv INTEGER NOT NULL, d INTEGER NOT NULL,\n"
    "  dtype TEXT NOT NULL CHECK (dtype IN ('f32', 'f16', 'bf16')),\n"
    "  causal INTEGER NOT NULL CHECK (causal IN (0, 1)),\n"
    "  batch INTEGER NOT NULL, heads INTEGER NOT NULL, heads_kv INTEGER NOT NULL,\n"
    "  time_ms REAL NOT NULL, gflops REAL, reads INTEGER, writes INTEGER, error REAL,\n"
    "  status TEXT NOT NULL CHECK (status IN ('ok', 'wrong', 'compile_error', 'launch_error', 'skipped',\n"
    "                                         'invalid', 'error')),\n"
    "  log TEXT NOT NULL DEFAULT '',\n"
    "  provenance TEXT NOT NULL CHECK (provenance IN ('measured', 'model')),\n"
    "  created TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),\n"
    "  threads INTEGER NOT NULL DEFAULT 0, reps INTEGER, iqr_ms REAL, load REAL,\n"
    "  final INTEGER NOT NULL DEFAULT 0, chosen INTEGER NOT NULL DEFAULT 0, is_default INTEGER NOT NULL DEFAULT 0,\n"
    "  bound TEXT, d_v INTEGER NOT NULL DEFAULT 0,\n"
    "  pass TEXT NOT NULL DEFAULT 'fwd' CHECK (pass IN ('fwd', 'bwd')),  -- the forward or the backward\n"
    "  variant TEXT NOT NULL DEFAULT '',                                 -- score modifiers, KV layout; '': dense\n"
    "  UNIQUE (device_id, kernel_id, n, n_kv, dtype, causal, batch, heads, heads_kv, threads, provenance, pass,\n"
    "          variant)\n"
    ");\n"
    "INSERT INTO measurements8(id, run_id, device_id, kernel_id, n, n_kv, d, dtype, causal, batch, heads, heads_kv,\n"
    "  time_ms, gflops, reads, writes, error, status, log, provenance, created, threads, reps, iqr_ms, load, final,\n"
    "  chosen, is_default, bound, d_v)\n"
    "SELECT id, run_id, device_id, kernel_id, n, n_kv, d, dtype, causal, batch, heads, heads_kv, time_ms, gflops,\n"
    "  reads, writes, error, status, log, provenance, created, threads, reps, iqr_ms, load, final, chosen,\n"
    "  is_default, bound, d_v FROM measurements;\n"
    "DROP TABLE measurements;\n"
    "ALTER TABLE measurements8 RENAME TO measurements;\n"
    "CREATE INDEX measurements_kernel ON measurements(kernel_id);\n"
    "CREATE INDEX measurements_run ON measurements(run_id);\n"
    "CREATE INDEX measurements_lookup ON measurements(device_id, d, d_v, dtype, causal, pass, variant, status);\n"
    BEST_VIEW(BEST_COLS4 ", bound, d_v, pass, variant", BEST_KEY8, BEST_KEY8_M, " chosen DESC,");

static const struct {
  const char *sql;        /* NULL: attn_schema_sql */
  const char *set_version;
} migrations[] = {
    {NULL, "PRAGMA user_version = 1"},
    {migration2, "PRAGMA user_version = 2"},
    {migration3, "PRAGMA user_version = 3"},
    {migration4, "PRAGMA user_version = 4"},
    {migration5, "PRAGMA user_version = 5"},
    {migration6, "PRAGMA user_version = 6"},
    {migration7, "PRAGMA user_version = 7"},
    {migration8, "PRAGMA user_version = 8"},
};
#define ATTN_DB_VERSION ((int)(sizeof migrations / sizeof migrations[0]))

int attn_db_schema_version(void) { return ATTN_DB_VERSION; }

/* PRAGMA user_version, retried while busy until the timeout. */
int attn_dbi_read_version(attn_db *db, int *v) {
  *v = 0;
  sqlite3_stmt *s = attn_dbi_stmt(db, S_VERSION, "PRAGMA user_version");
  if (!s) return ATTN_EDB;
  double t0 = attn_dbi_now_ms();
  for (;;) {
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) *v = sqlite3_column_int(s, 0);
    sqlite3_reset(s);
    if (rc == SQLITE_ROW) return ATTN_OK;
    if ((rc & 0xff) != SQLITE_BUSY || attn_dbi_now_ms() - t0 >= db->timeout_ms)
      return attn_dbi_sqlfail(db, "reading the schema version");
    attn_dbi_nap_ms(10);
  }
}

int attn_dbi_migrate(attn_db *db) {
  int v = 0;
  if (attn_dbi_read_version(db, &v) != ATTN_OK) return ATTN_EDB;
  if (v == ATTN_DB_VERSION) return ATTN_OK;
  int rc = attn_dbi_write_begin(db);
  if (rc != ATTN_OK) return rc;
  /* another process may have migrated while we waited for the lock */
  rc = attn_dbi_read_version(db, &v);
  if (rc == ATTN_OK && v > ATTN_DB_VERSION) {
    rc = attn_dbi_fail(db, ATTN_EDB, "schema version %d is newer than this build understands (%d)", v,
                       ATTN_DB_VERSION);
  }
  for (int i = v; rc == ATTN_OK && i < ATTN_DB_VERSION; i++) {
    char *msg = NULL;
    if (sqlite3_exec(db->h, migrations[i].sql ? migrations[i].sql : attn_schema_sql, NULL, NULL, &msg) != SQLITE_OK ||
        sqlite3_exec(db->h, migrations[i].set_version, NULL, NULL, &msg) != SQLITE_OK) {
      rc = attn_dbi_fail(db, ATTN_EDB, "migration to schema version %d: %s", i + 1,
                         msg ? msg : sqlite3_errmsg(db->h));
    }
    sqlite3_free(msg);
  }
  return attn_dbi_write_end(db, rc);
}
