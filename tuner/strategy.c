/* strategy.c: the tuner's evaluation gate (constraints, budget, stop, best so far), the model's estimates that
 * model-guided strategies rank by, and the built-in strategies: exhaustive (every point of the space in grid order,
 * up to the budget) and random (a seeded sample without repetition). Both hand their whole list to prefetch first,
 * so --jobs can compile it in parallel. */
#include "strategy.h"
#include "db.h"
#include "io_theory.h"
#include "tune.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

unsigned long long attn_rand_next(unsigned long long *s) {
  unsigned long long x = *s ? *s : 0x9e3779b97f4a7c15ULL;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545f4914f6cdd1dULL;
}

int attn_rand_below(unsigned long long *s, int n) {
  return n > 0 ? (int)(attn_rand_next(s) % (unsigned long long)n) : 0;
}

int attn_tuner_budget_left(const attn_tuner *t) {
  int cap = t->budget < t->space->count ? t->budget : t->space->count;
  return cap > t->used ? cap - t->used : 0;
}

void attn_tuner_release(attn_tuner *t) {
  free(t->memo);
  free(t->memo_have);
  free(t->order);
  t->memo = NULL;
  t->memo_have = NULL;
  t->order = NULL;
  t->norder = 0;
}
int attn_tuner_stopped(const attn_tuner *t) { return t->stop && *t->stop; }

static void set(attn_eval *e, const char *status, const char *msg) {
  memset(e, 0, sizeof *e);
  e->error = -1;
  e->iqr_ms = e->ci_rel = e->load = -1;
  e->io = -1;
  e->reads = e->writes = -1;
  snprintf(e->status, sizeof e->status, "%s", status);
  snprintf(e->message, sizeof e->message, "%s", msg);
}

/* The best of this run's evaluations by the rule the database uses (db.h): the fastest, or of those within the tie
 * factor of it the one with the fewest transfers (unknown: last), then the faster. Recomputed over the whole
 * memory, so that it never depends on the order of evaluation. */
static void update_best(attn_tuner *t) {
  double tmin = -1;
  for (int i = 0; i < t->space->count; i++)
    if (t->memo_have[i] && t->memo[i].ok && (tmin < 0 || t->memo[i].time_ms < tmin)) tmin = t->memo[i].time_ms;
  int best = -1;
  for (int i = 0; i < t->space->count; i++) {
    const attn_eval *e = &t->memo[i];
    if (!t->memo_have[i] || !e->ok || e->time_ms > ATTN_DB_TIE_FACTOR * tmin) continue;
    if (best < 0) {
      best = i;
      continue;
    }
    const attn_eval *b = &t->memo[best];
    const double io = e->io >= 0 ? e->io : 9e18, bio = b->io >= 0 ? b->io : 9e18;
    if (io < bio || (io == bio && e->time_ms < b->time_ms)) best = i;
  }
  if (best < 0) return;
  t->have_best = 1;
  t->best = t->space->cfg[best];
  t->best_eval = t->memo[best];
}

int attn_tuner_evaluate(attn_tuner *t, const attn_spec *s, attn_eval *out) {
  if (attn_tuner_stopped(t)) {
    set(out, "interrupted", "the run was interrupted");
    return 0;
  }
  char why[256];
  if (attn_space_admit(&t->space->o, s, why, sizeof why) != 0) {
    set(out, "invalid", why);
    return 0;
  }
  int idx = attn_space_find(t->space, s);
  if (idx < 0) {
    set(out, "invalid", "not a point of the search space (space:params() lists the values each tunable takes)");
    return 0;
  }
  if (!t->memo) {
    t->memo = calloc((size_t)t->space->count, sizeof *t->memo);
    t->memo_have = calloc((size_t)t->space->count, 1);
    t->order = malloc(sizeof *t->order * (size_t)t->space->count);
    t->norder = 0;
    if (!t->memo || !t->memo_have || !t->order) {
      attn_tuner_release(t);
      set(out, "error", "out of memory");
      return 0;
    }
  }
  if (t->memo_have[idx]) {
    *out = t->memo[idx];
    return out->ok;
  }
  if (attn_tuner_budget_left(t) <= 0) {
    set(out, "budget", "no budget left");
    return 0;
  }
  set(out, "error", "");
  t->eval(t, s, out);
  if (strcmp(out->status, "interrupted") == 0) return 0;
  t->used++;
  t->memo[idx] = *out;
  t->memo_have[idx] = 1;
  t->order[t->norder++] = idx;
  if (out->ok) update_best(t);
  return out->ok;
}

void attn_tuner_model(const attn_tuner *t, int idx, attn_model_est *out) {
  memset(out, 0, sizeof *out);
  out->io = -1;
  const attn_space_opts *o = &t->space->o;
  if (idx < 0 || idx >= t->space->count) {
    snprintf(out->why, sizeof out->why, "not a point of the search space");
    return;
  }
  if (o->n <= 0 || o->heads <= 0) { /* a space built without its problem (0: unknown) */
    snprintf(out->why, sizeof out->why, "the space was built without its problem size");
    return;
  }
  if (o->heads > INT_MAX || o->heads_kv > INT_MAX || o->n > INT_MAX || o->n_kv > INT_MAX) {
    snprintf(out->why, sizeof out->why, "the space's problem is beyond one launch");
    return;
  }
  const attn_spec *s = &t->space->cfg[idx];
  /* The space's problem: batch x query heads and batch x KV heads as one batch (a KV head's query heads pack as the
   * runtime launches them), its window (softcap and ALiBi cost the model nothing). */
  const attn_problem sp = {.batch = 1, .heads = (int)o->heads,
                           .heads_kv = (int)(o->heads_kv > 0 ? o->heads_kv : o->heads), .n = (int)o->n,
                           .n_kv = (int)(o->n_kv > 0 ? o->n_kv : o->n), .d = o->d, .dtype = o->dtype,
                           .causal = o->causal, .tolerance = o->tolerance, .d_v = o->dv && o->dv != o->d ? o->dv : 0,
                           .window = o->window};
  if (o->target == ATTN_TARGET_CUDA) {
    if (!o->gpu) {
      snprintf(out->why, sizeof out->why, "no GPU spec to model");
      return;
    }
    /* tune's model rows are attn_tune_model_eval's for the problem being tuned: the estimate is that call itself,
     * made for tune's problem (its batch, heads, layout and pass), else for the space's, with its resources */
    tune_state own = {.gpu = o->gpu, .prob = sp, .backward = o->backward,
                      .kres = o->resources == attn_kres_get ? o->resources_ctx : NULL};
    tune_state *ts = t->eval == attn_tune_eval && t->user ? t->user : &own;
    attn_eval e;
    memset(&e, 0, sizeof e);
    attn_tune_model_eval(ts, s, &e);
    if (!e.ok) {
      snprintf(out->why, sizeof out->why, "%.199s", e.message);
      return;
    }
    out->time_ms = e.time_ms;
    out->io = e.io;
    snprintf(out->bound, sizeof out->bound, "%s", e.bound);
  } else {
    unsigned long long r, w;
    if ((sp.window > 0 ? attn_io_formula_gqa_window(s, 1, sp.heads, sp.heads_kv, sp.n, sp.n_kv, sp.window, &r, &w)
                       : attn_io_formula_gqa(s, 1, sp.heads, sp.heads_kv, sp.n, sp.n_kv, &r, &w)) != ATTN_OK) {
      snprintf(out->why, sizeof out->why, "no I/O closed form for %s", attn_algo_name(s->algo));
      return;
    }
    out->io = (double)r + (double)w;
  }
  out->ok = 1;
}

/* Evaluate the first min(count, budget) configurations of the order idx (prefetched first: compiles in parallel),
 * until the budget runs out or the run is stopped; frees idx. */
static int evaluate_order(attn_tuner *t, int *idx, int count) {
  const int n = count < t->budget ? count : t->budget;
  if (t->prefetch && n > 0) t->prefetch(t, idx, n);
  attn_eval e;
  for (int i = 0; i < n && !attn_tuner_stopped(t) && attn_tuner_budget_left(t) > 0; i++)
    attn_tuner_evaluate(t, &t->space->cfg[idx[i]], &e);
  free(idx);
  return ATTN_OK;
}

int attn_strategy_exhaustive(attn_tuner *t) {
  const int count = t->space->count;
  int *idx = malloc(sizeof(int) * (size_t)(count > 0 ? count : 1));
  if (!idx) return ATTN_ENOMEM;
  for (int i = 0; i < count; i++) idx[i] = i;
  return evaluate_order(t, idx, count);
}

int attn_strategy_random(attn_tuner *t) {
  const int count = t->space->count;
  int *idx = malloc(sizeof(int) * (size_t)(count > 0 ? count : 1));
  if (!idx) return ATTN_ENOMEM;
  for (int i = 0; i < count; i++) idx[i] = i;
  unsigned long long st = t->seed;
  for (int i = count - 1; i > 0; i--) { /* Fisher-Yates */
    int j = attn_rand_below(&st, i + 1), x = idx[i];
    idx[i] = idx[j];
    idx[j] = x;
  }
  return evaluate_order(t, idx, count);
}
