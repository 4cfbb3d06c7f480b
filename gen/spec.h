/* spec.h: a kernel specification (what a template is specialized on), its validation,
 * its canonical text form (the key stored in the database), and instantiation into source text. */
#ifndef ATTN_SPEC_H
#define ATTN_SPEC_H

#include <stddef.h>
#include <stdint.h>
#include "attn.h"

typedef enum { ATTN_FEAT_TAYLOR = 0, ATTN_FEAT_RANDOM = 1 } attn_feature;
/* CUDA flash's instruction set: mma.sync (templates/flash.cu, every sm_80+ GPU) or Hopper's wgmma with TMA and
 * mbarriers (templates/flash_sm90.cu, arch sm_90a only; gen/spec_sm90.h) */
typedef enum { ATTN_IMPL_MMA = 0, ATTN_IMPL_WGMMA = 1 } attn_impl;

typedef struct attn_spec {
  attn_algo algo;       /* FLASH, SMALLCACHE or LOWRANK; never AUTO */
  attn_target target;   /* CPU or CUDA; never AUTO */
  attn_dtype dtype;     /* F32, F16, BF16 (inputs and output; accumulation is fp32) */
  int d;                /* head dimension of Q and K */
  int dv;               /* head dimension of V and O; 0: same as d (attn_spec_dv) */
  int br, bc;           /* query rows and key rows per block */
  int causal;           /* 0 or 1 */
  /* CPU */
  int unroll;           /* inner-loop unroll / vector hint; 0: compiler's choice */
  int split;            /* flash: key-range parts per query block (split-K), merged exactly; 0 or 1: none */
  /* CUDA */
  int warps;            /* warps per thread block */
  int stages;           /* cp.async pipeline depth (1: no pipelining) */
  char arch[16];        /* "sm_80", "sm_90", ...; empty on CPU */
  /* smallcache */
  int tile;             /* side of the square tiles of the tiled products (~sqrt(M/4)); 0: derived */
  /* lowrank */
  attn_feature feature; /* Taylor (Alman & Song) or positive random features */
  int degree;           /* Taylor degree g (even) */
  int rank;             /* random features: m; Taylor: derived C(d+g, g) */
  unsigned seed;        /* random features' seed */
  /* Score modifiers the kernel applies (attn.h), 0 or 1; their values (the window's width, the cap, the slopes) are
   * the problem's, given at run time. */
  int window;           /* sliding window: key blocks outside it skipped, the rest masked */
  int softcap;          /* c·tanh(s/c) on the scaled scores */
  int alibi;            /* -slope_h·|i' - j| on the scores */
  /* The arrays' layout (flash only): 0 dense; 1 varlen, 2 paged, 3 paged decode with each KV head's query heads
   * packed as the rows of a block: the kernels of attn_execute_varlen and attn_execute_paged
   * (runtime/cuda_serve.c), made from the plan's spec with this set (ATTN_LAYOUT). CPU flash has 2 alone, the paged
   * kernel of runtime/paged.c (templates/flash.c's paged code is in no other). */
  int layout;
  int impl;             /* attn_impl: CUDA flash's template (0: mma.sync, flash.cu) */
  /* CUDA flash backward: 0 dQ in its own blocks (7 products, bitwise the same run to run); 1 dQ summed by fp32
   * atomics from the dK/dV blocks (5 products; dQ's last bits may differ between runs: docs/cuda.md) */
  int dq;
} attn_spec;

/* Names and their inverses; parse functions return -1 for an unknown name. */
const char *attn_algo_name(attn_algo a);       /* "flash", "smallcache", "lowrank", "auto" */
const char *attn_target_name(attn_target t);   /* "cpu", "cuda", "auto" */
const char *attn_dtype_name(attn_dtype t);     /* "f32", "f16", "bf16" */
int attn_algo_parse(const char *s);
int attn_target_parse(const char *s);
int attn_dtype_parse(const char *s);
size_t attn_dtype_size(attn_dtype t);

/* The largest head dimension (d and d_v) any target takes: DeepSeek's MLA has d = 576. */
#define ATTN_MAX_D 576

/* Is d (or d_v) a supported head dimension for this target? (1..ATTN_MAX_D on both: tails are masked or padded) */
int attn_d_supported(attn_target t, int d);

/* The spec's d_v: dv, or d when dv is 0. */
static inline int attn_spec_dv(const attn_spec *s) { return s->dv > 0 ? s->dv : s->d; }

/* A sensible default configuration for (algo, target, dtype, d, causal), with dv = 0 (d_v = d): set dv after. */
attn_spec attn_spec_default(attn_algo algo, attn_target target, attn_dtype dtype, int d, int causal);

/* A default CUDA spec sized for its d_v: attn_spec_default's tiles for (algo, dtype, d, causal) (Br, Bc, warps,
 * stages; lowrank random features: rank), shrunk (flash: stages, then Bc, then Br, then warps; lowrank: rank) until
 * the block's shared memory fits an A100's 163 KiB and flash's accumulators fit the registers without spilling.
 * Call it after setting dv on a default spec (attn_spec_default sizes for d_v = d itself); arch, seed and the
 * feature map are kept. CPU specs are left alone. ATTN_OK, or ATTN_EUNSUPPORTED with the limit in err (err may be
 * NULL) when even the smallest tiles do not fit. */
int attn_spec_fit(attn_spec *s, char *err, size_t errlen);

/* Dynamic shared memory in bytes per block of a CUDA spec, with its d_v (templates/kernel_abi_cuda.h); -1: unknown. */
long long attn_spec_cuda_smem(const attn_spec *s);

/* ATTN_OK, or ATTN_EINVAL / ATTN_EUNSUPPORTED with a one-line reason in err. */
int attn_spec_check(const attn_spec *s, char *err, size_t errlen);

/* Canonical text: "flash cpu f32 d=64 br=64 bc=128 causal=0 ..." (every field, fixed order); parse is its inverse.
 * " dv=N" is written only when d_v differs from d (texts without it parse to dv 0: d_v = d; dv = d parses to 0).
 * " split=N" is written only when split > 1, so that the keys of kernels without it stay what they were; texts
 * without it parse to split 0 (split 1 therefore comes back as 0, which means the same kernel).
 * " window=1", " softcap=1" and " alibi=1" are written only when set (texts of kernels without modifiers are what
 * they were); texts without them parse to 0. So is " layout=N" (1 varlen, 2 paged, 3 packed paged decode).
 * " impl=wgmma" is written only for the Hopper template (ATTN_IMPL_WGMMA); texts without it parse to impl 0.
 * " dq=atomic" is written only for the backward whose dQ is summed by atomics; texts without it parse to dq 0.
 * format returns the length written (snprintf semantics); parse returns ATTN_OK or ATTN_EINVAL with err. */
int attn_spec_format(const attn_spec *s, char *buf, size_t len);
int attn_spec_parse(const char *text, attn_spec *s, char *err, size_t errlen);
/* parse without attn_spec_check, the forward's rules: a backward row's tiles are checked by the backward's own
 * (attn_spec_check_backward, attn_spec_check_backward_cuda), which admit tiles the forward does not (Br = 16 over 8
 * warps). */
int attn_spec_parse_fields(const char *text, attn_spec *s, char *err, size_t errlen);

/* Human summary for attn_plan_describe, e.g. "flash d=64 Br=64 Bc=128 cpu f32" ("... split=4 ..." when split > 1,
 * "cpu f32 unroll=4" when unroll > 0, " window softcap alibi" after causal for the modifiers the kernel applies,
 * then " varlen", " paged" or " paged packed" for a serving layout's kernel; " dq=atomic" after the arch for the
 * backward whose dQ is summed by atomics). */
int attn_spec_summary(const attn_spec *s, char *buf, size_t len);

/* Source text for a spec: a first line saying what generated it, the #defines, the kernel ABI, the template.
 * count_io != 0 adds -DATTN_COUNT_IO's define. Returns malloc'd text (caller frees) or NULL with err. */
char *attn_spec_source(const attn_spec *s, int count_io, char *err, size_t errlen);

/* Source text of a CPU flash spec's backward kernel: attn_spec_source's #defines and kernel ABI with
 * templates/flash_bwd.c (Br query rows and Bc key rows per block). The spec's canonical text is the forward's: the
 * template's name in the first line and the body tell the two apart (and so their source hashes). */
char *attn_spec_source_backward(const attn_spec *s, int count_io, char *err, size_t errlen);

/* The text of an embedded template file ("flash.c", "flash.cu", "kernel_abi.h"), or NULL (gen/embedded_templates.c). */
const char *attn_template_text(const char *name);

/* The template file a spec instantiates: "flash.c", "smallcache.cu", ... */
const char *attn_spec_template(const attn_spec *s);

/* Taylor features' rank C(d+g, g), or -1 when it exceeds limit (to avoid overflow on large d, g). */
long attn_taylor_rank(int d, int g, long limit);

/* The error convention of gen/ (and the tuner's parsers): a one-line reason into err (when not NULL), code returned. */
int attn_errf(char *err, size_t len, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* 64-bit FNV-1a of the bytes, as 16 hex digits plus NUL. */
void attn_hash_hex(const void *data, size_t len, char out[17]);

#endif
