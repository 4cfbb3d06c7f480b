/* spec_sm90.c: the Hopper flash template's specs (see spec_sm90.h and templates/flash_sm90.cu). */
#include "spec_sm90.h"
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define SM90_SMEM_MAX (227LL * 1024) /* H100 / H200 opt-in shared memory per block */
/* registers of a consumer thread besides the accumulators: addresses, barriers' phases, the softmax's row state and
 * temporaries (ptxas, NVRTC 13: the defaults of d = 64..256 compile at 168 with no spills) */
#define SM90_REG_OTHER 40

attn_spec attn_spec_default_sm90(attn_dtype dtype, int d, int causal) {
  attn_spec s;
  memset(&s, 0, sizeof s);
  s.algo = ATTN_ALGO_FLASH;
  s.target = ATTN_TARGET_CUDA;
  s.dtype = dtype;
  s.d = d;
  s.causal = causal ? 1 : 0;
  s.impl = ATTN_IMPL_WGMMA;
  snprintf(s.arch, sizeof s.arch, "sm_90a");
  s.warps = 12; /* a producer warpgroup and two consumers */
  s.br = 128;
  s.bc = d <= 128 ? 128 : 80;
  s.stages = 2;
  (void)attn_spec_fit_sm90(&s, NULL, 0);
  return s;
}

int attn_sm90_npv(const attn_spec *s) { return ATTN_CUDA_RUP(attn_spec_dv(s), 16); }

int attn_sm90_accumulators(const attn_spec *s) { return attn_sm90_npv(s) / 2 + s->bc / 2 + s->bc / 4; }

int attn_sm90_consumer_regs(const attn_spec *s) { return s->warps / 4 - 1 == 3 ? 160 : 240; }

long long attn_spec_sm90_smem(const attn_spec *s) {
  return ATTN_FLASH_SM90_SMEM(s->d, attn_spec_dv(s), s->br, s->bc, s->stages);
}

int attn_spec_fit_sm90(attn_spec *s, char *err, size_t len) {
  while (attn_spec_sm90_smem(s) > SM90_SMEM_MAX && s->stages > 1) s->stages--;
  while ((attn_spec_sm90_smem(s) > SM90_SMEM_MAX ||
          attn_sm90_accumulators(s) > attn_sm90_consumer_regs(s) - SM90_REG_OTHER) &&
         s->bc > 16)
    s->bc -= 16;
  return attn_spec_check_sm90(s, err, len);
}

int attn_spec_check_sm90(const attn_spec *s, char *err, size_t len) {
  if (s->impl != ATTN_IMPL_WGMMA) return attn_errf(err, len, ATTN_EINVAL, "impl=%d is not wgmma", s->impl);
  if (s->target != ATTN_TARGET_CUDA || s->algo != ATTN_ALGO_FLASH)
    return attn_errf(err, len, ATTN_EINVAL, "impl=wgmma applies to cuda flash only (not %s %s)",
                     attn_algo_name(s->algo), attn_target_name(s->target));
  if (strcmp(s->arch, "sm_90a") != 0)
    return attn_errf(err, len, ATTN_EINVAL,
                     "impl=wgmma needs arch=sm_90a, not '%s' (wgmma and setmaxnreg exist on sm_90a only)", s->arch);
  if (s->dtype == ATTN_F32)
    return attn_errf(err, len, ATTN_EUNSUPPORTED, "impl=wgmma takes f16 or bf16 (wgmma has no fp32 inputs)");
  const int dv = attn_spec_dv(s);
  if (s->d % 8 || dv % 8 || s->d > 256 || dv > 256)
    return attn_errf(err, len, ATTN_EUNSUPPORTED,
                     "impl=wgmma needs d and d_v multiples of 8 up to 256 (d=%d d_v=%d): a TMA row stride is a "
                     "multiple of 16 bytes, and one wgmma's n at most 256",
                     s->d, dv);
  if (s->window || s->softcap || s->alibi)
    return attn_errf(err, len, ATTN_EUNSUPPORTED, "impl=wgmma applies no window, softcap or alibi (flash.cu does)");
  if (s->layout)
    return attn_errf(err, len, ATTN_EUNSUPPORTED,
                     "impl=wgmma reads dense Q, K and V only (layout=%d: varlen and paged run flash.cu)", s->layout);
  if (s->split || s->unroll || s->tile)
    return attn_errf(err, len, ATTN_EINVAL, "impl=wgmma takes no split, unroll or tile");
  if (s->warps != 8 && s->warps != 12 && s->warps != 16)
    return attn_errf(err, len, ATTN_EINVAL,
                     "impl=wgmma warps=%d must be 8, 12 or 16: a producer warpgroup and 1..3 consumer warpgroups",
                     s->warps);
  const int c = s->warps / 4 - 1;
  if (s->br != 64 * c)
    return attn_errf(err, len, ATTN_EINVAL, "impl=wgmma Br=%d must be %d: 64 query rows per consumer warpgroup x %d",
                     s->br, 64 * c, c);
  if (s->bc % 16 || s->bc < 16 || s->bc > 256)
    return attn_errf(err, len, ATTN_EINVAL,
                     "impl=wgmma Bc=%d must be a multiple of 16 in 16..256 (the n of S = Q K^T's wgmma)", s->bc);
  if (s->stages < 1 || s->stages > 4)
    return attn_errf(err, len, ATTN_EINVAL, "impl=wgmma stages=%d must be in 1..4", s->stages);
  const long long sm = attn_spec_sm90_smem(s);
  if (sm > SM90_SMEM_MAX)
    return attn_errf(err, len, ATTN_EUNSUPPORTED,
                     "flash impl=wgmma d=%d d_v=%d Br=%d Bc=%d stages=%d needs %lld bytes of shared memory per block "
                     "(rows padded to 64 columns), more than the %lld (227 KiB) of an H100: use fewer stages or a "
                     "smaller Bc",
                     s->d, dv, s->br, s->bc, s->stages, sm, SM90_SMEM_MAX);
  const int acc = attn_sm90_accumulators(s), regs = attn_sm90_consumer_regs(s);
  if (acc > regs - SM90_REG_OTHER)
    return attn_errf(err, len, ATTN_EUNSUPPORTED,
                     "flash impl=wgmma Bc=%d d_v=%d needs %d fp32 accumulators per consumer thread (O d_v/2, S Bc/2, "
                     "P Bc/4), more than the %d of its %d registers (setmaxnreg with %d consumer warpgroups) "
                     "left beside the rest: use a smaller Bc%s",
                     s->bc, dv, acc, regs - SM90_REG_OTHER, regs, c, c == 3 ? " or two consumer warpgroups" : "");
  return ATTN_OK;
}

int attn_sm90_tmap_params_of(const attn_spec *s, int which, const void *ptr, long long batch, long long heads,
                             long long heads_kv, long long n, long long n_kv, attn_sm90_tmap_params *out, char *err,
                             size_t len) {
  memset(out, 0, sizeof *out);
  if (which < 0 || which > 2) return attn_errf(err, len, ATTN_EINVAL, "tensor map %d: 0 (Q), 1 (K) or 2 (V)", which);
  if ((uintptr_t)ptr % 16)
    return attn_errf(err, len, ATTN_EINVAL, "%c = %p is not 16-byte aligned (TMA needs it)", "qkv"[which], ptr);
  if (heads_kv <= 0) heads_kv = heads;
  const long long cols = which == 2 ? attn_spec_dv(s) : s->d, rows = which == 0 ? n : n_kv;
  const long long planes = batch * (which == 0 ? heads : heads_kv);
  if (batch < 1 || heads < 1 || rows < 1 || planes > 0xffffffffLL || rows > 0x7fffffffLL)
    return attn_errf(err, len, ATTN_EUNSUPPORTED, "tensor map of %c: %lld x %lld rows is outside what TMA addresses",
                     "qkv"[which], planes, rows);
  out->data_type = s->dtype == ATTN_BF16 ? ATTN_SM90_TMAP_BF16 : ATTN_SM90_TMAP_F16;
  out->rank = 3;
  out->global_address = ptr;
  out->global_dim[0] = (unsigned long long)cols;
  out->global_dim[1] = (unsigned long long)rows;
  out->global_dim[2] = (unsigned long long)planes;
  out->global_strides[0] = (unsigned long long)cols * 2;
  out->global_strides[1] = (unsigned long long)(rows * cols * 2);
  out->box_dim[0] = ATTN_SM90_BOX_COLS;
  out->box_dim[1] = (unsigned)(which == 0 ? s->br : s->bc);
  out->box_dim[2] = 1;
  for (int i = 0; i < 3; i++) out->element_strides[i] = 1;
  out->interleave = 0;
  out->swizzle = ATTN_SM90_SWIZZLE_128B;
  out->l2_promotion = ATTN_SM90_L2_256B;
  out->oob_fill = 0;
  return ATTN_OK;
}

int attn_sm90_kargs_make(const attn_spec *s, const attn_cuda_kargs *a, attn_sm90_encode_fn enc, void *ctx,
                         attn_cuda_sm90_kargs *out, char *err, size_t len) {
  memset(out, 0, sizeof *out);
  out->a = *a;
  const void *ptrs[3] = {a->q, a->k, a->v};
  attn_cuda_tmap *maps[3] = {&out->tq, &out->tk, &out->tv};
  for (int i = 0; i < 3; i++) {
    attn_sm90_tmap_params prm;
    int rc = attn_sm90_tmap_params_of(s, i, ptrs[i], a->batch, a->heads, a->heads_kv, a->n, a->n_kv, &prm, err, len);
    if (rc != ATTN_OK) return rc;
    char why[256] = "";
    if (enc(ctx, maps[i], &prm, why, sizeof why) != 0)
      return attn_errf(err, len, ATTN_ERUNTIME, "encoding the tensor map of %c: %s", "qkv"[i], why);
  }
  return ATTN_OK;
}
