/* launch.h: how a CUDA kernel of a spec is launched for a problem shape — grid, block, dynamic shared memory,
 * slow scratch and per-plan constants. The one place the runtime, the tuner's constraints and the tests get these
 * from; the shared-memory sizes are the templates' own macros (templates/kernel_abi_cuda.h). */
#ifndef ATTN_LAUNCH_H
#define ATTN_LAUNCH_H

#include <stddef.h>
#include "spec.h"

typedef struct attn_cuda_geom {
  unsigned grid, block;        /* 1-D grid of 1-D blocks for attn_kernel */
  long long smem;              /* dynamic shared memory bytes per block */
  long long scratch;           /* slow-memory scratch bytes for this launch (0: none) */
  long long consts;            /* per-plan constant bytes written by attn_init (0: the module has no attn_init) */
  unsigned init_grid, init_block;
  long long items;             /* work items; grid < items when blocks loop over them */
  /* split-KV flash (spec split = S > 1): grid = items x S parts writing fp32 partials to the scratch, then
   * attn_combine's launch of combine_grid blocks of combine_block threads (0: no combine) */
  unsigned combine_grid, combine_block;
} attn_cuda_geom;

/* bh = batch * heads. max_resident: blocks the device runs at once (SMs x blocks per SM; 0: unknown), which caps the
 * grid of kernels whose scratch grows with it (smallcache). ATTN_OK, or ATTN_EINVAL / ATTN_EUNSUPPORTED with a
 * reason (not a CUDA spec, a problem too large for one launch). */
int attn_cuda_geometry(const attn_spec *s, long long bh, long long n, long long n_kv, long long max_resident,
                       attn_cuda_geom *g, char *err, size_t errlen);

/* Dynamic shared memory a spec needs per block (independent of the problem). */
long long attn_cuda_smem(const attn_spec *s);

#endif
