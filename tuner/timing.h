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

/* Rounds: the one loop that times configurations ("sides") interleaved, for screening (one side), the finalist
 * round and its confirmation, bench's points on the CPU and on CUDA, and the machine's ceilings. Each round runs every
 * side once, the order rotating by one each round (no side always follows the same other one). The stop rule, one for
 * all of them, with each caller's parameters (docs/tuning.md):
 *  - after a round, stop when at least min_rounds rounds ran and every side's estimate is known within rel_tol (its
 *    95% interval), unless (wait_clean) a side has some clean repetitions but fewer than ATTN_TIMING_MIN_CLEAN and,
 *    at the rate seen, the rest would come before the cap;
 *  - or when cap_s seconds of timed running (all sides) are spent and at least min_rounds_at_cap rounds ran;
 *  - a first round whose runs average more than long_run_ms lowers both minimums to 3.
 * The load gate: an attempt whose threads spent more than stolen_max of their time waiting for a CPU (the run delay,
 * summed over the sides' repetitions) measured the other processes more than the kernels, unless every side's
 * estimate is the median of clean repetitions. Such an attempt is worthless: after a wait (retry_wait_s, doubling)
 * the rounds run again from the start, at most `retries` times and while the waits and the attempts after the first
 * stay within retry_budget_s; the attempt kept is the first that is not worthless, else the least disturbed one. */
/* The threads' share of time waiting for a CPU that makes an attempt worthless: one core of two kept busy by another
 * process costs two threads about 0.25 (the corrected estimate holds, docs/tuning.md); under a load average of 9 to
 * 18 on two cores they waited about half their time and estimates were off by up to 2.5x. */
#define ATTN_ROUNDS_STOLEN_MAX 0.35

/* Side `side`'s run: *ms its time, *delay_ms the threads' run delay meanwhile (-1 unknown; 0 where the timer does not
 * see the host's scheduler). timed: 0 for a warm-up run. Returns 0, or nonzero to end the rounds (the caller keeps
 * its own error). */
typedef int (*attn_rounds_run)(void *user, int side, int timed, double *ms, double *delay_ms);

typedef struct attn_rounds_caps {
  int min_rounds;        /* rounds before known estimates may end them */
  int min_rounds_at_cap; /* rounds the cap never cuts below (at least 1) */
  double long_run_ms;    /* a first round whose runs average more than this: both minimums at most 3 (<= 0: never) */
  double rel_tol;        /* every estimate's 95% interval within this fraction of it */
  double cap_s;          /* timed running of one attempt, all sides together */
  int wait_clean;        /* go on for clean repetitions while they would come before the cap */
  int warmup;            /* untimed rounds before the timed ones, in every attempt */
  int threads;           /* the kernels' threads: the run delay is spread over them */
  /* the load gate (retries = 0: none) */
  int retries;
  double retry_wait_s, retry_budget_s;
  double stolen_max;     /* <= 0: ATTN_ROUNDS_STOLEN_MAX */
  void (*sleep_s)(double seconds); /* NULL: nanosleep (tests pass a fake clock) */
} attn_rounds_caps;

typedef struct attn_rounds_out {
  int rounds;            /* timed rounds of the attempt kept */
  double spent_s;        /* its timed running */
  int attempts;          /* 1 + the retries made */
  double waited_s;       /* the gate's waits */
  double stolen;         /* the kept attempt's share of the threads' time spent waiting for a CPU; -1 unknown */
  int worthless;         /* the kept attempt is worthless too (the retries were spent) */
} attn_rounds_out;

/* Times `sides` sides by run(user, ...) under caps into st[0 .. sides) (the kept attempt's estimates). Returns 0, -1
 * out of memory, or run's nonzero return (st then undefined). */
int attn_rounds(const attn_rounds_caps *caps, int sides, attn_rounds_run run, void *user, attn_timing_stats *st,
                attn_rounds_out *out);

/* Whether an attempt with these estimates and this share of time stolen is worthless (the gate above). */
int attn_rounds_worthless(const attn_timing_stats *st, int sides, double stolen, double stolen_max);

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
