/* timing.c: repetition statistics, the scheduler's run delay of this process's threads, and other processes' load. */
#include "timing.h"
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void attn_timing_init(attn_timing *t, int threads) {
  memset(t, 0, sizeof *t);
  t->threads = threads > 0 ? threads : 1;
}

void attn_timing_free(attn_timing *t) {
  free(t->wall);
  free(t->delay);
  t->wall = t->delay = NULL;
  t->count = t->cap = 0;
}

int attn_timing_add(attn_timing *t, double wall_ms, double delay_ms) {
  if (t->count == t->cap) {
    int cap = t->cap ? 2 * t->cap : 64;
    double *w = realloc(t->wall, sizeof *w * (size_t)cap);
    if (!w) return -1;
    t->wall = w;
    double *d = realloc(t->delay, sizeof *d * (size_t)cap);
    if (!d) return -1;
    t->delay = d;
    t->cap = cap;
  }
  t->wall[t->count] = wall_ms;
  t->delay[t->count] = delay_ms;
  t->count++;
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* A repetition whose threads waited less than 1% of its time (and under 20 us) for a CPU. */
static int is_clean(double wall, double delay) { return delay >= 0 && delay <= 0.01 * wall && delay < 0.02; }

static double quantile(const double *x, int m, double q) {
  double pos = q * (m - 1);
  int i = (int)pos;
  double f = pos - i;
  return i + 1 < m ? x[i] * (1 - f) + x[i + 1] * f : x[m - 1];
}

void attn_timing_stats_of(const attn_timing *t, attn_timing_stats *s) {
  memset(s, 0, sizeof *s);
  s->reps = t->count;
  s->method = "wall";
  s->ci_rel = INFINITY;
  if (t->count == 0) return;
  double *x = malloc(sizeof *x * (size_t)t->count);
  if (!x) return;
  int known = 1, m = 0;
  for (int i = 0; i < t->count; i++) {
    if (t->delay[i] < 0) known = 0;
    if (is_clean(t->wall[i], t->delay[i])) s->clean++;
  }
  if (known && s->clean >= ATTN_TIMING_MIN_CLEAN) {
    s->method = "clean";
    for (int i = 0; i < t->count; i++)
      if (is_clean(t->wall[i], t->delay[i])) x[m++] = t->wall[i];
  } else if (known) {
    s->method = "corrected";
    for (int i = 0; i < t->count; i++) {
      double c = t->wall[i] - t->delay[i] / t->threads;
      x[m++] = c > 0 ? c : t->wall[i] / t->threads;
    }
  } else {
    for (int i = 0; i < t->count; i++) x[m++] = t->wall[i];
  }
  qsort(x, (size_t)m, sizeof *x, cmp_double);
  /* Interference only ever adds time: what the correction leaves of it is one-sided, so the corrected sample's
   * lower quartile, not its median, estimates the kernel's own time (on a quiet machine the two are 1-2% apart). */
  const double q = !strcmp(s->method, "corrected") ? 0.25 : 0.5;
  s->used = m;
  s->median_ms = quantile(x, m, q);
  s->iqr_ms = quantile(x, m, 0.75) - quantile(x, m, 0.25);
  /* Distribution-free 95% interval of that quantile: order statistics m q -+ 1.96 sqrt(m q (1 - q)) (binomial,
   * normal approximation) */
  double k = 1.96 * sqrt(m * q * (1 - q));
  int lo = (int)floor(m * q - k), hi = (int)ceil(m * q + k);
  if (lo < 0) lo = 0;
  if (hi > m - 1) hi = m - 1;
  if (m >= 3 && s->median_ms > 0) s->ci_rel = 0.5 * (x[hi] - x[lo]) / s->median_ms;
  free(x);
}

/* The estimate known within rel_tol, and (wait_clean) no clean repetitions worth waiting for: some came, fewer than
 * ATTN_TIMING_MIN_CLEAN, and at the rate seen the rest would come within the cap. spent_s: the timed running so far
 * of everything the cap covers (all sides of a round), over t->count rounds. */
static int known(const attn_timing *t, const attn_timing_stats *s, double rel_tol, int wait_clean, double spent_s,
                 double cap_s) {
  if (t->count < 1 || !(s->ci_rel <= rel_tol)) return 0;
  if (!wait_clean || s->clean >= ATTN_TIMING_MIN_CLEAN || s->clean == 0) return 1;
  double per_rep = spent_s / t->count, rate = (double)s->clean / t->count;
  double need_s = (ATTN_TIMING_MIN_CLEAN - s->clean) / rate * per_rep;
  return need_s > cap_s - spent_s;
}

int attn_timing_enough(const attn_timing *t, const attn_timing_stats *s, double rel_tol, int min_reps, double spent_s,
                       double cap_s) {
  if (spent_s >= cap_s && t->count >= 1) return 1;
  return t->count >= min_reps && known(t, s, rel_tol, 1, spent_s, cap_s);
}

int attn_rounds_worthless(const attn_timing_stats *st, int sides, double stolen, double stolen_max) {
  if (stolen_max <= 0) stolen_max = ATTN_ROUNDS_STOLEN_MAX;
  if (!(stolen > stolen_max)) return 0; /* unknown (-1) is not evidence */
  for (int i = 0; i < sides; i++)
    if (strcmp(st[i].method, "clean") != 0) return 1;
  return 0;
}

static void real_sleep(double seconds) {
  struct timespec ts = {.tv_sec = (time_t)seconds, .tv_nsec = (long)((seconds - floor(seconds)) * 1e9)};
  nanosleep(&ts, NULL); /* a signal ends the wait early: the caller's loop sees it */
}

/* One attempt: warm-up rounds, then timed rounds until the stop rule (timing.h). */
static int attempt(const attn_rounds_caps *c, int sides, attn_rounds_run run, void *user, attn_timing *tm,
                   attn_timing_stats *st, attn_rounds_out *o) {
  for (int i = 0; i < sides; i++) tm[i].count = 0;
  double ms, delay;
  for (int w = 0; w < c->warmup; w++)
    for (int t = 0; t < sides; t++) {
      int rc = run(user, (w + t) % sides, 0, &ms, &delay);
      if (rc) return rc;
    }
  int min_r = c->min_rounds > 1 ? c->min_rounds : 1, min_cap = c->min_rounds_at_cap > 1 ? c->min_rounds_at_cap : 1;
  double spent = 0, waited = 0, wall = 0;
  int delays_known = 1;
  for (int r = 0;; r++) {
    double round_ms = 0;
    for (int t = 0; t < sides; t++) {
      const int side = (r + t) % sides; /* no side always runs after the same other one */
      ms = 0, delay = -1;
      int rc = run(user, side, 1, &ms, &delay);
      if (rc) return rc;
      if (attn_timing_add(&tm[side], ms, delay) != 0) return -1;
      round_ms += ms;
      wall += ms;
      if (delay >= 0) waited += delay / tm[side].threads;
      else delays_known = 0;
    }
    spent += round_ms / 1e3;
    if (r == 0 && c->long_run_ms > 0 && round_ms / sides > c->long_run_ms) {
      if (min_r > 3) min_r = 3;
      if (min_cap > 3) min_cap = 3;
    }
    int all = 1;
    for (int i = 0; i < sides; i++) {
      attn_timing_stats_of(&tm[i], &st[i]);
      all &= known(&tm[i], &st[i], c->rel_tol, c->wait_clean, spent, c->cap_s);
    }
    if ((r + 1 >= min_cap && spent >= c->cap_s) || (r + 1 >= min_r && all)) {
      o->rounds = r + 1;
      break;
    }
  }
  o->spent_s = spent;
  o->stolen = delays_known && wall > 0 ? waited / wall : -1;
  return 0;
}

int attn_rounds(const attn_rounds_caps *caps, int sides, attn_rounds_run run, void *user, attn_timing_stats *st,
                attn_rounds_out *out) {
  memset(out, 0, sizeof *out);
  out->stolen = -1;
  if (sides < 1) return 0;
  attn_timing *tm = calloc((size_t)sides, sizeof *tm);
  attn_timing_stats *kept = calloc((size_t)sides, sizeof *kept);
  int rc = tm && kept ? 0 : -1;
  for (int i = 0; i < sides && rc == 0; i++) attn_timing_init(&tm[i], caps->threads);
  double wait = caps->retry_wait_s > 0 ? caps->retry_wait_s : 0, used = 0;
  for (int a = 0; rc == 0; a++) {
    attn_rounds_out o = {.stolen = -1};
    if ((rc = attempt(caps, sides, run, user, tm, st, &o)) != 0) break;
    if (a > 0) used += o.spent_s;
    const int bad = attn_rounds_worthless(st, sides, o.stolen, caps->stolen_max);
    out->attempts = a + 1;
    /* the first attempt that is not worthless, else the least disturbed one */
    if (a == 0 || !bad || (o.stolen >= 0 && o.stolen < out->stolen)) {
      memcpy(kept, st, sizeof *kept * (size_t)sides);
      out->rounds = o.rounds;
      out->spent_s = o.spent_s;
      out->stolen = o.stolen;
      out->worthless = bad;
    }
    if (!bad || a >= caps->retries || used + wait > caps->retry_budget_s) break;
    (caps->sleep_s ? caps->sleep_s : real_sleep)(wait);
    out->waited_s += wait;
    used += wait;
    wait *= 2;
  }
  if (rc == 0) memcpy(st, kept, sizeof *kept * (size_t)sides);
  for (int i = 0; tm && i < sides; i++) attn_timing_free(&tm[i]);
  free(tm);
  free(kept);
  return rc;
}

void attn_sched_open(attn_sched_probe *p) {
  p->count = 0;
  DIR *d = opendir("/proc/self/task");
  if (!d) return;
  struct dirent *e;
  char path[96];
  while ((e = readdir(d)) && p->count < (int)(sizeof p->fd / sizeof p->fd[0])) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "/proc/self/task/%.40s/schedstat", e->d_name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) p->fd[p->count++] = fd;
  }
  closedir(d);
}

double attn_sched_delay_ms(const attn_sched_probe *p) {
  if (p->count == 0) return -1;
  double sum = 0;
  for (int i = 0; i < p->count; i++) {
    char buf[128];
    ssize_t r = pread(p->fd[i], buf, sizeof buf - 1, 0);
    if (r <= 0) continue; /* a thread that ended waits no more */
    buf[r] = '\0';
    unsigned long long run, wait;
    if (sscanf(buf, "%llu %llu", &run, &wait) != 2) return -1;
    sum += (double)wait / 1e6;
  }
  return sum;
}

void attn_sched_close(attn_sched_probe *p) {
  for (int i = 0; i < p->count; i++) close(p->fd[i]);
  p->count = 0;
}

static double mono_s(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Busy seconds of all CPUs (everything but idle and iowait), or -1. */
static double system_busy_s(void) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return -1;
  unsigned long long v[8] = {0};
  int got = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                   &v[7]);
  fclose(f);
  long hz = sysconf(_SC_CLK_TCK);
  if (got < 4 || hz <= 0) return -1;
  unsigned long long busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]; /* user nice system irq softirq steal */
  return (double)busy / (double)hz;
}

void attn_load_start(attn_load_probe *p) {
  p->busy_s = system_busy_s();
  p->own_s = mono_s(CLOCK_PROCESS_CPUTIME_ID);
  p->wall_s = mono_s(CLOCK_MONOTONIC);
  p->ok = p->busy_s >= 0;
}

double attn_load_end(const attn_load_probe *p) {
  if (!p->ok) return -1;
  double busy = system_busy_s();
  double own = mono_s(CLOCK_PROCESS_CPUTIME_ID) - p->own_s, wall = mono_s(CLOCK_MONOTONIC) - p->wall_s;
  long hz = sysconf(_SC_CLK_TCK);
  /* /proc/stat counts in ticks: below ~25 of them the difference is mostly rounding */
  if (busy < 0 || hz <= 0 || wall * hz < 25) return -1;
  double others = (busy - p->busy_s - own) / wall;
  return others > 0 ? others : 0;
}
