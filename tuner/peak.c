/* peak.c: the fp32 FMA peak and the read bandwidth of this machine on a given thread count (peak.h). The runtime's
 * kernels are compiled with -march=native (runtime/cc.h) while this file is not: the FMA loop comes in variants
 * compiled for each x86 vector extension (__attribute__((target))), run when the CPU has it, and the best counts. */
#include "peak.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "measure.h"
#include "space.h"
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PEAK_X86 1
#endif

#define PEAK_CHAINS 12          /* independent accumulators: latency 4-5 cycles x 2 FMA ports, with room to spare */
#define PEAK_UNIT_ITERS 4096    /* loop iterations (PEAK_CHAINS FMAs each) per thread per work unit */
#define PEAK_TARGET_MS 10.0     /* a repetition at least this long: well above the clock's and the fork's costs */
#define PEAK_READ_LLC 4.0       /* the read buffer in last-level caches: a pass finds none of it cached */
#define PEAK_READ_MIN (64.0 * 1048576.0)
#define PEAK_READ_MAX (1024.0 * 1048576.0)

typedef float peak_v4 __attribute__((vector_size(16)));

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

/* a = a * b + c converges to c / (1 - b): no overflow, no subnormals, whatever the count */
#define PEAK_B 0.999f
#define PEAK_C 0.001f

/* Plain vector code: without -ffp-contract the compiler keeps the multiply and the add apart (still 2 flops). */
static float fma_generic(long units) {
  peak_v4 a[PEAK_CHAINS], b = {PEAK_B, PEAK_B, PEAK_B, PEAK_B}, c = {PEAK_C, PEAK_C, PEAK_C, PEAK_C};
  for (int j = 0; j < PEAK_CHAINS; j++) a[j] = (peak_v4){0, 0, 0, 0} + (float)j;
  for (long i = 0; i < units * PEAK_UNIT_ITERS; i++)
    for (int j = 0; j < PEAK_CHAINS; j++) a[j] = a[j] * b + c;
  float s = 0;
  for (int j = 0; j < PEAK_CHAINS; j++) s += a[j][0] + a[j][1] + a[j][2] + a[j][3];
  return s;
}

#ifdef PEAK_X86
/* The chains written out one by one: twelve named registers, not an array the compiler might keep in memory. */
#define PEAK_BODY(T, SET1, FMA, ADD)                                                                              \
  T b = SET1(PEAK_B), c = SET1(PEAK_C);                                                                           \
  T a0 = SET1(0), a1 = SET1(1), a2 = SET1(2), a3 = SET1(3), a4 = SET1(4), a5 = SET1(5), a6 = SET1(6), a7 = SET1(7); \
  T a8 = SET1(8), a9 = SET1(9), a10 = SET1(10), a11 = SET1(11);                                                   \
  for (long i = 0; i < units * PEAK_UNIT_ITERS; i++) {                                                            \
    a0 = FMA(a0, b, c), a1 = FMA(a1, b, c), a2 = FMA(a2, b, c), a3 = FMA(a3, b, c);                               \
    a4 = FMA(a4, b, c), a5 = FMA(a5, b, c), a6 = FMA(a6, b, c), a7 = FMA(a7, b, c);                               \
    a8 = FMA(a8, b, c), a9 = FMA(a9, b, c), a10 = FMA(a10, b, c), a11 = FMA(a11, b, c);                           \
  }                                                                                                               \
  T s = ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7)));                                        \
  s = ADD(s, ADD(ADD(a8, a9), ADD(a10, a11)));                                                                    \
  float lanes[sizeof(T) / sizeof(float)];                                                                         \
  memcpy(lanes, &s, sizeof lanes);                                                                                \
  return lanes[0];

__attribute__((target("avx2,fma"))) static float fma_avx2(long units) {
  PEAK_BODY(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps)
}

__attribute__((target("avx512f"))) static float fma_avx512(long units) {
  PEAK_BODY(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps)
}
#endif

typedef struct peak_fma {
  float (*fn)(long);
  int lanes;
  const char *isa;
} peak_fma;

/* One repetition of a job on every thread; units scale its work. */
typedef struct peak_job {
  int threads;
  const peak_fma *fma;         /* the FMA job, or NULL: the read job */
  const float *buf;            /* read: threads parts of part floats */
  size_t part;
  long units;                  /* of a timed repetition */
  attn_sched_probe sp;
} peak_job;

static int peak_thread(void) {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

static volatile float peak_sink; /* results land here: the loops cannot be dropped */

static float read_part(const float *p, size_t count, long passes) {
  peak_v4 a[8] = {{0}};
  for (long r = 0; r < passes; r++)
    for (size_t i = 0; i + 32 <= count; i += 32)
      for (int j = 0; j < 8; j++) {
        peak_v4 x;
        memcpy(&x, p + i + 4 * j, sizeof x);
        a[j] += x;
      }
  float s = 0;
  for (int j = 0; j < 8; j++) s += a[j][0] + a[j][1] + a[j][2] + a[j][3];
  return s;
}

static void run_job(const peak_job *j, long units) {
  float s = 0;
#pragma omp parallel num_threads(j->threads) reduction(+ : s)
  {
    const int t = peak_thread();
    s += j->fma ? j->fma->fn(units) : read_part(j->buf + (size_t)t * j->part, j->part, units);
  }
  peak_sink = s;
}

static int job_run(void *user, int side, int timed, double *ms, double *delay) {
  (void)side, (void)timed;
  peak_job *j = user;
  double d0 = attn_sched_delay_ms(&j->sp), t0 = now_ms();
  run_job(j, j->units);
  *ms = now_ms() - t0;
  double d1 = attn_sched_delay_ms(&j->sp);
  *delay = d0 >= 0 && d1 >= 0 ? d1 - d0 : -1;
  return 0;
}

/* The harness's rounds (timing.h) on one side: work grown until one repetition takes PEAK_TARGET_MS (also the
 * warm-up), then repetitions with the threads' run delay until the median is known or the cap is spent; no load
 * gate (a ceiling measured under load is flagged: fma_under_load, read_under_load). *units gets the work of a timed
 * repetition. */
static int time_job(peak_job *j, int min_reps, double cap_s, long max_units, long *units, attn_timing_stats *st) {
  long u = 1;
  for (;;) {
    double t0 = now_ms();
    run_job(j, u);
    if (now_ms() - t0 >= PEAK_TARGET_MS || u >= max_units) break;
    u *= 2;
  }
  *units = j->units = u;
  attn_sched_open(&j->sp); /* after the warm-up: OpenMP's threads exist */
  attn_rounds_caps k = {.min_rounds = min_reps, .min_rounds_at_cap = 1, .rel_tol = ATTN_MEAS_REL_TOL, .cap_s = cap_s,
                        .wait_clean = 1, .threads = j->threads};
  attn_rounds_out o;
  memset(st, 0, sizeof *st);
  int rc = attn_rounds(&k, 1, job_run, j, st, &o);
  attn_sched_close(&j->sp);
  return rc == 0 && st->median_ms > 0 ? 0 : -1;
}

int attn_peak_measure(int threads, int min_reps, double cap_s, attn_peak *out) {
  memset(out, 0, sizeof *out);
  out->threads = threads > 0 ? threads : 1;
  out->fma_gflops = out->read_gbs = out->read_mib = -1;
  out->fma_isa = "";
  out->fma_chains = PEAK_CHAINS;
  out->measurements = 1;
  if (min_reps < 1) min_reps = 1;
  int rc = 0;

  peak_fma variants[3];
  int nv = 0;
#ifdef PEAK_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) variants[nv++] = (peak_fma){fma_avx512, 16, "avx512f"};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    variants[nv++] = (peak_fma){fma_avx2, 8, "avx2+fma"};
  if (nv == 0) variants[nv++] = (peak_fma){fma_generic, 4, "sse (mul+add)"};
#else
  variants[nv++] = (peak_fma){fma_generic, 4, "generic (mul+add)"};
#endif
  /* Every variant: a 512-bit unit may run at a lower clock than two 256-bit ones, and -march=native code may use
   * either width. */
  for (int i = 0; i < nv; i++) {
    peak_job j = {.threads = out->threads, .fma = &variants[i]};
    long units;
    attn_timing_stats st;
    if (time_job(&j, min_reps, cap_s, 1L << 20, &units, &st) != 0) {
      rc = -1;
      continue;
    }
    const double flops = 2.0 * variants[i].lanes * PEAK_CHAINS * PEAK_UNIT_ITERS * (double)units * out->threads;
    const double gflops = flops / st.median_ms * 1e-6;
    if (gflops > out->fma_gflops) out->fma_gflops = gflops, out->fma_isa = variants[i].isa, out->fma_st = st;
    /* any variant under load: the fastest one may be the one the load slowed most */
    if (strcmp(st.method, "clean") != 0) out->fma_under_load = 1;
  }

  /* Read: each thread sums its own contiguous part, first touched by that thread (its NUMA node). */
  double want = PEAK_READ_LLC * attn_cpu_llc_bytes();
  if (want < PEAK_READ_MIN) want = PEAK_READ_MIN;
  if (want > PEAK_READ_MAX) want = PEAK_READ_MAX;
  const size_t part = ((size_t)(want / sizeof(float)) / (size_t)out->threads) & ~(size_t)31;
  float *buf = aligned_alloc(64, part * (size_t)out->threads * sizeof *buf);
  if (!buf || part == 0) {
    free(buf);
    return -1;
  }
#pragma omp parallel num_threads(out->threads)
  {
    const int t = peak_thread();
    float *p = buf + (size_t)t * part;
    for (size_t i = 0; i < part; i++) p[i] = (float)(i & 1023) * 1e-3f;
  }
  peak_job j = {.threads = out->threads, .buf = buf, .part = part};
  long passes;
  if (time_job(&j, min_reps, cap_s, 64, &passes, &out->read_st) == 0) {
    const double bytes = (double)part * out->threads * sizeof(float) * (double)passes;
    out->read_gbs = bytes / out->read_st.median_ms * 1e-6;
    out->read_mib = (double)part * out->threads * sizeof(float) / 1048576.0;
    out->read_under_load = strcmp(out->read_st.method, "clean") != 0;
  } else {
    rc = -1;
  }
  free(buf);
  return rc;
}

/* One ceiling folded into another: of clean measurements the highest; a clean one over any under load; of two under
 * load the highest, still flagged. */
static void fold(double *acc, int *acc_load, double m, int m_load) {
  if (!(m > 0)) return;
  if (!(*acc > 0) || (*acc_load && !m_load) || (*acc_load == m_load && m > *acc)) *acc = m, *acc_load = m_load;
}

void attn_peak_merge(attn_peak *acc, const attn_peak *m) {
  const double fma = acc->fma_gflops;
  fold(&acc->fma_gflops, &acc->fma_under_load, m->fma_gflops, m->fma_under_load);
  if (acc->fma_gflops != fma) acc->fma_isa = m->fma_isa, acc->fma_st = m->fma_st;
  const double bw = acc->read_gbs;
  fold(&acc->read_gbs, &acc->read_under_load, m->read_gbs, m->read_under_load);
  if (acc->read_gbs != bw) acc->read_st = m->read_st, acc->read_mib = m->read_mib;
  acc->measurements += m->measurements;
}
