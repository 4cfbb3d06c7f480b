/* artifact.c: compiled artifacts (shared objects, cubins) in the database, each stored with the SHA-256 of its bytes
 * and never handed out unless the bytes still match it. */
#include "db_int.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ART_KEY "source_hash = ?1 AND compiler = ?2 AND flags = ?3 AND arch = ?4"

/* The statement of slot with an artifact's key as parameters 1..4; NULL when it cannot be prepared. */
static sqlite3_stmt *keyed(attn_db *db, int slot, const char *sql, const char *source_hash, const char *compiler,
                           const char *flags, const char *arch) {
  sqlite3_stmt *s = attn_dbi_stmt(db, slot, sql);
  if (s) {
    attn_dbi_text(s, 1, source_hash);
    attn_dbi_text(s, 2, compiler ? compiler : "");
    attn_dbi_text(s, 3, flags ? flags : "");
    attn_dbi_text(s, 4, arch ? arch : "");
  }
  return s;
}

int attn_db_artifact_put(attn_db *db, const char *source_hash, const char *compiler, const char *flags,
                         const char *arch, const void *blob, size_t len) {
  if (!db || !source_hash || (!blob && len)) {
    if (db) attn_dbi_fail(db, ATTN_EINVAL, "attn_db_artifact_put: NULL argument");
    return ATTN_EINVAL;
  }
  char sha[65];
  if (attn_sha256_hex(blob, len, sha) != 0) return attn_dbi_fail(db, ATTN_ERUNTIME, "hashing an artifact failed");
  pthread_mutex_lock(&db->mu);
  int rc = attn_dbi_write_begin(db);
  if (rc == ATTN_OK) {
    sqlite3_stmt *s = keyed(db, S_ART_PUT, "INSERT OR REPLACE INTO artifacts(source_hash, compiler, flags, arch, "
                            "blob, sha256) VALUES (?1, ?2, ?3, ?4, ?5, ?6)", source_hash, compiler, flags, arch);
    if (s && len) sqlite3_bind_blob64(s, 5, blob, (sqlite3_uint64)len, SQLITE_STATIC);
    else if (s) sqlite3_bind_zeroblob(s, 5, 0);
    if (s) attn_dbi_text(s, 6, sha);
    rc = attn_dbi_write_end(db, attn_dbi_exec(db, s, "storing an artifact"));
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}

typedef struct {
  attn_db *db;
  void **blob;
  size_t *len;
} blob_out;

/* The stored bytes, copied once they match their recorded hash. */
static int blob_row(void *ctx, sqlite3_stmt *s) {
  blob_out *o = ctx;
  const void *p = sqlite3_column_blob(s, 0);
  size_t n = (size_t)sqlite3_column_bytes(s, 0);
  const char *want = (const char *)sqlite3_column_text(s, 1);
  char have[65];
  if (!want) return attn_dbi_fail(o->db, ATTN_EUNSUPPORTED, "the stored artifact has no recorded hash");
  if (attn_sha256_hex(p, n, have) != 0 || strcmp(have, want) != 0)
    return attn_dbi_fail(o->db, ATTN_EUNSUPPORTED, "the stored artifact does not match its recorded hash");
  void *copy = malloc(n ? n : 1);
  if (!copy) return attn_dbi_fail(o->db, ATTN_ENOMEM, "out of memory for an artifact of %zu bytes", n);
  if (n) memcpy(copy, p, n);
  *o->blob = copy;
  *o->len = n;
  return ATTN_OK;
}

int attn_db_artifact_get(attn_db *db, const char *source_hash, const char *compiler, const char *flags,
                         const char *arch, void **blob, size_t *len) {
  if (blob) *blob = NULL;
  if (len) *len = 0;
  if (!db || !source_hash || !blob || !len) {
    if (db) attn_dbi_fail(db, ATTN_EINVAL, "attn_db_artifact_get: NULL argument");
    return ATTN_EINVAL;
  }
  pthread_mutex_lock(&db->mu);
  sqlite3_stmt *s = keyed(db, S_ART_GET, "SELECT blob, sha256 FROM artifacts WHERE " ART_KEY, source_hash, compiler,
                          flags, arch);
  blob_out o = {db, blob, len};
  int rc = attn_dbi_one(db, s, "reading an artifact", blob_row, &o, "no stored artifact");
  pthread_mutex_unlock(&db->mu);
  return rc;
}

static int digest_row(void *ctx, sqlite3_stmt *s) {
  snprintf(ctx, 65, "%s", (const char *)sqlite3_column_text(s, 0));
  return ATTN_OK;
}

int attn_db_artifact_digest(attn_db *db, const char *source_hash, const char *compiler, const char *flags,
                            const char *arch, char sha256[65]) {
  sha256[0] = '\0';
  if (!db || !source_hash) {
    if (db) attn_dbi_fail(db, ATTN_EINVAL, "attn_db_artifact_digest: NULL argument");
    return ATTN_EINVAL;
  }
  pthread_mutex_lock(&db->mu);
  sqlite3_stmt *s = keyed(db, S_ART_DIGEST, "SELECT sha256 FROM artifacts WHERE " ART_KEY " AND sha256 IS NOT NULL",
                          source_hash, compiler, flags, arch);
  int rc = attn_dbi_one(db, s, "reading an artifact's hash", digest_row, sha256, "no stored artifact");
  pthread_mutex_unlock(&db->mu);
  return rc;
}
