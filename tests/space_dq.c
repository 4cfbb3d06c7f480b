/* space_dq: the CUDA backward's space and dq=atomic (templates/flash_bwd.cu summing dQ by fp32 atomics). A
 * deterministic space (attn_space_opts.nondeterministic 0, the default) holds none and refuses one with the reason; a
 * nondeterministic one holds each deterministic tile's atomic twin too (it needs no dQ accumulators, so it fits
 * wherever the deterministic one does, and where only the dQ accumulators kept that one out), the two told apart by
 * attn_space_find and not each other's neighbours. */
#include <string.h>
#include "check.h"
#include "gpus.h"
#include "space.h"

static int build(const attn_gpu *g, int nondet, attn_space *sp) {
  char err[512];
  attn_space_opts o = {.target = ATTN_TARGET_CUDA, .dtype = ATTN_BF16, .d = 128, .causal = 1,
                       .algos = ATTN_ALGO_BIT(ATTN_ALGO_FLASH), .gpu = g, .backward = 1, .nondeterministic = nondet,
                       .fast_mem_bytes = g->smem_per_block_kb * 1024.0};
  snprintf(o.arch, sizeof o.arch, "%s", g->arch);
  const int rc = attn_space_build(&o, sp, err, sizeof err);
  CHECK(rc == ATTN_OK, "nondeterministic=%d: %s", nondet, err);
  return rc;
}

int main(void) {
  char err[512] = "";
  const attn_gpu *g = attn_gpu_find("H100", err, sizeof err);
  CHECK(g != NULL, "%s", err);
  if (!g) return 1;
  attn_space det, any;
  if (build(g, 0, &det) != ATTN_OK || build(g, 1, &any) != ATTN_OK) return 1;
  int atomic_det = 0, atomic = 0;
  for (int i = 0; i < det.count; i++) atomic_det += det.cfg[i].dq != 0;
  CHECK(det.count > 0 && atomic_det == 0, "deterministic space: %d of %d dq=atomic", atomic_det, det.count);
  for (int i = 0; i < any.count; i++) {
    const attn_spec *c = &any.cfg[i];
    if (!c->dq) continue;
    atomic++;
    attn_spec twin = *c;
    twin.dq = 0;
    const int at = attn_space_find(&any, &twin), self = attn_space_find(&any, c);
    char why[256] = "";
    /* without its twin only where the deterministic kernel's dQ accumulators do not fit */
    CHECK(self == i && attn_space_find(&det, c) < 0 && at != i &&
              (at >= 0 || (attn_space_admit(&det.o, &twin, why, sizeof why) != 0 && strstr(why, "dQ"))),
          "Br=%d Bc=%d warps=%d: twin %d self %d (%s)", c->br, c->bc, c->warps, at, self, why);
    int nb[2 * ATTN_SPACE_NPARAMS];
    const int n = attn_space_neighbours(&any, i, nb, (int)(sizeof nb / sizeof nb[0]));
    for (int k = 0; k < n; k++) CHECK(any.cfg[nb[k]].dq, "a neighbour of a dq=atomic point is deterministic");
    /* a deterministic space refuses it, saying why */
    CHECK(attn_space_admit(&det.o, c, why, sizeof why) != 0 && strstr(why, "dq=atomic"), "admitted: %s", why);
  }
  /* every deterministic point, and its atomic twin */
  for (int i = 0; i < det.count; i++) {
    attn_spec twin = det.cfg[i];
    twin.dq = 1;
    CHECK(attn_space_find(&any, &det.cfg[i]) >= 0 && attn_space_find(&any, &twin) >= 0, "Br=%d Bc=%d warps=%d",
          twin.br, twin.bc, twin.warps);
  }
  CHECK(any.count == det.count + atomic && atomic > det.count, "%d points, %d deterministic, %d atomic", any.count,
        det.count, atomic);
  attn_space_free(&det);
  attn_space_free(&any);
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
