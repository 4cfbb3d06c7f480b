/* kernel.c: kernel configurations (keyed by their canonical spec text) and what ptxas reports for each compiled one
 * (registers, spills, static shared memory), which the performance model and the search space read instead of
 * compiling again. */
#include "db_int.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A head dimension in spec text: digits to a space or the end, 1..2^20 (import's bound on d_v); sscanf's %d would
 * wrap a longer number into a plausible one. */
static int spec_dim(const char *p, int *out) {
  char *end;
  errno = 0;
  long v = strtol(p, &end, 10);
  if (errno || end == p || (*end && *end != ' ') || v < 1 || v > 1 << 20) return -1;
  *out = (int)v;
  return 0;
}

/* The algorithm, target, dtype and d at the head of canonical spec text ("flash cpu f32 d=64 ..."). */
static int spec_head(attn_db *db, const char *spec, char algo[16], char target[16], char dtype[16], int *d) {
  int at = -1;
  if (sscanf(spec, "%15s %15s %15s d=%n", algo, target, dtype, &at) != 3 || at < 0 || spec_dim(spec + at, d) ||
      (strcmp(algo, "flash") && strcmp(algo, "smallcache") && strcmp(algo, "lowrank")) ||
      (strcmp(target, "cpu") && strcmp(target, "cuda")) ||
      (strcmp(dtype, "f32") && strcmp(dtype, "f16") && strcmp(dtype, "bf16")) || *d <= 0)
    return attn_dbi_fail(db, ATTN_EINVAL, "kernel spec '%.200s' is not canonical text (\"ALGO TARGET DTYPE d=D ...\")",
                         spec);
  return ATTN_OK;
}

typedef struct {
  long long *id;
  int *hash_differs;
  const char *hash;
} kernel_out;

static int kernel_row(void *ctx, sqlite3_stmt *s) {
  kernel_out *o = ctx;
  *o->id = sqlite3_column_int64(s, 0);
  const char *h = (const char *)sqlite3_column_text(s, 1);
  *o->hash_differs = o->hash && (!h || strcmp(h, o->hash) != 0);
  return 1;
}

int attn_dbi_kernel_find(attn_db *db, const char *spec, long long *id, int *hash_differs, const char *hash) {
  *id = 0;
  *hash_differs = 0;
  sqlite3_stmt *s = attn_dbi_stmt(db, S_KER_GET, "SELECT id, source_hash FROM kernels WHERE spec = ?1");
  if (s) attn_dbi_text(s, 1, spec);
  kernel_out o = {id, hash_differs, hash};
  return attn_dbi_rows(db, s, "reading kernels", kernel_row, &o) < 0 ? ATTN_EDB : ATTN_OK;
}

int attn_dbi_kernel_upsert(attn_db *db, const char *spec, const char *hash, long long *id) {
  char algo[16], target[16], dtype[16];
  int d = 0, differs;
  int rc = spec_head(db, spec, algo, target, dtype, &d);
  if (rc != ATTN_OK) return rc;
  /* d_v: the text's " dv=N" (written only when it differs from d), else d */
  const char *dvp = strstr(spec, " dv=");
  int dv = d;
  if (dvp && spec_dim(dvp + 4, &dv))
    return attn_dbi_fail(db, ATTN_EINVAL, "kernel spec '%.200s': bad dv", spec);
  sqlite3_stmt *s = attn_dbi_stmt(db, S_KER_UPSERT, "INSERT INTO kernels(spec, algo, target, dtype, d, source_hash, "
                                  "d_v) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT(spec) DO UPDATE SET "
                                  "source_hash = coalesce(excluded.source_hash, source_hash)");
  if (s) {
    attn_dbi_text(s, 1, spec);
    attn_dbi_text(s, 2, algo);
    attn_dbi_text(s, 3, target);
    attn_dbi_text(s, 4, dtype);
    sqlite3_bind_int(s, 5, d);
    attn_dbi_text(s, 6, hash);
    sqlite3_bind_int(s, 7, dv);
  }
  rc = attn_dbi_exec(db, s, "storing a kernel");
  return rc == ATTN_OK ? attn_dbi_kernel_find(db, spec, id, &differs, NULL) : rc;
}

int attn_db_kernel_id(attn_db *db, const char *spec, const char *source_hash, long long *id) {
  if (!db || !spec || !id) {
    if (db) attn_dbi_fail(db, ATTN_EINVAL, "attn_db_kernel_id: NULL argument");
    return ATTN_EINVAL;
  }
  pthread_mutex_lock(&db->mu);
  int differs;
  /* the common case (a known kernel) takes no write lock */
  int rc = attn_dbi_kernel_find(db, spec, id, &differs, source_hash);
  if (rc == ATTN_OK && (*id == 0 || differs)) {
    rc = attn_dbi_write_begin(db);
    if (rc == ATTN_OK) rc = attn_dbi_write_end(db, attn_dbi_kernel_upsert(db, spec, source_hash, id));
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}

/* ---- kernel resources */

typedef struct {
  int *registers;
  long *spill_bytes, *smem_static;
} kres_out;

static int kres_row(void *ctx, sqlite3_stmt *s) {
  kres_out *o = ctx;
  *o->registers = sqlite3_column_int(s, 0);
  *o->spill_bytes = (long)sqlite3_column_int64(s, 1);
  *o->smem_static = (long)sqlite3_column_int64(s, 2);
  return ATTN_OK;
}

int attn_db_kres_get(attn_db *db, const char *spec, const char *compiler, int *registers, long *spill_bytes,
                     long *smem_static) {
  if (!db || !spec || !compiler) return ATTN_EINVAL;
  pthread_mutex_lock(&db->mu);
  sqlite3_stmt *s = attn_dbi_stmt(db, S_KRES_GET, "SELECT registers, spill_bytes, smem_static FROM kernel_resources "
                                  "WHERE spec = ?1 AND compiler = ?2");
  if (s) {
    attn_dbi_text(s, 1, spec);
    attn_dbi_text(s, 2, compiler);
  }
  kres_out o = {registers, spill_bytes, smem_static};
  int rc = attn_dbi_one(db, s, "reading kernel resources", kres_row, &o, NULL);
  pthread_mutex_unlock(&db->mu);
  return rc;
}

int attn_db_kres_put(attn_db *db, const char *spec, const char *compiler, int registers, long spill_bytes,
                     long smem_static) {
  if (!db || !spec || !compiler) return ATTN_EINVAL;
  pthread_mutex_lock(&db->mu);
  int rc = attn_dbi_write_begin(db);
  if (rc == ATTN_OK) {
    sqlite3_stmt *s = attn_dbi_stmt(db, S_KRES_PUT, "INSERT OR REPLACE INTO kernel_resources(spec, compiler, "
                                    "registers, spill_bytes, smem_static) VALUES (?1, ?2, ?3, ?4, ?5)");
    if (s) {
      attn_dbi_text(s, 1, spec);
      attn_dbi_text(s, 2, compiler);
      sqlite3_bind_int(s, 3, registers);
      sqlite3_bind_int64(s, 4, spill_bytes);
      sqlite3_bind_int64(s, 5, smem_static);
    }
    rc = attn_dbi_write_end(db, attn_dbi_exec(db, s, "storing kernel resources"));
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}
