/* timing.h: statistics of repeated timings on a shared machine. Each repetition records its wall time and the time
 * the process's threads spent waiting for a CPU meanwhile (the scheduler's run delay, /proc/self/task/N/schedstat).
 * A repetition without such waiting is "clean": it measured the kernel, not the other processes. The estimate is the
 * median of the clean repetitions when there are enough of them; otherwise (a kernel longer than the scheduler's
 * slices while another process keeps a core busy) the lower quartile of wall - delay/threads, the time the threads
 * would have taken had the waiting been spread over all of them (what interference the correction misses only adds
 * time). Without scheduler statistics it is the plain wall median. */
#ifndef ATTN_TIMING_H
#define ATTN_TIMING_H

#define ATTN_TIMING_MIN_CLEAN 5   /* clean repetitions that make the clean median the estimate */

typedef struct attn_timing {
  double *wall, *delay;           /* per repetition, ms; delay < 0: unknown */
  int count, cap;
  int threads;                    /* the kernel's threads, for the correction */
} attn_timing;

typedef struct attn_timing_stats {
  double median_ms;               /* the estimate (the corrected method's lower quartile: see above) */
  double iqr_ms;                  /* interquartile range of the sample behind it */
  double ci_rel;                  /* half-width of the estimate's 95% confidence interval, relative to it */
  int reps, clean, used;          /* repetitions, clean ones, and the sample size behind the estimate */
  const char *method;             /* "clean" | "corrected" | "wall" */
} attn_timing_stats;

void attn_timing_init(attn_timing *t, int threads);
void attn_timing_free(attn_timing *t);
int  attn_timing_add(attn_timing *t, double wall_ms, double delay_ms); /* 0, or -1 out of memory */
void attn_timing_stats_of(const attn_timing *t, attn_timing_stats *s);

/* When to stop repeating: the median known within rel_tol (with at least min_reps repetitions, and enough clean ones
 * when they come often enough to be had before the cap), or cap_s of timed runs spent. */
int attn_timing_enough(const attn_timing *t, const attn_timing_stats *s, double rel_tol, int min_reps, double spent_s,
                       double cap_s);

/* The run delay of all the process's threads so far, in ms; -1 when the kernel gives no scheduler statistics. Opened
 * once the worker threads exist (after a warm-up run); threads started later are not seen. */
typedef struct attn_sched_probe {
  int fd[64];
  int count;
} attn_sched_probe;
void   attn_sched_open(attn_sched_probe *p);
double attn_sched_delay_ms(const attn_sched_probe *p);
void   attn_sched_close(attn_sched_probe *p);

/* Other processes' CPU use over a window, in cores (system busy time from /proc/stat minus this process's CPU time,
 * over the wall time); -1 when unknown or the window was too short for /proc/stat's ticks. */
typedef struct attn_load_probe {
  double busy_s, own_s, wall_s;
  int ok;
} attn_load_probe;
void   attn_load_start(attn_load_probe *p);
double attn_load_end(const attn_load_probe *p);

#endif
