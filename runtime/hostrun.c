/* hostrun.c: running a plan on host fp32 arrays whatever its target, for checking against the fp64 reference, the
 * I/O counts and the tests: on the CPU directly, on CUDA through device buffers in the plan's dtype. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "internal.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* x (count floats) in dtype t into dst (count * size bytes). */
static void to_dtype(attn_dtype t, const float *x, size_t count, void *dst) {
  if (t == ATTN_F32) {
    memcpy(dst, x, count * sizeof(float));
    return;
  }
  unsigned short *h = dst;
  for (size_t i = 0; i < count; i++) h[i] = t == ATTN_F16 ? attn_f32_to_f16(x[i]) : attn_f32_to_bf16(x[i]);
}

static void from_dtype(attn_dtype t, const void *src, size_t count, float *x) {
  if (t == ATTN_F32) {
    memcpy(x, src, count * sizeof(float));
    return;
  }
  const unsigned short *h = src;
  for (size_t i = 0; i < count; i++) x[i] = t == ATTN_F16 ? attn_f16_to_f32(h[i]) : attn_bf16_to_f32(h[i]);
}

static int run_cuda(const attn_plan *plan, const float *q, const float *k, const float *v, float *o, attn_io *io,
                    double *ms) {
  attn_runtime *rt = plan->rt;
  const attn_problem *p = &plan->p;
  const size_t es = attn_dtype_size(p->dtype);
  const size_t nq = (size_t)p->batch * p->heads * p->n * p->d, nk = (size_t)p->batch * p->heads_kv * p->n_kv * p->d;
  void *host = malloc((nq > nk ? nq : nk) * es);
  void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL;
  if (!host) return attn_fail(rt, ATTN_ENOMEM, "out of memory staging %zu elements", nq > nk ? nq : nk);
  int rc = attn_cuda_alloc(rt, nq * es, &dq);
  if (rc == ATTN_OK) rc = attn_cuda_alloc(rt, nk * es, &dk);
  if (rc == ATTN_OK) rc = attn_cuda_alloc(rt, nk * es, &dv);
  if (rc == ATTN_OK) rc = attn_cuda_alloc(rt, nq * es, &dout);
  if (rc == ATTN_OK) {
    to_dtype(p->dtype, q, nq, host);
    rc = attn_cuda_copy(rt, dq, host, nq * es, 1);
  }
  if (rc == ATTN_OK) {
    to_dtype(p->dtype, k, nk, host);
    rc = attn_cuda_copy(rt, dk, host, nk * es, 1);
  }
  if (rc == ATTN_OK) {
    to_dtype(p->dtype, v, nk, host);
    rc = attn_cuda_copy(rt, dv, host, nk * es, 1);
  }
  if (rc == ATTN_OK) {
    /* poison: all-ones bits are NaN in every dtype, so an unwritten output is caught */
    memset(host, 0xff, nq * es);
    rc = attn_cuda_copy(rt, dout, host, nq * es, 1);
  }
  if (rc == ATTN_OK) rc = attn_cuda_run(rt, plan->cuda, p, dq, dk, dv, dout, io, ms);
  if (rc == ATTN_OK) rc = attn_cuda_copy(rt, host, dout, nq * es, 0);
  if (rc == ATTN_OK) from_dtype(p->dtype, host, nq, o);
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
  attn_kargs a = {.q = q, .k = k, .v = v, .o = o, .batch = p->batch, .heads = p->heads, .heads_kv = p->heads_kv,
                  .n = p->n, .n_kv = p->n_kv, .scale = p->scale};
  double t0 = now_ms();
  int rc = attn_cpu_run(plan->rt, plan->cpu, &a, io);
  if (ms) *ms = now_ms() - t0;
  return rc;
}
