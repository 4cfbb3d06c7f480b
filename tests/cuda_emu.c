/* cuda_emu: the CUDA kernels as NVRTC compiles them, run on the PTX interpreter of tests/ptx, no GPU needed.
 *   cuda_emu [OPTIONS] ALGO DTYPE [FIELD=VALUE ...]
 *       one spec: attn_spec_default(ALGO, cuda, DTYPE, d, causal), its dv, attn_spec_fit, then the fields given (d,
 *       dv (d_v; 0: d), br, bc, causal, warps, stages, tile, feature=taylor|random, degree, rank, seed, arch), and
 *       the score modifiers: window=W[,W...] (each shape with each window, --quick: with the windows in turn),
 *       softcap=C, alibi=1 (slopes of both signs per head), set in the problems and as the spec's flags
 *   cuda_emu [OPTIONS] space ALGO DTYPE d=D causal=C [stride=K] [offset=O] [arch=sm_80|sm_90] [MODIFIERS]
 *       every K-th configuration of ALGO in the tuner's CUDA space for (DTYPE, D, C) on the arch's GPU, with the
 *       score modifiers given (window=, softcap=, alibi=, as below)
 *   cuda_emu [OPTIONS] defaults ALGO DTYPE [causal=C] [every=K] [d=D,D,...] [dv=N]
 *       the default spec of d = 16, 16 + 16K, ..., and 256 (K = 1: every d), or of each d listed, with d_v = N (0 or
 *       absent: d_v = d); causal on alternate d unless C is given
 *   cuda_emu [OPTIONS] nan ALGO DTYPE [d=D,D,...] [causal=C] [FIELD=VALUE ...]
 *       non-finite inputs, as tests/cpu_nan.c: the default spec (with the fields given) for each d (default 16,64)
 *       and causal 0 and 1 (or C), on shapes with batch = 8, batch element b carrying injection b (none, NaN in a
 *       q, k or v entry, +inf in q, -inf in k, -inf in one or every key with q > 0); the NaN pattern must be the fp64
 *       reference's exactly, the other outputs finite and within the dtype's tolerance of it (lowrank: of the CPU
 *       lowrank kernel on the same inputs), rows that see no key exactly 0
 *   cuda_emu [OPTIONS] io ALGO DTYPE [FIELD=VALUE ...]
 *       also the counting build: per shape, its counted entries, the kernel's sectors and the closed form
 *   OPTIONS: --quick (fewer shapes), --all-orders (every fixed shape under every block and warp order), --approx-worst
 *            (ex2, rcp, div.approx and the other approximate instructions off by their largest error)
 * For each spec the source the runtime compiles (attn_spec_source) goes through NVRTC to the PTX of its arch, with
 * the runtime's options, and the interpreter runs that PTX on shapes with n = 1, odd n, n not a multiple of any
 * block, n_kv != n both ways (causal rows that see no key), grouped-query heads, batch > 1 and non-default scales,
 * and at the edges of the spec's tiles (n = Br - 1, Br, Br + 1 against n_kv = m Bc - 1, m Bc, m Bc + 1), each
 * under the launch geometry of gen/launch.c. Checked: the output against the fp64 reference (relative Frobenius
 * error, and per row, within limits from the dtype's unit roundoff: see emu_limits() in emu_util.h), every output written, zeros for
 * rows that see no key, the global traffic in 32-byte sectors against tuner/io_theory.c's closed form, and no bank
 * conflicts where docs/cuda.md says so; lowrank against the CPU lowrank kernel with the same features and, for
 * Taylor features, against fp64 within its plan's tolerance (LOWRANK_TOLERANCE); and whatever the interpreter checks
 * (tests/ptx/ptx.h: races on shared memory, and on global memory across blocks, which run several at a time).
 * ATTN_EMU_KEEP=1 keeps kernel.cu and kernel.ptx in a directory it names; ATTN_EMU_TEMPLATE=FILE runs FILE in place
 * of the spec's template (a modified copy, without rebuilding). Exit 77 (skipped) without NVRTC; exit 1 when no case
 * ran. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "emu_util.h"
#include "kernel_abi_cuda.h"
#include "ptx/ptx.h"
#include "gpus.h"
#include "internal.h"
#include "io_theory.h"
#include "launch.h"
#include "space.h"


static int failures, cases, quick, all_orders, nan_mode, io_mode, no_nvrtc, approx_worst;
/* Score modifiers (window=W[,W...] softcap=C alibi=1): the problem's values; the spec gets the kernel's flags.
 * Shapes run with each window in turn (--quick) or with every one. */
#define MAX_WINDOWS 8
static int windows[MAX_WINDOWS], nwindows, cur_window;
static float mod_softcap;
static int mod_alibi;
static char workdir[4096];
static attn_runtime *cpu_rt;
static ptx_module *mod;       /* the spec's kernel as users run it */
static ptx_module *count_mod; /* its counting build (io mode) */

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void path(char *out, size_t len, const char *name) { snprintf(out, len, "%s/%s", workdir, name); }

static int write_file(const char *name, const void *data, size_t len) {
  char p[4200];
  path(p, sizeof p, name);
  FILE *f = fopen(p, "wb");
  int ok = f && fwrite(data, 1, len, f) == len;
  if (f && fclose(f) != 0) ok = 0;
  return ok ? 0 : -1;
}


static int keep(void) {
  const char *k = getenv("ATTN_EMU_KEEP");
  return k && *k && strcmp(k, "0");
}

/* ---- the kernel's PTX ---- */


/* The spec's source (the counting build with count_io) compiled by NVRTC to PTX for its arch, with the options the
 * runtime compiles cubins with, and loaded by the interpreter. NULL with the failure reported (or no_nvrtc set). */
static ptx_module *build_one(const attn_spec *s, int count_io, const char *label) {
  char err[512];
  char *src = attn_spec_source(s, count_io, err, sizeof err);
  if (!src) {
    FAIL("%s: %s", label, err);
    return NULL;
  }
  const char *alt = getenv("ATTN_EMU_TEMPLATE");
  if (alt && *alt && emu_substitute(&src, alt) != 0) {
    FAIL("%s: cannot read ATTN_EMU_TEMPLATE=%s", label, alt);
    free(src);
    return NULL;
  }
  char *ptx = NULL, *log = NULL;
  const int rc = attn_nvrtc_ptx(src, "attn_kernel.cu", s->arch[0] ? s->arch : "sm_80", &ptx, &log);
  if (keep()) {
    char name[64];
    snprintf(name, sizeof name, "kernel%s.cu", count_io ? "-count" : "");
    if (write_file(name, src, strlen(src))) FAIL("%s: cannot write into %s", label, workdir);
    snprintf(name, sizeof name, "kernel%s.ptx", count_io ? "-count" : "");
    if (ptx && write_file(name, ptx, strlen(ptx))) FAIL("%s: cannot write into %s", label, workdir);
  }
  free(src);
  return emu_load_ptx(rc, ptx, log, label, &no_nvrtc, &failures);
}

static int build(const attn_spec *s, const char *label) {
  ptx_module_free(mod);
  ptx_module_free(count_mod);
  mod = count_mod = NULL;
  if (!(mod = build_one(s, 0, label))) return -1;
  if (io_mode && !(count_mod = build_one(s, 1, label))) return -1;
  return 0;
}

/* ---- one shape ---- */

typedef struct {
  int batch, heads, heads_kv, n, n_kv;
  float scale; /* 0: 1/sqrt(d) */
} shape;

static const shape SHAPES[] = {
    {1, 1, 1, 1, 1, 0.0f},      /* n = 1 */
    {1, 2, 1, 201, 29, 0.0f},   /* grouped-query heads; odd n > n_kv: causal rows 0..171 see no key (whole query
                                 * blocks load no key block) */
    {2, 2, 2, 19, 83, 0.37f},   /* batch 2, n_kv > n, another scale */
    {1, 4, 2, 70, 1, -0.8f},    /* a single key, a negative scale */
    {1, 1, 1, 150, 150, 0.0f},  /* n = n_kv, not a multiple of any block */
    {1, 3, 1, 129, 257, 2.5f},  /* three query heads on one kv head, a large scale */
};
#define NSHAPES (int)(sizeof SHAPES / sizeof SHAPES[0])

/* Blocks resident at once for smallcache's grid: few, so that blocks loop over work items. */
#define EMU_RESIDENT 3

static const char *order_name(unsigned order) { return order == 0 ? "forward" : order == 1 ? "reverse" : "random"; }

static void round_to(attn_dtype t, float *x, size_t count) {
  for (size_t i = 0; i < count && t != ATTN_F32; i++)
    x[i] = t == ATTN_F16 ? attn_f16_to_f32(attn_f32_to_f16(x[i])) : attn_bf16_to_f32(attn_f32_to_bf16(x[i]));
}
static void to_raw(attn_dtype t, const float *x, size_t count, unsigned char *out) {
  for (size_t i = 0; i < count; i++) {
    if (t == ATTN_F32) {
      memcpy(out + 4 * i, &x[i], 4);
    } else {
      unsigned short h = t == ATTN_F16 ? attn_f32_to_f16(x[i]) : attn_f32_to_bf16(x[i]);
      memcpy(out + 2 * i, &h, 2);
    }
  }
}
/* raw outputs to float; returns how many still hold the poison (all bits set: never written) */
static size_t from_raw(attn_dtype t, const unsigned char *raw, size_t count, float *x) {
  size_t unwritten = 0;
  for (size_t i = 0; i < count; i++) {
    if (t == ATTN_F32) {
      unsigned u;
      memcpy(&u, raw + 4 * i, 4);
      memcpy(&x[i], &u, 4);
      unwritten += u == 0xffffffffu;
    } else {
      unsigned short h;
      memcpy(&h, raw + 2 * i, 2);
      x[i] = t == ATTN_F16 ? attn_f16_to_f32(h) : attn_bf16_to_f32(h);
      unwritten += h == 0xffffu;
    }
  }
  return unwritten;
}

/* Entries of Q, K, V and O of a normalised problem (V and O rows have d_v entries). */
typedef struct {
  size_t q, k, v, o;
} counts;
static counts counts_of(const attn_problem *p) {
  const size_t bh = (size_t)p->batch * p->heads, bhk = (size_t)p->batch * p->heads_kv;
  const counts c = {bh * p->n * p->d, bhk * p->n_kv * p->d, bhk * p->n_kv * p->d_v, bh * p->n * p->d_v};
  return c;
}

/* Fresh random inputs of a shape from its seed, and the same values rounded to the problem's dtype (what the
 * kernel reads and the reference is computed from). */
static void fill_inputs(const attn_problem *p, unsigned long long seed, float *q, float *k, float *v) {
  const counts c = counts_of(p);
  attn_fill_random(q, c.q, seed * 3 + 1);
  attn_fill_random(k, c.k, seed * 3 + 2);
  attn_fill_random(v, c.v, seed * 3 + 3);
}
static void round_inputs(const attn_problem *p, float *q, float *k, float *v) {
  const counts c = counts_of(p);
  round_to(p->dtype, q, c.q);
  round_to(p->dtype, k, c.k);
  round_to(p->dtype, v, c.v);
}

/* Error limits from the dtype's unit roundoff u (2^-11 f16, 2^-8 bf16, 2^-24 f32) and the length of the reductions.
 * The output carries the rounding of O to the dtype (u relative per element) and, on the tensor cores, that of P to
 * the dtype before P V (u per weight); every kernel computes the logits s = scale q.k in fp32, a sum of d products
 * whose rounding errors (random in sign: u32 sqrt(d) |scale| for entries in [-1, 1]) exp turns into relative errors
 * of the weights, and ex2.approx adds 2 ulp of fp32 per weight. Hence the output's relative (Frobenius) error must
 * stay within C (u + u32 (1 + |scale| sqrt(d))), and each row's error, relative to the row of P |V| (the size the
 * errors of P V scale with; a row's own norm can be near 0 when its values cancel), within the same (f16, bf16) or
 * twice that (f32). The errors do not grow with n_kv (they are random in sign, and a softmax average of them shrinks
 * as fast as the output does), so n_kv is not in the bound; a key misweighted by a factor 1 + e moves the output by
 * about e / sqrt(n_kv), above the f16 limit from e = 1% at n_kv = 100. C from measurements (the defaults of every d
 * in the CI tests, the "worst error" each run logs): f16/bf16 at most 0.82 u over an output and 0.74 u in a row
 * (C = 2); f32 at most 2.5 u32 (2 + |scale| sqrt(d)) over an output and in a row, with the approximate instructions
 * at their worst (C = 4). */
static double worst_fro_u, worst_row_u; /* the worst errors seen, in units of u (logged at the end) */

/* The CPU kernel computing the same approximation as a CUDA lowrank spec (as tests/cuda_correct.c pairs them). */
static int cpu_twin(const attn_spec *s, const attn_problem *p, const float *q, const float *k, const float *v,
                    float *o) {
  if (!cpu_rt && attn_open(NULL, ATTN_TARGET_CPU, &cpu_rt) != ATTN_OK) return -1;
  attn_spec c = *s;
  c.target = ATTN_TARGET_CPU;
  c.dtype = ATTN_F32;
  c.warps = c.stages = 0;
  c.arch[0] = '\0';
  attn_problem pc = *p;
  pc.dtype = ATTN_F32;
  attn_plan *plan = NULL;
  int rc = attn_plan_create_spec(cpu_rt, &pc, &c, 0, "twin", &plan);
  if (rc == ATTN_OK) rc = attn_plan_run_f32(plan, q, k, v, o, NULL, NULL);
  attn_plan_destroy(plan);
  return rc == ATTN_OK ? 0 : -1;
}

/* The tolerance lowrank's plans are made for in these tests, as `attntune --tolerance` takes it: the relative
 * (Frobenius) error of the output against exact attention. */
#define LOWRANK_TOLERANCE 0.05

/* The normalised problem of a shape for spec s and its launch geometry; 0, or -1 with a failure reported. */
static int shape_problem(const attn_spec *s, const char *label, const shape *sh, attn_problem *p, attn_cuda_geom *g) {
  char err[512];
  attn_problem p0 = {.batch = sh->batch, .heads = sh->heads, .heads_kv = sh->heads_kv, .n = sh->n,
                     .n_kv = sh->n_kv, .d = s->d, .d_v = attn_spec_dv(s), .dtype = s->dtype, .causal = s->causal,
                     /* lowrank approximates exp(scale q.k) for logits of moderate size: the default scale (its
                      * feature maps take sqrt(scale), so scale > 0), and a plan made for LOWRANK_TOLERANCE */
                     .scale = s->algo != ATTN_ALGO_LOWRANK ? sh->scale : nan_mode ? fabsf(sh->scale) : 0.0f,
                     .tolerance = s->algo == ATTN_ALGO_LOWRANK ? LOWRANK_TOLERANCE : 0.0};
  /* ALiBi: slopes of both signs and several sizes, the head's own (fixed per head index) */
  static float slopes[64];
  for (int h = 0; h < 64; h++) slopes[h] = (h % 4 == 2 ? -0.03125f : 1.0f) * ldexpf(1.0f, -(h % 4) - 1);
  p0.window = cur_window;
  p0.softcap = mod_softcap;
  p0.alibi_slopes = mod_alibi ? slopes : NULL;
  if (mod_alibi && p0.heads > 64) {
    FAIL("%s: at most 64 heads with alibi", label);
    return -1;
  }
  static attn_runtime cuda_rules; /* normalises as for the CUDA target (f16 and bf16 allowed) */
  cuda_rules.target = ATTN_TARGET_CUDA;
  if (attn_problem_normalize(&cuda_rules, &p0, p) != ATTN_OK) {
    FAIL("%s: bad shape: %s", label, attn_last_error(&cuda_rules));
    return -1;
  }
  if (attn_cuda_geometry(s, (long long)p->batch * p->heads, p->n, p->n_kv, EMU_RESIDENT, g, err, sizeof err) !=
      ATTN_OK) {
    FAIL("%s | n=%d n_kv=%d: geometry: %s", label, p->n, p->n_kv, err);
    return -1;
  }
  /* the shared memory of the spec's d_v (the geometry's is that of d_v = d) */
  g->smem = attn_spec_cuda_smem(s);
  if (g->smem > 227 * 1024) {
    FAIL("%s | n=%d n_kv=%d: %lld bytes of shared memory a block, more than any GPU has", label, p->n, p->n_kv,
         g->smem);
    return -1;
  }
  return 0;
}

/* One case's problem, launch geometry, inputs (rounded to the dtype: what the kernel reads), poisoned output buffer
 * and fp64 reference: the one setup every mode uses. */
typedef struct {
  attn_problem p;
  attn_cuda_geom g;
  counts cn;
  float *q, *k, *v, *o;
  double *ref;
  char what[512];
} emu_case;

static void case_free(emu_case *c) {
  free(c->q);
  free(c->k);
  free(c->v);
  free(c->o);
  free(c->ref);
  memset(c, 0, sizeof *c);
}

/* inject(p, q, k, v, arg) changes the fresh random inputs before they are rounded (nan mode); 0, or -1 with a
 * failure reported (c freed) */
typedef void (*emu_inject)(const attn_problem *p, float *q, float *k, float *v, void *arg);
static int case_setup(emu_case *c, const attn_spec *s, const char *label, const shape *sh, const char *mode,
                      unsigned order, unsigned long long seed, emu_inject inject, void *arg) {
  memset(c, 0, sizeof *c);
  if (shape_problem(s, label, sh, &c->p, &c->g) != 0) return -1;
  const attn_problem *p = &c->p;
  char mods[128] = "";
  int k = 0;
  if (p->window) k += snprintf(mods + k, sizeof mods - (size_t)k, " window=%d", p->window);
  else if (cur_window) k += snprintf(mods + k, sizeof mods - (size_t)k, " window=%d (hides no key)", cur_window);
  if (p->softcap > 0) k += snprintf(mods + k, sizeof mods - (size_t)k, " softcap=%g", (double)p->softcap);
  if (p->alibi_slopes) snprintf(mods + k, sizeof mods - (size_t)k, " alibi");
  snprintf(c->what, sizeof c->what, "%s |%s batch=%d heads=%d/%d n=%d n_kv=%d scale=%g%s | %s order", label, mode,
           p->batch, p->heads, p->heads_kv, p->n, p->n_kv, (double)p->scale, mods, order_name(order));
  c->cn = counts_of(p);
  c->q = malloc(c->cn.q * 4), c->k = malloc(c->cn.k * 4), c->v = malloc(c->cn.v * 4), c->o = malloc(c->cn.o * 4);
  c->ref = malloc(c->cn.o * sizeof(double));
  if (!c->q || !c->k || !c->v || !c->o || !c->ref) {
    FAIL("%s: out of memory", c->what);
    case_free(c);
    return -1;
  }
  fill_inputs(p, seed, c->q, c->k, c->v);
  if (inject) inject(p, c->q, c->k, c->v, arg);
  round_inputs(p, c->q, c->k, c->v);
  attn_reference(p, c->q, c->k, c->v, c->ref);
  return 0;
}

typedef struct {
  ptx_buffer_stats q, k, v, o, scratch; /* the real kernel's global traffic per array */
  ptx_stats st;
  unsigned long long io_reads, io_writes; /* the counting build's entries (io mode) */
} emu_result;

/* Runs module m (the kernel, or its counting build: counting) on inputs q, k, v (float values exactly
 * representable in p's dtype) under the launch geometry g: attn_init first when the geometry has constants, then
 * attn_kernel. o gets the outputs, *r the traffic; returns the number of outputs never written (still holding the
 * poison, all bits set), or -1 with a failure reported. */
static long emu_exec(const ptx_module *m, int counting, const attn_problem *p, const attn_cuda_geom *g,
                     unsigned order, const float *q, const float *k, const float *v, float *o, emu_result *r,
                     const char *what) {
  const counts c = counts_of(p);
  const size_t es = attn_dtype_size(p->dtype);
  size_t most = c.q > c.k ? c.q : c.k;
  if (c.v > most) most = c.v;
  if (c.o > most) most = c.o;
  unsigned char *raw = malloc(most * es);
  char err[1024];
  long unwritten = -1;
  ptx_machine *x = ptx_machine_new(m, err, sizeof err);
  if (!raw || !x) {
    FAIL("%s: %s", what, x ? "out of memory" : err);
    goto out;
  }
  ptx_machine_set_approx(x, approx_worst);
  const uint64_t dq = ptx_alloc(x, c.q * es, "q"), dk = ptx_alloc(x, c.k * es, "k"), dv = ptx_alloc(x, c.v * es, "v");
  const uint64_t dout = ptx_alloc(x, c.o * es, "o");
  const uint64_t dscr = g->scratch > 0 ? ptx_alloc(x, (uint64_t)g->scratch, "scratch") : 0;
  const uint64_t dcon = g->consts > 0 ? ptx_alloc(x, (uint64_t)g->consts, "consts") : 0;
  const uint64_t dio = counting ? ptx_alloc(x, 16, "io") : 0;
  const uint64_t dal = p->alibi_slopes ? ptx_alloc(x, (uint64_t)p->heads * 4, "alibi") : 0;
  if (!dq || !dk || !dv || !dout || (g->scratch > 0 && !dscr) || (g->consts > 0 && !dcon) || (counting && !dio) ||
      (p->alibi_slopes && !dal)) {
    FAIL("%s: out of memory", what);
    goto out;
  }
  to_raw(p->dtype, q, c.q, raw);
  int ok = ptx_copy_in(x, dq, raw, c.q * es) == 0;
  to_raw(p->dtype, k, c.k, raw);
  ok &= ptx_copy_in(x, dk, raw, c.k * es) == 0;
  to_raw(p->dtype, v, c.v, raw);
  ok &= ptx_copy_in(x, dv, raw, c.v * es) == 0;
  memset(raw, 0xff, c.o * es); /* the poison */
  ok &= ptx_copy_in(x, dout, raw, c.o * es) == 0;
  const unsigned long long zero[2] = {0, 0};
  if (counting) ok &= ptx_copy_in(x, dio, zero, sizeof zero) == 0;
  if (dal) ok &= ptx_copy_in(x, dal, p->alibi_slopes, (size_t)p->heads * 4) == 0;
  if (!ok) {
    FAIL("%s: cannot copy the inputs in", what);
    goto out;
  }
  attn_cuda_kargs a;
  memset(&a, 0, sizeof a);
  a.batch = p->batch, a.heads = p->heads, a.heads_kv = p->heads_kv, a.n = p->n, a.n_kv = p->n_kv;
  a.scale = p->scale;
  a.grid_items = (int)g->items;
  a.window = p->window, a.softcap = p->softcap; /* as runtime/cuda.c passes them */
  a.alibi = (const float *)(uintptr_t)dal;
  a.consts = (void *)(uintptr_t)dcon;
  if (g->consts > 0) { /* as the runtime: once, with q, k, v, o, scratch and io NULL */
    const ptx_launch_cfg ic = {.grid = g->init_grid, .block = g->init_block, .dyn_smem = 0, .order = order};
    if (ptx_launch(x, "attn_init", &ic, &a, ATTN_CUDA_KARGS_DENSE_BYTES, err, sizeof err)) {
      FAIL("%s: attn_init: %s", what, err);
      goto out;
    }
  }
  a.q = (const void *)(uintptr_t)dq, a.k = (const void *)(uintptr_t)dk, a.v = (const void *)(uintptr_t)dv;
  a.o = (void *)(uintptr_t)dout;
  a.scratch = (void *)(uintptr_t)dscr;
  a.io = (unsigned long long *)(uintptr_t)dio;
  const ptx_launch_cfg kc = {.grid = g->grid, .block = g->block, .dyn_smem = (uint64_t)g->smem, .order = order};
  if (ptx_launch(x, "attn_kernel", &kc, &a, ATTN_CUDA_KARGS_DENSE_BYTES, err, sizeof err)) {
    FAIL("%s: attn_kernel: %s", what, err);
    goto out;
  }
  size_t undef = 0;
  unsigned long long io[2] = {0, 0};
  if (ptx_copy_out(x, dout, raw, c.o * es, &undef) || (counting && ptx_copy_out(x, dio, io, sizeof io, NULL))) {
    FAIL("%s: cannot copy the outputs out", what);
    goto out;
  }
  memset(r, 0, sizeof *r);
  r->io_reads = io[0];
  r->io_writes = io[1];
  ptx_buffer_stats_of(x, dq, &r->q);
  ptx_buffer_stats_of(x, dk, &r->k);
  ptx_buffer_stats_of(x, dv, &r->v);
  ptx_buffer_stats_of(x, dout, &r->o);
  if (dscr) ptx_buffer_stats_of(x, dscr, &r->scratch);
  ptx_stats_get(x, &r->st);
  unwritten = (long)from_raw(p->dtype, raw, c.o, o);
out:
  ptx_machine_free(x);
  free(raw);
  return unwritten;
}

/* The real kernel's global traffic, in 32-byte sectors per warp instruction, as entries of the input type, against
 * tuner/io_theory.c's closed form (reads of Q, K, V; writes of O); io_line says it for the ok line. */
static char io_line[256];

/* The closed form of a CUDA spec's transfers in entries, in terms of d and d_v (the CUDA kernels' I/O comments), and
 * tuner/io_theory.c's (attn_io_formula_window): the two must agree, with or without a window (both count only the key
 * blocks it reaches). 0, or -1 with a failure reported. */
static int formula(const attn_spec *s, const attn_problem *p, unsigned long long *fr, unsigned long long *fw,
                   const char *what) {
  const long long d = s->d, dv = attn_spec_dv(s), n = p->n, nkv = p->n_kv, bh = (long long)p->batch * p->heads;
  long long r = 0, w = 0;
  for (long long i0 = 0; i0 < n && s->algo != ATTN_ALGO_LOWRANK; i0 += s->br) {
    const long long R = n - i0 < s->br ? n - i0 : s->br;
    long long C = nkv, J = 0; /* keys visible to some row of the block: [J, C) */
    const long long e = i0 + nkv - n, win = p->window;
    if (s->causal) C = e + R < 0 ? 0 : e + R < nkv ? e + R : nkv;
    else if (win > 0) C = e + R - 1 + win < 0 ? 0 : e + R - 1 + win < nkv ? e + R - 1 + win : nkv;
    if (win > 0) J = e - win + 1 < 0 ? 0 : e - win + 1 < nkv ? e - win + 1 : nkv;
    if (s->algo == ATTN_ALGO_FLASH) {
      J = J / s->bc * s->bc; /* whole key blocks from the one holding the first key */
      if (C > J) C = ((C + s->bc - 1) / s->bc * s->bc < nkv ? (C + s->bc - 1) / s->bc * s->bc : nkv) - J;
      else C = 0;
      r += R * d + C * (d + dv);
      w += R * dv;
    } else {
      const long long t = s->tile > 0 ? s->tile : s->br;
      const long long nr = (R + t - 1) / t, nc = (C + t - 1) / t, ndv = (dv + t - 1) / t;
      r += d * R * nc + d * C * nr + R * C * ndv + dv * C * nr;
      w += R * C + R * dv;
    }
  }
  if (s->algo == ATTN_ALGO_LOWRANK) {
    r = nkv * (d + dv) + n * d;
    w = n * dv;
  }
  *fr = (unsigned long long)(r * bh);
  *fw = (unsigned long long)(w * bh);
  unsigned long long tr = 0, tw = 0;
  attn_io_formula_window(s, (long)bh, p->n, p->n_kv, p->window, &tr, &tw);
  if (tr != *fr || tw != *fw) {
    FAIL("%s: closed form %llu/%llu, tuner/io_theory.c's %llu/%llu", what, *fr, *fw, tr, tw);
    return -1;
  }
  return 0;
}

static int io_check(const attn_spec *s, const attn_problem *p, const emu_result *r, const char *what) {
  const unsigned long long es = attn_dtype_size(p->dtype);
  unsigned long long fr = 0, fw = 0;
  if (formula(s, p, &fr, &fw, what)) return -1;
  /* slow scratch (smallcache's S) is fp32 and counted by the formula; lowrank's constants are not */
  const unsigned long long sr = (r->q.read_sectors + r->k.read_sectors + r->v.read_sectors) * 32 / es +
                                r->scratch.read_sectors * 32 / 4;
  const unsigned long long sw = r->o.write_sectors * 32 / es + r->scratch.write_sectors * 32 / 4;
  /* The tensor-core flash kernels move Q, K, V with 16-byte copies of whole rows and stage O for 16-byte stores:
   * their sectors are the formula exactly where rows are whole 32-byte sectors (d, d_v multiples of 16). The others
   * read or store some arrays a word per lane (O in fp32, S in smallcache's scratch, rows of other d by element or
   * in part of a sector), in partial sectors: their sectors must not be fewer than the entries the formula counts,
   * and the excess is reported. */
  const int exact = s->algo == ATTN_ALGO_FLASH && p->dtype != ATTN_F32 && s->d % 16 == 0 && p->d_v % 16 == 0;
  int bad = 0;
  if (exact ? sr != fr || sw != fw : sr < fr || sw < fw) {
    FAIL("%s: global traffic %llu/%llu entries (32-byte sectors: q %llu, k %llu, v %llu read, o %llu written), "
         "tuner/io_theory.c's formula %llu/%llu", what, sr, sw, (unsigned long long)r->q.read_sectors,
         (unsigned long long)r->k.read_sectors, (unsigned long long)r->v.read_sectors,
         (unsigned long long)r->o.write_sectors, fr, fw);
    bad = 1;
  }
  /* ... and there (docs/cuda.md) their ldmatrix reads, and up to d_v = 256 (O not split over warps) their other
   * shared accesses, are free of bank conflicts: each warp instruction in the fewest wavefronts its bytes need (a
   * lost swizzle costs up to 8x on ldmatrix) */
  const int whole = p->d_v <= 256;
  const int conflicts = (whole && r->st.shared_wavefronts != r->st.shared_ideal) ||
                        r->st.ldsm_wavefronts != r->st.ldsm_ideal;
  if (exact && conflicts) {
    FAIL("%s: bank conflicts: shared wavefronts %llu (fewest %llu), ldmatrix wavefronts %llu (fewest %llu)", what,
         (unsigned long long)r->st.shared_wavefronts, (unsigned long long)r->st.shared_ideal,
         (unsigned long long)r->st.ldsm_wavefronts, (unsigned long long)r->st.ldsm_ideal);
    bad = 1;
  }
  int n = sr == fr && sw == fw ? snprintf(io_line, sizeof io_line, "sectors = formula %llu/%llu", fr, fw)
                                : snprintf(io_line, sizeof io_line, "sectors %.2fx/%.2fx the formula's %llu/%llu",
                                           (double)sr / (double)(fr ? fr : 1), (double)sw / (double)(fw ? fw : 1), fr, fw);
  if (r->st.shared_ideal)
    n += snprintf(io_line + n, sizeof io_line - (size_t)n, ", shared wavefronts %llu/%llu",
                  (unsigned long long)r->st.shared_wavefronts, (unsigned long long)r->st.shared_ideal);
  if (r->st.ldsm_ideal)
    snprintf(io_line + n, sizeof io_line - (size_t)n, ", ldmatrix %llu/%llu", (unsigned long long)r->st.ldsm_wavefronts,
             (unsigned long long)r->st.ldsm_ideal);
  return bad ? -1 : 0;
}

static attn_spec default_spec(attn_algo a, attn_dtype t, int d, int dv, int causal);

/* Runs one shape through the built binary; 0 when every check passes. */
static int run_shape(const attn_spec *s, const char *label, const shape *sh, unsigned order,
                     unsigned long long seed) {
  cases++;
  emu_case c;
  if (case_setup(&c, s, label, sh, "", order, seed, NULL, NULL) != 0) return -1;
  const attn_problem p = c.p;
  const char *what = c.what;
  const long long bh = (long long)p.batch * p.heads;
  const size_t no = c.cn.o, dv = (size_t)p.d_v;
  const float *o = c.o;
  const double *ref = c.ref;
  int bad = 0;
  emu_result r;
  const long unwritten = emu_exec(mod, 0, &p, &c.g, order, c.q, c.k, c.v, c.o, &r, what);
  if (unwritten < 0) {
    bad = 1;
    goto out;
  }
  if (unwritten) {
    FAIL("%s: %ld of %zu outputs never written", what, unwritten, no);
    bad = 1;
  }
  /* rows that see no key (causal, i < n - n_kv; a window, not causal: i <= n - n_kv - w) are zeros */
  long zero_bad = 0;
  for (size_t r0 = 0; r0 < (size_t)bh * p.n; r0++) {
    long lo, hi;
    attn_visible_keys(&p, (long)(r0 % (size_t)p.n), &lo, &hi);
    if (hi <= lo)
      for (size_t j = 0; j < dv; j++) zero_bad += o[r0 * dv + j] != 0.0f;
  }
  if (zero_bad) {
    FAIL("%s: %ld outputs of rows that see no key are not 0", what, zero_bad);
    bad = 1;
  }
  const double fro = attn_rel_error(ref, o, no);
  /* the worst row, relative to the norm of its weighted sum of |V| (sum_j P_ij |V_j|, what the rounding errors of
   * P V scale with): relative to the row's own norm, a row whose weighted values cancel (d_v = 1, o_i near 0) would
   * be ill-conditioned (rows that see no key are checked above) */
  double *mag = malloc(no * sizeof(double));
  float *vabs = malloc(c.cn.v * 4);
  if (!mag || !vabs) {
    free(mag);
    free(vabs);
    FAIL("%s: out of memory", what);
    bad = 1;
    goto out;
  }
  for (size_t i = 0; i < c.cn.v; i++) vabs[i] = fabsf(c.v[i]);
  attn_reference(&p, c.q, c.k, vabs, mag);
  free(vabs);
  double row = 0.0;
  for (size_t r0 = 0; r0 < (size_t)bh * p.n; r0++) {
    double num = 0.0, den = 0.0;
    for (size_t j = 0; j < dv; j++) {
      const double e = (double)o[r0 * dv + j] - ref[r0 * dv + j];
      num += e * e;
      den += mag[r0 * dv + j] * mag[r0 * dv + j];
    }
    const double e = den > 0.0 ? sqrt(num / den) : sqrt(num);
    if (!(e <= row)) row = isnan(e) ? INFINITY : e;
  }
  free(mag);
  char errs[200];
  if (s->algo == ATTN_ALGO_LOWRANK) {
    /* an approximation: within the tolerance its plan was made for, against fp64; and the CPU lowrank kernel's
     * values on the same features */
    float *co = malloc(no * 4);
    double *co64 = malloc(no * sizeof(double));
    if (!co || !co64 || cpu_twin(s, &p, c.q, c.k, c.v, co) != 0) {
      FAIL("%s: the CPU lowrank kernel failed: %s", what, attn_last_error(cpu_rt));
      bad = 1;
    } else {
      for (size_t i = 0; i < no; i++) co64[i] = co[i];
      const double diff = attn_rel_error(co64, o, no), lim = p.dtype == ATTN_F32 ? 1e-3 : 2e-2;
      if (!(diff <= lim)) {
        FAIL("%s: differs from the CPU lowrank kernel by %.3g > %g (vs fp64 %.3g)", what, diff, lim, fro);
        bad = 1;
      }
      /* Taylor features meet the plan's tolerance, and so must the default wherever Taylor features fit (a default
       * that cannot meet the tolerance is not a default); random features are reported: at ranks that fit the
       * shared memory they are 25-200% off exact attention on these inputs */
      const attn_spec def = default_spec(s->algo, s->dtype, s->d, attn_spec_dv(s), s->causal);
      attn_spec tay = *s;
      tay.feature = ATTN_FEAT_TAYLOR, tay.degree = 2, tay.rank = 0;
      const long long tsm = attn_spec_cuda_smem(&tay);
      const int is_default = def.feature == s->feature && def.rank == s->rank && def.degree == s->degree;
      const int bounded = s->feature == ATTN_FEAT_TAYLOR || (is_default && tsm > 0 && tsm <= 163 * 1024);
      if (bounded && !(fro <= p.tolerance)) {
        FAIL("%s: relative error %.3g against fp64, above the plan's tolerance %g", what, fro, p.tolerance);
        bad = 1;
      }
      snprintf(errs, sizeof errs, "vs fp64 %.2e (%s %g), vs cpu lowrank %.2e", fro,
               bounded ? "tolerance" : "not bounded: random features; tolerance", p.tolerance, diff);
    }
    free(co);
    free(co64);
  } else {
    double tol, rtol;
    emu_limits(&p, &tol, &rtol);
    const double u = emu_unit_roundoff(p.dtype);
    if (!(fro <= tol) || !(row <= rtol)) {
      FAIL("%s: relative error %.3g = %.2f u (limit %.3g), worst row %.3g = %.2f u (limit %.3g)", what, fro, fro / u,
           tol, row, row / u, rtol);
      bad = 1;
    }
    if (fro / u > worst_fro_u) worst_fro_u = fro / u;
    if (row / u > worst_row_u) worst_row_u = row / u;
    snprintf(errs, sizeof errs, "err %.2e = %.2f u (limit %.2e), worst row %.2e = %.2f u (limit %.2e)", fro,
             fro / u, tol, row, row / u, rtol);
  }
  if (io_check(s, &p, &r, what)) bad = 1;
  if (!bad)
    printf("ok   %s: %s, %s\n", what, errs, io_line);
out:
  case_free(&c);
  return bad ? -1 : 0;
}

/* io mode: one shape through the counting build and the kernel itself; the template's counted entries, the real
 * kernel's sectors (as entries) and the closed form must agree. */
static int run_io_shape(const attn_spec *s, const char *label, const shape *sh, unsigned order,
                        unsigned long long seed) {
  cases++;
  emu_case c;
  if (case_setup(&c, s, label, sh, " io:", order, seed, NULL, NULL) != 0) return -1;
  const attn_problem p = c.p;
  const char *what = c.what;
  int bad = 0;
  emu_result rc, rk;
  if (emu_exec(count_mod, 1, &p, &c.g, order, c.q, c.k, c.v, c.o, &rc, what) < 0 ||
      emu_exec(mod, 0, &p, &c.g, order, c.q, c.k, c.v, c.o, &rk, what) < 0) {
    bad = 1;
    goto out;
  }
  unsigned long long fr = 0, fw = 0;
  if (formula(s, &p, &fr, &fw, what)) {
    bad = 1;
    goto out;
  }
  const unsigned long long es = attn_dtype_size(p.dtype);
  const unsigned long long sr = (rk.q.read_sectors + rk.k.read_sectors + rk.v.read_sectors) * 32 / es +
                                rk.scratch.read_sectors * 32 / 4;
  const unsigned long long sw = rk.o.write_sectors * 32 / es + rk.scratch.write_sectors * 32 / 4;
  printf("io   %s: reads counted %llu, sectors %llu, formula %llu; writes counted %llu, sectors %llu, formula %llu; "
         "shared wavefronts %llu (fewest %llu), ldmatrix %llu (fewest %llu)\n",
         what, (unsigned long long)rc.io_reads, sr, fr, (unsigned long long)rc.io_writes, sw, fw,
         (unsigned long long)rk.st.shared_wavefronts, (unsigned long long)rk.st.shared_ideal,
         (unsigned long long)rk.st.ldsm_wavefronts, (unsigned long long)rk.st.ldsm_ideal);
  if (rc.io_reads != fr || rc.io_writes != fw) {
    FAIL("%s: the counting build counted %llu/%llu, the formula says %llu/%llu", what,
         (unsigned long long)rc.io_reads, (unsigned long long)rc.io_writes, fr, fw);
    bad = 1;
  }
  if (io_check(s, &p, &rk, what)) bad = 1;
out:
  case_free(&c);
  return bad ? -1 : 0;
}

/* ---- non-finite inputs (nan mode) ---- */

/* As tests/cpu_nan.c: each batch element of a case gets one injection (batch b: injection b), so one run covers
 * them all; the reference's semantics are those of softmax(scale Q K^T) V element by element. */
enum { INJ_NONE, INJ_Q_NAN, INJ_K_NAN, INJ_V_NAN, INJ_Q_PINF, INJ_K_NINF, INJ_K_NINF_POSQ, INJ_K_NINF_ALL, INJ_COUNT };
static const char *const inj_names[INJ_COUNT] = {"none",   "q NaN",  "k NaN",          "v NaN",
                                                 "q +inf", "k -inf", "k -inf, q > 0", "all k -inf, q > 0"};

/* n, n_kv, heads_kv (heads = 2): n = 1, odd n, n < n_kv and n > n_kv (causal rows that see no key), blocks cut by
 * n and n_kv, one and two kv heads */
static const int NAN_SHAPES[][3] = {{1, 1, 1}, {1, 45, 2}, {17, 17, 1}, {33, 70, 2}, {70, 33, 1}, {97, 200, 2}};
#define NNAN_SHAPES (int)(sizeof NAN_SHAPES / sizeof NAN_SHAPES[0])

static unsigned long long nan_rng;
static long nan_rnd(long below) {
  nan_rng = nan_rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (long)((nan_rng >> 33) % (unsigned long long)below);
}

/* Injection inj into batch element b of q, k, v; says where into what. A poisoned key is one that some rows see and
 * others do not when the shape allows it (causal: key j is visible to rows i >= j - (n_kv - n)). */
static void nan_inject(const attn_problem *p, int b, int inj, float *q, float *k, float *v, char *what, size_t len) {
  const long d = p->d, dv = p->d_v, hq = nan_rnd(p->heads), hk = nan_rnd(p->heads_kv), i = nan_rnd(p->n);
  const long col = nan_rnd(d), vcol = col < dv ? col : col % dv;
  const long jlo = p->n_kv - p->n + 1 > 0 ? p->n_kv - p->n + 1 : 0;
  long j = jlo < p->n_kv ? jlo + nan_rnd(p->n_kv - jlo) : nan_rnd(p->n_kv);
  float *qb = q + (long)b * p->heads * p->n * d, *kb = k + (long)b * p->heads_kv * p->n_kv * d;
  float *vb = v + (long)b * p->heads_kv * p->n_kv * dv;
  float *qrow = qb + (hq * p->n + i) * d;
  if (inj == INJ_NONE) {
    snprintf(what, len, "batch %d: %s", b, inj_names[inj]);
  } else if (inj == INJ_Q_NAN || inj == INJ_Q_PINF) {
    qrow[col] = inj == INJ_Q_NAN ? NAN : INFINITY;
    snprintf(what, len, "batch %d: %s at head %ld row %ld col %ld", b, inj_names[inj], hq, i, col);
  } else if (inj == INJ_K_NINF_ALL) {
    for (long x = 0; x < p->heads * p->n * d; x++) qb[x] = fabsf(qb[x]) + 1e-3f; /* > 0: -inf keeps its sign */
    for (long x = 0; x < p->heads_kv * p->n_kv; x++) kb[x * d + col] = -INFINITY;
    snprintf(what, len, "batch %d: %s, col %ld", b, inj_names[inj], col);
  } else {
    if (inj == INJ_K_NINF_POSQ) {
      for (long x = 0; x < p->heads * p->n * d; x++) qb[x] = fabsf(qb[x]) + 1e-3f;
      if (nan_rnd(2)) j = 0; /* key 0 half the time: causal with n = n_kv, row 0 sees only it */
    }
    float *e = inj == INJ_V_NAN ? vb + (hk * p->n_kv + j) * dv + vcol : kb + (hk * p->n_kv + j) * d + col;
    *e = inj == INJ_K_NAN || inj == INJ_V_NAN ? NAN : -INFINITY;
    snprintf(what, len, "batch %d: %s at kv head %ld key %ld col %ld", b, inj_names[inj], hk, j,
             inj == INJ_V_NAN ? vcol : col);
  }
}

/* Elements of batch element b ([b*per, (b+1)*per)): NaN exactly where the reference is NaN; elsewhere finite, and
 * within abs_tol of want per element (abs_tol >= 0) or, over the batch element's non-NaN elements, within rel_tol
 * relative (Frobenius) of want; rows that see no key exactly 0. Returns the number of mismatches (the first few
 * reported under ctx). */
static long nan_compare(const attn_problem *p, int b, const double *ref, const double *want, const float *o,
                        double abs_tol, double rel_tol, const char *ctx, double *err) {
  const size_t dv = (size_t)p->d_v, per = (size_t)p->heads * p->n * dv, x0 = (size_t)b * per;
  long bad = 0;
  double num = 0, den = 0, mx = 0;
  for (size_t x = x0; x < x0 + per; x++) {
    const long row = (long)((x / dv) % (size_t)p->n);
    long lo, hi;
    attn_visible_keys(p, row, &lo, &hi);
    const int unseen = hi <= lo;
    const int rn = isnan(ref[x]), on = isnan(o[x]);
    int wrong = rn != on || (!rn && !isfinite(o[x])) || (unseen && o[x] != 0.0f);
    if (!wrong && !rn) {
      const double e = fabs((double)o[x] - want[x]);
      if (abs_tol >= 0 && !(e <= abs_tol)) wrong = 1;
      if (e > mx) mx = e;
      num += e * e;
      den += want[x] * want[x];
    }
    if (wrong) {
      if (bad < 4)
        printf("     %s: head %ld row %ld col %ld: out %.9g, reference %.9g", ctx,
               (long)((x - x0) / ((size_t)p->n * dv)), row, (long)(x % dv), (double)o[x], ref[x]);
      if (bad < 4) printf(want != ref ? ", cpu lowrank %.9g\n" : "\n", want[x]);
      bad++;
    }
  }
  if (abs_tol < 0) {
    mx = den > 0 ? sqrt(num / den) : sqrt(num);
    if (!(mx <= rel_tol)) {
      printf("     %s: relative error %.3g > %g over the non-NaN elements\n", ctx, mx, rel_tol);
      bad++;
    }
  }
  *err = mx;
  return bad;
}

/* nan mode's injections into a case's inputs: batch element b gets injection b, said in where[b] */
typedef struct {
  unsigned long long seed;
  char where[INJ_COUNT][160];
} nan_arg;
static void nan_injections(const attn_problem *p, float *q, float *k, float *v, void *arg) {
  nan_arg *na = arg;
  nan_rng = na->seed * 7919ULL + 17;
  for (int b = 0; b < INJ_COUNT; b++) nan_inject(p, b, b, q, k, v, na->where[b], sizeof na->where[b]);
}

/* One shape of the nan mode: batch = INJ_COUNT, injection b in batch element b. */
static int run_nan_shape(const attn_spec *s, const char *label, int si, unsigned order,
                         unsigned long long seed) {
  cases++;
  /* lowrank's random features approximate well only at a small scale (tests/cpu_nan.c) */
  const float scale = s->algo == ATTN_ALGO_LOWRANK && s->feature == ATTN_FEAT_RANDOM ? 0.3f / sqrtf((float)s->d) : 0;
  const shape sh = {INJ_COUNT, 2, NAN_SHAPES[si][2], NAN_SHAPES[si][0], NAN_SHAPES[si][1], scale};
  nan_arg na = {.seed = seed};
  emu_case c;
  if (case_setup(&c, s, label, &sh, " nan:", order, seed, nan_injections, &na) != 0) return -1;
  const attn_problem p = c.p;
  const char *what = c.what;
  const size_t no = c.cn.o;
  const double *ref = c.ref, *want = c.ref;
  float *co = NULL;
  double *want64 = NULL;
  int bad = 0;
  if (s->algo == ATTN_ALGO_LOWRANK) {
    co = malloc(no * 4);
    want64 = malloc(no * sizeof(double));
    if (!co || !want64 || cpu_twin(s, &p, c.q, c.k, c.v, co) != 0) {
      FAIL("%s: the CPU lowrank kernel failed: %s", what, attn_last_error(cpu_rt));
      bad = 1;
      goto out;
    }
    for (size_t x = 0; x < no; x++) want64[x] = co[x];
    want = want64;
  }
  emu_result r;
  const long unwritten = emu_exec(mod, 0, &p, &c.g, order, c.q, c.k, c.v, c.o, &r, what);
  if (unwritten < 0) {
    bad = 1;
    goto out;
  }
  if (unwritten) {
    FAIL("%s: %ld of %zu outputs never written", what, unwritten, no);
    bad = 1;
  }
  /* flash, smallcache: against fp64 per element (the output's rounding, and P's on the tensor cores); lowrank: the
   * NaN pattern of fp64, the values of the CPU lowrank kernel on the same inputs */
  const double atol = s->algo == ATTN_ALGO_LOWRANK ? -1
                      : p.dtype == ATTN_F32      ? 1e-4
                      : p.dtype == ATTN_F16      ? 4e-3
                                                 : 2e-2;
  const double rtol = p.dtype == ATTN_F32 ? 1e-3 : 2e-2;
  double worst = 0;
  for (int b = 0; b < INJ_COUNT; b++) {
    double e = 0;
    const long nb = nan_compare(&p, b, ref, want, c.o, atol, rtol, na.where[b], &e);
    if (nb) {
      FAIL("%s: %s: %ld mismatches", what, na.where[b], nb);
      bad = 1;
    }
    if (e > worst) worst = e;
  }
  if (!bad)
    printf("ok   %s: %d injections, worst %s %.2e\n", what, INJ_COUNT,
           s->algo == ATTN_ALGO_LOWRANK ? "relative error vs cpu lowrank" : "abs error", worst);
out:
  free(co);
  free(want64);
  case_free(&c);
  return bad ? -1 : 0;
}

/* ---- specs ---- */

static void describe(const attn_spec *s, char *out, size_t len) {
  int n = snprintf(out, len, "%s %s d=%d br=%d bc=%d warps=%d", attn_algo_name(s->algo), attn_dtype_name(s->dtype),
                   s->d, s->br, s->bc, s->warps);
  if (attn_spec_dv(s) != s->d) n += snprintf(out + n, len - n, " dv=%d", attn_spec_dv(s));
  if (s->algo == ATTN_ALGO_FLASH) n += snprintf(out + n, len - n, " stages=%d", s->stages);
  if (s->algo == ATTN_ALGO_SMALLCACHE) n += snprintf(out + n, len - n, " tile=%d", s->tile);
  if (s->algo == ATTN_ALGO_LOWRANK) {
    if (s->feature == ATTN_FEAT_TAYLOR) n += snprintf(out + n, len - n, " taylor degree=%d", s->degree);
    else n += snprintf(out + n, len - n, " random rank=%d", s->rank);
  }
  snprintf(out + n, len - n, "%s%s%s%s", s->causal ? " causal" : "", s->window ? " window" : "",
           s->softcap ? " softcap" : "", s->alibi ? " alibi" : "");
}

/* Shapes at the spec's tiles' edges: n = Br - 1, Br, Br + 1 and n_kv = m Bc - 1, m Bc, m Bc + 1 (Bc: the keys a
 * block takes at once, smallcache's tile T; Br: the query rows a block takes, lowrank's Bc), with m = 1 or 2 so that
 * n < n_kv and n > n_kv both occur (causal: rows that see no key, and the diagonal crossing key blocks at every
 * offset). --quick: three of the nine, each residue of n and of n_kv once (a Latin square), for the first spec of
 * each tile and causal value; otherwise all nine for every spec. Returns how many it wrote into out. */
static int boundary_shapes(const attn_spec *s, shape *out) {
  const int bc = s->algo == ATTN_ALGO_SMALLCACHE ? (s->tile > 0 ? s->tile : s->br) : s->bc > 0 ? s->bc : 64;
  const int br = s->algo == ATTN_ALGO_LOWRANK ? bc : s->br > 0 ? s->br : 64; /* lowrank: Bc query rows a step */
  /* --quick (CI): once per tile and causal value in a run (the defaults of many d share a few tiles) */
  static int seen[64][3], nseen;
  for (int i = 0; quick && i < nseen; i++)
    if (seen[i][0] == br && seen[i][1] == bc && seen[i][2] == s->causal) return 0;
  if (quick && nseen < 64) {
    seen[nseen][0] = br, seen[nseen][1] = bc, seen[nseen][2] = s->causal;
    nseen++;
  }
  int k = 0;
  for (int i = -1; i <= 1; i++)
    for (int j = -1; j <= 1; j++) {
      if (quick && (j - i + 3) % 3 != 1) continue; /* (-1, 0), (0, 1), (1, -1) */
      const int m = (i + j + 2) % 2 + 1;
      const shape sh = {1, 1, 1, br + i, m * bc + j, 0.0f};
      out[k++] = sh;
    }
  return k;
}

static void run_spec(const attn_spec *s) {
  char label[256], err[512];
  describe(s, label, sizeof label);
  if (attn_spec_check(s, err, sizeof err) != ATTN_OK) {
    FAIL("%s: %s", label, err);
    return;
  }
  const double t0 = now();
  if (build(s, label) != 0) return;
  const double t1 = now();
  shape list[NSHAPES + 9];
  int nshapes = 0;
  for (int i = 0; i < (nan_mode ? NNAN_SHAPES : quick ? 4 : NSHAPES); i++) list[nshapes++] = SHAPES[i];
  const int nfixed = nshapes;
  /* the tiles' edges (the io mode checks the counting build on the fixed shapes; every mode checks sectors) */
  if (!nan_mode && !io_mode) nshapes += boundary_shapes(s, list + nshapes);
  unsigned long long base = 1;
  const char *e = getenv("ATTN_TEST_SEED");
  if (e && *e) base = strtoull(e, NULL, 10);
  for (int i = 0; i < nshapes; i++)
    for (int j = 0; j < (all_orders && i < nfixed ? 3 : 1); j++)
      /* windowed: each shape with the windows in turn (--quick), or with every one */
      for (int wi = 0; wi < (nwindows == 0 ? 1 : quick ? 1 : nwindows); wi++) {
        cur_window = nwindows == 0 ? 0 : windows[quick ? i % nwindows : wi];
        /* blocks and warps in order, reversed, or shuffled (the seed from the shape); one order per shape in turn
         * (--all-orders: every order on the fixed shapes) */
        const int o = all_orders && i < nfixed ? j : i % 3;
        const unsigned order = o == 2 ? 2u + (unsigned)i : (unsigned)o;
        const unsigned long long seed = base * 1000003ULL + (unsigned long long)i;
        if (io_mode) run_io_shape(s, label, &list[i], order, seed);
        else if (nan_mode) run_nan_shape(s, label, i, order, seed);
        else run_shape(s, label, &list[i], order, seed);
      }
  printf("     %s: compiled in %.1f s, ran in %.1f s\n", label, t1 - t0, now() - t1);
}

static int parse_field(attn_spec *s, const char *kv) {
  const char *eq = strchr(kv, '=');
  if (!eq) return -1;
  const size_t kl = (size_t)(eq - kv);
  const char *v = eq + 1;
  char *end;
  long x = strtol(v, &end, 10);
  const int num = *v && !*end;
#define FIELD(name, dst)                              \
  if (kl == strlen(name) && !strncmp(kv, name, kl)) { \
    if (!num) return -1;                              \
    dst = (int)x;                                     \
    return 0;                                         \
  }
  FIELD("d", s->d)
  FIELD("dv", s->dv)
  FIELD("br", s->br)
  FIELD("bc", s->bc)
  FIELD("causal", s->causal)
  FIELD("warps", s->warps)
  FIELD("stages", s->stages)
  FIELD("tile", s->tile)
  FIELD("degree", s->degree)
  FIELD("rank", s->rank)
#undef FIELD
  if (kl == 4 && !strncmp(kv, "seed", 4) && num) {
    s->seed = (unsigned)x;
    return 0;
  }
  if (kl == 4 && !strncmp(kv, "arch", 4)) {
    snprintf(s->arch, sizeof s->arch, "%s", v);
    return 0;
  }
  /* the modifiers: the problem's values, the spec's flags */
  if (kl == 6 && !strncmp(kv, "window", 6)) {
    nwindows = 0;
    for (const char *t = v; *t && nwindows < MAX_WINDOWS; t = *end == ',' ? end + 1 : end) {
      const long w = strtol(t, &end, 10);
      if (end == t || w < 1 || w > 0x7fffffff || (*end && *end != ',')) return -1;
      windows[nwindows++] = (int)w;
    }
    s->window = nwindows > 0;
    return nwindows > 0 ? 0 : -1;
  }
  if (kl == 7 && !strncmp(kv, "softcap", 7)) {
    const float c = strtof(v, &end);
    if (!*v || *end || !(c > 0) || !isfinite(c)) return -1;
    mod_softcap = c;
    s->softcap = 1;
    return 0;
  }
  if (kl == 5 && !strncmp(kv, "alibi", 5)) {
    if (!num || (x != 0 && x != 1)) return -1;
    mod_alibi = s->alibi = (int)x;
    return 0;
  }
  if (kl == 7 && !strncmp(kv, "feature", 7)) {
    if (!strcmp(v, "taylor")) s->feature = ATTN_FEAT_TAYLOR, s->rank = 0;
    else if (!strcmp(v, "random")) s->feature = ATTN_FEAT_RANDOM, s->rank = s->rank > 0 ? s->rank : 256;
    else return -1;
    return 0;
  }
  return -1;
}

/* The default spec of (d, d_v) as the runtime makes it: attn_spec_default, then dv and attn_spec_fit. */
static attn_spec default_spec(attn_algo a, attn_dtype t, int d, int dv, int causal) {
  attn_spec s = attn_spec_default(a, ATTN_TARGET_CUDA, t, d, causal);
  s.dv = dv > 0 && dv != d ? dv : 0;
  char err[256];
  if (attn_spec_fit(&s, err, sizeof err) != ATTN_OK) printf("     %s\n", err); /* attn_spec_check says it again */
  return s;
}

/* d=, dv= and causal= first (the default spec depends on them), then the rest over the default */
static int spec_from_args(attn_algo a, attn_dtype t, int argc, char **argv, attn_spec *s) {
  attn_spec pre;
  memset(&pre, 0, sizeof pre);
  pre.d = 64;
  for (int i = 0; i < argc; i++)
    if (!strncmp(argv[i], "d=", 2) || !strncmp(argv[i], "dv=", 3) || !strncmp(argv[i], "causal=", 7))
      parse_field(&pre, argv[i]);
  *s = default_spec(a, t, pre.d, pre.dv, pre.causal);
  for (int i = 0; i < argc; i++)
    if (parse_field(s, argv[i]) != 0) {
      fprintf(stderr, "cuda_emu: bad field %s\n", argv[i]);
      return -1;
    }
  if (s->dv == s->d) s->dv = 0; /* one spelling per kernel, as attn_spec_parse */
  return 0;
}

static int space(attn_algo a, attn_dtype t, int argc, char **argv) {
  attn_spec s;
  int stride = 1, offset = 0;
  char *rest[16];
  int nrest = 0;
  for (int i = 0; i < argc; i++) {
    if (!strncmp(argv[i], "stride=", 7)) stride = atoi(argv[i] + 7);
    else if (!strncmp(argv[i], "offset=", 7)) offset = atoi(argv[i] + 7);
    else if (nrest < 16) rest[nrest++] = argv[i];
  }
  if (spec_from_args(a, t, nrest, rest, &s) != 0 || stride < 1) return 2;
  char err[512];
  const attn_gpu *gpu = attn_gpu_find(strncmp(s.arch, "sm_8", 4) == 0 ? "A100" : "H100", err, sizeof err);
  if (!gpu) {
    FAIL("%s", err);
    return 1;
  }
  attn_space_opts o;
  memset(&o, 0, sizeof o);
  o.target = ATTN_TARGET_CUDA;
  o.dtype = t;
  o.d = s.d;
  o.causal = s.causal;
  o.algos = ATTN_ALGO_BIT(a);
  o.tolerance = 0.1;
  o.fast_mem_bytes = gpu->smem_per_block_kb * 1024.0;
  o.gpu = gpu;
  snprintf(o.arch, sizeof o.arch, "%s", s.arch);
  attn_space sp;
  if (attn_space_build(&o, &sp, err, sizeof err) != ATTN_OK) {
    FAIL("space: %s", err);
    return 1;
  }
  printf("the tuner's %s space for %s d=%d causal=%d on %s: %d configurations, every %d-th from %d\n",
         attn_algo_name(a), attn_dtype_name(t), s.d, s.causal, gpu->name, sp.count, stride, offset);
  for (int i = offset; i < sp.count; i += stride) {
    attn_spec c = sp.cfg[i]; /* with the score modifiers asked for */
    c.window = s.window, c.softcap = s.softcap, c.alibi = s.alibi;
    run_spec(&c);
  }
  attn_space_free(&sp);
  return 0;
}

/* The default spec (attn_spec_default, dv, attn_spec_fit) for every d = 16, 32, ..., 256, or for each d of the
 * list d=D,D,...; d_v = d, or dv=N for every d; causal on alternate d (which ones depends on the dtype) unless
 * causal= says */
static int defaults(attn_algo a, attn_dtype t, int argc, char **argv) {
  int causal = -1, step = 1, dv = 0;
  char dlist[256] = "";
  for (int i = 0; i < argc; i++) {
    if (!strncmp(argv[i], "causal=", 7)) causal = atoi(argv[i] + 7);
    else if (!strncmp(argv[i], "every=", 6) && (step = atoi(argv[i] + 6)) >= 1) continue;
    else if (!strncmp(argv[i], "dv=", 3) && (dv = atoi(argv[i] + 3)) >= 0) continue;
    else if (!strncmp(argv[i], "d=", 2)) snprintf(dlist, sizeof dlist, "%s", argv[i] + 2);
    else return 2;
  }
  if (dlist[0]) {
    int k = 0;
    for (char *tok = strtok(dlist, ","); tok; tok = strtok(NULL, ","), k++) {
      const int d = atoi(tok);
      if (d < 1) return 2;
      attn_spec s = default_spec(a, t, d, dv, causal < 0 ? (k + (int)t) % 2 : causal);
      run_spec(&s);
    }
    return 0;
  }
  /* every=K: d = 16, 16 + 16K, ... and always 256 (the largest) */
  for (int d = 16; d <= 256; d = d + 16 * step > 256 && d < 256 ? 256 : d + 16 * step) {
    attn_spec s = default_spec(a, t, d, dv, causal < 0 ? (d / 16 + (int)t) % 2 : causal);
    run_spec(&s);
  }
  return 0;
}

/* nan mode: the default spec (fields over it) for each d of the list d=D,D,... (default 16,64) and causal 0 and 1
 * (or causal=C), each on the shapes of NAN_SHAPES with every injection */
static int nan_specs(attn_algo a, attn_dtype t, int argc, char **argv) {
  char dlist[128] = "16,64";
  int causal = -1;
  char *rest[16];
  int nrest = 0;
  for (int i = 0; i < argc; i++) {
    if (!strncmp(argv[i], "d=", 2)) snprintf(dlist, sizeof dlist, "%s", argv[i] + 2);
    else if (!strncmp(argv[i], "causal=", 7)) causal = atoi(argv[i] + 7);
    else if (nrest < 14) rest[nrest++] = argv[i];
    else return 2;
  }
  nan_mode = 1;
  for (char *tok = strtok(dlist, ","); tok; tok = strtok(NULL, ",")) {
    for (int c = causal < 0 ? 0 : causal; c <= (causal < 0 ? 1 : causal); c++) {
      char dv[32], cv[32];
      snprintf(dv, sizeof dv, "d=%s", tok);
      snprintf(cv, sizeof cv, "causal=%d", c);
      char *args[16];
      int n = 0;
      args[n++] = dv;
      args[n++] = cv;
      for (int i = 0; i < nrest; i++) args[n++] = rest[i];
      attn_spec s;
      if (spec_from_args(a, t, n, args, &s) != 0) return 2;
      run_spec(&s);
    }
  }
  return 0;
}


int main(int argc, char **argv) {
  int i = 1;
  for (; i < argc && !strncmp(argv[i], "--", 2); i++) {
    if (!strcmp(argv[i], "--quick")) quick = 1;
    else if (!strcmp(argv[i], "--all-orders")) all_orders = 1;
    else if (!strcmp(argv[i], "--approx-worst")) approx_worst = 1;
    else {
      fprintf(stderr, "cuda_emu: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  const int is_space = i < argc && !strcmp(argv[i], "space"), is_defaults = i < argc && !strcmp(argv[i], "defaults");
  const int is_nan = i < argc && !strcmp(argv[i], "nan");
  io_mode = i < argc && !strcmp(argv[i], "io");
  i += is_space || is_defaults || is_nan || io_mode;
  if (argc - i < 2) {
    fprintf(stderr, "usage: cuda_emu [--quick] [--all-orders] [--approx-worst] ALGO DTYPE [FIELD=VALUE ...]\n"
                    "       cuda_emu [--quick] [--all-orders] space ALGO DTYPE d=D causal=C [stride=K] [offset=O]\n"
                    "       cuda_emu [--quick] [--all-orders] defaults ALGO DTYPE [causal=C] [every=K] [d=D,...]\n"
                    "                [dv=N]\n"
                    "       cuda_emu [--all-orders] nan ALGO DTYPE [d=D,...] [causal=C] [FIELD=VALUE ...]\n"
                    "       cuda_emu [--quick] io ALGO DTYPE [FIELD=VALUE ...]\n");
    return 2;
  }
  const int a = attn_algo_parse(argv[i]), t = attn_dtype_parse(argv[i + 1]);
  if (a < 0 || a == ATTN_ALGO_AUTO || t < 0) {
    fprintf(stderr, "cuda_emu: unknown algorithm %s or dtype %s\n", argv[i], argv[i + 1]);
    return 2;
  }
  if (keep()) {
    const char *tmp = getenv("TMPDIR");
    snprintf(workdir, sizeof workdir, "%s/attn-emu-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(workdir)) {
      fprintf(stderr, "cuda_emu: cannot create %s: %s\n", workdir, strerror(errno));
      return 1;
    }
  }
  int rc = 0;
  if (is_space) {
    rc = space((attn_algo)a, (attn_dtype)t, argc - i - 2, argv + i + 2);
  } else if (is_defaults) {
    rc = defaults((attn_algo)a, (attn_dtype)t, argc - i - 2, argv + i + 2);
  } else if (is_nan) {
    rc = nan_specs((attn_algo)a, (attn_dtype)t, argc - i - 2, argv + i + 2);
  } else {
    attn_spec s;
    if (spec_from_args((attn_algo)a, (attn_dtype)t, argc - i - 2, argv + i + 2, &s) != 0) rc = 2;
    else run_spec(&s);
  }
  attn_close(cpu_rt);
  ptx_module_free(mod);
  ptx_module_free(count_mod);
  if (keep()) printf("kept %s\n", workdir);
  if (rc == 2) return 2;
  if (no_nvrtc && !failures) return 77; /* skipped, with NVRTC's reason printed */
  if (worst_fro_u > 0 || worst_row_u > 0)
    printf("worst error against fp64: %.3g u over an output, %.3g u in a row (u: the dtype's unit roundoff)\n",
           worst_fro_u, worst_row_u);
  printf("cuda_emu: %d cases, %d failures\n", cases, failures);
  if (cases == 0) {
    printf("FAIL: no case ran\n");
    return 1;
  }
  return failures || rc ? 1 : 0;
}
