/* flash.c: FlashAttention for the CPU in FA2 loop order, specialised at compile time on ATTN_D (head dimension of Q
 * and K), ATTN_DV (of V and O), ATTN_BR (query rows per block), ATTN_BC (key rows per block), ATTN_CAUSAL,
 * ATTN_UNROLL and ATTN_DTYPE (f32, f16 or bf16 arrays; the arithmetic is fp32 throughout).
 *
 * Work item = (batch*heads index, query block of BR rows). For each item: Q_i is loaded once (scaled by
 * scale*log2(e) and transposed into Qt), then for each key block K_j, V_j of BC rows: St = K_j Qt (the scores,
 * stored transposed so that each query row is one vector lane), online softmax in base 2 (running max m and sum l
 * per query row), O_i = alpha*O_i + P V_j; finally O_i / l is written once.
 * Any D and D_V: the scores run over D one key element at a time (no tail), and O and V rows are padded to whole
 * vectors with zero columns (FL_DVP); half-precision K and V blocks, and V rows that are not whole vectors, are
 * converted or padded into scratch once per query block (FL_STAGE_K, FL_STAGE_V), Q on its load, O on its store.
 * Alignment (kernel_abi.h): the lane kernels' vector loads and stores are all in the thread's scratch or in V rows
 * the caller's array holds on a vector boundary; fp32 V blocks whose rows are not (an array only element-aligned)
 * are copied into the staging tile, one read per entry per query block against the 2 BR multiply-adds it feeds,
 * instead of a cache line split on every other vector load. K is read by broadcasts (no vector loads). The dot
 * kernels (items of at most FL_DOT rows) read K and V in place: bound by memory bandwidth, they lose nothing to
 * split loads, and a copy would cost them a pass.
 * Packed rows (decode: n < BR and G = heads / heads_kv > 1): an item takes the G*n query rows that share one KV head
 * (fl_item), so K and V stream once per KV head and the rows fill the vector lanes. Paged (the kernel built with
 * ATTN_LAYOUT 2, which alone reads pages: FL_PAGED), such an item takes every KV head of its sequence, a key block
 * at a time for each head in turn (fl_group: vLLM's pages interleave the heads' rows, and each page then crosses the
 * memory bus once).
 * Causal masking is bottom-right aligned (key j visible to query i iff j <= i + n_kv - n); key blocks that are fully
 * masked are never loaded, and a query row with no visible key outputs zeros.
 * Score modifiers (attn.h), each compiled in only when its spec asks: ATTN_WINDOW (a->window = w > 0: with
 * i' = i + n_kv - n, causal i' - w < j <= i', else |i' - j| < w): an item reads only the keys from its first row's
 * first visible key to its last row's last, and masks the blocks that cross a window edge as the causal diagonal is
 * masked; ATTN_SOFTCAP (a->softcap = c > 0): s = c tanh(s / c) on the scaled score; ATTN_ALIBI (a->alibi: one slope
 * per query head): s -= slope |i' - j|, after the softcap. Both rewrite St after the scores (in base 2, as St is),
 * before the mask and the softmax. Packed rows take their own head's slope.
 *
 * I/O accounting (ATTN_IO_READ / ATTN_IO_WRITE), in elements: K_j (cols*d) and V_j (cols*d_v) are read once per query
 * block (staging copies them to fast memory, which is that read). Q_i (read once, rows*d) and O_i (written once,
 * rows*d_v) are counted by the entries really touched (partial blocks count their real rows). Causal: for query
 * block i the keys 0 .. i0 + rows - 1 + (n_kv - n) are read (in blocks of BC, the last one cut there), nothing
 * beyond: a query block reads (d + d_v)*min(n_kv, max(0, i0 + rows + n_kv - n)) + rows*d entries and writes
 * rows*d_v. A packed block (G heads' rows) counts the same with its rows, and i0 + rows - 1 the query of its last
 * row. A window w reads the keys [lo, hi) with lo = max(0, i0' - w + 1), hi = min(n_kv, i1' + 1) causal or
 * min(n_kv, i1' + w) not (i0', i1' the first and last row's i'; nothing when hi <= lo): (d + d_v)*(hi - lo).
 *
 * Split-K (ATTN_SPLIT = S > 1; decode and other problems with fewer query blocks than cores): each query block's
 * visible key blocks are divided among S work items as evenly as possible (counts differ by at most one block). An
 * item writes its partial result to the runtime's partials buffer — the unnormalised O over its keys and each row's
 * running max m and sum l — and attn_kernel_merge combines the S partials of a query block exactly:
 * m = max m_s, O = sum_s 2^(m_s - m) O_s / sum_s 2^(m_s - m) l_s. A part with no key block writes an empty partial
 * (O = 0, m = -inf, l = 0) without reading Q_i. Counted: Q_i once per non-empty part, K and V as before (once per
 * query block in total), rows*(d_v+2) entries written per part, S*rows*(d_v+2) read and rows*d_v written per merge.
 * Without ATTN_SPLIT (or S <= 1) none of this is compiled.
 *
 * Non-finite inputs give what the fp64 reference (runtime/reference.c) gives: a NaN or +inf score, or a row whose
 * visible scores are all -inf, makes the row NaN (through l and O: the NaN-dropping max only sets the shift m, and
 * fl_exp2 keeps NaN); a NaN in V reaches exactly the rows that see its key (hidden keys are skipped, not weighted
 * by 0). Rows that see no key output zeros whatever the inputs hold.
 *
 * Vector code: GCC/Clang vector extensions, so the compiler maps them onto whatever -march gives (AVX-512, AVX2,
 * SSE, NEON); fused multiply-add through intrinsics (AVX-512) or the compiler's builtins (AVX2) where the target has
 * them. */
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
/* blocks may hide keys from some of their rows */
#define FL_MASK (ATTN_CAUSAL || ATTN_WINDOW)
/* ATTN_LAYOUT 2: the paged kernel (attn_execute_paged's: runtime/paged.c loads it for a plan's first paged call).
 * Only it holds the paged code (the grouped items, the page prefetches: 0.6 s of a kernel's compile time); any
 * other kernel reads K and V as dense or token-major rows and is never handed a block table. */
#if defined(ATTN_LAYOUT) && ATTN_LAYOUT == 2
#define FL_PAGED 1
#else
#define FL_PAGED 0
#endif

#ifndef ATTN_KERNEL_ABI_H
#include "kernel_abi.h"
#endif
#include <stdint.h>
#include <string.h>
/* AVX-512 only: 256-bit vectors take the compiler's builtins below, since parsing <immintrin.h> was a fifth of a
 * kernel's compile time (0.3 of 1.7 s, gcc 12, d = 64) */
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

/* Vector width in floats: the widest the target has that divides D_V, else (a padded tail) the widest it has, except
 * that AVX-512 takes 8 lanes for a D_V below 48 that is not a multiple of 16 (less padding). */
#if defined(__AVX512F__) && (ATTN_DV % 16 == 0 || (ATTN_DV % 8 != 0 && ATTN_DV >= 48))
#define FL_VW 16
#elif defined(__AVX__)
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
/* Bytes of one vector: loads at such a boundary never straddle a cache line. */
#define FL_VALIGN (FL_VW * 4)

#define FL_D ATTN_D
#define FL_DV ATTN_DV
#define FL_BR ATTN_BR
#define FL_BC ATTN_BC
#define FL_RUP(x, m) (((x) + (m)-1) / (m) * (m))
#define FL_BRP FL_RUP(FL_BR, FL_VW)  /* query rows padded to whole vectors: the lanes of Qt and St */
#define FL_NRV (FL_BRP / FL_VW)       /* vectors of query rows */
#define FL_DVP FL_RUP(FL_DV, FL_VW)   /* O and V rows padded to whole vectors (zero columns past D_V) */
#define FL_NDV (FL_DVP / FL_VW)       /* vectors per row of O and V */
/* K and V blocks are read in place when they are fp32 rows of whole vectors; otherwise each block is first converted
 * (half precision) or padded (D_V not a multiple of the vector width) into the thread's scratch, once per query
 * block: BC rows, against the BR x BC x (D + D_V) multiply-adds the block then feeds. Compile-time here; fp32 V
 * blocks are also copied when the caller's rows are not on a vector boundary (fl_blocks). */
#define FL_STAGE_K ATTN_HALF
#define FL_STAGE_V (ATTN_HALF || FL_DV % FL_VW != 0)
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

/* Items of at most FL_DOT rows (decode: one query, or the few query heads of a KV head) take the dot-product kernels
 * below: a query per vector lane would leave most lanes idle, so the scores vectorise along d instead and O += P V
 * keeps up to 8 independent accumulator chains. */
#define FL_DOT 4

#define FL_INLINE static inline __attribute__((always_inline))

FL_INLINE fl_vf fl_ld(const float *p) {
  ATTN_ALIGN_NOTE(p, FL_VALIGN);
  return *(const fl_vfu *)p;
}
FL_INLINE void fl_st(float *p, fl_vf x) {
  ATTN_ALIGN_NOTE(p, FL_VALIGN);
  *(fl_vfu *)p = x;
}
/* Broadcast: not (fl_vf){0} + s, which costs an add (0 + s is not s for s = -0 without -ffast-math). */
FL_INLINE fl_vf fl_splat(float s) {
#if FL_VW == 16
  return (fl_vf)_mm512_set1_ps(s);
#elif FL_VW == 8
  return (fl_vf){s, s, s, s, s, s, s, s};
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
/* _mm256_fmadd_ps and _mm256_max_ps without their header (GCC and Clang name them alike) */
#define FL_FMA(a, b, c) __builtin_ia32_vfmaddps256((a), (b), (c))
#define FL_MAX(a, b) __builtin_ia32_maxps256((a), (b))
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
/* O[max(BR, DOT)][DVP]: unnormalised output accumulator (the dot kernels run 4 rows even when Br is smaller) */
#define FL_O_SZ FL_RUP((FL_BR > FL_DOT ? FL_BR : FL_DOT) * FL_DVP, 16)
#define FL_V_SZ FL_RUP(FL_BRP, 16)          /* m, l, alpha: one float per query row */
/* Kc[BC][D]: a converted (or gathered) K block: fl_kc_sz */
#define FL_QD_SZ FL_RUP(FL_DOT * FL_D, 16)  /* Qd[DOT][D]: scaled Q rows, row-major (items of at most FL_DOT rows) */
#define FL_VC_SZ FL_RUP(FL_BC * FL_DVP, 16) /* Vc[BC][DVP]: a converted, padded (or realigned) V block */
#define FL_AL_SZ (ATTN_ALIBI ? 2 * FL_V_SZ : 0) /* ALiBi: each row's slope (base 2) and i', as floats */

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
    for (int b = 0; b < nd; b++) acc[a][b] = fl_ld(o + a * FL_DVP + b * FL_VW) * al;
  }
  for (int c = 0; c < cols; c++) {
    fl_vf v[FL_PV_ND];
    for (int b = 0; b < nd; b++) v[b] = fl_ld(vb + c * FL_DVP + b * FL_VW);
    for (int a = 0; a < ro; a++) {
      fl_vf p = fl_splat(st[c * FL_BRP + a]);
      for (int b = 0; b < nd; b++) acc[a][b] = FL_FMA(p, v[b], acc[a][b]);
    }
  }
  for (int a = 0; a < ro; a++)
    for (int b = 0; b < nd; b++) fl_st(o + a * FL_DVP + b * FL_VW, acc[a][b]);
}

/* Horizontal sum of a vector. */
FL_INLINE float fl_hsum(fl_vf x) {
#if FL_VW == 16
  return _mm512_reduce_add_ps((__m512)x);
#elif FL_VW == 8
  /* the halves' sum, then its upper pair onto its lower, then lane 1 onto lane 0 (the intrinsics' order and code) */
  typedef float fl_v4 __attribute__((vector_size(16)));
#if defined(__clang__) || __GNUC__ >= 12
  fl_v4 t = __builtin_shufflevector(x, x, 0, 1, 2, 3) + __builtin_ia32_vextractf128_ps256(x, 1);
  t += __builtin_shufflevector(t, t, 2, 3, 2, 3);
  return (t + __builtin_shufflevector(t, t, 1, 1, 1, 1))[0];
#else
  fl_v4 lo, hi;
  memcpy(&lo, &x, sizeof lo);
  memcpy(&hi, (const char *)&x + sizeof lo, sizeof hi);
  fl_v4 t = lo + hi;
  t += (fl_v4){t[2], t[3], t[2], t[3]};
  return t[0] + t[1];
#endif
#else
  float r = 0.0f;
  for (int i = 0; i < FL_VW; i++) r += x[i];
  return r;
#endif
}

/* Scores of R rows (R <= FL_DOT; qd holds them row-major, scaled) against cols key rows as dot products along d, a key
 * row at a time so that K streams in address order (the hardware prefetcher's case); each row's sum is split over pc
 * partial accumulators (R * pc independent chains hide the FMA latency); a d that is not whole vectors ends in a
 * scalar tail. Writes St[c][0..VW) (lanes past R: 0); mx[0]: each lane's max. */
FL_INLINE void fl_scores_dot(const float *restrict kb, long ks, const float *restrict qd, float *restrict st,
                             fl_vf *restrict mx, int cols, int R, int pc) {
  enum { NV = FL_D / FL_VW, TAIL = FL_D % FL_VW };
  fl_vf m = fl_splat(-__builtin_inff());
  for (int c = 0; c < cols; c++) {
    const float *kr = kb + (long)c * ks;
    fl_vf acc[FL_DOT][8];
    for (int r = 0; r < R; r++)
      for (int u = 0; u < pc; u++) acc[r][u] = (fl_vf){0};
    int k = 0;
    for (; k + pc <= NV; k += pc)
      for (int u = 0; u < pc; u++) {
        const fl_vf kv = fl_ld(kr + (k + u) * FL_VW);
        for (int r = 0; r < R; r++) acc[r][u] = FL_FMA(kv, fl_ld(qd + r * FL_D + (k + u) * FL_VW), acc[r][u]);
      }
    for (; k < NV; k++) {
      const fl_vf kv = fl_ld(kr + k * FL_VW);
      for (int r = 0; r < R; r++) acc[r][0] = FL_FMA(kv, fl_ld(qd + r * FL_D + k * FL_VW), acc[r][0]);
    }
    fl_vf sv = (fl_vf){0};
    for (int r = 0; r < R; r++) {
      for (int u = 1; u < pc; u++) acc[r][0] += acc[r][u];
      float x = fl_hsum(acc[r][0]);
      for (int k = NV * FL_VW; k < NV * FL_VW + TAIL; k++) x += kr[k] * qd[r * FL_D + k];
      sv[r] = x;
    }
    fl_st(st + c * FL_BRP, sv);
    m = FL_MAX(m, sv);
  }
  mx[0] = m;
}

/* O[0..R) += P V over the key rows [c0, c1) for R <= FL_DOT rows, kg keys at a time: for each vector of d_v the kg V
 * rows' entries (kg neighbouring rows: V streams in address order) go into R accumulators loaded from and stored
 * back to O (in L1: R * DVP floats), so that any d_v needs only R * kg + R + 1 registers. */
FL_INLINE void fl_pv_dot_keys(const float *restrict vb, long vs, const float *restrict st, float *restrict o, int c0,
                              int c1, int R, int kg) {
  int c = c0;
  for (; c + kg <= c1; c += kg) {
    fl_vf p[8][FL_DOT];
    for (int i = 0; i < kg; i++)
      for (int r = 0; r < R; r++) p[i][r] = fl_splat(st[(c + i) * FL_BRP + r]);
    const float *vr = vb + (long)c * vs;
    for (int b = 0; b < FL_DVP; b += FL_VW) {
      fl_vf acc[FL_DOT];
      for (int r = 0; r < R; r++) acc[r] = fl_ld(o + r * FL_DVP + b);
      for (int i = 0; i < kg; i++) {
        const fl_vf v = fl_ld(vr + i * vs + b);
        for (int r = 0; r < R; r++) acc[r] = FL_FMA(p[i][r], v, acc[r]);
      }
      for (int r = 0; r < R; r++) fl_st(o + r * FL_DVP + b, acc[r]);
    }
  }
  if (kg > 1 && c < c1) fl_pv_dot_keys(vb, vs, st, o, c, c1, R, 1);
}

/* Visibility in a work item. Rows are numbered x = 0 .. rows-1 within the item and keys c = 0 .. cols-1 within a key
 * block; the item's rows map to queries as i = (X0 + x) / gp, gp consecutive rows per query (gp = 1 unpacked; gp = G,
 * the heads sharing a KV head, when decode packs them: fl_item). Key c is seen by the rows lo + gp * c <= x <
 * hi + gp * c, thresholds rising by gp per key: with base = gp * (j0 - off) - X0, causal's lo is base (i' >= j), a
 * window's hi is base + gp * w (i' < j + w) and a non-causal window's lo base - gp * (w - 1) (i' > j - w); a bound
 * that does not apply is FL_FAR. */
#define FL_FAR (__LONG_MAX__ / 4)
typedef struct fl_vis { long gp, lo, hi; } fl_vis;
FL_INLINE long fl_floordiv(long a, long b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
FL_INLINE int fl_clamp_cols(long c, int cols) { return c < 0 ? 0 : c < cols ? (int)c : cols; }
/* One past the last key row x sees: past the largest c with lo + gp * c <= x. */
FL_INLINE int fl_key_end(long x, fl_vis v, int cols) { return fl_clamp_cols(fl_floordiv(x - v.lo, v.gp) + 1, cols); }
/* The first key row x sees: the smallest c with hi + gp * c > x. */
FL_INLINE int fl_key_begin(long x, fl_vis v, int cols) { return fl_clamp_cols(fl_floordiv(x - v.hi, v.gp) + 1, cols); }

/* The keys of a masked tile that not all its rows see, after fl_pv_tile took those they all see, [c0, c1): row a (of
 * ro, row r + a of the item) adds its own keys below c0 and from c1 on. Out of line and only in blocks that cross
 * the causal diagonal or a window's edge, so the tile loop keeps its code. */
static __attribute__((noinline)) void fl_pv_diag(const float *restrict vb, long vs, const float *restrict st,
                                                 float *restrict o, int c0, int c1, int cols, long r, int ro,
                                                 fl_vis vis) {
  for (int a = 0; a < ro; a++) {
    const int b = fl_key_begin(r + a, vis, cols), e = fl_key_end(r + a, vis, cols);
    for (int part = 0; part < 2; part++) {
      const int from = part ? (b > c1 ? b : c1) : b, to = part ? e : (e < c0 ? e : c0);
      for (int c = from; c < to; c++) {
        const fl_vf p = fl_splat(st[c * FL_BRP + a]);
        for (int dv = 0; dv < FL_NDV; dv++) {
          float *od = o + a * FL_DVP + dv * FL_VW;
          fl_st(od, FL_FMA(p, fl_ld(vb + c * vs + dv * FL_VW), fl_ld(od)));
        }
      }
    }
  }
}

/* Rows r .. r+ro-1 over cols key rows. masked: the block crosses the causal diagonal or a window's edge (visibility
 * as above); then each row takes only the keys it sees: a hidden key is skipped, not weighted by its P = 0, since
 * 0 * v is NaN for a NaN (or infinite) v, which must not reach rows that do not see that key. The keys every row of
 * the tile sees, [c0, c1) (c0 the last row's first, c1 the first row's end: both rise with the row), go through the
 * register tile; key rows that no row of the tile sees are skipped altogether. */
FL_INLINE void fl_pv_rows(const float *restrict vb, const float *restrict st, const float *restrict alpha,
                          float *restrict o, int cols, int r, int ro, int masked, fl_vis vis) {
  int c0 = 0, c1 = cols;
  if (masked) {
    c0 = fl_key_begin(r + ro - 1, vis, cols);
    c1 = fl_key_end(r, vis, cols);
    if (c1 < c0) c1 = c0;
  }
  const float *vk = vb + (long)c0 * FL_DVP, *sk = st + (long)c0 * FL_BRP + r;
  int dv = 0;
  for (; dv + FL_PV_ND <= FL_NDV; dv += FL_PV_ND)
    fl_pv_tile(vk + dv * FL_VW, sk, alpha + r, o + r * FL_DVP + dv * FL_VW, c1 - c0, ro, FL_PV_ND);
  if (FL_NDV % FL_PV_ND)
    fl_pv_tile(vk + dv * FL_VW, sk, alpha + r, o + r * FL_DVP + dv * FL_VW, c1 - c0, ro, FL_NDV % FL_PV_ND);
  if (masked) fl_pv_diag(vb, FL_DVP, st + r, o + r * FL_DVP, c0, c1, cols, r, ro, vis);
}

/* A full query block's tail band has a constant height; a partial block's goes a row at a time. */
FL_INLINE void fl_pv(const float *restrict vb, const float *restrict st, const float *restrict alpha,
                     float *restrict o, int cols, int rows, int masked, fl_vis vis) {
  int r = 0;
  for (; r + FL_PV_RO <= rows; r += FL_PV_RO) fl_pv_rows(vb, st, alpha, o, cols, r, FL_PV_RO, masked, vis);
  if (rows == FL_BR) {
    if (FL_BR % FL_PV_RO) fl_pv_rows(vb, st, alpha, o, cols, r, FL_BR % FL_PV_RO, masked, vis);
  } else {
    for (; r < rows; r++) fl_pv_rows(vb, st, alpha, o, cols, r, 1, masked, vis);
  }
}

/* O = alpha O for an item of R <= FL_DOT rows, before the dot kernels add P V. */
FL_INLINE void fl_pv_dot_scale(const float *restrict alpha, float *restrict o, int R) {
  for (int r = 0; r < R; r++) {
    const fl_vf al = fl_splat(alpha[r]);
    for (int b = 0; b < FL_DVP; b += FL_VW) fl_st(o + r * FL_DVP + b, fl_ld(o + r * FL_DVP + b) * al);
  }
}

#if ATTN_SOFTCAP || ATTN_ALIBI
/* tanh, lane-wise: 1 - 2 / (e^2x + 1) with x clamped to +-20 (tanh is +-1 in fp32 there, and e^2x stays finite);
 * NaN compares false, is not clamped and stays NaN. Absolute error ~1e-7. */
FL_INLINE fl_vf fl_tanh(fl_vf x) {
  x = fl_sel(x > 20.0f, fl_splat(20.0f), x);
  x = fl_sel(x < -20.0f, fl_splat(-20.0f), x);
  const fl_vf e = fl_exp2(x * fl_splat(2.8853900817779268f)); /* 2 log2(e) */
  const fl_vf big = fl_splat(1.0f) - fl_splat(2.0f) / (e + fl_splat(1.0f));
  /* below |x| = 1/2 that difference cancels (an absolute error of an ulp of 1, which a large cap c multiplies):
   * tanh's odd series to x^15 instead, within 1e-8 relative there */
  const fl_vf x2 = x * x;
  fl_vf p = fl_splat(-929569.0f / 638512875.0f);
  p = FL_FMA(p, x2, fl_splat(21844.0f / 6081075.0f));
  p = FL_FMA(p, x2, fl_splat(-1382.0f / 155925.0f));
  p = FL_FMA(p, x2, fl_splat(62.0f / 2835.0f));
  p = FL_FMA(p, x2, fl_splat(-17.0f / 315.0f));
  p = FL_FMA(p, x2, fl_splat(2.0f / 15.0f));
  p = FL_FMA(p, x2, fl_splat(-1.0f / 3.0f));
  const fl_vf small = FL_FMA(x * x2, p, x);
  return fl_sel(x2 < 0.25f, small, big);
}

/* What the score modifiers need at run time: the softcap in base 2 (St' = k2 tanh(k1 St), k1 = ln 2 / c,
 * k2 = c log2 e; k2 = 0: off) and ALiBi's per-row slope (base 2) and i' (NULL: off). */
typedef struct fl_mod { float k1, k2; const float *sl, *pos; } fl_mod;

/* St's cols key rows (keys j0 ...) after the softcap and the ALiBi bias, and mx their rows' maxima again. */
FL_INLINE void fl_mods(float *restrict st, fl_vf *restrict mx, int cols, int nrv, long j0, const fl_mod *md) {
  for (int rv = 0; rv < nrv; rv++) mx[rv] = fl_splat(-__builtin_inff());
  for (int c = 0; c < cols; c++) {
    const fl_vf j = fl_splat((float)(j0 + c));
    for (int rv = 0; rv < nrv; rv++) {
      fl_vf x = fl_ld(st + c * FL_BRP + rv * FL_VW);
#if ATTN_SOFTCAP
      if (md->k2 > 0.0f) x = fl_splat(md->k2) * fl_tanh(x * fl_splat(md->k1));
#endif
#if ATTN_ALIBI
      if (md->sl) {
        fl_vf dist = fl_ld(md->pos + rv * FL_VW) - j;
        dist = fl_sel(dist < 0.0f, -dist, dist);
        x = FL_FMA(-fl_ld(md->sl + rv * FL_VW), dist, x);
      }
#endif
      fl_st(st + c * FL_BRP + rv * FL_VW, x);
      mx[rv] = FL_MAX(mx[rv], x);
    }
  }
}
#else
typedef struct fl_mod { int none; } fl_mod;
#endif

/* Online softmax over one key block, given mx (each query row's max over the block from fl_scores): masks where the
 * block crosses the causal diagonal or a window's edge (then mx is recomputed over the visible keys), updates the
 * running max m and sum l, turns St into probabilities P = 2^(s - m) and leaves alpha = 2^(m_old - m_new) for
 * rescaling O. Key row c is seen by rows lo + gp * c <= x < hi + gp * c (fl_vis). */
FL_INLINE void fl_softmax(float *restrict st, fl_vf *restrict mx, float *restrict m, float *restrict l,
                          float *restrict alpha, int cols, int nrv, int masked, fl_vis vis) {
  if (masked) {
    fl_vi lane;
    for (int i = 0; i < FL_VW; i++) lane[i] = i;
    for (int rv = 0; rv < nrv; rv++) mx[rv] = fl_splat(-__builtin_inff());
    for (int c = 0; c < cols; c++) {
      const long tl = vis.gp * c + vis.lo, th = vis.gp * c + vis.hi; /* rows tl <= x < th see key c */
      for (int rv = 0; rv < nrv; rv++) {
        const long lo = tl - (long)rv * FL_VW, hi = th - (long)rv * FL_VW;
        if (lo <= 0 && hi >= FL_VW) { /* no hidden lane in this vector */
          mx[rv] = FL_MAX(mx[rv], fl_ld(st + c * FL_BRP + rv * FL_VW));
          continue;
        }
        const fl_vi hide = (lane < (fl_vi){0} + (int32_t)(lo > FL_VW ? FL_VW : lo)) |
                           (lane >= (fl_vi){0} + (int32_t)(hi < 0 ? 0 : hi > FL_VW ? FL_VW : hi));
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

/* Cache lines of the next block's K (and V) fetched while staging one: enough to start the hardware prefetcher;
 * a whole page at once (up to 1024 lines) stalled on the outstanding misses (two KV heads, d = 64: 0.74 of dense
 * decode with whole 128-key pages prefetched, 0.89-0.91 with 8-32 lines); 64 keeps one KV head's 16-key pages of
 * d = 64 whole (with 32 they ran about 5% slower). */
#define FL_PF_LINES 64

/* Where an item's K and V rows are (kernel_abi.h's layouts): key j's row starts at k + j * ks (v + j * vs), or, paged
 * (table not NULL), at row j % ps of page table[j / ps], pages being ps rows of ks (vs) elements. Dense: ks = D,
 * vs = D_V; token-major and paged rows hold every KV head's row, heads_kv times wider. */
typedef struct fl_kv {
  const attn_el *k, *v; /* key 0 of the item's KV head (paged: page 0's) */
  long ks, vs;          /* elements from one key row to the next (within a page) */
  const int *table;     /* paged: the sequence's block table; NULL otherwise */
  long ps;              /* rows per page */
  long nh;              /* KV heads read from each row: 1, or all heads_kv (a grouped item's, fl_block_heads) */
} fl_kv;

/* Key j's row in units of the row stride (its K row is k + row * ks): j itself, or paged its page's row. */
FL_INLINE long fl_kv_row(const fl_kv *kv, long j) {
  return FL_PAGED && kv->table ? (long)kv->table[j / kv->ps] * kv->ps + j % kv->ps : j;
}

/* The keys j .. j + len - 1 (len <= left) whose rows are evenly spaced: up to the end of j's page. */
FL_INLINE int fl_kv_run(const fl_kv *kv, long j, int left) {
  return FL_PAGED && kv->table && kv->ps - j % kv->ps < left ? (int)(kv->ps - j % kv->ps) : left;
}

#if FL_PAGED
/* Paged: the first FL_PF_LINES cache lines of K's (or V's: isv) run of keys from j, before j_end. Inlined: a call
 * from the block loops costs more than the prefetch (their live vectors are spilled around it: one KV head's 16-key
 * pages ran 15% slower). */
FL_INLINE void fl_prefetch_run(const fl_kv *kv, int isv, long j, long j_end, long max_lines) {
  if (j >= j_end) return;
  const long es = (long)sizeof(attn_el), stride = (isv ? kv->vs : kv->ks) * es;
  long bytes = kv->nh * (isv ? FL_DV : FL_D) * es, rows = fl_kv_run(kv, j, (int)FL_MIN(j_end - j, FL_BC));
  const char *p = (const char *)((isv ? kv->v : kv->k) + fl_kv_row(kv, j) * (stride / es));
  if (stride == bytes) bytes *= rows, rows = 1; /* contiguous */
  long lines = 0;
  for (long r = 0; r < rows && lines < max_lines; r++)
    for (long x = 0; x < bytes && lines < max_lines; x += 64, lines++) __builtin_prefetch(p + r * stride + x);
}

/* Paged, before a pass over K's (V's: isv) rows of the block [j0, j0 + cols): the first FL_PF_HEAD lines of each of
 * its pages after the first, so that no page's stream starts with a miss (16-key pages of two KV heads, d = 128: 0.92
 * of dense decode's speed without, 0.99 with 4 lines, 1.02-1.03 with 8 or 16). */
#define FL_PF_HEAD 8
static __attribute__((noinline)) void fl_prefetch_pages_of(const fl_kv *kv, int isv, long j0, int cols) {
  for (long j = j0 + fl_kv_run(kv, j0, cols); j < j0 + cols; j += kv->ps)
    fl_prefetch_run(kv, isv, j, j0 + cols, FL_PF_HEAD);
}
/* Out of line (once a pass; its inlined copies added to the compile time), called only where the block spans pages. */
FL_INLINE void fl_prefetch_pages(const fl_kv *kv, int isv, long j0, int cols) {
  if (kv->table && fl_kv_run(kv, j0, cols) < cols) fl_prefetch_pages_of(kv, isv, j0, cols);
}

/* Paged, at the run [c, c + len) of K's (V's: isv) rows of the block [j0, j0 + cols): the run after the next jump,
 * fetched while these compute, since a jump to another page defeats the hardware prefetcher (it follows addresses in
 * order: decode over shuffled pages ran at 0.6 of dense without). K's next run; after K's last, the block's first V
 * rows; after V's last, the next block's first K rows (rows = 0: none). The dot loops fetch it a row for each row
 * they compute (FL_PF_STEP rows at a time): 16-key pages of d = 64 are 4 KiB of K, where the hardware prefetcher
 * stops, and its first 64 lines at each jump waited on the outstanding misses (one KV head: 0.78 of dense decode's
 * speed, 0.95 a row at a time; two KV heads 0.93 and 0.97). */
#define FL_PF_STEP 4
/* Row bytes up to which it does so: d = 128's 16-key pages of two KV heads (1 KiB rows) ran 3-5% slower. */
#define FL_PF_ROW 512
typedef struct fl_pf {
  const char *p;      /* the run's first row */
  long stride, bytes; /* from one row to the next; read of each */
  int rows;
} fl_pf;
FL_INLINE fl_pf fl_next_run(const fl_kv *kv, int isv, long j0, int c, int len, int cols, long j_end) {
  fl_pf nx = {0, 0, 0, 0};
  if (!kv->table) return nx;
  long j = j0 + c + len, end = j0 + cols;
  if (c + len >= cols) {
    j = isv ? j : j0;
    end = isv ? j_end : end;
    isv = !isv;
  }
  if (j >= end) return nx;
  const long es = (long)sizeof(attn_el);
  nx.stride = (isv ? kv->vs : kv->ks) * es;
  nx.bytes = kv->nh * (isv ? FL_DV : FL_D) * es;
  nx.rows = fl_kv_run(kv, j, (int)FL_MIN(end - j, FL_BC));
  nx.p = (const char *)((isv ? kv->v : kv->k) + fl_kv_row(kv, j) * (nx.stride / es));
  return nx;
}
/* The next run's rows [r0, r1) (those it has): a row per row computed, the rest with the last. */
FL_INLINE void fl_prefetch_rows(const fl_pf *nx, int r0, int r1) {
  if (nx->bytes > FL_PF_ROW) { /* wider rows: the run's first FL_PF_LINES lines at its start, as a jump did */
    if (r0) return;
    r1 = (int)(FL_PF_LINES * 64 / nx->bytes);
  }
  for (int r = r0; r < r1 && r < nx->rows; r++)
    for (long x = 0; x < nx->bytes; x += 64) __builtin_prefetch(nx->p + r * nx->stride + x);
}
#else
FL_INLINE void fl_prefetch_pages(const fl_kv *kv, int isv, long j0, int cols) {
  (void)kv, (void)isv, (void)j0, (void)cols;
}
#endif

/* The block [j0, j0 + cols) converted or gathered into staging: K rows into kc, V rows into vc (NULL: not staged);
 * paged, the next block's first rows are fetched meanwhile. Out of line: once a block, and its copies in every
 * inlined block loop added to the kernel's compile time. */
static __attribute__((noinline)) void fl_stage(const fl_kv *kv, float *restrict kc, float *restrict vc, long j0,
                                               int cols, long j_end) {
  if (kc)
    for (int c = 0; c < cols; c++) attn_load_row(kc + c * FL_D, kv->k + fl_kv_row(kv, j0 + c) * kv->ks, FL_D);
  if (vc)
    for (int c = 0; c < cols; c++) attn_load_row(vc + c * FL_DVP, kv->v + fl_kv_row(kv, j0 + c) * kv->vs, FL_DV);
#if FL_PAGED
  if (kv->table) {
    fl_prefetch_run(kv, 0, j0 + cols, j_end, FL_PF_LINES);
    fl_prefetch_run(kv, 1, j0 + cols, j_end, FL_PF_LINES);
  }
#else
  (void)j_end;
#endif
}

/* The key blocks [j_begin, j_end) of an item's rows (nrv of its query-row vectors hold rows): scores, online
 * softmax, O += P V. kv: the KV head's K and V rows; kc, vc: staging (FL_STAGE_K, FL_STAGE_V, or rows the lane kernels
 * cannot read in place). dot (an item of at most FL_DOT rows, rows a constant): the dot-product kernels on qd instead
 * of the lane kernels on qt. Paged, a block of BC keys spans pages (one softmax update for all of them): the dot
 * kernels read it in place one page's run of evenly spaced rows at a time (decode streams every page once per KV
 * head, as it streams dense K and V), the lane kernels from staging. Only a masked block read in place ends at its
 * page's end, since the masked P V addresses its rows by one stride. */
FL_INLINE void fl_blocks(const fl_kv *kv, float *restrict kc, float *restrict vc, const float *restrict qt,
                         const float *restrict qd, float *restrict st, float *restrict o, float *restrict m,
                         float *restrict l, float *restrict alpha, long X0, long gp, long j_begin, long j_end,
                         long off, long w, const fl_mod *md, int rows, int nrv, int dot, attn_io *io) {
  /* fp32 V rows in place are on a vector boundary iff the block's first row is and rows are D_V apart (D_V whole
   * vectors here). The lane kernels realign them: BR rows reuse each V vector; they also take K and V from staging
   * when rows are further apart (token-major or paged rows) or in several pages, as their tiles address rows by
   * constant strides. The dot kernels read in place at any stride: their few rows make them bound by memory
   * bandwidth, not loads (a split load costs nothing there), and a copy would add a pass over K and V. The lane
   * kernels read K a scalar at a time (broadcasts), which no alignment slows. */
  const long ks = kv->ks, vs = kv->vs;
  for (long j0 = j_begin; j0 < j_end;) {
    int cols = (int)(j_end - j0 < FL_BC ? j_end - j0 : FL_BC);
    /* visibility of key c: rows lo + gp * c <= x < hi + gp * c (fl_vis); the block is masked when its last key is
     * hidden from the item's first row or its first key from the last row */
    const long base = gp * (j0 - off) - X0;
    const fl_vis vis = {gp, ATTN_CAUSAL ? base : ATTN_WINDOW ? base - gp * (w - 1) : -FL_FAR,
                        ATTN_WINDOW ? base + gp * w : FL_FAR};
    int masked = FL_MASK && (gp * (cols - 1) + vis.lo > 0 || vis.hi < rows);
    if (FL_MASK && masked && dot && !FL_STAGE_V) {
      cols = fl_kv_run(kv, j0, cols);
      masked = gp * (cols - 1) + vis.lo > 0 || vis.hi < rows;
    }
    const int spans = fl_kv_run(kv, j0, cols) < cols;
    const attn_el *kr = kv->k + fl_kv_row(kv, j0) * ks, *vr = kv->v + fl_kv_row(kv, j0) * vs;
    ATTN_IO_READ(io, (long)cols * FL_D);  /* K_j */
    ATTN_IO_READ(io, (long)cols * FL_DV); /* V_j */
    const int stage_k = FL_STAGE_K || (!dot && (ks != FL_D || spans));
    const int stage_v = FL_STAGE_V || (!dot && (vs != FL_DV || spans || (uintptr_t)vr % FL_VALIGN != 0));
    if (stage_k || stage_v) fl_stage(kv, stage_k ? kc : NULL, stage_v ? vc : NULL, j0, cols, j_end);
    fl_vf mx[FL_NRV];
    if (dot) {
      /* a page's run of rows at a time (staged: the whole block) */
      mx[0] = fl_splat(-__builtin_inff());
      if (!stage_k) fl_prefetch_pages(kv, 0, j0, cols);
      for (int c = 0, len; c < cols; c += len) {
        len = stage_k ? cols : fl_kv_run(kv, j0 + c, cols - c);
        /* paged: FL_PF_STEP rows at a time, the next run's as many rows fetched before each (dense: one step) */
#if FL_PAGED
        const int pg = kv->table && !stage_k, step = pg ? FL_PF_STEP : len;
        const fl_pf nx = pg ? fl_next_run(kv, 0, j0, c, len, cols, j_end) : (fl_pf){0, 0, 0, 0};
#else
        const int step = len;
#endif
        const float *kb = stage_k ? kc : (const float *)(kv->k + fl_kv_row(kv, j0 + c) * ks);
        for (int i = 0; i < len; i += step) {
#if FL_PAGED
          if (pg) fl_prefetch_rows(&nx, i, i + step < len ? i + step : nx.rows);
#endif
          fl_vf mc;
          fl_scores_dot(kb + i * (stage_k ? FL_D : ks), stage_k ? FL_D : ks, qd, st + (c + i) * FL_BRP, &mc,
                        FL_MIN(step, len - i), rows, rows == 1 ? 4 : 2);
          mx[0] = FL_MAX(mx[0], mc);
        }
      }
    } else
      fl_scores(stage_k ? kc : (const float *)kr, qt, st, mx, cols, nrv);
#if ATTN_SOFTCAP || ATTN_ALIBI
    fl_mods(st, mx, cols, nrv, j0, md);
#else
    (void)md;
#endif
    fl_softmax(st, mx, m, l, alpha, cols, nrv, masked, vis);
    if (dot) {
      /* O = alpha O + P V: the keys all rows see, a page's run at a time, then (masked) each row's others as
       * fl_pv_rows does */
      fl_pv_dot_scale(alpha, o, rows);
      int c0 = 0, c1 = cols;
      if (masked) {
        c0 = fl_key_begin(rows - 1, vis, cols);
        c1 = fl_key_end(0, vis, cols);
        if (c1 < c0) c1 = c0;
      }
      if (!stage_v) fl_prefetch_pages(kv, 1, j0 + c0, c1 - c0);
      for (int c = c0, len; c < c1; c += len) {
        len = stage_v ? c1 - c : fl_kv_run(kv, j0 + c, c1 - c);
#if FL_PAGED
        const int pg = kv->table && !stage_v, step = pg ? FL_PF_STEP : len;
        const fl_pf nx = pg ? fl_next_run(kv, 1, j0, c, len, cols, j_end) : (fl_pf){0, 0, 0, 0};
#else
        const int step = len;
#endif
        const float *vb = stage_v ? vc + c * FL_DVP : (const float *)(kv->v + fl_kv_row(kv, j0 + c) * vs);
        for (int i = 0; i < len; i += step) {
#if FL_PAGED
          if (pg) fl_prefetch_rows(&nx, i, i + step < len ? i + step : nx.rows);
#endif
          fl_pv_dot_keys(vb, stage_v ? FL_DVP : vs, st + c * FL_BRP, o, i, FL_MIN(i + step, len), rows, 2);
        }
      }
      if (masked)
        fl_pv_diag(stage_v ? vc : (const float *)vr, stage_v ? FL_DVP : vs, st, o, c0, c1, cols, 0, rows, vis);
    } else
      fl_pv(stage_v ? vc : (const float *)vr, st, alpha, o, cols, rows, masked, vis);
    j0 += cols;
  }
}

int attn_kernel_abi(void) { return ATTN_KERNEL_ABI_VERSION; }

/* Work items. Unpacked: (batch*heads index, query block of BR rows), rows = queries of one head. Packed (decode, and
 * any problem with n < BR whose heads share KV heads: G = heads/heads_kv > 1): (batch*heads_kv index, block of BR of
 * the G*n rows X = i*G + g of the KV head's G query heads, query i of head hk*G + g): K and V stream once for all G
 * heads instead of once per head, and the G rows fill the vector lanes a single query would leave empty. */
typedef struct fl_item {
  long bkv;       /* batch * heads_kv + hk: the K/V head */
  long gp;        /* rows per query: G packed, 1 unpacked */
  long qhead0;    /* batch * heads + the first query head of the rows */
  long X0;        /* the first row: query X0 / gp */
  long qb, nqb;   /* this block and the blocks per (batch, head) or (batch, KV head) */
  int rows;
} fl_item;

static int fl_packed(const attn_kargs *a) {
  const long heads_kv = a->heads_kv > 0 ? a->heads_kv : a->heads;
  return a->n < FL_BR && a->heads / heads_kv > 1;
}

static long fl_blocks_of(const attn_kargs *a, long *nqb) {
  const long heads_kv = a->heads_kv > 0 ? a->heads_kv : a->heads;
  if (fl_packed(a)) {
    *nqb = (a->n * (a->heads / heads_kv) + FL_BR - 1) / FL_BR;
    return a->batch * heads_kv * *nqb;
  }
  *nqb = (a->n + FL_BR - 1) / FL_BR;
  return a->batch * a->heads * *nqb;
}

static fl_item fl_item_of(const attn_kargs *a, long block) {
  fl_item t;
  const long heads_kv = a->heads_kv > 0 ? a->heads_kv : a->heads, G = a->heads / heads_kv;
  fl_blocks_of(a, &t.nqb);
  long qb = block % t.nqb;
  if (fl_packed(a)) {
    t.bkv = block / t.nqb;
    t.gp = G;
    t.qhead0 = (t.bkv / heads_kv) * a->heads + (t.bkv % heads_kv) * G;
    t.qb = qb;
    t.X0 = qb * FL_BR;
    const long total = a->n * G;
    t.rows = (int)(total - t.X0 < FL_BR ? total - t.X0 : FL_BR);
    return t;
  }
  const long bh = block / t.nqb;
  /* Causal blocks cost more the later they come: interleave light and heavy ones (0, last, 1, last-1, ...) so that
   * any contiguous split of the items across threads gets a similar share of the work. */
  if (ATTN_CAUSAL) qb = qb % 2 ? t.nqb - 1 - qb / 2 : qb / 2;
  t.bkv = (bh / a->heads) * heads_kv + (bh % a->heads) / G;
  t.gp = 1;
  t.qhead0 = bh;
  t.qb = qb;
  t.X0 = qb * FL_BR;
  t.rows = (int)(a->n - t.X0 < FL_BR ? a->n - t.X0 : FL_BR);
  return t;
}

/* Row x of an item: its query row's offset in elements of d (Q) and of d_v (O) from the arrays' start. */
FL_INLINE long fl_row(const attn_kargs *a, const fl_item *t, long x) {
  const long X = t->X0 + x;
  return (t->qhead0 + X % t->gp) * a->n + X / t->gp;
}

/* Row x of an item: its Q row's (width d) or O row's (width d_v) offset in elements, dense [batch][heads][n] rows or
 * token-major [batch][n][heads] (ATTN_LAYOUT_QO_TOKENS). */
FL_INLINE long fl_qo(const attn_kargs *a, const fl_item *t, long x, long width) {
  const long X = t->X0 + x, bh = t->qhead0 + X % t->gp, i = X / t->gp;
  if (a->layout & ATTN_LAYOUT_QO_TOKENS) return ((bh / a->heads * a->n + i) * a->heads + bh % a->heads) * width;
  return (bh * a->n + i) * width;
}

/* Staging for K blocks: half-precision K, and fp32 K rows the lane kernels cannot read in place (not D apart). */
static long fl_kc_sz(const attn_kargs *a) {
  return FL_STAGE_K || (FL_PAGED && a->block_table) || (a->layout & ATTN_LAYOUT_KV_TOKENS)
             ? FL_RUP(FL_BC * FL_D, 16)
             : 0;
}

/* KV heads per work item: 1, or (paged, every KV head's rows one query block: decode) all heads_kv of a sequence.
 * vLLM's pages interleave the KV heads' rows of a token ([page][slot][heads_kv][d]), so an item that reads one head's
 * rows has the hardware prefetcher fetch the other heads' lines too, which another item then reads from memory again
 * (paged decode with two KV heads ran at 0.5-0.7 of dense decode). A grouped item takes each key block for every KV
 * head in turn (the other heads' rows come from cache), so each page crosses the memory bus once. Only while the
 * batch (times the split) has at least heads_kv items, so that a small batch keeps its parallelism across KV heads.
 * Blocks keep the numbering of one KV head per item (fl_item_of, the partials and the merge): a grouped item is
 * blocks b * heads_kv .. b * heads_kv + heads_kv - 1. */
#define FL_GROUP_MAX 16 /* more KV heads than this: one to an item */
static long fl_group(const attn_kargs *a) {
  const long heads_kv = a->heads_kv > 0 ? a->heads_kv : a->heads;
  if (!FL_PAGED || !a->block_table || heads_kv < 2 || heads_kv > FL_GROUP_MAX ||
      a->n * (a->heads / heads_kv) > FL_DOT || FL_VW < FL_DOT || a->batch * FL_NSPLIT < heads_kv)
    return 1;
  return heads_kv;
}

long attn_kernel_items(const attn_kargs *a) {
  long nqb;
  return fl_blocks_of(a, &nqb) / fl_group(a) * FL_NSPLIT;
}

/* One KV head's state in an item: Qt, O, m, l, alpha, Qd (and ALiBi's rows), St (the fused decode blocks keep every
 * head's scores at once); Kc and Vc are shared. */
#define FL_HEAD_SZ (FL_QT_SZ + FL_O_SZ + 3 * FL_V_SZ + FL_QD_SZ + FL_AL_SZ + FL_ST_SZ)

size_t attn_kernel_scratch(const attn_kargs *a) {
  return (size_t)(FL_QT_SZ + FL_ST_SZ + FL_O_SZ + 3 * FL_V_SZ + fl_kc_sz(a) + FL_VC_SZ + FL_QD_SZ + FL_AL_SZ +
                  (fl_group(a) - 1) * FL_HEAD_SZ) *
         sizeof(float);
}

#if ATTN_SPLIT > 1
/* One part's partial in the partials buffer: O[BR][DVP] (unnormalised), then m[BR] and l[BR]. The S parts of block
 * `block` (fl_item_of's numbering) are adjacent, at (block * S + part) * FL_PART floats. */
#define FL_PART FL_RUP(FL_BR * (FL_DVP + 2), 16) /* whole 64-byte lines: each part's O rows on a vector boundary */
#endif

/* lse of an item's rows (attn_execute_lse): m is in base 2, so ln sum = m ln 2 + ln l; a row that sees no key keeps
 * m = -inf and l = 0 (-inf), as does one whose visible scores are all -inf; NaN stays NaN. */
__attribute__((unused)) static void fl_write_lse(const attn_kargs *a, const fl_item *t, const float *m,
                                                 const float *l, int rows) {
  for (int r = 0; r < rows; r++) a->lse[fl_row(a, t, r)] = m[r] * 0.69314718055994531f + __builtin_logf(l[r]);
}

/* The window's width: a->window, or (none given) one that hides nothing. */
FL_INLINE long fl_window(const attn_kargs *a) {
  return ATTN_WINDOW && a->window > 0 && a->window <= a->n + a->n_kv ? a->window : a->n + a->n_kv + 1;
}

/* Does the row at i' = i + n_kv - n see any key? Causal: i' >= 0; a window that is not causal: i' + w > 0 (its keys
 * end at i' + w; they start at i' - w + 1 <= n_kv - w, always below n_kv). */
FL_INLINE int fl_sees(const attn_kargs *a, long ip) {
  return (!ATTN_CAUSAL || ip >= 0) && (!ATTN_WINDOW || ATTN_CAUSAL || ip + fl_window(a) > 0);
}

/* O row = o row * inv, d_v columns, rounded to the element type. */
FL_INLINE void fl_write_row(attn_el *restrict dst, const float *restrict o, float inv) {
#if ATTN_HALF
  float tmp[FL_DVP] __attribute__((aligned(64)));
  for (int c = 0; c < FL_DVP; c += FL_VW) fl_st(tmp + c, fl_ld(o + c) * fl_splat(inv));
  attn_store_row(dst, tmp, FL_DV);
#else
  for (int c = 0; c < FL_DV; c++) dst[c] = o[c] * inv;
#endif
}

/* fl_blocks' copies with compile-time row counts, each out of line (GCC's time for a function grows faster than its
 * size: one function holding them all compiled 0.05 s slower): full query blocks (lane kernels), one row (dot), and
 * the dot kernels' four rows, which dense items of two to four rows and grouped items' blocks that go head by head
 * share (each copy of the inlined block loop adds to every kernel's compile time). */
#define FL_BLOCKS_COPY(NAME, ROWS, NRV, DOT)                                                                          \
  static __attribute__((noinline)) void NAME(const fl_kv *kv, float *kc, float *vc, const float *qt, const float *qd, \
                                             float *st, float *o, float *m, float *l, float *alpha, long X0, long gp,  \
                                             long j_begin, long j_end, long off, long w, const fl_mod *md,            \
                                             attn_io *io) {                                                           \
    fl_blocks(kv, kc, vc, qt, qd, st, o, m, l, alpha, X0, gp, j_begin, j_end, off, w, md, ROWS, NRV, DOT, io);      \
  }
FL_BLOCKS_COPY(fl_blocks_full, FL_BR, FL_NRV, 0)
FL_BLOCKS_COPY(fl_blocks_dot1, 1, 1, 1)
FL_BLOCKS_COPY(fl_blocks_dot4, FL_DOT, 1, 1)

/* The K and V rows of KV head bkv (batch * heads_kv + hk) with n_kv keys: dense [batch][heads_kv][n_kv] rows,
 * token-major (ATTN_LAYOUT_KV_TOKENS) or paged rows, heads_kv heads wide. */
FL_INLINE fl_kv fl_kv_of(const attn_kargs *a, long bkv, long n_kv) {
  const long heads_kv = a->heads_kv > 0 ? a->heads_kv : a->heads, hk = bkv % heads_kv, b = bkv / heads_kv;
  fl_kv kv = {(const attn_el *)a->k + bkv * n_kv * FL_D, (const attn_el *)a->v + bkv * n_kv * FL_DV, FL_D, FL_DV,
              NULL, 1, 1};
  if (FL_PAGED && a->block_table) {
    kv.k = (const attn_el *)a->k + hk * FL_D;
    kv.v = (const attn_el *)a->v + hk * FL_DV;
    kv.table = a->block_table + b * a->max_pages;
    kv.ps = a->page_size;
  } else if (a->layout & ATTN_LAYOUT_KV_TOKENS) {
    kv.k = (const attn_el *)a->k + (b * n_kv * heads_kv + hk) * FL_D;
    kv.v = (const attn_el *)a->v + (b * n_kv * heads_kv + hk) * FL_DV;
  }
  if ((FL_PAGED && a->block_table) || (a->layout & ATTN_LAYOUT_KV_TOKENS)) {
    kv.ks = heads_kv * FL_D;
    kv.vs = heads_kv * FL_DV;
  }
  return kv;
}

/* Keys visible to at least one row of item t: [*j_lo, *j_end) (the first row's window starts first, the last row sees
 * the last key); a window's keys outside are never read. */
FL_INLINE void fl_key_span(const fl_item *t, long off, long n_kv, long w, long *j_lo, long *j_end) {
  const long ip0 = t->X0 / t->gp + off, ip1 = (t->X0 + t->rows - 1) / t->gp + off;
  long lo = 0, end = n_kv;
  if (ATTN_CAUSAL && ip1 + 1 < end) end = ip1 + 1;
  if (ATTN_WINDOW && ip0 - w + 1 > lo) lo = ip0 - w + 1;
  if (ATTN_WINDOW && !ATTN_CAUSAL && ip1 + w < end) end = ip1 + w;
  if (end < lo) end = lo;
  (void)w;
  *j_lo = lo;
  *j_end = end;
}

/* An item's state before its first key block: its Q rows scaled (by scale * log2(e): scores in base 2), transposed
 * into qt and row-major into qd (rows past the item's zero), O = 0, m = -inf, l = 0, and the score modifiers' values
 * (ALiBi's per-row slopes and positions after qd). Out of line, as is fl_item_done: once an item, and the dense and
 * grouped items' inlined copies cost 0.09 s of each kernel's compile time. */
static __attribute__((noinline)) void fl_item_init(const attn_kargs *a, const fl_item *t, long off,
                                                   float *restrict qt, float *restrict qd, float *restrict o,
                                                   float *restrict m, float *restrict l, fl_mod *md, attn_io *io) {
  const int rows = t->rows;
  const float scale = (a->scale != 0.0f ? a->scale : 1.0f / __builtin_sqrtf((float)FL_D)) * 1.4426950408889634f;
  ATTN_IO_READ(io, (long)rows * FL_D);
  for (int r = 0; r < rows; r++) {
    const attn_el *qr = (const attn_el *)a->q + fl_qo(a, t, r, FL_D);
    for (int kk = 0; kk < FL_D; kk++) qt[kk * FL_BRP + r] = attn_el_f32(qr[kk]) * scale;
    if (r < FL_DOT)
      for (int kk = 0; kk < FL_D; kk++) qd[r * FL_D + kk] = qt[kk * FL_BRP + r];
  }
  for (int r = rows; r < FL_DOT; r++) memset(qd + r * FL_D, 0, sizeof(float) * FL_D);
  for (int kk = 0; kk < FL_D; kk++)
    for (int r = rows; r < FL_BRP; r++) qt[kk * FL_BRP + r] = 0.0f;
  memset(o, 0, sizeof(float) * FL_O_SZ);
  for (int r = 0; r < FL_BRP; r++) {
    m[r] = -__builtin_inff();
    l[r] = 0.0f;
  }
  memset(md, 0, sizeof *md);
  (void)off;
#if ATTN_SOFTCAP
  if (a->softcap > 0.0f) {
    md->k1 = 0.69314718055994531f / a->softcap;
    md->k2 = a->softcap * 1.4426950408889634f;
  }
#endif
#if ATTN_ALIBI
  if (a->alibi) {
    /* each row's slope (its own head's: packed rows mix heads) in base 2, and its i' */
    float *sl = qd + FL_QD_SZ, *pos = sl + FL_V_SZ;
    for (int r = 0; r < FL_BRP; r++) {
      const long X = t->X0 + r;
      sl[r] = r < rows ? a->alibi[(t->qhead0 + X % t->gp) % a->heads] * 1.4426950408889634f : 0.0f;
      pos[r] = r < rows ? (float)(X / t->gp + off) : 0.0f;
    }
    md->sl = sl;
    md->pos = pos;
  }
#endif
}

/* An item's result: its rows of O (rows that see no key: zeros), or (split-K) its part's partial, unnormalised (the
 * merge rescales it against the other parts' maxima); o NULL: an empty partial (O = 0, m = -inf, l = 0), so that the
 * merge reads every part alike. block: the item's block in fl_item_of's numbering. */
static __attribute__((noinline)) void fl_item_done(const attn_kargs *a, const fl_item *t, long block, long part,
                                                   long off, const float *restrict o, const float *restrict m,
                                                   const float *restrict l, attn_io *io) {
  const int rows = t->rows;
#if ATTN_SPLIT > 1
  (void)off;
  float *po = (float *)a->partials + (block * ATTN_SPLIT + part) * FL_PART;
  float *pm = po + FL_BR * FL_DVP, *pl = pm + FL_BR;
  if (o)
    memcpy(po, o, sizeof(float) * (size_t)rows * FL_DVP);
  else
    memset(po, 0, sizeof(float) * (size_t)rows * FL_DVP);
  for (int r = 0; r < rows; r++) {
    pm[r] = o ? m[r] : -__builtin_inff();
    pl[r] = o ? l[r] : 0.0f;
  }
  ATTN_IO_WRITE(io, (long)rows * (FL_DV + 2));
#else
  (void)block, (void)part;
  /* A row that sees no key (causal, i + n_kv - n < 0; a window) outputs zeros. A row that sees keys divides by l
   * whatever it is, as the reference does: l = NaN (a NaN or +inf score) gives NaN, and l = 0 (every visible score
   * -inf) gives 0 * inf = NaN, the reference's 0/0. */
  for (int r = 0; r < rows; r++) {
    const float inv = fl_sees(a, (t->X0 + r) / t->gp + off) ? 1.0f / l[r] : 0.0f;
    fl_write_row((attn_el *)a->o + fl_qo(a, t, r, FL_DV), o + r * FL_DVP, inv);
  }
  ATTN_IO_WRITE(io, (long)rows * FL_DV);
  if (a->lse) fl_write_lse(a, t, m, l, rows);
#endif
}

#if FL_PAGED
/* One KV head of an item: its rows, its K and V rows and its state in the thread's scratch. */
typedef struct fl_head {
  fl_item t;
  fl_kv kv;
  float *qt, *o, *m, *l, *alpha, *qd, *st;
  fl_mod md;
} fl_head;

#if !FL_STAGE_K && !FL_STAGE_V
/* A grouped item's key block [j0, j0 + cols) for all H heads at once, R rows each (the dot kernels; rows past the
 * item's have zero queries in qd), in place, with one softmax update a head: kv holds every head's rows (nh = H), and
 * a page's run of rows at a time each key's and then each V row's heads_kv·d elements are read in address order,
 * every head's share where it lands, as dense decode streams its rows. Blocks a window or the causal diagonal
 * crosses take fl_blocks head by head instead. */
FL_INLINE void fl_block_heads(const fl_kv *kv, fl_head *hd, int H, long j0, int cols, long j_end, int R,
                              attn_io *io) {
  /* O += P V, KG keys at a time: two rows take four (fewer loads and stores of O), four rows two (registers) */
  const int KG = R <= 2 ? 4 : 2;
  fl_vf mx[FL_GROUP_MAX];
  for (int h = 0; h < H; h++) {
    ATTN_IO_READ(io, (long)cols * FL_D);  /* K_j */
    ATTN_IO_READ(io, (long)cols * FL_DV); /* V_j */
    mx[h] = fl_splat(-__builtin_inff());
  }
  fl_prefetch_pages(kv, 0, j0, cols);
  for (int c = 0, len; c < cols; c += len) {
    len = fl_kv_run(kv, j0 + c, cols - c);
    const fl_pf nx = fl_next_run(kv, 0, j0, c, len, cols, j_end);
    const float *kr = (const float *)(kv->k + fl_kv_row(kv, j0 + c) * kv->ks);
    for (int i = 0; i < len; i++) {
      fl_prefetch_rows(&nx, i, i + 1 < len ? i + 1 : nx.rows);
      for (int h = 0; h < H; h++) {
        fl_vf mc;
        fl_scores_dot(kr + ((long)i * H + h) * FL_D, kv->ks, hd[h].qd, hd[h].st + (c + i) * FL_BRP, &mc, 1, R,
                      R == 1 ? 4 : 2);
        mx[h] = FL_MAX(mx[h], mc);
      }
    }
  }
  const fl_vis vis = {1, -FL_FAR, FL_FAR};
  for (int h = 0; h < H; h++) {
#if ATTN_SOFTCAP || ATTN_ALIBI
    fl_mods(hd[h].st, &mx[h], cols, 1, j0, &hd[h].md);
#endif
    fl_softmax(hd[h].st, &mx[h], hd[h].m, hd[h].l, hd[h].alpha, cols, 1, 0, vis);
    fl_pv_dot_scale(hd[h].alpha, hd[h].o, R);
  }
  fl_prefetch_pages(kv, 1, j0, cols);
  for (int c = 0, len; c < cols; c += len) {
    len = fl_kv_run(kv, j0 + c, cols - c);
    const fl_pf nx = fl_next_run(kv, 1, j0, c, len, cols, j_end);
    const float *vr = (const float *)(kv->v + fl_kv_row(kv, j0 + c) * kv->vs);
    for (int i = 0; i < len; i += KG) {
      fl_prefetch_rows(&nx, i, i + KG < len ? i + KG : nx.rows);
      for (int h = 0; h < H; h++)
        fl_pv_dot_keys(vr + h * FL_DV, kv->vs, hd[h].st + c * FL_BRP, hd[h].o, i, FL_MIN(i + KG, len), R, KG);
    }
  }
}
/* Its copies for 2 and FL_DOT = 4 rows, out of line (compile time grows faster than the size of one function). */
#define FL_BLOCK_HEADS(R)                                                                                              \
  static __attribute__((noinline)) void fl_block_heads##R(const fl_kv *kv, fl_head *hd, int H, long j0, int cols,     \
                                                          long j_end, attn_io *io) {                                   \
    fl_block_heads(kv, hd, H, j0, cols, j_end, R, io);                                                                 \
  }
FL_BLOCK_HEADS(2)
FL_BLOCK_HEADS(4)
#endif

/* attn_kernel_run's grouped items (fl_group): H KV heads, blocks item * H .. item * H + H - 1, each with its own
 * state; out of line, so that the dense path's code is what it was. */
static __attribute__((noinline)) void fl_run_group(const attn_kargs *a, long item, long part, int H, void *scratch,
                                                   attn_io *io) {
  const long heads_kv = a->heads_kv > 0 ? a->heads_kv : a->heads;
  /* The heads of a grouped item share the sequence, the rows' queries and so the keys they see. */
  const fl_item t = fl_item_of(a, item * H);
  const long n_kv = a->seq_lens ? a->seq_lens[t.bkv / heads_kv] : a->n_kv, off = n_kv - a->n, w = fl_window(a);
  long j_begin, j_end;
  fl_key_span(&t, off, n_kv, w, &j_begin, &j_end);
#if ATTN_SPLIT > 1
  /* This part's key blocks: [nkb * part / S, nkb * (part + 1) / S) of the nkb from j_begin holding keys below j_end. */
  const long nkb = (j_end - j_begin + FL_BC - 1) / FL_BC, j_lo = j_begin;
  j_begin = j_lo + nkb * part / ATTN_SPLIT * FL_BC;
  const long j_stop = j_lo + nkb * (part + 1) / ATTN_SPLIT * FL_BC;
  if (j_begin >= j_stop) {
    for (int h = 0; h < H; h++) fl_item_done(a, &t, item * H + h, part, off, NULL, NULL, NULL, io);
    return;
  }
  if (j_stop < j_end) j_end = j_stop;
#endif
  fl_head hd[FL_GROUP_MAX];
  /* Scratch: the first head's state around the shared St, Kc and Vc, then the other heads' (FL_HEAD_SZ each). */
  float *st = (float *)scratch + FL_QT_SZ, *kc = st + FL_ST_SZ + FL_O_SZ + 3 * FL_V_SZ, *vc = kc + fl_kc_sz(a);
  for (int h = 0; h < H; h++) {
    fl_head *e = &hd[h];
    e->t = fl_item_of(a, item * H + h);
    e->kv = fl_kv_of(a, e->t.bkv, n_kv);
    e->qt = h ? vc + FL_VC_SZ + FL_QD_SZ + FL_AL_SZ + (h - 1) * FL_HEAD_SZ : (float *)scratch;
    e->o = h ? e->qt + FL_QT_SZ : st + FL_ST_SZ;
    e->m = e->o + FL_O_SZ;
    e->l = e->m + FL_V_SZ;
    e->alpha = e->l + FL_V_SZ;
    e->qd = h ? e->alpha + FL_V_SZ : vc + FL_VC_SZ;
    e->st = h ? e->qd + FL_QD_SZ + FL_AL_SZ : st;
    fl_item_init(a, &e->t, off, e->qt, e->qd, e->o, e->m, e->l, &e->md, io);
  }
  if (FL_STAGE_V) memset(vc, 0, sizeof(float) * FL_VC_SZ); /* the padding columns stay 0 */

#if !FL_STAGE_K && !FL_STAGE_V
  /* Every head's rows of the sequence: key j's rows from k + row * heads_kv * d. */
  fl_kv all = fl_kv_of(a, t.bkv, n_kv);
  all.k = (const attn_el *)a->k, all.v = (const attn_el *)a->v, all.nh = H;
#endif
  /* One key block (BC keys, across pages) at a time, for every head. */
  for (long c0 = j_begin; c0 < j_end;) {
    const long c1 = c0 + FL_MIN(j_end - c0, FL_BC);
#if !FL_STAGE_K && !FL_STAGE_V
    /* every head's rows in one pass while no row's visibility changes inside the block (decode: all blocks but a
     * window's edges); the block is masked as fl_blocks masks it */
    const long base = t.gp * (c0 - off) - t.X0;
    const long lo = ATTN_CAUSAL ? base : ATTN_WINDOW ? base - t.gp * (w - 1) : -FL_FAR;
    const long hi = ATTN_WINDOW ? base + t.gp * w : FL_FAR;
    if (!(FL_MASK && (t.gp * (c1 - c0 - 1) + lo > 0 || hi < t.rows))) {
      /* one or two query heads a KV head take a two-row copy: four rows, half of them zero, took 1.4 times as long
       * with the blocks in cache (two query heads a KV head, d = 64) */
      if (t.rows <= 2) fl_block_heads2(&all, hd, H, c0, (int)(c1 - c0), j_end, io);
      else fl_block_heads4(&all, hd, H, c0, (int)(c1 - c0), j_end, io);
      c0 = c1;
      continue;
    }
#endif
    /* head by head, the dot kernels' rows as four (the rows past the item's have zero queries in qd and are never
     * written out): half-precision or padded rows go through staging, and a window's edge blocks are masked */
    for (int h = 0; h < H; h++)
      fl_blocks_dot4(&hd[h].kv, kc, vc, hd[h].qt, hd[h].qd, st, hd[h].o, hd[h].m, hd[h].l, hd[h].alpha, t.X0, t.gp,
                     c0, c1, off, w, &hd[h].md, io);
    c0 = c1;
  }
  for (int h = 0; h < H; h++) fl_item_done(a, &hd[h].t, item * H + h, part, off, hd[h].o, hd[h].m, hd[h].l, io);
}
#endif

void attn_kernel_run(const attn_kargs *a, long item, void *scratch, attn_io *io) {
#if ATTN_SPLIT > 1
  /* the parts of one query block are adjacent items, so the dynamic schedule hands them to different threads */
  const long part = item % ATTN_SPLIT;
  item /= ATTN_SPLIT;
#else
  const long part = 0;
#endif
#if FL_PAGED
  const long group = fl_group(a);
  if (group > 1) {
    fl_run_group(a, item, part, (int)group, scratch, io);
    return;
  }
#endif
  const fl_item t = fl_item_of(a, item);
  const long heads_kv = a->heads_kv > 0 ? a->heads_kv : a->heads;
  const long n_kv = a->seq_lens ? a->seq_lens[t.bkv / heads_kv] : a->n_kv, off = n_kv - a->n, w = fl_window(a);
  const int rows = t.rows;
  const fl_kv kv = fl_kv_of(a, t.bkv, n_kv);
  float *qt = (float *)scratch, *st = qt + FL_QT_SZ, *o = st + FL_ST_SZ;
  float *m = o + FL_O_SZ, *l = m + FL_V_SZ, *alpha = l + FL_V_SZ, *kc = alpha + FL_V_SZ, *vc = kc + fl_kc_sz(a);
  float *qd = vc + FL_VC_SZ;
  long j_begin, j_end;
  fl_key_span(&t, off, n_kv, w, &j_begin, &j_end);
#if ATTN_SPLIT > 1
  /* This part's key blocks: [nkb * part / S, nkb * (part + 1) / S) of the nkb from j_begin holding keys below j_end. */
  const long nkb = (j_end - j_begin + FL_BC - 1) / FL_BC, j_lo = j_begin;
  j_begin = j_lo + nkb * part / ATTN_SPLIT * FL_BC;
  const long j_stop = j_lo + nkb * (part + 1) / ATTN_SPLIT * FL_BC;
  if (j_begin >= j_stop) {
    fl_item_done(a, &t, item, part, off, NULL, NULL, NULL, io);
    return;
  }
  if (j_stop < j_end) j_end = j_stop;
#endif
  fl_mod md;
  fl_item_init(a, &t, off, qt, qd, o, m, l, &md, io);
  if (FL_STAGE_V) memset(vc, 0, sizeof(float) * FL_VC_SZ); /* the padding columns stay 0 */

  /* Only the query-row vectors that hold rows: a partial block (the last one, or decode's few rows) would otherwise
   * compute scores for all Br rows. Full blocks, and blocks of one vector of rows (decode), take a copy of the loop
   * with a compile-time count, so that their register tiles have constant shapes. */
  const int nrv = (rows + FL_VW - 1) / FL_VW;
#define FL_RUN(COPY) COPY(&kv, kc, vc, qt, qd, st, o, m, l, alpha, t.X0, t.gp, j_begin, j_end, off, w, &md, io)
  /* Four copies of the block loop (compile time grows with them): full blocks, one row, two to four rows as four (the
   * rows past `rows` have zero queries in qd and are never written out), the rest (inlined here). */
  if (rows == FL_BR && FL_BR > FL_DOT) FL_RUN(fl_blocks_full);
  else if (rows == 1) FL_RUN(fl_blocks_dot1);
  else if (rows <= FL_DOT && FL_VW >= FL_DOT) FL_RUN(fl_blocks_dot4);
  else fl_blocks(&kv, kc, vc, qt, qd, st, o, m, l, alpha, t.X0, t.gp, j_begin, j_end, off, w, &md, rows, nrv, 0, io);
#undef FL_RUN
  fl_item_done(a, &t, item, part, off, o, m, l, io);
}

#if ATTN_SPLIT > 1
size_t attn_kernel_partials(const attn_kargs *a, long *merge_items) {
  long nqb;
  const long blocks = fl_blocks_of(a, &nqb);
  if (merge_items) *merge_items = blocks;
  return (size_t)blocks * ATTN_SPLIT * FL_PART * sizeof(float);
}

/* Merge item = a block of attn_kernel_run's numbering: m = max_s m_s per row, weights w_s = 2^(m_s - m) (0 for a
 * part with m_s = -inf: an empty one, or one whose keys the row does not see or scores -inf), O = sum_s w_s O_s /
 * sum_s w_s l_s. A row that sees no key (causal) outputs zeros; a row that sees keys divides whatever l is, as the
 * unsplit kernel does: NaN from a part (NaN m_s, l_s or O_s) stays NaN, and every part at m_s = -inf (all visible
 * scores -inf) leaves l = 0, so 0 * inf = NaN, the reference's 0/0. */
void attn_kernel_merge(const attn_kargs *a, long item, attn_io *io) {
  const fl_item t = fl_item_of(a, item);
  const int rows = t.rows;
  const float *p = (const float *)a->partials + item * ATTN_SPLIT * FL_PART;
  attn_el *out = (attn_el *)a->o;
  ATTN_IO_READ(io, (long)ATTN_SPLIT * rows * (FL_DV + 2));
  for (int r = 0; r < rows; r++) {
    float mx = -__builtin_inff();
    for (int s = 0; s < ATTN_SPLIT; s++) {
      const float ms = p[s * FL_PART + FL_BR * FL_DVP + r];
      mx = ms > mx ? ms : mx;
    }
    if (mx == -__builtin_inff()) mx = 0.0f; /* every part at -inf: w_s = 2^-inf = 0, never 2^(-inf - -inf) */
    float acc[FL_DVP] __attribute__((aligned(64)));
    for (int c = 0; c < FL_DVP; c += FL_VW) fl_st(acc + c, (fl_vf){0});
    float l = 0.0f;
    const long n_kv = a->seq_lens ? a->seq_lens[t.bkv / (a->heads_kv > 0 ? a->heads_kv : a->heads)] : a->n_kv;
    const int sees = fl_sees(a, (t.X0 + r) / t.gp + (n_kv - a->n));
    if (sees)
      for (int s = 0; s < ATTN_SPLIT; s++) {
        const float *ps = p + s * FL_PART;
        const float w = fl_exp2(fl_splat(ps[FL_BR * FL_DVP + r] - mx))[0];
        l += w * ps[FL_BR * FL_DVP + FL_BR + r];
        const fl_vf wv = fl_splat(w);
        for (int c = 0; c < FL_DVP; c += FL_VW) fl_st(acc + c, FL_FMA(wv, fl_ld(ps + r * FL_DVP + c), fl_ld(acc + c)));
      }
    fl_write_row(out + fl_qo(a, &t, r, FL_DV), acc, sees ? 1.0f / l : 0.0f);
    if (a->lse) a->lse[fl_row(a, &t, r)] = mx * 0.69314718055994531f + __builtin_logf(l); /* l = 0 gives -inf */
  }
  ATTN_IO_WRITE(io, (long)rows * FL_DV);
}
#endif
