/* varlen.c: attn_execute_varlen, FlashAttention's packed variable-length batches on the CPU. Each sequence's rows are
 * gathered into contiguous [1][heads][len][d] buffers (O(len·d), against the kernel's O(len²·d)), the plan's kernel
 * runs on them with batch 1 and the sequence's own lengths, and o is scattered back. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

#define ATTN_API __attribute__((visibility("default")))

/* rows [row0, row0 + len) of a packed [total][heads][width] array <-> [heads][len][width]; to_packed 0 gathers. */
static void repack(char *packed, char *seq, long row0, long len, long heads, long width, size_t es, int to_packed) {
  const size_t w = (size_t)width * es;
  for (long t = 0; t < len; t++)
    for (long h = 0; h < heads; h++) {
      char *pk = packed + ((size_t)(row0 + t) * (size_t)heads + (size_t)h) * w;
      char *sq = seq + ((size_t)h * (size_t)len + (size_t)t) * w;
      if (to_packed) memcpy(pk, sq, w);
      else memcpy(sq, pk, w);
    }
}

/* A valid cu_seqlens: batch + 1 entries from 0, non-decreasing, each length <= most; the longest in *longest. */
static int check_cu(attn_runtime *rt, const char *name, const int *cu, int batch, int most, long *longest) {
  if (!cu) return attn_fail(rt, ATTN_EINVAL, "attn_execute_varlen: %s is NULL", name);
  if (cu[0] != 0) return attn_fail(rt, ATTN_EINVAL, "attn_execute_varlen: %s[0] is %d, not 0", name, cu[0]);
  *longest = 0;
  for (int b = 0; b < batch; b++) {
    const long len = (long)cu[b + 1] - cu[b];
    if (len < 0)
      return attn_fail(rt, ATTN_EINVAL, "attn_execute_varlen: %s decreases at %d (%d then %d)", name, b + 1, cu[b],
                       cu[b + 1]);
    if (len > most)
      return attn_fail(rt, ATTN_EINVAL, "attn_execute_varlen: sequence %d has %ld rows in %s, above the plan's %d",
                       b, len, name, most);
    if (len > *longest) *longest = len;
  }
  return ATTN_OK;
}

ATTN_API int attn_execute_varlen(const attn_plan *plan, const int *cu_seqlens_q, const int *cu_seqlens_kv,
                                 const void *q, const void *k, const void *v, void *o) {
  if (!plan) return attn_fail(NULL, ATTN_EINVAL, "attn_execute_varlen: plan is NULL");
  attn_runtime *rt = plan->rt;
  if (plan->cuda) return attn_cuda_execute_varlen(plan, cu_seqlens_q, cu_seqlens_kv, q, k, v, o); /* cuda_serve.c */
  if (plan->backward)
    return attn_fail(rt, ATTN_EUNSUPPORTED, "attn_execute_varlen: a backward plan runs only attn_execute_backward");
  if (plan->spec.algo == ATTN_ALGO_LOWRANK)
    return attn_fail(rt, ATTN_EUNSUPPORTED, "attn_execute_varlen: lowrank plans are not supported (use flash)");
  if (!q || !k || !v || !o)
    return attn_fail(rt, ATTN_EINVAL, "attn_execute_varlen: %s is NULL", !q ? "q" : !k ? "k" : !v ? "v" : "o");
  if (!plan->cpu) return attn_fail(rt, ATTN_ERUNTIME, "attn_execute_varlen: plan has no kernel");
  const attn_problem *p = &plan->p;
  long max_q, max_kv;
  int rc = check_cu(rt, "cu_seqlens_q", cu_seqlens_q, p->batch, p->n, &max_q);
  if (rc == ATTN_OK) rc = check_cu(rt, "cu_seqlens_kv", cu_seqlens_kv, p->batch, p->n_kv, &max_kv);
  if (rc != ATTN_OK) return rc;

  const size_t es = attn_dtype_size(p->dtype);
  const size_t hq = (size_t)p->heads, hk = (size_t)p->heads_kv;
  /* Staging for the longest sequence, reused by all (the problem's limits keep these products in size_t). */
  char *sq = malloc(hq * (size_t)max_q * (size_t)p->d * es + 1);
  char *sk = malloc(hk * (size_t)max_kv * (size_t)p->d * es + 1);
  char *sv = malloc(hk * (size_t)max_kv * (size_t)p->d_v * es + 1);
  char *so = malloc(hq * (size_t)max_q * (size_t)p->d_v * es + 1);
  if (!sq || !sk || !sv || !so) {
    free(sq), free(sk), free(sv), free(so);
    return attn_fail(rt, ATTN_ENOMEM, "attn_execute_varlen: out of memory for staging %ld query and %ld key rows",
                     max_q, max_kv);
  }
  char *qp = (char *)(uintptr_t)q, *kp = (char *)(uintptr_t)k, *vp = (char *)(uintptr_t)v, *op = o;
  for (int b = 0; b < p->batch && rc == ATTN_OK; b++) {
    const long q0 = cu_seqlens_q[b], lq = cu_seqlens_q[b + 1] - q0;
    const long k0 = cu_seqlens_kv[b], lk = cu_seqlens_kv[b + 1] - k0;
    if (lq == 0) continue;
    if (lk == 0) {
      /* No keys: every row sees none, and such rows are 0 (attn.h); all-zero bits are 0 in every dtype. */
      for (long t = 0; t < lq; t++) memset(op + (size_t)(q0 + t) * hq * (size_t)p->d_v * es, 0, hq * p->d_v * es);
      continue;
    }
    repack(qp, sq, q0, lq, p->heads, p->d, es, 0);
    repack(kp, sk, k0, lk, p->heads_kv, p->d, es, 0);
    repack(vp, sv, k0, lk, p->heads_kv, p->d_v, es, 0);
    /* Causal stays bottom-right within the sequence: the kernel aligns query lq-1 with key lk-1. */
    attn_kargs a = attn_problem_kargs(p, sq, sk, sv, so);
    a.batch = 1;
    a.n = lq;
    a.n_kv = lk;
    rc = attn_cpu_run(rt, plan->cpu, &a, NULL);
    if (rc == ATTN_OK) repack(op, so, q0, lq, p->heads, p->d_v, es, 1);
  }
  free(sq), free(sk), free(sv), free(so);
  return rc;
}
