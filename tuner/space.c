/* space.c: the search space per (target, dtype, d, d_v, causal, algorithms) and its constraints. Every point is checked
 * against the device's fast memory, its registers (the compiled kernel's own where the caller can read them, else an
 * estimate) and the templates' divisibility rules. */
#include "space.h"
#include "spec_bwd_cuda.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "io_theory.h"
#include "kernel_abi_cuda.h"
#include "launch.h"
#include "spec_bwd.h"
#include "model_sm90.h"
#include "spec_sm90.h"

const char *const attn_space_param_names[ATTN_SPACE_NPARAMS] = {"algo", "br",      "bc",     "unroll",
                                                                "warps", "stages", "tile",    "feature",
                                                                "degree", "rank",  "split"};

int attn_space_param_get(const attn_spec *c, int i) {
  switch (i) {
  case 0: return (int)c->algo;
  case 1: return c->br;
  case 2: return c->bc;
  case 3: return c->unroll;
  case 4: return c->warps;
  case 5: return c->stages;
  case 6: return c->tile;
  case 7: return (int)c->feature;
  case 8: return c->degree;
  case 9: return c->rank;
  case 10: return c->split > 1 ? c->split : 0; /* 0 and 1 are the same kernel */
  default: return 0;
  }
}

void attn_space_param_set(attn_spec *c, int i, int v) {
  switch (i) {
  case 0: c->algo = (attn_algo)v; break;
  case 1: c->br = v; break;
  case 2: c->bc = v; break;
  case 3: c->unroll = v; break;
  case 4: c->warps = v; break;
  case 5: c->stages = v; break;
  case 6: c->tile = v; break;
  case 7: c->feature = (attn_feature)v; break;
  case 8: c->degree = v; break;
  case 9: c->rank = v; break;
  case 10: c->split = v == 1 ? 0 : v; break; /* the canonical "no split"; bad values are left to the spec check */
  default: break;
  }
}

/* Smallest level-2 (or the largest level, for llc) unified/data cache of cpu0, from sysfs. */
static double sys_cache(int want_llc) {
  double best = 0;
  int best_level = 0;
  for (int i = 0; i < 8; i++) {
    char path[128], buf[64];
    int level = 0;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    if (fscanf(f, "%d", &level) != 1) level = 0;
    fclose(f);
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
    if (!(f = fopen(path, "r"))) continue;
    if (!fgets(buf, sizeof buf, f)) buf[0] = '\0';
    fclose(f);
    if (strncmp(buf, "Instruction", 11) == 0) continue;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    if (!(f = fopen(path, "r"))) continue;
    double size = 0;
    char unit = 0;
    int got = fscanf(f, "%lf%c", &size, &unit);
    fclose(f);
    if (got < 1 || size <= 0) continue;
    if (got == 2 && (unit == 'K' || unit == 'k')) size *= 1024;
    else if (got == 2 && (unit == 'M' || unit == 'm')) size *= 1024 * 1024;
    if (want_llc ? level > best_level : level == 2) {
      best = size;
      best_level = level;
    }
  }
  return best;
}

double attn_cpu_l2_bytes(void) {
  double b = sys_cache(0);
  return b > 0 ? b : 1024.0 * 1024.0;
}

void attn_cpu_vectors(int d, int *regs, int *width) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const int avx512 = __builtin_cpu_supports("avx512f"), avx = __builtin_cpu_supports("avx");
#else
  const int avx512 = 0, avx = 0;
#endif
  *regs = avx512 ? 32 : 16;
  *width = avx512 && d % 16 == 0 ? 16 : avx && d % 8 == 0 ? 8 : 4;
}

double attn_cpu_llc_bytes(void) {
  double b = sys_cache(1);
  return b > 0 ? b : 32.0 * 1024.0 * 1024.0;
}

double attn_space_fast_bytes(const attn_spec *c) {
  if (c->target == ATTN_TARGET_CUDA) return (double)attn_cuda_smem(c); /* the templates' own sizes */
  return 4.0 * attn_io_fast_need(c);
}

/* Tensor-core flash's per-warp shape, as the template lays it out (templates/kernel_abi_cuda.h): d_v past 256 is
 * split over VS warps sharing the query rows, so a warp holds MT = Br VS / (16 W) row tiles of d̂_v / VS columns of
 * O (d̂_v: d_v padded to 16 VS) and of Bc scores. */
static void flash_warp_shape(const attn_spec *c, double *mt, double *cols) {
  const int dv = attn_spec_dv(c), vs = ATTN_FLASH_VS(2, dv);
  *mt = (double)c->br * vs / (16.0 * c->warps);
  *cols = (double)ATTN_FLASH_DVP(2, dv) / vs;
}

/* Per-thread register estimate of a CUDA kernel, for when the compiled kernel cannot be read (no NVRTC): its
 * occupancy. flash f16/bf16 from the fp32 accumulators of O and S a lane holds, acc = MT (d̂_v/VS + Bc) / 2 words
 * (flash_warp_shape), causal counted 1.2x (the masked copy of the softmax): 1.55 acc + 40 up to 128 words, then
 * ptxas packs tighter and reaches 255 at about 192. Fitted to ptxas (NVRTC 13, sm_80 and sm_90, d = 64, 128, 256,
 * Br 64/128, Bc 32..128, 4/8 warps, stages 1..3) within about 25 registers. f32 and smallcache: their accumulators
 * (f32 flash: O of d̂_v and the scores) spread over the threads plus 40; lowrank: a constant (below). */
double attn_cuda_regs_estimate(const attn_spec *c) {
  const double threads = 32.0 * c->warps;
  if (c->algo == ATTN_ALGO_FLASH && c->dtype != ATTN_F32) {
    double mt, cols;
    flash_warp_shape(c, &mt, &cols);
    const double acc = mt * (cols + c->bc) / 2.0 * (c->causal ? 1.2 : 1.0);
    return acc <= 128 ? 1.55 * acc + 40.0 : 238.0 + (acc - 128.0) * 17.0 / 64.0;
  }
  double acc;
  if (c->algo == ATTN_ALGO_FLASH)
    acc = ((double)c->br * ATTN_FLASH_DVP(4, attn_spec_dv(c)) + (double)c->br * c->bc) / threads;
  else if (c->algo == ATTN_ALGO_SMALLCACHE) acc = 2.0 * (c->tile > 0 ? c->tile : c->br) * (c->tile > 0 ? c->tile : c->br) / threads;
  else /* lowrank.cu keeps no Br x d tile (its state and tiles are in shared memory): ptxas (NVRTC 13) gives 202 at
        * d = 64 and 161 at d = 576, about the same for every d */
    return 200.0;
  return acc + 40.0;
}

/* Whether flash f16/bf16 compiles without spills, without compiling it: the accumulator words a lane holds with
 * S weighted as ptxas's spills follow it (0.75 per word, 1.25 when causal: the masked copy of the softmax keeps
 * more of S live), against the most that fit. Every tile NVRTC 13 compiles without spills for sm_80 and sm_90
 * (d = 48..256 sampled, Br 64/128, Bc 32..128, 4/8 warps, stages 1..3) is within it but for four causal tiles at
 * the edge, and every one that spills is outside: FlashAttention-2's d=64 128x128 and d=128 128x64 with 4 warps
 * (253-254 registers) are in, d=160 128x32 (192 words unweighted, spills) and the causal d=128 128x64 are out.
 * O's words are those of the warp's share of d̂_v (flash_warp_shape). */
static double flash_words(const attn_spec *c, double *limit) {
  double mt, cols;
  flash_warp_shape(c, &mt, &cols);
  *limit = c->causal ? 170.0 : 180.0;
  return mt * (cols + (c->causal ? 1.25 : 0.75) * c->bc) / 2.0;
}

/* -1 with the reason when c's modifier flags are not the space's (a kernel of another problem). */
static int mods_differ(const attn_space_opts *o, const attn_spec *c, char *why, size_t len) {
  const int w = o->window > 0, sc = o->softcap != 0, al = o->alibi != 0;
  if (!c->window == !w && !c->softcap == !sc && !c->alibi == !al) return 0;
  snprintf(why, len, "configuration is for window=%d softcap=%d alibi=%d, the space for window=%d softcap=%d alibi=%d",
           !!c->window, !!c->softcap, !!c->alibi, w, sc, al);
  return -1;
}

/* The backward's constraints: its template's (attn_spec_check_backward) and the space's problem. */
static int admit_backward(const attn_space_opts *o, const attn_spec *c, char *why, size_t len) {
  char err[256];
  /* CUDA: templates/flash_bwd.cu's tiles within the GPU's shared memory per block and its accumulators' registers */
  const int rc = o->target == ATTN_TARGET_CUDA
                     ? attn_spec_check_backward_cuda(c, (long long)o->fast_mem_bytes, err, sizeof err)
                     : attn_spec_check_backward(c, err, sizeof err);
  if (rc != ATTN_OK) {
    snprintf(why, len, "backward: %s", err);
    return -1;
  }
  if (c->dq && !o->nondeterministic) {
    snprintf(why, len,
             "backward dq=atomic: its dQ varies from run to run (fp32 atomics), outside a deterministic space");
    return -1;
  }
  const int odv = o->dv > 0 ? o->dv : o->d;
  if (c->target != o->target || c->d != o->d || attn_spec_dv(c) != odv || c->causal != o->causal ||
      c->dtype != o->dtype) {
    snprintf(why, len, "configuration is for %s %s d=%d d_v=%d causal=%d, the space for %s %s d=%d d_v=%d causal=%d",
             attn_target_name(c->target), attn_dtype_name(c->dtype), c->d, attn_spec_dv(c), c->causal,
             attn_target_name(o->target), attn_dtype_name(o->dtype), o->d, odv, o->causal);
    return -1;
  }
  return mods_differ(o, c, why, len);
}

/* The query blocks (work items before any split) of c's launch for the space's problem, counted as the runtime
 * launches them (and as its untuned default split counts them): gen/launch.c's geometry over the rows a block takes,
 * a KV head's G query heads packed as G n rows where attn_cuda_gqa_packs holds (*packs 1). -1 when the problem is
 * beyond one launch. */
static long long cuda_query_blocks(const attn_space_opts *o, const attn_spec *c, int *packs) {
  const long hkv = o->heads_kv > 0 ? o->heads_kv : o->heads;
  *packs = 0;
  if (o->heads > 0x7fffffffL || o->n > 0x7fffffffL || o->n_kv > 0x7fffffffL) return -1;
  const attn_problem p = {.batch = 1, .heads = (int)o->heads, .heads_kv = (int)hkv, .n = (int)o->n,
                          .n_kv = (int)o->n_kv, .causal = o->causal};
  *packs = attn_cuda_gqa_packs(&p, c);
  return attn_cuda_query_blocks(&p, c);
}

int attn_space_admit(const attn_space_opts *o, const attn_spec *c, char *why, size_t len) {
  if (o->backward) return admit_backward(o, c, why, len);
  char err[256];
  if (attn_spec_check(c, err, sizeof err) != ATTN_OK) {
    snprintf(why, len, "%s", err);
    return -1;
  }
  const int odv = o->dv > 0 ? o->dv : o->d;
  if (c->target != o->target || c->d != o->d || attn_spec_dv(c) != odv || c->causal != o->causal ||
      c->dtype != o->dtype) {
    snprintf(why, len, "configuration is for %s %s d=%d d_v=%d causal=%d, the space for %s %s d=%d d_v=%d causal=%d",
             attn_target_name(c->target), attn_dtype_name(c->dtype), c->d, attn_spec_dv(c), c->causal,
             attn_target_name(o->target), attn_dtype_name(o->dtype), o->d, odv, o->causal);
    return -1;
  }
  if (mods_differ(o, c, why, len) != 0) return -1;
  if (!(o->algos & ATTN_ALGO_BIT(c->algo))) {
    snprintf(why, len, "algorithm %s is not among those being tuned", attn_algo_name(c->algo));
    return -1;
  }
  if (c->algo == ATTN_ALGO_LOWRANK && o->tolerance <= 0) {
    snprintf(why, len, "lowrank is approximate: it needs --tolerance > 0");
    return -1;
  }
  double need = attn_space_fast_bytes(c);
  if (o->fast_mem_bytes > 0 && need > o->fast_mem_bytes) {
    snprintf(why, len, "%s Br=%d Bc=%d needs %.0f KiB of fast memory, the device has %.0f KiB %s",
             attn_algo_name(c->algo), c->br, c->bc, need / 1024, o->fast_mem_bytes / 1024,
             o->target == ATTN_TARGET_CUDA ? "of shared memory per block" : "of L2 per core");
    return -1;
  }
  if (c->impl == ATTN_IMPL_WGMMA && c->stages > 1 && o->gpu) {
    /* flash_sm90.cu runs one block per SM: a deeper K/V ring than hides the copies costs shared memory only, and the
     * model cannot rank it above the shallower one (the same time): left out */
    attn_spec shallower = *c;
    shallower.stages--;
    if (attn_model_sm90_ring_wait(o->gpu, &shallower) == 0) {
      snprintf(why, len, "impl=wgmma Bc=%d stages=%d: %d stages already hide the K/V copies (model_sm90)", c->bc,
               c->stages, shallower.stages);
      return -1;
    }
  }
  if (c->algo == ATTN_ALGO_SMALLCACHE && c->tile > 0 && c->br % c->tile) {
    snprintf(why, len, "smallcache tile=%d must divide Br=%d", c->tile, c->br);
    return -1;
  }
  if (c->split > 1 && o->target == ATTN_TARGET_CUDA && o->n > 0 && o->n_kv > 0 && o->heads > 0 && o->gpu) {
    /* split-KV (templates/flash.cu) pays for its partials and the combine's launch only where the query blocks
     * leave SMs idle: decode */
    const long kblocks = (o->n_kv + c->bc - 1) / c->bc;
    if (c->causal && o->n != 1) {
      snprintf(why, len, "split=%d: causal n=%ld (only causal n = 1 builds its kernel without causal)", c->split, o->n);
      return -1;
    }
    int packs = 0;
    const long long items = cuda_query_blocks(o, c, &packs);
    if (o->n > 16 || items < 0 || items >= o->gpu->sms) {
      snprintf(why, len,
               "split=%d: n=%ld and %lld query blocks of Br=%d%s on %d SMs are not decode that leaves SMs idle",
               c->split, o->n, items, c->br, packs ? " (a KV head's query heads packed)" : "", o->gpu->sms);
      return -1;
    }
    if (c->split > kblocks) {
      snprintf(why, len, "split=%d: more parts than the %ld key blocks of Bc=%d", c->split, kblocks, c->bc);
      return -1;
    }
  }
  if (c->split > 1 && o->target == ATTN_TARGET_CPU && o->n > 0 && o->n_kv > 0 && o->heads > 0 && o->threads > 0) {
    /* split-K pays for its partials only by filling threads the query blocks leave idle, and a part without a key
     * block is pure overhead; the blocks are the kernel's, a KV head's query heads packed where n < Br (as the
     * untuned default split counts them) */
    const long hkv = o->heads_kv > 0 ? o->heads_kv : o->heads;
    const attn_problem p = {.batch = 1, .heads = (int)o->heads, .heads_kv = (int)hkv, .n = (int)o->n,
                            .n_kv = (int)o->n_kv};
    const long blocks = attn_cpu_query_blocks(&p, c), kblocks = (o->n_kv + c->bc - 1) / c->bc;
    if (blocks >= o->threads) {
      snprintf(why, len, "split=%d: the %ld query blocks of Br=%d already keep the %d threads busy", c->split, blocks,
               c->br, o->threads);
      return -1;
    }
    if (c->split > kblocks) {
      snprintf(why, len, "split=%d: more parts than the %ld key blocks of Bc=%d", c->split, kblocks, c->bc);
      return -1;
    }
  }
  if (o->target == ATTN_TARGET_CPU) {
    /* templates/flash.c's register tiles: unroll rows x nr vectors of accumulators, nr operand vectors and one
     * broadcast, with nr = 4 (32 vector registers, AVX-512) or 2 (16 registers), in the vector width -march gives */
    int regs = 0, vw = 1;
    if (c->algo == ATTN_ALGO_FLASH && c->unroll > 0) attn_cpu_vectors(c->d, &regs, &vw);
    /* P V's accumulators span d_v, in whole vectors (a tail of d_v is padded to one) */
    int nr = regs >= 32 ? 4 : 2, nrv = (c->br + vw - 1) / vw, ndv = (attn_spec_dv(c) + vw - 1) / vw;
    int st = c->unroll * (nrv < nr ? nrv : nr) + (nrv < nr ? nrv : nr) + 1;
    int pv = c->unroll * (ndv < nr ? ndv : nr) + (ndv < nr ? ndv : nr) + 1;
    int need = st > pv ? st : pv;
    if (regs && need > regs) {
      snprintf(why, len, "unroll=%d with Br=%d d_v=%d needs %d vector registers, this CPU has %d", c->unroll, c->br,
               attn_spec_dv(c), need, regs);
      return -1;
    }
  } else {
    attn_kernel_res res;
    if (o->resources && o->resources(o->resources_ctx, c, &res) == 0 && res.registers > 0) {
      /* what the compiled kernel really needs: no spills, and its warps' registers within an SM */
      if (res.spill_bytes > 0) {
        snprintf(why, len, "Br=%d Bc=%d with %d warps spills %ld bytes at %d registers per thread (ptxas)", c->br,
                 c->bc, c->warps, res.spill_bytes, res.registers);
        return -1;
      }
      if (o->gpu && (double)res.registers * 32.0 * c->warps > o->gpu->regs_per_sm) {
        snprintf(why, len, "%d warps x %d registers exceed the %d registers of an SM", c->warps, res.registers,
                 o->gpu->regs_per_sm);
        return -1;
      }
    } else if (c->impl == ATTN_IMPL_WGMMA) {
      /* flash_sm90.cu: attn_spec_check_sm90 has weighed its accumulators against the consumers' registers after
       * setmaxnreg; the mma.sync estimates below do not describe it */
    } else if (c->algo == ATTN_ALGO_FLASH && c->dtype != ATTN_F32) {
      double limit, words = flash_words(c, &limit);
      if (words > limit) {
        snprintf(why, len,
                 "Br=%d Bc=%d with %d warps holds about %.0f accumulator words per lane: more than the 255 registers "
                 "keep without spills (about %.0f here)",
                 c->br, c->bc, c->warps, words, limit);
        return -1;
      }
      double regs = attn_cuda_regs_estimate(c);
      if (o->gpu && fmin(regs, 255) * 32.0 * c->warps > o->gpu->regs_per_sm) {
        snprintf(why, len, "%d warps x %.0f registers exceed the %d registers of an SM", c->warps, fmin(regs, 255),
                 o->gpu->regs_per_sm);
        return -1;
      }
    } else {
      double regs = attn_cuda_regs_estimate(c);
      /* f32 flash: the estimate understates the lane grid's temporaries; ptxas spills from about 180 estimated
       * registers with 32 or more query rows per warp, and from about 232 when causal */
      double limit = 255;
      if (c->algo == ATTN_ALGO_FLASH && c->dtype == ATTN_F32)
        limit = c->br / c->warps >= 32 ? 180 : c->causal ? 231 : 255;
      if (regs > limit) {
        snprintf(why, len, "Br=%d Bc=%d with %d warps needs about %.0f registers per thread (at most %.0f here)", c->br,
                 c->bc, c->warps, regs, limit);
        return -1;
      }
      if (o->gpu && regs * 32.0 * c->warps > o->gpu->regs_per_sm) {
        snprintf(why, len, "%d warps x %.0f registers exceed the %d registers of an SM", c->warps, regs,
                 o->gpu->regs_per_sm);
        return -1;
      }
    }
  }
  return 0;
}

typedef struct { attn_spec *v; int n, cap; } vec;

static int vec_push(vec *v, const attn_spec *s) {
  if (v->n == v->cap) {
    int cap = v->cap ? v->cap * 2 : 64;
    attn_spec *p = realloc(v->v, (size_t)cap * sizeof *p);
    if (!p) return -1;
    v->v = p;
    v->cap = cap;
  }
  v->v[v->n++] = *s;
  return 0;
}

static int same_except(const attn_spec *a, const attn_spec *b, int skip);

/* A grid point, or a point near the default: admitted once. */
static int consider(attn_space *sp, vec *v, const attn_spec *c) {
  char why[256];
  for (int i = 0; i < v->n; i++)
    if (same_except(&v->v[i], c, -1)) return 0;
  sp->considered++;
  if (attn_space_admit(&sp->o, c, why, sizeof why) != 0) {
    if (!sp->pruned_example[0]) snprintf(sp->pruned_example, sizeof sp->pruned_example, "%s", why);
    if (sp->o.pruned) sp->o.pruned(sp->o.pruned_ctx, c, why);
    return 0;
  }
  return vec_push(v, c);
}

#define LEN(a) (int)(sizeof(a) / sizeof((a)[0]))

/* A default off the grid (attn_spec_fit's, for large d and d_v, and lowrank's Bc 16 on CUDA) and its neighbours: one
 * step in each tunable (Br, warps halved or doubled, Bc and lowrank's rank by 16, stages by 1), so that a strategy
 * that starts from the default has somewhere to go. */
static int consider_around(attn_space *sp, vec *v, const attn_spec *fit) {
  int rc = consider(sp, v, fit);
  for (int k = 0; k < 8 && !rc; k++) {
    attn_spec c = *fit;
    switch (k) {
    case 0: c.br *= 2; break;
    case 1: c.br /= 2; break;
    case 2: c.bc += 16; break;
    case 3: c.bc -= 16; break;
    case 4: if (c.algo == ATTN_ALGO_LOWRANK) c.rank += 16; else c.warps *= 2; break;
    case 5: if (c.algo == ATTN_ALGO_LOWRANK) c.rank -= 16; else c.warps /= 2; break;
    case 6: c.stages++; break;
    default: c.stages--; break;
    }
    if (c.algo == ATTN_ALGO_LOWRANK && k != 2 && k != 3 && k != 4 && k != 5) continue; /* Bc and rank only */
    if (c.br < 1 || c.bc < 1 || c.warps < 1 || c.stages < 1 || (c.algo == ATTN_ALGO_LOWRANK && c.rank < 1)) continue;
    rc = consider(sp, v, &c);
  }
  return rc;
}

int attn_space_dims_ok(attn_target t, int d, int dv, char *why, size_t len) {
  const int v = dv > 0 ? dv : d;
  if (!attn_d_supported(t, d) || !attn_d_supported(t, v) || dv < 0) {
    const int bad_d = !attn_d_supported(t, d);
    snprintf(why, len, "%s=%d is not supported on %s: head dimensions must be in 1..%d", bad_d ? "d" : "d_v",
             bad_d ? d : dv, attn_target_name(t), ATTN_MAX_D);
    return -1;
  }
  /* CUDA: every d and d_v in range; the space prunes the tiles that do not fit (attn_spec_check names the limit) */
  return 0;
}

/* A spec of the space's (d, d_v): dv stays 0 when d_v = d, so that the kernel's key is the one it always had. */
static attn_spec base_spec(const attn_space_opts *o, attn_algo algo) {
  attn_spec s = attn_spec_default(algo, o->target, o->dtype, o->d, o->causal);
  s.dv = o->dv > 0 && o->dv != o->d ? o->dv : 0;
  s.window = o->window > 0, s.softcap = o->softcap != 0, s.alibi = o->alibi != 0; /* the problem's kernel */
  if (o->target == ATTN_TARGET_CUDA && o->arch[0]) snprintf(s.arch, sizeof s.arch, "%s", o->arch);
  return s;
}

int attn_space_build(const attn_space_opts *o, attn_space *sp, char *err, size_t errlen) {
  memset(sp, 0, sizeof *sp);
  sp->o = *o;
  if (attn_space_dims_ok(o->target, o->d, o->dv, err, errlen) != 0) return ATTN_EUNSUPPORTED;
  vec v = {0};
  attn_spec base = base_spec(o, ATTN_ALGO_FLASH);
  int rc = 0;
  if (o->backward && o->target == ATTN_TARGET_CUDA) {
    /* templates/flash_bwd.cu: Br and Bc apart, warps and stages; nondeterministic: dQ by atomics too */
    static const int bbs[] = {16, 32, 64, 128}, warps[] = {2, 4, 8}, stages[] = {1, 2};
    for (int q = 0; q <= (o->nondeterministic ? 1 : 0); q++)
      for (int a = 0; a < LEN(bbs); a++)
        for (int b = 0; b < LEN(bbs); b++)
          for (int w = 0; w < LEN(warps); w++)
            for (int k = 0; k < LEN(stages) && !rc; k++) {
              attn_spec c = base;
              c.br = bbs[a], c.bc = bbs[b], c.warps = warps[w], c.stages = stages[k];
              c.unroll = 0, c.split = 0, c.tile = 0, c.dq = q;
              rc = consider(sp, &v, &c);
            }
  } else if (o->backward) {
    /* Br and Bc apart; 64 x 64 is the untuned default */
    static const int bbs[] = {16, 32, 64, 128, 256};
    for (int a = 0; a < LEN(bbs); a++)
      for (int b = 0; b < LEN(bbs) && !rc; b++) {
        attn_spec c = base;
        c.br = bbs[a], c.bc = bbs[b], c.unroll = 0, c.split = 0;
        rc = consider(sp, &v, &c);
      }
  } else if (o->target == ATTN_TARGET_CPU) {
    static const int brs[] = {16, 32, 64, 128}, bcs[] = {32, 64, 128, 256}, unrolls[] = {0, 4, 5},
                     splits[] = {0, 2, 4, 8};
    if (o->algos & ATTN_ALGO_BIT(ATTN_ALGO_FLASH))
      for (int a = 0; a < LEN(brs); a++)
        for (int b = 0; b < LEN(bcs); b++)
          for (int u = 0; u < LEN(unrolls); u++)
            for (int k = 0; k < LEN(splits) && !rc; k++) {
              attn_spec c = base;
              c.br = brs[a], c.bc = bcs[b], c.unroll = unrolls[u], c.split = splits[k];
              rc = consider(sp, &v, &c);
            }
    static const int sbrs[] = {16, 32, 64, 128}, tiles[] = {8, 16, 32, 64};
    if (o->algos & ATTN_ALGO_BIT(ATTN_ALGO_SMALLCACHE))
      for (int a = 0; a < LEN(sbrs); a++)
        for (int t = 0; t < LEN(tiles) && !rc; t++) {
          attn_spec c = base_spec(o, ATTN_ALGO_SMALLCACHE);
          c.br = sbrs[a], c.bc = sbrs[a], c.tile = tiles[t];
          rc = consider(sp, &v, &c);
        }
  } else {
    static const int brs[] = {64, 128}, bcs[] = {32, 64, 128}, warps[] = {4, 8}, stages[] = {1, 2, 3};
    /* the default sized for d_v (attn_spec_fit: smaller tiles, or d_v split over more warps, for a wide d_v) when the
     * grid below does not hold it: for the widest d_v it is the configuration that fits */
    attn_spec fit = base;
    const int have_fit = o->algos & ATTN_ALGO_BIT(ATTN_ALGO_FLASH) && attn_spec_fit(&fit, NULL, 0) == ATTN_OK;
    if (have_fit && !((fit.br == 64 || fit.br == 128) && (fit.bc == 32 || fit.bc == 64 || fit.bc == 128) &&
                      (fit.warps == 4 || fit.warps == 8) && fit.stages >= 1 && fit.stages <= 3))
      rc = consider_around(sp, &v, &fit);
    if (o->algos & ATTN_ALGO_BIT(ATTN_ALGO_FLASH))
      for (int a = 0; a < LEN(brs); a++)
        for (int b = 0; b < LEN(bcs); b++)
          for (int w = 0; w < LEN(warps); w++)
            for (int s = 0; s < LEN(stages) && !rc; s++) {
              attn_spec c = base;
              c.br = brs[a], c.bc = bcs[b], c.warps = warps[w], c.stages = stages[s];
              rc = consider(sp, &v, &c);
            }
    /* split-KV for decode (n <= 16, not causal; causal n = 1, whose kernel is built without causal): attn_space_admit
     * keeps the splits where the query blocks leave SMs idle and every part gets a key block */
    static const int csplits[] = {2, 4, 8, 16, 32};
    if (o->algos & ATTN_ALGO_BIT(ATTN_ALGO_FLASH) && o->n > 0 && o->n <= 16 && (!o->causal || o->n == 1))
      for (int a = 0; a < LEN(brs); a++)
        for (int b = 0; b < LEN(bcs); b++)
          for (int w = 0; w < LEN(warps); w++)
            for (int s = 0; s < LEN(stages); s++)
              for (int k = 0; k < LEN(csplits) && !rc; k++) {
                attn_spec c = base;
                c.br = brs[a], c.bc = bcs[b], c.warps = warps[w], c.stages = stages[s], c.split = csplits[k];
                rc = consider(sp, &v, &c);
              }
    if (have_fit && !rc) { /* a default on the grid whose grid neighbours are all ruled out (d_v = 512): its own */
      attn_space sofar = {.cfg = v.v, .count = v.n};
      int nb[2 * ATTN_SPACE_NPARAMS];
      const int at = attn_space_find(&sofar, &fit);
      if (at >= 0 && attn_space_neighbours(&sofar, at, nb, LEN(nb)) == 0) rc = consider_around(sp, &v, &fit);
    }
    /* Hopper (sm_90): flash_sm90.cu's configurations too, 1..3 consumer warpgroups of 64 query rows, Bc by 16,
     * 1..3 stages; attn_spec_check_sm90 rules out what does not fit (f32, d or d_v not a multiple of 8), admit the
     * rings deeper than hide the K/V copies */
    if (o->algos & ATTN_ALGO_BIT(ATTN_ALGO_FLASH) && strncmp(o->arch, "sm_90", 5) == 0 && o->dtype != ATTN_F32)
      for (int cw = 1; cw <= 3; cw++)
        for (int bc = 16; bc <= 256; bc += 16)
          for (int st = 1; st <= 3 && !rc; st++) {
            attn_spec c = base;
            c.impl = ATTN_IMPL_WGMMA;
            snprintf(c.arch, sizeof c.arch, "sm_90a");
            c.warps = 4 * (cw + 1), c.br = 64 * cw, c.bc = bc, c.stages = st;
            c.unroll = 0, c.split = 0, c.tile = 0;
            rc = consider(sp, &v, &c);
          }
    static const int sbrs[] = {32, 64, 128}, tiles[] = {16, 32, 64};
    if (o->algos & ATTN_ALGO_BIT(ATTN_ALGO_SMALLCACHE))
      for (int a = 0; a < LEN(sbrs); a++)
        for (int t = 0; t < LEN(tiles) && !rc; t++) {
          attn_spec c = base_spec(o, ATTN_ALGO_SMALLCACHE); /* its own warps, not flash's for large d */
          c.br = sbrs[a], c.bc = 64, c.tile = tiles[t], c.stages = 1;
          rc = consider(sp, &v, &c);
        }
  }
  if (o->algos & ATTN_ALGO_BIT(ATTN_ALGO_LOWRANK) && o->tolerance > 0) {
    /* Random features of several ranks, and even-degree Taylor features (rank C(d+g, g), so only small d). */
    static const int ranks[] = {64, 128, 256, 512}, lbcs[] = {32, 64, 128}, degrees[] = {2, 4};
    attn_spec lb = base_spec(o, ATTN_ALGO_LOWRANK), lfit = lb;
    /* CUDA: the default (Bc 16, its rank fitted to d_v) is not on the grid */
    if (o->target == ATTN_TARGET_CUDA && attn_spec_fit(&lfit, NULL, 0) == ATTN_OK) rc = consider_around(sp, &v, &lfit);
    for (int b = 0; b < LEN(lbcs); b++) {
      for (int r = 0; r < LEN(ranks) && !rc; r++) {
        attn_spec c = lb;
        c.feature = ATTN_FEAT_RANDOM, c.rank = ranks[r], c.bc = lbcs[b];
        rc = consider(sp, &v, &c);
      }
      for (int g = 0; g < LEN(degrees) && !rc; g++) {
        attn_spec c = lb;
        c.feature = ATTN_FEAT_TAYLOR, c.degree = degrees[g], c.rank = 0, c.bc = lbcs[b];
        rc = consider(sp, &v, &c);
      }
    }
  }
  if (rc) {
    free(v.v);
    snprintf(err, errlen, "out of memory building the search space");
    return ATTN_ENOMEM;
  }
  sp->cfg = v.v;
  sp->count = v.n;
  return ATTN_OK;
}

void attn_space_free(attn_space *s) {
  if (!s) return;
  free(s->cfg);
  s->cfg = NULL;
  s->count = 0;
}

static int same_except(const attn_spec *a, const attn_spec *b, int skip) {
  /* mma.sync and wgmma kernels of the same tiles are two configurations, as are the backward's two dQ sums */
  if (a->impl != b->impl || a->dq != b->dq) return 0;
  for (int i = 0; i < ATTN_SPACE_NPARAMS; i++)
    if (i != skip && attn_space_param_get(a, i) != attn_space_param_get(b, i)) return 0;
  return 1;
}

int attn_space_find(const attn_space *s, const attn_spec *c) {
  for (int i = 0; i < s->count; i++)
    if (same_except(&s->cfg[i], c, -1)) return i;
  return -1;
}

int attn_space_neighbours(const attn_space *s, int idx, int *out, int max) {
  if (idx < 0 || idx >= s->count) return 0;
  const attn_spec *c = &s->cfg[idx];
  int n = 0;
  /* algo (0) is not a step: another algorithm's tunables mean something else */
  for (int p = 1; p < ATTN_SPACE_NPARAMS; p++) {
    const int x = attn_space_param_get(c, p);
    int up = -1, down = -1;
    for (int j = 0; j < s->count; j++) {
      if (j == idx || !same_except(&s->cfg[j], c, p)) continue;
      int y = attn_space_param_get(&s->cfg[j], p);
      if (y > x && (up < 0 || y < attn_space_param_get(&s->cfg[up], p))) up = j;
      if (y < x && (down < 0 || y > attn_space_param_get(&s->cfg[down], p))) down = j;
    }
    if (down >= 0 && n < max) out[n++] = down;
    if (up >= 0 && n < max) out[n++] = up;
  }
  return n;
}
