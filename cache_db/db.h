/* db.h: the tuning database (SQLite). The only module that speaks SQL; everything else calls these. */
#ifndef ATTN_DB_H
#define ATTN_DB_H

#include <stddef.h>
#include "attn.h"

typedef struct attn_db attn_db;

/* Opens (create != 0: creates and migrates) the database. WAL, busy timeout, schema migrated by user_version.
 * create == 0 and no file: ATTN_EDB with "no such database". Not a SQLite file / locked past the timeout:
 * ATTN_EDB with SQLite's message in err. */
int  attn_db_open(const char *path, int create, attn_db **out, char *err, size_t errlen);
void attn_db_close(attn_db *db);   /* NULL is fine */
const char *attn_db_errmsg(attn_db *db);

/* What the runtime asks: the best stored configuration for a problem on a device. */
typedef struct attn_db_query {
  const char *device;     /* e.g. "cpu:Intel(R) Xeon(R) Processor" or "cuda:NVIDIA H100 80GB HBM3" / "H100" */
  int d, causal, n;
  attn_dtype dtype;
  double tolerance;       /* rows with error > tolerance (approximate algorithms) are skipped; 0: exact only */
} attn_db_query;

typedef struct attn_db_best {
  char spec[512];          /* attn_spec_format text */
  int n;                   /* the n the row was tuned at (nearest by log distance) */
  double time_ms, error;
  char provenance[16];     /* "measured" | "model" */
} attn_db_best;

/* ATTN_OK and *out filled; ATTN_EUNSUPPORTED when no row matches (caller falls back to defaults); ATTN_EDB on error.
 * Exact (device, d, dtype, causal); measured rows before model rows; then nearest n by |log n - log n_row|. */
int attn_db_lookup(attn_db *db, const attn_db_query *q, attn_db_best *out);

/* Compiled artifacts (shared objects, cubins), keyed by source hash + compiler + flags + arch. */
int attn_db_artifact_put(attn_db *db, const char *source_hash, const char *compiler, const char *flags,
                         const char *arch, const void *blob, size_t len);
/* ATTN_OK with *blob malloc'd (caller frees); ATTN_EUNSUPPORTED when absent. */
int attn_db_artifact_get(attn_db *db, const char *source_hash, const char *compiler, const char *flags,
                         const char *arch, void **blob, size_t *len);

#endif
