/* bwd_gpu_meas: the tuner's CUDA backward measured on the device present, posed by tests/fake_libcuda.c as an H100
 * (sm_90), the kernels run on the PTX interpreter (tests/ptx): the test wraps the runtime's attn_cuda_run_lse (the
 * forward that makes o and lse) and attn_cuda_run_backward (the checked run; linked with --wrap), so each launch's
 * kernel is known (attn_cuda_kernel_spec); NVRTC's PTX of that spec runs in the fake driver's hook on what the
 * launch's parameter block points at. The timed runs (attn_cuda_run_backward_timed) launch on the fake, which runs
 * nothing and says 1 ms between any two events.
 *   bwd_gpu_meas measure
 *       attn_measure of the backward (f16 d=64, 4/2 heads, n=19 n_kv=23, causal) for the untuned spec and its
 *       dq=atomic twin: "ok" with the error against fp64 real (non-zero, within f16's limit), no I/O count,
 *       method "events" and the fake's 1 ms, every timed backward's launches between two events on the legacy
 *       default stream; with one dK element changed after the kernels ran, "wrong"; with the fake's kernels doing
 *       nothing (no hook), "wrong" with an infinite error (the poisoned gradients copied back)
 *   bwd_gpu_meas tune ARGS...
 *       `attntune tune ARGS` in this process, every checked launch on the interpreter (tests/bwd_gpu_meas.sh checks
 *       its rows). Prints the launches run and failed.
 * Exit 77 (skipped) without NVRTC. ATTN_EMU_TEMPLATE=FILE runs FILE in place of templates/flash_bwd.cu. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "cmds.h"
#include "emu_util.h"
#include "fake_libcuda.h"
#include "internal.h"
#include "kernel_abi_cuda.h"
#include "kernel_abi_cuda_bwd.h"
#include "measure.h"
#include "ptx/ptx.h"
#include "spec_bwd_cuda.h"

static int no_nvrtc;

/* ---- the kernels on the interpreter ---- */

/* NVRTC's PTX of each spec launched so far, by spec text and pass */
#define MAX_MODULES 32
static struct {
  char text[512];
  int backward;
  ptx_module *m;
} modules[MAX_MODULES];
static int n_modules;

static ptx_module *module_of(const attn_spec *s, int backward) {
  char text[512], err[512];
  attn_spec_format(s, text, sizeof text);
  for (int i = 0; i < n_modules; i++)
    if (modules[i].backward == backward && strcmp(modules[i].text, text) == 0) return modules[i].m;
  if (n_modules == MAX_MODULES) return NULL;
  /* ATTN_EMU_TEMPLATE replaces the backward's template, never the forward's */
  char *src = backward ? attn_spec_source_backward_cuda(s, err, sizeof err) : attn_spec_source(s, 0, err, sizeof err);
  char *ptx = NULL, *log = NULL;
  const char *alt = backward ? getenv("ATTN_EMU_TEMPLATE") : NULL;
  if (!src || (alt && *alt && emu_substitute(&src, alt) != 0)) {
    CHECK(0, "%s: no source: %s", text, src ? alt : err);
    free(src);
    return NULL;
  }
  const int rc = attn_nvrtc_ptx(src, "attn_kernel.cu", s->arch, &ptx, &log);
  free(src);
  ptx_module *m = emu_load_ptx(rc, ptx, log, text, &no_nvrtc, &failures);
  if (m) {
    snprintf(modules[n_modules].text, sizeof modules[n_modules].text, "%s", text);
    modules[n_modules].backward = backward;
    modules[n_modules++].m = m;
  }
  return m;
}

/* What the wrapped call's launches run: set by the wrapper before the runtime's call, read by the hook as each launch
 * runs (the call waits for them) */
static struct {
  const ptx_module *m;   /* NULL: launches run nothing (the fake's) */
  const attn_spec *s;
  int backward, launch;  /* the call's launches so far */
  ptx_machine *x;        /* the backward's, across its launches */
  uint64_t dev[10];      /* q, k, v, o, dout, lse, delta, dq, dk, dv on the interpreter */
  size_t bytes[10];
  attn_cuda_bwd_kargs host; /* the first launch's block: the fake's memory */
  int corrupt;           /* 1: one dK element changed after the kernels ran (a wrong kernel) */
  int runs, fails;
} cur;

static void launch_failed(const char *what, const char *err) {
  printf("FAIL a launch on the interpreter: %s: %s\n", what, err);
  cur.fails++;
  failures++;
}

/* the forward (attn_execute_lse's attn_kernel): one launch, q, k, v in, o and lse out */
static void run_forward(const attn_cuda_kargs *p, unsigned grid, unsigned block, unsigned smem) {
  attn_cuda_kargs a = *p;
  const size_t es = attn_dtype_size(cur.s->dtype), d = (size_t)cur.s->d, dv = (size_t)attn_spec_dv(cur.s);
  const size_t rows = (size_t)(a.batch * a.heads * a.n), krows = (size_t)(a.batch * a.heads_kv * a.n_kv);
  const size_t bytes[5] = {rows * d * es, krows * d * es, krows * dv * es, rows * dv * es, rows * 4};
  char err[1024] = "no machine";
  if (cur.launch++ || cur.s->split > 1) { /* a split forward's combine is not run here */
    launch_failed("the forward", "more than one launch");
    return;
  }
  ptx_machine *x = ptx_machine_new(cur.m, err, sizeof err);
  uint64_t dev[5] = {0};
  const void *src[3] = {a.q, a.k, a.v};
  int ok = x != NULL;
  for (int i = 0; ok && i < 5; i++)
    ok = (dev[i] = ptx_alloc(x, bytes[i], "arg")) != 0 && (i >= 3 || ptx_copy_in(x, dev[i], src[i], bytes[i]) == 0);
  void *o = a.o, *lse = a.lse;
  a.q = (const void *)(uintptr_t)dev[0], a.k = (const void *)(uintptr_t)dev[1], a.v = (const void *)(uintptr_t)dev[2];
  a.o = (void *)(uintptr_t)dev[3], a.lse = (float *)(uintptr_t)dev[4];
  a.scratch = a.consts = NULL; /* none without split; flash reads no constants */
  const ptx_launch_cfg kc = {.grid = grid, .block = block, .dyn_smem = smem};
  size_t undef = 0;
  ok = ok && ptx_launch(x, "attn_kernel", &kc, &a, ATTN_CUDA_KARGS_DENSE_BYTES, err, sizeof err) == 0 &&
       ptx_copy_out(x, dev[3], o, bytes[3], &undef) == 0 && ptx_copy_out(x, dev[4], lse, bytes[4], &undef) == 0;
  if (!ok) launch_failed("the forward", err);
  cur.runs++;
  ptx_machine_free(x);
}

/* the backward: attn_bwd_pre, attn_kernel (and with dq=atomic attn_bwd_post) on one machine; the gradients copied
 * back after the last */
static void run_backward(const attn_cuda_bwd_kargs *p, unsigned grid, unsigned block, unsigned smem) {
  static const char *const entry[3] = {"attn_bwd_pre", "attn_kernel", "attn_bwd_post"};
  const int last = 1 + cur.s->dq, i = cur.launch++;
  char err[1024] = "no machine";
  if (i > last) {
    launch_failed("the backward", "more launches than its entries");
    return;
  }
  if (i == 0) {
    attn_cuda_bwd_geom g;
    const attn_cuda_bwd_kargs *a = p;
    const size_t es = attn_dtype_size(cur.s->dtype), d = (size_t)cur.s->d, dv = (size_t)attn_spec_dv(cur.s);
    const size_t rows = (size_t)(a->batch * a->heads * a->n), krows = (size_t)(a->batch * a->heads_kv * a->n_kv);
    if (attn_cuda_backward_geometry(cur.s, a->batch, a->heads, a->heads_kv, a->n, a->n_kv, &g, err, sizeof err)) {
      launch_failed("the backward's geometry", err);
      return;
    }
    const size_t bytes[10] = {rows * d * es,  krows * d * es,  krows * dv * es, rows * dv * es,
                              rows * dv * es, rows * 4,        (size_t)g.scratch, rows * d * es,
                              krows * d * es, krows * dv * es};
    const void *src[10] = {a->q, a->k, a->v, a->o, a->dout, a->lse, NULL, a->dq, a->dk, a->dv};
    cur.host = *a;
    memcpy(cur.bytes, bytes, sizeof bytes);
    cur.x = ptx_machine_new(cur.m, err, sizeof err);
    int ok = cur.x != NULL;
    for (int t = 0; ok && t < 10; t++) /* the gradients too: their poison */
      ok = (cur.dev[t] = ptx_alloc(cur.x, bytes[t], "arg")) != 0 &&
           (!src[t] || ptx_copy_in(cur.x, cur.dev[t], src[t], bytes[t]) == 0);
    if (!ok) {
      launch_failed("the backward's arguments", err);
      ptx_machine_free(cur.x);
      cur.x = NULL;
      return;
    }
  }
  if (!cur.x) return; /* the first launch failed */
  attn_cuda_bwd_kargs a = *p;
  const uint64_t *v = cur.dev;
  a.q = (const void *)(uintptr_t)v[0], a.k = (const void *)(uintptr_t)v[1], a.v = (const void *)(uintptr_t)v[2];
  a.o = (const void *)(uintptr_t)v[3], a.dout = (const void *)(uintptr_t)v[4];
  a.lse = (const float *)(uintptr_t)v[5], a.delta = (float *)(uintptr_t)v[6];
  a.dq = (void *)(uintptr_t)v[7], a.dk = (void *)(uintptr_t)v[8], a.dv = (void *)(uintptr_t)v[9];
  const ptx_launch_cfg kc = {.grid = grid, .block = block, .dyn_smem = smem};
  int ok = ptx_launch(cur.x, entry[i], &kc, &a, sizeof a, err, sizeof err) == 0;
  void *out[3] = {cur.host.dq, cur.host.dk, cur.host.dv};
  size_t undef = 0;
  for (int g = 0; ok && i == last && g < 3; g++)
    ok = ptx_copy_out(cur.x, v[7 + g], out[g], cur.bytes[7 + g], &undef) == 0;
  if (ok && i == last && cur.corrupt) ((unsigned char *)cur.host.dk)[cur.bytes[8] - 1] ^= 0x40; /* a large value */
  if (!ok) launch_failed(entry[i], err);
  if (!ok || i == last) {
    cur.runs++;
    ptx_machine_free(cur.x);
    cur.x = NULL;
  }
}

static void on_launch(const void *params, unsigned grid, unsigned block, unsigned smem, void *user) {
  (void)user;
  if (!cur.m) return; /* a timed run: the fake's kernels write nothing */
  if (cur.backward) run_backward(params, grid, block, smem);
  else run_forward(params, grid, block, smem);
}

/* The runtime's forward with lse and its untimed backward (measure_bwd.c's calls), wrapped: the kernel's spec and
 * module set for the hook while the call runs. */
int __real_attn_cuda_run_lse(attn_runtime *rt, const attn_cuda_kernel *k, const attn_problem *p, const void *q,
                             const void *kk, const void *v, void *o, float *lse);
int __wrap_attn_cuda_run_lse(attn_runtime *rt, const attn_cuda_kernel *k, const attn_problem *p, const void *q,
                             const void *kk, const void *v, void *o, float *lse) {
  cur.s = attn_cuda_kernel_spec(k), cur.backward = 0, cur.launch = 0;
  cur.m = module_of(cur.s, 0);
  const int rc = __real_attn_cuda_run_lse(rt, k, p, q, kk, v, o, lse);
  cur.m = NULL;
  return rc;
}
int __real_attn_cuda_run_backward(attn_runtime *rt, const attn_cuda_kernel *k, const attn_problem *p, const void *q,
                                  const void *kk, const void *v, const void *o, const float *lse, const void *dout,
                                  void *dq, void *dk, void *dv);
int __wrap_attn_cuda_run_backward(attn_runtime *rt, const attn_cuda_kernel *k, const attn_problem *p, const void *q,
                                  const void *kk, const void *v, const void *o, const float *lse, const void *dout,
                                  void *dq, void *dk, void *dv) {
  cur.s = attn_cuda_kernel_spec(k), cur.backward = 1, cur.launch = 0;
  cur.m = module_of(cur.s, 1);
  const int rc = __real_attn_cuda_run_backward(rt, k, p, q, kk, v, o, lse, dout, dq, dk, dv);
  cur.m = NULL;
  return rc;
}

static fake_cuda_set_hook_fn set_hook;
static fake_cuda_record_fn rec;

static attn_runtime *fake_open(void) { return emu_fake_open_as(getenv("ATTN_LIBCUDA"), NULL, &set_hook, &rec); }

/* ---- measure ---- */

/* How many of the backward's timed runs in the fake's log are exactly: an event, its launches, an event, the wait,
 * all on the legacy default stream (the scratch's alloc before, its free after). */
static int bracketed(const char *log, int launches) {
  char want[256], at[32];
  snprintf(at, sizeof at, "@%p ", (void *)0);
  size_t l = (size_t)snprintf(want, sizeof want, "record%s", at);
  for (int i = 0; i < launches; i++) l += (size_t)snprintf(want + l, sizeof want - l, "launch%s", at);
  snprintf(want + l, sizeof want - l, "record%ssync%s", at, at);
  int n = 0;
  for (const char *p = strstr(log, want); p; p = strstr(p + 1, want)) n++;
  return n;
}

static int measure(void) {
  attn_runtime *rt = fake_open();
  if (!rt) return 1;
  attn_cuda_info_t info;
  CHECK(attn_cuda_info(rt, &info) == ATTN_OK && strcmp(info.arch, "sm_90") == 0, "the fake is not an sm_90 device");
  const attn_problem p = {.batch = 1, .heads = 4, .heads_kv = 2, .n = 19, .n_kv = 23, .d = 64, .dtype = ATTN_F16,
                          .causal = 1};
  attn_meas_ctx c;
  char err[512];
  if (attn_meas_init(&c, rt, &p, 1, err, sizeof err) != ATTN_OK) {
    CHECK(0, "attn_meas_init: %s", err);
    attn_close(rt);
    return 1;
  }
  c.cap_s = 0; /* one timed run each */
  c.backward = 1;
  attn_spec s[2];
  int rc = attn_spec_backward_cuda(p.dtype, p.d, p.d, p.causal, info.arch, &s[0], err, sizeof err);
  CHECK(rc == ATTN_OK, "the untuned backward: %s", err);
  s[1] = s[0], s[1].dq = 1; /* dQ by atomics (attn_bwd_post too) */
  const double tol = attn_meas_exact_tolerance(p.dtype);
  for (int i = 0; rc == ATTN_OK && i < 2 && !no_nvrtc; i++) {
    char text[512];
    attn_spec_summary(&s[i], text, sizeof text);
    attn_meas_result r;
    fake_cuda_calls fc;
    set_hook(on_launch, NULL);
    cur.corrupt = 0, cur.runs = cur.fails = 0;
    rec(&fc, 1);
    attn_measure(&c, &s[i], &r);
    rec(&fc, 0);
    if (no_nvrtc) break;
    CHECK(strcmp(r.status, "ok") == 0 && r.error > 0 && r.error <= tol && !r.have_io && cur.fails == 0 &&
              cur.runs >= 1,
          "%s: on the interpreter: status %s (%s), error %g (want in (0, %g]), I/O %s, %d runs, %d failed", text,
          r.status, r.message, r.error, tol, r.have_io ? "counted" : "none", cur.runs, cur.fails);
    /* timed by events: the fake's 1 ms for any pair, which the host's clock never reads */
    const int launches = 2 + s[i].dq, timed = bracketed(fc.log, launches);
    CHECK(r.method && strcmp(r.method, "events") == 0 && r.time_ms == 1.0 && r.reps >= 1 && timed >= r.reps &&
              fc.launches == launches * (timed + 1) + (i == 0), /* the first: the forward for o and lse too */
          "%s: timed by %s, %g ms over %d reps (want events, the fake's 1 ms); %d of the %d launches are timed "
          "backwards between events (calls: %s)",
          text, r.method ? r.method : "-", r.time_ms, r.reps, timed * launches, fc.launches, fc.log);
    if (strcmp(r.status, "ok") == 0) printf("ok %s: measured, error %.3g, %g ms\n", text, r.error, r.time_ms);
  }
  if (rc == ATTN_OK && !no_nvrtc) {
    attn_meas_result r;
    /* one dK element wrong: the check sees it */
    cur.corrupt = 1;
    attn_measure(&c, &s[0], &r);
    cur.corrupt = 0;
    CHECK(strcmp(r.status, "wrong") == 0 && r.error > tol && strstr(r.message, "gradients"),
          "one dK element changed: status %s (%s), error %g", r.status, r.message, r.error);
    /* the fake's kernels write nothing: the poisoned gradients come back */
    set_hook(NULL, NULL);
    attn_measure(&c, &s[1], &r);
    CHECK(strcmp(r.status, "wrong") == 0 && isinf(r.error), "kernels that write nothing: status %s, error %g",
          r.status, r.error);
  }
  attn_meas_free(&c);
  attn_close(rt);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bwd_gpu_meas measure | tune ARGS...\n");
    return 2;
  }
  char why[256];
  int major = 0, minor = 0;
  if (attn_nvrtc_version(&major, &minor, why, sizeof why) == ATTN_ENODEV) {
    printf("SKIP: %s\n", why);
    return 77;
  }
  int rc = 0;
  if (strcmp(argv[1], "measure") == 0) {
    rc = measure();
  } else if (strcmp(argv[1], "tune") == 0) {
    /* the tune run's runtime loads the same fake driver: the hook set here takes its launches */
    attn_runtime *rt = fake_open();
    if (!rt) return 1;
    set_hook(on_launch, NULL);
    rc = attn_cmd_tune(argc - 1, argv + 1);
    attn_close(rt);
    printf("launches on the interpreter: %d run, %d failed\n", cur.runs, cur.fails);
  } else {
    fprintf(stderr, "bwd_gpu_meas: unknown case %s\n", argv[1]);
    return 2;
  }
  for (int i = 0; i < n_modules; i++) ptx_module_free(modules[i].m);
  if (no_nvrtc) return 77;
  printf("bwd_gpu_meas: %d checks, %d failures\n", checks, failures);
  return failures ? 1 : rc;
}
