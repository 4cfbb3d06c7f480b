/* flash_bwd.c: FlashAttention-2's backward for the CPU, specialised at compile time on ATTN_D (head dimension of Q and
 * K), ATTN_DV (of V and O), ATTN_BR (query rows per block), ATTN_BC (key rows per block), ATTN_CAUSAL and ATTN_DTYPE
 * (f32, f16 or bf16 arrays; the arithmetic is fp32 throughout). The n x n_kv matrices are never stored: P is
 * recomputed block by block from the forward's lse (P = exp(scale q.k - lse)), as FlashAttention does.
 *
 * FA2's loop order. Work item = (batch, KV head, chunk): the outer loop runs over the chunk's key blocks j (blocks
 * c, c + C, c + 2C, ... of the n_kv / Bc, interleaved so that causal chunks get as much work), the inner one over the
 * query heads of the KV head (GQA's sum) and their query blocks i. Per (i, j), five block products:
 *   S = Q_i K_jᵀ, dP = dO_i V_jᵀ, P = exp(scale S - lse_i), dS = P ∘ (dP - D_i) with D = rowsum(dO ∘ O) (computed once
 *   per item for its rows), dV_j += Pᵀ dO_i, dK_j += dSᵀ Q_i, dQ_i += dS K_j.
 * dK_j and dV_j stay in the thread's scratch and are written once (dk scaled by scale). FA2 adds dQ_i into memory
 * with atomics, whose order varies from run to run; here each item sums its key blocks' dQ into its own fp32 rows of
 * the partials buffer, in order, and merge items add the C chunks' rows in chunk order (scaled): every element of
 * dq, dk and dv is summed in a fixed order, the same bits for any thread count and schedule. C is a function of the
 * shape only: enough items for 16 threads, at most one chunk a key block and 1 GiB of partials (fb_chunks).
 *
 * The products run in register tiles of FB_TI rows x FB_TW vectors (6 x 2 x 8 floats with AVX2, 8 x 2 x 16 with
 * AVX-512, as -march=native gives): FB_TI broadcasts and FB_TW vector loads feed FB_TI x FB_TW fused multiply-adds.
 * Rows of d, d_v and Bc floats in scratch are padded with zeros to whole tiles.
 *
 * Causal masking is bottom-right aligned (key j visible to query i iff j <= i + n_kv - n). Hidden entries take no
 * part (they are skipped, not weighted by 0: a NaN in a hidden key's V or in a row's dO that does not see a key
 * reaches nothing through it): blocks where some entry is hidden (the diagonal ones) sum each key's dK and dV over
 * the rows that see it and each row's dQ over the keys it sees; key blocks no row of a query block sees are not
 * loaded, rows that see no key get zero dq and keys no row sees zero dk and dv. Everything else propagates NaN and
 * Inf as the fp64 backward of the same formulas does (a row whose visible scores are all -inf has lse = -inf and
 * P = exp(NaN): NaN gradients).
 *
 * Score modifiers (attn.h), compiled in only when the spec asks, as in templates/flash.c: ATTN_WINDOW (a->window =
 * w > 0: with i' = i + n_kv - n, causal i' - w < j <= i', else |i' - j| < w) masks like the causal diagonal (each
 * row sees the contiguous keys [lo, hi), each key the contiguous rows that see it), and a key block is loaded only
 * for the query blocks whose rows reach it, so work and traffic follow the window, not n_kv; ATTN_SOFTCAP (c > 0):
 * the recomputed score is c tanh(s / c) and dS is multiplied by its derivative 1 - tanh^2(s / c); ATTN_ALIBI (one
 * slope per query head): the recomputed score gains -slope |i' - j| after the softcap (a constant: no factor on
 * dS). P uses the forward's lse, which holds the same modified scores.
 *
 * I/O accounting (ATTN_IO_READ / ATTN_IO_WRITE), in elements; the partials and D are slow-memory traffic. A key item
 * writes its G n rows of dQ partials once (zeros, d a row) and reads O and dO once (D: 2 d_v a row, written as one
 * entry a row). Per key block it reads K_j and V_j (cols (d + d_v)) when some query sees the block, and writes dK_j
 * and dV_j (cols (d + d_v), zeros for a block no query sees); per query block of each query head that sees the key
 * block it reads Q_i, dO_i, lse_i, D_i and its dQ partial (rows (2 d + d_v + 2)) and writes the partial back
 * (rows d). A merge item reads C partial rows and writes dq: rows (C d) read, rows d written. */
#ifndef ATTN_D
#define ATTN_D 64
#endif
#ifndef ATTN_BR
#define ATTN_BR 64
#endif
#ifndef ATTN_BC
#define ATTN_BC 64
#endif
#ifndef ATTN_CAUSAL
#define ATTN_CAUSAL 0
#endif
#ifndef ATTN_DV
#define ATTN_DV ATTN_D
#endif
#ifndef ATTN_WINDOW
#define ATTN_WINDOW 0
#endif
#ifndef ATTN_SOFTCAP
#define ATTN_SOFTCAP 0
#endif
#ifndef ATTN_ALIBI
#define ATTN_ALIBI 0
#endif

#ifndef ATTN_KERNEL_ABI_H
#include "kernel_abi.h"
#endif
#include <stdint.h>
#include <string.h>

#define FB_D ATTN_D
#define FB_DV ATTN_DV
#define FB_BR ATTN_BR
#define FB_BC ATTN_BC
#define FB_RUP(x, m) (((x) + (m)-1) / (m) * (m))
/* Register tiles: FB_TI rows x FB_TW vectors of FB_VW floats; FB_TI + FB_TW + 1 <= the vector registers (32 with
 * AVX-512, 16 with AVX2). */
#if defined(__AVX512F__)
#define FB_VW 16
#define FB_TI 8
#elif defined(__AVX__)
#define FB_VW 8
#define FB_TI 6
#else
#define FB_VW 4
#define FB_TI 6
#endif
#define FB_TW 2
#define FB_TC (FB_VW * FB_TW)                /* columns of a tile (gen/spec_bwd.c assumes at most 32) */
#define FB_BCP FB_RUP(FB_BC, FB_TC)          /* a row of S, P, dP, dS and of the transposed K and V */
#define FB_DP FB_RUP(FB_D, FB_TC)
#define FB_DVP FB_RUP(FB_DV, FB_TC)
typedef float fb_v __attribute__((vector_size(FB_VW * 4)));
typedef float fb_vu __attribute__((vector_size(FB_VW * 4), aligned(4), may_alias));
#define FB_LD(p) ((fb_v)(*(const fb_vu *)(p)))
#define FB_ST(p, x) (*(fb_vu *)(p) = (x))
static inline fb_v fb_splat(float x) { return x - (fb_v){0}; }
/* _mm512_fmadd_ps and _mm256_fmadd_ps without <immintrin.h>, whose parsing was a fifth of a kernel's compile time
 * (GCC and Clang name the builtins alike; 4 is _MM_FROUND_CUR_DIRECTION, all 16 lanes written) */
#if FB_VW == 16
#define FB_FMA(a, b, c) __builtin_ia32_vfmaddps512_mask((a), (b), (c), (unsigned short)-1, 4)
#elif FB_VW == 8 && defined(__FMA__)
#define FB_FMA(a, b, c) __builtin_ia32_vfmaddps256((a), (b), (c))
#else
#define FB_FMA(a, b, c) ((a) * (b) + (c))
#endif

/* Scratch of one thread, in floats; each part starts on a 64-byte boundary (gen/spec_bwd.c's
 * attn_spec_backward_scratch bounds FB_FIXED). */
#define FB_KT_SZ (FB_D * FB_BCP)             /* K_j transposed (S = Q Kᵀ along key lanes) */
#define FB_VT_SZ (FB_DV * FB_BCP)            /* V_j transposed (dP = dO Vᵀ) */
#define FB_KR_SZ (FB_BC * FB_DP)             /* K_j rows (dQ += dS K) */
#define FB_DK_SZ (FB_BC * FB_DP)             /* dK_j accumulator */
#define FB_DVA_SZ (FB_BC * FB_DVP)           /* dV_j accumulator */
#define FB_QR_SZ (FB_BR * FB_DP)             /* Q_i rows */
#define FB_DO_SZ (FB_BR * FB_DVP)            /* dO_i rows */
#define FB_S_SZ (FB_BR * FB_BCP)             /* S, then P */
#define FB_ROW_SZ FB_RUP(FB_BR, 16)          /* lse_i, D_i: one float per query row */
#define FB_TMP_SZ FB_RUP(FB_D > FB_DV ? FB_DP : FB_DVP, 16) /* one row in fp32 (O; scaled dK, dQ) */
#define FB_FIXED (FB_KT_SZ + FB_VT_SZ + FB_KR_SZ + FB_DK_SZ + FB_DVA_SZ + FB_QR_SZ + FB_DO_SZ + 2 * FB_S_SZ + \
                  2 * FB_ROW_SZ + FB_TMP_SZ)

typedef struct fb_scratch {
  float *kt, *vt, *kr, *dk, *dv, *qr, *dor, *s, *ds, *lse, *dd, *tmp, *drows;
} fb_scratch;

static fb_scratch fb_parts(void *scratch) {
  fb_scratch w;
  float *p = (float *)scratch;
  w.kt = p; p += FB_KT_SZ;
  w.vt = p; p += FB_VT_SZ;
  w.kr = p; p += FB_KR_SZ;
  w.dk = p; p += FB_DK_SZ;
  w.dv = p; p += FB_DVA_SZ;
  w.qr = p; p += FB_QR_SZ;
  w.dor = p; p += FB_DO_SZ;
  w.s = p; p += FB_S_SZ;
  w.ds = p; p += FB_S_SZ;
  w.lse = p; p += FB_ROW_SZ;
  w.dd = p; p += FB_ROW_SZ;
  w.tmp = p; p += FB_TMP_SZ;
  w.drows = p; /* D of the item's G n rows */
  return w;
}

int attn_kernel_abi(void) { return ATTN_KERNEL_ABI_VERSION; }

static long fb_heads_kv(const attn_kargs *a) { return a->heads_kv > 0 ? a->heads_kv : a->heads; }
static long fb_group(const attn_kargs *a) { return a->heads / fb_heads_kv(a); }
static long fb_key_blocks(const attn_kargs *a) { return (a->n_kv + FB_BC - 1) / FB_BC; }
/* Chunks of each KV head's key blocks: a function of the shape only (the sums' order must not depend on threads):
 * enough items for 16 threads, at most one chunk a key block, and no more than keep the partials (one fp32 dQ of
 * rows of d rounded up to 32 a chunk) within 1 GiB. tuner/io_theory.c's bwd_chunks is the same rule. */
static long fb_chunks(const attn_kargs *a) {
  const long kv = a->batch * fb_heads_kv(a), nkb = fb_key_blocks(a);
  const double one = (double)kv * (double)fb_group(a) * (double)a->n * (double)FB_RUP(FB_D, 32) * 4.0;
  long c = (16 + kv - 1) / kv;
  if (c > nkb) c = nkb;
  while (c > 1 && c * one > (double)(1L << 30)) c--;
  return c < 1 ? 1 : c;
}
/* Floats of one chunk's dQ partials of one KV head: G n rows of FB_DP. */
static size_t fb_part_floats(const attn_kargs *a) { return (size_t)fb_group(a) * (size_t)a->n * FB_DP; }

long attn_kernel_items(const attn_kargs *a) { return a->batch * fb_heads_kv(a) * fb_chunks(a); }

size_t attn_kernel_scratch(const attn_kargs *a) {
  return (size_t)(FB_FIXED + FB_RUP(fb_group(a) * a->n, 16)) * sizeof(float);
}

size_t attn_kernel_partials(const attn_kargs *a, long *merge_items) {
  *merge_items = a->batch * a->heads * ((a->n + FB_BR - 1) / FB_BR);
  return (size_t)fb_chunks(a) * (size_t)(a->batch * fb_heads_kv(a)) * fb_part_floats(a) * sizeof(float);
}

/* The window's width, 0 for none (a kernel without ATTN_WINDOW, or a->window <= 0). */
static inline long fb_window(const attn_kargs *a) { return ATTN_WINDOW && a->window > 0 ? a->window : 0; }

/* Keys visible to query i: fb_key_lo(i) <= j < fb_key_hi(i) (hi <= lo: none). Both are non-decreasing in i. */
static inline long fb_key_hi(const attn_kargs *a, long i) {
  const long ip = i + a->n_kv - a->n, w = fb_window(a);
  long e = a->n_kv;
  if (ATTN_CAUSAL) e = ip + 1;
  else if (w) e = ip + w;
  return e < a->n_kv ? e : a->n_kv;
}
static inline long fb_key_lo(const attn_kargs *a, long i) {
  const long w = fb_window(a), l = i + a->n_kv - a->n - w + 1;
  return w && l > 0 ? l : 0;
}
/* Queries that see key j: fb_row_lo(j) <= i < fb_row_hi(j) (unclamped; the inverse of the two above). */
static inline long fb_row_lo(const attn_kargs *a, long j) {
  const long off = a->n_kv - a->n, w = fb_window(a);
  return ATTN_CAUSAL ? j - off : w ? j - w + 1 - off : -1L - a->n_kv;
}
static inline long fb_row_hi(const attn_kargs *a, long j) {
  const long w = fb_window(a);
  return w ? j + w - (a->n_kv - a->n) : a->n + a->n_kv + 1;
}

/* K_j, V_j (cols rows from key j0 of KV head bkv) into fp32: K rows and K, V transposed (zero past cols). */
static void fb_load_kv(const attn_kargs *a, long bkv, long j0, int cols, fb_scratch *w, attn_io *io) {
  const attn_el *k = (const attn_el *)a->k + (bkv * a->n_kv + j0) * FB_D;
  const attn_el *v = (const attn_el *)a->v + (bkv * a->n_kv + j0) * FB_DV;
  ATTN_IO_READ(io, (long)cols * (FB_D + FB_DV));
  for (int c = 0; c < cols; c++) {
    float *kr = w->kr + c * FB_DP;
    attn_load_row(kr, k + (long)c * FB_D, FB_D);
    memset(kr + FB_D, 0, sizeof(float) * (FB_DP - FB_D));
    for (int x = 0; x < FB_D; x++) w->kt[x * FB_BCP + c] = kr[x];
    attn_load_row(w->tmp, v + (long)c * FB_DV, FB_DV);
    for (int x = 0; x < FB_DV; x++) w->vt[x * FB_BCP + c] = w->tmp[x];
  }
  if (cols < FB_BCP) {
    for (int x = 0; x < FB_D; x++) memset(w->kt + x * FB_BCP + cols, 0, sizeof(float) * (size_t)(FB_BCP - cols));
    for (int x = 0; x < FB_DV; x++) memset(w->vt + x * FB_BCP + cols, 0, sizeof(float) * (size_t)(FB_BCP - cols));
  }
}

/* Q_i, dO_i, lse_i and D_i of rows rows from query i0 of head bh (D from the item's rows, from row dr0). */
static void fb_load_q(const attn_kargs *a, long bh, long i0, int rows, long dr0, fb_scratch *w, attn_io *io) {
  const long row0 = bh * a->n + i0;
  const attn_el *q = (const attn_el *)a->q + row0 * FB_D, *dout = (const attn_el *)a->dout + row0 * FB_DV;
  ATTN_IO_READ(io, (long)rows * (FB_D + FB_DV + 2));
  for (int r = 0; r < rows; r++) {
    attn_load_row(w->qr + r * FB_DP, q + (long)r * FB_D, FB_D);
    memset(w->qr + r * FB_DP + FB_D, 0, sizeof(float) * (FB_DP - FB_D));
    float *dor = w->dor + r * FB_DVP;
    attn_load_row(dor, dout + (long)r * FB_DV, FB_DV);
    memset(dor + FB_DV, 0, sizeof(float) * (FB_DVP - FB_DV));
    w->dd[r] = w->drows[dr0 + r];
    w->lse[r] = a->lse[row0 + r];
  }
}

/* The register tile: out[i][x] (+= when acc) sum over l < len of a[i ai + l al] b[l bs + x], for rows i < NI (a
 * compile-time count: the callers dispatch through fb_tile) and the FB_TC columns x from out and b. */
static inline __attribute__((always_inline)) void fb_tile_n(float *restrict out, long os, const float *restrict a,
                                                            long ai, long al, const float *restrict b, long bs,
                                                            long len, const int NI, const int acc) {
  fb_v t[FB_TI][FB_TW];
  for (int i = 0; i < NI; i++)
    for (int j = 0; j < FB_TW; j++) t[i][j] = acc ? FB_LD(out + i * os + FB_VW * j) : (fb_v){0};
  for (long l = 0; l < len; l++) {
    fb_v bv[FB_TW];
    for (int j = 0; j < FB_TW; j++) bv[j] = FB_LD(b + l * bs + FB_VW * j);
    for (int i = 0; i < NI; i++) {
      const fb_v av = fb_splat(a[i * ai + l * al]);
      for (int j = 0; j < FB_TW; j++) t[i][j] = FB_FMA(av, bv[j], t[i][j]);
    }
  }
  for (int i = 0; i < NI; i++)
    for (int j = 0; j < FB_TW; j++) FB_ST(out + i * os + FB_VW * j, t[i][j]);
}

#define FB_TILE_CASE(N) \
  case N: fb_tile_n(out, os, a, ai, al, b, bs, len, N, acc); break;
/* rows i < ni of the tile (ni in 1..FB_TI) */
static inline __attribute__((always_inline)) void fb_tile(float *restrict out, long os, const float *restrict a,
                                                          long ai, long al, const float *restrict b, long bs, long len,
                                                          int ni, const int acc) {
  switch (ni) {
    FB_TILE_CASE(1) FB_TILE_CASE(2) FB_TILE_CASE(3) FB_TILE_CASE(4) FB_TILE_CASE(5) FB_TILE_CASE(6)
#if FB_TI > 6
    FB_TILE_CASE(7) FB_TILE_CASE(8)
#endif
    default: break;
  }
}

/* out (m rows of stride os, width columns) (+)= A B over len: A's entry (i, l) at a[i ai + l al], B's row l at
 * b + l bs; tiles of FB_TI rows x FB_TC columns, the columns outer so that a B panel stays in L1. */
static void fb_product(float *restrict out, long os, int m, int width, const float *restrict a, long ai, long al,
                       const float *restrict b, long bs, long len, const int acc) {
  for (int x0 = 0; x0 < width; x0 += FB_TC)
    for (int i0 = 0; i0 < m; i0 += FB_TI) {
      const int ni = m - i0 < FB_TI ? m - i0 : FB_TI;
      if (acc) fb_tile(out + i0 * os + x0, os, a + i0 * ai, ai, al, b + x0, bs, len, ni, 1);
      else fb_tile(out + i0 * os + x0, os, a + i0 * ai, ai, al, b + x0, bs, len, ni, 0);
    }
}

typedef int32_t fb_vi __attribute__((vector_size(FB_VW * 4)));
typedef uint32_t fb_vui __attribute__((vector_size(FB_VW * 4)));

/* e^x lane by lane, relative error ~1e-6 (glibc's expf is a call per element): 2^t with t = x log2(e)
 * split into n = round(t) and |f| <= 1/2, 2^f by its degree-7 Taylor polynomial (as templates/flash.c), times 2^n
 * built in the exponent bits. t below -100 gives exactly 0 (-inf: a -inf score weighs nothing), NaN stays NaN, and t
 * is clamped at 127: for a visible entry S <= lse up to rounding (S = +inf makes lse NaN, and lse = -inf means every
 * visible S is -inf: x = NaN either way, as in the fp64 backward), so only hidden entries, never read, get there. */
static inline fb_v fb_sel(fb_vi m, fb_v a, fb_v b) { /* m ? a : b, m all ones or zero per lane */
  fb_vi ai, bi;
  memcpy(&ai, &a, sizeof ai);
  memcpy(&bi, &b, sizeof bi);
  const fb_vi r = (ai & m) | (bi & ~m);
  fb_v out;
  memcpy(&out, &r, sizeof out);
  return out;
}
static inline fb_v fb_expv(fb_v x) {
  fb_v t = x * 1.4426950408889634f;
  const fb_vi under = t < -100.0f;
  t = fb_sel(under, fb_splat(-100.0f), t);
  t = fb_sel(t > 127.0f, fb_splat(127.0f), t);
  const fb_v magic = fb_splat(12582912.0f); /* 1.5 * 2^23: adding it rounds to an integer in the low bits */
  const fb_v r = t + magic, f = t - (r - magic);
  fb_vui rb;
  memcpy(&rb, &r, sizeof rb);
  const fb_vui eb = (rb - 0x4B400000u + 127u) << 23;
  fb_v e;
  memcpy(&e, &eb, sizeof e);
  fb_v p = fb_splat(1.5252733804059841e-5f);
  p = p * f + 1.5403530393381606e-4f;
  p = p * f + 1.3333558146428443e-3f;
  p = p * f + 9.6181291076284772e-3f;
  p = p * f + 5.5504108664821580e-2f;
  p = p * f + 2.4022650695910071e-1f;
  p = p * f + 6.9314718055994531e-1f;
  p = p * f + 1.0f;
  return fb_sel(under, (fb_v){0}, p * e);
}

#if ATTN_SOFTCAP
/* tanh lane by lane (templates/flash.c's fl_tanh in base e): 1 - 2 / (e^2x + 1) with x clamped to +-20, the odd
 * series to x^15 below |x| = 1/2 where that difference cancels. NaN stays NaN. */
static inline fb_v fb_tanh(fb_v x) {
  x = fb_sel(x > 20.0f, fb_splat(20.0f), x);
  x = fb_sel(x < -20.0f, fb_splat(-20.0f), x);
  const fb_v big = 1.0f - 2.0f / (fb_expv(x + x) + 1.0f);
  const fb_v x2 = x * x;
  fb_v p = fb_splat(-929569.0f / 638512875.0f);
  p = FB_FMA(p, x2, fb_splat(21844.0f / 6081075.0f));
  p = FB_FMA(p, x2, fb_splat(-1382.0f / 155925.0f));
  p = FB_FMA(p, x2, fb_splat(62.0f / 2835.0f));
  p = FB_FMA(p, x2, fb_splat(-17.0f / 315.0f));
  p = FB_FMA(p, x2, fb_splat(2.0f / 15.0f));
  p = FB_FMA(p, x2, fb_splat(-1.0f / 3.0f));
  return fb_sel(x2 < 0.25f, FB_FMA(x * x2, p, x), big);
}
#endif

/* For the rows x cols block of query head h (rows from query i0, keys from j0): s = P = exp(mod(scale Q Kᵀ) - lse),
 * ds = dS = P ∘ (dO Vᵀ - D) (times the softcap's derivative), the columns up to whole tiles past cols (zero K and V
 * there: finite, never read). */
static void fb_block(const attn_kargs *a, fb_scratch *w, float scale, long h, long i0, int rows, long j0, int cols) {
  const int width = FB_RUP(cols, FB_TC);
  fb_product(w->s, FB_BCP, rows, width, w->qr, FB_DP, 1, w->kt, FB_BCP, FB_D, 0);
  fb_product(w->ds, FB_BCP, rows, width, w->dor, FB_DVP, 1, w->vt, FB_BCP, FB_DV, 0);
#if ATTN_SOFTCAP
  const float cap = a->softcap > 0.0f ? a->softcap : 0.0f, icap = cap > 0.0f ? 1.0f / cap : 0.0f;
#endif
#if ATTN_ALIBI
  const float slope = a->alibi ? a->alibi[h % a->heads] : 0.0f;
  fb_v lane;
  for (int l = 0; l < FB_VW; l++) lane[l] = (float)l;
#endif
  (void)a, (void)h, (void)i0, (void)j0;
  for (int r = 0; r < rows; r++) {
    float *restrict s = w->s + r * FB_BCP, *restrict ds = w->ds + r * FB_BCP;
    const fb_v lse = fb_splat(w->lse[r]), dd = fb_splat(w->dd[r]);
#if ATTN_ALIBI
    const float ip = (float)(i0 + r + a->n_kv - a->n);
#endif
    for (int c = 0; c < width; c += FB_VW) {
      fb_v x = scale * FB_LD(s + c), g = FB_LD(ds + c) - dd;
#if ATTN_SOFTCAP
      if (cap > 0.0f) {
        const fb_v t = fb_tanh(x * icap);
        x = cap * t;
        g = g * (1.0f - t * t);
      }
#endif
#if ATTN_ALIBI
      if (slope != 0.0f) {
        fb_v dist = ip - ((float)(j0 + c) + lane);
        dist = fb_sel(dist < 0.0f, -dist, dist);
        x = FB_FMA(fb_splat(-slope), dist, x);
      }
#endif
      const fb_v p = fb_expv(x - lse);
      FB_ST(s + c, p);
      FB_ST(ds + c, p * g);
    }
  }
}

/* acc[0 .. width) += sum over i in [lo, hi) of coef[i * cstride] * rows[i * rstride + ...] (blocks with hidden
 * entries: one key's or one row's visible range at a time). */
static inline __attribute__((always_inline)) void fb_accumulate(float *restrict acc, int width,
                                                                const float *restrict coef, long cstride,
                                                                const float *restrict rows, long rstride, long lo,
                                                                long hi) {
  for (int x0 = 0; x0 < width; x0 += FB_TC) {
    fb_v t[FB_TW];
    for (int j = 0; j < FB_TW; j++) t[j] = FB_LD(acc + x0 + FB_VW * j);
    for (long i = lo; i < hi; i++) {
      const fb_v cf = fb_splat(coef[i * cstride]);
      for (int j = 0; j < FB_TW; j++) t[j] = FB_FMA(cf, FB_LD(rows + i * rstride + x0 + FB_VW * j), t[j]);
    }
    for (int j = 0; j < FB_TW; j++) FB_ST(acc + x0 + FB_VW * j, t[j]);
  }
}

/* dV_j += Pᵀ dO_i, dK_j += dSᵀ Q_i and the dQ partial rows pq += dS K_j for one (query block, key block). */
static void fb_sums(const attn_kargs *a, fb_scratch *w, long i0, int rows, long j0, int cols, float *pq) {
  if (fb_key_hi(a, i0) >= j0 + cols && fb_key_lo(a, i0 + rows - 1) <= j0) { /* every row sees every key */
    fb_product(w->dv, FB_DVP, cols, FB_DVP, w->s, 1, FB_BCP, w->dor, FB_DVP, rows, 1);
    fb_product(w->dk, FB_DP, cols, FB_DP, w->ds, 1, FB_BCP, w->qr, FB_DP, rows, 1);
    fb_product(pq, FB_DP, rows, FB_DP, w->ds, FB_BCP, 1, w->kr, FB_DP, cols, 1);
    return;
  }
  /* key c is seen by the rows [r_lo, r_hi) of the block, row r by the keys [c_lo, c_hi) (the mask is monotone) */
  for (int c = 0; c < cols; c++) {
    long r_lo = fb_row_lo(a, j0 + c) - i0, r_hi = fb_row_hi(a, j0 + c) - i0;
    if (r_lo < 0) r_lo = 0;
    if (r_hi > rows) r_hi = rows;
    if (r_hi <= r_lo) continue;
    fb_accumulate(w->dv + c * FB_DVP, FB_DVP, w->s + c, FB_BCP, w->dor, FB_DVP, r_lo, r_hi);
    fb_accumulate(w->dk + c * FB_DP, FB_DP, w->ds + c, FB_BCP, w->qr, FB_DP, r_lo, r_hi);
  }
  for (int r = 0; r < rows; r++) {
    long c_lo = fb_key_lo(a, i0 + r) - j0, c_hi = fb_key_hi(a, i0 + r) - j0;
    if (c_lo < 0) c_lo = 0;
    if (c_hi > cols) c_hi = cols;
    if (c_hi > c_lo) fb_accumulate(pq + r * FB_DP, FB_DP, w->ds + r * FB_BCP + c_lo, 1, w->kr + c_lo * FB_DP, FB_DP, 0,
                                   c_hi - c_lo);
  }
}

/* D = rowsum(dO ∘ O) of the G n rows of KV head bkv's query heads, into w->drows (row g n + i). */
static void fb_rows_d(const attn_kargs *a, long b, long hk, fb_scratch *w, attn_io *io) {
  const long G = fb_group(a);
  ATTN_IO_READ(io, G * a->n * 2 * FB_DV);
  ATTN_IO_WRITE(io, G * a->n);
  for (long g = 0; g < G; g++) {
    const long row0 = (b * a->heads + hk * G + g) * a->n;
    const attn_el *o = (const attn_el *)a->o + row0 * FB_DV, *dout = (const attn_el *)a->dout + row0 * FB_DV;
    for (long i = 0; i < a->n; i++) {
      attn_load_row(w->dor, dout + i * FB_DV, FB_DV);
      attn_load_row(w->tmp, o + i * FB_DV, FB_DV);
      memset(w->dor + FB_DV, 0, sizeof(float) * (FB_DVP - FB_DV));
      memset(w->tmp + FB_DV, 0, sizeof(float) * (FB_DVP - FB_DV));
      fb_v t = {0}; /* lane sums, then the lanes in order: a fixed order */
      for (int x = 0; x < FB_DVP; x += FB_VW) t = FB_FMA(FB_LD(w->dor + x), FB_LD(w->tmp + x), t);
      float d = 0.0f;
      for (int l = 0; l < FB_VW; l++) d += t[l];
      w->drows[g * a->n + i] = d;
    }
  }
}

void attn_kernel_run(const attn_kargs *a, long item, void *scratch, attn_io *io) {
  fb_scratch w = fb_parts(scratch);
  const float scale = a->scale != 0.0f ? a->scale : 1.0f / __builtin_sqrtf((float)FB_D);
  const long heads_kv = fb_heads_kv(a), G = fb_group(a), C = fb_chunks(a), nkb = fb_key_blocks(a);
  const long bkv = item / C, chunk = item % C, b = bkv / heads_kv, hk = bkv % heads_kv;
  float *part = (float *)a->partials + ((size_t)chunk * (size_t)(a->batch * heads_kv) + (size_t)bkv) * fb_part_floats(a);
  memset(part, 0, sizeof(float) * fb_part_floats(a));
  ATTN_IO_WRITE(io, G * a->n * FB_D);
  fb_rows_d(a, b, hk, &w, io);
  for (long jb = chunk; jb < nkb; jb += C) {
    const long j0 = jb * FB_BC;
    const int cols = (int)(a->n_kv - j0 < FB_BC ? a->n_kv - j0 : FB_BC);
    memset(w.dk, 0, sizeof(float) * FB_DK_SZ);
    memset(w.dv, 0, sizeof(float) * FB_DVA_SZ);
    /* the queries that see some key of the block: the first one's first key is j0, the last one's last key the
     * block's last (both bounds are monotone) */
    long i_first = fb_row_lo(a, j0), i_end = fb_row_hi(a, j0 + cols - 1);
    if (i_first < 0) i_first = 0;
    if (i_end > a->n) i_end = a->n;
    if (i_first < i_end) {
      fb_load_kv(a, bkv, j0, cols, &w, io);
      for (long g = 0; g < G; g++) {
        const long bh = b * a->heads + hk * G + g;
        for (long i0 = i_first / FB_BR * FB_BR; i0 < i_end; i0 += FB_BR) {
          const int rows = (int)(a->n - i0 < FB_BR ? a->n - i0 : FB_BR);
          fb_load_q(a, bh, i0, rows, g * a->n + i0, &w, io);
          fb_block(a, &w, scale, bh % a->heads, i0, rows, j0, cols);
          ATTN_IO_READ(io, (long)rows * FB_D);
          fb_sums(a, &w, i0, rows, j0, cols, part + (size_t)(g * a->n + i0) * FB_DP);
          ATTN_IO_WRITE(io, (long)rows * FB_D);
        }
      }
    }
    attn_el *dk = (attn_el *)a->dk + (bkv * a->n_kv + j0) * FB_D;
    attn_el *dv = (attn_el *)a->dv + (bkv * a->n_kv + j0) * FB_DV;
    for (int c = 0; c < cols; c++) {
      for (int x = 0; x < FB_D; x++) w.tmp[x] = scale * w.dk[c * FB_DP + x];
      attn_store_row(dk + (long)c * FB_D, w.tmp, FB_D);
      attn_store_row(dv + (long)c * FB_DV, w.dv + c * FB_DVP, FB_DV);
    }
    ATTN_IO_WRITE(io, (long)cols * (FB_D + FB_DV));
  }
}

/* Merge item (head, query block): dq = scale x the chunks' partial rows summed in chunk order. */
void attn_kernel_merge(const attn_kargs *a, long item, attn_io *io) {
  const long nqb = (a->n + FB_BR - 1) / FB_BR, heads_kv = fb_heads_kv(a), G = fb_group(a), C = fb_chunks(a);
  const long bh = item / nqb, i0 = item % nqb * FB_BR, b = bh / a->heads, h = bh % a->heads;
  const long bkv = b * heads_kv + h / G, g = h % G;
  const int rows = (int)(a->n - i0 < FB_BR ? a->n - i0 : FB_BR);
  const float scale = a->scale != 0.0f ? a->scale : 1.0f / __builtin_sqrtf((float)FB_D);
  const float *part = (const float *)a->partials + (size_t)bkv * fb_part_floats(a) + (size_t)(g * a->n + i0) * FB_DP;
  const size_t cstride = (size_t)(a->batch * heads_kv) * fb_part_floats(a);
  attn_el *dq = (attn_el *)a->dq + (bh * a->n + i0) * FB_D;
  float row[FB_DP];
  for (int r = 0; r < rows; r++) {
    for (int x = 0; x < FB_D; x++) row[x] = part[r * FB_DP + x];
    for (long c = 1; c < C; c++)
      for (int x = 0; x < FB_D; x++) row[x] += part[c * cstride + (size_t)r * FB_DP + x];
    for (int x = 0; x < FB_D; x++) row[x] *= scale;
    attn_store_row(dq + (long)r * FB_D, row, FB_D);
  }
  ATTN_IO_READ(io, (long)rows * C * FB_D);
  ATTN_IO_WRITE(io, (long)rows * FB_D);
}
