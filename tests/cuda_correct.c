/* cuda_correct: the CUDA kernels on a real GPU against the fp64 reference, on fresh random inputs (rounded to the
 * dtype first, so the reference sees what the kernel sees) with a poisoned (NaN) output.
 *   cuda_correct flash|smallcache DTYPE   every d in {16, 32, 64, 80, 96, 128, 256} x n in {1, 17, 100, 1000} x causal
 *   cuda_correct lowrank DTYPE            the same sizes; the output against the CPU lowrank kernel with the same
 *                                         features (same approximation), and its error against fp64 reported
 *   cuda_correct shapes DTYPE             n_kv != n both ways, grouped-query heads, batch > 1, non-default scale
 *   cuda_correct dims DTYPE               every algorithm's default (attn_spec_fit) for d = 1, 3, 59, 111, 320, 512,
 *                                         576 and d/d_v = 576/512, 192/128, 64/128, 37/300: odd n, n != n_kv,
 *                                         grouped-query heads, causal and not
 *   cuda_correct io                       counting builds equal tuner/io_theory.c's closed forms for CUDA specs
 *   cuda_correct api                      NULL pointers, cached cubin on a second load, tuned-row lookup
 *   ... d=64,128                          only those d (the groups that take a DTYPE, and io; 1..576)
 * Exact algorithms: relative error <= 1e-2 in f16/bf16 and 1e-4 in f32. Exit 77 (skipped) only when attn_open says
 * there is no CUDA device (ATTN_ENODEV); any other failure to open one, a failed allocation, and a run that checked
 * no case at all (a d= selection that matches nothing) fail. */
#include "check.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "internal.h"
#include "io_theory.h"

static int cases;

/* The d a run covers: all, or those of a d=LIST argument. */
static int want_d[ATTN_MAX_D + 1], want_some_d;

static int wanted(int d) { return !want_some_d || (d >= 1 && d <= ATTN_MAX_D && want_d[d]); }

static double tolerance(attn_dtype t) { return t == ATTN_F32 ? 1e-4 : 1e-2; }

/* Rounds x through dtype t in place. */
static void round_to(attn_dtype t, float *x, size_t count) {
  for (size_t i = 0; i < count && t != ATTN_F32; i++)
    x[i] = t == ATTN_F16 ? attn_f16_to_f32(attn_f32_to_f16(x[i])) : attn_bf16_to_f32(attn_f32_to_bf16(x[i]));
}

typedef struct {
  attn_problem p;
  size_t nq, nkv, nv, no; /* entries of Q, K, V (rows of d_v) and O (rows of d_v) */
  float *q, *k, *v, *o;
  double *ref;
} bufs;

/* Host buffers and the fp64 reference for a problem; on failure why says what failed. */
static int setup(const attn_problem *p0, unsigned long long seed, bufs *b, char *why, size_t wl) {
  memset(b, 0, sizeof *b);
  if (attn_problem_normalize(NULL, p0, &b->p) != ATTN_OK) {
    snprintf(why, wl, "the problem is invalid: %s", attn_last_error(NULL));
    return -1;
  }
  const attn_problem *p = &b->p;
  b->nq = (size_t)p->batch * p->heads * p->n * p->d;
  b->nkv = (size_t)p->batch * p->heads_kv * p->n_kv * p->d;
  b->nv = (size_t)p->batch * p->heads_kv * p->n_kv * p->d_v;
  b->no = (size_t)p->batch * p->heads * p->n * p->d_v;
  b->q = malloc(b->nq * sizeof(float));
  b->o = malloc(b->no * sizeof(float));
  b->k = malloc(b->nkv * sizeof(float));
  b->v = malloc(b->nv * sizeof(float));
  b->ref = malloc(b->no * sizeof(double));
  if (!b->q || !b->o || !b->k || !b->v || !b->ref) {
    snprintf(why, wl, "out of host memory for %zu + %zu + %zu entries", b->nq, b->nkv, b->nv);
    return -1;
  }
  seed = seed * 1000003ULL + test_seed() * 3;
  attn_fill_random(b->q, b->nq, seed * 3 + 1);
  attn_fill_random(b->k, b->nkv, seed * 3 + 2);
  attn_fill_random(b->v, b->nv, seed * 3 + 3);
  round_to(p->dtype, b->q, b->nq);
  round_to(p->dtype, b->k, b->nkv);
  round_to(p->dtype, b->v, b->nv);
  attn_poison(b->o, b->no);
  attn_reference(p, b->q, b->k, b->v, b->ref);
  return 0;
}

static void release(bufs *b) {
  free(b->q);
  free(b->k);
  free(b->v);
  free(b->o);
  free(b->ref);
}

static const char *shape(const attn_problem *p) {
  static char buf[256];
  snprintf(buf, sizeof buf, "%s batch=%d heads=%d heads_kv=%d n=%d n_kv=%d d=%d d_v=%d causal=%d scale=%g",
           attn_dtype_name(p->dtype), p->batch, p->heads, p->heads_kv, p->n, p->n_kv, p->d,
           p->d_v > 0 ? p->d_v : p->d, p->causal, (double)p->scale);
  return buf;
}

/* The device's default spec of an algorithm for a problem (sized for its d_v as the runtime sizes it). */
static attn_spec default_spec(attn_runtime *rt, attn_algo a, const attn_problem *p) {
  attn_spec s = attn_spec_default(a, ATTN_TARGET_CUDA, p->dtype, p->d, p->causal);
  s.dv = p->d_v > 0 && p->d_v != p->d ? p->d_v : 0;
  char err[256] = "";
  const int frc = attn_spec_fit(&s, err, sizeof err);
  CHECK(frc == ATTN_OK, "attn_spec_fit d=%d d_v=%d: %s", p->d, p->d_v, err);
  attn_cuda_info_t info;
  int rc = attn_cuda_info(rt, &info);
  CHECK(rc == ATTN_OK, "attn_cuda_info: %s", attn_strerror(rc));
  if (rc == ATTN_OK) snprintf(s.arch, sizeof s.arch, "%s", info.arch);
  return s;
}

/* The CPU kernel computing the same approximation as a CUDA lowrank spec (same features, same blocks). */
static attn_spec cpu_twin(const attn_spec *s) {
  attn_spec c = *s;
  c.target = ATTN_TARGET_CPU;
  c.dtype = ATTN_F32;
  c.warps = c.stages = 0;
  c.arch[0] = '\0';
  return c;
}

/* One problem through spec s; returns its relative error against fp64 (INFINITY on failure). */
static double run(attn_runtime *rt, attn_runtime *cpu, const attn_problem *p0, const attn_spec *s,
                  unsigned long long seed) {
  bufs b;
  char why[256];
  cases++;
  if (setup(p0, seed, &b, why, sizeof why) != 0) {
    CHECK(0, "%s: %s", shape(p0), why);
    release(&b);
    return INFINITY;
  }
  attn_plan *plan = NULL;
  double err = INFINITY;
  int rc = attn_plan_create_spec(rt, &b.p, s, 0, "test", &plan);
  CHECK(rc == ATTN_OK, "%s: plan: %s: %s", shape(&b.p), attn_strerror(rc), attn_last_error(rt));
  if (rc == ATTN_OK) {
    rc = attn_plan_run_f32(plan, b.q, b.k, b.v, b.o, NULL, NULL);
    CHECK(rc == ATTN_OK, "%s [%s]: run: %s: %s", shape(&b.p), attn_plan_describe(plan), attn_strerror(rc),
          attn_last_error(rt));
    if (rc == ATTN_OK) err = attn_rel_error(b.ref, b.o, b.no);
  }
  if (rc == ATTN_OK && s->algo == ATTN_ALGO_LOWRANK) {
    /* the approximation itself is the CPU kernel's: the two must agree to the dtype's rounding */
    attn_spec c = cpu_twin(s);
    attn_problem pc = b.p;
    pc.dtype = ATTN_F32;
    attn_plan *cp = NULL;
    float *co = malloc(b.no * sizeof(float));
    double *co64 = malloc(b.no * sizeof(double));
    CHECK(co && co64, "%s: out of host memory for the CPU twin's output (%zu entries)", shape(&b.p), b.no);
    int crc = co && co64 ? attn_plan_create_spec(cpu, &pc, &c, 0, "twin", &cp) : ATTN_ENOMEM;
    if (crc == ATTN_OK) crc = attn_plan_run_f32(cp, b.q, b.k, b.v, co, NULL, NULL);
    CHECK(crc == ATTN_OK || !co || !co64, "%s: the CPU twin failed: %s", shape(&b.p), attn_last_error(cpu));
    if (crc == ATTN_OK) {
      for (size_t i = 0; i < b.no; i++) co64[i] = co[i];
      double diff = attn_rel_error(co64, b.o, b.no);
      double lim = s->dtype == ATTN_F32 ? 1e-3 : 2e-2;
      CHECK(diff <= lim, "%s [%s]: differs from the CPU lowrank kernel by %.3g > %g", shape(&b.p),
            attn_plan_describe(plan), diff, lim);
      if (diff <= lim)
        printf("ok   %-70s %-50s err vs fp64 %.2e, vs cpu %.2e\n", shape(&b.p), attn_plan_describe(plan), err, diff);
    }
    attn_plan_destroy(cp);
    free(co);
    free(co64);
  } else if (rc == ATTN_OK) {
    CHECK(err <= tolerance(b.p.dtype), "%s [%s]: relative error %.3g > %g", shape(&b.p), attn_plan_describe(plan), err,
          tolerance(b.p.dtype));
    if (err <= tolerance(b.p.dtype)) printf("ok   %-70s %-50s err %.2e\n", shape(&b.p), attn_plan_describe(plan), err);
  }
  attn_plan_destroy(plan);
  release(&b);
  return err;
}

static void sizes(attn_runtime *rt, attn_runtime *cpu, attn_algo a, attn_dtype t) {
  static const int ds[] = {16, 32, 64, 80, 96, 128, 256}, ns[] = {1, 17, 100, 1000};
  unsigned long long seed = 1;
  for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++)
    for (int causal = 0; causal <= 1 && wanted(ds[di]); causal++)
      for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        attn_problem p = {.batch = 1, .heads = 2, .n = ns[ni], .d = ds[di], .dtype = t, .causal = causal,
                          .tolerance = a == ATTN_ALGO_LOWRANK ? 0.5 : 0};
        attn_spec s = default_spec(rt, a, &p);
        run(rt, cpu, &p, &s, seed++);
      }
}

static void shapes(attn_runtime *rt, attn_runtime *cpu, attn_dtype t) {
  unsigned long long seed = 1000;
  static const attn_algo algos[] = {ATTN_ALGO_FLASH, ATTN_ALGO_SMALLCACHE};
  for (int ai = 0; ai < 2; ai++)
    for (int d = 64; d <= 128; d += 64)
      for (int causal = 0; causal <= 1 && wanted(d); causal++) {
        static const int nn[][2] = {{100, 37}, {37, 300}, {1, 1000}, {1000, 1}, {130, 129}, {129, 257}};
        for (size_t i = 0; i < sizeof nn / sizeof nn[0]; i++) {
          attn_problem p = {.batch = 1, .heads = 2, .n = nn[i][0], .n_kv = nn[i][1], .d = d, .dtype = t,
                            .causal = causal};
          attn_spec s = default_spec(rt, algos[ai], &p);
          run(rt, cpu, &p, &s, seed++);
        }
        attn_problem more[] = {
            {.batch = 1, .heads = 8, .heads_kv = 2, .n = 150, .d = d, .dtype = t, .causal = causal},
            {.batch = 2, .heads = 4, .heads_kv = 1, .n = 70, .n_kv = 90, .d = d, .dtype = t, .causal = causal},
            {.batch = 3, .heads = 3, .n = 65, .d = d, .dtype = t, .causal = causal},
            {.batch = 2, .heads = 2, .n = 200, .d = d, .dtype = t, .causal = causal, .scale = 0.37f},
            {.batch = 1, .heads = 1, .n = 300, .d = d, .dtype = t, .causal = causal, .scale = 2.5f}};
        for (int i = 0; i < 5; i++) {
          attn_spec s = default_spec(rt, algos[ai], &more[i]);
          run(rt, cpu, &more[i], &s, seed++);
        }
      }
  /* every block shape of the tuner's flash space at one awkward size */
  static const int brs[] = {64, 128}, bcs[] = {32, 64, 128}, warps[] = {4, 8}, stages[] = {1, 2, 3};
  for (int a = 0; a < 2 && wanted(128); a++)
    for (int b = 0; b < 3; b++)
      for (int w = 0; w < 2; w++)
        for (int st = 0; st < 3; st++) {
          attn_problem p = {.batch = 1, .heads = 2, .n = 333, .n_kv = 301, .d = 128, .dtype = t, .causal = st & 1};
          attn_spec s = default_spec(rt, ATTN_ALGO_FLASH, &p);
          s.br = brs[a], s.bc = bcs[b], s.warps = warps[w], s.stages = stages[st];
          if (attn_spec_check(&s, NULL, 0) != ATTN_OK) continue;
          run(rt, cpu, &p, &s, seed++);
        }
}

/* Any head dimension, d_v != d: the default of each algorithm for d and d/d_v pairs across 1..576. */
static void dims(attn_runtime *rt, attn_runtime *cpu, attn_dtype t) {
  static const int dd[][2] = {{1, 1},     {3, 3},       {59, 59},     {111, 111}, {320, 320}, {512, 512},
                              {576, 576}, {576, 512},   {192, 128},   {64, 128},  {37, 300}};
  static const int nn[][3] = {{37, 29, 1}, {19, 83, 2}, {129, 257, 1}}; /* n, n_kv, heads_kv (heads = 2) */
  unsigned long long seed = 5000;
  for (int a = ATTN_ALGO_FLASH; a <= ATTN_ALGO_LOWRANK; a++)
    for (size_t i = 0; i < sizeof dd / sizeof dd[0]; i++)
      for (size_t j = 0; j < sizeof nn / sizeof nn[0] && wanted(dd[i][0]); j++) {
        attn_problem p = {.batch = 2, .heads = 2, .heads_kv = nn[j][2], .n = nn[j][0], .n_kv = nn[j][1],
                          .d = dd[i][0], .d_v = dd[i][1], .dtype = t, .causal = (int)((i + j) & 1),
                          .tolerance = a == ATTN_ALGO_LOWRANK ? 0.5 : 0};
        attn_spec s = default_spec(rt, (attn_algo)a, &p);
        run(rt, cpu, &p, &s, seed++);
      }
}

static void io_counts(attn_runtime *rt) {
  static const attn_algo algos[] = {ATTN_ALGO_FLASH, ATTN_ALGO_SMALLCACHE, ATTN_ALGO_LOWRANK};
  static const int ns[][2] = {{1, 1}, {100, 100}, {257, 129}, {129, 300}, {1000, 1000}};
  for (int a = 0; a < 3; a++)
    for (int d = 64; d <= 128; d += 64)
      for (int causal = 0; causal <= 1 && wanted(d); causal++)
        for (int i = 0; i < 5; i++) {
          attn_problem p = {.d = d, .dtype = ATTN_F16, .causal = causal};
          attn_spec s = default_spec(rt, algos[a], &p);
          attn_io io = {0, 0};
          double relerr = INFINITY;
          cases++;
          int rc = attn_io_measure(rt, &s, ns[i][0], ns[i][1], &io, &relerr);
          CHECK(rc == ATTN_OK, "io %s d=%d n=%d n_kv=%d: %s", attn_algo_name(s.algo), d, ns[i][0], ns[i][1],
                attn_last_error(rt));
          unsigned long long fr = 0, fw = 0;
          int frc = attn_io_formula(&s, 1, ns[i][0], ns[i][1], &fr, &fw);
          CHECK(frc == ATTN_OK, "io %s: no closed form: %s", attn_algo_name(s.algo), attn_strerror(frc));
          CHECK(io.reads == fr && io.writes == fw, "io %s d=%d n=%d n_kv=%d causal=%d: counted %llu/%llu, formula %llu/%llu",
                attn_algo_name(s.algo), d, ns[i][0], ns[i][1], causal, io.reads, io.writes, fr, fw);
          const unsigned long long floor_rw = (unsigned long long)(ns[i][0] + 2 * ns[i][1]) * d;
          CHECK(io.reads >= floor_rw,
                "io %s: %llu reads are fewer than Q, K, V once (%llu)", attn_algo_name(s.algo), io.reads, floor_rw);
          if (rc == ATTN_OK)
            printf("io   %-10s d=%d n=%d n_kv=%d causal=%d: reads %llu writes %llu (formula %llu/%llu), err %.2e\n",
                   attn_algo_name(s.algo), d, ns[i][0], ns[i][1], causal, io.reads, io.writes, fr, fw, relerr);
        }
}

static void api(attn_runtime *rt) {
  attn_problem p = {.batch = 1, .heads = 2, .n = 64, .d = 64, .dtype = ATTN_F16};
  /* device buffers first: a failed allocation is a failure of its own, whatever the plan does */
  void *buf = NULL;
  int rc = attn_cuda_alloc(rt, 4 * 2 * 64 * 64 * 2 + 64, &buf);
  CHECK(rc == ATTN_OK, "device buffers for the API checks: %s: %s", attn_strerror(rc), attn_last_error(rt));
  attn_plan *plan = NULL;
  rc = attn_plan_create(rt, &p, &plan);
  CHECK(rc == ATTN_OK, "default plan: %s", attn_last_error(rt));
  cases++;
  if (plan) {
    printf("default plan: %s\n", attn_plan_describe(plan));
    rc = attn_execute(plan, NULL, (void *)1, (void *)1, (void *)1);
    CHECK(rc == ATTN_EINVAL, "attn_execute with q NULL: %d", rc);
    if (buf) {
      char *b = buf;
      rc = attn_execute(plan, b + 2, b + 16384, b + 32768, b + 49152);
      CHECK(rc == ATTN_EINVAL && strstr(attn_last_error(rt), "aligned"), "a misaligned q: %d %s", rc,
            attn_last_error(rt));
      rc = attn_execute(plan, b, b + 16384, b + 32768, b + 49152);
      CHECK(rc == ATTN_OK, "aligned device buffers: %s", attn_last_error(rt));
    }
    attn_plan *again = NULL;
    rc = attn_plan_create(rt, &p, &again);
    CHECK(rc == ATTN_OK && again && attn_cuda_was_cached(again->cuda),
          "a second plan for the same spec compiled again instead of loading the cached cubin");
    attn_plan_destroy(again);
  }
  attn_cuda_free(rt, buf);
  attn_plan_destroy(plan);
  /* f32 plans exist on CUDA; a head dimension past ATTN_MAX_D is refused with a reason */
  attn_problem bad = {.batch = 1, .heads = 1, .n = 8, .d = ATTN_MAX_D + 1, .dtype = ATTN_F16};
  plan = NULL;
  rc = attn_plan_create(rt, &bad, &plan);
  CHECK(rc == ATTN_EUNSUPPORTED && !plan, "d=%d on cuda: expected ATTN_EUNSUPPORTED, got %d", ATTN_MAX_D + 1, rc);
  cases++;
}

/* d=16,64,...: the d to keep; 0, or -1 for a malformed list. */
static int pick_d(const char *arg) {
  if (strncmp(arg, "d=", 2) != 0) return -1;
  for (const char *p = arg + 2;;) {
    char *end;
    long d = strtol(p, &end, 10);
    if (end == p || d < 1 || d > ATTN_MAX_D || (*end && *end != ',')) return -1;
    want_d[d] = want_some_d = 1;
    if (!*end) return 0;
    p = end + 1;
  }
}

int main(int argc, char **argv) {
  static const char usage[] =
      "usage: cuda_correct flash|smallcache|lowrank|shapes|dims DTYPE [d=D,...] | io [d=D,...] | api\n";
  if (argc < 2) {
    fputs(usage, stderr);
    return 2;
  }
  /* the arguments first: a usage error needs no device */
  const char *group = argv[1];
  const int has_dtype = !strcmp(group, "flash") || !strcmp(group, "smallcache") || !strcmp(group, "lowrank") ||
                        !strcmp(group, "shapes") || !strcmp(group, "dims");
  if (!has_dtype && strcmp(group, "io") != 0 && strcmp(group, "api") != 0) {
    fprintf(stderr, "unknown group %s\n%s", group, usage);
    return 2;
  }
  int dt = ATTN_F16, arg = 2;
  if (has_dtype) {
    dt = argc > 2 ? attn_dtype_parse(argv[2]) : -1;
    if (dt < 0) {
      fprintf(stderr, "%s needs a dtype (f16, bf16 or f32)\n%s", group, usage);
      return 2;
    }
    arg = 3;
  }
  if (argc > arg + 1 || (argc == arg + 1 && (!strcmp(group, "api") || pick_d(argv[arg]) != 0))) {
    fprintf(stderr, "unexpected argument %s\n%s", argv[arg], usage);
    return 2;
  }
  attn_runtime *rt = NULL, *cpu = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CUDA, &rt);
  if (rc == ATTN_ENODEV) {
    printf("SKIP: %s\n", attn_last_error(NULL));
    return 77;
  }
  if (rc != ATTN_OK) { /* a driver or device that is there but unusable is a failure, never a skip */
    fprintf(stderr, "FAIL: attn_open(cuda): %s: %s\n", attn_strerror(rc), attn_last_error(NULL));
    return 1;
  }
  if (attn_open(NULL, ATTN_TARGET_CPU, &cpu) != ATTN_OK) {
    fprintf(stderr, "FAIL: attn_open(cpu): %s\n", attn_last_error(NULL));
    attn_close(rt);
    return 1;
  }
  attn_cuda_info_t info;
  rc = attn_cuda_info(rt, &info);
  CHECK(rc == ATTN_OK, "attn_cuda_info: %s", attn_strerror(rc));
  printf("device: %s (%s, %d SMs, %d bytes of shared memory per block), filed as %s\n", info.name, info.arch, info.sms,
         info.smem_optin, rt->device);
  if (!strcmp(group, "flash")) sizes(rt, cpu, ATTN_ALGO_FLASH, (attn_dtype)dt);
  else if (!strcmp(group, "smallcache")) sizes(rt, cpu, ATTN_ALGO_SMALLCACHE, (attn_dtype)dt);
  else if (!strcmp(group, "lowrank")) sizes(rt, cpu, ATTN_ALGO_LOWRANK, (attn_dtype)dt);
  else if (!strcmp(group, "shapes")) shapes(rt, cpu, (attn_dtype)dt);
  else if (!strcmp(group, "dims")) dims(rt, cpu, (attn_dtype)dt);
  else if (!strcmp(group, "io")) io_counts(rt);
  else api(rt);
  attn_close(cpu);
  attn_close(rt);
  printf("cuda_correct %s %s: %d cases, %d failures\n", group, has_dtype ? argv[2] : "", cases, failures);
  if (cases == 0) { /* a selection that matches nothing checked nothing: not a pass */
    printf("FAIL: no case ran\n");
    return 1;
  }
  return failures ? 1 : 0;
}
