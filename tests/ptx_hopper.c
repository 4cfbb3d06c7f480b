/* ptx_hopper: the PTX interpreter's sm_90 instructions on hand-written kernels, each against a plain C reference:
 * wgmma.mma_async m64nNk16 (f16 and bf16) with both operands in shared memory under each swizzle mode, K-major and
 * MN-major, and with A from registers; cp.async.bulk.tensor boxes through a tensor map (ptx_tmap.h) with
 * out-of-bounds elements (zero or NaN), 2-d swizzled and 3-d, and a TMA store past the tensor's edges; mbarrier
 * phases flipping, waited on by parity and by state token, arrive counts; TMA feeding wgmma; elect.sync, stmatrix;
 * ptx_tmap_encode's refusals. And each misuse the hardware leaves undefined, reported as an error: accumulators read
 * before their wait_group, results never waited for, plain stores read by wgmma or a TMA store without
 * fence.proxy.async, a wgmma with no wgmma.fence, a wait on the wrong mbarrier phase, a wait that can never complete
 * (one arrival too many, bytes never delivered), TMA data read before its phase, TMA into a stage a wgmma still
 * reads, a map not from ptx_tmap_encode, an uninitialised mbarrier, an illegal setmaxnreg count. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "internal.h"
#include "ptx/ptx.h"
#include "ptx/ptx_tmap.h"

static const char HEAD[] = ".version 8.0\n.target sm_90a\n.address_size 64\n";

/* a growing PTX text */
typedef struct {
  char s[65536];
  size_t n;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const int w = vsnprintf(t->s + t->n, sizeof t->s - t->n, fmt, ap);
  va_end(ap);
  if (w > 0) t->n += (size_t)w < sizeof t->s - t->n ? (size_t)w : sizeof t->s - t->n - 1;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static int small_int(void) { /* -8 .. 8: products and their sums stay exact in f32 */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (int)(rng % 17) - 8;
}
static uint16_t to16(float v, int bf) { return bf ? attn_f32_to_bf16(v) : attn_f32_to_f16(v); }

/* runs entry k of text over one block; params as bytes; 0 or -1 with err */
typedef struct {
  ptx_machine *x;
  ptx_module *m;
} dev;

static int dev_open(dev *d, const text *t, char *err, size_t len) {
  d->m = ptx_parse(t->s, err, len);
  d->x = d->m ? ptx_machine_new(d->m, err, len) : NULL;
  return d->x ? 0 : -1;
}
static void dev_close(dev *d) {
  ptx_machine_free(d->x);
  ptx_module_free(d->m);
}
static uint64_t dev_buf(dev *d, const void *src, size_t len, const char *name) {
  const uint64_t a = ptx_alloc(d->x, len, name);
  if (a && src && ptx_copy_in(d->x, a, src, len)) return 0;
  return a;
}
static int dev_run(dev *d, unsigned threads, uint64_t dyn, const void *params, size_t len, char *err, size_t elen) {
  const ptx_launch_cfg c = {.grid = 1, .block = threads, .dyn_smem = dyn, .order = 0};
  return ptx_launch(d->x, "k", &c, params, len, err, elen);
}

/* ---- wgmma with both operands in shared memory ---- */

enum { SW_NONE, SW_32, SW_64, SW_128 };
static const int SW_BYTES[] = {16, 32, 64, 128};
static const uint64_t DESC_MODE[] = {0, 3, 2, 1}; /* the descriptor's layout type: 1 128B, 2 64B, 3 32B */

/* offset of element (r, k) of a K-major rows x K operand at base: the rows of each K block of sw/2 elements at a
 * pitch of sw bytes, 16-byte chunks XOR the row's index within its 128-byte lines (the layout a TMA box of sw-byte
 * rows writes); SW_NONE: 8x8 core matrices, 8-row groups 128 bytes apart, K-halves of a step rows*16 apart */
static uint32_t kmajor_at(int mode, uint32_t base, int rows, int r, int k) {
  if (mode == SW_NONE) return base + (uint32_t)((k / 8) * rows * 16 + (r / 8) * 128 + (r % 8) * 16 + (k % 8) * 2);
  const int sw = SW_BYTES[mode], per = sw / 2, kb = k / per, kk = k % per;
  const uint32_t row = base + (uint32_t)(kb * rows * sw + r * sw);
  const int lines = 128 / sw; /* rows per 128-byte line */
  const int chunk = (kk * 2 / 16) ^ ((r / lines) % (sw / 16));
  return row + (uint32_t)(chunk * 16 + kk * 2 % 16);
}
/* the descriptor of K step s (16 elements) of that layout */
static uint64_t kmajor_desc(int mode, uint32_t base, int rows, int s) {
  uint32_t start, lbo = 1, sbo;
  if (mode == SW_NONE) {
    start = base + (uint32_t)(2 * s * rows * 16);
    lbo = (uint32_t)(rows * 16);
    sbo = 128;
  } else {
    const int sw = SW_BYTES[mode], per = sw / 2;
    start = base + (uint32_t)((16 * s / per) * rows * sw + (16 * s % per) * 2);
    sbo = (uint32_t)(8 * sw);
  }
  return (uint64_t)(start >> 4) | (uint64_t)(lbo >> 4) << 16 | (uint64_t)(sbo >> 4) << 32 | DESC_MODE[mode] << 62;
}
/* an N-major K x N operand (B stored row by row of N, as V; or A M-major): swizzled, rows of the swizzle's width
 * (sw/2 elements of N) sw bytes apart per column block (blocks K*sw apart), the 16-byte chunks XOR the row's index
 * within its 128-byte lines; SW_NONE: 8x8 core matrices, N-groups 128 apart, K-groups (N/8)*128 apart */
static uint32_t nmajor_at(int mode, uint32_t base, int n_all, int kdim, int k, int n) {
  if (mode == SW_NONE)
    return base + (uint32_t)((n / 8) * 128 + (k / 8) * (n_all / 8) * 128 + (k % 8) * 16 + (n % 8) * 2);
  const int sw = SW_BYTES[mode], per = sw / 2, lines = 128 / sw;
  const int chunk = ((n % per) * 2 / 16) ^ ((k / lines) % (sw / 16));
  return base + (uint32_t)((n / per) * kdim * sw + k * sw + chunk * 16 + n * 2 % 16);
}
static uint64_t nmajor_desc(int mode, uint32_t base, int n_all, int kdim, int s) {
  uint32_t start, lbo, sbo;
  if (mode == SW_NONE) {
    lbo = (uint32_t)(n_all / 8 * 128);
    start = base + 2 * (uint32_t)s * lbo;
    sbo = 128;
  } else {
    const int sw = SW_BYTES[mode];
    start = base + (uint32_t)(s * 16 * sw);
    lbo = (uint32_t)(kdim * sw);
    sbo = (uint32_t)(8 * sw);
  }
  return (uint64_t)(start >> 4) | (uint64_t)(lbo >> 4) << 16 | (uint64_t)(sbo >> 4) << 32 | DESC_MODE[mode] << 62;
}

/* the kernel: 128 threads copy an image into shared memory (plain stores), fence.proxy.async, bar.sync; then one
 * wgmma per K step (descriptors from a table, A from registers when rega) chained on the accumulators, scale-d
 * false on the first; one commit, wait_group `wait`; each thread stores its N/2 accumulators */
enum { NO_PROXY_FENCE = 1, NO_WG_FENCE = 2, WAIT_ONE = 4, READ_BEFORE_WAIT = 8, NO_WAIT = 16 };
static void wgmma_kernel(text *t, int n, int bf, int steps, int rega, int trans, int flaws) {
  const int transb = trans & 1, transa = trans >> 1;
  t->n = 0;
  put(t, "%s.extern .shared .align 1024 .b8 sm[];\n", HEAD);
  put(t, ".visible .entry k(.param .u64 pimg, .param .u32 pbytes, .param .u64 pdesc, .param .u64 pafr, "
         ".param .u64 pout)\n{\n.reg .b32 %%r<32>;\n.reg .b64 %%rd<32>;\n.reg .pred %%p<8>;\n.reg .f32 %%f<130>;\n");
  put(t, "ld.param.u64 %%rd1, [pimg];\nld.param.u32 %%r1, [pbytes];\nld.param.u64 %%rd2, [pdesc];\n"
         "ld.param.u64 %%rd3, [pafr];\nld.param.u64 %%rd4, [pout];\nmov.u32 %%r3, %%tid.x;\nshl.b32 %%r4, %%r3, 4;\n"
         "mov.u32 %%r9, sm;\n$Lcp:\nsetp.ge.u32 %%p1, %%r4, %%r1;\n@%%p1 bra $Lcpd;\ncvt.u64.u32 %%rd8, %%r4;\n"
         "add.s64 %%rd9, %%rd1, %%rd8;\nld.global.v4.u32 {%%r5, %%r6, %%r7, %%r8}, [%%rd9];\n"
         "add.s32 %%r10, %%r9, %%r4;\nst.shared.v4.u32 [%%r10], {%%r5, %%r6, %%r7, %%r8};\nadd.s32 %%r4, %%r4, 2048;\n"
         "bra $Lcp;\n$Lcpd:\n");
  if (!(flaws & NO_PROXY_FENCE)) put(t, "fence.proxy.async.shared::cta;\n");
  put(t, "bar.sync 0;\n");
  if (rega) put(t, "mul.wide.u32 %%rd10, %%r3, 16;\nadd.s64 %%rd11, %%rd3, %%rd10;\n"
                   "ld.global.v4.u32 {%%r11, %%r12, %%r13, %%r14}, [%%rd11];\n");
  put(t, "mov.u32 %%r15, 0;\n");
  if (!(flaws & NO_WG_FENCE)) put(t, "wgmma.fence.sync.aligned;\n");
  put(t, "$Lk:\nsetp.ne.u32 %%p2, %%r15, 0;\nmul.wide.u32 %%rd12, %%r15, 16;\nadd.s64 %%rd13, %%rd2, %%rd12;\n"
         "ld.global.v2.u64 {%%rd14, %%rd15}, [%%rd13];\n");
  put(t, "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s {", n, bf ? "bf16" : "f16", bf ? "bf16" : "f16");
  for (int i = 0; i < n / 2; i++) put(t, "%s%%f%d", i ? ", " : "", i);
  if (rega) put(t, "}, {%%r11, %%r12, %%r13, %%r14}, %%rd15, %%p2, 1, 1, %d;\n", transb);
  else put(t, "}, %%rd14, %%rd15, %%p2, 1, 1, %d, %d;\n", transa, transb);
  if (flaws & READ_BEFORE_WAIT) put(t, "add.f32 %%f129, %%f0, %%f1;\n");
  put(t, "add.u32 %%r15, %%r15, 1;\nsetp.lt.u32 %%p3, %%r15, %d;\n@%%p3 bra $Lk;\n", steps);
  put(t, "wgmma.commit_group.sync.aligned;\n");
  if (flaws & NO_WAIT) { /* nothing waits for the results, nothing reads them */
    put(t, "ret;\n}\n");
    return;
  }
  put(t, "wgmma.wait_group.sync.aligned %d;\n", flaws & WAIT_ONE ? 1 : 0);
  put(t, "mul.wide.u32 %%rd16, %%r3, %d;\nadd.s64 %%rd17, %%rd4, %%rd16;\n", n * 2);
  for (int i = 0; i < n / 2; i++) put(t, "st.global.f32 [%%rd17+%d], %%f%d;\n", 4 * i, i);
  put(t, "ret;\n}\n");
}

/* D = A B^T (A: 64 x K, Bt: N x K) through the kernel; mode for both operands, K-major, or B N-major (trans 1), A
 * M-major (trans 2) */
static void check_wgmma(const char *what, int n, int bf, int kdim, int mode, int trans, int rega, int flaws,
                        const char *want) {
  const int transb = trans & 1, transa = trans >> 1;
  const int steps = kdim / 16;
  float *a = malloc(sizeof(float) * 64 * (size_t)kdim), *b = malloc(sizeof(float) * (size_t)n * (size_t)kdim);
  /* a swizzled K block is a whole row of the swizzle's width, however few of its elements K uses */
  const int sw = SW_BYTES[mode], rowbytes = (kdim * 2 + sw - 1) / sw * sw;
  const uint32_t abytes = (uint32_t)(64 * rowbytes), bbase = (abytes + 1023) / 1024 * 1024,
                 per = (uint32_t)(mode == SW_NONE ? 8 : sw / 2),
                 bytes = bbase + (uint32_t)(transb ? ((uint32_t)n + per - 1) / per * per * (uint32_t)kdim * 2
                                                   : (uint32_t)(n * rowbytes));
  uint8_t *img = calloc(bytes, 1);
  uint64_t *desc = calloc((size_t)steps * 2, sizeof *desc);
  uint32_t *afr = calloc(128 * 4, sizeof *afr);
  float *out = calloc((size_t)128 * (size_t)n / 2, sizeof *out);
  if (!a || !b || !img || !desc || !afr || !out) {
    CHECK(0, "%s: out of memory", what);
    goto done;
  }
  for (int i = 0; i < 64 * kdim; i++) a[i] = (float)small_int() * (bf ? 1.0f : 0.5f);
  for (int i = 0; i < n * kdim; i++) b[i] = (float)small_int();
  for (int r = 0; r < 64; r++)
    for (int k = 0; k < kdim; k++) {
      const uint16_t h = to16(a[r * kdim + k], bf);
      memcpy(img + (transa ? nmajor_at(mode, 0, 64, kdim, k, r) : kmajor_at(mode, 0, 64, r, k)), &h, 2);
    }
  for (int c = 0; c < n; c++)
    for (int k = 0; k < kdim; k++) {
      const uint16_t h = to16(b[c * kdim + k], bf);
      memcpy(img + (transb ? nmajor_at(mode, bbase, n, kdim, k, c) : kmajor_at(mode, bbase, n, c, k)), &h, 2);
    }
  for (int s = 0; s < steps; s++) {
    desc[2 * s] = transa ? nmajor_desc(mode, 0, 64, kdim, s) : kmajor_desc(mode, 0, 64, s);
    desc[2 * s + 1] = transb ? nmajor_desc(mode, bbase, n, kdim, s) : kmajor_desc(mode, bbase, n, s);
  }
  /* register A (one K step): mma.sync's A fragment per warp, warp w holding rows 16w.. */
  for (int tid = 0; tid < 128; tid++) {
    const int w = tid / 32, g = tid % 32 / 4, tq = tid % 4;
    for (int q = 0; q < 4; q++) {
      const int row = 16 * w + g + 8 * (q & 1), col = 2 * tq + 8 * (q >> 1);
      afr[4 * tid + q] = to16(a[row * kdim + col], bf) | (uint32_t)to16(a[row * kdim + col + 1], bf) << 16;
    }
  }
  text *t = malloc(sizeof *t);
  char err[1024] = "";
  dev d = {0};
  if (!t) goto done;
  wgmma_kernel(t, n, bf, steps, rega, trans, flaws);
  int rc = dev_open(&d, t, err, sizeof err);
  struct __attribute__((packed)) {
    uint64_t img;
    uint32_t bytes;
    uint32_t pad;
    uint64_t desc, afr, out;
  } prm = {0};
  if (!rc) {
    prm.img = dev_buf(&d, img, bytes, "img");
    prm.bytes = (bytes + 15) / 16 * 16;
    prm.desc = dev_buf(&d, desc, (size_t)steps * 16, "desc");
    prm.afr = dev_buf(&d, afr, 128 * 16, "afr");
    prm.out = dev_buf(&d, NULL, (size_t)128 * (size_t)n * 2, "out");
    rc = dev_run(&d, 128, bytes, &prm, sizeof prm, err, sizeof err);
  }
  if (want) {
    CHECK(rc == -1 && strstr(err, want), "%s: rc %d, \"%s\" (want \"%s\")", what, rc, err, want);
  } else if (!rc && !ptx_copy_out(d.x, prm.out, out, (size_t)128 * (size_t)n * 2, NULL)) {
    long bad = 0;
    for (int tid = 0; tid < 128; tid++)
      for (int i = 0; i < n / 2; i++) {
        const int lane = tid % 32, row = 16 * (tid / 32) + lane / 4 + 8 * ((i / 2) % 2),
                  col = 8 * (i / 4) + 2 * (lane % 4) + i % 2;
        double ref = 0;
        for (int k = 0; k < (rega ? 16 : kdim); k++) ref += (double)a[row * kdim + k] * b[col * kdim + k];
        bad += out[tid * n / 2 + i] != (float)ref;
      }
    CHECK(bad == 0, "%s: %ld of %d products differ from the reference", what, bad, 64 * n);
  } else {
    CHECK(0, "%s: %s", what, err);
  }
  dev_close(&d);
  free(t);
done:
  free(a);
  free(b);
  free(img);
  free(desc);
  free(afr);
  free(out);
}

/* ---- cp.async.bulk.tensor and mbarriers ---- */

/* 32 threads: thread 0 initialises the mbarrier (count 1), arrives with expect_tx and issues the copy of the box at
 * coordinates c; everyone waits on the phase's parity and copies the box out; twice (the barrier's phases 0 and
 * 1), the second box at coordinates c2 into the same buffer */
enum { NO_WAIT1 = 1, WRONG_PARITY2 = 2, EXTRA_TX = 4, SYMBOL_MAP = 8, NAN_FILL = 16, BAD_MAP = 32, NO_INIT_FENCE = 64 };
static void tma_kernel(text *t, int rank, int flaws) {
  t->n = 0;
  put(t, "%s.shared .align 8 .b64 bar;\n.extern .shared .align 1024 .b8 sm[];\n", HEAD);
  put(t, ".visible .entry k(.param .align 64 .b8 tm[128], .param .u64 pout, .param .u32 pbytes, "
         ".param .align 4 .b8 pc[24])\n{\n.reg .b32 %%r<40>;\n.reg .b64 %%rd<16>;\n.reg .pred %%p<8>;\n");
  put(t, "mov.b64 %%rd1, tm;\ncvta.param.u64 %%rd2, %%rd1;\nld.param.u64 %%rd3, [pout];\n"
         "ld.param.u32 %%r7, [pbytes];\nmov.u32 %%r8, %%tid.x;\nmov.u32 %%r9, bar;\nmov.u32 %%r10, sm;\n"
         "setp.eq.u32 %%p1, %%r8, 0;\n@%%p1 mbarrier.init.shared::cta.b64 [%%r9], 1;\n%sbar.sync 0;\n",
      flaws & NO_INIT_FENCE ? "" : "@%p1 fence.mbarrier_init.release.cluster;\n");
  for (int i = 0; i < 6; i++) put(t, "ld.param.s32 %%r%d, [pc+%d];\n", 20 + i, 4 * i);
  if (flaws & EXTRA_TX) put(t, "add.u32 %%r7, %%r7, 16;\n");
  for (int round = 0; round < 2; round++) {
    put(t, "@%%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%%r9], %%r7;\n");
    put(t, "@%%p1 cp.async.bulk.tensor.%dd.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%%r10], [%s, {",
        rank, flaws & SYMBOL_MAP ? "tm" : "%rd2");
    for (int i = 0; i < rank; i++) put(t, "%s%%r%d", i ? ", " : "", 20 + 3 * round + i);
    put(t, "}], [%%r9];\n");
    const int parity = round ^ (round == 1 && (flaws & WRONG_PARITY2));
    if (!(round == 0 && (flaws & NO_WAIT1)))
      put(t, "$Lw%d:\nmbarrier.try_wait.parity.shared::cta.b64 %%p2, [%%r9], %d;\n@!%%p2 bra $Lw%d;\n", round, parity,
          round);
    put(t, "shl.b32 %%r11, %%r8, 2;\n$Lc%d:\nsetp.ge.u32 %%p3, %%r11, %%r7;\n@%%p3 bra $Lcd%d;\n"
           "add.s32 %%r12, %%r10, %%r11;\nld.shared.u32 %%r13, [%%r12];\nmov.u32 %%r14, %%r11;\n", round, round);
    if (round) put(t, "add.u32 %%r14, %%r14, %%r7;\n");
    put(t, "cvt.u64.u32 %%rd4, %%r14;\nadd.s64 %%rd5, %%rd3, %%rd4;\nst.global.u32 [%%rd5], %%r13;\n"
           "add.u32 %%r11, %%r11, 128;\nbra $Lc%d;\n$Lcd%d:\nbar.sync 0;\n", round, round);
  }
  put(t, "ret;\n}\n");
}

/* the box at c, as the copy leaves it in shared memory: elements in box order, out-of-bounds ones zero, rows of
 * 128 bytes with their 16-byte chunks XOR the row index % 8 when swizzled (128B) */
static long tma_expect(const float *g, int rank, const uint64_t *dims, const uint32_t *box, const int32_t *c, int sw,
                       int bf, uint16_t oobv, uint8_t *out) {
  const int es = 2;
  uint32_t nel = 1;
  uint64_t total = 1;
  for (int i = 0; i < rank; i++) total *= dims[i];
  uint8_t *sec = calloc(total * 2 / 32 + 1, 1); /* the 32-byte sectors of the tensor the copy reads */
  long nsec = 0;
  for (int i = 0; i < rank; i++) nel *= box[i];
  for (uint32_t j = 0; j < nel; j++) {
    uint32_t rem = j;
    int oob = 0;
    uint64_t lin = 0, mul = 1;
    for (int i = 0; i < rank; i++) {
      const int64_t x = c[i] + (int64_t)(rem % box[i]);
      rem /= box[i];
      oob |= x < 0 || x >= (int64_t)dims[i];
      lin += (uint64_t)x * mul;
      mul *= dims[i];
    }
    const uint16_t h = oob ? oobv : to16(g[lin], bf);
    if (!oob && sec && !sec[lin * 2 / 32]) sec[lin * 2 / 32] = 1, nsec++;
    uint32_t at = j * es;
    if (sw) at = (at / 128) * 128 + ((((at % 128) / 16) ^ ((at / 128) % 8)) * 16) + at % 16;
    memcpy(out + at, &h, 2);
  }
  free(sec);
  return nsec;
}

static void check_tma(const char *what, int rank, const uint64_t *dims, const uint32_t *box, const int32_t *c1,
                      const int32_t *c2, int sw, int flaws, const char *want) {
  uint64_t total = 1;
  uint32_t nel = 1;
  for (int i = 0; i < rank; i++) total *= dims[i], nel *= box[i];
  const uint32_t bytes = nel * 2;
  float *g = malloc(sizeof(float) * total);
  uint16_t *g16 = malloc(2 * total);
  uint8_t *exp = calloc(2 * (size_t)bytes, 1), *out = calloc(2 * (size_t)bytes, 1);
  text *t = malloc(sizeof *t);
  dev d = {0};
  char err[1024] = "";
  if (!g || !g16 || !exp || !out || !t) {
    CHECK(0, "%s: out of memory", what);
    goto done;
  }
  for (uint64_t i = 0; i < total; i++) g[i] = (float)small_int(), g16[i] = to16(g[i], 1);
  tma_kernel(t, rank, flaws);
  int rc = dev_open(&d, t, err, sizeof err);
  struct __attribute__((packed)) {
    uint8_t tm[128];
    uint64_t out;
    uint32_t bytes;
    int32_t c[6];
  } prm;
  memset(&prm, 0, sizeof prm);
  uint64_t ga = 0;
  if (!rc) {
    ga = dev_buf(&d, g16, 2 * total, "tensor");
    uint64_t strides[4];
    uint32_t es1[5] = {1, 1, 1, 1, 1};
    for (int i = 1; i < rank; i++) strides[i - 1] = (i == 1 ? dims[0] : dims[i - 1] * strides[i - 2] / 2) * 2;
    rc = ptx_tmap_encode(prm.tm, PTX_TMAP_BF16, (unsigned)rank, ga, dims, strides, box, es1, 0,
                         sw ? PTX_TMAP_SWIZZLE_128B : PTX_TMAP_SWIZZLE_NONE, 0, flaws & NAN_FILL ? PTX_TMAP_OOB_NAN : 0,
                         err, sizeof err);
    if (flaws & BAD_MAP) prm.tm[0] ^= 1;
    prm.out = dev_buf(&d, NULL, 2 * (size_t)bytes, "out");
    prm.bytes = bytes;
    for (int i = 0; i < 3; i++) prm.c[i] = i < rank ? c1[i] : 0, prm.c[3 + i] = i < rank ? c2[i] : 0;
    if (!rc) rc = dev_run(&d, 32, bytes, &prm, sizeof prm, err, sizeof err);
  }
  if (want) {
    CHECK(rc == -1 && strstr(err, want), "%s: rc %d, \"%s\" (want \"%s\")", what, rc, err, want);
  } else if (!rc && !ptx_copy_out(d.x, prm.out, out, 2 * (size_t)bytes, NULL)) {
    const uint16_t oobv = flaws & NAN_FILL ? 0x7fff : 0;
    const long nsec = tma_expect(g, rank, dims, box, c1, sw, 1, oobv, exp) +
                      tma_expect(g, rank, dims, box, c2, sw, 1, oobv, exp + bytes);
    long bad = 0;
    for (uint32_t i = 0; i < 2 * bytes; i++) bad += exp[i] != out[i];
    CHECK(bad == 0, "%s: %ld of %u bytes differ from the box", what, bad, 2 * bytes);
    /* the copies' traffic: the sectors of their in-bounds elements, as one instruction each */
    ptx_buffer_stats bs;
    CHECK(!ptx_buffer_stats_of(d.x, ga, &bs) && bs.read_sectors == (uint64_t)nsec && bs.read_insns == 2,
          "%s: %llu sectors read in %llu instructions, %ld expected in 2", what, (unsigned long long)bs.read_sectors,
          (unsigned long long)bs.read_insns, nsec);
  } else {
    CHECK(0, "%s: %s", what, err);
  }
  dev_close(&d);
done:
  free(g);
  free(g16);
  free(exp);
  free(out);
  free(t);
}

/* ---- TMA feeding wgmma: a 64 x 64 tile loaded 128B-swizzled, D = T T^T from the same stage, then the stage
 * reloaded (after the wgmma's wait_group, or, flawed, before it) ---- */
static void check_tma_wgmma(const char *what, int early_reload, const char *want) {
  text *t = malloc(sizeof *t);
  float g[64 * 64];
  uint16_t g16[64 * 64];
  float out[128 * 32];
  dev d = {0};
  char err[1024] = "";
  if (!t) return;
  for (int i = 0; i < 64 * 64; i++) g[i] = (float)small_int(), g16[i] = to16(g[i], 1);
  t->n = 0;
  put(t, "%s.shared .align 8 .b64 bar;\n.extern .shared .align 1024 .b8 sm[];\n", HEAD);
  put(t, ".visible .entry k(.param .align 64 .b8 tm[128], .param .u64 pout)\n{\n.reg .b32 %%r<40>;\n"
         ".reg .b64 %%rd<40>;\n.reg .pred %%p<8>;\n.reg .f32 %%f<40>;\n");
  put(t, "mov.b64 %%rd1, tm;\ncvta.param.u64 %%rd2, %%rd1;\nld.param.u64 %%rd3, [pout];\nmov.u32 %%r8, %%tid.x;\n"
         "mov.u32 %%r9, bar;\nmov.u32 %%r10, sm;\nmov.u32 %%r1, 0;\nsetp.eq.u32 %%p1, %%r8, 0;\n"
         "@%%p1 mbarrier.init.shared::cta.b64 [%%r9], 1;\n@%%p1 fence.proxy.async.shared::cta;\nbar.sync 0;\n"
         "@%%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%%r9], 8192;\n"
         "@%%p1 cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%%r10], "
         "[%%rd2, {%%r1, %%r1}], [%%r9];\n"
         "$Lw0:\nmbarrier.try_wait.parity.shared::cta.b64 %%p2, [%%r9], 0;\n@!%%p2 bra $Lw0;\n");
  /* descriptors: start = sm (>> 4), SBO 1024, 128B swizzle; K step s at +32 bytes */
  put(t, "cvt.u64.u32 %%rd4, %%r10;\nshr.u64 %%rd4, %%rd4, 4;\nor.b64 %%rd4, %%rd4, %llu;\n",
      (unsigned long long)((1ull << 16) | (64ull << 32) | (1ull << 62)));
  put(t, "wgmma.fence.sync.aligned;\n");
  for (int s = 0; s < 4; s++) {
    put(t, "add.s64 %%rd%d, %%rd4, %d;\n", 10 + s, 2 * s);
    put(t, "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {");
    for (int i = 0; i < 32; i++) put(t, "%s%%f%d", i ? ", " : "", i);
    put(t, "}, %%rd%d, %%rd%d, %d, 1, 1, 0, 0;\n", 10 + s, 10 + s, s > 0);
  }
  put(t, "wgmma.commit_group.sync.aligned;\n");
  if (!early_reload) put(t, "wgmma.wait_group.sync.aligned 0;\nbar.sync 0;\n");
  put(t, "@%%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%%r9], 8192;\n"
         "@%%p1 cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%%r10], "
         "[%%rd2, {%%r1, %%r1}], [%%r9];\n");
  if (early_reload) put(t, "wgmma.wait_group.sync.aligned 0;\n");
  put(t, "$Lw1:\nmbarrier.try_wait.parity.shared::cta.b64 %%p2, [%%r9], 1;\n@!%%p2 bra $Lw1;\n"
         "mul.wide.u32 %%rd20, %%r8, 128;\nadd.s64 %%rd21, %%rd3, %%rd20;\n");
  for (int i = 0; i < 32; i++) put(t, "st.global.f32 [%%rd21+%d], %%f%d;\n", 4 * i, i);
  put(t, "ret;\n}\n");
  int rc = dev_open(&d, t, err, sizeof err);
  struct __attribute__((packed)) {
    uint8_t tm[128];
    uint64_t out;
  } prm;
  memset(&prm, 0, sizeof prm);
  if (!rc) {
    const uint64_t ga = dev_buf(&d, g16, sizeof g16, "tile"), dims[2] = {64, 64}, st[1] = {128};
    const uint32_t box[2] = {64, 64}, es1[2] = {1, 1};
    rc = ptx_tmap_encode(prm.tm, PTX_TMAP_BF16, 2, ga, dims, st, box, es1, 0, PTX_TMAP_SWIZZLE_128B, 0, 0, err,
                         sizeof err);
    prm.out = dev_buf(&d, NULL, sizeof out, "out");
    if (!rc) rc = dev_run(&d, 128, 8192, &prm, sizeof prm, err, sizeof err);
  }
  if (want) {
    CHECK(rc == -1 && strstr(err, want), "%s: rc %d, \"%s\" (want \"%s\")", what, rc, err, want);
  } else if (!rc && !ptx_copy_out(d.x, prm.out, out, sizeof out, NULL)) {
    long bad = 0;
    for (int tid = 0; tid < 128; tid++)
      for (int i = 0; i < 32; i++) {
        const int lane = tid % 32, row = 16 * (tid / 32) + lane / 4 + 8 * ((i / 2) % 2),
                  col = 8 * (i / 4) + 2 * (lane % 4) + i % 2;
        double ref = 0;
        for (int k = 0; k < 64; k++) ref += (double)g[row * 64 + k] * g[col * 64 + k];
        bad += out[tid * 32 + i] != (float)ref;
      }
    CHECK(bad == 0, "%s: %ld of 4096 products differ from the reference", what, bad);
  } else {
    CHECK(0, "%s: %s", what, err);
  }
  dev_close(&d);
  free(t);
}

/* ---- elect.sync, stmatrix, setmaxnreg ---- */

static void check_small(void) {
  text *t = malloc(sizeof *t);
  char err[1024] = "";
  dev d = {0};
  if (!t) return;
  for (int trans = 0; trans < 2; trans++) {
    t->n = 0;
    put(t, "%s.extern .shared .align 1024 .b8 sm[];\n.visible .entry k(.param .u64 pout)\n{\n.reg .b32 %%r<40>;\n"
           ".reg .b64 %%rd<16>;\n.reg .pred %%p<4>;\nld.param.u64 %%rd1, [pout];\nmov.u32 %%r1, %%tid.x;\n"
           "setmaxnreg.dec.sync.aligned.u32 40;\nsetmaxnreg.inc.sync.aligned.u32 232;\n"
           "elect.sync %%r2|%%p1, 0xffffffff;\nselp.u32 %%r3, 1, 0, %%p1;\nmul.wide.u32 %%rd2, %%r1, 8;\n"
           "add.s64 %%rd3, %%rd1, %%rd2;\nst.global.v2.u32 [%%rd3], {%%r2, %%r3};\n"
           "shl.b32 %%r4, %%r1, 8;\nadd.u32 %%r5, %%r4, 1;\nadd.u32 %%r6, %%r4, 2;\nadd.u32 %%r7, %%r4, 3;\n"
           "add.u32 %%r24, %%r4, 0x10000;\nmov.u32 %%r8, sm;\nshl.b32 %%r9, %%r1, 4;\nadd.u32 %%r10, %%r8, %%r9;\n"
           "stmatrix.sync.aligned.m8n8.x4%s.shared.b16 [%%r10], {%%r24, %%r5, %%r6, %%r7};\nbar.sync 0;\n"
           "ld.shared.v4.u32 {%%r11, %%r12, %%r13, %%r14}, [%%r10];\nmul.wide.u32 %%rd4, %%r1, 16;\n"
           "add.s64 %%rd5, %%rd1, %%rd4;\nst.global.v4.u32 [%%rd5+256], {%%r11, %%r12, %%r13, %%r14};\nret;\n}\n",
        HEAD, trans ? ".trans" : "");
    uint64_t out;
    uint32_t res[64 + 128];
    int rc = dev_open(&d, t, err, sizeof err);
    if (!rc) {
      out = dev_buf(&d, NULL, sizeof res, "out");
      rc = dev_run(&d, 32, 512, &out, sizeof out, err, sizeof err);
    }
    if (!rc && !ptx_copy_out(d.x, out, res, sizeof res, NULL)) {
      long bad = 0;
      for (int lane = 0; lane < 32; lane++) bad += res[2 * lane] != 0 || res[2 * lane + 1] != (lane == 0);
      CHECK(bad == 0, "elect.sync: %ld lanes got another leader than lane 0", bad);
      /* matrix i row r at shared 16 (8i + r); element (r, c) from lane 4r + c/2 (trans: 4c + r/2), register i,
       * half c % 2 (trans: r % 2); lane L register i holds L << 8 | i, +0x10000 for register 0's high half...
       * the halves: lo = (L << 8 | i) & 0xffff, hi = (L << 8 | i) >> 16 (0, or 1 for register 0) */
      const uint16_t *sm16 = (const uint16_t *)(res + 64);
      bad = 0;
      for (int i = 0; i < 4; i++)
        for (int r = 0; r < 8; r++)
          for (int c = 0; c < 8; c++) {
            const int lane = trans ? 4 * c + r / 2 : 4 * r + c / 2, half = trans ? r % 2 : c % 2;
            const uint32_t v = (uint32_t)lane << 8 | (uint32_t)i | (i == 0 ? 0x10000u : 0);
            bad += sm16[(8 * i + r) * 8 + c] != (uint16_t)(half ? v >> 16 : v);
          }
      CHECK(bad == 0, "stmatrix%s: %ld of 256 elements misplaced", trans ? ".trans" : "", bad);
    } else {
      CHECK(0, "elect/stmatrix: %s", err);
    }
    dev_close(&d);
  }
  /* setmaxnreg: a multiple of 8 from 24 to 256, else refused when loaded */
  t->n = 0;
  put(t, "%s.visible .entry k()\n{\nsetmaxnreg.inc.sync.aligned.u32 100;\nret;\n}\n", HEAD);
  ptx_module *m = ptx_parse(t->s, err, sizeof err);
  CHECK(!m && strstr(err, "multiple of 8"), "setmaxnreg 100: %s", m ? "accepted" : err);
  ptx_module_free(m);
  free(t);
}

/* ptx_tmap_encode refuses what cuTensorMapEncodeTiled refuses */
static void check_encode(void) {
  uint8_t map[128];
  char err[256] = "";
  const uint64_t dims[2] = {100, 10}, st_bad[1] = {200}, st[1] = {208};
  const uint32_t box[2] = {64, 8}, box_wide[2] = {128, 8}, es[2] = {1, 1};
  CHECK(ptx_tmap_encode(map, PTX_TMAP_BF16, 2, 0x1000, dims, st_bad, box, es, 0, 0, 0, 0, err, sizeof err) &&
            strstr(err, "multiple of 16"), "a stride of 200 bytes: %s", err);
  CHECK(ptx_tmap_encode(map, PTX_TMAP_BF16, 2, 0x1000, dims, st, box_wide, es, 0, PTX_TMAP_SWIZZLE_128B, 0, 0, err,
                        sizeof err) &&
            strstr(err, "exceeds"), "a 256-byte box row under the 128B swizzle: %s", err);
  CHECK(ptx_tmap_encode(map, PTX_TMAP_BF16, 2, 0x1008, dims, st, box, es, 0, 0, 0, 0, err, sizeof err) &&
            strstr(err, "aligned"), "an address 8 bytes off 16: %s", err);
  CHECK(!ptx_tmap_encode(map, PTX_TMAP_BF16, 2, 0x1000, dims, st, box, es, 0, PTX_TMAP_SWIZZLE_128B, 0, 0, err,
                         sizeof err), "a good map: %s", err);
}

/* 64 threads: thread 0 arrives for 32 (arrive's count), threads 32..63 once each; they wait with the state arrive
 * returned (test_wait), threads 1..31 on the phase's parity (try_wait with a time hint); twice. Misuse: one
 * arrival too many, an arrive count above what the phase awaits, a barrier never initialised. */
static void check_mbarrier_tokens(void) {
  for (int v = 0; v < 4; v++) {
    text *t = malloc(sizeof *t);
    char err[1024] = "";
    dev d = {0};
    if (!t) return;
    t->n = 0;
    put(t, "%s.shared .align 8 .b64 bar;\n.visible .entry k(.param .u64 pout)\n{\n.reg .b32 %%r<20>;\n"
           ".reg .b64 %%rd<20>;\n.reg .pred %%p<8>;\nld.param.u64 %%rd1, [pout];\nmov.u32 %%r1, %%tid.x;\n"
           "mov.u32 %%r2, bar;\nsetp.eq.u32 %%p1, %%r1, 0;\nsetp.ge.u32 %%p2, %%r1, %d;\n", HEAD, v == 1 ? 31 : 32);
    if (v != 2) put(t, "@%%p1 mbarrier.init.shared::cta.b64 [%%r2], 64;\n");
    /* each arrival is counted in global memory first (atomics: no race): a waiter released early sees fewer */
    put(t, "bar.sync 0;\nmov.u32 %%r5, 0;\n$Lphase:\n@%%p1 atom.global.add.u32 %%r10, [%%rd1+512], 32;\n"
           "@%%p2 atom.global.add.u32 %%r10, [%%rd1+512], 1;\n"
           "@%%p1 mbarrier.arrive.shared::cta.b64 %%rd2, [%%r2], %d;\n"
           "@%%p2 mbarrier.arrive.release.cta.shared::cta.b64 %%rd2, [%%r2];\n", v == 3 ? 65 : 32);
    /* threads 1..31 did not arrive: they wait on the parity of the phase instead */
    put(t, "setp.eq.u32 %%p4, %%r1, 0;\nor.pred %%p4, %%p4, %%p2;\n@!%%p4 bra $Lpar;\n$Lw:\n"
           "mbarrier.test_wait.shared::cta.b64 %%p3, [%%r2], %%rd2;\n@!%%p3 bra $Lw;\nbra $Ldone;\n$Lpar:\n"
           "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 %%p3, [%%r2], %%r5, 1000;\n@!%%p3 bra $Lpar;\n"
           "$Ldone:\natom.global.add.u32 %%r11, [%%rd1+512], 0;\nshl.b32 %%r12, %%r5, 6;\nadd.u32 %%r12, %%r12, %%r1;\n"
           "mul.wide.u32 %%rd4, %%r12, 4;\nadd.s64 %%rd5, %%rd1, %%rd4;\nst.global.u32 [%%rd5], %%r11;\n"
           "bar.sync 0;\nxor.b32 %%r5, %%r5, 1;\nsetp.ne.u32 %%p5, %%r5, 0;\n@%%p5 bra $Lphase;\nret;\n}\n");
    int rc = dev_open(&d, t, err, sizeof err);
    uint32_t seen[129] = {0};
    uint64_t out = 0;
    if (!rc) {
      out = dev_buf(&d, seen, sizeof seen, "out");
      rc = dev_run(&d, 64, 0, &out, sizeof out, err, sizeof err);
    }
    if (v == 0) {
      long early = 0;
      if (!rc && !ptx_copy_out(d.x, out, seen, sizeof seen, NULL))
        for (int ph = 0; ph < 2; ph++)
          for (int i = 0; i < 64; i++) early += seen[64 * ph + i] < 64u * (unsigned)(ph + 1);
      CHECK(rc == 0 && early == 0, "mbarrier phases by state tokens and counts: %ld waits released early; %s", early,
            err);
    }
    /* one arrival too many completes the phase early and leaves the next one short */
    if (v == 1) CHECK(rc == -1 && strstr(err, "deadlock"), "65 arrivals at a barrier of 64: %s", err);
    if (v == 3) CHECK(rc == -1 && strstr(err, "more than the phase awaits"), "an arrive of 65 at 64: %s", err);
    if (v == 2) CHECK(rc == -1 && strstr(err, "before mbarrier.init"), "an uninitialised mbarrier: %s", err);
    dev_close(&d);
    free(t);
  }
}

/* 128 threads store a 16 x 64 bf16 tile to shared memory (plain stores), fence.proxy.async, bar.sync; thread 0
 * stores it through a 128B-swizzled tensor map at (40, 30) of a 72 x 40 tensor: the elements past its edges are
 * dropped, the rest land unswizzled. Misuse: no fence.proxy.async. */
static void check_tma_store(void) {
  for (int fenced = 1; fenced >= 0; fenced--) {
    text *t = malloc(sizeof *t);
    char err[1024] = "";
    dev d = {0};
    if (!t) return;
    t->n = 0;
    put(t, "%s.extern .shared .align 1024 .b8 sm[];\n.visible .entry k(.param .align 64 .b8 tm[128], .param .u64 pin)"
           "\n{\n.reg .b32 %%r<20>;\n.reg .b64 %%rd<20>;\n.reg .pred %%p<4>;\nld.param.u64 %%rd1, [pin];\n"
           "mov.u32 %%r1, %%tid.x;\nmul.wide.u32 %%rd2, %%r1, 16;\nadd.s64 %%rd3, %%rd1, %%rd2;\n"
           "ld.global.v4.u32 {%%r2, %%r3, %%r4, %%r5}, [%%rd3];\nmov.u32 %%r6, sm;\nshl.b32 %%r7, %%r1, 4;\n"
           "add.u32 %%r8, %%r6, %%r7;\nst.shared.v4.u32 [%%r8], {%%r2, %%r3, %%r4, %%r5};\n%s"
           "bar.sync 0;\nsetp.eq.u32 %%p1, %%r1, 0;\nmov.u32 %%r9, 40;\nmov.u32 %%r10, 30;\n"
           "@%%p1 cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [tm, {%%r9, %%r10}], [%%r6];\n"
           "@%%p1 cp.async.bulk.commit_group;\n@%%p1 cp.async.bulk.wait_group.read 0;\nret;\n}\n",
        HEAD, fenced ? "fence.proxy.async.shared::cta;\n" : "");
    uint16_t img[16 * 64], g[40 * 72], back[40 * 72];
    for (int i = 0; i < 16 * 64; i++) img[i] = (uint16_t)(i * 7 + 1);
    for (int i = 0; i < 40 * 72; i++) g[i] = 0xdead;
    int rc = dev_open(&d, t, err, sizeof err);
    struct __attribute__((packed)) {
      uint8_t tm[128];
      uint64_t in;
    } prm;
    memset(&prm, 0, sizeof prm);
    uint64_t ga = 0;
    if (!rc) {
      ga = dev_buf(&d, g, sizeof g, "tensor");
      const uint64_t dims[2] = {72, 40}, st[1] = {144};
      const uint32_t box[2] = {64, 16}, es[2] = {1, 1};
      rc = ptx_tmap_encode(prm.tm, PTX_TMAP_BF16, 2, ga, dims, st, box, es, 0, PTX_TMAP_SWIZZLE_128B, 0, 0, err,
                           sizeof err);
      prm.in = dev_buf(&d, img, sizeof img, "img");
      if (!rc) rc = dev_run(&d, 128, sizeof img, &prm, sizeof prm, err, sizeof err);
    }
    if (!fenced) {
      CHECK(rc == -1 && strstr(err, "no fence.proxy.async"), "a TMA store of plain stores with no fence: %s", err);
    } else if (!rc && !ptx_copy_out(d.x, ga, back, sizeof back, NULL)) {
      long bad = 0;
      for (int r = 0; r < 40; r++)
        for (int c = 0; c < 72; c++) {
          uint16_t want = 0xdead;
          if (r >= 30 && c >= 40 && r - 30 < 16 && c - 40 < 64) { /* box element (r-30, c-40), swizzled in shared */
            const int at = (r - 30) * 128 + ((((c - 40) * 2 / 16) ^ ((r - 30) % 8)) * 16) + (c - 40) * 2 % 16;
            want = img[at / 2];
          }
          bad += back[r * 72 + c] != want;
        }
      CHECK(bad == 0, "tma store: %ld of %d elements wrong", bad, 40 * 72);
      /* rows 30..39, columns 40..71: bytes 80..143 of each 144-byte row (4.5 sectors: rows 30, 32, ... start
       * mid-sector and cover 3 sectors, the others 2) */
      ptx_buffer_stats bs;
      CHECK(!ptx_buffer_stats_of(d.x, ga, &bs) && bs.write_sectors == 25 && bs.write_insns == 1 &&
                bs.write_bytes == 10 * 32 * 2,
            "tma store: %llu sectors written in %llu instructions (25 in 1)", (unsigned long long)bs.write_sectors,
            (unsigned long long)bs.write_insns);
    } else {
      CHECK(0, "tma store: %s", err);
    }
    dev_close(&d);
    free(t);
  }
}

/* cp.async.bulk without a tensor map: 256 bytes into shared memory on an mbarrier, each of 64 threads adds 1 to its
 * word into a second buffer (plain stores), fence.proxy.async, and thread 0 stores that buffer back by
 * cp.async.bulk. Misuse: the data read before the wait; the store with no fence. */
static void check_bulk(void) {
  for (int v = 0; v < 3; v++) {
    text *t = malloc(sizeof *t);
    char err[1024] = "";
    dev d = {0};
    if (!t) return;
    t->n = 0;
    put(t, "%s.shared .align 8 .b64 bar;\n.extern .shared .align 1024 .b8 sm[];\n"
           ".visible .entry k(.param .u64 pin, .param .u64 pout)\n{\n.reg .b32 %%r<20>;\n.reg .b64 %%rd<20>;\n"
           ".reg .pred %%p<4>;\nld.param.u64 %%rd1, [pin];\nld.param.u64 %%rd2, [pout];\nmov.u32 %%r1, %%tid.x;\n"
           "mov.u32 %%r2, bar;\nmov.u32 %%r3, sm;\nsetp.eq.u32 %%p1, %%r1, 0;\n"
           "@%%p1 mbarrier.init.shared::cta.b64 [%%r2], 1;\n@%%p1 fence.mbarrier_init.release.cluster;\nbar.sync 0;\n"
           "@%%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%%r2], 256;\n"
           "@%%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%%r3], [%%rd1], 256, [%%r2];\n"
           "%s"
           "shl.b32 %%r4, %%r1, 2;\nadd.u32 %%r5, %%r3, %%r4;\nld.shared.u32 %%r6, [%%r5];\nadd.u32 %%r6, %%r6, 1;\n"
           "st.shared.u32 [%%r5+256], %%r6;\n%sbar.sync 0;\nadd.u32 %%r7, %%r3, 256;\n"
           "@%%p1 cp.async.bulk.global.shared::cta.bulk_group [%%rd2], [%%r7], 256;\n"
           "@%%p1 cp.async.bulk.commit_group;\n@%%p1 cp.async.bulk.wait_group.read 0;\nret;\n}\n",
        HEAD,
        v == 1 ? "" : "$Lw:\nmbarrier.try_wait.parity.shared::cta.b64 %p2, [%r2], 0;\n@!%p2 bra $Lw;\n",
        v == 2 ? "" : "fence.proxy.async.shared::cta;\n");
    uint32_t in[64], out[64];
    for (int i = 0; i < 64; i++) in[i] = (uint32_t)small_int() * 1000u + (uint32_t)i;
    int rc = dev_open(&d, t, err, sizeof err);
    uint64_t prm[2] = {0, 0};
    if (!rc) {
      prm[0] = dev_buf(&d, in, sizeof in, "in");
      prm[1] = dev_buf(&d, NULL, sizeof out, "out");
      rc = dev_run(&d, 64, 512, prm, sizeof prm, err, sizeof err);
    }
    if (v == 1) {
      CHECK(rc == -1 && strstr(err, "still in flight"), "cp.async.bulk data read before its wait: %s", err);
    } else if (v == 2) {
      CHECK(rc == -1 && strstr(err, "no fence.proxy.async"), "a bulk store of plain stores with no fence: %s", err);
    } else if (!rc && !ptx_copy_out(d.x, prm[1], out, sizeof out, NULL)) {
      long bad = 0;
      for (int i = 0; i < 64; i++) bad += out[i] != in[i] + 1;
      ptx_buffer_stats bi, bo;
      CHECK(bad == 0 && !ptx_buffer_stats_of(d.x, prm[0], &bi) && !ptx_buffer_stats_of(d.x, prm[1], &bo) &&
                bi.read_sectors == 8 && bo.write_sectors == 8,
            "cp.async.bulk: %ld of 64 words wrong, %llu and %llu sectors (8 each)", bad,
            (unsigned long long)bi.read_sectors, (unsigned long long)bo.write_sectors);
    } else {
      CHECK(0, "cp.async.bulk: %s", err);
    }
    dev_close(&d);
    free(t);
  }
}

int main(void) {
  rng ^= test_seed() * 0x2545f4914f6cdd1dull;
  /* wgmma against A B^T: each swizzle mode, f16 and bf16, several N; K-major and N-major B; register A */
  static const char *const MODE[] = {"none", "32B", "64B", "128B"};
  char what[128];
  for (int mode = 0; mode < 4; mode++) {
    snprintf(what, sizeof what, "wgmma bf16 n64 k64 %s", MODE[mode]);
    check_wgmma(what, 64, 1, 64, mode, 0, 0, 0, NULL);
    snprintf(what, sizeof what, "wgmma f16 n24 k32 %s", MODE[mode]);
    check_wgmma(what, 24, 0, 32, mode, 0, 0, 0, NULL);
  }
  check_wgmma("wgmma bf16 n256 k16 128B", 256, 1, 16, SW_128, 0, 0, 0, NULL);
  for (int mode = 1; mode < 3; mode++) {
    snprintf(what, sizeof what, "wgmma f16 n48 k32 N-major B %s", MODE[mode]);
    check_wgmma(what, 48, 0, 32, mode, 1, 0, 0, NULL);
  }
  for (int mode = 0; mode < 4; mode++) {
    snprintf(what, sizeof what, "wgmma bf16 n32 k32 M-major A, N-major B %s", MODE[mode]);
    check_wgmma(what, 32, 1, 32, mode, 3, 0, 0, NULL);
  }
  check_wgmma("wgmma bf16 n64 k16 M-major A 64B", 64, 1, 16, SW_64, 2, 0, 0, NULL);
  check_wgmma("wgmma bf16 n128 k32 N-major B 128B", 128, 1, 32, SW_128, 1, 0, 0, NULL);
  check_wgmma("wgmma f16 n16 k32 N-major B none", 16, 0, 32, SW_NONE, 1, 0, 0, NULL);
  check_wgmma("wgmma bf16 n64 register A, B 128B", 64, 1, 16, SW_128, 0, 1, 0, NULL);
  check_wgmma("wgmma f16 n64 register A, N-major B 128B", 64, 0, 16, SW_128, 1, 1, 0, NULL);
  /* misuse */
  check_wgmma("wgmma reading plain stores with no fence.proxy.async", 64, 1, 16, SW_128, 0, 0, NO_PROXY_FENCE,
              "no fence.proxy.async");
  check_wgmma("wgmma with no wgmma.fence", 64, 1, 16, SW_128, 0, 0, NO_WG_FENCE, "no wgmma.fence");
  check_wgmma("accumulators read after wait_group 1 (one group)", 64, 1, 32, SW_128, 0, 0, WAIT_ONE,
              "not yet waited for");
  check_wgmma("accumulators read before the wait", 64, 1, 32, SW_128, 0, 0, READ_BEFORE_WAIT, "not yet waited for");
  check_wgmma("results never waited for", 64, 1, 16, SW_128, 0, 0, NO_WAIT, "never waited for");

  /* TMA: a 2-d 128B-swizzled bf16 box hanging over both edges of the tensor, then one inside (phases 0 and 1); a
   * 3-d box past the end of every dimension; the tensor map as a symbol */
  const uint64_t d2[2] = {104, 37}, d3[3] = {24, 9, 3};
  const uint32_t b2[2] = {64, 16}, b3[3] = {16, 4, 2};
  const int32_t c2a[2] = {-8, 30}, c2b[2] = {8, 3}, c3a[3] = {16, 7, 2}, c3b[3] = {-4, -2, -1};
  check_tma("tma 2d 128B, boxes over the edges", 2, d2, b2, c2a, c2b, 1, 0, NULL);
  check_tma("tma 3d, boxes past every end", 3, d3, b3, c3a, c3b, 0, 0, NULL);
  check_tma("tma 2d, the map named by its symbol", 2, d2, b2, c2b, c2a, 1, SYMBOL_MAP, NULL);
  check_tma("tma data read before its mbarrier wait", 2, d2, b2, c2a, c2b, 1, NO_WAIT1, "still in flight");
  check_tma("a wait on the wrong (completed) phase", 2, d2, b2, c2a, c2b, 1, WRONG_PARITY2, "still in flight");
  check_tma("a wait that can never complete", 2, d2, b2, c2a, c2b, 1, EXTRA_TX, "deadlock");
  check_tma("an mbarrier.init the async proxy may not see (no fence.mbarrier_init)", 2, d2, b2, c2a, c2b, 1,
            NO_INIT_FENCE, "may not see the initialisation");
  check_tma("tma 3d, NaN fill", 3, d3, b3, c3b, c3a, 0, NAN_FILL, NULL);
  check_tma("a tensor map not from ptx_tmap_encode", 2, d2, b2, c2a, c2b, 1, BAD_MAP, "not written by ptx_tmap_encode");
  check_encode();
  check_mbarrier_tokens();
  check_tma_store();
  check_bulk();

  check_tma_wgmma("tma into 128B swizzle, wgmma on it", 0, NULL);
  check_tma_wgmma("tma into a stage a wgmma still reads", 1, "still reads");

  check_small();
  printf("ptx_hopper: %d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
