/* lowrank.cu: approximate attention through a feature map phi of rank r, exp(scale <q,k>) ~ <phi(q), phi(k)>, on
 * an NVIDIA GPU; the same approximation as templates/lowrank.c, accumulated in fp32. Specialised on ATTN_D, ATTN_BC
 * (key rows per step, also the query rows per step), ATTN_CAUSAL, ATTN_WARPS, ATTN_DTYPE and ATTN_FEATURE
 * (0: Taylor features of degree ATTN_DEGREE, Alman & Song; 1: ATTN_RANK positive random features from ATTN_SEED).
 *   Taylor: phi_alpha(x) = x^alpha / sqrt(alpha!) for |alpha| <= g, x = sqrt(scale) q, built degree by degree from
 *     the monomial table (parent, variable, coefficient: lowrank_feat.h's lf_taylor_table, lowrank.c's).
 *   Random: phi_t(x) = exp(w_t.x - |x|^2/2 - c), w_t the Gaussian directions (lowrank_feat.h's generator, lowrank.c's
 *     and the fp64 reference's); c is the keys' running max (the state is rescaled when it grows) or a query row's
 *     own max; it cancels in the ratio.
 * The rank, the table, the directions and the exponent are lowrank_feat.h's, compiled here for the device, so that a
 * spec's features are the same on both targets.
 * attn_init fills a.consts once per plan: the directions (stored transposed, d x r, so that threads reading
 * consecutive features read consecutive words) or the Taylor table. They are the kernel's constants, as the CPU
 * template's scratch tables are, not attention I/O: reading them is not counted.
 *
 * One thread block per (batch, head). Keys go by blocks of BC rows into the state KV = phi(K)^T V (r x d) and
 * z = phi(K)^T 1 held in shared memory; O = phi(Q) KV / phi(Q) z, by groups of at most BC query rows. Per key block:
 * K -> X, phi(K) -> FK; V -> X; KV += FK^T X, z += FK^T 1. Non-causal: all key blocks, then the query groups
 * (Q -> X, phi(Q) -> FQ, O = FQ KV / FQ z). Causal (bottom-right aligned, key j visible to row i iff
 * j <= i + n_kv - n): the rows are walked in order; the rows whose last visible key lies in key block b form one
 * group (at most BC rows, consecutive) and are computed right after phi(K_b), before b is folded: each row sees the
 * prefix state of the blocks before b, and its visible keys of b are added exactly through
 * S = phi(Q) phi(K_b)^T (masked) and S V_b. The CPU template folds b for the group's last row when that row sees
 * all of b; adding b exactly instead is the same sum. Rows that see no key (n > n_kv) output zeros.
 * Every step is spread over the block's 32*ATTN_WARPS threads: the features over r (and rows), the state update
 * and the products over register tiles of the output (r x d, rows x d), the row reductions over warps. The next
 * rows to stage (K of the next block, V of this one, the next query group) are loaded into registers while the
 * block computes, then stored into X.
 *
 * Shared memory (fp32, ATTN_LOWRANK_SMEM(d, r, bc)): KV (r4 x d, r4 = r rounded up to 4) | z (r4) | FK (bc x rs)
 * | FQ (bc x rs) | X (bc x d: K, Q or V rows) | S (bc x bc) | |q|^2, row max, 1/den (bc each); rs = r4 + 4 or
 * r4 + 8 keeps the rows 16-byte aligned and rows of FK at odd multiples of 16 bytes apart (no bank conflicts).
 *
 * Non-finite inputs follow lowrank.c (and so the fp64 reference, runtime/reference.c): a query row with a NaN or
 * inf entry outputs NaN (lr_inv); a key row with one has no features, stays out of the state and of the random
 * features' constant, and is scored exactly by each row that sees it (lr_badkeys, a rare path: +inf or NaN makes
 * the row NaN, -inf gives weight 0, seeing only such keys gives 0/0); a NaN or inf in V reaches, through the state
 * and S, exactly the rows that see its key (a key that a row does not see is skipped in S V, not weighted by 0).
 *
 * Any d and d_v (ATTN_DV: V, O and the state's columns) in 1..576: X rows are padded to ATTN_LOWRANK_DP(d) or
 * ATTN_LOWRANK_DVP(d_v) columns of zeros (the random features' directions past d are never read: a padded column
 * contributes 0); rows that are not whole 16-byte chunks, or padded, move by element.
 *
 * I/O accounting (ATTN_COUNT_IO, per block, every thread counting the block's transfers): each key block's K and V
 * rows are read once (kc*d and kc*d_v), each query row once (rows*d, also the rows that see no key) and each output
 * row written once (rows*d_v): reads = n_kv*(d + d_v) + n*d, writes = n*d_v per (batch, head), as lowrank.c. */
/* Score modifiers (window, softcap, ALiBi) are flash's only: attn_spec_check refuses such specs with the reason;
 * this stops a source generated past it. */
#if (defined(ATTN_WINDOW) && ATTN_WINDOW) || (defined(ATTN_SOFTCAP) && ATTN_SOFTCAP) || \
    (defined(ATTN_ALIBI) && ATTN_ALIBI)
#error "lowrank applies no window, softcap or ALiBi (flash does)"
#endif
#ifndef ATTN_WARPS
#define ATTN_WARPS 4
#endif
#ifndef ATTN_DTYPE
#define ATTN_DTYPE 1
#endif
#include "lowrank_feat.h"

#define LR_D ATTN_D
#define LR_DV ATTN_DV
#define LR_DP ATTN_LOWRANK_DP(LR_D)    /* X rows of K and Q */
#define LR_DVP ATTN_LOWRANK_DVP(LR_DV) /* X rows of V, the state's rows */
#define LR_XW (LR_DP > LR_DVP ? LR_DP : LR_DVP)
#define LR_BC ATTN_BC
#define LR_W ATTN_WARPS
#define LR_NT (ATTN_WARPS * 32)

static_assert(LR_BC % 16 == 0, "Bc is a multiple of 16");

constexpr int LR_R = (int)lf_rank();
constexpr int LR_R4 = (LR_R + 3) / 4 * 4;
constexpr int LR_RS = LR_R4 + 4 + (LR_R4 & 4);
constexpr int LR_NIT = LR_DP / 4;   /* float4 columns of an X row of K or Q */
constexpr int LR_NITV = LR_DVP / 4; /* float4 columns of an X row of V and of a state row */

/* Shared-memory layout, in floats (every part a multiple of 4, so float4 access stays aligned). */
constexpr int LR_OFF_Z = LR_R4 * LR_DVP;
constexpr int LR_OFF_FK = LR_OFF_Z + LR_R4;
constexpr int LR_OFF_FQ = LR_OFF_FK + LR_BC * LR_RS;
constexpr int LR_OFF_X = LR_OFF_FQ + LR_BC * LR_RS;
constexpr int LR_OFF_S = LR_OFF_X + LR_BC * LR_XW;
constexpr int LR_OFF_NRM = LR_OFF_S + LR_BC * LR_BC;
constexpr int LR_OFF_RMAX = LR_OFF_NRM + LR_BC;
constexpr int LR_OFF_INV = LR_OFF_RMAX + LR_BC;
constexpr int LR_FLOATS = LR_OFF_INV + LR_BC;
static_assert(4LL * LR_FLOATS == ATTN_LOWRANK_SMEM_DV(LR_D, LR_DV, LR_R, LR_BC),
              "layout and ATTN_LOWRANK_SMEM_DV disagree");

/* Inputs: f32 as float, f16/bf16 as raw 16-bit words; global rows move in 16-byte chunks of LR_VEC elements. */
#if ATTN_DTYPE == 0
typedef float lr_elem;
#define LR_VEC 4
#else
typedef unsigned short lr_elem;
#define LR_VEC 8
#endif

/* Inline PTX lives only in these wrappers, so the instructions the template emits are read in one place. */
/* ---- PTX wrappers ---- */
#if ATTN_DTYPE == 1
static __device__ __forceinline__ float lr_half(unsigned h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h));
  return f;
}
/* cvt.rn.f16x2.f32 d, a, b puts a in the upper half: lo goes last. */
static __device__ __forceinline__ unsigned lr_pack(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
#elif ATTN_DTYPE == 2
static __device__ __forceinline__ float lr_half(unsigned h) { return __uint_as_float((h & 0xffffu) << 16); }
static __device__ __forceinline__ unsigned lr_pack(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
#endif
/* ---- end of PTX wrappers ---- */

/* A 16-byte chunk as LR_VEC floats (element at the lower address first). */
static __device__ __forceinline__ void lr_unpack(uint4 u, float *f) {
#if ATTN_DTYPE == 0
  f[0] = __uint_as_float(u.x);
  f[1] = __uint_as_float(u.y);
  f[2] = __uint_as_float(u.z);
  f[3] = __uint_as_float(u.w);
#else
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; k++) {
    f[2 * k] = lr_half(w[k] & 0xffffu);
    f[2 * k + 1] = lr_half(w[k] >> 16);
  }
#endif
}

/* Four consecutive outputs (16-byte aligned for f32, 8-byte for f16/bf16, when d_v is a multiple of 4), rounded to
 * the input type; the first `valid` of them by element when d_v is not a multiple of 4. */
static __device__ __forceinline__ void lr_store4(lr_elem *p, float a, float b, float c, float d, int valid) {
  if constexpr (LR_DV % 4 == 0) {
    (void)valid;
#if ATTN_DTYPE == 0
    *reinterpret_cast<float4 *>(p) = make_float4(a, b, c, d);
#else
    uint2 u;
    u.x = lr_pack(a, b);
    u.y = lr_pack(c, d);
    *reinterpret_cast<uint2 *>(p) = u;
#endif
  } else {
    const float x[4] = {a, b, c, d};
#pragma unroll
    for (int e = 0; e < 4; e++)
      if (e < valid) {
#if ATTN_DTYPE == 0
        p[e] = x[e];
#else
        p[e] = (lr_elem)(lr_pack(x[e], 0.0f) & 0xffffu);
#endif
      }
  }
}

/* One input element as fp32. */
static __device__ __forceinline__ float lr_in(lr_elem x) {
#if ATTN_DTYPE == 0
  return x;
#else
  return lr_half(x);
#endif
}

/* Rows of W elements (K, Q: d; V: d_v) staged in X rows of WP floats. FAST: rows of whole 16-byte chunks, unpadded. */
template <int W, int WP> struct lr_g {
  static constexpr bool FAST = W == WP && W % LR_VEC == 0;
  static constexpr int CPR = W / LR_VEC, CHUNKS = LR_BC * CPR, CPT = (CHUNKS + LR_NT - 1) / LR_NT;
  static constexpr int CU = CPT < 8 ? CPT : 8; /* chunks in flight per thread */
  static constexpr bool PREF = FAST && CPT <= 8; /* at most 32 registers in flight */
};

/* X[j][:] = mul * src[j][:] for j < rows, zero for rows..BC-1 (rows past the block are never read) and in the
 * padded columns W..WP-1. */
template <int W, int WP>
static __device__ __forceinline__ void lr_stage(const lr_elem *__restrict__ src, int rows, float mul, float *X) {
  typedef lr_g<W, WP> G;
  const int tid = threadIdx.x;
  if constexpr (G::FAST) {
    for (int c0 = 0; c0 < G::CPT; c0 += G::CU) {
      uint4 buf[G::CU];
#pragma unroll
      for (int u = 0; u < G::CU; u++) {
        const int c = (c0 + u) * LR_NT + tid;
        buf[u] = make_uint4(0u, 0u, 0u, 0u);
        if (c0 + u < G::CPT && c < G::CHUNKS && c / G::CPR < rows)
          buf[u] = __ldg(reinterpret_cast<const uint4 *>(src + (long long)c * LR_VEC));
      }
#pragma unroll
      for (int u = 0; u < G::CU; u++) {
        const int c = (c0 + u) * LR_NT + tid;
        if (c0 + u < G::CPT && c < G::CHUNKS) {
          float f[LR_VEC];
          lr_unpack(buf[u], f);
          float4 *dst = reinterpret_cast<float4 *>(X + c * LR_VEC);
#pragma unroll
          for (int k = 0; k < LR_VEC / 4; k++)
            dst[k] = make_float4(f[4 * k] * mul, f[4 * k + 1] * mul, f[4 * k + 2] * mul, f[4 * k + 3] * mul);
        }
      }
    }
  } else {
    for (int p = tid; p < LR_BC * WP; p += LR_NT) {
      const int r = p / WP, c = p % WP;
      X[p] = r < rows && c < W ? lr_in(src[(long long)r * W + c]) * mul : 0.0f;
    }
  }
}

/* The same copy split in two, so that the global loads fly while the block computes: lr_issue starts the loads
 * into registers, lr_put stores them into X. When the rows take more than 8 16-byte chunks per thread (or are not
 * whole chunks), lr_issue only records them and lr_put copies them then. */
template <int W, int WP> struct lr_rows {
  const lr_elem *src;
  int rows;
  uint4 buf[lr_g<W, WP>::PREF ? lr_g<W, WP>::CPT : 1];
};
template <int W, int WP>
static __device__ __forceinline__ void lr_issue(lr_rows<W, WP> &r, const lr_elem *__restrict__ src, int rows) {
  typedef lr_g<W, WP> G;
  r.src = src;
  r.rows = rows;
  if constexpr (G::PREF) {
#pragma unroll
    for (int u = 0; u < G::CPT; u++) {
      const int c = u * LR_NT + threadIdx.x;
      r.buf[u] = make_uint4(0u, 0u, 0u, 0u);
      if (c < G::CHUNKS && c / G::CPR < rows)
        r.buf[u] = __ldg(reinterpret_cast<const uint4 *>(src + (long long)c * LR_VEC));
    }
  }
}
template <int W, int WP> static __device__ __forceinline__ void lr_put(const lr_rows<W, WP> &r, float mul, float *X) {
  typedef lr_g<W, WP> G;
  if constexpr (G::PREF) {
#pragma unroll
    for (int u = 0; u < G::CPT; u++) {
      const int c = u * LR_NT + threadIdx.x;
      if (c < G::CHUNKS) {
        float f[LR_VEC];
        lr_unpack(r.buf[u], f);
        float4 *dst = reinterpret_cast<float4 *>(X + c * LR_VEC);
#pragma unroll
        for (int k = 0; k < LR_VEC / 4; k++)
          dst[k] = make_float4(f[4 * k] * mul, f[4 * k + 1] * mul, f[4 * k + 2] * mul, f[4 * k + 3] * mul);
      }
    }
  } else {
    lr_stage<W, WP>(r.src, r.rows, mul, X);
  }
}

/* Zeros for output rows that see no key (rows of d_v elements, contiguous). */
static __device__ __forceinline__ void lr_store_zero(lr_elem *out, int rows) {
  if constexpr (LR_DV % LR_VEC == 0) {
    for (int c = threadIdx.x; c < rows * (LR_DV / LR_VEC); c += LR_NT)
      *reinterpret_cast<uint4 *>(out + (long long)c * LR_VEC) = make_uint4(0u, 0u, 0u, 0u);
  } else {
    for (int c = threadIdx.x; c < rows * LR_DV; c += LR_NT) out[c] = (lr_elem)0;
  }
}

static __device__ __forceinline__ float lr_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
static __device__ __forceinline__ float lr_warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

#define LR_NAN __int_as_float(0x7fffffff)
static __device__ __forceinline__ bool lr_nonfinite(float x) {
  return (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u;
}

#if ATTN_FEATURE == 1
/* Random features, first pass: F[j][t] = w_t . x_j for rows j < vr (a multiple of 16). Thread tid owns features
 * t = tid + NT*m; rows go by 16 with the directions' next 8 columns loaded while the current 8 are used. */
constexpr int LR_MT = (LR_R + LR_NT - 1) / LR_NT;
constexpr int LR_MTC = LR_MT < 4 ? LR_MT : 4; /* features per thread per sweep (registers: 16 x LR_MTC) */
/* the row of the directions (d x r) for column i of X: a padded column (i >= d) is zero in X, any row does */
static __device__ __forceinline__ int lr_wrow(int i) { return LR_DP == LR_D || i < LR_D ? i : LR_D - 1; }
static __device__ __forceinline__ void lr_rf_dots(const float *__restrict__ wT, const float *X, float *F, int vr) {
  const int tid = threadIdx.x;
  const float4 *X4 = reinterpret_cast<const float4 *>(X);
  for (int ts = 0; ts < LR_MT; ts += LR_MTC) {
    int tq[LR_MTC];
    bool ok[LR_MTC];
#pragma unroll
    for (int m = 0; m < LR_MTC; m++) {
      const int t = (ts + m) * LR_NT + tid;
      ok[m] = ts + m < LR_MT && t < LR_R;
      tq[m] = ok[m] ? t : LR_R - 1; /* a valid address; the result is dropped */
    }
    for (int j0 = 0; j0 < vr; j0 += 16) {
      float acc[16][LR_MTC];
#pragma unroll
      for (int jj = 0; jj < 16; jj++)
#pragma unroll
        for (int m = 0; m < LR_MTC; m++) acc[jj][m] = 0.0f;
      float wc[LR_MTC][8], wn[LR_MTC][8];
#pragma unroll
      for (int m = 0; m < LR_MTC; m++)
#pragma unroll
        for (int ii = 0; ii < 8; ii++) wc[m][ii] = __ldg(wT + lr_wrow(ii) * LR_R + tq[m]);
#pragma unroll 2
      for (int i0 = 0; i0 < LR_DP; i0 += 8) {
        const int in = i0 + 8 < LR_DP ? i0 + 8 : i0; /* the last step reloads its own columns (harmless) */
#pragma unroll
        for (int m = 0; m < LR_MTC; m++)
#pragma unroll
          for (int ii = 0; ii < 8; ii++) wn[m][ii] = __ldg(wT + lr_wrow(in + ii) * LR_R + tq[m]);
#pragma unroll
        for (int h = 0; h < 2; h++) {
#pragma unroll
          for (int jj = 0; jj < 16; jj++) {
            const float4 x = X4[(j0 + jj) * LR_NIT + i0 / 4 + h];
#pragma unroll
            for (int m = 0; m < LR_MTC; m++) {
              float e = acc[jj][m];
              e = fmaf(wc[m][4 * h + 0], x.x, e);
              e = fmaf(wc[m][4 * h + 1], x.y, e);
              e = fmaf(wc[m][4 * h + 2], x.z, e);
              e = fmaf(wc[m][4 * h + 3], x.w, e);
              acc[jj][m] = e;
            }
          }
        }
#pragma unroll
        for (int m = 0; m < LR_MTC; m++)
#pragma unroll
          for (int ii = 0; ii < 8; ii++) wc[m][ii] = wn[m][ii];
      }
#pragma unroll
      for (int jj = 0; jj < 16; jj++)
#pragma unroll
        for (int m = 0; m < LR_MTC; m++)
          if (ok[m]) F[(j0 + jj) * LR_RS + tq[m]] = acc[jj][m];
    }
  }
}

/* Second pass, a warp per row: |x_j|^2 and the row's largest exponent max_t w_t.x_j - |x_j|^2/2, NaN for a row
 * with a NaN or inf entry (see LR_FEATURES). Returns whether this thread saw such a row. */
static __device__ __forceinline__ bool lr_rowstats(const float *X, const float *F, float *NRM, float *RMAX, int vr) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  bool any = false;
  for (int j = warp; j < vr; j += LR_W) {
    float mx = -__int_as_float(0x7f800000), nr = 0.0f;
    bool bad = false;
    for (int t = lane; t < LR_R; t += 32) mx = fmaxf(mx, F[j * LR_RS + t]);
    for (int i = lane; i < LR_D; i += 32) {
      const float x = X[j * LR_DP + i];
      nr = fmaf(x, x, nr);
      bad |= lr_nonfinite(x);
    }
    mx = lr_warp_max(mx);
    nr = lr_warp_sum(nr);
    bad = __any_sync(0xffffffffu, bad);
    if (lane == 0) {
      NRM[j] = nr;
      RMAX[j] = bad ? LR_NAN : lf_rf_expo(mx, nr); /* rounding is monotone: the max of the rounded exponents */
    }
    any |= bad;
  }
  return any;
}
#endif

#if ATTN_FEATURE == 0
/* A warp per row j < vr of X: FLAG[j] = NaN for a row with a NaN or inf entry, whose X row is zeroed (see
 * LR_FEATURES), else 0. Returns whether this thread saw such a row. */
static __device__ __forceinline__ bool lr_rowcheck(float *X, float *FLAG, int vr) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  bool any = false;
  for (int j = warp; j < vr; j += LR_W) {
    bool bad = false;
    for (int i = lane; i < LR_D; i += 32) bad |= lr_nonfinite(X[j * LR_DP + i]);
    bad = __any_sync(0xffffffffu, bad);
    if (bad)
      for (int i = lane; i < LR_D; i += 32) X[j * LR_DP + i] = 0.0f;
    if (lane == 0) FLAG[j] = bad ? LR_NAN : 0.0f;
    any |= bad;
  }
  return any;
}

/* Taylor features of rows j < vr, degree by degree (a level's parents are all in the level below):
 * F[j][t] = F[j][par[t]] * x_j[var[t]] * coef[t], with F[j][0] = 1 (0 for rows past `valid`, so that padded key
 * rows have no features, and for rows flagged by lr_rowcheck, zero rows of X). Ends with a barrier. */
static __device__ __forceinline__ void lr_taylor(const int *__restrict__ par, const int *__restrict__ var,
                                                 const float *__restrict__ coef, const float *X, const float *FLAG,
                                                 float *F, int vr, int valid) {
  const int tid = threadIdx.x;
#pragma unroll 1
  for (int k = 1; k <= ATTN_DEGREE; k++) {
    const int lo = (int)lf_monomials(k - 1), hi = (int)lf_monomials(k);
    for (int t = lo + tid; t < hi; t += LR_NT) {
      const int p = __ldg(par + t), v = __ldg(var + t);
      const float cf = __ldg(coef + t);
      for (int j = 0; j < vr; j++) {
        const float pv = k == 1 ? (j < valid ? 1.0f : 0.0f) : F[j * LR_RS + p];
        F[j * LR_RS + t] = pv * X[j * LR_DP + v] * cf;
      }
    }
    if (k == 1)
      for (int j = tid; j < vr; j += LR_NT) F[j * LR_RS] = j < valid && FLAG[j] == 0.0f ? 1.0f : 0.0f;
    __syncthreads();
  }
}
#endif

/* Fold a key block into the state: KV += FK^T X, z += FK^T 1 over its kc rows (FK and X are zero past kc up to
 * the next multiple of 16). Register tiles of TT features x 4 columns; j in order as in lowrank.c. */
constexpr int lr_fold_tt() {
  return (LR_R4 + 15) / 16 * LR_NITV >= LR_NT ? 16 : (LR_R4 + 7) / 8 * LR_NITV >= LR_NT ? 8 : 4;
}
constexpr int LR_TT = lr_fold_tt();
constexpr int LR_FTILES = (LR_R4 + LR_TT - 1) / LR_TT * LR_NITV;
static __device__ __forceinline__ void lr_fold(float *KV, float *Z, const float *FK, const float *X, int kc) {
  const int tid = threadIdx.x;
  float4 *KV4 = reinterpret_cast<float4 *>(KV);
  const float4 *X4 = reinterpret_cast<const float4 *>(X);
  for (int tile = tid; tile < LR_FTILES; tile += LR_NT) {
    const int it = tile % LR_NITV, t0 = tile / LR_NITV * LR_TT;
    float acc[LR_TT][4];
#pragma unroll
    for (int a = 0; a < LR_TT; a++) {
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (t0 + a < LR_R4) v = KV4[(t0 + a) * LR_NITV + it];
      acc[a][0] = v.x, acc[a][1] = v.y, acc[a][2] = v.z, acc[a][3] = v.w;
    }
    for (int j0 = 0; j0 < kc; j0 += 16) {
#pragma unroll 4
      for (int jj = 0; jj < 16; jj++) {
        const int j = j0 + jj;
        const float4 x = X4[j * LR_NITV + it];
        const float4 *f4 = reinterpret_cast<const float4 *>(FK + j * LR_RS + t0);
#pragma unroll
        for (int a4 = 0; a4 < LR_TT / 4; a4++) {
          const float4 f = f4[a4];
          const float fv[4] = {f.x, f.y, f.z, f.w};
#pragma unroll
          for (int b = 0; b < 4; b++) {
            acc[4 * a4 + b][0] = fmaf(fv[b], x.x, acc[4 * a4 + b][0]);
            acc[4 * a4 + b][1] = fmaf(fv[b], x.y, acc[4 * a4 + b][1]);
            acc[4 * a4 + b][2] = fmaf(fv[b], x.z, acc[4 * a4 + b][2]);
            acc[4 * a4 + b][3] = fmaf(fv[b], x.w, acc[4 * a4 + b][3]);
          }
        }
      }
    }
#pragma unroll
    for (int a = 0; a < LR_TT; a++)
      if (t0 + a < LR_R4) KV4[(t0 + a) * LR_NITV + it] = make_float4(acc[a][0], acc[a][1], acc[a][2], acc[a][3]);
  }
  for (int t = tid; t < LR_R4; t += LR_NT) {
    float z = Z[t];
    for (int j = 0; j < kc; j++) z += FK[j * LR_RS + t];
    Z[t] = z;
  }
}

/* 1/den for the rows g < G of a query group, a warp per row: den = phi(q) z (+ the row's exact keys, S); NaN for
 * a query row with a NaN or inf entry (FLAG[g] NaN, see LR_FEATURES), whose scores are all +-inf or NaN, and for
 * den = NaN, as in lowrank.c. */
static __device__ __forceinline__ void lr_inv(const float *FQ, const float *Z, const float *S, const float *FLAG,
                                              float *INV, int G, int kc) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int g = warp; g < G; g += LR_W) {
    float s = 0.0f;
    for (int t = lane; t < LR_R4; t += 32) s = fmaf(FQ[g * LR_RS + t], Z[t], s);
#if ATTN_CAUSAL
    for (int j = lane; j < kc; j += 32) s += S[g * LR_BC + j];
#endif
    s = lr_warp_sum(s);
    if (lane == 0) INV[g] = FLAG[g] != FLAG[g] || s != s ? LR_NAN : s > 0.0f ? __frcp_rn(s) : 0.0f;
  }
}

/* O[g][:] = (phi(q_g) KV + sum_{j < e0 + g} S[g][j] V_j) / den_g for the rows g < G (causal: the keys of the
 * block that row g sees). Register tiles of 8 rows x 4 columns;
 * when the tiles are fewer than the threads, KS lanes of a warp split the r features (and the exact keys) of a
 * tile and add up by shuffles (the split index is the high lane bits, so each tile's loads stay contiguous). */
constexpr int LR_GT = 8;
constexpr int LR_PTILES = LR_BC / LR_GT * LR_NITV;
constexpr int lr_ks() {
  int k = 1;
  while (k < 32 && LR_PTILES * k * 2 <= LR_NT) k *= 2;
  return k;
}
constexpr int LR_KS = lr_ks();
constexpr int LR_TPW = 32 / LR_KS; /* tiles per warp per sweep */
static __device__ __forceinline__ void lr_product(const float *KV, const float *FQ, const float *S, const float *X,
                                                  const float *INV, lr_elem *out, int G, int kc, int e0) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int ks = lane / LR_TPW, tl = lane % LR_TPW;
  const float4 *KV4 = reinterpret_cast<const float4 *>(KV);
  const float4 *X4 = reinterpret_cast<const float4 *>(X);
  /* tb is the same for the whole warp, so every lane reaches the shuffles */
  for (int tb = warp * LR_TPW; tb < LR_PTILES; tb += LR_W * LR_TPW) {
    const int tile = tb + tl < LR_PTILES ? tb + tl : LR_PTILES - 1;
    const int it = tile % LR_NITV, g0 = tile / LR_NITV * LR_GT;
    float acc[LR_GT][4];
#pragma unroll
    for (int a = 0; a < LR_GT; a++) acc[a][0] = acc[a][1] = acc[a][2] = acc[a][3] = 0.0f;
#pragma unroll 2
    for (int t4 = ks; t4 < LR_R4 / 4; t4 += LR_KS) {
      float4 fq[LR_GT], kv[4];
#pragma unroll
      for (int a = 0; a < LR_GT; a++) fq[a] = *reinterpret_cast<const float4 *>(FQ + (g0 + a) * LR_RS + 4 * t4);
#pragma unroll
      for (int b = 0; b < 4; b++) kv[b] = KV4[(4 * t4 + b) * LR_NITV + it];
#pragma unroll
      for (int a = 0; a < LR_GT; a++) {
        const float f[4] = {fq[a].x, fq[a].y, fq[a].z, fq[a].w};
#pragma unroll
        for (int b = 0; b < 4; b++) {
          acc[a][0] = fmaf(f[b], kv[b].x, acc[a][0]);
          acc[a][1] = fmaf(f[b], kv[b].y, acc[a][1]);
          acc[a][2] = fmaf(f[b], kv[b].z, acc[a][2]);
          acc[a][3] = fmaf(f[b], kv[b].w, acc[a][3]);
        }
      }
    }
#if ATTN_CAUSAL
    /* row g sees the keys j < e0 + g of the block: those below e0 + g0 are seen by every row of the tile; past
     * them, a key a row does not see is skipped, not weighted by S = 0 (0 * NaN in its V row is NaN) */
    const int jall = min(kc, e0 + g0), jend = min(kc, e0 + g0 + LR_GT - 1);
    int j = ks;
    for (; j < jall; j += LR_KS) {
      const float4 x = X4[j * LR_NITV + it];
#pragma unroll
      for (int a = 0; a < LR_GT; a++) {
        const float s = S[(g0 + a) * LR_BC + j];
        acc[a][0] = fmaf(s, x.x, acc[a][0]);
        acc[a][1] = fmaf(s, x.y, acc[a][1]);
        acc[a][2] = fmaf(s, x.z, acc[a][2]);
        acc[a][3] = fmaf(s, x.w, acc[a][3]);
      }
    }
    for (; j < jend; j += LR_KS) {
      const float4 x = X4[j * LR_NITV + it];
#pragma unroll
      for (int a = 0; a < LR_GT; a++)
        if (j < e0 + g0 + a) {
          const float s = S[(g0 + a) * LR_BC + j];
          acc[a][0] = fmaf(s, x.x, acc[a][0]);
          acc[a][1] = fmaf(s, x.y, acc[a][1]);
          acc[a][2] = fmaf(s, x.z, acc[a][2]);
          acc[a][3] = fmaf(s, x.w, acc[a][3]);
        }
    }
#else
    (void)S, (void)X4, (void)kc, (void)e0;
#endif
#pragma unroll
    for (int o = LR_TPW; o < 32; o <<= 1)
#pragma unroll
      for (int a = 0; a < LR_GT; a++)
#pragma unroll
        for (int c = 0; c < 4; c++) acc[a][c] += __shfl_xor_sync(0xffffffffu, acc[a][c], o);
    if (ks == 0 && tb + tl < LR_PTILES) {
#pragma unroll
      for (int a = 0; a < LR_GT; a++)
        if (g0 + a < G) {
          const float inv = INV[g0 + a];
          lr_store4(out + (long long)(g0 + a) * LR_DV + 4 * it, acc[a][0] * inv, acc[a][1] * inv, acc[a][2] * inv,
                    acc[a][3] * inv, LR_DV - 4 * it);
        }
    }
  }
}

/* Causal only: S[g][j] = phi(q_g) . phi(k_j) for the keys of the current block that row g sees (j < e0 + g),
 * zero elsewhere (also for rows g >= G). */
static __device__ __forceinline__ void lr_extras(const float *FQ, const float *FK, float *S, int G, int e0) {
  for (int p = threadIdx.x; p < LR_BC * LR_BC; p += LR_NT) {
    const int g = p / LR_BC, j = p % LR_BC;
    float s = 0.0f;
    if (g < G && j < e0 + g) {
      const float4 *a4 = reinterpret_cast<const float4 *>(FQ + g * LR_RS);
      const float4 *b4 = reinterpret_cast<const float4 *>(FK + j * LR_RS);
      for (int t4 = 0; t4 < LR_R4 / 4; t4++) {
        const float4 x = a4[t4], y = b4[t4];
        s = fmaf(x.x, y.x, s);
        s = fmaf(x.y, y.y, s);
        s = fmaf(x.z, y.z, s);
        s = fmaf(x.w, y.w, s);
      }
    }
    S[p] = s;
  }
}

/* The rare path for key rows with a NaN or inf entry ("bad" keys, lowrank.c's kbad), once a head's rows are
 * written. Bad keys have no features (see LR_FEATURES), so they are in neither the state nor S, and their V rows
 * enter as 0 * v: NaN and inf in V show in the rows that see the key, as in lowrank.c. Here each row g < G (rows q
 * and out, seeing the keys below min(vis0 + g, n_kv)) scores the bad keys it sees exactly, as lowrank.c does: a
 * score other than -inf (+inf, or NaN) makes the row NaN, and so does seeing no other key (0/0). Every bad key lies
 * in [lo, hi). A warp per row, a lane per key; q and k from global memory (not counted: the I/O model is for finite
 * inputs). After the key loop, so that nothing of it stays live there. */
static __device__ __forceinline__ void lr_badkeys(const lr_elem *q, const lr_elem *k, lr_elem *out, int G, int vis0,
                                                  int n_kv, int lo, int hi, float scale) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long first = (long long)lo - vis0 + 1; /* the first row that sees key lo */
  for (int g = (first <= 0 ? 0 : first < G ? (int)first : G) + warp; g < G; g += LR_W) {
    const int vis = (long long)vis0 + g < n_kv ? vis0 + g : n_kv, end = vis < hi ? vis : hi;
    const lr_elem *qg = q + (long long)g * LR_D;
    int nbad = 0;
    bool nan = false;
    for (int j = lo + lane; j < end; j += 32) {
      const lr_elem *kj = k + (long long)j * LR_D;
      bool bad = false;
      float dot = 0.0f;
#pragma unroll 1
      for (int c = 0; c < LR_D; c++) {
        const float x = lr_in(kj[c]);
        bad |= lr_nonfinite(x);
        dot = fmaf(lr_in(qg[c]), x, dot);
      }
      nbad += bad;
      nan |= bad && !(dot * scale == -__int_as_float(0x7f800000));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) nbad += __shfl_xor_sync(0xffffffffu, nbad, o);
    if (__any_sync(0xffffffffu, nan) || nbad == vis)
      for (int c = lane; c < LR_DV; c += 32) {
#if ATTN_DTYPE == 0
        out[(long long)g * LR_DV + c] = LR_NAN;
#else
        out[(long long)g * LR_DV + c] = (lr_elem)(lr_pack(LR_NAN, 0.0f) & 0xffffu);
#endif
      }
  }
}

extern "C" __global__ void __launch_bounds__(LR_NT, 1) attn_kernel(attn_cuda_kargs a) {
  ATTN_CIO_DECL;
  extern __shared__ __align__(16) unsigned char attn_smem[];
  float *const sm = reinterpret_cast<float *>(attn_smem);
  float *const KV = sm, *const Z = sm + LR_OFF_Z, *const FK = sm + LR_OFF_FK, *const FQ = sm + LR_OFF_FQ;
  float *const X = sm + LR_OFF_X, *const S = sm + LR_OFF_S, *const INV = sm + LR_OFF_INV;
  float *const RMAX = sm + LR_OFF_RMAX; /* also the rows' NaN flags (see LR_FEATURES) */
#if ATTN_FEATURE == 1
  float *const NRM = sm + LR_OFF_NRM;
  const float *const wT = reinterpret_cast<const float *>(a.consts); /* d x r */
#else
  const int *const par = reinterpret_cast<const int *>(a.consts);
  const int *const var = par + LR_R;
  const float *const coef = reinterpret_cast<const float *>(var + LR_R);
#endif
  const int tid = threadIdx.x;
  const long long heads_kv = a.heads_kv > 0 ? a.heads_kv : a.heads;
  const long long n = a.n, n_kv = a.n_kv, off = n_kv - n;
  const float sq = __fsqrt_rn(a.scale);
  (void)S;

  for (long long bh = blockIdx.x; bh < a.grid_items; bh += gridDim.x) {
    const long long b = bh / a.heads, h = bh % a.heads, hk = h / (a.heads / heads_kv);
    const lr_elem *const q = reinterpret_cast<const lr_elem *>(a.q) + bh * n * LR_D;
    const lr_elem *const k = reinterpret_cast<const lr_elem *>(a.k) + (b * heads_kv + hk) * n_kv * LR_D;
    const lr_elem *const v = reinterpret_cast<const lr_elem *>(a.v) + (b * heads_kv + hk) * n_kv * LR_DV;
    lr_elem *const o = reinterpret_cast<lr_elem *>(a.o) + bh * n * LR_DV;

    __syncthreads(); /* the previous item is done with shared memory */
    /* empty state; the features' padding columns r..rs stay zero from here on */
    for (int x = tid; x < LR_OFF_X / 4; x += LR_NT)
      reinterpret_cast<float4 *>(sm)[x] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    __syncthreads();
#if ATTN_FEATURE == 1
    float c = 0.0f;   /* the keys' running constant, the same in every thread */
    bool have_c = false; /* c = -inf in lowrank.c */
#endif

/* phi of the rows in X into F (rows valid..vr-1 of X are zero): random features with the key constant (key) or
 * each row's own max; Taylor features. A row with a NaN or inf entry gets RMAX[j] = NaN and, as a key, no features
 * (lowrank.c's kbad: it stays out of the state and of c; lr_badkeys scores it); for keys, kbad says whether a row
 * had one.
 * Starts after X is complete, ends with a barrier. */
#if ATTN_FEATURE == 1
#define LR_FEATURES(F, valid, key)                                                                             \
  do {                                                                                                         \
    const int vr_ = ((valid) + 15) & ~15;                                                                      \
    lr_rf_dots(wT, X, F, vr_);                                                                                 \
    __syncthreads();                                                                                           \
    const int bad_ = __syncthreads_or(lr_rowstats(X, F, NRM, RMAX, vr_));                                     \
    if (key) kbad = bad_;                                                                                      \
    if (key) {                                                                                                 \
      float bm = RMAX[0]; /* the max drops the bad rows' NaN */                                                \
      for (int j = 1; j < (valid); j++) bm = fmaxf(bm, RMAX[j]);                                               \
      if (bm == bm && (!have_c || bm > c)) { /* rescale the state to the new constant */                      \
        const float f = have_c ? __expf(c - bm) : 0.0f;                                                        \
        for (int x = tid; x < LR_OFF_FK / 4; x += LR_NT) {                                                     \
          float4 s4 = reinterpret_cast<float4 *>(sm)[x];                                                       \
          s4.x *= f, s4.y *= f, s4.z *= f, s4.w *= f;                                                          \
          reinterpret_cast<float4 *>(sm)[x] = s4;                                                              \
        }                                                                                                      \
        c = bm;                                                                                                \
        have_c = true;                                                                                         \
      }                                                                                                        \
    }                                                                                                          \
    for (int j = 0; j < vr_; j++) {                                                                            \
      const float nrm_ = NRM[j], m_ = (key) ? c : RMAX[j];                                                    \
      const bool live_ = !(key) || (j < (valid) && RMAX[j] == RMAX[j]);                                        \
      for (int t = tid; t < LR_R; t += LR_NT)                                                                  \
        F[j * LR_RS + t] = live_ ? __expf(lf_rf_expo(F[j * LR_RS + t], nrm_) - m_) : 0.0f;                     \
    }                                                                                                          \
    __syncthreads();                                                                                           \
  } while (0)
#else
#define LR_FEATURES(F, valid, key)                                                                             \
  do {                                                                                                         \
    const int bad_ = __syncthreads_or(lr_rowcheck(X, RMAX, ((valid) + 15) & ~15));                             \
    if (key) kbad = bad_;                                                                                      \
    lr_taylor(par, var, coef, X, RMAX, F, ((valid) + 15) & ~15, (valid));                                      \
  } while (0)
#endif

#if ATTN_CAUSAL
    /* rows i < n - n_kv see no key: read (as lowrank.c counts them) and written as zeros */
    const long long zrows = off >= 0 ? 0 : (-off < n ? -off : n);
    for (long long i0 = 0; i0 < zrows; i0 += LR_BC) {
      const int rows = (int)(zrows - i0 < LR_BC ? zrows - i0 : LR_BC);
      lr_stage<LR_D, LR_DP>(q + i0 * LR_D, rows, sq, X);
      ATTN_CIO_READ((long long)rows * LR_D);
      lr_store_zero(o + i0 * LR_DV, rows);
      ATTN_CIO_WRITE((long long)rows * LR_DV);
    }
#endif
    /* K_b is loaded during the fold of block b-1, V_b during phi(K_b); the next query group during the product */
    lr_rows<LR_D, LR_DP> kr;
    lr_rows<LR_DV, LR_DVP> vr;
    int bad_lo = 0, bad_hi = 0; /* the keys [bad_lo, bad_hi) hold every bad key read (see lr_badkeys) */
    int kbad = 0;
    lr_issue(kr, k, (int)(n_kv < LR_BC ? n_kv : LR_BC));
    for (long long kb0 = 0; kb0 < n_kv; kb0 += LR_BC) {
      const int kc = (int)(n_kv - kb0 < LR_BC ? n_kv - kb0 : LR_BC);
      ATTN_CIO_READ((long long)kc * LR_D);
      lr_put(kr, sq, X);
      __syncthreads();
      lr_issue(vr, v + kb0 * LR_DV, kc);
      ATTN_CIO_READ((long long)kc * LR_DV);
      LR_FEATURES(FK, kc, true);
      if (kbad) {
        if (bad_hi == 0) bad_lo = (int)kb0; /* n_kv < 2^31 (gen/launch.c) */
        bad_hi = (int)kb0 + kc;
      }
#if ATTN_CAUSAL
      /* the rows whose last visible key is in this block: kb0 <= i + off < kb0 + kc */
      const long long g0 = kb0 - off > 0 ? kb0 - off : 0;
      const long long g1 = kb0 + kc - off < n ? kb0 + kc - off : n;
      const int G = g1 > g0 ? (int)(g1 - g0) : 0;
      if (G > 0) {
        lr_stage<LR_D, LR_DP>(q + g0 * LR_D, G, sq, X);
        ATTN_CIO_READ((long long)G * LR_D);
        __syncthreads();
        LR_FEATURES(FQ, G, false);
        lr_extras(FQ, FK, S, G, (int)(g0 + off + 1 - kb0));
      }
#endif
      lr_put(vr, 1.0f, X);
      __syncthreads();
#if ATTN_CAUSAL
      if (G > 0) {
        lr_inv(FQ, Z, S, RMAX, INV, G, kc);
        __syncthreads();
        lr_product(KV, FQ, S, X, INV, o + g0 * LR_DV, G, kc, (int)(g0 + off + 1 - kb0));
        ATTN_CIO_WRITE((long long)G * LR_DV);
        __syncthreads(); /* the state is read before this block is folded in */
      }
#endif
      if (kb0 + LR_BC < n_kv)
        lr_issue(kr, k + (kb0 + LR_BC) * LR_D, (int)(n_kv - kb0 - LR_BC < LR_BC ? n_kv - kb0 - LR_BC : LR_BC));
      lr_fold(KV, Z, FK, X, kc);
      __syncthreads();
    }
#if !ATTN_CAUSAL
    lr_rows<LR_D, LR_DP> qr;
    lr_issue(qr, q, (int)(n < LR_BC ? n : LR_BC));
    for (long long i0 = 0; i0 < n; i0 += LR_BC) {
      const int G = (int)(n - i0 < LR_BC ? n - i0 : LR_BC);
      ATTN_CIO_READ((long long)G * LR_D);
      lr_put(qr, sq, X);
      __syncthreads();
      LR_FEATURES(FQ, G, false);
      lr_inv(FQ, Z, S, RMAX, INV, G, 0);
      __syncthreads();
      if (i0 + LR_BC < n) lr_issue(qr, q + (i0 + LR_BC) * LR_D, (int)(n - i0 - LR_BC < LR_BC ? n - i0 - LR_BC : LR_BC));
      /* the next group's lr_put writes X only, which this product does not read; FQ and INV are rewritten
       * behind barriers */
      lr_product(KV, FQ, S, X, INV, o + i0 * LR_DV, G, 0, 0);
      ATTN_CIO_WRITE((long long)G * LR_DV);
    }
#endif
    if (bad_hi > 0) {
      __syncthreads(); /* every row is written */
      lr_badkeys(q, k, o, (int)n, ATTN_CAUSAL ? (int)(off + 1) : (int)n_kv, (int)n_kv, bad_lo, bad_hi, a.scale);
    }
#undef LR_FEATURES
  }
  ATTN_CIO_FLUSH(a);
}

/* Per-plan constants (q, k, v, o are NULL here). */
#if ATTN_FEATURE == 1
/* The directions, lowrank_feat.h's: a pair of entries (2p, 2p + 1 of w, row-major r x d) per thread, any grid.
 * Stored transposed: wT[i*r + t] = w[t*d + i]. */
extern "C" __global__ void attn_init(attn_cuda_kargs a) {
  float *const wT = reinterpret_cast<float *>(a.consts);
  const attn_lf_u64 st0 = attn_lf_state(ATTN_SEED);
  const long long cnt = (long long)LR_R * LR_D, pairs = (cnt + 1) / 2;
  for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < pairs;
       p += (long long)gridDim.x * blockDim.x) {
    float w0, w1;
    attn_lf_pair(st0, (attn_lf_u64)p, &w0, &w1);
    const long long e = 2 * p; /* an odd d splits pairs over rows */
    wT[(e % LR_D) * LR_R + e / LR_D] = w0;
    if (e + 1 < cnt) wT[((e + 1) % LR_D) * LR_R + (e + 1) / LR_D] = w1;
  }
}
#else
/* The monomial table, lowrank_feat.h's, by one thread (r is small): par[r] | var[r] | coef[r]. */
extern "C" __global__ void attn_init(attn_cuda_kargs a) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  int *const par = reinterpret_cast<int *>(a.consts);
  int *const var = par + LR_R;
  lf_taylor_table(par, var, reinterpret_cast<float *>(var + LR_R));
}
#endif
