/* emu_lowrank_feat: lowrank's feature map is one text on both targets (templates/lowrank_feat.h), so a CPU and a
 * CUDA plan of the same spec and seed compute the same features. argv[1]: the templates folder.
 *   - The generated CUDA source of a lowrank spec holds the header in place of lowrank.cu's #include, between #line
 *     markers, and NVRTC's errors name the file and line they are in: a fault put into the header's text is
 *     reported at templates/lowrank_feat.h's line, one put into lowrank.cu past the header at lowrank.cu's.
 *   - attn_init (NVRTC's PTX on the interpreter, which tracks the bytes never written; fast math's approximate f32
 *     instructions at their largest error, which the constants must not use) writes every constant, bit for bit
 *     the CPU's: random features (d = 5, so that pairs of the generator split over rows, rank 12, the largest
 *     seed; the default of d = 64, rank 256) the directions of attn_lf_gauss, which the CPU kernels and the fp64 reference draw, transposed (d x r);
 *     Taylor features (d = 5, degree 4: multiplicities up to 4) lf_taylor_table's parents, variables and
 *     coefficients, which the CPU kernels build.
 * CUDA's outputs against the CPU kernel's on the same inputs are tests/cuda_emu.c's (the lowrank tests of emu.cmake).
 * Exit 77 (skipped) without NVRTC. */
#include <stdint.h>
#include "emu_util.h"
#include "kernel_abi_cuda.h"
#include "launch.h"

/* the CPU templates' Taylor table for the spec below */
#define TAY_D 5
#define TAY_G 4
#define ATTN_D TAY_D
#define ATTN_FEATURE 0
#define ATTN_DEGREE TAY_G
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function" /* the CPU loops this test does not call */
#include "lowrank_feat.h"
#pragma GCC diagnostic pop

static int failures, no_nvrtc;

static attn_spec lr_cuda(int d) {
  attn_spec s = attn_spec_default(ATTN_ALGO_LOWRANK, ATTN_TARGET_CUDA, ATTN_F32, d, 0);
  snprintf(s.arch, sizeof s.arch, "sm_80");
  return s;
}

/* The whole of file `name` in dir, or NULL. */
static char *template_file(const char *dir, const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return emu_read_text(path);
}

/* Line number (1-based) in text of the line holding `what`; 0 when absent. */
static long line_of(const char *text, const char *what) {
  const char *at = strstr(text, what);
  if (!at) return 0;
  long line = 1;
  for (const char *c = text; c < at; c++) line += *c == '\n';
  return line;
}

/* src with `what` (once in its part after `after`) followed by a stray token: NVRTC must report it at want_file's
 * line want_line. */
static void fault_named(const char *src, const char *after, const char *what, const char *want_file, long want_line) {
  const char *from = strstr(src, after), *at = from ? strstr(from, what) : NULL;
  if (!at || want_line <= 0) {
    FAIL("%s: the generated source holds no `%s` to break", want_file, what);
    return;
  }
  const size_t head = (size_t)(at - src) + strlen(what);
  char *bad = malloc(strlen(src) + 8);
  if (!bad) {
    FAIL("out of memory");
    return;
  }
  memcpy(bad, src, head);
  strcpy(bad + head, " @@ ");
  strcat(bad, src + head);
  char *ptx = NULL, *log = NULL, want[512];
  const int rc = attn_nvrtc_ptx(bad, "attn_kernel.cu", "sm_80", &ptx, &log);
  snprintf(want, sizeof want, "%s(%ld): error", want_file, want_line);
  if (rc == ATTN_OK) FAIL("a stray token after `%s` compiles", what);
  else if (!log || !strstr(log, want)) FAIL("NVRTC's error for a fault at %s is not there:\n%s", want, log ? log : "");
  else printf("NVRTC reports a fault at %s(%ld)\n", want_file, want_line);
  free(ptx);
  free(log);
  free(bad);
}

static void check_embedding(const char *dir) {
  const attn_spec s = lr_cuda(5);
  char err[512];
  char *src = attn_spec_source(&s, 0, err, sizeof err), *hdr = template_file(dir, "lowrank_feat.h");
  char *cu = template_file(dir, "lowrank.cu");
  const long inc = cu ? line_of(cu, "#include \"lowrank_feat.h\"\n") : 0;
  if (!src || !hdr || !cu || inc == 0) {
    FAIL("%s", !src ? err : !hdr || !cu ? "cannot read the templates" : "lowrank.cu does not include lowrank_feat.h");
    free(src), free(hdr), free(cu);
    return;
  }
  char markers[8192];
  const size_t hl = strlen(hdr);
  snprintf(markers, sizeof markers, "#line %ld \"templates/lowrank.cu\"\n", inc + 1);
  const char *at = strstr(src, "#line 1 \"templates/lowrank_feat.h\"\n");
  const char *body = at ? at + strlen("#line 1 \"templates/lowrank_feat.h\"\n") : NULL;
  if (!body || strncmp(body, hdr, hl) != 0 || strncmp(body + hl, markers, strlen(markers)) != 0 ||
      strstr(src, "#include \"lowrank_feat.h\""))
    FAIL("the CUDA source does not hold lowrank_feat.h between #line markers in place of line %ld's #include", inc);
  else
    printf("lowrank.cu: lowrank_feat.h embedded in place of line %ld\n", inc);
  /* a fault in the header's text, and one in lowrank.cu past it */
  fault_named(src, "#line 1 \"templates/lowrank_feat.h\"", "attn_lf_mix(attn_lf_u64 z) {", "templates/lowrank_feat.h",
              line_of(hdr, "attn_lf_mix(attn_lf_u64 z) {"));
  fault_named(src, markers, "constexpr int LR_R = (int)lf_rank();", "templates/lowrank.cu",
              line_of(cu, "constexpr int LR_R = (int)lf_rank();"));
  free(src), free(hdr), free(cu);
}

/* attn_init of spec s on the interpreter into *out (g->consts bytes, malloc'd); 0, or -1 with a failure or skip. */
static int run_init(const attn_spec *s, const char *label, unsigned char **out, attn_cuda_geom *g) {
  char err[1024];
  *out = NULL;
  if (attn_cuda_geometry(s, 1, 1, 1, 0, g, err, sizeof err) != ATTN_OK || g->consts <= 0) {
    FAIL("%s: no constants in its launch geometry: %s", label, err);
    return -1;
  }
  ptx_module *m = emu_spec_ptx(s, label, &no_nvrtc, &failures);
  if (!m) return -1;
  ptx_machine *x = ptx_machine_new(m, err, sizeof err);
  const uint64_t dcon = x ? ptx_alloc(x, (uint64_t)g->consts, "consts") : 0;
  unsigned char *c = malloc((size_t)g->consts);
  int rc = -1;
  size_t undefined = 0;
  if (!x || !dcon || !c) {
    FAIL("%s: %s", label, x ? "out of memory" : err);
    goto out;
  }
  ptx_machine_set_approx(x, 1); /* fast math's approximations at their worst: the constants must not use them */
  attn_cuda_kargs a;
  memset(&a, 0, sizeof a);
  a.consts = (void *)(uintptr_t)dcon;
  const ptx_launch_cfg cfg = {.grid = g->init_grid, .block = g->init_block};
  if (ptx_launch(x, "attn_init", &cfg, &a, ATTN_CUDA_KARGS_DENSE_BYTES, err, sizeof err) != 0 ||
      ptx_copy_out(x, dcon, c, (size_t)g->consts, &undefined) != 0) {
    FAIL("%s: attn_init: %s", label, err);
    goto out;
  }
  if (undefined) {
    FAIL("%s: attn_init leaves %zu of its %lld constant bytes unwritten", label, undefined, g->consts);
    goto out;
  }
  *out = c, c = NULL, rc = 0;
out:
  free(c);
  ptx_machine_free(x);
  ptx_module_free(m);
  return rc;
}

/* Random features of rank r from seed on d columns. */
static void check_random(int d, int r, unsigned seed) {
  attn_spec s = lr_cuda(d);
  s.feature = ATTN_FEAT_RANDOM, s.rank = r, s.seed = seed;
  char label[64];
  snprintf(label, sizeof label, "random d=%d r=%d seed=%u", d, r, seed);
  attn_cuda_geom g;
  unsigned char *c;
  if (run_init(&s, label, &c, &g) != 0) return;
  float *w = malloc(sizeof(float) * (size_t)r * (size_t)d), wt;
  long bad = 0;
  if (w) attn_lf_gauss(w, (long)r * d, s.seed);
  for (long t = 0; w && t < r; t++)
    for (long i = 0; i < d; i++) {
      memcpy(&wt, c + 4 * (i * r + t), 4);
      if (memcmp(&wt, &w[t * d + i], 4) != 0 && bad++ < 4)
        printf("direction %ld entry %ld: CUDA %.9g, CPU %.9g\n", t, i, wt, w[t * d + i]);
    }
  if (!w || g.consts != 4LL * r * d || bad)
    FAIL("%s: %ld of %ld directions' entries differ from the CPU's (%lld constant bytes)", label, bad, (long)r * d,
         g.consts);
  else printf("%s: the %ld entries of the directions are the CPU's\n", label, (long)r * d);
  free(w);
  free(c);
}

static void check_taylor(void) {
  attn_spec s = lr_cuda(TAY_D);
  s.feature = ATTN_FEAT_TAYLOR, s.degree = TAY_G, s.rank = 0;
  const long r = lf_rank();
  attn_cuda_geom g;
  unsigned char *c;
  if (run_init(&s, "taylor d=5 g=4", &c, &g) != 0) return;
  int par[512], var[512];
  float coef[512];
  const long built = r <= 512 ? lf_taylor_table(par, var, coef) : 0;
  long bad = 0;
  for (long t = 0; t < built; t++) {
    int p, v;
    float f;
    memcpy(&p, c + 4 * t, 4), memcpy(&v, c + 4 * (r + t), 4), memcpy(&f, c + 4 * (2 * r + t), 4);
    if ((p != par[t] || v != var[t] || memcmp(&f, &coef[t], 4) != 0) && bad++ < 4)
      printf("monomial %ld: CUDA (%d, %d, %.9g), CPU (%d, %d, %.9g)\n", t, p, v, f, par[t], var[t], coef[t]);
  }
  if (built != r || g.consts != r * 12 || bad)
    FAIL("taylor d=5 g=4: %ld of %ld monomials differ from the CPU's table (%lld constant bytes)", bad, r, g.consts);
  else printf("taylor d=5 g=4: the %ld monomials are the CPU's table\n", r);
  free(c);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: emu_lowrank_feat TEMPLATES_DIR\n");
    return 2;
  }
  int maj, min;
  char why[512];
  if (attn_nvrtc_version(&maj, &min, why, sizeof why) != ATTN_OK) {
    printf("SKIP: %s\n", why);
    return 77;
  }
  check_embedding(argv[1]);
  check_random(5, 12, 4294967295u);
  const attn_spec def = lr_cuda(64); /* the default of d = 64: 16384 entries */
  check_random(def.d, def.rank, def.seed);
  check_taylor();
  if (no_nvrtc) return 77;
  printf("%d failures\n", failures);
  return failures ? 1 : 0;
}
