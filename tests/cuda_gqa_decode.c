/* cuda_gqa_decode: grouped-query attention on the runtime's dense CUDA flash plans reads K and V once per KV head
 * (attn_cuda_gqa_packs: a KV head's query heads launched as the rows of one block), checked on the fake driver
 * (tests/fake_libcuda.c) whose launch hook runs each of the runtime's launches on the PTX interpreter (tests/ptx).
 *   cuda_gqa_decode LIBCUDA DTYPE [d=D] [dv=DV] [n=N] [n_kv=N] [heads=H/HKV] [batch=B] CASE...
 *       CASE: plain, causal, softcap (30), alibi (slopes of both signs), window (n_kv / 3), causal_window, and
 *       window_nan (n = 1: NaN in a V entry of the key just below the window, in the first key block it loads);
 *       defaults d = 64, n = 1, n_kv = 1000, heads 8/2, batch 1. Each case: a plan by attn_plan_create (no database:
 *       the default tiles), run by attn_execute and attn_execute_lse on the interpreter. Checked: describe says
 *       "GQA-packed" exactly where the packing is valid (no ALiBi, not causal unless n = 1, no window unless n = 1:
 *       every packed row is then the one query at n_kv - 1); the launch's heads and n are the packed ones there
 *       (heads_kv, heads/heads_kv x n), the problem's elsewhere; O of both calls the same bits, every entry written,
 *       within tests/cuda_emu.c's limits of fp64 (and each entry within 8 times that); lse within 16 fp32 ulps of the
 *       logits' size of fp64's; and, packed, the interpreter's global read sectors of K and V against what one query
 *       head of each KV head reads unpacked (whole key blocks from the one holding its window's first key): exactly
 *       that (1.000x) where K and V rows are whole 32-byte sectors and a KV head's rows fit one block, else within
 *       1.10x of it per block. The figures are printed.
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
#include "ptx/ptx.h"

static int failures, cases;
/* The launch hook: the plan's kernel (the spec it was compiled with) run on a fresh interpreter machine with the
 * launch's parameter block, q, k, v (and the slopes) copied in from the fake's device memory (host memory), o and lse
 * copied back; K's and V's read sectors kept. */
typedef struct hook_state {
  const ptx_module *m;
  size_t qb, kb, vb, ob, lb; /* bytes of q, k, v, o, lse */
  int heads;                 /* the problem's: slopes to copy */
  int runs, fails;
  long long heads_seen, n_seen;
  uint64_t kv_sectors;       /* K and V read sectors of the last launch */
} hook_state;

static void on_launch(const void *params, unsigned grid, unsigned block, unsigned smem, void *user) {
  hook_state *h = user;
  attn_cuda_kargs a;
  memcpy(&a, params, sizeof a);
  char err[1024] = "";
  ptx_machine *x = ptx_machine_new(h->m, err, sizeof err);
  uint64_t d[6] = {0};
  const void *src[6] = {a.q, a.k, a.v, NULL, NULL, a.alibi};
  const size_t bytes[6] = {h->qb, h->kb, h->vb, h->ob, h->lb, a.alibi ? sizeof(float) * (size_t)h->heads : 0};
  static const char *names[6] = {"q", "k", "v", "o", "lse", "alibi"};
  int ok = x != NULL;
  for (int i = 0; ok && i < 6; i++)
    if (bytes[i] && (i != 4 || a.lse))
      ok = (d[i] = ptx_alloc(x, bytes[i], names[i])) != 0 && (!src[i] || ptx_copy_in(x, d[i], src[i], bytes[i]) == 0);
  unsigned char *o = a.o;
  float *lse = a.lse;
  a.q = (const void *)(uintptr_t)d[0], a.k = (const void *)(uintptr_t)d[1], a.v = (const void *)(uintptr_t)d[2];
  a.o = (void *)(uintptr_t)d[3], a.lse = (float *)(uintptr_t)d[4], a.alibi = (const float *)(uintptr_t)d[5];
  a.consts = NULL, a.scratch = NULL, a.io = NULL;
  const ptx_launch_cfg kc = {.grid = grid, .block = block, .dyn_smem = smem};
  ok = ok && ptx_launch(x, "attn_kernel", &kc, &a, ATTN_CUDA_KARGS_DENSE_BYTES, err, sizeof err) == 0 &&
       ptx_copy_out(x, d[3], o, h->ob, NULL) == 0 && (!lse || ptx_copy_out(x, d[4], lse, h->lb, NULL) == 0);
  ptx_buffer_stats sk, sv;
  if (ok && ptx_buffer_stats_of(x, d[1], &sk) == 0 && ptx_buffer_stats_of(x, d[2], &sv) == 0)
    h->kv_sectors = sk.read_sectors + sv.read_sectors;
  else if (ok)
    ok = 0, snprintf(err, sizeof err, "no statistics of K and V");
  if (!ok) printf("FAIL the runtime's launch on the interpreter: %s\n", x ? err : "no machine");
  h->fails += !ok;
  h->runs++;
  h->heads_seen = a.heads, h->n_seen = a.n;
  ptx_machine_free(x);
}

/* The last kernel's module, kept for the next case of the same spec (causal decode runs the non-causal kernel) */
static ptx_module *kept;
static char kept_label[600];

static ptx_module *build_ptx(const attn_spec *s, const char *label, int *no_nvrtc) {
  if (kept && !strcmp(label, kept_label)) return kept;
  if (kept) ptx_module_free(kept);
  kept = NULL;
  ptx_module *m = emu_spec_ptx(s, label, no_nvrtc, &failures);
  if (m) snprintf(kept_label, sizeof kept_label, "%s", label), kept = m;
  return m;
}

typedef struct opts {
  attn_dtype dtype;
  int d, dv, n, n_kv, heads, heads_kv, batch;
} opts;

static void run_case(attn_runtime *rt, fake_cuda_set_hook_fn set_hook, const opts *op, const char *name,
                     int *no_nvrtc) {
  attn_problem p = {.batch = op->batch, .heads = op->heads, .heads_kv = op->heads_kv, .n = op->n, .n_kv = op->n_kv,
                    .d = op->d, .d_v = op->dv, .dtype = op->dtype, .algo = ATTN_ALGO_FLASH};
  float *slopes = malloc(sizeof(float) * (size_t)op->heads);
  if (!slopes) abort();
  for (int h = 0; h < op->heads; h++) slopes[h] = (h % 2 ? -1.0f : 1.0f) * exp2f(-(float)(h + 1) / 2);
  if (!strcmp(name, "causal")) p.causal = 1;
  else if (!strcmp(name, "softcap")) p.softcap = 30.0f;
  else if (!strcmp(name, "alibi")) p.alibi_slopes = slopes;
  else if (!strcmp(name, "window") || !strcmp(name, "window_nan")) p.window = op->n_kv / 3 > 1 ? op->n_kv / 3 : 1;
  else if (!strcmp(name, "causal_window")) p.causal = 1, p.window = op->n_kv / 3 > 1 ? op->n_kv / 3 : 1;
  else if (strcmp(name, "plain")) {
    FAIL("unknown case '%s' (plain, causal, softcap, alibi, window, causal_window, window_nan)", name);
    free(slopes);
    return;
  }
  /* where the rows' positions do not matter (derived here, not from the runtime's predicate) */
  const int want_packed = !p.alibi_slopes && (p.window == 0 || p.n == 1) && (p.n == 1 || !p.causal) &&
                          p.heads > p.heads_kv;
  char what[256];
  snprintf(what, sizeof what, "%s %s d=%d dv=%d n=%d n_kv=%d heads=%d/%d batch=%d", name, attn_dtype_name(p.dtype),
           p.d, p.d_v, p.n, p.n_kv, p.heads, p.heads_kv, p.batch);
  cases++;
  const int failed_before = failures;
  attn_plan *plan = NULL;
  int rc = attn_plan_create(rt, &p, &plan);
  if (rc == ATTN_ECOMPILE && strstr(attn_last_error(rt), "NVRTC is not available")) {
    *no_nvrtc = 1;
    free(slopes);
    return;
  }
  if (rc != ATTN_OK) {
    FAIL("%s: attn_plan_create: %s: %s", what, attn_strerror(rc), attn_last_error(rt));
    free(slopes);
    return;
  }
  const char *desc = attn_plan_describe(plan);
  if ((strstr(desc, "GQA-packed") != NULL) != want_packed)
    FAIL("%s: describe '%s' %s say GQA-packed", what, desc, want_packed ? "does not" : "must not");
  const attn_spec *ks = attn_cuda_kernel_spec(plan->cuda);
  char label[600];
  attn_spec_format(ks, label, sizeof label);
  ptx_module *m = build_ptx(ks, label, no_nvrtc);
  const size_t es = attn_dtype_size(p.dtype), H = (size_t)p.batch * p.heads, HK = (size_t)p.batch * p.heads_kv;
  const size_t nq = H * p.n * p.d, nk = HK * p.n_kv * p.d, nv = HK * p.n_kv * p.d_v, no = H * p.n * p.d_v,
               nl = H * p.n;
  float *x = malloc(sizeof(float) * (nq + nk + nv + 2 * no + nl));
  double *ref = malloc(sizeof(double) * (no + nl));
  unsigned char *raw = malloc((nq + nk + nv) * es), *o1 = malloc(no * es), *o2 = malloc(no * es);
  void *dq = NULL, *dk = NULL, *dv = NULL, *dob = NULL, *dl = NULL;
  if (!x || !ref || !raw || !o1 || !o2) abort();
  if (!m) goto out;
  float *xq = x, *xk = xq + nq, *xv = xk + nk, *f1 = xv + nv, *f2 = f1 + no, *lse = f2 + no;
  attn_fill_random(xq, nq, 41), attn_fill_random(xk, nk, 42), attn_fill_random(xv, nv, 43);
  attn_round_dtype(p.dtype, xq, nq), attn_round_dtype(p.dtype, xk, nk), attn_round_dtype(p.dtype, xv, nv);
  /* the keys the last query's window sees: [lo, n_kv); a KV head's (one query head's) K and V loads start at the key
   * block holding lo (kernel spec's Bc) */
  const long long lo = p.window > 0 && p.n_kv > p.window ? p.n_kv - p.window : 0, lo0 = lo / ks->bc * ks->bc;
  if (!strcmp(name, "window_nan")) {
    if (lo == lo0 || p.n != 1)
      FAIL("%s: the window starts a key block (lo = %lld) or n != 1: no key is hidden from every row", what, lo);
    else xv[(size_t)(lo - 1) * p.d_v] = NAN; /* KV head 0, column 0: hidden from every row, in a loaded block */
  }
  attn_to_dtype(p.dtype, xq, nq, raw), attn_to_dtype(p.dtype, xk, nk, raw + nq * es);
  attn_to_dtype(p.dtype, xv, nv, raw + (nq + nk) * es);
  if (attn_cuda_alloc(rt, nq * es, &dq) || attn_cuda_alloc(rt, nk * es, &dk) || attn_cuda_alloc(rt, nv * es, &dv) ||
      attn_cuda_alloc(rt, no * es, &dob) || attn_cuda_alloc(rt, nl * 4, &dl) ||
      attn_cuda_copy(rt, dq, raw, nq * es, 1) || attn_cuda_copy(rt, dk, raw + nq * es, nk * es, 1) ||
      attn_cuda_copy(rt, dv, raw + (nq + nk) * es, nv * es, 1)) {
    FAIL("%s: device memory on the fake: %s", what, attn_last_error(rt));
    goto out;
  }
  hook_state h = {.m = m, .qb = nq * es, .kb = nk * es, .vb = nv * es, .ob = no * es, .lb = nl * 4,
                  .heads = p.heads};
  set_hook(on_launch, &h);
  memset(dob, 0xff, no * es); /* the fake's device memory is host memory: poisoned in place */
  const int r1 = attn_execute(plan, dq, dk, dv, dob);
  const int runs1 = h.runs;
  const long long heads1 = h.heads_seen, n1 = h.n_seen;
  const uint64_t sectors = h.kv_sectors;
  memcpy(o1, dob, no * es);
  memset(dob, 0xff, no * es);
  memset(dl, 0xff, nl * 4); /* NaN */
  const int r2 = attn_execute_lse(plan, dq, dk, dv, dob, dl);
  set_hook(NULL, NULL);
  memcpy(o2, dob, no * es);
  memcpy(lse, dl, nl * 4);
  if (r1 != ATTN_OK || r2 != ATTN_OK || runs1 != 1 || h.runs != 2 || h.fails) {
    FAIL("%s: attn_execute %s, attn_execute_lse %s (%s), %d then %d launches run (want 1, 2), %d failed", what,
         attn_strerror(r1), attn_strerror(r2), attn_last_error(rt), runs1, h.runs, h.fails);
    goto out;
  }
  const long long G = p.heads / p.heads_kv;
  const long long want_heads = want_packed ? p.heads_kv : p.heads, want_n = want_packed ? G * p.n : p.n;
  if (heads1 != want_heads || n1 != want_n || h.heads_seen != want_heads || h.n_seen != want_n)
    FAIL("%s: launched with heads %lld n %lld (lse: %lld, %lld), want %lld and %lld", what, heads1, n1, h.heads_seen,
         h.n_seen, want_heads, want_n);
  size_t unwritten = 0;
  for (size_t i = 0; i < no; i++) {
    size_t ones = 0;
    while (ones < es && o1[i * es + ones] == 0xff) ones++;
    unwritten += ones == es;
  }
  if (unwritten) FAIL("%s: %zu entries of o never written", what, unwritten);
  if (memcmp(o1, o2, no * es)) FAIL("%s: attn_execute's and attn_execute_lse's o differ", what);
  attn_from_dtype(p.dtype, o1, no, f1);
  attn_from_dtype(p.dtype, o2, no, f2);
  attn_problem pr = plan->p; /* normalised: scale, and a window that hides nothing dropped */
  attn_reference(&pr, xq, xk, xv, ref);
  double fro, row;
  emu_limits(&pr, &fro, &row);
  const double err = attn_rel_error(ref, f1, no);
  if (!(err <= fro)) FAIL("%s: relative error %.3g > %.3g", what, err, fro);
  for (size_t i = 0; i < no; i++)
    if (!(fabs(f1[i] - ref[i]) <= 8 * fro)) {
      FAIL("%s: o entry %zu is %.6g, fp64's %.6g", what, i, (double)f1[i], ref[i]);
      break;
    }
  emu_ref_lse(&pr, xq, xk, ref + no);
  /* the logits' size: |scale| sqrt(d) for these inputs, and ALiBi's slopes (at most 0.71) times the distance */
  const double ltol = 16 * 0x1p-24 * (1.0 + fabs((double)pr.scale) * sqrt((double)pr.d) + (p.alibi_slopes ? p.n_kv : 0));
  double lerr = 0;
  for (size_t i = 0; i < nl; i++) {
    const double want = ref[no + i], e = fabs((double)lse[i] - want) / (1.0 + fabs(want));
    if (!(e <= ltol)) {
      FAIL("%s: lse of row %zu is %.9g, fp64's %.9g", what, i, (double)lse[i], want);
      break;
    }
    lerr = e > lerr ? e : lerr;
  }
  /* K and V once per KV head: what one query head reads unpacked, the keys from lo0 (times the blocks a KV head's
   * G n rows take where they pass Br) */
  const double compulsory = (double)HK * (double)(p.n_kv - lo0) * (p.d + p.d_v) * es;
  const double ratio = (double)sectors * 32 / compulsory;
  const double spans = want_packed ? ceil((double)(G * p.n) / ks->br) : 1;
  const int whole = (p.d * es) % 32 == 0 && (p.d_v * es) % 32 == 0 && spans == 1;
  printf("%s %s: %s, K and V read %llu sectors = %.3fx a query head's a KV head; o error %.2e (limit %.2e), lse %.2e "
         "(%.2e)\n", failures > failed_before ? "...." : "ok  ", what, want_packed ? "packed" : "a block a query head",
         (unsigned long long)sectors, ratio, err, fro, lerr, ltol);
  /* (window_nan: the rows spoiled by the hidden NaN are computed again from global memory, outside the I/O model) */
  if (want_packed && strcmp(name, "window_nan") && (whole ? ratio != 1.0 : !(ratio <= 1.10 * spans)))
    FAIL("%s: K and V read %.3fx a query head's (want %s%.2fx: once per KV head and block of Br = %d rows)", what,
         ratio, whole ? "" : "<= ", whole ? 1.0 : 1.10 * spans, ks->br);
out:
  attn_cuda_free(rt, dq), attn_cuda_free(rt, dk), attn_cuda_free(rt, dv), attn_cuda_free(rt, dob);
  attn_cuda_free(rt, dl);
  attn_plan_destroy(plan);
  free(x), free(ref), free(raw), free(o1), free(o2), free(slopes);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const int t = argc >= 3 ? attn_dtype_parse(argv[2]) : -1;
  if (t < 0) {
    fprintf(stderr, "usage: cuda_gqa_decode LIBCUDA DTYPE [d=D] [dv=DV] [n=N] [n_kv=N] [heads=H/HKV] [batch=B] "
                    "plain|causal|softcap|alibi|window|causal_window|window_nan ...\n");
    return 2;
  }
  opts op = {.dtype = (attn_dtype)t, .d = 64, .n = 1, .n_kv = 1000, .heads = 8, .heads_kv = 2, .batch = 1};
  int first_case = argc;
  for (int i = 3; i < argc; i++) {
    const char *a = argv[i];
    if (!strncmp(a, "d=", 2)) op.d = atoi(a + 2);
    else if (!strncmp(a, "dv=", 3)) op.dv = atoi(a + 3);
    else if (!strncmp(a, "n=", 2)) op.n = atoi(a + 2);
    else if (!strncmp(a, "n_kv=", 5)) op.n_kv = atoi(a + 5);
    else if (!strncmp(a, "batch=", 6)) op.batch = atoi(a + 6);
    else if (!strncmp(a, "heads=", 6)) {
      if (sscanf(a + 6, "%d/%d", &op.heads, &op.heads_kv) != 2) op.heads_kv = 0;
    } else if (strchr(a, '=')) {
      fprintf(stderr, "cuda_gqa_decode: unknown option '%s'\n", a);
      return 2;
    } else if (first_case == argc) first_case = i;
  }
  if (op.dv == 0) op.dv = op.d;
  if (op.d < 1 || op.n < 1 || op.n_kv < 1 || op.batch < 1 || op.heads_kv < 1 || op.heads % op.heads_kv ||
      first_case == argc) {
    fprintf(stderr, "cuda_gqa_decode: d, n, n_kv, batch >= 1, heads a multiple of heads_kv, and a case are needed\n");
    return 2;
  }
  fake_cuda_set_hook_fn set_hook = NULL;
  /* one SM: the untuned plans stay one launch, which the hook runs (their split-KV: tests/cuda_defsplit.c) */
  attn_runtime *rt = emu_fake_open_as(argv[1], "sms=1", &set_hook, NULL);
  if (!rt) return 1;
  int no_nvrtc = 0;
  for (int i = first_case; i < argc && !no_nvrtc; i++)
    if (!strchr(argv[i], '=')) run_case(rt, set_hook, &op, argv[i], &no_nvrtc);
  attn_close(rt);
  if (kept) ptx_module_free(kept);
  if (no_nvrtc) {
    printf("SKIP: no NVRTC to compile the kernels\n");
    return 77;
  }
  printf("%d cases, %d failures\n", cases, failures);
  return failures ? 1 : 0;
}
