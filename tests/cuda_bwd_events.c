/* cuda_bwd_events: the CUDA backward's time by CUDA events (attn_cuda_run_backward_timed), on tests/fake_libcuda.c
 * (ATTN_LIBCUDA), whose events are 1 ms apart: for the deterministic spec (attn_bwd_pre, attn_kernel) and dq=atomic
 * (attn_bwd_post too), the call's driver calls are exactly the scratch, an event, every launch, an event, the wait,
 * the scratch freed, all on the legacy default stream, and the time is the fake's 1 ms, which the host's clock never
 * reads; without a time (attn_execute_backward) no event is recorded. Exit 77 (skipped) without NVRTC. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "fake_libcuda.h"
#include "internal.h"
#include "spec_bwd_cuda.h"

/* the driver calls a backward of `launches` launches makes, each "name@stream " on the legacy default stream */
static void want_log(char *buf, size_t len, int launches, int timed) {
  char at[32];
  snprintf(at, sizeof at, "@%p ", (void *)0);
  size_t l = (size_t)snprintf(buf, len, "alloc%s%s", at, timed ? "record" : "");
  if (timed) l += (size_t)snprintf(buf + l, len - l, "%s", at);
  for (int i = 0; i < launches; i++) l += (size_t)snprintf(buf + l, len - l, "launch%s", at);
  if (timed) l += (size_t)snprintf(buf + l, len - l, "record%s", at);
  snprintf(buf + l, len - l, "sync%sfree%s", at, at);
}

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
  unsigned short *buf = calloc(2 * (nq + nk + nv + 2 * no), 2), *grad = calloc(nq + nk + nv, 2);
  float *lse = calloc(4 * 33, sizeof(float));
  CHECK(buf && grad && lse, "out of memory");
  for (int dq = 0; buf && grad && lse && dq < 2; dq++) {
    attn_spec s;
    char err[512];
    rc = attn_spec_backward_cuda(p.dtype, p.d, p.d_v, p.causal, "sm_80", &s, err, sizeof err);
    CHECK(rc == ATTN_OK, "the untuned backward: %s", err);
    if (rc != ATTN_OK) break;
    s.dq = dq;
    attn_plan *plan = NULL;
    rc = attn_plan_create_backward_spec(rt, &p, &s, 0, "given", &plan);
    CHECK(rc == ATTN_OK && plan && plan->cuda, "dq=%d: attn_plan_create_backward_spec: %s: %s", dq,
          attn_strerror(rc), attn_last_error(rt));
    if (rc != ATTN_OK || !plan->cuda) break;
    unsigned short *q = buf, *k = q + nq, *v = k + nk, *o = v + nv, *dout = o + no;
    unsigned short *gq = grad, *gk = gq + nq, *gv = gk + nk;
    const int launches = 2 + dq;
    char want[512];
    for (int timed = 0; timed < 2; timed++) {
      fake_cuda_calls calls;
      double ms = -1;
      record(&calls, 1);
      rc = timed ? attn_cuda_run_backward_timed(rt, plan->cuda, &plan->p, q, k, v, o, lse, dout, gq, gk, gv, &ms)
                 : attn_execute_backward(plan, q, k, v, o, lse, dout, gq, gk, gv);
      record(&calls, 0);
      CHECK(rc == ATTN_OK, "dq=%d timed=%d: %s", dq, timed, attn_last_error(rt));
      want_log(want, sizeof want, launches, timed);
      CHECK(strcmp(calls.log, want) == 0 && calls.launches == launches && calls.pending == 0 &&
                calls.freed_in_use == 0,
            "dq=%d timed=%d: driver calls\n  %s\nwant\n  %s\n(%d launches, want %d; %d pending, %d freed in use)", dq,
            timed, calls.log, want, calls.launches, launches, calls.pending, calls.freed_in_use);
      if (timed)
        CHECK(ms == 1.0, "dq=%d: %g ms, want the fake's event time, 1 ms (the host's clock reads something else)", dq,
              ms);
    }
    attn_plan_destroy(plan);
  }
  free(buf);
  free(grad);
  free(lse);
  attn_close(rt);
  printf("cuda_bwd_events: %d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
