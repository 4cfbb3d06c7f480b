/* flash_bwd.c: FlashAttention-2's backward for the CPU, specialised at compile time on ATTN_D (head dimension of Q and
 * K), ATTN_DV (of V and O), ATTN_BR (query rows per block), ATTN_BC (key rows per block), ATTN_CAUSAL and ATTN_DTYPE
 * (f32, f16 or bf16 arrays; the arithmetic is fp32 throughout). The n x n_kv matrices are never stored: P is
 * recomputed block by block from the forward's lse (P = exp(scale q.k - lse)), as FlashAttention does.
 *
 * Per (query block i, key block j): S = scale Q_i K_jᵀ, P = exp(S - lse_i), dP = dO_i V_jᵀ, dS = P ∘ (dP - D_i) with
 * D = rowsum(dO ∘ O) (from the forward's O, recomputed per query block: rows x d_v against the block's rows x Bc x d).
 * Two kinds of work item, independent of each other (both only read q, k, v, o, lse and dout):
 *   - key items (batch, KV head, key block j), first: the outer loop over key blocks of FA2's algorithm.
 *     dV_j += Pᵀ dO_i and dK_j += dSᵀ Q_i over the query heads of the KV head (GQA's sum), then their query blocks,
 *     in that order, kept in the thread's scratch and written once (dk scaled by scale);
 *   - query items (batch, head, query block i): dQ_i += dS K_j over the key blocks in order, written once (scaled).
 * FA2 accumulates dQ across key blocks with atomic adds, whose order varies from run to run; here every element of
 * dq, dk and dv is summed by one item in a fixed order, so the gradients are the same bits for any thread count and
 * schedule, at the price of S and dP computed twice (7 block products where FA2 has 5). The products run in register
 * tiles of 2 rows x 4 vectors of 8 floats (S, dP) or 4 vectors held across the sum (dV, dK, dQ).
 *
 * Causal masking is bottom-right aligned (key j visible to query i iff j <= i + n_kv - n). Hidden entries take no
 * part (they are skipped, not weighted by 0: a NaN in a hidden key's V or in a row's dO that does not see a key
 * reaches nothing through it), key blocks no row of a query block sees are not loaded, and rows that see no key get
 * zero dq; keys no row sees zero dk and dv. Everything else propagates NaN and Inf as the fp64 backward of the same
 * formulas does (a row whose visible scores are all -inf has lse = -inf and P = exp(NaN): NaN gradients).
 *
 * I/O accounting (ATTN_IO_READ / ATTN_IO_WRITE), in elements: a key item reads K_j and V_j once and, per query block
 * of each of its query heads that sees the block, Q_i, dO_i, O_i and lse_i (rows*(d + 2 d_v + 1)); it writes dK_j
 * and dV_j. A query item reads its rows*(d + 2 d_v + 1) once, K_j and V_j for each key block its rows see, and
 * writes dQ_i. */
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
/* Rows of the scratch tiles padded to whole register tiles of FB_TW vectors of 8 floats (64-byte lines too); the
 * padding holds zeros, computed with and never stored. */
#define FB_TW 4
#define FB_BCP FB_RUP(FB_BC, 8 * FB_TW) /* a row of S, P, dP, dS and of the transposed K and V */
#define FB_DP FB_RUP(FB_D, 8 * FB_TW)
#define FB_DVP FB_RUP(FB_DV, 8 * FB_TW)
typedef float fb_v __attribute__((vector_size(32)));
typedef float fb_vu __attribute__((vector_size(32), aligned(4), may_alias));
#define FB_LD(p) (*(const fb_vu *)(p))
#define FB_ST(p, x) (*(fb_vu *)(p) = (x))
static inline fb_v fb_splat(float x) { return (fb_v){x, x, x, x, x, x, x, x}; }

/* Scratch of one thread, in floats; each part starts on a 64-byte boundary. */
#define FB_KR_SZ (FB_BC * FB_DP)             /* K_j rows (dQ += dS K) */
#define FB_KT_SZ (FB_D * FB_BCP)             /* K_j transposed (S = Q Kᵀ along key lanes) */
#define FB_VT_SZ (FB_DV * FB_BCP)            /* V_j transposed (dP = dO Vᵀ) */
#define FB_DK_SZ (FB_BC * FB_DP)             /* dK_j accumulator */
#define FB_DVA_SZ (FB_BC * FB_DVP)           /* dV_j accumulator */
#define FB_QR_SZ (FB_BR * FB_DP)             /* Q_i rows */
#define FB_DO_SZ (FB_BR * FB_DVP)            /* dO_i rows */
#define FB_DQ_SZ (FB_BR * FB_DP)             /* dQ_i accumulator */
#define FB_S_SZ (FB_BR * FB_BCP)             /* S, then P */
#define FB_ROW_SZ FB_RUP(FB_BR, 16)          /* lse_i, D_i: one float per query row */
#define FB_TMP_SZ FB_RUP(FB_D > FB_DV ? FB_D : FB_DV, 16) /* one row in fp32 (V, O; scaled dK, dQ) */

typedef struct fb_scratch {
  float *kr, *kt, *vt, *dk, *dv, *qr, *dor, *dq, *s, *ds, *lse, *dd, *tmp;
} fb_scratch;

static fb_scratch fb_parts(void *scratch) {
  fb_scratch w;
  float *p = (float *)scratch;
  w.kr = p; p += FB_KR_SZ;
  w.kt = p; p += FB_KT_SZ;
  w.vt = p; p += FB_VT_SZ;
  w.dk = p; p += FB_DK_SZ;
  w.dv = p; p += FB_DVA_SZ;
  w.qr = p; p += FB_QR_SZ;
  w.dor = p; p += FB_DO_SZ;
  w.dq = p; p += FB_DQ_SZ;
  w.s = p; p += FB_S_SZ;
  w.ds = p; p += FB_S_SZ;
  w.lse = p; p += FB_ROW_SZ;
  w.dd = p; p += FB_ROW_SZ;
  w.tmp = p;
  return w;
}

int attn_kernel_abi(void) { return ATTN_KERNEL_ABI_VERSION; }

static long fb_heads_kv(const attn_kargs *a) { return a->heads_kv > 0 ? a->heads_kv : a->heads; }
static long fb_key_items(const attn_kargs *a) { return a->batch * fb_heads_kv(a) * ((a->n_kv + FB_BC - 1) / FB_BC); }
static long fb_query_items(const attn_kargs *a) { return a->batch * a->heads * ((a->n + FB_BR - 1) / FB_BR); }

long attn_kernel_items(const attn_kargs *a) { return fb_key_items(a) + fb_query_items(a); }

size_t attn_kernel_scratch(const attn_kargs *a) {
  (void)a;
  return (size_t)(FB_KR_SZ + FB_KT_SZ + FB_VT_SZ + FB_DK_SZ + FB_DVA_SZ + FB_QR_SZ + FB_DO_SZ + FB_DQ_SZ +
                  2 * FB_S_SZ + 2 * FB_ROW_SZ + FB_TMP_SZ) *
         sizeof(float);
}

/* Keys visible to query i: j < fb_key_end(i) (n_kv without the mask; 0 or less for a row that sees none). */
static inline long fb_key_end(const attn_kargs *a, long i) {
  if (!ATTN_CAUSAL) return a->n_kv;
  const long e = i + a->n_kv - a->n + 1;
  return e < a->n_kv ? e : a->n_kv;
}

/* K_j, V_j (cols rows from key j0 of KV head bkv) into fp32: K rows and K, V transposed. */
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

/* Q_i, dO_i, lse_i and D_i = rowsum(dO_i ∘ O_i) of rows rows from query i0 of head bh. */
static void fb_load_q(const attn_kargs *a, long bh, long i0, int rows, fb_scratch *w, attn_io *io) {
  const long row0 = bh * a->n + i0;
  const attn_el *q = (const attn_el *)a->q + row0 * FB_D;
  const attn_el *o = (const attn_el *)a->o + row0 * FB_DV, *dout = (const attn_el *)a->dout + row0 * FB_DV;
  ATTN_IO_READ(io, (long)rows * (FB_D + 2 * FB_DV + 1));
  for (int r = 0; r < rows; r++) {
    attn_load_row(w->qr + r * FB_DP, q + (long)r * FB_D, FB_D);
    memset(w->qr + r * FB_DP + FB_D, 0, sizeof(float) * (FB_DP - FB_D));
    float *dor = w->dor + r * FB_DVP;
    attn_load_row(dor, dout + (long)r * FB_DV, FB_DV);
    memset(dor + FB_DV, 0, sizeof(float) * (FB_DVP - FB_DV));
    attn_load_row(w->tmp, o + (long)r * FB_DV, FB_DV);
    float d = 0.0f;
    for (int x = 0; x < FB_DV; x++) d += dor[x] * w->tmp[x];
    w->dd[r] = d;
    w->lse[r] = a->lse[row0 + r];
  }
}

/* e^x, relative error ~1e-6, in a form GCC vectorises (glibc's expf is a call per element): 2^t with t = x log2(e)
 * split into n = round(t) and |f| <= 1/2, 2^f by its degree-7 Taylor polynomial (as templates/flash.c), times 2^n
 * built in the exponent bits. t below -100 gives exactly 0 (-inf: a -inf score weighs nothing), NaN stays NaN, and t
 * is clamped at 127: for a visible entry S <= lse up to rounding (S = +inf makes lse NaN, and lse = -inf means every
 * visible S is -inf: x = NaN either way, as in the fp64 backward), so only hidden entries, never read, get there. */
static inline float fb_exp(float x) {
  float t = x * 1.4426950408889634f;
  const int under = t < -100.0f;
  t = under ? -100.0f : t;
  t = t > 127.0f ? 127.0f : t;
  const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer in the low bits */
  const float r = t + magic, f = t - (r - magic);
  uint32_t rb;
  memcpy(&rb, &r, 4);
  const uint32_t eb = (rb - 0x4B400000u + 127u) << 23;
  float e;
  memcpy(&e, &eb, 4);
  float p = 1.5252733804059841e-5f;
  p = p * f + 1.5403530393381606e-4f;
  p = p * f + 1.3333558146428443e-3f;
  p = p * f + 9.6181291076284772e-3f;
  p = p * f + 5.5504108664821580e-2f;
  p = p * f + 2.4022650695910071e-1f;
  p = p * f + 6.9314718055994531e-1f;
  p = p * f + 1.0f;
  return under ? 0.0f : p * e;
}

/* out[r][c] = sum_x a[r][x] bt[x][c] over x < len for rows r0, r0 + 1 (the second only when two), all FB_BCP
 * columns: register tiles of 2 rows x FB_TW vectors, each bt vector loaded once for both rows. */
static inline __attribute__((always_inline)) void fb_product(const float *restrict a, int lda, const float *restrict bt,
                                                             int len, float *restrict out, int two) {
  for (int c0 = 0; c0 < FB_BCP; c0 += 8 * FB_TW) {
    fb_v s0[FB_TW], s1[FB_TW];
    for (int j = 0; j < FB_TW; j++) s0[j] = s1[j] = (fb_v){0};
    for (int x = 0; x < len; x++) {
      const fb_v a0 = fb_splat(a[x]), a1 = fb_splat(two ? a[lda + x] : 0.0f);
      for (int j = 0; j < FB_TW; j++) {
        const fb_v b = FB_LD(bt + x * FB_BCP + c0 + 8 * j);
        s0[j] += a0 * b;
        s1[j] += a1 * b;
      }
    }
    for (int j = 0; j < FB_TW; j++) FB_ST(out + c0 + 8 * j, s0[j]);
    if (two)
      for (int j = 0; j < FB_TW; j++) FB_ST(out + FB_BCP + c0 + 8 * j, s1[j]);
  }
}

/* For the rows x cols block: s = P = exp(scale Q Kᵀ - lse), ds = dS = P ∘ (dO Vᵀ - D). Every entry is computed
 * (hidden ones and the zero padding past cols too); the callers read only the visible ones. */
static void fb_block(fb_scratch *w, float scale, int rows) {
  for (int r = 0; r < rows; r += 2) {
    const int two = r + 1 < rows;
    fb_product(w->qr + r * FB_DP, FB_DP, w->kt, FB_D, w->s + r * FB_BCP, two);
    fb_product(w->dor + r * FB_DVP, FB_DVP, w->vt, FB_DV, w->ds + r * FB_BCP, two);
  }
  for (int r = 0; r < rows; r++) {
    float *restrict s = w->s + r * FB_BCP, *restrict ds = w->ds + r * FB_BCP;
    const float lse = w->lse[r], dd = w->dd[r];
    for (int c = 0; c < FB_BCP; c++) {
      const float p = fb_exp(scale * s[c] - lse);
      s[c] = p;
      ds[c] = p * (ds[c] - dd);
    }
  }
}

/* acc[0 .. width) += sum over i in [lo, hi) of coef[i * cstride] * rows[i * rstride + ...]: register tiles of FB_TW
 * vectors held across the sum (width a multiple of 8 FB_TW). */
static inline __attribute__((always_inline)) void fb_accumulate(float *restrict acc, int width,
                                                                const float *restrict coef, long cstride,
                                                                const float *restrict rows, long rstride, long lo,
                                                                long hi) {
  for (int x0 = 0; x0 < width; x0 += 8 * FB_TW) {
    fb_v t[FB_TW];
    for (int j = 0; j < FB_TW; j++) t[j] = FB_LD(acc + x0 + 8 * j);
    for (long i = lo; i < hi; i++) {
      const fb_v cf = fb_splat(coef[i * cstride]);
      for (int j = 0; j < FB_TW; j++) t[j] += cf * FB_LD(rows + i * rstride + x0 + 8 * j);
    }
    for (int j = 0; j < FB_TW; j++) FB_ST(acc + x0 + 8 * j, t[j]);
  }
}

/* Visible keys of row r of a block (query i0 + r, keys from j0): c < the result (clamped to cols; <= 0: none). */
static inline long fb_cols_seen(const attn_kargs *a, long i0, int r, long j0, int cols) {
  const long e = fb_key_end(a, i0 + r) - j0;
  return e < cols ? e : cols;
}

/* Key item: dK_j, dV_j of one key block, summed over the query heads of its KV head and their query blocks. */
static void fb_key_item(const attn_kargs *a, long item, fb_scratch *w, float scale, attn_io *io) {
  const long heads_kv = fb_heads_kv(a), G = a->heads / heads_kv, nkb = (a->n_kv + FB_BC - 1) / FB_BC;
  const long bkv = item / nkb, j0 = item % nkb * FB_BC, b = bkv / heads_kv, hk = bkv % heads_kv;
  const int cols = (int)(a->n_kv - j0 < FB_BC ? a->n_kv - j0 : FB_BC);
  memset(w->dk, 0, sizeof(float) * FB_DK_SZ);
  memset(w->dv, 0, sizeof(float) * FB_DVA_SZ);
  /* the first query that sees key j0: i + n_kv - n >= j0 */
  long i_first = ATTN_CAUSAL ? j0 - (a->n_kv - a->n) : 0;
  if (i_first < 0) i_first = 0;
  if (i_first < a->n) {
    fb_load_kv(a, bkv, j0, cols, w, io);
    for (long g = 0; g < G; g++) {
      const long bh = b * a->heads + hk * G + g;
      for (long i0 = i_first / FB_BR * FB_BR; i0 < a->n; i0 += FB_BR) {
        const int rows = (int)(a->n - i0 < FB_BR ? a->n - i0 : FB_BR);
        fb_load_q(a, bh, i0, rows, w, io);
        fb_block(w, scale, rows);
        /* key c is seen by rows r >= its first (bottom-right causal: later rows see more) */
        for (int c = 0; c < cols; c++) {
          long r_lo = ATTN_CAUSAL ? j0 + c - (a->n_kv - a->n) - i0 : 0;
          if (r_lo < 0) r_lo = 0;
          fb_accumulate(w->dv + c * FB_DVP, FB_DVP, w->s + c, FB_BCP, w->dor, FB_DVP, r_lo, rows);
          fb_accumulate(w->dk + c * FB_DP, FB_DP, w->ds + c, FB_BCP, w->qr, FB_DP, r_lo, rows);
        }
      }
    }
  }
  attn_el *dk = (attn_el *)a->dk + (bkv * a->n_kv + j0) * FB_D;
  attn_el *dv = (attn_el *)a->dv + (bkv * a->n_kv + j0) * FB_DV;
  for (int c = 0; c < cols; c++) {
    for (int x = 0; x < FB_D; x++) w->tmp[x] = scale * w->dk[c * FB_DP + x];
    attn_store_row(dk + (long)c * FB_D, w->tmp, FB_D);
    attn_store_row(dv + (long)c * FB_DV, w->dv + c * FB_DVP, FB_DV);
  }
  ATTN_IO_WRITE(io, (long)cols * (FB_D + FB_DV));
}

/* Query item: dQ_i of one query block over the key blocks its rows see. */
static void fb_query_item(const attn_kargs *a, long item, fb_scratch *w, float scale, attn_io *io) {
  const long nqb = (a->n + FB_BR - 1) / FB_BR, heads_kv = fb_heads_kv(a), G = a->heads / heads_kv;
  const long bh = item / nqb, i0 = item % nqb * FB_BR;
  const long bkv = (bh / a->heads) * heads_kv + (bh % a->heads) / G;
  const int rows = (int)(a->n - i0 < FB_BR ? a->n - i0 : FB_BR);
  memset(w->dq, 0, sizeof(float) * FB_DQ_SZ);
  const long j_end = fb_key_end(a, i0 + rows - 1); /* the last row sees the most keys */
  if (j_end > 0) fb_load_q(a, bh, i0, rows, w, io);
  for (long j0 = 0; j0 < j_end; j0 += FB_BC) {
    const int cols = (int)(j_end - j0 < FB_BC ? j_end - j0 : FB_BC);
    fb_load_kv(a, bkv, j0, cols, w, io);
    fb_block(w, scale, rows);
    for (int r = 0; r < rows; r++) {
      const long seen = fb_cols_seen(a, i0, r, j0, cols);
      if (seen > 0) fb_accumulate(w->dq + r * FB_DP, FB_DP, w->ds + r * FB_BCP, 1, w->kr, FB_DP, 0, seen);
    }
  }
  attn_el *dq = (attn_el *)a->dq + (bh * a->n + i0) * FB_D;
  for (int r = 0; r < rows; r++) {
    for (int x = 0; x < FB_D; x++) w->tmp[x] = scale * w->dq[r * FB_DP + x];
    attn_store_row(dq + (long)r * FB_D, w->tmp, FB_D);
  }
  ATTN_IO_WRITE(io, (long)rows * FB_D);
}

void attn_kernel_run(const attn_kargs *a, long item, void *scratch, attn_io *io) {
  fb_scratch w = fb_parts(scratch);
  const float scale = a->scale != 0.0f ? a->scale : 1.0f / __builtin_sqrtf((float)FB_D);
  const long keys = fb_key_items(a);
  if (item < keys)
    fb_key_item(a, item, &w, scale, io);
  else
    fb_query_item(a, item - keys, &w, scale, io);
}
