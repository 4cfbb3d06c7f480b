/* tune_run.c: a tuning run: mode, database and runtime, the problems' spaces, the strategy on each, the summary. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "artifact.h"
#include "db.h"
#include "shard.h"
#include "space.h"
#include "spec_bwd_cuda.h"
#include "timing_env.h"
#include "tune.h"

volatile sig_atomic_t attn_tune_stop;
static void on_sigint(int sig) {
  (void)sig;
  attn_tune_stop = 1;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A database that fails ends the run (measuring on without storing would be lost work); the first reason is kept. */
void attn_tune_db_failed(tune_state *ts, const char *err) {
  if (ts->db_error) return;
  ts->db_error = 1;
  snprintf(ts->db_err, sizeof ts->db_err, "%s", err);
}

/* The score modifiers of --window, --softcap and --alibi on problem p, its window as attn_problem_normalize leaves it
 * (one that hides no key of p is none: the problem, its plans and its rows are those without a window). */
static void tune_mods(const tune_opts *o, attn_problem *p) {
  p->window = o->window;
  p->softcap = o->softcap;
  p->alibi_slopes = o->alibi;
  attn_problem norm;
  if (p->window > 0 && attn_problem_normalize(NULL, p, &norm) == ATTN_OK) p->window = norm.window;
}

/* The kernel flags of p's modifiers on s (the kernel compiled for p applies them). */
static void spec_mods(const attn_problem *p, attn_spec *s) {
  s->window = p->window > 0;
  s->softcap = p->softcap > 0;
  s->alibi = p->alibi_slopes != NULL;
}

/* One evaluation (the strategy's eval): the stored row, else measured or modelled now and stored. */
void attn_tune_eval(attn_tuner *t, const attn_spec *s0, attn_eval *e) {
  tune_state *ts = t->user;
  /* the problem's modifiers on the kernel (the space's points and a Lua strategy's configurations carry them already) */
  attn_spec sm = *s0;
  spec_mods(&ts->prob, &sm);
  const attn_spec *s = &sm;
  char err[512];
  int found = ts->o->remeasure ? 0 : attn_store_find(ts->store, &ts->prob, s, ts->provenance, e, err, sizeof err);
  if (found < 0) attn_tune_db_failed(ts, err);
  /* a model row of estimated registers where the compiled kernel's are known now: ranked again, the row replaced */
  if (found > 0 && attn_tune_model_stale(ts, s, e)) {
    found = 0;
    ts->reranked++;
  }
  if (found > 0) {
    ts->done++;
    ts->resumed++;
    e->ok = strcmp(e->status, "ok") == 0 && (s->algo != ATTN_ALGO_LOWRANK || e->error <= t->tolerance);
    attn_tune_progress(ts, s, e, 1);
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
    attn_tune_model_eval(ts, s, e);
  } else {
    attn_meas_result r;
    attn_measure(&ts->meas, s, &r);
    snprintf(e->status, sizeof e->status, "%s", r.status);
    snprintf(e->message, sizeof e->message, "%.500s", r.message);
    if (r.reps > 0) attn_tune_take_timing(e, &r);
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
  if (attn_tune_stop && strcmp(e->status, "ok") != 0 && strcmp(e->status, "wrong") != 0) {
    snprintf(e->status, sizeof e->status, "interrupted");
    e->ok = 0;
    return;
  }
  if (attn_store_put(ts->store, &ts->prob, s, ts->provenance, e, err, sizeof err) != ATTN_OK) {
    attn_tune_db_failed(ts, err);
  } else {
    ts->stored_now++;
  }
  ts->fresh++;
  ts->busy_s += now_s() - t0;
  ts->done++;
  if (!e->ok) ts->failed++;
  attn_tune_progress(ts, s, e, 0);
  /* a database that stops taking rows ends the run: measuring on without storing would be lost work */
  if (ts->db_error) attn_tune_stop = 1;
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
    int i = attn_tune_stop ? j->count : j->next++;
    pthread_mutex_unlock(&j->mu);
    if (i >= j->count) return NULL;
    attn_meas_precompile(j->rt, &j->specs[i]); /* a failure shows again, with its log, when measured */
  }
}

/* --jobs J: compile what is about to be measured on J threads; measurements stay serial. */
static void prefetch_cb(attn_tuner *t, const int *idx, int count) {
  tune_state *ts = t->user;
  if (ts->model || ts->backward || ts->o->jobs <= 1 || count <= 1) return; /* it compiles forward kernels */
  /* the cache directory is set up here, once: each worker copies the runtime (attn_meas_precompile), and a copy taken
   * while another thread sets the directory up would read it half-written. A failure shows when measured. */
  if (attn_cache_dir_ready(ts->rt) != ATTN_OK) return;
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

attn_spec attn_tune_backward_default(const attn_runtime *rt, const attn_problem *p) {
  attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, rt->target, p->dtype, p->d, p->causal);
  s.dv = p->d_v > 0 && p->d_v != p->d ? p->d_v : 0;
  s.br = 64; /* runtime/api.c's attn_plan_create_backward */
  s.bc = 64;
  attn_spec t;
  attn_cuda_info_t info;
  char err[256];
  /* CUDA: attn_spec_backward_cuda's tiles (api.c's create_backward_cuda) on the space's base spec, so that the
   * default is the space's point of the same tiles */
  if (rt->target == ATTN_TARGET_CUDA && attn_cuda_info(rt, &info) == ATTN_OK &&
      attn_spec_backward_cuda(p->dtype, p->d, p->d_v, p->causal, info.arch, &t, err, sizeof err) == ATTN_OK) {
    s.br = t.br, s.bc = t.bc, s.warps = t.warps, s.stages = t.stages;
    s.unroll = 0, s.split = 0, s.tile = 0, s.dq = 0;
    snprintf(s.arch, sizeof s.arch, "%s", t.arch);
  }
  spec_mods(p, &s); /* as attn_plan_create_backward's default */
  return s;
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

int attn_tune_run(tune_opts *o, int argc, char **argv) {
  const attn_gpu *gpu = o->gpu;
  const attn_target target = o->target;
  const int ndv = o->ndv, budget_given = o->budget_given, builtin = o->builtin;
  const char *lua_path = o->lua_path;
  int status = 0;
  attn_store *store = NULL;
  attn_runtime *rt = NULL;
  tune_state ts;
  memset(&ts, 0, sizeof ts);
  char err[4096];

  /* Measured or modelled. A GPU is measured only when it is the device present (and the build can run it). */
  ts.o = o;
  ts.gpu = gpu;
  ts.tty = isatty(STDERR_FILENO);
  if (o->gpu_note[0]) printf("note: %s\n", o->gpu_note);
  attn_cuda_info_t devinfo;
  memset(&devinfo, 0, sizeof devinfo);
  if (gpu) {
    ts.model = 1;
    if (!o->force_model) {
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
    if (ts.model && (o->algos & ATTN_ALGO_BIT(ATTN_ALGO_LOWRANK))) {
      printf("lowrank is left out of the model: its error is measured, never assumed\n");
      o->algos &= ~ATTN_ALGO_BIT(ATTN_ALGO_LOWRANK);
      if (!o->algos) FAIL_USAGE("--algo lowrank alone cannot be ranked by the model: add flash or smallcache");
    }
  }
  ts.provenance = ts.model ? "model" : "measured";
  /* Measured tuning times under the one environment bench and the finalist round use (timing_env.c). */
  if (!ts.model) attn_timing_env("tune", 0);

  char db_path[4096];
  if (o->db_path) snprintf(db_path, sizeof db_path, "%s", o->db_path);
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
    attn_kres_init(&kres, attn_store_db(store), o->compiled);
    if (kres.compiler[0]) ts.kres = &kres;
    if (o->compiled && !kres.compiler[0])
      printf("--compiled: NVRTC is not available; the model estimates registers\n");
  }

  /* Spaces per (dtype, causal, d, d_v, n): the CPU's split-K values depend on the problem's work items; the total
   * for the progress line. */
  int nspaces = 0;
  for (int t = 0; t < 3; t++) nspaces += (o->dtypes >> t) & 1;
  nspaces *= __builtin_popcount(o->passes) * o->ncausal * o->nd * ndv * o->nn;
  attn_space *spaces = calloc((size_t)nspaces, sizeof *spaces);
  /* --shard K/N: the part each problem belongs to, in the loops' order (0 for all when unsharded); every part of
   * one command computes the same partition, and a problem not in this part is neither built nor tuned */
  int *owner = calloc((size_t)nspaces, sizeof *owner);
  double *cost = calloc((size_t)nspaces, sizeof *cost);
  int si = 0, empty = 0, nmine = 0, oom = !spaces || !owner || !cost, window_noted = 0;
  if (!oom && o->shard_n) {
    for (int pa = 0; pa < 2; pa++)
      for (int t = 0; t < 3 && (o->passes >> pa & 1); t++) {
        if (!((o->dtypes >> t) & 1)) continue;
        for (int c = 0; c < o->ncausal; c++)
          for (int di = 0; di < o->nd; di++)
            for (int vi = 0; vi < ndv; vi++)
              for (int ni = 0; ni < o->nn; ni++, si++) /* the backward: 2.5 times the forward's flops */
                cost[si] = (pa ? 2.5 : 1.0) *
                           attn_shard_cost(o->ns[ni], o->kv[ni], o->ds[di], o->dvs ? o->dvs[vi] : 0, o->causals[c]);
      }
    oom = attn_shard_assign(cost, nspaces, o->shard_n, owner) != 0;
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
  for (int pa = 0; pa < 2; pa++)
  for (int t = 0; t < 3 && (o->passes >> pa & 1); t++) {
    if (!((o->dtypes >> t) & 1)) continue;
    for (int c = 0; c < o->ncausal; c++)
      for (int dj = 0; dj < o->nd * ndv; dj++) {
        const int di = dj / ndv, dv = o->dvs ? o->dvs[dj % ndv] : 0;
        int first = 1; /* the first n of this (dtype, causal, d, d_v) tuned here speaks for the others when empty */
        for (int ni = 0; ni < o->nn; ni++, si++) {
          if (owner[si] != o->shard_k) continue;
          nmine++;
          attn_space_opts so = {.target = target, .dtype = (attn_dtype)t, .d = o->ds[di], .causal = o->causals[c],
                                .algos = o->algos, .tolerance = o->tolerance, .gpu = gpu, .n = o->ns[ni],
                                .n_kv = o->kv[ni], .threads = rt ? rt->threads : 0,
                                /* paged and varlen run their kernel on one sequence at a time */
                                .heads = (long)(o->page_size || o->nvl ? 1 : o->batch) * o->heads,
                                .heads_kv = (long)(o->page_size || o->nvl ? 1 : o->batch) * o->heads_kv,
                                .dv = dv, .backward = pa, .nondeterministic = o->nondeterministic};
          so.fast_mem_bytes = gpu ? gpu->smem_per_block_kb * 1024.0 : attn_cpu_l2_bytes();
          if (gpu) snprintf(so.arch, sizeof so.arch, "%s", gpu->arch);
          if (gpu && !ts.model) { /* the device present: its own limits and arch */
            so.fast_mem_bytes = devinfo.smem_optin;
            snprintf(so.arch, sizeof so.arch, "%s", devinfo.arch);
          }
          prune_ctx pc = {.ts = &ts, .p = {.batch = o->batch, .heads = o->heads, .heads_kv = o->heads_kv,
                                           .n = o->ns[ni], .n_kv = o->kv[ni],
                                           .d = so.d, .dtype = so.dtype, .causal = so.causal, .tolerance = o->tolerance,
                                           .d_v = dv == so.d ? 0 : dv, .page_size = o->page_size,
                                           .varlen = o->nvl > 0}};
          tune_mods(o, &pc.p);
          if (o->window > 0 && pc.p.window == 0 && !window_noted++)
            printf("note: --window %d hides no key at n=%d n_kv=%d causal=%d (every row's keys are within it): "
                   "tuned as the problem without a window, whose rows a plan with this window is served; so is every "
                   "such problem here\n", o->window, pc.p.n, pc.p.n_kv, pc.p.causal);
          /* the space is the kernels that apply them from the start: a --compiled probe compiles only those */
          so.window = pc.p.window;
          so.softcap = pc.p.softcap > 0;
          so.alibi = pc.p.alibi_slopes != NULL;
          if (ts.kres && !pa) { /* compiled resources are the forward kernels' */
            so.resources = attn_kres_get;
            so.resources_ctx = ts.kres;
            if (o->compiled) { /* the grid's configurations first, compiled J at a time, then the space from them */
              attn_space probe;
              attn_kres_collect(ts.kres);
              if (attn_space_build(&so, &probe, err, sizeof err) == ATTN_OK) attn_space_free(&probe);
              attn_kres_fill(ts.kres, o->jobs);
            }
          }
          if (ts.kres && !pa) { /* stored model rows of what the compiled kernels rule out are ruled out too */
            so.pruned = attn_tune_on_pruned;
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
                    pa ? "the backward of flash" : algo_list(o->algos, algos_buf, sizeof algos_buf), so.d, dvs,
                    attn_dtype_name(so.dtype), so.causal,
                    device, spaces[si].considered,
                    spaces[si].pruned_example[0] ? spaces[si].pruned_example : "no configuration applies");
            empty++;
          }
          first = 0;
          int per = budget_given ? o->budget : (ts.model || target == ATTN_TARGET_CUDA ? cnt : 24);
          ts.total += per < cnt ? per : cnt;
        }
      }
  }
  free(owner);
  if (o->shard_n)
    printf("shard %d/%d: %d of the %d problems (every problem is tuned whole in one part; merge the parts' "
           "databases)\n", o->shard_k, o->shard_n, nmine, nspaces);

  struct sigaction sa, old_sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_sa);
  attn_tune_stop = 0;
  ts.t_start = now_s();

  si = 0;
  int unusable = 0, tuned = 0; /* problems the strategy ran on, and those of them with no usable configuration */
  char unusable_first[128] = "";
  for (int pa = 0; pa < 2 && !attn_tune_stop; pa++)
  for (int t = 0; t < 3 && !attn_tune_stop && (o->passes >> pa & 1); t++) {
    if (!((o->dtypes >> t) & 1)) continue;
    for (int c = 0; c < o->ncausal && !attn_tune_stop; c++)
      for (int dj = 0; dj < o->nd * ndv && !attn_tune_stop; dj++, si += o->nn) {
        const int di = dj / ndv, dv = o->dvs ? o->dvs[dj % ndv] : 0;
        for (int ni = 0; ni < o->nn && !attn_tune_stop; ni++) {
          attn_space *sp = &spaces[si + ni];
          if (!sp->count) continue;
          attn_problem p = {.batch = o->batch, .heads = o->heads, .heads_kv = o->heads_kv, .n = o->ns[ni],
                            .n_kv = o->kv[ni], .d = o->ds[di],
                            .dtype = (attn_dtype)t, .causal = o->causals[c], .tolerance = o->tolerance,
                            .d_v = dv == o->ds[di] ? 0 : dv, .page_size = o->page_size, .varlen = o->nvl > 0};
          tune_mods(o, &p);
          ts.prob = p;
          ts.backward = pa;
          attn_store_set_backward(store, pa);
          ts.fastest_ms = 0;
          ts.fastest_line[0] = '\0';
          ts.fresh = 0;
          ts.default_spec[0] = '\0';
          if (!ts.model) {
            if (attn_meas_init(&ts.meas, rt, &p, o->reps, err, sizeof err) != ATTN_OK) {
              fprintf(stderr, "attntune tune: n=%d d=%d: %s\n", p.n, p.d, err);
              status = 1;
              continue;
            }
            ts.meas.cap_s = o->cap_s;
            ts.meas.backward = pa;
            ts.meas.serve_lq = o->vl_q; /* --varlen's sequences (NULL: each n queries, n_kv keys) */
            ts.meas.serve_lk = o->vl_kv;
            if (pa) ts.default_cfg = attn_tune_backward_default(rt, &ts.meas.p);
            else attn_plan_default(rt, &ts.meas.p, ATTN_ALGO_FLASH, &ts.default_cfg);
            /* the device's arch, as the space's points carry it: attn_spec_default writes sm_80, so on an sm_90
             * device the default was a point of its own (its row keyed sm_80, never the space's twin) */
            if (ts.default_cfg.target == ATTN_TARGET_CUDA && devinfo.arch[0])
              snprintf(ts.default_cfg.arch, sizeof ts.default_cfg.arch, "%s", devinfo.arch);
            attn_spec_format(&ts.default_cfg, ts.default_spec, sizeof ts.default_spec);
          }
          attn_tuner tu = {.space = sp, .tolerance = o->tolerance, .stop = (volatile int *)&attn_tune_stop,
                           .eval = attn_tune_eval, .prefetch = prefetch_cb, .user = &ts};
          tu.budget = budget_given ? o->budget : (ts.model || target == ATTN_TARGET_CUDA ? sp->count : 24);
          /* Deterministic per problem: the same command replays the same choices (resume). */
          tu.seed = 0x243f6a8885a308d3ULL ^ ((unsigned long long)p.n * 1000003ULL) ^ ((unsigned long long)p.d << 40) ^
                    ((unsigned long long)t << 56) ^ ((unsigned long long)p.causal << 60) ^
                    (p.n_kv != p.n ? (unsigned long long)p.n_kv * 0x9e3779b97f4a7c15ULL : 0) ^
                    (p.d_v ? (unsigned long long)p.d_v * 0xbf58476d1ce4e5b9ULL : 0) ^
                    (pa ? 0x94d049bb133111ebULL : 0);
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
          if (src == ATTN_OK && !ts.model && !attn_tune_stop && tu.have_best && !ts.db_error) {
            if (attn_tune_finalist_round(&ts, &tu, &best, &best_eval, why, sizeof why) != 0 && !attn_tune_stop &&
                !ts.db_error)
              snprintf(why, sizeof why, "finalist round failed: screening times");
          }
          attn_tuner_release(&tu);
          if (!ts.model) attn_meas_free(&ts.meas);
          if (ts.tty) fputc('\n', stderr);
          if (src != ATTN_OK) {
            fprintf(stderr, "attntune tune: %s\n", b == 3 ? err : attn_strerror(src));
            status = 1;
            /* a broken strategy breaks every problem the same way */
            attn_tune_stop = attn_tune_stop ? attn_tune_stop : 2;
            break;
          }
          if (ts.db_error) break;
          if (attn_tune_stop == 1) break; /* an interrupted problem has no best yet */
          tuned++;
          char sum[256], kv[32] = "", dvs[24 + ATTN_DB_VARIANT_MAX] = "";
          const char *bwd = pa ? "bwd " : "";
          if (p.n_kv != p.n) snprintf(kv, sizeof kv, " n_kv=%d", p.n_kv);
          if (p.d_v && p.d_v != p.d) snprintf(dvs, sizeof dvs, " d_v=%d", p.d_v);
          if (p.page_size || p.varlen || attn_problem_has_mods(&p)) { /* the variant, as the rows store it */
            const size_t l = strlen(dvs);
            dvs[l] = ' ';
            attn_problem_variant(&p, dvs + l + 1, sizeof dvs - l - 1);
          }
          if (have_best) {
            attn_spec_summary(&best, sum, sizeof sum);
            printf("best %sn=%d%s d=%d%s %s causal=%d: %s: %.4g ms (%s, %d evaluated)%s%s\n", bwd, p.n, kv, p.d, dvs,
                   attn_dtype_name(p.dtype), p.causal, sum, best_eval.time_ms, ts.provenance, tu.used,
                   why[0] ? "; " : "", why);
          } else {
            printf("best %sn=%d%s d=%d%s %s causal=%d: none of %d evaluated configurations ran correctly\n", bwd, p.n,
                   kv, p.d, dvs, attn_dtype_name(p.dtype), p.causal, tu.used);
            if (tu.used > 0 && !unusable++) /* a strategy that evaluated nothing has not found everything failing */
              snprintf(unusable_first, sizeof unusable_first, "%sn=%d%s d=%d%s %s causal=%d", bwd, p.n, kv, p.d, dvs,
                       attn_dtype_name(p.dtype), p.causal);
          }
          fflush(stdout);
        }
      }
  }
  if (!ts.model) attn_tune_confirm_pass(&ts);
  free(ts.confirm);
  if (ts.kres && (kres.compiled || kres.stored_hits))
    printf("the model read %d compiled kernels' registers and spills (%d compiled now)\n",
           kres.compiled + kres.stored_hits, kres.compiled);
  if (ts.reranked || ts.invalidated)
    printf("stored model rows of estimated registers: %d ranked again with the compiled kernels' and %d ruled out "
           "by them\n", ts.reranked, ts.invalidated);
  attn_kres_free(&kres);
  sigaction(SIGINT, &old_sa, NULL);
  attn_store_end(store, attn_tune_stop == 1);
  for (int k = 0; k < nspaces; k++) attn_space_free(&spaces[k]);
  free(spaces);
  if (ts.db_error) {
    fprintf(stderr, "attntune tune: database %s: %s (%d rows stored before)\n", db_path, ts.db_err, ts.stored_now);
    status = 1;
  } else if (attn_tune_stop == 1) {
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
  free(o->ds);
  free(o->dvs);
  free(o->ns);
  free(o->nkvs);
  free(o->kv);
  free(o->vl_q);
  free(o->vl_kv);
  free(o->alibi);
  return status;
}
