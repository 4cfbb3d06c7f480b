/* measure_bwd.c: what measuring the backward needs beyond the forward's harness (measure.c): an input set of q, k, v
 * and dout with the forward's o and lse (the untuned forward plan's attn_execute_lse, so that P = exp(S - lse) is the
 * softmax the backward's definition has), copied into as many sets as the forward's harness rotates past the
 * last-level cache (on CUDA: past the device's L2, the sets on the device in the problem's dtype, as the forward's);
 * the gradients' arrays; the checked run of set 0 with the gradients poisoned, checked against
 * attn_reference_backward in fp64; and a timed run (CUDA: between CUDA events, attn_cuda_run_backward_timed). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "measure.h"

/* CUDA: each tensor of a device set starts on a 256-byte boundary (the backward loads 16-byte vectors) */
#define DEV_ALIGN 256
enum { T_Q, T_K, T_V, T_O, T_DOUT, T_LSE, T_COUNT };

struct attn_meas_bwd {
  attn_runtime *rt;
  int sets;
  size_t nq, nk, nv, no, nl;   /* elements of q, k, v, o (and dout), lse per set */
  size_t set_elems;            /* q, k, v, o, dout of one set */
  void *karena;                /* sets x set_elems in the problem's dtype (CUDA: set 0 only, the device's source) */
  float *lse;                  /* sets x nl (CUDA: set 0's) */
  void *dq, *dk, *dv;          /* the gradients, in the dtype (CUDA: copied back from the device for the check) */
  float *f32;                  /* set 0 in fp32 (rounded through the dtype): q, k, v, o, dout */
  double *ref;                 /* fp64 dq, dk, dv of set 0, made on the first check */
  float *got;                  /* a gradient in fp32, for the check */
  /* CUDA: the sets on the device (set i at dev + i x dev_set_bytes, tensor t at dev_off[t] in it) and the
   * gradients there */
  void *dev, *dev_grad[3];
  size_t dev_off[T_COUNT], dev_set_bytes;
};

static int on_cuda(const attn_meas_ctx *c) { return c->rt->target == ATTN_TARGET_CUDA; }

static void bwd_release(struct attn_meas_bwd *b) {
  if (!b) return;
  if (b->rt && b->rt->target == ATTN_TARGET_CUDA) {
    attn_cuda_free(b->rt, b->dev);
    for (int g = 0; g < 3; g++) attn_cuda_free(b->rt, b->dev_grad[g]);
  }
  free(b->karena);
  free(b->lse);
  free(b->dq);
  free(b->dk);
  free(b->dv);
  free(b->f32);
  free(b->ref);
  free(b->got);
  free(b);
}

void attn_meas_bwd_free(attn_meas_ctx *c) {
  bwd_release(c->bwd);
  c->bwd = NULL;
}

/* Set i's arrays in the dtype: q, k, v, o, dout in that order. */
static char *set_base(const attn_meas_ctx *c, int i) {
  const struct attn_meas_bwd *b = c->bwd;
  return (char *)b->karena + (size_t)i * b->set_elems * attn_dtype_size(c->p.dtype);
}

attn_kargs attn_meas_bwd_kargs(const attn_meas_ctx *c, int set) {
  const struct attn_meas_bwd *b = c->bwd;
  const size_t es = attn_dtype_size(c->p.dtype);
  char *x = set_base(c, set);
  const attn_problem *p = &c->p;
  attn_kargs a = attn_problem_kargs(p, x, x + b->nq * es, x + (b->nq + b->nk) * es, x + (b->nq + b->nk + b->nv) * es);
  a.dout = x + (b->nq + b->nk + b->nv + b->no) * es;
  a.lse = b->lse + (size_t)set * b->nl;
  a.dq = b->dq;
  a.dk = b->dk;
  a.dv = b->dv;
  return a;
}

/* CUDA: tensor t of device set i */
static char *dev_at(const struct attn_meas_bwd *b, int i, int t) {
  return (char *)b->dev + (size_t)i * b->dev_set_bytes + b->dev_off[t];
}

/* The same arguments on the device (set's inputs, the device's gradients). */
static attn_kargs dev_kargs(const attn_meas_ctx *c, int set) {
  const struct attn_meas_bwd *b = c->bwd;
  attn_kargs a = attn_problem_kargs(&c->p, dev_at(b, set, T_Q), dev_at(b, set, T_K), dev_at(b, set, T_V),
                                    dev_at(b, set, T_O));
  a.dout = dev_at(b, set, T_DOUT);
  a.lse = (float *)(uintptr_t)dev_at(b, set, T_LSE);
  a.dq = b->dev_grad[0];
  a.dk = b->dev_grad[1];
  a.dv = b->dev_grad[2];
  return a;
}

/* CUDA: host set 0 (karena, lse) to device set i, or (to_device 0) device set 0's o and lse back to the host. */
static int dev_copy_set(attn_meas_ctx *c, int i, int to_device) {
  struct attn_meas_bwd *b = c->bwd;
  const size_t es = attn_dtype_size(c->p.dtype);
  const size_t cnt[T_COUNT] = {b->nq, b->nk, b->nv, b->no, b->no, b->nl};
  const char *host = b->karena;
  int rc = ATTN_OK;
  for (int t = 0; t < T_COUNT && rc == ATTN_OK; t++) {
    char *h = t == T_LSE ? (char *)b->lse : (char *)host;
    const size_t bytes = cnt[t] * (t == T_LSE ? sizeof(float) : es);
    if (to_device) rc = attn_cuda_copy(c->rt, dev_at(b, i, t), h, bytes, 1);
    else if (t == T_O || t == T_LSE) rc = attn_cuda_copy(c->rt, h, dev_at(b, 0, t), bytes, 0);
    if (t != T_LSE) host += bytes;
  }
  return rc;
}

/* CUDA: the device's sets (rotated past 1.25x the L2 cache, as measure.c's forward sets) and gradients. */
static int dev_alloc(attn_meas_ctx *c, char *err, size_t errlen) {
  struct attn_meas_bwd *b = c->bwd;
  attn_cuda_info_t info;
  if (attn_cuda_info(c->rt, &info) != ATTN_OK) {
    snprintf(err, errlen, "no CUDA device open");
    return ATTN_ENODEV;
  }
  const size_t es = attn_dtype_size(c->p.dtype);
  const size_t cnt[T_COUNT] = {b->nq, b->nk, b->nv, b->no, b->no, b->nl};
  size_t at = 0;
  for (int t = 0; t < T_COUNT; t++) {
    b->dev_off[t] = at;
    at += (cnt[t] * (t == T_LSE ? sizeof(float) : es) + DEV_ALIGN - 1) / DEV_ALIGN * DEV_ALIGN;
  }
  b->dev_set_bytes = at;
  double sets = ceil(1.25 * info.l2_bytes / (double)at) + 1;
  if (sets * (double)at > 4.0 * 1024 * 1024 * 1024) sets = floor(4.0 * 1024 * 1024 * 1024 / (double)at);
  b->sets = sets < 2 ? 2 : (int)sets;
  int rc = attn_cuda_alloc(c->rt, (size_t)b->sets * at, &b->dev);
  for (int g = 0; g < 3 && rc == ATTN_OK; g++)
    rc = attn_cuda_alloc(c->rt, (g == 0 ? b->nq : g == 1 ? b->nk : b->nv) * es, &b->dev_grad[g]);
  if (rc != ATTN_OK)
    snprintf(err, errlen, "device memory for %d backward input sets of %.1f MiB: %s", b->sets, at / 1048576.0,
             attn_last_error(c->rt));
  return rc;
}

/* The forward's o and lse of set 0, by the untuned forward plan (CUDA: on the device's set 0). */
static int forward_of(attn_meas_ctx *c, const attn_plan *fwd) {
  attn_kargs a = on_cuda(c) ? dev_kargs(c, 0) : attn_meas_bwd_kargs(c, 0);
  return attn_execute_lse(fwd, a.q, a.k, a.v, a.o, a.lse);
}

int attn_meas_bwd_ensure(attn_meas_ctx *c, char *err, size_t errlen) {
  if (c->bwd) return ATTN_OK;
  const attn_problem *p = &c->p;
  const int cuda = on_cuda(c);
  if (c->rt->target != ATTN_TARGET_CPU && !cuda) {
    snprintf(err, errlen, "the backward is measured on the CPU and on CUDA only");
    return ATTN_EUNSUPPORTED;
  }
  struct attn_meas_bwd *b = calloc(1, sizeof *b);
  if (!b) {
    snprintf(err, errlen, "out of memory");
    return ATTN_ENOMEM;
  }
  b->rt = c->rt;
  const size_t es = attn_dtype_size(p->dtype);
  b->nq = c->q_count, b->nk = c->kv_count, b->nv = c->v_count, b->no = c->o_count;
  b->nl = (size_t)p->batch * p->heads * p->n;
  b->set_elems = b->nq + b->nk + b->nv + 2 * b->no;
  /* on CUDA the rotated sets live on the device: the host holds set 0, their source */
  b->sets = cuda ? 1 : attn_meas_cold_sets((double)b->set_elems * es + (double)b->nl * sizeof(float));
  b->karena = malloc((size_t)b->sets * b->set_elems * es);
  b->lse = malloc((size_t)b->sets * b->nl * sizeof(float));
  b->dq = malloc(b->nq * es);
  b->dk = malloc(b->nk * es);
  b->dv = malloc(b->nv * es);
  b->f32 = malloc(b->set_elems * sizeof(float));
  if (!b->karena || !b->lse || !b->dq || !b->dk || !b->dv || !b->f32) {
    snprintf(err, errlen, "out of memory for %d backward input sets of %.1f MiB", b->sets,
             (double)b->set_elems * es / 1048576.0);
    bwd_release(b);
    return ATTN_ENOMEM;
  }
  c->bwd = b;
  int rc = cuda ? dev_alloc(c, err, errlen) : ATTN_OK;
  /* the forward that makes o and lse: the untuned default, whatever the tuned row says */
  attn_spec fs;
  attn_plan *fwd = NULL;
  attn_plan_default(c->rt, p, ATTN_ALGO_FLASH, &fs);
  if (rc == ATTN_OK && (rc = attn_plan_create_spec(c->rt, p, &fs, 0, "tuning", &fwd)) != ATTN_OK)
    snprintf(err, errlen, "the forward for the backward's inputs: %s", attn_last_error(c->rt));
  /* fresh inputs, a seed per shape (another stream than the forward's sets), in set 0; o and lse its forward's */
  const unsigned long long seed = 0xd1b54a32d192ed03ULL ^ ((unsigned long long)p->n << 32) ^
                                  ((unsigned long long)p->d << 16) ^ (unsigned long long)p->d_v;
  const size_t o_at = b->nq + b->nk + b->nv;
  float *x = b->f32;
  attn_fill_random(x, o_at, seed);
  memset(x + o_at, 0, b->no * sizeof(float));
  attn_fill_random(x + o_at + b->no, b->no, seed + 1);
  attn_round_dtype(p->dtype, x, b->set_elems);
  attn_to_dtype(p->dtype, x, b->set_elems, set_base(c, 0));
  if (cuda) { /* o and lse poisoned (all ones: NaN) on the device: a forward that writes nothing fails the check */
    memset(set_base(c, 0) + o_at * es, 0xff, b->no * es);
    memset(b->lse, 0xff, b->nl * sizeof(float));
    if (rc == ATTN_OK && (rc = dev_copy_set(c, 0, 1)) != ATTN_OK)
      snprintf(err, errlen, "the backward's inputs to the device: %s", attn_last_error(c->rt));
  }
  if (rc == ATTN_OK && (rc = forward_of(c, fwd)) != ATTN_OK)
    snprintf(err, errlen, "the forward for the backward's inputs: %s", attn_last_error(c->rt));
  if (rc == ATTN_OK && cuda && (rc = dev_copy_set(c, 0, 0)) != ATTN_OK)
    snprintf(err, errlen, "the forward's o and lse from the device: %s", attn_last_error(c->rt));
  /* the other sets are copies: they are there to make each timed run start from cold memory, and a forward per set
   * (thousands for a small problem) would cost more than the tuning */
  for (int i = 1; i < b->sets && rc == ATTN_OK; i++) {
    if (cuda) {
      if ((rc = dev_copy_set(c, i, 1)) != ATTN_OK)
        snprintf(err, errlen, "the backward's inputs to the device: %s", attn_last_error(c->rt));
      continue;
    }
    memcpy(set_base(c, i), set_base(c, 0), b->set_elems * es);
    memcpy(b->lse + (size_t)i * b->nl, b->lse, b->nl * sizeof(float));
  }
  attn_plan_destroy(fwd);
  if (rc == ATTN_OK) /* set 0's o in fp32, as the kernel reads it */
    attn_from_dtype(p->dtype, set_base(c, 0) + o_at * es, b->no, b->f32 + o_at);
  c->sets = rc == ATTN_OK ? b->sets : 0;
  if (rc != ATTN_OK) attn_meas_bwd_free(c);
  c->next_set = 1;
  return rc;
}

void attn_meas_bwd_poison(attn_meas_ctx *c) {
  struct attn_meas_bwd *b = c->bwd;
  const size_t es = attn_dtype_size(c->p.dtype);
  /* all ones: NaN in f32, f16 and bf16 alike */
  memset(b->dq, 0xff, b->nq * es);
  memset(b->dk, 0xff, b->nk * es);
  memset(b->dv, 0xff, b->nv * es);
}

int attn_meas_bwd_error(attn_meas_ctx *c, double *error, char *err, size_t errlen) {
  struct attn_meas_bwd *b = c->bwd;
  const size_t nmax = b->nq > b->nk ? (b->nq > b->nv ? b->nq : b->nv) : (b->nk > b->nv ? b->nk : b->nv);
  if (!b->ref) {
    b->ref = malloc((b->nq + b->nk + b->nv) * sizeof(double));
    b->got = malloc(nmax * sizeof(float));
    if (!b->ref || !b->got) {
      free(b->ref);
      free(b->got);
      b->ref = NULL;
      b->got = NULL;
      snprintf(err, errlen, "out of memory for the fp64 backward");
      return ATTN_ENOMEM;
    }
    const float *x = b->f32;
    attn_reference_backward_threads(&c->p, c->rt ? c->rt->threads : 1, x, x + b->nq, x + b->nq + b->nk,
                                    x + b->nq + b->nk + b->nv, x + b->nq + b->nk + b->nv + b->no, b->ref,
                                    b->ref + b->nq, b->ref + b->nq + b->nk);
  }
  const void *grad[3] = {b->dq, b->dk, b->dv};
  const size_t cnt[3] = {b->nq, b->nk, b->nv}, at[3] = {0, b->nq, b->nq + b->nk};
  *error = 0;
  for (int g = 0; g < 3; g++) {
    attn_from_dtype(c->p.dtype, grad[g], cnt[g], b->got);
    double e = attn_rel_error(b->ref + at[g], b->got, cnt[g]);
    if (e != e) e = INFINITY; /* a NaN would compare below the next gradient's error */
    if (e > *error) *error = e;
  }
  return ATTN_OK;
}

int attn_meas_bwd_check(attn_meas_ctx *c, const attn_plan *plan, double *error, char *err, size_t errlen) {
  struct attn_meas_bwd *b = c->bwd;
  const size_t es = attn_dtype_size(c->p.dtype);
  void *host[3] = {b->dq, b->dk, b->dv};
  const size_t bytes[3] = {b->nq * es, b->nk * es, b->nv * es};
  attn_meas_bwd_poison(c);
  int rc = ATTN_OK;
  if (on_cuda(c)) { /* the poison to the device, set 0's run (untimed), the gradients back */
    for (int g = 0; g < 3 && rc == ATTN_OK; g++) rc = attn_cuda_copy(c->rt, b->dev_grad[g], host[g], bytes[g], 1);
    const attn_kargs a = dev_kargs(c, 0);
    if (rc == ATTN_OK)
      rc = attn_cuda_run_backward(c->rt, plan->cuda, &c->p, a.q, a.k, a.v, a.o, a.lse, a.dout, a.dq, a.dk, a.dv);
    for (int g = 0; g < 3 && rc == ATTN_OK; g++) rc = attn_cuda_copy(c->rt, host[g], b->dev_grad[g], bytes[g], 0);
  } else {
    const attn_kargs a = attn_meas_bwd_kargs(c, 0);
    rc = attn_cpu_run(c->rt, plan->cpu, &a, NULL);
  }
  if (rc != ATTN_OK) {
    snprintf(err, errlen, "%s", attn_last_error(c->rt));
    return rc;
  }
  return attn_meas_bwd_error(c, error, err, errlen);
}

int attn_meas_bwd_time(attn_meas_ctx *c, const attn_plan *plan, int set, double *ms) {
  const attn_kargs a = dev_kargs(c, set);
  return attn_cuda_run_backward_timed(c->rt, plan->cuda, &c->p, a.q, a.k, a.v, a.o, a.lse, a.dout, a.dq, a.dk, a.dv,
                                      ms);
}

int attn_meas_bwd_count(attn_meas_ctx *c, const attn_plan *counting, attn_io *io) {
  attn_kargs a = attn_meas_bwd_kargs(c, 0);
  return attn_cpu_run(c->rt, counting->cpu, &a, io);
}
