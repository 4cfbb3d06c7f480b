/* meas.c: measurements (and model estimates) by their key: store one, find one, mark the finalist round's choice,
 * count them. The rows as a whole are read in rows.c. */
#include "db_int.h"
#include <stdio.h>
#include <string.h>

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
  const double fwd = 4.0 * m->d * pairs * m->batch * m->heads;
  return m->pass && strcmp(m->pass, "bwd") == 0 ? ATTN_DB_BWD_FLOPS * fwd : fwd;
}

/* The key's pass and variant as stored: NULL reads as "fwd" and "" (dense). */
static const char *pass_of(const attn_db_meas *m) { return m->pass ? m->pass : "fwd"; }
static const char *variant_of(const attn_db_meas *m) { return m->variant ? m->variant : ""; }

/* A variant is canonical text made by a program: printable ASCII, bounded. */
static int variant_ok(const char *v) {
  size_t i = 0;
  for (; v[i]; i++)
    if (v[i] < 0x20 || v[i] > 0x7e || i >= ATTN_DB_VARIANT_MAX) return 0;
  return 1;
}

/* The row's device and kernel ids: given, or looked up by name (create != 0: created when new). */
static int resolve_ids(attn_db *db, const attn_db_meas *m, int create, long long *dev, long long *ker) {
  *dev = m->device_id;
  *ker = m->kernel_id;
  int rc = ATTN_OK;
  if (*dev <= 0) {
    if (!m->device || !*m->device) return attn_dbi_fail(db, ATTN_EINVAL, "measurement without a device");
    rc = create ? attn_dbi_device_upsert(db, m->device, NULL, dev) : attn_dbi_device_find(db, m->device, dev);
  }
  if (rc == ATTN_OK && *ker <= 0) {
    if (!m->spec || !*m->spec) return attn_dbi_fail(db, ATTN_EINVAL, "measurement without a kernel spec");
    int differs;
    rc = create ? attn_dbi_kernel_upsert(db, m->spec, m->source_hash, ker)
                : attn_dbi_kernel_find(db, m->spec, ker, &differs, NULL);
  }
  return rc;
}

/* A row's key is parameters 1..11 (device, kernel, n, n_kv, dtype, causal, batch, heads, heads_kv, provenance, threads)
 * and 30..31 (pass, variant: schema 8's, numbered after put's other columns) in every statement of this file:
 * KEY_WHERE matches ?3..?11 and ?30..?31, keyed gives the statement of slot with m's key bound. */
#define KEY_WHERE                                                                                                   \
  "n = ?3 AND n_kv = ?4 AND dtype = ?5 AND causal = ?6 AND batch = ?7 AND heads = ?8 AND heads_kv = ?9 "          \
  "AND provenance = ?10 AND threads = ?11 AND pass = ?30 AND variant = ?31"
static sqlite3_stmt *keyed(attn_db *db, int slot, const char *sql, const attn_db_meas *m, long long dev,
                           long long ker, const char *dt) {
  sqlite3_stmt *s = attn_dbi_stmt(db, slot, sql);
  if (!s) return NULL;
  sqlite3_bind_int64(s, 1, dev);
  sqlite3_bind_int64(s, 2, ker);
  sqlite3_bind_int(s, 3, m->n);
  sqlite3_bind_int(s, 4, m->n_kv);
  attn_dbi_text(s, 5, dt);
  sqlite3_bind_int(s, 6, m->causal ? 1 : 0);
  sqlite3_bind_int(s, 7, m->batch);
  sqlite3_bind_int(s, 8, m->heads);
  sqlite3_bind_int(s, 9, m->heads_kv);
  attn_dbi_text(s, 10, m->provenance);
  sqlite3_bind_int(s, 11, m->threads > 0 ? m->threads : 0);
  attn_dbi_text(s, 30, pass_of(m));
  attn_dbi_text(s, 31, variant_of(m));
  return s;
}

/* The row: its key as ?1..?11, the rest after (bind_rest); what is unknown stays NULL. */
static const char put_sql[] =
    "INSERT OR REPLACE INTO measurements(device_id, kernel_id, n, n_kv, dtype, causal, batch, heads, heads_kv, "
    "provenance, threads, run_id, d, time_ms, gflops, reads, writes, error, status, log, created, reps, iqr_ms, load, "
    "final, chosen, is_default, bound, d_v, pass, variant) VALUES "
    "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, "
    "coalesce(?21, " ATTN_DBI_NOW "), ?22, ?23, ?24, ?25, ?26, ?27, ?28, "
    /* d_v: the row's own, else its kernel's (the spec's " dv=N", else d) */
    "coalesce(?29, (SELECT d_v FROM kernels WHERE id = ?2), ?13), ?30, ?31)";

static void bind_rest(sqlite3_stmt *s, const attn_db_meas *m, double gflops) {
  attn_dbi_id(s, 12, m->run_id);
  sqlite3_bind_int(s, 13, m->d);
  sqlite3_bind_double(s, 14, m->time_ms);
  sqlite3_bind_double(s, 15, gflops);
  if (m->reads >= 0) sqlite3_bind_int64(s, 16, m->reads);
  if (m->writes >= 0) sqlite3_bind_int64(s, 17, m->writes);
  if (m->has_error) sqlite3_bind_double(s, 18, m->error);
  attn_dbi_text(s, 19, m->status);
  attn_dbi_text(s, 20, m->log ? m->log : "");
  attn_dbi_text(s, 21, m->created && *m->created ? m->created : NULL);
  if (m->reps > 0) {
    sqlite3_bind_int(s, 22, m->reps);
    if (m->iqr_ms >= 0) sqlite3_bind_double(s, 23, m->iqr_ms);
  }
  if (m->load >= 0) sqlite3_bind_double(s, 24, m->load);
  sqlite3_bind_int(s, 25, m->final ? 1 : 0);
  sqlite3_bind_int(s, 26, m->chosen ? 1 : 0);
  sqlite3_bind_int(s, 27, m->is_default ? 1 : 0);
  attn_dbi_text(s, 28, m->bound && *m->bound ? m->bound : NULL);
  if (m->d_v > 0) sqlite3_bind_int(s, 29, m->d_v);
}

int attn_db_meas_put(attn_db *db, const attn_db_meas *m) {
  if (!db || !m) return ATTN_EINVAL;
  const char *dt = attn_dbi_dtype_text(m->dtype);
  if (!dt) return attn_dbi_fail(db, ATTN_EINVAL, "measurement: unknown dtype");
  if (!valid_status(m->status))
    return attn_dbi_fail(db, ATTN_EINVAL, "measurement: status '%s' is not one of ok, wrong, compile_error, "
                         "launch_error, skipped, invalid, error", m->status ? m->status : "(null)");
  if (!m->provenance || (strcmp(m->provenance, "measured") && strcmp(m->provenance, "model")))
    return attn_dbi_fail(db, ATTN_EINVAL, "measurement: provenance '%s' is not measured or model",
                         m->provenance ? m->provenance : "(null)");
  if (m->n <= 0 || m->n_kv <= 0 || m->d <= 0 || m->batch <= 0 || m->heads <= 0 || m->heads_kv <= 0)
    return attn_dbi_fail(db, ATTN_EINVAL, "measurement: n, n_kv, d, batch, heads and heads_kv must be positive");
  if (m->d_v < 0) return attn_dbi_fail(db, ATTN_EINVAL, "measurement: d_v=%d must be >= 0 (0: the kernel's)", m->d_v);
  if (strcmp(pass_of(m), "fwd") && strcmp(pass_of(m), "bwd"))
    return attn_dbi_fail(db, ATTN_EINVAL, "measurement: pass '%s' is not fwd or bwd", m->pass);
  if (!variant_ok(variant_of(m)))
    return attn_dbi_fail(db, ATTN_EINVAL, "measurement: variant is not printable ASCII of at most %d bytes",
                         ATTN_DB_VARIANT_MAX);
  double gflops = m->gflops;
  if (!(gflops > 0)) gflops = m->time_ms > 0 ? flops_of(m) / (m->time_ms * 1e-3) / 1e9 : 0;
  pthread_mutex_lock(&db->mu);
  int rc = attn_dbi_write_begin(db);
  if (rc == ATTN_OK) {
    long long dev, ker;
    rc = resolve_ids(db, m, 1, &dev, &ker);
    if (rc == ATTN_OK) {
      sqlite3_stmt *s = keyed(db, S_MEAS_PUT, put_sql, m, dev, ker, dt);
      if (s) bind_rest(s, m, gflops);
      rc = attn_dbi_exec(db, s, "storing a measurement");
    }
    rc = attn_dbi_write_end(db, rc);
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}

/* Column i's text into the array buf. */
#define COPY_TEXT(buf, s, i) snprintf(buf, sizeof buf, "%s", (const char *)sqlite3_column_text(s, i))

typedef struct {
  const attn_db_meas *m;
  attn_db_meas *got;  /* may be m, or NULL */
  long long dev, ker;
} exists_ctx;

/* The stored row into got: m's fields, then the stored ones (copies that outlive the call). */
static int exists_row(void *ctx, sqlite3_stmt *s) {
  const exists_ctx *c = ctx;
  attn_db_meas *got = c->got;
  if (!got) return 1;
  if (got != c->m) *got = *c->m;
  got->device_id = c->dev;
  got->kernel_id = c->ker;
  got->id = sqlite3_column_int64(s, 0);
  got->run_id = sqlite3_column_int64(s, 1);
  got->time_ms = sqlite3_column_double(s, 2);
  got->gflops = sqlite3_column_double(s, 3);
  got->has_error = sqlite3_column_type(s, 4) != SQLITE_NULL;
  got->error = attn_dbi_col_double(s, 4, 0);
  got->reads = attn_dbi_col_i64(s, 5, -1);
  got->writes = attn_dbi_col_i64(s, 6, -1);
  COPY_TEXT(got->status_buf, s, 7);
  COPY_TEXT(got->log_buf, s, 8);
  COPY_TEXT(got->provenance_buf, s, 9);
  COPY_TEXT(got->created_buf, s, 10);
  got->status = got->status_buf;
  got->log = got->log_buf;
  got->provenance = got->provenance_buf;
  got->created = got->created_buf;
  got->threads = sqlite3_column_int(s, 11);
  got->reps = sqlite3_column_int(s, 12);
  got->iqr_ms = attn_dbi_col_double(s, 13, -1);
  got->load = attn_dbi_col_double(s, 14, -1);
  got->final = sqlite3_column_int(s, 15);
  got->chosen = sqlite3_column_int(s, 16);
  got->is_default = sqlite3_column_int(s, 17);
  snprintf(got->bound_buf, sizeof got->bound_buf, "%s",
           sqlite3_column_type(s, 18) == SQLITE_NULL ? "" : (const char *)sqlite3_column_text(s, 18));
  got->bound = got->bound_buf[0] ? got->bound_buf : NULL;
  return 1;
}

int attn_db_meas_exists(attn_db *db, const attn_db_meas *m, attn_db_meas *got) {
  if (!db || !m) return -1;
  const char *dt = attn_dbi_dtype_text(m->dtype);
  if (!dt || !m->provenance) {
    attn_dbi_fail(db, ATTN_EINVAL, "attn_db_meas_exists: bad dtype or no provenance");
    return -1;
  }
  pthread_mutex_lock(&db->mu);
  long long dev, ker;
  int found = -1;
  if (resolve_ids(db, m, 0, &dev, &ker) == ATTN_OK) {
    found = 0;
    if (dev > 0 && ker > 0) {
      sqlite3_stmt *s = keyed(db, S_MEAS_GET, "SELECT id, run_id, time_ms, gflops, error, reads, writes, status, log, "
                              "provenance, created, threads, reps, iqr_ms, load, final, chosen, is_default, bound "
                              "FROM measurements WHERE device_id = ?1 AND kernel_id = ?2 AND " KEY_WHERE,
                              m, dev, ker, dt);
      exists_ctx c = {m, got, dev, ker};
      found = attn_dbi_rows(db, s, "reading a measurement", exists_row, &c);
    }
  }
  pthread_mutex_unlock(&db->mu);
  return found;
}

int attn_db_meas_choose(attn_db *db, const attn_db_meas *m) {
  /* one chosen row per problem (the key without the kernel): clear the others' marks, then set this row's */
  static const char *const sql[] = {
      "UPDATE measurements SET chosen = 0 WHERE chosen = 1 AND device_id = ?1 AND " KEY_WHERE
      " AND d = (SELECT d FROM kernels WHERE id = ?2) AND d_v = (SELECT coalesce(d_v, d) FROM kernels WHERE id = ?2)",
      "UPDATE measurements SET chosen = 1 WHERE device_id = ?1 AND kernel_id = ?2 AND " KEY_WHERE};
  if (!db || !m) return ATTN_EINVAL;
  const char *dt = attn_dbi_dtype_text(m->dtype);
  if (!dt || !m->provenance) return attn_dbi_fail(db, ATTN_EINVAL, "attn_db_meas_choose: bad dtype or no provenance");
  pthread_mutex_lock(&db->mu);
  int rc = attn_dbi_write_begin(db);
  if (rc == ATTN_OK) {
    long long dev, ker;
    rc = resolve_ids(db, m, 0, &dev, &ker);
    if (rc == ATTN_OK && (dev <= 0 || ker <= 0))
      rc = attn_dbi_fail(db, ATTN_EINVAL, "attn_db_meas_choose: no such row");
    for (int slot = S_MEAS_UNCHOOSE; rc == ATTN_OK && slot <= S_MEAS_CHOOSE; slot++) {
      sqlite3_stmt *s = keyed(db, slot, sql[slot - S_MEAS_UNCHOOSE], m, dev, ker, dt);
      rc = attn_dbi_exec(db, s, "marking the finalist round's choice");
      if (rc == ATTN_OK && slot == S_MEAS_CHOOSE && sqlite3_changes(db->h) != 1)
        rc = attn_dbi_fail(db, ATTN_EINVAL, "attn_db_meas_choose: no such row");
    }
    rc = attn_dbi_write_end(db, rc);
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}

static int count_row(void *ctx, sqlite3_stmt *s) {
  *(long long *)ctx = sqlite3_column_int64(s, 0);
  return ATTN_OK;
}

long long attn_db_meas_count(attn_db *db) {
  if (!db) return -1;
  pthread_mutex_lock(&db->mu);
  long long n = -1;
  sqlite3_stmt *s = attn_dbi_stmt(db, S_MEAS_COUNT, "SELECT count(*) FROM measurements");
  if (attn_dbi_one(db, s, "counting measurements", count_row, &n, NULL) != ATTN_OK) n = -1;
  pthread_mutex_unlock(&db->mu);
  return n;
}
