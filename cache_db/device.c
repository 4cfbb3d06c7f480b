/* device.c: the devices rows were measured on or modelled for, and the tuner's runs (one row per command). */
#include "db_int.h"
#include <string.h>

static int id_row(void *ctx, sqlite3_stmt *s) {
  *(long long *)ctx = sqlite3_column_int64(s, 0);
  return 1;
}

/* SELECT id by name: ATTN_OK with *id (0 when absent). */
int attn_dbi_device_find(attn_db *db, const char *name, long long *id) {
  *id = 0;
  sqlite3_stmt *s = attn_dbi_stmt(db, S_DEV_GET, "SELECT id FROM devices WHERE name = ?1");
  if (s) attn_dbi_text(s, 1, name);
  return attn_dbi_rows(db, s, "reading devices", id_row, id) < 0 ? ATTN_EDB : ATTN_OK;
}

int attn_dbi_device_upsert(attn_db *db, const char *name, const char *info, long long *id) {
  /* kind from the description's "kind" (cpu, else a GPU), or from the name; arch from its "arch" */
  sqlite3_stmt *s = attn_dbi_stmt(
      db, S_DEV_UPSERT,
      "INSERT INTO devices(name, kind, arch, info) VALUES (?1, "
      "CASE WHEN json_valid(?2) AND json_extract(?2, '$.kind') IS NOT NULL "
      "THEN CASE WHEN json_extract(?2, '$.kind') = 'cpu' THEN 'cpu' ELSE 'cuda' END "
      "WHEN ?1 LIKE 'cpu:%' THEN 'cpu' ELSE 'cuda' END, "
      "CASE WHEN json_valid(?2) THEN json_extract(?2, '$.arch') END, ?2) "
      "ON CONFLICT(name) DO UPDATE SET info = coalesce(excluded.info, info), arch = coalesce(excluded.arch, arch)");
  if (s) {
    attn_dbi_text(s, 1, name);
    attn_dbi_text(s, 2, info);
  }
  int rc = attn_dbi_exec(db, s, "storing a device");
  return rc == ATTN_OK ? attn_dbi_device_find(db, name, id) : rc;
}

int attn_db_device_id(attn_db *db, const char *name, const char *info_json, long long *id) {
  if (!db || !name || !*name || !id) {
    if (db) attn_dbi_fail(db, ATTN_EINVAL, "attn_db_device_id: no device name");
    return ATTN_EINVAL;
  }
  pthread_mutex_lock(&db->mu);
  int rc = attn_dbi_write_begin(db);
  if (rc == ATTN_OK) rc = attn_dbi_write_end(db, attn_dbi_device_upsert(db, name, info_json, id));
  pthread_mutex_unlock(&db->mu);
  return rc;
}

int attn_db_device_put(attn_db *db, const attn_db_device *dev, long long *id) {
  if (!db || !dev || !dev->name || !*dev->name) {
    if (db) attn_dbi_fail(db, ATTN_EINVAL, "attn_db_device_put: no device name");
    return ATTN_EINVAL;
  }
  if (dev->kind && strcmp(dev->kind, "cpu") != 0 && strcmp(dev->kind, "cuda") != 0)
    return attn_dbi_fail(db, ATTN_EINVAL, "device %s: kind '%s' is not cpu or cuda", dev->name, dev->kind);
  pthread_mutex_lock(&db->mu);
  int rc = attn_dbi_write_begin(db);
  if (rc == ATTN_OK) {
    sqlite3_stmt *s = attn_dbi_stmt(db, S_DEV_PUT,
                                    "INSERT INTO devices(name, kind, arch, info) VALUES (?1, "
                                    "coalesce(?2, CASE WHEN ?1 LIKE 'cpu:%' THEN 'cpu' ELSE 'cuda' END), ?3, ?4) "
                                    "ON CONFLICT(name) DO UPDATE SET kind = excluded.kind, arch = excluded.arch, "
                                    "info = excluded.info");
    if (s) {
      attn_dbi_text(s, 1, dev->name);
      attn_dbi_text(s, 2, dev->kind);
      attn_dbi_text(s, 3, dev->arch);
      attn_dbi_text(s, 4, dev->info);
    }
    rc = attn_dbi_exec(db, s, "storing a device");
    long long got = 0;
    if (rc == ATTN_OK) rc = attn_dbi_device_find(db, dev->name, &got);
    if (rc == ATTN_OK && id) *id = got;
    rc = attn_dbi_write_end(db, rc);
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}

typedef struct {
  attn_db *db;
  int (*cb)(void *ctx, const attn_db_device *dev);
  void *ctx;
} device_each;

static int device_row(void *ctx, sqlite3_stmt *s) {
  const device_each *e = ctx;
  attn_db_device d = {.id = sqlite3_column_int64(s, 0),
                      .name = (const char *)sqlite3_column_text(s, 1),
                      .kind = (const char *)sqlite3_column_text(s, 2),
                      .arch = (const char *)sqlite3_column_text(s, 3),
                      .info = (const char *)sqlite3_column_text(s, 4)};
  /* the schema says NOT NULL, but a file from elsewhere can say otherwise (quick_check follows its schema): a
   * device without a name is refused, never handed to callers that compare names (merge crashed on one) */
  if (!d.name) {
    attn_dbi_fail(e->db, ATTN_EDB, "damaged database: device %lld has no name", d.id);
    return -1;
  }
  return e->cb(e->ctx, &d);
}

int attn_db_device_foreach(attn_db *db, int (*cb)(void *ctx, const attn_db_device *dev), void *ctx) {
  if (!db || !cb) return -1;
  device_each e = {db, cb, ctx};
  return attn_dbi_each(db, S_DEV_ALL, "SELECT id, name, kind, arch, info FROM devices ORDER BY id", "reading devices",
                       device_row, &e);
}

/* ---- runs */

int attn_db_run_begin(attn_db *db, long long device_id, const char *command, long long *run_id) {
  if (!db || !run_id) return ATTN_EINVAL;
  *run_id = 0;
  pthread_mutex_lock(&db->mu);
  int rc = attn_dbi_write_begin(db);
  if (rc == ATTN_OK) {
    sqlite3_stmt *s = attn_dbi_stmt(db, S_RUN_BEGIN, "INSERT INTO runs(device_id, command) VALUES (?1, ?2)");
    if (s) {
      attn_dbi_id(s, 1, device_id);
      attn_dbi_text(s, 2, command ? command : "");
    }
    rc = attn_dbi_exec(db, s, "starting a run");
    if (rc == ATTN_OK) *run_id = sqlite3_last_insert_rowid(db->h);
    rc = attn_dbi_write_end(db, rc);
    if (rc != ATTN_OK) *run_id = 0;
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}

int attn_db_run_end(attn_db *db, long long run_id, const char *status) {
  if (!db) return ATTN_EINVAL;
  pthread_mutex_lock(&db->mu);
  int rc = attn_dbi_write_begin(db);
  if (rc == ATTN_OK) {
    sqlite3_stmt *s =
        attn_dbi_stmt(db, S_RUN_END, "UPDATE runs SET status = ?2, ended = " ATTN_DBI_NOW " WHERE id = ?1");
    if (s) {
      sqlite3_bind_int64(s, 1, run_id);
      attn_dbi_text(s, 2, status ? status : "done");
    }
    rc = attn_dbi_write_end(db, attn_dbi_exec(db, s, "ending a run"));
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}

int attn_db_run_interrupt(attn_db *db, long long run_id, int *changed) {
  if (changed) *changed = 0;
  if (!db) return ATTN_EINVAL;
  pthread_mutex_lock(&db->mu);
  int rc = attn_dbi_write_begin(db), n = 0;
  if (rc == ATTN_OK) {
    /* prepared here rather than kept: it runs once per dead run. "still running" in the WHERE: a run that ended
     * between the caller's look and this update keeps its own status. */
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(db->h, "UPDATE runs SET status = 'interrupted' WHERE id = ?1 AND status = 'running'", -1,
                           &s, NULL) != SQLITE_OK) {
      rc = attn_dbi_sqlfail(db, "prepare");
    } else {
      sqlite3_bind_int64(s, 1, run_id);
      rc = attn_dbi_exec(db, s, "marking a run interrupted");
      if (rc == ATTN_OK) n = sqlite3_changes(db->h);
    }
    sqlite3_finalize(s);
    rc = attn_dbi_write_end(db, rc);
  }
  if (changed) *changed = rc == ATTN_OK && n > 0;
  pthread_mutex_unlock(&db->mu);
  return rc;
}

int attn_db_run_put(attn_db *db, const attn_db_run *run, long long *run_id) {
  if (!db || !run) return ATTN_EINVAL;
  pthread_mutex_lock(&db->mu);
  long long id = 0;
  int began = attn_dbi_write_begin(db) == ATTN_OK;
  int rc = began ? ATTN_OK : ATTN_EDB;
  /* the same run imported twice (same device, start time and command) is one run */
  if (rc == ATTN_OK && run->started) {
    sqlite3_stmt *s = attn_dbi_stmt(db, S_RUN_FIND, "SELECT id FROM runs WHERE started = ?2 AND command = ?3 "
                                    "AND device_id IS (SELECT id FROM devices WHERE name = ?1)");
    if (s) {
      attn_dbi_text(s, 1, run->device);
      attn_dbi_text(s, 2, run->started);
      attn_dbi_text(s, 3, run->command ? run->command : "");
    }
    if (attn_dbi_rows(db, s, "reading runs", id_row, &id) < 0) rc = ATTN_EDB;
  }
  if (rc == ATTN_OK && id == 0) {
    sqlite3_stmt *s = attn_dbi_stmt(db, S_RUN_PUT, "INSERT INTO runs(device_id, started, ended, command, status) "
                                    "VALUES ((SELECT id FROM devices WHERE name = ?1), coalesce(?2, " ATTN_DBI_NOW
                                    "), ?3, ?4, coalesce(?5, 'done'))");
    if (s) {
      attn_dbi_text(s, 1, run->device);
      attn_dbi_text(s, 2, run->started);
      attn_dbi_text(s, 3, run->ended);
      attn_dbi_text(s, 4, run->command ? run->command : "");
      attn_dbi_text(s, 5, run->status);
    }
    rc = attn_dbi_exec(db, s, "storing a run");
    if (rc == ATTN_OK) id = sqlite3_last_insert_rowid(db->h);
  }
  if (began) rc = attn_dbi_write_end(db, rc);
  if (run_id) *run_id = rc == ATTN_OK ? id : 0;
  pthread_mutex_unlock(&db->mu);
  return rc;
}

typedef struct {
  int (*cb)(void *ctx, const attn_db_run *run);
  void *ctx;
} run_each;

static int run_row(void *ctx, sqlite3_stmt *s) {
  const run_each *e = ctx;
  attn_db_run r = {.id = sqlite3_column_int64(s, 0),
                   .device = (const char *)sqlite3_column_text(s, 1),
                   .started = (const char *)sqlite3_column_text(s, 2),
                   .ended = (const char *)sqlite3_column_text(s, 3),
                   .command = (const char *)sqlite3_column_text(s, 4),
                   .status = (const char *)sqlite3_column_text(s, 5)};
  return e->cb(e->ctx, &r);
}

int attn_db_run_foreach(attn_db *db, int (*cb)(void *ctx, const attn_db_run *run), void *ctx) {
  if (!db || !cb) return -1;
  run_each e = {cb, ctx};
  return attn_dbi_each(db, S_RUN_ALL, "SELECT r.id, dv.name, r.started, r.ended, r.command, r.status FROM runs r "
                       "LEFT JOIN devices dv ON dv.id = r.device_id ORDER BY r.id", "reading runs", run_row, &e);
}
