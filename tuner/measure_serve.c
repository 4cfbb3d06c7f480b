/* measure_serve.c: the tuner's serving layouts, each a problem of its own: paged decode or prefill
 * (attn_execute_paged over pages of p.page_size tokens, every sequence n_kv keys, its pages in shuffled order so that
 * no sequence reads its KV contiguously) and varlen batches (attn_execute_varlen on FlashAttention's packed layout,
 * each sequence its own query and key counts). Input sets are made in the kernel's dtype and layout and rotated as the
 * dense ones (measure.c); set 0's fp32 values, rounded through the dtype, are kept per sequence in the dense
 * [heads][len][dim] layout for the fp64 reference and the counting build, which runs on each sequence as the call
 * does (batch 1, the sequence's lengths): the kernel's transfers, not the staging copies.
 * On a CUDA plan the sets live on the device (rotated past the L2 cache, as the dense sets of measure.c), each laid
 * out on the host and copied there; the tables stay on the host, as the calls take them; the checked run's output is
 * poisoned on the device and copied back; a timed run is the call's async form between CUDA events on its stream, as
 * measure.c times a dense launch; the counting build runs on the CPU only (the tuner counts no CUDA layout). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "measure.h"

/* as measure.c's dense check: beyond this many query rows a sequence's last CHECK_ROWS rows are checked (bottom-right
 * causal alignment makes them a problem of their own, so the reference is exact for them) */
#define CHECK_ALL_UP_TO 1024
#define CHECK_ROWS 256
/* measure.c's cap on the device's input sets */
#define SERVE_DEV_MAX_BYTES (4.0 * 1024.0 * 1024.0 * 1024.0)

typedef struct attn_meas_serve {
  int paged;
  int *lq, *lk;               /* each sequence's queries and keys */
  int *cu_q, *cu_kv;          /* varlen: cumulative, batch + 1 */
  int *table, max_pages, num_pages, page_size; /* paged: [batch][max_pages] page indices */
  size_t q_elems, k_elems, v_elems, o_elems; /* per set, in the kernel's layout */
  size_t k_off, v_off, set_bytes; /* a set's k and v at these byte offsets (on the device: 256-byte aligned) */
  int cuda;                   /* the plan's target: the sets and the output on the device */
  size_t x_elems;             /* set 0's dense per-sequence fp32 values, all sequences */
  size_t *xoff;               /* sequence b's q at x32 + xoff[b], its k and v after it */
  int sets;
  void *arena;                /* sets of set_bytes (CPU), or the device's (CUDA) */
  void *out;                  /* o_elems: the CPU runs' output, or the device output copied back */
  void *dev_arena, *dev_out;  /* CUDA: the sets and the output on the device */
  float *x32;
  double *ref;                /* the checked rows' reference, sequence by sequence, [heads][rows][d_v] each */
  float *got;                 /* the same rows of the checked run */
  size_t ref_count;
} attn_meas_serve;

static long check_rows(long lq) { return lq > CHECK_ALL_UP_TO ? CHECK_ROWS : lq; }

/* Element offsets in the kernel's layout: query (or output, width d_v) row t of head h of sequence b, and key (or
 * value) row t of KV head h. */
static size_t q_at(const attn_meas_serve *sv, const attn_problem *p, int b, long h, long t, long width) {
  if (sv->paged) return (((size_t)b * p->heads + (size_t)h) * p->n + (size_t)t) * width;
  return (((size_t)sv->cu_q[b] + t) * p->heads + (size_t)h) * width;
}
static size_t kv_at(const attn_meas_serve *sv, const attn_problem *p, int b, long h, long t, long width) {
  if (sv->paged) {
    const size_t page = (size_t)sv->table[(size_t)b * sv->max_pages + t / sv->page_size];
    return ((page * sv->page_size + (size_t)(t % sv->page_size)) * p->heads_kv + (size_t)h) * width;
  }
  return (((size_t)sv->cu_kv[b] + t) * p->heads_kv + (size_t)h) * width;
}

/* Sequence b's dense fp32 values: q [heads][lq][d], then k [heads_kv][lk][d], then v [heads_kv][lk][d_v]. */
static size_t seq_elems(const attn_problem *p, long lq, long lk) {
  return (size_t)p->heads * lq * p->d + (size_t)p->heads_kv * lk * (p->d + p->d_v);
}

/* One set's dense values (x) into the kernel's layout at dst, converted to the dtype row by row. */
static void lay_out(const attn_meas_serve *sv, const attn_problem *p, const float *x, char *dst) {
  const size_t es = attn_dtype_size(p->dtype);
  char *qd = dst, *kd = dst + sv->k_off, *vd = dst + sv->v_off;
  for (int b = 0; b < p->batch; b++) {
    const long lq = sv->lq[b], lk = sv->lk[b];
    const float *q = x + sv->xoff[b], *k = q + (size_t)p->heads * lq * p->d, *v = k + (size_t)p->heads_kv * lk * p->d;
    for (long h = 0; h < p->heads; h++)
      for (long t = 0; t < lq; t++)
        attn_to_dtype(p->dtype, q + ((size_t)h * lq + t) * p->d, (size_t)p->d, qd + q_at(sv, p, b, h, t, p->d) * es);
    for (long h = 0; h < p->heads_kv; h++)
      for (long t = 0; t < lk; t++) {
        attn_to_dtype(p->dtype, k + ((size_t)h * lk + t) * p->d, (size_t)p->d, kd + kv_at(sv, p, b, h, t, p->d) * es);
        attn_to_dtype(p->dtype, v + ((size_t)h * lk + t) * p->d_v, (size_t)p->d_v,
                      vd + kv_at(sv, p, b, h, t, p->d_v) * es);
      }
  }
}

/* The fp64 reference of each sequence's checked rows, from set 0's dense values, on `threads` threads. */
static int make_reference(attn_meas_serve *sv, const attn_problem *p, int threads) {
  sv->ref_count = 0;
  size_t most_q = 0;
  for (int b = 0; b < p->batch; b++) {
    sv->ref_count += (size_t)p->heads * check_rows(sv->lq[b]) * p->d_v;
    const size_t qe = (size_t)p->heads * check_rows(sv->lq[b]) * p->d;
    if (qe > most_q) most_q = qe;
  }
  sv->ref = malloc(sv->ref_count * sizeof(double) + 1);
  sv->got = malloc(sv->ref_count * sizeof(float) + 1);
  float *rows = malloc(most_q * sizeof(float) + 1);
  if (!sv->ref || !sv->got || !rows) {
    free(rows);
    return ATTN_ENOMEM;
  }
  double *r = sv->ref;
  for (int b = 0; b < p->batch; b++) {
    const long lq = sv->lq[b], lk = sv->lk[b], cr = check_rows(lq);
    const size_t cnt = (size_t)p->heads * cr * p->d_v;
    if (cnt == 0) continue;
    if (lk == 0) { /* rows that see no key are 0 (attn.h) */
      memset(r, 0, cnt * sizeof *r);
      r += cnt;
      continue;
    }
    const float *q = sv->x32 + sv->xoff[b], *k = q + (size_t)p->heads * lq * p->d,
                *v = k + (size_t)p->heads_kv * lk * p->d;
    for (long h = 0; h < p->heads; h++) /* the last cr rows of each head */
      memcpy(rows + (size_t)h * cr * p->d, q + ((size_t)h * lq + (lq - cr)) * p->d, (size_t)cr * p->d * sizeof(float));
    attn_problem sub = *p;
    sub.batch = 1;
    sub.n = (int)cr;
    sub.n_kv = (int)lk;
    sub.page_size = 0;
    sub.varlen = 0;
    attn_reference_threads(&sub, threads, rows, k, v, r);
    r += cnt;
  }
  free(rows);
  return ATTN_OK;
}

/* A fixed shuffle of the pages: a paged cache hands sequences pages in no particular order. */
static void shuffle(int *x, int count) {
  unsigned long long s = 0x2545f4914f6cdd1dULL;
  for (int i = 0; i < count; i++) x[i] = i;
  for (int i = count - 1; i > 0; i--) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    const int j = (int)(s % (unsigned long long)(i + 1)), t = x[i];
    x[i] = x[j], x[j] = t;
  }
}

int attn_meas_serve_ensure(attn_meas_ctx *c, char *err, size_t errlen) {
  if (c->serve) return ATTN_OK;
  const attn_problem *p = &c->p;
  attn_meas_serve *sv = calloc(1, sizeof *sv);
  if (!sv) goto oom;
  c->serve = sv;
  sv->paged = p->page_size > 0;
  sv->lq = malloc(sizeof *sv->lq * (size_t)p->batch);
  sv->lk = malloc(sizeof *sv->lk * (size_t)p->batch);
  sv->xoff = malloc(sizeof *sv->xoff * (size_t)p->batch);
  if (!sv->lq || !sv->lk || !sv->xoff) goto oom;
  for (int b = 0; b < p->batch; b++) {
    sv->lq[b] = c->serve_lq && !sv->paged ? c->serve_lq[b] : p->n;
    sv->lk[b] = c->serve_lk && !sv->paged ? c->serve_lk[b] : p->n_kv;
    if (sv->lq[b] < 0 || sv->lq[b] > p->n || sv->lk[b] < 0 || sv->lk[b] > p->n_kv) {
      snprintf(err, errlen, "sequence %d: %d queries and %d keys, outside the problem's n=%d n_kv=%d", b, sv->lq[b],
               sv->lk[b], p->n, p->n_kv);
      attn_meas_serve_free(c);
      return ATTN_EINVAL;
    }
    sv->xoff[b] = sv->x_elems;
    sv->x_elems += seq_elems(p, sv->lq[b], sv->lk[b]);
  }
  if (sv->paged) {
    sv->page_size = p->page_size;
    sv->max_pages = (p->n_kv + p->page_size - 1) / p->page_size;
    sv->num_pages = p->batch * sv->max_pages;
    sv->table = malloc(sizeof *sv->table * (size_t)sv->num_pages);
    if (!sv->table) goto oom;
    shuffle(sv->table, sv->num_pages);
    sv->q_elems = (size_t)p->batch * p->heads * p->n * p->d;
    sv->k_elems = (size_t)sv->num_pages * p->page_size * p->heads_kv * p->d;
    sv->v_elems = (size_t)sv->num_pages * p->page_size * p->heads_kv * p->d_v;
    sv->o_elems = (size_t)p->batch * p->heads * p->n * p->d_v;
  } else {
    sv->cu_q = malloc(sizeof *sv->cu_q * ((size_t)p->batch + 1));
    sv->cu_kv = malloc(sizeof *sv->cu_kv * ((size_t)p->batch + 1));
    if (!sv->cu_q || !sv->cu_kv) goto oom;
    sv->cu_q[0] = sv->cu_kv[0] = 0;
    for (int b = 0; b < p->batch; b++) {
      sv->cu_q[b + 1] = sv->cu_q[b] + sv->lq[b];
      sv->cu_kv[b + 1] = sv->cu_kv[b] + sv->lk[b];
    }
    sv->q_elems = (size_t)sv->cu_q[p->batch] * p->heads * p->d;
    sv->k_elems = (size_t)sv->cu_kv[p->batch] * p->heads_kv * p->d;
    sv->v_elems = (size_t)sv->cu_kv[p->batch] * p->heads_kv * p->d_v;
    sv->o_elems = (size_t)sv->cu_q[p->batch] * p->heads * p->d_v;
  }
  const size_t es = attn_dtype_size(p->dtype);
  sv->cuda = c->rt->target == ATTN_TARGET_CUDA;
  /* on the device each tensor starts 256-byte aligned, as an allocation of its own would */
  const size_t al = sv->cuda ? 256 : 1;
  sv->k_off = (sv->q_elems * es + al - 1) / al * al;
  sv->v_off = sv->k_off + (sv->k_elems * es + al - 1) / al * al;
  sv->set_bytes = sv->v_off + (sv->v_elems * es + al - 1) / al * al;
  if (sv->cuda) {
    attn_cuda_info_t info;
    if (attn_cuda_info(c->rt, &info) != ATTN_OK) {
      snprintf(err, errlen, "no CUDA device open");
      attn_meas_serve_free(c);
      return ATTN_ENODEV;
    }
    /* as measure.c's dense device sets: the others hold 1.25x the L2 cache between two uses of one */
    double sets = ceil(1.25 * info.l2_bytes / (double)sv->set_bytes) + 1;
    if (sets * (double)sv->set_bytes > SERVE_DEV_MAX_BYTES) sets = floor(SERVE_DEV_MAX_BYTES / (double)sv->set_bytes);
    sv->sets = sets < 2 ? 2 : (int)sets;
  } else {
    sv->sets = attn_meas_cold_sets((double)sv->set_bytes);
  }
  /* zeroed: the slots of a last page past its sequence's keys are never read, but are defined (on CUDA the one set
   * laid out here is copied to each of the device's, every set writing the same slots) */
  sv->arena = calloc(sv->cuda ? 1 : (size_t)sv->sets, sv->set_bytes + 1);
  sv->out = malloc(sv->o_elems * es + 1);
  sv->x32 = malloc(sv->x_elems * sizeof(float) + 1);
  float *tmp = malloc(sv->x_elems * sizeof(float) + 1);
  if (!sv->arena || !sv->out || !sv->x32 || !tmp) {
    free(tmp);
    goto oom;
  }
  int rc = ATTN_OK;
  if (sv->cuda) {
    rc = attn_cuda_alloc(c->rt, (size_t)sv->sets * sv->set_bytes, &sv->dev_arena);
    if (rc == ATTN_OK) rc = attn_cuda_alloc(c->rt, sv->o_elems * es + 1, &sv->dev_out);
  }
  /* fresh values per set, seeded per problem shape and layout; set 0 rounded through the dtype for the reference */
  const unsigned long long seed = 0x6a09e667f3bcc909ULL ^ ((unsigned long long)p->n << 32) ^
                                  ((unsigned long long)p->d << 16) ^ (unsigned long long)p->n_kv ^
                                  ((unsigned long long)p->page_size << 48) ^ ((unsigned long long)p->batch << 40);
  for (int i = 0; i < sv->sets && rc == ATTN_OK; i++) {
    float *x = i == 0 ? sv->x32 : tmp;
    attn_fill_random(x, sv->x_elems, seed + (unsigned long long)i * 7919);
    if (i == 0) attn_round_dtype(p->dtype, x, sv->x_elems);
    char *set = (char *)sv->arena + (sv->cuda ? 0 : (size_t)i * sv->set_bytes);
    lay_out(sv, p, x, set);
    if (sv->cuda) rc = attn_cuda_copy(c->rt, (char *)sv->dev_arena + (size_t)i * sv->set_bytes, set, sv->set_bytes, 1);
  }
  free(tmp);
  if (sv->cuda) { /* the host set was the staging of the device's */
    free(sv->arena);
    sv->arena = NULL;
  }
  if (rc != ATTN_OK) {
    snprintf(err, errlen, "device input sets (%d of %.1f MiB): %s", sv->sets, sv->set_bytes / 1048576.0,
             attn_last_error(c->rt));
    attn_meas_serve_free(c);
    return rc;
  }
  if (make_reference(sv, p, c->rt ? c->rt->threads : 1) != ATTN_OK) goto oom;
  c->sets = sv->sets;
  c->next_set = 1;
  return ATTN_OK;
oom:
  snprintf(err, errlen, "out of memory for the %s input sets", p->page_size > 0 ? "paged" : "varlen");
  attn_meas_serve_free(c);
  return ATTN_ENOMEM;
}

/* The call on set `set`: synchronous, or (async) its _async form queued on stream. */
static int serve_call(const attn_meas_ctx *c, const attn_plan *plan, int set, int async, void *stream) {
  const attn_meas_serve *sv = c->serve;
  const char *q = (const char *)(sv->cuda ? sv->dev_arena : sv->arena) + (size_t)set * sv->set_bytes,
             *k = q + sv->k_off, *v = q + sv->v_off;
  void *o = sv->cuda ? sv->dev_out : sv->out;
  if (sv->paged && async)
    return attn_execute_paged_async(plan, stream, q, k, v, sv->num_pages, sv->page_size, sv->table, sv->max_pages,
                                    sv->lk, o);
  if (sv->paged)
    return attn_execute_paged(plan, q, k, v, sv->num_pages, sv->page_size, sv->table, sv->max_pages, sv->lk, o);
  if (async) return attn_execute_varlen_async(plan, stream, sv->cu_q, sv->cu_kv, q, k, v, o);
  return attn_execute_varlen(plan, sv->cu_q, sv->cu_kv, q, k, v, o);
}

int attn_meas_serve_run(attn_meas_ctx *c, const attn_plan *plan, int set) { return serve_call(c, plan, set, 0, NULL); }

/* attn_meas_serve_time's call, queued by attn_cuda_time_queued */
typedef struct serve_queue {
  const attn_meas_ctx *c;
  const attn_plan *plan;
  int set;
} serve_queue;
static int queue_call(void *user, void *stream) {
  const serve_queue *u = user;
  return serve_call(u->c, u->plan, u->set, 1, stream);
}

int attn_meas_serve_time(attn_meas_ctx *c, const attn_plan *plan, int set, double *ms) {
  if (!c->serve->cuda)
    return attn_fail(c->rt, ATTN_EUNSUPPORTED, "event timing: the layout's sets are not on a CUDA device");
  /* as the dense launches (attn_cuda_run): CUDA events on the legacy default stream around the call's async form,
   * which queues its tables' copy and its kernel there, then the stream waited for */
  serve_queue u = {c, plan, set};
  return attn_cuda_time_queued(c->rt, NULL, queue_call, &u,
                               c->serve->paged ? "attn_execute_paged_async" : "attn_execute_varlen_async", ms);
}

int attn_meas_serve_spec(const attn_meas_ctx *c, const attn_spec *s, char *err, size_t errlen) {
  const attn_problem *p = &c->p;
  if (s->target != ATTN_TARGET_CUDA) return ATTN_OK;
  const char *what = p->page_size > 0 ? "paged" : "varlen";
  /* cuda_serve.c builds the layout's kernel from the spec's tiles on flash.cu: a spec it would not build as is
   * runs other tiles there, which its row must not claim */
  if (s->algo != ATTN_ALGO_FLASH || s->impl == ATTN_IMPL_WGMMA) {
    snprintf(err, errlen, "CUDA %s has no %s kernel (flash.cu's mma.sync flash has)",
             s->impl == ATTN_IMPL_WGMMA ? "impl=wgmma flash" : attn_algo_name(s->algo), what);
    return ATTN_EUNSUPPORTED;
  }
  attn_spec l; /* the fields cuda_serve.c's serve_spec takes from the plan's spec */
  memset(&l, 0, sizeof l);
  l.algo = ATTN_ALGO_FLASH, l.target = ATTN_TARGET_CUDA, l.dtype = s->dtype;
  l.d = s->d, l.dv = s->dv, l.causal = s->causal;
  l.br = s->br, l.bc = s->bc, l.warps = s->warps, l.stages = s->stages;
  memcpy(l.arch, s->arch, sizeof l.arch);
  l.window = s->window, l.softcap = s->softcap, l.alibi = s->alibi;
  l.layout = p->varlen ? 1 : p->n == 1 && p->heads > p->heads_kv ? 3 : 2;
  char why[256];
  if (attn_spec_check(&l, why, sizeof why) != ATTN_OK) {
    snprintf(err, errlen, "the %s kernel of these tiles: %s", what, why);
    return ATTN_EINVAL;
  }
  return ATTN_OK;
}

int attn_meas_serve_check(attn_meas_ctx *c, const attn_plan *plan, double *error, char *err, size_t errlen) {
  attn_meas_serve *sv = c->serve;
  const attn_problem *p = &c->p;
  const size_t es = attn_dtype_size(p->dtype);
  int rc = attn_meas_serve_spec(c, &plan->spec, err, errlen);
  if (rc != ATTN_OK) return rc;
  /* poisoned: all-ones bits are NaN in f32, f16 and bf16, so a row left unwritten is caught */
  memset(sv->out, 0xff, sv->o_elems * es);
  if (sv->cuda) rc = attn_cuda_copy(c->rt, sv->dev_out, sv->out, sv->o_elems * es, 1);
  if (rc == ATTN_OK) rc = attn_meas_serve_run(c, plan, 0);
  if (rc == ATTN_OK && sv->cuda) rc = attn_cuda_copy(c->rt, sv->out, sv->dev_out, sv->o_elems * es, 0);
  if (rc != ATTN_OK) {
    snprintf(err, errlen, "%s", attn_last_error(c->rt));
    return rc;
  }
  float *g = sv->got;
  for (int b = 0; b < p->batch; b++) {
    const long lq = sv->lq[b], cr = check_rows(lq);
    for (long h = 0; h < p->heads; h++)
      for (long t = lq - cr; t < lq; t++, g += p->d_v)
        attn_from_dtype(p->dtype, (const char *)sv->out + q_at(sv, p, b, h, t, p->d_v) * es, (size_t)p->d_v, g);
  }
  *error = attn_rel_error(sv->ref, sv->got, sv->ref_count);
  return ATTN_OK;
}

int attn_meas_serve_count(attn_meas_ctx *c, const attn_plan *counting, attn_io *io) {
  const attn_meas_serve *sv = c->serve;
  const attn_problem *p = &c->p;
  if (sv->cuda || !counting->cpu) return ATTN_EUNSUPPORTED; /* the counting build runs on the CPU only */
  const size_t es = attn_dtype_size(p->dtype);
  size_t most = 0, most_o = 0;
  for (int b = 0; b < p->batch; b++) {
    const size_t e = seq_elems(p, sv->lq[b], sv->lk[b]), o = (size_t)p->heads * sv->lq[b] * p->d_v;
    if (e > most) most = e;
    if (o > most_o) most_o = o;
  }
  char *x = malloc(most * es + 1), *o = malloc(most_o * es + 1);
  int rc = x && o ? ATTN_OK : ATTN_ENOMEM;
  io->reads = io->writes = 0;
  for (int b = 0; b < p->batch && rc == ATTN_OK; b++) {
    const long lq = sv->lq[b], lk = sv->lk[b];
    if (lq == 0 || lk == 0) continue; /* the calls run no kernel on them */
    attn_to_dtype(p->dtype, sv->x32 + sv->xoff[b], seq_elems(p, lq, lk), x);
    const char *k = x + (size_t)p->heads * lq * p->d * es, *v = k + (size_t)p->heads_kv * lk * p->d * es;
    attn_kargs a = attn_problem_kargs(p, x, k, v, o);
    a.batch = 1;
    a.n = (int)lq;
    a.n_kv = (int)lk;
    attn_io t = {0, 0};
    rc = attn_cpu_run(c->rt, counting->cpu, &a, &t);
    io->reads += t.reads;
    io->writes += t.writes;
  }
  free(x);
  free(o);
  return rc;
}

void attn_meas_serve_free(attn_meas_ctx *c) {
  attn_meas_serve *sv = c->serve;
  if (!sv) return;
  free(sv->lq);
  free(sv->lk);
  free(sv->xoff);
  free(sv->cu_q);
  free(sv->cu_kv);
  free(sv->table);
  free(sv->arena);
  if (sv->dev_arena) attn_cuda_free(c->rt, sv->dev_arena);
  if (sv->dev_out) attn_cuda_free(c->rt, sv->dev_out);
  free(sv->out);
  free(sv->x32);
  free(sv->ref);
  free(sv->got);
  free(sv);
  c->serve = NULL;
}
