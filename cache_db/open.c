/* open.c: opening the tuning database (db.h's modes: a writer in WAL, migrated and checked; a reader that falls back
 * to reading only; a read-only open, immutable where no -shm can be made) and closing it. */
#define _POSIX_C_SOURCE 200809L
#include "db_int.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int env_timeout_ms(void) {
  const char *e = getenv("ATTN_DB_TIMEOUT_MS");
  if (e && *e) {
    char *end;
    long v = strtol(e, &end, 10);
    if (*end == '\0' && v >= 0 && v <= 3600000) return (int)v;
  }
  return 5000;
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

/* Runs constant SQL, retrying while it is busy until the timeout: switching a fresh file to WAL while another
 * process does the same can report SQLITE_BUSY without the busy handler having waited. */
static int exec_retry(attn_db *db, const char *sql) {
  double t0 = attn_dbi_now_ms();
  for (;;) {
    char *msg = NULL;
    int rc = sqlite3_exec(db->h, sql, NULL, NULL, &msg);
    if (rc == SQLITE_OK) return ATTN_OK;
    int busy = (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED;
    if (!busy || attn_dbi_now_ms() - t0 >= db->timeout_ms) {
      attn_dbi_fail(db, ATTN_EDB, "%s", msg ? msg : sqlite3_errmsg(db->h));
      sqlite3_free(msg);
      return ATTN_EDB;
    }
    sqlite3_free(msg);
    attn_dbi_nap_ms(10);
  }
}

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

/* Opens a connection with the settings every one gets. */
static int open_handle(attn_db *db, const char *path, int flags) {
  if (sqlite3_open_v2(path, &db->h, flags | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK)
    return attn_dbi_sqlfail(db, "open");
  sqlite3_extended_result_codes(db->h, 1);
  sqlite3_busy_timeout(db->h, db->timeout_ms);
  if (sqlite3_create_function(db->h, "attn_logdist", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL, logdist_fn, NULL,
                              NULL) != SQLITE_OK)
    return attn_dbi_sqlfail(db, "registering attn_logdist");
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
  int v = 0, rc = open_handle(db, path, SQLITE_OPEN_READONLY);
  if (rc != ATTN_OK) return rc;
  rc = attn_dbi_read_version(db, &v);
  if (rc != ATTN_OK && sqlite3_extended_errcode(db->h) == SQLITE_READONLY_DIRECTORY) {
    /* WAL, and no -shm can be made in this directory. Without a -wal holding changes the file alone is the whole
     * database, and immutable=1 reads it without the shared memory (db.h says what that costs). */
    char wal[4200], uri[16384];
    struct stat ws;
    if (snprintf(wal, sizeof wal, "%s-wal", path) >= (int)sizeof wal)
      return attn_dbi_fail(db, ATTN_EDB, "path too long");
    int no_changes = stat(wal, &ws) != 0 ? errno == ENOENT : ws.st_size == 0;
    if (!no_changes)
      return attn_dbi_fail(db, ATTN_EDB, "%s holds changes, and no shared-memory file (-shm) can be made beside it "
                           "(the directory is not writable): open it once with a writer to fold them in", wal);
    if (immutable_uri(path, uri, sizeof uri) != 0) return attn_dbi_fail(db, ATTN_EDB, "path too long");
    drop_handle(db);
    rc = open_handle(db, uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
    if (rc == ATTN_OK) rc = attn_dbi_read_version(db, &v);
  }
  if (rc != ATTN_OK) return rc;
  if (v < attn_db_schema_version())
    return attn_dbi_fail(db, ATTN_EUNSUPPORTED, "schema version %d is older than this build's %d; open it once with "
                         "a writer (attntune tune/import) to migrate", v, attn_db_schema_version());
  if (v > attn_db_schema_version())
    return attn_dbi_fail(db, ATTN_EDB, "schema version %d is newer than this build understands (%d)", v,
                         attn_db_schema_version());
  return ATTN_OK;
}

/* A writer's open (db.h): WAL, checked when asked, migrated. */
static int open_writer(attn_db *db, const char *path, int create, int check, const struct stat *sb) {
  int rc = open_handle(db, path, SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0));
  if (rc != ATTN_OK) return rc;
  /* journal_mode is the first statement that reads the file: "file is not a database" or a lock shows here */
  rc = exec_retry(db, "PRAGMA journal_mode = WAL");
  if (rc == ATTN_OK) rc = exec_retry(db, "PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL");
  /* before migrating: a damaged file is neither migrated nor written */
  if (rc == ATTN_OK && check) rc = attn_dbi_check(db, sb);
  if (rc == ATTN_OK) rc = attn_dbi_migrate(db);
  if (rc != ATTN_OK && (sqlite3_extended_errcode(db->h) & 0xff) == SQLITE_READONLY) {
    /* SQLite's "attempt to write a readonly database" does not say what to do */
    char why[sizeof db->err];
    memcpy(why, db->err, sizeof why);
    rc = attn_dbi_fail(db, ATTN_EDB, "%s (a writer needs to write the file and its directory; show, export and the "
                       "runtime can read it)", why);
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
  int rc;
  if (readonly) {
    rc = open_readonly(db, path);
    if (rc == ATTN_OK && (flags & ATTN_DB_CHECK)) rc = attn_dbi_check(db, &sb);
  } else {
    rc = open_writer(db, path, create, check, &sb);
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
  if (db->h && sqlite3_get_autocommit(db->h) == 0) sqlite3_exec(db->h, "ROLLBACK", NULL, NULL, NULL);
  drop_handle(db);
  pthread_mutex_destroy(&db->mu);
  free(db);
}

const char *attn_db_errmsg(attn_db *db) { return db ? db->err : "no database"; }

const char *attn_db_filename(attn_db *db) {
  const char *f = db ? sqlite3_db_filename(db->h, "main") : NULL;
  return f ? f : "";
}
