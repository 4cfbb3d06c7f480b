/* serve_gpu_meas: the tuner's serving layouts measured on the CUDA device present, posed by tests/fake_libcuda.c as
 * an H100 (sm_90), with the layouts' launches run on the PTX interpreter (tests/ptx): the test wraps the runtime's
 * attn_cuda_launch_layout (linked with --wrap), so each launch's kernel is known (attn_cuda_kernel_spec: the layout's
 * spec as cuda_serve.c built it); NVRTC's PTX of that spec runs in the fake driver's hook (fake_cuda_set_hook) on what
 * the launch's parameter block points at, the extents of q, k, v and o found from the launch's tables.
 *   serve_gpu_meas measure
 *       attn_measure on a CUDA runtime for grouped-query paged decode (the packed kernel, pages of 8 in shuffled
 *       order, 13 keys) and a varlen batch (sequences with no key, with no query, odd lengths; causal): with the
 *       kernels run, "ok" with the error against fp64 real (non-zero, within f16's limit), no I/O count, and the time
 *       by CUDA events on the call's stream around its table copy and launch (the fake's event time, method
 *       "events"), as measure.c times a dense launch; with the fake's kernels doing nothing (no hook), "wrong" with
 *       an infinite error (the poisoned output copied back); with one output element of the last sequence changed
 *       after the kernel ran, "wrong"; an impl=wgmma spec "invalid" with the reason, nothing compiled or launched for
 *       it. The launches read the tables the calls were given (the shuffled block table, the lengths).
 *   serve_gpu_meas tune ARGS...
 *       `attntune tune ARGS` in this process, every layout launch on the interpreter (tests/serve_gpu_meas.sh checks
 *       its rows). Prints the launches run and failed.
 * Exit 77 (skipped) without NVRTC. */
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
#include "measure.h"
#include "ptx/ptx.h"

static int no_nvrtc;

/* ---- the layouts' kernels on the interpreter ---- */

/* NVRTC's PTX of each layout spec launched so far, by spec text */
#define MAX_MODULES 32
static struct {
  char text[512];
  ptx_module *m;
} modules[MAX_MODULES];
static int n_modules;

static ptx_module *module_of(const attn_spec *s) {
  char text[512];
  attn_spec_format(s, text, sizeof text);
  for (int i = 0; i < n_modules; i++)
    if (strcmp(modules[i].text, text) == 0) return modules[i].m;
  if (n_modules == MAX_MODULES) return NULL;
  ptx_module *m = emu_spec_ptx(s, text, &no_nvrtc, &failures);
  if (m) {
    snprintf(modules[n_modules].text, sizeof modules[n_modules].text, "%s", text);
    modules[n_modules++].m = m;
  }
  return m;
}

/* What the next launch runs: set by the wrapper before the runtime's launch, read by the hook when it runs. */
static struct {
  const ptx_module *m;
  size_t qb, kb, vb, ob, tb[2]; /* bytes of q, k, v (the pages), o and the two tables the launch reads */
  int corrupt;                  /* 1: the last output element changed after the kernel ran (a wrong kernel) */
  int runs, fails;
  int tables_ok;                /* the launch's tables are the call's (checked by the hook: set by the caller) */
} cur;

static void on_launch(const void *params, unsigned grid, unsigned block, unsigned smem, void *user) {
  (void)user;
  attn_cuda_kargs a;
  memcpy(&a, params, sizeof a);
  const int varlen = a.cu_q && a.cu_kv, paged = a.seq_kv && a.block_table;
  if (!cur.m || (!varlen && !paged)) return; /* not a layout's launch: nothing here to run */
  char err[1024] = "no machine";
  ptx_machine *x = ptx_machine_new(cur.m, err, sizeof err);
  uint64_t d[6] = {0};
  const void *src[6] = {a.q, a.k, a.v, NULL, varlen ? (const void *)a.cu_q : a.seq_kv,
                        varlen ? (const void *)a.cu_kv : a.block_table};
  const size_t bytes[6] = {cur.qb, cur.kb, cur.vb, cur.ob, cur.tb[0], cur.tb[1]};
  int ok = x != NULL;
  for (int i = 0; ok && i < 6; i++)
    ok = (d[i] = ptx_alloc(x, bytes[i] ? bytes[i] : 1, "arg")) != 0 &&
         (!src[i] || !bytes[i] || ptx_copy_in(x, d[i], src[i], bytes[i]) == 0);
  unsigned char *o = a.o;
  a.q = (const void *)(uintptr_t)d[0], a.k = (const void *)(uintptr_t)d[1], a.v = (const void *)(uintptr_t)d[2];
  a.o = (void *)(uintptr_t)d[3];
  if (varlen) a.cu_q = (const int *)(uintptr_t)d[4], a.cu_kv = (const int *)(uintptr_t)d[5];
  else a.seq_kv = (const int *)(uintptr_t)d[4], a.block_table = (const int *)(uintptr_t)d[5];
  a.consts = NULL; /* the runtime's, in the fake's memory; the flash kernels do not read them */
  const ptx_launch_cfg kc = {.grid = grid, .block = block, .dyn_smem = smem};
  size_t undef = 0;
  ok = ok && ptx_launch(x, "attn_kernel", &kc, &a, sizeof a, err, sizeof err) == 0 &&
       ptx_copy_out(x, d[3], o, cur.ob, &undef) == 0;
  if (ok && cur.corrupt) { /* f16/bf16 and f32 alike: the last element's top byte flipped to a large value */
    o[cur.ob - 1] ^= 0x40;
  }
  if (!ok) printf("FAIL a layout launch on the interpreter: %s\n", err);
  cur.fails += !ok;
  cur.runs++;
  ptx_machine_free(x);
}

/* The runtime's layout launches (cuda_serve.c -> cuda.c), wrapped: the kernel's spec and the extents its launch
 * reads (from the tables: varlen's totals, the pages the block table names) are set for the hook. */
int __real_attn_cuda_launch_layout(attn_runtime *rt, attn_cuda_tables *t, attn_cuda_kernel *k, const attn_problem *p,
                                   void *stream, int sync, const void *q, const void *kk, const void *v, void *o,
                                   const attn_cuda_kargs *lay, const int *const *parts, const size_t *count,
                                   const size_t *fields, int nparts, const char *what);
int __wrap_attn_cuda_launch_layout(attn_runtime *rt, attn_cuda_tables *t, attn_cuda_kernel *k, const attn_problem *p,
                                   void *stream, int sync, const void *q, const void *kk, const void *v, void *o,
                                   const attn_cuda_kargs *lay, const int *const *parts, const size_t *count,
                                   const size_t *fields, int nparts, const char *what) {
  const attn_spec *s = attn_cuda_kernel_spec(k);
  const size_t es = attn_dtype_size(p->dtype), H = (size_t)p->heads, d = (size_t)p->d,
               dv = (size_t)(p->d_v ? p->d_v : p->d);
  const size_t HK = (size_t)(s->layout == 3 ? p->heads : p->heads_kv); /* packed: the grid's heads are the KV's */
  cur.m = nparts == 2 ? module_of(s) : NULL;
  cur.tb[0] = count[0] * sizeof(int), cur.tb[1] = count[1] * sizeof(int);
  if (s->layout == 1) { /* cu_q, cu_kv */
    const size_t tq = (size_t)parts[0][p->batch], tk = (size_t)parts[1][p->batch];
    cur.qb = tq * H * d * es, cur.ob = tq * H * dv * es;
    cur.kb = tk * HK * d * es, cur.vb = tk * HK * dv * es;
  } else { /* seq_kv, block_table: the pages up to the highest one named */
    int most = -1;
    for (size_t i = 0; i < count[1]; i++)
      if (parts[1][i] > most) most = parts[1][i];
    const size_t slots = (size_t)(most + 1) * (size_t)lay->page_size;
    const size_t rows = (size_t)p->batch * H * (size_t)p->n; /* packed: heads_kv x the group's query heads */
    cur.qb = rows * d * es, cur.ob = rows * dv * es;
    cur.kb = slots * HK * d * es, cur.vb = slots * HK * dv * es;
  }
  return __real_attn_cuda_launch_layout(rt, t, k, p, stream, sync, q, kk, v, o, lay, parts, count, fields, nparts,
                                        what);
}

/* the fake driver's (emu_fake_open_as, on $ATTN_LIBCUDA with the test's $FAKE_LIBCUDA: an H100) */
static fake_cuda_set_hook_fn set_hook;
static fake_cuda_record_fn rec;

static attn_runtime *fake_open(void) { return emu_fake_open_as(getenv("ATTN_LIBCUDA"), NULL, &set_hook, &rec); }

/* ---- measure ---- */

typedef struct meas_case {
  const char *name;
  attn_problem p;
  const int *lq, *lk; /* varlen's sequences */
} meas_case;

static attn_spec flash_spec(const attn_problem *p, const char *arch) {
  attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, p->dtype, p->d, p->causal);
  s.dv = p->d_v ? p->d_v : p->d;
  attn_spec_fit(&s, NULL, 0);
  snprintf(s.arch, sizeof s.arch, "%s", arch);
  return s;
}

static void measure_case(attn_runtime *rt, const meas_case *mc) {
  attn_meas_ctx c;
  char err[512];
  if (attn_meas_init(&c, rt, &mc->p, 1, err, sizeof err) != ATTN_OK) {
    CHECK(0, "%s: attn_meas_init: %s", mc->name, err);
    return;
  }
  c.cap_s = 0; /* one timed run: each is a launch on the interpreter */
  c.serve_lq = mc->lq, c.serve_lk = mc->lk;
  attn_cuda_info_t info;
  if (attn_cuda_info(rt, &info) != ATTN_OK) {
    CHECK(0, "%s: attn_cuda_info: %s", mc->name, attn_last_error(rt));
    attn_meas_free(&c);
    return;
  }
  const attn_spec s = flash_spec(&c.p, info.arch);
  const double tol = attn_meas_exact_tolerance(c.p.dtype);
  attn_meas_result r;
  fake_cuda_calls fc;

  /* the kernels run: ok, the error real */
  set_hook(on_launch, NULL);
  cur.corrupt = 0, cur.runs = cur.fails = 0;
  rec(&fc, 1);
  attn_measure(&c, &s, &r);
  if (no_nvrtc) goto out;
  rec(&fc, 0);
  CHECK(strcmp(r.status, "ok") == 0 && r.error > 0 && r.error <= tol && r.time_ms > 0 && !r.have_io &&
            cur.runs >= 2 && cur.fails == 0,
        "%s: the kernel on the interpreter: status %s (%s), error %g (want in (0, %g]), %g ms, I/O %s, %d launches "
        "run (want >= 2: the check and a timed run), %d failed",
        mc->name, r.status, r.message, r.error, tol, r.time_ms, r.have_io ? "counted" : "none", cur.runs, cur.fails);
  /* timed by CUDA events on the call's stream, as a dense launch: every launch but the check's between an event
   * recorded before the call's table copy and one after its launch (and the staging's own event), then the stream
   * waited for; the time is the fake's cuEventElapsedTime (1 ms for any pair), which the host's clock never reads */
  char timed[256];
  snprintf(timed, sizeof timed, "record@%p copy@%p launch@%p record@%p record@%p sync@%p ", (void *)0, (void *)0,
           (void *)0, (void *)0, (void *)0, (void *)0);
  int bracketed = 0;
  for (const char *at = strstr(fc.log, timed); at; at = strstr(at + 1, timed)) bracketed++;
  CHECK(r.method && strcmp(r.method, "events") == 0 && r.time_ms == 1.0 && fc.launches >= 2 &&
            bracketed == fc.launches - 1,
        "%s: timed by %s, %g ms (want events, the fake's 1 ms), %d of %d timed launches between events on the "
        "stream (calls: %s)",
        mc->name, r.method ? r.method : "-", r.time_ms, bracketed, fc.launches - 1, fc.log);
  /* the checked launch read the call's tables: the lengths, and for pages the shuffled table */
  if (fc.ran > 0 && mc->p.page_size > 0) {
    int shuffled = 0, lens = 1;
    const int pages = (mc->p.n_kv + mc->p.page_size - 1) / mc->p.page_size;
    for (int i = 0; i < mc->p.batch * pages && i < 256; i++) shuffled |= fc.ran_tables[0].table[i] != i;
    for (int b = 0; b < mc->p.batch && b < 64; b++) lens &= fc.ran_tables[0].seq_kv[b] == mc->p.n_kv;
    CHECK(shuffled && lens, "%s: the launch's block table %s, its lengths %s", mc->name,
          shuffled ? "shuffled" : "in order", lens ? "n_kv each" : "not n_kv");
  } else if (fc.ran > 0) {
    int same = fc.ran_tables[0].cu_q[0] == 0 && fc.ran_tables[0].cu_kv[0] == 0;
    for (int b = 0; b < mc->p.batch && b < 64; b++)
      same &= fc.ran_tables[0].cu_q[b + 1] - fc.ran_tables[0].cu_q[b] == mc->lq[b] &&
              fc.ran_tables[0].cu_kv[b + 1] - fc.ran_tables[0].cu_kv[b] == mc->lk[b];
    CHECK(same, "%s: the launch's cu_seqlens are not the sequences'", mc->name);
  }
  if (r.error > 0 && r.error <= tol) printf("ok %s: measured on the interpreter, error %.3g\n", mc->name, r.error);

  /* one output element wrong: the check per sequence sees it */
  cur.corrupt = 1;
  attn_measure(&c, &s, &r);
  cur.corrupt = 0;
  CHECK(strcmp(r.status, "wrong") == 0 && r.error > tol, "%s: one element changed: status %s, error %g", mc->name,
        r.status, r.error);

  /* the fake's kernels do nothing: the poisoned output comes back */
  set_hook(NULL, NULL);
  rec(&fc, 1);
  attn_measure(&c, &s, &r);
  rec(&fc, 0);
  CHECK(strcmp(r.status, "wrong") == 0 && isinf(r.error) && fc.ran >= 1,
        "%s: kernels that write nothing: status %s, error %g, %d launches", mc->name, r.status, r.error, fc.ran);

  /* impl=wgmma: flash.cu's layouts are not its kernel: refused, nothing compiled or launched */
  attn_spec w = s;
  w.impl = ATTN_IMPL_WGMMA;
  rec(&fc, 1);
  attn_measure(&c, &w, &r);
  rec(&fc, 0);
  CHECK(strcmp(r.status, "invalid") == 0 && strstr(r.message, "wgmma") && fc.launches == 0,
        "%s: impl=wgmma: status %s (%s), %d launches", mc->name, r.status, r.message, fc.launches);
out:
  attn_meas_free(&c);
}

static int measure(void) {
  attn_runtime *rt = fake_open();
  if (!rt) return 1;
  /* grouped-query decode over pages of 8 (13 keys: the last page part full), the packed kernel */
  const meas_case paged = {.name = "paged decode, heads 4/2, pages of 8",
                           .p = {.batch = 2, .heads = 4, .heads_kv = 2, .n = 1, .n_kv = 13, .d = 64,
                                 .dtype = ATTN_F16, .page_size = 8}};
  measure_case(rt, &paged);
  /* varlen: a sequence of one row, one with no key, one with keys and no query, odd lengths; causal */
  static const int lq[4] = {1, 7, 3, 0}, lk[4] = {1, 9, 0, 5};
  const meas_case varlen = {.name = "varlen 1,7:9,3:0,0:5 causal",
                            .p = {.batch = 4, .heads = 2, .heads_kv = 1, .n = 7, .n_kv = 9, .d = 64,
                                  .dtype = ATTN_F16, .causal = 1, .varlen = 1},
                            .lq = lq, .lk = lk};
  if (!no_nvrtc) measure_case(rt, &varlen);
  attn_close(rt);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: serve_gpu_meas measure | tune ARGS...\n");
    return 2;
  }
  /* without NVRTC the runtime's compiles fail before any hook runs: skip as the other interpreter tests do */
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
    fprintf(stderr, "serve_gpu_meas: unknown case %s\n", argv[1]);
    return 2;
  }
  for (int i = 0; i < n_modules; i++) ptx_module_free(modules[i].m);
  if (no_nvrtc) return 77;
  if (failures) printf("%d failures\n", failures);
  return failures ? 1 : rc;
}
