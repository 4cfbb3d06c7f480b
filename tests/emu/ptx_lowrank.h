/* ptx_lowrank.h: the PTX wrappers of templates/lowrank.cu on the emulator (tests/emu/cuda_emu.h), put in place of
 * the template's wrapper section only when that section is the text these definitions were written from: its
 * FNV-1a hash is
 *   attn-emu-section: 850c467b4ed60923
 * If the section changes, review these definitions against it, then update the hash (the test prints the new one). */

#if ATTN_DTYPE == 1
/* cvt.f32.f16 of the low 16 bits */
static __device__ __forceinline__ float lr_half(unsigned h) { return attn_emu::f16_to_f32((unsigned short)h); }
/* cvt.rn.f16x2.f32 r, hi, lo */
static __device__ __forceinline__ unsigned lr_pack(float lo, float hi) {
  return attn_emu::cvt_rn_x2(attn_emu::F16, hi, lo);
}
#elif ATTN_DTYPE == 2
static __device__ __forceinline__ float lr_half(unsigned h) { return __uint_as_float((h & 0xffffu) << 16); }
/* cvt.rn.bf16x2.f32 r, hi, lo */
static __device__ __forceinline__ unsigned lr_pack(float lo, float hi) {
  return attn_emu::cvt_rn_x2(attn_emu::BF16, hi, lo);
}
#endif
