/* tune.h: what the parts of `attntune [tune]` share: its options, the run's state, each part's calls. */
#ifndef ATTN_TUNE_H
#define ATTN_TUNE_H
#include <signal.h>
#include <stddef.h>
#include "gpus.h"
#include "kres.h"
#include "measure.h"
#include "store.h"
#include "strategy.h"

typedef struct tune_opts {
  const char *gpu_name, *strategy, *db_path;
  int *ds, nd, *ns, nn, *nkvs, nnkv;
  int *dvs, ndv;           /* --dv: the d_v values (NULL: d_v = d) and how many each d has (1 without --dv) */
  int *kv;                 /* after parsing: the shapes, ns[i] query rows with kv[i] keys, i < nn */
  unsigned algos, dtypes;
  unsigned passes;         /* --pass: bit 0 the forward, bit 1 the backward (CPU only), each its own problem */
  int causals[2], ncausal;
  int budget, jobs, heads, heads_kv, batch, nondeterministic, reps, force_model, remeasure, compiled;
  int shard_k, shard_n;    /* --shard K/N; N = 0: every problem */
  double cap_s;            /* --time-cap: timed running per configuration; the finalist round gets 4x, the
                            * confirmation 2x */
  double tolerance;
  /* Serving layouts, each tuned as a problem of its own (the rows' variant): --page-size P, attn_execute_paged over
   * pages of P tokens (every sequence n_kv keys); --varlen LENS, attn_execute_varlen on a packed batch whose
   * sequences have vl_q[i] queries and vl_kv[i] keys (batch = nvl, n and n_kv their maxima). 0 / NULL: dense. */
  int page_size;
  int *vl_q, *vl_kv, nvl;
  /* Score modifiers, part of the rows' variant (attn_problem_variant): --window W, --softcap C, --alibi (the standard
   * slopes of the query heads, heads floats; NULL: off). 0: off. */
  int window;
  float softcap;
  float *alibi;
  /* from the arguments, for the run */
  const attn_gpu *gpu;     /* --gpu NAME's entry; NULL: cpu */
  attn_target target;
  char gpu_note[256];      /* a variant's name taken as its entry */
  int budget_given;
  int builtin;             /* 0 auto, 1 exhaustive, 2 random, 3 lua */
  char lua_path[4300];
} tune_opts;

/* A problem's finalist-round result, timed once more at the end of the run (confirm_pass). */
typedef struct confirm_item {
  attn_problem p;
  attn_spec spec[2];      /* the chosen configuration and, when it is another one, the default */
  attn_eval eval[2];
  int count;
  int backward;           /* the problem's pass */
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
  int backward;           /* the problem's pass: 1 the backward (rows stored with pass 'bwd') */
  attn_spec default_cfg;  /* the problem's untuned default (measured mode) */
  char default_spec[512]; /* its canonical text ("" in model mode) */
} tune_state;

/* A point the space rules out, for a problem of a model run that reads compiled kernels' resources. */
typedef struct prune_ctx {
  tune_state *ts;
  attn_problem p;
} prune_ctx;

/* A usage error: one line on stderr, exit status 2, through the caller's `out:` cleanup */
#define FAIL_USAGE(...)          \
  do {                           \
    status = attn_tune_usage(__VA_ARGS__); \
    goto out;                    \
  } while (0)

/* set by SIGINT (1), or 2 when a broken strategy ends the run */
extern volatile sig_atomic_t attn_tune_stop;

/* cmd_tune.c */
int attn_tune_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* tune_run.c */
int attn_tune_run(tune_opts *o, int argc, char **argv);
void attn_tune_eval(attn_tuner *t, const attn_spec *s, attn_eval *e);
void attn_tune_db_failed(tune_state *ts, const char *err);
/* tune_model.c */
int attn_tune_model_stale(const tune_state *ts, const attn_spec *s, const attn_eval *e);
void attn_tune_model_eval(tune_state *ts, const attn_spec *s, attn_eval *e);
void attn_tune_on_pruned(void *ctx, const attn_spec *c, const char *why);
/* tune_final.c */
void attn_tune_take_timing(attn_eval *e, const attn_meas_result *r);
int attn_tune_finalist_round(tune_state *ts, attn_tuner *tu, attn_spec *best, attn_eval *best_eval, char *why,
                             size_t wlen);
void attn_tune_confirm_pass(tune_state *ts);
/* tune_run.c: the backward's untuned default for a problem on rt's target, attn_plan_create_backward's without a
 * tuned row */
attn_spec attn_tune_backward_default(const attn_runtime *rt, const attn_problem *p);
/* tune_report.c */
void attn_tune_progress(tune_state *ts, const attn_spec *s, const attn_eval *e, int resumed);

#endif
