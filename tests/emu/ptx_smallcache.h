/* ptx_smallcache.h: the PTX wrappers of templates/smallcache.cu on the emulator (tests/emu/cuda_emu.h), put in
 * place of the template's wrapper section (inside its anonymous namespace) only when that section is the text
 * these definitions were written from: its FNV-1a hash is
 *   attn-emu-section: d0124da0ad6c3abf
 * If the section changes, review these definitions against it, then update the hash (the test prints the new one). */

/* cvt.f32.f16 */
__device__ __forceinline__ float sc_h2f(unsigned short h) { return attn_emu::f16_to_f32(h); }
/* cvt.rn.{f16,bf16}x2.f32 r, hi, lo */
__device__ __forceinline__ unsigned sc_pack2(float lo, float hi) {
  return attn_emu::cvt_rn_x2(ATTN_DTYPE == 1 ? attn_emu::F16 : attn_emu::BF16, hi, lo);
}
/* ld.shared.v4.f32, ld.shared.v2.f32, ld.shared.f32 */
template <int W> __device__ __forceinline__ void sc_lds(unsigned addr, float (&x)[W]) {
  attn_emu::ld_shared(addr, x, W == 4 ? 16 : W == 2 ? 8 : 4);
}
/* st.shared.v4.f32 for W = 4, else st.shared.f32 of x[0] */
template <int W> __device__ __forceinline__ void sc_sts(unsigned addr, const float (&x)[W]) {
  attn_emu::st_shared(addr, x, W == 4 ? 16 : 4);
}
