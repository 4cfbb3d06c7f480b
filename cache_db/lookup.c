/* lookup.c: what the runtime asks the database: the best stored configuration for a problem on a device (db.h's
 * rule, in one statement). */
#include "db_int.h"
#include <stdio.h>
#include <string.h>

/* db.h's rule. ?6..?11: the query's n, n_kv, batch, heads, heads_kv, threads (no zeros); ?12: the decode bound; ?13:
 * the query's d_v (never 0: a d_v = d problem and a d_v != d one never share a row); ?14, ?15: its pass and variant
 * (never crossed either); ?16: a word of the spec text whose unmeasured rows the caller cannot serve (NULL: none),
 * left out before the ranking so that the tie rule and the finalist's marks are those of the rows it can serve; ?17:
 * a word whose rows it never takes (NULL: none), left out the same way. Rows of the other regime are kept but ranked
 * last, so that a miss can say they exist (`other`). attn_logdist is a ratio, so the product of the four orders as
 * the sum of |log| distances does. At equal distance a row on the query's threads, then one that did not record
 * them, then the smaller problem. `later`: in a problem the finalist round judged, rows it did not choose (lowrank
 * rows are not judged by it); the tie rule's fastest time is taken within (problem, provenance class, later). */
static const char lookup_sql[] =
    "SELECT spec, n, time_ms, error, provenance, n_kv, batch, heads, heads_kv, threads, chosen, is_default, id, "
    "other FROM "
    "(SELECT *, min(time_ms) OVER (PARTITION BY n, n_kv, batch, heads, heads_kv, threads, model, later) AS tmin "
    "FROM (SELECT *, NOT (chosen = 1 OR lowrank OR judged = 0) AS later FROM "
    "(SELECT k.spec, m.n, m.time_ms, m.error, m.provenance, m.n_kv, m.batch, m.heads, m.heads_kv, m.threads, "
    "m.chosen, m.is_default, m.id, k.algo = 'lowrank' AS lowrank, m.provenance <> 'measured' AS model, "
    "(m.n < ?12) <> (?6 < ?12) AS other, coalesce(m.reads + m.writes, 9e18) AS io, "
    "max(m.chosen) OVER (PARTITION BY m.n, m.n_kv, m.batch, m.heads, m.heads_kv, m.threads, "
    "m.provenance <> 'measured') AS judged, "
    "attn_logdist(m.n, ?6) * attn_logdist(m.n_kv, ?7) * "
    "attn_logdist(m.batch * m.heads * 1.0 / CASE WHEN m.threads > 0 THEN m.threads ELSE ?11 END, "
    "?8 * ?9 * 1.0 / ?11) * attn_logdist(m.heads * 1.0 / m.heads_kv, ?9 * 1.0 / ?10) AS dist "
    "FROM measurements m JOIN kernels k ON k.id = m.kernel_id JOIN devices dv ON dv.id = m.device_id "
    "WHERE dv.name = ?1 AND m.d = ?2 AND m.d_v = ?13 AND m.dtype = ?3 AND m.causal = ?4 AND m.status = 'ok' "
    "AND m.pass = ?14 AND m.variant = ?15 "
    "AND m.time_ms > 0 "
    "AND (?16 IS NULL OR m.provenance = 'measured' OR instr(' ' || k.spec || ' ', ' ' || ?16 || ' ') = 0) "
    "AND (?17 IS NULL OR instr(' ' || k.spec || ' ', ' ' || ?17 || ' ') = 0) "
    "AND (k.algo <> 'lowrank' OR (?5 > 0 AND m.error IS NOT NULL AND m.error <= ?5))))) "
    "ORDER BY other, model, dist, CASE threads WHEN ?11 THEN 0 WHEN 0 THEN 1 ELSE 2 END, "
    "n, n_kv, batch * heads, heads_kv, batch, threads, later, "
    "time_ms > " ATTN_DB_TIE_FACTOR_SQL " * tmin, io, time_ms, id LIMIT 1";

typedef struct {
  attn_db *db;
  attn_db_best *out;
  int n; /* the query's */
} lookup_ctx;

static int best_row(void *ctx, sqlite3_stmt *s) {
  const lookup_ctx *c = ctx;
  attn_db_best *out = c->out;
  out->n = sqlite3_column_int(s, 1);
  if (sqlite3_column_int(s, 13)) {
    /* only rows of the other regime fit: a miss, but say which n is stored */
    const char *want = c->n < ATTN_DB_DECODE_BELOW ? "decode" : "prefill";
    return attn_dbi_fail(c->db, ATTN_EUNSUPPORTED, "no %s row stored for this problem; %s rows do not apply", want,
                         c->n < ATTN_DB_DECODE_BELOW ? "prefill" : "decode");
  }
  snprintf(out->spec, sizeof out->spec, "%s", (const char *)sqlite3_column_text(s, 0));
  out->time_ms = sqlite3_column_double(s, 2);
  out->error = attn_dbi_col_double(s, 3, -1);
  snprintf(out->provenance, sizeof out->provenance, "%s", (const char *)sqlite3_column_text(s, 4));
  out->n_kv = sqlite3_column_int(s, 5);
  out->batch = sqlite3_column_int(s, 6);
  out->heads = sqlite3_column_int(s, 7);
  out->heads_kv = sqlite3_column_int(s, 8);
  out->threads = sqlite3_column_int(s, 9);
  out->chosen = sqlite3_column_int(s, 10);
  out->is_default = sqlite3_column_int(s, 11);
  out->id = sqlite3_column_int64(s, 12);
  return ATTN_OK;
}

/* One run of lookup_sql for q; skip: ?16. */
static int run_lookup(attn_db *db, const attn_db_query *q, const char *dt, const char *skip, attn_db_best *out) {
  /* db.h's defaults for the fields left 0 */
  const int n = q->n > 0 ? q->n : 1, heads = q->heads > 0 ? q->heads : 1;
  sqlite3_stmt *s = attn_dbi_stmt(db, S_LOOKUP, lookup_sql);
  if (s) {
    attn_dbi_text(s, 1, q->device);
    sqlite3_bind_int(s, 2, q->d);
    attn_dbi_text(s, 3, dt);
    sqlite3_bind_int(s, 4, q->causal ? 1 : 0);
    sqlite3_bind_double(s, 5, q->tolerance);
    sqlite3_bind_int(s, 6, n);
    sqlite3_bind_int(s, 7, q->n_kv > 0 ? q->n_kv : n);
    sqlite3_bind_int(s, 8, q->batch > 0 ? q->batch : 1);
    sqlite3_bind_int(s, 9, heads);
    sqlite3_bind_int(s, 10, q->heads_kv > 0 ? q->heads_kv : heads);
    sqlite3_bind_int(s, 11, q->threads > 0 ? q->threads : 1);
    sqlite3_bind_int(s, 12, ATTN_DB_DECODE_BELOW);
    sqlite3_bind_int(s, 13, q->d_v > 0 ? q->d_v : q->d);
    attn_dbi_text(s, 14, q->pass ? q->pass : "fwd");
    attn_dbi_text(s, 15, q->variant ? q->variant : "");
    attn_dbi_text(s, 16, skip);
    attn_dbi_text(s, 17, q->exclude && q->exclude[0] ? q->exclude : NULL);
    memset(out, 0, sizeof *out);
  }
  lookup_ctx c = {db, out, n};
  return attn_dbi_one(db, s, "lookup", best_row, &c, "no stored row for this problem");
}

/* 1 when the spec text has word as one of its space-separated words */
static int has_word(const char *spec, const char *word) {
  const size_t w = strlen(word);
  for (const char *p = spec; w && (p = strstr(p, word)) != NULL; p += w)
    if ((p == spec || p[-1] == ' ') && (p[w] == ' ' || p[w] == '\0')) return 1;
  return 0;
}

int attn_db_lookup(attn_db *db, const attn_db_query *q, attn_db_best *out) {
  if (!db || !q || !out || !q->device) {
    if (db) attn_dbi_fail(db, ATTN_EINVAL, "attn_db_lookup: NULL argument");
    return ATTN_EINVAL;
  }
  const char *dt = attn_dbi_dtype_text(q->dtype);
  if (!dt) return attn_dbi_fail(db, ATTN_EINVAL, "attn_db_lookup: unknown dtype");
  const char *skip = q->unmeasured_skip && q->unmeasured_skip[0] ? q->unmeasured_skip : NULL;
  pthread_mutex_lock(&db->mu);
  int skipped = 0, rc;
  if (skip) {
    /* would the rule without the option have chosen a row it leaves out? (then the caller says so) */
    attn_db_best all;
    rc = run_lookup(db, q, dt, NULL, &all);
    if (rc == ATTN_EDB) goto done;
    skipped = rc == ATTN_OK && strcmp(all.provenance, "measured") != 0 && has_word(all.spec, skip);
  }
  rc = run_lookup(db, q, dt, skip, out);
  out->skipped = skipped;
done:
  pthread_mutex_unlock(&db->mu);
  return rc;
}
