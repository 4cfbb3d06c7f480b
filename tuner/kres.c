/* kres.c: a configuration's compiled resources, compiled once per NVRTC version and kept in the database. */
#include "kres.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

void attn_kres_init(attn_kres *k, attn_db *db, int compile) {
  memset(k, 0, sizeof *k);
  k->db = db;
  int maj = 0, min = 0;
  if (attn_nvrtc_version(&maj, &min, NULL, 0) == ATTN_OK) {
    snprintf(k->compiler, sizeof k->compiler, "nvrtc %d.%d", maj, min);
    k->compile = compile;
  }
}

void attn_kres_free(attn_kres *k) {
  free(k->memo);
  free(k->want);
  memset(k, 0, sizeof *k);
}

static attn_kres_entry *memo_find(attn_kres *k, const char *spec) {
  for (int i = 0; i < k->count; i++)
    if (strcmp(k->memo[i].spec, spec) == 0) return &k->memo[i];
  return NULL;
}

static attn_kres_entry *memo_add(attn_kres *k, const char *spec) {
  if (k->count == k->cap) {
    int cap = k->cap ? 2 * k->cap : 64;
    attn_kres_entry *m = realloc(k->memo, (size_t)cap * sizeof *m);
    if (!m) return NULL;
    k->memo = m;
    k->cap = cap;
  }
  attn_kres_entry *e = &k->memo[k->count++];
  memset(e, 0, sizeof *e);
  snprintf(e->spec, sizeof e->spec, "%s", spec);
  return e;
}

/* Compiles c to a cubin and reads ptxas's report; 0 when known. Thread-safe (NVRTC programs are independent). */
static int compile_one(const attn_spec *c, attn_kernel_res *out) {
  char err[256];
  char *src = attn_spec_source(c, 0, err, sizeof err);
  if (!src) return -1;
  void *cubin = NULL;
  size_t len = 0;
  char *log = NULL;
  int rc = attn_nvrtc_compile(src, "attn.cu", c->arch, &cubin, &len, &log);
  attn_cuda_resources r;
  int ok = rc == ATTN_OK && attn_nvrtc_resources(log, "attn_kernel", &r) == 0;
  if (ok) {
    out->registers = r.registers;
    out->spill_bytes = r.spill_stores + r.spill_loads;
    out->smem_static = r.smem_static;
  }
  free(src);
  free(cubin);
  free(log);
  return ok ? 0 : -1;
}

/* Stored in the database: 0 and *out filled. */
static int stored(attn_kres *k, const char *spec, attn_kernel_res *out) {
  int regs = 0;
  long spill = 0, smem = 0;
  if (!k->db || !k->compiler[0] || attn_db_kres_get(k->db, spec, k->compiler, &regs, &spill, &smem) != ATTN_OK)
    return -1;
  out->registers = regs;
  out->spill_bytes = spill;
  out->smem_static = smem;
  return 0;
}

int attn_kres_get(void *ctx, const attn_spec *c, attn_kernel_res *out) {
  attn_kres *k = ctx;
  if (!k || !k->compiler[0] || c->target != ATTN_TARGET_CUDA || !c->arch[0]) return -1;
  char spec[512];
  attn_spec_format(c, spec, sizeof spec);
  attn_kres_entry *e = memo_find(k, spec);
  if (e) {
    if (e->known) *out = e->res;
    return e->known ? 0 : -1;
  }
  attn_kernel_res r;
  memset(&r, 0, sizeof r);
  int known = stored(k, spec, &r) == 0;
  if (known) k->stored_hits++;
  if (!known && k->collecting) { /* compiled later, in parallel */
    if (k->nwant == k->capwant) {
      int cap = k->capwant ? 2 * k->capwant : 64;
      attn_spec *w = realloc(k->want, (size_t)cap * sizeof *w);
      if (!w) return -1;
      k->want = w;
      k->capwant = cap;
    }
    k->want[k->nwant++] = *c;
    return -1;
  }
  if (!known && k->compile && compile_one(c, &r) == 0) {
    known = 1;
    k->compiled++;
    if (k->db) attn_db_kres_put(k->db, spec, k->compiler, r.registers, r.spill_bytes, r.smem_static);
  }
  if ((e = memo_add(k, spec))) {
    e->res = r;
    e->known = known;
  }
  if (known) *out = r;
  return known ? 0 : -1;
}

void attn_kres_collect(attn_kres *k) {
  k->collecting = k->compile;
  k->nwant = 0;
}

typedef struct {
  attn_kres *k;
  attn_kres_entry *out; /* one per want[] */
  int next;
  pthread_mutex_t mu;
} fill_job;

static void *fill_worker(void *arg) {
  fill_job *j = arg;
  for (;;) {
    pthread_mutex_lock(&j->mu);
    int i = j->next++;
    pthread_mutex_unlock(&j->mu);
    if (i >= j->k->nwant) return NULL;
    j->out[i].known = compile_one(&j->k->want[i], &j->out[i].res) == 0;
  }
}

void attn_kres_fill(attn_kres *k, int jobs) {
  k->collecting = 0;
  if (!k->nwant) return;
  /* each configuration once (spaces of several n ask for the same ones) */
  int n = 0;
  char a[512], b[512];
  for (int i = 0; i < k->nwant; i++) {
    attn_spec_format(&k->want[i], a, sizeof a);
    int dup = memo_find(k, a) != NULL;
    for (int q = 0; q < n && !dup; q++) {
      attn_spec_format(&k->want[q], b, sizeof b);
      dup = strcmp(a, b) == 0;
    }
    if (!dup) k->want[n++] = k->want[i];
  }
  k->nwant = n;
  fill_job j = {.k = k, .out = calloc((size_t)n, sizeof(attn_kres_entry))};
  if (!j.out) return;
  pthread_mutex_init(&j.mu, NULL);
  if (jobs < 1) jobs = 1;
  if (jobs > 64) jobs = 64;
  pthread_t th[64];
  int started = 0;
  for (int t = 1; t < jobs && t < n; t++)
    if (pthread_create(&th[started], NULL, fill_worker, &j) == 0) started++;
  fill_worker(&j);
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  pthread_mutex_destroy(&j.mu);
  /* stored and remembered in this thread: the database handle serializes its calls anyway */
  for (int i = 0; i < n; i++) {
    attn_spec_format(&k->want[i], a, sizeof a);
    attn_kres_entry *e = memo_add(k, a);
    if (!e) break;
    e->known = j.out[i].known;
    e->res = j.out[i].res;
    if (e->known) {
      k->compiled++;
      if (k->db) attn_db_kres_put(k->db, a, k->compiler, e->res.registers, e->res.spill_bytes, e->res.smem_static);
    }
  }
  free(j.out);
  k->nwant = 0;
}
