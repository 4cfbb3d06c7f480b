/* cuda_splitkv: split-KV CUDA flash (spec split = S > 1: templates/flash.cu's parts, then attn_combine) on the
 * runtime's launch path, on the fake driver (tests/fake_libcuda.c) whose launch hook runs each launch on the PTX
 * interpreter (tests/ptx), as tests/cuda_gqa_decode.c does for dense decode.
 *   cuda_splitkv LIBCUDA DTYPE [d=D] [dv=DV] [n=N] [n_kv=N,N,...] [heads=H/HKV] [batch=B] [softcap=C] S...
 *       defaults d = 64, n = 1, n_kv = 37, heads 4/2 (GQA, packed by the runtime), batch 1. For each n_kv and each
 *       S: a plan by attn_plan_create_spec with the default tiles and split = S, run by attn_execute, by
 *       attn_execute_lse and by attn_execute_async (stream-ordered scratch) on the interpreter. Checked: each call is
 *       two launches (the parts on a grid of S times the dense one's items, then attn_combine), O of the three calls
 *       the same bits and every entry written, within tests/cuda_emu.c's limits of fp64 (each entry within 8 times
 *       the Frobenius limit), lse within 16 fp32 ulps of the logits' size of fp64's. nan: NaN in one V entry and +inf
 *       in one Q entry; O's and lse's NaN exactly where fp64's are, the rest as above. alibi: slopes of both signs
 *       (a block a query head: ALiBi is never packed). causal: a causal plan; at n = 1 its kernel is the one without
 *       causal (the plan's spec keeps causal), checked as above; at n > 1 the plan must be refused with the reason.
 * ATTN_EMU_TEMPLATE=FILE compiles FILE in place of templates/flash.cu (tests/ptx_mutation.sh's mutants).
 * Exit 77 (skipped) without NVRTC. */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "emu_util.h"
#include "fake_libcuda.h"
#include "internal.h"
#include "kernel_abi_cuda.h"
#include "launch.h"
#include "ptx/ptx.h"

static int failures, cases;
#define FAIL(...)        \
  do {                   \
    printf("FAIL ");     \
    printf(__VA_ARGS__); \
    printf("\n");        \
    failures++;          \
  } while (0)

/* The spec's module (emu_spec_ptx: ATTN_EMU_TEMPLATE replaces the template's text) */
static ptx_module *build_ptx(const attn_spec *s, const char *label, int *no_nvrtc) {
  return emu_spec_ptx(s, label, no_nvrtc, &failures);
}

typedef struct opts {
  attn_dtype dtype;
  int d, dv, n, n_kv, heads, heads_kv, batch;
  float softcap;
  int nan;   /* NaN in V (a column of one KV head) and +inf in one query row's Q */
  int alibi; /* slopes of both signs */
  int causal;
} opts;

typedef int (*ctx_sync_fn)(void);

static void run_case(attn_runtime *rt, fake_cuda_set_hook_fn set_hook, ctx_sync_fn ctx_sync, const opts *op,
                     int split, int *no_nvrtc) {
  attn_problem p = {.batch = op->batch, .heads = op->heads, .heads_kv = op->heads_kv, .n = op->n, .n_kv = op->n_kv,
                    .d = op->d, .d_v = op->dv, .dtype = op->dtype, .algo = ATTN_ALGO_FLASH, .softcap = op->softcap,
                    .causal = op->causal};
  float slopes[256];
  for (int h = 0; h < op->heads && h < 256; h++) slopes[h] = (h % 2 ? -1.0f : 1.0f) * exp2f(-(float)(h + 1) / 2);
  if (op->alibi) p.alibi_slopes = slopes;
  char what[256];
  snprintf(what, sizeof what, "split=%d %s d=%d dv=%d n=%d n_kv=%d heads=%d/%d batch=%d%s%s%s", split,
           attn_dtype_name(p.dtype), p.d, p.d_v, p.n, p.n_kv, p.heads, p.heads_kv, p.batch,
           p.softcap > 0 ? " softcap" : "", op->alibi ? " alibi" : "", op->causal ? " causal" : "");
  cases++;
  const int failed_before = failures;
  char err[512];
  attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, p.dtype, p.d, op->causal);
  s.dv = p.d_v != p.d ? p.d_v : 0;
  s.softcap = p.softcap > 0;
  s.alibi = op->alibi;
  if (attn_spec_fit(&s, err, sizeof err) != ATTN_OK) {
    FAIL("%s: attn_spec_fit: %s", what, err);
    return;
  }
  s.split = split;
  attn_plan *plan = NULL;
  int rc = attn_plan_create_spec(rt, &p, &s, 0, "test", &plan);
  if (rc == ATTN_ECOMPILE && strstr(attn_last_error(rt), "NVRTC is not available")) {
    *no_nvrtc = 1;
    return;
  }
  if (op->causal && p.n > 1) { /* the split kernel has no causal mask: only causal n = 1 builds it without causal */
    if (rc == ATTN_OK) FAIL("%s: a causal n > 1 plan got a split kernel", what);
    else if (rc != ATTN_EUNSUPPORTED || !strstr(attn_last_error(rt), "causal needs n = 1"))
      FAIL("%s: refused with %s: %s (want unsupported, 'causal needs n = 1')", what, attn_strerror(rc),
           attn_last_error(rt));
    else printf("ok   %s: refused (%s)\n", what, attn_last_error(rt));
    attn_plan_destroy(plan);
    return;
  }
  if (rc != ATTN_OK) {
    FAIL("%s: attn_plan_create_spec: %s: %s", what, attn_strerror(rc), attn_last_error(rt));
    return;
  }
  const attn_spec *ks = attn_cuda_kernel_spec(plan->cuda);
  if (ks->causal || plan->spec.causal != op->causal || ks->split != split)
    FAIL("%s: kernel causal=%d split=%d, plan's spec causal=%d (want 0, %d, %d)", what, ks->causal, ks->split,
         plan->spec.causal, split, op->causal);
  char label[600];
  attn_spec_format(ks, label, sizeof label);
  ptx_module *m = build_ptx(ks, label, no_nvrtc);
  const size_t es = attn_dtype_size(p.dtype), H = (size_t)p.batch * p.heads, HK = (size_t)p.batch * p.heads_kv;
  const size_t nq = H * p.n * p.d, nk = HK * p.n_kv * p.d, nv = HK * p.n_kv * p.d_v, no = H * p.n * p.d_v,
               nl = H * p.n;
  float *x = malloc(sizeof(float) * (nq + nk + nv + no + nl));
  double *ref = malloc(sizeof(double) * (no + nl));
  unsigned char *raw = malloc((nq + nk + nv) * es), *o[3] = {malloc(no * es), malloc(no * es), malloc(no * es)};
  void *dq = NULL, *dk = NULL, *dv = NULL, *dob = NULL, *dl = NULL;
  if (!x || !ref || !raw || !o[0] || !o[1] || !o[2]) abort();
  if (!m) goto out;
  float *xq = x, *xk = xq + nq, *xv = xk + nk, *f = xv + nv, *lse = f + no;
  attn_fill_random(xq, nq, 51), attn_fill_random(xk, nk, 52), attn_fill_random(xv, nv, 53);
  attn_round_dtype(p.dtype, xq, nq), attn_round_dtype(p.dtype, xk, nk), attn_round_dtype(p.dtype, xv, nv);
  if (op->nan) xv[(size_t)(p.n_kv / 2) * p.d_v + 1 % p.d_v] = NAN, xq[nq - p.d] = INFINITY;
  attn_to_dtype(p.dtype, xq, nq, raw), attn_to_dtype(p.dtype, xk, nk, raw + nq * es);
  attn_to_dtype(p.dtype, xv, nv, raw + (nq + nk) * es);
  if (attn_cuda_alloc(rt, nq * es, &dq) || attn_cuda_alloc(rt, nk * es, &dk) || attn_cuda_alloc(rt, nv * es, &dv) ||
      attn_cuda_alloc(rt, no * es, &dob) || attn_cuda_alloc(rt, nl * 4, &dl) ||
      attn_cuda_copy(rt, dq, raw, nq * es, 1) || attn_cuda_copy(rt, dk, raw + nq * es, nk * es, 1) ||
      attn_cuda_copy(rt, dv, raw + (nq + nk) * es, nv * es, 1)) {
    FAIL("%s: device memory on the fake: %s", what, attn_last_error(rt));
    goto out;
  }
  emu_split_hook h = {.m = m, .s = ks, .qb = nq * es, .kb = nk * es, .vb = nv * es, .ob = no * es, .lb = nl * 4};
  set_hook(emu_split_on_launch, &h);
  int r[3];
  memset(dob, 0xff, no * es); /* the fake's device memory is host memory: poisoned in place */
  r[0] = attn_execute(plan, dq, dk, dv, dob);
  const int runs1 = h.runs;
  memcpy(o[0], dob, no * es);
  memset(dob, 0xff, no * es);
  memset(dl, 0xff, nl * 4); /* NaN */
  r[1] = attn_execute_lse(plan, dq, dk, dv, dob, dl);
  memcpy(o[1], dob, no * es);
  memcpy(lse, dl, nl * 4);
  memset(dob, 0xff, no * es);
  r[2] = attn_execute_async(plan, NULL, dq, dk, dv, dob);
  if (r[2] == ATTN_OK && ctx_sync() != 0) FAIL("%s: cuCtxSynchronize failed on the fake", what);
  memcpy(o[2], dob, no * es);
  set_hook(NULL, NULL);
  if (r[0] != ATTN_OK || r[1] != ATTN_OK || r[2] != ATTN_OK || runs1 != 2 || h.runs != 6 || h.fails) {
    FAIL("%s: attn_execute %s, attn_execute_lse %s, attn_execute_async %s (%s), %d then %d launches run (want 2, 6), "
         "%d failed", what, attn_strerror(r[0]), attn_strerror(r[1]), attn_strerror(r[2]), attn_last_error(rt),
         runs1, h.runs, h.fails);
    goto out;
  }
  /* the parts' grid: S times the dense launch's items (the runtime's packing: heads_kv heads of G n rows) */
  attn_cuda_geom g;
  const int packs = attn_cuda_gqa_packs(&p, ks);
  const long long G = p.heads / p.heads_kv, bh = (long long)p.batch * (packs ? p.heads_kv : p.heads);
  if (attn_cuda_geometry(ks, bh, packs ? G * p.n : p.n, p.n_kv, 0, &g, err, sizeof err) != ATTN_OK ||
      h.grid[0] != (unsigned)(g.items * split) || h.grid[1] != g.combine_grid)
    FAIL("%s: grids %u and %u, want %lld x %d and %u (%s)", what, h.grid[0], h.grid[1], g.items, split,
         g.combine_grid, err);
  size_t unwritten = 0;
  for (size_t i = 0; i < no; i++) {
    size_t ones = 0;
    while (ones < es && o[0][i * es + ones] == 0xff) ones++;
    unwritten += ones == es;
  }
  if (unwritten) FAIL("%s: %zu entries of o never written", what, unwritten);
  if (memcmp(o[0], o[1], no * es) || memcmp(o[0], o[2], no * es))
    FAIL("%s: attn_execute's, attn_execute_lse's and attn_execute_async's o differ", what);
  attn_from_dtype(p.dtype, o[0], no, f);
  attn_problem pr = plan->p; /* normalised: scale */
  attn_reference(&pr, xq, xk, xv, ref);
  emu_ref_lse(&pr, xq, xk, ref + no);
  /* non-finite inputs: the NaN pattern (O and lse) exactly the reference's, then those entries set aside */
  size_t nans = 0, mismatched = 0;
  for (size_t i = 0; i < no + nl; i++) {
    float *got = i < no ? &f[i] : &lse[i - no];
    if (isnan(ref[i]) != isnan(*got)) mismatched++;
    if (isnan(ref[i])) nans++, ref[i] = 0, *got = 0;
  }
  if (mismatched) FAIL("%s: %zu entries NaN in one of fp64's and the kernel's output only", what, mismatched);
  if (op->nan && !nans) FAIL("%s: NaN and inf in the inputs gave no NaN", what);
  double fro, row;
  emu_limits(&pr, &fro, &row);
  const double e = attn_rel_error(ref, f, no);
  if (!(e <= fro)) FAIL("%s: relative error %.3g > %.3g", what, e, fro);
  for (size_t i = 0; i < no; i++)
    if (!(fabs(f[i] - ref[i]) <= 8 * fro)) {
      FAIL("%s: o entry %zu is %.6g, fp64's %.6g", what, i, (double)f[i], ref[i]);
      break;
    }
  /* the logits' size: |scale| sqrt(d) for these inputs, and ALiBi's slopes (at most 0.71) times the distance */
  const double ltol = 16 * 0x1p-24 * (1.0 + fabs((double)pr.scale) * sqrt((double)pr.d) + (op->alibi ? p.n_kv : 0));
  double lerr = 0;
  for (size_t i = 0; i < nl; i++) {
    const double want = ref[no + i], le = fabs((double)lse[i] - want) / (1.0 + fabs(want));
    if (!(le <= ltol)) {
      FAIL("%s: lse of row %zu is %.9g, fp64's %.9g", what, i, (double)lse[i], want);
      break;
    }
    lerr = le > lerr ? le : lerr;
  }
  printf("%s %s: %s, grids %u + %u; o error %.2e (limit %.2e), lse %.2e (%.2e), %zu NaN as fp64's\n",
         failures > failed_before ? "...." : "ok  ", what, packs ? "packed" : "a block a query head", h.grid[0],
         h.grid[1], e, fro, lerr, ltol, nans);
out:
  attn_cuda_free(rt, dq), attn_cuda_free(rt, dk), attn_cuda_free(rt, dv), attn_cuda_free(rt, dob);
  attn_cuda_free(rt, dl);
  attn_plan_destroy(plan);
  if (m) ptx_module_free(m);
  free(x), free(ref), free(raw), free(o[0]), free(o[1]), free(o[2]);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const int t = argc >= 3 ? attn_dtype_parse(argv[2]) : -1;
  if (t < 0) {
    fprintf(stderr, "usage: cuda_splitkv LIBCUDA DTYPE [d=D] [dv=DV] [n=N] [n_kv=N,N,...] [heads=H/HKV] [batch=B] "
                    "[softcap=C] [nan] [alibi] [causal] S ...\n");
    return 2;
  }
  opts op = {.dtype = (attn_dtype)t, .d = 64, .n = 1, .heads = 4, .heads_kv = 2, .batch = 1};
  int nkv[16], nnkv = 0, splits[16], nsplits = 0;
  for (int i = 3; i < argc; i++) {
    const char *a = argv[i];
    if (!strncmp(a, "d=", 2)) op.d = atoi(a + 2);
    else if (!strncmp(a, "dv=", 3)) op.dv = atoi(a + 3);
    else if (!strncmp(a, "n=", 2)) op.n = atoi(a + 2);
    else if (!strncmp(a, "batch=", 6)) op.batch = atoi(a + 6);
    else if (!strncmp(a, "softcap=", 8)) op.softcap = (float)atof(a + 8);
    else if (!strcmp(a, "nan")) op.nan = 1;
    else if (!strcmp(a, "alibi")) op.alibi = 1;
    else if (!strcmp(a, "causal")) op.causal = 1;
    else if (!strncmp(a, "n_kv=", 5)) {
      for (const char *c = a + 5; *c && nnkv < 16; c = strchr(c, ',') ? strchr(c, ',') + 1 : "") nkv[nnkv++] = atoi(c);
    } else if (!strncmp(a, "heads=", 6)) {
      if (sscanf(a + 6, "%d/%d", &op.heads, &op.heads_kv) != 2) op.heads_kv = 0;
    } else if (strchr(a, '=') || atoi(a) < 2 || nsplits == 16) {
      fprintf(stderr, "cuda_splitkv: bad argument '%s' (options, then splits S >= 2)\n", a);
      return 2;
    } else splits[nsplits++] = atoi(a);
  }
  if (op.dv == 0) op.dv = op.d;
  if (nnkv == 0) nkv[nnkv++] = 37;
  int bad_kv = 0;
  for (int i = 0; i < nnkv; i++) bad_kv |= nkv[i] < 1;
  if (op.d < 1 || op.n < 1 || bad_kv || op.batch < 1 || op.heads_kv < 1 || op.heads % op.heads_kv || !nsplits ||
      op.heads > 256) {
    fprintf(stderr, "cuda_splitkv: d, n, n_kv, batch >= 1, heads (at most 256) a multiple of heads_kv, and a split are "
                    "needed\n");
    return 2;
  }
  fake_cuda_set_hook_fn set_hook = NULL;
  attn_runtime *rt = emu_fake_open(argv[1], &set_hook);
  if (!rt) return 1;
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD);
  ctx_sync_fn ctx_sync = lib ? (ctx_sync_fn)dlsym(lib, "cuCtxSynchronize") : NULL;
  if (!ctx_sync) {
    printf("FAIL the fake driver %s has no cuCtxSynchronize\n", argv[1]);
    attn_close(rt);
    return 1;
  }
  int no_nvrtc = 0;
  for (int i = 0; i < nnkv && !no_nvrtc; i++)
    for (int j = 0; j < nsplits && !no_nvrtc; j++) {
      op.n_kv = nkv[i];
      run_case(rt, set_hook, ctx_sync, &op, splits[j], &no_nvrtc);
    }
  attn_close(rt);
  if (no_nvrtc) {
    printf("SKIP: no NVRTC to compile the kernels\n");
    return 77;
  }
  printf("%d cases, %d failures\n", cases, failures);
  return failures ? 1 : 0;
}
