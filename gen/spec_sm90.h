/* spec_sm90.h: the Hopper flash template (templates/flash_sm90.cu: wgmma, TMA, mbarriers; spec `flash cuda f16|bf16
 * ... arch=sm_90a impl=wgmma`): its defaults, its limits (attn_spec_check calls attn_spec_check_sm90), its shared
 * memory, and the tensor maps its launch needs. */
#ifndef ATTN_SPEC_SM90_H
#define ATTN_SPEC_SM90_H

#include <stddef.h>
#include "spec.h"
#include "kernel_abi_cuda.h"
#include "kernel_abi_cuda_sm90.h"

/* The default sm_90a spec of (dtype, d, causal), d_v = d (set dv, then attn_spec_fit_sm90): Br 128 (two consumer
 * warpgroups, 12 warps), Bc 128 up to d = 128 and 80 beyond, 2 stages. */
attn_spec attn_spec_default_sm90(attn_dtype dtype, int d, int causal);

/* Shrinks an impl=wgmma spec's stages, then Bc, until its shared memory fits 227 KiB and its accumulators the
 * consumers' registers; ATTN_OK or ATTN_EUNSUPPORTED with the reason. */
int attn_spec_fit_sm90(attn_spec *s, char *err, size_t errlen);

/* ATTN_OK, or ATTN_EINVAL / ATTN_EUNSUPPORTED with what does not fit: the dtype, arch, d and d_v, the warpgroups
 * and Br, Bc, the shared memory of the stages, the consumers' registers, the score modifiers. */
int attn_spec_check_sm90(const attn_spec *s, char *err, size_t errlen);

/* Dynamic shared memory per block (ATTN_FLASH_SM90_SMEM) */
long long attn_spec_sm90_smem(const attn_spec *s);

/* d_v padded to 16: the n of the P V wgmma (ATTN_SM90_NPV in the generated source) */
int attn_sm90_npv(const attn_spec *s);

/* Registers of a consumer thread's tiles: O (d_v/2 fp32), S (Bc/2 fp32) and P (Bc/4: two halves a register) */
int attn_sm90_accumulators(const attn_spec *s);

/* Registers per consumer thread after setmaxnreg (240 for one or two consumer warpgroups, 160 for three) */
int attn_sm90_consumer_regs(const attn_spec *s);

/* The cuTensorMapEncodeTiled arguments of operand `which` (0 Q, 1 K, 2 V) of a launch of s on the problem's
 * shape, the tensor at ptr. ATTN_OK, or ATTN_EINVAL / ATTN_EUNSUPPORTED with the reason (ptr not 16-byte aligned,
 * a dimension past the TMA's 2^32). */
int attn_sm90_tmap_params_of(const attn_spec *s, int which, const void *ptr, long long batch, long long heads,
                             long long heads_kv, long long n, long long n_kv, attn_sm90_tmap_params *out, char *err,
                             size_t errlen);

/* Encodes one map (the runtime: cuTensorMapEncodeTiled with prm's fields in its argument order); 0 on success,
 * else a one-line reason in err. */
typedef int (*attn_sm90_encode_fn)(void *ctx, attn_cuda_tmap *map, const attn_sm90_tmap_params *prm, char *err,
                                   size_t errlen);

/* The kernel's argument: a (as for every CUDA kernel) and the Q, K, V maps encoded by enc. */
int attn_sm90_kargs_make(const attn_spec *s, const attn_cuda_kargs *a, attn_sm90_encode_fn enc, void *ctx,
                         attn_cuda_sm90_kargs *out, char *err, size_t errlen);

#endif
