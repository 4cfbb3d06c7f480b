/* model_bwd_atomic: the model's CUDA backward with dQ by atomics (spec dq=atomic, tuner/model.c) against the
 * deterministic kernel's on the same tiles, and the untuned backward never choosing atomics. Exit 1 on a failure. */
#include <stdio.h>
#include <string.h>
#include "check.h"
#include "gpus.h"
#include "model.h"
#include "spec_bwd_cuda.h"

int main(void) {
  char err[512];
  const char *gpus[] = {"H100", "A100"};
  for (int gi = 0; gi < 2; gi++) {
    const attn_gpu *g = attn_gpu_find(gpus[gi], err, sizeof err);
    CHECK(g != NULL, "%s: %s", gpus[gi], err);
    if (!g) continue;
    for (int c = 0; c < 2; c++) {
      attn_problem p;
      memset(&p, 0, sizeof p);
      p.batch = 1, p.heads = 8, p.heads_kv = 8, p.n = 4096, p.n_kv = 4096, p.d = 128, p.d_v = 128;
      p.dtype = ATTN_BF16, p.causal = c;
      attn_spec s;
      if (attn_spec_backward_cuda(ATTN_BF16, 128, 128, c, "sm_90", &s, err, sizeof err) != ATTN_OK) {
        CHECK(0, "the untuned backward: %s", err);
        continue;
      }
      attn_model_result det, at;
      attn_spec a = s;
      a.dq = 1;
      if (attn_model_time_bwd(g, &p, &s, &det, err, sizeof err) != ATTN_OK ||
          attn_model_time_bwd(g, &p, &a, &at, err, sizeof err) != ATTN_OK) {
        CHECK(0, "%s causal=%d: %s", gpus[gi], c, err);
        continue;
      }
      printf("%s bf16 d=128 n=4096 heads=8 causal=%d %dx%d w%d s%d: deterministic %.3f ms, dq=atomic %.3f ms\n",
             gpus[gi], c, s.br, s.bc, s.warps, s.stages, det.time_ms, at.time_ms);
      /* 5 products where 7: faster, but not twice as fast (causal: the dQ blocks' tail goes too, hence below 5/7) */
      CHECK(at.time_ms < det.time_ms && at.t_compute_ms > det.t_compute_ms * 0.5,
            "%s causal=%d: dq=atomic %.3f ms (compute %.3f) against %.3f (%.3f): not between 1/2 and 1", gpus[gi], c,
            at.time_ms, at.t_compute_ms, det.time_ms, det.t_compute_ms);
      /* no dQ blocks; the atomics at L2; the scratch zeroed and read, a third launch */
      const long long kv = 8LL * (4096 / s.bc);
      CHECK(at.blocks == kv && det.blocks == kv + 8LL * (4096 / s.br), "%s causal=%d: blocks %d and %d", gpus[gi], c,
            at.blocks, det.blocks);
      CHECK(at.t_l2_ms > det.t_l2_ms && at.t_overhead_ms > det.t_overhead_ms,
            "%s causal=%d: the atomics' traffic is missing (l2 %.3f vs %.3f ms, overhead %.3f vs %.3f)", gpus[gi], c,
            at.t_l2_ms, det.t_l2_ms, at.t_overhead_ms, det.t_overhead_ms);
    }
  }
  /* never the untuned default: its dQ is deterministic for every dtype and head-dimension class */
  const int ds[] = {1, 16, 64, 128, 256, 576};
  for (int t = ATTN_F32; t <= ATTN_BF16; t++)
    for (int i = 0; i < 6; i++) {
      attn_spec s;
      CHECK(attn_spec_backward_cuda((attn_dtype)t, ds[i], ds[i], 1, "sm_80", &s, err, sizeof err) == ATTN_OK && !s.dq,
            "the untuned backward %s d=%d: dq=%d (%s)", attn_dtype_name((attn_dtype)t), ds[i], s.dq, err);
    }
  printf("model_bwd_atomic: %d failures\n", failures);
  return failures ? 1 : 0;
}
