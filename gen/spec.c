/* spec.c: kernel specs — names, defaults, validation, the canonical text form, and instantiation of a template
 * into source text. The canonical text is the key under which the database stores a kernel, so format and
 * parse must stay exact inverses. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spec.h"
#include "kernel_abi_cuda.h"
#include "spec_sm90.h"

#ifndef ATTN_VERSION
#define ATTN_VERSION "0"
#endif

static const char *const algo_names[] = {"auto", "flash", "smallcache", "lowrank"};
static const char *const target_names[] = {"auto", "cpu", "cuda"};
static const char *const dtype_names[] = {"f32", "f16", "bf16"};
static const char *const feature_names[] = {"taylor", "random"};

static int lookup(const char *const *names, int count, const char *s) {
  if (!s) return -1;
  for (int i = 0; i < count; i++)
    if (strcmp(names[i], s) == 0) return i;
  return -1;
}

const char *attn_algo_name(attn_algo a) { return (unsigned)a < 4 ? algo_names[a] : "?"; }
const char *attn_target_name(attn_target t) { return (unsigned)t < 3 ? target_names[t] : "?"; }
const char *attn_dtype_name(attn_dtype t) { return (unsigned)t < 3 ? dtype_names[t] : "?"; }
int attn_algo_parse(const char *s) { return lookup(algo_names, 4, s); }
int attn_target_parse(const char *s) { return lookup(target_names, 3, s); }
int attn_dtype_parse(const char *s) {
  if (s && strcmp(s, "fp32") == 0) return ATTN_F32;
  if (s && strcmp(s, "fp16") == 0) return ATTN_F16;
  return lookup(dtype_names, 3, s);
}
size_t attn_dtype_size(attn_dtype t) { return t == ATTN_F32 ? 4 : 2; }

int attn_d_supported(attn_target t, int d) {
  (void)t;
  return d >= 1 && d <= ATTN_MAX_D;
}

long attn_taylor_rank(int d, int g, long limit) {
  /* C(d+g, g) built incrementally: C(d+i, i) = C(d+i-1, i-1) * (d+i) / i stays integral at every step. */
  long r = 1;
  for (int i = 1; i <= g; i++) {
    if (r > limit / (d + i) + 1) return -1;
    r = r * (d + i) / i;
    if (r > limit) return -1;
  }
  return r;
}

/* Defaults: block sizes that keep the flash working set (2·Br·d + 2·Bc·d + Br·Bc floats) within a core's L2 on
 * the CPU, and within one thread block's shared memory on a GPU (the tuner searches around them). */
static int fit_tiles(attn_spec *s, char *err, size_t len);

/* The defaults before attn_spec_fit's shrinking for large d and d_v. */
static attn_spec base_default(attn_algo algo, attn_target target, attn_dtype dtype, int d, int causal) {
  attn_spec s;
  memset(&s, 0, sizeof s);
  s.algo = algo == ATTN_ALGO_AUTO ? ATTN_ALGO_FLASH : algo;
  s.target = target == ATTN_TARGET_CUDA ? ATTN_TARGET_CUDA : ATTN_TARGET_CPU;
  s.dtype = dtype;
  s.d = d;
  s.causal = causal ? 1 : 0;
  s.feature = ATTN_FEAT_TAYLOR;
  if (s.target == ATTN_TARGET_CPU) {
    s.br = 64;
    s.bc = d <= 128 ? 128 : 64;
    if (s.algo == ATTN_ALGO_SMALLCACHE) { s.br = 64; s.bc = 64; s.tile = 32; }
  } else {
    /* Each default fits an A100's 163 KiB of shared memory per block, so it launches on every sm_80+ GPU
     * (attn_spec_fit shrinks the tiles where d or d_v is large). */
    snprintf(s.arch, sizeof s.arch, "sm_80");
    s.warps = 4;
    s.stages = 2;
    s.br = 64;
    s.bc = d <= 128 ? 64 : 32;
    if (s.algo == ATTN_ALGO_FLASH && dtype == ATTN_F32) {
      s.bc = 32;
      if (d > 128) s.stages = 1;
    } else if (s.algo == ATTN_ALGO_FLASH) {
      /* tensor cores: two 16-row tiles per warp up to d = 128 (each K/V fragment feeds two mma), one beyond with
       * 8 warps and one K/V buffer (fp32 O and S accumulators of 128 x d and 128 x Bc fill the registers) */
      s.br = 128;
      s.bc = d <= 64 ? 64 : d <= 128 ? 32 : 48;
      if (d > 128) {
        s.warps = 8;
        s.stages = 1;
      }
    }
    if (s.algo == ATTN_ALGO_SMALLCACHE) {
      s.bc = 64;
      s.tile = 32;
      s.stages = 1;
    }
    if (s.algo == ATTN_ALGO_LOWRANK) {
      s.bc = 16;
      s.stages = 1;
    }
  }
  if (s.algo == ATTN_ALGO_LOWRANK) {
    s.feature = ATTN_FEAT_RANDOM;
    /* CUDA: the state, the key and query features and S of lowrank.cu fit 163 KiB at Bc 16 (d = 128: r <= 243) */
    s.rank = s.target != ATTN_TARGET_CUDA ? 256 : d > 128 ? 128 : d == 128 ? 240 : 256;
    s.degree = 2;
    s.seed = 1;
  }
  return s;
}

static void lowrank_feature(attn_spec *s);

attn_spec attn_spec_default(attn_algo algo, attn_target target, attn_dtype dtype, int d, int causal) {
  attn_spec s = base_default(algo, target, dtype, d, causal);
  if (s.target == ATTN_TARGET_CUDA) {
    lowrank_feature(&s);
    (void)fit_tiles(&s, NULL, 0);
  }
  return s;
}

/* Query rows per warp a flash kernel needs at least, in steps of which Br/warps comes: the tensor cores' 16-row tiles
 * (d_v split over VS warps), f32's 32/CL rows per warp step (CL = 8 lanes a row when d and d_v pad to multiples of
 * 32 floats, else 4). */
static int flash_rows_step(const attn_spec *s) {
  if (s->dtype != ATTN_F32) return 16;
  const long nc = ATTN_FLASH_DP(s->d) / 4, ncv = ATTN_FLASH_DVP(4, attn_spec_dv(s)) / 4;
  return nc % 8 == 0 && ncv % 8 == 0 ? 4 : 8;
}

/* fp32 accumulators per thread of a flash kernel, of O alone (o_only) or of O and S: the tensor-core layout holds
 * 16-row tiles of O (d_v/VS columns per warp) and S in mma fragments; the f32 layout float4 chunks of O and a row's
 * keys per lane (CL lanes a row). */
static long flash_accumulators_of(const attn_spec *s, int o_only) {
  const long es = (long)attn_dtype_size(s->dtype), dv = attn_spec_dv(s);
  const long dvp = ATTN_FLASH_DVP(es, dv), vs = ATTN_FLASH_VS(es, dv);
  if (s->warps < 1) return 0;
  if (es == 2) return (long)s->br * vs / s->warps / 16 * (dvp / vs / 2 + (o_only ? 0 : s->bc / 2));
  const long cl = flash_rows_step(s) == 4 ? 8 : 4;
  return (long)s->br / s->warps / (32 / cl) * (dvp / 4 / cl * 4 + (o_only ? 0 : s->bc / cl));
}
static long flash_accumulators(const attn_spec *s) { return flash_accumulators_of(s, 0); }

long long attn_spec_cuda_smem(const attn_spec *s) {
  const int dv = attn_spec_dv(s);
  switch (s->algo) {
  case ATTN_ALGO_FLASH:
    if (s->impl == ATTN_IMPL_WGMMA) return attn_spec_sm90_smem(s);
    return ATTN_FLASH_SMEM_DV((long long)attn_dtype_size(s->dtype), s->d, dv, s->br, s->bc, s->stages);
  case ATTN_ALGO_SMALLCACHE: return ATTN_SMALLCACHE_SMEM(s->d, s->br, s->tile);
  case ATTN_ALGO_LOWRANK: {
    const long r = s->feature == ATTN_FEAT_TAYLOR ? attn_taylor_rank(s->d, s->degree, 1L << 16) : s->rank;
    return r < 1 ? -1 : ATTN_LOWRANK_SMEM_DV(s->d, dv, r, s->bc);
  }
  default: return -1;
  }
}

/* The defaults keep each block within an A100's opt-in shared memory, and the flash accumulators within what a
 * thread holds without spilling much (the defaults up to d = 256 use 160 and fewer). */
#define FIT_SMEM (163LL * 1024)
#define FIT_ACC 160

int attn_spec_fit(attn_spec *s, char *err, size_t len) {
  if (!s || s->target != ATTN_TARGET_CUDA) return ATTN_OK;
  /* from the default tiles of (algo, dtype, d): those of d_v = d may have been shrunk more than d_v needs */
  const attn_spec b = base_default(s->algo, s->target, s->dtype, s->d, s->causal);
  s->br = b.br;
  s->bc = b.bc;
  s->warps = b.warps;
  s->stages = b.stages;
  if (s->algo == ATTN_ALGO_LOWRANK && s->feature == ATTN_FEAT_RANDOM) s->rank = b.rank;
  if (s->algo == ATTN_ALGO_LOWRANK && s->feature == ATTN_FEAT_TAYLOR &&
      (attn_spec_cuda_smem(s) > FIT_SMEM || attn_spec_cuda_smem(s) < 0)) {
    s->feature = ATTN_FEAT_RANDOM; /* d_v too large for the Taylor state */
    s->rank = b.rank;
  }
  return fit_tiles(s, err, len);
}

/* CUDA lowrank: Taylor features of degree 2 wherever their rank C(d+2, 2) fits the shared memory (d <= 32): within
 * 3% of exact attention at the default scale on random inputs for d >= 8 (tests/cuda_emu's LOWRANK_TOLERANCE, 5%),
 * where 256 random features are 25-60% off at d = 16..64; random features beyond. Below, the default scale
 * 1/sqrt(d) leaves the logits near 1, where degree 2 is 5-8% off (d = 1..5): degree 4 there, whose rank C(d+4, 4)
 * stays within degree 2's at d = 32 (561) up to d = 8 (495), is within 0.3%. */
static void lowrank_feature(attn_spec *s) {
  if (s->algo != ATTN_ALGO_LOWRANK) return;
  attn_spec t = *s;
  t.feature = ATTN_FEAT_TAYLOR;
  t.degree = s->d <= 8 ? 4 : 2;
  t.rank = 0;
  const long long sm = attn_spec_cuda_smem(&t); /* -1: the rank is past its limit */
  if (sm > 0 && sm <= FIT_SMEM) *s = t;
}

static int fit_tiles(attn_spec *s, char *err, size_t len) {
  if (s->algo == ATTN_ALGO_FLASH) {
    const int es = (int)attn_dtype_size(s->dtype), vs = ATTN_FLASH_VS(es, attn_spec_dv(s));
    const int rw = flash_rows_step(s), bc0 = s->bc; /* rows per warp, at least; the Bc asked for */
    /* on the tensor cores the d_v split needs whole groups of warps */
    while (s->warps % vs) s->warps *= 2;
    while (s->br % (rw * s->warps / vs)) s->br *= 2;
    /* accumulators: fewer rows per warp; shared memory: fewer K/V buffers, then fewer keys a block, then fewer
     * rows, then fewer warps with them (Br = rows per warp x warps) */
    while (flash_accumulators(s) > FIT_ACC && s->br > rw * s->warps / vs) s->br /= 2;
    /* f32: O alone past 128 words a thread spills (d = 576 at 8 rows a warp); 4 rows a warp halve it */
    while (es == 4 && flash_accumulators_of(s, 1) > 128 && s->br > rw * s->warps) s->br /= 2;
    while (attn_spec_cuda_smem(s) > FIT_SMEM) {
      if (s->stages > 1) s->stages--;
      else if (s->bc > 16) s->bc -= 16;
      else if (s->br > rw * s->warps / vs) s->br /= 2;
      else if (s->warps > vs) s->warps /= 2, s->br /= 2;
      else break;
    }
    while (flash_accumulators(s) > FIT_ACC && s->bc > 16) s->bc -= 16;
    /* fewer rows or warps may leave room for the keys given up before them */
    for (attn_spec t = *s; t.bc + 16 <= bc0;) {
      t.bc += 16;
      if (attn_spec_cuda_smem(&t) > FIT_SMEM || flash_accumulators(&t) > FIT_ACC) break;
      *s = t;
    }
  } else if (s->algo == ATTN_ALGO_LOWRANK && s->feature == ATTN_FEAT_RANDOM) {
    while (attn_spec_cuda_smem(s) > FIT_SMEM && s->rank > 16) s->rank -= 16;
  }
  long long sm = attn_spec_cuda_smem(s);
  if (sm > FIT_SMEM)
    return attn_errf(err, len, ATTN_EUNSUPPORTED,
                     "%s d=%d d_v=%d needs %lld bytes of shared memory per block at its smallest tiles, more than "
                     "the %lld an A100 allows",
                     attn_algo_name(s->algo), s->d, attn_spec_dv(s), sm, FIT_SMEM);
  return ATTN_OK;
}

int attn_errf(char *err, size_t len, int code, const char *fmt, ...) {
  if (err && len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
  }
  return code;
}

static int arch_number(const char *arch) {
  if (strncmp(arch, "sm_", 3) != 0 || !isdigit((unsigned char)arch[3])) return -1;
  char *end;
  long v = strtol(arch + 3, &end, 10);
  if (v < 50 || v > 200 || (*end && strcmp(end, "a") != 0)) return -1;
  return (int)v;
}

int attn_spec_check(const attn_spec *s, char *err, size_t len) {
  if (!s) return attn_errf(err, len, ATTN_EINVAL, "spec is NULL");
  if (s->algo != ATTN_ALGO_FLASH && s->algo != ATTN_ALGO_SMALLCACHE && s->algo != ATTN_ALGO_LOWRANK)
    return attn_errf(err, len, ATTN_EINVAL, "algorithm must be flash, smallcache or lowrank");
  if (s->target != ATTN_TARGET_CPU && s->target != ATTN_TARGET_CUDA)
    return attn_errf(err, len, ATTN_EINVAL, "target must be cpu or cuda");
  const char *tn = attn_target_name(s->target);
  if ((unsigned)s->dtype > ATTN_BF16) return attn_errf(err, len, ATTN_EINVAL, "unknown dtype %d", (int)s->dtype);
  if (!attn_d_supported(s->target, s->d))
    return attn_errf(err, len, ATTN_EUNSUPPORTED, "d=%d is not supported on %s: d must be in 1..%d", s->d, tn,
                     ATTN_MAX_D);
  if (s->dv < 0 || (s->dv > 0 && !attn_d_supported(s->target, s->dv)))
    return attn_errf(err, len, ATTN_EUNSUPPORTED, "dv=%d is not supported on %s: d_v must be in 1..%d (0: same as d)",
                     s->dv, tn, ATTN_MAX_D);
  if (s->br < 1 || s->br > 1024 || s->bc < 1 || s->bc > 1024)
    return attn_errf(err, len, ATTN_EINVAL, "block sizes Br=%d Bc=%d must be in 1..1024", s->br, s->bc);
  if (s->causal != 0 && s->causal != 1) return attn_errf(err, len, ATTN_EINVAL, "causal must be 0 or 1");
  if (s->unroll < 0 || s->unroll > 16) return attn_errf(err, len, ATTN_EINVAL, "unroll=%d must be in 0..16", s->unroll);
  if (s->tile < 0 || s->tile > 1024) return attn_errf(err, len, ATTN_EINVAL, "tile=%d must be in 0..1024", s->tile);
  if (s->split < 0 || s->split > 64)
    return attn_errf(err, len, ATTN_EINVAL, "split=%d must be in 0..64 (key-range parts per query block; 0, 1: none)",
                     s->split);
  /* CUDA split-KV (templates/flash.cu: partials in the scratch, then attn_combine): dense, unmasked mma.sync flash;
   * split=1 would be a second key for the kernel without split. Causal is the plan's: a causal n = 1 plan, whose row
   * sees every key, builds the kernel without causal (attn_cuda_decode_unmasked); other causal plans refuse split */
  if (s->target == ATTN_TARGET_CUDA && s->split == 1)
    return attn_errf(err, len, ATTN_EINVAL, "split=1 is no split: cuda specs keep split=0 for that");
  if (s->target == ATTN_TARGET_CUDA && s->split > 1 &&
      (s->algo != ATTN_ALGO_FLASH || s->window || s->layout || s->impl == ATTN_IMPL_WGMMA))
    return attn_errf(err, len, ATTN_EUNSUPPORTED,
                     "split=%d on cuda is for dense flash without window, layout or impl=wgmma (this is %s%s%s%s)",
                     s->split, attn_algo_name(s->algo), s->window ? " window" : "",
                     s->layout ? " layout" : "", s->impl == ATTN_IMPL_WGMMA ? " impl=wgmma" : "");
  if (s->split > 1 && s->algo != ATTN_ALGO_FLASH)
    return attn_errf(err, len, ATTN_EINVAL, "split=%d applies to flash kernels only, not %s", s->split,
                     attn_algo_name(s->algo));
  if ((unsigned)s->window > 1 || (unsigned)s->softcap > 1 || (unsigned)s->alibi > 1)
    return attn_errf(err, len, ATTN_EINVAL,
                     "window=%d softcap=%d alibi=%d: each must be 0 or 1 (the kernel applies it)", s->window,
                     s->softcap, s->alibi);
  if (s->target == ATTN_TARGET_CPU && s->algo == ATTN_ALGO_LOWRANK && (s->window || s->softcap || s->alibi))
    return attn_errf(err, len, ATTN_EUNSUPPORTED,
                     "lowrank cannot apply window, softcap or alibi: its features approximate exp(q.k) alone (use flash)");
  if (s->target == ATTN_TARGET_CUDA && s->algo != ATTN_ALGO_FLASH && (s->window || s->softcap || s->alibi))
    return attn_errf(err, len, ATTN_EUNSUPPORTED, "%s on cuda applies no window, softcap or alibi (cuda flash does)",
                     attn_algo_name(s->algo));
  if ((unsigned)s->layout > 3)
    return attn_errf(err, len, ATTN_EINVAL,
                     "layout=%d must be 0 (dense), 1 (varlen), 2 (paged) or 3 (paged decode, query heads packed)",
                     s->layout);
  /* CPU flash: layout=2 is the paged kernel (runtime/paged.c); its varlen runs the dense kernel on token-major rows */
  if (s->layout && s->target == ATTN_TARGET_CPU && s->algo == ATTN_ALGO_FLASH && s->layout != 2)
    return attn_errf(err, len, ATTN_EUNSUPPORTED,
                     "layout=%d: cpu flash has only layout=2 (paged); its varlen runs the dense kernel", s->layout);
  if (s->layout && s->algo != ATTN_ALGO_FLASH)
    return attn_errf(err, len, ATTN_EUNSUPPORTED,
                     "layout=%d: only flash has varlen and paged kernels (cuda 1, 2, 3; cpu 2), not %s %s", s->layout,
                     attn_algo_name(s->algo), attn_target_name(s->target));
  if ((unsigned)s->impl > ATTN_IMPL_WGMMA)
    return attn_errf(err, len, ATTN_EINVAL, "impl=%d must be 0 (mma.sync) or 1 (wgmma)", s->impl);
  if ((unsigned)s->dq > 1)
    return attn_errf(err, len, ATTN_EINVAL, "dq=%d must be 0 (deterministic) or 1 (atomic)", s->dq);
  if (s->dq && (s->target != ATTN_TARGET_CUDA || s->algo != ATTN_ALGO_FLASH || s->impl != ATTN_IMPL_MMA))
    return attn_errf(err, len, ATTN_EUNSUPPORTED, "dq=atomic: only the cuda flash backward sums dQ by atomics");
  if (s->impl != ATTN_IMPL_MMA) {
    const int rc = attn_spec_check_sm90(s, err, len); /* its own limits, before the common ones below */
    if (rc != ATTN_OK) return rc;
  }
  if (s->target == ATTN_TARGET_CUDA) {
    if (s->warps < 1 || s->warps > 16) return attn_errf(err, len, ATTN_EINVAL, "warps=%d must be in 1..16", s->warps);
    if (s->stages < 1 || s->stages > 4) return attn_errf(err, len, ATTN_EINVAL, "stages=%d must be in 1..4", s->stages);
    if (s->br % 16 || s->bc % 16)
      return attn_errf(err, len, ATTN_EINVAL, "cuda block sizes must be multiples of 16 (Br=%d Bc=%d)", s->br, s->bc);
    if (s->algo == ATTN_ALGO_FLASH && s->impl == ATTN_IMPL_MMA) {
      const int es = (int)attn_dtype_size(s->dtype), vs = ATTN_FLASH_VS(es, attn_spec_dv(s));
      const int rw = flash_rows_step(s);
      if (s->warps % vs)
        return attn_errf(err, len, ATTN_EINVAL,
                         "warps=%d must be a multiple of %d: d_v=%d is split over %d warps sharing the query rows",
                         s->warps, vs, attn_spec_dv(s), vs);
      if (s->br % (rw * s->warps / vs) != 0)
        return attn_errf(err, len, ATTN_EINVAL, "Br=%d must be a multiple of %d rows per warp x %d warps", s->br, rw,
                         s->warps / vs);
      const long acc = flash_accumulators(s);
      if (acc > 255)
        return attn_errf(err, len, ATTN_EUNSUPPORTED,
                         "flash Br=%d Bc=%d warps=%d d_v=%d needs %ld fp32 accumulators per thread, more than the 255 "
                         "registers a thread has: use fewer rows per warp or a smaller Bc",
                         s->br, s->bc, s->warps, attn_spec_dv(s), acc);
    }
    /* the largest opt-in shared memory of any GPU (H100: 227 KiB); attn_spec_fit keeps defaults within an A100's */
    const long long sm = attn_spec_cuda_smem(s);
    if (sm > 227LL * 1024)
      return attn_errf(err, len, ATTN_EUNSUPPORTED,
                       "%s d=%d d_v=%d Br=%d Bc=%d needs %lld bytes of shared memory per block, more than the %lld "
                       "(227 KiB) of any GPU: use smaller tiles%s",
                       attn_algo_name(s->algo), s->d, attn_spec_dv(s), s->br, s->bc, sm, 227LL * 1024,
                       s->algo == ATTN_ALGO_LOWRANK  ? " or a smaller rank"
                       : s->algo == ATTN_ALGO_FLASH ? " or fewer stages"
                                                    : "");
    if (arch_number(s->arch) < 0)
      return attn_errf(err, len, ATTN_EINVAL, "arch '%s' is not of the form sm_80, sm_90 or sm_90a", s->arch);
  } else {
    if (s->warps != 0 || s->stages != 0 || s->arch[0])
      return attn_errf(err, len, ATTN_EINVAL, "warps, stages and arch apply to cuda kernels only");
  }
  if (s->algo == ATTN_ALGO_LOWRANK) {
    if (s->feature == ATTN_FEAT_TAYLOR) {
      if (s->degree < 2 || s->degree > 8 || s->degree % 2)
        return attn_errf(err, len, ATTN_EINVAL,
                    "Taylor degree g=%d must be even in 2..8 (an even degree keeps the polynomial of exp positive)",
                    s->degree);
      if (attn_taylor_rank(s->d, s->degree, 1L << 16) < 0)
        return attn_errf(err, len, ATTN_EUNSUPPORTED,
                    "Taylor features of degree %d for d=%d have rank C(d+g,g) > 65536: use random features",
                    s->degree, s->d);
    } else if (s->feature == ATTN_FEAT_RANDOM) {
      if (s->rank < 1 || s->rank > 65536)
        return attn_errf(err, len, ATTN_EINVAL, "random features rank=%d must be in 1..65536", s->rank);
    } else {
      return attn_errf(err, len, ATTN_EINVAL, "unknown feature map %d", (int)s->feature);
    }
  }
  return ATTN_OK;
}

int attn_spec_format(const attn_spec *s, char *buf, size_t len) {
  /* split only when it changes the kernel: the keys of every kernel without it stay as they were */
  char split[96] = "";
  int k = 0;
  if (attn_spec_dv(s) != s->d) k = snprintf(split, sizeof split, " dv=%d", s->dv);
  if (s->split > 1) k += snprintf(split + k, sizeof split - (size_t)k, " split=%d", s->split);
  k += snprintf(split + k, sizeof split - (size_t)k, "%s%s%s", s->window ? " window=1" : "",
                s->softcap ? " softcap=1" : "", s->alibi ? " alibi=1" : "");
  if (s->layout) snprintf(split + k, sizeof split - (size_t)k, " layout=%d", s->layout);
  if (s->impl == ATTN_IMPL_WGMMA) strncat(split, " impl=wgmma", sizeof split - strlen(split) - 1);
  if (s->dq) strncat(split, " dq=atomic", sizeof split - strlen(split) - 1);
  return snprintf(buf, len,
                  "%s %s %s d=%d br=%d bc=%d causal=%d unroll=%d warps=%d stages=%d arch=%s tile=%d feature=%s "
                  "degree=%d rank=%d seed=%u%s",
                  attn_algo_name(s->algo), attn_target_name(s->target), attn_dtype_name(s->dtype), s->d, s->br,
                  s->bc, s->causal, s->unroll, s->warps, s->stages, s->arch[0] ? s->arch : "-", s->tile,
                  (unsigned)s->feature < 2 ? feature_names[s->feature] : "?", s->degree, s->rank, s->seed, split);
}

static int parse_int(const char *v, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi) return -1;
  *out = x;
  return 0;
}

int attn_spec_parse(const char *text, attn_spec *s, char *err, size_t len) {
  attn_spec t;
  int rc = attn_spec_parse_fields(text, &t, err, len);
  if (rc == ATTN_OK) rc = attn_spec_check(&t, err, len);
  if (rc == ATTN_OK) *s = t;
  return rc;
}

int attn_spec_parse_fields(const char *text, attn_spec *s, char *err, size_t len) {
  if (!text || !s) return attn_errf(err, len, ATTN_EINVAL, "spec text is NULL");
  char buf[512];
  if (strlen(text) >= sizeof buf) return attn_errf(err, len, ATTN_EINVAL, "spec text is too long");
  strcpy(buf, text);
  attn_spec t;
  memset(&t, 0, sizeof t);
  char *save = NULL;
  int pos = 0, nseen = 0;
  const char *seen[48]; /* the keys so far: a key given twice would mean one thing here and another to a reader */
  for (char *tok = strtok_r(buf, " \t\n", &save); tok; tok = strtok_r(NULL, " \t\n", &save), pos++) {
    if (pos == 0 || pos == 1 || pos == 2) {
      int v = pos == 0 ? attn_algo_parse(tok) : pos == 1 ? attn_target_parse(tok) : attn_dtype_parse(tok);
      if (v < 0 || (pos < 2 && v == 0))
        return attn_errf(err, len, ATTN_EINVAL, "spec '%s': unknown %s '%s'", text,
                    pos == 0 ? "algorithm" : pos == 1 ? "target" : "dtype", tok);
      if (pos == 0) t.algo = (attn_algo)v;
      else if (pos == 1) t.target = (attn_target)v;
      else t.dtype = (attn_dtype)v;
      continue;
    }
    char *eq = strchr(tok, '=');
    if (!eq) return attn_errf(err, len, ATTN_EINVAL, "spec '%s': '%s' is not key=value", text, tok);
    *eq = '\0';
    const char *key = tok, *val = eq + 1;
    for (int i = 0; i < nseen; i++)
      if (strcmp(seen[i], key) == 0) return attn_errf(err, len, ATTN_EINVAL, "spec '%s': %s= given twice", text, key);
    if (nseen == (int)(sizeof seen / sizeof seen[0]))
      return attn_errf(err, len, ATTN_EINVAL, "spec '%s': too many key=value fields", text);
    seen[nseen++] = key;
    long x = 0;
    static const struct { const char *key; size_t off; } ints[] = {
        {"d", offsetof(attn_spec, d)},           {"br", offsetof(attn_spec, br)},
        {"bc", offsetof(attn_spec, bc)},         {"causal", offsetof(attn_spec, causal)},
        {"unroll", offsetof(attn_spec, unroll)}, {"warps", offsetof(attn_spec, warps)},
        {"stages", offsetof(attn_spec, stages)}, {"tile", offsetof(attn_spec, tile)},
        {"degree", offsetof(attn_spec, degree)}, {"rank", offsetof(attn_spec, rank)},
        {"split", offsetof(attn_spec, split)},   {"dv", offsetof(attn_spec, dv)},
        {"window", offsetof(attn_spec, window)}, {"softcap", offsetof(attn_spec, softcap)},
        {"alibi", offsetof(attn_spec, alibi)},   {"layout", offsetof(attn_spec, layout)}};
    int done = 0;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
      if (strcmp(key, ints[i].key) != 0) continue;
      if (parse_int(val, INT_MIN, INT_MAX, &x))
        return attn_errf(err, len, ATTN_EINVAL, "spec '%s': %s=%s is not an integer", text, key, val);
      *(int *)((char *)&t + ints[i].off) = (int)x;
      done = 1;
    }
    if (done) continue;
    if (strcmp(key, "seed") == 0) {
      if (parse_int(val, 0, UINT_MAX, &x))
        return attn_errf(err, len, ATTN_EINVAL, "spec '%s': seed=%s is not an unsigned integer", text, val);
      t.seed = (unsigned)x;
    } else if (strcmp(key, "arch") == 0) {
      if (strlen(val) >= sizeof t.arch) return attn_errf(err, len, ATTN_EINVAL, "spec '%s': arch too long", text);
      if (strcmp(val, "-") != 0) strcpy(t.arch, val);
    } else if (strcmp(key, "impl") == 0) {
      if (strcmp(val, "wgmma") == 0) t.impl = ATTN_IMPL_WGMMA;
      else if (strcmp(val, "mma") == 0) t.impl = ATTN_IMPL_MMA;
      else return attn_errf(err, len, ATTN_EINVAL, "spec '%s': impl=%s is not mma or wgmma", text, val);
    } else if (strcmp(key, "dq") == 0) {
      if (strcmp(val, "atomic") == 0) t.dq = 1;
      else if (strcmp(val, "deterministic") == 0) t.dq = 0;
      else return attn_errf(err, len, ATTN_EINVAL, "spec '%s': dq=%s is not atomic or deterministic", text, val);
    } else if (strcmp(key, "feature") == 0) {
      int f = lookup(feature_names, 2, val);
      if (f < 0) return attn_errf(err, len, ATTN_EINVAL, "spec '%s': unknown feature map '%s'", text, val);
      t.feature = (attn_feature)f;
    } else {
      return attn_errf(err, len, ATTN_EINVAL, "spec '%s': unknown key '%s'", text, key);
    }
  }
  if (pos < 3) return attn_errf(err, len, ATTN_EINVAL, "spec '%s': expected 'ALGO TARGET DTYPE key=value...'", text);
  if (t.dv == t.d) t.dv = 0; /* one spelling per kernel */
  *s = t;
  return ATTN_OK;
}

int attn_spec_summary(const attn_spec *s, char *buf, size_t len) {
  char extra[128] = "";
  if (s->split > 1) snprintf(extra, sizeof extra, " split=%d", s->split);
  if (s->algo == ATTN_ALGO_SMALLCACHE) snprintf(extra, sizeof extra, " tile=%d", s->tile);
  if (s->algo == ATTN_ALGO_LOWRANK) {
    if (s->feature == ATTN_FEAT_TAYLOR)
      snprintf(extra, sizeof extra, " taylor g=%d r=%ld", s->degree, attn_taylor_rank(s->d, s->degree, 1L << 16));
    else
      snprintf(extra, sizeof extra, " random r=%d", s->rank);
  }
  char dev[64];
  if (s->target == ATTN_TARGET_CUDA)
    snprintf(dev, sizeof dev, "cuda %s warps=%d stages=%d %s%s%s", attn_dtype_name(s->dtype), s->warps, s->stages,
             s->arch, s->impl == ATTN_IMPL_WGMMA ? " wgmma" : "", s->dq ? " dq=atomic" : "");
  else if (s->unroll > 0)
    snprintf(dev, sizeof dev, "cpu %s unroll=%d", attn_dtype_name(s->dtype), s->unroll);
  else
    snprintf(dev, sizeof dev, "cpu %s", attn_dtype_name(s->dtype));
  char dv[24] = "";
  if (attn_spec_dv(s) != s->d) snprintf(dv, sizeof dv, " d_v=%d", s->dv);
  return snprintf(buf, len, "%s d=%d%s Br=%d Bc=%d%s %s%s%s%s%s%s", attn_algo_name(s->algo), s->d, dv, s->br,
                  s->bc, extra, dev, s->causal ? " causal" : "", s->window ? " window" : "", s->softcap ? " softcap" : "",
                  s->alibi ? " alibi" : "", s->layout == 1 ? " varlen" : s->layout == 2 ? " paged"
                  : s->layout == 3 ? " paged packed" : "");
}

const char *attn_spec_template(const attn_spec *s) {
  static const char *const cpu[] = {NULL, "flash.c", "smallcache.c", "lowrank.c"};
  static const char *const cuda[] = {NULL, "flash.cu", "smallcache.cu", "lowrank.cu"};
  if ((unsigned)s->algo > ATTN_ALGO_LOWRANK) return NULL;
  if (s->target == ATTN_TARGET_CUDA && s->algo == ATTN_ALGO_FLASH && s->impl == ATTN_IMPL_WGMMA) return "flash_sm90.cu";
  return s->target == ATTN_TARGET_CUDA ? cuda[s->algo] : cpu[s->algo];
}

/* A growing string; on allocation failure it stays NULL and every later append is a no-op. */
typedef struct { char *p; size_t len, cap; } strbuf;

static void sb_add(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(strbuf *b, const char *fmt, ...) {
  if (b->cap && !b->p) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (b->len + (size_t)n + 1 > b->cap) {
    size_t cap = (b->len + (size_t)n + 1) * 2;
    char *p = realloc(b->p, cap);
    if (!p) { free(b->p); b->p = NULL; b->cap = 1; return; }
    b->p = p;
    b->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

char *attn_spec_source(const attn_spec *s, int count_io, char *err, size_t len) {
  if (attn_spec_check(s, err, len) != ATTN_OK) return NULL;
  const char *file = attn_spec_template(s);
  const char *tmpl = file ? attn_template_text(file) : NULL;
  if (!tmpl) {
    attn_errf(err, len, ATTN_EUNSUPPORTED, "no template templates/%s in this build", file ? file : "?");
    return NULL;
  }
  const char *abi_file = s->target == ATTN_TARGET_CUDA ? "kernel_abi_cuda.h" : "kernel_abi.h";
  const char *abi = attn_template_text(abi_file);
  if (!abi) {
    attn_errf(err, len, ATTN_EUNSUPPORTED, "templates/%s is missing from this build", abi_file);
    return NULL;
  }
  char canon[512];
  attn_spec_format(s, canon, sizeof canon);
  strbuf b = {0};
  sb_add(&b, "/* generated by attntune %s from templates/%s: %s */\n", ATTN_VERSION, file, canon);
  sb_add(&b,
         "#define ATTN_D %d\n#define ATTN_BR %d\n#define ATTN_BC %d\n#define ATTN_CAUSAL %d\n"
         "#define ATTN_DV %d\n#define ATTN_UNROLL %d\n#define ATTN_WARPS %d\n#define ATTN_STAGES %d\n#define ATTN_DTYPE %d\n"
         "#define ATTN_TILE %d\n#define ATTN_FEATURE %d\n#define ATTN_DEGREE %d\n#define ATTN_RANK %d\n"
         "#define ATTN_SEED %uu\n#define ATTN_ARCH %d\n",
         s->d, s->br, s->bc, s->causal, attn_spec_dv(s), s->unroll, s->warps, s->stages, (int)s->dtype, s->tile, (int)s->feature,
         s->degree, s->rank, s->seed, s->target == ATTN_TARGET_CUDA ? arch_number(s->arch) : 0);
  /* only when it changes the kernel: without it the template compiles to the kernel with no split */
  if (s->split > 1) sb_add(&b, "#define ATTN_SPLIT %d\n", s->split);
  if (s->window) sb_add(&b, "#define ATTN_WINDOW 1\n");
  if (s->softcap) sb_add(&b, "#define ATTN_SOFTCAP 1\n");
  if (s->alibi) sb_add(&b, "#define ATTN_ALIBI 1\n");
  if (s->layout) sb_add(&b, "#define ATTN_LAYOUT %d\n", s->layout);
  if (count_io) sb_add(&b, "#define ATTN_COUNT_IO 1\n");
  sb_add(&b, "%s\n", abi);
  if (s->impl == ATTN_IMPL_WGMMA) {
    const char *abi90 = attn_template_text("kernel_abi_cuda_sm90.h");
    if (!abi90) {
      free(b.p);
      attn_errf(err, len, ATTN_EUNSUPPORTED, "templates/kernel_abi_cuda_sm90.h is missing from this build");
      return NULL;
    }
    sb_add(&b, "#define ATTN_SM90_NPV %d\n%s\n", attn_sm90_npv(s), abi90);
  }
  sb_add(&b, "#line 1 \"templates/%s\"\n%s", file, tmpl);
  if (!b.p) {
    attn_errf(err, len, ATTN_ENOMEM, "out of memory generating %s", file);
    return NULL;
  }
  return b.p;
}

void attn_hash_hex(const void *data, size_t len, char out[17]) {
  const unsigned char *p = data;
  uint64_t h = 14695981039346656037ULL;
  for (size_t i = 0; i < len; i++) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  snprintf(out, 17, "%016llx", (unsigned long long)h);
}
