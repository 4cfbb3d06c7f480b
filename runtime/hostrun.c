/* hostrun.c: running a plan on host fp32 arrays whatever its target and dtype, for checking against the fp64 reference, the
 * I/O counts and the tests: on the CPU directly (f32) or through half-precision copies, on CUDA through device
 * buffers in the plan's dtype. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "internal.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void attn_to_dtype(attn_dtype t, const float *x, size_t count, void *dst) {
  if (t == ATTN_F32) {
    memcpy(dst, x, count * sizeof(float));
    return;
  }
  unsigned short *h = dst;
  for (size_t i = 0; i < count; i++) h[i] = t == ATTN_F16 ? attn_f32_to_f16(x[i]) : attn_f32_to_bf16(x[i]);
}

void attn_from_dtype(attn_dtype t, const void *src, size_t count, float *x) {
  if (t == ATTN_F32) {
    memcpy(x, src, count * sizeof(float));
    return;
  }
  const unsigned short *h = src;
  for (size_t i = 0; i < count; i++) x[i] = t == ATTN_F16 ? attn_f16_to_f32(h[i]) : attn_bf16_to_f32(h[i]);
}

/* Element counts of the problem's arrays: Q, K, V, O. */
static void counts(const attn_problem *p, size_t c[4]) {
  const int dv = p->d_v > 0 ? p->d_v : p->d;
  c[0] = (size_t)p->batch * p->heads * p->n * p->d;
  c[1] = (size_t)p->batch * p->heads_kv * p->n_kv * p->d;
  c[2] = (size_t)p->batch * p->heads_kv * p->n_kv * dv;
  c[3] = (size_t)p->batch * p->heads * p->n * dv;
}

static int run_cuda(const attn_plan *plan, const float *q, const float *k, const float *v, float *o, attn_io *io,
                    double *ms) {
  attn_runtime *rt = plan->rt;
  const attn_problem *p = &plan->p;
  const size_t es = attn_dtype_size(p->dtype);
  size_t c[4];
  counts(p, c);
  size_t most = 0;
  for (int i = 0; i < 4; i++) most = c[i] > most ? c[i] : most;
  void *host = malloc(most * es);
  void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL;
  if (!host) return attn_fail(rt, ATTN_ENOMEM, "out of memory staging %zu elements", most);
  int rc = attn_cuda_alloc(rt, c[0] * es, &dq);
  if (rc == ATTN_OK) rc = attn_cuda_alloc(rt, c[1] * es, &dk);
  if (rc == ATTN_OK) rc = attn_cuda_alloc(rt, c[2] * es, &dv);
  if (rc == ATTN_OK) rc = attn_cuda_alloc(rt, c[3] * es, &dout);
  if (rc == ATTN_OK) {
    attn_to_dtype(p->dtype, q, c[0], host);
    rc = attn_cuda_copy(rt, dq, host, c[0] * es, 1);
  }
  if (rc == ATTN_OK) {
    attn_to_dtype(p->dtype, k, c[1], host);
    rc = attn_cuda_copy(rt, dk, host, c[1] * es, 1);
  }
  if (rc == ATTN_OK) {
    attn_to_dtype(p->dtype, v, c[2], host);
    rc = attn_cuda_copy(rt, dv, host, c[2] * es, 1);
  }
  if (rc == ATTN_OK) {
    /* poison: all-ones bits are NaN in every dtype, so an unwritten output is caught */
    memset(host, 0xff, c[3] * es);
    rc = attn_cuda_copy(rt, dout, host, c[3] * es, 1);
  }
  if (rc == ATTN_OK) rc = attn_cuda_run(rt, plan->cuda, p, dq, dk, dv, dout, io, ms);
  if (rc == ATTN_OK) rc = attn_cuda_copy(rt, host, dout, c[3] * es, 0);
  if (rc == ATTN_OK) attn_from_dtype(p->dtype, host, c[3], o);
  attn_cuda_free(rt, dq);
  attn_cuda_free(rt, dk);
  attn_cuda_free(rt, dv);
  attn_cuda_free(rt, dout);
  free(host);
  return rc;
}

int attn_plan_run_f32(const attn_plan *plan, const float *q, const float *k, const float *v, float *o, attn_io *io,
                      double *ms) {
  if (!plan) return attn_fail(NULL, ATTN_EINVAL, "plan is NULL");
  if (!q || !k || !v || !o) return attn_fail(plan->rt, ATTN_EINVAL, "attn_plan_run_f32: an array is NULL");
  if (plan->cuda) return run_cuda(plan, q, k, v, o, io, ms);
  if (!plan->cpu) return attn_fail(plan->rt, ATTN_ERUNTIME, "plan has no kernel");
  const attn_problem *p = &plan->p;
  attn_kargs a = attn_problem_kargs(p, q, k, v, o);
  if (p->dtype == ATTN_F32) {
    double t0 = now_ms();
    int rc = attn_cpu_run(plan->rt, plan->cpu, &a, io);
    if (ms) *ms = now_ms() - t0;
    return rc;
  }
  /* half precision: the kernel reads and writes 2-byte elements; stage the arrays as the GPU path does */
  size_t c[4];
  counts(p, c);
  void *h[4] = {malloc(c[0] * 2), malloc(c[1] * 2), malloc(c[2] * 2), malloc(c[3] * 2)};
  int rc = ATTN_OK;
  if (!h[0] || !h[1] || !h[2] || !h[3]) rc = attn_fail(plan->rt, ATTN_ENOMEM, "out of memory staging half arrays");
  if (rc == ATTN_OK) {
    attn_to_dtype(p->dtype, q, c[0], h[0]);
    attn_to_dtype(p->dtype, k, c[1], h[1]);
    attn_to_dtype(p->dtype, v, c[2], h[2]);
    memset(h[3], 0xff, c[3] * 2); /* all-ones: NaN in f16 and bf16, so an unwritten output is caught */
    a.q = h[0];
    a.k = h[1];
    a.v = h[2];
    a.o = h[3];
    double t0 = now_ms();
    rc = attn_cpu_run(plan->rt, plan->cpu, &a, io);
    if (ms) *ms = now_ms() - t0;
  }
  if (rc == ATTN_OK) attn_from_dtype(p->dtype, h[3], c[3], o);
  for (int i = 0; i < 4; i++) free(h[i]);
  return rc;
}

void attn_round_dtype(attn_dtype t, float *x, size_t count) {
  if (t == ATTN_F16)
    for (size_t i = 0; i < count; i++) x[i] = attn_f16_to_f32(attn_f32_to_f16(x[i]));
  else if (t == ATTN_BF16)
    for (size_t i = 0; i < count; i++) x[i] = attn_bf16_to_f32(attn_f32_to_bf16(x[i]));
}
