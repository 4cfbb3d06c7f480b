/* cmd_tune.c: `attntune [tune]`: for every (dtype, causal, d, d_v, n) asked for, builds the search space, runs a
 * strategy over it and stores each evaluation as it is made: measured on this CPU (--gpu cpu) or, for a GPU that
 * is not present, ranked by the performance model (provenance "model"); the GPU present is measured. A rerun of the same command skips what is
 * stored, so SIGINT loses at most the measurement in flight. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "cmds.h"
#include "gpus.h"
#include "measure.h"
#include "kres.h"
#include "model.h"
#include "range.h"
#include "space.h"
#include "artifact.h"
#include "db.h"
#include "finalist.h"
#include "shard.h"
#include "store.h"
#include "strategy.h"
#include "strategy_find.h"
#include "timing_env.h"

static const char tune_usage[] =
    "usage: attntune [tune] --gpu NAME|cpu --d RANGE [--dv RANGE] [--n RANGE] [--n-kv RANGE] [--algo LIST]\n"
    "                [--strategy NAME|FILE.lua] [--budget K] [--tolerance EPS] [--db PATH] [--model] [--jobs J]\n"
    "                [--dtype LIST] [--causal 0,1] [--heads H] [--batch B] [--reps R] [--time-cap S] [--remeasure]\n"
    "                [--compiled] [--shard K/N]\n"
    "  RANGE: 64..256 (doubling), 64..256:32 (step), 64,80,128 (list), 64\n"
    "  --d RANGE head dimension of Q and K; --dv RANGE head dimension of V and O (default: the same as d; every d\n"
    "  with every d_v): each in 1..576 (tiles that do not fit a GPU's shared memory are left out of its space)\n"
    "  --gpu (required) cpu measures this CPU, --gpu NAME the GPU present; one that is not present is ranked by\n"
    "  the performance model (attntune gpus lists the names; a variant's name, H100-SXM, is taken as its entry\n"
    "  with a note)\n"
    "  --n RANGE query rows (default 1024); --n-kv RANGE keys per head (default: n; every n with every n_kv):\n"
    "  decode (n below 64) and cross-attention are tuned under their own key; every problem (each dtype, causal,\n"
    "  d, d_v, n and n_kv with every other) is checked before anything runs, at most 65536 in one command\n"
    "  --algo flash,smallcache,lowrank (default flash; lowrank needs --tolerance > 0)\n"
    "  --strategy exhaustive|random|anneal|genetic|FILE.lua (default: exhaustive when the budget covers the space)\n"
    "  --budget K: configurations evaluated per problem (default: CPU 24, a GPU the whole space)\n"
    "  --dtype LIST of f32, f16, bf16 (default: cpu f32, GPU f16,bf16); --causal 0,1; --heads H (cpu 2, GPU 16);\n"
    "  --batch B (1);\n"
    "  --reps R: at least R timed repetitions per configuration (default 5; more until the median is known within\n"
    "  2% or --time-cap S seconds are spent, default 1); the best few and the untuned default are then re-timed\n"
    "  interleaved (up to 4 S), and a configuration replaces the default only when it wins beyond the noise\n"
    "  --remeasure: time again what is stored (a rerun otherwise skips it); --jobs J parallel compiles;\n"
    "  --compiled: for the performance model, compile every candidate with NVRTC (J at a time, kept in the\n"
    "  database) and rule out and rank by its real registers, spills and shared memory (without it: those the\n"
    "  database already holds, else an estimate)\n"
    "  --shard K/N: only part K of N (1..N) of the problems, each problem whole in one part, the parts balanced by\n"
    "  size; run the N parts with the same other arguments (e.g. a job array) and `attntune merge` their\n"
    "  databases: the rows of one unsharded run\n"
    "  --db PATH (default $ATTN_DB, else $XDG_CACHE_HOME/attntune/attntune.db, else ~/.cache/attntune/attntune.db)\n";

/* Problems one command tunes at most: each holds its search space for the whole run, and a model run of this many
 * takes about an hour; a larger sweep is a mistake in a range, or several commands. */
#define ATTN_TUNE_MAX_PROBLEMS 65536

#ifndef ATTN_VERSION
#define ATTN_VERSION "0"
#endif

const char *attn_tuner_version(void);
const char *attn_tuner_version(void) { return ATTN_VERSION; }

static volatile sig_atomic_t g_stop;
static void on_sigint(int sig) {
  (void)sig;
  g_stop = 1;
}

static int usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "attntune tune: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 2;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Comma list of names through parse (returns < 0 for unknown); bits set in *mask. */
static int parse_names(const char *s, int (*parse)(const char *), unsigned *mask, char *bad, size_t blen) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s);
  *mask = 0;
  char *save = NULL;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int v = parse(t);
    if (v < 0) {
      snprintf(bad, blen, "%s", t);
      return -1;
    }
    *mask |= 1u << v;
  }
  if (!*mask) snprintf(bad, blen, "%s", s);
  return *mask ? 0 : -1;
}

static int algo_parse_exact(const char *s) {
  int v = attn_algo_parse(s);
  return v == ATTN_ALGO_AUTO ? -1 : v;
}

typedef struct tune_opts {
  const char *gpu_name, *strategy, *db_path;
  int *ds, nd, *ns, nn, *nkvs, nnkv;
  int *dvs, ndv;           /* --dv: the d_v values; NULL: d_v = d (one value, 0) */
  int *kv;                 /* after parsing: the shapes, ns[i] query rows with kv[i] keys, i < nn */
  unsigned algos, dtypes;
  int causals[2], ncausal;
  int budget, jobs, heads, batch, reps, force_model, remeasure, compiled;
  int shard_k, shard_n;    /* --shard K/N; N = 0: every problem */
  double cap_s;            /* --time-cap: timed running per configuration; the finalist round gets 4x, the
                            * confirmation 2x */
  double tolerance;
} tune_opts;

/* A problem's finalist-round result, timed once more at the end of the run (confirm_pass). */
typedef struct confirm_item {
  attn_problem p;
  attn_spec spec[2];      /* the chosen configuration and, when it is another one, the default */
  attn_eval eval[2];
  int count;
} confirm_item;

typedef struct tune_state {
  tune_opts *o;
  attn_store *store;
  attn_runtime *rt;         /* measured mode */
  const attn_gpu *gpu;      /* model mode */
  int model;
  const char *provenance;
  attn_problem prob;
  attn_meas_ctx meas;
  int meas_ready;
  /* progress */
  int done, total, stored_now, resumed, failed;
  double t_start, busy_s;
  int tty;
  char fastest_line[256]; /* the tty line shows the fastest so far; the best (db.h tie rule) is printed at the end */
  double fastest_ms;
  int db_error;
  char db_err[512];
  int fresh;              /* evaluations of this problem measured now (not found stored) */
  int reranked;           /* model rows of estimated registers ranked again with the compiled kernel's */
  int invalidated;        /* model rows of configurations the compiled kernel rules out, stored invalid now */
  struct confirm_item *confirm; /* problems whose finalist round ran now, for the confirmation pass */
  int nconfirm, confirm_cap;
  attn_kres *kres;        /* model mode: the compiled kernels' resources (NULL: the estimate) */
  attn_spec default_cfg;  /* the problem's untuned default (measured mode) */
  char default_spec[512]; /* its canonical text ("" in model mode) */
} tune_state;

static void progress(tune_state *ts, const attn_spec *s, const attn_eval *e, int resumed) {
  char sum[256];
  attn_spec_summary(s, sum, sizeof sum);
  if (e->ok && (ts->fastest_ms <= 0 || e->time_ms < ts->fastest_ms)) {
    ts->fastest_ms = e->time_ms;
    snprintf(ts->fastest_line, sizeof ts->fastest_line, "%.200s %.4g ms", sum, e->time_ms);
  }
  if (ts->tty) {
    double per = ts->done - ts->resumed > 0 ? ts->busy_s / (ts->done - ts->resumed) : 0;
    double eta = per * (ts->total - ts->done);
    fprintf(stderr, "\r\033[K[%d/%d] fastest: %s | ETA %.0f s", ts->done, ts->total,
            ts->fastest_line[0] ? ts->fastest_line : "-", eta);
    fflush(stderr);
  } else {
    char io[64] = "", tm[48] = "", er[48] = "";
    if (e->time_ms > 0) snprintf(tm, sizeof tm, " %.4g ms", e->time_ms);
    if (e->io >= 0) snprintf(io, sizeof io, " io=%.0f", e->io);
    if (e->error >= 0) snprintf(er, sizeof er, " err=%.2g", e->error);
    char kv[32] = "", st[64] = "";
    if (ts->prob.n_kv && ts->prob.n_kv != ts->prob.n) snprintf(kv, sizeof kv, " n_kv=%d", ts->prob.n_kv);
    if (e->reps > 0 && e->time_ms > 0)
      snprintf(st, sizeof st, " (%d reps, iqr %.1f%%)", e->reps, 100 * e->iqr_ms / e->time_ms);
    printf("[%d/%d] n=%d%s %s: %s%s%s%s%s%s\n", ts->done, ts->total, ts->prob.n, kv, sum, e->status, tm, st, io, er,
           resumed ? " (stored before)" : "");
    if (!e->ok && e->message[0]) printf("    %.*s\n", (int)strcspn(e->message, "\n"), e->message);
    fflush(stdout);
  }
}

/* A database that fails ends the run (measuring on without storing would be lost work); the first reason is kept. */
static void db_failed(tune_state *ts, const char *err) {
  if (ts->db_error) return;
  ts->db_error = 1;
  snprintf(ts->db_err, sizeof ts->db_err, "%s", err);
}

/* How a measurement's time was taken, onto the evaluation that carries it to the store and the strategy. */
static void take_timing(attn_eval *e, const attn_meas_result *r) {
  e->time_ms = r->time_ms;
  e->reps = r->reps;
  e->clean = r->clean;
  e->iqr_ms = r->iqr_ms;
  e->ci_rel = r->ci_rel;
  e->load = r->load;
}

/* In a model row's log: its registers are the compiled kernel's */
#define MODEL_PTXAS "from ptxas"

static void eval_cb(attn_tuner *t, const attn_spec *s, attn_eval *e) {
  tune_state *ts = t->user;
  char err[512];
  int found = ts->o->remeasure ? 0 : attn_store_find(ts->store, &ts->prob, s, ts->provenance, e, err, sizeof err);
  if (found < 0) db_failed(ts, err);
  /* A model row ranked by estimated registers, where the compiled kernel's are known now (--compiled, or stored by
   * an earlier one): ranked again with them, and the row replaced */
  attn_kernel_res kr0;
  if (found > 0 && ts->model && ts->kres && !strstr(e->message, MODEL_PTXAS) && attn_kres_get(ts->kres, s, &kr0) == 0) {
    found = 0;
    ts->reranked++;
  }
  if (found > 0) {
    ts->done++;
    ts->resumed++;
    e->ok = strcmp(e->status, "ok") == 0 && (s->algo != ATTN_ALGO_LOWRANK || e->error <= t->tolerance);
    progress(ts, s, e, 1);
    return;
  }
  double t0 = now_s();
  memset(e, 0, sizeof *e);
  e->error = -1;
  e->io = -1;
  e->reads = e->writes = -1;
  e->iqr_ms = e->ci_rel = e->load = -1;
  if (ts->default_spec[0]) {
    char txt[512];
    attn_spec_format(s, txt, sizeof txt);
    e->is_default = strcmp(txt, ts->default_spec) == 0;
  }
  if (ts->model) {
    attn_model_result m;
    attn_kernel_res kr;
    const int known = ts->kres && attn_kres_get(ts->kres, s, &kr) == 0;
    if (attn_model_time_res(ts->gpu, &ts->prob, s, known ? &kr : NULL, &m, err, sizeof err) == ATTN_OK) {
      snprintf(e->status, sizeof e->status, "ok");
      /* where the registers came from, kept in the row's log: a later run with the compiled ones ranks it again */
      if (known) snprintf(e->message, sizeof e->message, "%d registers " MODEL_PTXAS " (%s)", m.registers,
                          ts->kres->compiler);
      else snprintf(e->message, sizeof e->message, "%d registers estimated", m.registers);
      snprintf(e->bound, sizeof e->bound, "%s", m.bound);
      e->time_ms = m.time_ms;
      e->io = (double)(m.reads + m.writes);
      e->reads = (long long)m.reads;
      e->writes = (long long)m.writes;
      e->ok = 1;
    } else {
      snprintf(e->status, sizeof e->status, "invalid");
      snprintf(e->message, sizeof e->message, "%.480s%s", err, known ? " (" MODEL_PTXAS ")" : "");
    }
  } else {
    attn_meas_result r;
    attn_measure(&ts->meas, s, &r);
    snprintf(e->status, sizeof e->status, "%s", r.status);
    snprintf(e->message, sizeof e->message, "%.500s", r.message);
    if (r.reps > 0) take_timing(e, &r);
    else e->time_ms = r.time_ms;
    if (strcmp(r.status, "ok") == 0 || strcmp(r.status, "wrong") == 0) e->error = r.error;
    if (r.have_io) {
      e->io = (double)(r.reads + r.writes);
      e->reads = (long long)r.reads;
      e->writes = (long long)r.writes;
    }
    e->ok = strcmp(r.status, "ok") == 0 && (s->algo != ATTN_ALGO_LOWRANK || r.error <= t->tolerance);
    if (!e->ok && strcmp(r.status, "ok") == 0)
      snprintf(e->message, sizeof e->message, "relative error %.3g is above --tolerance %g: not a candidate", r.error,
               t->tolerance);
  }
  /* Ctrl-C reaches the compiler too (same process group): a failure during a stop is not a result to keep. */
  if (g_stop && strcmp(e->status, "ok") != 0 && strcmp(e->status, "wrong") != 0) {
    snprintf(e->status, sizeof e->status, "interrupted");
    e->ok = 0;
    return;
  }
  if (attn_store_put(ts->store, &ts->prob, s, ts->provenance, e, err, sizeof err) != ATTN_OK) {
    db_failed(ts, err);
  } else {
    ts->stored_now++;
  }
  ts->fresh++;
  ts->busy_s += now_s() - t0;
  ts->done++;
  if (!e->ok) ts->failed++;
  progress(ts, s, e, 0);
  /* a database that stops taking rows ends the run: measuring on without storing would be lost work */
  if (ts->db_error) g_stop = 1;
}

/* A point the space rules out, for a problem of a model run that reads compiled kernels' resources. */
typedef struct prune_ctx {
  tune_state *ts;
  attn_problem p;
} prune_ctx;

/* Its stored model row, where one says "ok" (ranked by estimated registers, or by an older space), is stored
 * "invalid" with the reason: the database's best never names what the compiled kernel rules out. */
static void on_pruned(void *ctx, const attn_spec *c, const char *why) {
  prune_ctx *pc = ctx;
  tune_state *ts = pc->ts;
  attn_eval e;
  char err[512];
  const int found = attn_store_find(ts->store, &pc->p, c, "model", &e, err, sizeof err);
  if (found < 0) db_failed(ts, err);
  if (found <= 0 || strcmp(e.status, "ok") != 0) return;
  memset(&e, 0, sizeof e);
  e.error = e.io = -1;
  e.reads = e.writes = -1;
  e.iqr_ms = e.ci_rel = e.load = -1;
  snprintf(e.status, sizeof e.status, "invalid");
  snprintf(e.message, sizeof e.message, "%.400s (ruled out of the space now, registers " MODEL_PTXAS ")", why);
  if (attn_store_put(ts->store, &pc->p, c, "model", &e, err, sizeof err) != ATTN_OK) db_failed(ts, err);
  else ts->invalidated++;
}

typedef struct prefetch_job {
  const attn_runtime *rt;
  const attn_spec *specs;
  int count;
  int next;
  pthread_mutex_t mu;
} prefetch_job;

static void *prefetch_worker(void *arg) {
  prefetch_job *j = arg;
  for (;;) {
    pthread_mutex_lock(&j->mu);
    int i = g_stop ? j->count : j->next++;
    pthread_mutex_unlock(&j->mu);
    if (i >= j->count) return NULL;
    attn_meas_precompile(j->rt, &j->specs[i]); /* a failure shows again, with its log, when measured */
  }
}

/* --jobs J: compile what is about to be measured on J threads; measurements stay serial. */
static void prefetch_cb(attn_tuner *t, const int *idx, int count) {
  tune_state *ts = t->user;
  if (ts->model || ts->o->jobs <= 1 || count <= 1) return;
  attn_spec *specs = malloc(sizeof *specs * (size_t)count);
  if (!specs) return;
  int n = 0;
  char err[256];
  for (int i = 0; i < count; i++) {
    const attn_spec *s = &t->space->cfg[idx[i]];
    if (attn_store_find(ts->store, &ts->prob, s, ts->provenance, NULL, err, sizeof err) == 0) specs[n++] = *s;
  }
  prefetch_job j = {.rt = ts->rt, .specs = specs, .count = n};
  pthread_mutex_init(&j.mu, NULL);
  int nt = ts->o->jobs < n ? ts->o->jobs : n;
  pthread_t th[64];
  int started = 0;
  for (int i = 0; i < nt && i < 64; i++)
    if (pthread_create(&th[i], NULL, prefetch_worker, &j) == 0) started++;
  if (started == 0) prefetch_worker(&j);
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  pthread_mutex_destroy(&j.mu);
  free(specs);
}

static const char *algo_list(unsigned algos, char *buf, size_t len) {
  buf[0] = '\0';
  for (int a = ATTN_ALGO_FLASH; a <= ATTN_ALGO_LOWRANK; a++)
    if (algos & ATTN_ALGO_BIT(a)) {
      size_t l = strlen(buf);
      snprintf(buf + l, len - l, "%s%s", l ? "," : "", attn_algo_name((attn_algo)a));
    }
  return buf;
}

static void command_line(int argc, char **argv, char *buf, size_t len) {
  size_t l = 0;
  buf[0] = '\0';
  l += (size_t)snprintf(buf, len, "attntune");
  for (int i = 0; i < argc && l < len; i++) l += (size_t)snprintf(buf + l, len - l, " %s", argv[i]);
}

static int cmp_time(const void *a, const void *b, void *ctx) {
  const attn_eval *m = ctx;
  double x = m[*(const int *)a].time_ms, y = m[*(const int *)b].time_ms;
  return (x > y) - (x < y);
}

/* The finalist round of one measured problem (finalist.h): the ATTN_FINALISTS fastest exact configurations the
 * strategy found and the untuned default, re-timed interleaved; their rows get the round's times and the winner is
 * marked chosen. A rerun that measured nothing new keeps the stored choice. Fills *best and *why with the winner. */
static int finalist_round(tune_state *ts, attn_tuner *tu, attn_spec *best, attn_eval *best_eval, char *why,
                          size_t wlen) {
  char err[512];
  attn_spec specs[ATTN_FINALISTS + 1];
  attn_eval evals[ATTN_FINALISTS + 1];
  int count = 0, def = -1;
  /* the default: from this run's memory when the strategy evaluated it, else evaluated now (checked, counted) */
  const attn_spec ds = ts->default_cfg;
  int di = attn_space_find(tu->space, &ds);
  attn_eval de;
  if (di >= 0 && tu->memo && tu->memo_have[di]) {
    de = tu->memo[di];
  } else {
    ts->total++;
    eval_cb(tu, &ds, &de);
  }
  if (g_stop || ts->db_error) return -1;
  if (strcmp(de.status, "ok") == 0) {
    de.is_default = 1;
    specs[count] = ds;
    evals[count] = de;
    def = count++;
  }
  /* the fastest exact candidates */
  int *idx = malloc(sizeof *idx * (size_t)(tu->space->count > 0 ? tu->space->count : 1)), ni = 0;
  if (!idx) return -1;
  for (int i = 0; tu->memo && i < tu->space->count; i++)
    if (tu->memo_have[i] && tu->memo[i].ok && tu->space->cfg[i].algo != ATTN_ALGO_LOWRANK && i != di) idx[ni++] = i;
  qsort_r(idx, (size_t)ni, sizeof *idx, cmp_time, tu->memo);
  for (int k = 0; k < ni && count < ATTN_FINALISTS + 1 && (count - (def >= 0)) < ATTN_FINALISTS; k++) {
    specs[count] = tu->space->cfg[idx[k]];
    evals[count] = tu->memo[idx[k]];
    evals[count].is_default = 0;
    count++;
  }
  free(idx);
  if (count == 0) return -1;
  int stored_choice = -1;
  for (int i = 0; i < count; i++)
    if (evals[i].chosen) stored_choice = i;
  if (!ts->o->remeasure && ts->fresh == 0 && stored_choice >= 0) {
    *best = specs[stored_choice];
    *best_eval = evals[stored_choice];
    snprintf(why, wlen, "%s", "the stored finalist round's choice (nothing new measured)");
    return 0;
  }
  attn_meas_result res[ATTN_FINALISTS + 1];
  attn_finalist f[ATTN_FINALISTS + 1];
  int pick = 0;
  if (count == 1) {
    snprintf(why, wlen, "%s", def == 0 ? "the default is the only correct configuration" : "the only candidate");
  } else {
    if (attn_meas_finalists(&ts->meas, specs, count, 4 * ts->o->cap_s, res) != ATTN_OK) {
      for (int i = 0; i < count; i++)
        if (strcmp(res[i].status, "ok")) fprintf(stderr, "attntune tune: finalist round: %s\n", res[i].message);
      return -1;
    }
    for (int i = 0; i < count; i++)
      f[i] = (attn_finalist){.median_ms = res[i].time_ms, .ci_rel = res[i].ci_rel, .io = evals[i].io,
                             .is_default = i == def, .ok = strcmp(res[i].status, "ok") == 0};
    pick = attn_finalist_pick(f, count, why, wlen);
    if (pick < 0) return -1;
    if (!ts->tty) {
      printf("  finalists (%d interleaved rounds):", res[0].reps);
      for (int i = 0; i < count; i++) {
        char sum[256];
        attn_spec_summary(&specs[i], sum, sizeof sum);
        printf("%s %s%s %.4g ms", i ? ";" : "", i == def ? "[default] " : "", sum, res[i].time_ms);
      }
      printf("\n");
    }
    /* the round's times replace the screening ones: measured side by side, they are the comparable ones */
    for (int i = 0; i < count; i++) {
      take_timing(&evals[i], &res[i]);
      evals[i].final = 1;
      if (attn_store_put(ts->store, &ts->prob, &specs[i], ts->provenance, &evals[i], err, sizeof err) != ATTN_OK) {
        db_failed(ts, err);
        return -1;
      }
    }
  }
  if (attn_store_choose(ts->store, &ts->prob, &specs[pick], ts->provenance, err, sizeof err) != ATTN_OK) {
    db_failed(ts, err);
    return -1;
  }
  *best = specs[pick];
  *best_eval = evals[pick];
  best_eval->chosen = 1;
  if (count > 1) {
    if (ts->nconfirm == ts->confirm_cap) {
      int cap = ts->confirm_cap ? 2 * ts->confirm_cap : 16;
      confirm_item *c = realloc(ts->confirm, sizeof *c * (size_t)cap);
      if (!c) return 0; /* the confirmation is a refinement: without memory for it the round's result stands */
      ts->confirm = c;
      ts->confirm_cap = cap;
    }
    confirm_item *c = &ts->confirm[ts->nconfirm++];
    c->p = ts->prob;
    c->count = 0;
    c->spec[c->count] = specs[pick];
    c->eval[c->count++] = evals[pick];
    if (def >= 0 && def != pick) {
      c->spec[c->count] = specs[def];
      c->eval[c->count++] = evals[def];
    }
  }
  return 0;
}

/* The confirmation pass: at the end of the run, each problem's chosen configuration and default are timed once more,
 * interleaved. A slowdown of the whole machine (another guest on the host, a frequency drop) that the run delay does
 * not show slows every configuration of a round alike: the decision stands, but the stored times would carry it.
 * A row takes the confirmation's figure when it is lower, or higher beyond the noise of both
 * (attn_meas_confirm_keeps). */
static void confirm_pass(tune_state *ts) {
  if (ts->nconfirm == 0 || g_stop || ts->db_error) return;
  printf("confirmation: timing the chosen and default configurations of %d problem%s again\n", ts->nconfirm,
         ts->nconfirm > 1 ? "s" : "");
  char err[512];
  for (int k = 0; k < ts->nconfirm && !g_stop && !ts->db_error; k++) {
    confirm_item *c = &ts->confirm[k];
    ts->prob = c->p;
    if (attn_meas_init(&ts->meas, ts->rt, &c->p, ts->o->reps, err, sizeof err) != ATTN_OK) continue;
    ts->meas.cap_s = ts->o->cap_s;
    attn_meas_result res[2];
    int rc = attn_meas_finalists(&ts->meas, c->spec, c->count, 2 * ts->o->cap_s, res);
    attn_meas_free(&ts->meas);
    if (rc != ATTN_OK) continue;
    char kv[32] = "";
    if (c->p.n_kv != c->p.n) snprintf(kv, sizeof kv, " n_kv=%d", c->p.n_kv);
    char dvs[24] = "";
    if (c->p.d_v && c->p.d_v != c->p.d) snprintf(dvs, sizeof dvs, " d_v=%d", c->p.d_v);
    printf("  n=%d%s d=%d%s causal=%d:", c->p.n, kv, c->p.d, dvs, c->p.causal);
    for (int i = 0; i < c->count; i++) {
      attn_eval *e = &c->eval[i];
      const int lower = attn_meas_confirm_keeps(e->time_ms, e->ci_rel, &res[i]);
      printf(" %s %.4g ms then %.4g ms%s", i ? "; default" : "chosen", e->time_ms, res[i].time_ms,
             lower ? " (kept the later)" : "");
      if (!lower) continue;
      take_timing(e, &res[i]);
      /* a put replaces the row: the choice is marked again */
      if (attn_store_put(ts->store, &c->p, &c->spec[i], ts->provenance, e, err, sizeof err) != ATTN_OK ||
          (i == 0 && attn_store_choose(ts->store, &c->p, &c->spec[0], ts->provenance, err, sizeof err) != ATTN_OK)) {
        db_failed(ts, err);
        break;
      }
    }
    printf("\n");
    fflush(stdout);
  }
}

int attn_cmd_tune(int argc, char **argv) {
  tune_opts o = {.gpu_name = NULL, .budget = 0, .jobs = 1, .heads = 0, .batch = 1, .reps = 5, .cap_s = ATTN_MEAS_CAP_S};
  const char *d_s = NULL, *dv_s = NULL, *n_s = "1024", *nkv_s = NULL, *algo_s = "flash", *dtype_s = NULL,
             *causal_s = "0";
  int i0 = argc > 0 && strcmp(argv[0], "tune") == 0 ? 1 : 0;
  int budget_given = 0;
  for (int i = i0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      fputs(tune_usage, stdout);
      return 0;
    }
    if (strcmp(a, "--model") == 0) {
      o.force_model = 1;
      continue;
    }
    if (strcmp(a, "--remeasure") == 0) {
      o.remeasure = 1;
      continue;
    }
    if (strcmp(a, "--compiled") == 0) {
      o.compiled = 1;
      continue;
    }
    static const char *const with_value[] = {"--gpu",  "--d",     "--n",    "--algo",  "--strategy",
                                             "--budget", "--tolerance", "--db", "--jobs", "--dtype",
                                             "--causal", "--heads", "--batch", "--reps", "--n-kv",
                                             "--time-cap", "--shard", "--dv"};
    int known = 0;
    for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++) known |= strcmp(a, with_value[k]) == 0;
    if (!known) return usage("unknown option '%s' (see attntune tune --help)", a);
    if (i + 1 >= argc) return usage("%s needs a value", a);
    const char *v = argv[++i];
    if (strcmp(a, "--gpu") == 0) o.gpu_name = v;
    else if (strcmp(a, "--d") == 0) d_s = v;
    else if (strcmp(a, "--dv") == 0) dv_s = v;
    else if (strcmp(a, "--n") == 0) n_s = v;
    else if (strcmp(a, "--n-kv") == 0) nkv_s = v;
    else if (strcmp(a, "--algo") == 0) algo_s = v;
    else if (strcmp(a, "--strategy") == 0) o.strategy = v;
    else if (strcmp(a, "--db") == 0) o.db_path = v;
    else if (strcmp(a, "--dtype") == 0) dtype_s = v;
    else if (strcmp(a, "--causal") == 0) causal_s = v;
    else if (strcmp(a, "--shard") == 0) {
      char serr[160];
      if (attn_shard_parse(v, &o.shard_k, &o.shard_n, serr, sizeof serr)) return usage("%s", serr);
    }
    else if (strcmp(a, "--budget") == 0) {
      if (attn_parse_int(v, 0, 1000000, &o.budget)) return usage("--budget %s: expected a count >= 1", v);
      if (o.budget == 0) return usage("--budget 0: nothing would be evaluated; give --budget 1 or more");
      budget_given = 1;
    } else if (strcmp(a, "--jobs") == 0) {
      if (attn_parse_int(v, 1, 64, &o.jobs)) return usage("--jobs %s: expected 1..64", v);
    } else if (strcmp(a, "--heads") == 0) {
      if (attn_parse_int(v, 1, 4096, &o.heads)) return usage("--heads %s: expected 1..4096", v);
    } else if (strcmp(a, "--batch") == 0) {
      if (attn_parse_int(v, 1, 4096, &o.batch)) return usage("--batch %s: expected 1..4096", v);
    } else if (strcmp(a, "--reps") == 0) {
      if (attn_parse_int(v, 1, 64, &o.reps)) return usage("--reps %s: expected 1..64", v);
    } else if (strcmp(a, "--time-cap") == 0) {
      char *end;
      errno = 0;
      o.cap_s = strtod(v, &end);
      if (errno || end == v || *end || !(o.cap_s > 0) || o.cap_s > 3600)
        return usage("--time-cap %s: expected seconds in (0, 3600]", v);
    } else if (strcmp(a, "--tolerance") == 0) {
      char *end;
      errno = 0;
      o.tolerance = strtod(v, &end);
      if (errno || end == v || *end || !(o.tolerance >= 0) || o.tolerance >= 1)
        return usage("--tolerance %s: expected a relative error in [0, 1)", v);
    }
  }
  /* no silent default: a forgotten --gpu A100 would otherwise spend the run measuring this CPU */
  if (!o.gpu_name)
    return usage("--gpu is required: --gpu cpu measures this CPU, --gpu NAME a GPU (attntune gpus lists them)");
  if (!d_s) return usage("--d RANGE is required (e.g. --d 64..256)");
  char err[4096], bad[128];

  /* Target: this CPU, or a GPU from the spec table. */
  const attn_gpu *gpu = NULL;
  attn_target target = ATTN_TARGET_CPU;
  char gpu_note[256] = "";
  if (strcmp(o.gpu_name, "cpu") != 0) {
    gpu = attn_gpu_match(o.gpu_name, gpu_note, sizeof gpu_note, err, sizeof err);
    if (!gpu) return usage("%s", err);
    target = ATTN_TARGET_CUDA;
  } else if (o.force_model) {
    return usage("--model ranks GPU configurations: with --gpu cpu the CPU is measured");
  }

  if (attn_range_parse(d_s, &o.ds, &o.nd, err, sizeof err) != ATTN_OK) return usage("--d: %s", err);
  if (attn_range_parse(n_s, &o.ns, &o.nn, err, sizeof err) != ATTN_OK) {
    free(o.ds);
    return usage("--n: %s", err);
  }
  if (nkv_s && attn_range_parse(nkv_s, &o.nkvs, &o.nnkv, err, sizeof err) != ATTN_OK) {
    free(o.ds);
    free(o.ns);
    return usage("--n-kv: %s", err);
  }
  if (dv_s && attn_range_parse(dv_s, &o.dvs, &o.ndv, err, sizeof err) != ATTN_OK) {
    free(o.ds);
    free(o.ns);
    free(o.nkvs);
    return usage("--dv: %s", err);
  }
  const int ndv = o.dvs ? o.ndv : 1; /* d_v values per d (without --dv: d_v = d) */
  int status = 0;
  attn_store *store = NULL;
  attn_runtime *rt = NULL;
  tune_state ts;
  memset(&ts, 0, sizeof ts);
#define FAIL_USAGE(...)      \
  do {                       \
    status = usage(__VA_ARGS__); \
    goto out;                \
  } while (0)
  for (int i = 0; i < o.nd; i++)
    for (int j = 0; j < ndv; j++)
      if (attn_space_dims_ok(target, o.ds[i], o.dvs ? o.dvs[j] : 0, err, sizeof err) != 0) FAIL_USAGE("%s", err);
  if (parse_names(algo_s, algo_parse_exact, &o.algos, bad, sizeof bad))
    FAIL_USAGE("--algo: unknown algorithm '%s' (flash, smallcache, lowrank)", bad);
  if ((o.algos & ATTN_ALGO_BIT(ATTN_ALGO_LOWRANK)) && o.tolerance <= 0)
    FAIL_USAGE("--algo lowrank is approximate: give --tolerance > 0 (e.g. --tolerance 0.05)");
  if (dtype_s) {
    if (parse_names(dtype_s, attn_dtype_parse, &o.dtypes, bad, sizeof bad))
      FAIL_USAGE("--dtype: unknown dtype '%s' (f32, f16, bf16)", bad);
  } else {
    o.dtypes = target == ATTN_TARGET_CPU ? 1u << ATTN_F32 : (1u << ATTN_F16) | (1u << ATTN_BF16);
  }
  {
    /* 0 is not a positive RANGE value: the causal list is parsed by hand */
    char buf[64];
    snprintf(buf, sizeof buf, "%s", causal_s);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
      if (strcmp(t, "0") && strcmp(t, "1")) FAIL_USAGE("--causal %s: expected 0, 1 or 0,1", causal_s);
      int v = t[0] == '1';
      if (o.ncausal == 0 || o.causals[0] != v) o.causals[o.ncausal++] = v;
      if (o.ncausal == 2) break;
    }
    if (!o.ncausal) FAIL_USAGE("--causal %s: expected 0, 1 or 0,1", causal_s);
  }
  if (!o.heads) o.heads = target == ATTN_TARGET_CPU ? 2 : 16;

  /* The problems: every dtype, causal value, d, d_v, n and n_kv with every other, counted in 64 bits (each list has
   * at most ATTN_RANGE_MAX values, so the product cannot wrap) and capped before anything is allocated for them. */
  {
    const int nkv = o.nkvs ? o.nnkv : 1;
    const long long ndtypes = __builtin_popcount(o.dtypes), total =
        ndtypes * o.ncausal * (long long)o.nd * ndv * (long long)o.nn * nkv;
    if (total > ATTN_TUNE_MAX_PROBLEMS)
      FAIL_USAGE("--dtype, --causal, --d, --dv, --n and --n-kv make %lld problems, more than the %d one run tunes: "
                 "narrow the ranges", total, ATTN_TUNE_MAX_PROBLEMS);
    /* every n with every n_kv (n_kv defaults to n) */
    const int count = o.nn * nkv;
    int *ns = malloc(sizeof *ns * (size_t)count), *kv = malloc(sizeof *kv * (size_t)count);
    if (!ns || !kv) {
      free(ns), free(kv);
      fprintf(stderr, "attntune tune: out of memory\n");
      status = 1;
      goto out;
    }
    for (int i = 0, k = 0; i < o.nn; i++)
      for (int j = 0; j < nkv; j++, k++) ns[k] = o.ns[i], kv[k] = o.nkvs ? o.nkvs[j] : o.ns[i];
    free(o.ns);
    o.ns = ns;
    o.kv = kv;
    o.nn = count;
    /* each problem within the runtime's limits (rows, elements), before anything runs: its message names the first
     * that is not (the dtype and causal value do not change the limits) */
    for (int di = 0; di < o.nd; di++)
      for (int vi = 0; vi < ndv; vi++)
        for (int ni = 0; ni < o.nn; ni++) {
          const attn_problem p = {.batch = o.batch, .heads = o.heads, .n = o.ns[ni], .n_kv = o.kv[ni],
                                  .d = o.ds[di], .d_v = o.dvs ? o.dvs[vi] : 0, .dtype = ATTN_F32};
          attn_problem norm;
          if (attn_problem_normalize(NULL, &p, &norm) != ATTN_OK)
            FAIL_USAGE("%s (--n %d --n-kv %d --d %d --dv %d --heads %d --batch %d)", attn_last_error(NULL), p.n,
                       p.n_kv, p.d, p.d_v ? p.d_v : p.d, p.heads, p.batch);
        }
  }

  /* Strategy: a built-in name, a Lua strategy by name, or a file. */
  char lua_path[4300] = "", why[1400];
  int builtin = 0; /* 0 auto, 1 exhaustive, 2 random, 3 lua */
  if (o.strategy) {
    size_t sl = strlen(o.strategy);
    if (strcmp(o.strategy, "exhaustive") == 0) builtin = 1;
    else if (strcmp(o.strategy, "random") == 0) builtin = 2;
    else if (sl > 4 && strcmp(o.strategy + sl - 4, ".lua") == 0) {
      if (access(o.strategy, R_OK) != 0) FAIL_USAGE("--strategy %s: %s", o.strategy, strerror(errno));
      snprintf(lua_path, sizeof lua_path, "%s", o.strategy);
      builtin = 3;
    } else if (attn_strategy_find(o.strategy, lua_path, sizeof lua_path, why, sizeof why) == 0) {
      builtin = 3;
    } else {
      FAIL_USAGE("--strategy %s: %s", o.strategy, why);
    }
  }

  /* Measured or modelled. A GPU is measured only when it is the device present (and the build can run it). */
  ts.o = &o;
  ts.gpu = gpu;
  ts.tty = isatty(STDERR_FILENO);
  if (gpu_note[0]) printf("note: %s\n", gpu_note);
  attn_cuda_info_t devinfo;
  memset(&devinfo, 0, sizeof devinfo);
  if (gpu) {
    ts.model = 1;
    if (!o.force_model) {
      attn_runtime *probe = NULL;
      char present[512] = "no CUDA device";
      if (attn_open(NULL, ATTN_TARGET_CUDA, &probe) == ATTN_OK) {
        attn_cuda_info(probe, &devinfo);
        snprintf(present, sizeof present, "%s", probe->device);
        attn_close(probe);
      } else {
        const char *why = attn_last_error(NULL);
        snprintf(present, sizeof present, "%s", strncmp(why, "attn_open: ", 11) == 0 ? why + 11 : why);
      }
      if (strcmp(present, gpu->name) == 0) {
        ts.model = 0;
        printf("%s is present (%s, %s): measuring on the device (provenance measured)\n", gpu->name, devinfo.name,
               devinfo.arch);
      } else {
        printf("%s is not present (%s): ranking by the performance model (provenance model)\n", gpu->name, present);
      }
    } else {
      printf("%s: ranking by the performance model (--model; provenance model)\n", gpu->name);
    }
    if (ts.model && (o.algos & ATTN_ALGO_BIT(ATTN_ALGO_LOWRANK))) {
      printf("lowrank is left out of the model: its error is measured, never assumed\n");
      o.algos &= ~ATTN_ALGO_BIT(ATTN_ALGO_LOWRANK);
      if (!o.algos) FAIL_USAGE("--algo lowrank alone cannot be ranked by the model: add flash or smallcache");
    }
  }
  ts.provenance = ts.model ? "model" : "measured";
  /* Measured tuning times under the one environment bench and the finalist round use (timing_env.c). */
  if (!ts.model) attn_timing_env("tune", 0);

  char db_path[4096];
  if (o.db_path) snprintf(db_path, sizeof db_path, "%s", o.db_path);
  else if (attn_db_default_path(db_path, sizeof db_path)) FAIL_USAGE("database path too long");
  if (attn_store_open(db_path, &store, err, sizeof err) != ATTN_OK) {
    fprintf(stderr, "attntune tune: cannot open database %s: %s\n", db_path, err);
    status = 1;
    goto out;
  }
  ts.store = store;
  char device[256], devjson[1024];
  if (ts.model) {
    snprintf(device, sizeof device, "%s", gpu->name);
    snprintf(devjson, sizeof devjson,
             "{\"kind\": \"gpu\", \"name\": \"%s\", \"arch\": \"%s\", \"sms\": %d, \"smem_per_block_kb\": %g, "
             "\"bandwidth_tbs\": %g}",
             gpu->name, gpu->arch, gpu->sms, gpu->smem_per_block_kb, gpu->bandwidth_tbs);
  } else {
    if (attn_open(db_path, target, &rt) != ATTN_OK) {
      fprintf(stderr, "attntune tune: %s\n", attn_last_error(NULL));
      status = 1;
      goto out;
    }
    ts.rt = rt;
    if (target == ATTN_TARGET_CPU) attn_store_set_threads(store, rt->threads);
    /* the kernel cache is checked before anything is compiled into it (runtime/artifact.h); say when it is replaced */
    if (attn_cache_dir_ready(rt) != ATTN_OK) {
      fprintf(stderr, "attntune tune: %s\n", attn_last_error(rt));
      status = 1;
      goto out;
    }
    if (rt->cache_note[0]) fprintf(stderr, "attntune tune: %s\n", rt->cache_note);
    snprintf(device, sizeof device, "%s", rt->device);
    if (target == ATTN_TARGET_CUDA)
      snprintf(devjson, sizeof devjson,
               "{\"kind\": \"gpu\", \"name\": \"%s\", \"device\": \"%s\", \"arch\": \"%s\", \"sms\": %d, "
               "\"smem_per_block_kb\": %g, \"l2_bytes\": %d}",
               gpu->name, devinfo.name, devinfo.arch, devinfo.sms, devinfo.smem_optin / 1024.0, devinfo.l2_bytes);
    else
      snprintf(devjson, sizeof devjson,
               "{\"kind\": \"cpu\", \"threads\": %d, \"l2_bytes\": %.0f, \"llc_bytes\": %.0f}", rt->threads,
               attn_cpu_l2_bytes(), attn_cpu_llc_bytes());
  }
  char cmd[2048];
  command_line(argc, argv, cmd, sizeof cmd);
  if (attn_store_begin(store, device, devjson, cmd, err, sizeof err) != ATTN_OK) {
    fprintf(stderr, "attntune tune: %s: %s\n", db_path, err);
    status = 1;
    goto out;
  }

  /* Model mode: what ptxas reports for each candidate, from the database (and compiled with --compiled). */
  attn_kres kres;
  memset(&kres, 0, sizeof kres);
  if (ts.model) {
    attn_kres_init(&kres, attn_store_db(store), o.compiled);
    if (kres.compiler[0]) ts.kres = &kres;
    if (o.compiled && !kres.compiler[0])
      printf("--compiled: NVRTC is not available; the model estimates registers\n");
  }

  /* Spaces per (dtype, causal, d, d_v, n): the CPU's split-K values depend on the problem's work items; the total
   * for the progress line. */
  int nspaces = 0;
  for (int t = 0; t < 3; t++) nspaces += (o.dtypes >> t) & 1;
  nspaces *= o.ncausal * o.nd * ndv * o.nn;
  attn_space *spaces = calloc((size_t)nspaces, sizeof *spaces);
  /* --shard K/N: the part each problem belongs to, in the loops' order (0 for all when unsharded); every part of
   * one command computes the same partition, and a problem not in this part is neither built nor tuned */
  int *owner = calloc((size_t)nspaces, sizeof *owner);
  double *cost = calloc((size_t)nspaces, sizeof *cost);
  int si = 0, empty = 0, nmine = 0, oom = !spaces || !owner || !cost;
  if (!oom && o.shard_n) {
    for (int t = 0; t < 3; t++) {
      if (!((o.dtypes >> t) & 1)) continue;
      for (int c = 0; c < o.ncausal; c++)
        for (int di = 0; di < o.nd; di++)
          for (int vi = 0; vi < ndv; vi++)
            for (int ni = 0; ni < o.nn; ni++, si++)
              cost[si] = attn_shard_cost(o.ns[ni], o.kv[ni], o.ds[di], o.dvs ? o.dvs[vi] : 0, o.causals[c]);
    }
    oom = attn_shard_assign(cost, nspaces, o.shard_n, owner) != 0;
  }
  free(cost);
  if (oom) {
    fprintf(stderr, "attntune tune: out of memory\n");
    free(spaces);
    free(owner);
    status = 1;
    goto out;
  }
  si = 0;
  char algos_buf[64];
  for (int t = 0; t < 3; t++) {
    if (!((o.dtypes >> t) & 1)) continue;
    for (int c = 0; c < o.ncausal; c++)
      for (int dj = 0; dj < o.nd * ndv; dj++) {
        const int di = dj / ndv, dv = o.dvs ? o.dvs[dj % ndv] : 0;
        int first = 1; /* the first n of this (dtype, causal, d, d_v) tuned here speaks for the others when empty */
        for (int ni = 0; ni < o.nn; ni++, si++) {
          if (owner[si] != o.shard_k) continue;
          nmine++;
          attn_space_opts so = {.target = target, .dtype = (attn_dtype)t, .d = o.ds[di], .causal = o.causals[c],
                                .algos = o.algos, .tolerance = o.tolerance, .gpu = gpu, .n = o.ns[ni],
                                .n_kv = o.kv[ni], .heads = (long)o.batch * o.heads, .threads = rt ? rt->threads : 0,
                                .dv = dv};
          so.fast_mem_bytes = gpu ? gpu->smem_per_block_kb * 1024.0 : attn_cpu_l2_bytes();
          if (gpu) snprintf(so.arch, sizeof so.arch, "%s", gpu->arch);
          if (gpu && !ts.model) { /* the device present: its own limits and arch */
            so.fast_mem_bytes = devinfo.smem_optin;
            snprintf(so.arch, sizeof so.arch, "%s", devinfo.arch);
          }
          if (ts.kres) {
            so.resources = attn_kres_get;
            so.resources_ctx = ts.kres;
            if (o.compiled) { /* the grid's configurations first, compiled J at a time, then the space from them */
              attn_space probe;
              attn_kres_collect(ts.kres);
              if (attn_space_build(&so, &probe, err, sizeof err) == ATTN_OK) attn_space_free(&probe);
              attn_kres_fill(ts.kres, o.jobs);
            }
          }
          prune_ctx pc = {.ts = &ts, .p = {.batch = o.batch, .heads = o.heads, .n = o.ns[ni], .n_kv = o.kv[ni],
                                           .d = so.d, .dtype = so.dtype, .causal = so.causal, .tolerance = o.tolerance,
                                           .d_v = dv == so.d ? 0 : dv}};
          if (ts.kres) { /* stored model rows of what the compiled kernels rule out are ruled out too */
            so.pruned = on_pruned;
            so.pruned_ctx = &pc;
          }
          if (attn_space_build(&so, &spaces[si], err, sizeof err) != ATTN_OK) {
            fprintf(stderr, "attntune tune: %s\n", err);
            status = 1;
            continue;
          }
          int cnt = spaces[si].count;
          if (cnt == 0 && first) { /* n only prunes split values: the first n's space speaks for the others */
            char dvs[24] = "";
            if (so.dv && so.dv != so.d) snprintf(dvs, sizeof dvs, " d_v=%d", so.dv);
            fprintf(stderr,
                    "attntune tune: empty search space for %s d=%d%s %s causal=%d on %s: all %d configurations are "
                    "ruled out (e.g. %s)\n",
                    algo_list(o.algos, algos_buf, sizeof algos_buf), so.d, dvs, attn_dtype_name(so.dtype), so.causal,
                    device, spaces[si].considered,
                    spaces[si].pruned_example[0] ? spaces[si].pruned_example : "no configuration applies");
            empty++;
          }
          first = 0;
          int per = budget_given ? o.budget : (ts.model || target == ATTN_TARGET_CUDA ? cnt : 24);
          ts.total += per < cnt ? per : cnt;
        }
      }
  }
  free(owner);
  if (o.shard_n)
    printf("shard %d/%d: %d of the %d problems (every problem is tuned whole in one part; merge the parts' "
           "databases)\n", o.shard_k, o.shard_n, nmine, nspaces);

  struct sigaction sa, old_sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_sa);
  g_stop = 0;
  ts.t_start = now_s();

  si = 0;
  int unusable = 0, tuned = 0; /* problems the strategy ran on, and those of them with no usable configuration */
  char unusable_first[128] = "";
  for (int t = 0; t < 3 && !g_stop; t++) {
    if (!((o.dtypes >> t) & 1)) continue;
    for (int c = 0; c < o.ncausal && !g_stop; c++)
      for (int dj = 0; dj < o.nd * ndv && !g_stop; dj++, si += o.nn) {
        const int di = dj / ndv, dv = o.dvs ? o.dvs[dj % ndv] : 0;
        for (int ni = 0; ni < o.nn && !g_stop; ni++) {
          attn_space *sp = &spaces[si + ni];
          if (!sp->count) continue;
          attn_problem p = {.batch = o.batch, .heads = o.heads, .n = o.ns[ni], .n_kv = o.kv[ni], .d = o.ds[di],
                            .dtype = (attn_dtype)t, .causal = o.causals[c], .tolerance = o.tolerance,
                            .d_v = dv == o.ds[di] ? 0 : dv};
          ts.prob = p;
          ts.fastest_ms = 0;
          ts.fastest_line[0] = '\0';
          ts.fresh = 0;
          ts.default_spec[0] = '\0';
          if (!ts.model) {
            if (attn_meas_init(&ts.meas, rt, &p, o.reps, err, sizeof err) != ATTN_OK) {
              fprintf(stderr, "attntune tune: n=%d d=%d: %s\n", p.n, p.d, err);
              status = 1;
              continue;
            }
            ts.meas.cap_s = o.cap_s;
            attn_plan_default(rt, &ts.meas.p, ATTN_ALGO_FLASH, &ts.default_cfg);
            attn_spec_format(&ts.default_cfg, ts.default_spec, sizeof ts.default_spec);
          }
          attn_tuner tu = {.space = sp, .tolerance = o.tolerance, .stop = (volatile int *)&g_stop,
                           .eval = eval_cb, .prefetch = prefetch_cb, .user = &ts};
          tu.budget = budget_given ? o.budget : (ts.model || target == ATTN_TARGET_CUDA ? sp->count : 24);
          /* Deterministic per problem: the same command replays the same choices (resume). */
          tu.seed = 0x243f6a8885a308d3ULL ^ ((unsigned long long)p.n * 1000003ULL) ^ ((unsigned long long)p.d << 40) ^
                    ((unsigned long long)t << 56) ^ ((unsigned long long)p.causal << 60) ^
                    (p.n_kv != p.n ? (unsigned long long)p.n_kv * 0x9e3779b97f4a7c15ULL : 0) ^
                    (p.d_v ? (unsigned long long)p.d_v * 0xbf58476d1ce4e5b9ULL : 0);
          int b = builtin ? builtin : (tu.budget >= sp->count ? 1 : 2);
          int src = ATTN_OK;
          if (b == 1) src = attn_strategy_exhaustive(&tu);
          else if (b == 2) src = attn_strategy_random(&tu);
          else src = attn_strategy_lua(&tu, lua_path, err, sizeof err);
          /* Measured problems end with the finalist round: the best few against the default, interleaved. */
          char why[256] = "";
          attn_spec best = tu.best;
          attn_eval best_eval = tu.best_eval;
          int have_best = tu.have_best;
          if (src == ATTN_OK && !ts.model && !g_stop && tu.have_best && !ts.db_error) {
            if (finalist_round(&ts, &tu, &best, &best_eval, why, sizeof why) != 0 && !g_stop && !ts.db_error)
              snprintf(why, sizeof why, "finalist round failed: screening times");
          }
          attn_tuner_release(&tu);
          if (!ts.model) attn_meas_free(&ts.meas);
          if (ts.tty) fputc('\n', stderr);
          if (src != ATTN_OK) {
            fprintf(stderr, "attntune tune: %s\n", b == 3 ? err : attn_strerror(src));
            status = 1;
            g_stop = g_stop ? g_stop : 2; /* a broken strategy breaks every problem the same way */
            break;
          }
          if (ts.db_error) break;
          if (g_stop == 1) break; /* an interrupted problem has no best yet */
          tuned++;
          char sum[256], kv[32] = "", dvs[24] = "";
          if (p.n_kv != p.n) snprintf(kv, sizeof kv, " n_kv=%d", p.n_kv);
          if (p.d_v && p.d_v != p.d) snprintf(dvs, sizeof dvs, " d_v=%d", p.d_v);
          if (have_best) {
            attn_spec_summary(&best, sum, sizeof sum);
            printf("best n=%d%s d=%d%s %s causal=%d: %s: %.4g ms (%s, %d evaluated)%s%s\n", p.n, kv, p.d, dvs,
                   attn_dtype_name(p.dtype), p.causal, sum, best_eval.time_ms, ts.provenance, tu.used,
                   why[0] ? "; " : "", why);
          } else {
            printf("best n=%d%s d=%d%s %s causal=%d: none of %d evaluated configurations ran correctly\n", p.n, kv,
                   p.d, dvs, attn_dtype_name(p.dtype), p.causal, tu.used);
            if (tu.used > 0 && !unusable++) /* a strategy that evaluated nothing has not found everything failing */
              snprintf(unusable_first, sizeof unusable_first, "n=%d%s d=%d%s %s causal=%d", p.n, kv, p.d, dvs,
                       attn_dtype_name(p.dtype), p.causal);
          }
          fflush(stdout);
        }
      }
  }
  if (!ts.model) confirm_pass(&ts);
  free(ts.confirm);
  if (ts.kres && (kres.compiled || kres.stored_hits))
    printf("the model read %d compiled kernels' registers and spills (%d compiled now)\n",
           kres.compiled + kres.stored_hits, kres.compiled);
  if (ts.reranked || ts.invalidated)
    printf("stored model rows of estimated registers: %d ranked again with the compiled kernels' and %d ruled out "
           "by them\n", ts.reranked, ts.invalidated);
  attn_kres_free(&kres);
  sigaction(SIGINT, &old_sa, NULL);
  attn_store_end(store, g_stop == 1);
  for (int k = 0; k < nspaces; k++) attn_space_free(&spaces[k]);
  free(spaces);
  if (ts.db_error) {
    fprintf(stderr, "attntune tune: database %s: %s (%d rows stored before)\n", db_path, ts.db_err, ts.stored_now);
    status = 1;
  } else if (g_stop == 1) {
    fprintf(stderr, "interrupted: %d measurements stored; run the same command to resume\n", ts.stored_now);
    status = 130;
  } else {
    printf("%d evaluations (%d stored now, %d found stored) in %.1f s into %s\n", ts.done, ts.stored_now, ts.resumed,
           now_s() - ts.t_start, db_path);
    if (empty && status == 0) status = 1;
    if (unusable) { /* a run that stored only failures has no answer for those problems: not a success */
      fprintf(stderr, "attntune tune: no usable configuration for %d of the %d problems tuned (%s%s): every one "
              "evaluated failed (the rows say why)\n", unusable, tuned, unusable_first, unusable > 1 ? ", ..." : "");
      status = 1;
    }
  }
out:
  attn_close(rt);
  attn_store_close(store);
  free(o.ds);
  free(o.dvs);
  free(o.ns);
  free(o.nkvs);
  free(o.kv);
  return status;
}
