/* cuda_backward: the CUDA flash backward outside the interpreter, no GPU needed.
 *   cuda_backward compile ARCH DTYPE:D[/DV][@BRxBCwWsS],... ...
 *       the backward of each (dtype, d, d_v) listed, causal alternating, through NVRTC to a cubin for ARCH (the
 *       runtime's path): no errors, no local-memory spills of attn_kernel or attn_bwd_pre, shared memory within the
 *       arch's per-block limit
 *   cuda_backward fake
 *       through libattn on tests/fake_libcuda.c (ATTN_LIBCUDA, FAKE_LIBCUDA): attn_plan_create_backward on CUDA
 *       makes a backward plan (compiled, loaded, both entries found) that attn_execute and attn_execute_lse refuse;
 *       attn_execute_backward launches attn_bwd_pre and attn_kernel and waits, its scratch freed after the wait;
 *       the same with the device's memory refused (alloc=2): ATTN_ENOMEM and nothing launched; q not 16-byte
 *       aligned: ATTN_EINVAL and nothing launched; with a database holding a bwd row for the problem (model, Br = 32,
 *       Bc = 16, 2 warps) and a forward row of other tiles, the backward plan runs the bwd row's tiles; given specs
 *       beyond shared memory or the registers are refused naming which (attn_plan_create_backward_spec)
 *   cuda_backward gpu
 *       on a GPU (label gpu): the forward plan's attn_execute_lse then the backward plan's attn_execute_backward on
 *       fresh random inputs (f16, bf16, f32; n = 1, odd n, n_kv != n both ways, GQA, d_v != d, causal both ways):
 *       lse against fp64's, dQ, dK and dV against the fp64 backward of the kernel's O (tests/bwd_util.h's limits),
 *       the gradients written (poisoned before) and bitwise the same in a second run; then the time of the forward
 *       and of the backward at n = 4096, d = 128, 8 heads, f16 and bf16, causal and not: medians of 9 runs each
 *       timed by CUDA events (attn_cuda_run, attn_cuda_run_backward_timed; printed, not checked)
 * Exit 77 (skipped) without NVRTC, or (gpu) without a device, with the reason. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "fake_libcuda.h"
#include "internal.h"
#include "kernel_abi_cuda.h"
#include "kernel_abi_cuda_bwd.h"
#include "spec_bwd_cuda.h"
#include "bwd_util.h"
#include "db.h"
#include <math.h>
#include <unistd.h>
#include <time.h>

static int compiled;

static long long smem_limit(const char *arch) { return strncmp(arch, "sm_8", 4) == 0 ? 163 * 1024 : 227 * 1024; }

/* tiles: NULL for attn_spec_backward_cuda's; else "BRxBCwWsS": that spec, compiled whether attn_spec_check_backward_cuda
 * admits it or not (what it admits must not spill; what it refuses is compiled to show why) */
static void compile_one(const char *arch, attn_dtype t, int d, int dv, int causal, const char *tiles) {
  attn_spec s;
  char err[512], label[256];
  snprintf(label, sizeof label, "backward %s %s d=%d d_v=%d causal=%d", arch, attn_dtype_name(t), d, dv, causal);
  int rc = attn_spec_backward_cuda(t, d, dv, causal, arch, &s, err, sizeof err);
  int admitted = 1;
  if (rc == ATTN_OK && tiles) {
    if (sscanf(tiles, "%dx%dw%ds%d", &s.br, &s.bc, &s.warps, &s.stages) != 4) {
      CHECK(0, "%s: tiles '%s' are not BRxBCwWsS", label, tiles);
      return;
    }
    admitted = attn_spec_check_backward_cuda(&s, smem_limit(arch), err, sizeof err) == ATTN_OK;
    if (!admitted) printf("%s %s: refused: %s\n", label, tiles, err);
    if (attn_spec_backward_cuda_smem(&s) > smem_limit(arch)) return;
  }
  CHECK(rc == ATTN_OK, "%s: %s", label, err);
  if (rc != ATTN_OK) return;
  char *src = attn_spec_source_backward_cuda(&s, err, sizeof err);
  CHECK(src != NULL, "%s: %s", label, err);
  if (!src) return;
  void *cubin = NULL;
  size_t len = 0;
  char *log = NULL;
  rc = attn_nvrtc_compile(src, "attn_bwd.cu", arch, &cubin, &len, &log);
  compiled++;
  CHECK(rc == ATTN_OK, "%s: NVRTC: %s\n%s", label, attn_strerror(rc), log ? log : "");
  if (rc == ATTN_OK) {
    const char *entries[2] = {"attn_kernel", "attn_bwd_pre"};
    for (int e = 0; e < 2; e++) {
      attn_cuda_resources r;
      if (attn_nvrtc_resources(log, entries[e], &r) != 0) {
        CHECK(0, "%s: no ptxas report for %s", label, entries[e]);
        continue;
      }
      const long long smem = (e == 0 ? attn_spec_backward_cuda_smem(&s) : 0) + r.smem_static;
      CHECK(!admitted || (!r.spill_stores && !r.spill_loads && !r.stack),
            "%s: %s spills (%ld bytes stores, %ld loads, %ld stack)", label, entries[e], r.spill_stores, r.spill_loads,
            r.stack);
      CHECK(smem <= smem_limit(arch), "%s: %lld bytes of shared memory, the %s limit is %lld", label, smem, arch,
            smem_limit(arch));
      printf("%s Br=%d Bc=%d warps=%d stages=%d%s %s: %d registers, %lld bytes smem, spills %ld/%ld, stack %ld\n",
             label, s.br, s.bc, s.warps, s.stages, admitted ? "" : " (refused)", entries[e], r.registers, smem,
             r.spill_stores, r.spill_loads, r.stack);
    }
  }
  free(src);
  free(cubin);
  free(log);
}

static int compile_mode(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: cuda_backward compile ARCH DTYPE:D[/DV][@BRxBCwWsS],... ...\n");
    return 2;
  }
  const char *arch = argv[0];
  int causal = 0;
  for (int i = 1; i < argc; i++) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", argv[i]);
    char *colon = strchr(buf, ':');
    const int t = colon ? (*colon = '\0', attn_dtype_parse(buf)) : -1;
    if (t < 0) {
      fprintf(stderr, "cuda_backward: %s is not DTYPE:D[/DV],...\n", argv[i]);
      return 2;
    }
    for (char *tok = strtok(colon + 1, ","); tok; tok = strtok(NULL, ",")) {
      const int d = atoi(tok);
      char *at = strchr(tok, '@');
      if (at) *at++ = '\0';
      const char *slash = strchr(tok, '/');
      compile_one(arch, (attn_dtype)t, d, slash ? atoi(slash + 1) : d, causal, at);
      causal ^= 1;
    }
  }
  CHECK(compiled > 0, "nothing was compiled");
  return 0;
}

/* A stored bwd row for p on the fake device (rt's) with tiles br x bc, warps, stages: served by
 * attn_plan_create_backward; a forward row of other tiles is not; and given specs that do not fit are refused
 * naming what does not fit. dir: a writable directory. */
static void tuned_mode_case(const attn_problem *p, const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/cuda-backward-tuned.db", dir);
  unlink(path);
  attn_runtime *rt = NULL;
  if (attn_open(NULL, ATTN_TARGET_CUDA, &rt) != ATTN_OK) {
    CHECK(0, "attn_open on the fake driver: %s", attn_last_error(NULL));
    return;
  }
  char device[256], err[512];
  snprintf(device, sizeof device, "%s", rt->device);
  attn_spec s;
  CHECK(attn_spec_backward_cuda(p->dtype, p->d, p->d_v, p->causal, "sm_80", &s, err, sizeof err) == ATTN_OK, "%s",
        err);
  /* the default is Br = Bc: the row's tiles differ from it and from the forward row's */
  attn_spec fw = s, bw = s;
  fw.br = 64, fw.bc = 64, fw.warps = 4, fw.stages = 2;
  /* Br = 16 over 8 warps: a backward tile the forward's rules refuse, so the row is read by the backward's */
  bw.br = 16, bw.bc = 32, bw.warps = 8, bw.stages = 1;
  CHECK(bw.br != s.br || bw.bc != s.bc, "the default already has the row's tiles");
  char fspec[512], bspec[512];
  attn_spec_format(&fw, fspec, sizeof fspec);
  attn_spec_format(&bw, bspec, sizeof bspec);
  attn_spec parsed;
  CHECK(attn_spec_parse(bspec, &parsed, err, sizeof err) != ATTN_OK &&
            attn_spec_parse_fields(bspec, &parsed, err, sizeof err) == ATTN_OK &&
            attn_spec_check_backward_cuda(&parsed, 163 * 1024, err, sizeof err) == ATTN_OK,
        "the row's tiles should be the backward's only: %s", bspec);
  attn_db *db = NULL;
  int rc = attn_db_open(path, 1, &db, err, sizeof err);
  CHECK(rc == ATTN_OK, "%s: %s", path, err);
  for (int pass = 0; rc == ATTN_OK && pass < 2; pass++) {
    attn_db_meas m;
    memset(&m, 0, sizeof m);
    m.device = device;
    m.spec = pass ? bspec : fspec;
    m.n = p->n, m.n_kv = p->n_kv, m.d = p->d, m.d_v = p->d_v, m.batch = p->batch, m.heads = p->heads;
    m.heads_kv = p->heads_kv, m.causal = p->causal, m.dtype = p->dtype;
    m.time_ms = 1.0;
    m.reads = m.writes = -1;
    m.status = "ok";
    m.provenance = "model";
    m.pass = pass ? "bwd" : "fwd";
    CHECK(attn_db_meas_put(db, &m) == ATTN_OK, "put: %s", attn_db_errmsg(db));
  }
  attn_db_close(db);
  attn_close(rt);
  rt = NULL;
  if (attn_open(path, ATTN_TARGET_CUDA, &rt) != ATTN_OK) {
    CHECK(0, "attn_open %s on the fake driver: %s", path, attn_last_error(NULL));
    return;
  }
  attn_plan *plan = NULL;
  rc = attn_plan_create_backward(rt, p, &plan);
  CHECK(rc == ATTN_OK, "attn_plan_create_backward with a bwd row: %s", attn_last_error(rt));
  if (rc == ATTN_OK) {
    const char *desc = attn_plan_describe(plan);
    printf("tuned plan: %s\n", desc);
    CHECK(strstr(desc, "Br=16 Bc=32") && strstr(desc, "warps=8") && strstr(desc, "backward (model)"),
          "the stored bwd row (Br=16 Bc=32 warps=8) is not what the plan runs: %s", desc);
  }
  attn_plan_destroy(plan);
  /* given specs that do not fit: shared memory (d = 576 at 128 x 128), registers (64 x 64 with 2 warps at d = 128) */
  attn_problem big = *p;
  big.d = big.d_v = 576;
  attn_spec g = bw;
  g.d = 576, g.dv = 0, g.br = 128, g.bc = 128, g.warps = 8;
  plan = NULL;
  rc = attn_plan_create_backward_spec(rt, &big, &g, 0, "given", &plan);
  CHECK(rc == ATTN_EUNSUPPORTED && !plan && strstr(attn_last_error(rt), "shared memory"),
        "a spec beyond shared memory: %s: %s", attn_strerror(rc), attn_last_error(rt));
  attn_plan_destroy(plan);
  big.d = big.d_v = 128;
  g.d = 128, g.br = 64, g.bc = 64, g.warps = 2, g.stages = 1;
  plan = NULL;
  rc = attn_plan_create_backward_spec(rt, &big, &g, 0, "given", &plan);
  CHECK(rc == ATTN_EUNSUPPORTED && !plan && strstr(attn_last_error(rt), "accumulators"),
        "a spec beyond the registers: %s: %s", attn_strerror(rc), attn_last_error(rt));
  attn_plan_destroy(plan);
  g.warps = 8; /* the same tiles over 8 warps fit (not compiled here: NVRTC takes seconds at d = 128) */
  CHECK(attn_spec_check_backward_cuda(&g, 163 * 1024, err, sizeof err) == ATTN_OK, "64 x 64 over 8 warps: %s", err);
  attn_close(rt);
  unlink(path);
}

static fake_cuda_record_fn fake_record(void) {
  void *h = dlopen(getenv("ATTN_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
  return h ? (fake_cuda_record_fn)dlsym(h, "fake_cuda_record") : NULL;
}

static int fake_mode(void) {
  const attn_problem p = {.batch = 1, .heads = 4, .heads_kv = 2, .n = 33, .n_kv = 17, .d = 16, .d_v = 24,
                          .dtype = ATTN_F16, .causal = 1};
  for (int refuse = 0; refuse < 2; refuse++) {
    if (setenv("FAKE_LIBCUDA", refuse ? "alloc=2" : "", 1) != 0) return 1;
    attn_runtime *rt = NULL;
    int rc = attn_open(NULL, ATTN_TARGET_CUDA, &rt);
    CHECK(rc == ATTN_OK, "attn_open on the fake driver: %s", attn_last_error(NULL));
    if (rc != ATTN_OK) return 1;
    attn_plan *plan = NULL;
    rc = attn_plan_create_backward(rt, &p, &plan);
    CHECK(rc == ATTN_OK && plan, "attn_plan_create_backward on CUDA: %s: %s", attn_strerror(rc),
          attn_last_error(rt));
    if (rc == ATTN_OK) {
      const char *desc = attn_plan_describe(plan);
      CHECK(strstr(desc, "backward") && strstr(desc, "cuda"), "describe: %s", desc);
      printf("plan: %s\n", desc);
      /* device memory is host memory in the fake driver; nothing is computed */
      const size_t nq = 4 * 33 * 16, nk = 2 * 17 * 16, nv = 2 * 17 * 24, no = 4 * 33 * 24;
      unsigned short *buf = calloc(2 * (nq + nk + nv + 2 * no) + 2 * (nq + nk + nv), 2);
      float *lse = calloc(4 * 33, sizeof(float));
      CHECK(buf && lse, "out of memory");
      if (buf && lse) {
        unsigned short *q = buf, *k = q + nq, *v = k + nk, *o = v + nv, *dout = o + no, *dq = dout + no,
                       *dk = dq + nq, *dv = dk + nk;
        fake_cuda_record_fn record = fake_record();
        CHECK(record != NULL, "the fake driver's record is not reachable");
        fake_cuda_calls calls;
        if (record) record(&calls, 1);
        rc = attn_execute_backward(plan, q, k, v, o, lse, dout, dq, dk, dv);
        if (record) record(&calls, 0);
        if (!refuse) {
          CHECK(rc == ATTN_OK, "attn_execute_backward: %s", attn_last_error(rt));
          CHECK(record && calls.launches == 2 && calls.stream_syncs >= 1 && calls.pending == 0 &&
                    calls.freed_in_use == 0,
                "attn_execute_backward: %d launches, %d waits, %d pending, %d freed in use (want 2, >= 1, 0, 0)",
                calls.launches, calls.stream_syncs, calls.pending, calls.freed_in_use);
        } else {
          CHECK(rc == ATTN_ENOMEM && strstr(attn_last_error(rt), "scratch"),
                "attn_execute_backward without device memory: %s: %s", attn_strerror(rc), attn_last_error(rt));
          CHECK(record && calls.launches == 0, "attn_execute_backward without memory launched %d kernels",
                calls.launches);
        }
        if (record) record(&calls, 1);
        rc = attn_execute_backward(plan, q + 1, k, v, o, lse, dout, dq, dk, dv);
        if (record) record(&calls, 0);
        CHECK(rc == ATTN_EINVAL && strstr(attn_last_error(rt), "16-byte") && record && calls.launches == 0,
              "attn_execute_backward with q misaligned: %s: %s", attn_strerror(rc), attn_last_error(rt));
        rc = attn_execute(plan, q, k, v, o);
        CHECK(rc == ATTN_EINVAL, "attn_execute of a backward plan: %s", attn_strerror(rc));
        rc = attn_execute_lse(plan, q, k, v, o, lse);
        CHECK(rc == ATTN_EINVAL, "attn_execute_lse of a backward plan: %s", attn_strerror(rc));
      }
      free(buf);
      free(lse);
    }
    attn_plan_destroy(plan);
    attn_close(rt);
  }
  if (setenv("FAKE_LIBCUDA", "", 1) != 0) return 1;
  const char *dir = getenv("TMPDIR");
  tuned_mode_case(&p, dir && *dir ? dir : "/tmp");
  return 0;
}

/* gpu mode's times: the median of TIME_REPS runs timed by CUDA events, after the checked runs (the warm-up) */
#define TIME_REPS 9
static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Device copies of count floats in dtype t (NULL count: poisoned, all bits set); NULL when it fails. */
static void *dev_of(attn_runtime *rt, attn_dtype t, const float *x, size_t count) {
  const size_t es = attn_dtype_size(t);
  unsigned char *h = malloc(count * es + 1);
  void *d = NULL;
  if (h) {
    if (x) attn_to_dtype(t, x, count, h);
    else memset(h, 0xff, count * es);
    if (attn_cuda_alloc(rt, count * es, &d) != ATTN_OK || attn_cuda_copy(rt, d, h, count * es, 1) != ATTN_OK) {
      attn_cuda_free(rt, d);
      d = NULL;
    }
  }
  free(h);
  return d;
}

/* count entries of device dtype t to doubles; returns the ones never written (all bits set), or -1 */
static long host_of(attn_runtime *rt, attn_dtype t, const void *d, size_t count, double *x, unsigned char *raw) {
  const size_t es = attn_dtype_size(t);
  if (attn_cuda_copy(rt, raw, d, count * es, 0) != ATTN_OK) return -1;
  long unwritten = 0;
  for (size_t i = 0; i < count; i++) {
    unsigned u = 0;
    memcpy(&u, raw + i * es, es);
    unwritten += es == 4 ? u == 0xffffffffu : u == 0xffffu;
    float f;
    attn_from_dtype(t, raw + i * es, 1, &f);
    x[i] = f;
  }
  return unwritten;
}

/* One problem on the device: forward with lse, backward twice; checks as the usage says. time: print the times. */
static void gpu_case(attn_runtime *rt, const attn_problem *p0, int time_it) {
  attn_problem p = *p0;
  char what[256];
  snprintf(what, sizeof what, "%s batch=%d heads=%d/%d n=%d n_kv=%d d=%d d_v=%d causal=%d", attn_dtype_name(p.dtype),
           p.batch, p.heads, p.heads_kv, p.n, p.n_kv, p.d, p.d_v, p.causal);
  attn_plan *fwd = NULL, *bwd = NULL;
  int rc = attn_plan_create(rt, &p, &fwd);
  CHECK(rc == ATTN_OK, "%s: attn_plan_create: %s", what, attn_last_error(rt));
  if (rc == ATTN_OK) rc = attn_plan_create_backward(rt, &p, &bwd);
  CHECK(rc == ATTN_OK, "%s: attn_plan_create_backward: %s", what, attn_last_error(rt));
  if (rc != ATTN_OK) {
    attn_plan_destroy(fwd);
    return;
  }
  p = fwd->p; /* normalised: heads_kv, n_kv, d_v, scale */
  const size_t bh = (size_t)p.batch * p.heads, bhk = (size_t)p.batch * p.heads_kv, rows = bh * p.n;
  const size_t cq = bh * p.n * p.d, ck = bhk * p.n_kv * p.d, cv = bhk * p.n_kv * p.d_v, co = bh * p.n * p.d_v;
  float *q = malloc(cq * 4), *k = malloc(ck * 4), *v = malloc(cv * 4), *go = malloc(co * 4), *o = malloc(co * 4);
  float *lse = malloc(rows * 4), *want = malloc(rows * 4);
  double *x[3] = {malloc(cq * 8), malloc(ck * 8), malloc(cv * 8)};
  double *r[3] = {malloc(cq * 8), malloc(ck * 8), malloc(cv * 8)};
  double *o64 = malloc(co * 8);
  unsigned char *raw = malloc((cq + ck + cv + co) * 4), *first = malloc((cq + ck + cv) * 4);
  void *dq = NULL, *dk = NULL, *dv = NULL, *dgo = NULL, *dout = NULL, *dlse = NULL, *g[3] = {NULL, NULL, NULL};
  if (!q || !k || !v || !go || !o || !lse || !want || !x[0] || !x[1] || !x[2] || !r[0] || !r[1] || !r[2] || !o64 ||
      !raw || !first) {
    CHECK(0, "%s: out of memory", what);
    goto out;
  }
  const unsigned long long seed = test_seed() + (unsigned long long)p.n * 7 + (unsigned long long)p.d;
  attn_fill_random(q, cq, seed + 1), attn_fill_random(k, ck, seed + 2), attn_fill_random(v, cv, seed + 3);
  attn_fill_random(go, co, seed + 4);
  round_to(p.dtype, q, cq), round_to(p.dtype, k, ck), round_to(p.dtype, v, cv), round_to(p.dtype, go, co);
  dq = dev_of(rt, p.dtype, q, cq), dk = dev_of(rt, p.dtype, k, ck), dv = dev_of(rt, p.dtype, v, cv);
  dgo = dev_of(rt, p.dtype, go, co), dout = dev_of(rt, p.dtype, NULL, co);
  dlse = dev_of(rt, ATTN_F32, NULL, rows);
  for (int i = 0; i < 3; i++) g[i] = dev_of(rt, p.dtype, NULL, i == 0 ? cq : i == 1 ? ck : cv);
  if (!dq || !dk || !dv || !dgo || !dout || !dlse || !g[0] || !g[1] || !g[2]) {
    CHECK(0, "%s: device memory: %s", what, attn_last_error(rt));
    goto out;
  }
  rc = attn_execute_lse(fwd, dq, dk, dv, dout, dlse);
  CHECK(rc == ATTN_OK, "%s: attn_execute_lse: %s", what, attn_last_error(rt));
  if (rc != ATTN_OK) goto out;
  const size_t c3[3] = {cq, ck, cv};
  for (int rep = 0; rep < 2; rep++) {
    rc = attn_execute_backward(bwd, dq, dk, dv, dout, dlse, dgo, g[0], g[1], g[2]);
    CHECK(rc == ATTN_OK, "%s: attn_execute_backward: %s", what, attn_last_error(rt));
    if (rc != ATTN_OK) goto out;
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
      const size_t bytes = c3[i] * attn_dtype_size(p.dtype);
      const long un = host_of(rt, p.dtype, g[i], c3[i], x[i], raw);
      CHECK(un == 0, "%s: %ld entries of gradient %d never written", what, un, i);
      if (rep == 0) memcpy(first + off, raw, bytes);
      else CHECK(!memcmp(first + off, raw, bytes), "%s: gradient %d differs bitwise in a second run", what, i);
      off += bytes;
    }
  }
  if (time_it) { /* too large for the fp64 reference: the times, by CUDA events (the device's, no host wake-up) */
    double fms[TIME_REPS], bms[TIME_REPS];
    for (int i = 0; i < TIME_REPS && rc == ATTN_OK; i++) {
      rc = attn_cuda_run(rt, fwd->cuda, &fwd->p, dq, dk, dv, dout, NULL, &fms[i]);
      if (rc == ATTN_OK)
        rc = attn_cuda_run_backward_timed(rt, bwd->cuda, &bwd->p, dq, dk, dv, dout, dlse, dgo, g[0], g[1], g[2],
                                          &bms[i]);
    }
    CHECK(rc == ATTN_OK, "%s: timed runs: %s", what, attn_last_error(rt));
    if (rc != ATTN_OK) goto out;
    qsort(fms, TIME_REPS, sizeof fms[0], cmp_double);
    qsort(bms, TIME_REPS, sizeof bms[0], cmp_double);
    printf("time %s: forward %.3f ms, backward %.3f ms (CUDA events, medians of %d; backward range %.3f..%.3f)\n",
           what, fms[TIME_REPS / 2], bms[TIME_REPS / 2], TIME_REPS, bms[0], bms[TIME_REPS - 1]);
    goto out;
  }
  /* the kernel's O and lse, as a training step hands them over */
  if (host_of(rt, p.dtype, dout, co, o64, raw) != 0 || attn_cuda_copy(rt, lse, dlse, rows * 4, 0) != ATTN_OK) {
    CHECK(0, "%s: the forward's outputs: %s", what, attn_last_error(rt));
    goto out;
  }
  for (size_t i = 0; i < co; i++) o[i] = (float)o64[i];
  ref_lse(&p, q, k, want);
  const double ltol = 16 * 0x1p-24 * (1.0 + fabs((double)p.scale) * sqrt((double)p.d));
  for (size_t i = 0; i < rows; i++) {
    const int same_inf = isinf(want[i]) || isinf(lse[i]) ? want[i] == lse[i] : 1;
    const double e = isinf(want[i]) ? 0 : fabs((double)lse[i] - want[i]) / (1.0 + fabs((double)want[i]));
    if (!same_inf || !(e <= ltol)) {
      CHECK(0, "%s: lse of row %zu is %.9g, fp64's %.9g", what, i, (double)lse[i], (double)want[i]);
      break;
    }
  }
  attn_reference_backward(&p, q, k, v, o, go, r[0], r[1], r[2]);
  double mag[3];
  magnitudes(&p, q, k, v, o, go, want, mag);
  const double lim = limit_of(&p);
  static const char *const names[3] = {"dq", "dk", "dv"};
  for (int i = 0; i < 3; i++) {
    const double e = rel_err(x[i], r[i], c3[i], mag[i]);
    CHECK(e <= lim, "%s: %s error %.3g > %.3g", what, names[i], e, lim);
    printf("%s: %s error %.3g (%.2f u)\n", what, names[i], e, e / unit_roundoff(p.dtype));
  }
out:
  attn_cuda_free(rt, dq), attn_cuda_free(rt, dk), attn_cuda_free(rt, dv), attn_cuda_free(rt, dgo);
  attn_cuda_free(rt, dout), attn_cuda_free(rt, dlse);
  for (int i = 0; i < 3; i++) attn_cuda_free(rt, g[i]), free(x[i]), free(r[i]);
  free(q), free(k), free(v), free(go), free(o), free(lse), free(want), free(o64), free(raw), free(first);
  attn_plan_destroy(fwd);
  attn_plan_destroy(bwd);
}

static int gpu_mode(void) {
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CUDA, &rt);
  if (rc == ATTN_ENODEV) {
    printf("SKIP: %s\n", attn_last_error(NULL));
    return 77;
  }
  CHECK(rc == ATTN_OK, "attn_open(cuda): %s", attn_last_error(NULL));
  if (rc != ATTN_OK) return 1;
  static const attn_problem shapes[] = {
      {.batch = 1, .heads = 1, .n = 1, .n_kv = 1, .d = 64},
      {.batch = 1, .heads = 2, .heads_kv = 1, .n = 37, .n_kv = 29, .d = 64, .causal = 1},
      {.batch = 2, .heads = 2, .n = 19, .n_kv = 83, .d = 59, .d_v = 37, .scale = 0.37f, .causal = 1},
      {.batch = 1, .heads = 4, .heads_kv = 2, .n = 257, .n_kv = 255, .d = 128},
      {.batch = 1, .heads = 3, .heads_kv = 1, .n = 130, .n_kv = 200, .d = 192, .d_v = 128, .causal = 1},
      {.batch = 1, .heads = 2, .n = 70, .n_kv = 33, .d = 576, .d_v = 512, .causal = 1},
  };
  for (int t = 0; t < 3; t++)
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
      attn_problem p = shapes[i];
      p.dtype = t == 0 ? ATTN_F16 : t == 1 ? ATTN_BF16 : ATTN_F32;
      gpu_case(rt, &p, 0);
    }
  for (int t = 0; t < 2; t++)
    for (int causal = 0; causal < 2; causal++) {
      attn_problem p = {.batch = 1, .heads = 8, .n = 4096, .d = 128, .causal = causal,
                        .dtype = t == 0 ? ATTN_F16 : ATTN_BF16};
      gpu_case(rt, &p, 1);
    }
  attn_close(rt);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2 || (strcmp(argv[1], "compile") && strcmp(argv[1], "fake") && strcmp(argv[1], "gpu"))) {
    fprintf(stderr, "usage: cuda_backward compile ARCH DTYPE:D[/DV][@BRxBCwWsS],... ...\n       cuda_backward fake\n"
                    "       cuda_backward gpu\n");
    return 2;
  }
  int maj = 0, min = 0;
  char why[512];
  if (attn_nvrtc_version(&maj, &min, why, sizeof why) != ATTN_OK) {
    printf("SKIP: %s\n", why);
    return 77;
  }
  const int rc = !strcmp(argv[1], "compile") ? compile_mode(argc - 2, argv + 2)
                 : !strcmp(argv[1], "fake")  ? fake_mode()
                                             : gpu_mode();
  if (rc == 2 || rc == 77) return rc;
  printf("cuda_backward: %d checks, %d failures\n", checks, failures);
  return failures || rc ? 1 : 0;
}
