/* smallcache.cu: exact attention for a small fast memory (Saha & Ye's algorithm, O(n^2 d / sqrt(M)) for M < d^2),
 * the CUDA version of smallcache.c with the same loop structure and the same transfers. Specialised on ATTN_D,
 * ATTN_BR (query rows per work item), ATTN_TILE (side T of the square tiles; 0: Br), ATTN_CAUSAL, ATTN_DTYPE and
 * ATTN_WARPS; CUDA-core fp32 arithmetic (the algorithm is about transfers, not peak speed).
 *
 * Work item = (batch*heads index, block of Br query rows); block b loops over items b, b + gridDim.x, ... and owns
 * the fp32 slice (float *)a.scratch + b * Br * n_kv of slow memory for the item's S (row stride n_kv). Shared
 * memory holds three T x T fp32 tiles (Q|P, K|V, accumulator) and m, l for the Br rows (l becomes 1/l at the end of
 * phase 1); the accumulator tile of the model lives in registers (each thread accumulates its own part of the tile),
 * its shared slot stays unused.
 *   1. S = scale * Q_i K^T by the tiled product: for each T x T tile of S, accumulate over d in chunks of T (a T x T
 *      tile of Q and one of K loaded per chunk, converted to fp32), fold the tile into the running row max m and
 *      sum l (online softmax), write the tile to S.
 *   2. O_i = P V by the tiled product: for each T x T tile of O_i, accumulate over the keys in chunks of T (a tile of
 *      S read and turned into P = exp(S - m) on the fly, a tile of V read), scale by 1/l and write the tile.
 * Any d and d_v (ATTN_DV: V and O rows) in 1..576: partial tiles of d and d_v are zero-padded in shared memory;
 * rows that are not whole vectors (d or d_v not a multiple of 4) are read and written by element.
 * I/O per item, counted by the block as the CPU template counts it, with R query rows, C visible keys (causal:
 * C = min(n_kv, max(0, i0 + R + n_kv - n))), nr = ceil(R/T), nc = ceil(C/T), ndv = ceil(d_v/T), partial tiles by
 * their real sizes:
 *   reads  = d*R*nc + d*C*nr   (Q and K tiles)   +   R*C*ndv + d_v*C*nr   (S and V tiles)
 *   writes = R*C (S)  +  R*d_v (O)
 * Causal masking is bottom-right aligned; a query row with no visible key outputs zeros.
 * Non-finite inputs give what the fp64 reference (runtime/reference.c) and smallcache.c give: a NaN or +inf score,
 * or a row whose visible scores are all -inf (l = 0, divided by all the same), makes the row NaN; a NaN or inf in V
 * reaches the rows that see its key. Where P V weights a key hidden from a row by P = 0 (its tile holds keys the
 * row sees) and the key's V entry is NaN or inf, 0 * NaN spoils the output: a causal thread that writes NaN or inf
 * computes those elements again from S (sc_fix); finite inputs pay a test per output element.
 *
 * Threads: a grid of RT x CT threads (CT = 8 lanes side by side in a warp, fewer when T < 8) covers each T x T output
 * tile, every thread an MR x MC micro-tile. In phase 1 a thread's columns are cx + j*CT, so the 8 lanes of a quarter warp read 8
 * different K rows: the K tile is stored with its 16-byte chunks XOR-swizzled by row, which keeps those reads free of
 * bank conflicts (shared memory has no room for padding). In phase 2 a thread's columns are VV-wide vectors
 * VV*(cx + j*CT), so the lanes read consecutive words of a V row. Q and P rows are read by all lanes of a quarter
 * warp at once (broadcasts). */

/* Score modifiers (window, softcap, ALiBi) are flash's only: attn_spec_check refuses such specs with the reason;
 * this stops a source generated past it. */
#if (defined(ATTN_WINDOW) && ATTN_WINDOW) || (defined(ATTN_SOFTCAP) && ATTN_SOFTCAP) || \
    (defined(ATTN_ALIBI) && ATTN_ALIBI)
#error "smallcache applies no window, softcap or ALiBi (flash does)"
#endif
#define SC_T ATTN_SC_TILE(ATTN_BR, ATTN_TILE)
#define kNegInf __int_as_float(0xff800000) /* -infinity */

namespace {

/* compile-time constants as enumerators: namespace-scope variables would become __device__ globals under
 * --device-as-default-execution-space */
enum : int {
  kD = ATTN_D, kDV = ATTN_DV, kBR = ATTN_BR, kT = SC_T, kNT = 32 * ATTN_WARPS,
  /* vector width along the contracted index (d in phase 1, keys in phase 2) and vectors per tile row */
  kVW = kT % 4 == 0 ? 4 : 1,
  kCPR = kT / kVW,
  /* thread grid: CT lanes per row group (a power of two dividing 32), RT row groups; MR x MC outputs per thread */
  kCT = kT >= 8 ? 8 : kT >= 4 ? 4 : kT >= 2 ? 2 : 1,
  kRT = kNT / kCT < kT ? kNT / kCT : kT,
  kMR = (kT + kRT - 1) / kRT,
  kMC = (kT + kCT - 1) / kCT,
  /* phase 2 output vector width: divides MC (columns per thread) and T (so a vector never straddles a partial tile) */
  kVV = (kMC % 4 == 0 && kT % 4 == 0) ? 4 : (kMC % 2 == 0 && kT % 2 == 0) ? 2 : 1,
  /* K-tile swizzle: chunk v of row c is stored at chunk v ^ sw(c), sw(c) = (c / kSwRows) & kSwMask; it spreads 8
   * consecutive rows over the 8 16-byte bank groups (only for a power-of-two number of chunks per row) */
  kSwizzle = kVW == 4 && kCPR >= 2 && (kCPR & (kCPR - 1)) == 0,
  kSwRows = kCPR >= 8 ? 1 : 8 / kCPR,
  kSwMask = kCPR >= 8 ? 7 : kCPR - 1,
  /* unrolling of the phase 1 product (phase 2: half): less when the micro-tile is large, to stay within 128
   * registers without spills */
  kUnroll = kMR * kMC >= 32 ? 2 : 4,
  /* tile loads in flight: rows that are not whole vectors load by element, with a predicate each, and take fewer */
  kLoadUnrollD = kD % kVW == 0 ? 4 : 1,
  kLoadUnrollDV = kDV % kVW == 0 ? 4 : 1,
  /* blocks per SM for __launch_bounds__: up to 16 warps (at most 128 registers a thread), fewer where shared memory
   * allows fewer blocks anyway (an A100 has 164 KiB a SM). Stating it also keeps ptxas from trading spills for
   * occupancy, which it does on its own when given the block size alone */
  kBlocksSmem = 160 * 1024 / (4 * (3 * kT * kT + 2 * kBR)),
  kBlocksWarps = ATTN_WARPS < 16 ? 16 / ATTN_WARPS : 1,
  kMinBlocks = kBlocksSmem < 1 ? 1 : kBlocksSmem < kBlocksWarps ? kBlocksSmem : kBlocksWarps,
};

static_assert(kT >= 1, "smallcache: the tile side must be positive");
static_assert(kMC % kVV == 0 && kT % kVV == 0, "smallcache: phase 2 vectors must tile the columns");
/* sw(c) depends on c mod 8 only, so with CT = 8 it is the same for all columns cx + j*CT of a thread */
static_assert(!kSwizzle || kCT == 8, "smallcache: the K swizzle assumes 8 lanes per row group");
static_assert(32 % kCT == 0 && kNT % kCT == 0, "smallcache: a row group must lie within one warp");

/* Shared memory: Q|P, K|V, the accumulator slot, then m and 1/l of the block's rows. */
static_assert(4LL * (3LL * kT * kT + 2LL * kBR) == ATTN_SMALLCACHE_SMEM(ATTN_D, ATTN_BR, ATTN_TILE),
              "smallcache: shared-memory layout differs from ATTN_SMALLCACHE_SMEM");

__device__ __forceinline__ int sc_swz(int c) { return kSwizzle ? (c / kSwRows) & kSwMask : 0; }

/* Inline PTX lives only in these wrappers, so the instructions the template emits are read in one place. */
/* ---- PTX wrappers ---- */
__device__ __forceinline__ float sc_h2f(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
/* the pair (lo, hi) packed as two halves of the input dtype, lo in the low 16 bits */
__device__ __forceinline__ unsigned sc_pack2(float lo, float hi) {
  unsigned r;
#if ATTN_DTYPE == 1
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#endif
  return r;
}
/* Shared memory through 32-bit shared-window byte addresses: NVRTC would otherwise carry 64-bit generic pointers
 * into the address arithmetic (more registers, and ptxas spills). volatile: the loads must not be merged or hoisted
 * across the __syncthreads() that separate one tile's contents from the next. */
template <int W>
__device__ __forceinline__ void sc_lds(unsigned addr, float (&x)[W]) {
  if constexpr (W == 4)
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(x[0]), "=f"(x[1]), "=f"(x[2]), "=f"(x[3]) : "r"(addr));
  else if constexpr (W == 2)
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(x[0]), "=f"(x[1]) : "r"(addr));
  else
    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(x[0]) : "r"(addr));
}
template <int W>
__device__ __forceinline__ void sc_sts(unsigned addr, const float (&x)[W]) {
  if constexpr (W == 4)
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "f"(x[0]), "f"(x[1]), "f"(x[2]), "f"(x[3])
                 : "memory");
  else
    asm volatile("st.shared.f32 [%0], %1;" ::"r"(addr), "f"(x[0]) : "memory");
}
/* ---- end of PTX wrappers ---- */

__device__ __forceinline__ float sc_lo(unsigned w) {
#if ATTN_DTYPE == 1
  return sc_h2f((unsigned short)(w & 0xffffu));
#else
  return __uint_as_float(w << 16);
#endif
}
__device__ __forceinline__ float sc_hi(unsigned w) {
#if ATTN_DTYPE == 1
  return sc_h2f((unsigned short)(w >> 16));
#else
  return __uint_as_float(w & 0xffff0000u);
#endif
}

/* kVW input elements at element index idx of p (aligned to kVW elements), converted to fp32. */
__device__ __forceinline__ void sc_load_in(const void *p, long long idx, float (&x)[kVW]) {
#if ATTN_DTYPE == 0
  if constexpr (kVW == 4) {
    const float4 t = __ldg((const float4 *)((const float *)p + idx));
    x[0] = t.x, x[1] = t.y, x[2] = t.z, x[3] = t.w;
  } else {
    x[0] = __ldg((const float *)p + idx);
  }
#else
  if constexpr (kVW == 4) {
    const uint2 t = __ldg((const uint2 *)((const unsigned short *)p + idx));
    x[0] = sc_lo(t.x), x[1] = sc_hi(t.x), x[2] = sc_lo(t.y), x[3] = sc_hi(t.y);
  } else {
    x[0] = sc_lo(__ldg((const unsigned short *)p + idx));
  }
#endif
}

/* kVW elements of a row of LD elements at element index idx (a multiple of kVW past the row's start), the first
 * `valid` of them (the rest zeros): whole vectors when rows are whole vectors, else by element. */
template <int LD>
__device__ __forceinline__ void sc_load_row(const void *p, long long idx, int valid, float (&x)[kVW]) {
  if constexpr (LD % kVW == 0) { /* then tiles of d (T a multiple of kVW) are whole vectors */
    (void)valid;
    sc_load_in(p, idx, x);
  } else {
#pragma unroll
    for (int q = 0; q < kVW; q++) {
      float e[1] = {0.0f};
      if (q < valid) {
#if ATTN_DTYPE == 0
        e[0] = __ldg((const float *)p + idx + q);
#else
        e[0] = sc_lo(__ldg((const unsigned short *)p + idx + q));
#endif
      }
      x[q] = e[0];
    }
  }
}

__device__ __forceinline__ float sc_lds1(unsigned addr) {
  float x[1];
  sc_lds<1>(addr, x);
  return x[0];
}
__device__ __forceinline__ void sc_sts1(unsigned addr, float v) {
  const float x[1] = {v};
  sc_sts<1>(addr, x);
}

/* kVV fp32 values stored at element index idx of the output (aligned to kVV elements), in the input dtype. */
__device__ __forceinline__ void sc_store_out(void *p, long long idx, const float (&x)[kVV]) {
#if ATTN_DTYPE == 0
  if constexpr (kVV == 4) *(float4 *)((float *)p + idx) = make_float4(x[0], x[1], x[2], x[3]);
  else if constexpr (kVV == 2) *(float2 *)((float *)p + idx) = make_float2(x[0], x[1]);
  else ((float *)p)[idx] = x[0];
#else
  unsigned short *o = (unsigned short *)p + idx;
  if constexpr (kVV == 4) *(uint2 *)o = make_uint2(sc_pack2(x[0], x[1]), sc_pack2(x[2], x[3]));
  else if constexpr (kVV == 2) *(unsigned *)o = sc_pack2(x[0], x[1]);
  else *o = (unsigned short)(sc_pack2(x[0], 0.0f) & 0xffffu);
#endif
}

/* The first `valid` of kVV outputs at element index idx of O (rows of d_v elements): whole vectors when rows are whole
 * vectors, else by element. */
__device__ __forceinline__ void sc_store_row(void *p, long long idx, int valid, const float (&x)[kVV]) {
  if constexpr (kDV % kVV == 0) { /* then tiles of d_v (T a multiple of kVV) are whole vectors */
    (void)valid;
    sc_store_out(p, idx, x);
  } else {
#pragma unroll
    for (int e = 0; e < kVV; e++)
      if (e < valid) {
#if ATTN_DTYPE == 0
        ((float *)p)[idx + e] = x[e];
#else
        ((unsigned short *)p)[idx + e] = (unsigned short)(sc_pack2(x[e], 0.0f) & 0xffffu);
#endif
      }
  }
}

__device__ __forceinline__ bool sc_nonfinite(float x) { return (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u; }
/* the input element at idx of p as fp32 */
__device__ __forceinline__ float sc_in1(const void *p, long long idx) {
#if ATTN_DTYPE == 0
  return __ldg((const float *)p + idx);
#else
  return sc_lo(__ldg((const unsigned short *)p + idx));
#endif
}

} // namespace

/* Inlined where rows are whole vectors; with rows by element its registers would make the product spill. Outside the
 * anonymous namespace: a called function keeps a short (mangled) name. */
#if ATTN_D % 4 == 0 && ATTN_DV % 4 == 0
#define SC_FIX_INLINE __device__ __forceinline__
#else
#define SC_FIX_INLINE __device__ __noinline__
#endif
/* The rare path of causal items, for a thread that wrote a NaN or inf into its part of an O tile. P V weights a key
 * hidden from a row by P = 0 when its tile holds keys the row sees, and 0 * NaN (or inf) in the key's V entry is
 * NaN where the reference adds nothing. Each such element of a row whose 1/l is finite is computed again over the
 * keys the row sees, from its scores in S and V in global memory (not counted: the I/O model is for finite inputs);
 * NaN and inf that the row does see come out again. The tile's rows start at o, s (row stride n_kv), m, il; its
 * columns at o and v (row stride d_v); row r sees the keys below vis0 + r. */
SC_FIX_INLINE void sc_fix(void *out, long long o, const void *vin, long long v, const float *s,
                                       long long n_kv, unsigned m, unsigned il, int tr, int td, int ry, int cx,
                                       long long vis0) {
#pragma unroll 1
  for (int i = 0; i < kMR; i++) {
    const int r = ry + i * kRT;
    const float li = r < tr ? sc_lds1(il + 4u * r) : 0.0f;
    if (r >= tr || sc_nonfinite(li)) continue;
    const float mr = sc_lds1(m + 4u * r), ms = mr == kNegInf ? 0.0f : mr;
#pragma unroll 1
    for (int j = 0; j < kMC; j++) {
      const int dd = kVV * (cx + j / kVV * kCT) + j % kVV; /* phase 2's column of acc[i][j] */
      if (dd >= td) continue;
      const long long at = o + (long long)r * kDV + dd;
#if ATTN_DTYPE == 0
      if (!sc_nonfinite(((const float *)out)[at])) continue;
#else
      if (!sc_nonfinite(sc_lo(((const unsigned short *)out)[at]))) continue;
#endif
      float acc = 0.0f;
      for (long long c = 0; c < vis0 + r; c++)
        acc = fmaf(__expf(s[r * n_kv + c] - ms), sc_in1(vin, v + c * kDV + dd), acc);
#if ATTN_DTYPE == 0
      ((float *)out)[at] = acc * li;
#else
      ((unsigned short *)out)[at] = (unsigned short)(sc_pack2(acc * li, 0.0f) & 0xffffu);
#endif
    }
  }
}

extern "C" __global__ void __launch_bounds__(ATTN_WARPS * 32, kMinBlocks) attn_kernel(attn_cuda_kargs a) {
  ATTN_CIO_DECL;
  extern __shared__ __align__(16) unsigned char attn_smem[];
  /* byte addresses in the shared window */
  const unsigned ta = (unsigned)__cvta_generic_to_shared(attn_smem); /* Q tile [r][k], then P tile [r][c] */
  const unsigned tb = ta + 4u * kT * kT;    /* K tile [c][k] (swizzled chunks), then V tile [c][dd] */
  const unsigned sm_m = tb + 8u * kT * kT;  /* after the accumulator slot */
  const unsigned sm_l = sm_m + 4u * kBR;   /* l, turned into 1/l at the end of phase 1 */

  const int tid = threadIdx.x;
  const int cx = tid % kCT;
  /* threads past RT x CT (only when T is small for the block) repeat rows of others and write nothing */
  const int ry = (tid / kCT) % kRT;
  const bool own = kRT * kCT >= kNT || tid < kRT * kCT;
  const int swz = sc_swz(cx);

  const long long n = a.n, n_kv = a.n_kv, off = n_kv - n;
  /* item, head and block indices fit 32 bits (a.grid_items is an int); 32-bit division is inline code where
   * 64-bit division is a subroutine call that makes ptxas spill */
  const unsigned heads = (unsigned)a.heads, heads_kv = (unsigned)(a.heads_kv > 0 ? a.heads_kv : a.heads);
  const unsigned group = heads / heads_kv;
  const unsigned nqb = (unsigned)((n + kBR - 1) / kBR);
  float *const S = (float *)a.scratch + (long long)blockIdx.x * kBR * n_kv; /* slow, row stride n_kv */
  const float scale = a.scale;

  for (int item = blockIdx.x; item < a.grid_items; item += gridDim.x) {
    __syncthreads(); /* the previous item is done with m, 1/l and the scratch slice */
    const unsigned bh = (unsigned)item / nqb, b = bh / heads, hk = (bh - b * heads) / group;
    const long long i0 = (long long)((unsigned)item - bh * nqb) * kBR;
    const int R = (int)(n - i0 < kBR ? n - i0 : kBR);
    int C = (int)n_kv; /* keys visible to at least one row of the block */
    if (ATTN_CAUSAL) {
      const long long last = i0 + R + off;
      C = last < 0 ? 0 : (int)(last < n_kv ? last : n_kv);
    }
    const long long qo = ((long long)bh * n + i0) * kD;              /* Q rows of the item */
    const long long oo = kDV == kD ? qo : ((long long)bh * n + i0) * kDV; /* its O rows */
    const long long kvo = ((long long)b * heads_kv + hk) * n_kv * kD; /* K of its kv head */
    const long long vo = kDV == kD ? kvo : ((long long)b * heads_kv + hk) * n_kv * kDV; /* V of its kv head */

    /* 1. S = scale * Q K^T, tile by tile, with the online row statistics m, l in shared memory (in registers they
     *    would stay live across the whole product, and ptxas spills them). Lane 0 of a row group writes a row's m
     *    and l; the other lanes read them before the shuffles that lane 0 waits on, and the next tile's reads come
     *    after __syncthreads. */
    for (int r0 = 0; r0 < R; r0 += kT) {
      const int tr = R - r0 < kT ? R - r0 : kT;
#pragma unroll
      for (int i = 0; i < kMR; i++) {
        const int r = ry + i * kRT;
        if (own && cx == 0 && r < tr) sc_sts1(sm_m + 4u * (r0 + r), kNegInf), sc_sts1(sm_l + 4u * (r0 + r), 0.0f);
      }
      for (int c0 = 0; c0 < C; c0 += kT) {
        const int tc = C - c0 < kT ? C - c0 : kT;
        float acc[kMR][kMC];
#pragma unroll
        for (int i = 0; i < kMR; i++)
#pragma unroll
          for (int j = 0; j < kMC; j++) acc[i][j] = 0.0f;
#pragma unroll 1
        for (int k0 = 0; k0 < kD; k0 += kT) {
          const int tk = kD - k0 < kT ? kD - k0 : kT; /* the last vector past tk holds zeros */
          __syncthreads(); /* the previous chunk's tiles are consumed */
#pragma unroll(kLoadUnrollD) /* a few loads in flight per thread; full unrolling costs registers */
          for (int p = 0; p < (kT * kCPR + kNT - 1) / kNT; p++) {
            const int e = tid + p * kNT, r = e / kCPR, v = e % kCPR;
            /* rows past a partial tile are zeros: the product reads whole tiles, and must not read memory no
             * thread wrote (their results are never stored) */
            if (r < kT && v * kVW < tk) {
              float x[kVW];
              if (r < tr) {
                sc_load_row<kD>(a.q, qo + (long long)(r0 + r) * kD + k0 + v * kVW, tk - v * kVW, x);
              } else {
#pragma unroll
                for (int q = 0; q < kVW; q++) x[q] = 0.0f;
              }
              sc_sts<kVW>(ta + 4u * (r * kT + v * kVW), x);
              if (r < tc) {
                sc_load_row<kD>(a.k, kvo + (long long)(c0 + r) * kD + k0 + v * kVW, tk - v * kVW, x);
              } else {
#pragma unroll
                for (int q = 0; q < kVW; q++) x[q] = 0.0f;
              }
              sc_sts<kVW>(tb + 4u * (r * kT + (v ^ sc_swz(r)) * kVW), x);
            }
          }
          ATTN_CIO_READ(tr * tk);
          ATTN_CIO_READ(tc * tk);
          __syncthreads();
          const unsigned pa = ta + 4u * ry * kT, pb = tb + 4u * cx * kT;
          const int nv = kD % kVW == 0 ? tk / kVW : (tk + kVW - 1) / kVW;
#pragma unroll(kUnroll)
          for (int v = 0; v < nv; v++) {
            float av[kMR][kVW];
#pragma unroll
            for (int i = 0; i < kMR; i++) sc_lds<kVW>(pa + 4u * (i * kRT * kT + v * kVW), av[i]);
            const int vb = (v ^ swz) * kVW;
#pragma unroll
            for (int j = 0; j < kMC; j++) {
              float bv[kVW];
              sc_lds<kVW>(pb + 4u * (j * kCT * kT + vb), bv);
#pragma unroll
              for (int i = 0; i < kMR; i++)
#pragma unroll
                for (int q = 0; q < kVW; q++) acc[i][j] = fmaf(av[i][q], bv[q], acc[i][j]);
            }
          }
        }
        /* scale, mask, fold into m and l (the CT lanes of a row group hold its columns), write the tile to S */
#pragma unroll
        for (int i = 0; i < kMR; i++) {
          const int r = ry + i * kRT;
          const long long lim = i0 + r0 + r + off; /* key c0 + c is visible iff c0 + c <= lim */
          /* only the row's lane 0 reads m and l, the lane that writes them: the row max over the lanes takes m in
           * through that lane, and nothing orders other lanes' reads before its write (the shuffles do not order
           * memory); threads that repeat a row (!own) compute what is never written */
          const float mold = own && cx == 0 && r < tr ? sc_lds1(sm_m + 4u * (r0 + r)) : kNegInf;
          const float lold = own && cx == 0 && r < tr ? sc_lds1(sm_l + 4u * (r0 + r)) : 0.0f;
          float mx = mold;
#pragma unroll
          for (int j = 0; j < kMC; j++) {
            const int c = cx + j * kCT;
            const bool vis = c < tc && (!ATTN_CAUSAL || c0 + c <= lim);
            acc[i][j] = vis ? acc[i][j] * scale : kNegInf;
            mx = fmaxf(mx, acc[i][j]);
          }
#pragma unroll
          for (int o = 1; o < kCT; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
          const float ms = mx == kNegInf ? 0.0f : mx;
          float sum = 0.0f;
#pragma unroll
          for (int j = 0; j < kMC; j++) sum += __expf(acc[i][j] - ms);
#pragma unroll
          for (int o = 1; o < kCT; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
          /* else nothing visible yet in this row, or only NaN scores (the max drops them): P = exp(NaN) carries
           * those to O in phase 2 */
          if (own && cx == 0 && r < tr && mx != kNegInf) {
            sc_sts1(sm_l + 4u * (r0 + r), lold * __expf(mold - mx) + sum);
            sc_sts1(sm_m + 4u * (r0 + r), mx);
          }
          if (own && r < tr) {
            float *srow = S + (long long)(r0 + r) * n_kv + c0;
#pragma unroll
            for (int j = 0; j < kMC; j++)
              if (cx + j * kCT < tc) srow[cx + j * kCT] = acc[i][j];
          }
        }
        ATTN_CIO_WRITE(tr * tc);
      }
#pragma unroll
      for (int i = 0; i < kMR; i++) {
        const int r = ry + i * kRT;
        if (own && cx == 0 && r < tr) {
          /* 0: a row that sees no key; l = 0 (every visible score -inf) gives inf, so 0 * inf = NaN, the
           * reference's 0/0 */
          const float l = sc_lds1(sm_l + 4u * (r0 + r));
          sc_sts1(sm_l + 4u * (r0 + r), !ATTN_CAUSAL || i0 + r0 + r + off >= 0 ? 1.0f / l : 0.0f);
        }
      }
    }
    __syncthreads(); /* m, 1/l and this block's S writes are visible to all its threads */

    /* 2. O = P V, P = exp(S - m) formed as each S tile is read; 1/l applied when the O tile is written. */
    for (int r0 = 0; r0 < R; r0 += kT) {
      const int tr = R - r0 < kT ? R - r0 : kT;
#pragma unroll 1
      for (int d0 = 0; d0 < kDV; d0 += kT) {
        const int td = kDV - d0 < kT ? kDV - d0 : kT;
        float acc[kMR][kMC];
#pragma unroll
        for (int i = 0; i < kMR; i++)
#pragma unroll
          for (int j = 0; j < kMC; j++) acc[i][j] = 0.0f;
        for (int c0 = 0; c0 < C; c0 += kT) {
          const int tc = C - c0 < kT ? C - c0 : kT;
          const int tcp = (tc + kVW - 1) / kVW * kVW; /* the contraction runs in vectors: zeros past tc */
          __syncthreads();
#pragma unroll(kLoadUnrollDV)
          for (int p = 0; p < (kT * kT + kNT - 1) / kNT; p++) {
            const int e = tid + p * kNT, r = e / kT, c = e % kT;
            if (r < kT && c < tcp) { /* rows past a partial tile: zeros, as in phase 1 */
              float pv = 0.0f;
              if (r < tr && c < tc) {
                const float m = sc_lds1(sm_m + 4u * (r0 + r));
                pv = __expf(S[(long long)(r0 + r) * n_kv + c0 + c] - (m == kNegInf ? 0.0f : m));
              }
              sc_sts1(ta + 4u * (r * kT + c), pv);
            }
          }
#pragma unroll(kLoadUnrollDV)
          for (int p = 0; p < (kT * kCPR + kNT - 1) / kNT; p++) {
            const int e = tid + p * kNT, c = e / kCPR, v = e % kCPR;
            if (c < tcp) { /* columns past a partial tile (d < T): zeros, as the rows past one */
              float x[kVW];
              if (c < tc && v * kVW < td) {
                sc_load_row<kDV>(a.v, vo + (long long)(c0 + c) * kDV + d0 + v * kVW, td - v * kVW, x);
              } else {
#pragma unroll
                for (int q = 0; q < kVW; q++) x[q] = 0.0f;
              }
              sc_sts<kVW>(tb + 4u * (c * kT + v * kVW), x);
            }
          }
          ATTN_CIO_READ(tr * tc);
          ATTN_CIO_READ(tc * td);
          __syncthreads();
          const unsigned pa = ta + 4u * ry * kT, pb = tb + 4u * kVV * cx;
          const int nv = tcp / kVW;
#pragma unroll(kUnroll / 2)
          for (int v = 0; v < nv; v++) {
            float av[kMR][kVW];
#pragma unroll
            for (int i = 0; i < kMR; i++) sc_lds<kVW>(pa + 4u * (i * kRT * kT + v * kVW), av[i]);
#pragma unroll
            for (int q = 0; q < kVW; q++) {
              const unsigned vrow = pb + 4u * (v * kVW + q) * kT;
#pragma unroll
              for (int g = 0; g < kMC / kVV; g++) {
                float bv[kVV];
                sc_lds<kVV>(vrow + 4u * g * kCT * kVV, bv);
#pragma unroll
                for (int i = 0; i < kMR; i++)
#pragma unroll
                  for (int e = 0; e < kVV; e++)
                    acc[i][g * kVV + e] = fmaf(av[i][q], bv[e], acc[i][g * kVV + e]);
              }
            }
          }
        }
        bool bad = false;
#pragma unroll
        for (int i = 0; i < kMR; i++) {
          const int r = ry + i * kRT;
          if (own && r < tr) {
            const float li = sc_lds1(sm_l + 4u * (r0 + r));
#pragma unroll
            for (int g = 0; g < kMC / kVV; g++) {
              const int dd = kVV * (cx + g * kCT);
              if (dd < td) {
                float x[kVV];
#pragma unroll
                for (int e = 0; e < kVV; e++) {
                  x[e] = acc[i][g * kVV + e] * li;
                  bad |= sc_nonfinite(x[e]);
                }
                sc_store_row(a.o, oo + (long long)(r0 + r) * kDV + d0 + dd, td - dd, x);
              }
            }
          }
        }
        if (ATTN_CAUSAL && bad)
          sc_fix(a.o, oo + r0 * kDV + d0, a.v, vo + d0, S + (long long)r0 * n_kv, n_kv, sm_m + 4u * r0, sm_l + 4u * r0,
                 tr, td, ry, cx, i0 + r0 + off + 1);
        ATTN_CIO_WRITE(tr * td);
      }
    }
  }
  ATTN_CIO_FLUSH(a);
}
