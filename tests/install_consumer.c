/* install_consumer.c: a program outside the project, built by tests/install.sh against an installed (and moved)
 * prefix with find_package(attntune) and with pkg-config. It computes a small causal grouped-query attention with
 * n_kv != n through libattn's public API and compares it with a plain loop in double precision. */
#include <attn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { HEADS = 4, HEADS_KV = 2, N = 37, N_KV = 45, D = 16 };

int main(void) {
  const size_t nq = (size_t)HEADS * N * D, nkv = (size_t)HEADS_KV * N_KV * D;
  float *q = malloc(nq * sizeof *q), *k = malloc(nkv * sizeof *k), *v = malloc(nkv * sizeof *v);
  float *o = malloc(nq * sizeof *o);
  double *s = malloc(N_KV * sizeof *s);
  if (!q || !k || !v || !o || !s) return 1;
  unsigned x = 12345;
  for (size_t i = 0; i < nq; i++) q[i] = (float)((x = x * 1103515245u + 12345u) >> 16 & 0x7fff) / 16384.0f - 1.0f;
  for (size_t i = 0; i < nkv; i++) k[i] = (float)((x = x * 1103515245u + 12345u) >> 16 & 0x7fff) / 16384.0f - 1.0f;
  for (size_t i = 0; i < nkv; i++) v[i] = (float)((x = x * 1103515245u + 12345u) >> 16 & 0x7fff) / 16384.0f - 1.0f;

  attn_runtime *rt;
  attn_plan *plan;
  attn_problem p = {.batch = 1, .heads = HEADS, .n = N, .d = D, .n_kv = N_KV, .heads_kv = HEADS_KV,
                    .dtype = ATTN_F32, .causal = 1};
  if (attn_open(NULL, ATTN_TARGET_CPU, &rt) != ATTN_OK) {
    fprintf(stderr, "attn_open: %s\n", attn_last_error(NULL));
    return 1;
  }
  if (attn_plan_create(rt, &p, &plan) != ATTN_OK) {
    fprintf(stderr, "attn_plan_create: %s\n", attn_last_error(rt));
    return 1;
  }
  int rc = attn_execute(plan, q, k, v, o);
  if (rc != ATTN_OK) {
    fprintf(stderr, "attn_execute: %s: %s\n", attn_strerror(rc), attn_last_error(rt));
    return 1;
  }
  printf("consumer: %s\n", attn_plan_describe(plan));
  attn_plan_destroy(plan);
  attn_close(rt);

  /* causal, bottom-right aligned (attn.h): query i sees keys j <= i + N_KV - N; query head h reads kv head h / 2 */
  double worst = 0;
  for (int h = 0; h < HEADS; h++) {
    const size_t kv_head = (size_t)(h / (HEADS / HEADS_KV)) * N_KV * D;
    const float *kh = k + kv_head, *vh = v + kv_head;
    for (int i = 0; i < N; i++) {
      const float *qi = q + ((size_t)h * N + i) * D;
      const int seen = i + N_KV - N + 1;
      double mx = -INFINITY, sum = 0;
      for (int j = 0; j < seen; j++) {
        double acc = 0;
        for (int c = 0; c < D; c++) acc += (double)qi[c] * kh[j * D + c];
        s[j] = acc / sqrt((double)D);
        mx = s[j] > mx ? s[j] : mx;
      }
      for (int j = 0; j < seen; j++) sum += (s[j] = exp(s[j] - mx));
      for (int c = 0; c < D; c++) {
        double ref = 0;
        for (int j = 0; j < seen; j++) ref += s[j] / sum * vh[j * D + c];
        double err = fabs(ref - o[((size_t)h * N + i) * D + c]);
        worst = err > worst ? err : worst;
      }
    }
  }
  printf("consumer: max abs error %.2e vs a double-precision loop: %s\n", worst, worst < 1e-4 ? "PASS" : "FAIL");
  free(q);
  free(k);
  free(v);
  free(o);
  free(s);
  return worst < 1e-4 ? 0 : 1;
}
