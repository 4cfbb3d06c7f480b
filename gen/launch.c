/* launch.c: launch geometry of the CUDA templates (see launch.h). Each case mirrors the loop structure its template
 * documents: flash and smallcache take one query block of one head per work item, lowrank one head. */
#include "launch.h"
#include <stdio.h>
#include <string.h>
#include "kernel_abi_cuda.h"

static long long lowrank_rank(const attn_spec *s) {
  return s->feature == ATTN_FEAT_TAYLOR ? attn_taylor_rank(s->d, s->degree, 1L << 16) : s->rank;
}

/* The templates' shared memory with the spec's d_v (gen/spec.c): one formula for the launch, the tuner's space and the
 * model. */
long long attn_cuda_smem(const attn_spec *s) { return attn_spec_cuda_smem(s); }

/* Without a device to ask, smallcache's grid (and so its scratch) stays at this many blocks. */
#define ATTN_DEFAULT_RESIDENT 1024

int attn_cuda_geometry(const attn_spec *s, long long bh, long long n, long long n_kv, long long max_resident,
                       attn_cuda_geom *g, char *err, size_t len) {
  memset(g, 0, sizeof *g);
  if (!s || s->target != ATTN_TARGET_CUDA) return attn_errf(err, len, ATTN_EINVAL, "launch geometry is for CUDA specs");
  if (bh < 1 || n < 1 || n_kv < 1)
    return attn_errf(err, len, ATTN_EINVAL, "batch*heads=%lld n=%lld n_kv=%lld must each be >= 1", bh, n, n_kv);
  if (n > 0x7fffffffLL || n_kv > 0x7fffffffLL)
    return attn_errf(err, len, ATTN_EUNSUPPORTED, "n=%lld n_kv=%lld: at most 2^31-1 rows on cuda", n, n_kv);
  g->block = 32u * (unsigned)(s->warps > 0 ? s->warps : 4);
  g->smem = attn_cuda_smem(s);
  const long long qblocks = (n + s->br - 1) / s->br;
  long long grid;
  switch (s->algo) {
  case ATTN_ALGO_FLASH:
    g->items = grid = qblocks * bh;
    if (s->split > 1) {
      /* S parts of each item's key blocks; the scratch holds each part's O (d_v fp32 a row), m and l for every
       * row, and attn_combine takes one entry of O a thread */
      const long long rows = bh * n, entries = rows * attn_spec_dv(s);
      grid = g->items * s->split;
      g->scratch = (long long)s->split * rows * (attn_spec_dv(s) + 2) * 4;
      g->combine_block = 256;
      if ((entries + 255) / 256 > 0x7fffffffLL)
        return attn_errf(err, len, ATTN_EUNSUPPORTED, "%lld entries of O exceed one combine launch", entries);
      g->combine_grid = (unsigned)((entries + 255) / 256);
    }
    break;
  case ATTN_ALGO_SMALLCACHE: {
    /* Each resident block owns a Br x n_kv fp32 slice of S in slow memory and loops over work items. */
    const long long cap = max_resident > 0 ? max_resident : ATTN_DEFAULT_RESIDENT;
    g->items = qblocks * bh;
    grid = g->items < cap ? g->items : cap;
    g->scratch = grid * (long long)s->br * n_kv * 4;
    break;
  }
  case ATTN_ALGO_LOWRANK: {
    const long long r = lowrank_rank(s);
    if (r < 1) return attn_errf(err, len, ATTN_EUNSUPPORTED, "lowrank rank for d=%d g=%d is too large", s->d, s->degree);
    g->items = grid = bh;
    /* random: the r x d Gaussian directions (stored d x r), a thread per pair of entries (Box-Muller draws two);
     * Taylor: the monomial table (parent, variable, coefficient), built by one thread */
    g->consts = s->feature == ATTN_FEAT_RANDOM ? r * s->d * 4 : r * 12;
    g->init_block = 256;
    g->init_grid = s->feature == ATTN_FEAT_RANDOM ? (unsigned)((r * s->d / 2 + 255) / 256) : 1u;
    break;
  }
  default: return attn_errf(err, len, ATTN_EINVAL, "unknown algorithm %d", (int)s->algo);
  }
  if (grid > 0x7fffffffLL)
    return attn_errf(err, len, ATTN_EUNSUPPORTED, "%lld work items exceed one launch's grid (2^31-1)", grid);
  g->grid = (unsigned)grid;
  return ATTN_OK;
}
