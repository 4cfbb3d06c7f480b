/* cuda_bwd_atomic_fake: a CUDA backward plan of a given dq=atomic spec through libattn on tests/fake_libcuda.c
 * (ATTN_LIBCUDA): describe says dq=atomic, attn_execute_backward makes three launches (attn_bwd_pre, attn_kernel of
 * the dK/dV blocks only, attn_bwd_post over dq's elements), waits and frees the scratch after; the deterministic
 * spec's plan makes two. Exit 77 (skipped) without NVRTC. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "fake_libcuda.h"
#include "internal.h"
#include "spec_bwd_cuda.h"

int main(void) {
  int maj = 0, min = 0;
  char why[512];
  if (attn_nvrtc_version(&maj, &min, why, sizeof why) != ATTN_OK) {
    printf("SKIP: %s\n", why);
    return 77;
  }
  void *h = dlopen(getenv("ATTN_LIBCUDA"), RTLD_NOW);
  fake_cuda_record_fn record = h ? (fake_cuda_record_fn)dlsym(h, "fake_cuda_record") : NULL;
  CHECK(record != NULL, "the fake driver (ATTN_LIBCUDA=%s) is not loadable", getenv("ATTN_LIBCUDA"));
  if (!record) return 1;
  const attn_problem p = {.batch = 1, .heads = 4, .heads_kv = 2, .n = 33, .n_kv = 17, .d = 16, .d_v = 24,
                          .dtype = ATTN_F16, .causal = 1, .scale = 0.25f};
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CUDA, &rt);
  CHECK(rc == ATTN_OK, "attn_open on the fake driver: %s", attn_last_error(NULL));
  if (rc != ATTN_OK) return 1;
  const size_t nq = 4 * 33 * 16, nk = 2 * 17 * 16, nv = 2 * 17 * 24, no = 4 * 33 * 24;
  unsigned short *buf = calloc(2 * (nq + nk + nv + 2 * no), 2);
  float *lse = calloc(4 * 33, sizeof(float));
  CHECK(buf && lse, "out of memory");
  for (int dq = 0; buf && lse && dq < 2; dq++) {
    attn_spec s;
    char err[512];
    rc = attn_spec_backward_cuda(p.dtype, p.d, p.d_v, p.causal, "sm_80", &s, err, sizeof err);
    CHECK(rc == ATTN_OK, "the untuned backward: %s", err);
    if (rc != ATTN_OK) break;
    s.dq = dq;
    attn_cuda_bwd_geom g;
    CHECK(attn_cuda_backward_geometry(&s, 1, 4, 2, 33, 17, &g, err, sizeof err) == ATTN_OK, "geometry: %s", err);
    CHECK(dq ? g.items_q == 0 && g.post_grid == (4u * 33 * 16 + g.block - 1) / g.block &&
                   g.scratch == (4LL * 33 + 3) / 4 * 4 * 4 + 4LL * 33 * 16 * 4
             : g.items_q > 0 && g.post_grid == 0 && g.scratch == 4LL * 33 * 4,
          "dq=%d: geometry items_q %d post_grid %u scratch %lld", dq, g.items_q, g.post_grid, g.scratch);
    attn_plan *plan = NULL;
    rc = attn_plan_create_backward_spec(rt, &p, &s, 0, "given", &plan);
    CHECK(rc == ATTN_OK && plan, "dq=%d: attn_plan_create_backward_spec: %s: %s", dq, attn_strerror(rc),
          attn_last_error(rt));
    if (rc != ATTN_OK) break;
    const char *desc = attn_plan_describe(plan);
    printf("plan: %s\n", desc);
    CHECK((strstr(desc, "dq=atomic") != NULL) == dq, "dq=%d: describe: %s", dq, desc);
    unsigned short *q = buf, *k = q + nq, *v = k + nk, *o = v + nv, *dout = o + no;
    unsigned short *gq = calloc(nq + nk + nv, 2);
    CHECK(gq != NULL, "out of memory");
    if (gq) {
      fake_cuda_calls calls;
      record(&calls, 1);
      rc = attn_execute_backward(plan, q, k, v, o, lse, dout, gq, gq + nq, gq + nq + nk);
      record(&calls, 0);
      CHECK(rc == ATTN_OK, "dq=%d: attn_execute_backward: %s", dq, attn_last_error(rt));
      CHECK(calls.launches == 2 + dq && calls.stream_syncs >= 1 && calls.pending == 0 && calls.freed_in_use == 0,
            "dq=%d: %d launches, %d waits, %d pending, %d freed in use (want %d, >= 1, 0, 0)", dq, calls.launches,
            calls.stream_syncs, calls.pending, calls.freed_in_use, 2 + dq);
      CHECK(calls.last_grid == (dq ? g.post_grid : g.grid), "dq=%d: the last launch's grid %u, want %u", dq,
            calls.last_grid, dq ? g.post_grid : g.grid);
      free(gq);
    }
    attn_plan_destroy(plan);
  }
  free(buf);
  free(lse);
  attn_close(rt);
  printf("cuda_bwd_atomic_fake: %d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
