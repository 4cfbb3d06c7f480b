/* cmd_merge.c: `attntune merge A.db B.db`: the rows of B into A, in one transaction on A. A row of B whose key
 * (device, kernel, problem shape, provenance) is new to A is added; where A has the key, the better row stays:
 * an 'ok' row over a failed one, then the newer one. Devices and runs B has and A lacks come along. */
#define _DEFAULT_SOURCE
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cmds.h"
#include "db.h"

typedef struct {
  attn_db *a;
  int same;                       /* A and B are one file: nothing to write */
  long long *b_runs, *a_runs;     /* B's run ids and A's ids for them (ascending B ids) */
  int nruns, bcap, acap;
  long long a_max_run;            /* A's runs before the merge end here: a larger id is a new run */
  char **a_devices;
  int ndev, devcap;
  int added, replaced, kept, devices_added, runs_added;
  int failed;                     /* 1: A's database error, 2: out of memory */
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
    if (strcmp(c->a_devices[i], d->name) == 0) return 0; /* A's description of its own device stays */
  if (c->same) return 0;
  attn_db_device copy = *d;
  if (attn_db_device_put(c->a, &copy, NULL) != ATTN_OK) return c->failed = 1;
  c->devices_added++;
  return 0;
}

static int merge_run(void *vctx, const attn_db_run *r) {
  merge_ctx *c = vctx;
  if (grow((void **)&c->b_runs, &c->bcap, c->nruns + 1, sizeof *c->b_runs) ||
      grow((void **)&c->a_runs, &c->acap, c->nruns + 1, sizeof *c->a_runs))
    return c->failed = 2;
  long long id = r->id;
  if (!c->same) {
    /* run_put finds a run A already has (same device, start and command) instead of adding it again */
    if (attn_db_run_put(c->a, r, &id) != ATTN_OK) return c->failed = 1;
    if (id > c->a_max_run) c->runs_added++;
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

/* B's row wins over A's: ok over not ok, then newer (created is ISO 8601 text, so it orders as text). */
static int b_is_better(const attn_db_meas *b, const attn_db_meas *a) {
  int bok = strcmp(b->status, "ok") == 0, aok = strcmp(a->status, "ok") == 0;
  if (bok != aok) return bok;
  return strcmp(b->created ? b->created : "", a->created ? a->created : "") > 0;
}

static int merge_meas(void *vctx, const attn_db_meas *bm) {
  merge_ctx *c = vctx;
  attn_db_meas m = *bm;
  /* B's ids mean nothing in A: resolve by name */
  m.device_id = m.kernel_id = 0;
  m.run_id = bm->run_id > 0 ? a_run_of(c, bm->run_id) : 0;
  attn_db_meas *have = malloc(sizeof *have);
  if (!have) return c->failed = 2;
  int found = attn_db_meas_exists(c->a, &m, have);
  int rc = 0;
  if (found < 0) rc = c->failed = 1;
  else if (found == 0 || (!c->same && b_is_better(&m, have))) {
    if (c->same) c->kept++; /* cannot happen: a file's rows are all in itself */
    else if (attn_db_meas_put(c->a, &m) != ATTN_OK) rc = c->failed = 1;
    else if (found) c->replaced++;
    else c->added++;
  } else {
    c->kept++;
  }
  free(have);
  return rc;
}

int attn_cmd_merge(int argc, char **argv) {
  const char *files[2] = {NULL, NULL};
  int nf = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("usage: attntune merge A.db B.db\n"
             "  copies the rows of B into A (both must exist). Where both have a row for the same device, kernel,\n"
             "  problem and provenance, the better one stays: ok over failed, then the newer.\n");
      return 0;
    }
    if (argv[i][0] == '-' && argv[i][1] != '\0') {
      fprintf(stderr, "attntune merge: unknown option '%s' (usage: attntune merge A.db B.db)\n", argv[i]);
      return 2;
    }
    if (nf == 2) {
      fprintf(stderr, "attntune merge: two databases only (usage: attntune merge A.db B.db)\n");
      return 2;
    }
    files[nf++] = argv[i];
  }
  if (nf != 2) {
    fprintf(stderr, "attntune merge: needs two databases (usage: attntune merge A.db B.db)\n");
    return 2;
  }
  char err[1024];
  attn_db *a = NULL, *b = NULL;
  if (attn_db_open(files[0], 0, &a, err, sizeof err) != ATTN_OK ||
      attn_db_open(files[1], 0, &b, err, sizeof err) != ATTN_OK) {
    fprintf(stderr, "attntune merge: %s\n", err);
    attn_db_close(a);
    return 1;
  }
  merge_ctx c = {.a = a};
  char ra[PATH_MAX], rb[PATH_MAX];
  c.same = realpath(files[0], ra) && realpath(files[1], rb) && strcmp(ra, rb) == 0;
  int status = 1;
  if (!c.same && attn_db_begin(a) != ATTN_OK) {
    fprintf(stderr, "attntune merge: %s: %s\n", files[0], attn_db_errmsg(a));
    goto out;
  }
  int rc = attn_db_device_foreach(a, note_a_device, &c);
  if (rc == 0) rc = attn_db_run_foreach(a, note_a_run, &c);
  if (rc == 0) rc = attn_db_device_foreach(b, merge_device, &c);
  if (rc == 0) rc = attn_db_run_foreach(b, merge_run, &c);
  if (rc == 0) rc = attn_db_meas_foreach(b, merge_meas, &c);
  if (rc != 0) {
    /* the callbacks name which side failed; a -1 without one is B's read */
    const char *why = c.failed == 2 ? "out of memory" : c.failed == 1 ? attn_db_errmsg(a) : attn_db_errmsg(b);
    fprintf(stderr, "attntune merge: %s: %s (nothing merged)\n", c.failed == 1 ? files[0] : files[1], why);
    if (!c.same) attn_db_rollback(a);
    goto out;
  }
  if (!c.same && attn_db_commit(a) != ATTN_OK) {
    fprintf(stderr, "attntune merge: %s: %s (nothing merged)\n", files[0], attn_db_errmsg(a));
    goto out;
  }
  printf("merged %s into %s: %d added, %d replaced, %d kept%s; %d devices and %d runs added\n", files[1], files[0],
         c.added, c.replaced, c.kept, c.same ? " (the same database)" : " (A's row was as good and as new)",
         c.devices_added, c.runs_added);
  status = 0;
out:
  for (int i = 0; i < c.ndev; i++) free(c.a_devices[i]);
  free(c.a_devices);
  free(c.b_runs);
  free(c.a_runs);
  attn_db_close(b);
  attn_db_close(a);
  return status;
}
