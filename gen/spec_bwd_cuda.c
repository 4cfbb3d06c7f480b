/* spec_bwd_cuda.c: the CUDA flash backward's tiles, source and launch geometry (spec_bwd_cuda.h). */
#include "spec_bwd_cuda.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernel_abi_cuda.h"
#include "kernel_abi_cuda_bwd.h"

#define BWD_WARPS 4 /* 8 where 4 would hold more than 128 accumulators a thread at Br = Bc = 16 */
#define BWD_SMEM_PREF (99LL * 1024)
#define BWD_SMEM_MAX (163LL * 1024)
/* accumulators a thread may hold (dK and dV, or dQ) without spilling, measured with NVRTC 13 at sm_80 and sm_90:
 * f16/bf16 128 (ldmatrix fragments, one tile row's A at a time: ~200 registers at d = 128, Br = Bc = 64, 4 warps);
 * f32 128 at Br and Bc up to 32 and 112 from 64 (254 registers at d = 96 and 111, 64 x 64, 4 warps) */
#define BWD_ACC 128
#define BWD_ACC_F32_64 112
#define BWD_MAX_BLOCK 128 /* Br and Bc */

long long attn_spec_backward_cuda_smem(const attn_spec *s) {
  return ATTN_FLASH_BWD_SMEM((long long)attn_dtype_size(s->dtype), s->d, attn_spec_dv(s), s->br, s->bc, s->stages);
}

/* fp32 accumulators a thread holds for dK and dV (Bc x d and Bc x d_v in 16x8 tiles over the warps) */
static long bwd_acc(int b, int d, int dv, int warps) {
  const long tk = (long)(b / 16) * ATTN_CUDA_RUP(d, 16) / 8, tv = (long)(b / 16) * ATTN_CUDA_RUP(dv, 16) / 8;
  return 4 * ((tk + warps - 1) / warps + (tv + warps - 1) / warps);
}

/* the most accumulators a thread may hold where a block has Br or Bc rows (of dK/dV or of dQ) */
static long bwd_acc_limit(int rows, attn_dtype t) { return t == ATTN_F32 && rows >= 64 ? BWD_ACC_F32_64 : BWD_ACC; }

int attn_spec_check_backward_cuda(const attn_spec *s, long long smem_limit, char *err, size_t len) {
  if (s->algo != ATTN_ALGO_FLASH || s->target != ATTN_TARGET_CUDA)
    return attn_errf(err, len, ATTN_EUNSUPPORTED, "the CUDA backward is a flash cuda kernel, not %s %s",
                     attn_algo_name(s->algo), attn_target_name(s->target));
  const int dv = attn_spec_dv(s);
  if (!attn_d_supported(ATTN_TARGET_CUDA, s->d) || !attn_d_supported(ATTN_TARGET_CUDA, dv))
    return attn_errf(err, len, ATTN_EUNSUPPORTED, "d=%d d_v=%d: the CUDA backward takes d and d_v in 1..%d", s->d, dv,
                     ATTN_MAX_D);
  if ((int)s->dtype < ATTN_F32 || (int)s->dtype > ATTN_BF16 || (s->causal != 0 && s->causal != 1))
    return attn_errf(err, len, ATTN_EINVAL, "dtype %d causal %d: not a backward spec", (int)s->dtype, s->causal);
  if (s->br < 16 || s->br > BWD_MAX_BLOCK || s->br % 16 || s->bc < 16 || s->bc > BWD_MAX_BLOCK || s->bc % 16)
    return attn_errf(err, len, ATTN_EUNSUPPORTED, "backward Br=%d Bc=%d: each must be a multiple of 16 in 16..%d",
                     s->br, s->bc, BWD_MAX_BLOCK);
  if (s->warps != 2 && s->warps != 4 && s->warps != 8)
    return attn_errf(err, len, ATTN_EUNSUPPORTED, "backward warps=%d: 2, 4 or 8", s->warps);
  if (s->stages != 1 && s->stages != 2)
    return attn_errf(err, len, ATTN_EUNSUPPORTED, "backward stages=%d: 1 or 2", s->stages);
  if (s->dq != 0 && s->dq != 1)
    return attn_errf(err, len, ATTN_EINVAL, "backward dq=%d: 0 (deterministic) or 1 (atomic)", s->dq);
  if (s->split > 1 || s->unroll || s->tile || s->window || s->softcap || s->alibi)
    return attn_errf(err, len, ATTN_EINVAL,
                     "split=%d unroll=%d tile=%d window=%d softcap=%d alibi=%d: the CUDA backward takes none", s->split,
                     s->unroll, s->tile, s->window, s->softcap, s->alibi);
  const long long smem = attn_spec_backward_cuda_smem(s), lim = smem_limit > 0 ? smem_limit : BWD_SMEM_MAX;
  if (smem > lim)
    return attn_errf(err, len, ATTN_EUNSUPPORTED,
                     "backward %s d=%d d_v=%d Br=%d Bc=%d stages=%d needs %lld bytes of shared memory per block, more "
                     "than the %lld allowed", attn_dtype_name(s->dtype), s->d, dv, s->br, s->bc, s->stages, smem, lim);
  /* dq=atomic: no dQ blocks; the dK/dV blocks' 16 more registers (4 tiles of dS K_j at a time) spill nowhere at
   * these limits (NVRTC 13, sm_80 and sm_90: f32 d = 111 64 x 64 stays at 254 registers; cuda_emu_bwd --compile) */
  const long kv = bwd_acc(s->bc, s->d, dv, s->warps), q = s->dq ? 0 : bwd_acc(s->br, s->d, s->d, s->warps) / 2;
  if (kv > bwd_acc_limit(s->bc, s->dtype) || q > bwd_acc_limit(s->br, s->dtype))
    return attn_errf(err, len, ATTN_EUNSUPPORTED,
                     "backward %s d=%d d_v=%d Br=%d Bc=%d with %d warps: %ld dK/dV and %ld dQ fp32 accumulators a "
                     "thread, more than the %ld and %ld the registers hold without spilling (more warps or smaller "
                     "blocks)", attn_dtype_name(s->dtype), s->d, dv, s->br, s->bc, s->warps, kv, q,
                     bwd_acc_limit(s->bc, s->dtype), bwd_acc_limit(s->br, s->dtype));
  return ATTN_OK;
}

int attn_spec_backward_cuda(attn_dtype t, int d, int dv, int causal, const char *arch, attn_spec *out, char *err,
                            size_t len) {
  memset(out, 0, sizeof *out);
  if (!attn_d_supported(ATTN_TARGET_CUDA, d) || !attn_d_supported(ATTN_TARGET_CUDA, dv))
    return attn_errf(err, len, ATTN_EUNSUPPORTED, "d=%d d_v=%d: the CUDA backward takes d and d_v in 1..%d", d, dv,
                     ATTN_MAX_D);
  attn_spec s;
  memset(&s, 0, sizeof s);
  s.algo = ATTN_ALGO_FLASH;
  s.target = ATTN_TARGET_CUDA;
  s.dtype = t;
  s.d = d;
  s.dv = dv == d ? 0 : dv;
  s.causal = causal ? 1 : 0;
  s.warps = BWD_WARPS;
  s.stages = 1;
  snprintf(s.arch, sizeof s.arch, "%s", arch && *arch ? arch : "sm_80");
  /* the largest square tile, 4 warps before 8 (twice the warps halve each thread's accumulators), that fits 99 KiB
   * with one stage and whose accumulators the registers hold; else 16 within an A100's 163 KiB */
  char why[256];
  int found = 0;
  for (s.br = 64; s.br >= 16 && !found; s.br /= 2)
    for (s.warps = BWD_WARPS; s.warps <= 2 * BWD_WARPS && !found; s.warps *= 2) {
      s.bc = s.br;
      found = attn_spec_check_backward_cuda(&s, s.br > 16 ? BWD_SMEM_PREF : BWD_SMEM_MAX, why, sizeof why) == ATTN_OK;
    }
  if (!found)
    return attn_errf(err, len, ATTN_EUNSUPPORTED, "the CUDA backward of %s d=%d d_v=%d: no tile fits: %s",
                     attn_dtype_name(t), d, dv, why);
  s.br *= 2, s.warps /= 2; /* the loops stepped past the one found */
  s.bc = s.br;
  /* the next block's rows in flight while one is computed, where they fit beside it */
  s.stages = 2;
  if (attn_spec_backward_cuda_smem(&s) > BWD_SMEM_PREF) s.stages = 1;
  *out = s;
  return ATTN_OK;
}

char *attn_spec_source_backward_cuda(const attn_spec *s, char *err, size_t len) {
  if (s->algo != ATTN_ALGO_FLASH || s->target != ATTN_TARGET_CUDA) {
    attn_errf(err, len, ATTN_EINVAL, "the CUDA backward is a flash cuda spec");
    return NULL;
  }
  const char *abi = attn_template_text("kernel_abi_cuda.h"), *babi = attn_template_text("kernel_abi_cuda_bwd.h");
  const char *tmpl = attn_template_text("flash_bwd.cu");
  if (!abi || !babi || !tmpl) {
    attn_errf(err, len, ATTN_EUNSUPPORTED, "templates/flash_bwd.cu or its ABI headers are missing from this build");
    return NULL;
  }
  const char *arch = s->arch;
  int archn = 0;
  if (strncmp(arch, "sm_", 3) != 0 || sscanf(arch + 3, "%d", &archn) != 1 || archn < 80) {
    attn_errf(err, len, ATTN_EINVAL, "arch '%s': the CUDA backward needs sm_80 or later", arch);
    return NULL;
  }
  char canon[512];
  attn_spec_format(s, canon, sizeof canon);
  const size_t cap = strlen(canon) + strlen(abi) + strlen(babi) + strlen(tmpl) + 1024;
  char *out = malloc(cap);
  if (!out) {
    attn_errf(err, len, ATTN_ENOMEM, "out of memory generating flash_bwd.cu");
    return NULL;
  }
  snprintf(out, cap,
           "/* generated by attntune from templates/flash_bwd.cu: %s */\n"
           "#define ATTN_D %d\n#define ATTN_DV %d\n#define ATTN_BR %d\n#define ATTN_BC %d\n#define ATTN_CAUSAL %d\n"
           "#define ATTN_WARPS %d\n#define ATTN_STAGES %d\n#define ATTN_DTYPE %d\n#define ATTN_ARCH %d\n%s%s\n%s\n"
           "#line 1 \"templates/flash_bwd.cu\"\n%s",
           canon, s->d, attn_spec_dv(s), s->br, s->bc, s->causal, s->warps, s->stages, (int)s->dtype, archn,
           s->dq ? "#define ATTN_DQ_ATOMIC 1\n" : "", abi, babi, tmpl);
  return out;
}

int attn_cuda_backward_geometry(const attn_spec *s, long long batch, long long heads, long long heads_kv, long long n,
                                long long n_kv, attn_cuda_bwd_geom *g, char *err, size_t len) {
  memset(g, 0, sizeof *g);
  if (batch < 1 || heads < 1 || heads_kv < 1 || heads % heads_kv || n < 1 || n_kv < 1)
    return attn_errf(err, len, ATTN_EINVAL, "batch=%lld heads=%lld/%lld n=%lld n_kv=%lld: not a backward problem",
                     batch, heads, heads_kv, n, n_kv);
  if (n > 0x7fffffffLL || n_kv > 0x7fffffffLL)
    return attn_errf(err, len, ATTN_EUNSUPPORTED, "n=%lld n_kv=%lld: at most 2^31-1 rows on cuda", n, n_kv);
  const long long kv = batch * heads_kv * ((n_kv + s->bc - 1) / s->bc),
                  q = s->dq ? 0 : batch * heads * ((n + s->br - 1) / s->br);
  const long long rows = batch * heads * n, pre = (rows + s->warps - 1) / s->warps;
  const long long post = s->dq ? (rows * s->d + 32LL * s->warps - 1) / (32LL * s->warps) : 0;
  if (kv + q > 0x7fffffffLL || pre > 0x7fffffffLL || post > 0x7fffffffLL)
    return attn_errf(err, len, ATTN_EUNSUPPORTED, "%lld blocks exceed one launch's grid (2^31-1)", kv + q);
  g->block = 32u * (unsigned)s->warps;
  g->grid = (unsigned)(kv + q);
  g->pre_grid = (unsigned)pre;
  g->items_kv = (int)kv;
  g->items_q = (int)q;
  g->smem = attn_spec_backward_cuda_smem(s);
  g->post_grid = (unsigned)post;
  /* delta; dq=atomic: then the fp32 dQ from a 16-byte boundary (flash_bwd.cu's fb_dq_acc) */
  g->scratch = s->dq ? ((rows + 3) & ~3LL) * 4 + rows * s->d * 4 : rows * 4;
  return ATTN_OK;
}
