/* serve_async: attn_execute_varlen_async and attn_execute_paged_async on the CPU, where the stream is ignored and each
 * is its synchronous call: the same bits on the same inputs (o poisoned before each), and bad input refused before
 * anything runs with one line that names the async call, o untouched. (CUDA's queueing is tests/cuda_emu_serve.c's
 * `fake` mode.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "internal.h"

static void poison(float *o, size_t n) {
  for (size_t i = 0; i < n; i++) o[i] = NAN;
}

/* every element written (no NaN left) and the two outputs the same bits */
static int same(const float *a, const float *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (isnan(a[i]) || memcmp(&a[i], &b[i], sizeof *a)) return 0;
  return 1;
}

int main(void) {
  attn_runtime *rt = NULL;
  if (attn_open(NULL, ATTN_TARGET_CPU, &rt) != ATTN_OK) {
    printf("FAIL attn_open: %s\n", attn_last_error(NULL));
    return 1;
  }
  enum { B = 2, H = 2, N = 9, NKV = 20, D = 16, PS = 8, MP = 3 };
  void *const stream = (void *)(size_t)0x5ee0; /* ignored on the CPU */
  /* varlen: sequences of 9 and 3 queries, 20 and 5 keys (causal bottom-right in each) */
  const attn_problem pv = {.batch = B, .heads = H, .n = N, .n_kv = NKV, .d = D, .dtype = ATTN_F32, .causal = 1,
                           .algo = ATTN_ALGO_FLASH, .varlen = 1};
  const int cu_q[B + 1] = {0, 9, 12}, cu_kv[B + 1] = {0, 20, 25}, dec[B + 1] = {0, 9, 8};
  const size_t nq = 12 * H * D, nk = 25 * H * D;
  float *q = malloc(sizeof(float) * B * H * N * D), *k = malloc(sizeof(float) * B * MP * PS * H * D);
  float *v = malloc(sizeof(float) * B * MP * PS * H * D), *o1 = malloc(sizeof(float) * B * H * N * D);
  float *o2 = malloc(sizeof(float) * B * H * N * D);
  if (!q || !k || !v || !o1 || !o2) return 1;
  attn_fill_random(q, (size_t)B * H * N * D, 1);
  attn_fill_random(k, (size_t)B * MP * PS * H * D, 2);
  attn_fill_random(v, (size_t)B * MP * PS * H * D, 3);
  attn_plan *plan = NULL;
  int rc = attn_plan_create(rt, &pv, &plan);
  CHECK(rc == ATTN_OK, "varlen plan: %s", attn_last_error(rt));
  if (rc == ATTN_OK) {
    poison(o1, nq), poison(o2, nq);
    const int r1 = attn_execute_varlen(plan, cu_q, cu_kv, q, k, v, o1);
    const int r2 = attn_execute_varlen_async(plan, stream, cu_q, cu_kv, q, k, v, o2);
    CHECK(r1 == ATTN_OK && r2 == ATTN_OK && same(o1, o2, nq), "varlen: sync %s, async %s (%s): outputs %s",
          attn_strerror(r1), attn_strerror(r2), attn_last_error(rt), same(o1, o2, nq) ? "equal" : "differ");
    poison(o2, nq);
    const int r3 = attn_execute_varlen_async(plan, stream, dec, cu_kv, q, k, v, o2);
    const char *e = attn_last_error(rt);
    CHECK(r3 == ATTN_EINVAL && strstr(e, "attn_execute_varlen_async: cu_seqlens_q decreases") && !strchr(e, '\n') &&
              isnan(o2[0]) && isnan(o2[nq - 1]),
          "varlen async, decreasing cu_seqlens_q: %s '%s' (want EINVAL naming the call, o untouched)",
          attn_strerror(r3), e);
  }
  attn_plan_destroy(plan);
  (void)nk;
  /* paged: 2 sequences of 20 and 5 keys in pages of 8, shuffled; the varlen plan's shape, so its kernel (one
   * compile for the test) */
  const attn_problem pp = {.batch = B, .heads = H, .n = N, .n_kv = NKV, .d = D, .dtype = ATTN_F32, .causal = 1,
                           .algo = ATTN_ALGO_FLASH, .page_size = PS};
  const int table[B * MP] = {4, 1, 5, 0, 2, 3}, lens[B] = {20, 5}, bad[B * MP] = {4, 1, 6, 0, 2, 3};
  const size_t no = (size_t)B * H * N * D;
  plan = NULL;
  rc = attn_plan_create(rt, &pp, &plan);
  CHECK(rc == ATTN_OK, "paged plan: %s", attn_last_error(rt));
  if (rc == ATTN_OK) {
    poison(o1, no), poison(o2, no);
    const int r1 = attn_execute_paged(plan, q, k, v, B * MP, PS, table, MP, lens, o1);
    const int r2 = attn_execute_paged_async(plan, stream, q, k, v, B * MP, PS, table, MP, lens, o2);
    CHECK(r1 == ATTN_OK && r2 == ATTN_OK && same(o1, o2, no), "paged: sync %s, async %s (%s): outputs %s",
          attn_strerror(r1), attn_strerror(r2), attn_last_error(rt), same(o1, o2, no) ? "equal" : "differ");
    poison(o2, no);
    const int r3 = attn_execute_paged_async(plan, stream, q, k, v, B * MP, PS, bad, MP, lens, o2);
    const char *e = attn_last_error(rt);
    CHECK(r3 == ATTN_EINVAL && strstr(e, "attn_execute_paged_async: sequence 0's page 2 is 6, outside the cache") &&
              !strchr(e, '\n') && isnan(o2[0]) && isnan(o2[no - 1]),
          "paged async, page 6 of 6: %s '%s' (want EINVAL naming the call, o untouched)", attn_strerror(r3), e);
  }
  attn_plan_destroy(plan);
  CHECK(attn_execute_paged_async(NULL, stream, q, k, v, 1, PS, table, MP, lens, o2) == ATTN_EINVAL &&
            strstr(attn_last_error(NULL), "attn_execute_paged_async: plan is NULL"),
        "paged async on no plan: '%s'", attn_last_error(NULL));
  free(q), free(k), free(v), free(o1), free(o2);
  attn_close(rt);
  printf("%s: %d checks, %d failures\n", failures ? "FAILED" : "PASSED", checks, failures);
  return failures ? 1 : 0;
}
