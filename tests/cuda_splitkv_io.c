/* cuda_splitkv_io: the counting build (ATTN_COUNT_IO) of CUDA flash counts exactly tuner/io_theory.c's closed form
 * for split-KV (spec split = S > 1: the parts of templates/flash.cu's attn_kernel, then attn_combine) and for
 * windowed GQA decode, through the runtime's counting path (attn_plan_create_spec with count_io, attn_plan_run_f32
 * with io: one pair of counters for both launches) on the fake driver (tests/fake_libcuda.c), whose launch hook runs
 * each launch of the counting build's PTX on the interpreter (tests/ptx).
 *   cuda_splitkv_io LIBCUDA DTYPE [d=D] [dv=DV] [n=N,N,...] [n_kv=N,N,...] [heads=H/HKV,H/HKV,...] [window=W]
 *                   [causal] [alibi] S...
 *       defaults d = 64, n = 1, n_kv = 37, heads 4/2, batch 2. For every S (1: no split), heads, n and n_kv: the
 *       default tiles with split = S. Checked: counted reads and writes equal attn_io_formula_gqa_window (GQA-packed
 *       where attn_cuda_gqa_packs says so: a KV head's G n rows, else a block a query head); with a split, that equals
 *       the form written out here from its statement (Q_i once per part with a key block, min(S, key blocks) of them;
 *       K and V once; every part writes rows (d_v + 2); the merge reads S rows (d_v + 2) and writes rows d_v); packed
 *       with a window (n = 1), K and V read once per KV head, exactly what one query head reads (whole key blocks from
 *       the one holding the window's first key: 1.000x); and O within tests/cuda_emu.c's limits of fp64. Parts
 *       without keys are where S exceeds the key blocks (n_kv <= (S - 1) Bc).
 * ATTN_EMU_TEMPLATE=FILE compiles FILE in place of templates/flash.cu (an older or mutated template).
 * Exit 77 (skipped) without NVRTC. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "emu_util.h"
#include "fake_libcuda.h"
#include "internal.h"
#include "io_theory.h"
#include "kernel_abi_cuda.h"
#include "ptx/ptx.h"

static int failures, cases, empty_cases;

/* The launch hook: split-KV's launches alternate between the parts (attn_kernel) and attn_combine (without split:
 * attn_kernel alone), each on a fresh machine with
 * the arrays it reads copied in from the fake's device memory (host memory) and what it writes copied back, the I/O
 * counters included (the runtime zeroes them once; both launches add to them). */
typedef struct hook_state {
  const ptx_module *m;
  const attn_spec *s;
  size_t qb, kb, vb, ob; /* bytes of q, k, v, o */
  int heads;             /* slopes to copy (ALiBi is never packed: the launch's heads are the problem's) */
  int runs, fails;
} hook_state;

static void on_launch(const void *params, unsigned grid, unsigned block, unsigned smem, void *user) {
  hook_state *h = user;
  attn_cuda_kargs a;
  memcpy(&a, params, sizeof a);
  char err[1024] = "";
  ptx_machine *x = ptx_machine_new(h->m, err, sizeof err);
  const int split = h->s->split > 1, combine = split && h->runs % 2;
  const size_t sb = split ? (size_t)h->s->split * (size_t)(a.batch * a.heads * a.n) * (attn_spec_dv(h->s) + 2) * 4 : 0;
  uint64_t d[7] = {0};
  const void *src[7] = {a.q, a.k, a.v, NULL, a.scratch, a.alibi, a.io};
  const size_t ob = combine || !split ? h->ob : 0; /* O: written by the combine, or by the kernel without split */
  const size_t bytes[7] = {combine ? 0 : h->qb, combine ? 0 : h->kb, combine ? 0 : h->vb, ob, sb,
                           !combine && a.alibi ? sizeof(float) * (size_t)h->heads : 0, a.io ? 16 : 0};
  static const char *names[7] = {"q", "k", "v", "o", "scratch", "alibi", "io"};
  int ok = x != NULL && (!split || a.scratch != NULL) && a.io != NULL;
  for (int i = 0; ok && i < 7; i++)
    if (bytes[i])
      ok = (d[i] = ptx_alloc(x, bytes[i], names[i])) != 0 && (!src[i] || ptx_copy_in(x, d[i], src[i], bytes[i]) == 0);
  unsigned char *o = a.o, *scratch = a.scratch;
  unsigned long long *io = a.io;
  a.q = (const void *)(uintptr_t)d[0], a.k = (const void *)(uintptr_t)d[1], a.v = (const void *)(uintptr_t)d[2];
  a.o = (void *)(uintptr_t)d[3], a.scratch = (void *)(uintptr_t)d[4], a.alibi = (const float *)(uintptr_t)d[5];
  a.io = (unsigned long long *)(uintptr_t)d[6];
  a.lse = NULL, a.consts = NULL;
  const ptx_launch_cfg kc = {.grid = grid, .block = block, .dyn_smem = smem};
  ok = ok && ptx_launch(x, combine ? "attn_combine" : "attn_kernel", &kc, &a, ATTN_CUDA_KARGS_DENSE_BYTES, err,
                        sizeof err) == 0;
  ok = ok && ptx_copy_out(x, d[6], io, 16, NULL) == 0 &&
       (combine || !split ? ptx_copy_out(x, d[3], o, h->ob, NULL) : ptx_copy_out(x, d[4], scratch, sb, NULL)) == 0;
  if (!ok) printf("FAIL the runtime's %s launch on the interpreter: %s\n", combine ? "combine" : "parts",
                  !x ? "no machine" : !scratch ? "no scratch" : !io ? "no I/O counters" : err);
  h->fails += !ok;
  h->runs++;
  ptx_machine_free(x);
}

/* The counting builds compiled so far (one a spec: the cases of a split share it) */
#define KEPT 8
static struct {
  char label[600];
  ptx_module *m;
} kept[KEPT];
static int nkept;

static ptx_module *counting_ptx(const attn_spec *s, const char *label, int *no_nvrtc) {
  for (int i = 0; i < nkept; i++)
    if (!strcmp(kept[i].label, label)) return kept[i].m;
  char err[512];
  char *src = attn_spec_source(s, 1, err, sizeof err);
  if (!src) {
    FAIL("%s: %s", label, err);
    return NULL;
  }
  const char *alt = getenv("ATTN_EMU_TEMPLATE");
  if (alt && *alt && emu_substitute(&src, alt) != 0) {
    FAIL("%s: cannot read %s in place of the template", label, alt);
    free(src);
    return NULL;
  }
  char *ptx = NULL, *log = NULL;
  const int rc = attn_nvrtc_ptx(src, "attn_kernel.cu", s->arch, &ptx, &log);
  free(src);
  ptx_module *m = emu_load_ptx(rc, ptx, log, label, no_nvrtc, &failures);
  if (m && nkept < KEPT) snprintf(kept[nkept].label, sizeof kept[nkept].label, "%s", label), kept[nkept++].m = m;
  return m;
}

typedef struct opts {
  attn_dtype dtype;
  int d, dv, n, n_kv, heads, heads_kv, batch, alibi, window, causal;
} opts;

/* The split form as stated, per launch (bh blocks' rows of n each, unmasked: every query block sees all n_kv keys) */
static void stated_form(const attn_spec *s, long long bh, long long n, long long n_kv, unsigned long long *r,
                        unsigned long long *w, long long *parts) {
  const long long d = s->d, dv = attn_spec_dv(s), S = s->split, nk = (n_kv + s->bc - 1) / s->bc;
  *parts = S < nk ? S : nk;
  long long rr = 0, ww = 0;
  for (long long i0 = 0; i0 < n; i0 += s->br) {
    const long long rows = n - i0 < s->br ? n - i0 : s->br;
    rr += *parts * rows * d + n_kv * (d + dv) + S * rows * (dv + 2);
    ww += S * rows * (dv + 2) + rows * dv;
  }
  *r = (unsigned long long)(rr * bh);
  *w = (unsigned long long)(ww * bh);
}

static void run_case(attn_runtime *rt, fake_cuda_set_hook_fn set_hook, const opts *op, int split, int *no_nvrtc) {
  attn_problem p = {.batch = op->batch, .heads = op->heads, .heads_kv = op->heads_kv, .n = op->n, .n_kv = op->n_kv,
                    .d = op->d, .d_v = op->dv, .dtype = op->dtype, .algo = ATTN_ALGO_FLASH,
                    .window = op->window, .causal = op->causal};
  float slopes[256];
  for (int h = 0; h < op->heads && h < 256; h++) slopes[h] = (h % 2 ? -1.0f : 1.0f) * exp2f(-(float)(h + 1) / 2);
  if (op->alibi) p.alibi_slopes = slopes;
  char what[256];
  snprintf(what, sizeof what, "split=%d %s d=%d dv=%d n=%d n_kv=%d heads=%d/%d batch=%d window=%d%s%s", split,
           attn_dtype_name(p.dtype), p.d, p.d_v, p.n, p.n_kv, p.heads, p.heads_kv, p.batch, p.window,
           op->causal ? " causal" : "", op->alibi ? " alibi" : "");
  cases++;
  const int failed_before = failures;
  char err[512];
  attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, p.dtype, p.d, op->causal);
  s.dv = p.d_v != p.d ? p.d_v : 0;
  s.alibi = op->alibi;
  attn_problem norm; /* the kernel applies a window only where it hides a key */
  if (attn_problem_normalize(rt, &p, &norm) != ATTN_OK) {
    FAIL("%s: attn_problem_normalize: %s", what, attn_last_error(rt));
    return;
  }
  p.window = norm.window;
  s.window = norm.window > 0;
  if (attn_spec_fit(&s, err, sizeof err) != ATTN_OK) {
    FAIL("%s: attn_spec_fit: %s", what, err);
    return;
  }
  s.split = split > 1 ? split : 0;
  attn_plan *plan = NULL;
  int rc = attn_plan_create_spec(rt, &p, &s, 1, "io", &plan);
  if (rc == ATTN_ECOMPILE && strstr(attn_last_error(rt), "NVRTC is not available")) {
    *no_nvrtc = 1;
    return;
  }
  if (rc != ATTN_OK) {
    FAIL("%s: attn_plan_create_spec (counting): %s: %s", what, attn_strerror(rc), attn_last_error(rt));
    return;
  }
  const attn_spec *ks = attn_cuda_kernel_spec(plan->cuda);
  char label[600];
  attn_spec_format(ks, label, sizeof label);
  ptx_module *m = counting_ptx(ks, label, no_nvrtc);
  const size_t H = (size_t)p.batch * p.heads, HK = (size_t)p.batch * p.heads_kv;
  const size_t nq = H * p.n * p.d, nk = HK * p.n_kv * p.d, nv = HK * p.n_kv * p.d_v, no = H * p.n * p.d_v;
  const size_t es = attn_dtype_size(p.dtype);
  float *x = malloc(sizeof(float) * (nq + nk + nv + no));
  double *ref = malloc(sizeof(double) * no);
  if (!x || !ref) abort();
  if (!m) goto out;
  float *xq = x, *xk = xq + nq, *xv = xk + nk, *f = xv + nv;
  attn_fill_random(xq, nq, 61), attn_fill_random(xk, nk, 62), attn_fill_random(xv, nv, 63);
  attn_round_dtype(p.dtype, xq, nq), attn_round_dtype(p.dtype, xk, nk), attn_round_dtype(p.dtype, xv, nv);
  hook_state h = {.m = m, .s = ks, .qb = nq * es, .kb = nk * es, .vb = nv * es, .ob = no * es, .heads = p.heads};
  attn_io io = {0};
  set_hook(on_launch, &h);
  rc = attn_plan_run_f32(plan, xq, xk, xv, f, &io, NULL);
  set_hook(NULL, NULL);
  if (rc != ATTN_OK || h.runs != (split > 1 ? 2 : 1) || h.fails) {
    FAIL("%s: attn_plan_run_f32 %s (%s), %d launches run (want %d), %d failed", what, attn_strerror(rc),
         attn_last_error(rt), h.runs, split > 1 ? 2 : 1, h.fails);
    goto out;
  }
  /* the launch's problem: the runtime's packing (heads_kv heads of G n rows) or the problem's */
  const int packs = attn_cuda_gqa_packs(&p, ks);
  const long long G = p.heads / p.heads_kv, bh = (long long)p.batch * (packs ? p.heads_kv : p.heads);
  const long long ln = packs ? G * p.n : p.n;
  unsigned long long tr = 0, tw = 0, sr = 0, sw = 0;
  long long parts = split;
  if (attn_io_formula_gqa_window(&plan->spec, p.batch, p.heads, p.heads_kv, p.n, p.n_kv, p.window, &tr, &tw) !=
      ATTN_OK)
    FAIL("%s: attn_io_formula_gqa_window refused", what);
  if (split > 1) {
    stated_form(ks, bh, ln, p.n_kv, &sr, &sw, &parts);
    if (tr != sr || tw != sw)
      FAIL("%s: tuner/io_theory.c's form %llu/%llu, the stated split form %llu/%llu", what, tr, tw, sr, sw);
  }
  if (io.reads != tr || io.writes != tw)
    FAIL("%s: counted %llu/%llu (reads/writes), io_theory's closed form %llu/%llu (%+lld/%+lld)", what, io.reads,
         io.writes, tr, tw, (long long)(io.reads - tr), (long long)(io.writes - tw));
  empty_cases += parts < split;
  char kvline[160] = "";
  if (packs && p.window > 0) {
    /* every row at n_kv - 1: keys from the block holding n_kv - w; one query head's K and V a KV head and block */
    const long long lo = p.n_kv > p.window ? (long long)(p.n_kv - p.window) / ks->bc * ks->bc : 0;
    const long long blocks = (ln + ks->br - 1) / ks->br, dv = attn_spec_dv(ks);
    const double one = (double)bh * blocks * (p.n_kv - lo) * (ks->d + dv);
    const double ratio = ((double)io.reads - (double)bh * ln * ks->d) / one;
    snprintf(kvline, sizeof kvline, "; K and V %.3fx one query head's a KV head", ratio);
    if (ratio != 1.0) FAIL("%s: K and V counted %.3fx one query head's a KV head and block (want 1)", what, ratio);
  }
  attn_problem pr = plan->p; /* normalised: scale */
  attn_reference(&pr, xq, xk, xv, ref);
  double fro, row;
  emu_limits(&pr, &fro, &row);
  const double e = attn_rel_error(ref, f, no);
  if (!(e <= fro)) FAIL("%s: the counting build's relative error %.3g > %.3g", what, e, fro);
  printf("%s %s: %s, Bc=%d, %lld of %d parts with keys; counted %llu/%llu, closed form %llu/%llu%s; o error %.2e\n",
         failures > failed_before ? "...." : "ok  ", what, packs ? "packed" : "a block a query head", ks->bc, parts,
         split, io.reads, io.writes, tr, tw, kvline, e);
out:
  attn_plan_destroy(plan);
  free(x), free(ref);
}

/* "a,b,c": up to max integers into v (the count returned); heads: "H/HKV" pairs into v and v2 */
static int parse_list(const char *c, int *v, int *v2, int max) {
  int k = 0;
  for (; *c && k < max; c = strchr(c, ',') ? strchr(c, ',') + 1 : "") {
    v[k] = atoi(c);
    if (v2 && sscanf(c, "%d/%d", &v[k], &v2[k]) != 2) v2[k] = 0;
    k++;
  }
  return k;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const int t = argc >= 3 ? attn_dtype_parse(argv[2]) : -1;
  if (t < 0) {
    fprintf(stderr, "usage: cuda_splitkv_io LIBCUDA DTYPE [d=D] [dv=DV] [n=N,...] [n_kv=N,...] [heads=H/HKV,...] "
                    "[window=W] [causal] [alibi] S ...\n");
    return 2;
  }
  opts op = {.dtype = (attn_dtype)t, .d = 64, .batch = 2};
  int ns[8] = {1}, nns = 1, nkv[8] = {37}, nnkv = 1, hs[8] = {4}, hks[8] = {2}, nhs = 1, splits[8], nsplits = 0;
  for (int i = 3; i < argc; i++) {
    const char *a = argv[i];
    if (!strncmp(a, "d=", 2)) op.d = atoi(a + 2);
    else if (!strncmp(a, "dv=", 3)) op.dv = atoi(a + 3);
    else if (!strncmp(a, "n=", 2)) nns = parse_list(a + 2, ns, NULL, 8);
    else if (!strncmp(a, "n_kv=", 5)) nnkv = parse_list(a + 5, nkv, NULL, 8);
    else if (!strncmp(a, "heads=", 6)) nhs = parse_list(a + 6, hs, hks, 8);
    else if (!strncmp(a, "window=", 7)) op.window = atoi(a + 7);
    else if (!strcmp(a, "alibi")) op.alibi = 1;
    else if (!strcmp(a, "causal")) op.causal = 1;
    else if (strchr(a, '=') || atoi(a) < 1 || nsplits == 8) {
      fprintf(stderr, "cuda_splitkv_io: bad argument '%s' (options, then splits S >= 1)\n", a);
      return 2;
    } else splits[nsplits++] = atoi(a);
  }
  if (op.dv == 0) op.dv = op.d;
  int bad = op.d < 1 || !nsplits || op.window < 0;
  for (int i = 0; i < nns; i++) bad |= ns[i] < 1;
  for (int i = 0; i < nnkv; i++) bad |= nkv[i] < 1;
  for (int i = 0; i < nhs; i++) bad |= hks[i] < 1 || hs[i] % hks[i] || hs[i] > 256;
  if (bad) {
    fprintf(stderr, "cuda_splitkv_io: d, n, n_kv >= 1, heads (at most 256) a multiple of heads_kv, and a split are "
                    "needed\n");
    return 2;
  }
  fake_cuda_set_hook_fn set_hook = NULL;
  attn_runtime *rt = emu_fake_open(argv[1], &set_hook);
  if (!rt) return 1;
  int no_nvrtc = 0;
  for (int j = 0; j < nsplits && !no_nvrtc; j++)
    for (int hi = 0; hi < nhs && !no_nvrtc; hi++)
      for (int ni = 0; ni < nns && !no_nvrtc; ni++)
        for (int i = 0; i < nnkv && !no_nvrtc; i++) {
          op.heads = hs[hi], op.heads_kv = hks[hi], op.n = ns[ni], op.n_kv = nkv[i];
          run_case(rt, set_hook, &op, splits[j], &no_nvrtc);
        }
  attn_close(rt);
  for (int i = 0; i < nkept; i++) ptx_module_free(kept[i].m);
  if (no_nvrtc) {
    printf("SKIP: no NVRTC to compile the kernels\n");
    return 77;
  }
  printf("%d cases (%d with parts without keys), %d failures\n", cases, empty_cases, failures);
  return failures ? 1 : 0;
}
