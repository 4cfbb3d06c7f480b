/* db.c: the core every query of the tuning database goes through: the handle's messages, its statements (each
 * prepared once per handle, SQLITE_PREPARE_PERSISTENT, and bound; no SQL is built from values), the one row loop,
 * and write transactions (attn_db_begin's explicit one, and one per write otherwise). */
#define _POSIX_C_SOURCE 200809L
#include "db_int.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

int attn_dbi_fail(attn_db *db, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(db->err, sizeof db->err, fmt, ap);
  va_end(ap);
  return code;
}

int attn_dbi_sqlfail(attn_db *db, const char *what) {
  return attn_dbi_fail(db, ATTN_EDB, "%s: %s", what, sqlite3_errmsg(db->h));
}

sqlite3_stmt *attn_dbi_stmt(attn_db *db, int slot, const char *sql) {
  if (!db->st[slot] &&
      sqlite3_prepare_v3(db->h, sql, -1, SQLITE_PREPARE_PERSISTENT, &db->st[slot], NULL) != SQLITE_OK) {
    attn_dbi_sqlfail(db, "prepare");
    db->st[slot] = NULL;
  }
  return db->st[slot];
}

void attn_dbi_text(sqlite3_stmt *s, int i, const char *v) {
  if (v) sqlite3_bind_text(s, i, v, -1, SQLITE_TRANSIENT);
  else sqlite3_bind_null(s, i);
}

void attn_dbi_id(sqlite3_stmt *s, int i, long long v) {
  if (v > 0) sqlite3_bind_int64(s, i, v);
  else sqlite3_bind_null(s, i);
}

int attn_dbi_rows(attn_db *db, sqlite3_stmt *s, const char *what, int (*row)(void *ctx, sqlite3_stmt *s),
                  void *ctx) {
  if (!s) return -1;
  int rc = 0, src;
  while (rc == 0 && (src = sqlite3_step(s)) == SQLITE_ROW) rc = row ? row(ctx, s) : 1;
  if (rc == 0 && src != SQLITE_DONE) {
    attn_dbi_sqlfail(db, what);
    rc = -1;
  }
  sqlite3_reset(s);
  sqlite3_clear_bindings(s);
  return rc;
}

typedef struct {
  int (*row)(void *ctx, sqlite3_stmt *s);
  void *ctx;
  int rc;
} one_row;

static int first_row(void *ctx, sqlite3_stmt *s) {
  one_row *o = ctx;
  o->rc = o->row(o->ctx, s);
  return 1;
}

int attn_dbi_one(attn_db *db, sqlite3_stmt *s, const char *what, int (*row)(void *ctx, sqlite3_stmt *s), void *ctx,
                 const char *none) {
  one_row o = {row, ctx, ATTN_OK};
  int found = attn_dbi_rows(db, s, what, first_row, &o);
  if (found > 0) return o.rc;
  if (found < 0) return ATTN_EDB;
  return none ? attn_dbi_fail(db, ATTN_EUNSUPPORTED, "%s", none) : ATTN_EUNSUPPORTED;
}

int attn_dbi_each(attn_db *db, int slot, const char *sql, const char *what, int (*row)(void *ctx, sqlite3_stmt *s),
                  void *ctx) {
  pthread_mutex_lock(&db->mu);
  int rc = attn_dbi_rows(db, attn_dbi_stmt(db, slot, sql), what, row, ctx);
  pthread_mutex_unlock(&db->mu);
  return rc;
}

int attn_dbi_exec(attn_db *db, sqlite3_stmt *s, const char *what) {
  return attn_dbi_rows(db, s, what, NULL, NULL) == 0 ? ATTN_OK : ATTN_EDB;
}

long long attn_dbi_col_i64(sqlite3_stmt *s, int i, long long dflt) {
  return sqlite3_column_type(s, i) == SQLITE_NULL ? dflt : sqlite3_column_int64(s, i);
}

double attn_dbi_col_double(sqlite3_stmt *s, int i, double dflt) {
  return sqlite3_column_type(s, i) == SQLITE_NULL ? dflt : sqlite3_column_double(s, i);
}

const char *attn_dbi_dtype_text(attn_dtype t) {
  return t == ATTN_F16 ? "f16" : t == ATTN_BF16 ? "bf16" : t == ATTN_F32 ? "f32" : NULL;
}

attn_dtype attn_dbi_dtype_value(const char *s) {
  if (s && strcmp(s, "f16") == 0) return ATTN_F16;
  if (s && strcmp(s, "bf16") == 0) return ATTN_BF16;
  return ATTN_F32;
}

double attn_dbi_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void attn_dbi_nap_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ---- write transactions */

/* Steps BEGIN IMMEDIATE, COMMIT or ROLLBACK once: SQLite's result code, or -1 when it cannot be prepared. */
static int step_once(attn_db *db, int slot) {
  static const char *const sql[] = {[S_BEGIN] = "BEGIN IMMEDIATE", [S_COMMIT] = "COMMIT", [S_ROLLBACK] = "ROLLBACK"};
  sqlite3_stmt *s = attn_dbi_stmt(db, slot, sql[slot]);
  if (!s) return -1;
  int rc = sqlite3_step(s);
  sqlite3_reset(s);
  return rc;
}

/* BEGIN IMMEDIATE, retried while another writer holds the lock, until the busy timeout has passed: the busy
 * handler does most of the waiting, but SQLite skips it in some cases (WAL recovery, snapshot upgrades). */
int attn_dbi_write_begin(attn_db *db) {
  if (db->in_tx) return ATTN_OK;
  double t0 = attn_dbi_now_ms();
  for (;;) {
    int rc = step_once(db, S_BEGIN);
    if (rc == -1) return ATTN_EDB;
    if (rc == SQLITE_DONE) return ATTN_OK;
    if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED) return attn_dbi_sqlfail(db, "begin transaction");
    if (attn_dbi_now_ms() - t0 >= db->timeout_ms) {
      return attn_dbi_fail(db, ATTN_EDB, "database is locked: another connection held it past the busy timeout "
                           "(%d ms)", db->timeout_ms);
    }
    attn_dbi_nap_ms(10);
  }
}

int attn_dbi_write_end(attn_db *db, int rc) {
  if (db->in_tx) return rc;
  if (rc == ATTN_OK) {
    double t0 = attn_dbi_now_ms();
    for (;;) {
      int src = step_once(db, S_COMMIT);
      if (src == -1) break;
      if (src == SQLITE_DONE) return ATTN_OK;
      if ((src & 0xff) != SQLITE_BUSY || attn_dbi_now_ms() - t0 >= db->timeout_ms) break;
      attn_dbi_nap_ms(10);
    }
    rc = attn_dbi_sqlfail(db, "commit");
  }
  if (sqlite3_get_autocommit(db->h) == 0) step_once(db, S_ROLLBACK);
  return rc;
}

int attn_db_begin(attn_db *db) {
  if (!db) return ATTN_EINVAL;
  pthread_mutex_lock(&db->mu);
  int rc = db->in_tx ? attn_dbi_fail(db, ATTN_EINVAL, "a transaction is already open") : attn_dbi_write_begin(db);
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
    rc = attn_dbi_write_end(db, ATTN_OK);
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}

void attn_db_rollback(attn_db *db) {
  if (!db) return;
  pthread_mutex_lock(&db->mu);
  if (db->in_tx) {
    db->in_tx = 0;
    attn_dbi_write_end(db, ATTN_EDB);
  }
  pthread_mutex_unlock(&db->mu);
}
