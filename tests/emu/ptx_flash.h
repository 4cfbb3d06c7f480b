/* ptx_flash.h: the PTX wrappers of templates/flash.cu on the emulator (tests/emu/cuda_emu.h). tests/cuda_emu.c puts
 * this file in place of the template's wrapper section, and only when that section is the text these definitions
 * were written from: its FNV-1a hash is
 *   attn-emu-section: 304cecaf3b64e1c1
 * If the section changes, review these definitions against it, then update the hash (the test prints the new one).
 * Each wrapper keeps its signature; the trailing site arguments default to the template's call site. */

__device__ __forceinline__ unsigned fa_saddr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
/* cp.async.cg.shared.global [dst], [src], 16, bytes */
__device__ __forceinline__ void fa_cp16(unsigned dst, const void *src, int bytes) {
  attn_emu::cp_async(dst, src, 16, bytes);
}
__device__ __forceinline__ void fa_commit() { attn_emu::cp_async_commit_group(); }
template <int N> __device__ __forceinline__ void fa_wait() { attn_emu::cp_async_wait_group(N); }
__device__ __forceinline__ float fa_ex2(float x) { return attn_emu::ex2_approx_ftz(x); }
#if ATTN_DTYPE != 0
__device__ __forceinline__ void fa_ldsm4(unsigned addr, unsigned &r0, unsigned &r1, unsigned &r2, unsigned &r3,
                                         ATTN_EMU_SITE) {
  uint32_t r[4];
  attn_emu::ldmatrix_x4(addr, false, r, file_, line_);
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}
__device__ __forceinline__ void fa_ldsm4t(unsigned addr, unsigned &r0, unsigned &r1, unsigned &r2, unsigned &r3,
                                          ATTN_EMU_SITE) {
  uint32_t r[4];
  attn_emu::ldmatrix_x4(addr, true, r, file_, line_);
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}
/* mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32 {c}, {a}, {b0, b1}, {c} */
__device__ __forceinline__ void fa_mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1, ATTN_EMU_SITE) {
  attn_emu::mma_m16n8k16(ATTN_DTYPE == 1 ? attn_emu::F16 : attn_emu::BF16, c, a, b0, b1, file_, line_);
}
#if ATTN_DTYPE == 1
/* cvt.f32.f16 */
__device__ __forceinline__ float fa_h2f(unsigned short h) { return attn_emu::f16_to_f32(h); }
#endif
/* cvt.rn.{f16,bf16}x2.f32 r, hi, lo */
__device__ __forceinline__ unsigned fa_pack(float lo, float hi) {
  return attn_emu::cvt_rn_x2(ATTN_DTYPE == 1 ? attn_emu::F16 : attn_emu::BF16, hi, lo);
}
#endif
