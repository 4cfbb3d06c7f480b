/* cmd_merge.c: `attntune merge TARGET.db A.db [B.db ...]`: the rows of each source into TARGET, source by source in the
 * order given, all in one transaction on TARGET (created when missing, and removed again when the merge fails, so that
 * the parts of a `tune --shard` run merge into a new file): every source or none. A row whose key (device, kernel,
 * problem shape, threads, provenance, pass, variant) is new to TARGET is added; where TARGET has the key (from before,
 * or from an earlier source), the better row stays by the tuner's rule (attn_db_meas_better): ok over failed, a
 * kernel's own failure (wrong, compile_error, invalid) over an environmental one (error, launch_error, skipped), a
 * finalist-round time over a screening time, the lower time, then the newer. Devices and runs a source has and TARGET
 * lacks come along; TARGET's description of a device it has stays. */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cmds.h"
#include "db.h"

typedef struct {
  int added, replaced, kept, devices_added, runs_added;
  int same;                       /* the source is the target's file: nothing to write */
} merge_count;

typedef struct {
  attn_db *a;
  merge_count *n;                 /* the counts of the source being merged */
  long long *b_runs, *a_runs;     /* the source's run ids and the target's ids for them (ascending source ids) */
  int nruns, bcap, acap;
  long long a_max_run;            /* the target's largest run id so far: a larger id returned is a new run */
  char **a_devices;               /* device names the target has (from before or added by an earlier source) */
  int ndev, devcap;
  int failed;                     /* 1: the target's database error, 2: out of memory */
} merge_ctx;

static int grow(void **p, int *cap, int need, size_t size) {
  if (need <= *cap) return 0;
  int c = *cap ? 2 * *cap : 32;
  while (c < need) c *= 2;
  void *q = realloc(*p, size * (size_t)c);
  if (!q) return -1;
  *p = q;
  *cap = c;
  return 0;
}

static int note_a_device(void *vctx, const attn_db_device *d) {
  merge_ctx *c = vctx;
  if (grow((void **)&c->a_devices, &c->devcap, c->ndev + 1, sizeof *c->a_devices)) return c->failed = 2;
  if (!(c->a_devices[c->ndev] = strdup(d->name))) return c->failed = 2;
  c->ndev++;
  return 0;
}

static int merge_device(void *vctx, const attn_db_device *d) {
  merge_ctx *c = vctx;
  for (int i = 0; i < c->ndev; i++)
    if (strcmp(c->a_devices[i], d->name) == 0) return 0; /* the target's description of its own device stays */
  if (c->n->same) return 0;
  attn_db_device copy = *d;
  if (attn_db_device_put(c->a, &copy, NULL) != ATTN_OK) return c->failed = 1;
  c->n->devices_added++;
  /* a later source naming it again neither replaces this description nor counts it twice */
  return note_a_device(c, d);
}

static int merge_run(void *vctx, const attn_db_run *r) {
  merge_ctx *c = vctx;
  if (grow((void **)&c->b_runs, &c->bcap, c->nruns + 1, sizeof *c->b_runs) ||
      grow((void **)&c->a_runs, &c->acap, c->nruns + 1, sizeof *c->a_runs))
    return c->failed = 2;
  long long id = r->id;
  if (!c->n->same) {
    /* run_put finds a run the target already has (same device, start and command) instead of adding it again */
    if (attn_db_run_put(c->a, r, &id) != ATTN_OK) return c->failed = 1;
    /* new ids are past every existing one, so raising the mark keeps a later source's copy from counting again */
    if (id > c->a_max_run) {
      c->n->runs_added++;
      c->a_max_run = id;
    }
  }
  c->b_runs[c->nruns] = r->id;
  c->a_runs[c->nruns] = id;
  c->nruns++;
  return 0;
}

static int note_a_run(void *vctx, const attn_db_run *r) {
  merge_ctx *c = vctx;
  if (r->id > c->a_max_run) c->a_max_run = r->id;
  return 0;
}

static long long a_run_of(const merge_ctx *c, long long b_id) {
  int lo = 0, hi = c->nruns - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (c->b_runs[mid] == b_id) return c->a_runs[mid];
    if (c->b_runs[mid] < b_id) lo = mid + 1;
    else hi = mid - 1;
  }
  return 0;
}

static int merge_meas(void *vctx, const attn_db_meas *bm) {
  merge_ctx *c = vctx;
  attn_db_meas m = *bm;
  /* the source's ids mean nothing in the target: resolve by name */
  m.device_id = m.kernel_id = 0;
  m.run_id = bm->run_id > 0 ? a_run_of(c, bm->run_id) : 0;
  attn_db_meas *have = malloc(sizeof *have);
  if (!have) return c->failed = 2;
  int found = attn_db_meas_exists(c->a, &m, have);
  int rc = 0;
  if (found < 0) rc = c->failed = 1;
  else if (c->n->same) c->n->kept++; /* a file's rows are all in itself */
  else if (found == 0 || attn_db_meas_better(&m, have)) {
    if (attn_db_meas_put(c->a, &m) != ATTN_OK) rc = c->failed = 1;
    else if (found) c->n->replaced++;
    else c->n->added++;
  } else {
    c->n->kept++;
  }
  free(have);
  return rc;
}

/* A target this merge created and could not fill goes again: a failed merge leaves no file behind. */
static void remove_created(const char *path) {
  static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
  char p[PATH_MAX + 16];
  for (size_t i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
    if (snprintf(p, sizeof p, "%s%s", path, suffix[i]) >= (int)sizeof p) continue;
    if (unlink(p) != 0 && errno != ENOENT)
      fprintf(stderr, "attntune merge: cannot remove %s: %s\n", p, strerror(errno));
  }
}

#define MERGE_USAGE "usage: attntune merge TARGET.db A.db [B.db ...]"

int attn_cmd_merge(int argc, char **argv) {
  const char **files = calloc((size_t)argc + 1, sizeof *files);
  if (!files) {
    fprintf(stderr, "attntune merge: out of memory\n");
    return 1;
  }
  int nf = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf(MERGE_USAGE "\n"
             "  copies the rows of each source (A, then B, ...) into TARGET, all in one transaction: every source\n"
             "  or none. TARGET is created when it does not exist (the parts of tune --shard merge into a new\n"
             "  file), and removed again when the merge fails. Where TARGET (or an earlier source) has a row for\n"
             "  the same device, kernel, problem, threads, provenance, pass (fwd, bwd) and variant, the better one\n"
             "  stays: ok over failed, a kernel's own failure (wrong, compile_error, invalid) over an\n"
             "  environmental one (error, launch_error, skipped), a finalist-round time over a screening time, then\n"
             "  the lower time, then the newer.\n");
      free(files);
      return 0;
    }
    if (argv[i][0] == '-' && argv[i][1] != '\0') {
      fprintf(stderr, "attntune merge: unknown option '%s' (" MERGE_USAGE ")\n", argv[i]);
      free(files);
      return 2;
    }
    files[nf++] = argv[i];
  }
  if (nf < 2) {
    fprintf(stderr, "attntune merge: needs two databases or more (" MERGE_USAGE ")\n");
    free(files);
    return 2;
  }
  int nsrc = nf - 1;
  char err[1024];
  attn_db *a = NULL, **b = calloc((size_t)nsrc, sizeof *b);
  merge_count *cnt = calloc((size_t)nsrc, sizeof *cnt);
  merge_ctx c = {0};
  int status = 1, created = 0;
  if (!b || !cnt) {
    fprintf(stderr, "attntune merge: out of memory\n");
    goto out;
  }
  /* every file opens before anything is written: a missing source fails the merge at once, before a missing
   * target is created */
  char ra[PATH_MAX], rb[PATH_MAX];
  int ra_ok = realpath(files[0], ra) != NULL, writes = 0;
  created = !ra_ok && errno == ENOENT;
  for (int k = 0; k < nsrc; k++) {
    /* a source is only read: another user's file serves; it is checked whatever its size (it came from elsewhere) */
    if (attn_db_open_ex(files[k + 1], ATTN_DB_READER | ATTN_DB_CHECK, &b[k], err, sizeof err) != ATTN_OK) {
      fprintf(stderr, "attntune merge: %s\n", err);
      goto out;
    }
    cnt[k].same = ra_ok && realpath(files[k + 1], rb) && strcmp(ra, rb) == 0;
    if (!cnt[k].same) writes = 1;
  }
  if (attn_db_open_ex(files[0], ATTN_DB_CREATE, &a, err, sizeof err) != ATTN_OK) {
    fprintf(stderr, "attntune merge: %s\n", err);
    goto out;
  }
  c.a = a;
  if (writes && attn_db_begin(a) != ATTN_OK) {
    fprintf(stderr, "attntune merge: %s: %s\n", files[0], attn_db_errmsg(a));
    goto out;
  }
  int rc = attn_db_device_foreach(a, note_a_device, &c);
  if (rc == 0) rc = attn_db_run_foreach(a, note_a_run, &c);
  int k = -1; /* -1: reading the target itself */
  if (rc == 0)
    for (k = 0; k < nsrc; k++) {
      c.n = &cnt[k];
      c.nruns = 0; /* run ids are per source */
      rc = attn_db_device_foreach(b[k], merge_device, &c);
      if (rc == 0) rc = attn_db_run_foreach(b[k], merge_run, &c);
      if (rc == 0) rc = attn_db_meas_foreach(b[k], merge_meas, &c);
      if (rc != 0) break;
    }
  if (rc != 0) {
    /* the callbacks name which side failed; a -1 without one is the read of the file being read */
    attn_db *who = c.failed == 1 || k < 0 ? a : b[k];
    const char *why = c.failed == 2 ? "out of memory" : attn_db_errmsg(who);
    fprintf(stderr, "attntune merge: %s: %s (nothing merged)\n", who == a ? files[0] : files[k + 1], why);
    if (writes) attn_db_rollback(a);
    goto out;
  }
  if (writes && attn_db_commit(a) != ATTN_OK) {
    fprintf(stderr, "attntune merge: %s: %s (nothing merged)\n", files[0], attn_db_errmsg(a));
    goto out;
  }
  /* reported only after the commit: until then nothing is merged */
  for (k = 0; k < nsrc; k++)
    printf("merged %s into %s: %d added, %d replaced, %d kept%s; %d devices and %d runs added\n", files[k + 1],
           files[0], cnt[k].added, cnt[k].replaced, cnt[k].kept,
           cnt[k].same ? " (the same database)" : " (the target's row was as good by the rule)",
           cnt[k].devices_added, cnt[k].runs_added);
  status = 0;
out:
  for (int i = 0; i < c.ndev; i++) free(c.a_devices[i]);
  free(c.a_devices);
  free(c.b_runs);
  free(c.a_runs);
  for (int i = 0; b && i < nsrc; i++) attn_db_close(b[i]);
  attn_db_close(a);
  if (status != 0 && created) remove_created(files[0]);
  free(b);
  free(cnt);
  free(files);
  return status;
}
