/* cuda_mods: CUDA plans with score modifiers (window, softcap, ALiBi).
 *   cuda_mods fake FAKE  on the fake driver (tests/fake_libcuda.c, its record in fake_libcuda.h): attn_plan_create
 *                        picks flash with the problem's modifiers switched on; each launch carries the window and the
 *                        cap, and a device pointer to the plan's own copy of the ALiBi slopes (the fake's device
 *                        memory is host memory: its bytes are the slopes given at plan creation, not the caller's
 *                        array, changed after it); no device memory for the slopes fails plan creation with
 *                        ATTN_ENOMEM; smallcache is refused with the reason. Exit 77 without NVRTC: the fake driver
 *                        needs real cubins to get as far as a launch.
 *   cuda_mods gpu        on a device: flash plans with each modifier and all together (f16, bf16, f32; causal and
 *                        not, GQA, n_kv != n, odd d, d_v != d, n = 1) against fp64 (f32 1e-5, f16 2e-3, bf16 1.6e-2
 *                        relative), the counting build's entries equal to the windowed closed form (only the key
 *                        blocks a window reaches), and, printed, the time of a causal bf16 prefill of 16384 tokens
 *                        (16 heads, d = 128) with no window and windows of 4096, 1024 and 256 keys. Exit 77 where
 *                        attn_open says ATTN_ENODEV. */
#include <dlfcn.h>
#include <string.h>
#include "cpu_util.h"
#include "fake_libcuda.h"
#include "internal.h"

static fake_cuda_record_fn record;

/* a plan of p0 on rt; its launch must carry p0's modifiers. 77 without NVRTC, else 0 */
static int plan_launch(attn_runtime *rt, const attn_problem *p0, float *slopes) {
  attn_plan *plan = NULL;
  int rc = attn_plan_create(rt, p0, &plan);
  if (rc == ATTN_ECOMPILE && strstr(attn_last_error(rt), "NVRTC is not available")) {
    printf("SKIP: %s\n", attn_last_error(rt));
    return 77;
  }
  CHECK(rc == ATTN_OK, "attn_plan_create: %s: %s", attn_strerror(rc), attn_last_error(rt));
  if (rc != ATTN_OK) return 0;
  const char *desc = attn_plan_describe(plan);
  CHECK(strstr(desc, "flash") && strstr(desc, " window") && strstr(desc, " softcap") &&
            (strstr(desc, " alibi") != NULL) == (slopes != NULL),
        "the plan is not flash with the problem's modifiers: %s", desc);
  float want[8] = {0};
  if (slopes) {
    memcpy(want, slopes, sizeof(float) * (size_t)p0->heads);
    for (int h = 0; h < p0->heads; h++) slopes[h] = 99.0f; /* the plan keeps its own copy */
  }
  /* the fake's kernels do nothing: any 16-byte aligned host memory serves as q, k, v and o */
  static _Alignas(16) unsigned char buf[4][1 << 16];
  fake_cuda_calls c;
  record(&c, 1);
  rc = attn_execute(plan, buf[0], buf[1], buf[2], buf[3]);
  CHECK(rc == ATTN_OK, "attn_execute: %s", attn_last_error(rt));
  record(&c, 1);
  CHECK(c.launches == 1, "%d launches, want 1", c.launches);
  CHECK(c.last_window == p0->window && c.last_softcap == p0->softcap, "the launch has window=%d softcap=%g, want %d %g",
        c.last_window, (double)c.last_softcap, p0->window, (double)p0->softcap);
  if (slopes) {
    CHECK(c.last_alibi && c.last_alibi != slopes && memcmp(c.last_alibi, want, sizeof(float) * (size_t)p0->heads) == 0,
          "the launch's slopes are not the plan's copy on the device (%p)", (const void *)c.last_alibi);
  } else {
    CHECK(c.last_alibi == NULL, "a launch without ALiBi has slopes %p", (const void *)c.last_alibi);
  }
  printf("cuda: %s: its launch carries window=%d softcap=%g%s\n", desc, c.last_window, (double)c.last_softcap,
         slopes ? " and the slopes on the device" : "");
  attn_plan_destroy(plan);
  return 0;
}

static int fake(const char *lib) {
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  record = h ? (fake_cuda_record_fn)dlsym(h, "fake_cuda_record") : NULL;
  if (!record) {
    fprintf(stderr, "%s: no fake_cuda_record: %s\n", lib, dlerror());
    return 1;
  }
  setenv("ATTN_LIBCUDA", lib, 1);
  setenv("FAKE_LIBCUDA", "cc=80", 1);
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CUDA, &rt);
  CHECK(rc == ATTN_OK, "attn_open on the fake driver: %s: %s", attn_strerror(rc), attn_last_error(NULL));
  if (rc != ATTN_OK) return 1;
  float slopes[3] = {0.5f, 0.25f, -0.125f};
  attn_problem p = {.batch = 1, .heads = 3, .heads_kv = 1, .n = 40, .n_kv = 70, .d = 16, .dtype = ATTN_F16,
                    .causal = 1, .window = 17, .softcap = 30.0f, .alibi_slopes = slopes};
  if (plan_launch(rt, &p, slopes) == 77) {
    attn_close(rt);
    return 77;
  }
  /* no device memory for the slopes: plan creation fails, naming them */
  slopes[0] = 0.5f, slopes[1] = 0.25f, slopes[2] = -0.125f;
  setenv("FAKE_LIBCUDA", "cc=80,alloc=2", 1);
  attn_plan *plan = NULL;
  rc = attn_plan_create(rt, &p, &plan);
  CHECK(rc == ATTN_ENOMEM && !plan && strstr(attn_last_error(rt), "ALiBi slopes"),
        "no device memory for the slopes: %s: %s", attn_strerror(rc), attn_last_error(rt));
  setenv("FAKE_LIBCUDA", "cc=80", 1);
  /* smallcache on CUDA applies none of them: refused with the reason */
  p.algo = ATTN_ALGO_SMALLCACHE;
  rc = attn_plan_create(rt, &p, &plan);
  CHECK(rc == ATTN_EUNSUPPORTED && !plan && strstr(attn_last_error(rt), "applies no window"),
        "smallcache with modifiers on cuda: %s: %s", attn_strerror(rc), attn_last_error(rt));
  printf("cuda: smallcache with modifiers: %s\n", attn_last_error(rt));
  attn_close(rt);
  printf("cuda_mods fake: %d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}

/* ---- on a device ---- */

/* The windowed closed form of flash.cu's I/O comment: entries read and written for problem p under spec s. */
static void closed_form(const attn_spec *s, const attn_problem *p, unsigned long long *reads,
                        unsigned long long *writes) {
  const long long n = p->n, nkv = p->n_kv, w = p->window, bc = s->bc;
  unsigned long long r = 0, wr = 0;
  for (long long i0 = 0; i0 < n; i0 += s->br) {
    const long long rows = n - i0 < s->br ? n - i0 : s->br, e = i0 + nkv - n;
    long long hi = nkv, lo = 0;
    if (p->causal) hi = e + rows;
    else if (w > 0) hi = e + rows - 1 + w;
    if (w > 0) lo = e - w + 1;
    hi = hi < 0 ? 0 : hi < nkv ? hi : nkv;
    lo = lo < 0 ? 0 : lo < nkv ? lo / bc * bc : nkv;
    const long long up = (hi + bc - 1) / bc * bc < nkv ? (hi + bc - 1) / bc * bc : nkv;
    const long long keys = hi > lo ? up - lo : 0;
    r += (unsigned long long)(rows * p->d + keys * (p->d + p->d_v));
    wr += (unsigned long long)(rows * p->d_v);
  }
  *reads = r * (unsigned long long)p->batch * (unsigned long long)p->heads;
  *writes = wr * (unsigned long long)p->batch * (unsigned long long)p->heads;
}

static float gpu_slopes[64];

/* One problem on the device: against fp64 and the closed form, or (ms != NULL) timed: the fastest of 10 runs. */
static void gpu_case(attn_runtime *rt, const attn_problem *p0, double *ms) {
  attn_problem p;
  if (attn_problem_normalize(rt, p0, &p) != ATTN_OK) {
    CHECK(0, "attn_problem_normalize: %s", attn_last_error(rt));
    return;
  }
  attn_spec s;
  char origin[128];
  if (attn_plan_choose(rt, &p, &s, origin, sizeof origin) != ATTN_OK) {
    CHECK(0, "attn_plan_choose: %s", attn_last_error(rt));
    return;
  }
  attn_plan *plan = NULL, *counting = NULL;
  int rc = attn_plan_create_spec(rt, &p, &s, 0, origin, &plan);
  if (rc == ATTN_OK && !ms) rc = attn_plan_create_spec(rt, &p, &s, 1, origin, &counting);
  CHECK(rc == ATTN_OK, "plan: %s", attn_last_error(rt));
  const size_t es = attn_dtype_size(p.dtype);
  const size_t nq = (size_t)p.batch * p.heads * p.n * p.d, nk = (size_t)p.batch * p.heads_kv * p.n_kv * p.d;
  const size_t nv = (size_t)p.batch * p.heads_kv * p.n_kv * p.d_v, no = (size_t)p.batch * p.heads * p.n * p.d_v;
  size_t most = nq > nk ? nq : nk;
  if (nv > most) most = nv;
  if (no > most) most = no;
  float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nv * 4), *o = malloc(no * 4);
  void *raw = malloc(most * 4), *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL;
  double *ref = ms ? NULL : malloc(no * sizeof(double));
  CHECK(q && k && v && o && raw && (ms || ref), "out of memory");
  char what[256];
  if (rc != ATTN_OK || !q || !k || !v || !o || !raw || (!ms && !ref)) goto out;
  attn_fill_random(q, nq, 11), attn_fill_random(k, nk, 12), attn_fill_random(v, nv, 13);
  attn_round_dtype(p.dtype, q, nq), attn_round_dtype(p.dtype, k, nk), attn_round_dtype(p.dtype, v, nv);
  rc = attn_cuda_alloc(rt, nq * es, &dq);
  if (rc == ATTN_OK) rc = attn_cuda_alloc(rt, nk * es, &dk);
  if (rc == ATTN_OK) rc = attn_cuda_alloc(rt, nv * es, &dv);
  if (rc == ATTN_OK) rc = attn_cuda_alloc(rt, no * es, &dout);
  if (rc == ATTN_OK) attn_to_dtype(p.dtype, q, nq, raw), rc = attn_cuda_copy(rt, dq, raw, nq * es, 1);
  if (rc == ATTN_OK) attn_to_dtype(p.dtype, k, nk, raw), rc = attn_cuda_copy(rt, dk, raw, nk * es, 1);
  if (rc == ATTN_OK) attn_to_dtype(p.dtype, v, nv, raw), rc = attn_cuda_copy(rt, dv, raw, nv * es, 1);
  CHECK(rc == ATTN_OK, "device memory: %s", attn_last_error(rt));
  if (rc != ATTN_OK) goto out;
  snprintf(what, sizeof what, "%s d=%d d_v=%d%s batch=%d heads=%d/%d n=%d n_kv=%d window=%d softcap=%g%s",
           attn_dtype_name(p.dtype), p.d, p.d_v, p.causal ? " causal" : "", p.batch, p.heads, p.heads_kv, p.n,
           p.n_kv, p.window, (double)p.softcap, p.alibi_slopes ? " alibi" : "");
  if (ms) {
    *ms = 1e30;
    for (int rep = 0; rep < 10 && rc == ATTN_OK; rep++) {
      double t = 0;
      rc = attn_cuda_run(rt, plan->cuda, &plan->p, dq, dk, dv, dout, NULL, &t);
      if (t < *ms) *ms = t;
    }
    CHECK(rc == ATTN_OK, "%s: %s", what, attn_last_error(rt));
    printf("time %s: %.3f ms\n", what, *ms);
    goto out;
  }
  rc = attn_execute(plan, dq, dk, dv, dout);
  if (rc == ATTN_OK) rc = attn_cuda_copy(rt, raw, dout, no * es, 0);
  CHECK(rc == ATTN_OK, "%s: %s", what, attn_last_error(rt));
  if (rc != ATTN_OK) goto out;
  attn_from_dtype(p.dtype, raw, no, o);
  attn_reference(&p, q, k, v, ref);
  const double err = attn_rel_error(ref, o, no);
  const double lim = p.dtype == ATTN_F32 ? 1e-5 : p.dtype == ATTN_F16 ? 2e-3 : 1.6e-2;
  attn_io io = {0, 0};
  rc = attn_cuda_run(rt, counting->cuda, &counting->p, dq, dk, dv, dout, &io, NULL);
  unsigned long long fr = 0, fw = 0;
  closed_form(&plan->spec, &p, &fr, &fw);
  CHECK(rc == ATTN_OK && err <= lim && io.reads == fr && io.writes == fw,
        "%s: relative error %.3g (limit %.3g), entries %llu/%llu, closed form %llu/%llu", what, err, lim,
        (unsigned long long)io.reads, (unsigned long long)io.writes, fr, fw);
  printf("ok   %s: relative error %.3g, entries %llu/%llu, closed form %llu/%llu\n", what, err,
         (unsigned long long)io.reads, (unsigned long long)io.writes, fr, fw);
out:
  attn_cuda_free(rt, dq), attn_cuda_free(rt, dk), attn_cuda_free(rt, dv), attn_cuda_free(rt, dout);
  free(q), free(k), free(v), free(o), free(raw), free(ref);
  attn_plan_destroy(plan);
  attn_plan_destroy(counting);
}

static int gpu(void) {
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CUDA, &rt);
  if (rc == ATTN_ENODEV) {
    printf("SKIP: %s\n", attn_last_error(NULL));
    return 77;
  }
  CHECK(rc == ATTN_OK, "attn_open: %s", attn_last_error(NULL));
  if (rc != ATTN_OK) return 1;
  for (int h = 0; h < 64; h++) gpu_slopes[h] = ldexpf(1.0f, -8 * (h + 1) / 16); /* BLOOM's for 16 heads */
  const attn_dtype types[3] = {ATTN_F16, ATTN_BF16, ATTN_F32};
  const attn_problem probs[] = {
      {.batch = 2, .heads = 4, .heads_kv = 2, .n = 333, .n_kv = 517, .d = 64, .window = 100},
      {.batch = 1, .heads = 8, .heads_kv = 2, .n = 1000, .d = 128, .causal = 1, .window = 257, .softcap = 30,
       .alibi_slopes = gpu_slopes},
      {.batch = 1, .heads = 4, .n = 777, .n_kv = 1200, .d = 128, .softcap = 50},
      {.batch = 2, .heads = 4, .heads_kv = 1, .n = 200, .n_kv = 513, .d = 64, .causal = 1, .alibi_slopes = gpu_slopes},
      {.batch = 1, .heads = 2, .heads_kv = 1, .n = 64, .n_kv = 1000, .d = 80, .window = 33, .softcap = 5,
       .alibi_slopes = gpu_slopes},
      {.batch = 1, .heads = 1, .n = 1, .d = 1, .window = 1, .softcap = 1, .alibi_slopes = gpu_slopes},
      {.batch = 1, .heads = 4, .heads_kv = 1, .n = 513, .n_kv = 700, .d = 192, .d_v = 128, .causal = 1, .window = 64,
       .softcap = 20, .alibi_slopes = gpu_slopes}};
  for (int t = 0; t < 3; t++)
    for (size_t i = 0; i < sizeof probs / sizeof probs[0]; i++) {
      attn_problem p = probs[i];
      p.dtype = types[t];
      gpu_case(rt, &p, NULL);
    }
  /* a windowed prefill's time against its window (printed; nothing timed is asserted) */
  const int windows[4] = {0, 4096, 1024, 256};
  for (int i = 0; i < 4; i++) {
    const attn_problem p = {.batch = 1, .heads = 16, .n = 16384, .d = 128, .dtype = ATTN_BF16, .causal = 1,
                            .window = windows[i]};
    double ms = 0;
    gpu_case(rt, &p, &ms);
  }
  attn_close(rt);
  printf("cuda_mods gpu: %d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "fake")) return fake(argv[2]);
  if (argc == 2 && !strcmp(argv[1], "gpu")) return gpu();
  fprintf(stderr, "usage: cuda_mods fake FAKE_LIBCUDA | cuda_mods gpu\n");
  return 2;
}
