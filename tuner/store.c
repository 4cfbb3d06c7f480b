/* store.c: the tuner's rows through cache_db's API (the only module with SQL in it): a device and a run per
 * command, a kernel per spec, one measurement per (problem, kernel, device, provenance), committed as made.
 * A run's process holds a lock file for the run's lifetime, "<database>.run-<id>.lock" (a write lock through fcntl):
 * a run left 'running' by a process that died without ending it (SIGKILL, a crash) has no lock held, and the next
 * run to begin marks it 'interrupted' and removes its file. Where the database's directory cannot be written there
 * are no lock files, and no run is judged. */
#include "store.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "internal.h"

struct attn_store {
  attn_db *db;
  long long device_id, run_id;
  int threads;
  int backward;             /* the rows' pass: 1 'bwd', 0 'fwd' */
  char variant[ATTN_DB_VARIANT_MAX + 1]; /* the last key's variant (fill_key's rows point at it) */
  char device[256];
  int lock_fd;              /* the run's lock file, write-locked while the run lives; -1: none */
  char lock_path[4200];
};

/* "<database>.run-<id>.lock" beside the file SQLite opened (an absolute path, symlinks resolved: one name for every
 * process whatever path it was given). 0, or -1 when too long. */
static int lock_path(attn_store *st, long long id, char *buf, size_t len) {
  int w = snprintf(buf, len, "%s.run-%lld.lock", attn_db_filename(st->db), id);
  return w > 0 && (size_t)w < len ? 0 : -1;
}

/* A write lock on the whole file, without waiting. Open-file-description locks where there are: they belong to the
 * open file, not the process, so a second store in one process sees the first's lock, and closing some other
 * descriptor of the file (the sweep's) does not drop it as it would a POSIX lock. */
static int try_lock(int fd) {
  struct flock fl;
  memset(&fl, 0, sizeof fl);
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
#ifdef F_OFD_SETLK
  return fcntl(fd, F_OFD_SETLK, &fl);
#else
  return fcntl(fd, F_SETLK, &fl);
#endif
}

/* Creates and locks the run's file: 1 when held, 0 when there is none (a directory this process cannot write, or
 * any other failure: the run goes on, only unjudged). */
static int run_lock_take(attn_store *st) {
  if (lock_path(st, st->run_id, st->lock_path, sizeof st->lock_path) != 0) return 0;
  int fd = open(st->lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return 0;
  if (try_lock(fd) != 0) {
    (void)close(fd); /* held by someone else (a stale file of a deleted database's run): not ours to remove */
    return 0;
  }
  st->lock_fd = fd;
  return 1;
}

/* After the run's status is written: a sweep that then finds the lock gone finds the run ended too. */
static void run_lock_release(attn_store *st) {
  if (st->lock_fd < 0) return;
  /* Best effort, nothing to report: a file left behind is unlocked, and a sweep only looks at runs still 'running'.
   * The lock goes with the descriptor whatever close says. */
  (void)unlink(st->lock_path);
  (void)close(st->lock_fd);
  st->lock_fd = -1;
}

typedef struct {
  long long *ids;
  int count, cap, failed;
} run_list;

static int collect_running(void *ctx, const attn_db_run *r) {
  run_list *l = ctx;
  if (!r->status || strcmp(r->status, "running") != 0) return 0;
  if (l->count == l->cap) {
    int cap = l->cap ? 2 * l->cap : 16;
    long long *ids = realloc(l->ids, sizeof *ids * (size_t)cap);
    if (!ids) return l->failed = 1;
    l->ids = ids;
    l->cap = cap;
  }
  l->ids[l->count++] = r->id;
  return 0;
}

/* Every other 'running' run whose lock file is missing or not held died without ending: 'interrupted', and its file
 * removed. Best effort: a failure leaves the runs as they were and the new run goes on. */
static void sweep_dead_runs(attn_store *st) {
  run_list l = {0};
  if (attn_db_run_foreach(st->db, collect_running, &l) != 0) {
    free(l.ids);
    return;
  }
  for (int i = 0; i < l.count; i++) {
    char path[4200];
    if (l.ids[i] == st->run_id || lock_path(st, l.ids[i], path, sizeof path) != 0) continue;
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 && errno != ENOENT) continue; /* cannot tell (permissions): leave it */
    if (fd >= 0 && try_lock(fd) != 0) {
      (void)close(fd); /* EAGAIN/EACCES: held, its process lives; anything else: cannot tell. Either way it stays. */
      continue;
    }
    /* The file goes while we hold its lock, once the row no longer says running. One left behind (unlink failed) is
     * unlocked, and no sweep looks at it again: its run is not running. */
    if (attn_db_run_interrupt(st->db, l.ids[i], NULL) == ATTN_OK && fd >= 0) (void)unlink(path);
    if (fd >= 0) (void)close(fd); /* only locked, never written */
  }
  free(l.ids);
}

int attn_store_open(const char *path, attn_store **out, char *err, size_t errlen) {
  *out = NULL;
  attn_store *st = calloc(1, sizeof *st);
  if (!st) {
    snprintf(err, errlen, "out of memory");
    return ATTN_ENOMEM;
  }
  st->lock_fd = -1;
  int rc = attn_db_open(path, 1, &st->db, err, errlen);
  if (rc != ATTN_OK) {
    free(st);
    return rc;
  }
  /* SQLite opens a file it cannot write read-only without a word (and, at the current schema with its -shm there,
   * nothing fails until the first row): say so now, not after the first measurement */
  if (attn_db_readonly(st->db)) {
    snprintf(err, errlen, "%s: this process cannot write it (tune needs to write the file and its directory; show, "
             "export and the runtime can read it)", path);
    attn_db_close(st->db);
    free(st);
    return ATTN_EDB;
  }
  *out = st;
  return ATTN_OK;
}

void attn_store_close(attn_store *st) {
  if (!st) return;
  run_lock_release(st); /* a run not ended stays 'running', and the next run to begin marks it interrupted */
  attn_db_close(st->db);
  free(st);
}

int attn_store_begin(attn_store *st, const char *device, const char *device_json, const char *command, char *err,
                     size_t errlen) {
  snprintf(st->device, sizeof st->device, "%s", device);
  int rc = attn_db_device_id(st->db, device, device_json, &st->device_id);
  /* The run's row and its held lock file commit together: no sweep ever sees this run 'running' and unlocked. */
  if (rc == ATTN_OK) rc = attn_db_begin(st->db);
  if (rc == ATTN_OK) {
    rc = attn_db_run_begin(st->db, st->device_id, command, &st->run_id);
    int locked = rc == ATTN_OK && run_lock_take(st);
    if (rc == ATTN_OK) rc = attn_db_commit(st->db);
    else attn_db_rollback(st->db);
    if (rc != ATTN_OK) {
      snprintf(err, errlen, "%s", attn_db_errmsg(st->db));
      run_lock_release(st);
      st->run_id = 0;
      return rc;
    }
    /* only a process that can keep lock files can judge others' (a directory it cannot write: no sweep) */
    if (locked) sweep_dead_runs(st);
  }
  if (rc != ATTN_OK) snprintf(err, errlen, "%s", attn_db_errmsg(st->db));
  return rc;
}

void attn_store_end(attn_store *st, int interrupted) {
  if (!st) return;
  if (st->run_id) attn_db_run_end(st->db, st->run_id, interrupted ? "interrupted" : "done");
  run_lock_release(st);
}

void attn_store_set_threads(attn_store *st, int threads) { st->threads = threads > 0 ? threads : 0; }

void attn_store_set_backward(attn_store *st, int backward) { st->backward = backward != 0; }

/* Statuses a kernel earns itself; the others are the environment's and are measured again. */
static int final_status(const char *s) {
  return !strcmp(s, "ok") || !strcmp(s, "wrong") || !strcmp(s, "compile_error") || !strcmp(s, "invalid");
}

/* The row's key: problem shape, kernel, device, threads, provenance, pass and the problem's variant (its score
 * modifiers as attn_problem_variant writes them; "" for dense attention). */
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
  m->d_v = p->d_v > 0 ? p->d_v : p->d;
  m->dtype = p->dtype;
  m->causal = p->causal;
  m->provenance = provenance;
  m->threads = st->threads;
  m->pass = st->backward ? "bwd" : "fwd";
  attn_problem_variant(p, st->variant, sizeof st->variant);
  m->variant = st->variant;
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
    snprintf(prev->bound, sizeof prev->bound, "%s", got.bound ? got.bound : "");
  }
  return rc > 0;
}

attn_db *attn_store_db(attn_store *st) { return st ? st->db : NULL; }

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
    m.bound = e->bound[0] ? e->bound : NULL;
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
