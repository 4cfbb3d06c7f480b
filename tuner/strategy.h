/* strategy.h: search strategies over a space for one problem. The tuner object holds the budget, the best so far
 * and the evaluation callback (which measures or models a configuration and stores the row); strategies only
 * choose what to evaluate next: exhaustive and random in C, anything else in Lua (lua_host.c). */
#ifndef ATTN_STRATEGY_H
#define ATTN_STRATEGY_H

#include <stddef.h>
#include "space.h"

typedef struct attn_eval {
  int ok;               /* usable: ran, correct, within the tolerance */
  char status[16];      /* ok | wrong | compile_error | invalid | error | budget | interrupted */
  double time_ms;       /* measured median or modelled time; 0 when none */
  double error;         /* relative error vs fp64 (measured); -1 when not measured */
  double io;            /* entries moved (reads + writes); -1 when unknown */
  long long reads, writes; /* the same, apart; -1 when unknown */
  char message[512];
  /* how time_ms was measured (measure.h): 0 / -1 when not measured (model rows, older rows) */
  int reps, clean;      /* timed repetitions; those no other process delayed */
  double iqr_ms, ci_rel;/* spread of the repetitions; half-width of the median's 95% interval, relative */
  double load;          /* other processes' CPU use meanwhile, in cores; -1 unknown */
  int final;            /* time_ms is from the finalist round */
  int is_default;       /* the untuned default configuration of the problem */
  int chosen;           /* stored as the finalist round's choice (read back from the database) */
  char bound[32];       /* model rows: what limits the time (model.h); "" otherwise */
} attn_eval;

typedef struct attn_tuner attn_tuner;
struct attn_tuner {
  const attn_space *space;
  int budget, used;             /* distinct configurations allowed / evaluated (a repeat is free: it is answered
                                 * from this run's memory; the budget never exceeds the space's size) */
  double tolerance;             /* lowrank rows above it are not 'ok' for the search */
  unsigned long long seed;      /* strategies' random numbers (deterministic per problem: a rerun replays) */
  volatile int *stop;           /* set asynchronously (SIGINT): strategies stop at the next evaluation */
  /* Measures or models s and stores the row; fills out. The tuner has already checked budget and constraints. */
  void (*eval)(attn_tuner *t, const attn_spec *s, attn_eval *out);
  /* Optional: compile these space indices ahead (--jobs). */
  void (*prefetch)(attn_tuner *t, const int *idx, int count);
  void *user;
  int have_best;
  attn_spec best;
  attn_eval best_eval;
  attn_eval *memo;              /* per space index, this run's results (allocated on first use) */
  unsigned char *memo_have;
  int *order;                   /* the space indices in the order this run evaluated them (norder of them) */
  int norder;
};

/* The one entry point strategies call: 'invalid' (no budget used) for a configuration outside the space,
 * this run's earlier result for a repeat, 'budget' when none is left, 'interrupted' after a stop; otherwise
 * t->eval. Returns out->ok. */
int attn_tuner_evaluate(attn_tuner *t, const attn_spec *s, attn_eval *out);
void attn_tuner_release(attn_tuner *t); /* frees the memory of results */
int attn_tuner_budget_left(const attn_tuner *t);
int attn_tuner_stopped(const attn_tuner *t);

/* Deterministic random numbers for strategies (xorshift64*). */
unsigned long long attn_rand_next(unsigned long long *state);
int attn_rand_below(unsigned long long *state, int n);

/* What the performance and I/O model says of a configuration of the space, for model-guided strategies: on a GPU the
 * performance model's time and bound (model.h, with the compiled kernels' resources where the space's opts know
 * them, as tune's model rows are made), on the CPU, which has no time model, the kernel's I/O closed form alone
 * (io_theory.h). */
typedef struct attn_model_est {
  int ok;               /* 0: the model cannot rank it (why says so) */
  double time_ms;       /* the performance model's time; 0 on the CPU */
  double io;            /* entries moved (reads + writes) for the problem; -1 unknown */
  char bound[32];       /* what limits the modelled time ("" on the CPU) */
  char why[200];
} attn_model_est;

/* The model's estimate of t->space->cfg[idx]: for tune's own tuner the row tune stores for the problem being tuned
 * (attn_tune_model_eval), else the problem the space was built for (its opts' n, n_kv, heads, heads_kv). */
void attn_tuner_model(const attn_tuner *t, int idx, attn_model_est *out);

/* Built-in strategies: ATTN_OK (also when stopped or out of budget). */
int attn_strategy_exhaustive(attn_tuner *t);
int attn_strategy_random(attn_tuner *t);

/* A Lua strategy file (lua_host.c): ATTN_OK, or ATTN_EINVAL with "strategy FILE:LINE: message" in err when the
 * script fails to load, raises, or runs past the time limit ($ATTN_LUA_TIMEOUT_S, default 10 s of script time,
 * not counting evaluations). */
int attn_strategy_lua(attn_tuner *t, const char *path, char *err, size_t errlen);

#endif
