/* rows.c: every measurement, and the `best` view's row per problem, in the one struct (show, export, merge and the
 * tuner's summaries read them). */
#include "db_int.h"
#include <stdlib.h>
#include <string.h>

/* The columns read_row reads, in its order; the best view has them under the same names. */
#define ROW_COLS                                                                                                      \
  "id, run_id, device, spec, source_hash, n, n_kv, d, dtype, causal, batch, heads, heads_kv, time_ms, gflops, reads, " \
  "writes, error, status, log, provenance, created, device_id, kernel_id, threads, reps, iqr_ms, load, final, "      \
  "chosen, is_default, bound, d_v, pass, variant"

static void read_row(sqlite3_stmt *s, attn_db_meas *m) {
  memset(m, 0, sizeof *m);
  m->id = sqlite3_column_int64(s, 0);
  m->run_id = sqlite3_column_int64(s, 1);
  m->device = (const char *)sqlite3_column_text(s, 2);
  m->spec = (const char *)sqlite3_column_text(s, 3);
  m->source_hash = (const char *)sqlite3_column_text(s, 4);
  m->n = sqlite3_column_int(s, 5);
  m->n_kv = sqlite3_column_int(s, 6);
  m->d = sqlite3_column_int(s, 7);
  m->dtype = attn_dbi_dtype_value((const char *)sqlite3_column_text(s, 8));
  m->causal = sqlite3_column_int(s, 9);
  m->batch = sqlite3_column_int(s, 10);
  m->heads = sqlite3_column_int(s, 11);
  m->heads_kv = sqlite3_column_int(s, 12);
  m->time_ms = sqlite3_column_double(s, 13);
  m->gflops = sqlite3_column_double(s, 14);
  m->reads = attn_dbi_col_i64(s, 15, -1);
  m->writes = attn_dbi_col_i64(s, 16, -1);
  m->has_error = sqlite3_column_type(s, 17) != SQLITE_NULL;
  m->error = attn_dbi_col_double(s, 17, 0);
  m->status = (const char *)sqlite3_column_text(s, 18);
  m->log = (const char *)sqlite3_column_text(s, 19);
  m->provenance = (const char *)sqlite3_column_text(s, 20);
  m->created = (const char *)sqlite3_column_text(s, 21);
  m->device_id = sqlite3_column_int64(s, 22);
  m->kernel_id = sqlite3_column_int64(s, 23);
  m->threads = sqlite3_column_int(s, 24);
  m->reps = sqlite3_column_int(s, 25);
  m->iqr_ms = attn_dbi_col_double(s, 26, -1);
  m->load = attn_dbi_col_double(s, 27, -1);
  m->final = sqlite3_column_int(s, 28);
  m->chosen = sqlite3_column_int(s, 29);
  m->is_default = sqlite3_column_int(s, 30);
  m->bound = (const char *)sqlite3_column_text(s, 31); /* NULL: none */
  m->d_v = sqlite3_column_int(s, 32);
  m->pass = (const char *)sqlite3_column_text(s, 33);
  m->variant = (const char *)sqlite3_column_text(s, 34);
}

typedef struct {
  int (*cb)(void *ctx, const attn_db_meas *m);
  void *ctx;
  attn_db_meas *m; /* on the heap: the struct is large */
} meas_each;

static int meas_row(void *ctx, sqlite3_stmt *s) {
  meas_each *e = ctx;
  read_row(s, e->m);
  return e->cb(e->ctx, e->m);
}

static int each_row(attn_db *db, int slot, const char *sql, int (*cb)(void *, const attn_db_meas *), void *ctx) {
  if (!db || !cb) return -1;
  meas_each e = {cb, ctx, malloc(sizeof(attn_db_meas))};
  if (!e.m) {
    attn_dbi_fail(db, ATTN_ENOMEM, "out of memory");
    return -1;
  }
  int rc = attn_dbi_each(db, slot, sql, "reading measurements", meas_row, &e);
  free(e.m);
  return rc;
}

int attn_db_meas_foreach(attn_db *db, int (*cb)(void *ctx, const attn_db_meas *m), void *ctx) {
  return each_row(db, S_MEAS_ALL, "SELECT " ROW_COLS " FROM (SELECT m.*, dv.name AS device, k.spec AS spec, "
                  "k.source_hash AS source_hash FROM measurements m JOIN devices dv ON dv.id = m.device_id "
                  "JOIN kernels k ON k.id = m.kernel_id) ORDER BY id", cb, ctx);
}

int attn_db_best_foreach(attn_db *db, int (*cb)(void *ctx, const attn_db_meas *m), void *ctx) {
  return each_row(db, S_BEST_ALL, "SELECT " ROW_COLS " FROM best ORDER BY device, pass = 'bwd', variant, dtype, "
                  "causal, d, d_v, n, n_kv, "
                  "batch * heads, heads_kv, threads", cb, ctx);
}
