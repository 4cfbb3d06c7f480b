/* flash_bwd.cu: FlashAttention-2's backward pass for NVIDIA GPUs (sm_80, sm_90), specialised at compile time on
 * ATTN_D, ATTN_DV, ATTN_BR, ATTN_BC, ATTN_CAUSAL, ATTN_WARPS, ATTN_STAGES and ATTN_DTYPE; arguments in
 * kernel_abi_cuda_bwd.h.
 *
 * With P = exp(scale·S − lse) recomputed from the forward's lse (never stored), dP = dO Vᵀ, delta = rowsum(dO∘O)
 * and dS = P∘(dP − delta): dV = Pᵀ dO, dK = scale·dSᵀ Q, dQ = scale·dS K.
 *   attn_bwd_pre: delta of every query row (a warp a row, fp32), into the scratch the runtime allocates.
 *   attn_kernel, dK/dV blocks: one key block K_j, V_j (Bc keys) of one KV head, loaded once; the outer loop is over
 *     the key blocks (one per thread block), the inner over the query heads of the KV head (GQA) and their query
 *     blocks that see a key of the block (causal: from the first row whose diagonal reaches j0): Q_i, dO_i, lse_i
 *     and delta_i loaded, S = Q_i K_jᵀ and dP = dO_i V_jᵀ computed, P and dS written to shared memory in the input
 *     type, then dV += Pᵀ dO_i and dK += dSᵀ Q_i into fp32 accumulators held in registers across the whole loop.
 *   attn_kernel, dQ blocks: one query block of one head; the loop over the key blocks it sees recomputes S, dP and
 *     dS and adds dS K_j into fp32 accumulators in registers.
 * Stages 2: the inner loop's next block (Q_{i+1}, dO_{i+1}, its lse and delta; or K_{j+1}, V_{j+1}) loads into a
 * second row set by cp.async while the current one is computed (one barrier a block before the products, one
 * between them); stages 1: one row set, loaded after the previous block's products.
 * dQ is computed apart from dK and dV (S and dP twice: 7 products of the forward's size where atomics need 5) so
 * that no sum is split across thread blocks: every output element is one thread's, summed in a fixed order (keys
 * and query heads by index), and the gradients are bitwise the same from run to run on a device.
 * ATTN_DQ_ATOMIC 1 (spec dq=atomic): no dQ blocks; each dK/dV block adds its dS K_j (Br x d, unscaled) to an fp32
 * scratch dQ by red.global.add.f32 (atomicAdd, result unused), and attn_bwd_post rounds scale times the scratch
 * into dq. attn_bwd_pre zeroes the scratch (it runs before attn_kernel). 5 products; dK and dV stay bitwise the
 * same run to run (still one thread's sums in a fixed order), dQ's fp32 sums take the blocks' order of arrival, so
 * its last bits may differ between runs.
 *
 * Products: each warp owns U consecutive 16x8 tiles of a product (tiles wU .. wU + U - 1 in row-major order), its C
 * fragment in the mma.sync.m16n8k16 layout (lane: rows g = lane/4 and g+8, columns 2(lane%4) and +1). f16 / bf16:
 * the A and B fragments are read by ldmatrix (.trans where the tile is stored k-major: Pᵀ and dSᵀ, dO, Q and K as B),
 * A's once a k-step for the warp's tiles of one tile row, and multiplied by mma.sync with fp32 accumulators; P and
 * dS are rounded to the input type first, as FlashAttention-2 does. f32: the same tiles on the CUDA cores in exact
 * fp32 (fmaf over k), P and dS kept in fp32. Tiles are row-major in shared memory, d and d_v padded to multiples of 16 (zeros) and every row by 16
 * bytes (no bank conflicts), rows past n or n_kv zero-filled; rows move from global memory by 16-byte loads
 * (element by element where d or d_v is not a multiple of 16 bytes), coalesced over the block's contiguous rows.
 *
 * Masking: key j is visible to query i iff j < n_kv and, causal, j <= i + n_kv − n (bottom-right). A hidden key
 * has P = 0 and dS = 0; a query row that sees no key gets dQ = 0, a key no row sees dK = dV = 0. Scores as in
 * flash.cu: base 2, scale·log2(e) applied in fp32, ex2.approx. */

#define FB_D ATTN_D
#define FB_DV ATTN_DV
#define FB_BR ATTN_BR
#define FB_BC ATTN_BC
#define FB_W ATTN_WARPS
#define FB_S ATTN_STAGES /* 2: the next block's rows load (cp.async) while this one is computed; 1: no overlap */
#define FB_T (32 * FB_W)
#define FB_DP ATTN_CUDA_RUP(FB_D, 16)
#define FB_DVP ATTN_CUDA_RUP(FB_DV, 16)
#define FB_ES (ATTN_DTYPE == 0 ? 4 : 2)

#ifndef ATTN_DQ_ATOMIC
#define ATTN_DQ_ATOMIC 0
#endif

static_assert(FB_BR % 16 == 0 && FB_BC % 16 == 0, "Br and Bc must be multiples of 16");
static_assert(FB_S == 1 || FB_S == 2, "stages must be 1 or 2");

#if ATTN_DTYPE == 0
typedef float fb_elem;
#else
typedef unsigned short fb_elem;
#endif

/* shared layout, in elements of the input type, then fp32. Rows are padded by 16 bytes (FB_PE elements): the 8 rows
 * a fragment load touches (lanes g = 0..7) then start in 8 different groups of 4 banks, and the k-major reads of P,
 * dS, Q and dO (lanes t = 0..3 on rows 2t) in 4, so neither conflicts. */
#define FB_PE (16 / FB_ES)
#define FB_SQ (FB_DP + FB_PE)  /* row stride of Q_i and K_j */
#define FB_SV (FB_DVP + FB_PE) /* of dO_i and V_j */
#define FB_SP (FB_BC + FB_PE)  /* of P and dS */
/* Row sets: a tile of rows of d (Q_i or K_j) followed by the same rows of d_v (dO_i or V_j). The query block's set
 * (Q_i, dO_i), the key block's (K_j, V_j), and with 2 stages a second set for the next block of the inner loop
 * (dK/dV blocks: Q_{i+1}, dO_{i+1}; dQ blocks: K_{j+1}, V_{j+1}); then P, dS; then lse and delta per stage (fp32). */
#define FB_ROWS(r) ((r) * (FB_SQ + FB_SV))
#define FB_OFF_QS 0
#define FB_OFF_KS (FB_OFF_QS + FB_ROWS(FB_BR))
#define FB_OFF_X (FB_OFF_KS + FB_ROWS(FB_BC)) /* the second set (2 stages) */
#define FB_OFF_P (FB_OFF_X + (FB_S > 1 ? FB_ROWS(ATTN_CUDA_MAX2(FB_BR, FB_BC)) : 0))
#define FB_OFF_DS (FB_OFF_P + FB_BR * FB_SP)
#define FB_ELEMS (FB_OFF_DS + FB_BR * FB_SP)
static_assert(FB_ELEMS * FB_ES + 8 * FB_BR * FB_S == ATTN_FLASH_BWD_SMEM(FB_ES, FB_D, FB_DV, FB_BR, FB_BC, FB_S),
              "layout differs from ATTN_FLASH_BWD_SMEM");

/* ---- PTX wrappers ---- */
/* 16 bytes global -> shared, asynchronously; bytes = 0 zero-fills without reading src */
__device__ __forceinline__ void fb_cp16(void *dst, const void *src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"((unsigned)__cvta_generic_to_shared(dst)),
               "l"(src), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void fb_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/* every cp.async of this thread has landed (the block's barrier after it makes them visible to all) */
__device__ __forceinline__ void fb_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ float fb_ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
#if ATTN_DTYPE != 0
/* c += a b for one 16x8x16 tile, fp32 accumulators */
__device__ __forceinline__ void fb_mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
#if ATTN_DTYPE == 1
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
/* two floats rounded to nearest into one register: lo in bits 0..15, hi in 16..31 */
__device__ __forceinline__ unsigned fb_pack(float lo, float hi) {
  unsigned r;
#if ATTN_DTYPE == 1
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#else
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#endif
  return r;
}
#if ATTN_DTYPE == 1
__device__ __forceinline__ float fb_h2f(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(h));
  return f;
}
#endif
#endif
/* ---- end of PTX wrappers ---- */

/* an input element as fp32, and fp32 rounded to an element */
__device__ __forceinline__ float fb_in(fb_elem x) {
#if ATTN_DTYPE == 0
  return x;
#elif ATTN_DTYPE == 1
  return fb_h2f(x);
#else
  return __uint_as_float((unsigned)x << 16);
#endif
}
__device__ __forceinline__ fb_elem fb_out(float x) {
#if ATTN_DTYPE == 0
  return x;
#else
  return (fb_elem)(fb_pack(x, 0.0f) & 0xffffu);
#endif
}

/* C (16x8 at a, b) += A B over k in [0, K): A(r, k) = a[r*AR + k*AK], B(k, n) = b[k*BK + n*BN], shared tiles. */
#if ATTN_DTYPE != 0
/* ldmatrix: four (A) or two (B) 8x8 matrices of 16-bit elements, each lane giving one 16-byte row's address; .trans
 * where the tile is stored k-major (Pᵀ, dSᵀ as A; dO, Q, K as B), so every operand moves as whole 16-byte rows */
__device__ __forceinline__ void fb_ldm4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void fb_ldm4t(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void fb_ldm2(unsigned &r0, unsigned &r1, unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(addr));
}
__device__ __forceinline__ void fb_ldm2t(unsigned &r0, unsigned &r1, unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(addr));
}
/* Lane l = 8m + j gives row j of matrix m. A's matrices (a0..a3 of mma.sync): rows +8 for m odd, k +8 for m >= 2;
 * stored k-major (AR = 1) its memory rows are k. B's (lanes 0..15; 16..31 repeat them): k +8 for m odd. Rows start
 * on 16-byte boundaries (d, d_v and Bc padded to multiples of 16 elements, rows by 16 bytes), and the 8 rows of a
 * matrix, 16(2i+1) bytes apart, fall in 8 different groups of 4 banks.
 * The warp's tiles f0 .. f0 + U - 1 (those below fend) of the row-major order of 16x8 tiles, NT a row, into c[u]:
 * each k-step loads A's fragment once for the tiles of one tile row (they follow each other) and B's per tile, so
 * a warp's U tiles in one row take 4 + 2U wavefronts a k-step rather than 6U. */
template <int AR, int AK, int BK, int BN, int K, int NT, int U>
__device__ __forceinline__ void fb_prod(float (&c)[U][4], const fb_elem *a, const fb_elem *b, int f0, int fend,
                                        int lane) {
  static_assert(AK == 1 || AR == 1, "A is row- or k-major");
  static_assert(BK == 1 || BN == 1, "B is n- or k-major");
  const int j = lane & 7, m = lane >> 3;
  const fb_elem *ap = AK == 1 ? a + (j + 8 * (m & 1)) * AR + 8 * (m >> 1) : a + (j + 8 * (m >> 1)) * AK + 8 * (m & 1);
  const fb_elem *bp = BK == 1 ? b + j * BN + 8 * (m & 1) : b + (j + 8 * (m & 1)) * BK;
  /* f0 is a multiple of U (the callers' ownership): with U | NT the tiles are one run of a tile row, with NT | U
   * whole rows; either way each tile's offset from f0's is a constant (an immediate of the ldmatrix, not a register
   * per tile) */
  constexpr bool ROW = NT % U == 0, ROWS = U % NT == 0;
  const unsigned aa = (unsigned)__cvta_generic_to_shared(ap + (ROW || ROWS ? f0 / NT * 16 * AR : 0)),
                 ba = (unsigned)__cvta_generic_to_shared(bp + (ROW ? f0 % NT * 8 * BN : 0));
#pragma unroll 1
  for (int k0 = 0; k0 < K; k0 += 16) {
    const unsigned ak = aa + (unsigned)(k0 * AK) * 2u, bk = ba + (unsigned)(k0 * BK) * 2u;
    unsigned af[4] = {0u, 0u, 0u, 0u};
    int cur = -1;
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int f = f0 + u;
      if (f < fend) {
        /* the tile's row and column: relative to f0's row (ROW, ROWS) or absolute */
        const int mt = ROW ? 0 : ROWS ? u / NT : f / NT, nt = ROW ? u : ROWS ? u % NT : f % NT;
        if (ROW ? u == 0 : ROWS ? u % NT == 0 : mt != cur) { /* a new tile row: its A fragment */
          const unsigned at = ak + (unsigned)(mt * 16 * AR) * 2u;
          if constexpr (AK == 1) fb_ldm4(af, at);
          else fb_ldm4t(af, at);
          cur = mt;
        }
        unsigned b0, b1;
        const unsigned bt = bk + (unsigned)(nt * 8 * BN) * 2u;
        if constexpr (BK == 1) fb_ldm2(b0, b1, bt);
        else fb_ldm2t(b0, b1, bt);
        fb_mma(c[u], af, b0, b1);
      }
    }
  }
}
#else
template <int AR, int AK, int BK, int BN, int K>
__device__ __forceinline__ void fb_tile(float (&c)[4], const fb_elem *a, const fb_elem *b, int lane) {
  const int g = lane >> 2, t = lane & 3;
  const float *a0 = a + g * AR, *a1 = a0 + 8 * AR, *b0 = b + 2 * t * BN, *b1 = b0 + BN;
#pragma unroll 8
  for (int k = 0; k < K; k++) {
    const float x0 = a0[k * AK], x1 = a1[k * AK], y0 = b0[k * BK], y1 = b1[k * BK];
    c[0] = fmaf(x0, y0, c[0]);
    c[1] = fmaf(x0, y1, c[1]);
    c[2] = fmaf(x1, y0, c[2]);
    c[3] = fmaf(x1, y1, c[3]);
  }
}
/* the warp's tiles f0 .. f0 + U - 1 (those below fend) of the row-major order of 16x8 tiles, NT a row */
template <int AR, int AK, int BK, int BN, int K, int NT, int U>
__device__ __forceinline__ void fb_prod(float (&c)[U][4], const fb_elem *a, const fb_elem *b, int f0, int fend,
                                        int lane) {
#pragma unroll
  for (int u = 0; u < U; u++) {
    const int f = f0 + u;
    if (f < fend) fb_tile<AR, AK, BK, BN, K>(c[u], a + f / NT * 16 * AR, b + f % NT * 8 * BN, lane);
  }
}
#endif

/* Rows [0, rows) of a block of R rows of width W (global, row stride W) into a shared tile of row stride WP (padded
 * d and the 16 bytes); rows past rows and columns past W zero-filled. All threads. Rows of whole 16-byte chunks move
 * by cp.async of 16 bytes (the runtime takes 16-byte aligned arrays; the caller commits and waits), others by
 * element at once. */
template <int R, int W, int WP> __device__ __forceinline__ void fb_load(fb_elem *dst, const fb_elem *src, int rows) {
  constexpr int VE = 16 / FB_ES;
  if constexpr (W % VE == 0) {
    constexpr int NC = WP / VE, NW = W / VE; /* chunks of a shared row, of a global row */
#pragma unroll 2
    for (int idx = threadIdx.x; idx < R * NC; idx += FB_T) {
      const int r = idx / NC, c = idx % NC;
      const bool ok = r < rows && c < NW; /* else zero-filled, from the block's first row (rows >= 1) */
      fb_cp16(dst + r * WP + c * VE, src + (ok ? (long long)r * W + c * VE : 0LL), ok ? 16 : 0);
    }
  } else {
#pragma unroll 1
    for (int idx = threadIdx.x; idx < R * WP; idx += FB_T) {
      const int r = idx / WP, c = idx % WP;
      dst[idx] = r < rows && c < W ? src[(long long)r * W + c] : (fb_elem)0;
    }
  }
}

/* lse (in base 2) and delta of the block's rows into shared memory; rows past `rows` get 0 (they see no key). */
__device__ __forceinline__ void fb_load_rows(float *sl, float *sd, const float *lse, const float *delta, int rows) {
  for (int r = threadIdx.x; r < FB_BR; r += FB_T) {
    sl[r] = r < rows ? lse[r] * 1.4426950408889634f : 0.0f;
    sd[r] = r < rows ? delta[r] : 0.0f;
  }
}

#define FB_NS ((FB_BR / 16) * (FB_BC / 8)) /* 16x8 tiles of S (Br x Bc) */
#define FB_SG0 ((FB_NS + FB_W - 1) / FB_W)
#define FB_SG (FB_SG0 < 4 ? FB_SG0 : 4) /* S and dP tiles computed at a time (8 accumulators a tile) */
/* tiles per warp (warp*FB_US ..., row-major order), a multiple of FB_SG so that each group starts at one */
#define FB_US ((FB_SG0 + FB_SG - 1) / FB_SG * FB_SG)

/* S = Q_i K_jᵀ and dP = dO_i V_jᵀ from the row sets qs (Q_i, dO_i) and ks (K_j, V_j), P = exp2(S scale log2(e) -
 * lse log2(e)) where key j0 + c is visible to row i0 + r, else 0, dS = P (dP - delta): P (when sp) and dS into shared
 * memory in the input type. e0 = i0 + n_kv - n (row r sees keys up to e0 + r), cols: keys of the block, rows: rows of
 * the block; sl, sd: the rows' lse (base 2) and delta. */
__device__ __forceinline__ void fb_scores(fb_elem *sm, const fb_elem *qs, const fb_elem *ks, const float *sl,
                                          const float *sd, bool sp, int rows, int cols, int j0, int e0, float sl2,
                                          int warp, int lane) {
  const int g = lane >> 2, t = lane & 3;
  const fb_elem *sdo = qs + FB_BR * FB_SQ, *sv = ks + FB_BC * FB_SQ;
  const int fend = warp * FB_US + FB_US < FB_NS ? warp * FB_US + FB_US : FB_NS;
#pragma unroll 1
  for (int f0 = warp * FB_US; f0 < fend; f0 += FB_SG) {
    float s[FB_SG][4], dp[FB_SG][4];
#pragma unroll
    for (int u = 0; u < FB_SG; u++)
#pragma unroll
      for (int e = 0; e < 4; e++) s[u][e] = dp[u][e] = 0.0f;
    fb_prod<FB_SQ, 1, 1, FB_SQ, FB_DP, FB_BC / 8, FB_SG>(s, qs, ks, f0, fend, lane);
    fb_prod<FB_SV, 1, 1, FB_SV, FB_DVP, FB_BC / 8, FB_SG>(dp, sdo, sv, f0, fend, lane);
#pragma unroll
    for (int u = 0; u < FB_SG; u++) {
      const int f = f0 + u;
      if (f < fend) {
        const int mt = f / (FB_BC / 8), nt = f % (FB_BC / 8);
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int r = mt * 16 + g + 8 * (e >> 1), c = nt * 8 + 2 * t + (e & 1);
          const bool vis = r < rows && c < cols && (!ATTN_CAUSAL || j0 + c <= e0 + r);
          const float p = vis ? fb_ex2(s[u][e] * sl2 - sl[r]) : 0.0f;
          const float ds = vis ? p * (dp[u][e] - sd[r]) : 0.0f;
          if (sp) sm[FB_OFF_P + r * FB_SP + c] = fb_out(p);
          sm[FB_OFF_DS + r * FB_SP + c] = fb_out(ds);
        }
      }
    }
  }
}

/* The warp's tiles of a R x WP product held in registers: tiles w*U .. w*U + U - 1 of the row-major order of 16x8
 * tiles (those below N), so that a warp's tiles share rows of A (fb_prod). */
template <int R, int WP> struct fb_acc {
  static constexpr int N = (R / 16) * (WP / 8), U = (N + FB_W - 1) / FB_W;
  float c[U][4];
  __device__ __forceinline__ int first(int warp) const { return warp * U; }
  __device__ __forceinline__ int end(int warp) const { return warp * U + U < N ? warp * U + U : N; }
  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
      for (int e = 0; e < 4; e++) c[u][e] = 0.0f;
  }
  /* rows [0, rows) and columns [0, W) of the product times mul, rounded, into dst (row stride W) */
  template <int W> __device__ __forceinline__ void store(fb_elem *dst, int rows, float mul, int warp, int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int f = warp * U + u;
      if (f < N) {
        const int mt = f / (WP / 8), nt = f % (WP / 8);
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int r = mt * 16 + g + 8 * (e >> 1), col = nt * 8 + 2 * t + (e & 1);
          if (r < rows && col < W) dst[(long long)r * W + col] = fb_out(c[u][e] * mul);
        }
      }
    }
  }
};

/* Query block i0 of head bh (rows of it) into row set qs, its lse and delta into sl, sd. */
__device__ __forceinline__ void fb_issue_q(const attn_cuda_bwd_kargs &a, fb_elem *qs, float *sl, float *sd,
                                           long long bh, int i0, int rows) {
  const long long r0 = bh * a.n + i0;
  fb_load<FB_BR, FB_D, FB_SQ>(qs, (const fb_elem *)a.q + r0 * FB_D, rows);
  fb_load<FB_BR, FB_DV, FB_SV>(qs + FB_BR * FB_SQ, (const fb_elem *)a.dout + r0 * FB_DV, rows);
  fb_load_rows(sl, sd, a.lse + r0, a.delta + r0, rows);
}
/* Key block j0 of KV head bhk (cols keys) into row set ks. */
__device__ __forceinline__ void fb_issue_k(const attn_cuda_bwd_kargs &a, fb_elem *ks, long long bhk, int j0,
                                           int cols) {
  const long long r0 = bhk * a.n_kv + j0;
  fb_load<FB_BC, FB_D, FB_SQ>(ks, (const fb_elem *)a.k + r0 * FB_D, cols);
  fb_load<FB_BC, FB_DV, FB_SV>(ks + FB_BC * FB_SQ, (const fb_elem *)a.v + r0 * FB_DV, cols);
}

#if ATTN_DQ_ATOMIC
/* The fp32 dQ scratch: after delta's batch*heads*n floats rounded up to 4 (gen/spec_bwd_cuda.c's geometry sizes it),
 * [batch][heads][n][d], unscaled. */
__device__ __forceinline__ float *fb_dq_acc(const attn_cuda_bwd_kargs &a) {
  return a.delta + ((a.batch * a.heads * a.n + 3) & ~3LL);
}
#define FB_NQ ((FB_BR / 16) * (FB_DP / 8)) /* 16x8 tiles of dS K_j (Br x d) */
#define FB_QG0 ((FB_NQ + FB_W - 1) / FB_W)
#define FB_QG (FB_QG0 < 4 ? FB_QG0 : 4) /* tiles computed and added at a time: 16 registers beside dK and dV */
#define FB_UQ ((FB_QG0 + FB_QG - 1) / FB_QG * FB_QG) /* tiles per warp, a multiple of FB_QG */
/* acc (rows i0.. of the head, row stride d) += dS K_j, FB_QG of the warp's tiles at a time, by atomics */
__device__ __forceinline__ void fb_dq_add(float *acc, const fb_elem *sm, const fb_elem *ks, int rows, int warp,
                                          int lane) {
  const int g = lane >> 2, t = lane & 3;
  const int fend = warp * FB_UQ + FB_UQ < FB_NQ ? warp * FB_UQ + FB_UQ : FB_NQ;
#pragma unroll 1
  for (int f0 = warp * FB_UQ; f0 < fend; f0 += FB_QG) {
    float c[FB_QG][4];
#pragma unroll
    for (int u = 0; u < FB_QG; u++)
#pragma unroll
      for (int e = 0; e < 4; e++) c[u][e] = 0.0f;
    fb_prod<FB_SP, 1, FB_SQ, 1, FB_BC, FB_DP / 8, FB_QG>(c, sm + FB_OFF_DS, ks, f0, fend, lane);
#pragma unroll
    for (int u = 0; u < FB_QG; u++) {
      const int f = f0 + u;
      if (f < fend) {
        const int mt = f / (FB_DP / 8), nt = f % (FB_DP / 8);
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int r = mt * 16 + g + 8 * (e >> 1), col = nt * 8 + 2 * t + (e & 1);
          if (r < rows && col < FB_D) atomicAdd(acc + (long long)r * FB_D + col, c[u][e]);
        }
      }
    }
  }
}
#endif

/* dK and dV of key block item % nkb of KV head bhk = item / nkb. The inner loop's blocks t = 0, 1, ... are query
 * block ib0 + t % nq of query head t / nq of the KV head; with 2 stages block t + 1 loads into the other row set
 * while block t is computed. */
__device__ __forceinline__ void fb_dkdv(const attn_cuda_bwd_kargs &a, unsigned char *smem, int item) {
  fb_elem *sm = (fb_elem *)smem;
  float *sl = (float *)(smem + FB_ELEMS * FB_ES), *sd = sl + FB_S * FB_BR; /* per stage */
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int n = (int)a.n, n_kv = (int)a.n_kv; /* both < 2^31 (gen/spec_bwd_cuda.c) */
  const int nkb = (n_kv - 1) / FB_BC + 1, nqb = (n - 1) / FB_BR + 1;
  const long long bhk = item / nkb, heads = a.heads, heads_kv = a.heads_kv, G = heads / heads_kv;
  const int j0 = item % nkb * FB_BC, cols = n_kv - j0 < FB_BC ? n_kv - j0 : FB_BC;
  const float sl2 = a.scale * 1.4426950408889634f;
  fb_acc<FB_BC, FB_DP> dk;
  fb_acc<FB_BC, FB_DVP> dv;
  dk.zero();
  dv.zero();
  /* causal: the first row that sees key j0 is j0 - (n_kv - n) */
  const long long first = ATTN_CAUSAL ? (long long)j0 - (n_kv - n) : 0;
  const int ib0 = first <= 0 ? 0 : first >= n ? nqb : (int)(first / FB_BR), nq = nqb - ib0;
  const long long count = G * nq, bh0 = bhk / heads_kv * heads + bhk % heads_kv * G;
  fb_elem *const ks = sm + FB_OFF_KS;
  if (count > 0) {
    fb_issue_k(a, ks, bhk, j0, cols);
    const int r0 = n - ib0 * FB_BR < FB_BR ? n - ib0 * FB_BR : FB_BR;
    if (FB_S > 1) fb_issue_q(a, sm + FB_OFF_QS, sl, sd, bh0, ib0 * FB_BR, r0);
  }
  fb_commit();
#pragma unroll 1
  for (long long t = 0; t < count; t++) {
    const int st = FB_S > 1 ? (int)(t & 1) : 0;
    const long long bh = bh0 + t / nq;
    const int i0 = (ib0 + (int)(t % nq)) * FB_BR, rows = n - i0 < FB_BR ? n - i0 : FB_BR;
    fb_elem *const qs = sm + (st ? FB_OFF_X : FB_OFF_QS);
    if (FB_S == 1) {
      __syncthreads(); /* the previous block's products are done with Q, dO, P and dS */
      fb_issue_q(a, qs, sl, sd, bh, i0, rows);
      fb_commit();
    }
    fb_wait_all();
    __syncthreads(); /* block t visible to all; the previous block's products are done with P, dS and its set */
    if (FB_S > 1 && t + 1 < count) {
      const long long bh1 = bh0 + (t + 1) / nq;
      const int i1 = (ib0 + (int)((t + 1) % nq)) * FB_BR;
      fb_issue_q(a, sm + (st ? FB_OFF_QS : FB_OFF_X), sl + (st ^ 1) * FB_BR, sd + (st ^ 1) * FB_BR, bh1, i1,
                 n - i1 < FB_BR ? n - i1 : FB_BR);
      fb_commit();
    }
    fb_scores(sm, qs, ks, sl + st * FB_BR, sd + st * FB_BR, true, rows, cols, j0, i0 + n_kv - n, sl2, warp, lane);
    __syncthreads();
    /* dV += Pᵀ dO_i: A(key, query) = P[query][key]; dK += dSᵀ Q_i */
    fb_prod<1, FB_SP, FB_SV, 1, FB_BR, FB_DVP / 8>(dv.c, sm + FB_OFF_P, qs + FB_BR * FB_SQ, dv.first(warp),
                                                   dv.end(warp), lane);
    fb_prod<1, FB_SP, FB_SQ, 1, FB_BR, FB_DP / 8>(dk.c, sm + FB_OFF_DS, qs, dk.first(warp), dk.end(warp), lane);
#if ATTN_DQ_ATOMIC
    /* dQ_i += dS K_j */
    fb_dq_add(fb_dq_acc(a) + (bh * n + i0) * FB_D, sm, ks, rows, warp, lane);
#endif
  }
  fb_wait_all(); /* nothing left in flight (count = 0) */
  dk.template store<FB_D>((fb_elem *)a.dk + (bhk * n_kv + j0) * FB_D, cols, a.scale, warp, lane);
  dv.template store<FB_DV>((fb_elem *)a.dv + (bhk * n_kv + j0) * FB_DV, cols, 1.0f, warp, lane);
}

#if !ATTN_DQ_ATOMIC
/* dQ of query block item % nqb of head bh = item / nqb; with 2 stages K_{j+1}, V_{j+1} load into the other row set
 * while block j is computed. */
__device__ __forceinline__ void fb_dq(const attn_cuda_bwd_kargs &a, unsigned char *smem, int item) {
  fb_elem *sm = (fb_elem *)smem;
  float *sl = (float *)(smem + FB_ELEMS * FB_ES), *sd = sl + FB_S * FB_BR;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int n = (int)a.n, n_kv = (int)a.n_kv;
  const int nqb = (n - 1) / FB_BR + 1;
  const long long bh = item / nqb, heads = a.heads, heads_kv = a.heads_kv;
  const long long bhk = bh / heads * heads_kv + bh % heads / (heads / heads_kv);
  const int i0 = item % nqb * FB_BR, rows = n - i0 < FB_BR ? n - i0 : FB_BR;
  const float sl2 = a.scale * 1.4426950408889634f;
  fb_elem *const qs = sm + FB_OFF_QS;
  fb_acc<FB_BR, FB_DP> dq;
  dq.zero();
  /* keys visible to some row of the block: [0, L) */
  int L = n_kv;
  if (ATTN_CAUSAL) {
    const long long e = (long long)i0 + rows + n_kv - n;
    L = e < 0 ? 0 : e < n_kv ? (int)e : n_kv;
  }
  const int nb = L > 0 ? (L - 1) / FB_BC + 1 : 0;
  if (nb > 0) {
    fb_issue_q(a, qs, sl, sd, bh, i0, rows);
    if (FB_S > 1) fb_issue_k(a, sm + FB_OFF_KS, bhk, 0, n_kv < FB_BC ? n_kv : FB_BC);
  }
  fb_commit();
#pragma unroll 1
  for (int jb = 0; jb < nb; jb++) {
    const int st = FB_S > 1 ? jb & 1 : 0, j0 = jb * FB_BC, cols = n_kv - j0 < FB_BC ? n_kv - j0 : FB_BC;
    fb_elem *const ks = sm + (st ? FB_OFF_X : FB_OFF_KS);
    if (FB_S == 1) {
      __syncthreads(); /* the previous block's product is done with K and dS */
      fb_issue_k(a, ks, bhk, j0, cols);
      fb_commit();
    }
    fb_wait_all();
    __syncthreads(); /* block j visible to all; the previous block's product is done with dS and its set */
    if (FB_S > 1 && jb + 1 < nb) {
      const int j1 = j0 + FB_BC;
      fb_issue_k(a, sm + (st ? FB_OFF_KS : FB_OFF_X), bhk, j1, n_kv - j1 < FB_BC ? n_kv - j1 : FB_BC);
      fb_commit();
    }
    fb_scores(sm, qs, ks, sl, sd, false, rows, cols, j0, i0 + n_kv - n, sl2, warp, lane);
    __syncthreads();
    /* dQ += dS K_j */
    fb_prod<FB_SP, 1, FB_SQ, 1, FB_BC, FB_DP / 8>(dq.c, sm + FB_OFF_DS, ks, dq.first(warp), dq.end(warp), lane);
  }
  fb_wait_all();
  dq.template store<FB_D>((fb_elem *)a.dq + (bh * n + i0) * FB_D, rows, a.scale, warp, lane);
}
#endif

extern "C" __global__ void __launch_bounds__(FB_T) attn_bwd_pre(attn_cuda_bwd_kargs a) {
  const long long row = (long long)blockIdx.x * FB_W + (threadIdx.x >> 5), rows = a.batch * a.heads * a.n;
  const int lane = threadIdx.x & 31;
  if (row < rows) {
    const fb_elem *o = (const fb_elem *)a.o + row * FB_DV, *g = (const fb_elem *)a.dout + row * FB_DV;
    float s = 0.0f;
    for (int c = lane; c < FB_DV; c += 32) s = fmaf(fb_in(o[c]), fb_in(g[c]), s);
#pragma unroll
    for (int x = 16; x > 0; x >>= 1) s += __shfl_xor_sync(0xffffffffu, s, x);
    if (lane == 0) a.delta[row] = s;
#if ATTN_DQ_ATOMIC
    float *acc = fb_dq_acc(a) + row * FB_D;
    for (int c = lane; c < FB_D; c += 32) acc[c] = 0.0f;
#endif
  }
}

#if ATTN_DQ_ATOMIC
/* dq = scale times the fp32 scratch, rounded, an element a thread; after attn_kernel */
extern "C" __global__ void __launch_bounds__(FB_T) attn_bwd_post(attn_cuda_bwd_kargs a) {
  const long long i = (long long)blockIdx.x * FB_T + threadIdx.x, count = a.batch * a.heads * a.n * FB_D;
  if (i < count) ((fb_elem *)a.dq)[i] = fb_out(fb_dq_acc(a)[i] * a.scale);
}
#endif

extern "C" __global__ void __launch_bounds__(FB_T, 1) attn_kernel(attn_cuda_bwd_kargs a) {
  extern __shared__ __align__(16) unsigned char attn_smem[];
  const int item = blockIdx.x;
  if (item < a.items_kv) fb_dkdv(a, attn_smem, item);
#if !ATTN_DQ_ATOMIC
  else if (item < a.items_kv + a.items_q) fb_dq(a, attn_smem, item - a.items_kv);
#endif
}
