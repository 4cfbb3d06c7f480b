/* ptx_exec.c: the machine. Several blocks of a grid are resident at once (ptx_launch_cfg.resident), and the machine
 * switches between them at their barriers in the launch's order (round robin forward or backward, or seeded
 * random); a block that ends makes room for the next. Global memory is race-checked across the blocks of a launch:
 * a byte one block writes that another block reads or writes in the same launch (atomics to it excepted) is an
 * error, since nothing orders two blocks of a grid. Within a block every thread has its own program counter
 * and call stack, and a warp advances the group of its runnable lanes that sit at the lowest program counter, one
 * instruction at a time (lanes that branched ahead wait there: structured code reconverges where its paths meet).
 * A lane that reaches bar.sync waits until every live thread of the block has; a warp collective (shfl, vote,
 * bar.warp.sync, ldmatrix, mma) runs once for the group and requires the lanes it names to be in it. Memory:
 * global allocations with guard gaps and a definedness bit per byte; shared memory per block with a shadow per
 * byte (defined, written or read by whom between which barriers, an in-flight cp.async); local and param memory
 * per call frame. Register definedness is tracked per lane: arithmetic on an undefined value gives an undefined
 * value, and using one as an address, a predicate, a stored value, a member mask, a vote or an mma fragment is an
 * error. sm_90: a thread waiting on an mbarrier phase blocks until it completes; bulk copies (TMA) land when no thread
 * of the block can run, and their bytes are off limits until then; a warp's wgmma computes its rows at issue and
 * holds the results (and keeps the shared memory it read off limits) until the wait_group that completes them. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ptx_internal.h"
#include "ptx_tmap.h"

#define GLOBAL_BASE 0x100000000ull
#define GUARD 4096ull
#define SHWIN 0x7f0000000000ull /* generic addresses of the shared window */
#define LOCWIN 0x7e0000000000ull /* ... and of the local window */
#define PARWIN 0x7d0000000000ull /* ... and of the kernel's parameters (cvta.param: a __grid_constant__ tensor map) */
#define WINSIZE 0x100000000ull
#define MAXDEPTH 8

/* a global byte's last plain write, plain read and atomic: in which launch (ptx_machine.launch; 0: none) and by
 * which block (GB_MANY: several blocks) */
#define GB_MANY 0xfffffffeu
typedef struct {
  uint32_t wl, rl, al; /* launches of the last plain write, plain read, atomic */
  uint32_t wb, rb, ab;
} gshadow;

typedef struct {
  uint64_t addr, size;
  char name[32];
  uint8_t *data, *def;
  gshadow *gs;
  ptx_buffer_stats st;
} galloc;

struct ptx_machine {
  const ptx_module *m;
  galloc *a;
  int na, cap;
  uint64_t next;
  uint64_t *symaddr; /* module .global / .const symbols: their addresses */
  ptx_stats st;
  int approx_worst;
  uint32_t launch; /* launches so far: the global shadow's epoch */
};

void ptx_machine_set_approx(ptx_machine *x, int worst) { x->approx_worst = worst != 0; }

/* shared-memory shadow, one per byte */
enum { SH_INIT = 1, SH_W = 2, SH_PEND = 4,
       SH_WGR = 8,   /* read by a wgmma.mma_async its warp has not waited for */
       SH_TMA = 16   /* the destination of a cp.async.bulk.tensor still in flight */ };
/* the last write (thread, barrier epoch, its warp's collective count, warp instruction); the reads since: in which
 * epoch, by which warps, the highest collective count among them, and the thread (0xffff: several) */
typedef struct {
  uint32_t wep, wser, rep, rwarps, rline;
  uint16_t wtid, wws, rws, rtid, ptid;
  uint8_t flags;
} shadow;

typedef struct {
  int func, ret_pc, ret_sym; /* ret_sym: the caller's symbol receiving the return value, -1 none */
  uint64_t *r;
  uint8_t *rdef;
  uint8_t *local, *ldef;
  uint8_t *param, *pdef;
  int owns_param;
} frame;

typedef struct {
  uint32_t dst;       /* shared offset */
  uint8_t n, srcn;    /* bytes copied; bytes read from global (the rest zero-filled) */
  int group;          /* -1: not committed yet */
  uint8_t data[16];
} cpcopy;

enum { TS_RUN, TS_BAR, TS_EXIT, TS_MBAR /* waiting on an mbarrier's phase */ };
typedef struct {
  int pc, depth, state;
  uint32_t carry;
  frame fr[MAXDEPTH];
  cpcopy *cp;
  int ncp, capcp, committed;
  int barpred; /* bar.red's input */
  int barid, barcnt; /* TS_BAR: the barrier (0..15) and its thread count (0: every thread of the block) */
  /* wgmma: results held until the wait_group that completes them. wgseq per register of the entry frame: the
   * issue number of the wgmma whose result it awaits (-1: none); wgkind 1 an accumulator (no access at all), 2 an
   * A fragment of the register form (no write). wgn: registers awaiting (0: lane_exec checks nothing). */
  int wgn, wgfenced, wgissued, wggroups, wgdone, capwgend;
  int *wgend;          /* per commit group: the issue count at its commit */
  int32_t *wgseq;
  uint32_t *wgval;
  uint8_t *wgkind;
  int32_t *wgregs;     /* the wgn registers awaiting results */
  /* TS_MBAR: the barrier (shared offset) and what completes the wait: the phase of parity mbpar (mbtok < 0), or
   * any phase after mbtok (a state token) */
  uint32_t mboff;
  int mbpar;
  int64_t mbtok;
} thread;

/* an mbarrier object in shared memory (its state lives here, its 8 bytes are off limits to plain accesses) */
typedef struct {
  uint32_t off;
  int valid;
  uint32_t phase;       /* phases completed */
  int expected, pending;
  int64_t tx;           /* bytes expected (expect_tx) less bytes arrived (complete_tx) */
  int init_tid;         /* the thread whose mbarrier.init made it, at warp-instruction serial init_ser */
  uint32_t init_ser;
} mbarrier;

/* a cp.async.bulk.tensor load in flight: its bytes, in 16-byte chunks at their (swizzled) shared offsets */
typedef struct {
  uint32_t mbar, bytes, nchunk;
  uint32_t *chunk;
  uint8_t *data;
  int tid, line;
} tmacopy;

/* shared memory a warp's wgmma.mma_async reads, until its wait_group: 16-byte chunks */
typedef struct {
  int warp, seq;
  uint32_t *chunk;
  int n;
} wgread;

/* a block's sm_90 state: mbarriers, bulk copies in flight, wgmma reads in flight, each thread's last
 * fence.proxy.async */
typedef struct {
  int used;             /* an mbarrier or bulk copy was used: the scheduler looks at waits and copies */
  int wgthreads;        /* threads with registers awaiting wgmma results (0: nothing to check per instruction) */
  mbarrier *mb;
  int nmb, capmb;
  tmacopy *tma;
  int ntma, captma;
  wgread *wr;
  int nwr, capwr;
  uint32_t *fence;      /* per thread: the warp-instruction serial of its last fence.proxy.async */
  uint32_t *mbfence;    /* per thread: the serial of its last fence.proxy.async or fence.mbarrier_init */
  int arrived[16];      /* named barriers: bar.arrive arrivals in the current phase */
} hstate;

typedef struct { /* one lane's memory access inside the current warp instruction */
  uint8_t space, write;
  int alloc;
  uint64_t addr;
  uint32_t size;
  int lane;
} access;

typedef struct {
  ptx_machine *x;
  const ptx_module *m;
  const ptx_launch_cfg *cfg;
  unsigned bid, nthreads, nwarps;
  thread *t;
  uint8_t *smem;
  shadow *sh;
  uint64_t smem_size;
  uint32_t epoch;     /* bar.syncs completed in this block */
  uint32_t *wsync;    /* warp collectives completed by each warp */
  uint32_t serial;    /* warp instructions executed, to tell the lanes of one from another */
  char *err;
  size_t errlen;
  int failed;
  int cur_tid, cur_pc;
  int atomic; /* the access being made is an atomic's */
  access acc[32 * 4];
  int nacc;
  hstate *h;  /* the running block's */
} L;

/* ---- errors ---- */

static int lfail(L *l, const char *fmt, ...) {
  if (l->failed) return -1;
  l->failed = 1;
  int n;
  if (l->cur_pc >= 0) {
    const ptx_insn *in = &l->m->insn[l->cur_pc];
    if (l->cur_tid >= 0)
      n = snprintf(l->err, l->errlen, "block %u thread %d (warp %d lane %d), line %d `%s`: ", l->bid, l->cur_tid,
                   l->cur_tid / 32, l->cur_tid % 32, in->line, in->text);
    else
      n = snprintf(l->err, l->errlen, "block %u, line %d `%s`: ", l->bid, in->line, in->text);
  } else {
    n = snprintf(l->err, l->errlen, "block %u: ", l->bid);
  }
  if (n < 0 || (size_t)n >= l->errlen) return -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(l->err + n, l->errlen - (size_t)n, fmt, ap);
  va_end(ap);
  return -1;
}

/* ---- the machine and its global memory ---- */

static int galloc_add(ptx_machine *x, uint64_t bytes, const char *name, uint64_t *addr) {
  galloc *grown = ptx_grow(x->a, &x->cap, x->na + 1, sizeof *x->a);
  if (!grown) return -1;
  x->a = grown;
  galloc *g = &x->a[x->na];
  memset(g, 0, sizeof *g);
  g->size = bytes;
  g->addr = x->next;
  g->data = calloc(1, bytes ? bytes : 1);
  g->def = calloc(1, bytes ? bytes : 1);
  g->gs = calloc(bytes ? bytes : 1, sizeof *g->gs); /* launch 0 is none: nothing accessed yet */
  if (!g->data || !g->def || !g->gs) {
    free(g->data);
    free(g->def);
    free(g->gs);
    return -1;
  }
  snprintf(g->name, sizeof g->name, "%.31s", name);
  snprintf(g->st.name, sizeof g->st.name, "%.31s", name);
  x->next += (bytes + GUARD + 255) / 256 * 256 + GUARD;
  x->na++;
  *addr = g->addr;
  return 0;
}

ptx_machine *ptx_machine_new(const ptx_module *m, char *err, size_t errlen) {
  ptx_machine *x = calloc(1, sizeof *x);
  if (!x || !(x->symaddr = calloc((size_t)m->nsym + 1, sizeof *x->symaddr))) {
    free(x);
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  x->m = m;
  x->next = GLOBAL_BASE;
  for (int i = 0; i < m->nsym; i++) {
    const ptx_symbol *s = &m->sym[i];
    if (s->func >= 0 || (s->space != SP_GLOBAL && s->space != SP_CONST)) continue;
    uint64_t a;
    if (galloc_add(x, s->size, s->name, &a)) {
      ptx_machine_free(x);
      snprintf(err, errlen, "out of memory");
      return NULL;
    }
    galloc *g = &x->a[x->na - 1];
    if (s->init) memcpy(g->data, s->init, s->size);
    memset(g->def, 1, s->size); /* module variables start as their initialiser or zero */
    x->symaddr[i] = a;
  }
  return x;
}

void ptx_machine_free(ptx_machine *x) {
  if (!x) return;
  for (int i = 0; i < x->na; i++) {
    free(x->a[i].data);
    free(x->a[i].def);
    free(x->a[i].gs);
  }
  free(x->a);
  free(x->symaddr);
  free(x);
}

uint64_t ptx_alloc(ptx_machine *x, uint64_t bytes, const char *name) {
  uint64_t a;
  return galloc_add(x, bytes, name, &a) ? 0 : a;
}

static int find_alloc(const ptx_machine *x, uint64_t addr, uint64_t len) {
  for (int i = 0; i < x->na; i++) {
    const galloc *g = &x->a[i];
    if (addr >= g->addr && addr - g->addr <= g->size && len <= g->size - (addr - g->addr)) return i;
  }
  return -1;
}

int ptx_copy_in(ptx_machine *x, uint64_t addr, const void *src, size_t len) {
  const int i = find_alloc(x, addr, len);
  if (i < 0) return -1;
  memcpy(x->a[i].data + (addr - x->a[i].addr), src, len);
  memset(x->a[i].def + (addr - x->a[i].addr), 1, len);
  return 0;
}

int ptx_copy_out(ptx_machine *x, uint64_t addr, void *dst, size_t len, size_t *undefined) {
  const int i = find_alloc(x, addr, len);
  if (i < 0) return -1;
  memcpy(dst, x->a[i].data + (addr - x->a[i].addr), len);
  if (undefined) {
    size_t u = 0;
    for (size_t k = 0; k < len; k++) u += !x->a[i].def[addr - x->a[i].addr + k];
    *undefined = u;
  }
  return 0;
}

int ptx_buffer_stats_of(const ptx_machine *x, uint64_t addr, ptx_buffer_stats *out) {
  for (int i = 0; i < x->na; i++)
    if (x->a[i].addr == addr) {
      *out = x->a[i].st;
      return 0;
    }
  return -1;
}

void ptx_stats_get(const ptx_machine *x, ptx_stats *out) { *out = x->st; }

/* ---- registers and operands ---- */

static frame *top(thread *t) { return &t->fr[t->depth]; }

static int frame_init(L *l, frame *f, int func) {
  const ptx_func *fn = &l->m->func[func];
  memset(f, 0, sizeof *f);
  f->func = func;
  f->ret_sym = -1;
  f->r = calloc((size_t)fn->nregs + 1, sizeof *f->r);
  f->rdef = calloc((size_t)fn->nregs + 1, 1);
  f->local = calloc(fn->local_size + 1, 1);
  f->ldef = calloc(fn->local_size + 1, 1);
  if (!f->r || !f->rdef || !f->local || !f->ldef) return lfail(l, "out of memory");
  return 0;
}

static void frame_free(frame *f) {
  free(f->r);
  free(f->rdef);
  free(f->local);
  free(f->ldef);
  if (f->owns_param) {
    free(f->param);
    free(f->pdef);
  }
  memset(f, 0, sizeof *f);
}

static inline void put(L *l, frame *f, int reg, uint64_t v, int def) {
  f->r[reg] = v & l->m->func[f->func].regmask[reg];
  f->rdef[reg] = (uint8_t)def;
}

static uint64_t sreg(L *l, int tid, const ptx_operand *o) {
  const unsigned lane = (unsigned)tid % 32;
  switch (o->reg) {
  case S_TID: return o->comp ? 0 : (uint64_t)tid;
  case S_NTID: return o->comp ? 1 : l->cfg->block;
  case S_CTAID: return o->comp ? 0 : l->bid;
  case S_NCTAID: return o->comp ? 1 : l->cfg->grid;
  case S_LANEID: return lane;
  case S_WARPID: return (unsigned)tid / 32;
  case S_NWARPID: return l->nwarps;
  case S_SMID: return 0;
  case S_NSMID: return 1;
  case S_GRIDID: return 1;
  case S_CLOCK: case S_CLOCK64: return l->serial;
  case S_LANEMASK_EQ: return 1u << lane;
  case S_LANEMASK_LT: return (1u << lane) - 1;
  case S_LANEMASK_LE: return lane == 31 ? 0xffffffffu : (2u << lane) - 1;
  case S_LANEMASK_GT: return lane == 31 ? 0 : ~((2u << lane) - 1);
  case S_LANEMASK_GE: return ~((1u << lane) - 1);
  case S_DYNSMEM: return l->cfg->dyn_smem;
  case S_TOTALSMEM: return l->smem_size;
  default: return 0;
  }
}

/* the address a symbol names in its own state space */
static uint64_t sym_addr(L *l, int s) {
  const ptx_symbol *y = &l->m->sym[s];
  if (y->func < 0 && (y->space == SP_GLOBAL || y->space == SP_CONST)) return l->x->symaddr[s];
  return y->addr;
}

static uint64_t get_slow(L *l, int tid, const ptx_operand *o, ptx_type t, int *def);

/* a source operand's bits (immediates of a float type converted); *def its definedness. Registers inline: they
 * are most of what the interpreter reads. */
static inline uint64_t get(L *l, int tid, const ptx_operand *o, ptx_type t, int *def) {
  if (o->kind == K_REG) {
    const frame *f = &l->t[tid].fr[l->t[tid].depth];
    *def = f->rdef[o->reg];
    const uint64_t v = f->r[o->reg];
    return o->neg ? !(v & 1) : v;
  }
  return get_slow(l, tid, o, t, def);
}

static uint64_t get_slow(L *l, int tid, const ptx_operand *o, ptx_type t, int *def) {
  *def = 1;
  switch (o->kind) {
  case K_IMM:
    if (o->fimm == 2 && t == T_F32) { /* a decimal (double) literal of an f32 instruction */
      double d;
      memcpy(&d, &o->imm, 8);
      return ptx_bits32((float)d);
    }
    if (o->fimm == 1 && t == T_F64) { /* 0f... of an f64 instruction */
      const double d = ptx_f32((uint64_t)o->imm);
      uint64_t b;
      memcpy(&b, &d, 8);
      return b;
    }
    return (uint64_t)o->imm;
  case K_SREG: return sreg(l, tid, o);
  case K_SYM: return sym_addr(l, o->sym);
  case K_SINK: *def = 0; return 0;
  default: *def = 0; return 0;
  }
}

/* ---- memory ---- */

static int ordered(L *l, int prev_tid, uint32_t prev_ep, uint16_t prev_ws, int tid) {
  if (prev_tid == tid || prev_ep < l->epoch) return 1;
  return prev_tid / 32 == tid / 32 && l->wsync[tid / 32] > prev_ws;
}

static int sh_read(L *l, int tid, uint64_t off, uint32_t n, uint8_t *out) {
  for (uint32_t i = 0; i < n; i++) {
    shadow *s = &l->sh[off + i];
    if (s->flags & (SH_PEND | SH_TMA)) {
      if (s->flags & SH_TMA)
        return lfail(l, "reads shared byte %llu while thread %u's cp.async.bulk.tensor to it is still in flight "
                        "(its mbarrier phase has not completed)", (unsigned long long)(off + i), s->ptid);
      return lfail(l, "reads shared byte %llu while thread %u's cp.async to it is still in flight (before its "
                      "wait_group)", (unsigned long long)(off + i), s->ptid);
    }
    if (!(s->flags & SH_INIT))
      return lfail(l, "reads shared byte %llu, which nothing has written", (unsigned long long)(off + i));
    if ((s->flags & SH_W) && !ordered(l, s->wtid, s->wep, s->wws, tid))
      return lfail(l, "race: reads shared byte %llu, written by thread %u with no barrier between",
                   (unsigned long long)(off + i), s->wtid);
    const uint16_t ws = (uint16_t)l->wsync[tid / 32];
    if (s->rwarps == 0 || s->rep != l->epoch) {
      s->rep = l->epoch;
      s->rwarps = 1u << (tid / 32);
      s->rws = ws;
      s->rtid = (uint16_t)tid;
    } else {
      s->rwarps |= 1u << (tid / 32);
      if (ws > s->rws) s->rws = ws;
      if (s->rtid != tid) s->rtid = 0xffff;
    }
    s->rline = (uint32_t)l->m->insn[l->cur_pc].line;
    out[i] = l->smem[off + i];
  }
  return 0;
}

/* a write's conflicts with earlier accesses (not its own cp.async landing) */
static int sh_check_write(L *l, int tid, uint64_t off, uint32_t n, const uint8_t *val) {
  for (uint32_t i = 0; i < n; i++) {
    shadow *s = &l->sh[off + i];
    if (s->flags & (SH_PEND | SH_WGR | SH_TMA)) {
      if (s->flags & SH_WGR)
        return lfail(l, "writes shared byte %llu, which a wgmma.mma_async still reads (its warp has not waited for "
                        "it with wgmma.wait_group)", (unsigned long long)(off + i));
      if (s->flags & SH_TMA)
        return lfail(l, "writes shared byte %llu while thread %u's cp.async.bulk.tensor to it is still in flight",
                     (unsigned long long)(off + i), s->ptid);
      return lfail(l, "writes shared byte %llu while thread %u's cp.async to it is still in flight",
                   (unsigned long long)(off + i), s->ptid);
    }
    if ((s->flags & SH_W) && !ordered(l, s->wtid, s->wep, s->wws, tid)) {
      /* lanes of one instruction writing the same value: benign */
      if (!(s->wser == l->serial && val && l->smem[off + i] == val[i]))
        return lfail(l, "race: writes shared byte %llu, written by thread %u with no barrier between",
                     (unsigned long long)(off + i), s->wtid);
    }
    /* reads in this epoch: by other warps, or by other lanes of this warp with no collective since, race */
    if (s->rwarps && s->rep == l->epoch && s->rtid != tid &&
        ((s->rwarps & ~(1u << (tid / 32))) || l->wsync[tid / 32] <= s->rws)) {
      int other = -1;
      for (int w = 0; w < 32 && other < 0; w++)
        if ((s->rwarps >> w & 1) && w != tid / 32) other = w;
      if (other < 0) other = tid / 32;
      return lfail(l, "race: writes shared byte %llu, which %s of warp %d read (last at line %u) with no barrier "
                   "between", (unsigned long long)(off + i), s->rtid != 0xffff ? "a thread" : "threads", other,
                   s->rline);
    }
  }
  return 0;
}

static void sh_commit_write(L *l, int tid, uint64_t off, uint32_t n, const uint8_t *val) {
  for (uint32_t i = 0; i < n; i++) {
    shadow *s = &l->sh[off + i];
    s->flags = SH_INIT | SH_W;
    s->rwarps = 0;
    s->wtid = (uint16_t)tid;
    s->wep = l->epoch;
    s->wws = (uint16_t)l->wsync[tid / 32];
    s->wser = l->serial;
    l->smem[off + i] = val[i];
  }
}

/* A global access of n bytes at data offset off of allocation ai by the current block, against the other blocks'
 * accesses in this launch. */
static int g_check(L *l, int ai, uint64_t off, uint32_t n, int write) {
  galloc *g = &l->x->a[ai];
  const uint32_t ln = l->x->launch, b = l->bid;
  for (uint32_t i = 0; i < n; i++) {
    gshadow *s = &g->gs[off + i];
    const char *what = NULL;
    uint32_t other = 0;
    if (s->wl == ln && s->wb != b) what = "written", other = s->wb;
    else if (l->atomic ? 0 : s->al == ln && s->ab != b) what = "updated atomically", other = s->ab;
    else if (write && s->rl == ln && s->rb != b) what = "read", other = s->rb;
    if (what) {
      char by[48];
      if (other == GB_MANY) snprintf(by, sizeof by, "other blocks");
      else snprintf(by, sizeof by, "block %u", other);
      return lfail(l, "race across blocks: %s%s byte %llu of %s, %s by %s in the same launch (nothing orders the "
                      "blocks of a grid)", l->atomic ? "atomically " : "", write ? "writes" : "reads",
                   (unsigned long long)off + i, g->name, what, by);
    }
    if (l->atomic) {
      s->ab = s->al == ln && s->ab != b ? GB_MANY : b;
      s->al = ln;
    } else if (write) {
      s->wb = b;
      s->wl = ln;
    } else {
      s->rb = s->rl == ln && s->rb != b ? GB_MANY : b;
      s->rl = ln;
    }
  }
  return 0;
}

static void record(L *l, int lane, uint8_t space, int write, int alloc, uint64_t addr, uint32_t size) {
  if (l->nacc >= (int)(sizeof l->acc / sizeof l->acc[0])) return;
  access *a = &l->acc[l->nacc++];
  a->space = space;
  a->write = (uint8_t)write;
  a->alloc = alloc;
  a->addr = addr;
  a->size = size;
  a->lane = lane;
}

/* Resolves (space, address) of one access of n bytes to its bytes: *p and *pdef for global, local and param;
 * shared returns the offset in *soff. Checks the range and the alignment (al bytes). */
static int resolve(L *l, int tid, ptx_space sp, uint64_t addr, uint32_t n, uint32_t al, uint8_t *rsp, uint8_t **p,
                   uint8_t **pdef, uint64_t *soff, int *alloc) {
  thread *th = &l->t[tid];
  frame *f = top(th);
  if (al > 1 && addr % al)
    return lfail(l, "misaligned %u-byte access at %s address 0x%llx", n,
                 sp == SP_SHARED ? "shared" : sp == SP_LOCAL ? "local" : sp == SP_PARAM ? "param" : "global",
                 (unsigned long long)addr);
  if (sp == SP_GENERIC) {
    if (addr >= SHWIN && addr < SHWIN + WINSIZE) sp = SP_SHARED, addr -= SHWIN;
    else if (addr >= LOCWIN && addr < LOCWIN + WINSIZE) sp = SP_LOCAL, addr -= LOCWIN;
    else if (addr >= PARWIN && addr < PARWIN + WINSIZE) sp = SP_PARAM, addr -= PARWIN;
    else sp = SP_GLOBAL;
  }
  *rsp = (uint8_t)sp;
  *alloc = -1;
  switch (sp) {
  case SP_SHARED:
    if (addr > l->smem_size || n > l->smem_size - addr)
      return lfail(l, "shared access of %u bytes at %llu, outside the block's %llu bytes", n,
                   (unsigned long long)addr, (unsigned long long)l->smem_size);
    *soff = addr;
    return 0;
  case SP_LOCAL: {
    const uint64_t ls = l->m->func[f->func].local_size;
    if (addr > ls || n > ls - addr)
      return lfail(l, "local access of %u bytes at %llu, outside the frame's %llu bytes", n, (unsigned long long)addr,
                   (unsigned long long)ls);
    *p = f->local + addr;
    *pdef = f->ldef + addr;
    return 0;
  }
  case SP_PARAM: {
    const uint64_t ps = l->m->func[f->func].param_size;
    if (addr > ps || n > ps - addr)
      return lfail(l, "param access of %u bytes at %llu, outside the %llu bytes of parameters", n,
                   (unsigned long long)addr, (unsigned long long)ps);
    *p = f->param + addr;
    *pdef = f->pdef + addr;
    return 0;
  }
  default: {
    const int i = find_alloc(l->x, addr, n);
    if (i < 0) {
      /* name the nearest allocation, which is what a kernel usually overran */
      const char *near = "none";
      long long dist = 0;
      for (int k = 0; k < l->x->na; k++) {
        const galloc *g = &l->x->a[k];
        long long dd = addr >= g->addr ? (long long)(addr - g->addr) - (long long)g->size : (long long)(g->addr - addr);
        if (near[0] == 'n' && !strcmp(near, "none")) near = g->name, dist = dd;
        else if (llabs(dd) < llabs(dist)) near = g->name, dist = dd;
      }
      return lfail(l, "global access of %u bytes at 0x%llx is outside every allocation (nearest: %s, %lld bytes "
                      "away)", n, (unsigned long long)addr, near, dist);
    }
    *alloc = i;
    *p = l->x->a[i].data + (addr - l->x->a[i].addr);
    *pdef = l->x->a[i].def + (addr - l->x->a[i].addr);
    return 0;
  }
  }
}

static int mem_read(L *l, int tid, ptx_space sp, uint64_t addr, uint32_t n, uint32_t al, uint8_t *out) {
  uint8_t rsp, *p = NULL, *pd = NULL;
  uint64_t so = 0;
  int alloc;
  if (resolve(l, tid, sp, addr, n, al, &rsp, &p, &pd, &so, &alloc)) return -1;
  if (rsp == SP_SHARED) {
    if (sh_read(l, tid, so, n, out)) return -1;
    record(l, tid % 32, SP_SHARED, 0, -1, so, n);
    return 0;
  }
  for (uint32_t i = 0; i < n; i++)
    if (!pd[i])
      return lfail(l, "reads %s byte %u of %u at 0x%llx, which nothing has written",
                   rsp == SP_LOCAL ? "local" : rsp == SP_PARAM ? "param" : l->x->a[alloc].name, i, n,
                   (unsigned long long)addr);
  if (rsp == SP_GLOBAL && !l->atomic && g_check(l, alloc, (uint64_t)(p - l->x->a[alloc].data), n, 0)) return -1;
  memcpy(out, p, n);
  if (rsp == SP_GLOBAL) record(l, tid % 32, SP_GLOBAL, 0, alloc, addr, n);
  return 0;
}

static int mem_write(L *l, int tid, ptx_space sp, uint64_t addr, uint32_t n, uint32_t al, const uint8_t *val) {
  uint8_t rsp, *p = NULL, *pd = NULL;
  uint64_t so = 0;
  int alloc;
  if (resolve(l, tid, sp, addr, n, al, &rsp, &p, &pd, &so, &alloc)) return -1;
  if (rsp == SP_SHARED) {
    if (sh_check_write(l, tid, so, n, val)) return -1;
    sh_commit_write(l, tid, so, n, val);
    record(l, tid % 32, SP_SHARED, 1, -1, so, n);
    return 0;
  }
  if (rsp == SP_PARAM && l->t[tid].depth == 0 && addr < l->m->func[top(&l->t[tid])->func].formal_size)
    return lfail(l, "writes a kernel parameter");
  if (rsp == SP_GLOBAL && g_check(l, alloc, (uint64_t)(p - l->x->a[alloc].data), n, 1)) return -1;
  memcpy(p, val, n);
  memset(pd, 1, n);
  if (rsp == SP_GLOBAL) record(l, tid % 32, SP_GLOBAL, 1, alloc, addr, n);
  return 0;
}

/* an address operand's value: the base register or symbol plus the offset */
static int address(L *l, int tid, const ptx_operand *o, uint64_t *addr) {
  uint64_t a = (uint64_t)o->imm;
  if (o->reg >= 0) {
    frame *f = top(&l->t[tid]);
    if (!f->rdef[o->reg])
      return lfail(l, "the address register %s is undefined", l->m->func[f->func].regname[o->reg]);
    a += f->r[o->reg];
  } else if (o->sym >= 0) {
    a += sym_addr(l, o->sym);
  }
  *addr = a;
  return 0;
}

/* ---- statistics of one warp instruction ---- */

static uint64_t wavefronts(const access *acc, int n, int phase_lanes, uint64_t *ideal) {
  uint64_t total = 0;
  *ideal = 0;
  for (int ph = 0; ph < 32; ph += phase_lanes) {
    uint32_t words[32][64];
    int cnt[32] = {0}, any = 0;
    for (int i = 0; i < n; i++) {
      if (acc[i].lane < ph || acc[i].lane >= ph + phase_lanes) continue;
      any = 1;
      for (uint64_t w = acc[i].addr / 4; w <= (acc[i].addr + acc[i].size - 1) / 4; w++) {
        const int bank = (int)(w % 32);
        int seen = 0;
        for (int k = 0; k < cnt[bank]; k++) seen |= words[bank][k] == (uint32_t)w;
        if (!seen && cnt[bank] < 64) words[bank][cnt[bank]++] = (uint32_t)w;
      }
    }
    if (!any) continue;
    int mx = 1;
    for (int b = 0; b < 32; b++)
      if (cnt[b] > mx) mx = cnt[b];
    total += (uint64_t)mx;
    *ideal += 1;
  }
  return total;
}

static void account(L *l, int is_ldsm) {
  if (!l->nacc) return;
  ptx_stats *st = &l->x->st;
  /* global: distinct 32-byte sectors per allocation and direction */
  for (int i = 0; i < l->nacc; i++) {
    access *a = &l->acc[i];
    if (a->space != SP_GLOBAL || a->alloc < 0) continue;
    uint64_t sectors[128];
    int ns = 0;
    uint64_t bytes = 0;
    for (int j = i; j < l->nacc; j++) {
      access *b = &l->acc[j];
      if (b->space != SP_GLOBAL || b->alloc != a->alloc || b->write != a->write) continue;
      bytes += b->size;
      for (uint64_t s = b->addr / 32; s <= (b->addr + b->size - 1) / 32; s++) {
        int seen = 0;
        for (int k = 0; k < ns; k++) seen |= sectors[k] == s;
        if (!seen && ns < 128) sectors[ns++] = s;
      }
      if (j != i) b->alloc = -1 - b->alloc; /* counted; mark so the outer loop skips it */
    }
    ptx_buffer_stats *bs = &l->x->a[a->alloc].st;
    if (a->write) bs->write_sectors += (uint64_t)ns, bs->write_bytes += bytes, bs->write_insns++;
    else bs->read_sectors += (uint64_t)ns, bs->read_bytes += bytes, bs->read_insns++;
  }
  /* shared: wavefronts by the access width's phases */
  access sh[32 * 4];
  int ns = 0, width = 0;
  for (int i = 0; i < l->nacc; i++)
    if (l->acc[i].space == SP_SHARED) {
      sh[ns++] = l->acc[i];
      if ((int)l->acc[i].size > width) width = (int)l->acc[i].size;
    }
  if (ns) {
    uint64_t ideal = 0, wf;
    if (is_ldsm) {
      /* matrix i's 8 rows of 16 bytes, at the addresses lanes 8i..8i+7 gave (.x1: lanes 0-7 only, .x2: 0-15), are
       * one phase of the 32 banks: as many wavefronts as the most distinct rows one group of 4 banks serves */
      wf = wavefronts(sh, ns, 8, &ideal);
      st->ldsm_wavefronts += wf;
      st->ldsm_ideal += ideal;
    } else {
      wf = wavefronts(sh, ns, width >= 16 ? 8 : width == 8 ? 16 : 32, &ideal);
      st->shared_wavefronts += wf;
      st->shared_ideal += ideal;
    }
  }
  l->nacc = 0;
}

/* ---- cp.async ---- */

static int cp_land(L *l, int tid, int upto_group) {
  thread *th = &l->t[tid];
  int keep = 0;
  for (int i = 0; i < th->ncp; i++) {
    cpcopy *c = &th->cp[i];
    if (c->group >= 0 && c->group <= upto_group) {
      for (uint32_t k = 0; k < c->n; k++) l->sh[c->dst + k].flags &= (uint8_t)~SH_PEND;
      sh_commit_write(l, tid, c->dst, c->n, c->data);
    } else {
      th->cp[keep++] = *c;
    }
  }
  th->ncp = keep;
  return 0;
}

static int cp_issue(L *l, int tid, const ptx_insn *in) {
  thread *th = &l->t[tid];
  uint64_t dst, src;
  if (address(l, tid, &in->o[0], &dst) || address(l, tid, &in->o[1], &src)) return -1;
  const uint32_t n = (uint32_t)in->o[2].imm;
  uint32_t srcn = n;
  if (n != 4 && n != 8 && n != 16) return lfail(l, "cp.async of %u bytes (4, 8 or 16)", n);
  if (in->nops == 4) {
    int def;
    const uint64_t v = get(l, tid, &in->o[3], T_U32, &def);
    if (!def) return lfail(l, "cp.async's src-size is undefined");
    if (v > n) return lfail(l, "cp.async src-size %llu exceeds its %u bytes", (unsigned long long)v, n);
    srcn = (uint32_t)v;
  }
  cpcopy *grown = ptx_grow(th->cp, &th->capcp, th->ncp + 1, sizeof *th->cp);
  if (!grown) return lfail(l, "out of memory");
  th->cp = grown;
  cpcopy *c = &th->cp[th->ncp];
  memset(c, 0, sizeof *c);
  c->n = (uint8_t)n;
  c->srcn = (uint8_t)srcn;
  c->group = -1;
  /* the destination: shared, aligned, free of conflicts with earlier accesses; in flight until its wait */
  uint8_t rsp, *p = NULL, *pd = NULL;
  uint64_t so = 0;
  int alloc;
  if (resolve(l, tid, SP_SHARED, dst, n, n, &rsp, &p, &pd, &so, &alloc)) return -1;
  if (sh_check_write(l, tid, so, n, NULL)) return -1;
  c->dst = (uint32_t)so;
  /* the source is read only for src-size bytes; with 0 the address is not touched */
  if (srcn > 0) {
    uint8_t *gp = NULL, *gd = NULL;
    uint64_t g0;
    int ga;
    if (resolve(l, tid, SP_GLOBAL, src, srcn, n, &rsp, &gp, &gd, &g0, &ga)) return -1;
    for (uint32_t i = 0; i < srcn; i++)
      if (!gd[i])
        return lfail(l, "cp.async reads %s byte %u at 0x%llx, which nothing has written", l->x->a[ga].name, i,
                     (unsigned long long)src);
    if (g_check(l, ga, (uint64_t)(gp - l->x->a[ga].data), srcn, 0)) return -1;
    memcpy(c->data, gp, srcn);
    record(l, tid % 32, SP_GLOBAL, 0, ga, src, srcn);
  }
  record(l, tid % 32, SP_SHARED, 1, -1, so, n);
  for (uint32_t k = 0; k < n; k++) {
    l->sh[so + k].flags |= SH_PEND;
    l->sh[so + k].ptid = (uint16_t)tid;
  }
  th->ncp++;
  return 0;
}

/* ---- sm_90: mbarriers, bulk tensor copies (TMA), wgmma ---- */

/* kept out of the interpreter's hot loop (lane_exec, run_warp), which must stay small enough to be inlined */
#define COLD __attribute__((noinline, cold))

static int check_members(L *l, int w, uint32_t mask, uint32_t group, const char *what);

static mbarrier *mb_find(L *l, uint32_t off) {
  hstate *h = l->h;
  for (int i = 0; i < h->nmb; i++)
    if (h->mb[i].valid && h->mb[i].off == off) return &h->mb[i];
  return NULL;
}

/* the shared offset of an mbarrier operand (a shared address, or a generic one with no state space) */
static int mb_addr(L *l, int tid, ptx_space sp, const ptx_operand *o, uint32_t *off) {
  uint64_t a = 0, so = 0;
  uint8_t rsp = 0, *p = NULL, *pd = NULL;
  int alloc;
  if (address(l, tid, o, &a) || resolve(l, tid, sp, a, 8, 8, &rsp, &p, &pd, &so, &alloc)) return -1;
  if (rsp != SP_SHARED) return lfail(l, "an mbarrier outside shared memory (0x%llx)", (unsigned long long)a);
  *off = (uint32_t)so;
  return 0;
}

/* a phase completes when its arrivals are all in and its transaction bytes are all counted */
static void mb_complete(mbarrier *b) {
  if (b->pending == 0 && b->tx == 0) {
    b->phase++;
    b->pending = b->expected;
  }
}

/* A bulk copy completes on an mbarrier through the async proxy: its mbarrier.init (a generic-proxy write) must have
 * been made visible to that proxy by the initialising thread's fence.mbarrier_init or fence.proxy.async. */
static int mb_async_visible(L *l, const mbarrier *b, const char *who) {
  if (l->h->mbfence[b->init_tid] > b->init_ser) return 0;
  return lfail(l, "%s completes on the mbarrier at shared %u, which thread %d initialised with no fence.mbarrier_init "
                  "or fence.proxy.async since: the async proxy may not see the initialisation", who, b->off,
               b->init_tid);
}

static int mb_ready(const mbarrier *b, const thread *t) {
  return t->mbtok >= 0 ? (int64_t)b->phase > t->mbtok : (int)(b->phase & 1) != t->mbpar;
}

static const char *mb_state(const mbarrier *b, char *buf, size_t len) {
  snprintf(buf, len, "phase %u (parity %u) with %d of %d arrivals pending and tx-count %lld", b->phase, b->phase & 1,
           b->pending, b->expected, (long long)b->tx);
  return buf;
}

/* mbarrier.*: 0 done, 1 the thread waits (its pc stays: the wait runs again when the phase completes) */
COLD static int lane_mbar(L *l, int tid, const ptx_insn *in) {
  thread *th = &l->t[tid];
  frame *f = top(th);
  l->h->used = 1;
  const int ai = in->mode == MB_INIT || in->mode == MB_EXPECT_TX || in->mode == MB_INVAL ? 0 : 1;
  uint32_t off;
  if (mb_addr(l, tid, (ptx_space)in->space, &in->o[ai], &off)) return -1;
  mbarrier *b = mb_find(l, off);
  int def = 1;
  if (in->mode == MB_INIT) {
    const uint64_t cnt = get(l, tid, &in->o[1], T_U32, &def);
    if (!def) return lfail(l, "mbarrier.init with an undefined count");
    if (cnt < 1 || cnt >= 1u << 20) return lfail(l, "mbarrier.init with a count of %llu (1 to 2^20 - 1)",
                                                 (unsigned long long)cnt);
    if (!b) {
      mbarrier *g = ptx_grow(l->h->mb, &l->h->capmb, l->h->nmb + 1, sizeof *g);
      if (!g) return lfail(l, "out of memory");
      l->h->mb = g;
      b = &g[l->h->nmb++];
    }
    b->off = off;
    b->valid = 1;
    b->phase = 0;
    b->expected = b->pending = (int)cnt;
    b->tx = 0;
    b->init_tid = tid, b->init_ser = l->serial;
    static const uint8_t zero[8];
    if (sh_check_write(l, tid, off, 8, NULL)) return -1;
    sh_commit_write(l, tid, off, 8, zero);
    return 0;
  }
  if (!b) return lfail(l, "the mbarrier at shared %u is used before mbarrier.init (or after mbarrier.inval)", off);
  char sbuf[128];
  switch (in->mode) {
  case MB_INVAL: b->valid = 0; return 0;
  case MB_EXPECT_TX: {
    const uint64_t tx = get(l, tid, &in->o[1], T_U32, &def);
    if (!def) return lfail(l, "mbarrier.expect_tx of an undefined byte count");
    b->tx += (int64_t)tx;
    mb_complete(b);
    return 0;
  }
  case MB_ARRIVE: {
    int64_t cnt = 1;
    if (in->flags & F_EXPECTTX) {
      const uint64_t tx = get(l, tid, &in->o[2], T_U32, &def);
      if (!def) return lfail(l, "mbarrier.arrive.expect_tx of an undefined byte count");
      b->tx += (int64_t)tx;
    } else if (in->nops == 3) {
      cnt = (int64_t)get(l, tid, &in->o[2], T_U32, &def);
      if (!def || cnt < 1) return lfail(l, "mbarrier.arrive with a bad count");
    }
    if (cnt > b->pending)
      return lfail(l, "arrives at the mbarrier at shared %u (%s) %lld times, more than the phase awaits", off,
                   mb_state(b, sbuf, sizeof sbuf), (long long)cnt);
    const uint64_t token = (uint64_t)off << 32 | b->phase;
    b->pending -= (int)cnt;
    mb_complete(b);
    if (in->o[0].kind == K_REG) put(l, f, in->o[0].reg, token, 1);
    return 0;
  }
  default: { /* try_wait, test_wait */
    const uint64_t v = get(l, tid, &in->o[2], in->flags & F_PARITY ? T_U32 : T_B64, &def);
    if (!def) return lfail(l, "an mbarrier wait on an undefined %s", in->flags & F_PARITY ? "parity" : "state");
    th->mboff = off;
    th->mbtok = -1;
    th->mbpar = (int)(v & 1);
    if (!(in->flags & F_PARITY)) {
      if (v >> 32 != off) return lfail(l, "an mbarrier wait with the state of another mbarrier (shared %u)",
                                       (unsigned)(v >> 32));
      th->mbtok = (int64_t)(v & 0xffffffffu);
    }
    if (mb_ready(b, th)) {
      put(l, f, in->o[0].reg, 1, 1);
      return 0;
    }
    th->state = TS_MBAR;
    return 1;
  }
  }
}

/* threads waiting on mbarriers whose phase has come go on; the number woken */
COLD static int mb_wake(L *l) {
  int woke = 0;
  for (unsigned i = 0; i < l->nthreads; i++) {
    thread *t = &l->t[i];
    if (t->state != TS_MBAR) continue;
    const mbarrier *b = mb_find(l, t->mboff);
    if (!b) {
      l->cur_tid = (int)i;
      l->cur_pc = t->pc;
      return lfail(l, "waits on the mbarrier at shared %u, which was invalidated", t->mboff);
    }
    if (mb_ready(b, t)) t->state = TS_RUN, woke++;
  }
  return woke;
}

/* A read of shared memory by the async proxy (wgmma, a TMA store): what was written by plain stores must have been
 * made visible to it by fence.proxy.async after the store (and ordered before the read, as any read). */
static int async_read(L *l, int tid, uint64_t off, uint32_t n, uint8_t *out, const char *who) {
  if (off > l->smem_size || n > l->smem_size - off)
    return lfail(l, "%s reads %u shared bytes at %llu, outside the block's %llu bytes", who, n,
                 (unsigned long long)off, (unsigned long long)l->smem_size);
  for (uint32_t i = 0; i < n; i++) {
    const shadow *s = &l->sh[off + i];
    if (s->flags & (SH_PEND | SH_TMA))
      return lfail(l, "%s reads shared byte %llu while thread %u's %s to it is still in flight", who,
                   (unsigned long long)(off + i), s->ptid, s->flags & SH_TMA ? "cp.async.bulk.tensor" : "cp.async");
    if (!(s->flags & SH_INIT))
      return lfail(l, "%s reads shared byte %llu, which nothing has written", who, (unsigned long long)(off + i));
    if (s->flags & SH_W) {
      if (!ordered(l, s->wtid, s->wep, s->wws, tid))
        return lfail(l, "race: %s reads shared byte %llu, written by thread %u with no barrier between", who,
                     (unsigned long long)(off + i), s->wtid);
      if (l->h->fence[s->wtid] < s->wser)
        return lfail(l, "%s reads shared byte %llu, which thread %u wrote with a plain store (the generic proxy) and "
                        "no fence.proxy.async since: the async proxy may not see it", who,
                     (unsigned long long)(off + i), s->wtid);
    }
    out[i] = l->smem[off + i];
  }
  return 0;
}

/* the tensor map a bulk copy names: ptx_tmap.h's encoding, in param (a __grid_constant__ parameter) or global
 * memory */
static int tmap_read(L *l, int tid, const ptx_operand *o, ptx_tmap *t) {
  uint64_t a;
  uint8_t buf[128];
  ptx_space sp = SP_GENERIC;
  if (o->reg < 0 && o->sym >= 0 && l->m->sym[o->sym].space == SP_PARAM) sp = SP_PARAM;
  if (address(l, tid, o, &a) || mem_read(l, tid, sp, a, 128, 64, buf)) return -1;
  memcpy(t, buf, sizeof *t);
  if (t->magic != PTX_TMAP_MAGIC)
    return lfail(l, "the tensor map at 0x%llx was not written by ptx_tmap_encode (tests/ptx/ptx_tmap.h): the "
                    "interpreter cannot read a driver-encoded CUtensorMap", (unsigned long long)a);
  return 0;
}

/* a bulk tensor copy's box: coordinates from the instruction, the element count per dimension; *bytes the total */
static int tma_box(L *l, int tid, const ptx_insn *in, const ptx_operand *mo, const ptx_tmap *t, int32_t *c,
                   uint32_t *cnt, uint64_t *bytes) {
  const frame *f = top(&l->t[tid]);
  if (t->rank != in->num) return lfail(l, "a %dd copy through a tensor map of rank %u", in->num, t->rank);
  uint64_t nel = 1;
  for (int i = 0; i < 5; i++) {
    c[i] = 0;
    cnt[i] = 1;
    if (i >= t->rank) continue;
    const int r = ptx_vreg(l->m, mo, i);
    if (!f->rdef[r]) return lfail(l, "tensor coordinate %d is undefined", i);
    c[i] = (int32_t)f->r[r];
    cnt[i] = (t->box[i] + t->estride[i] - 1) / t->estride[i];
    nel *= cnt[i];
  }
  *bytes = nel * ptx_tmap_elsize(t->dtype);
  return 0;
}

/* element j (box-linear) -> its global address, or 0 outside the tensor */
static uint64_t tma_elem(const ptx_tmap *t, const int32_t *c, const uint32_t *cnt, uint64_t j) {
  const unsigned es = ptx_tmap_elsize(t->dtype);
  uint64_t a = t->address;
  for (int i = 0; i < t->rank; i++) {
    const int64_t x = (int64_t)c[i] + (int64_t)(j % cnt[i]) * t->estride[i];
    j /= cnt[i];
    if (x < 0 || x >= (int64_t)t->dim[i]) return 0;
    a += (uint64_t)x * (i ? t->stride[i - 1] : es);
  }
  return a;
}

static int tma_dst(L *l, int tid, const ptx_operand *o, uint64_t bytes, uint32_t *dst) {
  uint64_t a = 0, so = 0;
  uint8_t rsp = 0, *p = NULL, *pd = NULL;
  int alloc;
  if (address(l, tid, o, &a) || resolve(l, tid, SP_SHARED, a, (uint32_t)bytes, 128, &rsp, &p, &pd, &so, &alloc))
    return -1;
  *dst = (uint32_t)so;
  return 0;
}

static int u64_cmp(const void *a, const void *b) {
  const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* a bulk copy's global traffic, as one instruction's: the distinct 32-byte sectors of the elements it moved (those
 * inside the tensor), per allocation */
static void tma_count(L *l, uint64_t *sec, int *salloc, uint64_t n, unsigned es, int write) {
  for (uint64_t i = 0; i < n; i++) sec[i] = (uint64_t)(unsigned)salloc[i] << 48 | sec[i] / 32;
  qsort(sec, n, sizeof *sec, u64_cmp);
  for (uint64_t i = 0; i < n; i++) {
    ptx_buffer_stats *bs = &l->x->a[sec[i] >> 48].st;
    const int first = i == 0 || sec[i - 1] >> 48 != sec[i] >> 48, fresh = i == 0 || sec[i - 1] != sec[i];
    if (write) bs->write_sectors += (uint64_t)fresh, bs->write_bytes += es, bs->write_insns += (uint64_t)first;
    else bs->read_sectors += (uint64_t)fresh, bs->read_bytes += es, bs->read_insns += (uint64_t)first;
  }
}

/* cp.async.bulk.tensor global -> shared: the box read now (out-of-bounds elements zero, or NaN with the NaN fill),
 * its bytes in flight at their swizzled places until the machine lands them and completes their mbarrier's
 * transaction bytes */
COLD static int tma_load(L *l, int tid, const ptx_insn *in) {
  l->h->used = 1;
  ptx_tmap t;
  int32_t c[5];
  uint32_t cnt[5], dst, mb;
  uint64_t bytes;
  if (tmap_read(l, tid, &in->o[1], &t) || tma_box(l, tid, in, &in->o[1], &t, c, cnt, &bytes) ||
      tma_dst(l, tid, &in->o[0], bytes, &dst) || mb_addr(l, tid, SP_SHARED, &in->o[2], &mb))
    return -1;
  if (!mb_find(l, mb)) return lfail(l, "completes on the mbarrier at shared %u, which is not initialised", mb);
  if (mb_async_visible(l, mb_find(l, mb), "cp.async.bulk.tensor")) return -1;
  if (t.interleave) return lfail(l, "an interleaved tensor map");
  const unsigned es = ptx_tmap_elsize(t.dtype);
  tmacopy *g = ptx_grow(l->h->tma, &l->h->captma, l->h->ntma + 1, sizeof *g);
  if (!g) return lfail(l, "out of memory");
  l->h->tma = g;
  tmacopy *cp = &g[l->h->ntma];
  memset(cp, 0, sizeof *cp);
  cp->data = malloc(bytes);
  cp->chunk = malloc(bytes / 16 * sizeof *cp->chunk);
  if (!cp->data || !cp->chunk) {
    free(cp->data);
    free(cp->chunk);
    return lfail(l, "out of memory");
  }
  l->h->ntma++; /* owned by the list from here: freed when it lands or the launch ends */
  cp->mbar = mb;
  cp->bytes = (uint32_t)bytes;
  cp->nchunk = (uint32_t)(bytes / 16);
  cp->tid = tid;
  cp->line = l->m->insn[l->cur_pc].line;
  static const uint8_t NAN16[2] = {0xff, 0x7f}, NAN32[4] = {0xff, 0xff, 0xff, 0x7f},
                       NAN64[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
  const uint8_t *fill = t.oobfill ? (es == 2 ? NAN16 : es == 4 ? NAN32 : NAN64) : NULL;
  int last = -1;
  uint64_t *sec = malloc(bytes / es * sizeof *sec), nsec = 0; /* global addresses, for the sector count */
  int *salloc = malloc(bytes / es * sizeof *salloc);
  if (!sec || !salloc) {
    free(sec);
    free(salloc);
    return lfail(l, "out of memory");
  }
  for (uint64_t j = 0; j < bytes / es; j++) {
    uint8_t *out = cp->data + j * es;
    const uint64_t ga = tma_elem(&t, c, cnt, j);
    if (!ga) {
      if (fill) memcpy(out, fill, es);
      else memset(out, 0, es);
      continue;
    }
    if (last < 0 || ga < l->x->a[last].addr || ga + es > l->x->a[last].addr + l->x->a[last].size) {
      last = find_alloc(l->x, ga, es);
      if (last < 0) {
        free(sec);
        free(salloc);
        return lfail(l, "cp.async.bulk.tensor reads global 0x%llx, outside every allocation (the tensor map's address, "
                        "dimensions or strides)", (unsigned long long)ga);
      }
    }
    const galloc *al = &l->x->a[last];
    const uint64_t o = ga - al->addr;
    int bad = -1;
    for (unsigned b = 0; b < es && bad < 0; b++)
      if (!al->def[o + b]) bad = (int)b;
    if (bad >= 0 || g_check(l, last, o, es, 0)) {
      free(sec);
      free(salloc);
      return bad < 0 ? -1 : lfail(l, "cp.async.bulk.tensor reads byte %llu of %s, which nothing has written",
                                  (unsigned long long)(o + (unsigned)bad), al->name);
    }
    memcpy(out, al->data + o, es);
    sec[nsec] = ga;
    salloc[nsec++] = last;
  }
  tma_count(l, sec, salloc, nsec, es, 0);
  free(sec);
  free(salloc);
  for (uint32_t k = 0; k < cp->nchunk; k++) {
    const uint32_t at = ptx_swizzle(dst + 16 * k, t.swizzle);
    cp->chunk[k] = at;
    for (uint32_t b = 0; b < 16; b++) {
      shadow *s = &l->sh[at + b];
      if (s->flags & SH_WGR)
        return lfail(l, "cp.async.bulk.tensor writes shared byte %u, which a wgmma.mma_async still reads (its warp has "
                        "not waited for it with wgmma.wait_group: the stage is not free)", at + b);
      if (s->flags & (SH_PEND | SH_TMA))
        return lfail(l, "cp.async.bulk.tensor writes shared byte %u, to which thread %u's %s is still in flight", at + b,
                     s->ptid, s->flags & SH_TMA ? "cp.async.bulk.tensor" : "cp.async");
      s->flags |= SH_TMA;
      s->ptid = (uint16_t)tid;
    }
  }
  return 0;
}

/* cp.async.bulk (no tensor map): size bytes, a multiple of 16, between 16-byte aligned global and shared memory; a
 * load in flight until it lands and completes its mbarrier's bytes, as a tensor copy; a store at once */
COLD static int bulk_copy(L *l, int tid, const ptx_insn *in) {
  l->h->used = 1;
  const int ld = in->mode == 1;
  uint64_t dst, src, soff = 0, unused = 0;
  int def;
  const uint64_t size = get(l, tid, &in->o[2], T_U32, &def);
  if (!def) return lfail(l, "cp.async.bulk of an undefined size");
  if (size == 0 || size % 16) return lfail(l, "cp.async.bulk of %llu bytes (a multiple of 16)", (unsigned long long)size);
  if (address(l, tid, &in->o[0], &dst) || address(l, tid, &in->o[1], &src)) return -1;
  uint8_t rsp = 0, *gp = NULL, *gd = NULL, *sp = NULL, *spd = NULL;
  int ga = -1, sa = -1;
  if (resolve(l, tid, SP_GLOBAL, ld ? src : dst, (uint32_t)size, 16, &rsp, &gp, &gd, &unused, &ga) ||
      resolve(l, tid, SP_SHARED, ld ? dst : src, (uint32_t)size, 16, &rsp, &sp, &spd, &soff, &sa))
    return -1;
  const uint64_t goff = (uint64_t)(gp - l->x->a[ga].data), gaddr = ld ? src : dst;
  uint64_t *sec = malloc(size / 16 * sizeof *sec);
  int *salloc = malloc(size / 16 * sizeof *salloc);
  uint8_t *buf = malloc(size);
  uint32_t *chunk = malloc(size / 16 * sizeof *chunk);
  int rc = 0;
  uint32_t mb = 0;
  if (!sec || !salloc || !buf || !chunk) rc = lfail(l, "out of memory");
  for (uint64_t k = 0; k < size / 16 && !rc; k++) sec[k] = gaddr + 16 * k, salloc[k] = ga;
  if (!rc && !ld) { /* shared -> global, now */
    if (!(rc = async_read(l, tid, soff, (uint32_t)size, buf, "cp.async.bulk")) && !(rc = g_check(l, ga, goff,
                                                                                            (uint32_t)size, 1))) {
      memcpy(gp, buf, size);
      memset(gd, 1, size);
      tma_count(l, sec, salloc, size / 16, 16, 1);
    }
  } else if (!rc) { /* global -> shared, in flight until it lands */
    if (!(rc = mb_addr(l, tid, SP_SHARED, &in->o[3], &mb)) && !mb_find(l, mb))
      rc = lfail(l, "completes on the mbarrier at shared %u, which is not initialised", mb);
    if (!rc) rc = mb_async_visible(l, mb_find(l, mb), "cp.async.bulk");
    for (uint64_t b = 0; b < size && !rc; b++)
      if (!gd[b]) rc = lfail(l, "cp.async.bulk reads byte %llu of %s, which nothing has written",
                             (unsigned long long)(goff + b), l->x->a[ga].name);
    if (!rc) rc = g_check(l, ga, goff, (uint32_t)size, 0);
    for (uint32_t k = 0; k < size / 16 && !rc; k++) {
      chunk[k] = (uint32_t)soff + 16 * k;
      for (uint32_t b = 0; b < 16 && !rc; b++) {
        shadow *sh = &l->sh[chunk[k] + b];
        if (sh->flags & (SH_WGR | SH_PEND | SH_TMA))
          rc = lfail(l, "cp.async.bulk writes shared byte %u, which %s", chunk[k] + b,
                     sh->flags & SH_WGR ? "a wgmma.mma_async still reads" : "another copy to it is still in flight");
      }
    }
    tmacopy *g = rc ? NULL : ptx_grow(l->h->tma, &l->h->captma, l->h->ntma + 1, sizeof *g);
    if (!rc && !g) rc = lfail(l, "out of memory");
    if (!rc) {
      l->h->tma = g;
      tmacopy *cp = &g[l->h->ntma++];
      memset(cp, 0, sizeof *cp);
      cp->mbar = mb;
      cp->bytes = (uint32_t)size;
      cp->nchunk = (uint32_t)(size / 16);
      cp->tid = tid;
      cp->line = l->m->insn[l->cur_pc].line;
      cp->chunk = chunk;
      cp->data = buf;
      memcpy(buf, gp, size);
      chunk = NULL, buf = NULL; /* the copy's now */
      for (uint32_t k = 0; k < cp->nchunk; k++)
        for (uint32_t b = 0; b < 16; b++) {
          l->sh[cp->chunk[k] + b].flags |= SH_TMA;
          l->sh[cp->chunk[k] + b].ptid = (uint16_t)tid;
        }
      tma_count(l, sec, salloc, size / 16, 16, 0);
    }
  }
  free(sec);
  free(salloc);
  free(buf);
  free(chunk);
  return rc;
}

/* the copies in flight land: their bytes, then their mbarriers' transaction counts */
COLD static int tma_land(L *l) {
  hstate *h = l->h;
  for (int i = 0; i < h->ntma; i++) {
    tmacopy *c = &h->tma[i];
    for (uint32_t k = 0; k < c->nchunk; k++)
      for (uint32_t b = 0; b < 16; b++) {
        shadow *s = &l->sh[c->chunk[k] + b];
        s->flags = (uint8_t)((s->flags & ~(SH_TMA | SH_W)) | SH_INIT);
        s->rwarps = 0;
        l->smem[c->chunk[k] + b] = c->data[16 * k + b];
      }
    mbarrier *b = mb_find(l, c->mbar);
    if (!b) {
      l->cur_tid = c->tid;
      l->cur_pc = -1;
      return lfail(l, "the cp.async.bulk.tensor of line %d lands on the mbarrier at shared %u, which was invalidated",
                   c->line, c->mbar);
    }
    b->tx -= c->bytes;
    mb_complete(b);
    free(c->chunk);
    free(c->data);
    c->chunk = NULL;
    c->data = NULL;
  }
  h->ntma = 0;
  return 0;
}

/* cp.async.bulk.tensor shared -> global: the box read from shared memory (by the async proxy, swizzled as the tensor
 * map says), its in-bounds elements written to global memory now */
COLD static int tma_store(L *l, int tid, const ptx_insn *in) {
  ptx_tmap t;
  int32_t c[5];
  uint32_t cnt[5], src;
  uint64_t bytes;
  if (tmap_read(l, tid, &in->o[0], &t) || tma_box(l, tid, in, &in->o[0], &t, c, cnt, &bytes) ||
      tma_dst(l, tid, &in->o[1], bytes, &src))
    return -1;
  const unsigned es = ptx_tmap_elsize(t.dtype);
  uint64_t *sec = malloc(bytes / es * sizeof *sec), nsec = 0;
  int *salloc = malloc(bytes / es * sizeof *salloc), rc = 0;
  if (!sec || !salloc) {
    free(sec);
    free(salloc);
    return lfail(l, "out of memory");
  }
  for (uint64_t j = 0; j < bytes / es && !rc; j++) {
    uint8_t v[8];
    if ((rc = async_read(l, tid, ptx_swizzle(src + (uint32_t)(j * es), t.swizzle), es, v, "cp.async.bulk.tensor")))
      break;
    const uint64_t ga = tma_elem(&t, c, cnt, j);
    if (!ga) continue;
    uint8_t rsp = 0, *p = NULL, *pd = NULL;
    uint64_t so = 0;
    int alloc = -1;
    if ((rc = resolve(l, tid, SP_GLOBAL, ga, es, es, &rsp, &p, &pd, &so, &alloc)) ||
        (rc = g_check(l, alloc, (uint64_t)(p - l->x->a[alloc].data), es, 1)))
      break;
    memcpy(p, v, es);
    memset(pd, 1, es);
    sec[nsec] = ga;
    salloc[nsec++] = alloc;
  }
  if (!rc) tma_count(l, sec, salloc, nsec, es, 1);
  free(sec);
  free(salloc);
  return rc;
}

/* ---- wgmma ---- */

static int wg_alloc(L *l, thread *th) {
  if (th->wgseq) return 0;
  const size_t nr = (size_t)l->m->func[th->fr[0].func].nregs + 1;
  th->wgseq = malloc(nr * sizeof *th->wgseq);
  th->wgval = calloc(nr, sizeof *th->wgval);
  th->wgkind = calloc(nr, 1);
  th->wgregs = malloc(nr * sizeof *th->wgregs);
  if (!th->wgseq || !th->wgval || !th->wgkind || !th->wgregs) return lfail(l, "out of memory");
  memset(th->wgseq, 0xff, nr * sizeof *th->wgseq);
  return 0;
}

/* registers of wgmma results not yet waited for: an instruction may neither read nor write an accumulator, nor
 * write an A fragment of the register form */
COLD static int wg_check(L *l, int tid, const ptx_insn *in) {
  const thread *th = &l->t[tid];
  if (th->depth || in->op == OP_WGMMA) return 0;
  const ptx_func *fn = &l->m->func[th->fr[0].func];
  const int nodst = in->op == OP_ST || in->op == OP_RED || in->op == OP_STMATRIX || in->op == OP_BRA ||
                    in->op == OP_TMA || in->op == OP_CALL;
  for (int i = 0; i < in->nops; i++) {
    const ptx_operand *o = &in->o[i];
    const int dst = !nodst && (i == 0 || (i == 1 && (in->flags & F_PAIR)));
    int regs[260], nr = 0;
    if (o->kind == K_REG) regs[nr++] = o->reg;
    if (o->kind == K_ADDR && o->reg >= 0) regs[nr++] = o->reg;
    if (o->kind == K_VEC || (o->kind == K_ADDR && o->n))
      for (int k = 0; k < o->n; k++) regs[nr++] = ptx_vreg(l->m, o, k);
    for (int k = 0; k < nr; k++) {
      const int r = regs[k];
      if (r < 0 || th->wgseq[r] < 0) continue;
      if (th->wgkind[r] == 1)
        return lfail(l, "%s %s, an accumulator of a wgmma.mma_async not yet waited for (wgmma.wait_group)",
                     dst ? "writes" : "reads", fn->regname[r]);
      if (dst)
        return lfail(l, "writes %s, an A fragment of a wgmma.mma_async not yet waited for (wgmma.wait_group)",
                     fn->regname[r]);
    }
  }
  return 0;
}

static void wr_mark(L *l) {
  for (int i = 0; i < l->h->nwr; i++)
    for (int k = 0; k < l->h->wr[i].n; k++)
      for (int b = 0; b < 16; b++) l->sh[l->h->wr[i].chunk[k] + b].flags |= SH_WGR;
}

/* warp's wgmmas before issue number done are complete: their shared memory is free again */
static void wr_release(L *l, int warp, int done) {
  hstate *h = l->h;
  int keep = 0, removed = 0;
  for (int i = 0; i < h->nwr; i++) {
    wgread *r = &h->wr[i];
    if (r->warp == warp && r->seq < done) {
      for (int k = 0; k < r->n; k++)
        for (int b = 0; b < 16; b++) l->sh[r->chunk[k] + b].flags &= (uint8_t)~SH_WGR;
      free(r->chunk);
      removed++;
    } else {
      h->wr[keep++] = *r;
    }
  }
  h->nwr = keep;
  if (removed) wr_mark(l);
}

COLD static int wg_commit(L *l, int tid) {
  thread *th = &l->t[tid];
  int *g = ptx_grow(th->wgend, &th->capwgend, th->wggroups + 1, sizeof *g);
  if (!g) return lfail(l, "out of memory");
  th->wgend = g;
  g[th->wggroups++] = th->wgissued;
  return 0;
}

COLD static int wg_wait(L *l, int tid, int64_t n) {
  thread *th = &l->t[tid];
  if (n < 0 || n > 7) return lfail(l, "wgmma.wait_group %lld (0 to 7)", (long long)n);
  const int g = th->wggroups - 1 - (int)n;
  if (g < 0 || th->wgend[g] <= th->wgdone) return 0;
  th->wgdone = th->wgend[g];
  th->wgfenced = 0; /* the thread will touch the results: the next wgmma needs a fence again */
  frame *f = &th->fr[0];
  const int had = th->wgn != 0;
  int keep = 0;
  for (int i = 0; i < th->wgn; i++) {
    const int r = th->wgregs[i];
    if (th->wgseq[r] < th->wgdone) {
      if (th->wgkind[r] == 1) put(l, f, r, th->wgval[r], 1);
      th->wgseq[r] = -1;
      th->wgkind[r] = 0;
    } else {
      th->wgregs[keep++] = r;
    }
  }
  th->wgn = keep;
  if (had && !th->wgn) l->h->wgthreads--;
  wr_release(l, tid / 32, th->wgdone);
  return 0;
}

static int chunk_cmp(const void *a, const void *b) {
  const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* wgmma.mma_async for one warp of its warpgroup: rows 16 (w % 4) .. +15 of D = A B (+ D), computed now from shared
 * memory and registers as they are (exact products, the sum rounded once, as mma.sync), held until the
 * wait_group that completes it */
COLD static int wgmma_exec(L *l, int w, uint32_t group, const ptx_insn *in) {
  if (check_members(l, w, 0xffffffffu, group, "wgmma.mma_async (.aligned: the whole warp)")) return -1;
  const int base = w * 32, N = in->num * 8, regA = in->nops == 7, wq = w % 4;
  const int bf = in->mma_ab == T_BF16;
  if ((unsigned)(w / 4 * 4 + 4) * 32 > l->nthreads)
    return lfail(l, "wgmma.mma_async in warp %d, whose warpgroup (warps %d to %d) the block of %u threads does not "
                    "fill", w, w / 4 * 4, w / 4 * 4 + 3, l->nthreads);
  const int64_t sa = in->o[4].imm, sb = in->o[5].imm, ta = regA ? 0 : in->o[6].imm, tb = in->o[regA ? 6 : 7].imm;
  if ((sa != 1 && sa != -1) || (sb != 1 && sb != -1) || (ta & ~1) || (tb & ~1))
    return lfail(l, "wgmma.mma_async: imm-scale-a/b must be 1 or -1, imm-trans-a/b 0 or 1");
  uint64_t da = 0, db = 0;
  int scaled = 1;
  for (int lane = 0; lane < 32; lane++) {
    thread *th = &l->t[base + lane];
    l->cur_tid = base + lane;
    if (th->depth) return lfail(l, "wgmma.mma_async in a called function (only in the kernel's own frame)");
    if (!th->wgfenced)
      return lfail(l, "wgmma.mma_async with no wgmma.fence since the start or the last wgmma.wait_group (the "
                      "registers it uses may not be ready)");
    if (wg_alloc(l, th)) return -1;
    int d1 = 1, d2, d3;
    const uint64_t a = regA ? 0 : get(l, base + lane, &in->o[1], T_B64, &d1);
    const uint64_t b = get(l, base + lane, &in->o[2], T_B64, &d2);
    const int s = (int)(get(l, base + lane, &in->o[3], T_PRED, &d3) & 1);
    if (!d1 || !d2 || !d3) return lfail(l, "wgmma.mma_async with an undefined descriptor or scale-d");
    if (lane && (a != da || b != db || s != scaled))
      return lfail(l, "wgmma.mma_async: the lanes of a warp give different descriptors or scale-d");
    da = a, db = b, scaled = s;
  }
  l->cur_tid = base;
  if (((da >> 49) & 7) || ((db >> 49) & 7))
    return lfail(l, "wgmma.mma_async: a matrix descriptor with a base offset (bits 49-51) is not supported");
  double A[16][16], (*B)[256] = malloc(16 * sizeof *B);
  uint32_t *chunk = malloc((16 * 16 + 16 * 256) * sizeof *chunk);
  int nch = 0;
  if (!B || !chunk) {
    free(B);
    free(chunk);
    return lfail(l, "out of memory");
  }
  int rc = 0;
#define H(x) (bf ? (double)ptx_bf16_to_f32((uint16_t)(x)) : (double)ptx_f16_to_f32((uint16_t)(x)))
  if (regA) {
    for (int lane = 0; lane < 32 && !rc; lane++) {
      const thread *th = &l->t[base + lane];
      const frame *f = top(&l->t[base + lane]);
      const int g = lane / 4, t = lane % 4;
      for (int k = 0; k < 4 && !rc; k++) {
        const int r = in->o[1].vec[k];
        if (r < 0 || !f->rdef[r] || (th->wgseq[r] >= 0 && th->wgkind[r] == 1)) {
          l->cur_tid = base + lane;
          rc = lfail(l, "wgmma.mma_async: A fragment register %d is undefined or a result not yet waited for", k);
          break;
        }
        const uint32_t v = (uint32_t)f->r[r];
        for (int h = 0; h < 2; h++) A[g + 8 * (k & 1)][2 * t + 8 * (k >> 1) + h] = (double)sa * H(v >> (16 * h));
      }
    }
  } else {
    /* the contiguous dimension innermost: 8 elements in a row share a 16-byte chunk, checked once */
    for (int o = 0; o < 16 && !rc; o++)
      for (int i = 0; i < 16; i++) {
        const int r = ta ? i : o, k = ta ? o : i;
        const uint32_t off = ptx_gmma_offset(da, 16 * wq + r, k, (int)ta);
        if ((off & ~15u) != (nch ? chunk[nch - 1] : ~0u)) {
          uint8_t v[16];
          if ((rc = async_read(l, base, off & ~15u, 16, v, "wgmma.mma_async (A)"))) break;
          chunk[nch++] = off & ~15u;
        }
        A[r][k] = (double)sa * H(l->smem[off] | l->smem[off + 1] << 8);
      }
  }
  const int na = nch;
  for (int o = 0; o < (tb ? 16 : N) && !rc; o++)
    for (int i = 0; i < (tb ? N : 16); i++) {
      const int n = tb ? i : o, k = tb ? o : i;
      const uint32_t off = ptx_gmma_offset(db, n, k, (int)tb);
      if ((off & ~15u) != (nch > na ? chunk[nch - 1] : ~0u)) {
        uint8_t v[16];
        if ((rc = async_read(l, base, off & ~15u, 16, v, "wgmma.mma_async (B)"))) break;
        chunk[nch++] = off & ~15u;
      }
      B[k][n] = (double)sb * H(l->smem[off] | l->smem[off + 1] << 8);
    }
#undef H
  for (int lane = 0; lane < 32 && !rc; lane++) {
    thread *th = &l->t[base + lane];
    const frame *f = top(th);
    const int g = lane / 4, t = lane % 4, had = th->wgn != 0;
    for (int i = 0; i < N / 2; i++) {
      const int reg = ptx_vreg(l->m, &in->o[0], i);
      const int row = g + 8 * ((i / 2) % 2), col = 8 * (i / 4) + 2 * t + i % 2;
      double sum = 0;
      if (scaled) {
        if (th->wgseq[reg] >= 0 && th->wgkind[reg] == 1) { /* chained on an earlier wgmma's result */
          sum = ptx_f32(th->wgval[reg]);
        } else if (!f->rdef[reg]) {
          l->cur_tid = base + lane;
          rc = lfail(l, "wgmma.mma_async: accumulator %s is undefined (scale-d is true)",
                     l->m->func[f->func].regname[reg]);
          break;
        } else {
          sum = ptx_f32(f->r[reg]);
        }
      }
      int nan = isnan(sum);
      for (int k = 0; k < 16; k++) sum += A[row][k] * B[k][col];
      nan |= isnan(sum);
      if (th->wgseq[reg] < 0) th->wgregs[th->wgn++] = reg;
      th->wgseq[reg] = th->wgissued;
      th->wgkind[reg] = 1;
      th->wgval[reg] = (uint32_t)ptx_bits32(nan ? NAN : (float)sum);
    }
    if (regA)
      for (int k = 0; k < 4; k++) {
        const int r = in->o[1].vec[k];
        if (th->wgseq[r] < 0) th->wgregs[th->wgn++] = r, th->wgkind[r] = 2;
        if (th->wgkind[r] == 2) th->wgseq[r] = th->wgissued;
      }
    if (!had && th->wgn) l->h->wgthreads++;
    th->wgissued++;
  }
  free(B);
  if (rc || !nch) {
    free(chunk);
    return rc;
  }
  /* the shared memory it reads stays off limits to writers until the warp waits for it */
  qsort(chunk, (size_t)nch, sizeof *chunk, chunk_cmp);
  int u = 0;
  for (int i = 0; i < nch; i++)
    if (!u || chunk[i] != chunk[u - 1]) chunk[u++] = chunk[i];
  wgread *g = ptx_grow(l->h->wr, &l->h->capwr, l->h->nwr + 1, sizeof *g);
  if (!g) {
    free(chunk);
    return lfail(l, "out of memory");
  }
  l->h->wr = g;
  g[l->h->nwr].warp = w;
  g[l->h->nwr].seq = l->t[base].wgissued - 1;
  g[l->h->nwr].chunk = chunk;
  g[l->h->nwr].n = u;
  l->h->nwr++;
  for (int k = 0; k < u; k++)
    for (int b = 0; b < 16; b++) l->sh[chunk[k] + b].flags |= SH_WGR;
  return 0;
}

/* ---- one lane ---- */

static uint32_t type_bytes(ptx_type t) { return (uint32_t)(ptx_type_bits(t) / 8); }

static int lane_ld(L *l, int tid, const ptx_insn *in) {
  frame *f = top(&l->t[tid]);
  const ptx_type t = (ptx_type)in->type;
  const uint32_t eb = type_bytes(t), nv = in->vec ? in->vec : 1;
  uint64_t addr;
  if (address(l, tid, &in->o[1], &addr)) return -1;
  uint8_t buf[32];
  if (mem_read(l, tid, (ptx_space)in->space, addr, eb * nv, eb * nv, buf)) return -1;
  for (uint32_t i = 0; i < nv; i++) {
    const int reg = in->vec ? in->o[0].vec[i] : in->o[0].reg;
    if (reg < 0) continue;
    uint64_t v = 0;
    memcpy(&v, buf + i * eb, eb);
    if (ptx_type_is_signed(t) && eb < 8) {
      const uint64_t sb = 1ull << (8 * eb - 1);
      v = (v ^ sb) - sb;
    }
    put(l, f, reg, v, 1);
  }
  return 0;
}

static int lane_st(L *l, int tid, const ptx_insn *in) {
  frame *f = top(&l->t[tid]);
  const ptx_type t = (ptx_type)in->type;
  const uint32_t eb = type_bytes(t), nv = in->vec ? in->vec : 1;
  uint64_t addr;
  if (address(l, tid, &in->o[0], &addr)) return -1;
  uint8_t buf[32];
  for (uint32_t i = 0; i < nv; i++) {
    int def = 1;
    uint64_t v;
    if (in->vec) {
      const int reg = in->o[1].vec[i];
      if (reg < 0) return lfail(l, "stores the sink _");
      v = f->r[reg];
      def = f->rdef[reg];
    } else {
      v = get(l, tid, &in->o[1], t, &def);
    }
    if (!def) return lfail(l, "stores an undefined value");
    memcpy(buf + i * eb, &v, eb);
  }
  return mem_write(l, tid, (ptx_space)in->space, addr, eb * nv, eb * nv, buf);
}

static int lane_atom(L *l, int tid, const ptx_insn *in) {
  frame *f = top(&l->t[tid]);
  const ptx_type t = (ptx_type)in->type;
  const uint32_t eb = type_bytes(t);
  const int isred = in->op == OP_RED;
  uint64_t addr;
  if (address(l, tid, &in->o[isred ? 0 : 1], &addr)) return -1;
  int d1, d2 = 1;
  const uint64_t b = get(l, tid, &in->o[isred ? 1 : 2], t, &d1);
  const uint64_t c = in->nops == 4 ? get(l, tid, &in->o[3], t, &d2) : 0;
  if (!d1 || !d2) return lfail(l, "an atomic with an undefined operand");
  uint8_t buf[8];
  l->atomic = 1; /* the read-modify-write is checked once, as an atomic write */
  const int rd = mem_read(l, tid, (ptx_space)(in->space ? in->space : SP_GENERIC), addr, eb, eb, buf);
  l->atomic = 0;
  if (rd) return -1;
  uint64_t old = 0, nv;
  memcpy(&old, buf, eb);
  const uint64_t mk = eb >= 8 ? ~0ull : (1ull << (8 * eb)) - 1;
  const int sgn = ptx_type_is_signed(t);
  switch (in->mode) {
  case M_ADD:
    if (t == T_F32) {
      float a, bb;
      uint32_t u = (uint32_t)old, v = (uint32_t)b;
      memcpy(&a, &u, 4);
      memcpy(&bb, &v, 4);
      a += bb;
      memcpy(&u, &a, 4);
      nv = u;
    } else {
      nv = (old + b) & mk;
    }
    break;
  case M_MIN: nv = sgn ? ((int64_t)old < (int64_t)b ? old : b) : (old < b ? old : b); break;
  case M_MAX: nv = sgn ? ((int64_t)old > (int64_t)b ? old : b) : (old > b ? old : b); break;
  case M_AND: nv = old & b; break;
  case M_OR: nv = old | b; break;
  case M_XOR: nv = old ^ b; break;
  case M_EXCH: nv = b; break;
  case M_CAS: nv = old == b ? c : old; break;
  case M_INC: nv = old >= b ? 0 : old + 1; break;
  case M_DEC: nv = old == 0 || old > b ? b : old - 1; break;
  default: return lfail(l, "unsupported atomic operation");
  }
  memcpy(buf, &nv, eb);
  l->nacc = l->nacc > 0 ? l->nacc - 1 : 0; /* the read-modify-write counts once, as a write */
  l->atomic = 1;
  const int wr = mem_write(l, tid, (ptx_space)(in->space ? in->space : SP_GENERIC), addr, eb, eb, buf);
  l->atomic = 0;
  if (wr) return -1;
  if (!isred) put(l, f, in->o[0].reg, old, 1);
  return 0;
}

static int lane_call(L *l, int tid, const ptx_insn *in) {
  thread *th = &l->t[tid];
  if (th->depth + 1 >= MAXDEPTH) return lfail(l, "calls nested deeper than %d", MAXDEPTH);
  frame *caller = top(th);
  const int fn = in->o[1].sym;
  const ptx_func *callee = &l->m->func[fn];
  if (callee->nformal != in->nops - 2)
    return lfail(l, "calls %s with %d arguments, it takes %d", callee->name, in->nops - 2, callee->nformal);
  frame *nf = &th->fr[th->depth + 1];
  if (frame_init(l, nf, fn)) return -1;
  nf->param = calloc(callee->param_size + 1, 1);
  nf->pdef = calloc(callee->param_size + 1, 1);
  nf->owns_param = 1;
  if (!nf->param || !nf->pdef) return lfail(l, "out of memory");
  for (int i = 0; i < callee->nformal; i++) {
    const ptx_symbol *formal = &l->m->sym[callee->formal[i]], *arg = &l->m->sym[in->o[2 + i].sym];
    if (arg->size != formal->size)
      return lfail(l, "argument %d of %s has %llu bytes, the parameter %llu", i, callee->name,
                   (unsigned long long)arg->size, (unsigned long long)formal->size);
    memcpy(nf->param + formal->addr, caller->param + arg->addr, arg->size);
    memcpy(nf->pdef + formal->addr, caller->pdef + arg->addr, arg->size);
  }
  nf->ret_pc = th->pc + 1;
  nf->ret_sym = in->o[0].kind == K_SYM ? in->o[0].sym : -1;
  if (nf->ret_sym >= 0 && callee->retsym < 0) return lfail(l, "expects a return value %s does not give", callee->name);
  th->depth++;
  th->pc = callee->first;
  return 0;
}

static int lane_ret(L *l, int tid) {
  thread *th = &l->t[tid];
  if (th->depth == 0) {
    th->state = TS_EXIT;
    return 0;
  }
  frame *f = top(th), *caller = &th->fr[th->depth - 1];
  const ptx_func *fn = &l->m->func[f->func];
  if (f->ret_sym >= 0) {
    const ptx_symbol *r = &l->m->sym[fn->retsym], *dst = &l->m->sym[f->ret_sym];
    const uint64_t n = r->size < dst->size ? r->size : dst->size;
    memcpy(caller->param + dst->addr, f->param + r->addr, n);
    memcpy(caller->pdef + dst->addr, f->pdef + r->addr, n);
  }
  th->pc = f->ret_pc;
  frame_free(f);
  th->depth--;
  return 0;
}

/* mov: registers, immediates, special registers, symbol addresses, and packing {a, b} <-> wide registers */
static int lane_mov(L *l, int tid, const ptx_insn *in) {
  frame *f = top(&l->t[tid]);
  const ptx_operand *d = &in->o[0], *s = &in->o[1];
  const ptx_type t = (ptx_type)in->type;
  if (d->kind == K_VEC) { /* unpack */
    int def;
    const uint64_t v = get(l, tid, s, t, &def);
    const int each = ptx_type_bits(t) / d->n;
    for (int i = 0; i < d->n; i++)
      if (d->vec[i] >= 0) put(l, f, d->vec[i], (v >> (each * i)) & ((1ull << each) - 1), def);
    return 0;
  }
  if (s->kind == K_VEC) { /* pack */
    uint64_t v = 0;
    int def = 1;
    const int each = ptx_type_bits(t) / s->n;
    for (int i = 0; i < s->n; i++) {
      if (s->vec[i] < 0) return lfail(l, "packs the sink _");
      def &= f->rdef[s->vec[i]];
      v |= (f->r[s->vec[i]] & ((1ull << each) - 1)) << (each * i);
    }
    put(l, f, d->reg, v, def);
    return 0;
  }
  int def;
  const uint64_t v = get(l, tid, s, t, &def);
  if (d->kind != K_REG) return lfail(l, "mov to something other than a register");
  put(l, f, d->reg, v, def);
  return 0;
}

static int lane_cvta(L *l, int tid, const ptx_insn *in) {
  frame *f = top(&l->t[tid]);
  int def;
  uint64_t v = get(l, tid, &in->o[1], T_U64, &def);
  if (!def) return lfail(l, "cvta of an undefined address");
  /* cvta.space: space -> generic; cvta.to.space: generic -> space */
  const int to = (in->flags & F_TO) != 0;
  const ptx_space sp = (ptx_space)in->space;
  uint64_t base = sp == SP_SHARED ? SHWIN : sp == SP_LOCAL ? LOCWIN : sp == SP_PARAM ? PARWIN : 0;
  if (sp != SP_SHARED && sp != SP_LOCAL && sp != SP_GLOBAL && sp != SP_CONST && sp != SP_PARAM)
    return lfail(l, "cvta of an unsupported state space");
  if (to) {
    if (base && (v < base || v >= base + WINSIZE))
      return lfail(l, "cvta.to.%s of 0x%llx, which is not in that window",
                   sp == SP_SHARED ? "shared" : sp == SP_PARAM ? "param" : "local", (unsigned long long)v);
    if (!base && (v >= PARWIN))
      return lfail(l, "cvta.to.global of a shared or local address 0x%llx", (unsigned long long)v);
    v -= base;
  } else {
    v += base;
  }
  put(l, f, in->o[0].reg, v, 1);
  return 0;
}


/* The FAST_* forms (ptx_internal.h): the same results as ptx_alu gives them, without its generality. */
static inline void lane_fast(L *l, int tid, const ptx_insn *in) {
  frame *f = &l->t[tid].fr[l->t[tid].depth];
  int d1, d2 = 1, d3 = 1;
  const uint64_t a = get(l, tid, &in->o[1], (ptx_type)in->type, &d1);
  const uint64_t b = in->nops > 2 ? get(l, tid, &in->o[2], (ptx_type)in->type, &d2) : 0;
  const uint64_t c = in->nops > 3 ? get(l, tid, &in->o[3], (ptx_type)in->type, &d3) : 0;
  const int ftz = (in->flags & F_FTZ) != 0;
  uint64_t r;
  switch (in->fast) {
  case FAST_F32_FMA:
  case FAST_F32_ADD:
  case FAST_F32_SUB:
  case FAST_F32_MUL: {
    float x = ptx_f32(a), y = ptx_f32(b), z = ptx_f32(c), v;
    if (ftz) x = ptx_ftz(x), y = ptx_ftz(y), z = ptx_ftz(z);
    v = in->fast == FAST_F32_FMA   ? fmaf(x, y, z)
        : in->fast == FAST_F32_ADD ? x + y
        : in->fast == FAST_F32_SUB ? x - y
                                   : x * y;
    r = ptx_bits32(ftz ? ptx_ftz(v) : v);
    break;
  }
  case FAST_INT_ADD: r = a + b; break;
  case FAST_INT_SUB: r = a - b; break;
  case FAST_INT_SHL: {
    const uint64_t sh = b & 0xffffffffu;
    r = sh >= (uint64_t)ptx_type_bits((ptx_type)in->type) ? 0 : a << sh;
    break;
  }
  case FAST_INT_AND: r = a & b; break;
  case FAST_INT_OR: r = a | b; break;
  case FAST_INT_XOR: r = a ^ b; break;
  default: r = a; break; /* FAST_MOV */
  }
  const int bits = ptx_type_bits((ptx_type)in->type);
  if (in->fast != FAST_MOV && bits < 64) r &= (1ull << bits) - 1;
  put(l, f, in->o[0].reg, r, d1 & d2 & d3);
}

/* the ALU instructions: sources read, result (and setp's second predicate) written */
static int lane_alu(L *l, int tid, const ptx_insn *in) {
  thread *th = &l->t[tid];
  frame *f = top(th);
  const int paired = (in->flags & F_PAIR) != 0;
  const int ndst = paired ? 2 : 1;
  uint64_t src[6] = {0};
  int def = 1;
  ptx_type st = (ptx_type)in->type;
  if (in->op == OP_CVT) st = (ptx_type)in->type2;
  for (int i = ndst, k = 0; i < in->nops && k < 6; i++, k++) {
    int d;
    ptx_type ot = st;
    if (in->op == OP_SELP && i == 3) ot = T_PRED;
    if ((in->op == OP_SHL || in->op == OP_SHR) && i == 2) ot = T_U32;
    if ((in->op == OP_BFE && i >= 2) || (in->op == OP_BFI && i >= 3)) ot = T_U32;
    if (in->op == OP_SETP && i == ndst + 2) ot = T_PRED;
    if ((in->op == OP_MUL || in->op == OP_MAD) && (in->flags & F_WIDE) && i == 3) ot = T_U64;
    src[k] = get(l, tid, &in->o[i], ot, &d);
    def &= d;
  }
  uint64_t dst[2] = {0, 0};
  char why[256];
  /* worst-case approximations: the direction varies with the lane and the warp instruction */
  const int approx = !l->x->approx_worst ? 0 : ((l->serial * 2654435761u) ^ (uint32_t)tid) & 1 ? 1 : -1;
  if (def && ptx_alu(in, src, in->nops - ndst, dst, &th->carry, approx, why, sizeof why)) return lfail(l, "%s", why);
  if (in->o[0].kind == K_REG) put(l, f, in->o[0].reg, dst[0], def);
  if (paired && in->o[1].kind == K_REG) put(l, f, in->o[1].reg, dst[1], def);
  return 0;
}

/* Runs one non-collective instruction for one lane whose guard holds; advances its pc. */
static int lane_exec(L *l, int tid, const ptx_insn *in) {
  thread *th = &l->t[tid];
  if (in->fast) {
    lane_fast(l, tid, in);
    th->pc++;
    return 0;
  }
  int rc = 0, advance = 1;
  switch ((ptx_op)in->op) {
  case OP_MOV: rc = lane_mov(l, tid, in); break;
  case OP_LD: rc = lane_ld(l, tid, in); break;
  case OP_ST: rc = lane_st(l, tid, in); break;
  case OP_CVTA: rc = lane_cvta(l, tid, in); break;
  case OP_ATOM:
  case OP_RED: rc = lane_atom(l, tid, in); break;
  case OP_BRA:
    th->pc = in->o[0].sym;
    advance = 0;
    break;
  case OP_CALL:
    rc = lane_call(l, tid, in);
    advance = 0;
    break;
  case OP_RET:
    rc = lane_ret(l, tid);
    advance = 0;
    break;
  case OP_EXIT:
    th->state = TS_EXIT;
    advance = 0;
    break;
  case OP_CPASYNC: rc = cp_issue(l, tid, in); break;
  case OP_CPCOMMIT:
    for (int i = 0; i < th->ncp; i++)
      if (th->cp[i].group < 0) th->cp[i].group = th->committed;
    th->committed++;
    break;
  case OP_CPWAIT:
  case OP_CPWAITALL: {
    if (in->op == OP_CPWAITALL) {
      for (int i = 0; i < th->ncp; i++)
        if (th->cp[i].group < 0) th->cp[i].group = th->committed;
      th->committed++;
    }
    const int64_t nwait = in->op == OP_CPWAIT ? in->o[0].imm : 0;
    if (nwait < 0) return lfail(l, "cp.async.wait_group of a negative count");
    rc = cp_land(l, tid, th->committed - 1 - (int)nwait);
    break;
  }
  case OP_MEMBAR: break;
  case OP_FENCE:
    if (in->flags & F_PROXYASYNC) l->h->fence[tid] = l->serial;
    if (in->flags & (F_PROXYASYNC | F_MBARINIT)) l->h->mbfence[tid] = l->serial;
    break;
  case OP_MBAR:
    rc = lane_mbar(l, tid, in);
    if (rc == 1) rc = 0, advance = 0;
    break;
  case OP_TMA: rc = !in->num ? bulk_copy(l, tid, in) : in->mode == 1 ? tma_load(l, tid, in) : tma_store(l, tid, in); break;
  case OP_WGFENCE: th->wgfenced = 1; break;
  case OP_WGCOMMIT: rc = wg_commit(l, tid); break;
  case OP_WGWAIT: rc = wg_wait(l, tid, in->o[0].imm); break;
  case OP_NOP: case OP_SETMAXNREG: case OP_BULKCOMMIT: case OP_BULKWAIT: break;
  default: rc = lane_alu(l, tid, in); break;
  }
  if (advance && !rc) th->pc++;
  return rc;
}

/* ---- warp collectives ---- */

/* the member mask operand, the same in every lane of the group */
static int member_mask(L *l, const int *lanes, int n, int w, const ptx_operand *o, uint32_t *mask) {
  for (int i = 0; i < n; i++) {
    int def;
    const uint32_t v = (uint32_t)get(l, w * 32 + lanes[i], o, T_U32, &def);
    if (!def) return lfail(l, "the member mask is undefined");
    if (i && v != *mask) return lfail(l, "lanes disagree on the member mask (0x%x, 0x%x)", *mask, v);
    *mask = v;
  }
  return 0;
}

/* lanes named by mask must all be in the group, and the group's lanes in the mask */
static int check_members(L *l, int w, uint32_t mask, uint32_t group, const char *what) {
  const unsigned live = l->nthreads - (unsigned)w * 32 < 32 ? l->nthreads - (unsigned)w * 32 : 32;
  const uint32_t exists = live == 32 ? 0xffffffffu : (1u << live) - 1;
  if (mask & ~exists) return lfail(l, "%s names lanes beyond the block (mask 0x%08x)", what, mask);
  if (group & ~mask)
    return lfail(l, "%s: lanes 0x%08x execute it without being in its mask 0x%08x", what, group & ~mask, mask);
  const uint32_t missing = mask & ~group;
  if (missing) {
    const int lane = __builtin_ctz(missing);
    const thread *t = &l->t[w * 32 + lane];
    return lfail(l, "warp divergence at %s: lane %d of its mask is %s", what, lane,
                 t->state == TS_EXIT ? "exited" : t->state == TS_BAR ? "waiting at bar.sync" : "elsewhere");
  }
  return 0;
}

COLD static int elect_exec(L *l, int w, const int *lanes, int n, uint32_t group, const ptx_insn *in) {
  const int base = w * 32;
  uint32_t mask = 0;
  if (member_mask(l, lanes, n, w, &in->o[2], &mask) || check_members(l, w, mask, group, "elect.sync")) return -1;
  if (!mask) return lfail(l, "elect.sync with an empty member mask");
  const int leader = __builtin_ctz(mask); /* the lowest lane of the mask */
  for (int i = 0; i < n; i++) {
    frame *f = top(&l->t[base + lanes[i]]);
    if (in->o[0].kind == K_REG) put(l, f, in->o[0].reg, (uint64_t)leader, 1);
    if (in->o[1].kind == K_REG) put(l, f, in->o[1].reg, (uint64_t)(lanes[i] == leader), 1);
  }
  return 0;
}

COLD static int stmatrix_exec(L *l, int w, uint32_t group, const ptx_insn *in) {
  const int base = w * 32;
  if (check_members(l, w, 0xffffffffu, group, "stmatrix (.aligned: the whole warp)")) return -1;
  const int nm = in->num;
  uint16_t mat[4][8][8];
  for (int lane = 0; lane < 32; lane++) {
    const frame *f = top(&l->t[base + lane]);
    for (int k = 0; k < nm; k++) {
      const int r = in->o[1].vec[k];
      if (r < 0 || !f->rdef[r]) {
        l->cur_tid = base + lane;
        return lfail(l, "stmatrix of an undefined register");
      }
      const uint16_t lo = (uint16_t)f->r[r], hi = (uint16_t)(f->r[r] >> 16);
      if (in->flags & F_TRANS) {
        mat[k][2 * (lane % 4)][lane / 4] = lo;
        mat[k][2 * (lane % 4) + 1][lane / 4] = hi;
      } else {
        mat[k][lane / 4][2 * (lane % 4)] = lo;
        mat[k][lane / 4][2 * (lane % 4) + 1] = hi;
      }
    }
  }
  for (int i = 0; i < nm; i++)
    for (int r = 0; r < 8; r++) {
      const int lane = 8 * i + r;
      uint64_t addr;
      l->cur_tid = base + lane;
      if (address(l, base + lane, &in->o[0], &addr) ||
          mem_write(l, base + lane, SP_SHARED, addr, 16, 16, (const uint8_t *)mat[i][r]))
        return -1;
    }
  return 0;
}

static int warp_collective(L *l, int w, const int *lanes, int n, const ptx_insn *in) {
  uint32_t group = 0;
  for (int i = 0; i < n; i++) group |= 1u << lanes[i];
  const int base = w * 32;
  if (l->h->wgthreads)
    for (int i = 0; i < n; i++)
      if (l->t[base + lanes[i]].wgn) {
        l->cur_tid = base + lanes[i];
        if (wg_check(l, base + lanes[i], in)) return -1;
      }
  char why[256];
  switch ((ptx_op)in->op) {
  case OP_BARWARP: {
    uint32_t mask = 0;
    if (member_mask(l, lanes, n, w, &in->o[0], &mask) || check_members(l, w, mask, group, "bar.warp.sync")) return -1;
    break;
  }
  case OP_SHFL: {
    const int pair = (in->flags & F_PAIR) != 0, s0 = pair ? 2 : 1;
    uint32_t mask = 0;
    if (member_mask(l, lanes, n, w, &in->o[s0 + 3], &mask) || check_members(l, w, mask, group, "shfl.sync")) return -1;
    uint64_t a[32];
    int adef[32];
    for (int i = 0; i < n; i++) a[lanes[i]] = get(l, base + lanes[i], &in->o[s0], T_B32, &adef[lanes[i]]);
    for (int i = 0; i < n; i++) {
      const int lane = lanes[i];
      int d1, d2;
      const uint32_t b = (uint32_t)get(l, base + lane, &in->o[s0 + 1], T_U32, &d1);
      const uint32_t c = (uint32_t)get(l, base + lane, &in->o[s0 + 2], T_U32, &d2);
      if (!d1 || !d2) return lfail(l, "shfl.sync with an undefined lane or clamp operand");
      const uint32_t bval = b & 0x1f, cval = c & 0x1f, seg = (c >> 8) & 0x1f;
      const uint32_t maxl = ((uint32_t)lane & seg) | (cval & ~seg), minl = (uint32_t)lane & seg;
      int j, pval;
      switch (in->mode) {
      case M_UP: j = lane - (int)bval; pval = j >= (int)maxl; break;
      case M_DOWN: j = lane + (int)bval; pval = j <= (int)maxl; break;
      case M_BFLY: j = lane ^ (int)bval; pval = j <= (int)maxl; break;
      default: j = (int)(minl | (bval & ~seg)); pval = j <= (int)maxl; break;
      }
      if (!pval) j = lane;
      if (j < 0 || j > 31 || !(mask & (1u << j)))
        return lfail(l, "shfl.sync: lane %d reads lane %d, which is not in the member mask", lane, j);
      frame *f = top(&l->t[base + lane]);
      if (in->o[0].kind == K_REG) put(l, f, in->o[0].reg, a[j], adef[j]);
      if (pair && in->o[1].kind == K_REG) put(l, f, in->o[1].reg, (uint64_t)pval, 1);
    }
    break;
  }
  case OP_VOTE: {
    uint32_t mask = 0;
    if (member_mask(l, lanes, n, w, &in->o[2], &mask) || check_members(l, w, mask, group, "vote.sync")) return -1;
    uint32_t ballot = 0;
    for (int i = 0; i < n; i++) {
      int def;
      const uint64_t p = get(l, base + lanes[i], &in->o[1], T_PRED, &def);
      if (!def) return lfail(l, "vote.sync of an undefined predicate");
      if (p & 1) ballot |= 1u << lanes[i];
    }
    uint64_t r;
    switch (in->mode) {
    case M_ANY: r = ballot != 0; break;
    case M_ALL: r = ballot == mask; break;
    case M_UNIV: r = ballot == 0 || ballot == mask; break;
    default: r = ballot; break;
    }
    for (int i = 0; i < n; i++) put(l, top(&l->t[base + lanes[i]]), in->o[0].reg, r, 1);
    break;
  }
  case OP_LDMATRIX: {
    if (check_members(l, w, 0xffffffffu, group, "ldmatrix (.aligned: the whole warp)")) return -1;
    const int nm = in->num;
    uint16_t mat[4][8][8];
    for (int i = 0; i < nm; i++)
      for (int r = 0; r < 8; r++) {
        const int lane = 8 * i + r;
        uint64_t addr;
        l->cur_tid = base + lane;
        if (address(l, base + lane, &in->o[1], &addr)) return -1;
        uint8_t buf[16] = {0};
        if (mem_read(l, base + lane, SP_SHARED, addr, 16, 16, buf)) return -1;
        memcpy(mat[i][r], buf, 16);
      }
    for (int i = 0; i < n; i++) {
      const int lane = lanes[i];
      frame *f = top(&l->t[base + lane]);
      for (int k = 0; k < nm; k++) {
        uint16_t lo, hi;
        if (in->flags & F_TRANS) {
          lo = mat[k][2 * (lane % 4)][lane / 4];
          hi = mat[k][2 * (lane % 4) + 1][lane / 4];
        } else {
          lo = mat[k][lane / 4][2 * (lane % 4)];
          hi = mat[k][lane / 4][2 * (lane % 4) + 1];
        }
        if (in->o[0].vec[k] >= 0) put(l, f, in->o[0].vec[k], ((uint64_t)hi << 16) | lo, 1);
      }
    }
    break;
  }
  case OP_MMA: {
    if (check_members(l, w, 0xffffffffu, group, "mma.sync (.aligned: the whole warp)")) return -1;
    uint32_t A[32][4] = {{0}}, B[32][2] = {{0}}, C[32][4] = {{0}}, D[32][4];
    for (int lane = 0; lane < 32; lane++) {
      frame *f = top(&l->t[base + lane]);
      l->cur_tid = base + lane;
      for (int k = 0; k < in->o[1].n; k++) {
        if (in->o[1].vec[k] < 0 || !f->rdef[in->o[1].vec[k]])
          return lfail(l, "mma.sync: an A fragment register is undefined");
        A[lane][k] = (uint32_t)f->r[in->o[1].vec[k]];
      }
      for (int k = 0; k < in->o[2].n; k++) {
        if (in->o[2].vec[k] < 0 || !f->rdef[in->o[2].vec[k]])
          return lfail(l, "mma.sync: a B fragment register is undefined");
        B[lane][k] = (uint32_t)f->r[in->o[2].vec[k]];
      }
      for (int k = 0; k < 4; k++) {
        if (in->o[3].vec[k] < 0 || !f->rdef[in->o[3].vec[k]])
          return lfail(l, "mma.sync: an accumulator register is undefined");
        C[lane][k] = (uint32_t)f->r[in->o[3].vec[k]];
      }
    }
    if (ptx_mma(in, (const uint32_t(*)[4])A, (const uint32_t(*)[2])B, (const uint32_t(*)[4])C, D, why, sizeof why))
      return lfail(l, "%s", why);
    for (int lane = 0; lane < 32; lane++)
      for (int k = 0; k < 4; k++) put(l, top(&l->t[base + lane]), in->o[0].vec[k], D[lane][k], 1);
    break;
  }
  case OP_WGMMA:
    if (wgmma_exec(l, w, group, in)) return -1;
    break;
  case OP_ELECT:
    if (elect_exec(l, w, lanes, n, group, in)) return -1;
    break;
  case OP_STMATRIX:
    if (stmatrix_exec(l, w, group, in)) return -1;
    break;
  default: return lfail(l, "not a collective");
  }
  for (int i = 0; i < n; i++) l->t[base + lanes[i]].pc++;
  l->wsync[w]++; /* the lanes passed it together: their later accesses follow their earlier ones */
  l->x->st.collectives++;
  return 0;
}

static int is_collective(int op) {
  return op == OP_SHFL || op == OP_VOTE || op == OP_BARWARP || op == OP_LDMATRIX || op == OP_MMA || op == OP_WGMMA ||
         op == OP_ELECT || op == OP_STMATRIX;
}

/* ---- scheduling ---- */

COLD static int bar_operands(L *l, int tid, const ptx_insn *in);

/* Runs warp w until none of its lanes can go on (all at a barrier or exited). */
static int run_warp(L *l, int w) {
  const int base = w * 32;
  const int live = (int)l->nthreads - base < 32 ? (int)l->nthreads - base : 32;
  for (;;) {
    int minpc = -1;
    for (int i = 0; i < live; i++) {
      const thread *t = &l->t[base + i];
      if (t->state == TS_RUN && (minpc < 0 || t->pc < minpc)) minpc = t->pc;
    }
    if (minpc < 0) return 0;
    const ptx_insn *in = &l->m->insn[minpc];
    l->cur_pc = minpc;
    l->serial++;
    int lanes[32], n = 0;
    for (int i = 0; i < live; i++) {
      thread *t = &l->t[base + i];
      if (t->state != TS_RUN || t->pc != minpc) continue;
      l->cur_tid = base + i;
      if (in->guard >= 0) {
        frame *f = top(t);
        if (!f->rdef[in->guard])
          return lfail(l, "the guard predicate %s is undefined", l->m->func[f->func].regname[in->guard]);
        if (((f->r[in->guard] & 1) != 0) == in->guard_neg) {
          t->pc++;
          continue;
        }
      }
      lanes[n++] = i;
    }
    l->x->st.warp_insns += n > 0;
    l->x->st.thread_insns += (uint64_t)n;
    if (!n) continue;
    if (is_collective(in->op)) {
      l->cur_tid = base + lanes[0];
      if (warp_collective(l, w, lanes, n, in)) return -1;
      account(l, in->op == OP_LDMATRIX);
      continue;
    }
    if (in->op == OP_BAR || in->op == OP_BARRED || in->op == OP_BARARRIVE) {
      for (int i = 0; i < n; i++) {
        thread *t = &l->t[base + lanes[i]];
        l->cur_tid = base + lanes[i];
        if (bar_operands(l, base + lanes[i], in)) return -1;
        if (in->op == OP_BARARRIVE) { /* counted, and the thread goes on */
          t->pc++;
          continue;
        }
        if (in->op == OP_BARRED) {
          int def;
          const uint64_t p = get(l, base + lanes[i], &in->o[2], T_PRED, &def);
          if (!def) return lfail(l, "bar.red of an undefined predicate");
          t->barpred = (int)(p & 1);
        }
        t->state = TS_BAR;
      }
      continue;
    }
    if (__builtin_expect(l->h->wgthreads != 0, 0)) /* registers awaiting wgmma results: off limits */
      for (int i = 0; i < n; i++) {
        l->cur_tid = base + lanes[i];
        if (l->t[base + lanes[i]].wgn && wg_check(l, base + lanes[i], in)) return -1;
      }
    for (int i = 0; i < n; i++) {
      l->cur_tid = base + lanes[i];
      if (lane_exec(l, base + lanes[i], in)) return -1;
    }
    account(l, 0);
  }
}

/* bar.sync / bar.arrive a{, b}: the barrier a and its thread count b (the block's: 0) into the thread; an arrive is
 * counted */
COLD static int bar_operands(L *l, int tid, const ptx_insn *in) {
  thread *t = &l->t[tid];
  t->barid = t->barcnt = 0;
  if (in->op == OP_BARRED) return 0; /* bar.red: barrier 0 of the whole block (release checks) */
  int d1 = 1, d2 = 1;
  const uint64_t id = get(l, tid, &in->o[0], T_U32, &d1), cnt = in->nops == 2 ? get(l, tid, &in->o[1], T_U32, &d2) : 0;
  if (!d1 || !d2) return lfail(l, "a barrier with an undefined id or thread count");
  if (id > 15) return lfail(l, "barrier %llu (0 to 15)", (unsigned long long)id);
  if (in->nops == 2 && (cnt == 0 || cnt % 32 || cnt > l->nthreads))
    return lfail(l, "a barrier thread count of %llu (a multiple of 32, at most the block's %u)", (unsigned long long)cnt,
                 l->nthreads);
  t->barid = (int)id;
  /* barrier 0 of the whole block: every thread that has not exited (as bar.sync 0 always was); a named barrier
   * waits for its count, or for every thread of the block */
  t->barcnt = id == 0 && (cnt == 0 || cnt == l->nthreads) ? 0 : cnt ? (int)cnt : (int)l->nthreads;
  if (in->op == OP_BARARRIVE) {
    if (!t->barcnt) return lfail(l, "bar.arrive needs a thread count below the block's");
    if (++l->h->arrived[id] == t->barcnt) l->h->arrived[id] = 0; /* every thread arrived, none waits */
  }
  return 0;
}

/* Named barriers (an id other than 0, or a thread count): each barrier whose waiting threads and bar.arrive arrivals
 * make its count goes on. A release counts as the block's barrier for the race checks: accesses on either side of it
 * are ordered for every thread, also for threads it did not include (races across a partial barrier are not
 * found). 1 when one was released, 0 none, -1 an error. */
COLD static int named_release(L *l) {
  unsigned live = 0;
  for (unsigned i = 0; i < l->nthreads; i++) live += l->t[i].state != TS_EXIT;
  int released = 0;
  for (int id = 0; id < 16; id++) {
    int nw = 0, cnt = -1, first = -1;
    for (unsigned i = 0; i < l->nthreads; i++) {
      const thread *t = &l->t[i];
      if (t->state != TS_BAR || t->barid != id) continue;
      const int c = t->barcnt ? t->barcnt : (int)live;
      if (cnt >= 0 && c != cnt) {
        l->cur_tid = (int)i;
        l->cur_pc = t->pc;
        return lfail(l, "threads wait at barrier %d for %d threads (thread %d) and for %d", id, cnt, first, c);
      }
      cnt = c, nw++;
      if (first < 0) first = (int)i;
    }
    if (!nw || nw + l->h->arrived[id] < cnt) continue;
    if (nw + l->h->arrived[id] > cnt) {
      l->cur_tid = first;
      l->cur_pc = l->t[first].pc;
      return lfail(l, "barrier %d: %d threads arrive, more than its count of %d", id, nw + l->h->arrived[id], cnt);
    }
    for (unsigned i = 0; i < l->nthreads; i++) {
      thread *t = &l->t[i];
      if (t->state != TS_BAR || t->barid != id) continue;
      t->state = TS_RUN;
      t->pc++;
    }
    l->h->arrived[id] = 0;
    l->epoch++;
    l->x->st.barriers++;
    released = 1;
  }
  return released;
}

/* threads wait at barriers that can never complete */
COLD static int bar_deadlock(L *l) {
  for (unsigned i = 0; i < l->nthreads; i++) {
    const thread *t = &l->t[i];
    if (t->state != TS_BAR) continue;
    int nw = 0;
    for (unsigned k = 0; k < l->nthreads; k++) nw += l->t[k].state == TS_BAR && l->t[k].barid == t->barid;
    l->cur_tid = (int)i;
    l->cur_pc = t->pc;
    return lfail(l, "deadlock: waits at barrier %d for %d threads; %d wait there and %d arrived, and no other thread "
                    "can run", t->barid, t->barcnt, nw, l->h->arrived[t->barid]);
  }
  return 0;
}

/* every live thread waits at a barrier: they must wait at the same one; all go on */
static int release(L *l) {
  int pc = -1, first = -1;
  int any = 0, sum = 0, all = 1;
  for (unsigned i = 0; i < l->nthreads; i++) {
    thread *t = &l->t[i];
    if (t->state != TS_BAR) continue;
    if (pc < 0) pc = t->pc, first = (int)i;
    if (t->pc != pc) {
      l->cur_pc = t->pc;
      l->cur_tid = (int)i;
      return lfail(l, "barrier divergence: thread %d waits at line %d, this thread at another barrier", first,
                   l->m->insn[pc].line);
    }
    any |= t->barpred;
    all &= t->barpred;
    sum += t->barpred;
  }
  if (pc < 0) return 0;
  const ptx_insn *in = &l->m->insn[pc];
  l->cur_pc = pc;
  l->cur_tid = -1;
  const ptx_operand *id = &in->o[in->op == OP_BARRED ? 1 : 0];
  if (id->kind != K_IMM || id->imm != 0) return lfail(l, "only barrier 0 is supported");
  if (in->op == OP_BAR && in->nops == 2) {
    if (in->o[1].kind != K_IMM || (unsigned)in->o[1].imm != l->nthreads)
      return lfail(l, "bar.sync with a thread count other than the block's");
  }
  for (unsigned i = 0; i < l->nthreads; i++) {
    thread *t = &l->t[i];
    if (t->state != TS_BAR) continue;
    if (in->op == OP_BARRED) {
      const uint64_t r = in->bop == M_OR ? (uint64_t)any : in->bop == M_AND ? (uint64_t)all : (uint64_t)sum;
      put(l, top(t), in->o[0].reg, r, 1);
    }
    t->state = TS_RUN;
    t->pc++;
  }
  l->epoch++;
  l->x->st.barriers++;
  return 0;
}

static void shuffle(unsigned *a, unsigned n, unsigned seed) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (unsigned i = n; i > 1; i--) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    const unsigned j = (unsigned)(s % i);
    const unsigned x = a[i - 1];
    a[i - 1] = a[j];
    a[j] = x;
  }
}

static void orders(unsigned *a, unsigned n, unsigned order, unsigned salt) {
  for (unsigned i = 0; i < n; i++) a[i] = order == 1 ? n - 1 - i : i;
  if (order >= 2) shuffle(a, n, order * 7919u + salt);
}

/* a resident block: its threads, shared memory and barrier state, swapped into L while it runs */
typedef struct {
  unsigned bid;
  int live;
  thread *t;
  uint8_t *smem;
  shadow *sh;
  uint32_t *wsync, epoch;
  hstate h;
} slot;

static void slot_enter(L *l, const slot *s) {
  l->bid = s->bid;
  l->t = s->t;
  l->smem = s->smem;
  l->sh = s->sh;
  l->wsync = s->wsync;
  l->epoch = s->epoch;
  l->h = (hstate *)&s->h;
  l->cur_pc = -1;
  l->cur_tid = -1;
}

/* what a block left of its sm_90 state: copies in flight, wgmma reads, mbarriers */
static void hstate_clear(hstate *h, unsigned nthreads) {
  for (int i = 0; i < h->ntma; i++) {
    free(h->tma[i].chunk);
    free(h->tma[i].data);
  }
  for (int i = 0; i < h->nwr; i++) free(h->wr[i].chunk);
  h->ntma = h->nwr = h->nmb = 0;
  h->used = h->wgthreads = 0;
  memset(h->arrived, 0, sizeof h->arrived);
  if (h->fence) memset(h->fence, 0, nthreads * sizeof *h->fence);
  if (h->mbfence) memset(h->mbfence, 0, nthreads * sizeof *h->mbfence);
}

/* block bid starts in slot s */
static void block_start(L *l, slot *s, int entry, unsigned bid) {
  s->bid = bid;
  s->epoch = 0;
  s->live = 1;
  memset(s->wsync, 0, l->nwarps * sizeof *s->wsync);
  memset(s->sh, 0, l->smem_size * sizeof *s->sh);
  hstate_clear(&s->h, l->nthreads);
  const ptx_func *fn = &l->m->func[entry];
  for (unsigned i = 0; i < l->nthreads; i++) {
    thread *t = &s->t[i];
    t->pc = fn->first;
    t->depth = 0;
    t->state = TS_RUN;
    t->carry = 0;
    t->ncp = 0;
    t->committed = 0;
    t->wgn = t->wgfenced = t->wgissued = t->wggroups = t->wgdone = 0;
    if (t->wgseq) memset(t->wgseq, 0xff, ((size_t)fn->nregs + 1) * sizeof *t->wgseq);
    frame *f = &t->fr[0];
    memset(f->rdef, 0, (size_t)fn->nregs);
    memset(f->ldef, 0, fn->local_size);
    memset(f->pdef + fn->formal_size, 0, fn->param_size - fn->formal_size);
  }
}

/* every thread is blocked and thread mwait waits on an mbarrier phase nothing can complete */
COLD static int deadlock(L *l, int mwait, int waiting) {
  const thread *t = &l->t[mwait];
  const mbarrier *b = mb_find(l, t->mboff);
  char sbuf[128], want[48];
  if (t->mbtok >= 0) snprintf(want, sizeof want, "phase %lld", (long long)t->mbtok);
  else snprintf(want, sizeof want, "the phase of parity %d", t->mbpar);
  l->cur_tid = mwait;
  l->cur_pc = t->pc;
  return lfail(l, "deadlock: waits on the mbarrier at shared %u for %s, which can never complete: it is at %s, "
                  "no copy is in flight, and no thread can run (%d at bar.sync)", t->mboff, want,
               b ? mb_state(b, sbuf, sizeof sbuf) : "(invalid)", waiting);
}

/* Runs the block in slot s up to its next barrier (released) or its end (s->live = 0). 0, or -1 on an error. */
static int block_step(L *l, slot *s, unsigned *worder) {
  slot_enter(l, s);
  for (;;) {
    for (unsigned k = 0; k < l->nwarps; k++)
      if (run_warp(l, (int)worder[k])) return -1;
    if (!l->h->used) break;
    /* mbarrier waits: the threads whose phase has come go on; when none can, the bulk copies in flight land (as
     * late as possible: data read before its phase completes is found in flight) */
    int woke = mb_wake(l);
    if (woke < 0) return -1;
    if (woke) continue;
    if (l->h->ntma) {
      if (tma_land(l)) return -1;
      woke = mb_wake(l);
      if (woke < 0) return -1;
      if (woke) continue;
    }
    break;
  }
  int waiting = 0, mwait = -1, named = 0;
  for (unsigned i = 0; i < l->nthreads; i++) {
    const thread *t = &l->t[i];
    waiting += t->state == TS_BAR;
    named |= t->state == TS_BAR && (t->barid || t->barcnt);
    if (t->state == TS_MBAR && mwait < 0) mwait = (int)i;
  }
  if (named) {
    const int rc = named_release(l);
    s->epoch = l->epoch;
    if (rc) return rc < 0 ? -1 : 0;
  }
  if (mwait >= 0) return deadlock(l, mwait, waiting); /* nothing can complete the phase it waits for */
  if (named) return bar_deadlock(l);
  if (waiting) {
    const int rc = release(l);
    s->epoch = l->epoch;
    return rc;
  }
  s->live = 0;
  for (unsigned i = 0; i < l->nthreads; i++) {
    thread *t = &l->t[i];
    while (t->depth > 0) frame_free(&t->fr[t->depth--]);
    if (t->ncp) {
      l->cur_tid = (int)i;
      l->cur_pc = -1;
      return lfail(l, "thread %u exited with %d cp.async copies it never waited for", i, t->ncp);
    }
    if (t->wgn || t->wgissued > (t->wggroups ? t->wgend[t->wggroups - 1] : 0)) {
      l->cur_tid = (int)i;
      l->cur_pc = -1;
      return lfail(l, "thread %u exited with wgmma.mma_async results it never waited for (or never committed)", i);
    }
  }
  if (l->h->ntma) {
    l->cur_tid = l->h->tma[0].tid;
    l->cur_pc = -1;
    return lfail(l, "the block ended with the cp.async.bulk.tensor of line %d in flight (its mbarrier never waited "
                    "on)", l->h->tma[0].line);
  }
  return 0;
}

static uint64_t xorshift(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

int ptx_launch(ptx_machine *x, const char *entry, const ptx_launch_cfg *cfg, const void *params, size_t len,
               char *err, size_t errlen) {
  const ptx_module *m = x->m;
  int e = -1;
  for (int i = 0; i < m->nfunc; i++)
    if (m->func[i].entry && m->func[i].defined && !strcmp(m->func[i].name, entry)) e = i;
  if (e < 0) {
    snprintf(err, errlen, "no entry %s in the module", entry);
    return -1;
  }
  const ptx_func *fn = &m->func[e];
  if (len != fn->formal_size) {
    snprintf(err, errlen, "%s takes %llu bytes of parameters, %zu given", entry, (unsigned long long)fn->formal_size,
             len);
    return -1;
  }
  if (cfg->block == 0 || cfg->block > 1024 || cfg->grid == 0) {
    snprintf(err, errlen, "launch of %u blocks of %u threads", cfg->grid, cfg->block);
    return -1;
  }
  if (fn->maxntid && cfg->block > (unsigned)fn->maxntid) {
    snprintf(err, errlen, "%s allows %d threads a block (.maxntid), %u launched", entry, fn->maxntid, cfg->block);
    return -1;
  }
  const uint64_t smem = m->dyn_base + cfg->dyn_smem;
  if (smem > 227 * 1024) {
    snprintf(err, errlen, "%llu bytes of shared memory a block, more than any GPU has", (unsigned long long)smem);
    return -1;
  }
  x->launch++;
  const unsigned nres = cfg->resident == 0 ? 4 : cfg->resident, nslot = nres < cfg->grid ? nres : cfg->grid;
  L l;
  memset(&l, 0, sizeof l);
  l.x = x;
  l.m = m;
  l.cfg = cfg;
  l.nthreads = cfg->block;
  l.nwarps = (cfg->block + 31) / 32;
  l.err = err;
  l.errlen = errlen;
  l.smem_size = smem;
  l.cur_pc = -1;
  l.cur_tid = -1;
  slot *sl = calloc(nslot, sizeof *sl);
  unsigned *border = calloc(cfg->grid, sizeof *border), *worder = calloc(l.nwarps, sizeof *worder);
  int rc = -1;
  if (!sl || !border || !worder) {
    snprintf(err, errlen, "out of memory");
    goto out;
  }
  for (unsigned k = 0; k < nslot; k++) {
    slot *s = &sl[k];
    s->t = calloc(cfg->block, sizeof *s->t);
    s->smem = calloc(smem + 1, 1);
    s->sh = calloc(smem + 1, sizeof *s->sh);
    s->wsync = calloc(l.nwarps, sizeof *s->wsync);
    s->h.fence = calloc(cfg->block, sizeof *s->h.fence);
    s->h.mbfence = calloc(cfg->block, sizeof *s->h.mbfence);
    if (!s->t || !s->smem || !s->sh || !s->wsync || !s->h.fence || !s->h.mbfence) {
      snprintf(err, errlen, "out of memory");
      goto out;
    }
    /* each thread's entry frame: the kernel's parameters, then its call sites' .param variables */
    for (unsigned i = 0; i < cfg->block; i++) {
      frame *f = &s->t[i].fr[0];
      if (frame_init(&l, f, e)) goto out;
      f->param = malloc(fn->param_size + 1);
      f->pdef = calloc(fn->param_size + 1, 1);
      f->owns_param = 1;
      if (!f->param || !f->pdef) {
        snprintf(err, errlen, "out of memory");
        goto out;
      }
      memcpy(f->param, params, len);
      memset(f->pdef, 1, len);
    }
  }
  orders(border, cfg->grid, cfg->order, 1);
  orders(worder, l.nwarps, cfg->order, 2);
  /* the first blocks resident, in the launch's order; then each step runs one resident block to its next barrier:
   * round robin (reversed for order 1) or, for a shuffled order, a seeded random pick among the resident blocks */
  unsigned next = 0, live = 0;
  for (; next < nslot; next++, live++) block_start(&l, &sl[next], e, border[next]);
  uint64_t rs = (uint64_t)cfg->order * 0x9e3779b97f4a7c15ull + 3;
  unsigned turn = 0;
  rc = 0;
  while (live > 0 && !rc) {
    unsigned k;
    if (cfg->order >= 2) {
      unsigned pick = (unsigned)(xorshift(&rs) % live);
      for (k = 0; k < nslot && (!sl[k].live || pick-- > 0); k++) {}
    } else {
      do k = cfg->order == 1 ? nslot - 1 - turn++ % nslot : turn++ % nslot;
      while (!sl[k].live);
    }
    rc = block_step(&l, &sl[k], worder);
    if (!rc && !sl[k].live) {
      if (next < cfg->grid) block_start(&l, &sl[k], e, border[next++]);
      else live--;
    }
  }
out:
  if (sl)
    for (unsigned k = 0; k < nslot; k++) {
      slot *s = &sl[k];
      if (s->t)
        for (unsigned i = 0; i < cfg->block; i++) {
          thread *t = &s->t[i];
          for (int d = t->depth; d >= 0; d--) frame_free(&t->fr[d]);
          free(t->cp);
          free(t->wgend);
          free(t->wgseq);
          free(t->wgval);
          free(t->wgkind);
          free(t->wgregs);
        }
      hstate_clear(&s->h, 0);
      free(s->h.mb);
      free(s->h.tma);
      free(s->h.wr);
      free(s->h.fence);
      free(s->h.mbfence);
      free(s->t);
      free(s->smem);
      free(s->sh);
      free(s->wsync);
    }
  free(sl);
  free(border);
  free(worder);
  return rc;
}
