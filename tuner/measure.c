/* measure.c: measuring one configuration: a checked run against fp64 (which is also the warm-up), timed repetitions
 * on input sets rotated round-robin through an arena larger than the last-level cache (so each run starts with cold
 * inputs, as in an application) until the median is known (timing.h), and one run of the counting build for the
 * I/O; and the finalist round, the same repetitions interleaved across configurations. On CUDA the arena lives on the
 * device in the problem's dtype, exceeds the L2 cache, and each repetition is timed by CUDA events. */
#include "measure.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "space.h"

#define ARENA_MAX_BYTES (1024.0 * 1024.0 * 1024.0)
/* Beyond this n the fp64 reference (O(n^2 d), one thread) would cost more than the tuning: the last CHECK_ROWS query
 * rows of every head are checked. With bottom-right causal alignment those rows against all keys are a problem of
 * their own (n' = CHECK_ROWS, same n_kv), so the reference is exact for them. */
#define CHECK_ALL_UP_TO 1024
#define CHECK_ROWS 256

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

double attn_meas_exact_tolerance(attn_dtype t) { return t == ATTN_F32 ? 1e-4 : 1e-2; }

int attn_meas_init(attn_meas_ctx *c, attn_runtime *rt, const attn_problem *p, int reps, char *err, size_t errlen) {
  memset(c, 0, sizeof *c);
  c->rt = rt;
  c->reps = reps > 0 ? reps : ATTN_MEAS_MIN_REPS;
  c->rel_tol = ATTN_MEAS_REL_TOL;
  c->cap_s = ATTN_MEAS_CAP_S;
  c->load = -1;
  int rc = attn_problem_normalize(rt, p, &c->p);
  if (rc != ATTN_OK) {
    snprintf(err, errlen, "%s", attn_last_error(rt));
    return rc;
  }
  const attn_problem *q = &c->p;
  c->q_count = (size_t)q->batch * q->heads * q->n * q->d;
  c->kv_count = (size_t)q->batch * q->heads_kv * q->n_kv * q->d;
  c->v_count = (size_t)q->batch * q->heads_kv * q->n_kv * q->d_v;
  c->o_count = (size_t)q->batch * q->heads * q->n * q->d_v;
  c->set_count = c->q_count + c->kv_count + c->v_count;
  c->check_rows = q->n > CHECK_ALL_UP_TO ? CHECK_ROWS : q->n;
  return ATTN_OK;
}

/* The input sets, made on the first measurement (a rerun that finds everything stored allocates nothing). */
int attn_meas_cold_sets(double set_bytes) {
  /* the other sets - 1 of them - hold the wanted bytes between two uses of one */
  double sets = ceil(ATTN_MEAS_COLD_FACTOR * attn_cpu_llc_bytes() / set_bytes) + 1;
  if (sets * set_bytes > ARENA_MAX_BYTES) sets = floor(ARENA_MAX_BYTES / set_bytes);
  return sets < 2 ? 2 : (int)sets;
}

static int ensure_inputs(attn_meas_ctx *c, char *err, size_t errlen) {
  if (c->arena) return ATTN_OK;
  const attn_problem *q = &c->p;
  const int cuda = c->rt->target == ATTN_TARGET_CUDA, half = q->dtype != ATTN_F32;
  const size_t es = attn_dtype_size(q->dtype);
  const double set_bytes = (double)es * (double)c->set_count;
  /* on CUDA the timed sets live on the device; a half dtype on the CPU times sets of its own dtype, so the fp32
   * arena holds the checked set only */
  const int sets = cuda ? 1 : attn_meas_cold_sets(set_bytes);
  c->sets = sets;
  const int fsets = half ? 1 : sets;
  c->arena = malloc((size_t)fsets * c->set_count * sizeof(float));
  c->out = malloc(c->o_count * sizeof(float));
  int ok = c->arena && c->out;
  if (ok && half && !cuda) {
    c->karena = malloc((size_t)sets * c->set_count * es);
    c->kout = malloc(c->o_count * es);
    ok = c->karena && c->kout;
  }
  float *tmp = ok && half && !cuda && sets > 1 ? malloc(c->set_count * sizeof(float)) : NULL;
  if (!ok || (half && !cuda && sets > 1 && !tmp)) {
    free(c->arena);
    free(c->out);
    free(c->karena);
    free(c->kout);
    free(tmp);
    c->arena = NULL;
    c->out = NULL;
    c->karena = c->kout = NULL;
    snprintf(err, errlen, "out of memory for %d input sets of %.1f MiB", sets, set_bytes / 1048576.0);
    return ATTN_ENOMEM;
  }
  /* Fresh inputs: a seed per set, different per problem shape. */
  unsigned long long seed = 0x9e3779b97f4a7c15ULL ^ ((unsigned long long)q->n << 32) ^
                            ((unsigned long long)q->d << 16) ^ (q->d_v != q->d ? (unsigned long long)q->d_v << 4 : 0);
  for (int i = 0; i < fsets; i++)
    attn_fill_random(c->arena + (size_t)i * c->set_count, c->set_count, seed + (unsigned long long)i * 7919);
  /* the reference is computed on the inputs a half-precision kernel really reads */
  if (half) attn_round_dtype(q->dtype, c->arena, c->set_count);
  if (half && !cuda) {
    /* converted once per set: the timed runs never pay for a conversion */
    attn_to_dtype(q->dtype, c->arena, c->set_count, c->karena);
    for (int i = 1; i < sets; i++) {
      attn_fill_random(tmp, c->set_count, seed + (unsigned long long)i * 7919);
      attn_to_dtype(q->dtype, tmp, c->set_count, (unsigned short *)c->karena + (size_t)i * c->set_count);
    }
  } else if (!cuda) {
    c->karena = c->arena;
    c->kout = c->out;
  }
  free(tmp);
  c->next_set = 1;
  return ATTN_OK;
}

void attn_meas_free(attn_meas_ctx *c) {
  if (!c) return;
  if (c->rt && c->rt->target == ATTN_TARGET_CUDA) {
    attn_cuda_free(c->rt, c->dev_arena);
    attn_cuda_free(c->rt, c->dev_out);
  }
  c->dev_arena = c->dev_out = NULL;
  if (c->karena != c->arena) free(c->karena);
  if (c->kout != c->out) free(c->kout);
  c->karena = c->kout = NULL;
  attn_meas_bwd_free(c);
  attn_meas_serve_free(c);
  free(c->arena);
  free(c->out);
  free(c->ref);
  free(c->check_out);
  c->arena = NULL;
  c->out = NULL;
  c->ref = NULL;
  c->check_out = NULL;
}

/* Copies the last check_rows rows of every (batch, head) of x ([b][h][n][w]) into dst ([b][h][check_rows][w]). */
static void gather_rows(const attn_meas_ctx *c, const float *x, size_t w, float *dst) {
  const attn_problem *p = &c->p;
  const size_t rows = (size_t)c->check_rows, n = (size_t)p->n;
  for (size_t bh = 0; bh < (size_t)p->batch * p->heads; bh++)
    memcpy(dst + bh * rows * w, x + (bh * n + (n - rows)) * w, rows * w * sizeof(float));
}

/* Entries of the checked output rows (d_v wide). */
static size_t check_count(const attn_meas_ctx *c) {
  return (size_t)c->p.batch * c->p.heads * c->check_rows * c->p.d_v;
}

/* The checked set's fp32 inputs (rounded through a half dtype). */
static const float *set0_q(const attn_meas_ctx *c) { return c->arena; }
static const float *set0_k(const attn_meas_ctx *c) { return c->arena + c->q_count; }
static const float *set0_v(const attn_meas_ctx *c) { return c->arena + c->q_count + c->kv_count; }

/* The fp64 reference of the checked rows of set 0. */
static int make_reference(attn_meas_ctx *c) {
  const size_t cnt = check_count(c), qcnt = (size_t)c->p.batch * c->p.heads * c->check_rows * c->p.d;
  c->ref = malloc(cnt * sizeof(double));
  c->check_out = malloc(cnt * sizeof(float));
  float *q = c->check_rows < c->p.n ? malloc(qcnt * sizeof(float)) : NULL;
  if (!c->ref || !c->check_out || (c->check_rows < c->p.n && !q)) {
    free(q);
    free(c->ref);
    free(c->check_out);
    c->ref = NULL;
    c->check_out = NULL;
    return ATTN_ENOMEM;
  }
  attn_problem sub = c->p;
  sub.n = c->check_rows;
  if (q) gather_rows(c, set0_q(c), (size_t)c->p.d, q);
  attn_reference_threads(&sub, c->rt ? c->rt->threads : 1, q ? q : set0_q(c), set0_k(c), set0_v(c), c->ref);
  free(q);
  return ATTN_OK;
}

/* A CPU run's arguments on input set `set`, in the kernel's dtype. */
static attn_kargs kargs(const attn_meas_ctx *c, int set) {
  const size_t es = attn_dtype_size(c->p.dtype);
  const char *b = (const char *)c->karena + (size_t)set * c->set_count * es;
  const attn_problem *p = &c->p;
  return attn_problem_kargs(p, b, b + c->q_count * es, b + (c->q_count + c->kv_count) * es, c->kout);
}

static void set_status(attn_meas_result *r, const char *status, const char *msg) {
  snprintf(r->status, sizeof r->status, "%s", status);
  snprintf(r->message, sizeof r->message, "%s", msg ? msg : "");
}

/* A kernel's own failure (its source does not compile, the configuration is invalid) is final; anything the
 * environment caused (no compiler to run, a compiler killed, out of memory, a load failure) is "error", which the
 * next run tries again. */
static const char *status_for(int rc, const char *msg) {
  if (rc == ATTN_ECOMPILE) return strstr(msg, ATTN_CC_ENV_MARK) ? "error" : "compile_error";
  return rc == ATTN_EINVAL || rc == ATTN_EUNSUPPORTED ? "invalid" : "error";
}

/* Device input sets: random values in the problem's dtype (converted from fp32 on the host), enough sets that
 * round-robin use exceeds 1.25x the L2 cache between two uses of one set. */
static int ensure_device_inputs(attn_meas_ctx *c, char *err, size_t errlen) {
  if (c->dev_arena) return ATTN_OK;
  attn_runtime *rt = c->rt;
  attn_cuda_info_t info;
  if (attn_cuda_info(rt, &info) != ATTN_OK) {
    snprintf(err, errlen, "no CUDA device open");
    return ATTN_ENODEV;
  }
  const size_t es = attn_dtype_size(c->p.dtype);
  c->dev_set_bytes = (c->set_count * es + 255) / 256 * 256;
  double sets = ceil(1.25 * info.l2_bytes / (double)c->dev_set_bytes) + 1;
  if (sets * (double)c->dev_set_bytes > 4.0 * ARENA_MAX_BYTES) sets = floor(4.0 * ARENA_MAX_BYTES / c->dev_set_bytes);
  if (sets < 2) sets = 2;
  c->dev_sets = (int)sets;
  float *tmp = malloc(c->set_count * sizeof(float));
  unsigned short *half = malloc(c->set_count * es);
  int rc = tmp && half ? ATTN_OK : ATTN_ENOMEM;
  if (rc == ATTN_OK) rc = attn_cuda_alloc(rt, (size_t)c->dev_sets * c->dev_set_bytes, &c->dev_arena);
  if (rc == ATTN_OK) rc = attn_cuda_alloc(rt, c->o_count * es, &c->dev_out);
  const unsigned long long seed = 0x5851f42d4c957f2dULL ^ ((unsigned long long)c->p.n << 32) ^ (unsigned long long)c->p.d;
  for (int i = 0; i < c->dev_sets && rc == ATTN_OK; i++) {
    attn_fill_random(tmp, c->set_count, seed + (unsigned long long)i * 104729);
    const void *src = tmp;
    if (c->p.dtype != ATTN_F32) {
      for (size_t j = 0; j < c->set_count; j++)
        half[j] = c->p.dtype == ATTN_F16 ? attn_f32_to_f16(tmp[j]) : attn_f32_to_bf16(tmp[j]);
      src = half;
    }
    rc = attn_cuda_copy(rt, (char *)c->dev_arena + (size_t)i * c->dev_set_bytes, src, c->set_count * es, 1);
  }
  free(tmp);
  free(half);
  if (rc != ATTN_OK) {
    snprintf(err, errlen, "device input sets (%d of %.1f MiB): %s", c->dev_sets, c->dev_set_bytes / 1048576.0,
             rc == ATTN_ENOMEM && !c->dev_arena ? "out of memory" : attn_last_error(rt));
    attn_cuda_free(rt, c->dev_arena);
    attn_cuda_free(rt, c->dev_out);
    c->dev_arena = c->dev_out = NULL;
    return rc;
  }
  c->dev_next = 0;
  return ATTN_OK;
}

/* One timed run of plan on the next input set: wall (CPU) or event (CUDA) time, and the run delay its threads
 * suffered meanwhile (-1 unknown; 0 for CUDA events, which do not see the host's scheduler). */
static int run_once(attn_meas_ctx *c, const attn_plan *plan, const attn_sched_probe *sp, double *ms, double *delay) {
  attn_runtime *rt = c->rt;
  if (rt->target == ATTN_TARGET_CUDA && !c->serve && !c->backward) {
    const size_t es = attn_dtype_size(c->p.dtype);
    const char *b = (const char *)c->dev_arena + (size_t)c->dev_next * c->dev_set_bytes;
    c->dev_next = (c->dev_next + 1) % c->dev_sets;
    *delay = 0;
    return attn_cuda_run(rt, plan->cuda, &c->p, b, b + c->q_count * es, b + (c->q_count + c->kv_count) * es,
                         c->dev_out, NULL, ms);
  }
  const int set = c->next_set;
  c->next_set = c->next_set + 1 < c->sets ? c->next_set + 1 : 0; /* every set rotates, set 0 (checked) too */
  /* a serving layout times the call itself: its staging is part of what it costs (on CUDA by events on the stream,
   * as the dense launch: its tables' copy and its kernel); the backward its launches between events */
  if (rt->target == ATTN_TARGET_CUDA) {
    *delay = 0;
    return c->backward ? attn_meas_bwd_time(c, plan, set, ms) : attn_meas_serve_time(c, plan, set, ms);
  }
  attn_kargs a = c->serve ? (attn_kargs){0} : plan->backward ? attn_meas_bwd_kargs(c, set) : kargs(c, set);
  double d0 = attn_sched_delay_ms(sp), t0 = now_ms();
  int rc = c->serve ? attn_meas_serve_run(c, plan, set) : attn_cpu_run(rt, plan->cpu, &a, NULL);
  *ms = now_ms() - t0;
  double d1 = attn_sched_delay_ms(sp);
  *delay = d0 >= 0 && d1 >= 0 ? d1 - d0 : -1;
  return rc;
}

/* The load over windows of at least 0.25 s: a short measurement reports the latest complete window. */
static void note_load(attn_meas_ctx *c) {
  double now = now_ms();
  if (c->load_t0 == 0) {
    attn_load_start(&c->load_probe);
    c->load_t0 = now;
    return;
  }
  if (now - c->load_t0 < 250) return;
  double l = attn_load_end(&c->load_probe);
  if (l >= 0) c->load = l;
  attn_load_start(&c->load_probe);
  c->load_t0 = now;
}

static void fill_timing(attn_meas_ctx *c, const attn_timing_stats *st, attn_meas_result *r) {
  r->time_ms = st->median_ms;
  r->iqr_ms = st->iqr_ms;
  r->ci_rel = st->ci_rel;
  r->reps = st->reps;
  r->clean = st->clean;
  r->method = c->rt->target == ATTN_TARGET_CUDA ? "events" : st->method;
  r->load = c->load;
}

/* The rounds' runs of the context's plans (timing.h's attn_rounds): the scheduler's probe opens on the first timed
 * run, once the kernels' worker threads exist. */
typedef struct meas_runs {
  attn_meas_ctx *c;
  attn_plan *const *plans;
  attn_sched_probe sp;
  int sp_open, failed, rc;
} meas_runs;

static int meas_run(void *user, int side, int timed, double *ms, double *delay) {
  meas_runs *m = user;
  if (m->c->run_hook) return m->c->run_hook(m->c->run_hook_user, side, timed, ms, delay);
  attn_sched_probe none = {.count = 0};
  if (timed && !m->sp_open && m->c->rt->target == ATTN_TARGET_CPU) {
    attn_sched_open(&m->sp);
    m->sp_open = 1;
  }
  int rc = run_once(m->c, m->plans[side], timed ? &m->sp : &none, ms, delay);
  if (rc == ATTN_OK) return 0;
  m->failed = side;
  m->rc = rc;
  return 1;
}

/* The rounds' parameters (docs/tuning.md): screening one configuration stops at the cap after 3 repetitions; a run
 * over 2 s gets 3. No load gate: screening ranks, the finalist round re-times what is kept. */
void attn_meas_screen_caps(const attn_meas_ctx *c, attn_rounds_caps *k) {
  memset(k, 0, sizeof *k);
  k->min_rounds = c->reps;
  k->min_rounds_at_cap = c->reps < 3 ? c->reps : 3;
  k->long_run_ms = 2000;
  k->rel_tol = c->rel_tol;
  k->cap_s = c->cap_s;
  k->wait_clean = 1;
  k->threads = c->rt ? c->rt->threads : 1;
}

/* The finalist round and the confirmation: the cap never cuts them below the minimum rounds (a median without an
 * interval could not replace the default); an attempt the load made worthless is run again after a wait, within half
 * the round's cap. */
void attn_meas_final_caps(const attn_meas_ctx *c, double cap_s, attn_rounds_caps *k) {
  attn_meas_screen_caps(c, k);
  k->min_rounds_at_cap = c->reps;
  k->cap_s = cap_s;
  k->warmup = 1;
  k->retries = ATTN_MEAS_RETRIES;
  k->retry_wait_s = ATTN_MEAS_RETRY_WAIT_S;
  k->retry_budget_s = cap_s / 2;
  k->sleep_s = c->sleep_s;
}

static void take_rounds(attn_meas_result *r, const attn_rounds_out *o) {
  r->stolen = o->stolen;
  r->attempts = o->attempts;
  r->worthless = o->worthless;
}

/* Timed repetitions of plan until the median is known or the cap is spent. */
static int time_plan(attn_meas_ctx *c, attn_plan *plan, attn_meas_result *r) {
  attn_rounds_caps k;
  attn_meas_screen_caps(c, &k);
  attn_plan *plans[1] = {plan};
  meas_runs m = {.c = c, .plans = plans};
  attn_timing_stats st;
  attn_rounds_out o;
  note_load(c);
  int rc = attn_rounds(&k, 1, meas_run, &m, &st, &o);
  note_load(c);
  if (m.sp_open) attn_sched_close(&m.sp);
  if (rc == 0) {
    fill_timing(c, &st, r);
    take_rounds(r, &o);
    return ATTN_OK;
  }
  return rc < 0 && !m.rc ? attn_fail(c->rt, ATTN_ENOMEM, "out of memory for timings") : m.rc;
}

/* The plan of s in the context's pass: attn_execute_backward's (c->backward) or the forward's. */
static int plan_for(attn_meas_ctx *c, const attn_spec *s, int count_io, const char *label, attn_plan **plan) {
  return c->backward ? attn_plan_create_backward_spec(c->rt, &c->p, s, count_io, label, plan)
                     : attn_plan_create_spec(c->rt, &c->p, s, count_io, label, plan);
}

/* The counting build's run on the checked inputs, as the layout's call runs it. */
typedef int (*meas_count_fn)(attn_meas_ctx *c, const attn_plan *counting, attn_io *io);

static int count_dense(attn_meas_ctx *c, const attn_plan *counting, attn_io *io) {
  return attn_plan_run_f32(counting, set0_q(c), set0_k(c), set0_v(c), c->out, io, NULL);
}

/* What measuring one configuration does once its plan is checked (r->error set), the same for the dense forward,
 * the backward and the serving layouts (each passes how its counting build runs; NULL: none): timing (a wrong kernel
 * is never chosen, so a few repetitions show its time without spending the cap on it), the counting build of the
 * very same kernel once, and the status. Destroys plan. */
static void measure_finish(attn_meas_ctx *c, const attn_spec *s, attn_plan *plan, int wrong, meas_count_fn count,
                           attn_meas_result *r) {
  attn_runtime *rt = c->rt;
  const double cap = c->cap_s;
  if (wrong) c->cap_s = 0;
  int rc = time_plan(c, plan, r);
  c->cap_s = cap;
  attn_plan_destroy(plan);
  if (rc != ATTN_OK) {
    set_status(r, "error", attn_last_error(rt));
    return;
  }
  attn_plan *counting = NULL;
  if (count && plan_for(c, s, 1, "counting", &counting) == ATTN_OK) {
    attn_io io = {0, 0};
    if (count(c, counting, &io) == ATTN_OK) {
      r->reads = io.reads;
      r->writes = io.writes;
      r->have_io = 1;
    }
    attn_plan_destroy(counting);
  }
  if (wrong) {
    char msg[160];
    const char *what = c->backward ? "gradients' relative error" : "relative error";
    snprintf(msg, sizeof msg, "%s %.3g exceeds %.0e%s in %s", what, r->error, attn_meas_exact_tolerance(s->dtype),
             c->backward ? "" : " for an exact algorithm", attn_dtype_name(s->dtype));
    set_status(r, "wrong", msg);
  } else {
    set_status(r, "ok", "");
  }
}

/* The input sets of the context's layout: the backward's, a serving layout's or the dense forward's (on CUDA, on
 * the device too); made on first use. */
static int ensure_layout(attn_meas_ctx *c, char *err, size_t errlen) {
  if (c->backward) return attn_meas_bwd_ensure(c, err, errlen);
  if (c->p.page_size > 0 || c->p.varlen) return attn_meas_serve_ensure(c, err, errlen);
  int rc = ensure_inputs(c, err, errlen);
  if (rc == ATTN_OK && c->rt->target == ATTN_TARGET_CUDA) rc = ensure_device_inputs(c, err, errlen);
  return rc;
}

/* attn_measure of the backward: the plan of attn_execute_backward for s, checked on set 0 with poisoned gradients,
 * timed on the rotated sets (CUDA: by events), counted once (CUDA: the backward has no counting build). */
static void measure_backward(attn_meas_ctx *c, const attn_spec *s, attn_plan *plan, attn_meas_result *r) {
  char err[256];
  int rc = attn_meas_bwd_check(c, plan, &r->error, err, sizeof err);
  if (rc != ATTN_OK) {
    set_status(r, "error", err);
    attn_plan_destroy(plan);
    return;
  }
  measure_finish(c, s, plan, !(r->error <= attn_meas_exact_tolerance(s->dtype)),
                 c->rt->target == ATTN_TARGET_CUDA ? NULL : attn_meas_bwd_count, r);
}

/* attn_measure of a serving layout (paged, varlen): the plan run through attn_execute_paged or
 * attn_execute_varlen, checked on set 0 per sequence against fp64 with a poisoned output, timed on the rotated sets
 * (staging included), its kernel's transfers counted per sequence on the CPU (measure_serve.c; a CUDA plan's sets on
 * the device, no counting build). */
static void measure_serve(attn_meas_ctx *c, const attn_spec *s, attn_plan *plan, attn_meas_result *r) {
  char err[256];
  int rc = attn_meas_serve_check(c, plan, &r->error, err, sizeof err);
  if (rc != ATTN_OK) {
    set_status(r, status_for(rc, err), err);
    attn_plan_destroy(plan);
    return;
  }
  measure_finish(c, s, plan, !(r->error <= attn_meas_exact_tolerance(s->dtype)),
                 c->rt->target == ATTN_TARGET_CUDA ? NULL : attn_meas_serve_count, r);
}

void attn_measure(attn_meas_ctx *c, const attn_spec *s, attn_meas_result *r) {
  memset(r, 0, sizeof *r);
  attn_runtime *rt = c->rt;
  char err[256];
  if (ensure_layout(c, err, sizeof err) != ATTN_OK) {
    set_status(r, "error", err);
    return;
  }
  /* a spec whose CUDA layout kernel would not be its own is refused before its dense kernel is compiled */
  int rc = c->serve ? attn_meas_serve_spec(c, s, err, sizeof err) : ATTN_OK;
  if (rc != ATTN_OK) {
    set_status(r, status_for(rc, err), err);
    return;
  }
  attn_plan *plan = NULL;
  rc = plan_for(c, s, 0, "tuning", &plan);
  if (rc != ATTN_OK) {
    set_status(r, status_for(rc, attn_last_error(rt)), attn_last_error(rt));
    return;
  }
  if (c->backward) {
    measure_backward(c, s, plan, r);
    return;
  }
  if (c->p.page_size > 0 || c->p.varlen) {
    measure_serve(c, s, plan, r);
    return;
  }
  if (!c->ref && make_reference(c) != ATTN_OK) {
    attn_plan_destroy(plan);
    set_status(r, "error", "out of memory for the fp64 reference");
    return;
  }
  /* Checked run, also the warm-up (compiled code paged in, scratch allocated). */
  attn_poison(c->out, c->o_count);
  rc = attn_plan_run_f32(plan, set0_q(c), set0_k(c), set0_v(c), c->out, NULL, NULL);
  if (rc != ATTN_OK) {
    set_status(r, "error", attn_last_error(rt));
    attn_plan_destroy(plan);
    return;
  }
  gather_rows(c, c->out, (size_t)c->p.d_v, c->check_out);
  r->error = attn_rel_error(c->ref, c->check_out, check_count(c));
  const int exact = s->algo != ATTN_ALGO_LOWRANK;
  measure_finish(c, s, plan, !(r->error <= (exact ? attn_meas_exact_tolerance(s->dtype) : 1.0)), count_dense, r);
}

int attn_meas_finalists(attn_meas_ctx *c, const attn_spec *specs, int count, double cap_s, attn_meas_result *out) {
  attn_runtime *rt = c->rt;
  char err[256];
  attn_plan **plans = calloc((size_t)(count > 0 ? count : 1), sizeof *plans);
  attn_timing_stats *st = calloc((size_t)(count > 0 ? count : 1), sizeof *st);
  int rc = plans && st ? ATTN_OK : ATTN_ENOMEM;
  for (int i = 0; i < count; i++) {
    memset(&out[i], 0, sizeof out[i]);
    set_status(&out[i], "error", rc == ATTN_OK ? "" : "out of memory");
  }
  if (rc == ATTN_OK && ensure_layout(c, err, sizeof err) != ATTN_OK) rc = ATTN_ENOMEM;
  /* Plans, compiled before, so from the cache (the rounds' warm-up runs each once). */
  for (int i = 0; i < count && rc == ATTN_OK; i++)
    if ((rc = plan_for(c, &specs[i], 0, "finalist", &plans[i])) != ATTN_OK)
      set_status(&out[i], "error", attn_last_error(rt));
  if (rc == ATTN_OK) {
    attn_rounds_caps k;
    attn_meas_final_caps(c, cap_s, &k);
    meas_runs m = {.c = c, .plans = plans};
    attn_rounds_out o;
    note_load(c);
    int rr = attn_rounds(&k, count, meas_run, &m, st, &o);
    note_load(c);
    if (m.sp_open) attn_sched_close(&m.sp);
    if (rr != 0) {
      rc = m.rc ? m.rc : ATTN_ENOMEM;
      set_status(&out[m.rc ? m.failed : 0], "error", m.rc ? attn_last_error(rt) : "out of memory for timings");
    }
    for (int i = 0; i < count && rc == ATTN_OK; i++) {
      fill_timing(c, &st[i], &out[i]);
      take_rounds(&out[i], &o);
      set_status(&out[i], "ok", "");
    }
  }
  for (int i = 0; plans && i < count; i++) attn_plan_destroy(plans[i]);
  free(plans);
  free(st);
  return rc;
}

int attn_meas_confirm_keeps(double round_ms, double round_ci_rel, const attn_meas_result *conf) {
  if (strcmp(conf->status, "ok") != 0 || !(conf->time_ms > 0)) return 0;
  if (!(round_ms > 0) || conf->time_ms < round_ms) return 1; /* interference only adds time: the lower */
  /* higher: beyond both estimates' noise, from an attempt the load did not make worthless, the machine is slower
   * now than during the round, and the row says what it runs at */
  double noise = round_ci_rel >= 0 && conf->ci_rel >= 0 ? round_ci_rel + conf->ci_rel : INFINITY;
  if (!(noise >= ATTN_MEAS_REL_TOL)) noise = ATTN_MEAS_REL_TOL;
  return !conf->worthless && conf->time_ms > round_ms * (1 + noise);
}

int attn_meas_precompile(const attn_runtime *rt, const attn_spec *s) {
  /* A private runtime copy: its own error buffer, and its own database connection for storing artifacts. */
  attn_runtime *mine = malloc(sizeof *mine);
  if (!mine) return ATTN_ENOMEM;
  memcpy(mine, rt, sizeof *mine);
  mine->db = NULL;
  mine->cuda = NULL;
  if (rt->db) {
    char err[256];
    if (attn_db_open(rt->db_path, 0, &mine->db, err, sizeof err) != ATTN_OK) mine->db = NULL;
  }
  int rc = ATTN_OK;
  for (int count_io = 0; count_io < 2 && rc == ATTN_OK; count_io++) {
    if (s->target == ATTN_TARGET_CUDA) {
      mine->cuda = rt->cuda; /* read only: the device's arch */
      rc = attn_cuda_precompile(mine, s, count_io);
      continue;
    }
    attn_cpu_kernel *k = NULL;
    rc = attn_cpu_load(mine, s, count_io, &k);
    attn_cpu_unload(k);
  }
  attn_db_close(mine->db);
  free(mine);
  return rc;
}
