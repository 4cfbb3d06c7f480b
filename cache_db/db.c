/* db.c: the tuning database on SQLite: open (WAL, busy timeout, migrations by PRAGMA user_version), the
 * runtime's lookup, compiled artifacts, and the tuner's devices, kernels, runs and measurements.
 * Every statement is prepared once per handle (SQLITE_PREPARE_PERSISTENT) and bound; no SQL is built from values. */
#define _POSIX_C_SOURCE 200809L
#include "db.h"
#include <errno.h>
#include <pthread.h>
#include <pwd.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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

/* 3: the best view with the transfer tie-break (db.h). Times within the tie factor of the fastest of the same class
 * (exact or lowrank, measured or modelled) are equal; then fewer entries moved, then time. */
static const char migration3[] =
    "DROP VIEW best;\n"
    "CREATE VIEW best AS\n"
    "SELECT id, run_id, device, spec, source_hash, n, n_kv, d, dtype, causal, batch, heads, heads_kv, time_ms,\n"
    "       gflops, reads, writes, error, status, log, provenance, created, device_id, kernel_id, algo\n"
    "FROM (SELECT *, row_number() OVER (PARTITION BY device_id, d, n, dtype, causal\n"
    "                                   ORDER BY algo = 'lowrank', provenance <> 'measured',\n"
    "                                            time_ms > " ATTN_DB_TIE_FACTOR_SQL " * tmin, io, time_ms, id) AS pos\n"
    "      FROM (SELECT m.*, dv.name AS device, k.spec AS spec, k.source_hash AS source_hash, k.algo AS algo,\n"
    "                   coalesce(m.reads + m.writes, 9e18) AS io,\n"
    "                   min(m.time_ms) OVER (PARTITION BY m.device_id, m.d, m.n, m.dtype, m.causal,\n"
    "                                        k.algo = 'lowrank', m.provenance <> 'measured') AS tmin\n"
    "            FROM measurements m JOIN kernels k ON k.id = m.kernel_id JOIN devices dv ON dv.id = m.device_id\n"
    "            WHERE m.status = 'ok' AND m.time_ms > 0))\n"
    "WHERE pos = 1;\n";

/* 4: the harness's statistics and the finalist round (db.h): repetitions, spread and load behind each time, the thread
 * count in the key (a row tuned on 2 threads is another problem than one on 32), and the round's marks. The table is
 * rebuilt because SQLite cannot change a UNIQUE constraint in place; rows keep their ids. The best view partitions by
 * the whole problem (n_kv, batch, heads, heads_kv, threads too) and puts the finalist round's choice first. */
#define BEST_KEY "device_id, d, dtype, causal, n, n_kv, batch, heads, heads_kv, threads"
#define BEST_KEY_M "m.device_id, m.d, m.dtype, m.causal, m.n, m.n_kv, m.batch, m.heads, m.heads_kv, m.threads"
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
    "CREATE VIEW best AS\n"
    "SELECT id, run_id, device, spec, source_hash, n, n_kv, d, dtype, causal, batch, heads, heads_kv, time_ms,\n"
    "       gflops, reads, writes, error, status, log, provenance, created, device_id, kernel_id, algo,\n"
    "       threads, reps, iqr_ms, load, final, chosen, is_default\n"
    "FROM (SELECT *, row_number() OVER (PARTITION BY " BEST_KEY "\n"
    "                                   ORDER BY algo = 'lowrank', provenance <> 'measured', chosen DESC,\n"
    "                                            time_ms > " ATTN_DB_TIE_FACTOR_SQL " * tmin, io, time_ms, id) AS pos\n"
    "      FROM (SELECT m.*, dv.name AS device, k.spec AS spec, k.source_hash AS source_hash, k.algo AS algo,\n"
    "                   coalesce(m.reads + m.writes, 9e18) AS io,\n"
    "                   min(m.time_ms) OVER (PARTITION BY " BEST_KEY_M ",\n"
    "                                        k.algo = 'lowrank', m.provenance <> 'measured') AS tmin\n"
    "            FROM measurements m JOIN kernels k ON k.id = m.kernel_id JOIN devices dv ON dv.id = m.device_id\n"
    "            WHERE m.status = 'ok' AND m.time_ms > 0))\n"
    "WHERE pos = 1;\n";

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
    "CREATE VIEW best AS\n"
    "SELECT id, run_id, device, spec, source_hash, n, n_kv, d, dtype, causal, batch, heads, heads_kv, time_ms,\n"
    "       gflops, reads, writes, error, status, log, provenance, created, device_id, kernel_id, algo,\n"
    "       threads, reps, iqr_ms, load, final, chosen, is_default, bound\n"
    "FROM (SELECT *, row_number() OVER (PARTITION BY " BEST_KEY "\n"
    "                                   ORDER BY algo = 'lowrank', provenance <> 'measured', chosen DESC,\n"
    "                                            time_ms > " ATTN_DB_TIE_FACTOR_SQL " * tmin, io, time_ms, id) AS pos\n"
    "      FROM (SELECT m.*, dv.name AS device, k.spec AS spec, k.source_hash AS source_hash, k.algo AS algo,\n"
    "                   coalesce(m.reads + m.writes, 9e18) AS io,\n"
    "                   min(m.time_ms) OVER (PARTITION BY " BEST_KEY_M ",\n"
    "                                        k.algo = 'lowrank', m.provenance <> 'measured') AS tmin\n"
    "            FROM measurements m JOIN kernels k ON k.id = m.kernel_id JOIN devices dv ON dv.id = m.device_id\n"
    "            WHERE m.status = 'ok' AND m.time_ms > 0))\n"
    "WHERE pos = 1;\n"
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
    "CREATE VIEW best AS\n"
    "SELECT id, run_id, device, spec, source_hash, n, n_kv, d, dtype, causal, batch, heads, heads_kv, time_ms,\n"
    "       gflops, reads, writes, error, status, log, provenance, created, device_id, kernel_id, algo,\n"
    "       threads, reps, iqr_ms, load, final, chosen, is_default, bound, d_v\n"
    "FROM (SELECT *, row_number() OVER (PARTITION BY " BEST_KEY7 "\n"
    "                                   ORDER BY algo = 'lowrank', provenance <> 'measured', chosen DESC,\n"
    "                                            time_ms > " ATTN_DB_TIE_FACTOR_SQL " * tmin, io, time_ms, id) AS pos\n"
    "      FROM (SELECT m.*, dv.name AS device, k.spec AS spec, k.source_hash AS source_hash, k.algo AS algo,\n"
    "                   coalesce(m.reads + m.writes, 9e18) AS io,\n"
    "                   min(m.time_ms) OVER (PARTITION BY " BEST_KEY7_M ",\n"
    "                                        k.algo = 'lowrank', m.provenance <> 'measured') AS tmin\n"
    "            FROM measurements m JOIN kernels k ON k.id = m.kernel_id JOIN devices dv ON dv.id = m.device_id\n"
    "            WHERE m.status = 'ok' AND m.time_ms > 0))\n"
    "WHERE pos = 1;\n";

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
};
#define ATTN_DB_VERSION ((int)(sizeof migrations / sizeof migrations[0]))

#define NOW "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
#define MEAS_COLS                                                                                                   \
  "m.id, m.run_id, dv.name, k.spec, k.source_hash, m.n, m.n_kv, m.d, m.dtype, m.causal, m.batch, m.heads, "       \
  "m.heads_kv, m.time_ms, m.gflops, m.reads, m.writes, m.error, m.status, m.log, m.provenance, m.created, "       \
  "m.device_id, m.kernel_id, m.threads, m.reps, m.iqr_ms, m.load, m.final, m.chosen, m.is_default, m.bound, m.d_v"

enum {
  S_BEGIN, S_COMMIT, S_ROLLBACK, S_VERSION,
  S_LOOKUP, S_ART_PUT, S_ART_GET, S_ART_DIGEST,
  S_DEV_GET, S_DEV_UPSERT, S_DEV_PUT, S_DEV_ALL,
  S_KER_GET, S_KER_UPSERT,
  S_RUN_BEGIN, S_RUN_END, S_RUN_FIND, S_RUN_PUT, S_RUN_ALL,
  S_MEAS_PUT, S_MEAS_GET, S_MEAS_UNCHOOSE, S_MEAS_CHOOSE, S_MEAS_ALL, S_MEAS_COUNT, S_BEST_ALL,
  S_KRES_GET, S_KRES_PUT,
  S_COUNT
};

static const char *const sql_text[S_COUNT] = {
    [S_BEGIN] = "BEGIN IMMEDIATE",
    [S_COMMIT] = "COMMIT",
    [S_ROLLBACK] = "ROLLBACK",
    [S_VERSION] = "PRAGMA user_version",
    [S_LOOKUP] =
        /* db.h's rule. ?6..?11: the query's n, n_kv, batch, heads, heads_kv, threads (no zeros); ?12: the decode
         * bound; ?13: the query's d_v (never 0: a d_v = d problem and a d_v != d one never share a row). Rows of
         * the other regime are kept but ranked last, so that a miss can say they exist (`other`).
         * attn_logdist is a ratio, so the product of the four orders as the sum of |log| distances does. At equal
         * distance a row on the query's threads, then one that did not record them, then the smaller problem.
         * `later`: in a problem the finalist round judged, rows it did not choose (lowrank rows are not judged by it);
         * the tie rule's fastest time is taken within (problem, provenance class, later). */
        "SELECT spec, n, time_ms, error, provenance, n_kv, batch, heads, heads_kv, threads, chosen, is_default, id, "
        "other FROM "
        "(SELECT *, min(time_ms) OVER (PARTITION BY n, n_kv, batch, heads, heads_kv, threads, model, later) AS tmin "
        "FROM (SELECT *, NOT (chosen = 1 OR lowrank OR judged = 0) AS later FROM "
        "(SELECT k.spec, m.n, m.time_ms, m.error, m.provenance, m.n_kv, m.batch, m.heads, m.heads_kv, m.threads, "
        "m.chosen, m.is_default, m.id, k.algo = 'lowrank' AS lowrank, m.provenance <> 'measured' AS model, "
        "(m.n < ?12) <> (?6 < ?12) AS other, coalesce(m.reads + m.writes, 9e18) AS io, "
        "max(m.chosen) OVER (PARTITION BY m.n, m.n_kv, m.batch, m.heads, m.heads_kv, m.threads, "
        "m.provenance <> 'measured') AS judged, "
        "attn_logdist(m.n, ?6) * attn_logdist(m.n_kv, ?7) * "
        "attn_logdist(m.batch * m.heads * 1.0 / CASE WHEN m.threads > 0 THEN m.threads ELSE ?11 END, "
        "?8 * ?9 * 1.0 / ?11) * attn_logdist(m.heads * 1.0 / m.heads_kv, ?9 * 1.0 / ?10) AS dist "
        "FROM measurements m JOIN kernels k ON k.id = m.kernel_id JOIN devices dv ON dv.id = m.device_id "
        "WHERE dv.name = ?1 AND m.d = ?2 AND m.d_v = ?13 AND m.dtype = ?3 AND m.causal = ?4 AND m.status = 'ok' "
        "AND m.time_ms > 0 "
        "AND (k.algo <> 'lowrank' OR (?5 > 0 AND m.error IS NOT NULL AND m.error <= ?5))))) "
        "ORDER BY other, model, dist, CASE threads WHEN ?11 THEN 0 WHEN 0 THEN 1 ELSE 2 END, "
        "n, n_kv, batch * heads, heads_kv, batch, threads, later, "
        "time_ms > " ATTN_DB_TIE_FACTOR_SQL " * tmin, io, time_ms, id LIMIT 1",
    [S_ART_PUT] = "INSERT OR REPLACE INTO artifacts(source_hash, compiler, flags, arch, blob, sha256) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    [S_ART_GET] = "SELECT blob, sha256 FROM artifacts WHERE source_hash = ?1 AND compiler = ?2 AND flags = ?3 "
                  "AND arch = ?4",
    [S_ART_DIGEST] = "SELECT sha256 FROM artifacts WHERE source_hash = ?1 AND compiler = ?2 AND flags = ?3 "
                     "AND arch = ?4 AND sha256 IS NOT NULL",
    [S_DEV_GET] = "SELECT id FROM devices WHERE name = ?1",
    /* kind from the description's "kind" (cpu, else a GPU), or from the name; arch from its "arch" */
    [S_DEV_UPSERT] =
        "INSERT INTO devices(name, kind, arch, info) VALUES (?1, "
        "CASE WHEN json_valid(?2) AND json_extract(?2, '$.kind') IS NOT NULL "
        "THEN CASE WHEN json_extract(?2, '$.kind') = 'cpu' THEN 'cpu' ELSE 'cuda' END "
        "WHEN ?1 LIKE 'cpu:%' THEN 'cpu' ELSE 'cuda' END, "
        "CASE WHEN json_valid(?2) THEN json_extract(?2, '$.arch') END, ?2) "
        "ON CONFLICT(name) DO UPDATE SET info = coalesce(excluded.info, info), arch = coalesce(excluded.arch, arch)",
    [S_DEV_PUT] =
        "INSERT INTO devices(name, kind, arch, info) VALUES (?1, "
        "coalesce(?2, CASE WHEN ?1 LIKE 'cpu:%' THEN 'cpu' ELSE 'cuda' END), ?3, ?4) "
        "ON CONFLICT(name) DO UPDATE SET kind = excluded.kind, arch = excluded.arch, info = excluded.info",
    [S_DEV_ALL] = "SELECT id, name, kind, arch, info FROM devices ORDER BY id",
    [S_KER_GET] = "SELECT id, source_hash FROM kernels WHERE spec = ?1",
    [S_KER_UPSERT] =
        "INSERT INTO kernels(spec, algo, target, dtype, d, source_hash, d_v) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) "
        "ON CONFLICT(spec) DO UPDATE SET source_hash = coalesce(excluded.source_hash, source_hash)",
    [S_RUN_BEGIN] = "INSERT INTO runs(device_id, command) VALUES (?1, ?2)",
    [S_RUN_END] = "UPDATE runs SET status = ?2, ended = " NOW " WHERE id = ?1",
    [S_RUN_FIND] = "SELECT id FROM runs WHERE started = ?2 AND command = ?3 "
                   "AND device_id IS (SELECT id FROM devices WHERE name = ?1)",
    [S_RUN_PUT] = "INSERT INTO runs(device_id, started, ended, command, status) VALUES "
                  "((SELECT id FROM devices WHERE name = ?1), coalesce(?2, " NOW "), ?3, ?4, coalesce(?5, 'done'))",
    [S_RUN_ALL] = "SELECT r.id, dv.name, r.started, r.ended, r.command, r.status FROM runs r "
                  "LEFT JOIN devices dv ON dv.id = r.device_id ORDER BY r.id",
    [S_MEAS_PUT] =
        "INSERT OR REPLACE INTO measurements(run_id, device_id, kernel_id, n, n_kv, d, dtype, causal, batch, heads, "
        "heads_kv, time_ms, gflops, reads, writes, error, status, log, provenance, created, threads, reps, iqr_ms, "
        "load, final, chosen, is_default, bound, d_v) VALUES "
        "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, "
        "coalesce(?20, " NOW "), ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, "
        /* d_v: the row's own, else its kernel's (the spec's " dv=N", else d) */
        "coalesce(?29, (SELECT d_v FROM kernels WHERE id = ?3), ?6))",
    [S_MEAS_GET] =
        "SELECT id, run_id, time_ms, gflops, error, reads, writes, status, log, provenance, created, threads, reps, "
        "iqr_ms, load, final, chosen, is_default, bound FROM measurements "
        "WHERE device_id = ?1 AND kernel_id = ?2 AND n = ?3 AND n_kv = ?4 AND dtype = ?5 AND causal = ?6 "
        "AND batch = ?7 AND heads = ?8 AND heads_kv = ?9 AND provenance = ?10 AND threads = ?11",
    /* the finalist round's choice: one chosen row per problem (the key without the kernel) */
    [S_MEAS_UNCHOOSE] =
        "UPDATE measurements SET chosen = 0 WHERE chosen = 1 AND device_id = ?1 AND n = ?3 AND n_kv = ?4 "
        "AND dtype = ?5 AND causal = ?6 AND batch = ?7 AND heads = ?8 AND heads_kv = ?9 AND provenance = ?10 "
        "AND threads = ?11 AND d = (SELECT d FROM kernels WHERE id = ?2) "
        "AND d_v = (SELECT coalesce(d_v, d) FROM kernels WHERE id = ?2)",
    [S_MEAS_CHOOSE] =
        "UPDATE measurements SET chosen = 1 WHERE device_id = ?1 AND kernel_id = ?2 AND n = ?3 AND n_kv = ?4 "
        "AND dtype = ?5 AND causal = ?6 AND batch = ?7 AND heads = ?8 AND heads_kv = ?9 AND provenance = ?10 "
        "AND threads = ?11",
    [S_MEAS_ALL] = "SELECT " MEAS_COLS " FROM measurements m JOIN devices dv ON dv.id = m.device_id "
                   "JOIN kernels k ON k.id = m.kernel_id ORDER BY m.id",
    [S_MEAS_COUNT] = "SELECT count(*) FROM measurements",
    [S_BEST_ALL] = "SELECT id, run_id, device, spec, source_hash, n, n_kv, d, dtype, causal, batch, heads, heads_kv, "
                   "time_ms, gflops, reads, writes, error, status, log, provenance, created, device_id, kernel_id, "
                   "threads, reps, iqr_ms, load, final, chosen, is_default, bound, d_v "
                   "FROM best ORDER BY device, dtype, causal, d, d_v, n, n_kv, batch * heads, heads_kv, threads",
    [S_KRES_GET] = "SELECT registers, spill_bytes, smem_static FROM kernel_resources WHERE spec = ?1 AND compiler = ?2",
    [S_KRES_PUT] = "INSERT OR REPLACE INTO kernel_resources(spec, compiler, registers, spill_bytes, smem_static) "
                   "VALUES (?1, ?2, ?3, ?4, ?5)",
};

struct attn_db {
  sqlite3 *h;
  sqlite3_stmt *st[S_COUNT];
  pthread_mutex_t mu;
  int in_tx;        /* inside attn_db_begin */
  int timeout_ms;
  char err[1024];
};

/* ---- helpers */

__attribute__((format(printf, 3, 4))) static int fail(attn_db *db, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(db->err, sizeof db->err, fmt, ap);
  va_end(ap);
  return code;
}

static int sqlfail(attn_db *db, const char *what) { return fail(db, ATTN_EDB, "%s: %s", what, sqlite3_errmsg(db->h)); }

static sqlite3_stmt *stmt(attn_db *db, int id) {
  if (!db->st[id] &&
      sqlite3_prepare_v3(db->h, sql_text[id], -1, SQLITE_PREPARE_PERSISTENT, &db->st[id], NULL) != SQLITE_OK) {
    sqlfail(db, "prepare");
    db->st[id] = NULL;
  }
  return db->st[id];
}

static void done(sqlite3_stmt *s) {
  if (!s) return;
  sqlite3_reset(s);
  sqlite3_clear_bindings(s);
}

static void bind_text(sqlite3_stmt *s, int i, const char *v) {
  if (v) sqlite3_bind_text(s, i, v, -1, SQLITE_TRANSIENT);
  else sqlite3_bind_null(s, i);
}

static void bind_id(sqlite3_stmt *s, int i, long long v) {
  if (v > 0) sqlite3_bind_int64(s, i, v);
  else sqlite3_bind_null(s, i);
}

static const char *dtype_text(attn_dtype t) {
  return t == ATTN_F16 ? "f16" : t == ATTN_BF16 ? "bf16" : t == ATTN_F32 ? "f32" : NULL;
}

static attn_dtype dtype_value(const char *s) {
  if (s && strcmp(s, "f16") == 0) return ATTN_F16;
  if (s && strcmp(s, "bf16") == 0) return ATTN_BF16;
  return ATTN_F32;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void nap_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Steps a one-shot statement; SQLITE_DONE/ROW as is. */
static int step_once(attn_db *db, int id, int *rc_out) {
  sqlite3_stmt *s = stmt(db, id);
  if (!s) return ATTN_EDB;
  int rc = sqlite3_step(s);
  done(s);
  *rc_out = rc;
  return ATTN_OK;
}

/* BEGIN IMMEDIATE, retried while another writer holds the lock, until the busy timeout has passed: the busy
 * handler does most of the waiting, but SQLite skips it in some cases (WAL recovery, snapshot upgrades). */
static int write_begin(attn_db *db) {
  if (db->in_tx) return ATTN_OK;
  double t0 = now_ms();
  for (;;) {
    int rc;
    if (step_once(db, S_BEGIN, &rc) != ATTN_OK) return ATTN_EDB;
    if (rc == SQLITE_DONE) return ATTN_OK;
    if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED) return sqlfail(db, "begin transaction");
    if (now_ms() - t0 >= db->timeout_ms) {
      return fail(db, ATTN_EDB, "database is locked: another connection held it past the busy timeout (%d ms)",
                  db->timeout_ms);
    }
    nap_ms(10);
  }
}

/* Commits (rc == ATTN_OK) or rolls back our own transaction; inside attn_db_begin the caller decides. */
static int write_end(attn_db *db, int rc) {
  if (db->in_tx) return rc;
  int src;
  if (rc == ATTN_OK) {
    double t0 = now_ms();
    for (;;) {
      if (step_once(db, S_COMMIT, &src) != ATTN_OK) break;
      if (src == SQLITE_DONE) return ATTN_OK;
      if ((src & 0xff) != SQLITE_BUSY || now_ms() - t0 >= db->timeout_ms) break;
      nap_ms(10);
    }
    rc = sqlfail(db, "commit");
  }
  if (sqlite3_get_autocommit(db->h) == 0) step_once(db, S_ROLLBACK, &src);
  return rc;
}

/* The ratio max(a, b) / min(a, b): it orders rows as |ln a - ln b| does, and equal ratios (512 and 2048 seen from
 * 1024) tie exactly, so the faster row wins. */
static void logdist_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  double a = sqlite3_value_double(argv[0]), b = sqlite3_value_double(argv[1]);
  if (a <= 0 || b <= 0) {
    sqlite3_result_double(ctx, 1e300);
    return;
  }
  sqlite3_result_double(ctx, a > b ? a / b : b / a);
}

/* ---- open, migrate, close */

/* Runs constant SQL, retrying while it is busy until the timeout: switching a fresh file to WAL while another
 * process does the same can report SQLITE_BUSY without the busy handler having waited. */
static int exec_retry(attn_db *db, const char *sql) {
  double t0 = now_ms();
  for (;;) {
    char *msg = NULL;
    int rc = sqlite3_exec(db->h, sql, NULL, NULL, &msg);
    if (rc == SQLITE_OK) return ATTN_OK;
    int busy = (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED;
    if (!busy || now_ms() - t0 >= db->timeout_ms) {
      fail(db, ATTN_EDB, "%s", msg ? msg : sqlite3_errmsg(db->h));
      sqlite3_free(msg);
      return ATTN_EDB;
    }
    sqlite3_free(msg);
    nap_ms(10);
  }
}

int attn_db_schema_version(void) { return ATTN_DB_VERSION; }

static int read_version(attn_db *db, int *v) {
  *v = 0;
  sqlite3_stmt *s = stmt(db, S_VERSION);
  if (!s) return ATTN_EDB;
  double t0 = now_ms();
  for (;;) {
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) *v = sqlite3_column_int(s, 0);
    done(s);
    if (rc == SQLITE_ROW) return ATTN_OK;
    if ((rc & 0xff) != SQLITE_BUSY || now_ms() - t0 >= db->timeout_ms) return sqlfail(db, "reading the schema version");
    nap_ms(10);
  }
}

static int migrate(attn_db *db) {
  int v = 0;
  if (read_version(db, &v) != ATTN_OK) return ATTN_EDB;
  if (v == ATTN_DB_VERSION) return ATTN_OK;
  int rc = write_begin(db);
  if (rc != ATTN_OK) return rc;
  /* another process may have migrated while we waited for the lock */
  rc = read_version(db, &v);
  if (rc == ATTN_OK && v > ATTN_DB_VERSION) {
    rc = fail(db, ATTN_EDB, "schema version %d is newer than this build understands (%d)", v, ATTN_DB_VERSION);
  }
  for (int i = v; rc == ATTN_OK && i < ATTN_DB_VERSION; i++) {
    char *msg = NULL;
    if (sqlite3_exec(db->h, migrations[i].sql ? migrations[i].sql : attn_schema_sql, NULL, NULL, &msg) != SQLITE_OK ||
        sqlite3_exec(db->h, migrations[i].set_version, NULL, NULL, &msg) != SQLITE_OK) {
      rc = fail(db, ATTN_EDB, "migration to schema version %d: %s", i + 1, msg ? msg : sqlite3_errmsg(db->h));
    }
    sqlite3_free(msg);
  }
  return write_end(db, rc);
}

static int env_timeout_ms(void) {
  const char *e = getenv("ATTN_DB_TIMEOUT_MS");
  if (e && *e) {
    char *end;
    long v = strtol(e, &end, 10);
    if (*end == '\0' && v >= 0 && v <= 3600000) return (int)v;
  }
  return 5000;
}

/* ---- read-only opens and the integrity check */

/* 1 when this process may write path and the directory holding it: a writer also creates -wal and -shm (or a
 * rollback journal) beside the file. */
static int can_write(const char *path) {
  if (access(path, W_OK) != 0) return 0;
  const char *slash = strrchr(path, '/');
  if (!slash) return access(".", W_OK) == 0;
  char dir[4096];
  size_t l = slash == path ? 1 : (size_t)(slash - path);
  if (l >= sizeof dir) return 0;
  memcpy(dir, path, l);
  dir[l] = '\0';
  return access(dir, W_OK) == 0;
}

/* path as a "file:" URI with ?immutable=1 (bytes other than [A-Za-z0-9/._~-] percent-encoded); 0, or -1 if too long. */
static int immutable_uri(const char *path, char *buf, size_t len) {
  static const char hex[] = "0123456789ABCDEF";
  /* "file:///abs": an empty authority, so that a path starting with "//" is not read as a host */
  int k = snprintf(buf, len, "%s", path[0] == '/' ? "file://" : "file:");
  if (k < 0 || (size_t)k >= len) return -1;
  size_t n = (size_t)k;
  for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
    int plain = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || strchr("/._~-", *p);
    if (n + 4 >= len) return -1;
    if (plain) buf[n++] = (char)*p;
    else {
      buf[n++] = '%';
      buf[n++] = hex[*p >> 4];
      buf[n++] = hex[*p & 15];
    }
  }
  buf[n] = '\0';
  k = snprintf(buf + n, len - n, "?immutable=1");
  return k >= 0 && (size_t)k < len - n ? 0 : -1;
}

/* The settings every connection gets. */
static int setup_handle(attn_db *db) {
  sqlite3_extended_result_codes(db->h, 1);
  sqlite3_busy_timeout(db->h, db->timeout_ms);
  if (sqlite3_create_function(db->h, "attn_logdist", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL, logdist_fn, NULL,
                              NULL) != SQLITE_OK)
    return sqlfail(db, "registering attn_logdist");
  return ATTN_OK;
}

/* Closes the connection (and its statements) so that another can replace it. */
static void drop_handle(attn_db *db) {
  for (int i = 0; i < S_COUNT; i++) {
    sqlite3_finalize(db->st[i]);
    db->st[i] = NULL;
  }
  sqlite3_close(db->h);
  db->h = NULL;
}

/* ATTN_DB_READONLY (db.h): no journal-mode switch, no migration; an older schema is ATTN_EUNSUPPORTED. */
static int open_readonly(attn_db *db, const char *path) {
  if (sqlite3_open_v2(path, &db->h, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK)
    return sqlfail(db, "open");
  int v = 0, rc = setup_handle(db);
  if (rc == ATTN_OK) rc = read_version(db, &v);
  if (rc != ATTN_OK && db->h && sqlite3_extended_errcode(db->h) == SQLITE_READONLY_DIRECTORY) {
    /* WAL, and no -shm can be made in this directory. Without a -wal holding changes the file alone is the whole
     * database, and immutable=1 reads it without the shared memory (db.h says what that costs). */
    char wal[4200], uri[16384];
    struct stat ws;
    if (snprintf(wal, sizeof wal, "%s-wal", path) >= (int)sizeof wal) return fail(db, ATTN_EDB, "path too long");
    int no_changes = stat(wal, &ws) != 0 ? errno == ENOENT : ws.st_size == 0;
    if (!no_changes)
      return fail(db, ATTN_EDB, "%s holds changes, and no shared-memory file (-shm) can be made beside it (the "
                  "directory is not writable): open it once with a writer to fold them in", wal);
    if (immutable_uri(path, uri, sizeof uri) != 0) return fail(db, ATTN_EDB, "path too long");
    drop_handle(db);
    if (sqlite3_open_v2(uri, &db->h, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI, NULL) !=
        SQLITE_OK)
      return sqlfail(db, "open");
    rc = setup_handle(db);
    if (rc == ATTN_OK) rc = read_version(db, &v);
  }
  if (rc != ATTN_OK) return rc;
  if (v < ATTN_DB_VERSION)
    return fail(db, ATTN_EUNSUPPORTED, "schema version %d is older than this build's %d; open it once with a writer "
                "(attntune tune/import) to migrate", v, ATTN_DB_VERSION);
  if (v > ATTN_DB_VERSION)
    return fail(db, ATTN_EDB, "schema version %d is newer than this build understands (%d)", v, ATTN_DB_VERSION);
  return ATTN_OK;
}

/* Files that passed quick_check in this process, by (device, inode, size, mtime): a writer that reopens a file it
 * checked (the tuner's compile workers) pays once, and any change to the file is checked again. */
typedef struct {
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime;
} checked_file;
static pthread_mutex_t checked_mu = PTHREAD_MUTEX_INITIALIZER;
static checked_file checked[32];
static unsigned nchecked;

static int same_file(const checked_file *c, const struct stat *sb) {
  return c->dev == sb->st_dev && c->ino == sb->st_ino && c->size == sb->st_size &&
         c->mtime.tv_sec == sb->st_mtim.tv_sec && c->mtime.tv_nsec == sb->st_mtim.tv_nsec;
}

static int was_checked(const struct stat *sb) {
  pthread_mutex_lock(&checked_mu);
  int hit = 0;
  for (unsigned i = 0; i < nchecked && i < sizeof checked / sizeof checked[0] && !hit; i++)
    hit = same_file(&checked[i], sb);
  pthread_mutex_unlock(&checked_mu);
  return hit;
}

static void note_checked(const struct stat *sb) {
  pthread_mutex_lock(&checked_mu);
  checked_file *c = &checked[nchecked++ % (sizeof checked / sizeof checked[0])];
  c->dev = sb->st_dev;
  c->ino = sb->st_ino;
  c->size = sb->st_size;
  c->mtime = sb->st_mtim;
  pthread_mutex_unlock(&checked_mu);
}

/* PRAGMA quick_check(1): "ok", or the first complaint (a damaged page, a broken CHECK constraint), on one line. */
static int quick_check(attn_db *db) {
  sqlite3_stmt *s = NULL;
  if (sqlite3_prepare_v2(db->h, "PRAGMA quick_check(1)", -1, &s, NULL) != SQLITE_OK) {
    sqlite3_finalize(s);
    return fail(db, ATTN_EDB, "damaged database (PRAGMA quick_check: %s); restore it from a copy, or export what "
                "still reads", sqlite3_errmsg(db->h));
  }
  double t0 = now_ms();
  int src;
  while (((src = sqlite3_step(s)) & 0xff) == SQLITE_BUSY && now_ms() - t0 < db->timeout_ms) {
    sqlite3_reset(s);
    nap_ms(10);
  }
  int rc = ATTN_OK;
  char why[512];
  why[0] = '\0';
  if (src == SQLITE_ROW) {
    const char *t = (const char *)sqlite3_column_text(s, 0);
    if (!t || strcmp(t, "ok") != 0) snprintf(why, sizeof why, "%s", t ? t : "no answer");
  } else if ((src & 0xff) == SQLITE_BUSY) {
    rc = fail(db, ATTN_EDB, "database is locked: the integrity check waited past the busy timeout (%d ms)",
              db->timeout_ms);
  } else {
    snprintf(why, sizeof why, "%s", sqlite3_errmsg(db->h));
  }
  sqlite3_finalize(s);
  if (why[0]) {
    /* one line: drop SQLite's "*** in database main ***" heading, newlines to "; " */
    const char *w = why;
    static const char head[] = "*** in database main ***";
    if (strncmp(w, head, sizeof head - 1) == 0) w += sizeof head - 1;
    while (*w == '\n' || *w == ' ') w++;
    char flat[512];
    size_t k = 0;
    for (; *w && k + 3 < sizeof flat; w++) {
      if (*w == '\n') {
        flat[k++] = ';';
        flat[k++] = ' ';
      } else {
        flat[k++] = *w;
      }
    }
    flat[k] = '\0';
    rc = fail(db, ATTN_EDB, "damaged database (PRAGMA quick_check: %s); restore it from a copy, or export what "
              "still reads", flat);
  }
  return rc;
}

int attn_db_open_ex(const char *path, int flags, attn_db **out, char *err, size_t errlen) {
  if (out) *out = NULL;
  if (err && errlen) err[0] = '\0';
  if (!path || !*path || !out) {
    if (err && errlen) snprintf(err, errlen, "attn_db_open: %s is NULL", !out ? "out" : "path");
    return ATTN_EINVAL;
  }
  int readonly = (flags & ATTN_DB_READONLY) != 0;
  const int create = (flags & ATTN_DB_CREATE) && !readonly;
  struct stat sb;
  int exists = stat(path, &sb) == 0;
  if (!exists) {
    if (errno != ENOENT) {
      if (err && errlen) snprintf(err, errlen, "%s: %s", path, strerror(errno));
      return ATTN_EDB;
    }
    if (!create) {
      if (err && errlen) snprintf(err, errlen, "no such database: %s", path);
      return ATTN_EDB;
    }
  } else if (S_ISDIR(sb.st_mode)) {
    if (err && errlen) snprintf(err, errlen, "%s: is a directory, not a database", path);
    return ATTN_EDB;
  }
  /* readers do not pay for the check unless asked (merge's sources); one that cannot write reads read-only (db.h) */
  int check = !readonly && exists &&
              ((flags & ATTN_DB_CHECK) || (!(flags & ATTN_DB_READER) && (long long)sb.st_size <= ATTN_DB_CHECK_MAX));
  if ((flags & ATTN_DB_READER) && exists && !can_write(path)) readonly = 1;
  attn_db *db = calloc(1, sizeof *db);
  if (!db) {
    if (err && errlen) snprintf(err, errlen, "out of memory");
    return ATTN_ENOMEM;
  }
  pthread_mutex_init(&db->mu, NULL);
  db->timeout_ms = env_timeout_ms();
  int rc = ATTN_OK;
  if (readonly) {
    rc = open_readonly(db, path);
    if (rc == ATTN_OK && (flags & ATTN_DB_CHECK) && !was_checked(&sb)) {
      rc = quick_check(db);
      if (rc == ATTN_OK) note_checked(&sb);
    }
  } else if (sqlite3_open_v2(path, &db->h, SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) |
                             SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
    rc = sqlfail(db, "open");
  } else {
    rc = setup_handle(db);
    /* journal_mode is the first statement that reads the file: "file is not a database" or a lock shows here */
    if (rc == ATTN_OK) rc = exec_retry(db, "PRAGMA journal_mode = WAL");
    if (rc == ATTN_OK) rc = exec_retry(db, "PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL");
    /* before migrating: a damaged file is neither migrated nor written */
    if (rc == ATTN_OK && check && !was_checked(&sb)) {
      rc = quick_check(db);
      if (rc == ATTN_OK) note_checked(&sb);
    }
    if (rc == ATTN_OK) rc = migrate(db);
    if (rc != ATTN_OK && (sqlite3_extended_errcode(db->h) & 0xff) == SQLITE_READONLY) {
      /* SQLite's "attempt to write a readonly database" does not say what to do */
      char why[sizeof db->err];
      memcpy(why, db->err, sizeof why);
      rc = fail(db, ATTN_EDB, "%s (a writer needs to write the file and its directory; show, export and the runtime "
                "can read it)", why);
    }
  }
  if (rc != ATTN_OK) {
    if (err && errlen) snprintf(err, errlen, "%s: %s", path, db->err);
    attn_db_close(db);
    return rc;
  }
  *out = db;
  return ATTN_OK;
}

int attn_db_open(const char *path, int create, attn_db **out, char *err, size_t errlen) {
  return attn_db_open_ex(path, create ? ATTN_DB_CREATE : 0, out, err, errlen);
}

int attn_db_readonly(attn_db *db) { return !db || !db->h || sqlite3_db_readonly(db->h, "main") != 0; }

void attn_db_close(attn_db *db) {
  if (!db) return;
  for (int i = 0; i < S_COUNT; i++) sqlite3_finalize(db->st[i]);
  if (db->h && sqlite3_get_autocommit(db->h) == 0) sqlite3_exec(db->h, "ROLLBACK", NULL, NULL, NULL);
  sqlite3_close(db->h);
  pthread_mutex_destroy(&db->mu);
  free(db);
}

const char *attn_db_errmsg(attn_db *db) { return db ? db->err : "no database"; }

const char *attn_db_filename(attn_db *db) {
  const char *f = db ? sqlite3_db_filename(db->h, "main") : NULL;
  return f ? f : "";
}

int attn_cache_home(char *buf, size_t len) {
  /* XDG base directories: $XDG_CACHE_HOME when set to an absolute path (the spec says to ignore a relative one) */
  const char *xdg = getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/') {
    int w = snprintf(buf, len, "%s/attntune", xdg);
    return w >= 0 && (size_t)w < len ? 0 : -1;
  }
  const char *home = getenv("HOME");
  if (!home || !*home) {
    struct passwd *pw = getpwuid(getuid());
    home = pw && pw->pw_dir && *pw->pw_dir ? pw->pw_dir : "/tmp";
  }
  int w = snprintf(buf, len, "%s/.cache/attntune", home);
  return w >= 0 && (size_t)w < len ? 0 : -1;
}

int attn_db_default_path(char *buf, size_t len) {
  const char *e = getenv("ATTN_DB");
  if (e && *e) return snprintf(buf, len, "%s", e) < (int)len ? 0 : -1;
  char dir[4096];
  if (attn_cache_home(dir, sizeof dir) != 0) return -1;
  /* every missing parent too (~/.cache, a new $XDG_CACHE_HOME); a failure is left to the open, which says why */
  for (char *p = dir + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      mkdir(dir, 0755);
      *p = '/';
    }
  mkdir(dir, 0755);
  return snprintf(buf, len, "%s/attntune.db", dir) < (int)len ? 0 : -1;
}

/* ---- explicit transactions */

int attn_db_begin(attn_db *db) {
  if (!db) return ATTN_EINVAL;
  pthread_mutex_lock(&db->mu);
  int rc = db->in_tx ? fail(db, ATTN_EINVAL, "a transaction is already open") : write_begin(db);
  if (rc == ATTN_OK) db->in_tx = 1;
  pthread_mutex_unlock(&db->mu);
  return rc;
}

int attn_db_commit(attn_db *db) {
  if (!db) return ATTN_EINVAL;
  pthread_mutex_lock(&db->mu);
  int rc = ATTN_OK;
  if (db->in_tx) {
    db->in_tx = 0;
    rc = write_end(db, ATTN_OK);
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}

void attn_db_rollback(attn_db *db) {
  if (!db) return;
  pthread_mutex_lock(&db->mu);
  if (db->in_tx) {
    db->in_tx = 0;
    write_end(db, ATTN_EDB);
  }
  pthread_mutex_unlock(&db->mu);
}

/* ---- lookup */

int attn_db_lookup(attn_db *db, const attn_db_query *q, attn_db_best *out) {
  if (!db || !q || !out || !q->device) {
    if (db) fail(db, ATTN_EINVAL, "attn_db_lookup: NULL argument");
    return ATTN_EINVAL;
  }
  const char *dt = dtype_text(q->dtype);
  if (!dt) return fail(db, ATTN_EINVAL, "attn_db_lookup: unknown dtype");
  pthread_mutex_lock(&db->mu);
  int rc = ATTN_EDB;
  sqlite3_stmt *s = stmt(db, S_LOOKUP);
  if (s) {
    bind_text(s, 1, q->device);
    sqlite3_bind_int(s, 2, q->d);
    bind_text(s, 3, dt);
    sqlite3_bind_int(s, 4, q->causal ? 1 : 0);
    sqlite3_bind_double(s, 5, q->tolerance);
    /* db.h's defaults for the fields left 0 */
    const int n = q->n > 0 ? q->n : 1, heads = q->heads > 0 ? q->heads : 1;
    sqlite3_bind_int(s, 6, n);
    sqlite3_bind_int(s, 7, q->n_kv > 0 ? q->n_kv : n);
    sqlite3_bind_int(s, 8, q->batch > 0 ? q->batch : 1);
    sqlite3_bind_int(s, 9, heads);
    sqlite3_bind_int(s, 10, q->heads_kv > 0 ? q->heads_kv : heads);
    sqlite3_bind_int(s, 11, q->threads > 0 ? q->threads : 1);
    sqlite3_bind_int(s, 12, ATTN_DB_DECODE_BELOW);
    sqlite3_bind_int(s, 13, q->d_v > 0 ? q->d_v : q->d);
    int src = sqlite3_step(s);
    memset(out, 0, sizeof *out);
    if (src == SQLITE_ROW && sqlite3_column_int(s, 13)) {
      /* only rows of the other regime fit: a miss, but say which n is stored */
      out->n = sqlite3_column_int(s, 1);
      rc = fail(db, ATTN_EUNSUPPORTED, "no %s row stored for this problem; %s rows do not apply",
                n < ATTN_DB_DECODE_BELOW ? "decode" : "prefill", n < ATTN_DB_DECODE_BELOW ? "prefill" : "decode");
    } else if (src == SQLITE_ROW) {
      snprintf(out->spec, sizeof out->spec, "%s", (const char *)sqlite3_column_text(s, 0));
      out->n = sqlite3_column_int(s, 1);
      out->time_ms = sqlite3_column_double(s, 2);
      out->error = sqlite3_column_type(s, 3) == SQLITE_NULL ? -1 : sqlite3_column_double(s, 3);
      snprintf(out->provenance, sizeof out->provenance, "%s", (const char *)sqlite3_column_text(s, 4));
      out->n_kv = sqlite3_column_int(s, 5);
      out->batch = sqlite3_column_int(s, 6);
      out->heads = sqlite3_column_int(s, 7);
      out->heads_kv = sqlite3_column_int(s, 8);
      out->threads = sqlite3_column_int(s, 9);
      out->chosen = sqlite3_column_int(s, 10);
      out->is_default = sqlite3_column_int(s, 11);
      out->id = sqlite3_column_int64(s, 12);
      rc = ATTN_OK;
    } else if (src == SQLITE_DONE) {
      rc = fail(db, ATTN_EUNSUPPORTED, "no stored row for this problem");
    } else {
      rc = sqlfail(db, "lookup");
    }
    done(s);
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}

/* ---- artifacts */

/* An artifact's key as parameters 1..4 (S_ART_PUT, S_ART_GET, S_ART_DIGEST). */
static void bind_artifact_key(sqlite3_stmt *s, const char *source_hash, const char *compiler, const char *flags,
                              const char *arch) {
  bind_text(s, 1, source_hash);
  bind_text(s, 2, compiler ? compiler : "");
  bind_text(s, 3, flags ? flags : "");
  bind_text(s, 4, arch ? arch : "");
}

int attn_db_artifact_put(attn_db *db, const char *source_hash, const char *compiler, const char *flags,
                         const char *arch, const void *blob, size_t len) {
  if (!db || !source_hash || (!blob && len)) {
    if (db) fail(db, ATTN_EINVAL, "attn_db_artifact_put: NULL argument");
    return ATTN_EINVAL;
  }
  pthread_mutex_lock(&db->mu);
  int rc = write_begin(db);
  if (rc == ATTN_OK) {
    sqlite3_stmt *s = stmt(db, S_ART_PUT);
    if (!s) rc = ATTN_EDB;
    else {
      bind_artifact_key(s, source_hash, compiler, flags, arch);
      if (len) sqlite3_bind_blob64(s, 5, blob, (sqlite3_uint64)len, SQLITE_STATIC);
      else sqlite3_bind_zeroblob(s, 5, 0);
      char sha[65];
      if (attn_sha256_hex(blob, len, sha) != 0) rc = fail(db, ATTN_ERUNTIME, "hashing an artifact failed");
      else bind_text(s, 6, sha);
      if (rc == ATTN_OK && sqlite3_step(s) != SQLITE_DONE) rc = sqlfail(db, "storing an artifact");
      done(s);
    }
    rc = write_end(db, rc);
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}

int attn_db_artifact_get(attn_db *db, const char *source_hash, const char *compiler, const char *flags,
                         const char *arch, void **blob, size_t *len) {
  if (blob) *blob = NULL;
  if (len) *len = 0;
  if (!db || !source_hash || !blob || !len) {
    if (db) fail(db, ATTN_EINVAL, "attn_db_artifact_get: NULL argument");
    return ATTN_EINVAL;
  }
  pthread_mutex_lock(&db->mu);
  int rc = ATTN_EDB;
  sqlite3_stmt *s = stmt(db, S_ART_GET);
  if (s) {
    bind_artifact_key(s, source_hash, compiler, flags, arch);
    int src = sqlite3_step(s);
    if (src == SQLITE_ROW) {
      const void *p = sqlite3_column_blob(s, 0);
      size_t n = (size_t)sqlite3_column_bytes(s, 0);
      const char *want = (const char *)sqlite3_column_text(s, 1);
      char have[65];
      void *copy = NULL;
      if (!want) rc = fail(db, ATTN_EUNSUPPORTED, "the stored artifact has no recorded hash");
      else if (attn_sha256_hex(p, n, have) != 0 || strcmp(have, want) != 0)
        rc = fail(db, ATTN_EUNSUPPORTED, "the stored artifact does not match its recorded hash");
      else if (!(copy = malloc(n ? n : 1)))
        rc = fail(db, ATTN_ENOMEM, "out of memory for an artifact of %zu bytes", n);
      else {
        if (n) memcpy(copy, p, n);
        *blob = copy;
        *len = n;
        rc = ATTN_OK;
      }
    } else if (src == SQLITE_DONE) {
      rc = fail(db, ATTN_EUNSUPPORTED, "no stored artifact");
    } else {
      rc = sqlfail(db, "reading an artifact");
    }
    done(s);
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}

int attn_db_artifact_digest(attn_db *db, const char *source_hash, const char *compiler, const char *flags,
                            const char *arch, char sha256[65]) {
  sha256[0] = '\0';
  if (!db || !source_hash) {
    if (db) fail(db, ATTN_EINVAL, "attn_db_artifact_digest: NULL argument");
    return ATTN_EINVAL;
  }
  pthread_mutex_lock(&db->mu);
  int rc = ATTN_EDB;
  sqlite3_stmt *s = stmt(db, S_ART_DIGEST);
  if (s) {
    bind_artifact_key(s, source_hash, compiler, flags, arch);
    int src = sqlite3_step(s);
    if (src == SQLITE_ROW) {
      snprintf(sha256, 65, "%s", (const char *)sqlite3_column_text(s, 0));
      rc = ATTN_OK;
    } else if (src == SQLITE_DONE) {
      rc = fail(db, ATTN_EUNSUPPORTED, "no stored artifact");
    } else {
      rc = sqlfail(db, "reading an artifact's hash");
    }
    done(s);
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}

/* ---- devices */

/* SELECT id by name: ATTN_OK with *id (0 when absent). */
static int device_find(attn_db *db, const char *name, long long *id) {
  *id = 0;
  sqlite3_stmt *s = stmt(db, S_DEV_GET);
  if (!s) return ATTN_EDB;
  bind_text(s, 1, name);
  int src = sqlite3_step(s), rc = ATTN_OK;
  if (src == SQLITE_ROW) *id = sqlite3_column_int64(s, 0);
  else if (src != SQLITE_DONE) rc = sqlfail(db, "reading devices");
  done(s);
  return rc;
}

/* Inside a write transaction: upsert then the id. */
static int device_upsert(attn_db *db, const char *name, const char *info, long long *id) {
  sqlite3_stmt *s = stmt(db, S_DEV_UPSERT);
  if (!s) return ATTN_EDB;
  bind_text(s, 1, name);
  bind_text(s, 2, info);
  int rc = sqlite3_step(s) == SQLITE_DONE ? ATTN_OK : sqlfail(db, "storing a device");
  done(s);
  return rc == ATTN_OK ? device_find(db, name, id) : rc;
}

int attn_db_device_id(attn_db *db, const char *name, const char *info_json, long long *id) {
  if (!db || !name || !*name || !id) {
    if (db) fail(db, ATTN_EINVAL, "attn_db_device_id: no device name");
    return ATTN_EINVAL;
  }
  pthread_mutex_lock(&db->mu);
  int rc = write_begin(db);
  if (rc == ATTN_OK) rc = write_end(db, device_upsert(db, name, info_json, id));
  pthread_mutex_unlock(&db->mu);
  return rc;
}

int attn_db_device_put(attn_db *db, const attn_db_device *dev, long long *id) {
  if (!db || !dev || !dev->name || !*dev->name) {
    if (db) fail(db, ATTN_EINVAL, "attn_db_device_put: no device name");
    return ATTN_EINVAL;
  }
  if (dev->kind && strcmp(dev->kind, "cpu") != 0 && strcmp(dev->kind, "cuda") != 0)
    return fail(db, ATTN_EINVAL, "device %s: kind '%s' is not cpu or cuda", dev->name, dev->kind);
  pthread_mutex_lock(&db->mu);
  int rc = write_begin(db);
  if (rc == ATTN_OK) {
    sqlite3_stmt *s = stmt(db, S_DEV_PUT);
    if (!s) rc = ATTN_EDB;
    else {
      bind_text(s, 1, dev->name);
      bind_text(s, 2, dev->kind);
      bind_text(s, 3, dev->arch);
      bind_text(s, 4, dev->info);
      if (sqlite3_step(s) != SQLITE_DONE) rc = sqlfail(db, "storing a device");
      done(s);
    }
    long long got = 0;
    if (rc == ATTN_OK) rc = device_find(db, dev->name, &got);
    if (rc == ATTN_OK && id) *id = got;
    rc = write_end(db, rc);
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}

int attn_db_device_foreach(attn_db *db, int (*cb)(void *ctx, const attn_db_device *dev), void *ctx) {
  if (!db || !cb) return -1;
  pthread_mutex_lock(&db->mu);
  int rc = -1;
  sqlite3_stmt *s = stmt(db, S_DEV_ALL);
  if (s) {
    int src;
    rc = 0;
    while (rc == 0 && (src = sqlite3_step(s)) == SQLITE_ROW) {
      attn_db_device d = {.id = sqlite3_column_int64(s, 0),
                          .name = (const char *)sqlite3_column_text(s, 1),
                          .kind = (const char *)sqlite3_column_text(s, 2),
                          .arch = (const char *)sqlite3_column_text(s, 3),
                          .info = (const char *)sqlite3_column_text(s, 4)};
      /* the schema says NOT NULL, but a file from elsewhere can say otherwise (quick_check follows its schema): a
       * device without a name is refused, never handed to callers that compare names (merge crashed on one) */
      if (!d.name) {
        fail(db, ATTN_EDB, "damaged database: device %lld has no name", d.id);
        rc = -1;
        break;
      }
      rc = cb(ctx, &d);
    }
    if (rc == 0 && src != SQLITE_DONE) {
      sqlfail(db, "reading devices");
      rc = -1;
    }
    done(s);
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}

/* ---- kernels */

/* The algorithm, target, dtype and d at the head of canonical spec text ("flash cpu f32 d=64 ..."). */
static int spec_head(attn_db *db, const char *spec, char algo[16], char target[16], char dtype[16], int *d) {
  if (sscanf(spec, "%15s %15s %15s d=%d", algo, target, dtype, d) != 4 ||
      (strcmp(algo, "flash") && strcmp(algo, "smallcache") && strcmp(algo, "lowrank")) ||
      (strcmp(target, "cpu") && strcmp(target, "cuda")) ||
      (strcmp(dtype, "f32") && strcmp(dtype, "f16") && strcmp(dtype, "bf16")) || *d <= 0)
    return fail(db, ATTN_EINVAL, "kernel spec '%.200s' is not canonical text (\"ALGO TARGET DTYPE d=D ...\")",
                spec);
  return ATTN_OK;
}

static int kernel_find(attn_db *db, const char *spec, long long *id, int *hash_differs, const char *hash) {
  *id = 0;
  *hash_differs = 0;
  sqlite3_stmt *s = stmt(db, S_KER_GET);
  if (!s) return ATTN_EDB;
  bind_text(s, 1, spec);
  int src = sqlite3_step(s), rc = ATTN_OK;
  if (src == SQLITE_ROW) {
    *id = sqlite3_column_int64(s, 0);
    const char *h = (const char *)sqlite3_column_text(s, 1);
    *hash_differs = hash && (!h || strcmp(h, hash) != 0);
  } else if (src != SQLITE_DONE) {
    rc = sqlfail(db, "reading kernels");
  }
  done(s);
  return rc;
}

/* Inside a write transaction: creates the kernel (or updates its hash), then its id. */
static int kernel_upsert(attn_db *db, const char *spec, const char *hash, long long *id) {
  char algo[16], target[16], dtype[16];
  int d, differs;
  int rc = spec_head(db, spec, algo, target, dtype, &d);
  if (rc != ATTN_OK) return rc;
  sqlite3_stmt *s = stmt(db, S_KER_UPSERT);
  if (!s) return ATTN_EDB;
  bind_text(s, 1, spec);
  bind_text(s, 2, algo);
  bind_text(s, 3, target);
  bind_text(s, 4, dtype);
  sqlite3_bind_int(s, 5, d);
  bind_text(s, 6, hash);
  /* d_v: the text's " dv=N" (written only when it differs from d), else d */
  const char *dvp = strstr(spec, " dv=");
  int dv = d;
  if (dvp && (sscanf(dvp + 4, "%d", &dv) != 1 || dv <= 0)) {
    done(s);
    return fail(db, ATTN_EINVAL, "kernel spec '%.200s': bad dv", spec);
  }
  sqlite3_bind_int(s, 7, dv);
  rc = sqlite3_step(s) == SQLITE_DONE ? ATTN_OK : sqlfail(db, "storing a kernel");
  done(s);
  return rc == ATTN_OK ? kernel_find(db, spec, id, &differs, NULL) : rc;
}

int attn_db_kernel_id(attn_db *db, const char *spec, const char *source_hash, long long *id) {
  if (!db || !spec || !id) {
    if (db) fail(db, ATTN_EINVAL, "attn_db_kernel_id: NULL argument");
    return ATTN_EINVAL;
  }
  pthread_mutex_lock(&db->mu);
  int differs;
  /* the common case (a known kernel) takes no write lock */
  int rc = kernel_find(db, spec, id, &differs, source_hash);
  if (rc == ATTN_OK && (*id == 0 || differs)) {
    rc = write_begin(db);
    if (rc == ATTN_OK) rc = write_end(db, kernel_upsert(db, spec, source_hash, id));
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}

/* ---- runs */

int attn_db_run_begin(attn_db *db, long long device_id, const char *command, long long *run_id) {
  if (!db || !run_id) return ATTN_EINVAL;
  *run_id = 0;
  pthread_mutex_lock(&db->mu);
  int rc = write_begin(db);
  if (rc == ATTN_OK) {
    sqlite3_stmt *s = stmt(db, S_RUN_BEGIN);
    if (!s) rc = ATTN_EDB;
    else {
      bind_id(s, 1, device_id);
      bind_text(s, 2, command ? command : "");
      if (sqlite3_step(s) == SQLITE_DONE) *run_id = sqlite3_last_insert_rowid(db->h);
      else rc = sqlfail(db, "starting a run");
      done(s);
    }
    rc = write_end(db, rc);
    if (rc != ATTN_OK) *run_id = 0;
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}

int attn_db_run_end(attn_db *db, long long run_id, const char *status) {
  if (!db) return ATTN_EINVAL;
  pthread_mutex_lock(&db->mu);
  int rc = write_begin(db);
  if (rc == ATTN_OK) {
    sqlite3_stmt *s = stmt(db, S_RUN_END);
    if (!s) rc = ATTN_EDB;
    else {
      sqlite3_bind_int64(s, 1, run_id);
      bind_text(s, 2, status ? status : "done");
      if (sqlite3_step(s) != SQLITE_DONE) rc = sqlfail(db, "ending a run");
      done(s);
    }
    rc = write_end(db, rc);
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}

int attn_db_run_interrupt(attn_db *db, long long run_id, int *changed) {
  if (changed) *changed = 0;
  if (!db) return ATTN_EINVAL;
  pthread_mutex_lock(&db->mu);
  int rc = write_begin(db), n = 0;
  if (rc == ATTN_OK) {
    /* prepared here rather than kept: it runs once per dead run. "still running" in the WHERE: a run that ended
     * between the caller's look and this update keeps its own status. */
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(db->h, "UPDATE runs SET status = 'interrupted' WHERE id = ?1 AND status = 'running'", -1,
                           &s, NULL) != SQLITE_OK) {
      rc = sqlfail(db, "prepare");
    } else {
      sqlite3_bind_int64(s, 1, run_id);
      if (sqlite3_step(s) != SQLITE_DONE) rc = sqlfail(db, "marking a run interrupted");
      else n = sqlite3_changes(db->h);
    }
    sqlite3_finalize(s);
    rc = write_end(db, rc);
  }
  if (changed) *changed = rc == ATTN_OK && n > 0;
  pthread_mutex_unlock(&db->mu);
  return rc;
}

int attn_db_run_put(attn_db *db, const attn_db_run *run, long long *run_id) {
  if (!db || !run) return ATTN_EINVAL;
  pthread_mutex_lock(&db->mu);
  long long id = 0;
  int began = write_begin(db) == ATTN_OK;
  int rc = began ? ATTN_OK : ATTN_EDB;
  /* the same run imported twice (same device, start time and command) is one run */
  if (rc == ATTN_OK && run->started) {
    sqlite3_stmt *s = stmt(db, S_RUN_FIND);
    if (!s) rc = ATTN_EDB;
    else {
      bind_text(s, 1, run->device);
      bind_text(s, 2, run->started);
      bind_text(s, 3, run->command ? run->command : "");
      int src = sqlite3_step(s);
      if (src == SQLITE_ROW) id = sqlite3_column_int64(s, 0);
      else if (src != SQLITE_DONE) rc = sqlfail(db, "reading runs");
      done(s);
    }
  }
  if (rc == ATTN_OK && id == 0) {
    sqlite3_stmt *s = stmt(db, S_RUN_PUT);
    if (!s) rc = ATTN_EDB;
    else {
      bind_text(s, 1, run->device);
      bind_text(s, 2, run->started);
      bind_text(s, 3, run->ended);
      bind_text(s, 4, run->command ? run->command : "");
      bind_text(s, 5, run->status);
      if (sqlite3_step(s) == SQLITE_DONE) id = sqlite3_last_insert_rowid(db->h);
      else rc = sqlfail(db, "storing a run");
      done(s);
    }
  }
  if (began) rc = write_end(db, rc);
  if (run_id) *run_id = rc == ATTN_OK ? id : 0;
  pthread_mutex_unlock(&db->mu);
  return rc;
}

int attn_db_run_foreach(attn_db *db, int (*cb)(void *ctx, const attn_db_run *run), void *ctx) {
  if (!db || !cb) return -1;
  pthread_mutex_lock(&db->mu);
  int rc = -1;
  sqlite3_stmt *s = stmt(db, S_RUN_ALL);
  if (s) {
    int src;
    rc = 0;
    while (rc == 0 && (src = sqlite3_step(s)) == SQLITE_ROW) {
      attn_db_run r = {.id = sqlite3_column_int64(s, 0),
                       .device = (const char *)sqlite3_column_text(s, 1),
                       .started = (const char *)sqlite3_column_text(s, 2),
                       .ended = (const char *)sqlite3_column_text(s, 3),
                       .command = (const char *)sqlite3_column_text(s, 4),
                       .status = (const char *)sqlite3_column_text(s, 5)};
      rc = cb(ctx, &r);
    }
    if (rc == 0 && src != SQLITE_DONE) {
      sqlfail(db, "reading runs");
      rc = -1;
    }
    done(s);
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}

/* ---- measurements */

static int valid_status(const char *s) {
  static const char *const ok[] = {"ok", "wrong", "compile_error", "launch_error", "skipped", "invalid", "error"};
  for (size_t i = 0; s && i < sizeof ok / sizeof ok[0]; i++)
    if (strcmp(s, ok[i]) == 0) return 1;
  return 0;
}

/* 4·d flops per visible (query, key) pair, per batch and head. Causal is bottom-right aligned. */
static double flops_of(const attn_db_meas *m) {
  double pairs;
  if (!m->causal) pairs = (double)m->n * m->n_kv;
  else {
    /* query row i sees min(i + n_kv - n + 1, n_kv) keys, at least 0: the last row sees n_kv, the ones before one key
     * fewer each. Summed in closed form: an import may give n = 2^30, which a loop over the rows took seconds for.
     * Sums of consecutive integers, (first + last) * count / 2, exact in long long (below 2^62 for n <= 2^30). */
    const long long n = m->n, nkv = m->n_kv, first = nkv - n + 1; /* keys row 0 sees; <= 0: none */
    pairs = first >= 1 ? (double)((first + nkv) * n / 2) : (double)(nkv * (nkv + 1) / 2);
  }
  return 4.0 * m->d * pairs * m->batch * m->heads;
}

/* The row's device and kernel ids: given, or looked up by name (create != 0: created when new). */
static int resolve_ids(attn_db *db, const attn_db_meas *m, int create, long long *dev, long long *ker) {
  *dev = m->device_id;
  *ker = m->kernel_id;
  int rc = ATTN_OK;
  if (*dev <= 0) {
    if (!m->device || !*m->device) return fail(db, ATTN_EINVAL, "measurement without a device");
    rc = create ? device_upsert(db, m->device, NULL, dev) : device_find(db, m->device, dev);
  }
  if (rc == ATTN_OK && *ker <= 0) {
    if (!m->spec || !*m->spec) return fail(db, ATTN_EINVAL, "measurement without a kernel spec");
    int differs;
    rc = create ? kernel_upsert(db, m->spec, m->source_hash, ker) : kernel_find(db, m->spec, ker, &differs, NULL);
  }
  return rc;
}

int attn_db_meas_put(attn_db *db, const attn_db_meas *m) {
  if (!db || !m) return ATTN_EINVAL;
  const char *dt = dtype_text(m->dtype);
  if (!dt) return fail(db, ATTN_EINVAL, "measurement: unknown dtype");
  if (!valid_status(m->status))
    return fail(db, ATTN_EINVAL, "measurement: status '%s' is not one of ok, wrong, compile_error, launch_error, "
                "skipped, invalid, error", m->status ? m->status : "(null)");
  if (!m->provenance || (strcmp(m->provenance, "measured") && strcmp(m->provenance, "model")))
    return fail(db, ATTN_EINVAL, "measurement: provenance '%s' is not measured or model",
                m->provenance ? m->provenance : "(null)");
  if (m->n <= 0 || m->n_kv <= 0 || m->d <= 0 || m->batch <= 0 || m->heads <= 0 || m->heads_kv <= 0)
    return fail(db, ATTN_EINVAL, "measurement: n, n_kv, d, batch, heads and heads_kv must be positive");
  if (m->d_v < 0) return fail(db, ATTN_EINVAL, "measurement: d_v=%d must be >= 0 (0: the kernel's)", m->d_v);
  double gflops = m->gflops;
  if (!(gflops > 0)) gflops = m->time_ms > 0 ? flops_of(m) / (m->time_ms * 1e-3) / 1e9 : 0;
  pthread_mutex_lock(&db->mu);
  int rc = write_begin(db);
  if (rc == ATTN_OK) {
    long long dev, ker;
    rc = resolve_ids(db, m, 1, &dev, &ker);
    sqlite3_stmt *s = rc == ATTN_OK ? stmt(db, S_MEAS_PUT) : NULL;
    if (rc == ATTN_OK && !s) rc = ATTN_EDB;
    if (rc == ATTN_OK) {
      bind_id(s, 1, m->run_id);
      sqlite3_bind_int64(s, 2, dev);
      sqlite3_bind_int64(s, 3, ker);
      sqlite3_bind_int(s, 4, m->n);
      sqlite3_bind_int(s, 5, m->n_kv);
      sqlite3_bind_int(s, 6, m->d);
      bind_text(s, 7, dt);
      sqlite3_bind_int(s, 8, m->causal ? 1 : 0);
      sqlite3_bind_int(s, 9, m->batch);
      sqlite3_bind_int(s, 10, m->heads);
      sqlite3_bind_int(s, 11, m->heads_kv);
      sqlite3_bind_double(s, 12, m->time_ms);
      sqlite3_bind_double(s, 13, gflops);
      if (m->reads >= 0) sqlite3_bind_int64(s, 14, m->reads);
      if (m->writes >= 0) sqlite3_bind_int64(s, 15, m->writes);
      if (m->has_error) sqlite3_bind_double(s, 16, m->error);
      bind_text(s, 17, m->status);
      bind_text(s, 18, m->log ? m->log : "");
      bind_text(s, 19, m->provenance);
      bind_text(s, 20, m->created && *m->created ? m->created : NULL);
      sqlite3_bind_int(s, 21, m->threads > 0 ? m->threads : 0);
      if (m->reps > 0) {
        sqlite3_bind_int(s, 22, m->reps);
        if (m->iqr_ms >= 0) sqlite3_bind_double(s, 23, m->iqr_ms);
      }
      if (m->load >= 0) sqlite3_bind_double(s, 24, m->load);
      sqlite3_bind_int(s, 25, m->final ? 1 : 0);
      sqlite3_bind_int(s, 26, m->chosen ? 1 : 0);
      sqlite3_bind_int(s, 27, m->is_default ? 1 : 0);
      bind_text(s, 28, m->bound && *m->bound ? m->bound : NULL);
      if (m->d_v > 0) sqlite3_bind_int(s, 29, m->d_v);
      if (sqlite3_step(s) != SQLITE_DONE) rc = sqlfail(db, "storing a measurement");
      done(s);
    }
    rc = write_end(db, rc);
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}

/* A row's key as parameters 1..11 (device, kernel, n, n_kv, dtype, causal, batch, heads, heads_kv, provenance,
 * threads), as S_MEAS_GET, S_MEAS_UNCHOOSE and S_MEAS_CHOOSE take it. */
static void bind_key(sqlite3_stmt *s, const attn_db_meas *m, long long dev, long long ker, const char *dt) {
  sqlite3_bind_int64(s, 1, dev);
  sqlite3_bind_int64(s, 2, ker);
  sqlite3_bind_int(s, 3, m->n);
  sqlite3_bind_int(s, 4, m->n_kv);
  bind_text(s, 5, dt);
  sqlite3_bind_int(s, 6, m->causal ? 1 : 0);
  sqlite3_bind_int(s, 7, m->batch);
  sqlite3_bind_int(s, 8, m->heads);
  sqlite3_bind_int(s, 9, m->heads_kv);
  bind_text(s, 10, m->provenance);
  sqlite3_bind_int(s, 11, m->threads > 0 ? m->threads : 0);
}

int attn_db_meas_exists(attn_db *db, const attn_db_meas *m, attn_db_meas *got) {
  if (!db || !m) return -1;
  const char *dt = dtype_text(m->dtype);
  if (!dt || !m->provenance) {
    fail(db, ATTN_EINVAL, "attn_db_meas_exists: bad dtype or no provenance");
    return -1;
  }
  pthread_mutex_lock(&db->mu);
  long long dev, ker;
  int found = -1;
  if (resolve_ids(db, m, 0, &dev, &ker) == ATTN_OK) {
    found = 0;
    sqlite3_stmt *s = dev > 0 && ker > 0 ? stmt(db, S_MEAS_GET) : NULL;
    if (dev > 0 && ker > 0 && !s) found = -1;
    if (s) {
      bind_key(s, m, dev, ker, dt);
      int src = sqlite3_step(s);
      if (src == SQLITE_ROW) {
        found = 1;
        if (got) {
          if (got != m) *got = *m;
          got->device_id = dev;
          got->kernel_id = ker;
          got->id = sqlite3_column_int64(s, 0);
          got->run_id = sqlite3_column_int64(s, 1);
          got->time_ms = sqlite3_column_double(s, 2);
          got->gflops = sqlite3_column_double(s, 3);
          got->has_error = sqlite3_column_type(s, 4) != SQLITE_NULL;
          got->error = got->has_error ? sqlite3_column_double(s, 4) : 0;
          got->reads = sqlite3_column_type(s, 5) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 5);
          got->writes = sqlite3_column_type(s, 6) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 6);
          snprintf(got->status_buf, sizeof got->status_buf, "%s", (const char *)sqlite3_column_text(s, 7));
          snprintf(got->log_buf, sizeof got->log_buf, "%s", (const char *)sqlite3_column_text(s, 8));
          snprintf(got->provenance_buf, sizeof got->provenance_buf, "%s", (const char *)sqlite3_column_text(s, 9));
          snprintf(got->created_buf, sizeof got->created_buf, "%s", (const char *)sqlite3_column_text(s, 10));
          got->status = got->status_buf;
          got->log = got->log_buf;
          got->provenance = got->provenance_buf;
          got->created = got->created_buf;
          got->threads = sqlite3_column_int(s, 11);
          got->reps = sqlite3_column_int(s, 12);
          got->iqr_ms = sqlite3_column_type(s, 13) == SQLITE_NULL ? -1 : sqlite3_column_double(s, 13);
          got->load = sqlite3_column_type(s, 14) == SQLITE_NULL ? -1 : sqlite3_column_double(s, 14);
          got->final = sqlite3_column_int(s, 15);
          got->chosen = sqlite3_column_int(s, 16);
          got->is_default = sqlite3_column_int(s, 17);
          snprintf(got->bound_buf, sizeof got->bound_buf, "%s",
                   sqlite3_column_type(s, 18) == SQLITE_NULL ? "" : (const char *)sqlite3_column_text(s, 18));
          got->bound = got->bound_buf[0] ? got->bound_buf : NULL;
        }
      } else if (src != SQLITE_DONE) {
        sqlfail(db, "reading a measurement");
        found = -1;
      }
      done(s);
    }
  }
  pthread_mutex_unlock(&db->mu);
  return found;
}

static void read_meas(sqlite3_stmt *s, attn_db_meas *m) {
  memset(m, 0, sizeof *m);
  m->id = sqlite3_column_int64(s, 0);
  m->run_id = sqlite3_column_int64(s, 1);
  m->device = (const char *)sqlite3_column_text(s, 2);
  m->spec = (const char *)sqlite3_column_text(s, 3);
  m->source_hash = (const char *)sqlite3_column_text(s, 4);
  m->n = sqlite3_column_int(s, 5);
  m->n_kv = sqlite3_column_int(s, 6);
  m->d = sqlite3_column_int(s, 7);
  m->dtype = dtype_value((const char *)sqlite3_column_text(s, 8));
  m->causal = sqlite3_column_int(s, 9);
  m->batch = sqlite3_column_int(s, 10);
  m->heads = sqlite3_column_int(s, 11);
  m->heads_kv = sqlite3_column_int(s, 12);
  m->time_ms = sqlite3_column_double(s, 13);
  m->gflops = sqlite3_column_double(s, 14);
  m->reads = sqlite3_column_type(s, 15) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 15);
  m->writes = sqlite3_column_type(s, 16) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 16);
  m->has_error = sqlite3_column_type(s, 17) != SQLITE_NULL;
  m->error = m->has_error ? sqlite3_column_double(s, 17) : 0;
  m->status = (const char *)sqlite3_column_text(s, 18);
  m->log = (const char *)sqlite3_column_text(s, 19);
  m->provenance = (const char *)sqlite3_column_text(s, 20);
  m->created = (const char *)sqlite3_column_text(s, 21);
  m->device_id = sqlite3_column_int64(s, 22);
  m->kernel_id = sqlite3_column_int64(s, 23);
  m->threads = sqlite3_column_int(s, 24);
  m->reps = sqlite3_column_int(s, 25);
  m->iqr_ms = sqlite3_column_type(s, 26) == SQLITE_NULL ? -1 : sqlite3_column_double(s, 26);
  m->load = sqlite3_column_type(s, 27) == SQLITE_NULL ? -1 : sqlite3_column_double(s, 27);
  m->final = sqlite3_column_int(s, 28);
  m->chosen = sqlite3_column_int(s, 29);
  m->is_default = sqlite3_column_int(s, 30);
  m->bound = (const char *)sqlite3_column_text(s, 31); /* NULL: none */
  m->d_v = sqlite3_column_int(s, 32);
}

static int meas_iterate(attn_db *db, int id, int (*cb)(void *, const attn_db_meas *), void *ctx) {
  if (!db || !cb) return -1;
  pthread_mutex_lock(&db->mu);
  int rc = -1;
  sqlite3_stmt *s = stmt(db, id);
  if (s) {
    attn_db_meas *m = malloc(sizeof *m);
    if (!m) fail(db, ATTN_ENOMEM, "out of memory");
    else {
      int src;
      rc = 0;
      while (rc == 0 && (src = sqlite3_step(s)) == SQLITE_ROW) {
        read_meas(s, m);
        rc = cb(ctx, m);
      }
      if (rc == 0 && src != SQLITE_DONE) {
        sqlfail(db, "reading measurements");
        rc = -1;
      }
      free(m);
    }
    done(s);
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}

int attn_db_meas_foreach(attn_db *db, int (*cb)(void *ctx, const attn_db_meas *m), void *ctx) {
  return meas_iterate(db, S_MEAS_ALL, cb, ctx);
}

int attn_db_best_foreach(attn_db *db, int (*cb)(void *ctx, const attn_db_meas *m), void *ctx) {
  return meas_iterate(db, S_BEST_ALL, cb, ctx);
}

int attn_db_meas_choose(attn_db *db, const attn_db_meas *m) {
  if (!db || !m) return ATTN_EINVAL;
  const char *dt = dtype_text(m->dtype);
  if (!dt || !m->provenance) return fail(db, ATTN_EINVAL, "attn_db_meas_choose: bad dtype or no provenance");
  pthread_mutex_lock(&db->mu);
  int rc = write_begin(db);
  if (rc == ATTN_OK) {
    long long dev, ker;
    rc = resolve_ids(db, m, 0, &dev, &ker);
    if (rc == ATTN_OK && (dev <= 0 || ker <= 0)) rc = fail(db, ATTN_EINVAL, "attn_db_meas_choose: no such row");
    for (int id = S_MEAS_UNCHOOSE; rc == ATTN_OK && id <= S_MEAS_CHOOSE; id++) {
      sqlite3_stmt *s = stmt(db, id);
      if (!s) {
        rc = ATTN_EDB;
        break;
      }
      bind_key(s, m, dev, ker, dt);
      if (sqlite3_step(s) != SQLITE_DONE) rc = sqlfail(db, "marking the finalist round's choice");
      else if (id == S_MEAS_CHOOSE && sqlite3_changes(db->h) != 1)
        rc = fail(db, ATTN_EINVAL, "attn_db_meas_choose: no such row");
      done(s);
    }
    rc = write_end(db, rc);
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}

long long attn_db_meas_count(attn_db *db) {
  if (!db) return -1;
  pthread_mutex_lock(&db->mu);
  long long n = -1;
  sqlite3_stmt *s = stmt(db, S_MEAS_COUNT);
  if (s) {
    if (sqlite3_step(s) == SQLITE_ROW) n = sqlite3_column_int64(s, 0);
    else sqlfail(db, "counting measurements");
    done(s);
  }
  pthread_mutex_unlock(&db->mu);
  return n;
}

int attn_db_kres_get(attn_db *db, const char *spec, const char *compiler, int *registers, long *spill_bytes,
                     long *smem_static) {
  if (!db || !spec || !compiler) return ATTN_EINVAL;
  pthread_mutex_lock(&db->mu);
  int rc = ATTN_EDB;
  sqlite3_stmt *s = stmt(db, S_KRES_GET);
  if (s) {
    bind_text(s, 1, spec);
    bind_text(s, 2, compiler);
    int src = sqlite3_step(s);
    if (src == SQLITE_ROW) {
      *registers = sqlite3_column_int(s, 0);
      *spill_bytes = (long)sqlite3_column_int64(s, 1);
      *smem_static = (long)sqlite3_column_int64(s, 2);
      rc = ATTN_OK;
    } else if (src == SQLITE_DONE) {
      rc = ATTN_EUNSUPPORTED;
    } else {
      rc = sqlfail(db, "reading kernel resources");
    }
    done(s);
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}

int attn_db_kres_put(attn_db *db, const char *spec, const char *compiler, int registers, long spill_bytes,
                     long smem_static) {
  if (!db || !spec || !compiler) return ATTN_EINVAL;
  pthread_mutex_lock(&db->mu);
  int rc = write_begin(db);
  if (rc == ATTN_OK) {
    sqlite3_stmt *s = stmt(db, S_KRES_PUT);
    if (!s) rc = ATTN_EDB;
    else {
      bind_text(s, 1, spec);
      bind_text(s, 2, compiler);
      sqlite3_bind_int(s, 3, registers);
      sqlite3_bind_int64(s, 4, spill_bytes);
      sqlite3_bind_int64(s, 5, smem_static);
      if (sqlite3_step(s) != SQLITE_DONE) rc = sqlfail(db, "storing kernel resources");
      done(s);
    }
    rc = write_end(db, rc);
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}
