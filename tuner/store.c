/* store.c: the tuner's rows through cache_db's API (the only module with SQL in it): a device and a run per
 * command, a kernel per spec, one measurement per (problem, kernel, device, provenance), committed as made. */
#include "store.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct attn_store {
  attn_db *db;
  long long device_id, run_id;
  int threads;
  char device[256];
};

int attn_store_open(const char *path, attn_store **out, char *err, size_t errlen) {
  *out = NULL;
  attn_store *st = calloc(1, sizeof *st);
  if (!st) {
    snprintf(err, errlen, "out of memory");
    return ATTN_ENOMEM;
  }
  int rc = attn_db_open(path, 1, &st->db, err, errlen);
  if (rc != ATTN_OK) {
    free(st);
    return rc;
  }
  *out = st;
  return ATTN_OK;
}

void attn_store_close(attn_store *st) {
  if (!st) return;
  attn_db_close(st->db);
  free(st);
}

int attn_store_begin(attn_store *st, const char *device, const char *device_json, const char *command, char *err,
                     size_t errlen) {
  snprintf(st->device, sizeof st->device, "%s", device);
  int rc = attn_db_device_id(st->db, device, device_json, &st->device_id);
  if (rc == ATTN_OK) rc = attn_db_run_begin(st->db, st->device_id, command, &st->run_id);
  if (rc != ATTN_OK) snprintf(err, errlen, "%s", attn_db_errmsg(st->db));
  return rc;
}

void attn_store_end(attn_store *st, int interrupted) {
  if (st && st->run_id) attn_db_run_end(st->db, st->run_id, interrupted ? "interrupted" : "done");
}

void attn_store_set_threads(attn_store *st, int threads) { st->threads = threads > 0 ? threads : 0; }

/* Statuses a kernel earns itself; the others are the environment's and are measured again. */
static int final_status(const char *s) {
  return !strcmp(s, "ok") || !strcmp(s, "wrong") || !strcmp(s, "compile_error") || !strcmp(s, "invalid");
}

/* The row's key: problem shape, kernel, device, threads, provenance. */
static int fill_key(attn_store *st, const attn_problem *p, const attn_spec *s, const char *provenance,
                    attn_db_meas *m, char *spec, size_t speclen) {
  memset(m, 0, sizeof *m);
  attn_spec_format(s, spec, speclen);
  char hash[17];
  attn_hash_hex(spec, strlen(spec), hash);
  int rc = attn_db_kernel_id(st->db, spec, hash, &m->kernel_id);
  if (rc != ATTN_OK) return rc;
  m->device_id = st->device_id;
  m->run_id = st->run_id;
  m->batch = p->batch;
  m->heads = p->heads;
  m->heads_kv = p->heads_kv ? p->heads_kv : p->heads;
  m->n = p->n;
  m->n_kv = p->n_kv ? p->n_kv : p->n;
  m->d = p->d;
  m->dtype = p->dtype;
  m->causal = p->causal;
  m->provenance = provenance;
  m->threads = st->threads;
  return ATTN_OK;
}

int attn_store_find(attn_store *st, const attn_problem *p, const attn_spec *s, const char *provenance,
                    attn_eval *prev, char *err, size_t errlen) {
  attn_db_meas m;
  char spec[512];
  if (fill_key(st, p, s, provenance, &m, spec, sizeof spec) != ATTN_OK) {
    snprintf(err, errlen, "%s", attn_db_errmsg(st->db));
    return -1;
  }
  attn_db_meas got;
  memset(&got, 0, sizeof got);
  int rc = attn_db_meas_exists(st->db, &m, &got);
  if (rc < 0) {
    snprintf(err, errlen, "%s", attn_db_errmsg(st->db));
    return -1;
  }
  if (rc > 0 && !final_status(got.status_buf)) return 0;
  if (rc > 0 && prev) {
    memset(prev, 0, sizeof *prev);
    snprintf(prev->status, sizeof prev->status, "%s", got.status_buf);
    prev->time_ms = got.time_ms;
    prev->error = got.has_error ? got.error : -1;
    prev->reads = got.reads;
    prev->writes = got.writes;
    prev->io = got.reads >= 0 && got.writes >= 0 ? (double)(got.reads + got.writes) : -1;
    snprintf(prev->message, sizeof prev->message, "%s", got.log_buf);
    prev->reps = got.reps;
    prev->iqr_ms = got.iqr_ms;
    prev->ci_rel = -1;
    prev->load = got.load;
    prev->final = got.final;
    prev->is_default = got.is_default;
    prev->chosen = got.chosen;
  }
  return rc > 0;
}

int attn_store_put(attn_store *st, const attn_problem *p, const attn_spec *s, const char *provenance,
                   const attn_eval *e, char *err, size_t errlen) {
  attn_db_meas m;
  char spec[512];
  int rc = fill_key(st, p, s, provenance, &m, spec, sizeof spec);
  if (rc == ATTN_OK) {
    m.status = e->status;
    m.time_ms = e->time_ms;
    m.has_error = e->error >= 0;
    m.error = e->error;
    m.reads = e->reads;
    m.writes = e->writes;
    m.log = e->message;
    m.reps = e->reps;
    m.iqr_ms = e->reps > 0 ? e->iqr_ms : -1;
    m.load = e->load;
    m.final = e->final;
    m.is_default = e->is_default;
    rc = attn_db_meas_put(st->db, &m);
  }
  if (rc != ATTN_OK) snprintf(err, errlen, "%s", attn_db_errmsg(st->db));
  return rc;
}

int attn_store_choose(attn_store *st, const attn_problem *p, const attn_spec *s, const char *provenance, char *err,
                      size_t errlen) {
  attn_db_meas m;
  char spec[512];
  int rc = fill_key(st, p, s, provenance, &m, spec, sizeof spec);
  if (rc == ATTN_OK) rc = attn_db_meas_choose(st->db, &m);
  if (rc != ATTN_OK) snprintf(err, errlen, "%s", attn_db_errmsg(st->db));
  return rc;
}
