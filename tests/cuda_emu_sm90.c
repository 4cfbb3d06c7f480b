/* cuda_emu_sm90: the Hopper flash template (templates/flash_sm90.cu) on the PTX interpreter (tests/ptx: wgmma,
 * mbarriers, cp.async.bulk.tensor through ptx_tmap.h's maps, setmaxnreg) against the fp64 reference, no GPU.
 *   cuda_emu_sm90 [--all] "SPEC" ...   each spec (canonical text, impl=wgmma) on the sample of shapes: n and n_kv one
 *                                      below and above multiples of Br and Bc, rows that see no key (causal, n >
 *                                      n_kv), grouped-query heads, batch 2, n = 1; --all: every shape of the sweep,
 *                                      and the counting build's entries against the closed form
 * The kernel's argument is built as the runtime builds it (attn_sm90_kargs_make), the tensor maps encoded by
 * ptx_tmap_encode from the same parameters cuTensorMapEncodeTiled takes. Checked: every launch completes without an
 * interpreter error (races, wgmma results or TMA data used before their wait, a stage refilled while read, a wait
 * that never completes, ...), O and lse are written everywhere, O against fp64 within the dtype's limit (the
 * relative Frobenius error of the mma.sync template's tests, C (u + u32 (1 + |scale| sqrt(d))), C = 2), lse within
 * 1e-3 absolute where a row sees keys and -inf where it sees none. Exit 77 without NVRTC. ATTN_EMU_KEEP_PTX=FILE
 * writes the PTX there (the interpreter's messages give its line numbers); ATTN_EMU_TEMPLATE=FILE runs a modified
 * copy of the template (tests/ptx_mutation.sh). */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "check.h"
#include "emu_util.h"
#include "internal.h"
#include "launch.h"
#include "ptx/ptx.h"
#include "ptx/ptx_tmap.h"
#include "spec_sm90.h"

typedef struct {
  int batch, heads, heads_kv, n, n_kv;
} shape;

/* Br, Bc: the spec's tiles. Sample (CI) first, the rest with --all. */
static int shapes_of(const attn_spec *s, int all, shape *out) {
  const int br = s->br, bc = s->bc;
  const shape sample[] = {
      {1, 2, 1, br - 1, 2 * bc + 1},   /* GQA; n one below a tile, n_kv one above two */
      {1, 1, 1, br + 1, bc - 1},       /* n > n_kv: causal rows that see no key */
      {2, 2, 2, 1, 1},                 /* n = 1, batch 2 */
  };
  const shape more[] = {
      {1, 1, 1, br, bc},               /* exact tiles */
      {2, 4, 2, br + 1, bc + 1},       /* batch 2, GQA, both one above */
      {1, 2, 2, 2 * br - 1, 2 * bc - 1}, /* both one below two tiles */
      {1, 1, 1, 17, 3 * bc + 5},       /* decode-like: few rows, many key blocks (the ring wraps) */
      {1, 1, 1, 3 * br + 1, 2},        /* many rows, two keys */
  };
  int k = 0;
  for (size_t i = 0; i < sizeof sample / sizeof sample[0]; i++) out[k++] = sample[i];
  if (all)
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) out[k++] = more[i];
  return k;
}

/* ptx_tmap.h's encoder behind the runtime's callback */
static int emu_encode(void *ctx, attn_cuda_tmap *map, const attn_sm90_tmap_params *p, char *err, size_t len) {
  (void)ctx;
  uint64_t dims[3], strides[2];
  for (int i = 0; i < 3; i++) dims[i] = p->global_dim[i];
  for (int i = 0; i < 2; i++) strides[i] = p->global_strides[i];
  return ptx_tmap_encode(map, (unsigned)p->data_type, p->rank, (uint64_t)(uintptr_t)p->global_address, dims, strides,
                         p->box_dim, p->element_strides, (unsigned)p->interleave, (unsigned)p->swizzle,
                         (unsigned)p->l2_promotion, (unsigned)p->oob_fill, err, len);
}

static double lcg(unsigned long long *st) {
  *st = *st * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(*st >> 11) * 0x1p-53 * 2.0 - 1.0;
}

static int no_nvrtc;

static ptx_module *build(const attn_spec *s, int count_io, const char *label) {
  char err[512];
  char *src = attn_spec_source(s, count_io, err, sizeof err);
  if (!src) {
    CHECK(0, "%s: %s", label, err);
    return NULL;
  }
  const char *alt = getenv("ATTN_EMU_TEMPLATE"); /* a modified copy of the template (tests/ptx_mutation.sh) */
  if (alt && *alt && emu_substitute(&src, alt) != 0) {
    CHECK(0, "%s: cannot read ATTN_EMU_TEMPLATE=%s", label, alt);
    free(src);
    return NULL;
  }
  char *ptx = NULL, *log = NULL;
  const int rc = attn_nvrtc_ptx(src, "attn_kernel.cu", s->arch, &ptx, &log);
  free(src);
  const char *keep = getenv("ATTN_EMU_KEEP_PTX"); /* a file to write the PTX to, for reading the interpreter's lines */
  if (keep && *keep && ptx) {
    FILE *f = fopen(keep, "w");
    if (f) fputs(ptx, f), fclose(f);
  }
  ptx_module *m = NULL;
  if (rc == ATTN_ENODEV) {
    no_nvrtc = 1;
    printf("SKIP: %s\n", log ? log : "no NVRTC");
  } else {
    CHECK(rc == ATTN_OK, "%s: NVRTC does not compile the kernel:\n%s", label, log ? log : "");
    if (rc == ATTN_OK) {
      m = ptx_parse(ptx, err, sizeof err);
      CHECK(m, "%s: the interpreter refuses NVRTC's PTX: %s", label, err);
    }
  }
  free(ptx);
  free(log);
  return m;
}

/* The closed form of the counting build (flash.cu's): per query block, rows d + (d + d_v) min(ceil(L/Bc) Bc, n_kv)
 * reads and rows d_v writes, L the keys some row of the block sees. */
static void closed_form(const attn_spec *s, const attn_problem *p, unsigned long long *reads,
                        unsigned long long *writes) {
  *reads = *writes = 0;
  const long long nqb = (p->n + s->br - 1) / s->br, dv = attn_spec_dv(s);
  for (long long qb = 0; qb < nqb; qb++) {
    const long long i0 = qb * s->br, rows = p->n - i0 < s->br ? p->n - i0 : s->br;
    long long L = p->n_kv;
    if (s->causal) {
      const long long e = i0 + rows + p->n_kv - p->n;
      L = e < 0 ? 0 : e < p->n_kv ? e : p->n_kv;
    }
    const long long keys = L > 0 ? ((L + s->bc - 1) / s->bc * s->bc < p->n_kv ? (L + s->bc - 1) / s->bc * s->bc
                                                                              : p->n_kv)
                                 : 0;
    *reads += (unsigned long long)(rows * s->d + (s->d + dv) * keys);
    *writes += (unsigned long long)(rows * dv);
  }
  *reads *= (unsigned long long)p->batch * p->heads;
  *writes *= (unsigned long long)p->batch * p->heads;
}

/* cm: the counting build (NULL: none), run after the kernel on the same inputs; its counts against the closed form */
static void run_shape(const ptx_module *m, const ptx_module *cm, const attn_spec *s, const shape *sh,
                      unsigned long long seed, const char *label) {
  attn_problem p;
  memset(&p, 0, sizeof p);
  p.batch = sh->batch, p.heads = sh->heads, p.heads_kv = sh->heads_kv, p.n = sh->n, p.n_kv = sh->n_kv;
  p.d = s->d, p.d_v = attn_spec_dv(s), p.dtype = s->dtype, p.causal = s->causal;
  p.scale = (float)(1.0 / sqrt((double)s->d));
  const int d = p.d, dv = p.d_v;
  const size_t nq = (size_t)p.batch * p.heads * p.n * d, nk = (size_t)p.batch * p.heads_kv * p.n_kv * d;
  const size_t nv = (size_t)p.batch * p.heads_kv * p.n_kv * dv, no = (size_t)p.batch * p.heads * p.n * dv;
  const size_t nl = (size_t)p.batch * p.heads * p.n;
  float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nv * 4), *o = malloc(no * 4), *lse = malloc(nl * 4);
  double *ref = malloc(no * sizeof(double));
  uint16_t *h = malloc((nq > nk ? (nq > nv ? nq : nv) : (nk > nv ? nk : nv)) * 2 + no * 2);
  char err[1024], what[600];
  snprintf(what, sizeof what, "%s batch=%d heads=%d/%d n=%d n_kv=%d", label, p.batch, p.heads, p.heads_kv, p.n,
           p.n_kv);
  if (!q || !k || !v || !o || !lse || !ref || !h) {
    CHECK(0, "out of memory");
    goto out;
  }
  unsigned long long st = seed;
  for (size_t i = 0; i < nq; i++) q[i] = (float)lcg(&st);
  for (size_t i = 0; i < nk; i++) k[i] = (float)lcg(&st);
  for (size_t i = 0; i < nv; i++) v[i] = (float)lcg(&st);
  attn_round_dtype(p.dtype, q, nq);
  attn_round_dtype(p.dtype, k, nk);
  attn_round_dtype(p.dtype, v, nv);
  attn_reference(&p, q, k, v, ref);

  ptx_machine *x = ptx_machine_new(m, err, sizeof err);
  CHECK(x, "%s: %s", what, err);
  if (!x) goto out;
  const uint64_t dq = ptx_alloc(x, nq * 2, "q"), dk = ptx_alloc(x, nk * 2, "k"), dvv = ptx_alloc(x, nv * 2, "v");
  const uint64_t dout = ptx_alloc(x, no * 2, "o"), dl = ptx_alloc(x, nl * 4, "lse");
  CHECK(dq && dk && dvv && dout && dl, "%s: device memory", what);
  attn_to_dtype(p.dtype, q, nq, h);
  int rc = ptx_copy_in(x, dq, h, nq * 2);
  attn_to_dtype(p.dtype, k, nk, h);
  rc |= ptx_copy_in(x, dk, h, nk * 2);
  attn_to_dtype(p.dtype, v, nv, h);
  rc |= ptx_copy_in(x, dvv, h, nv * 2);
  CHECK(rc == 0, "%s: copies in", what);
  attn_cuda_geom g;
  CHECK(attn_cuda_geometry(s, (long long)p.batch * p.heads, p.n, p.n_kv, 0, &g, err, sizeof err) == ATTN_OK, "%s: %s",
        what, err);
  attn_cuda_kargs a;
  memset(&a, 0, sizeof a);
  a.q = (const void *)(uintptr_t)dq, a.k = (const void *)(uintptr_t)dk, a.v = (const void *)(uintptr_t)dvv;
  a.o = (void *)(uintptr_t)dout;
  a.lse = (float *)(uintptr_t)dl;
  a.batch = p.batch, a.heads = p.heads, a.heads_kv = p.heads_kv, a.n = p.n, a.n_kv = p.n_kv, a.scale = p.scale;
  a.grid_items = (int)g.items;
  attn_cuda_sm90_kargs ka;
  CHECK(attn_sm90_kargs_make(s, &a, emu_encode, NULL, &ka, err, sizeof err) == ATTN_OK, "%s: %s", what, err);
  const ptx_launch_cfg cfg = {.grid = g.grid, .block = g.block, .dyn_smem = (uint64_t)g.smem,
                              .order = (unsigned)(seed % 5), .resident = 2};
  if (ptx_launch(x, "attn_kernel", &cfg, &ka, ATTN_CUDA_SM90_KARGS_BYTES, err, sizeof err) != 0) {
    CHECK(0, "%s: %s", what, err);
  } else {
    size_t undef = 0, undef_l = 0;
    CHECK(ptx_copy_out(x, dout, h, no * 2, &undef) == 0 && undef == 0, "%s: %zu bytes of O never written", what,
          undef);
    float *lg = malloc(nl * 4);
    CHECK(lg && ptx_copy_out(x, dl, lg, nl * 4, &undef_l) == 0 && undef_l == 0, "%s: %zu bytes of lse never written",
          what, undef_l);
    attn_from_dtype(p.dtype, h, no, o);
    double lim, row_lim;
    emu_limits(&p, &lim, &row_lim); /* the mma.sync template's Frobenius limit */
    const double fro = attn_rel_error(ref, o, no);
    CHECK(fro <= lim, "%s: relative error %.3g against fp64, limit %.3g", what, fro, lim);
    /* lse: log of the row's sum of exp(scale q.k) over the keys it sees */
    double worst_lse = 0;
    for (long r = 0; lg && r < (long)nl; r++) {
      const long bh = r / p.n, i = r % p.n, b = bh / p.heads, hk = (bh % p.heads) / (p.heads / p.heads_kv);
      long lo, hi;
      attn_visible_keys(&p, i, &lo, &hi);
      if (hi <= lo) {
        CHECK(isinf(lg[r]) && lg[r] < 0, "%s: row %ld sees no key, lse %g", what, r, lg[r]);
        continue;
      }
      double mx = -INFINITY, sum = 0;
      const float *qr = q + (size_t)r * d;
      for (int pass = 0; pass < 2; pass++)
        for (long j = lo; j < hi; j++) {
          const float *kr = k + ((size_t)(b * p.heads_kv + hk) * p.n_kv + j) * d;
          double dot = 0;
          for (int c = 0; c < d; c++) dot += (double)qr[c] * kr[c];
          dot *= p.scale;
          if (pass == 0) mx = dot > mx ? dot : mx;
          else sum += exp(dot - mx);
        }
      const double want = mx + log(sum), e = fabs(want - lg[r]);
      if (e > worst_lse) worst_lse = e;
    }
    CHECK(worst_lse <= 1e-3, "%s: lse off by %.3g", what, worst_lse);
    printf("ok %s: error %.2e (limit %.2e), lse %.1e\n", what, fro, lim, worst_lse);
    free(lg);
  }
  ptx_machine_free(x);
  if (cm && (x = ptx_machine_new(cm, err, sizeof err)) != NULL) {
    const uint64_t cq = ptx_alloc(x, nq * 2, "q"), ck = ptx_alloc(x, nk * 2, "k"), cv = ptx_alloc(x, nv * 2, "v");
    const uint64_t co = ptx_alloc(x, no * 2, "o"), cio = ptx_alloc(x, 16, "io");
    const unsigned long long zero[2] = {0, 0};
    attn_to_dtype(p.dtype, q, nq, h);
    rc = ptx_copy_in(x, cq, h, nq * 2);
    attn_to_dtype(p.dtype, k, nk, h);
    rc |= ptx_copy_in(x, ck, h, nk * 2);
    attn_to_dtype(p.dtype, v, nv, h);
    rc |= ptx_copy_in(x, cv, h, nv * 2) | ptx_copy_in(x, cio, zero, 16);
    CHECK(rc == 0 && co, "%s (counting): copies in", what);
    a.q = (const void *)(uintptr_t)cq, a.k = (const void *)(uintptr_t)ck, a.v = (const void *)(uintptr_t)cv;
    a.o = (void *)(uintptr_t)co, a.lse = NULL, a.io = (unsigned long long *)(uintptr_t)cio;
    CHECK(attn_sm90_kargs_make(s, &a, emu_encode, NULL, &ka, err, sizeof err) == ATTN_OK, "%s: %s", what, err);
    unsigned long long got[2] = {0, 0}, want[2];
    if (ptx_launch(x, "attn_kernel", &cfg, &ka, ATTN_CUDA_SM90_KARGS_BYTES, err, sizeof err) != 0) {
      CHECK(0, "%s (counting): %s", what, err);
    } else {
      CHECK(ptx_copy_out(x, cio, got, 16, NULL) == 0, "%s: counters", what);
      closed_form(s, &p, &want[0], &want[1]);
      CHECK(got[0] == want[0] && got[1] == want[1], "%s: counted %llu reads, %llu writes; the closed form %llu, %llu",
            what, got[0], got[1], want[0], want[1]);
      printf("ok %s (counting): %llu reads, %llu writes, the closed form's\n", what, got[0], got[1]);
    }
    ptx_machine_free(x);
  } else if (cm) {
    CHECK(0, "%s (counting): %s", what, err);
  }
out:
  free(q), free(k), free(v), free(o), free(lse), free(ref), free(h);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int all = 0, specs = 0;
  const unsigned long long seed = test_seed();
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--all") == 0) {
      all = 1;
      continue;
    }
    attn_spec s;
    char err[512];
    if (attn_spec_parse(argv[i], &s, err, sizeof err) != ATTN_OK || s.impl != ATTN_IMPL_WGMMA) {
      fprintf(stderr, "cuda_emu_sm90: '%s': %s\n", argv[i], s.impl != ATTN_IMPL_WGMMA ? "not impl=wgmma" : err);
      return 2;
    }
    char label[512];
    attn_spec_summary(&s, label, sizeof label);
    ptx_module *m = build(&s, 0, label), *cm = all && m ? build(&s, 1, label) : NULL;
    if (no_nvrtc) return 77;
    if (!m || (all && !cm)) {
      ptx_module_free(m);
      continue;
    }
    shape sh[16];
    const int count = shapes_of(&s, all, sh);
    for (int j = 0; j < count; j++) run_shape(m, cm, &s, &sh[j], seed + (unsigned long long)(17 * i + j), label);
    ptx_module_free(m);
    ptx_module_free(cm);
    specs++;
  }
  if (!specs && !failures) {
    fprintf(stderr, "usage: cuda_emu_sm90 [--all] \"SPEC\" ... (impl=wgmma specs)\n");
    return 2;
  }
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
