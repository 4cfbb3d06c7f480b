/* peak.h: the machine's own ceilings, measured in the process that uses them (`attntune bench --target cpu`):
 * the fp32 FMA rate and the read bandwidth from memory, both on the kernels' thread count and timed by the harness
 * of timing.h (repetitions until the median is known within ATTN_MEAS_REL_TOL, or the cap is spent). */
#ifndef ATTN_PEAK_H
#define ATTN_PEAK_H

#include <stddef.h>
#include "timing.h"

typedef struct attn_peak {
  int threads;
  /* FMA: independent chains of vector FMAs on every thread, the best of the instruction sets the CPU runs */
  double fma_gflops;          /* 2 flops per lane per FMA; -1 unknown */
  const char *fma_isa;        /* "avx512f", "avx2+fma", "sse (mul+add)", "generic (mul+add)" */
  int fma_chains;             /* independent accumulators per thread */
  attn_timing_stats fma_st;   /* of the variant reported */
  /* read: a streaming sum over a buffer several times the last-level cache, each thread its own part */
  double read_gbs;            /* 1e9 bytes per second; -1 unknown */
  double read_mib;            /* the buffer */
  attn_timing_stats read_st;
  /* no estimate from clean repetitions (timing.h): other processes took CPU time meanwhile, so the ceiling is a
   * lower bound and a fraction of it an upper one */
  int fma_under_load, read_under_load;
  int measurements;           /* folded together by attn_peak_merge */
} attn_peak;

/* Measures both on threads OpenMP threads, at least min_reps timed repetitions each, at most cap_s seconds of timed
 * running per measurement after that. Returns 0, or -1 when memory for the buffer or the timings was missing (the
 * figures then unknown stay -1). */
int attn_peak_measure(int threads, int min_reps, double cap_s, attn_peak *out);

/* Folds a later measurement m into acc (bench measures before and after its points): each ceiling the highest of the
 * clean measurements, else the highest of all, still flagged under load. */
void attn_peak_merge(attn_peak *acc, const attn_peak *m);

#endif
