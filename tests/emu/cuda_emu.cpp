/* cuda_emu.cpp: the machine behind cuda_emu.h (fibers and their scheduler, barriers, warp collectives computed from
 * the PTX ISA, cp.async groups, checks of every shared and global access that goes through an intrinsic or a PTX
 * wrapper) and the driver that runs one case file of tests/cuda_emu.c. Compiled once by CMake, linked into every
 * generated kernel's emulation binary. Yielding functions live here, out of line, so the compiler of a kernel
 * cannot keep shared memory in registers across a barrier. */
#include "cuda_emu.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <random>
#include <vector>

#include "emu_case.h"
#include "kernel_abi_cuda.h"

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

/* Larger than any architecture's per-block limit (227 KiB); the bytes past the launch's dynamic size stay
 * poisoned and are checked after every block. */
static const size_t SMEM_MAX = 256 * 1024;
alignas(128) unsigned char attn_smem[SMEM_MAX];

namespace attn_emu {

/* Shared-window address of attn_smem[0]: not 0, so that code mixing offsets and addresses fails. */
static const unsigned SMEM_BASE = 1024;

enum FState { RUN, AT_BAR, AT_WARP, DONE };
enum Op { OP_SYNCWARP = 1, OP_SHFL, OP_LDSM, OP_LDSMT, OP_MMA, OP_VOTE };
static const char *op_name(int op) {
  switch (op) {
  case OP_SYNCWARP: return "__syncwarp";
  case OP_SHFL: return "a shuffle";
  case OP_LDSM: return "ldmatrix";
  case OP_LDSMT: return "ldmatrix.trans";
  case OP_MMA: return "mma.sync";
  case OP_VOTE: return "vote.sync";
  default: return "?";
  }
}

struct Copy {
  unsigned dst;
  const unsigned char *src;
  int size, src_size;
  bool landed;
};
struct Fiber {
  ucontext_t ctx;
  unsigned tid;
  FState st;
  std::vector<Copy> open;               /* issued, not yet committed */
  std::deque<std::vector<Copy>> groups; /* committed groups that have not landed */
  void *fake_stack;
};
struct Site {
  const char *file;
  int line;
  bool operator!=(const Site &o) const { return line != o.line || strcmp(file, o.file) != 0; }
};
struct Warp {
  int arrived, op;
  Site site;
  uint32_t in[32][8];
  uint32_t out[32][4];
};
struct Region {
  const unsigned char *lo, *hi;
  const char *name;
  bool readonly;
};

static struct Machine {
  uint3 grid, block, bidx;
  size_t smem;
  int order, deferred;
  const char *kernel;
  std::vector<Fiber> f;
  std::vector<char *> stacks;
  size_t stack_size;
  std::vector<Warp> warps;
  int bar_arrived;
  Site bar_site;
  int bar_count, bar_result; /* bar.red: the predicates counted so far, and the last completed barrier's count */
  int cur = -1;
  ucontext_t sched;
  void *sched_fake;
  const void *main_bottom;
  size_t main_size;
  std::vector<Region> mem;
  std::mt19937_64 rng;
  Entry entry;
  const void *kargs;
  uint64_t ldsm_phases, ldsm_conflicts, switches;
  /* barrier epochs: __syncthreads completed in this block, warp collectives completed by each warp */
  uint32_t kb;
  std::vector<uint32_t> kw;
} M;

void fail(const char *fmt, ...) {
  fflush(stdout);
  if (M.cur >= 0) {
    const unsigned t = M.f[M.cur].tid;
    fprintf(stderr, "cuda_emu: %s block %u thread %u (warp %u lane %u): ", M.kernel, M.bidx.x, t, t / 32, t % 32);
  } else {
    fprintf(stderr, "cuda_emu: %s block %u: ", M.kernel ? M.kernel : "", M.bidx.x);
  }
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  fflush(stderr);
  _exit(3);
}

static Fiber &me() {
  if (M.cur < 0) fail("a CUDA built-in used outside a kernel");
  return M.f[M.cur];
}
uint3 thread_idx() { return uint3{me().tid, 0, 0}; }
uint3 block_idx() { return M.bidx; }
uint3 block_dim() { return M.block; }
uint3 grid_dim() { return M.grid; }

/* ---- races on shared memory ----
 * Every shared access the emulator sees (cp.async, ld/st.shared, ldmatrix; not plain C++ loads and stores) is
 * checked against the previous conflicting ones of other threads: they must be ordered by program order or by a
 * barrier both sides passed in between, whatever order the scheduler happened to run them in. An agent is a thread
 * (>= 0) or a whole warp w (-1 - w) for a collective. A warp collective orders its lanes (they all pass it); a
 * collective's own reads are not ordered by it. A cp.async write lasts from its issue to the wait_group that
 * completes it. */
struct Word {
  int16_t writer; /* -1: none in this block */
  uint8_t inflight, readers;
  uint32_t wkb, wkw;
  int16_t rd[2];
  uint32_t rkb[2], rkw[2];
};
static std::vector<Word> shadow(SMEM_MAX / 4);

static int warp_of(int agent) { return agent >= 0 ? agent / 32 : -1 - agent; }
static bool ordered(int prev, uint32_t kb, uint32_t kw, int now) {
  if (prev >= 0 && prev == now) return true;
  if (prev < 0 && now >= 0 && warp_of(now) == warp_of(prev)) return true; /* now took part in the collective */
  if (M.kb > kb) return true;
  return warp_of(prev) == warp_of(now) && M.kw[(size_t)warp_of(now)] > kw;
}
static const char *agent_name(int agent, char *buf, size_t len) {
  if (agent >= 0) snprintf(buf, len, "thread %d", agent);
  else snprintf(buf, len, "warp %d's collective", -1 - agent);
  return buf;
}

static void race_read(unsigned addr, int bytes, int agent, const char *what) {
  char a[40], b[40];
  for (unsigned i = (addr - SMEM_BASE) / 4; i < (addr - SMEM_BASE + (unsigned)bytes) / 4; i++) {
    Word &x = shadow[i];
    if (x.inflight)
      fail("race: %s by %s reads shared byte %u, which a cp.async of %s may still be writing", what,
           agent_name(agent, a, sizeof a), 4 * i, agent_name(x.writer, b, sizeof b));
    if (x.writer >= 0 && !ordered(x.writer, x.wkb, x.wkw, agent))
      fail("race: %s by %s reads shared byte %u, written by %s with no barrier between", what,
           agent_name(agent, a, sizeof a), 4 * i, agent_name(x.writer, b, sizeof b));
    int slot = -1;
    for (int r = 0; r < x.readers; r++)
      if (x.rd[r] == agent) slot = r;
    if (slot < 0) {
      if (x.readers == 2) x.rd[0] = x.rd[1], x.rkb[0] = x.rkb[1], x.rkw[0] = x.rkw[1];
      else x.readers++;
      slot = x.readers - 1;
    }
    x.rd[slot] = (int16_t)agent;
    x.rkb[slot] = M.kb;
    x.rkw[slot] = M.kw[(size_t)warp_of(agent)];
  }
}

static void race_write(unsigned addr, int bytes, int tid, bool inflight, const char *what) {
  char a[40], b[40];
  for (unsigned i = (addr - SMEM_BASE) / 4; i < (addr - SMEM_BASE + (unsigned)bytes) / 4; i++) {
    Word &x = shadow[i];
    if (x.inflight)
      fail("race: %s by thread %d writes shared byte %u while a cp.async of %s may still be writing it", what, tid,
           4 * i, agent_name(x.writer, b, sizeof b));
    if (x.writer >= 0 && !ordered(x.writer, x.wkb, x.wkw, tid))
      fail("race: %s by thread %d writes shared byte %u, written by %s with no barrier between", what, tid, 4 * i,
           agent_name(x.writer, b, sizeof b));
    for (int r = 0; r < x.readers; r++)
      if (!ordered(x.rd[r], x.rkb[r], x.rkw[r], tid))
        fail("race: %s by thread %d writes shared byte %u, which %s read with no barrier between", what, tid, 4 * i,
             agent_name(x.rd[r], a, sizeof a));
    x.writer = (int16_t)tid;
    x.inflight = inflight;
    x.readers = 0;
    x.wkb = M.kb;
    x.wkw = M.kw[(size_t)tid / 32];
  }
}

/* ---- fibers ---- */

static void to_scheduler() {
  Fiber &f = M.f[M.cur];
#ifdef EMU_ASAN
  __sanitizer_start_switch_fiber(&f.fake_stack, M.main_bottom, M.main_size);
#endif
  swapcontext(&f.ctx, &M.sched);
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(f.fake_stack, nullptr, nullptr);
#endif
}

static void fiber_main() {
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &M.main_bottom, &M.main_size);
#endif
  M.entry(M.kargs);
  M.f[M.cur].st = DONE;
#ifdef EMU_ASAN
  __sanitizer_start_switch_fiber(nullptr, M.main_bottom, M.main_size);
#endif
  setcontext(&M.sched);
}

static void resume(int t) {
  M.cur = t;
  M.switches++;
#ifdef EMU_ASAN
  __sanitizer_start_switch_fiber(&M.sched_fake, M.stacks[t], M.stack_size);
#endif
  swapcontext(&M.sched, &M.f[t].ctx);
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(M.sched_fake, nullptr, nullptr);
#endif
  M.cur = -1;
}

static void alloc_stacks(unsigned threads) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
#ifdef EMU_ASAN
  M.stack_size = 1 << 20;
#else
  M.stack_size = 256 << 10;
#endif
  while (M.stacks.size() < threads) {
    /* a PROT_NONE page below each stack turns an overflow into a crash instead of another fiber's corruption */
    void *p = mmap(nullptr, M.stack_size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) fail("mmap of a fiber stack: %s", strerror(errno));
    mprotect(p, page, PROT_NONE);
    M.stacks.push_back((char *)p + page);
  }
}

static void deadlock() {
  int bar = 0, warp = 0, done = 0;
  for (const Fiber &f : M.f) bar += f.st == AT_BAR, warp += f.st == AT_WARP, done += f.st == DONE;
  char detail[256] = "";
  for (size_t w = 0; w < M.warps.size(); w++)
    if (M.warps[w].arrived) {
      snprintf(detail, sizeof detail, "; warp %zu: %d lanes at %s (%s:%d)", w, M.warps[w].arrived,
               op_name(M.warps[w].op), M.warps[w].site.file, M.warps[w].site.line);
      break;
    }
  fail("deadlock: %d threads wait at __syncthreads (%s:%d), %d at warp collectives, %d have exited%s", bar,
       bar ? M.bar_site.file : "-", bar ? M.bar_site.line : 0, warp, done, detail);
}

/* One block: every thread a fiber, run until it blocks, in the machine's order, until all have exited. */
static void run_block(unsigned b) {
  M.bidx = uint3{b, 0, 0};
  memset(attn_smem, 0xff, SMEM_MAX); /* NaN in every f32, f16 and bf16 view: reads of unwritten data show */
  const unsigned T = M.block.x;
  M.f.assign(T, Fiber());
  for (unsigned t = 0; t < T; t++) {
    Fiber &f = M.f[t];
    f.tid = t;
    f.st = RUN;
    f.fake_stack = nullptr;
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = M.stacks[t];
    f.ctx.uc_stack.ss_size = M.stack_size;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, fiber_main, 0);
  }
  M.warps.assign(T / 32, Warp());
  M.bar_arrived = 0;
  M.kb = 0;
  M.kw.assign(T / 32, 0);
  for (size_t i = 0; i < M.smem / 4; i++) shadow[i].writer = -1, shadow[i].inflight = 0, shadow[i].readers = 0;
  unsigned live = T;
  if (M.order <= 1) {
    /* greedy: always the first runnable thread in tid order (0) or reverse (1), so one warp runs ahead of the
     * others from barrier to barrier: what it reads of their work they must have published before the barrier */
    while (live) {
      int t = -1;
      for (unsigned i = 0; i < T && t < 0; i++) {
        const unsigned u = M.order == 0 ? i : T - 1 - i;
        if (M.f[u].st == RUN) t = (int)u;
      }
      if (t < 0) deadlock();
      resume(t);
      if (M.f[t].st == DONE) live--;
    }
  } else {
    /* rounds in a fresh random order: the warps advance nearly in step, interleaved differently each round */
    std::vector<int> order;
    while (live) {
      order.clear();
      for (unsigned t = 0; t < T; t++)
        if (M.f[t].st == RUN) order.push_back((int)t);
      if (order.empty()) deadlock();
      std::shuffle(order.begin(), order.end(), M.rng);
      for (int t : order) {
        if (M.f[t].st != RUN) continue;
        resume(t);
        if (M.f[t].st == DONE) live--;
      }
    }
  }
  for (const Fiber &f : M.f) {
    size_t pending = f.open.size();
    for (const auto &g : f.groups) pending += g.size();
    if (pending)
      fail("thread %u exits with %zu cp.async copies that no wait_group completed%s", f.tid, pending,
           f.open.empty() ? "" : " (some never committed)");
  }
  for (size_t i = M.smem; i < SMEM_MAX; i++)
    if (attn_smem[i] != 0xff) fail("a write at byte %zu of shared memory, past the launch's %zu bytes", i, M.smem);
}

static void launch(const char *name, Entry e, const void *kargs, unsigned grid, unsigned block, size_t smem) {
  if (block == 0 || block % 32 || block > 1024)
    fail("%s: block of %u threads (whole warps, at most 1024)", name, block);
  if (smem > SMEM_MAX)
    fail("%s: %zu bytes of dynamic shared memory, more than the emulator's %zu", name, smem, SMEM_MAX);
  M.kernel = name;
  M.entry = e;
  M.kargs = kargs;
  M.grid = uint3{grid, 1, 1};
  M.block = uint3{block, 1, 1};
  M.smem = smem;
  alloc_stacks(block);
  std::vector<unsigned> blocks(grid);
  for (unsigned b = 0; b < grid; b++) blocks[b] = b;
  if (M.order == 1) std::reverse(blocks.begin(), blocks.end());
  else if (M.order >= 2) std::shuffle(blocks.begin(), blocks.end(), M.rng);
  for (unsigned b : blocks) run_block(b);
}

/* ---- memory ---- */

static const Region *region_of(const void *p, size_t bytes) {
  const unsigned char *c = (const unsigned char *)p;
  for (const Region &r : M.mem)
    if (c >= r.lo && c + bytes <= r.hi) return &r;
  return nullptr;
}

void check_ldg(const void *p, size_t bytes) {
  const Region *r = region_of(p, bytes);
  if (!r) fail("__ldg of %zu bytes at %p, outside every global buffer", bytes, p);
  if (!r->readonly) fail("__ldg (ld.global.nc) reads %s, which this kernel writes", r->name);
  if ((uintptr_t)p % bytes) fail("__ldg of %zu bytes at %p: misaligned", bytes, p);
}

static unsigned char *shared_at(unsigned addr, int bytes, const char *what) {
  if (addr % (unsigned)bytes) fail("%s of %d bytes at shared address %#x: misaligned", what, bytes, addr);
  if (addr < SMEM_BASE || addr - SMEM_BASE + (size_t)bytes > M.smem)
    fail("%s of %d bytes at shared address %#x: outside the block's %zu bytes from %#x", what, bytes, addr, M.smem,
         SMEM_BASE);
  return attn_smem + (addr - SMEM_BASE);
}

unsigned cvta_shared(const void *p) {
  const unsigned char *c = (const unsigned char *)p;
  if (c < attn_smem || c > attn_smem + M.smem) fail("__cvta_generic_to_shared of %p, not in shared memory", p);
  return SMEM_BASE + (unsigned)(c - attn_smem);
}
void ld_shared(unsigned addr, void *dst, int bytes) {
  const unsigned char *p = shared_at(addr, bytes, "ld.shared");
  race_read(addr, bytes, (int)me().tid, "ld.shared");
  memcpy(dst, p, (size_t)bytes);
}
void st_shared(unsigned addr, const void *src, int bytes) {
  unsigned char *p = shared_at(addr, bytes, "st.shared");
  race_write(addr, bytes, (int)me().tid, false, "st.shared");
  memcpy(p, src, (size_t)bytes);
}

/* ---- barriers and warp collectives ---- */

/* pred < 0: bar.sync; else bar.red.popc with this thread's predicate (returns the block's count) */
static int barrier(int pred, const char *file, int line) {
  Fiber &f = me();
  const Site s{file, line};
  if (M.bar_arrived == 0) {
    M.bar_site = s;
    M.bar_count = 0;
  } else if (M.bar_site != s) {
    fail("__syncthreads at %s:%d while other threads wait at the one at %s:%d (divergent barrier)", file, line,
         M.bar_site.file, M.bar_site.line);
  }
  M.bar_count += pred > 0;
  if (++M.bar_arrived == (int)M.block.x) {
    M.bar_arrived = 0;
    M.bar_result = M.bar_count;
    M.kb++;
    for (Fiber &g : M.f)
      if (g.st == AT_BAR) g.st = RUN;
    return M.bar_result;
  }
  f.st = AT_BAR;
  to_scheduler();
  return M.bar_result; /* no later barrier completes before this thread arrives at it */
}
void bar_sync(const char *file, int line) { barrier(-1, file, line); }
int bar_red_popc(int pred, const char *file, int line) { return barrier(pred != 0, file, line); }

static void compute(Warp &w);

/* The calling lane's operands are in w.in[lane]; returns when all 32 lanes have arrived and w.out holds the
 * results. mma and ldmatrix are .aligned: every lane must execute the same instruction (the same source line). */
static Warp &arrive(int op, const char *file, int line) {
  Fiber &f = me();
  Warp &w = M.warps[f.tid / 32];
  const Site s{file, line};
  if (w.arrived == 0) {
    w.op = op;
    w.site = s;
  } else if (w.op != op) {
    fail("%s at %s:%d while other lanes of the warp wait at %s (%s:%d)", op_name(op), file, line, op_name(w.op),
         w.site.file, w.site.line);
  } else if ((op == OP_LDSM || op == OP_LDSMT || op == OP_MMA) && w.site != s) {
    fail("%s.aligned at %s:%d while other lanes of the warp execute the one at %s:%d", op_name(op), file, line,
         w.site.file, w.site.line);
  }
  if (++w.arrived == 32) {
    compute(w);
    w.arrived = 0;
    M.kw[f.tid / 32]++;
    for (unsigned l = 0; l < 32; l++) {
      Fiber &g = M.f[f.tid / 32 * 32 + l];
      if (g.st == AT_WARP) g.st = RUN;
    }
  } else {
    f.st = AT_WARP;
    to_scheduler();
  }
  return w;
}

static void full_mask(unsigned mask, const char *what) {
  if (mask != 0xffffffffu) fail("%s with member mask %#x: only full-warp masks are emulated", what, mask);
}

void bar_warp_sync(unsigned mask, const char *file, int line) {
  full_mask(mask, "__syncwarp");
  arrive(OP_SYNCWARP, file, line);
}

uint32_t shfl_sync(unsigned mask, uint32_t a, ShflMode mode, int b, int c, const char *file, int line) {
  full_mask(mask, "shfl.sync");
  const unsigned lane = me().tid % 32;
  Warp &w0 = M.warps[me().tid / 32];
  w0.in[lane][0] = a;
  w0.in[lane][1] = (uint32_t)b;
  w0.in[lane][2] = (uint32_t)c;
  w0.in[lane][3] = (uint32_t)mode;
  Warp &w = arrive(OP_SHFL, file, line);
  return w.out[lane][0];
}

uint32_t vote_ballot(unsigned mask, int pred, const char *file, int line) {
  full_mask(mask, "vote.sync");
  const unsigned lane = me().tid % 32;
  Warp &w0 = M.warps[me().tid / 32];
  w0.in[lane][0] = pred != 0;
  Warp &w = arrive(OP_VOTE, file, line);
  return w.out[lane][0];
}

void ldmatrix_x4(unsigned addr, bool trans, uint32_t r[4], const char *file, int line) {
  const unsigned lane = me().tid % 32;
  Warp &w0 = M.warps[me().tid / 32];
  w0.in[lane][0] = addr;
  Warp &w = arrive(trans ? OP_LDSMT : OP_LDSM, file, line);
  for (int i = 0; i < 4; i++) r[i] = w.out[lane][i];
}

void mma_m16n8k16(Format fmt, float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1, const char *file,
                  int line) {
  const unsigned lane = me().tid % 32;
  Warp &w0 = M.warps[me().tid / 32];
  for (int i = 0; i < 4; i++) w0.in[lane][i] = a[i];
  w0.in[lane][4] = b0;
  w0.in[lane][5] = b1;
  w0.in[lane][6] = (uint32_t)fmt;
  /* c goes through w.out: the accumulators are per lane */
  for (int i = 0; i < 4; i++) memcpy(&w0.out[lane][i], &c[i], 4);
  Warp &w = arrive(OP_MMA, file, line);
  for (int i = 0; i < 4; i++) memcpy(&c[i], &w.out[lane][i], 4);
}

static float half_to_f32(Format f, uint16_t h) { return f == F16 ? f16_to_f32(h) : bf16_to_f32(h); }

static void compute(Warp &w) {
  switch (w.op) {
  case OP_SYNCWARP: break;
  case OP_VOTE: {
    uint32_t b = 0;
    for (int lane = 0; lane < 32; lane++) b |= (w.in[lane][0] & 1u) << lane;
    for (int lane = 0; lane < 32; lane++) w.out[lane][0] = b;
    break;
  }
  case OP_SHFL:
    /* PTX ISA, shfl.sync: c = clamp value (bits 0-4) and segment mask (bits 8-12) */
    for (int lane = 0; lane < 32; lane++) {
      const int mode = (int)w.in[lane][3], b = (int)(w.in[lane][1] & 31), c = (int)w.in[lane][2];
      const int cval = c & 31, seg = (c >> 8) & 31;
      const int max_lane = (lane & seg) | (cval & ~seg), min_lane = lane & seg;
      int j = lane;
      bool p = false;
      switch (mode) {
      case SHFL_UP: j = lane - b, p = j >= max_lane; break;
      case SHFL_DOWN: j = lane + b, p = j <= max_lane; break;
      case SHFL_BFLY: j = lane ^ b, p = j <= max_lane; break;
      case SHFL_IDX: j = min_lane | (b & ~seg), p = j <= max_lane; break;
      }
      if (!p) j = lane;
      for (int l = 0; l < 32; l++)
        if ((int)w.in[l][3] != mode) fail("lanes of one warp execute different shuffle modes");
      w.out[lane][0] = w.in[j][0];
    }
    break;
  case OP_LDSM:
  case OP_LDSMT: {
    /* PTX ISA, ldmatrix (.m8n8.x4.b16): lanes 8m..8m+7 give the row addresses of matrix m (16 bytes a row);
     * register r[m] of lane l holds row l/4, columns 2(l%4) and 2(l%4)+1 of matrix m (the lower column in the low
     * half), and with .trans the same elements of the transposed matrix: rows 2(l%4) and 2(l%4)+1, column l/4. */
    unsigned addr[32];
    const int warp = (int)(&w - &M.warps[0]);
    for (int l = 0; l < 32; l++) {
      addr[l] = w.in[l][0];
      shared_at(addr[l], 16, "ldmatrix row");
      race_read(addr[l], 16, -1 - warp, "ldmatrix");
    }
    for (int m = 0; m < 4; m++) {
      /* the eight 16-byte rows of a phase are conflict-free when they lie in eight different bank groups */
      unsigned seen = 0;
      bool conflict = false;
      for (int i = 0; i < 8; i++) {
        const unsigned g = (addr[8 * m + i] / 16) % 8;
        conflict |= (seen >> g) & 1;
        seen |= 1u << g;
      }
      M.ldsm_phases++;
      M.ldsm_conflicts += conflict;
    }
    for (int l = 0; l < 32; l++)
      for (int m = 0; m < 4; m++) {
        uint16_t e0, e1;
        if (w.op == OP_LDSM) {
          const unsigned a = addr[8 * m + l / 4] + 4 * (l % 4);
          memcpy(&e0, shared_at(a, 2, "ldmatrix"), 2);
          memcpy(&e1, shared_at(a + 2, 2, "ldmatrix"), 2);
        } else {
          memcpy(&e0, shared_at(addr[8 * m + 2 * (l % 4)] + 2 * (l / 4), 2, "ldmatrix"), 2);
          memcpy(&e1, shared_at(addr[8 * m + 2 * (l % 4) + 1] + 2 * (l / 4), 2, "ldmatrix"), 2);
        }
        w.out[l][m] = (uint32_t)e0 | (uint32_t)e1 << 16;
      }
    break;
  }
  case OP_MMA: {
    /* PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type": groupID g = lane / 4,
     * threadID_in_group t = lane % 4. A (16 x 16, row), elements a0..a7 in registers a[0..3] (two per register,
     * the lower index in the low half): row g for a0, a1, a4, a5 and g + 8 for a2, a3, a6, a7; column 2t + (i & 1),
     * + 8 for i >= 4. B (16 x 8, col), b0..b3 in b0, b1: row 2t + (i & 1), + 8 for i >= 2; column g.
     * C, D (16 x 8 f32), c0..c3: row g for c0, c1 and g + 8 for c2, c3; column 2t + (i & 1). */
    const Format fmt = (Format)w.in[0][6];
    for (int l = 1; l < 32; l++)
      if ((Format)w.in[l][6] != fmt) fail("mma.sync with different input types across the warp");
    float A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < 32; l++) {
      const int g = l / 4, t = l % 4;
      for (int i = 0; i < 8; i++) {
        const int row = g + ((i & 2) ? 8 : 0), col = 2 * t + (i & 1) + (i >= 4 ? 8 : 0);
        A[row][col] = half_to_f32(fmt, (uint16_t)(w.in[l][i / 2] >> (16 * (i & 1))));
      }
      for (int i = 0; i < 4; i++)
        B[2 * t + (i & 1) + (i >= 2 ? 8 : 0)][g] = half_to_f32(fmt, (uint16_t)(w.in[l][4 + i / 2] >> (16 * (i & 1))));
      for (int i = 0; i < 4; i++) memcpy(&C[g + (i >= 2 ? 8 : 0)][2 * t + (i & 1)], &w.out[l][i], 4);
    }
    /* products of 16-bit inputs are exact in double; the sum is rounded once to f32 (the hardware's internal
     * rounding of the accumulation differs in the last bits) */
    for (int l = 0; l < 32; l++) {
      const int g = l / 4, t = l % 4;
      for (int i = 0; i < 4; i++) {
        const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
        double acc = C[row][col];
        for (int k = 0; k < 16; k++) acc += (double)A[row][k] * B[k][col];
        const float d = (float)acc;
        memcpy(&w.out[l][i], &d, 4);
      }
    }
    break;
  }
  default: fail("unknown warp collective %d", w.op);
  }
}

/* ---- cp.async ---- */

static void land(const Copy &c) {
  unsigned char *d = shared_at(c.dst, c.size, "cp.async destination");
  if (c.src_size) memcpy(d, c.src, (size_t)c.src_size);
  memset(d + c.src_size, 0, (size_t)(c.size - c.src_size));
}

void cp_async(unsigned dst, const void *src, int cp_size, int src_size) {
  Fiber &f = me();
  if (cp_size != 4 && cp_size != 8 && cp_size != 16) fail("cp.async of %d bytes (4, 8 or 16)", cp_size);
  if (src_size < 0 || src_size > cp_size) fail("cp.async src-size %d with cp-size %d", src_size, cp_size);
  shared_at(dst, cp_size, "cp.async destination");
  if ((uintptr_t)src % (unsigned)cp_size) fail("cp.async source %p: not aligned to %d bytes", src, cp_size);
  /* only the src-size bytes are read: a zero-filling copy may name any address */
  if (src_size && !region_of(src, (size_t)src_size))
    fail("cp.async reads %d bytes at %p, outside every global buffer", src_size, src);
  race_write(dst, cp_size, (int)f.tid, true, "cp.async");
  Copy c{dst, (const unsigned char *)src, cp_size, src_size, false};
  if (!M.deferred) land(c), c.landed = true;
  f.open.push_back(c);
}

void cp_async_commit_group() {
  Fiber &f = me();
  f.groups.push_back(std::move(f.open));
  f.open.clear();
}

/* wait_group n: all but the n most recent committed groups have landed (copies not yet committed are not waited) */
void cp_async_wait_group(int n) {
  Fiber &f = me();
  while ((int)f.groups.size() > n) {
    for (const Copy &c : f.groups.front()) {
      if (!c.landed) land(c);
      for (unsigned i = (c.dst - SMEM_BASE) / 4; i < (c.dst - SMEM_BASE + (unsigned)c.size) / 4; i++) {
        shadow[i].inflight = 0;
        shadow[i].wkb = M.kb;
        shadow[i].wkw = M.kw[f.tid / 32];
      }
    }
    f.groups.pop_front();
  }
}

/* ---- conversions ---- */

uint16_t f32_to_f16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fff;
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* from 65520 on, rounds to infinity */
  if (a >= 0x38800000u) {                                  /* normal: rebias the exponent, round 23 -> 10 bits */
    const uint32_t m = a - 0x38000000u;
    return (uint16_t)(sign | ((m + 0xfffu + ((m >> 13) & 1u)) >> 13));
  }
  /* subnormal (units of 2^-24) or zero */
  const uint32_t e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e;
  if (shift > 24) return (uint16_t)sign;
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) q++;
  return (uint16_t)(sign | q);
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu, u;
  if (e == 0x1f) u = sign | 0x7f800000u | (m << 13);
  else if (e) u = sign | ((e + 112u) << 23) | (m << 13);
  else if (!m) u = sign;
  else {
    uint32_t s = 0;
    while (!(m & 0x400u)) m <<= 1, s++;
    u = sign | ((113u - s) << 23) | ((m & 0x3ffu) << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* ---- driver ---- */

/* Global buffers sit between guard zones filled with 0xff (NaN as f32, f16 and bf16): a read past an input gives
 * NaN, a write past an output changes a guard. */
static const size_t GUARD = 4096;
struct Buffer {
  unsigned char *base;
  size_t bytes;
  const char *name;
};
static std::vector<Buffer> buffers;

static unsigned char *buffer(const char *name, size_t bytes) {
  unsigned char *b = (unsigned char *)aligned_alloc(256, (bytes + 2 * GUARD + 255) / 256 * 256);
  if (!b) fail("out of memory for %s (%zu bytes)", name, bytes);
  memset(b, 0xff, bytes + 2 * GUARD);
  buffers.push_back(Buffer{b, bytes, name});
  return b + GUARD;
}

static void check_guards() {
  for (const Buffer &b : buffers)
    for (size_t i = 0; i < GUARD; i++) {
      if (b.base[i] != 0xff) fail("a write %zu bytes before %s", GUARD - i, b.name);
      if (b.base[GUARD + b.bytes + i] != 0xff) fail("a write %zu bytes past the end of %s", i, b.name);
    }
}

static void region(const char *name, const void *p, size_t bytes, bool readonly) {
  if (p && bytes) M.mem.push_back(Region{(const unsigned char *)p, (const unsigned char *)p + bytes, name, readonly});
}

int main_with(int argc, char **argv, Entry kernel, Entry init) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s CASE RESULT (files of tests/emu/emu_case.h, written by tests/cuda_emu)\n", argv[0]);
    return 2;
  }
  FILE *in = fopen(argv[1], "rb");
  attn_emu_case c;
  if (!in || fread(&c, sizeof c, 1, in) != 1 || c.magic != ATTN_EMU_MAGIC || c.version != ATTN_EMU_VERSION) {
    fprintf(stderr, "cuda_emu: %s is not a case file of this version\n", argv[1]);
    return 2;
  }
  const size_t nq = (size_t)(c.batch * c.heads * c.n * c.d), nkv = (size_t)(c.batch * c.heads_kv * c.n_kv * c.d);
  const size_t es = (size_t)c.esize;
  unsigned char *q = buffer("q", nq * es), *k = buffer("k", nkv * es), *v = buffer("v", nkv * es);
  unsigned char *o = buffer("o", nq * es);
  unsigned char *scratch = c.scratch ? buffer("the scratch", (size_t)c.scratch) : nullptr;
  unsigned char *consts = c.consts ? buffer("the constants", (size_t)c.consts) : nullptr;
  unsigned long long *io = (unsigned long long *)buffer("the I/O counters", 16);
  io[0] = io[1] = 0;
  if (fread(q, es, nq, in) != nq || fread(k, es, nkv, in) != nkv || fread(v, es, nkv, in) != nkv) {
    fprintf(stderr, "cuda_emu: %s is truncated\n", argv[1]);
    return 2;
  }
  fclose(in);
  M.order = c.order;
  M.deferred = c.deferred;
  M.rng.seed((uint64_t)c.order);
  if (c.consts) {
    if (!init) fail("the geometry has per-plan constants but the module has no attn_init");
    attn_cuda_kargs a;
    memset(&a, 0, sizeof a);
    a.consts = consts;
    M.mem.clear();
    region("the constants", consts, (size_t)c.consts, false);
    launch("attn_init", init, &a, c.init_grid, c.init_block, 0);
  }
  attn_cuda_kargs a;
  memset(&a, 0, sizeof a);
  a.q = q, a.k = k, a.v = v, a.o = o, a.scratch = scratch, a.consts = consts, a.io = io;
  a.batch = c.batch, a.heads = c.heads, a.heads_kv = c.heads_kv, a.n = c.n, a.n_kv = c.n_kv;
  a.scale = c.scale;
  a.grid_items = c.grid_items;
  M.mem.clear();
  region("q", q, nq * es, true);
  region("k", k, nkv * es, true);
  region("v", v, nkv * es, true);
  region("the constants", consts, (size_t)c.consts, true);
  region("o", o, nq * es, false);
  region("the scratch", scratch, (size_t)c.scratch, false);
  region("the I/O counters", io, 16, false);
  launch("attn_kernel", kernel, &a, c.grid, c.block, (size_t)c.smem);
  M.kernel = "after the kernel";
  check_guards();

  attn_emu_result r;
  memset(&r, 0, sizeof r);
  r.magic = ATTN_EMU_MAGIC;
  r.version = ATTN_EMU_VERSION;
  r.io_reads = io[0];
  r.io_writes = io[1];
  r.ldsm_phases = M.ldsm_phases;
  r.ldsm_conflicts = M.ldsm_conflicts;
  r.switches = M.switches;
  FILE *out = fopen(argv[2], "wb");
  const bool written = out && fwrite(&r, sizeof r, 1, out) == 1 && fwrite(o, es, nq, out) == nq;
  if (out && fclose(out) != 0) out = nullptr;
  for (const Buffer &b : buffers) free(b.base);
  buffers.clear();
  if (!written || !out) {
    fprintf(stderr, "cuda_emu: cannot write %s\n", argv[2]);
    return 2;
  }
  return 0;
}

} // namespace attn_emu
