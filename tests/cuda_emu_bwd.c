/* cuda_emu_bwd: the CUDA flash backward (templates/flash_bwd.cu) as NVRTC compiles it, run on the PTX interpreter of
 * tests/ptx against the fp64 backward (attn_reference_backward), no GPU needed.
 *  cuda_emu_bwd [--quick] [--chain] [--compile] DTYPE [d=D,D,...] [dv=N] [causal=0|1|2] [arch=sm_80|sm_90]
 *               [tiles=BRxBCwWsS] [dq=atomic]
 * For each d (default 64) the backward's spec (attn_spec_backward_cuda: its tiles for d and d_v = N, default d; or
 * Br, Bc, warps and stages given by tiles=, admitted by attn_spec_check_backward_cuda within 227 KiB) goes
 * through NVRTC to the PTX of its arch, and the interpreter runs attn_bwd_pre then attn_kernel, as the runtime
 * launches them, for causal 0 and 1 (2, the default: both) on shapes with n = 1, odd n, n and n_kv at the tiles'
 * edges (B - 1, B, B + 1), n_kv != n both ways (causal rows that see no key, keys no row sees), grouped-query heads
 * (dK and dV summed over 2 and 3 query heads), batch > 1 and non-default scales (--quick: the first five), blocks
 * in forward, reverse and shuffled order in turn. Inputs q, k, v and dO are fresh random values rounded to the
 * dtype; O and lse are the fp64 forward's (O rounded to the dtype, lse to fp32), as the forward kernel would hand
 * them over; dQ, dK and dV are poisoned (all bits set) before the launch and must all be written. --chain: O and
 * lse come from the forward kernel (flash.cu, its default spec) run on the interpreter with lse asked for, as
 * attn_execute_lse runs it; its lse is checked against fp64's first (see check_lse), and the backward then gets the
 * kernel's O and lse. Checked: each gradient's error against fp64 over the norm of its magnitude within limits from
 * the dtype's unit roundoff (tests/bwd_util.h), and whatever the interpreter checks (races on shared memory and on
 * global memory across blocks, uninitialised reads, out-of-bounds and misaligned accesses, cp.async data read
 * before its wait); f16 and bf16: no bank conflicts (the shared-memory wavefronts, ldmatrix's apart, the fewest the bytes need). Exit 77 (skipped) without NVRTC; 1 when a case fails or none ran. ATTN_EMU_TEMPLATE=FILE runs
 * FILE in place of templates/flash_bwd.cu.
 * dq=atomic: the spec with dQ summed by fp32 atomics from the dK/dV blocks (attn_bwd_post after attn_kernel, as the
 * runtime launches it), checked as above with the same limits; each shape then runs again in another block order,
 * dq poisoned again: dK and dV must be bitwise the same as the first run's, dQ within the limit again.
 * --compile: no interpreter; the spec through NVRTC to a cubin, every entry without spills (local memory, stack),
 * and its text parsed back to the same spec. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernel_abi_cuda.h"
#include "kernel_abi_cuda_bwd.h"
#include "ptx/ptx.h"
#include "internal.h"
#include "launch.h"
#include "spec_bwd_cuda.h"
#include "bwd_util.h"
#include "emu_util.h"

static int failures, cases, quick, chain, no_nvrtc, compile_only;
static double worst_lse; /* chain: the largest |lse - fp64 lse| / (1 + |lse|) seen */
static unsigned long long smem_waves, smem_ideal; /* the backward's shared-memory wavefronts, and the fewest possible */
static unsigned long long ldsm_waves, ldsm_ideal; /* the same of its ldmatrix fragment loads */
static double worst_u[ATTN_BF16 + 1];

typedef struct {
  int batch, heads, heads_kv, n, n_kv;
  float scale; /* 0: 1/sqrt(d) */
} shape;

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
/* raw outputs to double; returns how many still hold the poison (all bits set: never written) */
static size_t from_raw(attn_dtype t, const unsigned char *raw, size_t count, double *x) {
  size_t unwritten = 0;
  for (size_t i = 0; i < count; i++) {
    if (t == ATTN_F32) {
      unsigned u;
      float f;
      memcpy(&u, raw + 4 * i, 4);
      memcpy(&f, &u, 4);
      x[i] = f;
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
/* --chain: the forward (module fm of spec fs) on the interpreter with lse asked for, as attn_execute_lse launches it:
 * o and lse get its outputs (o as floats of the dtype). 0, or -1 with a failure reported. */
static int forward_emu(const ptx_module *fm, const attn_spec *fs, const attn_problem *p, const float *q,
                       const float *k, const float *v, float *o, float *lse, const char *what) {
  char err[1024];
  attn_cuda_geom g;
  if (attn_cuda_geometry(fs, (long long)p->batch * p->heads, p->n, p->n_kv, 3, &g, err, sizeof err) != ATTN_OK) {
    FAIL("%s: forward geometry: %s", what, err);
    return -1;
  }
  const size_t bh = (size_t)p->batch * p->heads, bhk = (size_t)p->batch * p->heads_kv;
  const size_t cq = bh * p->n * p->d, ck = bhk * p->n_kv * p->d, cv = bhk * p->n_kv * p->d_v, co = bh * p->n * p->d_v;
  const size_t es = attn_dtype_size(p->dtype), rows = bh * p->n;
  unsigned char *raw = malloc((cq + ck + cv + co) * 4);
  double *o64 = malloc(co * 8);
  ptx_machine *x = raw && o64 ? ptx_machine_new(fm, err, sizeof err) : NULL;
  int rc = -1;
  if (!x) {
    FAIL("%s: %s", what, raw && o64 ? err : "out of memory");
    goto out;
  }
  const uint64_t dq = ptx_alloc(x, cq * es, "q"), dk = ptx_alloc(x, ck * es, "k"), dv = ptx_alloc(x, cv * es, "v");
  const uint64_t dout = ptx_alloc(x, co * es, "o"), dl = ptx_alloc(x, rows * 4, "lse");
  if (!dq || !dk || !dv || !dout || !dl) {
    FAIL("%s: out of device memory", what);
    goto out;
  }
  int ok = 1;
  to_raw(p->dtype, q, cq, raw), ok &= ptx_copy_in(x, dq, raw, cq * es) == 0;
  to_raw(p->dtype, k, ck, raw), ok &= ptx_copy_in(x, dk, raw, ck * es) == 0;
  to_raw(p->dtype, v, cv, raw), ok &= ptx_copy_in(x, dv, raw, cv * es) == 0;
  memset(raw, 0xff, (co > rows ? co : rows) * 4); /* the poison */
  ok &= ptx_copy_in(x, dout, raw, co * es) == 0 && ptx_copy_in(x, dl, raw, rows * 4) == 0;
  if (!ok) {
    FAIL("%s: cannot copy the forward's inputs in", what);
    goto out;
  }
  attn_cuda_kargs a;
  memset(&a, 0, sizeof a);
  a.q = (const void *)(uintptr_t)dq, a.k = (const void *)(uintptr_t)dk, a.v = (const void *)(uintptr_t)dv;
  a.o = (void *)(uintptr_t)dout, a.lse = (float *)(uintptr_t)dl;
  a.batch = p->batch, a.heads = p->heads, a.heads_kv = p->heads_kv, a.n = p->n, a.n_kv = p->n_kv, a.scale = p->scale;
  a.grid_items = (int)g.items;
  const ptx_launch_cfg kc = {.grid = g.grid, .block = g.block, .dyn_smem = (uint64_t)attn_spec_cuda_smem(fs)};
  if (ptx_launch(x, "attn_kernel", &kc, &a, ATTN_CUDA_KARGS_DENSE_BYTES, err, sizeof err)) {
    FAIL("%s: the forward's attn_kernel: %s", what, err);
    goto out;
  }
  size_t undef_o = 0, undef_l = 0;
  if (ptx_copy_out(x, dout, raw, co * es, &undef_o) || ptx_copy_out(x, dl, lse, rows * 4, &undef_l)) {
    FAIL("%s: cannot copy the forward's outputs out", what);
    goto out;
  }
  const size_t unwritten_o = from_raw(p->dtype, raw, co, o64);
  size_t unwritten_l = 0;
  for (size_t i = 0; i < rows; i++) {
    unsigned u;
    memcpy(&u, &lse[i], 4);
    unwritten_l += u == 0xffffffffu;
  }
  for (size_t i = 0; i < co; i++) o[i] = (float)o64[i];
  if (unwritten_o || unwritten_l) {
    FAIL("%s: the forward left %zu of %zu entries of o and %zu of %zu of lse unwritten", what, unwritten_o, co,
         unwritten_l, rows);
    goto out;
  }
  rc = 0;
out:
  ptx_machine_free(x);
  free(raw);
  free(o64);
  return rc;
}

/* --chain: the forward kernel's lse against fp64's: within 8 u32 (1 + |scale| sqrt(d)) (1 + |lse|) (the fp32 logits'
 * error, the log's relative error), and -inf exactly where fp64's is. 0, or -1 with a failure reported. */
static int check_lse(const attn_problem *p, const float *got, const float *want, const char *what) {
  const size_t rows = (size_t)p->batch * p->heads * p->n;
  const double tol = 8 * 0x1p-24 * (1.0 + fabs((double)p->scale) * sqrt((double)p->d));
  for (size_t i = 0; i < rows; i++) {
    const double g = got[i], w = want[i], e = fabs(g - w) / (1.0 + fabs(w));
    if (isinf(w) || isinf(g)) {
      if (g != w) {
        FAIL("%s: lse of row %zu is %g, fp64's %g", what, i, g, w);
        return -1;
      }
      continue;
    }
    if (e > worst_lse) worst_lse = e;
    if (!(e <= tol)) {
      FAIL("%s: lse of row %zu is %.9g, fp64's %.9g: error %.3g > %.3g", what, i, g, w, e, tol);
      return -1;
    }
  }
  return 0;
}

/* The backward's launches as the runtime makes them: attn_bwd_pre, attn_kernel, and with dq=atomic attn_bwd_post;
 * blocks in the given order. 0, or -1 with a failure reported. */
static int launch_bwd(ptx_machine *x, const attn_cuda_bwd_geom *g, attn_cuda_bwd_kargs *a, unsigned order,
                      const char *what) {
  char err[1024];
  const ptx_launch_cfg pc = {.grid = g->pre_grid, .block = g->block, .dyn_smem = 0, .order = order};
  const ptx_launch_cfg kc = {.grid = g->grid, .block = g->block, .dyn_smem = (uint64_t)g->smem, .order = order};
  const ptx_launch_cfg qc = {.grid = g->post_grid, .block = g->block, .dyn_smem = 0, .order = order};
  if (ptx_launch(x, "attn_bwd_pre", &pc, a, sizeof *a, err, sizeof err)) {
    FAIL("%s: attn_bwd_pre: %s", what, err);
    return -1;
  }
  if (ptx_launch(x, "attn_kernel", &kc, a, sizeof *a, err, sizeof err)) {
    FAIL("%s: attn_kernel: %s", what, err);
    return -1;
  }
  if (g->post_grid && ptx_launch(x, "attn_bwd_post", &qc, a, sizeof *a, err, sizeof err)) {
    FAIL("%s: attn_bwd_post: %s", what, err);
    return -1;
  }
  return 0;
}

static int run_shape(const ptx_module *m, const ptx_module *fm, const attn_spec *fs, const attn_spec *s,
                     const shape *sh, unsigned long long seed, const char *label) {
  static attn_runtime cuda_rules; /* normalises as for the CUDA target (f16 and bf16 allowed) */
  cuda_rules.target = ATTN_TARGET_CUDA;
  const attn_problem p0 = {.batch = sh->batch, .heads = sh->heads, .heads_kv = sh->heads_kv, .n = sh->n,
                           .n_kv = sh->n_kv, .d = s->d, .d_v = attn_spec_dv(s), .dtype = s->dtype,
                           .causal = s->causal, .scale = sh->scale};
  attn_problem p;
  char what[512], err[1024];
  if (attn_problem_normalize(&cuda_rules, &p0, &p) != ATTN_OK) {
    FAIL("%s: bad shape: %s", label, attn_last_error(&cuda_rules));
    return -1;
  }
  snprintf(what, sizeof what, "%s | batch=%d heads=%d/%d n=%d n_kv=%d scale=%g", label, p.batch, p.heads,
           p.heads_kv, p.n, p.n_kv, (double)p.scale);
  attn_cuda_bwd_geom g;
  if (attn_cuda_backward_geometry(s, p.batch, p.heads, p.heads_kv, p.n, p.n_kv, &g, err, sizeof err) != ATTN_OK) {
    FAIL("%s: geometry: %s", what, err);
    return -1;
  }
  const size_t bh = (size_t)p.batch * p.heads, bhk = (size_t)p.batch * p.heads_kv;
  const size_t cq = bh * p.n * p.d, ck = bhk * p.n_kv * p.d, cv = bhk * p.n_kv * p.d_v, co = bh * p.n * p.d_v;
  const size_t rows = bh * p.n, es = attn_dtype_size(p.dtype);
  float *q = malloc(cq * 4), *k = malloc(ck * 4), *v = malloc(cv * 4), *o = malloc(co * 4), *go = malloc(co * 4);
  float *lse = malloc(rows * 4), *klse = NULL; /* klse: what the backward gets, fp64's or the forward kernel's */
  double *o64 = malloc(co * 8), *rq = malloc(cq * 8), *rk = malloc(ck * 8), *rv = malloc(cv * 8);
  double *xq = malloc(cq * 8), *xk = malloc(ck * 8), *xv = malloc(cv * 8);
  unsigned char *raw = malloc((cq + ck + cv + co) * 4);
  ptx_machine *x = NULL;
  int rc = -1;
  if (!q || !k || !v || !o || !go || !lse || !o64 || !rq || !rk || !rv || !xq || !xk || !xv || !raw) {
    FAIL("%s: out of memory", what);
    goto out;
  }
  attn_fill_random(q, cq, seed * 5 + 1);
  attn_fill_random(k, ck, seed * 5 + 2);
  attn_fill_random(v, cv, seed * 5 + 3);
  attn_fill_random(go, co, seed * 5 + 4);
  round_to(p.dtype, q, cq);
  round_to(p.dtype, k, ck);
  round_to(p.dtype, v, cv);
  round_to(p.dtype, go, co);
  attn_reference(&p, q, k, v, o64);
  for (size_t i = 0; i < co; i++) o[i] = (float)o64[i];
  round_to(p.dtype, o, co);
  ref_lse(&p, q, k, lse);
  klse = lse;
  if (fm) {
    if (!(klse = malloc(rows * 4)) || forward_emu(fm, fs, &p, q, k, v, o, klse, what) ||
        check_lse(&p, klse, lse, what)) {
      if (!klse) FAIL("%s: out of memory", what);
      free(klse);
      klse = lse;
      goto out;
    }
  }
  attn_reference_backward(&p, q, k, v, o, go, rq, rk, rv);
  double mag[3];
  magnitudes(&p, q, k, v, o, go, lse, mag);

  if (!(x = ptx_machine_new(m, err, sizeof err))) {
    FAIL("%s: %s", what, err);
    goto out;
  }
  const uint64_t dq_ = ptx_alloc(x, cq * es, "q"), dk_ = ptx_alloc(x, ck * es, "k"), dv_ = ptx_alloc(x, cv * es, "v");
  const uint64_t do_ = ptx_alloc(x, co * es, "o"), dg_ = ptx_alloc(x, co * es, "dout");
  const uint64_t dl_ = ptx_alloc(x, rows * 4, "lse"), dd_ = ptx_alloc(x, (uint64_t)g.scratch, "delta");
  const uint64_t gq = ptx_alloc(x, cq * es, "dq"), gk = ptx_alloc(x, ck * es, "dk"), gv = ptx_alloc(x, cv * es, "dv");
  if (!dq_ || !dk_ || !dv_ || !do_ || !dg_ || !dl_ || !dd_ || !gq || !gk || !gv) {
    FAIL("%s: out of device memory", what);
    goto out;
  }
  int ok = 1;
  to_raw(p.dtype, q, cq, raw), ok &= ptx_copy_in(x, dq_, raw, cq * es) == 0;
  to_raw(p.dtype, k, ck, raw), ok &= ptx_copy_in(x, dk_, raw, ck * es) == 0;
  to_raw(p.dtype, v, cv, raw), ok &= ptx_copy_in(x, dv_, raw, cv * es) == 0;
  to_raw(p.dtype, o, co, raw), ok &= ptx_copy_in(x, do_, raw, co * es) == 0;
  to_raw(p.dtype, go, co, raw), ok &= ptx_copy_in(x, dg_, raw, co * es) == 0;
  ok &= ptx_copy_in(x, dl_, klse, rows * 4) == 0;
  memset(raw, 0xff, (cq > ck ? (cq > cv ? cq : cv) : (ck > cv ? ck : cv)) * es); /* the poison */
  ok &= ptx_copy_in(x, gq, raw, cq * es) == 0 && ptx_copy_in(x, gk, raw, ck * es) == 0 &&
        ptx_copy_in(x, gv, raw, cv * es) == 0;
  if (!ok) {
    FAIL("%s: cannot copy the inputs in", what);
    goto out;
  }
  attn_cuda_bwd_kargs a;
  memset(&a, 0, sizeof a);
  a.q = (const void *)(uintptr_t)dq_, a.k = (const void *)(uintptr_t)dk_, a.v = (const void *)(uintptr_t)dv_;
  a.o = (const void *)(uintptr_t)do_, a.dout = (const void *)(uintptr_t)dg_, a.lse = (const float *)(uintptr_t)dl_;
  a.dq = (void *)(uintptr_t)gq, a.dk = (void *)(uintptr_t)gk, a.dv = (void *)(uintptr_t)gv;
  a.delta = (float *)(uintptr_t)dd_;
  a.batch = p.batch, a.heads = p.heads, a.heads_kv = p.heads_kv, a.n = p.n, a.n_kv = p.n_kv, a.scale = p.scale;
  a.items_kv = g.items_kv, a.items_q = g.items_q;
  const unsigned order = (unsigned)(seed % 3); /* forward, reverse and shuffled block orders in turn */
  if (launch_bwd(x, &g, &a, order, what)) goto out;
  struct {
    const char *name;
    uint64_t dev;
    size_t count;
    double *got, *ref;
  } out3[3] = {{"dq", gq, cq, xq, rq}, {"dk", gk, ck, xk, rk}, {"dv", gv, cv, xv, rv}};
  const double lim = limit_of(&p), u = unit_roundoff(p.dtype);
  rc = 0;
  for (int i = 0; i < 3; i++) {
    if (ptx_copy_out(x, out3[i].dev, raw, out3[i].count * es, NULL)) {
      FAIL("%s: cannot copy %s out", what, out3[i].name);
      rc = -1;
      continue;
    }
    const size_t unwritten = from_raw(p.dtype, raw, out3[i].count, out3[i].got);
    const double e = rel_err(out3[i].got, out3[i].ref, out3[i].count, mag[i]);
    if (e / u > worst_u[p.dtype]) worst_u[p.dtype] = e / u;
    if (unwritten) {
      FAIL("%s: %zu of %zu entries of %s never written", what, unwritten, out3[i].count, out3[i].name);
      rc = -1;
    } else if (!(e <= lim)) {
      FAIL("%s: %s relative error %.3g > %.3g", what, out3[i].name, e, lim);
      rc = -1;
    }
  }
  /* dq=atomic: run again in another block order (and another order of arrival of the atomics): dK and dV must be
   * bitwise the same, dQ within the limit again */
  if (rc == 0 && s->dq) {
    unsigned char *first = malloc((ck + cv) * es);
    int ran = first && !ptx_copy_out(x, gk, first, ck * es, NULL) &&
              !ptx_copy_out(x, gv, first + ck * es, cv * es, NULL);
    memset(raw, 0xff, cq * es); /* dq poisoned again */
    ran = ran && !ptx_copy_in(x, gq, raw, cq * es) && !launch_bwd(x, &g, &a, (order + 1) % 3, what) &&
          !ptx_copy_out(x, gk, raw, ck * es, NULL) && !ptx_copy_out(x, gv, raw + ck * es, cv * es, NULL);
    if (!ran) {
      FAIL("%s: the second run in another block order did not complete", what);
      rc = -1;
    } else if (memcmp(first, raw, (ck + cv) * es) != 0) {
      FAIL("%s: dK or dV differ bitwise between two block orders (dq=atomic must keep them deterministic)", what);
      rc = -1;
    } else if (ptx_copy_out(x, gq, raw, cq * es, NULL)) {
      FAIL("%s: cannot copy dq out", what);
      rc = -1;
    } else {
      const size_t unwritten = from_raw(p.dtype, raw, cq, xq);
      const double e = rel_err(xq, rq, cq, mag[0]);
      if (unwritten || !(e <= lim)) {
        FAIL("%s: dq of the second run: %zu entries unwritten, relative error %.3g (limit %.3g)", what, unwritten, e,
             lim);
        rc = -1;
      }
    }
    free(first);
  }
  cases++;
  ptx_stats st;
  ptx_stats_get(x, &st);
  smem_waves += st.shared_wavefronts;
  smem_ideal += st.shared_ideal;
  ldsm_waves += st.ldsm_wavefronts;
  ldsm_ideal += st.ldsm_ideal;
  if (rc == 0) printf("ok %s\n", what);
out:
  ptx_machine_free(x);
  if (klse != lse) free(klse);
  free(q), free(k), free(v), free(o), free(go), free(lse), free(o64);
  free(rq), free(rk), free(rv), free(xq), free(xk), free(xv), free(raw);
  return rc;
}

/* src (freed) through NVRTC to the PTX of arch, loaded by the interpreter; NULL with a failure reported, or with
 * no_nvrtc set. */
static ptx_module *ptx_of(char *src, const char *arch, const char *label) {
  char *ptx = NULL, *log = NULL;
  const int rc = attn_nvrtc_ptx(src, "attn.cu", arch, &ptx, &log);
  free(src);
  return emu_load_ptx(rc, ptx, log, label, &no_nvrtc, &failures);
}

/* --compile: src (freed) through NVRTC to a cubin of the spec's arch: every entry compiled (attn_bwd_post with
 * dq=atomic), none spilling to local memory */
static void compile_spec(const attn_spec *s, char *src, const char *label) {
  /* the spec's text: " dq=atomic" written only where set, and parsed back to the same spec */
  char text[512], again[512], err[512];
  attn_spec back;
  attn_spec_format(s, text, sizeof text);
  if ((strstr(text, " dq=atomic") != NULL) != (s->dq != 0) || (!s->dq && strstr(text, "dq=")))
    FAIL("%s: spec text '%s' does not say dq=%d as it should", label, text, s->dq);
  else if (attn_spec_parse(text, &back, err, sizeof err) != ATTN_OK) {
    /* attn_spec_parse applies the forward's rules, which refuse some backward tiles whatever dq is (e.g. Br = 16
     * over 8 warps): only a refusal that the same spec without dq escapes is dq's */
    attn_spec det = *s;
    det.dq = 0;
    char dtext[512], derr[512];
    attn_spec_format(&det, dtext, sizeof dtext);
    if (attn_spec_parse(dtext, &back, derr, sizeof derr) == ATTN_OK)
      FAIL("%s: spec text '%s' does not parse: %s", label, text, err);
    else
      printf("%s: its text does not parse with dq or without (%s)\n", label, derr);
  } else if (back.dq != s->dq || attn_spec_format(&back, again, sizeof again) < 0 || strcmp(text, again) != 0)
    FAIL("%s: spec text '%s' parses back to dq=%d '%s'", label, text, back.dq, again);
  void *cubin = NULL;
  size_t len = 0;
  char *log = NULL;
  const int rc = attn_nvrtc_compile(src, "attn_bwd.cu", s->arch, &cubin, &len, &log);
  free(src);
  if (rc == ATTN_ENODEV) {
    no_nvrtc = 1;
    printf("SKIP: %s\n", log ? log : "no NVRTC");
  } else if (rc != ATTN_OK) {
    FAIL("%s: NVRTC does not compile it:\n%s", label, log ? log : "(no log)");
  } else {
    const char *entries[3] = {"attn_kernel", "attn_bwd_pre", "attn_bwd_post"};
    int ok = 1;
    for (int e = 0; e < (s->dq ? 3 : 2); e++) {
      attn_cuda_resources r;
      if (attn_nvrtc_resources(log, entries[e], &r) != 0) {
        FAIL("%s: no ptxas report for %s", label, entries[e]);
        ok = 0;
        continue;
      }
      printf("%s %s: %d registers, spills %ld/%ld, stack %ld\n", label, entries[e], r.registers, r.spill_stores,
             r.spill_loads, r.stack);
      if (r.spill_stores || r.spill_loads || r.stack) {
        FAIL("%s: %s spills (%ld bytes stores, %ld loads, %ld stack)", label, entries[e], r.spill_stores,
             r.spill_loads, r.stack);
        ok = 0;
      }
    }
    cases++;
    if (ok) printf("ok %s compiled\n", label);
  }
  free(cubin);
  free(log);
}

static void run_spec(const attn_spec *s) {
  char label[256], err[512];
  snprintf(label, sizeof label, "backward %s d=%d dv=%d Br=%d Bc=%d warps=%d stages=%d causal=%d %s%s%s",
           attn_dtype_name(s->dtype), s->d, attn_spec_dv(s), s->br, s->bc, s->warps, s->stages, s->causal, s->arch,
           s->dq ? " dq=atomic" : "", chain ? " (after the forward kernel)" : "");
  char *src = attn_spec_source_backward_cuda(s, err, sizeof err);
  if (!src) {
    FAIL("%s: %s", label, err);
    return;
  }
  if (compile_only) {
    compile_spec(s, src, label);
    return;
  }
  const char *alt = getenv("ATTN_EMU_TEMPLATE");
  if (alt && *alt && emu_substitute(&src, alt) != 0) {
    FAIL("%s: cannot read ATTN_EMU_TEMPLATE=%s", label, alt);
    free(src);
    return;
  }
  ptx_module *m = ptx_of(src, s->arch, label), *fm = NULL;
  /* --chain: the forward's default spec for the same problem (as attn_plan_create makes it) */
  attn_spec fs = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, s->dtype, s->d, s->causal);
  fs.dv = s->dv;
  snprintf(fs.arch, sizeof fs.arch, "%s", s->arch);
  if (m && chain) {
    if (attn_spec_fit(&fs, err, sizeof err) != ATTN_OK || !(src = attn_spec_source(&fs, 0, err, sizeof err)))
      FAIL("%s: the forward: %s", label, err);
    else
      fm = ptx_of(src, s->arch, label);
    if (!fm) {
      ptx_module_free(m);
      return;
    }
  }
  if (!m) return;
  const int b = s->br, c = s->bc;
  const shape shapes[] = {
      {1, 1, 1, 1, 1, 0.0f},          /* n = 1 */
      {1, 2, 1, 37, 29, 0.0f},        /* GQA 2/1; odd n > n_kv: causal rows 0..7 see no key */
      {2, 2, 2, 19, 83, 0.37f},       /* batch 2, n_kv > n (causal: keys 0..63 seen by all rows), another scale */
      {1, 1, 1, b + 1, c - 1, 0.0f},  /* tiles' edges */
      {1, 4, 2, 2 * b - 1, c + 1, -0.8f},
      {1, 2, 2, b, 2 * c, 0.0f},
      {1, 4, 2, 70, 1, 0.5f},         /* a single key */
      {1, 3, 1, 2 * b + 1, 3 * c - 1, 2.5f}, /* three query heads on one KV head, a large scale */
  };
  const int ns = quick ? 5 : (int)(sizeof shapes / sizeof shapes[0]);
  for (int i = 0; i < ns; i++)
    run_shape(m, fm, &fs, s, &shapes[i], 1000ULL * (unsigned)s->d + 10ULL * (unsigned)i + (unsigned)s->causal, label);
  ptx_module_free(m);
  ptx_module_free(fm);
}

int main(int argc, char **argv) {
  int i = 1;
  for (; i < argc && !strncmp(argv[i], "--", 2); i++) {
    if (!strcmp(argv[i], "--quick")) quick = 1;
    else if (!strcmp(argv[i], "--chain")) chain = 1;
    else if (!strcmp(argv[i], "--compile")) compile_only = 1;
    else {
      fprintf(stderr, "cuda_emu_bwd: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  const int t = i < argc ? attn_dtype_parse(argv[i]) : -1;
  if (t < 0) {
    fprintf(stderr,
            "usage: cuda_emu_bwd [--quick] [--chain] [--compile] f32|f16|bf16 [d=D,D,...] [dv=N] [causal=0|1|2] "
            "[arch=sm_XX] [tiles=BRxBCwWsS] [dq=atomic]\n");
    return 2;
  }
  char dlist[256] = "64", arch[16] = "sm_80";
  const char *tiles = NULL; /* tiles=BRxBCwWsS: that spec (attn_spec_check_backward_cuda must admit it) */
  int dv = 0, causal = 2, dq = 0;
  for (i++; i < argc; i++) {
    if (!strncmp(argv[i], "d=", 2)) snprintf(dlist, sizeof dlist, "%s", argv[i] + 2);
    else if (!strncmp(argv[i], "dv=", 3)) dv = atoi(argv[i] + 3);
    else if (!strncmp(argv[i], "causal=", 7)) causal = atoi(argv[i] + 7);
    else if (!strncmp(argv[i], "arch=", 5)) snprintf(arch, sizeof arch, "%s", argv[i] + 5);
    else if (!strncmp(argv[i], "tiles=", 6)) tiles = argv[i] + 6;
    else if (!strcmp(argv[i], "dq=atomic")) dq = 1;
    else {
      fprintf(stderr, "cuda_emu_bwd: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (causal < 0 || causal > 2 || dv < 0) {
    fprintf(stderr, "cuda_emu_bwd: causal must be 0, 1 or 2 (both) and dv >= 0\n");
    return 2;
  }
  for (char *tok = strtok(dlist, ","); tok; tok = strtok(NULL, ",")) {
    const int d = atoi(tok);
    for (int c = causal == 2 ? 0 : causal; c <= (causal == 2 ? 1 : causal); c++) {
      attn_spec s;
      char err[512];
      if (attn_spec_backward_cuda((attn_dtype)t, d, dv > 0 ? dv : d, c, arch, &s, err, sizeof err) != ATTN_OK) {
        FAIL("backward %s d=%s: %s", attn_dtype_name((attn_dtype)t), tok, err);
        continue;
      }
      s.dq = dq;
      if (dq && !tiles && attn_spec_check_backward_cuda(&s, 227 * 1024, err, sizeof err) != ATTN_OK) {
        FAIL("backward %s d=%s dq=atomic: %s", attn_dtype_name((attn_dtype)t), tok, err);
        continue;
      }
      if (tiles && (sscanf(tiles, "%dx%dw%ds%d", &s.br, &s.bc, &s.warps, &s.stages) != 4 ||
                    attn_spec_check_backward_cuda(&s, 227 * 1024, err, sizeof err) != ATTN_OK)) {
        FAIL("backward %s d=%s tiles=%s: %s", attn_dtype_name((attn_dtype)t), tok, tiles,
             strchr(tiles, 'x') ? err : "not BRxBCwWsS");
        continue;
      }
      run_spec(&s);
      if (no_nvrtc) break;
    }
    if (no_nvrtc) break;
  }
  if (no_nvrtc && !failures) return 77;
  if (compile_only) {
    printf("cuda_emu_bwd: %d compiled, %d failures\n", cases, failures);
    return failures || !cases ? 1 : 0;
  }
  printf("worst error against fp64: %.3g u (u: the dtype's unit roundoff)\n", worst_u[t]);
  if (smem_ideal)
    printf("shared memory: %llu wavefronts for %llu at least (%.3gx: bank conflicts above 1)\n", smem_waves,
           smem_ideal, (double)smem_waves / (double)smem_ideal);
  /* the tensor-core kernels' padded rows leave no bank conflict (docs/cuda.md); f32's element loads may have some */
  if (ldsm_ideal)
    printf("ldmatrix: %llu wavefronts for %llu at least (%.3gx)\n", ldsm_waves, ldsm_ideal,
           (double)ldsm_waves / (double)ldsm_ideal);
  if (t != ATTN_F32 && smem_waves > smem_ideal)
    FAIL("%llu shared-memory wavefronts where %llu would do: bank conflicts", smem_waves, smem_ideal);
  if (t != ATTN_F32 && ldsm_waves > ldsm_ideal)
    FAIL("%llu ldmatrix wavefronts where %llu would do: bank conflicts", ldsm_waves, ldsm_ideal);
  if (chain) printf("worst lse error against fp64: %.3g (relative to 1 + |lse|)\n", worst_lse);
  printf("cuda_emu_bwd: %d cases, %d failures\n", cases, failures);
  if (cases == 0) {
    printf("FAIL: no case ran\n");
    return 1;
  }
  return failures ? 1 : 0;
}
