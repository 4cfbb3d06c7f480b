/* measure_bwd.c: what measuring the backward needs beyond the forward's harness (measure.c): an input set of q, k, v
 * and dout with the forward's o and lse (the untuned forward plan's attn_execute_lse, so that P = exp(S - lse) is the
 * softmax the backward's definition has), copied into as many sets as the forward's harness rotates past the
 * last-level cache; the gradients' arrays; and the check of set 0's gradients against attn_reference_backward in
 * fp64. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "measure.h"

struct attn_meas_bwd {
  int sets;
  size_t nq, nk, nv, no, nl;   /* elements of q, k, v, o (and dout), lse per set */
  size_t set_elems;            /* q, k, v, o, dout of one set */
  void *karena;                /* sets x set_elems in the problem's dtype */
  float *lse;                  /* sets x nl */
  void *dq, *dk, *dv;          /* the gradients, in the dtype */
  float *f32;                  /* set 0 in fp32 (rounded through the dtype): q, k, v, o, dout */
  double *ref;                 /* fp64 dq, dk, dv of set 0, made on the first check */
  float *got;                  /* a gradient in fp32, for the check */
};

static void bwd_release(struct attn_meas_bwd *b) {
  if (!b) return;
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

/* The forward's o and lse of set i, by the untuned forward plan. */
static int forward_of(attn_meas_ctx *c, const attn_plan *fwd, int i) {
  attn_kargs a = attn_meas_bwd_kargs(c, i);
  return attn_execute_lse(fwd, a.q, a.k, a.v, a.o, a.lse);
}

int attn_meas_bwd_ensure(attn_meas_ctx *c, char *err, size_t errlen) {
  if (c->bwd) return ATTN_OK;
  const attn_problem *p = &c->p;
  if (c->rt->target != ATTN_TARGET_CPU) {
    snprintf(err, errlen, "the backward is measured on the CPU only");
    return ATTN_EUNSUPPORTED;
  }
  struct attn_meas_bwd *b = calloc(1, sizeof *b);
  if (!b) {
    snprintf(err, errlen, "out of memory");
    return ATTN_ENOMEM;
  }
  const size_t es = attn_dtype_size(p->dtype);
  b->nq = c->q_count, b->nk = c->kv_count, b->nv = c->v_count, b->no = c->o_count;
  b->nl = (size_t)p->batch * p->heads * p->n;
  b->set_elems = b->nq + b->nk + b->nv + 2 * b->no;
  b->sets = attn_meas_cold_sets((double)b->set_elems * es + (double)b->nl * sizeof(float));
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
  /* the forward that makes o and lse: the untuned default, whatever the tuned row says */
  attn_spec fs;
  attn_plan *fwd = NULL;
  attn_plan_default(c->rt, p, ATTN_ALGO_FLASH, &fs);
  int rc = attn_plan_create_spec(c->rt, p, &fs, 0, "tuning", &fwd);
  if (rc != ATTN_OK) snprintf(err, errlen, "the forward for the backward's inputs: %s", attn_last_error(c->rt));
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
  if (rc == ATTN_OK && (rc = forward_of(c, fwd, 0)) != ATTN_OK)
    snprintf(err, errlen, "the forward for the backward's inputs: %s", attn_last_error(c->rt));
  /* the other sets are copies: they are there to make each timed run start from cold memory, and a forward per set
   * (thousands for a small problem) would cost more than the tuning */
  for (int i = 1; i < b->sets && rc == ATTN_OK; i++) {
    memcpy(set_base(c, i), set_base(c, 0), b->set_elems * es);
    memcpy(b->lse + (size_t)i * b->nl, b->lse, b->nl * sizeof(float));
  }
  attn_plan_destroy(fwd);
  if (rc == ATTN_OK) /* set 0's o in fp32, as the kernel reads it */
    attn_from_dtype(p->dtype, set_base(c, 0) + o_at * es, b->no, b->f32 + o_at);
  if (rc != ATTN_OK) attn_meas_bwd_free(c);
  c->sets = rc == ATTN_OK ? b->sets : 0;
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
    attn_reference_backward(&c->p, x, x + b->nq, x + b->nq + b->nk, x + b->nq + b->nk + b->nv,
                            x + b->nq + b->nk + b->nv + b->no, b->ref, b->ref + b->nq, b->ref + b->nq + b->nk);
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

int attn_meas_bwd_count(attn_meas_ctx *c, const attn_plan *counting, attn_io *io) {
  attn_kargs a = attn_meas_bwd_kargs(c, 0);
  return attn_cpu_run(c->rt, counting->cpu, &a, io);
}
