/* db_int.h: what the files of cache_db share and nothing outside it sees: the handle, its statement slots, and the
 * helpers every query goes through (errors, prepare once, bind, step the rows, write transactions). */
#ifndef ATTN_DB_INT_H
#define ATTN_DB_INT_H

#include <pthread.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include "db.h"

/* Internal to the library that links cache_db: never exported from libattn. */
#define ATTN_DBI __attribute__((visibility("hidden")))

/* The statements a handle keeps prepared (SQLITE_PREPARE_PERSISTENT), one slot each, prepared on first use from the
 * text the file that owns the slot passes. */
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

struct attn_db {
  sqlite3 *h;
  sqlite3_stmt *st[S_COUNT];
  pthread_mutex_t mu;
  int in_tx;        /* inside attn_db_begin */
  int timeout_ms;
  char err[1024];
};

/* SQL for the current time, as every stored timestamp is written. */
#define ATTN_DBI_NOW "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"

/* ---- db.c: errors, statements, rows, transactions */

/* Sets the handle's message; returns code. */
ATTN_DBI __attribute__((format(printf, 3, 4))) int attn_dbi_fail(attn_db *db, int code, const char *fmt, ...);
/* ATTN_EDB with "what: SQLite's message". */
ATTN_DBI int attn_dbi_sqlfail(attn_db *db, const char *what);
/* The statement of slot, prepared from sql on first use; NULL (the message set) when it cannot be prepared. */
ATTN_DBI sqlite3_stmt *attn_dbi_stmt(attn_db *db, int slot, const char *sql);
/* v, or NULL when v is NULL (text) or not positive (an id). */
ATTN_DBI void attn_dbi_text(sqlite3_stmt *s, int i, const char *v);
ATTN_DBI void attn_dbi_id(sqlite3_stmt *s, int i, long long v);
/* The one row loop: steps s, calling row(ctx, s) on each row until it returns nonzero (row NULL: stops at the first
 * row with 1), then resets s and clears its bindings. Returns row's nonzero return, 0 once every row was read, or -1
 * when SQLite fails ("what: SQLite's message") or s is NULL (its prepare failed; the message says so). */
ATTN_DBI int attn_dbi_rows(attn_db *db, sqlite3_stmt *s, const char *what, int (*row)(void *ctx, sqlite3_stmt *s),
                           void *ctx);
/* The first row of s through row, which returns an ATTN_ code for it: that code; ATTN_EUNSUPPORTED when there is no
 * row (with the message none, unless NULL); ATTN_EDB as attn_dbi_rows fails. */
ATTN_DBI int attn_dbi_one(attn_db *db, sqlite3_stmt *s, const char *what, int (*row)(void *ctx, sqlite3_stmt *s),
                          void *ctx, const char *none);
/* attn_dbi_rows over the statement of slot, under the handle's lock: the *_foreach functions. */
ATTN_DBI int attn_dbi_each(attn_db *db, int slot, const char *sql, const char *what,
                           int (*row)(void *ctx, sqlite3_stmt *s), void *ctx);
/* A statement that returns no rows: ATTN_OK, or ATTN_EDB as attn_dbi_rows fails. */
ATTN_DBI int attn_dbi_exec(attn_db *db, sqlite3_stmt *s, const char *what);
/* Column i as a long long or a double, with dflt for NULL. */
ATTN_DBI long long attn_dbi_col_i64(sqlite3_stmt *s, int i, long long dflt);
ATTN_DBI double attn_dbi_col_double(sqlite3_stmt *s, int i, double dflt);
/* "f32" | "f16" | "bf16" (NULL for another value), and back (f32 for anything else). */
ATTN_DBI const char *attn_dbi_dtype_text(attn_dtype t);
ATTN_DBI attn_dtype attn_dbi_dtype_value(const char *s);
ATTN_DBI double attn_dbi_now_ms(void);
ATTN_DBI void attn_dbi_nap_ms(int ms);
/* Opens a write transaction (none inside attn_db_begin's), waiting out other writers up to the busy timeout. */
ATTN_DBI int attn_dbi_write_begin(attn_db *db);
/* Commits (rc == ATTN_OK) or rolls back that transaction; returns the outcome. Inside attn_db_begin: rc as is. */
ATTN_DBI int attn_dbi_write_end(attn_db *db, int rc);

/* ---- schema.c */

ATTN_DBI int attn_dbi_read_version(attn_db *db, int *v);
/* Takes the database from its user_version to this build's, one transaction for all steps. */
ATTN_DBI int attn_dbi_migrate(attn_db *db);

/* ---- check.c: PRAGMA quick_check, once per process per file (sb: the file as stat saw it before the open). */
ATTN_DBI int attn_dbi_check(attn_db *db, const struct stat *sb);

/* ---- device.c and kernel.c, inside a write transaction where they create */

/* The id of device name (0 when absent). */
ATTN_DBI int attn_dbi_device_find(attn_db *db, const char *name, long long *id);
/* Creates or updates the device (db.h's attn_db_device_id), then its id. */
ATTN_DBI int attn_dbi_device_upsert(attn_db *db, const char *name, const char *info, long long *id);
/* The id of the kernel with spec text (0 when absent); *hash_differs: hash is given and not the stored one. */
ATTN_DBI int attn_dbi_kernel_find(attn_db *db, const char *spec, long long *id, int *hash_differs, const char *hash);
/* Creates the kernel (or updates its hash), then its id. */
ATTN_DBI int attn_dbi_kernel_upsert(attn_db *db, const char *spec, const char *hash, long long *id);

#endif
