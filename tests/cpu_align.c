/* cpu_align: every CPU kernel on arrays that are only element-aligned, as malloc returns them (16 bytes past a
 * 64-byte line for large blocks) or as a slice of a larger array leaves them.
 *
 *   cpu_align f32          flash (lane and dot kernels, packed rows), smallcache and lowrank in f32
 *   cpu_align half         smallcache in f16, lowrank in bf16
 *   cpu_align half_all     the other pairs: flash in f16 and, split-K, in bf16, smallcache in bf16, lowrank in f16
 *                          (nightly: flash compiles slowly; half-precision rows are converted into tiles anyway)
 *
 * Each kernel is built with ATTN_CHECK_ALIGN and ATTN_COUNT_IO (kernel_abi.h) and run on Q, K, V and O placed 0, one
 * element (4 bytes in f32, 2 in f16 and bf16) and 16 bytes past a 64-byte boundary, each against the fp64 reference
 * on fresh random inputs with a poisoned output. Checked at every offset: the error bound (1e-5 f32, 1e-2 half,
 * lowrank 0.1 as in cpu_shapes), the output bit for bit and the entries moved equal to the aligned run's, and, where
 * the hot loops read staged tiles (all but flash's dot kernels, which read K and V in place: bandwidth-bound, see
 * templates/flash.c), no vector access off a vector boundary (flash) and no tile row off a 64-byte one (smallcache,
 * lowrank: rows of whole lines at d = 64). A kernel that read the caller's rows in its hot loops counts misses at
 * the misaligned offsets. The kernels run here one item at a time; the runtime's threads run the same items. */
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include "cc.h"
#include "cpu_util.h"

typedef struct {
  void *handle;
  int fd;
  attn_kernel_items_fn items;
  attn_kernel_scratch_fn scratch;
  attn_kernel_run_fn run;
  attn_kernel_partials_fn partials;
  attn_kernel_merge_fn merge;
  const unsigned long long *misses;
} kern;

/* The spec's counting source with the alignment check on, compiled and loaded as the runtime loads its kernels. */
static int kern_load(attn_runtime *rt, const attn_spec *s, const char *label, kern *k) {
  memset(k, 0, sizeof *k);
  k->fd = -1;
  char err[512] = "";
  char *src = attn_spec_source(s, 1, err, sizeof err);
  if (!src) {
    CHECK(0, "%s: no source: %s", label, err);
    return -1;
  }
  static const char pre[] = "#define ATTN_CHECK_ALIGN 1\n";
  char *full = malloc(sizeof pre + strlen(src));
  if (!full) {
    free(src);
    CHECK(0, "%s: out of memory", label);
    return -1;
  }
  memcpy(full, pre, sizeof pre - 1);
  strcpy(full + sizeof pre - 1, src);
  free(src);
  char path[4200], byfd[64];
  int cached = 0;
  int rc = attn_cc_object(rt, full, label, 0, path, sizeof path, &cached, &k->fd);
  free(full);
  if (rc != ATTN_OK) {
    CHECK(0, "%s: compile: %s: %s", label, attn_strerror(rc), attn_last_error(rt));
    return -1;
  }
  snprintf(byfd, sizeof byfd, "/proc/self/fd/%d", k->fd);
  k->handle = dlopen(access(byfd, R_OK) == 0 ? byfd : path, RTLD_NOW | RTLD_LOCAL);
  CHECK(k->handle != NULL, "%s: dlopen: %s", label, dlerror());
  if (!k->handle) return -1;
  k->items = (attn_kernel_items_fn)dlsym(k->handle, "attn_kernel_items");
  k->scratch = (attn_kernel_scratch_fn)dlsym(k->handle, "attn_kernel_scratch");
  k->run = (attn_kernel_run_fn)dlsym(k->handle, "attn_kernel_run");
  k->partials = (attn_kernel_partials_fn)dlsym(k->handle, "attn_kernel_partials");
  k->merge = (attn_kernel_merge_fn)dlsym(k->handle, "attn_kernel_merge");
  k->misses = (const unsigned long long *)dlsym(k->handle, "attn_align_misses");
  CHECK(k->items && k->scratch && k->run && !k->partials == !k->merge, "%s: entry points missing", label);
  CHECK(k->misses != NULL, "%s: the ATTN_CHECK_ALIGN build exports no attn_align_misses", label);
  return k->items && k->scratch && k->run && !k->partials == !k->merge && k->misses ? 0 : -1;
}

static void kern_unload(kern *k) {
  if (k->handle) dlclose(k->handle);
  if (k->fd >= 0) close(k->fd);
}

/* Every item, then every merge, on one thread with 64-byte aligned scratch (as attn_cpu_run gives). */
static int kern_run(const kern *k, attn_kargs *a, attn_io *io) {
  long merges = 0;
  a->partials = NULL;
  if (k->partials) {
    const size_t pb = k->partials(a, &merges);
    if (pb && !(a->partials = aligned_alloc(64, (pb + 63) & ~(size_t)63))) return -1;
  }
  const size_t sb = k->scratch(a);
  void *s = aligned_alloc(64, (sb + 127) & ~(size_t)63);
  if (!s) {
    free(a->partials);
    return -1;
  }
  const long items = k->items(a);
  for (long i = 0; i < items; i++) k->run(a, i, s, io);
  for (long i = 0; i < merges; i++) k->merge(a, i, io);
  free(s);
  free(a->partials);
  a->partials = NULL;
  return 0;
}

typedef struct {
  int batch, heads, heads_kv, n, n_kv;
  int staged; /* the hot loops read only staged tiles: no miss at any offset */
} shape_t;

/* One shape at offsets 0, one element and 16 bytes. */
static void run_shape(const kern *k, const attn_spec *s, const char *label, const shape_t *sh, double tol,
                      unsigned long long seed) {
  attn_problem p0 = {.batch = sh->batch, .heads = sh->heads, .heads_kv = sh->heads_kv, .n = sh->n, .n_kv = sh->n_kv,
                     .d = s->d, .d_v = s->dv, .dtype = s->dtype, .causal = s->causal, .algo = s->algo};
  const int lowrank = s->algo == ATTN_ALGO_LOWRANK;
  if (lowrank) p0.scale = 0.2f / sqrtf((float)s->d); /* cpu_shapes' bound holds at this scale */
  attn_problem p;
  if (attn_problem_normalize(NULL, &p0, &p) != ATTN_OK) {
    CHECK(0, "%s: cannot normalise %s", label, shape(&p0));
    return;
  }
  const size_t es = attn_dtype_size(p.dtype);
  const size_t cnt[4] = {(size_t)p.batch * p.heads * p.n * p.d, (size_t)p.batch * p.heads_kv * p.n_kv * p.d,
                         (size_t)p.batch * p.heads_kv * p.n_kv * p.d_v, (size_t)p.batch * p.heads * p.n * p.d_v};
  float *x[4];
  void *raw[4], *base[4];
  unsigned char *first = malloc(cnt[3] * es);
  double *ref = malloc(cnt[3] * sizeof(double));
  int ok = first && ref;
  for (int i = 0; i < 4; i++) {
    x[i] = malloc(cnt[i] * sizeof(float));
    raw[i] = aligned_alloc(64, (cnt[i] * es + 128) & ~(size_t)63);
    ok = ok && x[i] && raw[i];
  }
  if (!ok) {
    CHECK(0, "%s: out of memory", label);
    goto done;
  }
  for (int i = 0; i < 3; i++) {
    attn_fill_random(x[i], cnt[i], seed * 4 + (unsigned long long)i);
    if (i == 2 && lowrank)
      for (size_t j = 0; j < cnt[2]; j++) x[2][j] += 0.5f; /* cpu_shapes' V of mean 0.5 */
    attn_round_dtype(p.dtype, x[i], cnt[i]);
  }
  attn_reference(&p, x[0], x[1], x[2], ref);
  const size_t offs[3] = {0, es, 16};
  attn_io io0 = {0, 0};
  for (int oi = 0; oi < 3; oi++) {
    for (int i = 0; i < 4; i++) base[i] = (unsigned char *)raw[i] + offs[oi];
    for (int i = 0; i < 3; i++) attn_to_dtype(p.dtype, x[i], cnt[i], base[i]);
    memset(base[3], 0xff, cnt[3] * es); /* NaN in every dtype: an entry never written is caught */
    attn_kargs a = {.q = base[0], .k = base[1], .v = base[2], .o = base[3], .batch = p.batch, .heads = p.heads,
                    .heads_kv = p.heads_kv, .n = p.n, .n_kv = p.n_kv, .scale = p.scale};
    attn_io io = {0, 0};
    const unsigned long long m0 = *k->misses;
    if (kern_run(k, &a, &io) != 0) {
      CHECK(0, "%s: out of memory for scratch", label);
      break;
    }
    const unsigned long long miss = *k->misses - m0;
    attn_from_dtype(p.dtype, base[3], cnt[3], x[3]);
    const double err = attn_rel_error(ref, x[3], cnt[3]);
    CHECK(err <= tol, "%s %s +%zu bytes: relative error %.3g > %g", label, shape(&p), offs[oi], err, tol);
    if (oi == 0) {
      memcpy(first, base[3], cnt[3] * es);
      io0 = io;
    } else {
      CHECK(memcmp(first, base[3], cnt[3] * es) == 0, "%s %s +%zu bytes: output differs from the aligned run's",
            label, shape(&p), offs[oi]);
      CHECK(io.reads == io0.reads && io.writes == io0.writes,
            "%s %s +%zu bytes: moved %llu/%llu entries, aligned %llu/%llu", label, shape(&p), offs[oi], io.reads,
            io.writes, io0.reads, io0.writes);
    }
    if (sh->staged)
      CHECK(miss == 0, "%s %s +%zu bytes: %llu accesses off alignment in the hot loops", label, shape(&p),
            offs[oi], miss);
    printf("%s %-4s %-64s +%-2zu err %.2e misses %llu%s\n", err <= tol ? "ok  " : "FAIL", "", shape(&p), offs[oi],
           err, miss, sh->staged ? "" : " (reads in place)");
  }
done:
  for (int i = 0; i < 4; i++) {
    free(x[i]);
    free(raw[i]);
  }
  free(first);
  free(ref);
}

int main(int argc, char **argv) {
  const int f32 = argc == 2 && !strcmp(argv[1], "f32"), half = argc == 2 && !strcmp(argv[1], "half"),
            all = argc == 2 && !strcmp(argv[1], "half_all");
  if (!f32 && !half && !all) {
    fprintf(stderr, "usage: cpu_align f32|half|half_all\n");
    return 2;
  }
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CPU, &rt);
  if (rc != ATTN_OK) {
    fprintf(stderr, "attn_open: %s: %s\n", attn_strerror(rc), attn_last_error(NULL));
    return 1;
  }
  /* Lane kernels: two query blocks (the second partial) and packed rows (4 query heads on one KV head, 12 rows);
   * decode (one row per item): flash's dot kernels, which read K and V in place. */
  static const shape_t shapes[] = {
      {1, 2, 2, 100, 130, 1}, {1, 4, 1, 3, 70, 1}, {2, 2, 1, 1, 200, 0}, {1, 1, 1, 1, 150, 0}};
  typedef struct { attn_algo algo; attn_dtype dt; int split; } kcase;
  kcase ks[6];
  int nk = 0;
  if (f32) {
    ks[nk++] = (kcase){ATTN_ALGO_FLASH, ATTN_F32, 0};
    ks[nk++] = (kcase){ATTN_ALGO_SMALLCACHE, ATTN_F32, 0};
    ks[nk++] = (kcase){ATTN_ALGO_LOWRANK, ATTN_F32, 0};
  } else if (half) {
    ks[nk++] = (kcase){ATTN_ALGO_SMALLCACHE, ATTN_F16, 0};
    ks[nk++] = (kcase){ATTN_ALGO_LOWRANK, ATTN_BF16, 0};
  } else {
    ks[nk++] = (kcase){ATTN_ALGO_FLASH, ATTN_F16, 0};
    ks[nk++] = (kcase){ATTN_ALGO_FLASH, ATTN_BF16, 2};
    ks[nk++] = (kcase){ATTN_ALGO_SMALLCACHE, ATTN_BF16, 0};
    ks[nk++] = (kcase){ATTN_ALGO_LOWRANK, ATTN_F16, 0};
  }
  const unsigned long long seed = test_seed();
  for (int i = 0; i < nk; i++) {
    attn_spec s = attn_spec_default(ks[i].algo, ATTN_TARGET_CPU, ks[i].dt, 64, 1);
    s.split = ks[i].split;
    char label[256];
    attn_spec_summary(&s, label, sizeof label);
    kern k;
    if (kern_load(rt, &s, label, &k) == 0) {
      const double tol = ks[i].algo == ATTN_ALGO_LOWRANK ? 0.1 : ks[i].dt == ATTN_F32 ? TOL : 1e-2;
      printf("%s\n", label);
      for (size_t j = 0; j < sizeof shapes / sizeof shapes[0]; j++) {
        shape_t sh = shapes[j];
        sh.staged = sh.staged || ks[i].algo != ATTN_ALGO_FLASH;
        run_shape(&k, &s, label, &sh, tol, seed * 31 + (unsigned long long)(i * 8) + j);
      }
    }
    kern_unload(&k);
  }
  attn_close(rt);
  printf("cpu_align %s: %d checks, %d failed\n", argv[1], checks, failures);
  return failures ? 1 : 0;
}
