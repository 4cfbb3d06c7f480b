/* ptx.h: a PTX interpreter for the tests. It loads the PTX that NVRTC emits for a generated kernel (the whole
 * module: entries, device functions, inline asm) and executes it as a GPU would: a grid of blocks (several
 * resident at once, switched at their barriers), warps of 32 lanes with their own program counters, per-thread
 * registers and predicates, divergence and reconvergence, bar.sync and warp collectives (shfl, vote, ldmatrix,
 * mma.sync), cp.async groups, and the global, shared, local, param and const spaces; on sm_90a also wgmma (from
 * shared-memory descriptors, any swizzle, or A from registers), mbarriers, cp.async.bulk.tensor through the tensor
 * maps of ptx_tmap.h, fence.proxy.async, elect.sync and stmatrix. It also checks what the
 * hardware would not: out-of-bounds and misaligned accesses, reads of uninitialised memory and registers,
 * shared-memory races between barriers, global-memory races between the blocks of a launch, divergent barriers and
 * collectives, cp.async data touched before its wait, and on sm_90a wgmma results used before their wait_group,
 * plain stores read by the async proxy without fence.proxy.async, waits that can never complete, TMA data read
 * before its mbarrier phase and stages refilled while a wgmma reads them; and it counts global traffic in 32-byte
 * sectors per warp instruction and shared-memory wavefronts (bank conflicts). An opcode, modifier or directive it does not know is
 * refused when the module is loaded, naming it. The first error of a launch stops it, with the block, thread and PTX
 * line. */
#ifndef ATTN_PTX_H
#define ATTN_PTX_H

#include <stddef.h>
#include <stdint.h>

typedef struct ptx_module ptx_module;
typedef struct ptx_machine ptx_machine;

/* Parses PTX text. NULL with the reason (and the line) in err. */
ptx_module *ptx_parse(const char *text, char *err, size_t errlen);
void ptx_module_free(ptx_module *m);

/* A device: global memory (allocations with guard gaps, every byte's definedness) and the module's variables. */
ptx_machine *ptx_machine_new(const ptx_module *m, char *err, size_t errlen);
void ptx_machine_free(ptx_machine *x);
/* worst != 0: the approximate f32 instructions (ex2, rcp, div.approx, sqrt, rsqrt, lg2, sin, cos, tanh) return
 * results off by their largest error, in a direction that varies with the lane and the instruction; 0 (the
 * default): correctly rounded. */
void ptx_machine_set_approx(ptx_machine *x, int worst);

/* A global allocation of `bytes`, named for messages and statistics; its bytes are undefined until written.
 * Returns the device address, 0 when out of memory. */
uint64_t ptx_alloc(ptx_machine *x, uint64_t bytes, const char *name);
/* host <-> device; 0, or -1 when the range is not inside one allocation. ptx_copy_out counts the bytes never
 * defined (written by the host or a kernel) in *undefined when it is not NULL. */
int ptx_copy_in(ptx_machine *x, uint64_t addr, const void *src, size_t len);
int ptx_copy_out(ptx_machine *x, uint64_t addr, void *dst, size_t len, size_t *undefined);

typedef struct {
  unsigned grid, block;  /* 1-D */
  uint64_t dyn_smem;     /* bytes of dynamic shared memory */
  unsigned order;        /* blocks and warps: 0 in order, 1 reversed, >= 2 shuffled with this seed; also which
                            resident block runs next (round robin, reversed, seeded random) */
  unsigned resident;     /* blocks resident at once, switched at their barriers (0: 4) */
} ptx_launch_cfg;

/* Runs entry over the grid with the kernel parameters params (the bytes of the entry's .param list). 0, or -1
 * with the first error in err ("block 3 thread 37 (warp 1 lane 5), line 812 `ld.shared.v4.f32 ...`: ..."). */
int ptx_launch(ptx_machine *x, const char *entry, const ptx_launch_cfg *cfg, const void *params, size_t len,
               char *err, size_t errlen);

typedef struct {
  char name[32];
  uint64_t read_sectors, write_sectors;   /* 32-byte sectors, distinct per warp instruction */
  uint64_t read_bytes, write_bytes;       /* bytes the lanes asked for */
  uint64_t read_insns, write_insns;       /* warp instructions that touched the allocation */
} ptx_buffer_stats;

/* Statistics of an allocation since it was made (all launches); -1 when addr is not the start of one. */
int ptx_buffer_stats_of(const ptx_machine *x, uint64_t addr, ptx_buffer_stats *out);

typedef struct {
  uint64_t thread_insns, warp_insns;          /* instructions executed, per thread and per warp */
  uint64_t shared_wavefronts, shared_ideal;   /* ld/st.shared and cp.async writes: wavefronts, and the fewest
                                                 possible for the bytes moved */
  uint64_t ldsm_wavefronts, ldsm_ideal;       /* ldmatrix, apart: a phase per 8x8 matrix */
  uint64_t barriers, collectives;
} ptx_stats;

void ptx_stats_get(const ptx_machine *x, ptx_stats *out);

#endif
