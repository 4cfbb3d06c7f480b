/* gpukit_check: the CUDA code scripts/gpu/validate.sh checks first on a GPU, one mode a step (label gpu as well):
 *   gpukit_check sm90       the sm_90a template (templates/flash_sm90.cu, impl=wgmma) through attn_execute against
 *                           fp64 on fresh random inputs: n = 1, odd n, n not a multiple of a block, n_kv != n both
 *                           ways (rows that see no key), GQA, d_v != d, d = 64/128/256, causal both ways, f16 and
 *                           bf16; poisoned outputs (an entry never written fails)
 *   gpukit_check sm90-time  its time against the mma.sync flash's default (templates/flash.cu) at bf16 d = 128,
 *                           n = 4096 and 8192, 16k tokens of 16 heads, causal both ways (CUDA events, the median of
 *                           10 launches), the two outputs within 1e-2 of each other
 *   gpukit_check bwd        the CUDA backward's variants (Br, Bc apart, warps, stages, dQ by fp32 atomics: spec
 *                           dq=atomic; what attn_spec_check_backward_cuda refuses on this device is printed, not run)
 *                           against the fp64 backward (tests/bwd_util.h's limits), then each variant's time beside
 *                           the forward's at bf16 d = 128 n = 4096, 4 x 16 heads, causal both ways (CUDA events
 *                           around the launches on the default stream: attn_cuda_run's, attn_cuda_run_backward_timed's;
 *                           the median of 5 after one warm-up)
 *   gpukit_check serve      attn_execute_varlen and attn_execute_paged against fp64 sequence by sequence (lengths 0,
 *                           1, odd, no keys, GQA, causal, pages shuffled); then paged decode against dense decode of
 *                           the same keys at bf16 d = 128, 8 sequences of 8192 keys, 32/8 heads: outputs within 1e-2,
 *                           times (CUDA events around each call's async form on the default stream, the median of 10
 *                           after one warm-up) and KV bandwidth
 *   gpukit_check decode     dense decode (n = 1) at f16 and bf16, d = 128 (and 64 at n_kv = 4096), n_kv = 4096 and
 *                           32768, batch/heads/heads_kv 1/32/8, 8/32/8, 1/16/16, causal both ways: the default plan
 *                           (GQA-packed where it applies), split-KV S = 4 and 16 (what attn_spec_check refuses is
 *                           printed, not run) and the S the tuner's model picks, each against fp64 on the host,
 *                           against the default plan's output, and the same bits on a second run; times by CUDA
 *                           events on a stream (median of 20 after 3 warm-ups) and the DRAM bandwidth of K and V once
 *                           per KV head plus Q and O, as a fraction of tuner/gpus.json's for the device; then
 *                           attn_execute_paged_async on a non-default stream with the host block table overwritten
 *                           right after the call: the same bits as attn_execute_paged
 * Each case is printed ("case ...") before its kernels are compiled and "run" before its first launch, so that a run
 * killed by its time limit names the case, and whether it hung on the device or was still compiling.
 * Figures: one line "RESULT {json}" each (validate.sh gathers them); a time's "method" is "events" (CUDA events on the
 * stream the work is queued on, never the host's clock). Exit 0 ok, 1 a failure, 2 usage, 77 no CUDA device (sm90
 * modes: a device that is not sm_90), with the reason. */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "internal.h"
#include "bwd_util.h"
#include "spec_bwd_cuda.h"
#include "spec_sm90.h"
#include "gpus.h"
#include "model.h"

static attn_runtime *rt;
static attn_cuda_info_t info;

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *x, int n) {
  qsort(x, (size_t)n, sizeof *x, cmp_double);
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* x as a JSON number in fmt, or null when it is not finite (a failed run, a wrong output) */
#define JN(x, fmt) jnum((char[32]){0}, (x), (fmt))
static const char *jnum(char *b, double x, const char *fmt) {
  if (isfinite(x))
    snprintf(b, 32, fmt, x);
  else
    snprintf(b, 32, "null");
  return b;
}

/* Device copy of count floats in dtype t (x NULL: poisoned, all bits set); NULL when it fails. */
static void *dev_of(attn_dtype t, const float *x, size_t count) {
  const size_t es = attn_dtype_size(t);
  unsigned char *h = malloc(count * es + 1);
  void *d = NULL;
  if (h) {
    if (x)
      attn_to_dtype(t, x, count, h);
    else
      memset(h, 0xff, count * es);
    if (attn_cuda_alloc(rt, count * es + 16, &d) != ATTN_OK || attn_cuda_copy(rt, d, h, count * es, 1) != ATTN_OK) {
      attn_cuda_free(rt, d);
      d = NULL;
    }
  }
  free(h);
  return d;
}

/* count entries of device dtype t to floats; the number never written (all bits set), or -1 */
static long host_of(attn_dtype t, const void *d, size_t count, float *x) {
  const size_t es = attn_dtype_size(t);
  unsigned char *raw = malloc(count * es + 1);
  if (!raw || attn_cuda_copy(rt, raw, d, count * es, 0) != ATTN_OK) {
    free(raw);
    return -1;
  }
  long unwritten = 0;
  for (size_t i = 0; i < count; i++) {
    unsigned u = 0;
    memcpy(&u, raw + i * es, es);
    unwritten += es == 4 ? u == 0xffffffffu : u == 0xffffu;
  }
  attn_from_dtype(t, raw, count, x);
  free(raw);
  return unwritten;
}

static float *random_of(size_t count, attn_dtype t, unsigned long long seed) {
  float *x = malloc(count * sizeof *x + 1);
  if (x) {
    attn_fill_random(x, count, seed);
    attn_round_dtype(t, x, count);
  }
  return x;
}

static const char *what_of(const attn_problem *p, char *buf, size_t len) {
  snprintf(buf, len, "%s batch=%d heads=%d/%d n=%d n_kv=%d d=%d d_v=%d causal=%d", attn_dtype_name(p->dtype), p->batch,
           p->heads, p->heads_kv ? p->heads_kv : p->heads, p->n, p->n_kv ? p->n_kv : p->n, p->d, p->d_v ? p->d_v : p->d,
           p->causal);
  return buf;
}

static double tflops(const attn_problem *p, double ms) {
  const double f = 2.0 * p->batch * p->heads * (double)p->n * p->n_kv * (p->d + p->d_v) * (p->causal ? 0.5 : 1.0);
  return ms > 0 ? f / (ms * 1e-3) / 1e12 : NAN;
}

/* ---- sm90: the wgmma template against fp64 */
static int sm90_spec(const attn_problem *p, attn_spec *s) {
  char err[256] = "";
  *s = attn_spec_default_sm90(p->dtype, p->d, p->causal);
  s->dv = p->d_v;
  int rc = attn_spec_fit_sm90(s, err, sizeof err);
  if (rc == ATTN_OK) rc = attn_spec_check(s, err, sizeof err);
  CHECK(rc == ATTN_OK, "no sm_90a spec for d=%d d_v=%d: %s", p->d, p->d_v, err);
  return rc;
}

static void sm90_case(attn_problem p0) {
  attn_problem p;
  char what[256];
  if (attn_problem_normalize(rt, &p0, &p) != ATTN_OK) {
    CHECK(0, "%s: %s", what_of(&p0, what, sizeof what), attn_last_error(rt));
    return;
  }
  what_of(&p, what, sizeof what);
  printf("case sm90 %s\n", what);
  attn_spec s;
  if (sm90_spec(&p, &s) != ATTN_OK) return;
  const size_t cq = (size_t)p.batch * p.heads * p.n * p.d, ck = (size_t)p.batch * p.heads_kv * p.n_kv * p.d;
  const size_t cv = (size_t)p.batch * p.heads_kv * p.n_kv * p.d_v, co = (size_t)p.batch * p.heads * p.n * p.d_v;
  const unsigned long long seed = test_seed() + 31ull * (unsigned long long)p.n + (unsigned long long)p.d;
  float *q = random_of(cq, p.dtype, seed + 1), *k = random_of(ck, p.dtype, seed + 2);
  float *v = random_of(cv, p.dtype, seed + 3), *o = malloc(co * sizeof *o + 1);
  double *ref = malloc(co * sizeof *ref + 1);
  attn_plan *plan = NULL;
  void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL;
  if (!q || !k || !v || !o || !ref) {
    CHECK(0, "%s: out of host memory", what);
    goto out;
  }
  dq = dev_of(p.dtype, q, cq), dk = dev_of(p.dtype, k, ck), dv = dev_of(p.dtype, v, cv);
  dout = dev_of(p.dtype, NULL, co);
  if (!dq || !dk || !dv || !dout) {
    CHECK(0, "%s: device memory: %s", what, attn_last_error(rt));
    goto out;
  }
  int rc = attn_plan_create_spec(rt, &p, &s, 0, "gpukit", &plan);
  CHECK(rc == ATTN_OK, "%s: plan of the sm_90a spec: %s", what, attn_last_error(rt));
  if (rc != ATTN_OK) goto out;
  puts("run");
  rc = attn_execute(plan, dq, dk, dv, dout);
  CHECK(rc == ATTN_OK, "%s [%s]: attn_execute: %s", what, attn_plan_describe(plan), attn_last_error(rt));
  if (rc != ATTN_OK) goto out;
  const long un = host_of(p.dtype, dout, co, o);
  CHECK(un == 0, "%s: %ld of %zu outputs never written", what, un, co);
  attn_reference(&p, q, k, v, ref);
  const double e = attn_rel_error(ref, o, co);
  CHECK(e <= 1e-2, "%s [%s]: relative error %.3e against fp64 > 1e-2", what, attn_plan_describe(plan), e);
  printf("RESULT {\"kind\": \"sm90_correct\", \"case\": \"%s\", \"plan\": \"%s\", \"err_fp64\": %s, \"ok\": %s}\n",
         what, attn_plan_describe(plan), JN(e, "%.3e"), un == 0 && e <= 1e-2 ? "true" : "false");
out:
  attn_plan_destroy(plan);
  attn_cuda_free(rt, dq), attn_cuda_free(rt, dk), attn_cuda_free(rt, dv), attn_cuda_free(rt, dout);
  free(q), free(k), free(v), free(o), free(ref);
}

static int is_sm90(void) {
  if (strcmp(info.arch, "sm_90") == 0 || strcmp(info.arch, "sm_90a") == 0) return 1;
  printf("SKIP: the sm_90a template needs an sm_90 device (H100, H200); this one is %s (%s)\n", info.arch, info.name);
  return 0;
}

static int sm90_mode(void) {
  if (!is_sm90()) return 77;
  static const attn_problem shapes[] = {
      {.batch = 1, .heads = 1, .n = 1, .n_kv = 1, .d = 64, .dtype = ATTN_F16},
      {.batch = 1, .heads = 2, .n = 200, .d = 128, .dtype = ATTN_BF16, .causal = 1},
      {.batch = 2, .heads = 4, .heads_kv = 2, .n = 333, .n_kv = 517, .d = 128, .dtype = ATTN_BF16, .causal = 1},
      {.batch = 1, .heads = 3, .heads_kv = 1, .n = 517, .n_kv = 333, .d = 128, .dtype = ATTN_F16, .causal = 1},
      {.batch = 1, .heads = 2, .n = 300, .n_kv = 129, .d = 256, .dtype = ATTN_F16},
      {.batch = 1, .heads = 2, .n = 255, .n_kv = 255, .d = 256, .dtype = ATTN_BF16, .causal = 1},
      {.batch = 1, .heads = 2, .n = 1024, .d = 64, .dtype = ATTN_BF16},
      {.batch = 1, .heads = 2, .n = 130, .n_kv = 250, .d = 72, .d_v = 40, .dtype = ATTN_F16, .causal = 1},
      {.batch = 1, .heads = 2, .n = 190, .d = 256, .d_v = 128, .dtype = ATTN_BF16},
      {.batch = 1, .heads = 4, .heads_kv = 1, .n = 2048, .d = 128, .dtype = ATTN_BF16, .causal = 1},
  };
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) sm90_case(shapes[i]);
  return 0;
}

/* Kernel time by CUDA events (attn_cuda_run's ms), the median of reps after one warm-up. */
static double kernel_ms(const attn_cuda_kernel *k, const attn_problem *p, void *q, void *kk, void *v, void *o,
                        int reps) {
  double t[16], ms = 0;
  if (attn_cuda_run(rt, k, p, q, kk, v, o, NULL, NULL) != ATTN_OK) return NAN;
  for (int r = 0; r < reps; r++) {
    if (attn_cuda_run(rt, k, p, q, kk, v, o, NULL, &ms) != ATTN_OK) return NAN;
    t[r] = ms;
  }
  return median(t, reps);
}

static int sm90_time_mode(void) {
  if (!is_sm90()) return 77;
  for (int n = 4096; n <= 8192; n *= 2)
    for (int causal = 0; causal < 2; causal++) {
      attn_problem p0 = {.batch = 16384 / n, .heads = 16, .n = n, .d = 128, .dtype = ATTN_BF16, .causal = causal}, p;
      char what[256];
      if (attn_problem_normalize(rt, &p0, &p) != ATTN_OK) return 1;
      what_of(&p, what, sizeof what);
      printf("case sm90-time %s\n", what);
      attn_spec sw, sf;
      if (sm90_spec(&p, &sw) != ATTN_OK) continue;
      attn_plan_default(rt, &p, ATTN_ALGO_FLASH, &sf);
      snprintf(sf.arch, sizeof sf.arch, "%s", info.arch);
      const size_t cq = (size_t)p.batch * p.heads * p.n * p.d, co = cq;
      float *q = random_of(cq, p.dtype, test_seed() + 1), *k = random_of(cq, p.dtype, test_seed() + 2);
      float *v = random_of(cq, p.dtype, test_seed() + 3), *ow = malloc(co * 4 + 1), *of = malloc(co * 4 + 1);
      void *dq = q ? dev_of(p.dtype, q, cq) : NULL, *dk = k ? dev_of(p.dtype, k, cq) : NULL;
      void *dv = v ? dev_of(p.dtype, v, cq) : NULL, *dow = dev_of(p.dtype, NULL, co), *dof = dev_of(p.dtype, NULL, co);
      attn_cuda_kernel *kw = NULL, *kf = NULL;
      int rc = dq && dk && dv && dow && dof && ow && of ? ATTN_OK : ATTN_ENOMEM;
      CHECK(rc == ATTN_OK, "%s: memory: %s", what, attn_last_error(rt));
      if (rc == ATTN_OK) {
        rc = attn_cuda_load(rt, &sw, 0, &kw);
        CHECK(rc == ATTN_OK, "%s: loading the sm_90a kernel: %s", what, attn_last_error(rt));
      }
      if (rc == ATTN_OK) {
        rc = attn_cuda_load(rt, &sf, 0, &kf);
        CHECK(rc == ATTN_OK, "%s: loading the mma.sync flash kernel: %s", what, attn_last_error(rt));
      }
      if (rc == ATTN_OK) {
        puts("run");
        const double mw = kernel_ms(kw, &p, dq, dk, dv, dow, 10), mf = kernel_ms(kf, &p, dq, dk, dv, dof, 10);
        CHECK(mw > 0 && mf > 0, "%s: a timed run failed: %s", what, attn_last_error(rt));
        const long uw = host_of(p.dtype, dow, co, ow), uf = host_of(p.dtype, dof, co, of);
        double e2 = 0, r2 = 0;
        for (size_t i = 0; i < co; i++)
          e2 += ((double)ow[i] - of[i]) * ((double)ow[i] - of[i]), r2 += (double)of[i] * of[i];
        const double e = r2 > 0 ? sqrt(e2 / r2) : INFINITY;
        CHECK(uw == 0 && uf == 0 && e <= 1e-2,
              "%s: the sm_90a output is %.3e from the mma.sync one (%ld, %ld unwritten)", what, e, uw, uf);
        char fs[256];
        attn_spec_format(&sf, fs, sizeof fs);
        printf(
            "RESULT {\"kind\": \"sm90_time\", \"dtype\": \"bf16\", \"batch\": %d, \"heads\": %d, \"n\": %d, \"d\": %d, "
            "\"causal\": %d, \"wgmma_ms\": %s, \"wgmma_tflops\": %s, \"mma_sync_ms\": %s, "
            "\"mma_sync_tflops\": %s, \"speedup\": %s, \"err_vs_mma_sync\": %s, \"mma_sync_spec\": \"%s\", "
            "\"method\": \"events\"}\n",
            p.batch, p.heads, p.n, p.d, p.causal, JN(mw, "%.4f"), JN(tflops(&p, mw), "%.1f"), JN(mf, "%.4f"),
            JN(tflops(&p, mf), "%.1f"), JN(mw > 0 ? mf / mw : NAN, "%.3f"), JN(e, "%.3e"), fs);
      }
      attn_cuda_unload(kw), attn_cuda_unload(kf);
      attn_cuda_free(rt, dq), attn_cuda_free(rt, dk), attn_cuda_free(rt, dv), attn_cuda_free(rt, dow);
      attn_cuda_free(rt, dof);
      free(q), free(k), free(v), free(ow), free(of);
    }
  return 0;
}

/* ---- bwd: the backward's tile variants */
/* BRxBCwWARPSsSTAGES, "+atomic": dQ summed by fp32 atomics (spec dq=atomic) */
static const char *const variants[] = {"default",           "default+atomic", "64x64w4s2", "128x64w8s1", "64x128w8s1",
                                       "128x64w8s1+atomic", "128x128w8s1",    "32x64w4s1", "64x32w4s2",  "32x32w2s1"};
#define NVARIANTS (int)(sizeof variants / sizeof variants[0])

/* The variant's spec for p on this device; 0, or -1 when refused (printed) */
static int bwd_spec(const attn_problem *p, const char *tiles, attn_spec *s, const char *what) {
  char err[512] = "";
  int rc = attn_spec_backward_cuda(p->dtype, p->d, p->d_v, p->causal, info.arch, s, err, sizeof err);
  CHECK(rc == ATTN_OK, "%s: no backward spec: %s", what, err);
  if (rc != ATTN_OK) return -1;
  s->dq = strstr(tiles, "+atomic") != NULL;
  if (strncmp(tiles, "default", 7) != 0 && sscanf(tiles, "%dx%dw%ds%d", &s->br, &s->bc, &s->warps, &s->stages) != 4) {
    CHECK(0, "variant %s is not BRxBCwWsS[+atomic]", tiles);
    return -1;
  }
  if (attn_spec_check_backward_cuda(s, info.smem_optin, err, sizeof err) != ATTN_OK) {
    printf("refused %s %s: %s\n", what, tiles, err);
    return -1;
  }
  return 0;
}

static void bwd_case(attn_problem p0, const char *tiles) {
  attn_problem p;
  char what[256];
  if (attn_problem_normalize(rt, &p0, &p) != ATTN_OK) return;
  what_of(&p, what, sizeof what);
  attn_spec s;
  if (bwd_spec(&p, tiles, &s, what) != 0) return;
  printf("case bwd %s tiles=%s\n", what, tiles);
  const size_t bh = (size_t)p.batch * p.heads, rows = bh * p.n;
  const size_t cq = bh * p.n * p.d, ck = (size_t)p.batch * p.heads_kv * p.n_kv * p.d;
  const size_t cv = (size_t)p.batch * p.heads_kv * p.n_kv * p.d_v, co = bh * p.n * p.d_v, c3[3] = {cq, ck, cv};
  const unsigned long long seed = test_seed() + 7ull * (unsigned long long)p.n + (unsigned long long)p.d;
  float *q = random_of(cq, p.dtype, seed + 1), *k = random_of(ck, p.dtype, seed + 2);
  float *v = random_of(cv, p.dtype, seed + 3), *go = random_of(co, p.dtype, seed + 4);
  float *o = malloc(co * 4 + 1), *lse = malloc(rows * 4 + 1), *want = malloc(rows * 4 + 1);
  float *g[3] = {malloc(cq * 4 + 1), malloc(ck * 4 + 1), malloc(cv * 4 + 1)};
  double *x[3] = {malloc(cq * 8 + 1), malloc(ck * 8 + 1), malloc(cv * 8 + 1)};
  double *r[3] = {malloc(cq * 8 + 1), malloc(ck * 8 + 1), malloc(cv * 8 + 1)};
  void *dq = NULL, *dk = NULL, *dv = NULL, *dgo = NULL, *dout = NULL, *dlse = NULL, *dg[3] = {NULL, NULL, NULL};
  attn_plan *fwd = NULL, *bwd = NULL;
  int ok = q && k && v && go && o && lse && want;
  for (int i = 0; i < 3; i++) ok = ok && g[i] && x[i] && r[i];
  if (!ok) {
    CHECK(0, "%s: out of host memory", what);
    goto out;
  }
  dq = dev_of(p.dtype, q, cq), dk = dev_of(p.dtype, k, ck), dv = dev_of(p.dtype, v, cv), dgo = dev_of(p.dtype, go, co);
  dout = dev_of(p.dtype, NULL, co), dlse = dev_of(ATTN_F32, NULL, rows);
  for (int i = 0; i < 3; i++) dg[i] = dev_of(p.dtype, NULL, c3[i]);
  if (!dq || !dk || !dv || !dgo || !dout || !dlse || !dg[0] || !dg[1] || !dg[2]) {
    CHECK(0, "%s: device memory: %s", what, attn_last_error(rt));
    goto out;
  }
  int rc = attn_plan_create(rt, &p, &fwd);
  if (rc == ATTN_OK) rc = attn_plan_create_backward_spec(rt, &p, &s, 0, "gpukit", &bwd);
  CHECK(rc == ATTN_OK, "%s tiles=%s: plans: %s", what, tiles, attn_last_error(rt));
  if (rc != ATTN_OK) goto out;
  puts("run");
  rc = attn_execute_lse(fwd, dq, dk, dv, dout, dlse);
  if (rc == ATTN_OK) rc = attn_execute_backward(bwd, dq, dk, dv, dout, dlse, dgo, dg[0], dg[1], dg[2]);
  CHECK(rc == ATTN_OK, "%s [%s]: %s", what, attn_plan_describe(bwd), attn_last_error(rt));
  if (rc != ATTN_OK) goto out;
  long un = host_of(p.dtype, dout, co, o);
  if (un != 0 || attn_cuda_copy(rt, lse, dlse, rows * 4, 0) != ATTN_OK) {
    CHECK(0, "%s: the forward's outputs (%ld unwritten)", what, un);
    goto out;
  }
  attn_reference_backward(&p, q, k, v, o, go, r[0], r[1], r[2]);
  ref_lse(&p, q, k, want);
  double mag[3], worst = 0;
  magnitudes(&p, q, k, v, o, go, want, mag);
  const double lim = limit_of(&p);
  static const char *const names[3] = {"dq", "dk", "dv"};
  for (int i = 0; i < 3; i++) {
    un = host_of(p.dtype, dg[i], c3[i], g[i]);
    CHECK(un == 0, "%s tiles=%s: %ld entries of %s never written", what, tiles, un, names[i]);
    for (size_t j = 0; j < c3[i]; j++) x[i][j] = g[i][j];
    const double e = rel_err(x[i], r[i], c3[i], mag[i]);
    CHECK(e <= lim, "%s [%s]: %s error %.3g > %.3g", what, attn_plan_describe(bwd), names[i], e, lim);
    if (!(e <= worst)) worst = e;
  }
  printf(
      "RESULT {\"kind\": \"bwd_correct\", \"case\": \"%s\", \"tiles\": \"%s\", \"plan\": \"%s\", \"err\": %s, "
      "\"limit\": %s, \"ok\": %s}\n",
      what, tiles, attn_plan_describe(bwd), JN(worst, "%.3e"), JN(lim, "%.3e"), worst <= lim ? "true" : "false");
out:
  attn_plan_destroy(fwd), attn_plan_destroy(bwd);
  attn_cuda_free(rt, dq), attn_cuda_free(rt, dk), attn_cuda_free(rt, dv), attn_cuda_free(rt, dgo);
  attn_cuda_free(rt, dout), attn_cuda_free(rt, dlse);
  for (int i = 0; i < 3; i++) attn_cuda_free(rt, dg[i]), free(g[i]), free(x[i]), free(r[i]);
  free(q), free(k), free(v), free(go), free(o), free(lse), free(want);
}

static void bwd_time(int causal) {
  attn_problem p0 = {.batch = 4, .heads = 16, .n = 4096, .d = 128, .dtype = ATTN_BF16, .causal = causal}, p;
  char what[256];
  if (attn_problem_normalize(rt, &p0, &p) != ATTN_OK) return;
  what_of(&p, what, sizeof what);
  const size_t c = (size_t)p.batch * p.heads * p.n * p.d, rows = (size_t)p.batch * p.heads * p.n;
  float *h = random_of(c, p.dtype, test_seed() + 9);
  void *d[8] = {NULL};
  attn_plan *fwd = NULL;
  int ok = h != NULL;
  for (int i = 0; i < 8 && ok; i++) ok = (d[i] = i == 4 ? dev_of(ATTN_F32, NULL, rows) : dev_of(p.dtype, h, c)) != NULL;
  CHECK(ok, "%s: memory: %s", what, attn_last_error(rt));
  if (ok) ok = attn_plan_create(rt, &p, &fwd) == ATTN_OK;
  CHECK(ok, "%s: forward plan: %s", what, attn_last_error(rt));
  double fwd_ms = NAN, t[5];
  if (ok) {
    printf("case bwd-time %s forward\nrun\n", what);
    /* q k v o=d[3] lse=d[4] dout=d[0] (any values) dq..dv=d[5..7]; the warm-up writes lse, the timed launches (the
     * plan's kernel by CUDA events, as the tuner times it) only o */
    ok = attn_execute_lse(fwd, d[0], d[1], d[2], d[3], d[4]) == ATTN_OK;
    for (int r = 0; r < 5 && ok; r++)
      ok = attn_cuda_run(rt, fwd->cuda, &fwd->p, d[0], d[1], d[2], d[3], NULL, &t[r]) == ATTN_OK;
    CHECK(ok, "%s: forward: %s", what, attn_last_error(rt));
    if (ok) fwd_ms = median(t, 5);
    printf(
        "RESULT {\"kind\": \"bwd_time\", \"pass\": \"fwd\", \"case\": \"%s\", \"plan\": \"%s\", \"ms\": %s, "
        "\"tflops\": %s, \"method\": \"events\"}\n",
        what, attn_plan_describe(fwd), JN(fwd_ms, "%.4f"), JN(tflops(&p, fwd_ms), "%.1f"));
  }
  for (int vi = 0; vi < NVARIANTS && ok; vi++) {
    attn_spec s;
    if (bwd_spec(&p, variants[vi], &s, what) != 0) continue;
    printf("case bwd-time %s tiles=%s\n", what, variants[vi]);
    attn_plan *bwd = NULL;
    int rc = attn_plan_create_backward_spec(rt, &p, &s, 0, "gpukit", &bwd);
    if (rc == ATTN_OK) puts("run");
    if (rc == ATTN_OK) rc = attn_execute_backward(bwd, d[0], d[1], d[2], d[3], d[4], d[0], d[5], d[6], d[7]);
    /* its launches (pre, kernel, post) between CUDA events on the default stream */
    for (int r = 0; r < 5 && rc == ATTN_OK; r++)
      rc = attn_cuda_run_backward_timed(rt, bwd->cuda, &bwd->p, d[0], d[1], d[2], d[3], d[4], d[0], d[5], d[6], d[7],
                                        &t[r]);
    CHECK(rc == ATTN_OK, "%s tiles=%s: backward: %s", what, variants[vi], attn_last_error(rt));
    if (rc == ATTN_OK) {
      const double ms = median(t, 5);
      /* the backward's useful work: 2.5 times the forward's products (dQ, dK, dV, dP, and S again) */
      printf(
          "RESULT {\"kind\": \"bwd_time\", \"pass\": \"bwd\", \"case\": \"%s\", \"tiles\": \"%s\", \"plan\": \"%s\", "
          "\"ms\": %s, \"tflops\": %s, \"bwd_over_fwd\": %s, \"method\": \"events\"}\n",
          what, variants[vi], attn_plan_describe(bwd), JN(ms, "%.4f"), JN(2.5 * tflops(&p, ms), "%.1f"),
          JN(fwd_ms > 0 ? ms / fwd_ms : NAN, "%.3f"));
    }
    attn_plan_destroy(bwd);
  }
  attn_plan_destroy(fwd);
  for (int i = 0; i < 8; i++) attn_cuda_free(rt, d[i]);
  free(h);
}

static int bwd_mode(void) {
  static const attn_problem shapes[] = {
      {.batch = 1, .heads = 4, .heads_kv = 2, .n = 257, .n_kv = 255, .d = 128, .dtype = ATTN_BF16},
      {.batch = 1, .heads = 3, .heads_kv = 1, .n = 130, .n_kv = 200, .d = 64, .dtype = ATTN_F16, .causal = 1},
      {.batch = 2, .heads = 2, .n = 19, .n_kv = 83, .d = 59, .d_v = 37, .dtype = ATTN_F32, .causal = 1},
      {.batch = 1, .heads = 1, .n = 1, .n_kv = 1, .d = 128, .dtype = ATTN_BF16, .causal = 1},
  };
  for (int vi = 0; vi < NVARIANTS; vi++)
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) bwd_case(shapes[i], variants[vi]);
  bwd_time(0);
  bwd_time(1);
  return 0;
}

/* ---- serve: varlen and paged against fp64 per sequence; paged decode against dense decode */
/* rows [r0, r0 + len) of a packed [rows][heads][d] array into a dense [heads][len][d] one */
static void unpack(const float *packed, int r0, int len, int heads, int d, float *dense) {
  for (int h = 0; h < heads; h++)
    for (int i = 0; i < len; i++)
      memcpy(dense + ((size_t)h * len + i) * d, packed + ((size_t)(r0 + i) * heads + h) * d, (size_t)d * 4);
}

/* o (one sequence's [heads][n][dv] rows) against fp64 of (q, k, v) dense; a sequence with no key: zero rows */
static void check_seq(const char *what, int b, attn_problem sp, const float *q, const float *k, const float *v,
                      const float *o, double *worst) {
  const size_t co = (size_t)sp.heads * sp.n * sp.d_v;
  if (sp.n == 0) return;
  if (sp.n_kv == 0) {
    for (size_t i = 0; i < co; i++)
      if (o[i] != 0) {
        CHECK(0, "%s: sequence %d has no key, but row entry %zu is %g", what, b, i, (double)o[i]);
        return;
      }
    return;
  }
  double *ref = malloc(co * 8 + 1);
  if (!ref) return;
  sp.batch = 1;
  attn_reference(&sp, q, k, v, ref);
  const double e = attn_rel_error(ref, o, co);
  CHECK(e <= 1e-2, "%s: sequence %d (n=%d n_kv=%d): relative error %.3e > 1e-2", what, b, sp.n, sp.n_kv, e);
  if (!(e <= *worst)) *worst = e;
  free(ref);
}

static void varlen_case(attn_dtype t, int causal) {
  enum { B = 5, H = 4, HKV = 2, D = 128 };
  static const int lq[B] = {0, 1, 37, 200, 129}, lkv[B] = {5, 0, 37, 300, 129};
  int cq[B + 1] = {0}, ckv[B + 1] = {0}, mq = 0, mkv = 0;
  for (int b = 0; b < B; b++) {
    cq[b + 1] = cq[b] + lq[b], ckv[b + 1] = ckv[b] + lkv[b];
    mq = lq[b] > mq ? lq[b] : mq, mkv = lkv[b] > mkv ? lkv[b] : mkv;
  }
  attn_problem p0 = {.batch = B,
                     .heads = H,
                     .heads_kv = HKV,
                     .n = mq,
                     .n_kv = mkv,
                     .d = D,
                     .dtype = t,
                     .causal = causal,
                     .varlen = 1},
               p;
  char what[300], w0[256];
  if (attn_problem_normalize(rt, &p0, &p) != ATTN_OK) return;
  snprintf(what, sizeof what, "varlen %s", what_of(&p, w0, sizeof w0));
  printf("case serve %s\n", what);
  const size_t nq = (size_t)cq[B] * H * D, nk = (size_t)ckv[B] * HKV * D;
  float *q = random_of(nq, t, test_seed() + 21), *k = random_of(nk, t, test_seed() + 22);
  float *v = random_of(nk, t, test_seed() + 23), *o = malloc(nq * 4 + 1);
  float *sq = malloc((size_t)mq * H * D * 4 + 1), *sk = malloc((size_t)mkv * HKV * D * 4 + 1);
  float *sv = malloc((size_t)mkv * HKV * D * 4 + 1), *so = malloc((size_t)mq * H * D * 4 + 1);
  void *dq = q ? dev_of(t, q, nq) : NULL, *dk = k ? dev_of(t, k, nk) : NULL, *dv = v ? dev_of(t, v, nk) : NULL;
  void *dout = dev_of(t, NULL, nq);
  attn_plan *plan = NULL;
  if (!o || !sq || !sk || !sv || !so || !dq || !dk || !dv || !dout) {
    CHECK(0, "%s: memory", what);
    goto out;
  }
  int rc = attn_plan_create(rt, &p, &plan);
  if (rc == ATTN_OK) puts("run");
  if (rc == ATTN_OK) rc = attn_execute_varlen(plan, cq, ckv, dq, dk, dv, dout);
  CHECK(rc == ATTN_OK, "%s: %s", what, attn_last_error(rt));
  if (rc != ATTN_OK) goto out;
  const long un = host_of(t, dout, nq, o);
  CHECK(un == 0, "%s: %ld outputs never written", what, un);
  double worst = 0;
  for (int b = 0; b < B; b++) {
    attn_problem sp = p;
    sp.n = lq[b], sp.n_kv = lkv[b], sp.varlen = 0;
    unpack(q, cq[b], lq[b], H, D, sq), unpack(k, ckv[b], lkv[b], HKV, D, sk), unpack(v, ckv[b], lkv[b], HKV, D, sv);
    unpack(o, cq[b], lq[b], H, D, so);
    check_seq(what, b, sp, sq, sk, sv, so, &worst);
  }
  printf("RESULT {\"kind\": \"serve_correct\", \"case\": \"%s\", \"plan\": \"%s\", \"err_fp64\": %s}\n", what,
         attn_plan_describe(plan), JN(worst, "%.3e"));
out:
  attn_plan_destroy(plan);
  attn_cuda_free(rt, dq), attn_cuda_free(rt, dk), attn_cuda_free(rt, dv), attn_cuda_free(rt, dout);
  free(q), free(k), free(v), free(o), free(sq), free(sk), free(sv), free(so);
}

/* Pages of page_size keys in shuffled order: block_table[b][j] for sequence b's j-th page. The dense [B][HKV][nkv][d]
 * arrays k, v are scattered into k_pages, v_pages [pages][page_size][HKV][d]. */
static int make_pages(int B, int HKV, int nkv, int d, int ps, const int *lens, const float *k, const float *v,
                      float **kp, float **vp, int **table, int *num_pages, int *max_pages) {
  const int mp = (nkv + ps - 1) / ps;
  int total = 0;
  for (int b = 0; b < B; b++) total += (lens[b] + ps - 1) / ps;
  *table = calloc((size_t)B * mp + 1, sizeof **table);
  int *perm = malloc((size_t)total * sizeof *perm + 1);
  *kp = calloc((size_t)total * ps * HKV * d + 1, 4), *vp = calloc((size_t)total * ps * HKV * d + 1, 4);
  if (!*table || !perm || !*kp || !*vp) {
    free(perm);
    return -1;
  }
  for (int i = 0; i < total; i++) perm[i] = i;
  unsigned long long x = test_seed() * 6364136223846793005ull + 1;
  for (int i = total - 1; i > 0; i--) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const int j = (int)((x >> 33) % (unsigned long long)(i + 1)), tmp = perm[i];
    perm[i] = perm[j], perm[j] = tmp;
  }
  int next = 0;
  for (int b = 0; b < B; b++)
    for (int j = 0; j < (lens[b] + ps - 1) / ps; j++) {
      const int pg = perm[next++];
      (*table)[(size_t)b * mp + j] = pg;
      for (int r = 0; r < ps && j * ps + r < lens[b]; r++)
        for (int h = 0; h < HKV; h++) {
          const size_t src = (((size_t)b * HKV + h) * nkv + (size_t)j * ps + r) * d;
          const size_t dst = (((size_t)pg * ps + r) * HKV + h) * d;
          memcpy(*kp + dst, k + src, (size_t)d * 4), memcpy(*vp + dst, v + src, (size_t)d * 4);
        }
    }
  free(perm);
  *num_pages = total, *max_pages = mp;
  return 0;
}

static void paged_case(attn_dtype t, int n, int causal, int ps) {
  enum { B = 3, H = 8, HKV = 2, D = 128 };
  static const int lens[B] = {100, 1, 37};
  const int nkv = 112;
  attn_problem p0 = {.batch = B,
                     .heads = H,
                     .heads_kv = HKV,
                     .n = n,
                     .n_kv = nkv,
                     .d = D,
                     .dtype = t,
                     .causal = causal,
                     .page_size = ps},
               p;
  char what[300], w0[256];
  if (attn_problem_normalize(rt, &p0, &p) != ATTN_OK) return;
  snprintf(what, sizeof what, "paged page_size=%d %s", ps, what_of(&p, w0, sizeof w0));
  printf("case serve %s\n", what);
  const size_t nq = (size_t)B * H * n * D, nk = (size_t)B * HKV * nkv * D;
  float *q = random_of(nq, t, test_seed() + 31), *k = random_of(nk, t, test_seed() + 32);
  float *v = random_of(nk, t, test_seed() + 33), *o = malloc(nq * 4 + 1), *kp = NULL, *vp = NULL;
  float *sk = malloc((size_t)HKV * nkv * D * 4 + 1), *sv = malloc((size_t)HKV * nkv * D * 4 + 1);
  int *table = NULL, num_pages = 0, max_pages = 0;
  void *dq = NULL, *dkp = NULL, *dvp = NULL, *dout = NULL;
  attn_plan *plan = NULL;
  if (!q || !k || !v || !o || !sk || !sv ||
      make_pages(B, HKV, nkv, D, ps, lens, k, v, &kp, &vp, &table, &num_pages, &max_pages)) {
    CHECK(0, "%s: out of host memory", what);
    goto out;
  }
  const size_t np = (size_t)num_pages * ps * HKV * D;
  dq = dev_of(t, q, nq), dkp = dev_of(t, kp, np), dvp = dev_of(t, vp, np), dout = dev_of(t, NULL, nq);
  if (!dq || !dkp || !dvp || !dout) {
    CHECK(0, "%s: device memory: %s", what, attn_last_error(rt));
    goto out;
  }
  int rc = attn_plan_create(rt, &p, &plan);
  if (rc == ATTN_OK) puts("run");
  if (rc == ATTN_OK) rc = attn_execute_paged(plan, dq, dkp, dvp, num_pages, ps, table, max_pages, lens, dout);
  CHECK(rc == ATTN_OK, "%s: %s", what, attn_last_error(rt));
  if (rc != ATTN_OK) goto out;
  const long un = host_of(t, dout, nq, o);
  CHECK(un == 0, "%s: %ld outputs never written", what, un);
  double worst = 0;
  for (int b = 0; b < B; b++) {
    attn_problem sp = p;
    sp.n_kv = lens[b], sp.page_size = 0;
    for (int h = 0; h < HKV; h++) {
      memcpy(sk + (size_t)h * lens[b] * D, k + ((size_t)b * HKV + h) * nkv * D, (size_t)lens[b] * D * 4);
      memcpy(sv + (size_t)h * lens[b] * D, v + ((size_t)b * HKV + h) * nkv * D, (size_t)lens[b] * D * 4);
    }
    check_seq(what, b, sp, q + (size_t)b * H * n * D, sk, sv, o + (size_t)b * H * n * D, &worst);
  }
  printf("RESULT {\"kind\": \"serve_correct\", \"case\": \"%s\", \"plan\": \"%s\", \"err_fp64\": %s}\n", what,
         attn_plan_describe(plan), JN(worst, "%.3e"));
out:
  attn_plan_destroy(plan);
  attn_cuda_free(rt, dq), attn_cuda_free(rt, dkp), attn_cuda_free(rt, dvp), attn_cuda_free(rt, dout);
  free(q), free(k), free(v), free(o), free(kp), free(vp), free(sk), free(sv), free(table);
}

/* One call of decode_time: dense (page_size 0) or paged, in its async form on the stream attn_cuda_time_queued gives */
typedef struct decode_call {
  const attn_plan *plan;
  const void *q, *k, *v;
  void *o;
  int num_pages, page_size, max_pages;
  const int *table, *lens;
} decode_call;
static int queue_decode(void *user, void *stream) {
  const decode_call *c = user;
  return c->page_size ? attn_execute_paged_async(c->plan, stream, c->q, c->k, c->v, c->num_pages, c->page_size,
                                                 c->table, c->max_pages, c->lens, c->o)
                      : attn_execute_async(c->plan, stream, c->q, c->k, c->v, c->o);
}
/* its time by CUDA events on the default stream around its queueing (the paged call's table copy and launch), as the
 * tuner times a layout's call; NAN when it fails */
static double decode_call_ms(decode_call *c) {
  double ms = NAN;
  const char *what = c->page_size ? "attn_execute_paged_async" : "attn_execute_async";
  return attn_cuda_time_queued(rt, NULL, queue_decode, c, what, &ms) == ATTN_OK ? ms : NAN;
}

/* Paged decode against dense decode of the same keys: outputs, times (CUDA events around each call, the median of 10
 * after one warm-up), and the bandwidth of reading K and V once */
static void decode_time(int ps) {
  enum { B = 8, H = 32, HKV = 8, D = 128, NKV = 8192 };
  const attn_dtype t = ATTN_BF16;
  attn_problem pd0 = {.batch = B, .heads = H, .heads_kv = HKV, .n = 1, .n_kv = NKV, .d = D, .dtype = t}, pd, pp;
  attn_problem pp0 = pd0;
  pp0.page_size = ps;
  if (attn_problem_normalize(rt, &pd0, &pd) != ATTN_OK || attn_problem_normalize(rt, &pp0, &pp) != ATTN_OK) return;
  printf("case serve-time decode bf16 batch=%d heads=%d/%d n_kv=%d d=%d page_size=%d\n", B, H, HKV, NKV, D, ps);
  int lens[B];
  for (int b = 0; b < B; b++) lens[b] = NKV;
  const size_t nq = (size_t)B * H * D, nk = (size_t)B * HKV * NKV * D;
  float *q = random_of(nq, t, test_seed() + 41), *k = random_of(nk, t, test_seed() + 42);
  float *v = random_of(nk, t, test_seed() + 43), *od = malloc(nq * 4 + 1), *op = malloc(nq * 4 + 1);
  float *kp = NULL, *vp = NULL;
  int *table = NULL, num_pages = 0, max_pages = 0;
  void *dq = NULL, *dk = NULL, *dv = NULL, *dkp = NULL, *dvp = NULL, *dod = NULL, *dop = NULL;
  attn_plan *dense = NULL, *paged = NULL;
  if (!q || !k || !v || !od || !op ||
      make_pages(B, HKV, NKV, D, ps, lens, k, v, &kp, &vp, &table, &num_pages, &max_pages)) {
    CHECK(0, "decode page_size=%d: out of host memory", ps);
    goto out;
  }
  dq = dev_of(t, q, nq), dk = dev_of(t, k, nk), dv = dev_of(t, v, nk), dod = dev_of(t, NULL, nq);
  dop = dev_of(t, NULL, nq);
  free(k), free(v), k = v = NULL;
  dkp = dev_of(t, kp, nk), dvp = dev_of(t, vp, nk);
  if (!dq || !dk || !dv || !dod || !dop || !dkp || !dvp) {
    CHECK(0, "decode page_size=%d: device memory: %s", ps, attn_last_error(rt));
    goto out;
  }
  int rc = attn_plan_create(rt, &pd, &dense);
  if (rc == ATTN_OK) rc = attn_plan_create(rt, &pp, &paged);
  CHECK(rc == ATTN_OK, "decode plans: %s", attn_last_error(rt));
  if (rc != ATTN_OK) goto out;
  double td[10], tp[10];
  puts("run");
  rc = attn_execute(dense, dq, dk, dv, dod);
  if (rc == ATTN_OK) rc = attn_execute_paged(paged, dq, dkp, dvp, num_pages, ps, table, max_pages, lens, dop);
  decode_call cd = {.plan = dense, .q = dq, .k = dk, .v = dv, .o = dod};
  decode_call cp = {.plan = paged, .q = dq, .k = dkp, .v = dvp, .o = dop, .num_pages = num_pages, .page_size = ps,
                    .max_pages = max_pages, .table = table, .lens = lens};
  for (int r = 0; r < 10 && rc == ATTN_OK; r++) {
    td[r] = decode_call_ms(&cd);
    tp[r] = isnan(td[r]) ? NAN : decode_call_ms(&cp);
    if (isnan(tp[r])) rc = ATTN_ERUNTIME;
  }
  CHECK(rc == ATTN_OK, "decode page_size=%d: %s", ps, attn_last_error(rt));
  if (rc != ATTN_OK) goto out;
  const long ud = host_of(t, dod, nq, od), up = host_of(t, dop, nq, op);
  double e2 = 0, r2 = 0;
  for (size_t i = 0; i < nq; i++) e2 += ((double)op[i] - od[i]) * ((double)op[i] - od[i]), r2 += (double)od[i] * od[i];
  const double e = r2 > 0 ? sqrt(e2 / r2) : INFINITY;
  CHECK(ud == 0 && up == 0 && e <= 1e-2,
        "decode page_size=%d: paged output %.3e from the dense one (%ld, %ld unwritten)", ps, e, ud, up);
  const double md = median(td, 10), mp = median(tp, 10), bytes = 2.0 * (double)nk * attn_dtype_size(t);
  printf(
      "RESULT {\"kind\": \"decode_time\", \"page_size\": %d, \"batch\": %d, \"heads\": %d, \"heads_kv\": %d, "
      "\"n_kv\": %d, \"d\": %d, \"dense_ms\": %s, \"paged_ms\": %s, \"dense_gbs\": %s, \"paged_gbs\": %s, "
      "\"paged_over_dense\": %s, \"err_vs_dense\": %s, \"dense_plan\": \"%s\", \"paged_plan\": \"%s\", "
      "\"method\": \"events\"}\n",
      ps, B, H, HKV, NKV, D, JN(md, "%.4f"), JN(mp, "%.4f"), JN(bytes / (md * 1e-3) / 1e9, "%.0f"),
      JN(bytes / (mp * 1e-3) / 1e9, "%.0f"), JN(md > 0 ? mp / md : NAN, "%.3f"), JN(e, "%.3e"),
      attn_plan_describe(dense), attn_plan_describe(paged));
out:
  attn_plan_destroy(dense), attn_plan_destroy(paged);
  attn_cuda_free(rt, dq), attn_cuda_free(rt, dk), attn_cuda_free(rt, dv), attn_cuda_free(rt, dkp);
  attn_cuda_free(rt, dvp), attn_cuda_free(rt, dod), attn_cuda_free(rt, dop);
  free(q), free(k), free(v), free(od), free(op), free(kp), free(vp), free(table);
}

static int serve_mode(void) {
  varlen_case(ATTN_BF16, 1);
  varlen_case(ATTN_F16, 0);
  paged_case(ATTN_BF16, 1, 0, 16);
  paged_case(ATTN_F16, 5, 1, 7);
  paged_case(ATTN_BF16, 1, 0, 64);
  decode_time(16);
  decode_time(64);
  return 0;
}

/* ---- decode: dense decode's plans (default, split-KV, the model's pick) against fp64, each other and themselves */
/* The driver calls the timing and the async check need (streams, events), from the library the runtime opened. */
static struct {
  void *lib;
  int (*stream_create)(void **, unsigned);
  int (*stream_sync)(void *);
  int (*stream_destroy)(void *);
  int (*event_create)(void **, unsigned);
  int (*event_record)(void *, void *);
  int (*event_sync)(void *);
  int (*event_elapsed)(float *, void *, void *);
  int (*event_destroy)(void *);
} cu;

static int cu_load(void) {
  if (cu.lib) return 0;
  const char *name = getenv("ATTN_LIBCUDA");
  cu.lib = dlopen(name && *name ? name : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cu.lib) return -1;
#define SYM(f, s) (*(void **)&cu.f = dlsym(cu.lib, s)) != NULL
  /* streams optional: the fake driver (pack.sh --precompile runs this mode there) has none */
  if (!(SYM(stream_create, "cuStreamCreate")) || !(SYM(stream_destroy, "cuStreamDestroy_v2")))
    cu.stream_create = NULL, cu.stream_destroy = NULL;
  return SYM(stream_sync, "cuStreamSynchronize") && SYM(event_create, "cuEventCreate") &&
                 SYM(event_record, "cuEventRecord") && SYM(event_sync, "cuEventSynchronize") &&
                 SYM(event_elapsed, "cuEventElapsedTime") && SYM(event_destroy, "cuEventDestroy_v2")
             ? 0
             : -1;
#undef SYM
}

/* fp64 reference of a normalised dense problem, one thread per (batch, KV head) slice (the host has many cores and
 * the largest case is 8 x 8 slices of 32768 keys) */
typedef struct {
  const attn_problem *p;
  const float *q, *k, *v;
  double *o;
  int next;
  pthread_mutex_t mu;
} ref_job;

static void *ref_worker(void *arg) {
  ref_job *j = arg;
  const attn_problem *p = j->p;
  const int g = p->heads / p->heads_kv;
  for (;;) {
    pthread_mutex_lock(&j->mu);
    const int s = j->next++;
    pthread_mutex_unlock(&j->mu);
    if (s >= p->batch * p->heads_kv) return NULL;
    attn_problem sp = *p;
    sp.batch = 1, sp.heads = g, sp.heads_kv = 1;
    const size_t qs = (size_t)s * g * p->n, ks = (size_t)s * p->n_kv;
    attn_reference(&sp, j->q + qs * p->d, j->k + ks * p->d, j->v + ks * p->d_v, j->o + qs * p->d_v);
  }
}

static void reference_mt(const attn_problem *p, const float *q, const float *k, const float *v, double *o) {
  ref_job j = {.p = p, .q = q, .k = k, .v = v, .o = o};
  pthread_t th[32];
  int nt = 0;
  pthread_mutex_init(&j.mu, NULL);
  for (; nt < 32 && nt < p->batch * p->heads_kv; nt++)
    if (pthread_create(&th[nt], NULL, ref_worker, &j) != 0) break;
  ref_worker(&j);
  for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
  pthread_mutex_destroy(&j.mu);
}

/* raw device bytes of the output (for the same-bits checks) */
static unsigned char *raw_of(const void *d, size_t bytes) {
  unsigned char *h = malloc(bytes + 1);
  if (h && attn_cuda_copy(rt, h, d, bytes, 0) != ATTN_OK) {
    free(h);
    h = NULL;
  }
  return h;
}

/* ms by CUDA events around one attn_execute_async on stream (both launches of a split plan and its scratch); the
 * median of reps after 3 warm-ups; NAN when a call fails */
static double plan_ms(const attn_plan *plan, void *stream, const void *q, const void *k, const void *v, void *o,
                      int reps) {
  double t[32];
  void *e0 = NULL, *e1 = NULL;
  if (cu.event_create(&e0, 0) || cu.event_create(&e1, 0)) return NAN;
  int ok = 1;
  for (int r = -3; r < reps && ok; r++) {
    float ms = 0;
    ok = !cu.event_record(e0, stream) && attn_execute_async(plan, stream, q, k, v, o) == ATTN_OK &&
         !cu.event_record(e1, stream) && !cu.event_sync(e1) && !cu.event_elapsed(&ms, e0, e1);
    if (r >= 0) t[r] = ms;
  }
  cu.event_destroy(e0), cu.event_destroy(e1);
  return ok ? median(t, reps) : NAN;
}

static double rel_diff(const float *a, const float *b, size_t count) {
  double e2 = 0, r2 = 0;
  for (size_t i = 0; i < count; i++) e2 += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), r2 += (double)b[i] * b[i];
  return r2 > 0 ? sqrt(e2 / r2) : INFINITY;
}

static const attn_gpu *gpu; /* tuner/gpus.json's row for this device; NULL: unknown (no fraction, no model pick) */

/* The split the model picks for p with the default tiles: 0 (none) or S in 2..32 that attn_spec_check admits */
static int model_split(const attn_problem *p) {
  static const int cand[] = {0, 2, 3, 4, 6, 8, 12, 16, 24, 32};
  int best = -1;
  double bt = INFINITY;
  for (size_t i = 0; gpu && i < sizeof cand / sizeof cand[0]; i++) {
    char err[256];
    attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, p->dtype, p->d, p->causal);
    if (attn_spec_fit(&s, err, sizeof err) != ATTN_OK) return -1;
    s.split = cand[i];
    attn_model_result r;
    if (attn_spec_check(&s, err, sizeof err) != ATTN_OK || attn_model_time(gpu, p, &s, &r, err, sizeof err) != ATTN_OK)
      continue;
    if (r.time_ms < bt) bt = r.time_ms, best = cand[i];
  }
  return best;
}

/* One problem's plans on inputs already on the device (dq, dk, dv; q, k, v their host copies). */
static void decode_case(const attn_problem *p, void *stream, const float *q, const float *k, const float *v, void *dq,
                        void *dk, void *dv) {
  char what[256];
  what_of(p, what, sizeof what);
  printf("case decode %s\n", what);
  const size_t co = (size_t)p->batch * p->heads * p->n * p->d_v, es = attn_dtype_size(p->dtype);
  double *ref = malloc(co * sizeof *ref + 1);
  float *o = malloc(co * sizeof *o + 1), *o0 = malloc(co * sizeof *o0 + 1);
  void *dout = NULL;
  if (!ref || !o || !o0) {
    CHECK(0, "%s: memory: %s", what, attn_last_error(rt));
    goto out;
  }
  int have_ref = 0; /* made once an output is all written (not on the fake driver, where no kernel runs) */
  const int ms = model_split(p);
  const int splits[4] = {1, 4, 16, ms};
  int have0 = 0;
  for (int si = 0; si < 4; si++) {
    const int S = splits[si];
    if (si == 3 && (S < 0 || S == 4 || S == 16)) continue; /* none, or run above (model_split names it) */
    const char *label = si == 0 ? "default" : si == 3 ? "model" : "split";
    attn_plan *plan = NULL;
    int rc;
    if (si == 0) {
      rc = attn_plan_create(rt, p, &plan);
    } else {
      char err[256];
      attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, p->dtype, p->d, p->causal);
      rc = attn_spec_fit(&s, err, sizeof err);
      s.split = S;
      if (rc == ATTN_OK && attn_spec_check(&s, err, sizeof err) != ATTN_OK) {
        printf("refused %s %s split=%d: %s\n", what, label, S, err);
        continue;
      }
      CHECK(rc == ATTN_OK, "%s: no default flash spec: %s", what, err);
      if (rc == ATTN_OK) rc = attn_plan_create_spec(rt, p, &s, 0, "gpukit", &plan);
    }
    CHECK(rc == ATTN_OK, "%s %s split=%d: plan: %s", what, label, S, attn_last_error(rt));
    if (rc != ATTN_OK) continue;
    const char *desc = attn_plan_describe(plan);
    puts("run");
    unsigned char *b1 = NULL, *b2 = NULL;
    attn_cuda_free(rt, dout);
    dout = dev_of(p->dtype, NULL, co); /* poisoned before each plan's first run */
    rc = dout ? ATTN_OK : ATTN_ENOMEM;
    if (rc == ATTN_OK) rc = attn_execute(plan, dq, dk, dv, dout);
    CHECK(rc == ATTN_OK, "%s [%s]: attn_execute: %s", what, desc, dout ? attn_last_error(rt) : "no device memory");
    const long un = rc == ATTN_OK ? host_of(p->dtype, dout, co, o) : -1;
    if (rc == ATTN_OK) b1 = raw_of(dout, co * es);
    if (rc == ATTN_OK) rc = attn_execute(plan, dq, dk, dv, dout);
    if (rc == ATTN_OK) b2 = raw_of(dout, co * es);
    const int same = b1 && b2 && memcmp(b1, b2, co * es) == 0;
    if (un == 0 && !have_ref) reference_mt(p, q, k, v, ref), have_ref = 1;
    const double e = un == 0 ? attn_rel_error(ref, o, co) : INFINITY;
    double ed = NAN;
    if (si == 0 && un == 0) memcpy(o0, o, co * sizeof *o), have0 = 1;
    if (si > 0 && have0 && un == 0) ed = rel_diff(o, o0, co);
    CHECK(un == 0, "%s [%s]: %ld of %zu outputs never written", what, desc, un, co);
    CHECK(e <= 1e-2, "%s [%s]: relative error %.3e against fp64 > 1e-2", what, desc, e);
    CHECK(same, "%s [%s]: two runs differ in their bits", what, desc);
    CHECK(si == 0 || !have0 || ed <= 1e-2, "%s [%s]: %.3e from the default plan's output > 1e-2", what, desc, ed);
    const double t = rc == ATTN_OK ? plan_ms(plan, stream, dq, dk, dv, dout, 20) : NAN;
    CHECK(rc != ATTN_OK || t > 0, "%s [%s]: a timed run failed: %s", what, desc, attn_last_error(rt));
    const double bytes = ((double)p->batch * p->heads_kv * p->n_kv * (p->d + p->d_v) +
                          (double)p->batch * p->heads * p->n * (p->d + p->d_v)) * (double)es;
    const double gbs = bytes / (t * 1e-3) / 1e9;
    const double frac = gpu && gpu->bandwidth_tbs > 0 ? gbs / (gpu->bandwidth_tbs * 1e3) : NAN;
    printf("RESULT {\"kind\": \"decode\", \"dtype\": \"%s\", \"batch\": %d, \"heads\": %d, \"heads_kv\": %d, "
           "\"n_kv\": %d, \"d\": %d, \"causal\": %d, \"variant\": \"%s\", \"split\": %d, \"plan\": \"%s\", "
           "\"ms\": %s, \"gbs\": %s, \"bw_fraction\": %s, \"err_fp64\": %s, \"err_vs_default\": %s, "
           "\"model_split\": %d, \"same_bits\": %s, \"ok\": %s, \"method\": \"events\"}\n",
           attn_dtype_name(p->dtype), p->batch, p->heads, p->heads_kv, p->n_kv, p->d, p->causal, label,
           si == 0 ? 0 : S, desc, JN(t, "%.4f"), JN(gbs, "%.0f"), JN(frac, "%.3f"), JN(e, "%.3e"), JN(ed, "%.3e"),
           ms, same ? "true" : "false",
           un == 0 && e <= 1e-2 && same && (si == 0 || !have0 || ed <= 1e-2) ? "true" : "false");
    free(b1), free(b2);
    attn_plan_destroy(plan);
  }
out:
  attn_cuda_free(rt, dout);
  free(ref), free(o), free(o0);
}

static void decode_dtype(attn_dtype t, int d, int nkv, int B, int H, int HKV, void *stream, const float *q,
                         const float *k, const float *v);
/* count floats of x rounded to dtype t, in y */
static float *rounded(const float *x, size_t count, attn_dtype t, float *y) {
  if (x && y) memcpy(y, x, count * sizeof *y), attn_round_dtype(t, y, count);
  return x && y ? y : NULL;
}

/* One (d, n_kv, shape): random inputs made once (the largest are 2 x 268M floats), rounded to each dtype, both causal
 * settings on each */
static void decode_shape(int d, int nkv, int B, int H, int HKV, void *stream) {
  const size_t nq = (size_t)B * H * d, nk = (size_t)B * HKV * nkv * d;
  const unsigned long long seed = test_seed() + 7ull * (unsigned long long)nkv + (unsigned long long)(d + B + H);
  float *q0 = random_of(nq, ATTN_F32, seed + 1), *k0 = random_of(nk, ATTN_F32, seed + 2);
  float *v0 = random_of(nk, ATTN_F32, seed + 3), *q = malloc(nq * 4 + 1), *k = malloc(nk * 4 + 1);
  float *v = malloc(nk * 4 + 1);
  for (int ti = 0; ti < 2; ti++)
    decode_dtype(ti ? ATTN_F16 : ATTN_BF16, d, nkv, B, H, HKV, stream, rounded(q0, nq, ti ? ATTN_F16 : ATTN_BF16, q),
                 rounded(k0, nk, ti ? ATTN_F16 : ATTN_BF16, k), rounded(v0, nk, ti ? ATTN_F16 : ATTN_BF16, v));
  free(q0), free(k0), free(v0), free(q), free(k), free(v);
}

static void decode_dtype(attn_dtype t, int d, int nkv, int B, int H, int HKV, void *stream, const float *q,
                         const float *k, const float *v) {
  const size_t nq = (size_t)B * H * d, nk = (size_t)B * HKV * nkv * d;
  void *dq = q ? dev_of(t, q, nq) : NULL, *dk = k ? dev_of(t, k, nk) : NULL, *dv = v ? dev_of(t, v, nk) : NULL;
  if (!dq || !dk || !dv) {
    CHECK(0, "decode %s d=%d n_kv=%d %d/%d/%d: memory: %s", attn_dtype_name(t), d, nkv, B, H, HKV,
          attn_last_error(rt));
  } else {
    for (int causal = 0; causal < 2; causal++) {
      attn_problem p0 = {.batch = B, .heads = H, .heads_kv = HKV, .n = 1, .n_kv = nkv, .d = d, .dtype = t,
                         .causal = causal}, p;
      if (attn_problem_normalize(rt, &p0, &p) != ATTN_OK) {
        CHECK(0, "decode: %s", attn_last_error(rt));
        continue;
      }
      decode_case(&p, stream, q, k, v, dq, dk, dv);
    }
  }
  attn_cuda_free(rt, dq), attn_cuda_free(rt, dk), attn_cuda_free(rt, dv);
}

/* attn_execute_paged_async on stream, the host block table overwritten right after the call: the same bits as
 * attn_execute_paged (the call reads its host arrays before it returns) */
static void paged_async_check(void *stream) {
  enum { B = 8, H = 32, HKV = 8, D = 128, NKV = 4096, PS = 16 };
  const attn_dtype t = ATTN_BF16;
  attn_problem p0 = {.batch = B, .heads = H, .heads_kv = HKV, .n = 1, .n_kv = NKV, .d = D, .dtype = t,
                     .page_size = PS}, p;
  if (attn_problem_normalize(rt, &p0, &p) != ATTN_OK) return;
  printf("case decode paged-async bf16 batch=%d heads=%d/%d n_kv=%d d=%d page_size=%d\n", B, H, HKV, NKV, D, PS);
  int lens[B];
  for (int b = 0; b < B; b++) lens[b] = NKV - 97 * b;
  const size_t nq = (size_t)B * H * D, nk = (size_t)B * HKV * NKV * D, es = attn_dtype_size(t);
  float *q = random_of(nq, t, test_seed() + 51), *k = random_of(nk, t, test_seed() + 52);
  float *v = random_of(nk, t, test_seed() + 53), *kp = NULL, *vp = NULL;
  int *table = NULL, num_pages = 0, max_pages = 0;
  void *dq = NULL, *dkp = NULL, *dvp = NULL, *ds = NULL, *da = NULL;
  unsigned char *bs = NULL, *ba = NULL;
  attn_plan *plan = NULL;
  if (!q || !k || !v || make_pages(B, HKV, NKV, D, PS, lens, k, v, &kp, &vp, &table, &num_pages, &max_pages)) {
    CHECK(0, "paged-async: out of host memory");
    goto out;
  }
  const size_t np = (size_t)num_pages * PS * HKV * D;
  dq = dev_of(t, q, nq), dkp = dev_of(t, kp, np), dvp = dev_of(t, vp, np);
  ds = dev_of(t, NULL, nq), da = dev_of(t, NULL, nq);
  if (!dq || !dkp || !dvp || !ds || !da) {
    CHECK(0, "paged-async: device memory: %s", attn_last_error(rt));
    goto out;
  }
  int rc = attn_plan_create(rt, &p, &plan);
  CHECK(rc == ATTN_OK, "paged-async: plan: %s", attn_last_error(rt));
  if (rc != ATTN_OK) goto out;
  puts("run");
  rc = attn_execute_paged(plan, dq, dkp, dvp, num_pages, PS, table, max_pages, lens, ds);
  CHECK(rc == ATTN_OK, "paged-async: attn_execute_paged: %s", attn_last_error(rt));
  if (rc == ATTN_OK) {
    rc = attn_execute_paged_async(plan, stream, dq, dkp, dvp, num_pages, PS, table, max_pages, lens, da);
    /* every page index made 0 (still in range): a late read of the table gives another output */
    memset(table, 0, (size_t)B * max_pages * sizeof *table);
    CHECK(rc == ATTN_OK, "paged-async: attn_execute_paged_async: %s", attn_last_error(rt));
  }
  const int sync_rc = cu.stream_sync(stream);
  CHECK(sync_rc == 0, "paged-async: cuStreamSynchronize: error %d", sync_rc);
  if (rc == ATTN_OK && sync_rc == 0) bs = raw_of(ds, nq * es), ba = raw_of(da, nq * es);
  long unwritten = -1;
  if (bs) { /* the synchronous output, all written (two unwritten outputs would be the same bits too) */
    float *o = malloc(nq * sizeof *o + 1);
    unwritten = o ? host_of(t, ds, nq, o) : -1;
    free(o);
  }
  const int same = bs && ba && memcmp(bs, ba, nq * es) == 0, ok = same && unwritten == 0;
  CHECK(unwritten == 0, "paged-async: %ld of %zu synchronous outputs never written", unwritten, nq);
  CHECK(same, "paged-async: the async output differs from the synchronous one's bits");
  printf("RESULT {\"kind\": \"decode_async\", \"case\": \"paged bf16 batch=%d heads=%d/%d n_kv=%d d=%d page_size=%d\", "
         "\"plan\": \"%s\", \"same_bits\": %s, \"ok\": %s}\n",
         B, H, HKV, NKV, D, PS, attn_plan_describe(plan), same ? "true" : "false", ok ? "true" : "false");
out:
  attn_plan_destroy(plan);
  attn_cuda_free(rt, dq), attn_cuda_free(rt, dkp), attn_cuda_free(rt, dvp), attn_cuda_free(rt, ds);
  attn_cuda_free(rt, da);
  free(q), free(k), free(v), free(kp), free(vp), free(table), free(bs), free(ba);
}

static int decode_mode(void) {
  char fam[64] = "", err[256] = "";
  if (cu_load() != 0) {
    printf("FAIL: the driver's stream and event calls: %s\n", dlerror());
    return 1;
  }
  if (attn_cuda_family(info.name, fam, sizeof fam) == 0) gpu = attn_gpu_find(fam, err, sizeof err);
  if (!gpu) printf("note: %s is not in tuner/gpus.json: no bandwidth fraction, no model pick\n", info.name);
  void *stream = NULL;
  if (!cu.stream_create) printf("note: the driver has no cuStreamCreate: the legacy default stream instead\n");
  const int src = cu.stream_create ? cu.stream_create(&stream, 1 /* CU_STREAM_NON_BLOCKING */) : 0;
  CHECK(src == 0, "cuStreamCreate: error %d", src);
  if (src != 0) return 1;
  static const int shapes[3][3] = {{1, 32, 8}, {8, 32, 8}, {1, 16, 16}};
  for (int nkv = 4096; nkv <= 32768; nkv *= 8)
    for (int d = 128; d >= 64; d /= 2) {
      if (d == 64 && nkv > 4096) continue; /* d = 64 at the short context only: the budget */
      for (int si = 0; si < 3; si++) decode_shape(d, nkv, shapes[si][0], shapes[si][1], shapes[si][2], stream);
    }
  paged_async_check(stream);
  if (cu.stream_destroy) cu.stream_destroy(stream);
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  static const char *const modes[] = {"sm90", "sm90-time", "bwd", "serve", "decode"};
  int m = -1;
  for (int i = 0; argc == 2 && i < 5; i++)
    if (strcmp(argv[1], modes[i]) == 0) m = i;
  if (m < 0) {
    fprintf(stderr, "usage: gpukit_check sm90 | sm90-time | bwd | serve | decode\n");
    return 2;
  }
  int rc = attn_open(NULL, ATTN_TARGET_CUDA, &rt);
  if (rc == ATTN_ENODEV) {
    printf("SKIP: no CUDA device: %s\n", attn_last_error(NULL));
    return 77;
  }
  if (rc != ATTN_OK) {
    fprintf(stderr, "FAIL: attn_open(cuda): %s: %s\n", attn_strerror(rc), attn_last_error(NULL));
    return 1;
  }
  if (attn_cuda_info(rt, &info) != ATTN_OK) {
    fprintf(stderr, "FAIL: attn_cuda_info\n");
    attn_close(rt);
    return 1;
  }
  printf("device %s %s\n", info.name, info.arch);
  rc = m == 0   ? sm90_mode()
       : m == 1 ? sm90_time_mode()
       : m == 2 ? bwd_mode()
       : m == 3 ? serve_mode()
                : decode_mode();
  attn_close(rt);
  if (rc) return rc;
  printf("gpukit_check %s: %d checks, %d failures\n", modes[m], checks, failures);
  return failures ? 1 : 0;
}
