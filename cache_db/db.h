/* db.h: the tuning database (SQLite). The only module that speaks SQL; everything else calls these.
 * One handle may be used from several threads (calls are serialized); callbacks of the *_foreach functions must
 * not call back into the same handle. Errors: ATTN_EDB (or ATTN_EINVAL for bad arguments) with the detail in
 * attn_db_errmsg. */
#ifndef ATTN_DB_H
#define ATTN_DB_H

#include <stddef.h>
#include "attn.h"

typedef struct attn_db attn_db;

/* "Best" everywhere (the tuner's best, the `best` view, attn_db_lookup): the fastest configuration, except that
 * among those within ATTN_DB_TIE_FACTOR of the fastest time (the spread of repeated medians on a loaded machine)
 * the one that moves the fewest entries wins: it is the one that keeps its speed when n grows past the caches or
 * another process shares them. Unknown transfers count as more than any known. Written as text for the SQL. */
#define ATTN_DB_TIE_FACTOR 1.03
#define ATTN_DB_TIE_FACTOR_SQL "1.03"

/* Opens (create != 0: creates and migrates) the database. WAL, busy timeout, schema migrated by user_version.
 * create == 0 and no file: ATTN_EDB with "no such database". Not a SQLite file / locked past the timeout:
 * ATTN_EDB with SQLite's message in err. The busy timeout is 5000 ms unless $ATTN_DB_TIMEOUT_MS says otherwise.
 * An existing database at an older schema version is migrated whatever create says. A writer's open: it needs to
 * write the file and its directory, and checks the file's integrity first (attn_db_open_ex). */
int  attn_db_open(const char *path, int create, attn_db **out, char *err, size_t errlen);
void attn_db_close(attn_db *db);   /* NULL is fine */

/* attn_db_open with a mode: flags or'ed from these. attn_db_open(path, create) is attn_db_open_ex(path,
 * create ? ATTN_DB_CREATE : 0): a writer's open.
 *   (none)            a writer: read-write, WAL, migrated, and checked (PRAGMA quick_check) when the file is at most
 *                     ATTN_DB_CHECK_MAX bytes. A damaged file: ATTN_EDB, "PATH: damaged database (PRAGMA quick_check:
 *                     SQLite's first complaint); ...". A file passes once per process (by device, inode, size and
 *                     mtime: a changed file is checked again), so writers that reopen it (compile workers) pay once.
 *   ATTN_DB_CREATE    a writer that creates a missing file.
 *   ATTN_DB_CHECK     checks whatever the file's size: a writer (import's target), or with ATTN_DB_READER / _READONLY
 *                     a reader that checks too (merge's sources, which come from elsewhere).
 *   ATTN_DB_READONLY  SQLITE_OPEN_READONLY: no journal-mode switch, no migration, no check, no lock beyond reading.
 *                     Works on a file this process cannot write (another user's 0644 file, read-only media). A WAL
 *                     database whose directory cannot be written (no -shm can be made) and that has no -wal with
 *                     changes in it is read as immutable (?immutable=1): nothing locks it, so a writer that starts
 *                     meanwhile (its owner, who can write the directory) is not seen and may be read half-written;
 *                     read-only media and read-only shares are the case this serves. A database at an older schema
 *                     than this build's cannot run this build's queries: ATTN_EUNSUPPORTED with "PATH: schema version
 *                     N is older than this build's M; open it once with a writer (attntune tune/import) to migrate".
 *                     Writes through a read-only handle fail with ATTN_EDB ("attempt to write a readonly database").
 *   ATTN_DB_READER    the runtime, show and export: a writer's open without the check when this process can write
 *                     the file and its directory (so an older schema is migrated, and the runtime stores compiled
 *                     artifacts), else ATTN_DB_READONLY (with its ATTN_EUNSUPPORTED for an older schema). attn_open
 *                     takes that ATTN_EUNSUPPORTED as "no database": it succeeds, plans use the default
 *                     configurations, and attn_last_error(rt) says why right after the open. */
#define ATTN_DB_CREATE 1
#define ATTN_DB_READONLY 2
#define ATTN_DB_READER 4
#define ATTN_DB_CHECK 8
#define ATTN_DB_CHECK_MAX (64LL << 20)
int  attn_db_open_ex(const char *path, int flags, attn_db **out, char *err, size_t errlen);
/* 1 when the handle cannot write (opened read-only, or SQLite fell back to reading only); 0 when it can. */
int  attn_db_readonly(attn_db *db);
const char *attn_db_errmsg(attn_db *db);

/* The schema version this build writes (PRAGMA user_version after attn_db_open). */
int attn_db_schema_version(void);
/* $ATTN_DB, else <attn_cache_home>/attntune.db (creating the directory). 0, or -1 if too long. */
int attn_db_default_path(char *buf, size_t len);
/* attntune's cache directory: $XDG_CACHE_HOME/attntune when XDG_CACHE_HOME is an absolute path, else
 * $HOME/.cache/attntune (the password database's home without $HOME). Not created. 0, or -1 if too long. */
int attn_cache_home(char *buf, size_t len);
/* The file the handle has open (absolute path), for telling two handles on one file apart. */
const char *attn_db_filename(attn_db *db);

/* What the runtime asks: the best stored configuration for a problem on a device. */
/* Problems with fewer query rows than this (decode) are a regime of their own: a decode problem is never served by a
 * row tuned at a prefill shape, nor the reverse (one query block's worth of rows, the CPU's default Br). */
#define ATTN_DB_DECODE_BELOW 64

typedef struct attn_db_query {
  const char *device;     /* e.g. "cpu:Intel(R) Xeon(R) Processor" or "cuda:NVIDIA H100 80GB HBM3" / "H100" */
  int d, causal, n;
  attn_dtype dtype;
  double tolerance;       /* rows with error > tolerance (approximate algorithms) are skipped; 0: exact only */
  /* The rest of the problem (schema 4); 0 means: n_kv as n, batch 1, heads 1, heads_kv as heads, threads unknown. */
  int n_kv, batch, heads, heads_kv;
  int threads;            /* the runtime's CPU threads; 0 on a GPU */
  int d_v;                /* head dimension of V and O (schema 7); 0: same as d. Matched exactly, like d */
  /* Schema 8, matched exactly: a forward's row never serves a backward's problem, nor a variant's a dense one. */
  const char *pass;       /* "fwd" | "bwd"; NULL: "fwd" */
  const char *variant;    /* score modifiers and KV layout as canonical text; NULL: "" (dense) */
  /* A word of the spec text (e.g. "impl=wgmma") whose rows the caller serves only once measured: its other rows are
   * left out before the ranking, so that the best row the caller can serve is found. NULL or "": none left out. */
  const char *unmeasured_skip;
  /* A word of the spec text whose rows are never returned, measured or not (the runtime's backward: "dq=atomic",
   * whose dQ varies from run to run, for a caller that must be deterministic). NULL or "": none. */
  const char *exclude;
} attn_db_query;

typedef struct attn_db_best {
  char spec[512];          /* attn_spec_format text */
  int n;                   /* the n the row was tuned at (nearest by log distance) */
  double time_ms, error;
  char provenance[16];     /* "measured" | "model" */
  int n_kv, batch, heads, heads_kv, threads; /* the rest of the row's problem (threads 0: not recorded) */
  int chosen, is_default;  /* the finalist round's choice; the untuned default configuration */
  long long id;            /* the row's id in measurements */
  int skipped;             /* 1: without unmeasured_skip a row it leaves out would have been the best (or the only) */
} attn_db_best;

/* ATTN_OK and *out filled; ATTN_EUNSUPPORTED when no row matches (caller falls back to defaults); ATTN_EDB on error.
 * Exact (device, d, d_v, dtype, causal, pass, variant) and the same regime (decode or prefill, ATTN_DB_DECODE_BELOW);
 * measured rows before model rows; then the nearest problem by the sum of |log| distances of n, n_kv, the parallel
 * width per thread (batch*heads/threads; a row without threads counts as the query's) and the group size
 * heads/heads_kv. Only status 'ok' rows with a time; lowrank rows only when tolerance > 0 and their measured error <=
 * tolerance. Within the nearest problem the finalist round's choice (and qualifying lowrank rows) before other rows,
 * then the tie rule. error is -1 when the row has none. At equal distance, a row on the query's threads, then one
 * without threads, then the problem with the smaller n, n_kv, batch*heads, heads_kv, batch, threads. On
 * ATTN_EUNSUPPORTED *out is zeroed except n: the n of the nearest row of the other regime when only rows of that regime
 * fit (so that the caller can say why the default serves), else 0. With unmeasured_skip, skipped says whether the
 * rule without it would have chosen a row it left out (on ATTN_EUNSUPPORTED too: only such rows were stored). */
int attn_db_lookup(attn_db *db, const attn_db_query *q, attn_db_best *out);

/* Compiled artifacts (shared objects, cubins), keyed by source hash + compiler + flags + arch, each stored with the
 * SHA-256 of its bytes (schema 5). */
int attn_db_artifact_put(attn_db *db, const char *source_hash, const char *compiler, const char *flags,
                         const char *arch, const void *blob, size_t len);
/* ATTN_OK with *blob malloc'd (caller frees); ATTN_EUNSUPPORTED when absent, or when the stored bytes do not match
 * their recorded hash or have none (a blob replaced or damaged in the file: never handed out; errmsg says which). */
int attn_db_artifact_get(attn_db *db, const char *source_hash, const char *compiler, const char *flags,
                         const char *arch, void **blob, size_t *len);
/* The recorded SHA-256 (64 hex digits) of an artifact, to check a cached copy against: ATTN_OK, or
 * ATTN_EUNSUPPORTED when no artifact with a recorded hash has that key. */
int attn_db_artifact_digest(attn_db *db, const char *source_hash, const char *compiler, const char *flags,
                            const char *arch, char sha256[65]);
/* SHA-256 of data as 64 lowercase hex digits; 0, or -1 (OpenSSL failed). */
int attn_sha256_hex(const void *data, size_t len, char out[65]);

/* ---- The tuner's side: devices, kernels, runs, measurements. */

/* Optional explicit transaction around many writes (import, merge): the writes inside commit together.
 * Without one, every write below is its own committed transaction. */
int attn_db_begin(attn_db *db);
int attn_db_commit(attn_db *db);
void attn_db_rollback(attn_db *db);

typedef struct attn_db_device {
  long long id;
  const char *name;       /* "cpu:<model name>" or a GPU table name ("H100") */
  const char *kind;       /* "cpu" | "cuda" */
  const char *arch;       /* may be NULL */
  const char *info;       /* JSON text; may be NULL */
} attn_db_device;

/* The id of device name, created when new. kind comes from info's "kind" ("cpu"; anything else is "cuda") or,
 * without one, from the name ("cpu:..." is cpu); arch from info's "arch". A non-NULL info replaces the stored one. */
int attn_db_device_id(attn_db *db, const char *name, const char *info_json, long long *id);
/* Insert or update a device with every field given (import, merge). */
int attn_db_device_put(attn_db *db, const attn_db_device *dev, long long *id);
/* Calls cb for every device in id order; a nonzero return from cb stops and is returned. */
int attn_db_device_foreach(attn_db *db, int (*cb)(void *ctx, const attn_db_device *dev), void *ctx);

/* The id of a kernel by its canonical spec text ("flash cpu f32 d=64 ..."), created when new; algo, target,
 * dtype and d are read from the text. source_hash may be NULL. */
int attn_db_kernel_id(attn_db *db, const char *spec, const char *source_hash, long long *id);

/* A tuner command: begin returns its id (status 'running'); end records the end time and final status. */
int attn_db_run_begin(attn_db *db, long long device_id, const char *command, long long *run_id);
int attn_db_run_end(attn_db *db, long long run_id, const char *status);
/* Marks a run whose process died as 'interrupted' (ended stays unknown), only while it is still 'running': a run that
 * ended meanwhile keeps its own status. *changed (may be NULL): 1 when the row changed. */
int attn_db_run_interrupt(attn_db *db, long long run_id, int *changed);

typedef struct attn_db_run {
  long long id;
  const char *device;     /* device name, may be NULL */
  const char *started, *ended, *command, *status;  /* ended may be NULL */
} attn_db_run;
/* Inserts a run with every field given (import; id is ignored, the new one is returned). */
int attn_db_run_put(attn_db *db, const attn_db_run *run, long long *run_id);
int attn_db_run_foreach(attn_db *db, int (*cb)(void *ctx, const attn_db_run *run), void *ctx);

/* One measurement (or model estimate). Key: device, kernel, n, n_kv, dtype, causal, batch, heads, heads_kv,
 * threads, provenance, pass, variant (the kernel's spec text fixes d and d_v). */
typedef struct attn_db_meas {
  long long id;                  /* filled by foreach / exists */
  long long run_id;              /* 0: none */
  long long device_id;           /* 0: resolved from device (which must then name a device; created if new) */
  long long kernel_id;           /* 0: resolved from spec (+ source_hash) */
  const char *device;            /* device name (filled by foreach) */
  const char *spec;              /* kernel spec text (filled by foreach) */
  const char *source_hash;       /* filled by foreach; may be NULL */
  int n, n_kv, d, batch, heads, heads_kv, causal;
  attn_dtype dtype;
  double time_ms;
  double gflops;                 /* <= 0 on put: computed from the shape and time_ms (0 without a time) */
  int has_error;                 /* error is measured */
  double error;                  /* relative error vs fp64 */
  long long reads, writes;       /* entries moved; -1: unknown */
  const char *status;            /* ok | wrong | compile_error | launch_error | skipped | invalid | error */
  const char *log;               /* compiler log or message; NULL: "" */
  const char *provenance;        /* measured | model */
  const char *created;           /* put: NULL stores the current time; foreach: the stored time */
  /* Filled by attn_db_meas_exists (copies that outlive the call). */
  char status_buf[16];
  char provenance_buf[16];
  char created_buf[40];
  char log_buf[512];              /* truncated; meas_foreach gives the whole log */
  /* Schema 4: how the time was measured (tuner/measure.h) and the finalist round's marks. */
  int threads;                   /* CPU threads the kernel ran on (part of the key); 0: a GPU or not recorded */
  int reps;                      /* timed repetitions behind time_ms; 0: not recorded (iqr_ms is then ignored) */
  double iqr_ms;                 /* interquartile range of those repetitions; -1: not recorded */
  double load;                   /* other processes' CPU use during the measurement, in cores; -1: not recorded */
  int final;                     /* 1: time_ms comes from the finalist round, interleaved with the default */
  int chosen;                    /* 1: the finalist round chose this row for its problem (attn_db_meas_choose) */
  int is_default;                /* 1: the kernel is the untuned default configuration of its problem */
  /* Schema 6: what limits a model row's time ("tensor_cores", "special_functions", "fp32_alu", "shared_memory",
   * "dram", "l2", "occupancy", "launch"); NULL: none (measured rows, older rows). */
  const char *bound;
  char bound_buf[32];            /* filled by attn_db_meas_exists */
  /* Schema 7: the head dimension of V and O. put: 0 takes the kernel's (its spec text's " dv=N", else d); foreach
   * and the best view: always the stored value (rows from before schema 7 were migrated to d_v = d). */
  int d_v;
  /* Schema 8, part of the key: the pass ("fwd" | "bwd"; NULL on put: "fwd") and the variant (score modifiers and KV
   * layout as canonical text, at most ATTN_DB_VARIANT_MAX bytes of printable ASCII; NULL on put: "", dense). foreach
   * and the best view: the stored text (rows from before schema 8 are "fwd" and ""). */
  const char *pass;
  const char *variant;
} attn_db_meas;

#define ATTN_DB_VARIANT_MAX 255
/* Backward rows' gflops count 2.5 times the forward's flops, as FlashAttention does. */
#define ATTN_DB_BWD_FLOPS 2.5

/* INSERT OR REPLACE of m (its key replaces an existing row), committed before it returns unless inside
 * attn_db_begin. */
int attn_db_meas_put(attn_db *db, const attn_db_meas *m);
/* 1 when a row with m's key is stored (and, when got is not NULL, its values copied into got: id, run_id,
 * time_ms, gflops, has_error, error, reads, writes and the *_buf fields, with status/log/provenance/created
 * pointing at them); 0 when not; -1 on a database error. m's device_id/kernel_id may be 0 with device/spec set:
 * an unknown device or kernel then means 0 (nothing is created). */
int attn_db_meas_exists(attn_db *db, const attn_db_meas *m, attn_db_meas *got);
/* The tuner's rule for two rows with one key (import, merge): 1 when a should replace b. An 'ok' row beats any
 * other; of two failed rows a kernel's own verdict (wrong, compile_error, invalid) beats an environmental failure
 * (error, launch_error, skipped), then the newer. Of two 'ok' rows a finalist-round time beats a screening time, then
 * the lower time (interference from other processes only ever adds time, so of two medians of one kernel on one
 * problem the lower is the closer to the machine's speed), then the newer. */
int attn_db_meas_better(const attn_db_meas *a, const attn_db_meas *b);

/* Marks m's row (found by its key) as the finalist round's choice for its problem and clears the mark on every
 * other row of that problem (the key without the kernel), in one transaction. ATTN_EINVAL when no row has m's key. */
int attn_db_meas_choose(attn_db *db, const attn_db_meas *m);
/* Every measurement in id order (strings valid during the call only); a nonzero cb return stops and is returned.
 * 0 when done, -1 on a database error. */
int attn_db_meas_foreach(attn_db *db, int (*cb)(void *ctx, const attn_db_meas *m), void *ctx);
/* Number of measurements stored, or -1. */
long long attn_db_meas_count(attn_db *db);

/* The view `best`: per problem (device, d, d_v, dtype, causal, n, n_kv, batch, heads, heads_kv, threads, pass,
 * variant) one 'ok' row: exact algorithms before approximate ones, measured before model, the finalist round's choice
 * before any other, then the tie rule above. Ordered by device, pass, variant, dtype, causal, d, d_v, n, n_kv, width.
 * Same return convention as meas_foreach. */
int attn_db_best_foreach(attn_db *db, int (*cb)(void *ctx, const attn_db_meas *m), void *ctx);

/* ---- What ptxas reports for a compiled configuration (schema 6), keyed by its canonical spec text (which names
 * the arch) and the compiler ("nvrtc 13.0"): read by the performance model and the search space instead of
 * compiling again. get: ATTN_OK, ATTN_EUNSUPPORTED when not stored, ATTN_EDB. */
int attn_db_kres_get(attn_db *db, const char *spec, const char *compiler, int *registers, long *spill_bytes,
                     long *smem_static);
int attn_db_kres_put(attn_db *db, const char *spec, const char *compiler, int registers, long spill_bytes,
                     long smem_static);

#endif
