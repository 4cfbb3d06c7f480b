/* flash.c: FlashAttention for the CPU in FA2 loop order, fp32, specialised at compile time on
 * ATTN_D (head dimension), ATTN_BR (query rows per block), ATTN_BC (key rows per block), ATTN_CAUSAL, ATTN_UNROLL.
 *
 * Work item = (batch*heads index, query block of BR rows). For each item: Q_i is loaded once (scaled by
 * scale*log2(e) and transposed into Qt), then for each key block K_j, V_j of BC rows: St = K_j Qt (the scores,
 * stored transposed so that each query row is one vector lane), online softmax in base 2 (running max m and sum l
 * per query row), O_i = alpha*O_i + P V_j; finally O_i / l is written once.
 * Causal masking is bottom-right aligned (key j visible to query i iff j <= i + n_kv - n); key blocks that are fully
 * masked are never loaded, and a query row with no visible key outputs zeros.
 *
 * I/O accounting (ATTN_IO_READ / ATTN_IO_WRITE): K_j and V_j are contiguous in slow memory, so the micro-kernels read
 * them in place; each is read by one inner step and counted there, once per query block. Q_i (read once) and O_i
 * (written once) are counted by the entries really touched (partial blocks count their real rows). Causal: for
 * query block i the keys 0 .. i0 + rows - 1 + (n_kv - n) are read (in blocks of BC, the last one cut there), nothing
 * beyond: a query block reads 2*d*min(n_kv, max(0, i0 + rows + n_kv - n)) + rows*d entries and writes rows*d.
 *
 * Split-K (ATTN_SPLIT = S > 1; decode and other problems with fewer query blocks than cores): each query block's
 * visible key blocks are divided among S work items as evenly as possible (counts differ by at most one block). An
 * item writes its partial result to the runtime's partials buffer — the unnormalised O over its keys and each row's
 * running max m and sum l — and attn_kernel_merge combines the S partials of a query block exactly:
 * m = max m_s, O = sum_s 2^(m_s - m) O_s / sum_s 2^(m_s - m) l_s. A part with no key block writes an empty partial
 * (O = 0, m = -inf, l = 0) without reading Q_i. Counted: Q_i once per non-empty part, K and V as before (once per
 * query block in total), rows*(d+2) entries written per part, S*rows*(d+2) read and rows*d written per merge.
 * Without ATTN_SPLIT (or S <= 1) none of this is compiled.
 *
 * Non-finite inputs give what the fp64 reference (runtime/reference.c) gives: a NaN or +inf score, or a row whose
 * visible scores are all -inf, makes the row NaN (through l and O: the NaN-dropping max only sets the shift m, and
 * fl_exp2 keeps NaN); a NaN in V reaches exactly the rows that see its key (hidden keys are skipped, not weighted
 * by 0). Rows that see no key output zeros whatever the inputs hold.
 *
 * Vector code: GCC/Clang vector extensions, so the compiler maps them onto whatever -march gives (AVX-512, AVX2,
 * SSE, NEON); fused multiply-add through intrinsics where the target has them. */
#ifndef ATTN_D
#define ATTN_D 64
#endif
#ifndef ATTN_BR
#define ATTN_BR 64
#endif
#ifndef ATTN_BC
#define ATTN_BC 128
#endif
#ifndef ATTN_CAUSAL
#define ATTN_CAUSAL 0
#endif
#ifndef ATTN_UNROLL
#define ATTN_UNROLL 0
#endif
#ifndef ATTN_SPLIT
#define ATTN_SPLIT 0
#endif

#ifndef ATTN_KERNEL_ABI_H
#include "kernel_abi.h"
#endif
#include <stdint.h>
#include <string.h>
#if defined(__AVX__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

/* Vector width in floats: the widest the target has that divides D (D is a multiple of 8). */
#if defined(__AVX512F__) && ATTN_D % 16 == 0
#define FL_VW 16
#elif defined(__AVX__) && ATTN_D % 8 == 0
#define FL_VW 8
#else
#define FL_VW 4
#endif
/* Vector registers: 32 with AVX-512 (also for 256-bit vectors), else 16. */
#if defined(__AVX512F__)
#define FL_NREG 32
#else
#define FL_NREG 16
#endif

typedef float fl_vf __attribute__((vector_size(FL_VW * 4)));
typedef int32_t fl_vi __attribute__((vector_size(FL_VW * 4)));
/* Same vectors at float alignment, for loads and stores at any float address. */
typedef float fl_vfu __attribute__((vector_size(FL_VW * 4), aligned(4), may_alias));

#define FL_D ATTN_D
#define FL_BR ATTN_BR
#define FL_BC ATTN_BC
#define FL_RUP(x, m) (((x) + (m)-1) / (m) * (m))
#define FL_BRP FL_RUP(FL_BR, FL_VW) /* query rows padded to whole vectors: the lanes of Qt and St */
#define FL_NRV (FL_BRP / FL_VW)      /* vectors of query rows */
#define FL_NDV (FL_D / FL_VW)        /* vectors per row of O and V */
#if ATTN_SPLIT > 1
#define FL_NSPLIT ATTN_SPLIT
#else
#define FL_NSPLIT 1
#endif

/* Register tiles. St = K_j Qt: ST_RC key rows x ST_NR query-row vectors. O += P V: PV_RO query rows x PV_ND
 * vectors of d. Sized so the accumulators plus operands fit the register file; ATTN_UNROLL > 0 overrides the
 * row counts (ST_RC and PV_RO) for the tuner to explore. */
#define FL_MIN(a, b) ((a) < (b) ? (a) : (b))
#if FL_NREG >= 32
#define FL_ST_NR FL_MIN(4, FL_NRV)
#define FL_PV_ND FL_MIN(4, FL_NDV)
#else
#define FL_ST_NR FL_MIN(2, FL_NRV)
#define FL_PV_ND FL_MIN(2, FL_NDV)
#endif
#if ATTN_UNROLL > 0
#define FL_ST_RC ATTN_UNROLL
#define FL_PV_RO ATTN_UNROLL
#elif FL_NREG >= 32
#define FL_ST_RC ((FL_NREG - 8) / FL_ST_NR)
#define FL_PV_RO ((FL_NREG - 8) / FL_PV_ND)
#else
#define FL_ST_RC ((FL_NREG - 4) / FL_ST_NR)
#define FL_PV_RO ((FL_NREG - 4) / FL_PV_ND)
#endif

#define FL_INLINE static inline __attribute__((always_inline))

FL_INLINE fl_vf fl_ld(const float *p) { return *(const fl_vfu *)p; }
FL_INLINE void fl_st(float *p, fl_vf x) { *(fl_vfu *)p = x; }
/* Broadcast: not (fl_vf){0} + s, which costs an add (0 + s is not s for s = -0 without -ffast-math). */
FL_INLINE fl_vf fl_splat(float s) {
#if FL_VW == 16
  return (fl_vf)_mm512_set1_ps(s);
#elif FL_VW == 8 && defined(__AVX__)
  return (fl_vf)_mm256_set1_ps(s);
#else
  fl_vf r;
  for (int i = 0; i < FL_VW; i++) r[i] = s;
  return r;
#endif
}

#if FL_VW == 16
#define FL_FMA(a, b, c) ((fl_vf)_mm512_fmadd_ps((__m512)(a), (__m512)(b), (__m512)(c)))
#define FL_MAX(a, b) ((fl_vf)_mm512_max_ps((__m512)(a), (__m512)(b)))
#elif FL_VW == 8 && defined(__FMA__)
#define FL_FMA(a, b, c) ((fl_vf)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))
#define FL_MAX(a, b) ((fl_vf)_mm256_max_ps((__m256)(a), (__m256)(b)))
#else
#define FL_FMA(a, b, c) ((a) * (b) + (c))
#define FL_MAX(a, b) fl_max_generic((a), (b))
#endif

/* Lane-wise select without the ternary operator (C has no vector ?:): mask lanes are all ones or all zeros. */
FL_INLINE fl_vf fl_sel(fl_vi mask, fl_vf a, fl_vf b) { return (fl_vf)(((fl_vi)a & mask) | ((fl_vi)b & ~mask)); }
__attribute__((unused)) FL_INLINE fl_vf fl_max_generic(fl_vf a, fl_vf b) { return fl_sel(a > b, a, b); }

/* 2^x, lane-wise, relative error ~1e-7: x = n + f with n = round(x), |f| <= 1/2; 2^f by its degree-7 Taylor
 * polynomial (remainder < 5e-9), times 2^n. -inf (a masked score) gives exactly 0; NaN gives NaN (never dropped by
 * the clamp: that is how a NaN score reaches the row sum l and O, as exp(NaN) does in the fp64 reference). +inf
 * gives NaN, not inf: x = s - m (m the row max) is +inf only in a row that holds a NaN or +inf score, which the
 * reference makes NaN anyway. */
FL_INLINE fl_vf fl_exp2_poly(fl_vf f) {
  fl_vf p = fl_splat(1.5252733804059841e-5f);         /* ln2^7/7! */
  p = FL_FMA(p, f, fl_splat(1.5403530393381606e-4f)); /* ln2^6/6! */
  p = FL_FMA(p, f, fl_splat(1.3333558146428443e-3f)); /* ln2^5/5! */
  p = FL_FMA(p, f, fl_splat(9.6181291076284772e-3f)); /* ln2^4/4! */
  p = FL_FMA(p, f, fl_splat(5.5504108664821580e-2f)); /* ln2^3/3! */
  p = FL_FMA(p, f, fl_splat(2.4022650695910071e-1f)); /* ln2^2/2! */
  p = FL_FMA(p, f, fl_splat(6.9314718055994531e-1f)); /* ln2 */
  return FL_FMA(p, f, fl_splat(1.0f));
}

#if FL_VW == 16
/* AVX-512: round and scale by 2^n in one instruction each; below -200 the result underflows to exactly 0. The
 * clamp has x second: vmaxps returns its second operand when either is NaN, so a NaN x stays NaN. */
FL_INLINE fl_vf fl_exp2(fl_vf x) {
  __m512 xc = _mm512_max_ps(_mm512_set1_ps(-200.0f), (__m512)x);
  __m512 n = _mm512_roundscale_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  fl_vf p = fl_exp2_poly((fl_vf)_mm512_sub_ps(xc, n));
  return (fl_vf)_mm512_scalef_ps((__m512)p, n);
}
#else
/* Portable: n from the 1.5*2^23 rounding trick, 2^n built in the exponent bits; lanes below -100 (their weight is
 * under 1e-30 of the row maximum's) give 0, which also keeps 2^n a normal number. A NaN lane compares false, keeps
 * its NaN through the polynomial (NaN times whatever 2^n its bits make is NaN) and is not masked: NaN out. */
FL_INLINE fl_vf fl_exp2(fl_vf x) {
  const fl_vi under = x < -100.0f;
  x = fl_sel(under, fl_splat(-100.0f), x);
  const fl_vf magic = fl_splat(12582912.0f); /* 1.5 * 2^23: adding it rounds to an integer in the low bits */
  fl_vf t = x + magic;
  fl_vf f = x - (t - magic);
  fl_vi e = ((fl_vi)t - 0x4B400000 + 127) << 23;
  return (fl_vf)((fl_vi)(fl_exp2_poly(f) * (fl_vf)e) & ~under);
}
#endif

/* Scratch of one thread, in floats; each part starts on a 64-byte boundary. */
#define FL_QT_SZ FL_RUP(FL_D * FL_BRP, 16)  /* Qt[D][BRP]: scaled Q_i, transposed */
#define FL_ST_SZ FL_RUP(FL_BC * FL_BRP, 16) /* St[BC][BRP]: scores, then probabilities, transposed */
#define FL_O_SZ FL_RUP(FL_BR * FL_D, 16)    /* O[BR][D]: unnormalised output accumulator */
#define FL_V_SZ FL_RUP(FL_BRP, 16)          /* m, l, alpha: one float per query row */

/* St[c][rv..] for c < rc key rows, nr vectors of query rows: St = K Qt over the whole of D. The tile's column-wise
 * max (over its key rows) is folded into mx, so the softmax needs no separate pass for the row max. */
FL_INLINE void fl_scores_tile(const float *restrict kb, const float *restrict qt, float *restrict st,
                              fl_vf *restrict mx, int rc, int nr) {
  fl_vf acc[FL_ST_RC][FL_ST_NR];
  for (int a = 0; a < rc; a++)
    for (int b = 0; b < nr; b++) acc[a][b] = (fl_vf){0};
  for (int k = 0; k < FL_D; k++) {
    fl_vf q[FL_ST_NR];
    for (int b = 0; b < nr; b++) q[b] = fl_ld(qt + k * FL_BRP + b * FL_VW);
    for (int a = 0; a < rc; a++) {
      fl_vf kk = fl_splat(kb[a * FL_D + k]);
      for (int b = 0; b < nr; b++) acc[a][b] = FL_FMA(kk, q[b], acc[a][b]);
    }
  }
  for (int b = 0; b < nr; b++) {
    fl_vf t = mx[b];
    for (int a = 0; a < rc; a++) {
      fl_st(st + a * FL_BRP + b * FL_VW, acc[a][b]);
      t = FL_MAX(t, acc[a][b]);
    }
    mx[b] = t;
  }
}

/* One band of rc key rows across the first nrv query-row vectors (FL_NRV, a compile-time constant, for a full
 * query block: then the tile shapes are constants too). */
FL_INLINE void fl_scores_band(const float *restrict kb, const float *restrict qt, float *restrict st,
                              fl_vf *restrict mx, int rc, int nrv) {
  int rv = 0;
  for (; rv + FL_ST_NR <= nrv; rv += FL_ST_NR) fl_scores_tile(kb, qt + rv * FL_VW, st + rv * FL_VW, mx + rv, rc, FL_ST_NR);
  if (nrv % FL_ST_NR) fl_scores_tile(kb, qt + rv * FL_VW, st + rv * FL_VW, mx + rv, rc, nrv % FL_ST_NR);
}

/* St for cols key rows and the first nrv query-row vectors, and mx = the max of each query row over them. A full
 * block's tail band has a constant height; a partial block's tail goes a key row at a time. */
FL_INLINE void fl_scores(const float *restrict kb, const float *restrict qt, float *restrict st, fl_vf *restrict mx,
                         int cols, int nrv) {
  for (int rv = 0; rv < nrv; rv++) mx[rv] = fl_splat(-__builtin_inff());
  int c = 0;
  for (; c + FL_ST_RC <= cols; c += FL_ST_RC) fl_scores_band(kb + c * FL_D, qt, st + c * FL_BRP, mx, FL_ST_RC, nrv);
  if (cols == FL_BC) {
    if (FL_BC % FL_ST_RC) fl_scores_band(kb + c * FL_D, qt, st + c * FL_BRP, mx, FL_BC % FL_ST_RC, nrv);
  } else {
    for (; c < cols; c++) fl_scores_band(kb + c * FL_D, qt, st + c * FL_BRP, mx, 1, nrv);
  }
}

/* O[r0..r0+ro) [dv..dv+nd vectors) = alpha * O + P V over cols key rows (P read from St, transposed). */
FL_INLINE void fl_pv_tile(const float *restrict vb, const float *restrict st, const float *restrict alpha,
                          float *restrict o, int cols, int ro, int nd) {
  fl_vf acc[FL_PV_RO][FL_PV_ND];
  for (int a = 0; a < ro; a++) {
    fl_vf al = fl_splat(alpha[a]);
    for (int b = 0; b < nd; b++) acc[a][b] = fl_ld(o + a * FL_D + b * FL_VW) * al;
  }
  for (int c = 0; c < cols; c++) {
    fl_vf v[FL_PV_ND];
    for (int b = 0; b < nd; b++) v[b] = fl_ld(vb + c * FL_D + b * FL_VW);
    for (int a = 0; a < ro; a++) {
      fl_vf p = fl_splat(st[c * FL_BRP + a]);
      for (int b = 0; b < nd; b++) acc[a][b] = FL_FMA(p, v[b], acc[a][b]);
    }
  }
  for (int a = 0; a < ro; a++)
    for (int b = 0; b < nd; b++) fl_st(o + a * FL_D + b * FL_VW, acc[a][b]);
}

/* The rest of a tile's triangle on the causal diagonal, after fl_pv_tile took the key rows c < cfull that all its
 * rows see: row a (of ro) adds the key rows cfull <= c <= vis0 + a, c < cols. Out of line and only in blocks that
 * cross the diagonal (fewer than ro key rows per tile), so the tile loop keeps its code. */
static __attribute__((noinline)) void fl_pv_diag(const float *restrict vb, const float *restrict st,
                                                 float *restrict o, int cfull, int cols, long vis0, int ro) {
  for (int a = 0; a < ro; a++) {
    const int cend = vis0 + a + 1 < cols ? (int)(vis0 + a + 1) : cols;
    for (int c = cfull; c < cend; c++) {
      const fl_vf p = fl_splat(st[c * FL_BRP + a]);
      for (int dv = 0; dv < FL_NDV; dv++) {
        float *od = o + a * FL_D + dv * FL_VW;
        fl_st(od, FL_FMA(p, fl_ld(vb + c * FL_D + dv * FL_VW), fl_ld(od)));
      }
    }
  }
}

/* Rows r .. r+ro-1 over cols key rows. masked: the block crosses the causal diagonal, key c is hidden from query row
 * x of the block iff x < c + diag (as in fl_softmax); then each row takes only the keys it sees: a hidden key is
 * skipped, not weighted by its P = 0, since 0 * v is NaN for a NaN (or infinite) v, which must not reach rows that do
 * not see that key. Key rows that no row of the tile sees are skipped altogether. */
FL_INLINE void fl_pv_rows(const float *restrict vb, const float *restrict st, const float *restrict alpha,
                          float *restrict o, int cols, int r, int ro, int masked, long diag) {
  int cfull = cols;
  const long vis0 = r - diag; /* the last key row r sees; row r + a sees up to vis0 + a */
  if (masked) cfull = vis0 + 1 < 0 ? 0 : vis0 + 1 < cols ? (int)(vis0 + 1) : cols;
  int dv = 0;
  for (; dv + FL_PV_ND <= FL_NDV; dv += FL_PV_ND)
    fl_pv_tile(vb + dv * FL_VW, st + r, alpha + r, o + r * FL_D + dv * FL_VW, cfull, ro, FL_PV_ND);
  if (FL_NDV % FL_PV_ND)
    fl_pv_tile(vb + dv * FL_VW, st + r, alpha + r, o + r * FL_D + dv * FL_VW, cfull, ro, FL_NDV % FL_PV_ND);
  if (masked && cfull < cols) fl_pv_diag(vb, st + r, o + r * FL_D, cfull, cols, vis0, ro);
}

/* A full query block's tail band has a constant height; a partial block's goes a row at a time. */
FL_INLINE void fl_pv(const float *restrict vb, const float *restrict st, const float *restrict alpha,
                     float *restrict o, int cols, int rows, int masked, long diag) {
  int r = 0;
  for (; r + FL_PV_RO <= rows; r += FL_PV_RO) fl_pv_rows(vb, st, alpha, o, cols, r, FL_PV_RO, masked, diag);
  if (rows == FL_BR) {
    if (FL_BR % FL_PV_RO) fl_pv_rows(vb, st, alpha, o, cols, r, FL_BR % FL_PV_RO, masked, diag);
  } else {
    for (; r < rows; r++) fl_pv_rows(vb, st, alpha, o, cols, r, 1, masked, diag);
  }
}

/* Online softmax over one key block, given mx (each query row's max over the block from fl_scores): masks where the
 * block crosses the causal diagonal (then mx is recomputed over the visible keys), updates the running max m and
 * sum l, turns St into probabilities P = 2^(s - m) and leaves alpha = 2^(m_old - m_new) for rescaling O.
 * diag = j0 - i0 - (n_kv - n): key row c is hidden from query row r iff r < c + diag. */
FL_INLINE void fl_softmax(float *restrict st, fl_vf *restrict mx, float *restrict m, float *restrict l,
                          float *restrict alpha, int cols, int nrv, int masked, long diag) {
  if (masked) {
    fl_vi lane;
    for (int i = 0; i < FL_VW; i++) lane[i] = i;
    for (int rv = 0; rv < nrv; rv++) mx[rv] = fl_splat(-__builtin_inff());
    for (int c = 0; c < cols; c++) {
      long t = c + diag; /* rows below t are hidden from key c */
      for (int rv = 0; rv < nrv; rv++) {
        long lo = t - (long)rv * FL_VW;
        if (lo <= 0) { /* no hidden lane in this vector */
          mx[rv] = FL_MAX(mx[rv], fl_ld(st + c * FL_BRP + rv * FL_VW));
          continue;
        }
        fl_vi hide = lane < (fl_vi){0} + (int32_t)(lo > FL_VW ? FL_VW : lo);
        fl_vf s = fl_sel(hide, fl_splat(-__builtin_inff()), fl_ld(st + c * FL_BRP + rv * FL_VW));
        fl_st(st + c * FL_BRP + rv * FL_VW, s);
        mx[rv] = FL_MAX(mx[rv], s);
      }
    }
  }
  fl_vf mu[FL_NRV], sum[FL_NRV];
  for (int rv = 0; rv < nrv; rv++) {
    fl_vf mold = fl_ld(m + rv * FL_VW);
    fl_vf mnew = FL_MAX(mold, mx[rv]);
    /* a row that has seen no visible key yet keeps m = -inf; subtract 0 instead so that -inf - -inf never occurs */
    mu[rv] = fl_sel(mnew == fl_splat(-__builtin_inff()), fl_splat(0.0f), mnew);
    fl_st(alpha + rv * FL_VW, fl_exp2(mold - mu[rv]));
    fl_st(m + rv * FL_VW, mnew);
    sum[rv] = (fl_vf){0};
  }
  for (int c = 0; c < cols; c++)
    for (int rv = 0; rv < nrv; rv++) {
      fl_vf p = fl_exp2(fl_ld(st + c * FL_BRP + rv * FL_VW) - mu[rv]);
      fl_st(st + c * FL_BRP + rv * FL_VW, p);
      sum[rv] += p;
    }
  for (int rv = 0; rv < nrv; rv++)
    fl_st(l + rv * FL_VW, FL_FMA(fl_ld(l + rv * FL_VW), fl_ld(alpha + rv * FL_VW), sum[rv]));
}

/* The key blocks [j_begin, j_end) of a query block of rows rows at i0 (nrv of its query-row vectors hold rows):
 * scores, online softmax, O += P V. off = n_kv - n. */
FL_INLINE void fl_blocks(const float *restrict k, const float *restrict v, const float *restrict qt,
                         float *restrict st, float *restrict o, float *restrict m, float *restrict l,
                         float *restrict alpha, long i0, long j_begin, long j_end, long off, int rows, int nrv,
                         attn_io *io) {
  for (long j0 = j_begin; j0 < j_end; j0 += FL_BC) {
    const int cols = (int)(j_end - j0 < FL_BC ? j_end - j0 : FL_BC);
    const float *kb = k + j0 * FL_D, *vb = v + j0 * FL_D;
    ATTN_IO_READ(io, (long)cols * FL_D); /* K_j */
    ATTN_IO_READ(io, (long)cols * FL_D); /* V_j */
    fl_vf mx[FL_NRV];
    fl_scores(kb, qt, st, mx, cols, nrv);
    /* the block crosses the diagonal when its last key is hidden from the block's first row */
    const int masked = ATTN_CAUSAL && j0 + cols - 1 > i0 + off;
    fl_softmax(st, mx, m, l, alpha, cols, nrv, masked, j0 - i0 - off);
    fl_pv(vb, st, alpha, o, cols, rows, masked, j0 - i0 - off);
  }
}

int attn_kernel_abi(void) { return ATTN_KERNEL_ABI_VERSION; }

long attn_kernel_items(const attn_kargs *a) {
  return a->batch * a->heads * ((a->n + FL_BR - 1) / FL_BR) * FL_NSPLIT;
}

size_t attn_kernel_scratch(const attn_kargs *a) {
  (void)a;
  return (size_t)(FL_QT_SZ + FL_ST_SZ + FL_O_SZ + 3 * FL_V_SZ) * sizeof(float);
}

#if ATTN_SPLIT > 1
/* One part's partial in the partials buffer: O[BR][D] (unnormalised), then m[BR] and l[BR]. The S parts of query
 * block qb of head bh are adjacent, at ((bh * nqb + qb) * S + part) * FL_PART floats. */
#define FL_PART (FL_BR * (FL_D + 2))
#endif

void attn_kernel_run(const attn_kargs *a, long item, void *scratch, attn_io *io) {
  const long nqb = (a->n + FL_BR - 1) / FL_BR;
#if ATTN_SPLIT > 1
  /* the parts of one query block are adjacent items, so the dynamic schedule hands them to different threads */
  const long part = item % ATTN_SPLIT;
  item /= ATTN_SPLIT;
#endif
  const long bh = item / nqb;
  long qb = item % nqb;
  /* Causal blocks cost more the later they come: interleave light and heavy ones (0, last, 1, last-1, ...) so that
   * any contiguous split of the items across threads gets a similar share of the work. */
  if (ATTN_CAUSAL) qb = qb % 2 ? nqb - 1 - qb / 2 : qb / 2;
  const long i0 = qb * FL_BR;
  const long b = bh / a->heads, h = bh % a->heads;
  const long heads_kv = a->heads_kv > 0 ? a->heads_kv : a->heads;
  const long hk = h / (a->heads / heads_kv);
  const long n = a->n, n_kv = a->n_kv;
  const int rows = (int)(n - i0 < FL_BR ? n - i0 : FL_BR);
  const float *q = (const float *)a->q + (bh * n + i0) * FL_D;
  const float *k = (const float *)a->k + (b * heads_kv + hk) * n_kv * FL_D;
  const float *v = (const float *)a->v + (b * heads_kv + hk) * n_kv * FL_D;
  float *out = (float *)a->o + (bh * n + i0) * FL_D;

  float *qt = (float *)scratch, *st = qt + FL_QT_SZ, *o = st + FL_ST_SZ;
  float *m = o + FL_O_SZ, *l = m + FL_V_SZ, *alpha = l + FL_V_SZ;

  /* Keys visible to at least one row of this block: j < j_end. */
  long j_end = n_kv;
  if (ATTN_CAUSAL) {
    long last = i0 + rows - 1 + (n_kv - n) + 1; /* one past the last key the block's last row sees */
    if (last < j_end) j_end = last;
  }
#if ATTN_SPLIT > 1
  /* This part's key blocks: [nkb * part / S, nkb * (part + 1) / S) of the nkb holding keys below j_end. */
  const long nkb = j_end > 0 ? (j_end + FL_BC - 1) / FL_BC : 0;
  const long j_begin = nkb * part / ATTN_SPLIT * FL_BC, j_stop = nkb * (part + 1) / ATTN_SPLIT * FL_BC;
  float *po = (float *)a->partials + ((bh * nqb + qb) * ATTN_SPLIT + part) * FL_PART;
  float *pm = po + FL_BR * FL_D, *pl = pm + FL_BR;
  if (j_begin >= j_stop) {
    /* no key block: an empty partial, so that the merge reads every part alike */
    memset(po, 0, sizeof(float) * (size_t)rows * FL_D);
    for (int r = 0; r < rows; r++) {
      pm[r] = -__builtin_inff();
      pl[r] = 0.0f;
    }
    ATTN_IO_WRITE(io, (long)rows * (FL_D + 2));
    return;
  }
#else
  const long j_begin = 0;
#endif

  /* Scores in base 2: fold log2(e) into the scale once, on Q. */
  const float scale = (a->scale != 0.0f ? a->scale : 1.0f / __builtin_sqrtf((float)FL_D)) * 1.4426950408889634f;
  ATTN_IO_READ(io, (long)rows * FL_D);
  for (int r = 0; r < rows; r++)
    for (int kk = 0; kk < FL_D; kk++) qt[kk * FL_BRP + r] = q[(long)r * FL_D + kk] * scale;
  for (int kk = 0; kk < FL_D; kk++)
    for (int r = rows; r < FL_BRP; r++) qt[kk * FL_BRP + r] = 0.0f;
  memset(o, 0, sizeof(float) * FL_BR * FL_D);
  for (int r = 0; r < FL_BRP; r++) {
    m[r] = -__builtin_inff();
    l[r] = 0.0f;
  }

#if ATTN_SPLIT > 1
  if (j_stop < j_end) j_end = j_stop;
#endif
  /* Only the query-row vectors that hold rows: a partial block (the last one, or decode's single row) would
   * otherwise compute scores for all Br rows. Full blocks take a copy of the loop with the compile-time count. */
  if (rows == FL_BR)
    fl_blocks(k, v, qt, st, o, m, l, alpha, i0, j_begin, j_end, n_kv - n, rows, FL_NRV, io);
  else
    fl_blocks(k, v, qt, st, o, m, l, alpha, i0, j_begin, j_end, n_kv - n, rows, (rows + FL_VW - 1) / FL_VW, io);

#if ATTN_SPLIT > 1
  /* The partial, unnormalised: the merge rescales it against the other parts' maxima. */
  (void)out;
  memcpy(po, o, sizeof(float) * (size_t)rows * FL_D);
  for (int r = 0; r < rows; r++) {
    pm[r] = m[r];
    pl[r] = l[r];
  }
  ATTN_IO_WRITE(io, (long)rows * (FL_D + 2));
#else
  /* A row that sees no key (causal, i + n_kv - n < 0) outputs zeros. A row that sees keys divides by l whatever it
   * is, as the reference does: l = NaN (a NaN or +inf score) gives NaN, and l = 0 (every visible score -inf) gives
   * 0 * inf = NaN, the reference's 0/0. */
  for (int r = 0; r < rows; r++) {
    const float inv = !ATTN_CAUSAL || i0 + r + (n_kv - n) >= 0 ? 1.0f / l[r] : 0.0f;
    for (int kk = 0; kk < FL_D; kk++) out[(long)r * FL_D + kk] = o[r * FL_D + kk] * inv;
  }
  ATTN_IO_WRITE(io, (long)rows * FL_D);
#endif
}

#if ATTN_SPLIT > 1
size_t attn_kernel_partials(const attn_kargs *a, long *merge_items) {
  const long blocks = a->batch * a->heads * ((a->n + FL_BR - 1) / FL_BR);
  if (merge_items) *merge_items = blocks;
  return (size_t)blocks * ATTN_SPLIT * FL_PART * sizeof(float);
}

/* Merge item = (batch*heads index, query block): m = max_s m_s per row, weights w_s = 2^(m_s - m) (0 for a part
 * with m_s = -inf: an empty one, or one whose keys the row does not see or scores -inf), O = sum_s w_s O_s /
 * sum_s w_s l_s. A row that sees no key (causal) outputs zeros; a row that sees keys divides whatever l is, as the
 * unsplit kernel does: NaN from a part (NaN m_s, l_s or O_s) stays NaN, and every part at m_s = -inf (all visible
 * scores -inf) leaves l = 0, so 0 * inf = NaN, the reference's 0/0. */
void attn_kernel_merge(const attn_kargs *a, long item, attn_io *io) {
  const long nqb = (a->n + FL_BR - 1) / FL_BR;
  const long bh = item / nqb, i0 = item % nqb * FL_BR;
  const int rows = (int)(a->n - i0 < FL_BR ? a->n - i0 : FL_BR);
  const float *p = (const float *)a->partials + item * ATTN_SPLIT * FL_PART;
  float *out = (float *)a->o + (bh * a->n + i0) * FL_D;
  ATTN_IO_READ(io, (long)ATTN_SPLIT * rows * (FL_D + 2));
  for (int r = 0; r < rows; r++) {
    float mx = -__builtin_inff();
    for (int s = 0; s < ATTN_SPLIT; s++) {
      const float ms = p[s * FL_PART + FL_BR * FL_D + r];
      mx = ms > mx ? ms : mx;
    }
    if (mx == -__builtin_inff()) mx = 0.0f; /* every part at -inf: w_s = 2^-inf = 0, never 2^(-inf - -inf) */
    fl_vf acc[FL_NDV];
    for (int v = 0; v < FL_NDV; v++) acc[v] = (fl_vf){0};
    float l = 0.0f;
    const int sees = !ATTN_CAUSAL || i0 + r + (a->n_kv - a->n) >= 0;
    if (sees)
      for (int s = 0; s < ATTN_SPLIT; s++) {
        const float *ps = p + s * FL_PART;
        const float w = fl_exp2(fl_splat(ps[FL_BR * FL_D + r] - mx))[0];
        l += w * ps[FL_BR * FL_D + FL_BR + r];
        const fl_vf wv = fl_splat(w);
        for (int v = 0; v < FL_NDV; v++) acc[v] = FL_FMA(wv, fl_ld(ps + r * FL_D + v * FL_VW), acc[v]);
      }
    const fl_vf inv = fl_splat(sees ? 1.0f / l : 0.0f);
    for (int v = 0; v < FL_NDV; v++) fl_st(out + (long)r * FL_D + v * FL_VW, acc[v] * inv);
  }
  ATTN_IO_WRITE(io, (long)rows * FL_D);
}
#endif
