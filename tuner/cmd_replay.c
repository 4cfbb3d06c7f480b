/* cmd_replay.c: `attntune replay`: runs search strategies against the measurements a database already holds for
 * whole search spaces (stored by `attntune --strategy exhaustive`, measured or model rows, the forward's or with
 * --pass bwd the backward's), so strategies can be compared in seconds and reproducibly: the space is built as tune
 * builds it (space.c), the strategy runs under the same runner (strategy.h: the tuner's evaluation gate, budget and
 * memory; the Lua host), and only the evaluation callback differs: it answers from the stored rows. Nothing is
 * compiled, timed or written. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cmds.h"
#include "db.h"
#include "gpus.h"
#include "kres.h"
#include "range.h"
#include "space.h"
#include "strategy.h"
#include "strategy_find.h"

static const char replay_usage[] =
    "usage: attntune replay --from FULL.db --strategy NAME|FILE.lua [--strategy ...] [--budget K] [--seeds S]\n"
    "                --gpu NAME|cpu --d RANGE [--dv RANGE] [--n RANGE] [--n-kv RANGE] [--algo LIST] [--dtype LIST]\n"
    "                [--causal 0,1] [--heads H] [--heads-kv G] [--batch B] [--tolerance EPS] [--pass fwd,bwd]\n"
    "                [--nondeterministic] [--partial] [--json] [--plot FILE.svg]\n"
    "  runs each strategy against the rows FULL.db holds for each problem whose whole search space is stored\n"
    "  (tune --strategy exhaustive, measured or model rows of dense attention): tune.evaluate answers with the\n"
    "  stored time, status and I/O; nothing is compiled or timed, and the same arguments give the same output\n"
    "  --strategy exhaustive|random|anneal|genetic|bayes|guided|FILE.lua: once per strategy to compare (one at least)\n"
    "  --budget K: evaluations per run (default: the whole space); --seeds S: runs per strategy and problem, seeded\n"
    "  0..S-1 (default 10)\n"
    "  the problem options are tune's, with its defaults (attntune tune --help), but for --heads-kv G: without it,\n"
    "  each K/V head count stored for the problem is a problem of its own, its space built for that count (GQA\n"
    "  decode's split-KV points); with it, only the rows of G K/V heads\n"
    "  --pass fwd,bwd: the forward's rows (fwd, the default), the backward's (bwd: tune --pass bwd's rows over the\n"
    "  backward's own space, Br and Bc apart from the forward's), or both: each pass of each problem a problem of its\n"
    "  own, its header and JSON saying the pass\n"
    "  --nondeterministic: a GPU's backward space holds dQ summed by fp32 atomics too (dq=atomic), as tune's option\n"
    "  builds it; without it, a backward space holds them where its rows stored have them\n"
    "  --partial: replay problems whose space is stored in part too; evaluating a configuration with no row is an\n"
    "  error that names it\n"
    "  --json: the report as JSON; --plot FILE.svg: the median curves of best found / optimum, a panel per problem\n"
    "  report per problem: the median [quartiles] over the seeds of the optimum's time / the best time found after k\n"
    "  evaluations (1.0: the optimum found), and the median [quartiles] of the evaluations to come within 5% and 1%\n"
    "  of the optimum\n";

#define MAX_STRATEGIES 16

static int usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "attntune replay: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 2;
}

/* A stored row, as the key fields and the result the tuner would read back. */
typedef struct mrow {
  char *device, *spec;
  char prov[16];
  int bwd;                /* the pass: 1 the backward's row (tune --pass bwd) */
  int n, n_kv, d, d_v, batch, heads, heads_kv, causal, threads;
  attn_dtype dtype;
  attn_eval e;
} mrow;

typedef struct rows {
  mrow *v;
  int count, cap, oom;
} rows;

/* Statuses a kernel earns itself (store.c's rule): the others are the environment's and count as not stored. */
static int final_status(const char *s) {
  return !strcmp(s, "ok") || !strcmp(s, "wrong") || !strcmp(s, "compile_error") || !strcmp(s, "invalid");
}

static int collect_row(void *ctx, const attn_db_meas *m) {
  rows *r = ctx;
  if (!m->status || !final_status(m->status) || !m->spec || !m->device) return 0;
  /* the spaces replayed are dense attention's, the forward's and the backward's (its rows kept apart by their pass:
   * the same spec texts time other kernels); those of a layout or score modifier (a variant) time other kernels */
  const int bwd = m->pass && strcmp(m->pass, "bwd") == 0;
  if ((m->pass && strcmp(m->pass, "fwd") != 0 && !bwd) || (m->variant && m->variant[0])) return 0;
  if (r->count == r->cap) {
    int cap = r->cap ? 2 * r->cap : 256;
    mrow *v = realloc(r->v, sizeof *v * (size_t)cap);
    if (!v) {
      r->oom = 1;
      return 1;
    }
    r->v = v;
    r->cap = cap;
  }
  mrow *w = &r->v[r->count];
  memset(w, 0, sizeof *w);
  w->device = strdup(m->device);
  w->spec = strdup(m->spec);
  if (!w->device || !w->spec) {
    free(w->device);
    free(w->spec);
    r->oom = 1;
    return 1;
  }
  snprintf(w->prov, sizeof w->prov, "%s", m->provenance ? m->provenance : "");
  w->bwd = bwd;
  w->n = m->n, w->n_kv = m->n_kv, w->d = m->d, w->d_v = m->d_v, w->batch = m->batch, w->heads = m->heads;
  w->heads_kv = m->heads_kv > 0 ? m->heads_kv : m->heads;
  w->causal = m->causal, w->threads = m->threads, w->dtype = m->dtype;
  attn_eval *e = &w->e;
  snprintf(e->status, sizeof e->status, "%s", m->status);
  e->time_ms = m->time_ms;
  e->error = m->has_error ? m->error : -1;
  e->reads = m->reads;
  e->writes = m->writes;
  e->io = m->reads >= 0 && m->writes >= 0 ? (double)(m->reads + m->writes) : -1;
  snprintf(e->message, sizeof e->message, "%s", m->log ? m->log : "");
  e->reps = m->reps;
  e->iqr_ms = m->iqr_ms;
  e->ci_rel = -1;
  e->load = m->load;
  e->final = m->final;
  e->is_default = m->is_default;
  e->chosen = m->chosen;
  snprintf(e->bound, sizeof e->bound, "%s", m->bound ? m->bound : "");
  r->count++;
  return 0;
}

/* The CPU devices' L2 sizes as their rows' runs recorded them (the space's fast-memory limit on that machine). */
typedef struct dev_l2 {
  char name[256];
  double l2;
} dev_l2;
typedef struct devs {
  dev_l2 v[64];
  int count;
} devs;

static int collect_device(void *ctx, const attn_db_device *d) {
  devs *ds = ctx;
  if (ds->count == 64 || !d->name || !d->info) return 0;
  json_t *j = json_loads(d->info, 0, NULL);
  json_t *l2 = j ? json_object_get(j, "l2_bytes") : NULL;
  if (l2 && json_is_number(l2) && json_number_value(l2) > 0) {
    snprintf(ds->v[ds->count].name, sizeof ds->v[0].name, "%s", d->name);
    ds->v[ds->count++].l2 = json_number_value(l2);
  }
  json_decref(j);
  return 0;
}

/* "[bwd ]n=.. [n_kv=..] d=.. [d_v=..] DTYPE causal=.. heads=.. [heads_kv=..] batch=..": heads_kv where GQA (hkv
 * given, not the heads); "bwd " for the backward's problem, as tune's "best bwd" line. */
static void problem_label(char *buf, size_t size, const attn_problem *p, int hkv, int bwd) {
  char kvs[24] = "", dvl[24] = "", hks[24] = "";
  if (p->n_kv != p->n) snprintf(kvs, sizeof kvs, " n_kv=%d", p->n_kv);
  if (p->d_v && p->d_v != p->d) snprintf(dvl, sizeof dvl, " d_v=%d", p->d_v);
  if (hkv && hkv != p->heads) snprintf(hks, sizeof hks, " heads_kv=%d", hkv);
  snprintf(buf, size, "%sn=%d%s d=%d%s %s causal=%d heads=%d%s batch=%d", bwd ? "bwd " : "", p->n, kvs, p->d, dvl,
           attn_dtype_name(p->dtype), p->causal, p->heads, hks, p->batch);
}

static int cmp_spec(const void *a, const void *b) {
  return strcmp(((const mrow *const *)a)[0]->spec, ((const mrow *const *)b)[0]->spec);
}

/* One problem's rows on one device, under one thread count, provenance and K/V head count: a group replayed on its
 * own (GQA's space differs: decode's packed query blocks admit split-KV points the same shape without GQA lacks). */
typedef struct group {
  const char *device, *prov;
  int threads, heads_kv;
  int dq_atomic;          /* the backward's: rows of dq=atomic points stored */
} group;

/* One strategy run's evaluation callback: the stored row, and the best time after each evaluation. */
typedef struct replay_run {
  const attn_eval *stored;        /* per space index */
  const unsigned char *have;
  double *best_after;             /* [budget]: fastest usable time after k + 1 evaluations (0: none yet) */
  double best;
  int missing;                    /* the space index of a configuration with no row; -1 none */
  volatile int stop;
} replay_run;

static void replay_eval(attn_tuner *t, const attn_spec *s, attn_eval *out) {
  replay_run *r = t->user;
  const int idx = attn_space_find(t->space, s); /* the gate admitted s: it is in the space */
  if (idx < 0 || !r->have[idx]) {
    r->missing = idx;
    r->stop = 1; /* the strategy stops at its next evaluation; the run reports the configuration */
    snprintf(out->status, sizeof out->status, "interrupted");
    out->ok = 0;
    return;
  }
  *out = r->stored[idx];
  if (out->ok && (r->best <= 0 || out->time_ms < r->best)) r->best = out->time_ms;
  r->best_after[t->used] = r->best; /* t->used counts the evaluations before this one */
}

/* splitmix64: the seeds of the runs, one per (problem, seed index), independent of the order of the strategies. */
static unsigned long long mix64(unsigned long long x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The q-quantile of sorted v[0..n) with linear interpolation (infinity where either neighbour is). */
static double quantile(const double *v, int n, double q) {
  double pos = q * (n - 1);
  int lo = (int)floor(pos), hi = lo + 1 < n ? lo + 1 : lo;
  double f = pos - lo;
  if (isinf(v[lo]) || isinf(v[hi])) return INFINITY;
  return v[lo] + f * (v[hi] - v[lo]);
}

/* A strategy's figures on one problem. */
typedef struct strat_res {
  double *med, *q1, *q3;  /* [budget]: best found / optimum after k + 1 evaluations */
  double to5, to1;        /* median evaluations to within 5% / 1% of the optimum (infinity: not reached) */
  double to5q[2], to1q[2];/* their quartiles over the seeds (infinity: more than a quarter, three quarters never) */
} strat_res;

typedef struct strat {
  const char *name;       /* as given */
  int builtin;            /* 1 exhaustive, 2 random, 3 lua */
  char path[4300];
} strat;

/* Runs every strategy S times on one space; 0, or 1 with the reason printed (a strategy's error, a missing row). */
static int replay_problem(const attn_space *sp, const attn_eval *stored, const unsigned char *have, double opt,
                          int budget, int seeds, unsigned long long pseed, double tolerance, const strat *st, int nst,
                          strat_res *res, const char *from, const char *label) {
  const int K = budget;
  double *ratio = malloc(sizeof(double) * (size_t)seeds * (size_t)K);
  double *col = malloc(sizeof(double) * (size_t)seeds);
  double *r5 = malloc(sizeof(double) * (size_t)seeds), *r1 = malloc(sizeof(double) * (size_t)seeds);
  double *best_after = malloc(sizeof(double) * (size_t)K);
  int rc = 0;
  if (!ratio || !col || !r5 || !r1 || !best_after) {
    fprintf(stderr, "attntune replay: out of memory\n");
    rc = 1;
    goto out;
  }
  for (int a = 0; a < nst && !rc; a++) {
    for (int s = 0; s < seeds; s++) {
      replay_run run = {.stored = stored, .have = have, .best_after = best_after, .missing = -1};
      attn_tuner tu = {.space = sp, .budget = K, .tolerance = tolerance, .stop = &run.stop, .eval = replay_eval,
                       .user = &run};
      tu.seed = mix64(pseed ^ mix64((unsigned long long)s + 1));
      char err[8192] = "";
      int src = st[a].builtin == 1 ? attn_strategy_exhaustive(&tu)
                : st[a].builtin == 2 ? attn_strategy_random(&tu)
                                     : attn_strategy_lua(&tu, st[a].path, err, sizeof err);
      const int used = tu.used;
      attn_tuner_release(&tu);
      if (run.missing != -1 || (run.stop && src == ATTN_OK)) {
        char spec[512] = "?";
        if (run.missing >= 0) attn_spec_format(&sp->cfg[run.missing], spec, sizeof spec);
        fprintf(stderr, "attntune replay: %s: strategy %s (seed %d) evaluated %s, which %s holds no row for\n", label,
                st[a].name, s, spec, from);
        rc = 1;
        break;
      }
      if (src != ATTN_OK) {
        fprintf(stderr, "attntune replay: %s\n", st[a].builtin == 3 ? err : attn_strerror(src));
        rc = 1;
        break;
      }
      /* a strategy that stopped early keeps its best for the rest of the budget */
      double last = used > 0 ? best_after[used - 1] : 0;
      for (int k = used; k < K; k++) best_after[k] = last;
      r5[s] = r1[s] = INFINITY;
      for (int k = 0; k < K; k++) {
        const double b = best_after[k];
        ratio[(size_t)s * K + k] = b > 0 ? opt / b : 0;
        if (b > 0 && b <= opt * 1.05 && isinf(r5[s])) r5[s] = k + 1;
        if (b > 0 && b <= opt * 1.01 && isinf(r1[s])) r1[s] = k + 1;
      }
    }
    if (rc) break;
    strat_res *R = &res[a];
    for (int k = 0; k < K; k++) {
      for (int s = 0; s < seeds; s++) col[s] = ratio[(size_t)s * K + k];
      qsort(col, (size_t)seeds, sizeof *col, cmp_double);
      R->med[k] = quantile(col, seeds, 0.5);
      R->q1[k] = quantile(col, seeds, 0.25);
      R->q3[k] = quantile(col, seeds, 0.75);
    }
    qsort(r5, (size_t)seeds, sizeof *r5, cmp_double);
    qsort(r1, (size_t)seeds, sizeof *r1, cmp_double);
    R->to5 = quantile(r5, seeds, 0.5);
    R->to1 = quantile(r1, seeds, 0.5);
    R->to5q[0] = quantile(r5, seeds, 0.25);
    R->to5q[1] = quantile(r5, seeds, 0.75);
    R->to1q[0] = quantile(r1, seeds, 0.25);
    R->to1q[1] = quantile(r1, seeds, 0.75);
  }
out:
  free(ratio);
  free(col);
  free(r5);
  free(r1);
  free(best_after);
  return rc;
}

/* One replayed problem, kept for the report. */
typedef struct done_problem {
  char label[256];
  attn_problem p;
  char device[256], prov[16];
  int bwd, threads, space, budget;
  double opt;
  char opt_spec[512];
  strat_res *res;         /* [nst] */
} done_problem;

/* "median [q1,q3]" of evaluations, "-" for what more than that share of the seeds never reached */
static void print_evals(double v, const double q[2]) {
  char m[24], a[24], b[24], cell[80];
  snprintf(m, sizeof m, isinf(v) ? "-" : "%g", v);
  snprintf(a, sizeof a, isinf(q[0]) ? "-" : "%g", q[0]);
  snprintf(b, sizeof b, isinf(q[1]) ? "-" : "%g", q[1]);
  snprintf(cell, sizeof cell, "%s [%s,%s]", m, a, b);
  printf(" %20s", cell);
}

static void print_text(const done_problem *dp, int ndp, const strat *st, int nst, int seeds) {
  for (int i = 0; i < ndp; i++) {
    const done_problem *d = &dp[i];
    printf("%s: %d configurations, optimum %.4g ms (%s)\n", d->label, d->space, d->opt, d->opt_spec);
    printf("  best found / optimum after k evaluations, median [quartiles] over %d seeds\n", seeds);
    printf("  %-8s", "k");
    for (int a = 0; a < nst; a++) printf(" %20.20s", st[a].name);
    printf("\n");
    for (int k = 1; k <= d->budget; k = k * 2 > d->budget && k < d->budget ? d->budget : k * 2) {
      printf("  %-8d", k);
      for (int a = 0; a < nst; a++) {
        char cell[64];
        snprintf(cell, sizeof cell, "%.3f [%.3f,%.3f]", d->res[a].med[k - 1], d->res[a].q1[k - 1],
                 d->res[a].q3[k - 1]);
        printf(" %20s", cell);
      }
      printf("\n");
    }
    printf("  %-8s", "to 5%");
    for (int a = 0; a < nst; a++) print_evals(d->res[a].to5, d->res[a].to5q);
    printf("\n  %-8s", "to 1%");
    for (int a = 0; a < nst; a++) print_evals(d->res[a].to1, d->res[a].to1q);
    printf("\n");
  }
}

static json_t *jarray_of(const double *v, int n) {
  json_t *a = json_array();
  for (int i = 0; i < n; i++) json_array_append_new(a, json_real(v[i]));
  return a;
}

static int print_json(const done_problem *dp, int ndp, const strat *st, int nst, int seeds, const char *from,
                      json_t *skipped) {
  json_t *root = json_object(), *probs = json_array();
  json_object_set_new(root, "from", json_string(from));
  json_object_set_new(root, "seeds", json_integer(seeds));
  for (int i = 0; i < ndp; i++) {
    const done_problem *d = &dp[i];
    json_t *o = json_object(), *ss = json_array();
    json_object_set_new(o, "device", json_string(d->device));
    json_object_set_new(o, "provenance", json_string(d->prov));
    json_object_set_new(o, "threads", json_integer(d->threads));
    json_object_set_new(o, "pass", json_string(d->bwd ? "bwd" : "fwd"));
    json_object_set_new(o, "dtype", json_string(attn_dtype_name(d->p.dtype)));
    json_object_set_new(o, "causal", json_integer(d->p.causal));
    json_object_set_new(o, "d", json_integer(d->p.d));
    json_object_set_new(o, "d_v", json_integer(d->p.d_v ? d->p.d_v : d->p.d));
    json_object_set_new(o, "n", json_integer(d->p.n));
    json_object_set_new(o, "n_kv", json_integer(d->p.n_kv));
    json_object_set_new(o, "heads", json_integer(d->p.heads));
    json_object_set_new(o, "heads_kv", json_integer(d->p.heads_kv));
    json_object_set_new(o, "batch", json_integer(d->p.batch));
    json_object_set_new(o, "space", json_integer(d->space));
    json_object_set_new(o, "budget", json_integer(d->budget));
    json_object_set_new(o, "optimum_ms", json_real(d->opt));
    json_object_set_new(o, "optimum", json_string(d->opt_spec));
    for (int a = 0; a < nst; a++) {
      json_t *s = json_object();
      json_object_set_new(s, "strategy", json_string(st[a].name));
      json_object_set_new(s, "median", jarray_of(d->res[a].med, d->budget));
      json_object_set_new(s, "q1", jarray_of(d->res[a].q1, d->budget));
      json_object_set_new(s, "q3", jarray_of(d->res[a].q3, d->budget));
      json_object_set_new(s, "evals_to_5pct", isinf(d->res[a].to5) ? json_null() : json_real(d->res[a].to5));
      json_object_set_new(s, "evals_to_1pct", isinf(d->res[a].to1) ? json_null() : json_real(d->res[a].to1));
      json_t *q5 = json_array(), *q1 = json_array();
      for (int k = 0; k < 2; k++) {
        json_array_append_new(q5, isinf(d->res[a].to5q[k]) ? json_null() : json_real(d->res[a].to5q[k]));
        json_array_append_new(q1, isinf(d->res[a].to1q[k]) ? json_null() : json_real(d->res[a].to1q[k]));
      }
      json_object_set_new(s, "evals_to_5pct_quartiles", q5);
      json_object_set_new(s, "evals_to_1pct_quartiles", q1);
      json_array_append_new(ss, s);
    }
    json_object_set_new(o, "strategies", ss);
    json_array_append_new(probs, o);
  }
  json_object_set_new(root, "problems", probs);
  json_object_set(root, "skipped", skipped);
  char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
  json_decref(root);
  if (!text) {
    fprintf(stderr, "attntune replay: out of memory\n");
    return 1;
  }
  printf("%s\n", text);
  free(text);
  return 0;
}

/* The median curves as an SVG: a panel per problem, a line per strategy, axes and a legend. */
static int write_plot(const char *path, const done_problem *dp, int ndp, const strat *st, int nst) {
  static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                                       "#e377c2", "#7f7f7f"};
  const int W = 640, PH = 260, L = 60, R = 150, T = 30, B = 40;
  char tmp[4200];
  if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
    fprintf(stderr, "attntune replay: --plot %s: path too long\n", path);
    return 1;
  }
  FILE *f = fopen(tmp, "w");
  if (!f) {
    fprintf(stderr, "attntune replay: --plot %s: %s\n", tmp, strerror(errno));
    return 1;
  }
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
             "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, PH * ndp);
  for (int i = 0; i < ndp; i++) {
    const done_problem *d = &dp[i];
    const int y0 = i * PH, pw = W - L - R, ph = PH - T - B, K = d->budget;
    fprintf(f, "<text x=\"%d\" y=\"%d\">", L, y0 + 18);
    for (const char *c = d->label; *c; c++) { /* the label holds no markup, but '&' and '<' would break it */
      if (*c == '&') fputs("&amp;", f);
      else if (*c == '<') fputs("&lt;", f);
      else fputc(*c, f);
    }
    fprintf(f, "</text>\n");
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"black\"/>\n", L, y0 + T,
            pw, ph);
    /* y: from the lowest median, a tenth below, to 1 (the curves' interesting part is near the optimum) */
    double lo = 1;
    for (int a = 0; a < nst; a++)
      for (int k = 0; k < K; k++) lo = d->res[a].med[k] < lo ? d->res[a].med[k] : lo;
    lo = floor(lo * 10) / 10;
    if (lo > 0.9) lo = 0.9;
    for (int t = 0; t <= 4; t++) {
      const double y = y0 + T + ph - ph * t / 4.0;
      fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                 "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n", L, y, L + pw, y, L - 4, y + 4,
              lo + (1 - lo) * t / 4.0);
    }
    for (int k = 1; k <= K; k = k * 2 > K && k < K ? K : k * 2) { /* x: 1 .. K */
      const double x = L + (K > 1 ? pw * (k - 1.0) / (K - 1) : pw / 2.0);
      fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%d</text>\n", x, y0 + T + ph + 14, k);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">evaluations</text>\n", L + pw / 2, y0 + T + ph + 30);
    fprintf(f, "<text x=\"14\" y=\"%d\" transform=\"rotate(-90 14 %d)\" text-anchor=\"middle\">best found / "
               "optimum (median)</text>\n", y0 + T + ph / 2, y0 + T + ph / 2);
    for (int a = 0; a < nst; a++) {
      const char *col = colors[a % 8];
      fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", col);
      for (int k = 0; k < K; k++)
        fprintf(f, "%s%.1f,%.1f", k ? " " : "", L + (K > 1 ? pw * (double)k / (K - 1) : pw / 2.0),
                y0 + T + ph - ph * (d->res[a].med[k] - lo) / (1 - lo));
      fprintf(f, "\"/>\n");
      fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"/>"
                 "<text x=\"%d\" y=\"%d\">", L + pw + 10, y0 + T + 10 + 16 * a, L + pw + 30, y0 + T + 10 + 16 * a,
              col, L + pw + 35, y0 + T + 14 + 16 * a);
      for (const char *c = st[a].name; *c; c++) {
        if (*c == '&') fputs("&amp;", f);
        else if (*c == '<') fputs("&lt;", f);
        else fputc(*c, f);
      }
      fprintf(f, "</text>\n");
    }
  }
  fprintf(f, "</svg>\n");
  if (fclose(f) != 0 || rename(tmp, path) != 0) {
    fprintf(stderr, "attntune replay: --plot %s: %s\n", path, strerror(errno));
    (void)unlink(tmp);
    return 1;
  }
  return 0;
}

/* --pass's names, as tune's: bit 0 the forward, bit 1 the backward */
static int pass_parse(const char *s) { return strcmp(s, "fwd") == 0 ? 0 : strcmp(s, "bwd") == 0 ? 1 : -1; }

static void free_rows(rows *r) {
  for (int i = 0; i < r->count; i++) {
    free(r->v[i].device);
    free(r->v[i].spec);
  }
  free(r->v);
}

int attn_cmd_replay(int argc, char **argv) {
  const char *from = NULL, *gpu_name = NULL, *d_s = NULL, *dv_s = NULL, *n_s = "1024", *nkv_s = NULL,
             *algo_s = "flash", *dtype_s = NULL, *causal_s = "0", *plot = NULL, *pass_s = "fwd";
  strat st[MAX_STRATEGIES];
  int nst = 0, budget = 0, seeds = 10, heads = 0, heads_kv = 0, batch = 1, json = 0, partial = 0, nondet = 0;
  double tolerance = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      fputs(replay_usage, stdout);
      return 0;
    }
    if (strcmp(a, "--json") == 0) {
      json = 1;
      continue;
    }
    if (strcmp(a, "--partial") == 0) {
      partial = 1;
      continue;
    }
    if (strcmp(a, "--nondeterministic") == 0) {
      nondet = 1;
      continue;
    }
    static const char *const with_value[] = {"--from",  "--strategy", "--budget", "--seeds", "--gpu",
                                             "--d",     "--dv",       "--n",      "--n-kv",  "--algo",
                                             "--dtype", "--causal",   "--heads",  "--batch", "--tolerance",
                                             "--plot",  "--heads-kv", "--pass"};
    int known = 0;
    for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++) known |= strcmp(a, with_value[k]) == 0;
    if (!known) return usage("unknown option '%s' (see attntune replay --help)", a);
    if (i + 1 >= argc) return usage("%s needs a value", a);
    const char *v = argv[++i];
    if (strcmp(a, "--from") == 0) from = v;
    else if (strcmp(a, "--gpu") == 0) gpu_name = v;
    else if (strcmp(a, "--d") == 0) d_s = v;
    else if (strcmp(a, "--dv") == 0) dv_s = v;
    else if (strcmp(a, "--n") == 0) n_s = v;
    else if (strcmp(a, "--n-kv") == 0) nkv_s = v;
    else if (strcmp(a, "--algo") == 0) algo_s = v;
    else if (strcmp(a, "--dtype") == 0) dtype_s = v;
    else if (strcmp(a, "--causal") == 0) causal_s = v;
    else if (strcmp(a, "--plot") == 0) plot = v;
    else if (strcmp(a, "--pass") == 0) pass_s = v;
    else if (strcmp(a, "--budget") == 0) {
      if (attn_parse_int(v, 1, 1000000, &budget)) return usage("--budget %s: expected a count >= 1", v);
    } else if (strcmp(a, "--seeds") == 0) {
      if (attn_parse_int(v, 1, 10000, &seeds)) return usage("--seeds %s: expected 1..10000", v);
    } else if (strcmp(a, "--heads") == 0) {
      if (attn_parse_int(v, 1, 4096, &heads)) return usage("--heads %s: expected 1..4096", v);
    } else if (strcmp(a, "--heads-kv") == 0) {
      if (attn_parse_int(v, 1, 4096, &heads_kv)) return usage("--heads-kv %s: expected 1..4096", v);
    } else if (strcmp(a, "--batch") == 0) {
      if (attn_parse_int(v, 1, 4096, &batch)) return usage("--batch %s: expected 1..4096", v);
    } else if (strcmp(a, "--tolerance") == 0) {
      char *end;
      errno = 0;
      tolerance = strtod(v, &end);
      if (errno || end == v || *end || !(tolerance >= 0) || tolerance >= 1)
        return usage("--tolerance %s: expected a relative error in [0, 1)", v);
    } else if (strcmp(a, "--strategy") == 0) {
      if (nst == MAX_STRATEGIES) return usage("--strategy: at most %d strategies in one replay", MAX_STRATEGIES);
      strat *s = &st[nst];
      memset(s, 0, sizeof *s);
      s->name = v;
      const size_t sl = strlen(v);
      char why[1400];
      if (strcmp(v, "exhaustive") == 0) s->builtin = 1;
      else if (strcmp(v, "random") == 0) s->builtin = 2;
      else if (sl > 4 && strcmp(v + sl - 4, ".lua") == 0) {
        if (access(v, R_OK) != 0) return usage("--strategy %s: %s", v, strerror(errno));
        snprintf(s->path, sizeof s->path, "%s", v);
        s->builtin = 3;
      } else if (attn_strategy_find(v, s->path, sizeof s->path, why, sizeof why) == 0) {
        s->builtin = 3;
      } else {
        return usage("--strategy %s: %s", v, why);
      }
      nst++;
    }
  }
  if (!from) return usage("--from FULL.db is required (a database with whole spaces stored)");
  if (access(from, R_OK) != 0) return usage("--from %s: %s", from, strerror(errno));
  if (!nst) return usage("--strategy is required (once per strategy to compare)");
  if (!gpu_name) return usage("--gpu is required: cpu for measured CPU rows, NAME for a GPU's rows");
  if (!d_s) return usage("--d RANGE is required (e.g. --d 64)");

  char err[4096], bad[128];
  const attn_gpu *gpu = NULL;
  attn_target target = ATTN_TARGET_CPU;
  if (strcmp(gpu_name, "cpu") != 0) {
    char note[256];
    gpu = attn_gpu_match(gpu_name, note, sizeof note, err, sizeof err);
    if (!gpu) return usage("%s", err);
    target = ATTN_TARGET_CUDA;
  }
  unsigned algos = 0, dtypes = 0, passes = 0;
  if (attn_names_parse(pass_s, pass_parse, &passes, bad, sizeof bad))
    return usage("--pass: unknown pass '%s' (fwd, bwd)", bad);
  if (nondet && (!(passes & 2) || target != ATTN_TARGET_CUDA))
    return usage("--nondeterministic admits the CUDA backward's dQ summed by fp32 atomics: give a GPU and --pass bwd "
                 "(or fwd,bwd)");
  if (attn_names_parse(algo_s, attn_algo_parse_exact, &algos, bad, sizeof bad))
    return usage("--algo: unknown algorithm '%s' (flash, smallcache, lowrank)", bad);
  if ((algos & ATTN_ALGO_BIT(ATTN_ALGO_LOWRANK)) && tolerance <= 0)
    return usage("--algo lowrank is approximate: give --tolerance > 0 (e.g. --tolerance 0.05)");
  if (dtype_s) {
    if (attn_names_parse(dtype_s, attn_dtype_parse, &dtypes, bad, sizeof bad))
      return usage("--dtype: unknown dtype '%s' (f32, f16, bf16)", bad);
  } else {
    dtypes = target == ATTN_TARGET_CPU ? 1u << ATTN_F32 : (1u << ATTN_F16) | (1u << ATTN_BF16);
  }
  int causals[2], ncausal = 0;
  if (!strcmp(causal_s, "0")) causals[ncausal++] = 0;
  else if (!strcmp(causal_s, "1")) causals[ncausal++] = 1;
  else if (!strcmp(causal_s, "0,1") || !strcmp(causal_s, "1,0")) {
    causals[0] = causal_s[0] == '1';
    causals[1] = !causals[0];
    ncausal = 2;
  } else return usage("--causal %s: expected 0, 1 or 0,1", causal_s);
  if (!heads) heads = target == ATTN_TARGET_CPU ? 2 : 16;
  if (heads_kv && heads % heads_kv)
    return usage("--heads-kv %d: the %d query heads must be a whole multiple of it (each K/V head serves H/G query "
                 "heads)", heads_kv, heads);

  int *ds = NULL, nd = 0, *dvs = NULL, ndv = 0, *ns = NULL, nn = 0, *nkvs = NULL, nnkv = 0;
  int status = 0;
  attn_db *db = NULL;
  rows rs = {0};
  done_problem *dp = NULL;
  int ndp = 0;
  json_t *skipped = json_array();
#define FAIL_USAGE(...)          \
  do {                           \
    status = usage(__VA_ARGS__); \
    goto out;                    \
  } while (0)
  if (attn_range_parse(d_s, &ds, &nd, err, sizeof err) != ATTN_OK) FAIL_USAGE("--d: %s", err);
  if (dv_s && attn_range_parse(dv_s, &dvs, &ndv, err, sizeof err) != ATTN_OK) FAIL_USAGE("--dv: %s", err);
  if (attn_range_parse(n_s, &ns, &nn, err, sizeof err) != ATTN_OK) FAIL_USAGE("--n: %s", err);
  if (nkv_s && attn_range_parse(nkv_s, &nkvs, &nnkv, err, sizeof err) != ATTN_OK) FAIL_USAGE("--n-kv: %s", err);
  if (!dvs) ndv = 1;
  if (!nkvs) nnkv = 1;
  for (int i = 0; i < nd; i++)
    for (int j = 0; j < ndv; j++)
      if (attn_space_dims_ok(target, ds[i], dvs ? dvs[j] : 0, err, sizeof err) != 0) FAIL_USAGE("%s", err);
  {
    const long long total =
        (long long)__builtin_popcount(passes) * __builtin_popcount(dtypes) * ncausal * nd * ndv * nn * nnkv;
    if (total > 4096) FAIL_USAGE("the options make %lld problems, more than the 4096 one replay takes", total);
  }

  /* Read only: a replay never changes the database it reads. */
  if (attn_db_open_ex(from, ATTN_DB_READONLY, &db, err, sizeof err) != ATTN_OK) {
    fprintf(stderr, "attntune replay: cannot open %s: %s\n", from, err);
    status = 1;
    goto out;
  }
  if (attn_db_meas_foreach(db, collect_row, &rs) != 0 || rs.oom) {
    fprintf(stderr, "attntune replay: %s: %s\n", from, rs.oom ? "out of memory" : attn_db_errmsg(db));
    status = 1;
    goto out;
  }
  devs dv_l2 = {.count = 0};
  if (attn_db_device_foreach(db, collect_device, &dv_l2) != 0) {
    fprintf(stderr, "attntune replay: %s: %s\n", from, attn_db_errmsg(db));
    status = 1;
    goto out;
  }
  /* GPU spaces are admitted as tune admits them: the compiled kernels' resources FULL.db holds, else the estimate */
  attn_kres kres;
  attn_kres_init(&kres, db, 0);
  mrow **sub = malloc(sizeof *sub * (size_t)(rs.count ? rs.count : 1));
  dp = calloc(4096, sizeof *dp);
  if (!sub || !dp) {
    free(sub);
    attn_kres_free(&kres);
    fprintf(stderr, "attntune replay: out of memory\n");
    status = 1;
    goto out;
  }

  /* the passes in tune's order: the forward's problems, then the backward's */
  for (int pa = 0; pa < 2 && !status; pa++)
  for (int t = 0; t < 3 && !status && (passes >> pa & 1); t++) {
    if (!((dtypes >> t) & 1)) continue;
    for (int c = 0; c < ncausal && !status; c++)
      for (int di = 0; di < nd && !status; di++)
        for (int vi = 0; vi < ndv && !status; vi++)
          for (int ni = 0; ni < nn && !status; ni++)
            for (int ki = 0; ki < nnkv && !status; ki++) {
              const int d = ds[di], dv = dvs ? dvs[vi] : d, n = ns[ni], nkv = nkvs ? nkvs[ki] : n;
              attn_problem p = {.batch = batch, .heads = heads, .n = n, .n_kv = nkv, .d = d, .dtype = (attn_dtype)t,
                                .causal = causals[c], .tolerance = tolerance, .d_v = dv == d ? 0 : dv};
              char pl[160];
              problem_label(pl, sizeof pl, &p, heads_kv, pa);
              /* the groups: (device, threads, provenance, K/V heads) with rows for this problem, in the order first
               * stored */
              group gs[64];
              int ng = 0;
              for (int r = 0; r < rs.count; r++) {
                const mrow *m = &rs.v[r];
                if (m->bwd != pa || m->n != n || m->n_kv != nkv || m->d != d || m->d_v != dv || m->dtype != p.dtype ||
                    m->causal != p.causal || m->batch != batch || m->heads != heads ||
                    (heads_kv && m->heads_kv != heads_kv))
                  continue;
                if (gpu ? strcmp(m->device, gpu->name) != 0 : strncmp(m->device, "cpu:", 4) != 0) continue;
                int g = 0;
                while (g < ng && (strcmp(gs[g].device, m->device) || strcmp(gs[g].prov, m->prov) ||
                                  gs[g].threads != m->threads || gs[g].heads_kv != m->heads_kv))
                  g++;
                if (g == ng && ng < 64)
                  gs[ng++] = (group){.device = m->device, .prov = m->prov, .threads = m->threads,
                                     .heads_kv = m->heads_kv};
                /* a backward space holds dQ by atomics where tune's --nondeterministic stored such rows */
                if (g < ng && pa && strstr(m->spec, "dq=atomic")) gs[g].dq_atomic = 1;
              }
              if (!ng) {
                json_t *o = json_pack("{s:s,s:s,s:s}", "problem", pl, "reason", "no rows stored", "pass",
                                      pa ? "bwd" : "fwd");
                json_array_append_new(skipped, o);
                if (!json) printf("%s: skipped: no rows stored\n", pl);
                continue;
              }
              for (int g = 0; g < ng && !status; g++) {
                attn_space_opts so = {.target = target, .dtype = p.dtype, .d = d, .causal = p.causal, .algos = algos,
                                      .tolerance = tolerance, .gpu = gpu, .n = n, .n_kv = nkv,
                                      .heads = (long)batch * heads, .heads_kv = (long)batch * gs[g].heads_kv,
                                      .threads = gs[g].threads, .dv = dvs ? dv : 0, .backward = pa,
                                      .nondeterministic = pa && (nondet || gs[g].dq_atomic)};
                so.fast_mem_bytes = gpu ? gpu->smem_per_block_kb * 1024.0 : attn_cpu_l2_bytes();
                for (int k = 0; !gpu && k < dv_l2.count; k++)
                  if (!strcmp(dv_l2.v[k].name, gs[g].device)) so.fast_mem_bytes = dv_l2.v[k].l2;
                if (gpu) snprintf(so.arch, sizeof so.arch, "%s", gpu->arch);
                if (gpu && kres.compiler[0] && !pa) { /* compiled resources are the forward kernels' (as tune) */
                  so.resources = attn_kres_get;
                  so.resources_ctx = &kres;
                }
                attn_problem gp = p;
                gp.heads_kv = gs[g].heads_kv;
                char label[256], gpl[160];
                problem_label(gpl, sizeof gpl, &gp, gp.heads_kv, pa);
                snprintf(label, sizeof label, "%s %s%s%.0d %s", gs[g].device, gs[g].prov,
                         gs[g].threads ? " threads=" : "", gs[g].threads, gpl);
                attn_space sp;
                if (attn_space_build(&so, &sp, err, sizeof err) != ATTN_OK) {
                  fprintf(stderr, "attntune replay: %s: %s\n", label, err);
                  status = 1;
                  break;
                }
                /* this group's rows by spec, and each configuration's */
                int nsub = 0;
                for (int r = 0; r < rs.count; r++) {
                  mrow *m = &rs.v[r];
                  if (m->bwd == pa && m->n == n && m->n_kv == nkv && m->d == d && m->d_v == dv && m->dtype == p.dtype &&
                      m->causal == p.causal && m->batch == batch && m->heads == heads && m->threads == gs[g].threads &&
                      m->heads_kv == gs[g].heads_kv && !strcmp(m->device, gs[g].device) &&
                      !strcmp(m->prov, gs[g].prov))
                    sub[nsub++] = m;
                }
                qsort(sub, (size_t)nsub, sizeof *sub, cmp_spec);
                attn_eval *stored = calloc((size_t)(sp.count ? sp.count : 1), sizeof *stored);
                unsigned char *have = calloc((size_t)(sp.count ? sp.count : 1), 1);
                if (!stored || !have) {
                  free(stored);
                  free(have);
                  attn_space_free(&sp);
                  fprintf(stderr, "attntune replay: out of memory\n");
                  status = 1;
                  break;
                }
                int nhave = 0, first_missing = -1, best = -1;
                for (int k = 0; k < sp.count; k++) {
                  char spec[512];
                  attn_spec_format(&sp.cfg[k], spec, sizeof spec);
                  mrow key = {.spec = spec}, *kp = &key;
                  mrow **hit = bsearch(&kp, sub, (size_t)nsub, sizeof *sub, cmp_spec);
                  if (!hit) {
                    if (first_missing < 0) first_missing = k;
                    continue;
                  }
                  stored[k] = (*hit)->e;
                  stored[k].ok = !strcmp(stored[k].status, "ok") &&
                                 (sp.cfg[k].algo != ATTN_ALGO_LOWRANK || stored[k].error <= tolerance);
                  have[k] = 1;
                  nhave++;
                  if (stored[k].ok && (best < 0 || stored[k].time_ms < stored[best].time_ms)) best = k;
                }
                char reason[800] = "";
                if (sp.count == 0) snprintf(reason, sizeof reason, "empty search space");
                else if (first_missing >= 0 && !partial) {
                  char spec[512];
                  attn_spec_format(&sp.cfg[first_missing], spec, sizeof spec);
                  snprintf(reason, sizeof reason, "%d of %d configurations stored (no row for %s)", nhave, sp.count,
                           spec);
                } else if (best < 0)
                  snprintf(reason, sizeof reason, "no usable configuration stored");
                if (reason[0]) {
                  json_array_append_new(skipped, json_pack("{s:s,s:s,s:s}", "problem", label, "reason", reason, "pass",
                                                           pa ? "bwd" : "fwd"));
                  if (!json) printf("%s: skipped: %s\n", label, reason);
                } else {
                  done_problem *D = &dp[ndp];
                  memset(D, 0, sizeof *D);
                  snprintf(D->label, sizeof D->label, "%s", label);
                  D->p = gp;
                  D->bwd = pa;
                  snprintf(D->device, sizeof D->device, "%s", gs[g].device);
                  snprintf(D->prov, sizeof D->prov, "%s", gs[g].prov);
                  D->threads = gs[g].threads;
                  D->space = sp.count;
                  D->budget = budget && budget < sp.count ? budget : sp.count;
                  D->opt = stored[best].time_ms;
                  attn_spec_format(&sp.cfg[best], D->opt_spec, sizeof D->opt_spec);
                  D->res = calloc((size_t)nst, sizeof *D->res);
                  int oom = !D->res;
                  for (int a = 0; !oom && a < nst; a++) {
                    D->res[a].med = malloc(sizeof(double) * (size_t)D->budget);
                    D->res[a].q1 = malloc(sizeof(double) * (size_t)D->budget);
                    D->res[a].q3 = malloc(sizeof(double) * (size_t)D->budget);
                    oom = !D->res[a].med || !D->res[a].q1 || !D->res[a].q3;
                  }
                  ndp++; /* freed at the end, filled or not */
                  if (oom) {
                    fprintf(stderr, "attntune replay: out of memory\n");
                    status = 1;
                  } else {
                    typedef unsigned long long u64;
                    /* (GQA's K/V heads enter only where they differ from the heads: the seeds of MHA stay) */
                    const u64 pseed = mix64((u64)n) ^ mix64((u64)nkv << 20) ^ mix64((u64)d << 40 | (u64)dv << 50) ^
                                      mix64((u64)t << 8 | (u64)p.causal) ^
                                      (gp.heads_kv != heads ? mix64((u64)gp.heads_kv << 32 | 0x6b76u) : 0) ^
                                      (pa ? mix64(0x627764u) : 0); /* "bwd": the forward's seeds stay */
                    status = replay_problem(&sp, stored, have, D->opt, D->budget, seeds, pseed, tolerance, st, nst,
                                            D->res, from, label);
                  }
                }
                free(stored);
                free(have);
                attn_space_free(&sp);
              }
            }
  }
  free(sub);
  attn_kres_free(&kres);
  if (!status && ndp == 0) {
    fprintf(stderr, "attntune replay: %s holds no whole search space for the problems asked for (store one with "
            "attntune --strategy exhaustive and the same problem options)\n", from);
    status = 1;
  }
  if (!status) {
    if (json) status = print_json(dp, ndp, st, nst, seeds, from, skipped);
    else print_text(dp, ndp, st, nst, seeds);
    if (!status && plot) status = write_plot(plot, dp, ndp, st, nst);
  }
out:
  for (int i = 0; i < ndp; i++) {
    for (int a = 0; dp[i].res && a < nst; a++) {
      free(dp[i].res[a].med);
      free(dp[i].res[a].q1);
      free(dp[i].res[a].q3);
    }
    free(dp[i].res);
  }
  free(dp);
  json_decref(skipped);
  free_rows(&rs);
  attn_db_close(db);
  free(ds);
  free(dvs);
  free(ns);
  free(nkvs);
  return status;
#undef FAIL_USAGE
}
