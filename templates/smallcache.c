/* smallcache.c: exact attention for a small fast memory (Saha & Ye's algorithm, O(n^2 d / sqrt(M)) for M < d^2),
 * specialised on ATTN_D (Q, K width), ATTN_DV (V, O width), ATTN_DTYPE (f32, f16 or bf16 in slow memory; the fast
 * memory tiles, S and all arithmetic are fp32), ATTN_BR (query rows per work item), ATTN_TILE (side T of the square
 * tiles), ATTN_CAUSAL.
 *
 * Work item = (batch*heads index, block of BR query rows). Fast memory holds a few T x T tiles (Q, K or V, the
 * accumulator) and the row statistics m, l of the block; slow memory is Q, K, V, O and the item's scratch S
 * (BR x n_kv floats, never n x n at once).
 *   1. S = scale * Q_i K^T by the tiled product: for each T x T tile of S, accumulate over d in chunks of T (a T x T
 *      tile of Q and one of K read per chunk, converted to fp32), fold the tile into the running row max m and sum l
 *      (online softmax), write the tile to S.
 *   2. O_i = P V by the tiled product: for each T x T tile of O_i, accumulate over the keys in chunks of T (a tile of S
 *      read and turned into P = exp(S - m) / l on the fly, a tile of V read), round the tile to the dtype, write it.
 * I/O per item in entries, with R query rows, C visible keys (causal: C = min(n_kv, max(0, i0 + R + n_kv - n))),
 * ceil-counts nr = ceil(R/T), nc = ceil(C/T), nd = ceil(d/T), ndv = ceil(d_v/T), partial tiles counted by their
 * real sizes:
 *   reads  = d*R*nc + d*C*nr   (Q and K tiles)   +   R*C*ndv + d_v*C*nr   (S and V tiles)
 *   writes = R*C (S)  +  R*d_v (O)
 * With R = T = B dividing n, d and d_v: 2 n^2 (d + d_v) / B + n^2 + n d_v in total; for d_v = d, 4 n^2 d / B + n^2
 * + n d, Saha & Ye's count with B = sqrt(M/4).
 * Causal masking is bottom-right aligned; a query row with no visible key outputs zeros.
 * Score modifiers (attn.h), compiled in when the spec asks: ATTN_SOFTCAP (s = c tanh(s / c)) and ATTN_ALIBI
 * (s -= slope_h |i' - j|) on each scaled score before the mask; ATTN_WINDOW (w: causal i' - w < j <= i', else
 * |i' - j| < w, i' = i + n_kv - n) masks like the causal diagonal, and the block reads only the keys [lo, hi) its
 * rows' windows reach (lo = max(0, i0' - w + 1) for its first row's i0', hi its last row's end): C = hi - lo above.
 * Non-finite inputs give what the fp64 reference (runtime/reference.c) gives: a NaN or +inf score, or a row whose
 * visible scores are all -inf (0/0), makes the row NaN; a NaN in V reaches exactly the rows that see its key (a
 * visible key of weight 0 still multiplies its V row, a hidden one is skipped). The half conversions keep NaN and
 * infinities.
 * Alignment: the products read only the fp32 tiles in fast memory (the thread's scratch), never the caller's arrays,
 * so any element alignment of Q, K, V and O runs the same loops at the same addresses (kernel_abi.h). */
#ifndef ATTN_D
#define ATTN_D 64
#endif
#ifndef ATTN_BR
#define ATTN_BR 32
#endif
#ifndef ATTN_BC
#define ATTN_BC 32
#endif
#ifndef ATTN_DV
#define ATTN_DV ATTN_D
#endif
#ifndef ATTN_CAUSAL
#define ATTN_CAUSAL 0
#endif
#ifndef ATTN_TILE
#define ATTN_TILE 0
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
#include <math.h>
#include <string.h>

#define SC_D ATTN_D
#define SC_DV ATTN_DV
#define SC_BR ATTN_BR
/* tile 0: derived, the block height (the square tiling of the analysis) */
#define SC_T (ATTN_TILE > 0 ? ATTN_TILE : ATTN_BR)
#define SC_MIN(a, b) ((a) < (b) ? (a) : (b))

int attn_kernel_abi(void) { return ATTN_KERNEL_ABI_VERSION; }

/* The keys [*lo, *hi) the row at i' = i + n_kv - n sees (empty when *hi <= *lo), w the window (> n + n_kv: none). */
static inline void sc_keys(long ip, long n_kv, long w, long *lo, long *hi) {
  long a = 0, b = n_kv;
  if (ATTN_CAUSAL && ip + 1 < b) b = ip + 1;
  if (ATTN_WINDOW && ip - w + 1 > a) a = ip - w + 1;
  if (ATTN_WINDOW && !ATTN_CAUSAL && ip + w < b) b = ip + w;
  *lo = a;
  *hi = b > a ? b : a;
}

/* Where key rows of one KV head are: key j at base + j * rs, or, paged (table not NULL), row j % ps of page
 * table[j / ps], pages of ps rows of rs elements (base: the head's columns in page 0). */
typedef struct sc_kv {
  const attn_el *base;
  long rs;
  const int *table;
  long ps;
} sc_kv;

static inline const attn_el *sc_key(const sc_kv *kv, long j) {
  if (kv->table) return kv->base + ((long)kv->table[j / kv->ps] * kv->ps + j % kv->ps) * kv->rs;
  return kv->base + j * kv->rs;
}

long attn_kernel_items(const attn_kargs *a) { return a->batch * a->heads * ((a->n + SC_BR - 1) / SC_BR); }

/* Slow scratch S (BR x n_kv), then fast memory: three T x T tiles and m, l for BR rows. */
size_t attn_kernel_scratch(const attn_kargs *a) {
  const size_t s = ((size_t)SC_BR * (size_t)(a->n_kv > 0 ? a->n_kv : 1) + 15) / 16 * 16;
  return (s + 3 * (size_t)SC_T * SC_T + 2 * SC_BR + 16) * sizeof(float);
}

void attn_kernel_run(const attn_kargs *a, long item, void *scratch, attn_io *io) {
  const long nqb = (a->n + SC_BR - 1) / SC_BR;
  const long bh = item / nqb, i0 = (item % nqb) * SC_BR;
  const long b = bh / a->heads, h = bh % a->heads;
  const long heads_kv = a->heads_kv > 0 ? a->heads_kv : a->heads;
  const long hk = h / (a->heads / heads_kv);
  const long n = a->n, n_kv = a->seq_lens ? a->seq_lens[b] : a->n_kv, off = n_kv - n;
  const long R = SC_MIN(n - i0, (long)SC_BR);
  /* Rows: query row r of the block at q + r * qs (O: out + r * os), key j at sc_key(&kv, j) (kernel_abi.h's
   * layouts: dense, token-major, paged) */
  const attn_el *q = (const attn_el *)a->q + (bh * n + i0) * SC_D;
  attn_el *out = (attn_el *)a->o + (bh * n + i0) * SC_DV;
  long qs = SC_D, os = SC_DV;
  if (a->layout & ATTN_LAYOUT_QO_TOKENS) {
    q = (const attn_el *)a->q + ((b * n + i0) * a->heads + h) * SC_D;
    out = (attn_el *)a->o + ((b * n + i0) * a->heads + h) * SC_DV;
    qs = a->heads * SC_D;
    os = a->heads * SC_DV;
  }
  sc_kv kv = {(const attn_el *)a->k + (b * heads_kv + hk) * n_kv * SC_D, SC_D, NULL, 1};
  sc_kv vv = {(const attn_el *)a->v + (b * heads_kv + hk) * n_kv * SC_DV, SC_DV, NULL, 1};
  if (a->block_table || (a->layout & ATTN_LAYOUT_KV_TOKENS)) {
    const long first = a->block_table ? 0 : b * n_kv * heads_kv; /* row of key 0 (paged: of page 0) */
    kv.base = (const attn_el *)a->k + (first + hk) * SC_D;
    vv.base = (const attn_el *)a->v + (first + hk) * SC_DV;
    kv.rs = heads_kv * SC_D;
    vv.rs = heads_kv * SC_DV;
    if (a->block_table) {
      kv.table = vv.table = a->block_table + b * a->max_pages;
      kv.ps = vv.ps = a->page_size;
    }
  }
  const float scale = a->scale != 0.0f ? a->scale : 1.0f / sqrtf((float)SC_D);
  const long w = ATTN_WINDOW && a->window > 0 && a->window <= n + n_kv ? a->window : n + n_kv + 1;
  const float cap = ATTN_SOFTCAP && a->softcap > 0.0f ? a->softcap : 0.0f;
  const float slope = ATTN_ALIBI && a->alibi ? a->alibi[h] : 0.0f;

  /* keys visible to at least one row of the block: [K0, C) (the first row's window starts first, the last row's
   * keys end last) */
  long K0, C, lo1;
  sc_keys(i0 + off, n_kv, w, &K0, &lo1);
  sc_keys(i0 + R - 1 + off, n_kv, w, &lo1, &C);
  if (C < K0) C = K0;
  const long ldS = n_kv > 0 ? n_kv : 1;
  float *S = (float *)scratch; /* slow */
  float *ta = S + ((size_t)SC_BR * ldS + 15) / 16 * 16;
  float *tb = ta + SC_T * SC_T, *acc = tb + SC_T * SC_T;
  float *m = acc + SC_T * SC_T, *l = m + SC_BR;
  for (long r = 0; r < R; r++) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }

  /* 1. S = scale * Q K^T, tile by tile, with the online row statistics. */
  for (long r0 = 0; r0 < R; r0 += SC_T) {
    const long tr = SC_MIN((long)SC_T, R - r0);
    for (long c0 = K0; c0 < C; c0 += SC_T) {
      const long tc = SC_MIN((long)SC_T, C - c0);
      for (long x = 0; x < tr * tc; x++) acc[x] = 0.0f;
      for (long k0 = 0; k0 < SC_D; k0 += SC_T) {
        const long tk = SC_MIN((long)SC_T, SC_D - k0);
        for (long r = 0; r < tr; r++) attn_load_row(ta + r * SC_T, q + (r0 + r) * qs + k0, tk);
        ATTN_IO_READ(io, tr * tk);
        for (long c = 0; c < tc; c++) attn_load_row(tb + c * SC_T, sc_key(&kv, c0 + c) + k0, tk);
        ATTN_IO_READ(io, tc * tk);
        for (long r = 0; r < tr; r++)
          for (long c = 0; c < tc; c++) {
            const float *qr = ta + r * SC_T, *kr = tb + c * SC_T;
            ATTN_ALIGN_NOTE(qr, 64);
            ATTN_ALIGN_NOTE(kr, 64);
            float s = 0.0f;
            for (long kk = 0; kk < tk; kk++) s += qr[kk] * kr[kk];
            acc[r * tc + c] += s;
          }
      }
      for (long r = 0; r < tr; r++) {
        const long i = i0 + r0 + r;
        long vlo, vhi;
        sc_keys(i + off, n_kv, w, &vlo, &vhi);
        float mx = m[r0 + r];
        for (long c = 0; c < tc; c++) {
          float s = acc[r * tc + c] * scale;
          if (ATTN_SOFTCAP && cap > 0.0f) s = cap * tanhf(s / cap);
          if (ATTN_ALIBI) s -= slope * fabsf((float)(i + off - (c0 + c)));
          if ((ATTN_CAUSAL || ATTN_WINDOW) && (c0 + c < vlo || c0 + c >= vhi)) s = -INFINITY;
          acc[r * tc + c] = s;
          if (s > mx) mx = s;
        }
        /* The max skips NaN scores; they reach l through the sum (exp(NaN) = NaN, as in the reference). A row at
         * -inf so far shifts by 0, so that -inf - -inf never occurs: its sum stays 0 (all -inf). */
        const float mu = mx == -INFINITY ? 0.0f : mx;
        float sum = 0.0f;
        for (long c = 0; c < tc; c++) sum += expf(acc[r * tc + c] - mu);
        l[r0 + r] = l[r0 + r] * expf(m[r0 + r] - mu) + sum;
        m[r0 + r] = mx;
      }
      for (long r = 0; r < tr; r++) memcpy(S + (r0 + r) * ldS + c0, acc + r * tc, sizeof(float) * (size_t)tc);
      ATTN_IO_WRITE(io, tr * tc);
    }
  }
  /* 0 for a row with no visible key; a row that sees keys divides whatever l is, as the reference does: NaN stays
   * NaN and l = 0 (every visible score -inf) gives 0 * inf = NaN, the reference's 0/0. */
  /* lse (attn_execute_lse): m + ln l; -inf for a row that sees no key or whose visible scores are all -inf */
  if (a->lse)
    for (long r = 0; r < R; r++) a->lse[bh * n + i0 + r] = m[r] + logf(l[r]);
  for (long r = 0; r < R; r++) {
    long vlo, vhi;
    sc_keys(i0 + r + off, n_kv, w, &vlo, &vhi);
    l[r] = vhi > vlo ? 1.0f / l[r] : 0.0f;
  }

  /* 2. O = P V, P = exp(S - m) / l applied to each S tile as it is read. */
  for (long r0 = 0; r0 < R; r0 += SC_T) {
    const long tr = SC_MIN((long)SC_T, R - r0);
    for (long d0 = 0; d0 < SC_DV; d0 += SC_T) {
      const long td = SC_MIN((long)SC_T, SC_DV - d0);
      for (long x = 0; x < tr * td; x++) acc[x] = 0.0f;
      for (long c0 = K0; c0 < C; c0 += SC_T) {
        const long tc = SC_MIN((long)SC_T, C - c0);
        for (long r = 0; r < tr; r++) {
          const float mr = m[r0 + r] == -INFINITY ? 0.0f : m[r0 + r];
          for (long c = 0; c < tc; c++) ta[r * SC_T + c] = expf(S[(r0 + r) * ldS + c0 + c] - mr);
        }
        ATTN_IO_READ(io, tr * tc);
        for (long c = 0; c < tc; c++) attn_load_row(tb + c * SC_T, sc_key(&vv, c0 + c) + d0, td);
        ATTN_IO_READ(io, tc * td);
        for (long r = 0; r < tr; r++) {
          /* only the keys row r sees: a hidden key's P = 0 times a NaN (or infinite) V would be NaN */
          long c_lo = 0, c_hi = tc;
          if (ATTN_CAUSAL || ATTN_WINDOW) {
            long vlo, vhi;
            sc_keys(i0 + r0 + r + off, n_kv, w, &vlo, &vhi);
            c_lo = vlo - c0 < 0 ? 0 : vlo - c0 < tc ? vlo - c0 : tc;
            c_hi = vhi - c0 < c_lo ? c_lo : vhi - c0 < tc ? vhi - c0 : tc;
          }
          for (long c = c_lo; c < c_hi; c++) {
            const float p = ta[r * SC_T + c], *vr = tb + c * SC_T;
            ATTN_ALIGN_NOTE(vr, 64);
            for (long dd = 0; dd < td; dd++) acc[r * td + dd] += p * vr[dd];
          }
        }
      }
      for (long r = 0; r < tr; r++) {
        float *ar = acc + r * td;
        for (long dd = 0; dd < td; dd++) ar[dd] *= l[r0 + r];
        attn_store_row(out + (r0 + r) * os + d0, ar, td);
      }
      ATTN_IO_WRITE(io, tr * td);
    }
  }
}
