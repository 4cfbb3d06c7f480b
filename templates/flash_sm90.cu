/* flash_sm90.cu: FlashAttention forward for Hopper (sm_90a: wgmma, TMA, mbarriers, setmaxnreg), f16 and bf16 with
 * fp32 accumulators, specialised at compile time on ATTN_D, ATTN_DV, ATTN_BR, ATTN_BC, ATTN_CAUSAL, ATTN_WARPS,
 * ATTN_STAGES, ATTN_DTYPE and ATTN_SM90_NPV (d_v padded to 16, from gen/spec_sm90.c). Spec: flash cuda ... arch=sm_90a
 * impl=wgmma.
 *
 * Work: as flash.cu, one query block Q_i (Br rows of one batch*head) per thread block, blockIdx.x = bh*ceil(n/Br) + q
 * (causal: query block ceil(n/Br)-1-q, the heaviest first), key blocks K_j, V_j of Bc rows, online softmax in base 2.
 *
 * Warp specialisation: ATTN_WARPS = 4 (C + 1), warpgroup 0 the producer, warpgroups 1..C (C = 1..3) consumers that
 * own 64 query rows each (Br = 64 C). The producer gives registers back (setmaxnreg.dec to F9_REG_P) and one of its
 * threads issues every TMA copy; the consumers take them (setmaxnreg.inc to F9_REG_C).
 *
 * Producer: Q_i once, then K_j and V_j of each key block into stage j mod S of an S-stage ring, each tile as
 * ceil(cols/64) boxes of 64 columns (cp.async.bulk.tensor.3d with the maps of attn_cuda_sm90_kargs, 128-byte swizzle).
 * Every copy completes on an mbarrier that the producer armed with the tile's bytes (arrive.expect_tx): Q full, and
 * per stage K full and V full, whose phase k is the stage's k-th fill. Before refilling a stage's K (V) it waits for
 * that stage's K empty (V empty) barrier, phase k - 1: one arrival per consumer warp once the wgmma reading it has
 * completed. K and V are released apart because S_j = Q K_j^T is issued before P_{j-1} V_{j-1}: with one stage, K_j
 * can only arrive once K_{j-1} is released, while V_{j-1} is still needed.
 *
 * Consumers, per key block j (stage s): wait K full; S_j = Q K_j^T by wgmma.m64nBck16 with both operands in shared
 * memory (K-major descriptors, swizzle 128B, the TMA's), d/16 k-steps in one group; then O += P_{j-1} V_{j-1} by
 * wgmma.m64nDVk16 with P from registers (register-A form, V's descriptor MN-major: tnspB) in a second group; wait
 * for the first group only, so that S_j's mask and online softmax run on the CUDA cores while the tensor cores do
 * P_{j-1} V_{j-1}; then wait for the second, release stage s-1, rescale O by the new row maxima and round P_j into
 * the f16/bf16 A fragments of the next block's P V (only then: ptxas serializes every wgmma of a kernel where a
 * wgmma's input registers are written, or its accumulators read, while a group is pending, and the compile test
 * checks that it did not). Key block 0 is peeled (S_0 alone), so every loop iteration has the same groups in
 * flight. After the last block its P V, O / l and the stores. wgmma's accumulator layout per warp is mma.sync's
 * m16n8 one (rows g, g+8 of the warp's 16; columns 8i + 2t, +1), so P's A fragments are the S accumulators rounded
 * pairwise, as in flash.cu. Not done (FA3 does): ping-pong ordering of the two consumers' softmax by named
 * barriers, O staged in shared memory for a TMA store (each thread stores 4-byte pairs), a persistent grid.
 *
 * Shared memory (ATTN_FLASH_SM90_SMEM): Q (Br x d64), S x (K: Bc x d64, V: Bc x dv64), d64 = d padded to 64 columns;
 * each tile is ceil(d/64) chunks of rows x 128 bytes (1024-byte aligned), in the TMA's 128-byte swizzle: 16-byte
 * unit u of row r at u ^ (r mod 8). Then the mbarriers: Q full, and per stage K full, V full, K empty, V empty. Nothing but TMA writes the tiles (no generic-proxy stores).
 *
 * Padding: d to 16 (the k-step) and d_v to 16 (the instruction's n) in the products, to 64 in shared memory; the
 * TMA fills columns past d or d_v and rows past n or n_kv with zeros, so nothing is read or written outside the
 * tensors. d and d_v must be multiples of 8 (a TMA row stride is a multiple of 16 bytes) and at most 256.
 *
 * Masking: key j is visible to query i iff j < n_kv and, causal, j <= i + n_kv - n (bottom-right). Only key blocks
 * below L = min(n_kv, i0 + rows + n_kv - n) (causal) are loaded; blocks that cross the diagonal or the end of the
 * keys are masked elementwise. A row that sees no key outputs zeros (lse -inf). Grouped-query heads: K and V of
 * head h / (heads / heads_kv). attn_execute_lse's lse is written with O. Not applied: the score modifiers (window,
 * softcap, alibi: refused by attn_spec_check), and flash.cu's recomputation of rows spoiled by 0 * NaN from a key
 * hidden in a loaded block.
 *
 * I/O accounting (ATTN_COUNT_IO), entries per thread block as flash.cu counts them: reads rows*d + (d + d_v) *
 * min(Bc, n_kv - j0) per key block loaded, writes rows*d_v (the TMA's zero fill is not a read). */

#if ATTN_DTYPE == 0
#error "flash_sm90.cu takes f16 or bf16 (wgmma has no fp32 inputs)"
#endif
#if defined(ATTN_WINDOW) || defined(ATTN_SOFTCAP) || defined(ATTN_ALIBI)
#error "flash_sm90.cu applies no window, softcap or alibi"
#endif
#if defined(ATTN_LAYOUT)
#error "flash_sm90.cu reads dense Q, K, V only (no varlen or paged layout)"
#endif

#define F9_C (ATTN_WARPS / 4 - 1) /* consumer warpgroups */
#define F9_T (32 * ATTN_WARPS)
#define F9_BR ATTN_BR
#define F9_BC ATTN_BC
#define F9_S ATTN_STAGES
#define F9_D ATTN_D
#define F9_DV ATTN_DV
#define F9_DK ATTN_CUDA_RUP(F9_D, 16) /* the k extent of S = Q K^T */
#define F9_NV ATTN_SM90_NPV           /* the n extent of O += P V: d_v padded to 16 */
#define F9_CQ (ATTN_SM90_CP(F9_D) / 64)  /* 64-column chunks of a Q or K row */
#define F9_CV (ATTN_SM90_CP(F9_DV) / 64) /* ... of a V row */
#define F9_QCH (F9_BR * 128)             /* bytes of one chunk of Q */
#define F9_KCH (F9_BC * 128)             /* ... of K or V */
#define F9_QBYTES (F9_CQ * F9_QCH)
#define F9_KBYTES (F9_CQ * F9_KCH)
#define F9_VBYTES (F9_CV * F9_KCH)
#define F9_OFF_K(s) (F9_QBYTES + (s) * (F9_KBYTES + F9_VBYTES))
#define F9_OFF_V(s) (F9_OFF_K(s) + F9_KBYTES)
#define F9_OFF_BAR F9_OFF_K(F9_S)
#define F9_BAR_Q F9_OFF_BAR
#define F9_BAR_K(s) (F9_OFF_BAR + 8 + 8 * (s))
#define F9_BAR_V(s) (F9_OFF_BAR + 8 + 8 * F9_S + 8 * (s))
#define F9_BAR_KE(s) (F9_OFF_BAR + 8 + 16 * F9_S + 8 * (s))
#define F9_BAR_VE(s) (F9_OFF_BAR + 8 + 24 * F9_S + 8 * (s))
/* registers per thread after setmaxnreg: the block's 64K shared as 128 x P + 128 C x C' */
#define F9_REG_P (F9_C == 3 ? 32 : 24)
#define F9_REG_C (F9_C == 3 ? 160 : 240)

static_assert(F9_C >= 1 && F9_C <= 3 && F9_BR == 64 * F9_C, "Br = 64 rows per consumer warpgroup, 1..3 of them");
static_assert(F9_BC % 16 == 0 && F9_BC >= 16 && F9_BC <= 256, "Bc: the n of one wgmma, a multiple of 16");
static_assert(F9_D % 8 == 0 && F9_DV % 8 == 0 && F9_D <= 256 && F9_DV <= 256, "d, d_v: multiples of 8 up to 256");
static_assert(F9_NV == ATTN_CUDA_RUP(F9_DV, 16), "ATTN_SM90_NPV is d_v padded to 16");
static_assert(F9_S >= 1 && F9_S <= 4, "1..4 stages");
static_assert(F9_OFF_BAR + 8 * (1 + 4 * F9_S) == ATTN_FLASH_SM90_SMEM(F9_D, F9_DV, F9_BR, F9_BC, F9_S),
              "layout differs from ATTN_FLASH_SM90_SMEM");

typedef unsigned short f9_elem;
#define F9_NEG_INF (-__int_as_float(0x7f800000))
#define F9_STR(x) #x
#define F9_XSTR(x) F9_STR(x)
#define F9_CAT(a, b) a##b
#define F9_CAT2(a, b) F9_CAT(a, b)

/* ---- PTX wrappers ---- */
__device__ __forceinline__ unsigned f9_saddr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

/* mbarriers (shared::cta, 8 bytes each) */
__device__ __forceinline__ void f9_bar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
/* the inits visible to the async proxy (the TMA's complete_tx) before any copy names a barrier */
__device__ __forceinline__ void f9_fence_init() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
/* one arrival that also expects `bytes` of transactions in the current phase */
__device__ __forceinline__ void f9_bar_expect(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void f9_bar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/* until the phase of parity `parity` has completed */
__device__ __forceinline__ void f9_bar_wait(unsigned bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile("{\n.reg .pred %%f9p;\nmbarrier.try_wait.parity.shared::cta.b64 %%f9p, [%1], %2;\nselp.u32 %0, 1, 0, %%f9p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
  } while (!done);
}
/* box {64 columns, rows, 1} at (c0, c1, c2) of a tensor map into shared memory, completing on bar */
__device__ __forceinline__ void f9_tma(unsigned dst, const attn_cuda_tmap *map, int c0, int c1, int c2, unsigned bar) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, "
               "%4}], [%5];\n" ::"r"(dst),
               "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
               : "memory");
}

template <int R> __device__ __forceinline__ void f9_regs_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R> __device__ __forceinline__ void f9_regs_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}

/* wgmma */
__device__ __forceinline__ void f9_wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void f9_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void f9_wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* The registers of an in-flight wgmma are the hardware's until its wait_group: this empty statement, after the
 * wait, keeps the compiler from moving their reads or writes across it. */
template <int M> __device__ __forceinline__ void f9_keep(float (&x)[M]) {
#pragma unroll
  for (int i = 0; i < M; i++) asm volatile("" : "+f"(x[i])::"memory");
}
template <int M> __device__ __forceinline__ void f9_keep(unsigned (&x)[M][4]) {
#pragma unroll
  for (int i = 0; i < M; i++)
#pragma unroll
    for (int e = 0; e < 4; e++) asm volatile("" : "+r"(x[i][e])::"memory");
}

/* A shared-memory matrix descriptor: start address, leading and stride byte offsets (>> 4), swizzle mode 1 (128B);
 * base offset 0: every tile starts on a 1024-byte boundary (the swizzle's period). */
__device__ __forceinline__ unsigned long long f9_desc(unsigned addr, unsigned lbo, unsigned sbo) {
  return (unsigned long long)((addr & 0x3ffffu) >> 4) | ((unsigned long long)((lbo >> 4) & 0x3fffu) << 16) |
         ((unsigned long long)((sbo >> 4) & 0x3fffu) << 32) | (1ull << 62);
}

#if ATTN_DTYPE == 1
#define F9_WT ".f32.f16.f16"
#else
#define F9_WT ".f32.bf16.bf16"
#endif
#define F9_ACC(N) F9_CAT2(FA90_ACC_, N)
#define F9_OUT(N, d) F9_CAT2(FA90_OUT_, N)(d)
#define F9_X(k, N) F9_CAT2(F9_CAT2(FA90_X, k), F9_CAT2(_, N))
/* wgmma operand lists (generated): FA90_ACC_N the N/2 fp32 accumulators %0..%(N/2 - 1) of an m64nN tile, FA90_Xk_N
 * the k-th operand after them, FA90_OUT_N(d) their constraints; N = 16..256 in steps of 16. */
#define FA90_S8_0 "%0, %1, %2, %3, %4, %5, %6, %7"
#define FA90_S8_1 "%8, %9, %10, %11, %12, %13, %14, %15"
#define FA90_S8_2 "%16, %17, %18, %19, %20, %21, %22, %23"
#define FA90_S8_3 "%24, %25, %26, %27, %28, %29, %30, %31"
#define FA90_S8_4 "%32, %33, %34, %35, %36, %37, %38, %39"
#define FA90_S8_5 "%40, %41, %42, %43, %44, %45, %46, %47"
#define FA90_S8_6 "%48, %49, %50, %51, %52, %53, %54, %55"
#define FA90_S8_7 "%56, %57, %58, %59, %60, %61, %62, %63"
#define FA90_S8_8 "%64, %65, %66, %67, %68, %69, %70, %71"
#define FA90_S8_9 "%72, %73, %74, %75, %76, %77, %78, %79"
#define FA90_S8_10 "%80, %81, %82, %83, %84, %85, %86, %87"
#define FA90_S8_11 "%88, %89, %90, %91, %92, %93, %94, %95"
#define FA90_S8_12 "%96, %97, %98, %99, %100, %101, %102, %103"
#define FA90_S8_13 "%104, %105, %106, %107, %108, %109, %110, %111"
#define FA90_S8_14 "%112, %113, %114, %115, %116, %117, %118, %119"
#define FA90_S8_15 "%120, %121, %122, %123, %124, %125, %126, %127"
#define FA90_O8(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), \
  "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define FA90_ACC_16 "{" FA90_S8_0 "}"
#define FA90_OUT_16(d) FA90_O8(d, 0)
#define FA90_X0_16 "%8"
#define FA90_X1_16 "%9"
#define FA90_X2_16 "%10"
#define FA90_X3_16 "%11"
#define FA90_X4_16 "%12"
#define FA90_X5_16 "%13"
#define FA90_ACC_32 "{" FA90_S8_0 ", " FA90_S8_1 "}"
#define FA90_OUT_32(d) FA90_OUT_16(d), FA90_O8(d, 8)
#define FA90_X0_32 "%16"
#define FA90_X1_32 "%17"
#define FA90_X2_32 "%18"
#define FA90_X3_32 "%19"
#define FA90_X4_32 "%20"
#define FA90_X5_32 "%21"
#define FA90_ACC_48 "{" FA90_S8_0 ", " FA90_S8_1 ", " FA90_S8_2 "}"
#define FA90_OUT_48(d) FA90_OUT_32(d), FA90_O8(d, 16)
#define FA90_X0_48 "%24"
#define FA90_X1_48 "%25"
#define FA90_X2_48 "%26"
#define FA90_X3_48 "%27"
#define FA90_X4_48 "%28"
#define FA90_X5_48 "%29"
#define FA90_ACC_64 "{" FA90_S8_0 ", " FA90_S8_1 ", " FA90_S8_2 ", " FA90_S8_3 "}"
#define FA90_OUT_64(d) FA90_OUT_48(d), FA90_O8(d, 24)
#define FA90_X0_64 "%32"
#define FA90_X1_64 "%33"
#define FA90_X2_64 "%34"
#define FA90_X3_64 "%35"
#define FA90_X4_64 "%36"
#define FA90_X5_64 "%37"
#define FA90_ACC_80 "{" FA90_S8_0 ", " FA90_S8_1 ", " FA90_S8_2 ", " FA90_S8_3 ", " FA90_S8_4 "}"
#define FA90_OUT_80(d) FA90_OUT_64(d), FA90_O8(d, 32)
#define FA90_X0_80 "%40"
#define FA90_X1_80 "%41"
#define FA90_X2_80 "%42"
#define FA90_X3_80 "%43"
#define FA90_X4_80 "%44"
#define FA90_X5_80 "%45"
#define FA90_ACC_96 "{" FA90_S8_0 ", " FA90_S8_1 ", " FA90_S8_2 ", " FA90_S8_3 ", " FA90_S8_4 ", " FA90_S8_5 "}"
#define FA90_OUT_96(d) FA90_OUT_80(d), FA90_O8(d, 40)
#define FA90_X0_96 "%48"
#define FA90_X1_96 "%49"
#define FA90_X2_96 "%50"
#define FA90_X3_96 "%51"
#define FA90_X4_96 "%52"
#define FA90_X5_96 "%53"
#define FA90_ACC_112 "{" FA90_S8_0 ", " FA90_S8_1 ", " FA90_S8_2 ", " FA90_S8_3 ", " FA90_S8_4 ", " FA90_S8_5 ", " FA90_S8_6 "}"
#define FA90_OUT_112(d) FA90_OUT_96(d), FA90_O8(d, 48)
#define FA90_X0_112 "%56"
#define FA90_X1_112 "%57"
#define FA90_X2_112 "%58"
#define FA90_X3_112 "%59"
#define FA90_X4_112 "%60"
#define FA90_X5_112 "%61"
#define FA90_ACC_128 "{" FA90_S8_0 ", " FA90_S8_1 ", " FA90_S8_2 ", " FA90_S8_3 ", " FA90_S8_4 ", " FA90_S8_5 ", " FA90_S8_6 ", " FA90_S8_7 "}"
#define FA90_OUT_128(d) FA90_OUT_112(d), FA90_O8(d, 56)
#define FA90_X0_128 "%64"
#define FA90_X1_128 "%65"
#define FA90_X2_128 "%66"
#define FA90_X3_128 "%67"
#define FA90_X4_128 "%68"
#define FA90_X5_128 "%69"
#define FA90_ACC_144 "{" FA90_S8_0 ", " FA90_S8_1 ", " FA90_S8_2 ", " FA90_S8_3 ", " FA90_S8_4 ", " FA90_S8_5 ", " FA90_S8_6 ", " FA90_S8_7 ", " FA90_S8_8 "}"
#define FA90_OUT_144(d) FA90_OUT_128(d), FA90_O8(d, 64)
#define FA90_X0_144 "%72"
#define FA90_X1_144 "%73"
#define FA90_X2_144 "%74"
#define FA90_X3_144 "%75"
#define FA90_X4_144 "%76"
#define FA90_X5_144 "%77"
#define FA90_ACC_160 "{" FA90_S8_0 ", " FA90_S8_1 ", " FA90_S8_2 ", " FA90_S8_3 ", " FA90_S8_4 ", " FA90_S8_5 ", " FA90_S8_6 ", " FA90_S8_7 ", " FA90_S8_8 ", " FA90_S8_9 "}"
#define FA90_OUT_160(d) FA90_OUT_144(d), FA90_O8(d, 72)
#define FA90_X0_160 "%80"
#define FA90_X1_160 "%81"
#define FA90_X2_160 "%82"
#define FA90_X3_160 "%83"
#define FA90_X4_160 "%84"
#define FA90_X5_160 "%85"
#define FA90_ACC_176 "{" FA90_S8_0 ", " FA90_S8_1 ", " FA90_S8_2 ", " FA90_S8_3 ", " FA90_S8_4 ", " FA90_S8_5 ", " FA90_S8_6 ", " FA90_S8_7 ", " FA90_S8_8 ", " FA90_S8_9 ", " FA90_S8_10 "}"
#define FA90_OUT_176(d) FA90_OUT_160(d), FA90_O8(d, 80)
#define FA90_X0_176 "%88"
#define FA90_X1_176 "%89"
#define FA90_X2_176 "%90"
#define FA90_X3_176 "%91"
#define FA90_X4_176 "%92"
#define FA90_X5_176 "%93"
#define FA90_ACC_192 "{" FA90_S8_0 ", " FA90_S8_1 ", " FA90_S8_2 ", " FA90_S8_3 ", " FA90_S8_4 ", " FA90_S8_5 ", " FA90_S8_6 ", " FA90_S8_7 ", " FA90_S8_8 ", " FA90_S8_9 ", " FA90_S8_10 ", " FA90_S8_11 "}"
#define FA90_OUT_192(d) FA90_OUT_176(d), FA90_O8(d, 88)
#define FA90_X0_192 "%96"
#define FA90_X1_192 "%97"
#define FA90_X2_192 "%98"
#define FA90_X3_192 "%99"
#define FA90_X4_192 "%100"
#define FA90_X5_192 "%101"
#define FA90_ACC_208 "{" FA90_S8_0 ", " FA90_S8_1 ", " FA90_S8_2 ", " FA90_S8_3 ", " FA90_S8_4 ", " FA90_S8_5 ", " FA90_S8_6 ", " FA90_S8_7 ", " FA90_S8_8 ", " FA90_S8_9 ", " FA90_S8_10 ", " FA90_S8_11 ", " FA90_S8_12 "}"
#define FA90_OUT_208(d) FA90_OUT_192(d), FA90_O8(d, 96)
#define FA90_X0_208 "%104"
#define FA90_X1_208 "%105"
#define FA90_X2_208 "%106"
#define FA90_X3_208 "%107"
#define FA90_X4_208 "%108"
#define FA90_X5_208 "%109"
#define FA90_ACC_224 "{" FA90_S8_0 ", " FA90_S8_1 ", " FA90_S8_2 ", " FA90_S8_3 ", " FA90_S8_4 ", " FA90_S8_5 ", " FA90_S8_6 ", " FA90_S8_7 ", " FA90_S8_8 ", " FA90_S8_9 ", " FA90_S8_10 ", " FA90_S8_11 ", " FA90_S8_12 ", " FA90_S8_13 "}"
#define FA90_OUT_224(d) FA90_OUT_208(d), FA90_O8(d, 104)
#define FA90_X0_224 "%112"
#define FA90_X1_224 "%113"
#define FA90_X2_224 "%114"
#define FA90_X3_224 "%115"
#define FA90_X4_224 "%116"
#define FA90_X5_224 "%117"
#define FA90_ACC_240 "{" FA90_S8_0 ", " FA90_S8_1 ", " FA90_S8_2 ", " FA90_S8_3 ", " FA90_S8_4 ", " FA90_S8_5 ", " FA90_S8_6 ", " FA90_S8_7 ", " FA90_S8_8 ", " FA90_S8_9 ", " FA90_S8_10 ", " FA90_S8_11 ", " FA90_S8_12 ", " FA90_S8_13 ", " FA90_S8_14 "}"
#define FA90_OUT_240(d) FA90_OUT_224(d), FA90_O8(d, 112)
#define FA90_X0_240 "%120"
#define FA90_X1_240 "%121"
#define FA90_X2_240 "%122"
#define FA90_X3_240 "%123"
#define FA90_X4_240 "%124"
#define FA90_X5_240 "%125"
#define FA90_ACC_256 "{" FA90_S8_0 ", " FA90_S8_1 ", " FA90_S8_2 ", " FA90_S8_3 ", " FA90_S8_4 ", " FA90_S8_5 ", " FA90_S8_6 ", " FA90_S8_7 ", " FA90_S8_8 ", " FA90_S8_9 ", " FA90_S8_10 ", " FA90_S8_11 ", " FA90_S8_12 ", " FA90_S8_13 ", " FA90_S8_14 ", " FA90_S8_15 "}"
#define FA90_OUT_256(d) FA90_OUT_240(d), FA90_O8(d, 120)
#define FA90_X0_256 "%128"
#define FA90_X1_256 "%129"
#define FA90_X2_256 "%130"
#define FA90_X3_256 "%131"
#define FA90_X4_256 "%132"
#define FA90_X5_256 "%133"

/* S (64 x Bc, fp32) = or += Q K^T for one k-step: A and B from shared memory, both K-major (no transpose) */
__device__ __forceinline__ void f9_qk(float (&d)[F9_BC / 2], unsigned long long da, unsigned long long db, int acc) {
  asm volatile("{\n.reg .pred %%f9p;\nsetp.ne.b32 %%f9p, " F9_X(2, F9_BC) ", 0;\n"
               "wgmma.mma_async.sync.aligned.m64n" F9_XSTR(F9_BC) "k16" F9_WT " " F9_ACC(F9_BC) ", " F9_X(0, F9_BC)
               ", " F9_X(1, F9_BC) ", %%f9p, 1, 1, 0, 0;\n}\n"
               : F9_OUT(F9_BC, d)
               : "l"(da), "l"(db), "r"(acc));
}
/* O (64 x NV, fp32) += P V for one k-step of 16 keys: P's A fragments in registers, V from shared memory, MN-major
 * (imm-trans-b 1) */
__device__ __forceinline__ void f9_pv(float (&d)[F9_NV / 2], const unsigned (&a)[4], unsigned long long db) {
  asm volatile("{\n.reg .pred %%f9p;\nsetp.ne.b32 %%f9p, " F9_X(5, F9_NV) ", 0;\n"
               "wgmma.mma_async.sync.aligned.m64n" F9_XSTR(F9_NV) "k16" F9_WT " " F9_ACC(F9_NV) ", {" F9_X(0, F9_NV)
               ", " F9_X(1, F9_NV) ", " F9_X(2, F9_NV) ", " F9_X(3, F9_NV) "}, " F9_X(4, F9_NV) ", %%f9p, 1, 1, 1;\n}\n"
               : F9_OUT(F9_NV, d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

__device__ __forceinline__ float f9_ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
/* two floats rounded to nearest into one register: lo in bits 0..15 (the lower column), hi in 16..31 */
__device__ __forceinline__ unsigned f9_pack(float lo, float hi) {
  unsigned r;
#if ATTN_DTYPE == 1
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#else
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#endif
  return r;
}
/* ---- end of PTX wrappers ---- */

/* The producer: one thread issues Q's copies, then K_j and V_j of key blocks 0 .. nb-1 into the ring. */
__device__ __forceinline__ void f9_produce(const attn_cuda_sm90_kargs &p, unsigned sb, int i0, int bh, int bkv, int nb,
                                           int rows, int n_kv) {
  (void)rows;
  ATTN_CIO_DECL;
  f9_bar_expect(sb + F9_BAR_Q, F9_QBYTES);
#pragma unroll
  for (int c = 0; c < F9_CQ; c++) f9_tma(sb + c * F9_QCH, &p.tq, c * 64, i0, bh, sb + F9_BAR_Q);
  ATTN_CIO_READ((long long)rows * F9_D);
#pragma unroll 1
  for (int jb = 0; jb < nb; jb++) {
    const int s = jb % F9_S;
    const unsigned ph = (unsigned)(jb / F9_S) & 1u;
    const int j0 = jb * F9_BC;
    if (jb >= F9_S) f9_bar_wait(sb + F9_BAR_KE(s), ph ^ 1u); /* the consumers are done with K of fill jb - S */
    f9_bar_expect(sb + F9_BAR_K(s), F9_KBYTES);
#pragma unroll
    for (int c = 0; c < F9_CQ; c++) f9_tma(sb + F9_OFF_K(s) + c * F9_KCH, &p.tk, c * 64, j0, bkv, sb + F9_BAR_K(s));
    if (jb >= F9_S) f9_bar_wait(sb + F9_BAR_VE(s), ph ^ 1u); /* ... and with its V */
    f9_bar_expect(sb + F9_BAR_V(s), F9_VBYTES);
#pragma unroll
    for (int c = 0; c < F9_CV; c++) f9_tma(sb + F9_OFF_V(s) + c * F9_KCH, &p.tv, c * 64, j0, bkv, sb + F9_BAR_V(s));
    ATTN_CIO_READ((long long)(n_kv - j0 < F9_BC ? n_kv - j0 : F9_BC) * (F9_D + F9_DV));
  }
  ATTN_CIO_WRITE((long long)rows * F9_DV);
  ATTN_CIO_FLUSH(p.a);
}

/* The online softmax of one key block's scores (the thread's rows h = 0, 1: r0 + 8h), in base 2: sc scaled and masked
 * (keys at or past lim[h] hidden where the block is an edge), the row maxima m updated over the quad, alpha the
 * factor O and l are rescaled by, sum the thread's share of the new row sums, and P in fp32 in place of sc. */
__device__ __forceinline__ void f9_softmax(float (&sc)[F9_BC / 2], float sl2, bool edge, const int (&lim)[2], int t,
                                           float (&m)[2], float (&alpha)[2], float (&sum)[2]) {
#pragma unroll
  for (int h = 0; h < 2; h++) {
    float mx = m[h];
#pragma unroll
    for (int i = 0; i < F9_BC / 8; i++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        float x = sc[4 * i + 2 * h + e] * sl2;
        if (edge && 8 * i + 2 * t + e >= lim[h]) x = F9_NEG_INF;
        sc[4 * i + 2 * h + e] = x;
        mx = fmaxf(mx, x);
      }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mu = mx == F9_NEG_INF ? 0.0f : mx; /* a row with nothing visible yet: P = 0 */
    alpha[h] = f9_ex2(m[h] - mu);
    m[h] = mx;
    sum[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < F9_BC / 8; i++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const float pv = f9_ex2(sc[4 * i + 2 * h + e] - mu);
        sc[4 * i + 2 * h + e] = pv;
        sum[h] += pv;
      }
  }
}
/* P rounded into the A fragments of the block's 16-key k-steps: (row g, keys 16kk + 2t), (g + 8, same),
 * (g, 16kk + 8 + 2t), (g + 8, same). Only once no wgmma reading them is in flight: ptxas serializes every wgmma
 * when a register some wgmma takes as input is written while a group is pending. */
__device__ __forceinline__ void f9_round_p(const float (&sc)[F9_BC / 2], unsigned (&pn)[F9_BC / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < F9_BC / 16; kk++) {
    pn[kk][0] = f9_pack(sc[8 * kk + 0], sc[8 * kk + 1]);
    pn[kk][1] = f9_pack(sc[8 * kk + 2], sc[8 * kk + 3]);
    pn[kk][2] = f9_pack(sc[8 * kk + 4], sc[8 * kk + 5]);
    pn[kk][3] = f9_pack(sc[8 * kk + 6], sc[8 * kk + 7]);
  }
}

/* S = Q K^T of the key block in stage s (one commit group): d/16 k-steps, descriptors advanced 32 bytes a step within
 * a 64-column chunk and a chunk at a time across */
__device__ __forceinline__ void f9_issue_qk(float (&sc)[F9_BC / 2], unsigned qb, unsigned kb) {
#pragma unroll
  for (int i = 0; i < F9_BC / 2; i++) sc[i] = 0.0f; /* scale-d 0 ignores them; defined all the same */
  f9_keep(sc);   /* ... before the fence, where the compiler would otherwise sink their definition */
  f9_wg_fence(); /* O and P were last written by ordinary instructions */
#pragma unroll
  for (int kk = 0; kk < F9_DK / 16; kk++)
    f9_qk(sc, f9_desc(qb + (kk / 4) * F9_QCH + (kk % 4) * 32, 16, 1024),
          f9_desc(kb + (kk / 4) * F9_KCH + (kk % 4) * 32, 16, 1024), kk > 0);
  f9_wg_commit();
}
/* O += P V of the key block in stage s (one commit group): Bc/16 k-steps of 16 keys (2048 bytes of V rows each);
 * V's 64-column chunks Bc x 128 bytes apart (the leading byte offset), 8-key groups 1024 apart */
__device__ __forceinline__ void f9_issue_pv(float (&o)[F9_NV / 2], const unsigned (&pa)[F9_BC / 16][4], unsigned vb) {
#pragma unroll
  for (int kk = 0; kk < F9_BC / 16; kk++) f9_pv(o, pa[kk], f9_desc(vb + kk * 2048, F9_KCH, 1024));
  f9_wg_commit();
}

/* The visible keys of the thread's rows in key block j0: c < lim[h]; edge: the block has hidden keys for some row */
__device__ __forceinline__ bool f9_limits(int j0, int n_kv, long long e0, int r0, int (&lim)[2]) {
#pragma unroll
  for (int h = 0; h < 2; h++) {
    lim[h] = n_kv - j0 < F9_BC ? n_kv - j0 : F9_BC;
    if (ATTN_CAUSAL) {
      const long long dl = e0 + r0 + 8 * h - j0 + 1;
      lim[h] = dl < lim[h] ? (dl < 0 ? 0 : (int)dl) : lim[h];
    }
  }
  return j0 + F9_BC > n_kv || (ATTN_CAUSAL && (long long)j0 + F9_BC - 1 > e0);
}

/* A consumer warpgroup (cw = 0..C-1): rows 64 cw .. 64 cw + 63 of the block. The first key block is peeled so that
 * every iteration of the loop has the same wgmma groups in flight (ptxas serializes wgmma when a path it cannot rule
 * out reads accumulators of a group not yet waited for). */
__device__ __forceinline__ void f9_consume(const attn_cuda_kargs &a, unsigned sb, int cw, int i0, long long bh, int nb,
                                           int rows, int n, int n_kv) {
  const int lane = threadIdx.x & 31, wq = (threadIdx.x >> 5) & 3, g = lane >> 2, t = lane & 3;
  const int r0 = 64 * cw + 16 * wq + g; /* the thread's rows r0 and r0 + 8 of the block */
  const long long e0 = (long long)i0 + n_kv - n; /* i' of the block's first row */
  const float sl2 = a.scale * 1.4426950408889634f;
  float o[F9_NV / 2];
#pragma unroll
  for (int i = 0; i < F9_NV / 2; i++) o[i] = 0.0f;
  float m[2] = {F9_NEG_INF, F9_NEG_INF}, l[2] = {0.0f, 0.0f};
  unsigned pa[F9_BC / 16][4]; /* P of the previous key block, A fragments of its 16-key k-steps */
  const unsigned qb = sb + 64 * cw * 128;
  f9_bar_wait(sb + F9_BAR_Q, 0); /* loaded even when no key is visible: no copy may outlive the block */
  if (nb > 0) {
    /* key block 0: S_0, its softmax, P_0 */
    f9_bar_wait(sb + F9_BAR_K(0), 0);
    float sc[F9_BC / 2], alpha[2], sum[2];
    f9_issue_qk(sc, qb, sb + F9_OFF_K(0));
    f9_wg_wait<0>();
    f9_keep(sc);
    if (lane == 0) f9_bar_arrive(sb + F9_BAR_KE(0)); /* this warp is done with K_0 */
    int lim[2];
    const bool edge = f9_limits(0, n_kv, e0, r0, lim);
    f9_softmax(sc, sl2, edge, lim, t, m, alpha, sum);
    f9_round_p(sc, pa);
    l[0] = sum[0], l[1] = sum[1];
  }
  int sp = 0;
  unsigned php = 0;
#pragma unroll 1
  for (int jb = 1; jb < nb; jb++) {
    const int s = jb % F9_S;
    const unsigned ph = (unsigned)(jb / F9_S) & 1u;
    const int j0 = jb * F9_BC;
    f9_bar_wait(sb + F9_BAR_K(s), ph);
    f9_bar_wait(sb + F9_BAR_V(sp), php);
    float sc[F9_BC / 2], alpha[2], sum[2];
    f9_keep(o), f9_keep(pa); /* their last writes stay before the wgmma fence */
    f9_issue_qk(sc, qb, sb + F9_OFF_K(s));   /* S_j */
    f9_issue_pv(o, pa, sb + F9_OFF_V(sp));   /* O += P_{j-1} V_{j-1}, on the tensor cores during S_j's softmax */
    f9_wg_wait<1>();                         /* S_j */
    f9_keep(sc);
    if (lane == 0) f9_bar_arrive(sb + F9_BAR_KE(s)); /* this warp is done with K_j */
    int lim[2];
    const bool edge = f9_limits(j0, n_kv, e0, r0, lim);
    f9_softmax(sc, sl2, edge, lim, t, m, alpha, sum);
    f9_wg_wait<0>(); /* P_{j-1} V_{j-1} */
    f9_keep(o);
    f9_keep(pa);
    f9_keep(sc);
    if (lane == 0) f9_bar_arrive(sb + F9_BAR_VE(sp)); /* this warp is done with V_{j-1} */
#pragma unroll
    for (int i = 0; i < F9_NV / 8; i++) {
      o[4 * i + 0] *= alpha[0], o[4 * i + 1] *= alpha[0];
      o[4 * i + 2] *= alpha[1], o[4 * i + 3] *= alpha[1];
    }
    l[0] = l[0] * alpha[0] + sum[0];
    l[1] = l[1] * alpha[1] + sum[1];
    f9_round_p(sc, pa);
    sp = s, php = ph;
  }
  if (nb > 0) {
    f9_bar_wait(sb + F9_BAR_V(sp), php);
    f9_keep(o), f9_keep(pa);
    f9_wg_fence();
    f9_issue_pv(o, pa, sb + F9_OFF_V(sp));
    f9_wg_wait<0>();
    f9_keep(o);
    if (lane == 0) f9_bar_arrive(sb + F9_BAR_VE(sp));
  }
  /* O / l, rows that see no key 0; lse */
#pragma unroll
  for (int h = 0; h < 2; h++) {
    float lt = l[h];
    lt += __shfl_xor_sync(0xffffffffu, lt, 1);
    lt += __shfl_xor_sync(0xffffffffu, lt, 2);
    const int r = r0 + 8 * h;
    const bool sees = nb > 0 && (!ATTN_CAUSAL || e0 + r >= 0);
    const float inv = sees ? 1.0f / lt : 0.0f;
    if (r < rows) {
      f9_elem *orow = (f9_elem *)a.o + (bh * n + i0 + r) * F9_DV;
#pragma unroll
      for (int i = 0; i < F9_NV / 8; i++)
        if (8 * i < F9_DV)
          *(unsigned *)(orow + 8 * i + 2 * t) = f9_pack(o[4 * i + 2 * h] * inv, o[4 * i + 2 * h + 1] * inv);
      if (a.lse) {
        const float mu = m[h] == F9_NEG_INF ? 0.0f : m[h];
        a.lse[bh * n + i0 + r] = sees ? (mu + log2f(lt)) * 0.6931471805599453f : F9_NEG_INF;
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(F9_T, 1) attn_kernel(const __grid_constant__ attn_cuda_sm90_kargs p) {
  extern __shared__ __align__(1024) unsigned char f9_smem[];
  const attn_cuda_kargs &a = p.a;
  if ((long long)blockIdx.x >= a.grid_items) return; /* the whole block */
  const int tid = threadIdx.x, wg = tid >> 7;
  const int n = (int)a.n, n_kv = (int)a.n_kv; /* both < 2^31 (gen/launch.c) */
  const int nqb = (n - 1) / F9_BR + 1;
  const long long bh = blockIdx.x / nqb;
  int qb = blockIdx.x % nqb;
  if (ATTN_CAUSAL) qb = nqb - 1 - qb; /* heaviest first */
  const int i0 = qb * F9_BR;
  const int rows = n - i0 < F9_BR ? n - i0 : F9_BR;
  const long long heads = a.heads, heads_kv = a.heads_kv > 0 ? a.heads_kv : a.heads;
  const long long bkv = bh / heads * heads_kv + (bh % heads) / (heads / heads_kv);
  /* keys visible to some row of the block: [0, L), L = min(n_kv, max(0, i0 + rows + n_kv - n)) causal */
  int L = n_kv;
  if (ATTN_CAUSAL) {
    const long long e = (long long)i0 + rows + n_kv - n;
    L = e < 0 ? 0 : e < n_kv ? (int)e : n_kv;
  }
  const int nb = L > 0 ? (L - 1) / F9_BC + 1 : 0;
  const unsigned sb = f9_saddr(f9_smem);
  if (tid == 0) {
    f9_bar_init(sb + F9_BAR_Q, 1);
#pragma unroll
    for (int s = 0; s < F9_S; s++) {
      f9_bar_init(sb + F9_BAR_K(s), 1);
      f9_bar_init(sb + F9_BAR_V(s), 1);
      f9_bar_init(sb + F9_BAR_KE(s), 4 * F9_C); /* one arrival per consumer warp */
      f9_bar_init(sb + F9_BAR_VE(s), 4 * F9_C);
    }
    f9_fence_init();
  }
  __syncthreads();
  if (wg == 0) {
    f9_regs_dec<F9_REG_P>();
    if (tid == 0) f9_produce(p, sb, i0, (int)bh, (int)bkv, nb, rows, n_kv);
  } else {
    f9_regs_inc<F9_REG_C>();
    f9_consume(a, sb, wg - 1, i0, bh, nb, rows, n, n_kv);
  }
}
