/* varlen.c: attn_execute_varlen, FlashAttention's packed variable-length batches on the CPU. The plan's kernel runs
 * once per sequence (batch 1, the sequence's own lengths) on its rows in place: the packed arrays are token-major
 * ([total][heads][d], a row stride of heads·d), which the kernels read directly (attn_kargs.layout), so nothing is
 * copied. */
#include <string.h>
#include "internal.h"

#define ATTN_API __attribute__((visibility("default")))

/* A valid cu_seqlens: batch + 1 entries from 0, non-decreasing, each length <= most; the longest in *longest. */
int attn_varlen_check_cu(attn_runtime *rt, const char *what, const char *name, const int *cu, int batch, int most,
                         long *longest) {
  if (!cu) return attn_fail(rt, ATTN_EINVAL, "%s: %s is NULL", what, name);
  if (cu[0] != 0) return attn_fail(rt, ATTN_EINVAL, "%s: %s[0] is %d, not 0", what, name, cu[0]);
  *longest = 0;
  for (int b = 0; b < batch; b++) {
    const long len = (long)cu[b + 1] - cu[b];
    if (len < 0)
      return attn_fail(rt, ATTN_EINVAL, "%s: %s decreases at %d (%d then %d)", what, name, b + 1, cu[b],
                       cu[b + 1]);
    if (len > most)
      return attn_fail(rt, ATTN_EINVAL, "%s: sequence %d has %ld rows in %s, above the plan's %d",
                       what, b, len, name, most);
    if (len > *longest) *longest = len;
  }
  return ATTN_OK;
}

/* Both entry points: on CUDA queued on stream, and waited for when sync; on the CPU the one synchronous run. */
static int execute_varlen(const char *what, const attn_plan *plan, void *stream, int sync, const int *cu_seqlens_q,
                          const int *cu_seqlens_kv, const void *q, const void *k, const void *v, void *o) {
  if (!plan) return attn_fail(NULL, ATTN_EINVAL, "%s: plan is NULL", what);
  attn_runtime *rt = plan->rt;
  if (plan->cuda) /* cuda_serve.c */
    return attn_cuda_execute_varlen(plan, stream, sync, what, cu_seqlens_q, cu_seqlens_kv, q, k, v, o);
  if (plan->backward)
    return attn_fail(rt, ATTN_EUNSUPPORTED, "%s: a backward plan runs only attn_execute_backward", what);
  if (plan->spec.algo == ATTN_ALGO_LOWRANK)
    return attn_fail(rt, ATTN_EUNSUPPORTED, "%s: lowrank plans are not supported (use flash)", what);
  if (!q || !k || !v || !o)
    return attn_fail(rt, ATTN_EINVAL, "%s: %s is NULL", what, !q ? "q" : !k ? "k" : !v ? "v" : "o");
  if (!plan->cpu) return attn_fail(rt, ATTN_ERUNTIME, "%s: plan has no kernel", what);
  const attn_problem *p = &plan->p;
  long max_q, max_kv;
  int rc = attn_varlen_check_cu(rt, what, "cu_seqlens_q", cu_seqlens_q, p->batch, p->n, &max_q);
  if (rc == ATTN_OK) rc = attn_varlen_check_cu(rt, what, "cu_seqlens_kv", cu_seqlens_kv, p->batch, p->n_kv, &max_kv);
  if (rc != ATTN_OK) return rc;

  const size_t es = attn_dtype_size(p->dtype);
  const size_t hq = (size_t)p->heads, hk = (size_t)p->heads_kv;
  for (int b = 0; b < p->batch && rc == ATTN_OK; b++) {
    const long q0 = cu_seqlens_q[b], lq = cu_seqlens_q[b + 1] - q0;
    const long k0 = cu_seqlens_kv[b], lk = cu_seqlens_kv[b + 1] - k0;
    char *ob = (char *)o + (size_t)q0 * hq * (size_t)p->d_v * es;
    if (lq == 0) continue;
    if (lk == 0) {
      /* No keys: every row sees none, and such rows are 0 (attn.h); all-zero bits are 0 in every dtype. */
      memset(ob, 0, (size_t)lq * hq * (size_t)p->d_v * es);
      continue;
    }
    /* The sequence's rows in place: token-major [len][heads][d] is the kernels' ATTN_LAYOUT_*_TOKENS with batch 1.
     * Causal stays bottom-right within the sequence: the kernel aligns query lq-1 with key lk-1. */
    attn_kargs a = attn_problem_kargs(p, (const char *)q + (size_t)q0 * hq * (size_t)p->d * es,
                                      (const char *)k + (size_t)k0 * hk * (size_t)p->d * es,
                                      (const char *)v + (size_t)k0 * hk * (size_t)p->d_v * es, ob);
    a.batch = 1;
    a.n = lq;
    a.n_kv = lk;
    a.layout = ATTN_LAYOUT_QO_TOKENS | ATTN_LAYOUT_KV_TOKENS;
    rc = attn_cpu_run(rt, plan->cpu, &a, NULL);
  }
  return rc;
}

ATTN_API int attn_execute_varlen(const attn_plan *plan, const int *cu_seqlens_q, const int *cu_seqlens_kv,
                                 const void *q, const void *k, const void *v, void *o) {
  return execute_varlen("attn_execute_varlen", plan, NULL, 1, cu_seqlens_q, cu_seqlens_kv, q, k, v, o);
}

ATTN_API int attn_execute_varlen_async(const attn_plan *plan, void *stream, const int *cu_seqlens_q,
                                       const int *cu_seqlens_kv, const void *q, const void *k, const void *v,
                                       void *o) {
  return execute_varlen("attn_execute_varlen_async", plan, stream, 0, cu_seqlens_q, cu_seqlens_kv, q, k, v, o);
}
