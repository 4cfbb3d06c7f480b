/* cuda_defsplit: the untuned CUDA flash plan's split-KV (runtime/api.c's default_split_cuda) on the fake driver
 * (tests/fake_libcuda.c), its SM count set through $FAKE_LIBCUDA's sms=N, with no database row.
 *   cuda_defsplit LIBCUDA
 * Choices (attn_plan_choose, nothing compiled): on 4 SMs, decode of one head (n = 1, 1000 keys of Bc = 64: 16 key
 * blocks) splits in 4 (one block an SM), GQA-packed causal decode of 8 query heads on 2 KV heads (a block a KV head)
 * in 2; no split for 8 heads of decode (8 blocks on 4 SMs), 4 heads of n = 1024 (prefill), causal n = 2 (the split
 * kernel has no mask), a window, a paged or varlen plan (their kernels have no split), 200 keys (4 key blocks: too
 * few to spare), n = 32 on one head. On 132 SMs (an H100)
 * the same 8 heads split in 16 (bf16, d = 128, 8192 keys: the tuner's pick for that shape, tests/splitkv.cmake)
 * and one head in 16 (its 16 key blocks). Plans (attn_plan_create) of the two 4-SM splits run on the PTX interpreter
 * through the fake's launch hook: describe says split=S (and GQA-packed), each call is two launches (the parts on S
 * times the dense grid, then attn_combine), O (poisoned first) within tests/cuda_emu.c's limits of fp64 and lse
 * within 16 fp32 ulps of the logits' size of fp64's.
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

static attn_problem problem(attn_dtype t, int d, int heads, int heads_kv, int n, int n_kv, int causal) {
  attn_problem p = {.batch = 1, .heads = heads, .heads_kv = heads_kv, .n = n, .n_kv = n_kv, .d = d, .d_v = d,
                    .dtype = t, .causal = causal, .algo = ATTN_ALGO_FLASH};
  return p;
}

static void describe(const attn_problem *p, char *buf, size_t len) {
  snprintf(buf, len, "%s d=%d heads=%d/%d n=%d n_kv=%d%s%s%s%s", attn_dtype_name(p->dtype), p->d, p->heads,
           p->heads_kv, p->n, p->n_kv, p->causal ? " causal" : "", p->window ? " window" : "",
           p->page_size ? " paged" : "", p->varlen ? " varlen" : "");
}

/* The untuned choice for p on rt (sms SMs): its split must be want. */
static void check_choice(attn_runtime *rt, int sms, const attn_problem *in, int want) {
  char what[256], origin[128];
  describe(in, what, sizeof what);
  cases++;
  attn_problem p;
  attn_spec s;
  if (attn_problem_normalize(rt, in, &p) != ATTN_OK || attn_plan_choose(rt, &p, &s, origin, sizeof origin) != ATTN_OK) {
    FAIL("%s on %d SMs: %s", what, sms, attn_last_error(rt));
    return;
  }
  if (strncmp(origin, "default", 7) != 0) FAIL("%s on %d SMs: origin '%s', not the untuned default", what, sms, origin);
  if (s.split != want) FAIL("%s on %d SMs: split=%d, want %d", what, sms, s.split, want);
  else printf("ok   %s on %d SMs: split=%d (Br=%d Bc=%d)\n", what, sms, s.split, s.br, s.bc);
}

/* The last kernel's module, kept for the next plan of the same kernel */
static ptx_module *kept;
static char kept_label[600];

/* An untuned plan of p on the 4-SM runtime, which must split in want, run on the interpreter against fp64. */
static void run_plan(attn_runtime *rt, fake_cuda_set_hook_fn set_hook, const attn_problem *in, int want, int packed,
                     int *no_nvrtc) {
  char what[256];
  describe(in, what, sizeof what);
  cases++;
  const int failed_before = failures;
  attn_plan *plan = NULL;
  const attn_problem p = *in;
  int rc = attn_plan_create(rt, &p, &plan);
  if (rc == ATTN_ECOMPILE && strstr(attn_last_error(rt), "NVRTC is not available")) {
    *no_nvrtc = 1;
    return;
  }
  if (rc != ATTN_OK) {
    FAIL("%s: attn_plan_create: %s: %s", what, attn_strerror(rc), attn_last_error(rt));
    return;
  }
  const char *desc = attn_plan_describe(plan);
  char want_split[32];
  snprintf(want_split, sizeof want_split, " split=%d ", want);
  const attn_spec *ks = attn_cuda_kernel_spec(plan->cuda);
  if (ks->split != want || !strstr(desc, want_split) || !strstr(desc, "(default)") ||
      (strstr(desc, "GQA-packed") != NULL) != packed)
    FAIL("%s: kernel split=%d, describe '%s' (want split=%d%s, default)", what, ks->split, desc, want,
         packed ? ", GQA-packed" : "");
  char label[600];
  attn_spec_format(ks, label, sizeof label);
  if (!kept || strcmp(label, kept_label)) {
    if (kept) ptx_module_free(kept);
    kept = emu_spec_ptx(ks, label, no_nvrtc, &failures);
    snprintf(kept_label, sizeof kept_label, "%s", kept ? label : "");
  }
  const size_t es = attn_dtype_size(p.dtype), H = (size_t)p.batch * p.heads, HK = (size_t)p.batch * p.heads_kv;
  const size_t nq = H * p.n * p.d, nk = HK * p.n_kv * p.d, nv = HK * p.n_kv * p.d_v, no = H * p.n * p.d_v,
               nl = H * p.n;
  float *x = malloc(sizeof(float) * (nq + nk + nv + no + nl));
  double *ref = malloc(sizeof(double) * (no + nl));
  unsigned char *raw = malloc((nq + nk + nv) * es), *o = malloc(no * es);
  void *dq = NULL, *dk = NULL, *dv = NULL, *dob = NULL, *dl = NULL;
  if (!x || !ref || !raw || !o) abort();
  if (!kept) goto out;
  float *xq = x, *xk = xq + nq, *xv = xk + nk, *f = xv + nv, *lse = f + no;
  attn_fill_random(xq, nq, 71), attn_fill_random(xk, nk, 72), attn_fill_random(xv, nv, 73);
  attn_round_dtype(p.dtype, xq, nq), attn_round_dtype(p.dtype, xk, nk), attn_round_dtype(p.dtype, xv, nv);
  attn_to_dtype(p.dtype, xq, nq, raw), attn_to_dtype(p.dtype, xk, nk, raw + nq * es);
  attn_to_dtype(p.dtype, xv, nv, raw + (nq + nk) * es);
  if (attn_cuda_alloc(rt, nq * es, &dq) || attn_cuda_alloc(rt, nk * es, &dk) || attn_cuda_alloc(rt, nv * es, &dv) ||
      attn_cuda_alloc(rt, no * es, &dob) || attn_cuda_alloc(rt, nl * 4, &dl) ||
      attn_cuda_copy(rt, dq, raw, nq * es, 1) || attn_cuda_copy(rt, dk, raw + nq * es, nk * es, 1) ||
      attn_cuda_copy(rt, dv, raw + (nq + nk) * es, nv * es, 1)) {
    FAIL("%s: device memory on the fake: %s", what, attn_last_error(rt));
    goto out;
  }
  emu_split_hook h = {.m = kept, .s = ks, .qb = nq * es, .kb = nk * es, .vb = nv * es, .ob = no * es, .lb = nl * 4};
  set_hook(emu_split_on_launch, &h);
  memset(dob, 0xff, no * es); /* the fake's device memory is host memory: poisoned in place */
  memset(dl, 0xff, nl * 4);   /* NaN */
  rc = attn_execute_lse(plan, dq, dk, dv, dob, dl);
  memcpy(o, dob, no * es);
  memcpy(lse, dl, nl * 4);
  set_hook(NULL, NULL);
  if (rc != ATTN_OK || h.runs != 2 || h.fails) {
    FAIL("%s: attn_execute_lse %s (%s), %d launches run (want 2), %d failed", what, attn_strerror(rc),
         attn_last_error(rt), h.runs, h.fails);
    goto out;
  }
  /* the parts' grid: S times the dense launch's items (packed: heads_kv heads of G n rows) */
  attn_cuda_geom g;
  char err[256] = "";
  const long long G = p.heads / p.heads_kv, bh = (long long)p.batch * (packed ? p.heads_kv : p.heads);
  if (attn_cuda_geometry(ks, bh, packed ? G * p.n : p.n, p.n_kv, 0, &g, err, sizeof err) != ATTN_OK ||
      h.grid[0] != (unsigned)(g.items * want) || h.grid[1] != g.combine_grid)
    FAIL("%s: grids %u and %u, want %lld x %d and %u (%s)", what, h.grid[0], h.grid[1], g.items, want, g.combine_grid,
         err);
  size_t unwritten = 0;
  for (size_t i = 0; i < no; i++) {
    size_t ones = 0;
    while (ones < es && o[i * es + ones] == 0xff) ones++;
    unwritten += ones == es;
  }
  if (unwritten) FAIL("%s: %zu entries of o never written", what, unwritten);
  attn_from_dtype(p.dtype, o, no, f);
  attn_problem pr = plan->p; /* normalised: scale */
  attn_reference(&pr, xq, xk, xv, ref);
  emu_ref_lse(&pr, xq, xk, ref + no);
  double fro, row;
  emu_limits(&pr, &fro, &row);
  const double e = attn_rel_error(ref, f, no);
  if (!(e <= fro)) FAIL("%s: relative error %.3g > %.3g", what, e, fro);
  for (size_t i = 0; i < no; i++)
    if (!(fabs(f[i] - ref[i]) <= 8 * fro)) {
      FAIL("%s: o entry %zu is %.6g, fp64's %.6g", what, i, (double)f[i], ref[i]);
      break;
    }
  const double ltol = 16 * 0x1p-24 * (1.0 + fabs((double)pr.scale) * sqrt((double)pr.d));
  double lerr = 0;
  for (size_t i = 0; i < nl; i++) {
    const double want_l = ref[no + i], le = fabs((double)lse[i] - want_l) / (1.0 + fabs(want_l));
    if (!(le <= ltol)) {
      FAIL("%s: lse of row %zu is %.9g, fp64's %.9g", what, i, (double)lse[i], want_l);
      break;
    }
    lerr = le > lerr ? le : lerr;
  }
  printf("%s %s: '%s', grids %u + %u; o error %.2e (limit %.2e), lse %.2e (%.2e)\n",
         failures > failed_before ? "...." : "ok  ", what, desc, h.grid[0], h.grid[1], e, fro, lerr, ltol);
out:
  attn_cuda_free(rt, dq), attn_cuda_free(rt, dk), attn_cuda_free(rt, dv), attn_cuda_free(rt, dob);
  attn_cuda_free(rt, dl);
  attn_plan_destroy(plan);
  free(x), free(ref), free(raw), free(o);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc != 2) {
    fprintf(stderr, "usage: cuda_defsplit LIBCUDA\n");
    return 2;
  }
  fake_cuda_set_hook_fn set_hook = NULL;
  attn_runtime *rt4 = emu_fake_open_as(argv[1], "sms=4", &set_hook, NULL);
  attn_runtime *rt132 = rt4 ? emu_fake_open_as(argv[1], "sms=132", &set_hook, NULL) : NULL;
  if (!rt4 || !rt132) {
    attn_close(rt4);
    return 1;
  }
  /* f16 d = 64: Br = 128, Bc = 64 (1000 keys: 16 key blocks); bf16 d = 128: Bc = 32 (8192 keys: 256) */
  const attn_problem one = problem(ATTN_F16, 64, 1, 1, 1, 1000, 0), gqa = problem(ATTN_F16, 64, 8, 2, 1, 1000, 1),
                     h100 = problem(ATTN_BF16, 128, 8, 8, 1, 8192, 0);
  attn_problem windowed = one, paged = one, varlen = one;
  windowed.window = 300, paged.page_size = 16, varlen.varlen = 1;
  check_choice(rt4, 4, &one, 4);                                     /* 1 block x 4 = 4 SMs */
  check_choice(rt4, 4, &gqa, 2);                                     /* a block a KV head: 2 x 2 */
  check_choice(rt4, 4, &h100, 0);                                    /* 8 blocks fill 4 SMs */
  check_choice(rt4, 4, &(attn_problem){.batch = 1, .heads = 4, .heads_kv = 4, .n = 1024, .n_kv = 1024, .d = 64,
                                       .dtype = ATTN_F16, .algo = ATTN_ALGO_FLASH}, 0); /* prefill: 32 blocks */
  check_choice(rt4, 4, &(attn_problem){.batch = 1, .heads = 1, .heads_kv = 1, .n = 2, .n_kv = 1000, .d = 64,
                                       .dtype = ATTN_F16, .causal = 1, .algo = ATTN_ALGO_FLASH}, 0);
  check_choice(rt4, 4, &windowed, 0);
  check_choice(rt4, 4, &paged, 0); /* for attn_execute_paged, whose kernel has no split */
  check_choice(rt4, 4, &varlen, 0);
  check_choice(rt4, 4, &(attn_problem){.batch = 1, .heads = 1, .heads_kv = 1, .n = 1, .n_kv = 200, .d = 64,
                                       .dtype = ATTN_F16, .algo = ATTN_ALGO_FLASH}, 0); /* 4 key blocks */
  check_choice(rt4, 4, &(attn_problem){.batch = 1, .heads = 1, .heads_kv = 1, .n = 32, .n_kv = 1000, .d = 64,
                                       .dtype = ATTN_F16, .algo = ATTN_ALGO_FLASH}, 0); /* not decode */
  check_choice(rt132, 132, &h100, 16); /* 8 x 16 = 128 of 132 SMs */
  check_choice(rt132, 132, &one, 16);  /* at most its 16 key blocks */
  int no_nvrtc = 0;
  run_plan(rt4, set_hook, &one, 4, 0, &no_nvrtc);
  if (!no_nvrtc) run_plan(rt4, set_hook, &gqa, 2, 1, &no_nvrtc);
  if (kept) ptx_module_free(kept);
  attn_close(rt132);
  attn_close(rt4);
  if (no_nvrtc) {
    printf("SKIP: no NVRTC to compile the kernels (the choices above were checked)\n");
    return failures ? 1 : 77;
  }
  printf("%d cases, %d failures\n", cases, failures);
  return failures ? 1 : 0;
}
