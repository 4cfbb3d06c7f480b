/* flash.cu: FlashAttention-2 forward pass for NVIDIA GPUs (sm_80, sm_90: mma.sync, ldmatrix, cp.async), specialised
 * at compile time on ATTN_D, ATTN_BR, ATTN_BC, ATTN_CAUSAL, ATTN_WARPS, ATTN_STAGES and ATTN_DTYPE.
 *
 * Loop order as in flash.c: a thread block owns one query block Q_i (Br rows of one batch*head), loads it once, then
 * walks the key blocks K_j, V_j (Bc rows each) with an online softmax in base 2 (scores scaled by scale*log2(e),
 * running max m and sum l per row), accumulates O_i in fp32 registers and writes O_i / l once.
 * Grid (gen/launch.c): blockIdx.x = bh * ceil(n/Br) + q, so consecutive blocks are query blocks of one head and
 * share its K/V in L2; causal runs query block ceil(n/Br)-1-q, the heaviest blocks of each head first.
 *
 * f16 / bf16 (tensor cores): warp w owns the Br/W rows [w*Br/W, (w+1)*Br/W) of the block, in 16-row mma tiles.
 * S = Q K_j^T by mma.sync.m16n8k16 (Q and K fragments by ldmatrix; Q's fragments stay in registers for the whole
 * key loop when they fit, else they are read again from shared memory), mask, online softmax in registers (row
 * max over the 4 lanes of a quad by shuffles), P rounded from the accumulator layout straight into A fragments,
 * O += P V_j (V by ldmatrix.trans). The epilogue stages O in the warp's rows of the Q buffer for 16-byte stores.
 * f32 (CUDA cores, exact fp32): lane (ry, cx) of warp w owns the rows w*Br/W + ry + RL*i of the block and the key
 * columns / 16-byte chunks of d numbered cx + CL*j; P goes through shared memory in rows private to the warp.
 *
 * Shared memory (exactly ATTN_FLASH_SMEM): Q_i, ATTN_STAGES x (K_j, V_j), then P (f32 only). Rows are arrays of
 * 16-byte chunks; chunk c of row r sits at c ^ phase(r), which keeps ldmatrix, the 16-byte loads and stores and the
 * cp.async copies free of bank conflicts without padding. Copies are cp.async of 16 bytes; rows past n or n_kv are
 * zero-filled, never read. Stages >= 2: blocks j+1 .. j+stages-1 are in flight while block j is computed (one
 * __syncthreads per key block). Stages = 1: one K and one V buffer; V_j loads while S = Q K_j^T is computed and
 * K_{j+1} while the softmax and P V_j are (two __syncthreads per key block).
 *
 * Masking: key j is visible to query i iff j < n_kv and, causal, j <= i + n_kv - n (bottom-right aligned). Causal:
 * L = min(n_kv, max(0, i0 + rows + n_kv - n)) keys are visible to some row of the block and only key blocks with
 * j0 < L are loaded; the blocks crossing the diagonal (or the end of the keys) are masked elementwise; a row with no
 * visible key outputs zeros. Every warp computes every loaded block: a warp-level skip of the few blocks that are
 * all hidden from a warp's rows costs the registers of a second path through the loop (and spills).
 *
 * Score modifiers (attn.h; compiled in by ATTN_WINDOW, ATTN_SOFTCAP, ATTN_ALIBI, their values from the kernel
 * arguments): the raw score x = q.k becomes, in base 2, co*tanh(ci*x) with ci = scale/c and co = c*log2(e)
 * (softcap c), else x*scale*log2(e); ALiBi subtracts slope_h*log2(e)*|i' - j|; then the mask. A window w bounds the
 * keys of row i' = i + n_kv - n to (i' - w, i'] (causal) or (i' - w, i' + w) (not causal): the block loads only the
 * key blocks from the one holding its first row's lowest key through the one holding its last row's highest (the
 * grid is unchanged; a block outside every window loads none), and masks elementwise the blocks that cut some row's
 * window. tanh: tanh.approx.f32 on the tensor cores (2^-10.987 relative, as FlashAttention's soft-capping: below
 * the half-precision P it feeds), and to a few fp32 ulp in the f32 kernel (fa_tanh).
 *
 * Non-finite inputs give what the fp64 reference (runtime/reference.c) and flash.c give: a NaN or +inf score, or a
 * row whose visible scores are all -inf, makes the row NaN (the running max drops NaN and only sets the shift; ex2
 * keeps NaN in P, l and O; O is divided by l even when l = 0); a NaN or inf in V reaches the rows that see its key.
 * The one place where the tiling differs from the reference: P V weights a key hidden from a row by P = 0 when its
 * block is loaded for rows that see it, and 0 * NaN is NaN. A causal or windowed warp whose accumulators hold NaN
 * or inf checks for that after writing its rows and computes the outputs so spoiled again (fa_fix); finite inputs
 * pay one sum and one vote per warp. Soft-capping maps an infinite score to +-c (as the reference does).
 *
 * Any d and d_v in 1..576 (V and O rows have d_v = ATTN_DV entries): shared-memory rows are padded to multiples
 * of 16 columns (ATTN_FLASH_DP, ATTN_FLASH_DVP), the padded columns zero-filled once and never loaded from or
 * stored to global memory. Rows of a whole number of 16-byte chunks (d, d_v multiples of 16 / esize) move by
 * cp.async of 16 bytes; other rows by element (plain loads and shared stores, coalesced over the block's
 * contiguous rows). Multiples of 16 compile to exactly the unpadded kernel. On the tensor cores a d_v past 256 is
 * split over ATTN_FLASH_VS warps that share query rows: each computes S and the softmax of the rows and owns d_v/VS
 * columns of O (fp32 accumulators of 16 x 256 per tile at most).
 *
 * I/O accounting (ATTN_COUNT_IO), entries per thread block, rows = min(Br, n - i0):
 *   reads  = rows*d (Q_i, once)
 *          + sum over j0 = J, J + Bc, ... while j0 < L of (d + d_v)*min(Bc, n_kv - j0) (K_j and V_j: whole blocks,
 *            also where the bounds cut one), with e = i0 + n_kv - n, L = min(n_kv, e + rows) causal,
 *            min(n_kv, e + rows - 1 + w) windowed, else n_kv, and J = 0, or floor(max(0, e - w + 1)/Bc)*Bc windowed;
 *            in closed form (d + d_v)*(min(ceil(L/Bc)*Bc, n_kv) - J) when L > J, else 0
 *   writes = rows*d_v (O_i).
 * Split-KV (ATTN_SPLIT = S) shares those key blocks out among the block's S parts: Q_i is read by each part that has
 * a key block (min(S, key blocks) parts: one without reads nothing), each part writes its partial, rows*(d_v + 2)
 * entries (O, m, l) in place of O_i, and attn_combine reads the S partials and writes O_i: S*rows*(d_v + 2) read
 * and rows*d_v written (tuner/io_theory.c's flash_block). */

#define FA_D ATTN_D
#define FA_DV ATTN_DV
#define FA_BR ATTN_BR
#define FA_BC ATTN_BC
#define FA_W ATTN_WARPS
#define FA_S ATTN_STAGES
#define FA_T (32 * FA_W)
#define FA_ES (ATTN_DTYPE == 0 ? 4 : 2)   /* bytes per input element */
#define FA_VE (16 / FA_ES)                /* elements per 16-byte chunk */
#define FA_VS ATTN_FLASH_VS(FA_ES, FA_DV)   /* warps sharing query rows, each with d_v/VS columns of O */
#define FA_DP ATTN_FLASH_DP(FA_D)         /* d padded in shared memory */
#define FA_DVP ATTN_FLASH_DVP(FA_ES, FA_DV) /* d_v padded in shared memory */
#define FA_DVW (FA_DVP / FA_VS)                    /* columns of O per warp */
#define FA_RW (FA_BR * FA_VS / FA_W)      /* query rows per warp */
#define FA_NC (FA_DP / FA_VE)             /* chunks per shared row of Q, K */
#define FA_NCV (FA_DVP / FA_VE)           /* chunks per shared row of V, O */
#define FA_NCQ (ATTN_DTYPE != 0 && FA_NCV > FA_NC ? FA_NCV : FA_NC) /* tensor cores: the Q buffer also stages O */
#define FA_AD (FA_D % FA_VE == 0)         /* Q, K rows are whole 16-byte chunks */
#define FA_ADV (FA_DV % FA_VE == 0)       /* V, O rows are whole 16-byte chunks */
#define FA_PAD (FA_DP != FA_D || FA_DVP != FA_DV)
/* score modifiers compiled in (gen/spec.c defines them for the specs that have them) */
#ifndef ATTN_WINDOW
#define ATTN_WINDOW 0
#endif
#ifndef ATTN_SOFTCAP
#define ATTN_SOFTCAP 0
#endif
#ifndef ATTN_ALIBI
#define ATTN_ALIBI 0
#endif
#define FA_WIN (ATTN_WINDOW != 0)
#define FA_MASK (ATTN_CAUSAL || FA_WIN) /* keys hidden by their position */
/* serving layouts (gen/spec.c defines ATTN_LAYOUT for the specs made for them): 0 dense, 1 varlen, 2 paged, 3 paged
 * decode with grouped-query packing (FA_PACK: the rows of a block are the query heads of one KV head at the one query
 * position, so each page is read once per KV head) */
#ifndef ATTN_LAYOUT
#define ATTN_LAYOUT 0
#endif
#define FA_PAGED (ATTN_LAYOUT >= 2)
#define FA_PACK (ATTN_LAYOUT == 3)
/* A dense windowed kernel without causal may be launched GQA-packed for decode (runtime/cuda.c, attn_cuda_gqa_packs:
 * n = 1, a KV head's G query heads as the rows of its blocks; causal decode runs this kernel too): its rows are then
 * all the one query at i' = n_kv - 1, not rows at consecutive positions, and the launch says so by a negative window,
 * -w (pk in attn_kernel and fa_fix). */
#define FA_WPACK (FA_WIN && !ATTN_CAUSAL && ATTN_LAYOUT == 0)
/* O's row stride in entries: varlen's rows are heads·d_v apart (fa_state's os) */
#if ATTN_LAYOUT == 1
#define FA_OS st.os
#else
#define FA_OS FA_DV
#endif
/* split-KV (gen/spec.c defines ATTN_SPLIT > 1 for the specs that have it; dense, unmasked kernels only): the grid is
 * the work items times S, block b taking item b % items and part b / items of its key blocks; each part writes its
 * unnormalised fp32 O, m and l to the scratch, and attn_combine merges the parts */
#ifndef ATTN_SPLIT
#define ATTN_SPLIT 1
#endif
#define FA_SPLIT (ATTN_SPLIT > 1)
#if FA_SPLIT && (FA_MASK || ATTN_LAYOUT)
#error "split-KV is for dense kernels without causal mask or window"
#endif
#if FA_SPLIT
#define FA_BID (blockIdx.x % (unsigned)a.grid_items)
#define FA_BLOCKS ((long long)a.grid_items * ATTN_SPLIT)
#else
#define FA_BID blockIdx.x
#define FA_BLOCKS a.grid_items
#endif

static_assert(FA_BC % 16 == 0 && FA_S >= 1, "Bc must be a multiple of 16");
static_assert(FA_W % FA_VS == 0 && FA_DVW % 16 == 0, "d_v's split must give each warp whole 16-column tiles");
static_assert(ATTN_DTYPE == 0 ? FA_BR % (4 * FA_W) == 0 : FA_BR % (16 * FA_W / FA_VS) == 0,
              "Br must give each warp whole 16-row tiles (f32: whole steps of 32/CL rows)");

#define FA_QBYTES (FA_BR * FA_NCQ * 16)
#define FA_KBYTES (FA_BC * FA_DP * FA_ES)
#define FA_VBYTES (FA_BC * FA_DVP * FA_ES)
#define FA_OFF_K(s) (FA_QBYTES + (s) * (FA_KBYTES + FA_VBYTES))
#define FA_OFF_V(s) (FA_OFF_K(s) + FA_KBYTES)
#define FA_OFF_P FA_OFF_K(FA_S)
#define FA_SMEM_BYTES (FA_OFF_P + (ATTN_DTYPE == 0 ? FA_BR * FA_BC * 4 : 0))
static_assert(FA_SMEM_BYTES == ATTN_FLASH_SMEM_DV(FA_ES, FA_D, FA_DV, FA_BR, FA_BC, FA_S),
              "layout differs from ATTN_FLASH_SMEM_DV");

#if ATTN_DTYPE == 0
typedef float fa_elem;
#else
typedef unsigned short fa_elem;
#endif

/* Inline PTX lives only in these wrappers, so the instructions the template emits are read in one place. */
/* ---- PTX wrappers ---- */
__device__ __forceinline__ unsigned fa_saddr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
/* 16 bytes global -> shared, asynchronously; bytes = 0 zero-fills without reading src */
__device__ __forceinline__ void fa_cp16(unsigned dst, const void *src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
/* one element to / from shared memory by its shared-window address (rows that are not whole 16-byte chunks) */
__device__ __forceinline__ void fa_st_elem(unsigned dst, float x) {
  asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(dst), "f"(x) : "memory");
}
__device__ __forceinline__ void fa_st_elem(unsigned dst, unsigned short x) {
  asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(dst), "h"(x) : "memory");
}
__device__ __forceinline__ void fa_ld_elem(unsigned src, unsigned short &x) {
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(x) : "r"(src) : "memory");
}
__device__ __forceinline__ void fa_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/* wait until at most N of this thread's committed groups are pending */
template <int N> __device__ __forceinline__ void fa_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ float fa_ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
#if ATTN_DTYPE != 0
__device__ __forceinline__ float fa_tanh(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
#endif
#if ATTN_DTYPE != 0
__device__ __forceinline__ void fa_ldsm4(unsigned addr, unsigned &r0, unsigned &r1, unsigned &r2, unsigned &r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void fa_ldsm4t(unsigned addr, unsigned &r0, unsigned &r1, unsigned &r2, unsigned &r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
/* c += a b for one 16x8x16 tile, fp32 accumulators */
__device__ __forceinline__ void fa_mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
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
#if ATTN_DTYPE == 1
__device__ __forceinline__ float fa_h2f(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(h));
  return f;
}
#endif
/* two floats rounded to nearest into one register: lo in bits 0..15 (the lower column), hi in 16..31 */
__device__ __forceinline__ unsigned fa_pack(float lo, float hi) {
  unsigned r;
#if ATTN_DTYPE == 1
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#else
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#endif
  return r;
}
#endif
/* ---- end of PTX wrappers ---- */

#define FA_NEG_INF (-__int_as_float(0x7f800000))
#define FA_STR(x) #x
#define FA_PRAGMA(x) _Pragma(FA_STR(x))

#if ATTN_DTYPE == 0
/* tanh to 3 fp32 ulp (tanhf is tanh.approx.f32 under --use_fast_math, 2^-11 relative, too coarse for the exact
 * fp32 kernel): 1 - 2/(e^(2|x|) + 1) from |x| = 0.6 (the result is above 0.53: no cancellation), an odd polynomial
 * fitted to the relative error below it; NaN stays NaN (both branches give NaN), +-inf gives +-1 */
__device__ __forceinline__ float fa_tanh(float x) {
  const float a = fabsf(x), x2 = x * x;
  const float big = a >= 9.0f ? 1.0f : 1.0f - 2.0f / (fa_ex2(a * 2.8853900817779268f) + 1.0f);
  const float p = fmaf(fmaf(fmaf(0x1.ff9b3cp-7f, x2, -0x1.abb89cp-5f), x2, 0x1.10a71ap-3f), x2, -0x1.555368p-2f);
  return a < 0.6f ? fmaf(p * x2, x, x) : copysignf(big, x);
}
#endif

/* What the score modifiers need, per block (soft-capping, ALiBi's slope) and per key block of a warp (ALiBi's
 * distance, the window's lower bound); the fields of modifiers not compiled in are never read. */
struct fa_mods {
  float ci, co; /* softcap c: a raw score x becomes co * tanh(ci * x), ci = scale / c, co = c * log2(e) */
  float al;     /* ALiBi: slope_h * log2(e) */
  int ib;       /* ALiBi: i' - j for the warp's first row and the key block's first key, clamped to +-2^30 (an
                 * int: a float costs the tensor-core kernels a register they do not have) */
  int lw;       /* window: key c of the key block is hidden from warp row rr when c < lw + rr (clamped to
                 * [-RW, Bc]) */
#if FA_WPACK
  int ls;       /* window: 1, or 0 in a GQA-packed decode launch (c < lw for every row: they share one position) */
#endif
#if FA_PACK
  const float *alp; /* ALiBi: the slopes of the warp's rows (query heads), the first alr + 1 of them valid */
  int alr;
#endif
};
/* A raw score x of a row at distance |i' - j| = dist from its key, scaled to base 2 and modified (before the mask) */
__device__ __forceinline__ float fa_mod(float x, float sl2, const fa_mods &md, float dist) {
#if ATTN_SOFTCAP
  float v = md.co * fa_tanh(x * md.ci);
#else
  float v = x * sl2;
#endif
#if ATTN_ALIBI
  v = fmaf(-md.al, dist, v);
#endif
  (void)md, (void)sl2, (void)dist;
  return v;
}
/* ... for warp row rr and key c of the key block */
#if FA_PACK
/* packed decode: every row is at the same position i', and row rr is its own query head with its own slope */
__device__ __forceinline__ float fa_score(float x, float sl2, const fa_mods &md, int rr, int c) {
  fa_mods m = md;
  if (ATTN_ALIBI) m.al = md.alp[rr < md.alr ? rr : md.alr] * 1.4426950408889634f;
  return fa_mod(x, sl2, m, ATTN_ALIBI ? (float)abs(md.ib - c) : 0.0f);
}
#else
__device__ __forceinline__ float fa_score(float x, float sl2, const fa_mods &md, int rr, int c) {
  return fa_mod(x, sl2, md, ATTN_ALIBI ? (float)abs(md.ib + rr - c) : 0.0f);
}
#endif

/* Swizzle of a tile whose rows are NC 16-byte chunks (NC even): chunk c of row r is stored at c ^ phase(r), with
 * phase(r) < G = gcd(NC, 8) taken from the row bits that advance the bank group. Any 8 consecutive rows then put
 * one logical chunk in 8 different bank groups (ldmatrix, column-wise 16-byte loads), and the XOR only permutes
 * aligned groups of G chunks, so 8 consecutive chunks in row-major order still cover all 32 banks. */
template <int NC> struct fa_sw {
  static_assert(NC % 2 == 0, "rows must be whole pairs of 16-byte chunks");
  static constexpr int G = NC % 8 == 0 ? 8 : NC % 4 == 0 ? 4 : 2;
  static constexpr int SH = G == 8 ? 0 : G == 4 ? 1 : 2;
  static __device__ __forceinline__ unsigned phase(unsigned r) { return (r >> SH) & (G - 1); }
  static __device__ __forceinline__ unsigned off(unsigned r, unsigned c) { return (r * NC + (c ^ phase(r))) * 16; }
};
typedef fa_sw<FA_NC> fa_swt;  /* Q, K tiles */
typedef fa_sw<FA_NCV> fa_swv; /* V tiles, and O staged in the Q buffer */

/* Element c of row r of a tile of NC-chunk rows: its shared byte offset. */
template <int NC> __device__ __forceinline__ unsigned fa_elem_off(unsigned r, unsigned c) {
  return fa_sw<NC>::off(r, c / FA_VE) + (c % FA_VE) * FA_ES;
}

#if ATTN_LAYOUT
/* Rows of W entries of one sequence in a serving layout (K and V; varlen's Q and O in fa_fix): row j at row(j),
 * s entries after row j - 1 (varlen), or in slot j % ps of the block table's page j / ps (paged: s entries a slot).
 * e is an offset in entries as the dense kernel computes it (row * W + column), so that the dense code's
 * `k + (long long)j0 * FA_D`, `v[(long long)j * FA_DV + c]` and fa_load_block's calls read the layout unchanged. */
#if FA_PAGED
/* The block's sequence's row of the block table, the page size and heads_kv (a slot's rows), in shared memory (written by thread 0 before the
 * first barrier): held in registers across the key loop they cost the kernels at the register limit spills. */
__shared__ const int *fa_tab;
__shared__ int fa_ps, fa_hkv;
#endif
#if FA_PAGED
/* the slot of row j of the sequence, whose page is `page` of the cache */
__device__ __forceinline__ unsigned fa_slot(int page, int j, unsigned ps) {
  return (unsigned)page * ps + (unsigned)j % ps;
}
#endif
template <int W> struct fa_rows {
  fa_elem *p; /* row 0 (paged: page 0's slot 0) of the block's KV head */
  int s;      /* varlen: heads·W or heads_kv·W (< 2^31: the problem's limits); paged: fa_hkv·W */
  long long e;
#if FA_PAGED
  /* row j in its page, page the cache's index of the sequence's page j / ps */
  __device__ __forceinline__ fa_elem *row_in(int page, int j) const {
    return p + (long long)fa_slot(page, j, (unsigned)fa_ps) * (fa_hkv * W);
  }
#endif
  __device__ __forceinline__ fa_elem *row(int j) const {
#if FA_PAGED
    return row_in(fa_tab[(unsigned)j / (unsigned)fa_ps], j);
#else
    return p + (long long)j * s;
#endif
  }
  __device__ __forceinline__ fa_rows operator+(long long x) const {
    fa_rows r = *this;
    r.e += x;
    return r;
  }
  __device__ __forceinline__ operator fa_elem *() const { return row((int)(e / W)) + e % W; }
  __device__ __forceinline__ fa_elem &operator[](long long x) const { return row((int)((e + x) / W))[(e + x) % W]; }
};
#endif

/* Rows [0, cols) of a Bc x W block at src (row stride W: d for K, d_v for V) into the tile at dst (NC chunks a row),
 * by all threads; rows [cols, Bc) are zero-filled (src-size 0, with an in-bounds address: the block's first row).
 * Consecutive threads take consecutive chunks: coalesced reads, conflict-free stores. A full block (all but the
 * last) needs no predicates, and when the threads cover whole rows 8 at a time every copy is the thread's first one
 * plus constant offsets. Padded rows (W < 16 NC / esize) copy their whole chunks flat over the block's contiguous
 * rows (padding stays zero from fa_zero_pads); rows that are not whole chunks go by element. */
template <int NC, int W> __device__ __forceinline__ void fa_load_block(unsigned dst, const fa_elem *src, int cols,
                                                                       unsigned tid) {
  typedef fa_sw<NC> sw;
  if constexpr (W == NC * FA_VE) {
    constexpr unsigned N = FA_BC * NC, IT = (N + FA_T - 1) / FA_T;
    constexpr bool REG = FA_T % NC == 0 && (FA_T / NC) % 8 == 0 && N % FA_T == 0;
    const unsigned r0 = tid / NC, c0 = tid % NC;
    const unsigned d0 = dst + sw::off(r0, c0);
    const fa_elem *s0 = src + r0 * W + c0 * FA_VE;
    if (REG && cols == FA_BC) {
#pragma unroll
      for (unsigned it = 0; it < IT; it++) fa_cp16(d0 + it * FA_T * 16, s0 + it * (FA_T / NC) * W, 16);
    } else {
#pragma unroll 1
      for (unsigned it = 0; it < IT; it++) {
        const unsigned idx = tid + it * FA_T;
        if (N % FA_T == 0 || idx < N) {
          const unsigned r = idx / NC, c = idx % NC;
          const bool ok = (int)r < cols;
          fa_cp16(dst + sw::off(r, c), src + (ok ? r * W + c * FA_VE : 0u), ok ? 16 : 0);
        }
      }
    }
  } else if constexpr (W % FA_VE == 0) {
    constexpr unsigned NR = W / FA_VE, N = FA_BC * NR; /* real chunks a row, in the block */
#pragma unroll 1
    for (unsigned idx = tid; idx < N; idx += FA_T) {
      const unsigned r = idx / NR, c = idx % NR;
      const bool ok = (int)r < cols;
      fa_cp16(dst + sw::off(r, c), src + (ok ? idx * FA_VE : 0u), ok ? 16 : 0);
    }
  } else {
    const unsigned n = (unsigned)cols * W;
#pragma unroll 1
    for (unsigned idx = tid; idx < FA_BC * W; idx += FA_T) {
      const unsigned r = idx / W, c = idx % W;
      fa_st_elem(dst + fa_elem_off<NC>(r, c), idx < n ? src[idx] : (fa_elem)0);
    }
  }
}

#if ATTN_LAYOUT
/* fa_load_block on a serving layout's rows (src.e / W the block's first): each 16-byte chunk (or element) from its
 * row's own address; rows [cols, Bc) zero-filled from the block's first row's address */
template <int NC, int W> __device__ __forceinline__ void fa_load_block(unsigned dst, const fa_rows<W> &src, int cols,
                                                                       unsigned tid) {
  typedef fa_sw<NC> sw;
  const int j0 = (int)(src.e / W);
  if constexpr (W % FA_VE == 0) {
    constexpr unsigned NR = W / FA_VE, N = FA_BC * NR, IT = (N + FA_T - 1) / FA_T;
#if FA_PAGED
    /* The block's pages (at most Bc/ps + 1 of them) from the block table in one read a warp, lane l holding the
     * cache's index of page j0/ps + l, passed to the copies by shuffle: a table read per copy instruction would add
     * a sector to every 16 (d = 64, 16-bit) of K and V. Pages of fewer than Bc/31 keys take the table per copy. */
    const unsigned ps = (unsigned)fa_ps, pg0 = (unsigned)j0 / ps, lane = tid & 31u;
    const unsigned npg = (unsigned)(j0 + (cols > 0 ? cols : 1) - 1) / ps - pg0 + 1;
    if (npg <= 32) {
      const int mine = lane < npg ? fa_tab[pg0 + lane] : 0;
#pragma unroll 1
      for (unsigned it = 0; it < IT; it++) {
        const unsigned idx = tid + it * FA_T, r = idx / NR, c = idx % NR;
        const bool ok = (int)r < cols;
        const int j = j0 + (ok ? (int)r : 0);
        const int page = __shfl_sync(0xffffffffu, mine, (unsigned)j / ps - pg0); /* every lane: before the test */
        if (N % FA_T == 0 || idx < N) fa_cp16(dst + sw::off(r, c), src.row_in(page, j) + c * FA_VE, ok ? 16 : 0);
      }
      return;
    }
#endif
    /* rolled: an unrolled loop keeps every copy's row address live at once (spills on sm_90) */
#pragma unroll 1
    for (unsigned it = 0; it < IT; it++) {
      const unsigned idx = tid + it * FA_T;
      if (N % FA_T == 0 || idx < N) {
        const unsigned r = idx / NR, c = idx % NR;
        const bool ok = (int)r < cols;
        fa_cp16(dst + sw::off(r, c), src.row(j0 + (ok ? (int)r : 0)) + c * FA_VE, ok ? 16 : 0);
      }
    }
  } else {
#pragma unroll 1
    for (unsigned idx = tid; idx < FA_BC * W; idx += FA_T) {
      const unsigned r = idx / W, c = idx % W;
      fa_st_elem(dst + fa_elem_off<NC>(r, c), (int)r < cols ? src.row(j0 + (int)r)[c] : (fa_elem)0);
    }
  }
}
#endif

/* The padded columns of the Q buffer and of every K and V buffer, zeroed once (never loaded again); the caller
 * synchronizes the block after it. */
__device__ __forceinline__ void fa_zero_pads(unsigned sbase, unsigned tid) {
  (void)sbase, (void)tid;
#if FA_DP != FA_D
  {
    constexpr unsigned PW = FA_DP - FA_D;
#pragma unroll 1
    for (unsigned idx = tid; idx < FA_BR * PW; idx += FA_T)
      fa_st_elem(sbase + fa_elem_off<FA_NC>(idx / PW, FA_D + idx % PW), (fa_elem)0);
#pragma unroll 1
    for (unsigned idx = tid; idx < FA_S * FA_BC * PW; idx += FA_T) {
      const unsigned st = idx / (FA_BC * PW), e = idx % (FA_BC * PW);
      fa_st_elem(sbase + FA_OFF_K(st) + fa_elem_off<FA_NC>(e / PW, FA_D + e % PW), (fa_elem)0);
    }
  }
#endif
#if FA_DVP != FA_DV
  {
    constexpr unsigned PW = FA_DVP - FA_DV;
#pragma unroll 1
    for (unsigned idx = tid; idx < FA_S * FA_BC * PW; idx += FA_T) {
      const unsigned st = idx / (FA_BC * PW), e = idx % (FA_BC * PW);
      fa_st_elem(sbase + FA_OFF_V(st) + fa_elem_off<FA_NCV>(e / PW, FA_DV + e % PW), (fa_elem)0);
    }
  }
#endif
}

/* The Br/W rows of Q_i of the warp's row group (rows past `rows` zero-filled), loaded by the VS warps of the group
 * (ql: the thread's index among them): only they read them, and only they stage their O there at the end. */
__device__ __forceinline__ void fa_load_q(unsigned sq, const fa_elem *q, int rows, unsigned wr0, unsigned ql) {
  constexpr unsigned QT = 32 * FA_VS;
#if FA_D == FA_NC * FA_VE
  {
    constexpr unsigned N = FA_RW * FA_NC, IT = (N + QT - 1) / QT;
#pragma unroll
    for (unsigned it = 0; it < IT; it++) {
      const unsigned idx = ql + it * QT;
      if (N % QT == 0 || idx < N) {
        const unsigned r = wr0 + idx / FA_NC, c = idx % FA_NC;
        const bool ok = (int)r < rows;
        fa_cp16(sq + fa_swt::off(r, c), q + (ok ? r * FA_D + c * FA_VE : 0u), ok ? 16 : 0);
      }
    }
  }
#elif FA_AD
  {
    constexpr unsigned NR = FA_D / FA_VE, N = FA_RW * NR;
#pragma unroll 1
    for (unsigned idx = ql; idx < N; idx += QT) {
      const unsigned r = wr0 + idx / NR, c = idx % NR;
      const bool ok = (int)r < rows;
      fa_cp16(sq + fa_swt::off(r, c), q + (ok ? r * FA_D + c * FA_VE : 0u), ok ? 16 : 0);
    }
  }
#else
  {
    const fa_elem *qw = q + wr0 * FA_D;
    const int n = ((int)rows - (int)wr0) * FA_D; /* elements of the group's rows that exist */
#pragma unroll 1
    for (unsigned idx = ql; idx < FA_RW * FA_D; idx += QT)
      fa_st_elem(sq + fa_elem_off<FA_NC>(wr0 + idx / FA_D, idx % FA_D), (int)idx < n ? qw[idx] : (fa_elem)0);
  }
#endif
}

#if ATTN_LAYOUT == 1
/* fa_load_q for varlen's Q, whose rows are qs entries apart */
__device__ __forceinline__ void fa_load_q_rows(unsigned sq, const fa_elem *q, long long qs, int rows, unsigned wr0,
                                               unsigned ql) {
  constexpr unsigned QT = 32 * FA_VS;
#if FA_AD
  constexpr unsigned NR = FA_D / FA_VE, N = FA_RW * NR;
#pragma unroll 1
  for (unsigned idx = ql; idx < N; idx += QT) {
    const unsigned r = wr0 + idx / NR, c = idx % NR;
    const bool ok = (int)r < rows;
    fa_cp16(sq + fa_swt::off(r, c), q + (ok ? r * qs + c * FA_VE : 0), ok ? 16 : 0);
  }
#else
#pragma unroll 1
  for (unsigned idx = ql; idx < FA_RW * FA_D; idx += QT) {
    const unsigned r = wr0 + idx / FA_D, c = idx % FA_D;
    fa_st_elem(sq + fa_elem_off<FA_NC>(r, c), (int)r < rows ? q[r * qs + c] : (fa_elem)0);
  }
#endif
}
#endif

/* Keys [low, lim) of a key block (relative to its first key j0) are visible to row rr of the warp: lim = min(cols,
 * lb + rr) with lb = (last key the warp's first row sees) + 1 - j0, clamped to [-RW, Bc]; lim <= 0 hides them all;
 * low = lw + rr (fa_mods) in a windowed kernel, else 0. */
#if FA_PACK
/* packed decode: the rows' keys do not move with the row */
__device__ __forceinline__ int fa_limit(int cols, int lb, int) { return FA_MASK ? min(cols, lb) : cols; }
__device__ __forceinline__ int fa_low(const fa_mods &md, int) { return FA_WIN ? md.lw : 0; }
#else
__device__ __forceinline__ int fa_limit(int cols, int lb, int rr) { return FA_MASK ? min(cols, lb + rr) : cols; }
#if FA_WPACK
/* a GQA-packed decode launch's rows share one position: each row's low bound is the first row's (md.ls = 0) */
__device__ __forceinline__ int fa_low(const fa_mods &md, int r) {
  const int rr = r * md.ls;
  return FA_WIN ? md.lw + rr : 0;
}
#else
__device__ __forceinline__ int fa_low(const fa_mods &md, int rr) { return FA_WIN ? md.lw + rr : 0; }
#endif
#endif

/* Tile row r sees a key iff r + ev >= 0: ev = i' of the block's first row (causal), that + w - 1 (a window, not
 * causal), clamped to [-Br - 1, 0]; a row that sees none outputs zeros (0 * O, and fa_fix where O is NaN from a
 * hidden key's V row). */
#if ATTN_LAYOUT
/* ... and in a serving layout also where a sequence has no key (ev = -Br - 1) */
__device__ __forceinline__ bool fa_sees(int r, int ev) { return (FA_PACK ? 0 : r) + ev >= 0; }
#else
__device__ __forceinline__ bool fa_sees(int r, int ev) { return !FA_MASK || r + ev >= 0; }
#endif
/* attn_execute_lse's lse of a row (natural log) from its running max m (base-2 scores) and sum l: -inf for a row
 * that sees no key, and where every visible score is -inf (l = 0) */
__device__ __forceinline__ float fa_lse(float m, float l, bool sees) {
  return sees ? ((m == FA_NEG_INF ? 0.0f : m) + log2f(l)) * 0.6931471805599453f : FA_NEG_INF;
}
__device__ __forceinline__ bool fa_nonfinite(float x) { return (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u; }

#if ATTN_DTYPE != 0
/* ======================= f16 / bf16: tensor cores ======================= */
#define FA_MT (FA_RW / 16) /* 16-row mma tiles per warp */
#define FA_NT (FA_BC / 8)  /* 8-key n-tiles of S */
#define FA_DT (FA_DVW / 8) /* 8-wide n-tiles of the warp's columns of O */
#define FA_KT (FA_DP / 16) /* 16-deep k-steps of S = Q K^T */
/* Q's fragments stay in registers when O, S and Q fit comfortably (fp32 words per thread); else they are read from
 * shared memory at every k-step. */
/* the serving layouts address each block's rows through strides or the block table: a few registers more than the
 * dense kernel has to spare where Q's fragments stay in registers at the limit (sm_90, f16 d = 64 causal) */
#if ATTN_LAYOUT && !defined(FA_QREGS)
#define FA_QREGS (FA_MT * (FA_DVW / 2 + FA_BC / 2 + FA_DP / 4) <= 128)
#endif
#ifndef FA_QREGS
#define FA_QREGS (FA_MT * (FA_DVW / 2 + FA_BC / 2 + FA_DP / 4) <= 160)
#endif
#define FA_G (fa_swt::G)
#define FA_GV (fa_swv::G)
/* k-steps of S = Q K^T unrolled together when Q is read from shared memory (ATTN_UNROLL, 0: 2): a short rolled
 * loop keeps the scheduler from hoisting every step's fragments at once when O and S fill the registers */
#define FA_QK_UNROLL (ATTN_UNROLL > 0 ? ATTN_UNROLL : 2)

struct fa_state {
  float o[FA_MT][FA_DT][4]; /* O accumulators: rows g and g+8 of each 16-row tile, d = 8*dt + 2*t + {0,1} */
  float m[FA_MT][2], l[FA_MT][2];
#if FA_QREGS
  unsigned qf[FA_MT][FA_KT][4];
#endif
  /* per-lane byte offsets of the ldmatrix rows and of the XOR-ed chunk pairs (see fa_sw) */
  unsigned rq, rk, rv; /* row part plus the chunk part of step 0: Q, K and V lane patterns */
#if ATTN_LAYOUT == 1
  long long os; /* FA_OS */
#endif
};
struct fa_scores {
  float s[FA_MT][FA_NT][4];
};

/* ldmatrix.x4 lane patterns; lane l gives the address of one row of a 16-row slab:
 *   Q (A operand) and V (B operand, .trans): row (l & 7) + 8*((l >> 3) & 1), chunk 2*u + (l >> 4), so the four 8x8
 *     matrices are (rows 0-7, chunk 2u), (rows 8-15, chunk 2u), (rows 0-7, chunk 2u+1), (rows 8-15, chunk 2u+1);
 *   K (B operand): row (l & 7) + 8*(l >> 4), chunk 2*u + ((l >> 3) & 1): (rows 0-7, chunk 2u), (rows 0-7, chunk
 *     2u+1), (rows 8-15, chunk 2u), (rows 8-15, chunk 2u+1), so each n-tile's (b0, b1) are consecutive registers.
 * Slabs start at multiples of 16 rows, so phase(row) = phase(l & 7) for every one. */
__device__ __forceinline__ void fa_lane_setup(fa_state &st, int lane) {
  const unsigned ph = fa_swt::phase(lane & 7);
  st.rq = ((lane & 7) + 8 * ((lane >> 3) & 1)) * FA_NC * 16 + (((lane >> 4) ^ ph) * 16);
  st.rk = ((lane & 7) + 8 * (lane >> 4)) * FA_NC * 16 + ((((lane >> 3) & 1) ^ ph) * 16);
  /* V (and Q when its rows have as many chunks) */
  st.rv = FA_NCV == FA_NC ? st.rq
                          : ((lane & 7) + 8 * ((lane >> 3) & 1)) * FA_NCV * 16 +
                                (((lane >> 4) ^ fa_swv::phase(lane & 7)) * 16);
}
/* Byte offset for lane base `base` (rq or rk) of row slab `slab` (16 rows), chunk pair u (chunks 2u, 2u+1). The
 * lane's chunk is (2u + x) ^ phase = 2u ^ (x ^ phase) since 2u is even: step 0's offset with u*32's bits flipped.
 * Slabs and whole groups of G chunks are multiples of 16*G bytes, so the XOR can follow the addition. */
#define FA_OFS(base, slab, u) \
  ((((base) + (slab) * 16 * FA_NC * 16 + ((u) / (FA_G / 2)) * FA_G * 16) ^ (((u) % (FA_G / 2)) * 32)))
#define FA_OFSV(base, slab, u) \
  ((((base) + (slab) * 16 * FA_NCV * 16 + ((u) / (FA_GV / 2)) * FA_GV * 16) ^ (((u) % (FA_GV / 2)) * 32)))

__device__ __forceinline__ void fa_init(fa_state &st) {
#pragma unroll
  for (int mt = 0; mt < FA_MT; mt++) {
#pragma unroll
    for (int dt = 0; dt < FA_DT; dt++)
#pragma unroll
      for (int e = 0; e < 4; e++) st.o[mt][dt][e] = 0.0f;
#pragma unroll
    for (int h = 0; h < 2; h++) {
      st.m[mt][h] = FA_NEG_INF;
      st.l[mt][h] = 0.0f;
    }
  }
}

/* Q fragments of the warp's rows (tile-relative row wr0) for k-step kk */
__device__ __forceinline__ void fa_q_frag(const fa_state &st, unsigned sq, int wr0, int mt, int kk, unsigned (&a)[4]) {
  fa_ldsm4(sq + wr0 * FA_NC * 16 + FA_OFS(st.rq, mt, kk), a[0], a[1], a[2], a[3]);
}

__device__ __forceinline__ void fa_q_regs(fa_state &st, unsigned sq, int wr0) {
#if FA_QREGS
#pragma unroll
  for (int mt = 0; mt < FA_MT; mt++)
#pragma unroll
    for (int kk = 0; kk < FA_KT; kk++) fa_q_frag(st, sq, wr0, mt, kk, st.qf[mt][kk]);
#endif
}

/* S = Q K_j^T for the warp's rows (raw, unscaled) */
__device__ __forceinline__ void fa_qk(fa_scores &sc, const fa_state &st, unsigned sq, unsigned sk, int wr0) {
#pragma unroll
  for (int mt = 0; mt < FA_MT; mt++)
#pragma unroll
    for (int nt = 0; nt < FA_NT; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) sc.s[mt][nt][e] = 0.0f;
#if FA_QREGS
#pragma unroll
#else
  FA_PRAGMA(unroll FA_QK_UNROLL)
#endif
  for (int kk = 0; kk < FA_KT; kk++) {
    unsigned a[FA_MT][4];
#pragma unroll
    for (int mt = 0; mt < FA_MT; mt++) {
#if FA_QREGS
#pragma unroll
      for (int e = 0; e < 4; e++) a[mt][e] = st.qf[mt][kk][e];
#else
      fa_q_frag(st, sq, wr0, mt, kk, a[mt]);
#endif
    }
#pragma unroll
    for (int n2 = 0; n2 < FA_NT / 2; n2++) {
      unsigned b0, b1, b2, b3; /* keys 16*n2 + 0..7: (b0, b1); keys 16*n2 + 8..15: (b2, b3) */
      fa_ldsm4(sk + FA_OFS(st.rk, n2, kk), b0, b1, b2, b3);
#pragma unroll
      for (int mt = 0; mt < FA_MT; mt++) {
        fa_mma(sc.s[mt][2 * n2], a[mt], b0, b1);
        fa_mma(sc.s[mt][2 * n2 + 1], a[mt], b2, b3);
      }
    }
  }
}

/* Scale (base 2), modifiers, mask, online softmax, O = alpha O + P V_j. masked: some key of the block is hidden from
 * some row of the warp (cols, lb as in fa_limit, md.lw as in fa_low). u0: the warp's first pair of V chunks (its
 * column group). */
__device__ __forceinline__ void fa_softmax_pv(fa_state &st, fa_scores &sc, unsigned sv, float sl2, bool masked,
                                              int cols, int lb, const fa_mods &md, int lane, int u0) {
  const int g = lane >> 2, t = lane & 3;
  /* P, rounded as soon as it is computed: register pa[mt][k2][h + 2*(nt & 1)] holds row h of n-tile nt = 2*k2 or
   * 2*k2+1, which is the A fragment of keys 16*k2 .. 16*k2+15 */
  unsigned pa[FA_MT][FA_BC / 16][4];
#pragma unroll
  for (int mt = 0; mt < FA_MT; mt++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int rr = 16 * mt + 8 * h + g;
      const int lim = masked ? fa_limit(cols, lb, rr) : FA_BC, low = masked ? fa_low(md, rr) : 0;
      float mx = FA_NEG_INF;
#pragma unroll
      for (int nt = 0; nt < FA_NT; nt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          /* scaled before masking: a negative scale must not turn -inf into +inf */
          const int c = 8 * nt + 2 * t + e;
          float v = fa_score(sc.s[mt][nt][2 * h + e], sl2, md, rr, c);
          if (masked && (c >= lim || c < low)) v = FA_NEG_INF;
          sc.s[mt][nt][2 * h + e] = v;
          mx = fmaxf(mx, v);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float mnew = fmaxf(st.m[mt][h], mx);
      /* a row that has seen no visible key keeps m = -inf: subtract 0 then, so -inf - -inf never occurs */
      const float mu = mnew == FA_NEG_INF ? 0.0f : mnew;
      const float alpha = fa_ex2(st.m[mt][h] - mu);
      st.m[mt][h] = mnew;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < FA_NT; nt++) {
        const float p0 = fa_ex2(sc.s[mt][nt][2 * h] - mu), p1 = fa_ex2(sc.s[mt][nt][2 * h + 1] - mu);
        sum += p0 + p1;
        pa[mt][nt / 2][h + 2 * (nt & 1)] = fa_pack(p0, p1);
      }
      /* l stays a per-lane partial sum (the quad's lanes share m and alpha); reduced once at the end */
      st.l[mt][h] = st.l[mt][h] * alpha + sum;
#pragma unroll
      for (int dt = 0; dt < FA_DT; dt++) {
        st.o[mt][dt][2 * h] *= alpha;
        st.o[mt][dt][2 * h + 1] *= alpha;
      }
    }
#pragma unroll
  for (int k2 = 0; k2 < FA_BC / 16; k2++)
#pragma unroll
    for (int d2 = 0; d2 < FA_DVW / 16; d2++) {
      unsigned b0, b1, b2, b3; /* d = 16*d2 + 0..7: (b0, b1); d = 16*d2 + 8..15: (b2, b3) */
      fa_ldsm4t(sv + FA_OFSV(st.rv, k2, u0 + d2), b0, b1, b2, b3);
#pragma unroll
      for (int mt = 0; mt < FA_MT; mt++) {
        fa_mma(st.o[mt][2 * d2], pa[mt][k2], b0, b1);
        fa_mma(st.o[mt][2 * d2 + 1], pa[mt][k2], b2, b3);
      }
    }
}

/* O / l, rounded, staged in the warp's rows and columns of the Q buffer (V's layout), then stored as 16-byte chunks
 * of whole rows (by element where rows are not whole chunks). cg: the warp's column group. Returns whether an
 * accumulator of the lane is NaN or infinite (see fa_fix). */
__device__ __forceinline__ bool fa_epilogue(fa_state &st, unsigned char *smem, fa_elem *o, int rows, int wr0, int ev,
                                            int lane, int cg, float *lse) {
  const int g = lane >> 2, t = lane & 3;
  bool bad = false;
  fa_wait<0>();
  /* the other warps of the row group are done reading Q; a block may load no key block (causal rows before the first
   * key, a window, a sequence with no key), so nothing else orders the other warps' Q rows (their cp.async may still
   * land) before this warp's O where their strides differ */
  if (FA_VS > 1 || FA_NCV != FA_NC) __syncthreads();
  else __syncwarp();
#pragma unroll
  for (int mt = 0; mt < FA_MT; mt++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      float l = st.l[mt][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int r = wr0 + 16 * mt + 8 * h + g;
      /* l = 0 (every visible score -inf): 0 * inf = NaN, the reference's 0/0 */
      const float inv = fa_sees(r, ev) ? 1.0f / l : 0.0f;
      const float lv = fa_lse(st.m[mt][h], l, fa_sees(r, ev)); /* by every lane of the row: see the f32 epilogue */
      if (lse && r < rows) lse[r] = lv;
      float chk = 0.0f;
#pragma unroll
      for (int dt = 0; dt < FA_DT; dt++) {
        const float o0 = st.o[mt][dt][2 * h], o1 = st.o[mt][dt][2 * h + 1];
        chk += o0 + o1;
        *(unsigned *)(smem + fa_swv::off(r, cg * FA_DT + dt) + 4 * t) = fa_pack(o0 * inv, o1 * inv);
      }
      bad |= fa_nonfinite(chk);
    }
  __syncwarp();
#if FA_ADV
  {
    constexpr int NR = FA_DV / FA_VE; /* real chunks a row */
#pragma unroll
    for (unsigned it = 0; it < (FA_RW * FA_DT + 31) / 32; it++) {
      const unsigned idx = lane + 32 * it;
      const unsigned r = wr0 + idx / FA_DT, c = cg * FA_DT + idx % FA_DT;
      if ((FA_RW * FA_DT % 32 == 0 || idx < FA_RW * FA_DT) && (int)r < rows && (NR == FA_NCV || (int)c < NR))
        *(uint4 *)(o + (long long)r * FA_OS + c * FA_VE) = *(const uint4 *)(smem + fa_swv::off(r, c));
    }
  }
#else
  {
    const unsigned sb = (unsigned)__cvta_generic_to_shared(smem);
#pragma unroll 1
    for (unsigned idx = lane; idx < FA_RW * FA_DVW; idx += 32) {
      const unsigned r = wr0 + idx / FA_DVW, c = cg * FA_DVW + idx % FA_DVW;
      if ((int)r < rows && (int)c < FA_DV) {
        fa_elem x;
        fa_ld_elem(sb + fa_elem_off<FA_NCV>(r, c), x);
        o[(long long)r * FA_OS + c] = x;
      }
    }
  }
#endif
  return bad;
}

#if FA_SPLIT
/* split-KV: the part's unnormalised O (fp32, d_v columns a row), running max m (base 2) and sum l of each row to the
 * scratch; every lane of a row stores its m and l (the same bits), as the epilogue's lse */
__device__ __forceinline__ void fa_partial(fa_state &st, float *po, float *pm, float *pl, int rows, int wr0, int lane,
                                           int cg) {
  const int g = lane >> 2, t = lane & 3;
  fa_wait<0>();
#pragma unroll
  for (int mt = 0; mt < FA_MT; mt++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      float l = st.l[mt][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int r = wr0 + 16 * mt + 8 * h + g;
      if (r < rows) {
        pm[r] = st.m[mt][h];
        pl[r] = l;
#pragma unroll
        for (int dt = 0; dt < FA_DT; dt++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const int c = cg * FA_DVW + 8 * dt + 2 * t + e;
            if (FA_DVP == FA_DV || c < FA_DV) po[(long long)r * FA_DV + c] = st.o[mt][dt][2 * h + e];
          }
      }
    }
}
#endif

#else
/* ======================= f32: CUDA cores ======================= */
#define FA_CL (FA_NC % 8 == 0 && FA_NCV % 8 == 0 ? 8 : 4) /* lanes sharing a row: its keys and chunks of d_v */
#define FA_RL (32 / FA_CL)             /* rows a warp covers per step */
#define FA_TM (FA_RW / FA_RL)          /* rows per thread */
#define FA_TS (FA_BC / FA_CL)          /* key columns per thread */
#define FA_TO (FA_NCV / FA_CL)         /* 4-float chunks of d_v per thread */
#define FA_PNC (FA_BC / 4)             /* chunks per row of P */
typedef fa_sw<FA_PNC> fa_swp;
static_assert(FA_RW % FA_RL == 0 && FA_BC % FA_CL == 0 && FA_NCV % FA_CL == 0, "f32 thread layout");

struct fa_state {
  float4 o[FA_TM][FA_TO]; /* row ry + RL*i, d chunk cx + CL*j */
  float m[FA_TM], l[FA_TM];
  int ry, cx;
#if ATTN_LAYOUT == 1
  long long os; /* FA_OS */
#endif
};
struct fa_scores {
  float s[FA_TM][FA_TS]; /* row ry + RL*i, key cx + CL*j */
};

__device__ __forceinline__ void fa_lane_setup(fa_state &st, int lane) {
  st.ry = lane / FA_CL;
  st.cx = lane % FA_CL;
}
__device__ __forceinline__ void fa_init(fa_state &st) {
#pragma unroll
  for (int i = 0; i < FA_TM; i++) {
#pragma unroll
    for (int j = 0; j < FA_TO; j++) st.o[i][j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    st.m[i] = FA_NEG_INF;
    st.l[i] = 0.0f;
  }
}
__device__ __forceinline__ void fa_q_regs(fa_state &, unsigned, int) {}

__device__ __forceinline__ float4 fa_ld4(const unsigned char *p) { return *(const float4 *)p; }

/* S = Q K_j^T (raw) for the thread's rows and key columns */
__device__ __forceinline__ void fa_qk(fa_scores &sc, const fa_state &st, const unsigned char *sq,
                                      const unsigned char *sk, int wr0) {
#pragma unroll
  for (int i = 0; i < FA_TM; i++)
#pragma unroll
    for (int j = 0; j < FA_TS; j++) sc.s[i][j] = 0.0f;
#pragma unroll 2
  for (int kc = 0; kc < FA_NC; kc++) {
    float4 q[FA_TM];
#pragma unroll
    for (int i = 0; i < FA_TM; i++) q[i] = fa_ld4(sq + fa_swt::off(wr0 + st.ry + FA_RL * i, kc));
#pragma unroll
    for (int j = 0; j < FA_TS; j++) {
      const float4 k = fa_ld4(sk + fa_swt::off(st.cx + FA_CL * j, kc));
#pragma unroll
      for (int i = 0; i < FA_TM; i++) {
        float s = sc.s[i][j];
        s = fmaf(q[i].x, k.x, s);
        s = fmaf(q[i].y, k.y, s);
        s = fmaf(q[i].z, k.z, s);
        s = fmaf(q[i].w, k.w, s);
        sc.s[i][j] = s;
      }
    }
  }
}

__device__ __forceinline__ void fa_softmax_pv(fa_state &st, fa_scores &sc, unsigned char *sp,
                                              const unsigned char *sv, float sl2, bool masked, int cols, int lb,
                                              const fa_mods &md, int wr0) {
#pragma unroll
  for (int i = 0; i < FA_TM; i++) {
    const int r = wr0 + st.ry + FA_RL * i; /* tile row */
    const int rr = st.ry + FA_RL * i;
    const int lim = masked ? fa_limit(cols, lb, rr) : FA_BC, low = masked ? fa_low(md, rr) : 0;
    float mx = FA_NEG_INF;
#pragma unroll
    for (int j = 0; j < FA_TS; j++) {
      const int c = st.cx + FA_CL * j;
      float v = fa_score(sc.s[i][j], sl2, md, rr, c);
      if (masked && (c >= lim || c < low)) v = FA_NEG_INF;
      sc.s[i][j] = v;
      mx = fmaxf(mx, v);
    }
#pragma unroll
    for (int x = 1; x < FA_CL; x *= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, x));
    const float mnew = fmaxf(st.m[i], mx);
    const float mu = mnew == FA_NEG_INF ? 0.0f : mnew; /* no visible key yet: avoid -inf - -inf */
    const float alpha = fa_ex2(st.m[i] - mu);
    st.m[i] = mnew;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < FA_TS; j++) {
      const float p = fa_ex2(sc.s[i][j] - mu);
      sum += p;
      const int c = st.cx + FA_CL * j;
      *(float *)(sp + fa_swp::off(r, c >> 2) + 4 * (c & 3)) = p;
    }
    st.l[i] = st.l[i] * alpha + sum; /* per-lane partial, reduced at the end */
#pragma unroll
    for (int j = 0; j < FA_TO; j++) {
      st.o[i][j].x *= alpha;
      st.o[i][j].y *= alpha;
      st.o[i][j].z *= alpha;
      st.o[i][j].w *= alpha;
    }
  }
  __syncwarp(); /* P rows are written and read by this warp only */
#pragma unroll 2
  for (int kc = 0; kc < FA_PNC; kc++) {
    float4 p[FA_TM];
#pragma unroll
    for (int i = 0; i < FA_TM; i++) p[i] = fa_ld4(sp + fa_swp::off(wr0 + st.ry + FA_RL * i, kc));
#pragma unroll
    for (int e = 0; e < 4; e++) {
#pragma unroll
      for (int j = 0; j < FA_TO; j++) {
        const float4 v = fa_ld4(sv + fa_swv::off(4 * kc + e, st.cx + FA_CL * j));
#pragma unroll
        for (int i = 0; i < FA_TM; i++) {
          const float pe = e == 0 ? p[i].x : e == 1 ? p[i].y : e == 2 ? p[i].z : p[i].w;
          st.o[i][j].x = fmaf(pe, v.x, st.o[i][j].x);
          st.o[i][j].y = fmaf(pe, v.y, st.o[i][j].y);
          st.o[i][j].z = fmaf(pe, v.z, st.o[i][j].z);
          st.o[i][j].w = fmaf(pe, v.w, st.o[i][j].w);
        }
      }
    }
  }
}

/* O / l; returns whether an accumulator of the lane is NaN or infinite (see fa_fix). */
__device__ __forceinline__ bool fa_epilogue(fa_state &st, fa_elem *o, int rows, int wr0, int ev, float *lse) {
  bool bad = false;
#pragma unroll
  for (int i = 0; i < FA_TM; i++) {
    float l = st.l[i];
#pragma unroll
    for (int x = 1; x < FA_CL; x *= 2) l += __shfl_xor_sync(0xffffffffu, l, x);
    const int r = wr0 + st.ry + FA_RL * i;
    /* l = 0 (every visible score -inf): 0 * inf = NaN, the reference's 0/0 */
    const float inv = fa_sees(r, ev) ? 1.0f / l : 0.0f;
    /* stored by every lane of the row (the same value: m and the butterfly's l are the same bits in each): a
     * condition on the lane lets the compiler split the loop by lane, and the warp, before the next row's shuffles */
    const float lv = fa_lse(st.m[i], l, fa_sees(r, ev));
    if (lse && r < rows) lse[r] = lv;
    if (r < rows) {
      float chk = 0.0f;
#pragma unroll
      for (int j = 0; j < FA_TO; j++) {
        const float4 v = st.o[i][j];
        chk += (v.x + v.y) + (v.z + v.w);
        const int ch = st.cx + FA_CL * j;
        if (FA_ADV) {
          if (FA_DVP == FA_DV || ch < FA_DV / 4)
            *(float4 *)(o + (long long)r * FA_OS + ch * 4) = make_float4(v.x * inv, v.y * inv, v.z * inv, v.w * inv);
        } else {
          const float x[4] = {v.x * inv, v.y * inv, v.z * inv, v.w * inv};
#pragma unroll
          for (int e = 0; e < 4; e++)
            if (ch * 4 + e < FA_DV) o[(long long)r * FA_OS + ch * 4 + e] = x[e];
        }
      }
      bad |= fa_nonfinite(chk);
    }
  }
  return bad;
}

#if FA_SPLIT
/* split-KV: as the tensor cores' fa_partial */
__device__ __forceinline__ void fa_partial(fa_state &st, float *po, float *pm, float *pl, int rows, int wr0) {
#pragma unroll
  for (int i = 0; i < FA_TM; i++) {
    float l = st.l[i];
#pragma unroll
    for (int x = 1; x < FA_CL; x *= 2) l += __shfl_xor_sync(0xffffffffu, l, x);
    const int r = wr0 + st.ry + FA_RL * i;
    if (r < rows) {
      pm[r] = st.m[i];
      pl[r] = l;
#pragma unroll
      for (int j = 0; j < FA_TO; j++) {
        const int c = 4 * (st.cx + FA_CL * j);
        const float x[4] = {st.o[i][j].x, st.o[i][j].y, st.o[i][j].z, st.o[i][j].w};
#pragma unroll
        for (int e = 0; e < 4; e++)
          if (FA_DVP == FA_DV || c + e < FA_DV) po[(long long)r * FA_DV + c + e] = x[e];
      }
    }
  }
}
#endif
#endif

/* Key block jb of n_kv keys: its first key and its number of rows. n_kv < 2^31 (gen/launch.c), so ints hold them. */
__device__ __forceinline__ int fa_cols(int j0, int n_kv) { return n_kv - j0 < FA_BC ? n_kv - j0 : FA_BC; }

#if FA_MASK
/* One input element as fp32, one fp32 value rounded to an output element, and NaN or inf in an element. */
__device__ __forceinline__ float fa_in(fa_elem x) {
#if ATTN_DTYPE == 0
  return x;
#elif ATTN_DTYPE == 1
  return fa_h2f(x);
#else
  return __uint_as_float((unsigned)x << 16);
#endif
}
__device__ __forceinline__ fa_elem fa_out(float x) {
#if ATTN_DTYPE == 0
  return x;
#else
  return (fa_elem)(fa_pack(x, 0.0f) & 0xffffu);
#endif
}
__device__ __forceinline__ bool fa_bad_elem(fa_elem x) {
#if ATTN_DTYPE == 0
  return fa_nonfinite(x);
#elif ATTN_DTYPE == 1
  return (x & 0x7c00u) == 0x7c00u;
#else
  return (x & 0x7f80u) == 0x7f80u;
#endif
}
/* q.k over d, the warp's lanes taking every 32nd column; the same in every lane */
__device__ __forceinline__ float fa_dot(const fa_elem *q, const fa_elem *k, int lane) {
  float s = 0.0f;
#pragma unroll
  for (int c = lane; c < FA_D; c += 32) s = fmaf(fa_in(q[c]), fa_in(k[c]), s);
#pragma unroll
  for (int x = 16; x > 0; x >>= 1) s += __shfl_xor_sync(0xffffffffu, s, x);
  return s;
}

/* The rare path of causal and windowed blocks, taken by a warp whose accumulators hold NaN or inf, after its rows
 * are written. P V weights a key hidden from a row by P = 0 when the key's block is loaded for rows that see it,
 * and 0 * NaN (or inf) in the key's V row is NaN where the reference adds nothing. The warp finds its rows with a
 * non-finite output in a column where a loaded, hidden key has a non-finite V entry, and computes those outputs
 * again in fp32 over the keys the row sees, with the score modifiers, from global memory (not counted: the I/O
 * model is for finite inputs). Everything is derived again from the arguments, as attn_kernel derives it, so that
 * nothing stays live across the key loop. */
#if ATTN_LAYOUT == 0
__device__ __noinline__ void fa_fix(const fa_elem *q, const fa_elem *k, const fa_elem *v, fa_elem *o, int n,
                                    int n_kv, long long heads, long long heads_kv, float scale, int w, float cap,
                                    const float *alibi) {
#else
/* serving layouts: the block's sequence as attn_kernel found it (q, o at the block's first row, k, v at the
 * sequence's first key, i0 and rows its query block; varlen's q and o as rows heads·d, heads·d_v apart) */
#if ATTN_LAYOUT == 1
typedef fa_rows<FA_D> fa_qrows;
typedef fa_rows<FA_DV> fa_orows;
#else
typedef const fa_elem *fa_qrows;
typedef fa_elem *fa_orows;
#endif
/* (scalars, not the row structs, which a noinline call passes through the stack; alibi: the block's head's slope) */
__device__ __noinline__ void fa_fix(const fa_elem *qp, fa_elem *kp, fa_elem *vp, fa_elem *op, int n, int n_kv, int i0,
                                    long long heads, long long heads_kv, float scale, int w, float cap,
                                    const float *alibi) {
  const int rows = n - i0 < FA_BR ? n - i0 : FA_BR;
  const long long bh = 0; /* alibi[bh % heads]: the head's slope */
#if ATTN_LAYOUT == 1
  fa_qrows q;
  fa_orows o;
  q.p = (fa_elem *)qp, q.s = (int)heads * FA_D, q.e = 0;
  o.p = op, o.s = (int)heads * FA_DV, o.e = 0;
#else
  const fa_elem *q = qp;
  fa_elem *o = op;
#endif
  fa_rows<FA_D> k;
  fa_rows<FA_DV> v;
  k.p = kp, k.s = (int)heads_kv * FA_D, k.e = 0;
  v.p = vp, v.s = (int)heads_kv * FA_DV, v.e = 0;
#endif
  constexpr int CPL = (FA_DVW + 31) / 32; /* columns of the warp's group per lane */
  const int lane = threadIdx.x & 31, wr0 = (threadIdx.x >> 5) / FA_VS * FA_RW;
  /* the warp's columns of O: [c0, cend) */
  const int c0 = (threadIdx.x >> 5) % FA_VS * FA_DVW, cend = c0 + FA_DVW < FA_DV ? c0 + FA_DVW : FA_DV;
#if ATTN_LAYOUT == 0
  const int nqb = (n - 1) / FA_BR + 1;
  const long long bh = blockIdx.x / nqb;
  const int qb = (int)(blockIdx.x % nqb), i0 = (ATTN_CAUSAL ? nqb - 1 - qb : qb) * FA_BR;
  const int rows = n - i0 < FA_BR ? n - i0 : FA_BR;
  if (heads_kv <= 0) heads_kv = heads;
  const long long kvh = bh / heads * heads_kv + (bh % heads) / (heads / heads_kv);
  q += (bh * n + i0) * FA_D;
  o += (bh * n + i0) * FA_DV;
  k += kvh * n_kv * FA_D;
  v += kvh * n_kv * FA_DV;
#endif
  const float sl2 = scale * 1.4426950408889634f;
  fa_mods md;
  md.ci = ATTN_SOFTCAP ? scale / cap : 0.0f;
  md.co = ATTN_SOFTCAP ? cap * 1.4426950408889634f : 0.0f;
  md.al = ATTN_ALIBI ? alibi[bh % heads] * 1.4426950408889634f : 0.0f;
  md.ib = 0, md.lw = 0;
#if FA_WPACK
  const bool pk = w < 0; /* a GQA-packed decode launch (FA_WPACK): every row at n_kv - 1, window -w */
  w = w > 0 ? w : pk ? -w : 0x7fffffff;
#else
  w = FA_WIN ? (w > 0 ? w : 0x7fffffff) : 0;
#endif
#if FA_PACK
  const long long e0 = (long long)n_kv - 1; /* i' of every row: packed decode's rows are query heads */
  const long long rs = 0;                   /* i' of row r is e0 + rs * r */
#elif FA_WPACK
  const long long e0 = pk ? (long long)n_kv - 1 : (long long)i0 + n_kv - n;
  const long long rs = pk ? 0 : 1;
#else
  const long long e0 = (long long)i0 + n_kv - n; /* i' of the block's first row */
  const long long rs = 1;
#endif
  /* row r (from the block's first) sees keys [lo, hi) clamped to [0, n_kv] */
  const auto lo_of = [&](long long r) -> int {
    const long long x = FA_WIN ? e0 + rs * r - w + 1 : 0;
    return x < 0 ? 0 : x < n_kv ? (int)x : n_kv;
  };
  const auto hi_of = [&](long long r) -> int {
    const long long x = ATTN_CAUSAL ? e0 + rs * r + 1 : e0 + rs * r + w;
    return x < 0 ? 0 : x < n_kv ? (int)x : n_kv;
  };
  /* the keys loaded: whole blocks from the one holding the first row's lowest key through the last row's highest */
  const int jl = lo_of(0) / FA_BC * FA_BC, hl = hi_of(rows - 1);
  if (hl <= jl) return;
  const long long up = ((long long)hl + FA_BC - 1) / FA_BC * FA_BC;
  const int lload = up < n_kv ? (int)up : n_kv;
  /* the columns where a loaded key has NaN or inf in V; none: every non-finite output of the warp is the
   * reference's */
  bool col[CPL], some = false;
#pragma unroll
  for (int u = 0; u < CPL; u++) {
    const int c = c0 + lane + 32 * u;
    col[u] = false;
    for (int j = jl; c < cend && j < lload && !col[u]; j++) col[u] = fa_bad_elem(v[(long long)j * FA_DV + c]);
    some |= col[u];
  }
  if (!__any_sync(0xffffffffu, some)) return;
  __syncwarp(); /* the warp's output stores are visible to all its lanes */
#pragma unroll 1
  for (int r = wr0; r < wr0 + FA_RW && r < rows; r++) {
    const int lo = lo_of(r), hi = hi_of(r) > lo ? hi_of(r) : lo; /* keys [lo, hi) visible */
    if (lo == jl && hi == lload) continue;                       /* no hidden key loaded */
    fa_elem *orow = o + (long long)r * FA_DV;
    bool fix[CPL], any = false;
#pragma unroll
    for (int u = 0; u < CPL; u++) {
      const int c = c0 + lane + 32 * u;
      fix[u] = false;
      if (col[u] && fa_bad_elem(orow[c])) {
        if (hi == lo) orow[c] = fa_out(0.0f); /* a row that sees no key */
        else
          for (int j = jl; j < lload && !fix[u]; j++)
            fix[u] = (j < lo || j >= hi) && fa_bad_elem(v[(long long)j * FA_DV + c]);
      }
      any |= fix[u];
    }
    if (!__any_sync(0xffffffffu, any)) continue;
    const fa_elem *qrow = q + (long long)r * FA_D;
    const long long ip = e0 + rs * r; /* i' */
#if FA_PACK
    if (ATTN_ALIBI) md.al = alibi[r] * 1.4426950408889634f; /* the row's query head's slope */
#endif
    float m = FA_NEG_INF;
    for (int j = lo; j < hi; j++)
      m = fmaxf(m, fa_mod(fa_dot(qrow, k + (long long)j * FA_D, lane), sl2, md, (float)llabs(ip - j)));
    const float mu = m == FA_NEG_INF ? 0.0f : m;
    float l = 0.0f, acc[CPL];
#pragma unroll
    for (int u = 0; u < CPL; u++) acc[u] = 0.0f;
    for (int j = lo; j < hi; j++) {
      const float p =
          fa_ex2(fa_mod(fa_dot(qrow, k + (long long)j * FA_D, lane), sl2, md, (float)llabs(ip - j)) - mu);
      l += p;
#pragma unroll
      for (int u = 0; u < CPL; u++)
        if (c0 + lane + 32 * u < cend) acc[u] = fmaf(p, fa_in(v[(long long)j * FA_DV + c0 + lane + 32 * u]), acc[u]);
    }
#pragma unroll
    for (int u = 0; u < CPL; u++)
      if (fix[u]) o[(long long)r * FA_DV + c0 + lane + 32 * u] = fa_out(acc[u] / l);
  }
}
#endif

/* The masks of key block j0 for a warp (diag, lw0: its first row's last and first visible keys, see attn_kernel):
 * fa_limit's lb and fa_low's md.lw, and ALiBi's distance md.ib from e = i' of the warp's first row (32-bit ints:
 * the registers are few). Returns whether the block hides some key from some row of the warp. */
__device__ __forceinline__ bool fa_block_masks(int j0, int diag, int lw0, int e, int &lb, fa_mods &md) {
  lb = diag + 1 - j0 > FA_BC ? FA_BC : max(diag + 1 - j0, -FA_RW);
  bool masked = j0 > diag - FA_BC + 1;
  if (FA_WIN) {
    const int x = lw0 - j0; /* lw0 >= -RW and j0 >= 0: no overflow */
    md.lw = x < -FA_RW ? -FA_RW : x < FA_BC ? x : FA_BC;
    masked |= md.lw + FA_RW - 1 > 0;
  }
  if (ATTN_ALIBI) {
    const long long x = (long long)e - j0;
    md.ib = x < -(1 << 30) ? -(1 << 30) : x < (1 << 30) ? (int)x : 1 << 30;
  }
  return masked;
}

extern "C" __global__ void __launch_bounds__(FA_T, 1) attn_kernel(attn_cuda_kargs a) {
  ATTN_CIO_DECL;
  extern __shared__ __align__(16) unsigned char attn_smem[];
  if ((long long)blockIdx.x < FA_BLOCKS) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
#if ATTN_LAYOUT == 0
    const int n = (int)a.n, n_kv = (int)a.n_kv; /* both < 2^31 (gen/launch.c) */
    const int nqb = (n - 1) / FA_BR + 1; /* n >= 1; n + Br - 1 could overflow */
    const long long bh = FA_BID / nqb;
    int qb = FA_BID % nqb;
    if (ATTN_CAUSAL) qb = nqb - 1 - qb; /* heaviest first */
    const int i0 = qb * FA_BR;
    const int rows = n - i0 < FA_BR ? n - i0 : FA_BR;
    const long long heads = a.heads, heads_kv = a.heads_kv > 0 ? a.heads_kv : a.heads;
    const long long b = bh / heads, hk = (bh % heads) / (heads / heads_kv);
    const fa_elem *q = (const fa_elem *)a.q + (bh * n + i0) * FA_D;
    const fa_elem *k = (const fa_elem *)a.k + (b * heads_kv + hk) * n_kv * FA_D;
    const fa_elem *v = (const fa_elem *)a.v + (b * heads_kv + hk) * n_kv * FA_DV;
#else
    /* A serving layout: the grid is the dense one's for a.n, the longest sequence's rows; the blocks past their own
     * sequence's rows exit at once (the whole block: no barrier is skipped). n and n_kv are the sequence's. */
    const int nqb = ((int)a.n - 1) / FA_BR + 1;
    const long long bh = blockIdx.x / nqb;
    const long long heads = a.heads, heads_kv = a.heads_kv > 0 ? a.heads_kv : a.heads;
    const long long b = bh / heads, hk = (bh % heads) / (heads / heads_kv);
#if ATTN_LAYOUT == 1
    const int q0 = a.cu_q[b], k0 = a.cu_kv[b];
    const int n = a.cu_q[b + 1] - q0, n_kv = a.cu_kv[b + 1] - k0;
#else
    const int n = (int)a.n, n_kv = a.seq_kv[b];
#endif
    int qb = blockIdx.x % nqb;
    if (qb * FA_BR >= n) return;
    if (ATTN_CAUSAL) qb = (n - 1) / FA_BR - qb; /* heaviest first */
    const int i0 = qb * FA_BR;
    const int rows = n - i0 < FA_BR ? n - i0 : FA_BR;
    fa_rows<FA_D> k;
    fa_rows<FA_DV> v;
    k.s = (int)heads_kv * FA_D, v.s = (int)heads_kv * FA_DV;
    k.e = v.e = 0;
#if ATTN_LAYOUT == 1
    /* q [total_q][heads][d], k [total_kv][heads_kv][d], v [total_kv][heads_kv][d_v] */
    const fa_elem *q = (const fa_elem *)a.q + (((long long)q0 + i0) * heads + bh % heads) * FA_D;
    k.p = (fa_elem *)a.k + ((long long)k0 * heads_kv + hk) * FA_D;
    v.p = (fa_elem *)a.v + ((long long)k0 * heads_kv + hk) * FA_DV;
#else
    /* q [batch][heads][n][d]; pages [num_pages][page_size][heads_kv][d or d_v] */
    const fa_elem *q = (const fa_elem *)a.q + (bh * n + i0) * FA_D;
    k.p = (fa_elem *)a.k + hk * FA_D, v.p = (fa_elem *)a.v + hk * FA_DV;
    if (tid == 0) fa_tab = a.block_table + b * a.max_pages, fa_ps = a.page_size, fa_hkv = (int)heads_kv;
    __syncthreads(); /* fa_tab, fa_ps and fa_hkv before any load */
#endif
#endif
    const float sl2 = a.scale * 1.4426950408889634f; /* scores in base 2 */
    /* the warp's row group and column group of O (VS warps share rows) */
    const int cg = FA_VS == 1 ? 0 : warp % FA_VS, rg = FA_VS == 1 ? warp : warp / FA_VS;
    const int wr0 = rg * FA_RW; /* the warp's first row in the block */

#if FA_PACK
    const long long e0 = (long long)n_kv - 1; /* i' of every row (the one query of each query head) */
#elif FA_WPACK
    const bool pk = a.window < 0; /* GQA-packed decode (FA_WPACK): every row at i' = n_kv - 1 */
    const long long e0 = pk ? (long long)n_kv - 1 : (long long)i0 + n_kv - n;
#else
    const long long e0 = (long long)i0 + n_kv - n; /* i' of the block's first row */
#endif
    /* a windowed kernel given no window (0: one that hides nothing) runs as if the window were 2^31 - 1 */
#if FA_WPACK
    const int w = a.window > 0 ? a.window : pk ? -a.window : 0x7fffffff;
#else
    const int w = FA_WIN ? (a.window > 0 ? a.window : 0x7fffffff) : 0;
#endif
    /* keys visible to some row of the block: [jlo, L); L = min(n_kv, max(0, e0 + rows)) causal, min(n_kv, max(0,
     * e0 + rows - 1 + w)) windowed, else n_kv; jlo = min(n_kv, max(0, e0 - w + 1)) windowed, else 0. Key blocks
     * jb0 .. nb-1 are loaded. */
    int L = n_kv, jlo = 0;
    if (FA_MASK) {
      const long long e = ATTN_CAUSAL ? e0 + rows : e0 + rows - 1 + w;
      L = e < 0 ? 0 : e < n_kv ? (int)e : n_kv;
    }
    if (FA_WIN) {
      const long long e = e0 - w + 1;
      jlo = e < 0 ? 0 : e < n_kv ? (int)e : n_kv;
    }
#if FA_PACK
    if (FA_MASK) { /* one position: the block's rows see the keys of its first */
      const long long e = ATTN_CAUSAL ? e0 + 1 : e0 + w;
      L = e < 0 ? 0 : e < n_kv ? (int)e : n_kv;
    }
#endif
#if FA_SPLIT
    /* part p of S: key blocks [jk0 + nk p / S, jk0 + nk (p + 1) / S) of the block's nk; a part may have none */
    const int jk0 = jlo / FA_BC, nk = (L > jlo ? (L - 1) / FA_BC + 1 : jk0) - jk0;
    const long long part = blockIdx.x / (unsigned)a.grid_items;
    const int jb0 = jk0 + (int)(nk * part / ATTN_SPLIT), nb = jk0 + (int)(nk * (part + 1) / ATTN_SPLIT);
#else
    const int jb0 = jlo / FA_BC, nb = L > jlo ? (L - 1) / FA_BC + 1 : jb0;
#endif
    /* Last key visible to the warp's first row, clamped to [-RW-1, n_kv-1] (the same masks, and 32 bits): key
     * block j0 hides a key from some row of the warp above the row's keys iff j0 > diag - Bc + 1 (the first row sees
     * the lowest last key; with diag = n_kv - 1 that is the block cut by n_kv). Windowed: key j0 + c is below row
     * rr's keys iff c < lw + rr, lw = (first key the warp's first row sees) - j0, hiding a key from some row of the
     * warp iff lw + RW - 1 > 0. */
    int diag = n_kv - 1;
    if (FA_MASK) {
      const long long dg = e0 + wr0 + (ATTN_CAUSAL ? 0 : w - 1);
      diag = dg < -FA_RW - 1 ? -FA_RW - 1 : dg < n_kv - 1 ? (int)dg : n_kv - 1;
    }
#if FA_PACK
    if (FA_MASK) { /* every row at e0 */
      const long long dg = e0 + (ATTN_CAUSAL ? 0 : w - 1);
      diag = dg < -FA_RW - 1 ? -FA_RW - 1 : dg < n_kv - 1 ? (int)dg : n_kv - 1;
    }
    const long long lwl = e0 - w + 1;
    const int lw0 = lwl < -FA_RW ? -FA_RW : (int)lwl, ew = (int)e0;
#else
    /* the warp's first row: its lowest visible key (clamped below at -RW: the masks are the same) and i' */
#if FA_WPACK
    const long long lwl = e0 + (pk ? 0 : wr0) - w + 1; /* packed: the one position's (diag is n_kv - 1 there) */
#else
    const long long lwl = e0 + wr0 - w + 1;
#endif
    const int lw0 = lwl < -FA_RW ? -FA_RW : (int)lwl, ew = (int)(e0 + wr0); /* both <= n_kv + Br */
#endif
    fa_mods md;
    md.ci = ATTN_SOFTCAP ? a.scale / a.softcap : 0.0f;
    md.co = ATTN_SOFTCAP ? a.softcap * 1.4426950408889634f : 0.0f;
    md.al = ATTN_ALIBI ? a.alibi[bh % heads] * 1.4426950408889634f : 0.0f;
    md.ib = 0, md.lw = 0;
#if FA_WPACK
    md.ls = pk ? 0 : 1;
#endif
#if FA_PACK
    /* the warp's rows' slopes: query heads hk·G + i0 + wr0 .., G = n; a warp without rows reads head 0's */
    md.alr = rows - 1 - wr0;
    md.alp = a.alibi + (md.alr >= 0 ? hk * n + i0 + wr0 : 0);
    if (md.alr < 0) md.alr = 0;
#endif

    const unsigned sbase = fa_saddr(attn_smem);
    fa_state st;
    fa_lane_setup(st, lane);
    fa_init(st);

    if (FA_PAD) {
      fa_zero_pads(sbase, tid);
      __syncthreads(); /* before any warp reads its tiles */
    }
#if FA_SPLIT
    /* A part without key blocks reads no Q and computes nothing: its partial is fa_init's (O = 0, m = -inf, l = 0),
     * which attn_combine weighs 0. The condition is the block's, so no barrier is skipped by some warps only. */
    if (nb > jb0) {
#endif
#if ATTN_LAYOUT == 1
    st.os = heads * FA_DV;
    fa_load_q_rows(sbase, q, heads * FA_D, rows, wr0, cg * 32 + lane);
#else
    fa_load_q(sbase, q, rows, wr0, cg * 32 + lane);
#endif
    ATTN_CIO_READ((long long)rows * FA_D);
    fa_commit();

#if FA_S == 1
    if (nb > jb0) {
      const int cols = fa_cols(jb0 * FA_BC, n_kv);
      fa_load_block<FA_NC, FA_D>(sbase + FA_OFF_K(0), k + (long long)jb0 * FA_BC * FA_D, cols, tid);
      ATTN_CIO_READ((long long)cols * FA_D);
    }
    fa_commit();
    fa_wait<1>(); /* Q */
    if (FA_VS > 1) __syncthreads(); /* Q rows loaded by the warps of the row group */
    else __syncwarp();
    fa_q_regs(st, sbase, wr0);
    for (int jb = jb0; jb < nb; jb++) {
      const int j0 = jb * FA_BC, cols = fa_cols(j0, n_kv);
      int lb;
      const bool masked = fa_block_masks(j0, diag, lw0, ew, lb, md);
      fa_wait<0>();    /* K_j */
      __syncthreads(); /* K_j visible to all; every warp is done with V_{j-1} */
      fa_load_block<FA_NCV, FA_DV>(sbase + FA_OFF_V(0), v + (long long)j0 * FA_DV, cols, tid);
      ATTN_CIO_READ((long long)cols * FA_DV);
      fa_commit();
      fa_scores sc;
#if ATTN_DTYPE == 0
      fa_qk(sc, st, attn_smem, attn_smem + FA_OFF_K(0), wr0);
#else
      fa_qk(sc, st, sbase, sbase + FA_OFF_K(0), wr0);
#endif
      fa_wait<0>();    /* V_j */
      __syncthreads(); /* V_j visible to all; every warp is done with K_j */
      if (jb + 1 < nb) {
        const int j1 = j0 + FA_BC, c1 = fa_cols(j1, n_kv);
        fa_load_block<FA_NC, FA_D>(sbase + FA_OFF_K(0), k + (long long)j1 * FA_D, c1, tid);
        ATTN_CIO_READ((long long)c1 * FA_D);
        fa_commit();
      }
#if ATTN_DTYPE == 0
      fa_softmax_pv(st, sc, attn_smem + FA_OFF_P, attn_smem + FA_OFF_V(0), sl2, masked, cols, lb, md, wr0);
#else
      fa_softmax_pv(st, sc, sbase + FA_OFF_V(0), sl2, masked, cols, lb, md, lane, cg * (FA_DT / 2));
#endif
    }
#else
    /* prologue: blocks jb0 .. jb0+S-2, one group each (empty groups keep the count of groups fixed) */
#pragma unroll
    for (int s = 0; s < FA_S - 1; s++) {
      if (jb0 + s < nb) {
        const int j0 = (jb0 + s) * FA_BC, cols = fa_cols(j0, n_kv);
        fa_load_block<FA_NC, FA_D>(sbase + FA_OFF_K(s), k + (long long)j0 * FA_D, cols, tid);
        fa_load_block<FA_NCV, FA_DV>(sbase + FA_OFF_V(s), v + (long long)j0 * FA_DV, cols, tid);
        ATTN_CIO_READ((long long)cols * (FA_D + FA_DV));
      }
      fa_commit();
    }
    fa_wait<FA_S - 1>(); /* Q */
    if (FA_VS > 1) __syncthreads(); /* Q rows loaded by the warps of the row group */
    else __syncwarp();
    fa_q_regs(st, sbase, wr0);
    int stage = 0;
    for (int jb = jb0; jb < nb; jb++) {
      const int j0 = jb * FA_BC, cols = fa_cols(j0, n_kv);
      int lb;
      const bool masked = fa_block_masks(j0, diag, lw0, ew, lb, md);
      fa_wait<FA_S - 2>(); /* block j */
      __syncthreads();     /* block j visible to all; every warp is done with block j-1, whose buffer refills now */
      {
        const int jn = jb + FA_S - 1;
        if (jn < nb) {
          const int sn = stage == 0 ? FA_S - 1 : stage - 1;
          const int j1 = jn * FA_BC, c1 = fa_cols(j1, n_kv);
          fa_load_block<FA_NC, FA_D>(sbase + FA_OFF_K(sn), k + (long long)j1 * FA_D, c1, tid);
          fa_load_block<FA_NCV, FA_DV>(sbase + FA_OFF_V(sn), v + (long long)j1 * FA_DV, c1, tid);
          ATTN_CIO_READ((long long)c1 * (FA_D + FA_DV));
        }
        fa_commit();
      }
      {
        fa_scores sc;
#if ATTN_DTYPE == 0
        fa_qk(sc, st, attn_smem, attn_smem + FA_OFF_K(stage), wr0);
        fa_softmax_pv(st, sc, attn_smem + FA_OFF_P, attn_smem + FA_OFF_V(stage), sl2, masked, cols, lb, md, wr0);
#else
        fa_qk(sc, st, sbase, sbase + FA_OFF_K(stage), wr0);
        fa_softmax_pv(st, sc, sbase + FA_OFF_V(stage), sl2, masked, cols, lb, md, lane, cg * (FA_DT / 2));
#endif
      }
      stage = stage == FA_S - 1 ? 0 : stage + 1;
    }
#endif
#if FA_SPLIT
    } /* nb > jb0 */
#endif

#if FA_SPLIT
    {
      /* the part's rows in the scratch: O [S][R][d_v], then m [S][R] and l [S][R], R = batch*heads*n rows */
      const long long R = a.batch * a.heads * a.n, r0 = part * R + bh * n + i0;
      float *po = (float *)a.scratch, *pm = po + ATTN_SPLIT * R * FA_DV, *pl = pm + ATTN_SPLIT * R;
#if ATTN_DTYPE == 0
      fa_wait<0>();
      fa_partial(st, po + r0 * FA_DV, pm + r0, pl + r0, rows, wr0);
#else
      fa_partial(st, po + r0 * FA_DV, pm + r0, pl + r0, rows, wr0, lane, cg);
#endif
      ATTN_CIO_WRITE((long long)rows * (FA_DV + 2));
    }
#else
#if ATTN_LAYOUT == 1
    fa_elem *o = (fa_elem *)a.o + (((long long)q0 + i0) * heads + bh % heads) * FA_DV; /* [total_q][heads][d_v] */
#else
    fa_elem *o = (fa_elem *)a.o + (bh * n + i0) * FA_DV;
#endif
    int ev = 0; /* tile row r sees keys iff r + ev >= 0 (fa_sees) */
    {
      const long long e = e0 + (ATTN_CAUSAL ? 0 : w - 1);
      ev = e < -FA_BR - 1 ? -FA_BR - 1 : e < 0 ? (int)e : 0;
    }
#if ATTN_LAYOUT
    if (!FA_MASK) ev = 0;          /* every row sees every key ... */
    if (n_kv == 0) ev = -FA_BR - 1; /* ... but in a sequence with no key: zero rows */
    float *lse = nullptr;
#else
    float *lse = a.lse ? a.lse + bh * n + i0 : nullptr; /* attn_execute_lse */
#endif
#if ATTN_DTYPE == 0
    fa_wait<0>();
    const bool bad = fa_epilogue(st, o, rows, wr0, ev, lse);
#else
    const bool bad = fa_epilogue(st, attn_smem, o, rows, wr0, ev, lane, cg, lse);
#endif
    ATTN_CIO_WRITE((long long)rows * FA_DV);
#if FA_MASK && ATTN_LAYOUT == 0
    if (__any_sync(0xffffffffu, bad))
      fa_fix((const fa_elem *)a.q, (const fa_elem *)a.k, (const fa_elem *)a.v, (fa_elem *)a.o, (int)a.n, (int)a.n_kv,
             a.heads, a.heads_kv, a.scale, a.window, a.softcap, a.alibi);
#elif FA_MASK
    if (__any_sync(0xffffffffu, bad)) {
      fa_fix(q, k.p, v.p, o, n, n_kv, i0, heads, heads_kv, a.scale, a.window, a.softcap,
             ATTN_ALIBI ? a.alibi + (FA_PACK ? hk * n + i0 : bh % heads) : a.alibi);
    }
#else
    (void)bad;
#endif
#endif
  }
  ATTN_CIO_FLUSH(a);
}

#if FA_SPLIT
/* split-KV's merge: entry (r, c) of O, r of the R = batch*heads*n rows, from the S parts' O, m and l in the scratch
 * (attn_kernel's layout), in part order (the same bits run to run): M = max m_s, w_s = 2^(m_s - M), O = sum w_s O_s
 * / sum w_s l_s. A part without keys (m = -inf) weighs 0; every row sees some key (no mask), so the dense kernel's
 * rules follow: all scores -inf gives l = 0 and O = 0 * inf = NaN, a NaN or +inf score NaN. One thread an entry;
 * the grid is gen/launch.c's combine_grid. */
__device__ __forceinline__ fa_elem fa_round(float x) {
#if ATTN_DTYPE == 0
  return x;
#else
  return (fa_elem)(fa_pack(x, 0.0f) & 0xffffu);
#endif
}
extern "C" __global__ void attn_combine(attn_cuda_kargs a) {
  ATTN_CIO_DECL;
  const long long R = a.batch * a.heads * a.n;
  const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
#ifdef ATTN_COUNT_IO
  {
    /* the block's entries [e0, e1) of O: each reads its S partial entries and writes its entry; the entry in column 0
     * of a row also counts the row's S values of m and of l (read once per row, as the lse is written) */
    const long long e0 = (long long)blockIdx.x * blockDim.x, end = e0 + blockDim.x;
    const long long e1 = end < R * FA_DV ? end : R * FA_DV;
    if (e1 > e0) {
      ATTN_CIO_READ(ATTN_SPLIT * (e1 - e0) + 2LL * ATTN_SPLIT * ((e1 - 1) / FA_DV - (e0 + FA_DV - 1) / FA_DV + 1));
      ATTN_CIO_WRITE(e1 - e0);
    }
  }
#endif
  if (idx < R * FA_DV) {
    const long long r = idx / FA_DV;
    const int c = (int)(idx % FA_DV);
    const float *po = (const float *)a.scratch, *pm = po + ATTN_SPLIT * R * FA_DV, *pl = pm + ATTN_SPLIT * R;
    float mx = FA_NEG_INF;
#pragma unroll
    for (int s = 0; s < ATTN_SPLIT; s++) mx = fmaxf(mx, pm[s * R + r]);
    const float mu = mx == FA_NEG_INF ? 0.0f : mx; /* no part saw a finite score: -inf - -inf never occurs */
    float l = 0.0f, acc = 0.0f;
#pragma unroll
    for (int s = 0; s < ATTN_SPLIT; s++) {
      const float w = fa_ex2(pm[s * R + r] - mu);
      l = fmaf(pl[s * R + r], w, l);
      acc = fmaf(po[(s * R + r) * FA_DV + c], w, acc);
    }
    ((fa_elem *)a.o)[r * FA_DV + c] = fa_round(acc * (1.0f / l));
    if (a.lse && c == 0) a.lse[r] = fa_lse(mx, l, true);
  }
  ATTN_CIO_FLUSH(a);
}
#endif
