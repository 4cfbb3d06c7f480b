/* cuda_emu_serve: the CUDA flash kernels of the serving layouts (templates/flash.cu with ATTN_LAYOUT: attn_execute_
 * varlen's packed rows, attn_execute_paged's pages) as NVRTC compiles them, run on the PTX interpreter (tests/ptx),
 * against the fp64 reference sequence by sequence; and the CUDA API of both on a fake driver.
 *   cuda_emu_serve varlen|paged DTYPE [FIELD=VALUE ...]
 *       the default flash spec of (DTYPE, d, causal) fitted for its d_v, with the layout set, then: d, dv (d_v; 0:
 *       d), causal, br, bc, warps, stages, arch (sm_80, sm_90), window=W, softcap=C, alibi=1 (slopes of both signs),
 *       scale=S, heads=H/HKV (default 4/2), order=K (block and warp order: 0, 1 reversed, >= 2 shuffled), nan=1
 *       (NaN in V at two keys of each sequence: the reference's NaN pattern exactly, causal and windowed kernels'
 *       fa_fix, which recomputes the rows a hidden key's 0·NaN spoils);
 *       varlen: one batch with sequences of 0, 1, odd, equal, longer and shorter key lengths than query lengths, one
 *       with queries and no key, one with keys and no query;
 *       paged: n=N query rows a sequence (default 5; 1 is decode), page=P[,P...] (default 16,7), lengths 0, 1, odd,
 *       one whole page and the longest over pages drawn from a shuffled cache with spare pages.
 *       Checked: each sequence's rows against fp64 (relative Frobenius error within the limits of tests/cuda_emu.c),
 *       every output written, rows that see no key exactly 0; and whatever the interpreter checks (out-of-bounds
 *       and uninitialised reads: the unused page slots, the table's unused entries and the rows of other sequences
 *       are never read; shared-memory races).
 *   cuda_emu_serve traffic DTYPE [d=D] [page=P[,P...]] [n_kv=N] [heads=H/HKV] [pack=0]
 *       grouped-query decode (default heads 8/2, two sequences of n_kv = 1000 keys) on the packed paged kernel, its
 *       pages in shuffled order, and on the dense kernel (the query heads of a KV head as its rows: a block a KV
 *       head) on the same data: the interpreter's global read sectors of paged within 10% of dense's (3% with
 *       pages of 8 keys or more), both within 1.10x the compulsory bytes (each K and V row once per KV
 *       head, Q once; O written once), the figures printed, both outputs against fp64. pack=0: the paged kernel a
 *       block a query head (layout 2), which reads each page G times and must fail.
 *   cuda_emu_serve compile ARCH
 *       NVRTC compiles both layouts of a spread of specs to cubin for ARCH with no spill (ptxas's report).
 *   cuda_emu_serve fake LIBCUDA [full]
 *       libattn on tests/fake_libcuda.c: bad arguments give ATTN_EINVAL with one line and launch nothing, o
 *       untouched; a good varlen call launches its kernel once (the grid of its longest sequence), waited for; the
 *       _async forms queue copy, launch and event on the caller's stream with no wait, the host arrays read before
 *       the call returns (the fake copies when the stream gets there), a staging block per call in flight (the
 *       ninth waits for the oldest; four threads' calls on their own streams each read by one launch), nothing
 *       allocated by the synchronous call once the blocks exist; the runtime's own varlen launches, sync and async,
 *       run on the PTX interpreter as their stream gets there (fake_cuda_set_hook): the same bits, within fp64's
 *       limits (full: paged prefill too); full
 *       (more kernels to compile): a good paged call too, grouped-query decode on the packed kernel (a block a KV
 *       head), and smallcache plans refuse both with their reason.
 *   cuda_emu_serve spec
 *       the layout in a spec's text, source and checks (no compiler).
 * Exit 77 (skipped) without NVRTC. */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "emu_util.h"
#include "fake_libcuda.h"
#include "internal.h"
#include "kernel_abi_cuda.h"
#include "launch.h"
#include "ptx/ptx.h"

static int failures, cases, no_nvrtc;
/* ---- options ---- */
static int layout, opt_nan, nan_seen, opt_window, opt_alibi, opt_heads = 4, opt_heads_kv = 2, opt_n = 5, npages;
static int opt_pack = 1, opt_nkv = 1000; /* traffic: pack=0 (layout 2), n_kv= */
static int pages[8] = {16, 7};
static float opt_softcap, opt_scale;
static unsigned opt_order;

static unsigned long long rng = 0x9e3779b97f4a7c15ULL;
static unsigned next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (unsigned)(rng >> 11);
}

static ptx_module *build_ptx(const attn_spec *s, const char *label) {
  char err[512];
  char *src = attn_spec_source(s, 0, err, sizeof err);
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
  const int rc = attn_nvrtc_ptx(src, "attn_kernel.cu", s->arch, &ptx, &log);
  free(src);
  return emu_load_ptx(rc, ptx, log, label, &no_nvrtc, &failures);
}

static size_t es_of(attn_dtype t) { return attn_dtype_size(t); }
static void to_raw(attn_dtype t, const float *x, size_t count, unsigned char *out) {
  attn_to_dtype(t, x, count, out);
}

/* the relative (Frobenius) error limit for these inputs (uniform in [-1, 1]), tests/cuda_emu.c's */
static double limit(const attn_problem *p) {
  double fro, row;
  emu_limits(p, &fro, &row);
  return fro;
}

/* One sequence: its dense q [heads][lq][d], k, v [heads_kv][lk][d | d_v] (fp32 values of the dtype) against the
 * kernel's rows o [heads][lq][d_v] (converted back); 0, or -1 with a failure reported. */
static int check_sequence(const attn_problem *base, int lq, int lk, const float *q, const float *k, const float *v,
                          const float *o, const char *what) {
  attn_problem p = *base;
  p.batch = 1, p.n = lq, p.n_kv = lk;
  const size_t no = (size_t)p.heads * lq * p.d_v;
  if (lk == 0) { /* no key: zero rows */
    for (size_t i = 0; i < no; i++)
      if (o[i] != 0.0f) {
        FAIL("%s: a sequence with no key has row value %g at %zu (want 0)", what, (double)o[i], i);
        return -1;
      }
    return 0;
  }
  double *ref = malloc(no * sizeof(double));
  float *fin = malloc(no * sizeof(float));
  if (!ref || !fin) abort();
  attn_reference(&p, q, k, v, ref);
  int rc = 0;
  /* NaN (nan=1): the reference's NaN pattern exactly, the rest compared as usual */
  for (size_t i = 0; i < no; i++) {
    if (isnan(ref[i]) != isnan(o[i]) && rc == 0) {
      FAIL("%s | lq=%d lk=%d: entry %zu is %g, the reference's %g", what, lq, lk, i, (double)o[i], ref[i]);
      rc = -1;
    }
    fin[i] = isnan(ref[i]) ? 0.0f : o[i];
    if (isnan(ref[i])) ref[i] = 0.0, nan_seen++;
  }
  for (size_t i = 0; i < no && rc == 0; i++)
    if (ref[i] == 0.0 && fin[i] != 0.0f) {
      /* rows that see no key (causal with lq > lk, windows): the reference's 0 exactly */
      FAIL("%s | lq=%d lk=%d: entry %zu is %g where the row sees no key", what, lq, lk, i, (double)o[i]);
      rc = -1;
    }
  const double err = attn_rel_error(ref, fin, no), lim = limit(&p);
  if (rc == 0 && !(err <= lim)) {
    FAIL("%s | lq=%d lk=%d: relative error %.3g > %.3g", what, lq, lk, err, lim);
    rc = -1;
  }
  /* and each entry (softmax averages of V in [-1, 1]: at most 1 in size) within 8 times that, absolutely: one wrong
   * entry in a sequence barely moves the Frobenius error */
  for (size_t i = 0; i < no && rc == 0; i++)
    if (!(fabs(fin[i] - ref[i]) <= 8 * lim)) {
      FAIL("%s | lq=%d lk=%d: entry %zu is %.6g, the reference's %.6g", what, lq, lk, i, (double)fin[i], ref[i]);
      rc = -1;
    }
  free(ref), free(fin);
  return rc;
}

/* nan=1's keys: one that a window or the causal mask hides from some of the rows of a block that loads it (so that
 * fa_fix has rows to recompute), and, causal, the last one (hidden from every row but the last; without a causal
 * mask every row would see it, and every output of its column would be NaN) */
static int nan_key(int lq, int lk) {
  const int j = lk - 1 - (opt_window > 0 ? lq + opt_window / 2 : lq / 2);
  return j > 0 ? j : 0;
}

/* The run's machine, the kernel's arguments and launch (the layout's fields set by the caller), and o back. */
typedef struct {
  ptx_machine *x;
  attn_cuda_kargs a;
  attn_cuda_geom g;
} emu;

static uint64_t put(emu *e, const void *src, size_t bytes, const char *name) {
  const uint64_t d = ptx_alloc(e->x, bytes ? bytes : 1, name);
  if (!d || (src && bytes && ptx_copy_in(e->x, d, src, bytes))) {
    FAIL("%s: cannot allocate or copy in", name);
    return 0;
  }
  return d;
}

static int launch(emu *e, const attn_spec *s, const char *what) {
  char err[1024];
  const ptx_launch_cfg kc = {.grid = e->g.grid, .block = e->g.block, .dyn_smem = (uint64_t)attn_spec_cuda_smem(s),
                             .order = opt_order};
  const size_t bytes = s->layout ? sizeof e->a : ATTN_CUDA_KARGS_DENSE_BYTES; /* a dense kernel's parameters */
  if (ptx_launch(e->x, "attn_kernel", &kc, &e->a, bytes, err, sizeof err)) {
    FAIL("%s: attn_kernel: %s", what, err);
    return -1;
  }
  return 0;
}

/* the problem of the batch (the plan's: n, n_kv the most) and the kernel's common arguments */
static int setup(emu *e, const ptx_module *m, const attn_spec *s, attn_problem *p, int batch, int n, int n_kv,
                 const float *slopes, const char *what) {
  memset(e, 0, sizeof *e);
  memset(p, 0, sizeof *p);
  p->batch = batch, p->heads = opt_heads, p->heads_kv = opt_heads_kv, p->n = n, p->n_kv = n_kv;
  p->d = s->d, p->d_v = attn_spec_dv(s), p->dtype = s->dtype, p->causal = s->causal;
  p->scale = opt_scale != 0.0f ? opt_scale : 1.0f / sqrtf((float)s->d);
  p->window = opt_window, p->softcap = opt_softcap, p->alibi_slopes = opt_alibi ? slopes : NULL;
  char err[512];
  if (attn_cuda_geometry(s, (long long)batch * p->heads, n, n_kv > 0 ? n_kv : 1, 0, &e->g, err, sizeof err)) {
    FAIL("%s: geometry: %s", what, err);
    return -1;
  }
  if (!(e->x = ptx_machine_new(m, err, sizeof err))) {
    FAIL("%s: %s", what, err);
    return -1;
  }
  attn_cuda_kargs *a = &e->a;
  a->batch = batch, a->heads = p->heads, a->heads_kv = p->heads_kv, a->n = n, a->n_kv = n_kv;
  a->scale = p->scale, a->grid_items = (int)e->g.items;
  a->window = p->window, a->softcap = p->softcap;
  if (opt_alibi && !(a->alibi = (const float *)(uintptr_t)put(e, slopes, sizeof(float) * p->heads, "alibi")))
    return -1;
  return 0;
}

/* o back from the device: count entries, converted; -1 with a failure when some were never written */
static int get_o(emu *e, uint64_t d, attn_dtype t, size_t count, float *o, const char *what) {
  unsigned char *raw = malloc(count * es_of(t) + 1);
  size_t undef = 0;
  int rc = raw && ptx_copy_out(e->x, d, raw, count * es_of(t), &undef) == 0 ? 0 : -1;
  if (rc) FAIL("%s: cannot copy o out", what);
  else attn_from_dtype(t, raw, count, o);
  const size_t es = es_of(t);
  for (size_t i = 0; rc == 0 && i < count; i++) { /* still the poison (all bits set): never written */
    size_t ones = 0;
    while (ones < es && raw[i * es + ones] == 0xff) ones++;
    undef += ones == es;
  }
  if (rc == 0 && undef) {
    FAIL("%s: %zu entries of o never written", what, undef);
    rc = -1;
  }
  free(raw);
  return rc;
}

/* ---- varlen ---- */

/* A packed batch's rows (fp32 values of the dtype, [total][heads][d | d_v]) against fp64 sequence by sequence
 * (check_sequence); 0, or -1 with the failures reported. p: the batch's problem (its heads, d, d_v, modifiers). */
static int check_varlen(const attn_problem *p, int B, const int *cu_q, const int *cu_kv, const float *q,
                        const float *k, const float *v, const float *o, const char *what) {
  const size_t H = (size_t)p->heads, HK = (size_t)p->heads_kv;
  int bad = 0;
  for (int b = 0; b < B; b++) {
    const int lq = cu_q[b + 1] - cu_q[b], lk = cu_kv[b + 1] - cu_kv[b];
    if (lq == 0) continue;
    /* the sequence's rows, dense */
    float *sq = malloc(H * lq * p->d * 4 + 4), *sk = malloc(HK * lk * p->d * 4 + 4),
          *sv = malloc(HK * lk * p->d_v * 4 + 4), *so = malloc(H * lq * p->d_v * 4 + 4);
    if (!sq || !sk || !sv || !so) abort();
    for (int t = 0; t < lq; t++)
      for (size_t h = 0; h < H; h++) {
        memcpy(sq + (h * lq + t) * p->d, q + ((cu_q[b] + t) * H + h) * p->d, 4 * p->d);
        memcpy(so + (h * lq + t) * p->d_v, o + ((cu_q[b] + t) * H + h) * p->d_v, 4 * p->d_v);
      }
    for (int t = 0; t < lk; t++)
      for (size_t h = 0; h < HK; h++) {
        memcpy(sk + (h * lk + t) * p->d, k + ((cu_kv[b] + t) * HK + h) * p->d, 4 * p->d);
        memcpy(sv + (h * lk + t) * p->d_v, v + ((cu_kv[b] + t) * HK + h) * p->d_v, 4 * p->d_v);
      }
    char w[600];
    snprintf(w, sizeof w, "%s | sequence %d", what, b);
    bad |= check_sequence(p, lq, lk, sq, sk, sv, so, w);
    free(sq), free(sk), free(sv), free(so);
  }
  return bad ? -1 : 0;
}

static void run_varlen(const ptx_module *m, const attn_spec *s, const char *label, const float *slopes) {
  static const int LQ[] = {0, 1, 37, 19, 70, 1, 6}, LK[] = {5, 0, 29, 83, 70, 1, 0};
  enum { B = sizeof LQ / sizeof LQ[0] };
  int cu_q[B + 1] = {0}, cu_kv[B + 1] = {0}, n = 0, n_kv = 0;
  for (int b = 0; b < B; b++) {
    cu_q[b + 1] = cu_q[b] + LQ[b], cu_kv[b + 1] = cu_kv[b] + LK[b];
    if (LQ[b] > n) n = LQ[b];
    if (LK[b] > n_kv) n_kv = LK[b];
  }
  emu e;
  attn_problem p;
  char what[512];
  snprintf(what, sizeof what, "%s | varlen batch=%d heads=%d/%d order=%u", label, B, opt_heads, opt_heads_kv,
           opt_order);
  if (setup(&e, m, s, &p, B, n, n_kv, slopes, what)) {
    ptx_machine_free(e.x);
    return;
  }
  const size_t tq = (size_t)cu_q[B], tk = (size_t)cu_kv[B], H = (size_t)p.heads, HK = (size_t)p.heads_kv;
  const size_t nq = tq * H * p.d, nk = tk * HK * p.d, nv = tk * HK * p.d_v, no = tq * H * p.d_v;
  const size_t es = es_of(p.dtype);
  float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nv * 4), *o = malloc(no * 4);
  unsigned char *raw = malloc((nq + nk + nv + no) * es);
  if (!q || !k || !v || !o || !raw) abort();
  attn_fill_random(q, nq, 11), attn_fill_random(k, nk, 12), attn_fill_random(v, nv, 13);
  attn_round_dtype(p.dtype, q, nq), attn_round_dtype(p.dtype, k, nk), attn_round_dtype(p.dtype, v, nv);
  for (int b = 0; opt_nan && b < B; b++) /* NaN in V at two keys of each sequence (KV head 0, column 0) */
    if (LK[b] >= 2) {
      v[(size_t)(cu_kv[b] + nan_key(LQ[b], LK[b])) * HK * p.d_v] = NAN;
      if (s->causal) v[(size_t)(cu_kv[b + 1] - 1) * HK * p.d_v] = NAN;
    }
  uint64_t dq, dk, dv, dout, dcq, dck;
  to_raw(p.dtype, q, nq, raw);
  dq = put(&e, raw, nq * es, "q");
  to_raw(p.dtype, k, nk, raw);
  dk = put(&e, raw, nk * es, "k");
  to_raw(p.dtype, v, nv, raw);
  dv = put(&e, raw, nv * es, "v");
  memset(raw, 0xff, no * es); /* the poison */
  dout = put(&e, raw, no * es, "o");
  dcq = put(&e, cu_q, sizeof cu_q, "cu_q");
  dck = put(&e, cu_kv, sizeof cu_kv, "cu_kv");
  if (dq && dk && dv && dout && dcq && dck) {
    e.a.q = (const void *)(uintptr_t)dq, e.a.k = (const void *)(uintptr_t)dk, e.a.v = (const void *)(uintptr_t)dv;
    e.a.o = (void *)(uintptr_t)dout;
    e.a.cu_q = (const int *)(uintptr_t)dcq, e.a.cu_kv = (const int *)(uintptr_t)dck;
    if (launch(&e, s, what) == 0 && get_o(&e, dout, p.dtype, no, o, what) == 0) {
      cases++;
      if (!check_varlen(&p, B, cu_q, cu_kv, q, k, v, o, what)) printf("ok %s\n", what);
    }
  }
  free(q), free(k), free(v), free(o), free(raw);
  ptx_machine_free(e.x);
}

/* ---- paged ---- */

static void run_paged(const ptx_module *m, const attn_spec *s, const char *label, const float *slopes, int ps) {
  static const int LK[] = {0, 1, 37, 100, 16};
  enum { B = sizeof LK / sizeof LK[0] };
  const int n = opt_n, n_kv = 100;
  emu e;
  attn_problem p;
  char what[512];
  snprintf(what, sizeof what, "%s | paged page_size=%d batch=%d heads=%d/%d n=%d order=%u", label, ps, B, opt_heads,
           opt_heads_kv, n, opt_order);
  if (setup(&e, m, s, &p, B, n, n_kv, slopes, what)) {
    ptx_machine_free(e.x);
    return;
  }
  if (s->layout == 3) { /* packed decode: the grid and heads are the KV heads', n the query heads of each */
    char err[512];
    if (attn_cuda_geometry(s, (long long)B * p.heads_kv, p.heads / p.heads_kv, n_kv, 0, &e.g, err, sizeof err)) {
      FAIL("%s: geometry: %s", what, err);
      ptx_machine_free(e.x);
      return;
    }
    e.a.heads = p.heads_kv, e.a.n = p.heads / p.heads_kv, e.a.grid_items = (int)e.g.items;
  }
  const int max_pages = (n_kv + ps - 1) / ps + 1;
  int used = 0;
  for (int b = 0; b < B; b++) used += (LK[b] + ps - 1) / ps;
  const int num_pages = used + 3;
  int *perm = malloc(sizeof(int) * num_pages), *table = malloc(sizeof(int) * B * max_pages);
  if (!perm || !table) abort();
  for (int i = 0; i < num_pages; i++) perm[i] = i;
  for (int i = num_pages - 1; i > 0; i--) {
    const int j = (int)(next() % (unsigned)(i + 1)), t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  int u = 0;
  for (int b = 0; b < B; b++)
    for (int i = 0; i < max_pages; i++)
      table[b * max_pages + i] = i < (LK[b] + ps - 1) / ps ? perm[u++] : 1 << 30; /* never read */
  const size_t H = (size_t)p.heads, HK = (size_t)p.heads_kv, es = es_of(p.dtype);
  const size_t nq = (size_t)B * H * n * p.d, no = (size_t)B * H * n * p.d_v;
  const size_t slot_k = HK * p.d, slot_v = HK * p.d_v; /* entries a slot */
  float *q = malloc(nq * 4), *o = malloc(no * 4);
  float *k = malloc((size_t)B * n_kv * slot_k * 4), *v = malloc((size_t)B * n_kv * slot_v * 4); /* [b][t][hk][.] */
  unsigned char *raw = malloc((nq + no + slot_k + slot_v) * es);
  if (!q || !o || !k || !v || !raw) abort();
  attn_fill_random(q, nq, 21), attn_fill_random(k, (size_t)B * n_kv * slot_k, 22);
  attn_fill_random(v, (size_t)B * n_kv * slot_v, 23);
  attn_round_dtype(p.dtype, q, nq), attn_round_dtype(p.dtype, k, (size_t)B * n_kv * slot_k);
  attn_round_dtype(p.dtype, v, (size_t)B * n_kv * slot_v);
  for (int b = 0; opt_nan && b < B; b++) /* NaN in V at two keys of each sequence (KV head 0, column 0) */
    if (LK[b] >= 2) {
      v[((size_t)b * n_kv + nan_key(n, LK[b])) * slot_v] = NAN;
      if (s->causal) v[((size_t)b * n_kv + LK[b] - 1) * slot_v] = NAN;
    }
  to_raw(p.dtype, q, nq, raw);
  const uint64_t dq = put(&e, raw, nq * es, "q");
  memset(raw, 0xff, no * es);
  const uint64_t dout = put(&e, raw, no * es, "o");
  /* the pages: only the slots of the sequences' keys are written (the rest stays undefined: a read is an error) */
  const uint64_t dkp = put(&e, NULL, (size_t)num_pages * ps * slot_k * es, "k_pages");
  const uint64_t dvp = put(&e, NULL, (size_t)num_pages * ps * slot_v * es, "v_pages");
  int ok = dq && dout && dkp && dvp;
  for (int b = 0; b < B && ok; b++)
    for (int t = 0; t < LK[b] && ok; t++) {
      const size_t slot = (size_t)table[b * max_pages + t / ps] * ps + t % ps;
      to_raw(p.dtype, k + ((size_t)b * n_kv + t) * slot_k, slot_k, raw);
      ok &= ptx_copy_in(e.x, dkp + slot * slot_k * es, raw, slot_k * es) == 0;
      to_raw(p.dtype, v + ((size_t)b * n_kv + t) * slot_v, slot_v, raw);
      ok &= ptx_copy_in(e.x, dvp + slot * slot_v * es, raw, slot_v * es) == 0;
    }
  const uint64_t dtab = ok ? put(&e, table, sizeof(int) * B * max_pages, "block_table") : 0;
  const uint64_t dlen = ok ? put(&e, LK, sizeof LK, "seq_kv") : 0;
  if (ok && dtab && dlen) {
    e.a.q = (const void *)(uintptr_t)dq, e.a.k = (const void *)(uintptr_t)dkp, e.a.v = (const void *)(uintptr_t)dvp;
    e.a.o = (void *)(uintptr_t)dout;
    e.a.block_table = (const int *)(uintptr_t)dtab, e.a.seq_kv = (const int *)(uintptr_t)dlen;
    e.a.max_pages = max_pages, e.a.page_size = ps;
    if (launch(&e, s, what) == 0 && get_o(&e, dout, p.dtype, no, o, what) == 0) {
      int bad = 0;
      float *sk = malloc(HK * n_kv * p.d * 4), *sv = malloc(HK * n_kv * p.d_v * 4);
      if (!sk || !sv) abort();
      for (int b = 0; b < B; b++) {
        const int lk = LK[b];
        for (int t = 0; t < lk; t++)
          for (size_t h = 0; h < HK; h++) {
            memcpy(sk + (h * lk + t) * p.d, k + ((size_t)b * n_kv + t) * slot_k + h * p.d, 4 * p.d);
            memcpy(sv + (h * lk + t) * p.d_v, v + ((size_t)b * n_kv + t) * slot_v + h * p.d_v, 4 * p.d_v);
          }
        char w[600];
        snprintf(w, sizeof w, "%s | sequence %d", what, b);
        bad |= check_sequence(&p, n, lk, q + (size_t)b * H * n * p.d, sk, sv, o + (size_t)b * H * n * p.d_v, w);
      }
      free(sk), free(sv);
      /* packed decode reads each used slot of K once per KV head (G <= Br: one row block a KV head) */
      ptx_buffer_stats ks;
      long long want = 0;
      for (int b = 0; b < B; b++) want += (long long)LK[b] * (long long)slot_k * (long long)es;
      if (s->layout == 3 && !opt_window && p.heads / p.heads_kv <= s->br && ptx_buffer_stats_of(e.x, dkp, &ks) == 0 &&
          (long long)ks.read_bytes != want) {
        FAIL("%s: %llu bytes of K pages read, want %lld (each key once per KV head)", what,
             (unsigned long long)ks.read_bytes, want);
        bad = 1;
      }
      cases++;
      if (!bad) printf("ok %s\n", what);
    }
  } else if (ok) {
    FAIL("%s: cannot copy the pages in", what);
  }
  free(perm), free(table), free(q), free(o), free(k), free(v), free(raw);
  ptx_machine_free(e.x);
}

/* ---- spec from the arguments ---- */

static int parse_args(attn_dtype t, int argc, char **argv, attn_spec *s) {
  int d = 64, dv = 0, causal = 0;
  for (int i = 0; i < argc; i++) {
    if (sscanf(argv[i], "d=%d", &d) == 1 || sscanf(argv[i], "dv=%d", &dv) == 1 ||
        sscanf(argv[i], "causal=%d", &causal) == 1)
      continue;
  }
  *s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, t, d, causal);
  s->dv = dv == d ? 0 : dv;
  char err[512];
  if (attn_spec_fit(s, err, sizeof err) != ATTN_OK) {
    FAIL("attn_spec_fit: %s", err);
    return -1;
  }
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    float f;
    int x, y;
    if (!strncmp(a, "d=", 2) || !strncmp(a, "dv=", 3) || !strncmp(a, "causal=", 7)) continue;
    if (sscanf(a, "br=%d", &x) == 1) s->br = x;
    else if (sscanf(a, "bc=%d", &x) == 1) s->bc = x;
    else if (sscanf(a, "warps=%d", &x) == 1) s->warps = x;
    else if (sscanf(a, "stages=%d", &x) == 1) s->stages = x;
    else if (!strncmp(a, "arch=", 5)) snprintf(s->arch, sizeof s->arch, "%s", a + 5);
    else if (sscanf(a, "window=%d", &x) == 1) opt_window = x, s->window = x > 0;
    else if (sscanf(a, "softcap=%f", &f) == 1) opt_softcap = f, s->softcap = f > 0;
    else if (sscanf(a, "alibi=%d", &x) == 1) opt_alibi = x, s->alibi = x != 0;
    else if (sscanf(a, "scale=%f", &f) == 1) opt_scale = f;
    else if (sscanf(a, "heads=%d/%d", &x, &y) == 2) opt_heads = x, opt_heads_kv = y;
    else if (sscanf(a, "n=%d", &x) == 1) opt_n = x;
    else if (sscanf(a, "n_kv=%d", &x) == 1) opt_nkv = x;
    else if (sscanf(a, "pack=%d", &x) == 1) opt_pack = x;
    else if (sscanf(a, "order=%d", &x) == 1) opt_order = (unsigned)x;
    else if (sscanf(a, "nan=%d", &x) == 1) opt_nan = x;
    else if (!strncmp(a, "page=", 5)) {
      npages = 0;
      for (char *p = (char *)a + 5; *p && npages < 8; p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p))
        pages[npages++] = atoi(p);
    } else {
      FAIL("unknown argument '%s'", a);
      return -1;
    }
  }
  /* paged decode with grouped-query heads: the packed kernel, as the runtime picks it */
  s->layout = layout == 2 && opt_n == 1 && opt_heads > opt_heads_kv ? 3 : layout;
  if (attn_spec_check(s, err, sizeof err) != ATTN_OK) {
    FAIL("spec: %s", err);
    return -1;
  }
  return 0;
}

static int emu_mode(attn_dtype t, int argc, char **argv) {
  attn_spec s;
  npages = 2;
  if (parse_args(t, argc, argv, &s)) return 1;
  char label[400];
  attn_spec_summary(&s, label, sizeof label);
  ptx_module *m = build_ptx(&s, label);
  if (!m) return no_nvrtc ? 77 : 1;
  float slopes[64];
  for (int h = 0; h < 64; h++) slopes[h] = (h % 4 == 2 ? -0.03125f : 1.0f) * ldexpf(1.0f, -(h % 4) - 1);
  if (s.layout == 1) run_varlen(m, &s, label, slopes);
  else
    for (int i = 0; i < npages; i++) run_paged(m, &s, label, slopes, pages[i]);
  ptx_module_free(m);
  if (!cases) FAIL("no case ran");
  if (opt_nan && !nan_seen) FAIL("nan=1, but no output of the reference is NaN");
  printf("%s: %d cases, %d failures\n", failures ? "FAILED" : "PASSED", cases, failures);
  return failures ? 1 : 0;
}

/* ---- traffic: paged decode against dense decode ---- */

/* One kernel's global traffic in bytes (32-byte sectors per warp instruction, every buffer of the launch): reads,
 * of them the block table's and lengths', and writes. */
typedef struct {
  unsigned long long rd, meta, wr;
} traffic;

static void add_stats(emu *e, uint64_t d, traffic *t, int meta) {
  ptx_buffer_stats bs;
  if (!d || ptx_buffer_stats_of(e->x, d, &bs)) return;
  t->rd += bs.read_sectors * 32, t->wr += bs.write_sectors * 32;
  if (meta) t->meta += bs.read_sectors * 32;
}

/* Grouped-query decode of B sequences of n_kv keys each on spec s: q [B][H][1][d], k, v [B][HK][n_kv][d | d_v]
 * (fp32 values of the dtype), o [B][H][1][d_v] back; dense (layout 0: the query heads of a KV head as its n = G
 * rows, the packing the paged kernel does: a block a KV head), or paged (pages of ps slots in shuffled order,
 * layout 3 packed, or layout 2: a block a query head, as a runtime without packing would launch it). 0, or -1 with
 * a failure reported. */
static int decode_traffic(const ptx_module *m, const attn_spec *s, int B, int n_kv, int ps, const float *q,
                          const float *k, const float *v, float *o, traffic *t, const char *what) {
  const int H = opt_heads, HK = opt_heads_kv, G = H / HK, d = s->d, dv = attn_spec_dv(s);
  const size_t es = es_of(s->dtype), nq = (size_t)B * H * d, no = (size_t)B * H * dv;
  const size_t nk = (size_t)B * HK * n_kv * d, nv = (size_t)B * HK * n_kv * dv;
  const int rows = s->layout == 2 ? 1 : G, items = s->layout == 2 ? H : HK; /* a block's rows; blocks a sequence */
  emu e;
  memset(&e, 0, sizeof e);
  memset(t, 0, sizeof *t);
  char err[512];
  if (attn_cuda_geometry(s, (long long)B * items, rows, n_kv, 0, &e.g, err, sizeof err)) {
    FAIL("%s: geometry: %s", what, err);
    return -1;
  }
  if (!(e.x = ptx_machine_new(m, err, sizeof err))) {
    FAIL("%s: %s", what, err);
    return -1;
  }
  attn_cuda_kargs *a = &e.a;
  a->batch = B, a->heads = items, a->heads_kv = HK, a->n = rows, a->n_kv = n_kv;
  a->scale = 1.0f / sqrtf((float)d), a->grid_items = (int)e.g.items;
  unsigned char *raw = malloc((nq + no + nk + nv) * es + 1);
  int *table = NULL, *perm = NULL, rc = -1;
  if (!raw) abort();
  to_raw(s->dtype, q, nq, raw);
  const uint64_t dq = put(&e, raw, nq * es, "q");
  memset(raw, 0xff, no * es);
  const uint64_t dout = put(&e, raw, no * es, "o");
  uint64_t dk = 0, dvv = 0, dtab = 0, dlen = 0;
  if (s->layout == 0) {
    to_raw(s->dtype, k, nk, raw);
    dk = put(&e, raw, nk * es, "k");
    to_raw(s->dtype, v, nv, raw);
    dvv = put(&e, raw, nv * es, "v");
  } else { /* pages [num_pages][ps][HK][d | d_v]: the sequences' pages a shuffle of the cache, two spare */
    const int per = (n_kv + ps - 1) / ps, max_pages = per + 1, num_pages = B * per + 2;
    table = malloc(sizeof(int) * B * max_pages), perm = malloc(sizeof(int) * num_pages);
    if (!table || !perm) abort();
    for (int i = 0; i < num_pages; i++) perm[i] = i;
    for (int i = num_pages - 1; i > 0; i--) {
      const int j = (int)(next() % (unsigned)(i + 1)), x = perm[i];
      perm[i] = perm[j], perm[j] = x;
    }
    for (int b = 0; b < B; b++)
      for (int i = 0; i < max_pages; i++) table[b * max_pages + i] = i < per ? perm[b * per + i] : 1 << 30;
    dk = put(&e, NULL, (size_t)num_pages * ps * HK * d * es, "k_pages");
    dvv = put(&e, NULL, (size_t)num_pages * ps * HK * dv * es, "v_pages");
    int ok = dk && dvv;
    for (int b = 0; b < B && ok; b++)
      for (int j = 0; j < n_kv && ok; j++)
        for (int h = 0; h < HK && ok; h++) {
          const size_t slot = (size_t)table[b * max_pages + j / ps] * ps + j % ps;
          const size_t src = ((size_t)(b * HK + h) * n_kv + j);
          to_raw(s->dtype, k + src * d, (size_t)d, raw);
          ok &= ptx_copy_in(e.x, dk + ((slot * HK + h) * d) * es, raw, (size_t)d * es) == 0;
          to_raw(s->dtype, v + src * dv, (size_t)dv, raw);
          ok &= ptx_copy_in(e.x, dvv + ((slot * HK + h) * dv) * es, raw, (size_t)dv * es) == 0;
        }
    int *lens = malloc(sizeof(int) * B);
    if (!lens) abort();
    for (int b = 0; b < B; b++) lens[b] = n_kv;
    dtab = ok ? put(&e, table, sizeof(int) * B * max_pages, "block_table") : 0;
    dlen = ok ? put(&e, lens, sizeof(int) * B, "seq_kv") : 0;
    free(lens);
    if (!ok) FAIL("%s: cannot copy the pages in", what);
    a->block_table = (const int *)(uintptr_t)dtab, a->seq_kv = (const int *)(uintptr_t)dlen;
    a->max_pages = max_pages, a->page_size = ps;
  }
  if (dq && dout && dk && dvv && (s->layout == 0 || (dtab && dlen))) {
    a->q = (const void *)(uintptr_t)dq, a->k = (const void *)(uintptr_t)dk, a->v = (const void *)(uintptr_t)dvv;
    a->o = (void *)(uintptr_t)dout;
    if (launch(&e, s, what) == 0 && get_o(&e, dout, s->dtype, no, o, what) == 0) {
      add_stats(&e, dq, t, 0), add_stats(&e, dk, t, 0), add_stats(&e, dvv, t, 0), add_stats(&e, dout, t, 0);
      add_stats(&e, dtab, t, 1), add_stats(&e, dlen, t, 1);
      rc = 0;
    }
  }
  free(raw), free(table), free(perm);
  ptx_machine_free(e.x);
  return rc;
}

/* traffic DTYPE d=D page=P[,P...] [n_kv=N] [pack=0]: paged decode (B = 2 sequences of n_kv keys, H/HK heads) reads
 * within 10% of the bytes the dense decode kernel reads on the same data (3% with pages of 8 keys or more), and
 * both within TRAFFIC_FACTOR of the compulsory bytes (each key's K and V row once per KV head, Q once; O written
 * once); both outputs against fp64. pack=0 runs the paged kernel a block a query head (layout 2), which reads each
 * page G times: it must fail. */
#define TRAFFIC_FACTOR 1.10
static int traffic_mode(attn_dtype dt, int argc, char **argv) {
  attn_spec s;
  npages = 2;
  opt_heads = 8, opt_heads_kv = 2, opt_n = 1;
  if (parse_args(dt, argc, argv, &s)) return 1;
  if (!opt_pack) s.layout = 2;
  attn_spec sd = s;
  sd.layout = 0;
  char label[400], dlabel[400];
  attn_spec_summary(&s, label, sizeof label);
  attn_spec_summary(&sd, dlabel, sizeof dlabel);
  ptx_module *mp = build_ptx(&s, label), *md = mp ? build_ptx(&sd, dlabel) : NULL;
  if (!mp || !md) {
    ptx_module_free(mp);
    return no_nvrtc ? 77 : 1;
  }
  const int B = 2, H = opt_heads, HK = opt_heads_kv, n_kv = opt_nkv, d = s.d, dv = attn_spec_dv(&s);
  const size_t nq = (size_t)B * H * d, no = (size_t)B * H * dv;
  const size_t nk = (size_t)B * HK * n_kv * d, nv = (size_t)B * HK * n_kv * dv;
  float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nv * 4), *o = malloc(no * 4);
  if (!q || !k || !v || !o) abort();
  attn_fill_random(q, nq, 31), attn_fill_random(k, nk, 32), attn_fill_random(v, nv, 33);
  attn_round_dtype(dt, q, nq), attn_round_dtype(dt, k, nk), attn_round_dtype(dt, v, nv);
  attn_problem p;
  memset(&p, 0, sizeof p);
  p.batch = 1, p.heads = H, p.heads_kv = HK, p.n = 1, p.n_kv = n_kv, p.d = d, p.d_v = dv, p.dtype = dt;
  p.scale = 1.0f / sqrtf((float)d);
  const double es = (double)es_of(dt);
  const double need_r = es * ((double)B * HK * n_kv * (d + dv) + (double)B * H * d), need_w = es * (double)no;
  /* the outputs against fp64, sequence by sequence */
#define TRAFFIC_CHECK(what)                                                                                       \
  for (int b = 0; b < B; b++)                                                                                     \
    if (check_sequence(&p, 1, n_kv, q + (size_t)b * H * d, k + (size_t)b * HK * n_kv * d,                         \
                       v + (size_t)b * HK * n_kv * dv, o + (size_t)b * H * dv, what))                             \
      break;
  char what[600];
  snprintf(what, sizeof what, "%s | dense decode batch=%d heads=%d/%d n_kv=%d", dlabel, B, H, HK, n_kv);
  traffic td, tp;
  int ok = decode_traffic(md, &sd, B, n_kv, 0, q, k, v, o, &td, what) == 0;
  if (ok) {
    const int f0 = failures;
    TRAFFIC_CHECK(what);
    ok = failures == f0;
  }
  if (ok) {
    printf("dense decode %s d=%d heads=%d/%d n_kv=%d: read %llu bytes (%.3fx compulsory %.0f), wrote %llu (%.3fx)\n",
           attn_dtype_name(dt), d, H, HK, n_kv, td.rd, td.rd / need_r, need_r, td.wr, td.wr / need_w);
    if (td.rd > TRAFFIC_FACTOR * need_r || td.wr > TRAFFIC_FACTOR * need_w)
      FAIL("%s: %llu bytes read, %llu written: more than %.2fx the compulsory %.0f, %.0f", what, td.rd, td.wr,
           TRAFFIC_FACTOR, need_r, need_w);
  }
  for (int i = 0; ok && i < npages; i++) {
    const int f0 = failures;
    snprintf(what, sizeof what, "%s | paged decode page_size=%d batch=%d heads=%d/%d n_kv=%d", label, pages[i], B, H,
             HK, n_kv);
    if (decode_traffic(mp, &s, B, n_kv, pages[i], q, k, v, o, &tp, what)) continue;
    TRAFFIC_CHECK(what);
    cases++;
    if (failures != f0) continue;
    /* the 10%; and 3% for pages of 8 keys or more, whose block table the kernel reads once a warp for each
     * copy of a key block in a sector or two (f16 d = 64: 1.6% measured with pages of 16, 64 or 256, 2.5% with 8,
     * 5.5% with 3, 8% with 1, whose 64 pages a block take the table per copy; 6.4% with the table read by every
     * copy instruction) */
    const double ratio = (double)tp.rd / (double)td.rd;
    const double most = pages[i] >= 8 ? 1.03 : 1.10;
    printf("paged decode %s d=%d page=%d%s: read %llu bytes (block table %llu; %.3fx compulsory), wrote %llu: "
           "paged/dense reads %.4f\n", attn_dtype_name(dt), d, pages[i], opt_pack ? "" : " unpacked", tp.rd, tp.meta,
           tp.rd / need_r, tp.wr, ratio);
    if (ratio > most || tp.wr > td.wr)
      FAIL("%s: paged/dense reads %.3f (%llu / %llu bytes; the table and lengths %llu), writes %llu / %llu: paged "
           "decode must read at most %.2fx what dense decode reads", what, ratio, tp.rd, td.rd, tp.meta, tp.wr, td.wr,
           most);
    else if (tp.rd > TRAFFIC_FACTOR * need_r)
      FAIL("%s: %llu bytes read, more than %.2fx the compulsory %.0f", what, tp.rd, TRAFFIC_FACTOR, need_r);
    else
      printf("ok %s\n", what);
  }
#undef TRAFFIC_CHECK
  free(q), free(k), free(v), free(o);
  ptx_module_free(mp), ptx_module_free(md);
  if (!cases) FAIL("no case ran");
  printf("%s: %d cases, %d failures\n", failures ? "FAILED" : "PASSED", cases, failures);
  return failures ? 1 : 0;
}

/* ---- NVRTC: cubins without spills ---- */

static int compile_mode(const char *arch) {
  static const struct {
    attn_dtype t;
    int d, dv, causal, mods;
  } C[] = {{ATTN_F16, 64, 0, 1, 0},  {ATTN_BF16, 128, 0, 0, 1}, {ATTN_F16, 59, 37, 1, 1},
           {ATTN_F32, 64, 0, 1, 1},  {ATTN_BF16, 576, 512, 1, 0}, {ATTN_F32, 37, 77, 0, 0}};
  for (size_t i = 0; i < sizeof C / sizeof C[0]; i++)
    for (int lay = 1; lay <= 3; lay++) {
      attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, C[i].t, C[i].d, C[i].causal);
      s.dv = C[i].dv;
      char err[512], label[400];
      if (attn_spec_fit(&s, err, sizeof err) != ATTN_OK) {
        FAIL("attn_spec_fit: %s", err);
        continue;
      }
      snprintf(s.arch, sizeof s.arch, "%s", arch);
      s.window = s.softcap = s.alibi = C[i].mods;
      s.layout = lay;
      attn_spec_summary(&s, label, sizeof label);
      char *src = attn_spec_source(&s, 0, err, sizeof err);
      void *cubin = NULL;
      size_t len = 0;
      char *log = NULL;
      const int rc = src ? attn_nvrtc_compile(src, "attn.cu", arch, &cubin, &len, &log) : ATTN_EINVAL;
      attn_cuda_resources r = {0};
      if (rc == ATTN_ENODEV) {
        printf("SKIP: %s\n", log ? log : "no NVRTC");
        free(src), free(log);
        return 77;
      } else if (rc != ATTN_OK) {
        FAIL("%s: does not compile: %s", label, log ? log : err);
      } else if (attn_nvrtc_resources(log, "attn_kernel", &r) != 0) {
        FAIL("%s: no ptxas report in the log", label);
      } else if (r.spill_stores || r.spill_loads || r.stack) {
        FAIL("%s: %ld bytes of spill stores, %ld of loads, %ld of stack", label, r.spill_stores, r.spill_loads,
             r.stack);
      } else {
        printf("ok %s: %d registers, no spill\n", label, r.registers);
        cases++;
      }
      free(src), free(cubin), free(log);
    }
  if (!cases && !failures) FAIL("no case ran");
  printf("%s: %d cubins, %d failures\n", failures ? "FAILED" : "PASSED", cases, failures);
  return failures ? 1 : 0;
}

/* ---- the API on the fake driver ---- */

#define CHECK(cond, ...)        \
  do {                          \
    if (!(cond)) FAIL(__VA_ARGS__); \
  } while (0)

/* rc must be ATTN_EINVAL (or want) with one line naming `word`, nothing launched, o untouched */
static void refused(attn_runtime *rt, int rc, int want, const char *word, const unsigned char *o, size_t obytes,
                    fake_cuda_record_fn rec, const char *what) {
  fake_cuda_calls c;
  rec(&c, 1);
  const char *e = attn_last_error(rt);
  size_t untouched = 0;
  while (untouched < obytes && o[untouched] == 0xab) untouched++;
  CHECK(rc == want && strstr(e, word) && !strchr(e, '\n') && c.launches == 0 && untouched == obytes,
        "%s: %s (want %s), '%s' (want one line with '%s'), %d launches, o %s", what, attn_strerror(rc),
        attn_strerror(want), e, word, c.launches, untouched == obytes ? "untouched" : "written");
  if (rc == want) cases++;
}

/* The fake driver's stream synchronization, as an application would wait for its stream. */
static void fake_sync(void *stream) {
  void *h = dlopen(getenv("ATTN_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
  int (*sync)(void *) = h ? (int (*)(void *))dlsym(h, "cuStreamSynchronize") : NULL;
  if (!sync || sync(stream) != 0) FAIL("the fake driver's cuStreamSynchronize");
}

#define FAKE_STREAM ((void *)(uintptr_t)0x5ee0)

/* log must be exactly the calls want (printf's format of "name@stream " tokens, the stream each a %p) */
static int log_is(const fake_cuda_calls *c, const char *want) { return strcmp(c->log, want) == 0; }

/* attn_execute_varlen_async on the fake driver: the arrays checked before anything is queued; then copy, launch and
 * event on the caller's stream and no wait; the caller's arrays read before the call returns (the fake's copies
 * read their source when the stream gets there: a runtime that queued a copy of the caller's array would hand the
 * kernel what the caller wrote afterwards); calls in flight at once get a staging block each; the synchronous call
 * allocates nothing once the blocks exist and gives the kernel what the async one gives it. */
static void async_varlen(attn_runtime *rt, attn_plan *plan, fake_cuda_record_fn rec, const unsigned char *q,
                         const unsigned char *k, const unsigned char *v, unsigned char *o) {
  fake_cuda_calls c;
  char want[512];
  const int good_q[3] = {0, 9, 12}, good_kv[3] = {0, 20, 25};
  int cu_q[3], cu_kv[3];
  memcpy(cu_q, good_q, sizeof cu_q), memcpy(cu_kv, good_kv, sizeof cu_kv);
  const int dec[3] = {0, 9, 8};
  rec(&c, 1);
  int rc = attn_execute_varlen_async(plan, FAKE_STREAM, dec, cu_kv, q, k, v, o);
  rec(&c, 1);
  CHECK(rc == ATTN_EINVAL && strstr(attn_last_error(rt), "attn_execute_varlen_async:") && strstr(attn_last_error(rt),
        "decreases") && c.log[0] == '\0', "async varlen, decreasing cu_seqlens_q: %s '%s', calls '%s' (want "
        "EINVAL and none)", attn_strerror(rc), attn_last_error(rt), c.log);
  cases++;
  /* the sync call before made the plan's first block and waited: it is reused, nothing allocated */
  rc = attn_execute_varlen_async(plan, FAKE_STREAM, cu_q, cu_kv, q, k, v, o);
  cu_q[1] = 5, cu_kv[1] = 7; /* the caller's arrays reused at once */
  rec(&c, 0);
  snprintf(want, sizeof want, "copy@%p launch@%p record@%p ", FAKE_STREAM, FAKE_STREAM, FAKE_STREAM);
  CHECK(rc == ATTN_OK && log_is(&c, want) && c.stream_syncs == 0 && c.ctx_syncs == 0 && c.event_syncs == 0 &&
            c.pending == 1 && c.ran == 0,
        "async varlen: %s (%s), calls '%s' (want '%s'), %d stream / %d context / %d event waits, %d pending, %d run",
        attn_strerror(rc), attn_last_error(rt), c.log, want, c.stream_syncs, c.ctx_syncs, c.event_syncs, c.pending,
        c.ran);
  fake_sync(FAKE_STREAM);
  rec(&c, 1);
  CHECK(c.ran == 1 && !memcmp(c.ran_tables[0].cu_q, good_q, sizeof good_q) &&
            !memcmp(c.ran_tables[0].cu_kv, good_kv, sizeof good_kv),
        "async varlen: the kernel read cu_seqlens_q {%d, %d, %d}, cu_seqlens_kv {%d, %d, %d} (want the arrays as "
        "they were at the call: {0, 9, 12}, {0, 20, 25})", c.ran_tables[0].cu_q[0], c.ran_tables[0].cu_q[1],
        c.ran_tables[0].cu_q[2], c.ran_tables[0].cu_kv[0], c.ran_tables[0].cu_kv[1], c.ran_tables[0].cu_kv[2]);
  cases++;
  /* nine calls in flight on the stream, each with its own lengths: eight staging blocks, the ninth call waits for
   * the oldest; every launch reads its own call's arrays */
  int lens[9][2][3];
  rc = ATTN_OK;
  for (int i = 0; i < 9 && rc == ATTN_OK; i++) {
    const int a[3] = {0, 1 + i % 9, 9 + i % 4}, b[3] = {0, 20 - i, 25 - i};
    memcpy(lens[i][0], a, sizeof a), memcpy(lens[i][1], b, sizeof b);
    memcpy(cu_q, a, sizeof a), memcpy(cu_kv, b, sizeof b);
    rc = attn_execute_varlen_async(plan, FAKE_STREAM, cu_q, cu_kv, q, k, v, o);
    memset(cu_q, 0x7f, sizeof cu_q), memset(cu_kv, 0x7f, sizeof cu_kv);
  }
  rec(&c, 0);
  const int allocs = c.host_allocs, waits = c.event_syncs, syncs = c.stream_syncs + c.ctx_syncs, ran_early = c.ran;
  fake_sync(FAKE_STREAM);
  rec(&c, 1);
  int same = c.ran == 9;
  for (int i = 0; i < 9 && same; i++)
    same = !memcmp(c.ran_tables[i].cu_q, lens[i][0], sizeof lens[i][0]) &&
           !memcmp(c.ran_tables[i].cu_kv, lens[i][1], sizeof lens[i][1]);
  CHECK(rc == ATTN_OK && allocs == 7 && waits == 1 && ran_early == 1 && syncs == 0 && same,
        "nine async varlen calls in flight: %s (%s), %d pinned allocations (want 7 more blocks), %d event waits "
        "(want 1: the ninth call for the oldest block, whose launch then ran: %d), %d stream or context waits (want "
        "0), every launch read its own call's arrays: %s", attn_strerror(rc), attn_last_error(rt), allocs, waits,
        ran_early, syncs, same ? "yes" : "no");
  cases++;
  /* the synchronous call: the async one on the default stream, waited for; no allocation, and the kernel gets what
   * the async call gave it */
  memcpy(cu_q, good_q, sizeof cu_q), memcpy(cu_kv, good_kv, sizeof cu_kv);
  rc = attn_execute_varlen_async(plan, FAKE_STREAM, cu_q, cu_kv, q, k, v, o);
  fake_sync(FAKE_STREAM);
  rec(&c, 1);
  const unsigned grid = c.last_grid;
  const long long heads = c.last_heads, n = c.last_n;
  int rc2 = attn_execute_varlen(plan, cu_q, cu_kv, q, k, v, o);
  rec(&c, 1);
  snprintf(want, sizeof want, "copy@%p launch@%p record@%p sync@%p ", (void *)0, (void *)0, (void *)0, (void *)0);
  CHECK(rc == ATTN_OK && rc2 == ATTN_OK && log_is(&c, want) && c.ran == 1 && c.last_grid == grid &&
            c.last_heads == heads && c.last_n == n && !memcmp(c.ran_tables[0].cu_q, good_q, sizeof good_q) &&
            !memcmp(c.ran_tables[0].cu_kv, good_kv, sizeof good_kv),
        "sync varlen after async: %s, %s (%s), calls '%s' (want '%s'), grid %u heads %lld n %lld (async: %u %lld "
        "%lld)", attn_strerror(rc), attn_strerror(rc2), attn_last_error(rt), c.log, want, c.last_grid, c.last_heads,
        c.last_n, grid, heads, n);
  cases++;
}

/* attn_execute_paged_async on the fake driver: the table and lengths checked first, then queued on the stream with
 * no wait, read before the call returns; the kernel gets what the synchronous call gives it. */
static void async_paged(attn_runtime *rt, attn_plan *plan, fake_cuda_record_fn rec, const unsigned char *q,
                        const unsigned char *k, const unsigned char *v, unsigned char *o) {
  fake_cuda_calls c;
  char want[512];
  const int good_table[6] = {5, 4, 3, 2, 1, 0}, good_lens[2] = {17, 3};
  int table[6], lens[2];
  memcpy(table, good_table, sizeof table), memcpy(lens, good_lens, sizeof lens);
  const int bad_table[6] = {0, 1, 6, 3, 4, 5};
  rec(&c, 1);
  int rc = attn_execute_paged_async(plan, FAKE_STREAM, q, k, v, 6, 8, bad_table, 3, lens, o);
  rec(&c, 1);
  CHECK(rc == ATTN_EINVAL && strstr(attn_last_error(rt), "attn_execute_paged_async: sequence 0's page 2 is 6, "
        "outside the cache") && c.log[0] == '\0',
        "async paged, page index 6 of 6: %s '%s', calls '%s' (want EINVAL and none)", attn_strerror(rc),
        attn_last_error(rt), c.log);
  cases++;
  rc = attn_execute_paged_async(plan, FAKE_STREAM, q, k, v, 6, 8, table, 3, lens, o);
  memset(table, 0x7f, sizeof table), memset(lens, 0x7f, sizeof lens);
  rec(&c, 0);
  snprintf(want, sizeof want, "copy@%p launch@%p record@%p ", FAKE_STREAM, FAKE_STREAM, FAKE_STREAM);
  const int logged = log_is(&c, want), waits = c.stream_syncs + c.ctx_syncs + c.event_syncs;
  const unsigned grid = c.last_grid;
  fake_sync(FAKE_STREAM);
  rec(&c, 1);
  CHECK(rc == ATTN_OK && logged && waits == 0 && c.ran == 1 && c.ran_tables[0].batch == 2 &&
            !memcmp(c.ran_tables[0].table, good_table, sizeof good_table) &&
            !memcmp(c.ran_tables[0].seq_kv, good_lens, sizeof good_lens),
        "async paged: %s (%s), calls as wanted: %s, %d waits, the kernel read the call's table and lengths: %s",
        attn_strerror(rc), attn_last_error(rt), logged ? "yes" : "no", waits,
        c.ran == 1 && !memcmp(c.ran_tables[0].table, good_table, sizeof good_table) ? "yes" : "no");
  cases++;
  memcpy(table, good_table, sizeof table), memcpy(lens, good_lens, sizeof lens);
  rc = attn_execute_paged(plan, q, k, v, 6, 8, table, 3, lens, o);
  rec(&c, 1);
  CHECK(rc == ATTN_OK && c.ran == 1 && c.last_grid == grid && c.host_allocs == 0 &&
            !memcmp(c.ran_tables[0].table, good_table, sizeof good_table) &&
            !memcmp(c.ran_tables[0].seq_kv, good_lens, sizeof good_lens),
        "sync paged after async: %s (%s), grid %u (async %u), %d pinned allocations (want 0)", attn_strerror(rc),
        attn_last_error(rt), c.last_grid, grid, c.host_allocs);
  cases++;
}

/* Four threads queue eight varlen calls each on a stream of their own, on one plan, overwriting their arrays after
 * each call: 32 calls in flight over the plan's eight staging blocks. When the streams run, every call's tables are
 * read by exactly one launch (a block taken again before its launch ran would hand two launches the later call's
 * tables and none the earlier's). */
enum { MT_THREADS = 4, MT_CALLS = 8 };
typedef struct mt_arg {
  attn_plan *plan;
  const unsigned char *q, *k, *v;
  unsigned char *o;
  int t, rc;
} mt_arg;

static void mt_lens(int id, int *cu_q, int *cu_kv) {
  cu_q[0] = cu_kv[0] = 0;
  cu_q[1] = 1 + id % 9, cu_q[2] = cu_q[1] + id % 4;
  cu_kv[1] = 20 - id % 20, cu_kv[2] = cu_kv[1] + 5;
}

static void *mt_run(void *p) {
  mt_arg *a = p;
  void *const stream = (void *)(uintptr_t)(0x1000 * (a->t + 1));
  for (int j = 0; j < MT_CALLS && a->rc == ATTN_OK; j++) {
    int cu_q[3], cu_kv[3];
    mt_lens(a->t * MT_CALLS + j, cu_q, cu_kv);
    a->rc = attn_execute_varlen_async(a->plan, stream, cu_q, cu_kv, a->q, a->k, a->v, a->o);
    memset(cu_q, 0x7f, sizeof cu_q), memset(cu_kv, 0x7f, sizeof cu_kv);
  }
  return NULL;
}

static void async_threads(attn_plan *plan, fake_cuda_record_fn rec, const unsigned char *q, const unsigned char *k,
                          const unsigned char *v, unsigned char *o) {
  fake_cuda_calls c;
  rec(&c, 1);
  mt_arg args[MT_THREADS];
  pthread_t th[MT_THREADS];
  int started = 0, rc = ATTN_OK;
  for (int t = 0; t < MT_THREADS; t++) {
    args[t] = (mt_arg){.plan = plan, .q = q, .k = k, .v = v, .o = o, .t = t, .rc = ATTN_OK};
    if (pthread_create(&th[t], NULL, mt_run, &args[t]) == 0) started++;
  }
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  for (int t = 0; t < MT_THREADS; t++)
    if (args[t].rc != ATTN_OK) rc = args[t].rc;
  fake_sync(NULL); /* the legacy default stream: every stream's work runs */
  rec(&c, 1);
  int seen[MT_THREADS * MT_CALLS] = {0}, stray = 0;
  for (int i = 0; i < c.ran && i < FAKE_RAN; i++) {
    int found = -1;
    for (int id = 0; id < MT_THREADS * MT_CALLS && found < 0; id++) {
      int cu_q[3], cu_kv[3];
      mt_lens(id, cu_q, cu_kv);
      if (!memcmp(c.ran_tables[i].cu_q, cu_q, sizeof cu_q) && !memcmp(c.ran_tables[i].cu_kv, cu_kv, sizeof cu_kv))
        found = id;
    }
    if (found < 0) stray++;
    else seen[found]++;
  }
  int once = 0;
  for (int id = 0; id < MT_THREADS * MT_CALLS; id++) once += seen[id] == 1;
  CHECK(started == MT_THREADS && rc == ATTN_OK && c.ran == MT_THREADS * MT_CALLS && once == MT_THREADS * MT_CALLS &&
            stray == 0 && c.stream_syncs == 1 && c.ctx_syncs == 0,
        "%d threads x %d async varlen calls on streams of their own: %s, %d launches run, %d calls' tables read "
        "once (want %d), %d launches read tables no call gave, %d stream and %d context waits (want the test's 1, 0)",
        started, MT_CALLS, attn_strerror(rc), c.ran, once, MT_THREADS * MT_CALLS, stray, c.stream_syncs,
        c.ctx_syncs);
  cases++;
}

/* The runtime's own launches run on the PTX interpreter: the fake driver's hook (fake_cuda_set_hook) takes each launch
 * as its stream gets there, copies what its parameter block points at (q, k, v and the tables, in the fake's device
 * memory, which is host memory) into an interpreter machine, runs the layout's kernel with the launch's grid, block
 * and shared memory, and copies o back. So attn_execute_varlen and attn_execute_varlen_async are compared as they
 * run: the same bits, each within the fp64 limits, the async call's arrays overwritten before its stream runs. */
typedef struct run_hook {
  const ptx_module *m;
  size_t qb, kb, vb, ob; /* bytes of q, k, v (the pages) and o the batch uses */
  int batch, runs, fails;
} run_hook;

/* the tables a launch's parameter block points at: varlen's cu_seqlens, or paged's lengths and block table */
static int hook_tables(const attn_cuda_kargs *a, int batch, const void *src[2], size_t bytes[2]) {
  if (a->cu_q && a->cu_kv) {
    src[0] = a->cu_q, src[1] = a->cu_kv, bytes[0] = bytes[1] = sizeof(int) * ((size_t)batch + 1);
    return 1;
  }
  if (a->seq_kv && a->block_table) {
    src[0] = a->seq_kv, src[1] = a->block_table;
    bytes[0] = sizeof(int) * (size_t)batch, bytes[1] = sizeof(int) * (size_t)batch * (size_t)a->max_pages;
    return 2;
  }
  return 0;
}

static void on_launch(const void *params, unsigned grid, unsigned block, unsigned smem, void *user) {
  run_hook *h = user;
  attn_cuda_kargs a;
  memcpy(&a, params, sizeof a);
  const void *tab[2];
  size_t tb[2];
  const int kind = hook_tables(&a, h->batch, tab, tb);
  if (!kind) return; /* not a serving layout's launch */
  char err[1024];
  ptx_machine *x = ptx_machine_new(h->m, err, sizeof err);
  uint64_t d[6] = {0};
  const void *src[6] = {a.q, a.k, a.v, NULL, tab[0], tab[1]};
  const size_t bytes[6] = {h->qb, h->kb, h->vb, h->ob, tb[0], tb[1]};
  int ok = x != NULL;
  for (int i = 0; ok && i < 6; i++)
    ok = (d[i] = ptx_alloc(x, bytes[i], "arg")) != 0 && (!src[i] || ptx_copy_in(x, d[i], src[i], bytes[i]) == 0);
  unsigned char *o = a.o;
  a.q = (const void *)(uintptr_t)d[0], a.k = (const void *)(uintptr_t)d[1], a.v = (const void *)(uintptr_t)d[2];
  a.o = (void *)(uintptr_t)d[3];
  if (kind == 1) a.cu_q = (const int *)(uintptr_t)d[4], a.cu_kv = (const int *)(uintptr_t)d[5];
  else a.seq_kv = (const int *)(uintptr_t)d[4], a.block_table = (const int *)(uintptr_t)d[5];
  a.consts = NULL; /* the runtime's, in the fake's memory; the flash kernels do not read them */
  const ptx_launch_cfg kc = {.grid = grid, .block = block, .dyn_smem = smem, .order = opt_order};
  size_t undef = 0;
  ok = ok && ptx_launch(x, "attn_kernel", &kc, &a, sizeof a, err, sizeof err) == 0 &&
       ptx_copy_out(x, d[3], o, h->ob, &undef) == 0;
  if (!ok) printf("FAIL the runtime's launch on the interpreter: %s\n", x ? err : "no machine");
  h->fails += !ok;
  h->runs++;
  ptx_machine_free(x);
}

static void varlen_interpreted(attn_plan *plan, fake_cuda_record_fn rec, fake_cuda_set_hook_fn set_hook,
                               unsigned char *q, unsigned char *k, unsigned char *v, unsigned char *o, size_t obytes) {
  attn_spec s = plan->spec; /* the layout's kernel as cuda_serve.c builds it: the plan's tiles, layout 1 */
  s.layout = 1;
  char err[512], label[600];
  if (attn_spec_check(&s, err, sizeof err) != ATTN_OK) {
    FAIL("the plan's spec with layout 1: %s", err);
    return;
  }
  attn_spec_format(&s, label, sizeof label);
  ptx_module *m = build_ptx(&s, label);
  if (!m) return;
  const attn_problem *pp = &plan->p;
  const int cu_q[3] = {0, 9, 12}, cu_kv[3] = {0, 20, 25};
  const size_t H = (size_t)pp->heads, HK = (size_t)pp->heads_kv, es = es_of(pp->dtype);
  const size_t nq = 12 * H * pp->d, nk = 25 * HK * pp->d, nv = 25 * HK * pp->d_v, no = 12 * H * pp->d_v;
  float *x = malloc(sizeof(float) * (nq + nk + nv + 2 * no));
  unsigned char *o2 = malloc(no * es);
  if (!x || !o2 || no * es > obytes) abort();
  float *xq = x, *xk = xq + nq, *xv = xk + nk, *f1 = xv + nv, *f2 = f1 + no;
  attn_fill_random(xq, nq, 21), attn_fill_random(xk, nk, 22), attn_fill_random(xv, nv, 23);
  attn_round_dtype(pp->dtype, xq, nq), attn_round_dtype(pp->dtype, xk, nk), attn_round_dtype(pp->dtype, xv, nv);
  to_raw(pp->dtype, xq, nq, q), to_raw(pp->dtype, xk, nk, k), to_raw(pp->dtype, xv, nv, v);
  run_hook h = {.m = m, .qb = nq * es, .kb = nk * es, .vb = nv * es, .ob = no * es, .batch = pp->batch};
  set_hook(on_launch, &h);
  fake_cuda_calls c;
  rec(&c, 1);
  memset(o, 0xff, no * es);
  const int r1 = attn_execute_varlen(plan, cu_q, cu_kv, q, k, v, o);
  memcpy(o2, o, no * es);
  memset(o, 0xff, no * es);
  int cq[3], ck[3];
  memcpy(cq, cu_q, sizeof cq), memcpy(ck, cu_kv, sizeof ck);
  const int r2 = attn_execute_varlen_async(plan, FAKE_STREAM, cq, ck, q, k, v, o);
  memset(cq, 0x7f, sizeof cq), memset(ck, 0x7f, sizeof ck);
  const int before = h.runs;
  fake_sync(FAKE_STREAM);
  set_hook(NULL, NULL);
  rec(&c, 1);
  attn_from_dtype(pp->dtype, o2, no, f1), attn_from_dtype(pp->dtype, o, no, f2);
  char what[700];
  snprintf(what, sizeof what, "the runtime's varlen launches on the interpreter (%s)", label);
  const int same = memcmp(o, o2, no * es) == 0;
  CHECK(r1 == ATTN_OK && r2 == ATTN_OK && h.runs == 2 && before == 1 && h.fails == 0 && same,
        "%s: sync %s, async %s, %d launches run (%d before the async call's stream ran; want 2, 1), %d failed, "
        "outputs %s", what, attn_strerror(r1), attn_strerror(r2), h.runs, before, h.fails,
        same ? "the same bits" : "differ");
  attn_problem p = *pp;
  p.batch = 2, p.n = 9, p.n_kv = 20;
  if (h.runs == 2 && !h.fails && !check_varlen(&p, 2, cu_q, cu_kv, xq, xk, xv, f2, what)) printf("ok %s\n", what);
  cases++;
  memset(q, 0, nq * es), memset(k, 0, nk * es), memset(v, 0, nv * es);
  free(x), free(o2);
  ptx_module_free(m);
}

/* varlen_interpreted's check for paged prefill on the plan (pages of 8 in shuffled order, sequences of 20 and 5
 * keys): attn_execute_paged and attn_execute_paged_async on the interpreter, the same bits, within fp64's limits. */
static void paged_interpreted(attn_plan *plan, fake_cuda_record_fn rec, fake_cuda_set_hook_fn set_hook,
                              unsigned char *q, unsigned char *k, unsigned char *v, unsigned char *o, size_t obytes,
                              size_t kbytes) {
  const attn_problem *pp = &plan->p;
  attn_spec s = plan->spec;
  s.layout = 2; /* prefill: n = 9 query rows a sequence */
  char err[512], label[600];
  if (attn_spec_check(&s, err, sizeof err) != ATTN_OK) {
    FAIL("paged on the interpreter: %s", err);
    return;
  }
  attn_spec_format(&s, label, sizeof label);
  ptx_module *m = build_ptx(&s, label);
  if (!m) return;
  enum { B = 2, PS = 8, MP = 3, NP = 6 };
  const int table[B * MP] = {4, 1, 5, 0, 2, 3}, lens[B] = {20, 5};
  const size_t H = (size_t)pp->heads, HK = (size_t)pp->heads_kv, N = (size_t)pp->n, es = es_of(pp->dtype);
  const size_t slot_k = HK * pp->d, slot_v = HK * pp->d_v;
  const size_t nq = B * H * N * pp->d, nk = NP * PS * slot_k, nv = NP * PS * slot_v, no = B * H * N * pp->d_v;
  float *x = malloc(sizeof(float) * (nq + nk + nv + 2 * no));
  unsigned char *o2 = malloc(no * es);
  if (!x || !o2 || no * es > obytes || nk * es > kbytes || nq * es > obytes) abort();
  float *xq = x, *xk = xq + nq, *xv = xk + nk, *f1 = xv + nv, *f2 = f1 + no;
  attn_fill_random(xq, nq, 31), attn_fill_random(xk, nk, 32), attn_fill_random(xv, nv, 33);
  attn_round_dtype(pp->dtype, xq, nq), attn_round_dtype(pp->dtype, xk, nk), attn_round_dtype(pp->dtype, xv, nv);
  to_raw(pp->dtype, xq, nq, q), to_raw(pp->dtype, xk, nk, k), to_raw(pp->dtype, xv, nv, v);
  run_hook h = {.m = m, .qb = nq * es, .kb = nk * es, .vb = nv * es, .ob = no * es, .batch = B};
  set_hook(on_launch, &h);
  fake_cuda_calls c;
  rec(&c, 1);
  memset(o, 0xff, no * es);
  const int r1 = attn_execute_paged(plan, q, k, v, NP, PS, table, MP, lens, o);
  memcpy(o2, o, no * es);
  memset(o, 0xff, no * es);
  int t2[B * MP], l2[B];
  memcpy(t2, table, sizeof t2), memcpy(l2, lens, sizeof l2);
  const int r2 = attn_execute_paged_async(plan, FAKE_STREAM, q, k, v, NP, PS, t2, MP, l2, o);
  memset(t2, 0x7f, sizeof t2), memset(l2, 0x7f, sizeof l2);
  fake_sync(FAKE_STREAM);
  set_hook(NULL, NULL);
  rec(&c, 1);
  attn_from_dtype(pp->dtype, o2, no, f1), attn_from_dtype(pp->dtype, o, no, f2);
  char what[700];
  snprintf(what, sizeof what, "the runtime's paged launches on the interpreter (%s)", label);
  const int same = memcmp(o, o2, no * es) == 0;
  CHECK(r1 == ATTN_OK && r2 == ATTN_OK && h.runs == 2 && h.fails == 0 && same,
        "%s: sync %s, async %s, %d launches run (want 2), %d failed, outputs %s", what, attn_strerror(r1),
        attn_strerror(r2), h.runs, h.fails, same ? "the same bits" : "differ");
  int bad = !(h.runs == 2 && !h.fails);
  for (int b = 0; b < B && !bad; b++) { /* sequence b's keys, dense, from its pages */
    const int lk = lens[b];
    float *sk = malloc(HK * lk * pp->d * 4), *sv = malloc(HK * lk * pp->d_v * 4);
    if (!sk || !sv) abort();
    for (int t = 0; t < lk; t++)
      for (size_t hd = 0; hd < HK; hd++) {
        const size_t slot = (size_t)table[b * MP + t / PS] * PS + t % PS;
        memcpy(sk + (hd * lk + t) * pp->d, xk + slot * slot_k + hd * pp->d, 4 * pp->d);
        memcpy(sv + (hd * lk + t) * pp->d_v, xv + slot * slot_v + hd * pp->d_v, 4 * pp->d_v);
      }
    char w[760];
    snprintf(w, sizeof w, "%s | sequence %d", what, b);
    bad |= check_sequence(pp, (int)N, lk, xq + b * H * N * pp->d, sk, sv, f2 + b * H * N * pp->d_v, w) != 0;
    free(sk), free(sv);
  }
  if (!bad) printf("ok %s\n", what);
  cases++;
  memset(q, 0, nq * es), memset(k, 0, nk * es), memset(v, 0, nv * es);
  free(x), free(o2);
  ptx_module_free(m);
}

/* fake mode's end: with the kernels from the cache but no NVRTC for the interpreter's part, a skip, not a pass */
static int fake_verdict(void) {
  printf("%s: %d checks, %d failures%s\n", failures ? "FAILED" : no_nvrtc ? "SKIPPED" : "PASSED", cases, failures,
         no_nvrtc ? " (the interpreter's part not run: no NVRTC)" : "");
  return failures ? 1 : no_nvrtc ? 77 : 0;
}

static int fake_mode(const char *lib, int full) {
  fake_cuda_set_hook_fn set_hook;
  fake_cuda_record_fn rec;
  attn_runtime *rt = emu_fake_open_as(lib, "", &set_hook, &rec);
  if (!rt) return 1;
  const attn_problem p = {.batch = 2, .heads = 4, .heads_kv = 2, .n = 9, .n_kv = 20, .d = 16, .dtype = ATTN_F16,
                          .causal = 1, .algo = ATTN_ALGO_FLASH, .page_size = 8};
  attn_plan *plan = NULL;
  int rc = attn_plan_create(rt, &p, &plan);
  if (rc == ATTN_ECOMPILE && strstr(attn_last_error(rt), "NVRTC is not available")) {
    printf("SKIP: no NVRTC to compile the kernels\n");
    attn_close(rt);
    return 77;
  }
  if (rc != ATTN_OK) {
    FAIL("attn_plan_create: %s: %s", attn_strerror(rc), attn_last_error(rt));
    attn_close(rt);
    return 1;
  }
  /* device memory is host memory in the fake driver: 16-byte aligned buffers, o poisoned with 0xab */
  enum { QB = 2 * 4 * 9 * 16 * 2, KB = 6 * 8 * 2 * 16 * 2, OB = QB }; /* K, V: six pages of 8 keys, or 20 rows */
  unsigned char *buf = aligned_alloc(64, QB + 2 * KB + OB + 64);
  if (!buf) abort();
  unsigned char *q = buf, *k = q + QB, *v = k + KB, *o = v + KB;
  memset(buf, 0, QB + 2 * KB);
  memset(o, 0xab, OB);
  fake_cuda_calls c;
  rec(&c, 1);
  /* varlen */
  const int cu_q[3] = {0, 9, 12}, cu_kv[3] = {0, 20, 25};
  const int dec[3] = {0, 9, 8}, first[3] = {1, 9, 12}, over[3] = {0, 10, 12}, over_kv[3] = {0, 21, 25};
  refused(rt, attn_execute_varlen(plan, dec, cu_kv, q, k, v, o), ATTN_EINVAL, "decreases", o, OB, rec, "varlen "
          "decreasing cu_seqlens_q");
  refused(rt, attn_execute_varlen(plan, first, cu_kv, q, k, v, o), ATTN_EINVAL, "not 0", o, OB, rec,
          "varlen cu_seqlens_q[0] = 1");
  refused(rt, attn_execute_varlen(plan, over, cu_kv, q, k, v, o), ATTN_EINVAL, "above the plan's 9", o, OB, rec,
          "varlen 10 rows for n = 9");
  refused(rt, attn_execute_varlen(plan, cu_q, over_kv, q, k, v, o), ATTN_EINVAL, "above the plan's 20", o, OB, rec,
          "varlen 21 keys for n_kv = 20");
  refused(rt, attn_execute_varlen(plan, NULL, cu_kv, q, k, v, o), ATTN_EINVAL, "cu_seqlens_q is NULL", o, OB, rec,
          "varlen NULL cu_seqlens_q");
  refused(rt, attn_execute_varlen(plan, cu_q, cu_kv, q, k, NULL, o), ATTN_EINVAL, "v is NULL", o, OB, rec,
          "varlen NULL v");
  refused(rt, attn_execute_varlen(plan, cu_q, cu_kv, q + 2, k, v, o), ATTN_EINVAL, "16-byte", o, OB, rec,
          "varlen q misaligned");
  rec(&c, 1);
  rc = attn_execute_varlen(plan, cu_q, cu_kv, q, k, v, o);
  rec(&c, 1);
  /* the grid of the longest sequence (9 rows: one query block a head), n = 9 */
  CHECK(rc == ATTN_OK && c.launches == 1 && c.stream_syncs >= 1 && c.pending == 0 && c.last_grid == 2 * 4 &&
            c.last_n == 9 && c.last_heads == 4,
        "varlen: %s (%s), %d launches, %d waits, %d pending, grid %u, n %lld, heads %lld (want 1, >= 1, 0, 8, 9, 4)",
        attn_strerror(rc), attn_last_error(rt), c.launches, c.stream_syncs, c.pending, c.last_grid, c.last_n,
        c.last_heads);
  cases++;
  async_varlen(rt, plan, rec, q, k, v, o);
  async_threads(plan, rec, q, k, v, o);
  varlen_interpreted(plan, rec, set_hook, q, k, v, o, OB);
  /* paged: pages of 8 (the plan's), 2 sequences of up to 20 keys in 3 pages each */
  memset(o, 0xab, OB);
  const int table[6] = {0, 1, 2, 3, 4, 5}, lens[2] = {20, 0}, long_lens[2] = {21, 0}, five[2] = {5, 0};
  const int bad_table[6] = {0, 1, 6, 3, 4, 5};
  refused(rt, attn_execute_paged(plan, q, k, v, 6, 7, table, 3, lens, o), ATTN_EINVAL, "made for pages of 8", o, OB,
          rec, "paged page_size 7 on a plan for 8");
  refused(rt, attn_execute_paged(plan, q, k, v, 6, 0, table, 3, lens, o), ATTN_EINVAL, "page_size 0", o, OB, rec,
          "paged page_size 0");
  refused(rt, attn_execute_paged(plan, q, k, v, 6, 8, bad_table, 3, lens, o), ATTN_EINVAL, "outside the cache", o, OB,
          rec, "paged page index 6 of 6");
  refused(rt, attn_execute_paged(plan, q, k, v, 6, 8, table, 3, long_lens, o), ATTN_EINVAL, "n_kv 20", o, OB, rec,
          "paged 21 keys for n_kv = 20");
  refused(rt, attn_execute_paged(plan, q, k, v, 6, 8, table, 2, lens, o), ATTN_EINVAL, "its 2 pages", o, OB, rec,
          "paged 20 keys in 2 pages of 8");
  refused(rt, attn_execute_paged(plan, q, k, v, 6, 8, NULL, 3, lens, o), ATTN_EINVAL, "block_table is NULL", o, OB,
          rec, "paged NULL block_table");
  refused(rt, attn_execute_paged(plan, q, k, v, 0, 8, table, 3, lens, o), ATTN_EINVAL, "num_pages 0", o, OB, rec,
          "paged no page");
  if (full) { /* another kernel to compile: nightly */
    rec(&c, 1);
    rc = attn_execute_paged(plan, q, k, v, 6, 8, table, 3, five, o);
    rec(&c, 1);
    CHECK(rc == ATTN_OK && c.launches == 1 && c.stream_syncs >= 1 && c.pending == 0 && c.last_grid == 2 * 4 &&
              c.last_n == 9 && c.last_heads == 4,
          "paged: %s (%s), %d launches, %d waits, %d pending, grid %u, n %lld, heads %lld (want 1, >= 1, 0, 8, 9, 4)",
          attn_strerror(rc), attn_last_error(rt), c.launches, c.stream_syncs, c.pending, c.last_grid, c.last_n,
          c.last_heads);
    cases++;
    async_paged(rt, plan, rec, q, k, v, o);
    paged_interpreted(plan, rec, set_hook, q, k, v, o, OB, KB);
  }
  /* destroyed with launches in flight: it waits before freeing what they use */
  rc = attn_execute_varlen_async(plan, FAKE_STREAM, cu_q, cu_kv, q, k, v, o);
  rec(&c, 1);
  attn_plan_destroy(plan);
  rec(&c, 1);
  CHECK(rc == ATTN_OK && c.freed_in_use == 0 && c.freed_host_in_use == 0 && c.unloaded_in_use == 0 && c.pending == 0,
        "plan destroyed behind an async call: %s, %d device and %d pinned buffers freed in use, %d modules unloaded "
        "in use, %d pending", attn_strerror(rc), c.freed_in_use, c.freed_host_in_use, c.unloaded_in_use, c.pending);
  cases++;
  if (!full) {
    free(buf);
    attn_close(rt);
    return fake_verdict();
  }
  /* decode with 2 query heads a KV head: the packed kernel, a block a KV head (grid batch x heads_kv, n = 2) */
  attn_problem pd = p;
  pd.n = 1;
  plan = NULL;
  rc = attn_plan_create(rt, &pd, &plan);
  CHECK(rc == ATTN_OK, "decode plan: %s", attn_last_error(rt));
  if (rc == ATTN_OK) {
    rec(&c, 1);
    rc = attn_execute_paged(plan, q, k, v, 6, 8, table, 3, five, o);
    rec(&c, 1);
    CHECK(rc == ATTN_OK && c.launches == 1 && c.last_grid == 2 * 2 && c.last_heads == 2 && c.last_n == 2,
          "packed decode: %s (%s), %d launches, grid %u, heads %lld, n %lld (want 1, 4, 2, 2)", attn_strerror(rc),
          attn_last_error(rt), c.launches, c.last_grid, c.last_heads, c.last_n);
    cases++;
  }
  attn_plan_destroy(plan);
  plan = NULL;
  /* smallcache: no kernel of these layouts, said in one line, nothing launched */
  attn_problem ps = p;
  ps.algo = ATTN_ALGO_SMALLCACHE;
  ps.page_size = 0;
  rc = attn_plan_create(rt, &ps, &plan);
  CHECK(rc == ATTN_OK, "smallcache plan: %s", attn_last_error(rt));
  if (rc == ATTN_OK) {
    memset(o, 0xab, OB);
    refused(rt, attn_execute_varlen(plan, cu_q, cu_kv, q, k, v, o), ATTN_EUNSUPPORTED, "CUDA flash has", o, OB, rec,
            "varlen on a smallcache plan");
    refused(rt, attn_execute_paged(plan, q, k, v, 6, 8, table, 3, lens, o), ATTN_EUNSUPPORTED, "CUDA flash has", o,
            OB, rec, "paged on a smallcache plan");
  }
  attn_plan_destroy(plan);
  free(buf);
  attn_close(rt);
  return fake_verdict();
}

/* ---- the layout in a spec ---- */

static int spec_mode(void) {
  attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, ATTN_F16, 64, 1);
  char text[512], back[512], err[512], sum[512];
  attn_spec_format(&s, text, sizeof text);
  char *dense = attn_spec_source(&s, 0, err, sizeof err);
  CHECK(!strstr(text, "layout") && dense && !strstr(dense, "#define ATTN_LAYOUT 1") &&
            !strstr(dense, "#define ATTN_LAYOUT 2"),
        "a dense spec's text or source names a layout: %s", text);
  free(dense);
  for (int lay = 1; lay <= 3; lay++) {
    s.layout = lay;
    attn_spec t;
    attn_spec_format(&s, text, sizeof text);
    attn_spec_summary(&s, sum, sizeof sum);
    const int rc = attn_spec_parse(text, &t, err, sizeof err);
    if (rc == ATTN_OK) attn_spec_format(&t, back, sizeof back);
    char want[32];
    snprintf(want, sizeof want, " layout=%d", lay);
    CHECK(rc == ATTN_OK && t.layout == lay && !strcmp(text, back) && strstr(text, want),
          "layout %d: '%s' parses to '%s' (%s)", lay, text, rc == ATTN_OK ? back : "-", rc == ATTN_OK ? "" : err);
    CHECK(strstr(sum, lay == 1 ? " varlen" : " paged"), "layout %d's summary: %s", lay, sum);
    char *src = attn_spec_source(&s, 0, err, sizeof err);
    snprintf(want, sizeof want, "#define ATTN_LAYOUT %d\n", lay);
    CHECK(src && strstr(src, want), "layout %d's source lacks %s", lay, want);
    free(src);
    cases++;
  }
  /* only flash has these kernels (CPU flash the paged one alone); 4 is no layout */
  attn_spec c = attn_spec_default(ATTN_ALGO_SMALLCACHE, ATTN_TARGET_CUDA, ATTN_F16, 64, 0);
  c.layout = 1;
  CHECK(attn_spec_check(&c, err, sizeof err) == ATTN_EUNSUPPORTED && strstr(err, "only flash"),
        "smallcache with a layout: %s", err);
  c = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, ATTN_F32, 64, 0);
  c.layout = 1;
  CHECK(attn_spec_check(&c, err, sizeof err) == ATTN_EUNSUPPORTED && strstr(err, "only layout=2"),
        "cpu flash with layout 1: %s", err);
  c.layout = 2;
  CHECK(attn_spec_check(&c, err, sizeof err) == ATTN_OK, "cpu flash with layout 2: %s", err);
  CHECK(attn_spec_parse("flash cuda f16 d=64 br=64 bc=64 causal=0 unroll=0 warps=4 stages=2 arch=sm_80 tile=0 "
                        "feature=taylor degree=0 rank=0 seed=0 layout=4", &c, err, sizeof err) == ATTN_EINVAL &&
            strstr(err, "layout=4"),
        "layout=4: %s", err);
  cases += 4;
  printf("%s: %d checks, %d failures\n", failures ? "FAILED" : "PASSED", cases, failures);
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc >= 2 && !strcmp(argv[1], "spec")) return spec_mode();
  if (argc >= 3 && !strcmp(argv[1], "compile")) return compile_mode(argv[2]);
  if (argc >= 3 && !strcmp(argv[1], "fake")) return fake_mode(argv[2], argc > 3 && !strcmp(argv[3], "full"));
  if (argc >= 3 && !strcmp(argv[1], "traffic")) {
    layout = 2;
    const int t = attn_dtype_parse(argv[2]);
    if (t < 0) {
      fprintf(stderr, "unknown dtype '%s'\n", argv[2]);
      return 2;
    }
    return traffic_mode((attn_dtype)t, argc - 3, argv + 3);
  }
  if (argc >= 3 && (!strcmp(argv[1], "varlen") || !strcmp(argv[1], "paged"))) {
    layout = !strcmp(argv[1], "varlen") ? 1 : 2;
    const int t = attn_dtype_parse(argv[2]);
    if (t < 0) {
      fprintf(stderr, "unknown dtype '%s'\n", argv[2]);
      return 2;
    }
    return emu_mode((attn_dtype)t, argc - 3, argv + 3);
  }
  fprintf(stderr, "usage: cuda_emu_serve varlen|paged DTYPE [FIELD=VALUE ...]\n"
                  "       cuda_emu_serve traffic DTYPE [FIELD=VALUE ...]\n"
                  "       cuda_emu_serve compile ARCH\n       cuda_emu_serve fake LIBCUDA [full]\n"
                  "       cuda_emu_serve spec\n");
  return 2;
}
