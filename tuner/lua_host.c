/* lua_host.c: runs a strategy written in Lua 5.4 in a sandbox: only the base (without dofile, loadfile and load),
 * table, string (without dump) and math libraries, text chunks only and a capped allocator. The script returns
 * function(space, tune); see docs/strategies.md for the API.
 *
 * The interpreter runs in a child process (fork) so that nothing it does can outlive the time limit: a hook cannot
 * fire inside C code (a backtracking string.find), a finalizer (hooks are off while it runs) or an error handler,
 * but SIGKILL always works. The child builds space tables from what it inherited at fork; tune.evaluate,
 * tune.budget_left and tune.best are requests over a socket, answered by the parent, which owns the tuner
 * (measurement, database, budget, best). The parent counts only the time it spends waiting for the child against
 * $ATTN_LUA_TIMEOUT_S (evaluations do not count) and kills the child when it runs out or the run is stopped. */
#include <errno.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include "strategy.h"

#define LUA_MEM_LIMIT ((size_t)512 << 20)
#define ERR_TEXT_MAX 8192 /* the child's error message (with its traceback), as sent */
#define POLL_SLICE_MS 100 /* how often the parent looks at the stop flag while the child runs */

/* Child -> parent requests; the parent answers EVAL with an attn_eval, BUDGET with an int32_t, BEST with a
 * best_msg, HISTORY with an int32_t count and that many hist_msg, MODEL with an attn_model_est per configuration of
 * the space, in its order. DONE ends the script: an int32_t status (ATTN_*) and the error text, if any. */
enum { MSG_EVAL = 1, MSG_BUDGET, MSG_BEST, MSG_DONE, MSG_HISTORY, MSG_MODEL };
typedef struct hist_msg {
  int32_t idx;    /* a space index: the child holds the space (inherited at fork) */
  attn_eval eval;
} hist_msg;
typedef struct msg_hdr {
  uint32_t type, len; /* len: the payload's bytes after the header */
} msg_hdr;
typedef struct best_msg {
  int32_t have;
  attn_spec cfg;
  attn_eval eval;
} best_msg;

/* The child's state. The tuner is the parent's, inherited at fork: read-only here (space, seed); everything that
 * changes (budget, best, memory of results) is asked of the parent. */
typedef struct lhost {
  const attn_tuner *t;
  int fd; /* the child's end of the socket */
  size_t mem;
  unsigned long long rng;
  attn_model_est *model; /* the model's estimates, per space index: asked for once, on first use */
} lhost;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The allocator's user data is the host: every callback finds it with lua_getallocf. */
static void *lalloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  lhost *h = ud;
  if (!ptr) osize = 0;
  if (nsize == 0) {
    h->mem -= osize;
    free(ptr);
    return NULL;
  }
  if (nsize > osize && h->mem + (nsize - osize) > LUA_MEM_LIMIT) return NULL;
  void *p = realloc(ptr, nsize);
  if (p) h->mem = h->mem + nsize - osize;
  return p;
}

static lhost *host(lua_State *L) {
  void *ud = NULL;
  lua_getallocf(L, &ud);
  return ud;
}

/* ---- the socket: whole messages, EINTR and short transfers retried ---- */

/* 0, or -1 when the peer is gone (MSG_NOSIGNAL: a dead peer is an error here, never SIGPIPE). */
static int send_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static int send_msg(int fd, uint32_t type, const void *payload, size_t len) {
  msg_hdr hd = {.type = type, .len = (uint32_t)len};
  if (send_all(fd, &hd, sizeof hd) != 0) return -1;
  return len ? send_all(fd, payload, len) : 0;
}

/* The child's blocking read of an answer: 0, or -1 at end of file or an error. */
static int recv_all(int fd, void *buf, size_t len) {
  char *p = buf;
  while (len > 0) {
    ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* A request from the script and its answer. The parent never leaves a request unanswered unless it is killing the
 * child, so a failure here means the parent is gone: nothing is left to report to. */
static void ask(lua_State *L, uint32_t type, const void *req, size_t rlen, void *ans, size_t alen) {
  lhost *h = host(L);
  if (send_msg(h->fd, type, req, rlen) != 0 || recv_all(h->fd, ans, alen) != 0) _exit(3);
}

/* ---- configurations <-> tables ---- */

static void push_cfg(lua_State *L, const attn_spec *s) {
  lua_createtable(L, 0, ATTN_SPACE_NPARAMS);
  lua_pushstring(L, attn_algo_name(s->algo));
  lua_setfield(L, -2, "algo");
  for (int i = 1; i < ATTN_SPACE_NPARAMS; i++) {
    if (i == 7) {
      lua_pushstring(L, s->feature == ATTN_FEAT_TAYLOR ? "taylor" : "random");
    } else {
      lua_pushinteger(L, attn_space_param_get(s, i));
    }
    lua_setfield(L, -2, attn_space_param_names[i]);
  }
  /* the Hopper template and mma.sync kernels share tiles: impl tells them apart (sm_90 spaces hold both) */
  if (s->target == ATTN_TARGET_CUDA) {
    lua_pushstring(L, s->impl == ATTN_IMPL_WGMMA ? "wgmma" : "mma");
    lua_setfield(L, -2, "impl");
  }
  /* the CUDA backward's dQ sum (--nondeterministic spaces hold both): a table without dq is the deterministic one */
  if (s->dq) {
    lua_pushstring(L, "atomic");
    lua_setfield(L, -2, "dq");
  }
}

/* Reads a configuration table at idx into *s: fields left out take the algorithm's defaults for this space.
 * 0, or -1 with a reason (never raises). */
static int to_cfg(lua_State *L, int idx, const attn_space *sp, attn_spec *s, char *why, size_t len) {
  idx = lua_absindex(L, idx);
  if (!lua_istable(L, idx)) {
    snprintf(why, len, "expected a configuration table, got %s", luaL_typename(L, idx));
    return -1;
  }
  const attn_space_opts *o = &sp->o;
  attn_algo algo = ATTN_ALGO_FLASH;
  lua_getfield(L, idx, "algo");
  if (!lua_isnil(L, -1)) {
    const char *a = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    int v = a ? attn_algo_parse(a) : -1;
    if (v <= 0) {
      snprintf(why, len, "algo must be \"flash\", \"smallcache\" or \"lowrank\"");
      lua_pop(L, 1);
      return -1;
    }
    algo = (attn_algo)v;
  }
  lua_pop(L, 1);
  *s = attn_spec_default(algo, o->target, o->dtype, o->d, o->causal);
  if (o->target == ATTN_TARGET_CUDA && o->arch[0]) snprintf(s->arch, sizeof s->arch, "%s", o->arch);
  s->window = o->window > 0, s->softcap = o->softcap != 0, s->alibi = o->alibi != 0; /* the problem's kernel */
  s->dv = o->dv > 0 && o->dv != o->d ? o->dv : 0; /* the space's d_v, 0 where it is d (as its points carry it) */
  if (algo == ATTN_ALGO_LOWRANK && s->feature == ATTN_FEAT_TAYLOR) s->rank = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) != LUA_TSTRING) {
      snprintf(why, len, "configuration keys must be names (algo, br, bc, ...)");
      lua_pop(L, 2);
      return -1;
    }
    const char *key = lua_tostring(L, -2);
    if (strcmp(key, "impl") == 0) { /* "mma" (the default) or "wgmma", the sm_90a template */
      const char *im = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
      if (strcmp(im, "mma") && strcmp(im, "wgmma")) {
        snprintf(why, len, "impl must be \"mma\" or \"wgmma\"");
        lua_pop(L, 2);
        return -1;
      }
      s->impl = strcmp(im, "wgmma") == 0 ? ATTN_IMPL_WGMMA : 0;
      if (s->impl) snprintf(s->arch, sizeof s->arch, "sm_90a");
      lua_pop(L, 1);
      continue;
    }
    if (strcmp(key, "dq") == 0) { /* "atomic" (fp32 atomics) or "deterministic" (the default) */
      const char *dq = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
      if (strcmp(dq, "atomic") && strcmp(dq, "deterministic")) {
        snprintf(why, len, "dq must be \"atomic\" or \"deterministic\"");
        lua_pop(L, 2);
        return -1;
      }
      s->dq = strcmp(dq, "atomic") == 0;
      lua_pop(L, 1);
      continue;
    }
    int p = -1;
    for (int i = 0; i < ATTN_SPACE_NPARAMS; i++)
      if (strcmp(key, attn_space_param_names[i]) == 0) p = i;
    if (p < 0) {
      snprintf(why, len, "unknown configuration key '%s'", key);
      lua_pop(L, 2);
      return -1;
    }
    if (p == 0) {
      lua_pop(L, 1);
      continue;
    }
    if (p == 7) {
      const char *f = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
      if (strcmp(f, "taylor") && strcmp(f, "random")) {
        snprintf(why, len, "feature must be \"taylor\" or \"random\"");
        lua_pop(L, 2);
        return -1;
      }
      s->feature = strcmp(f, "taylor") == 0 ? ATTN_FEAT_TAYLOR : ATTN_FEAT_RANDOM;
      lua_pop(L, 1);
      continue;
    }
    int isnum = 0;
    lua_Integer v = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &isnum) : 0;
    if (!isnum || v < -1000000 || v > 1000000) {
      snprintf(why, len, "%s must be an integer", key);
      lua_pop(L, 2);
      return -1;
    }
    attn_space_param_set(s, p, (int)v);
    lua_pop(L, 1);
  }
  return 0;
}

static void push_result(lua_State *L, const attn_eval *e) {
  lua_createtable(L, 0, 6);
  lua_pushboolean(L, e->ok);
  lua_setfield(L, -2, "ok");
  lua_pushstring(L, e->status);
  lua_setfield(L, -2, "status");
  if (e->time_ms > 0) {
    lua_pushnumber(L, e->time_ms);
    lua_setfield(L, -2, "time_ms");
  }
  if (e->io >= 0) {
    lua_pushnumber(L, e->io);
    lua_setfield(L, -2, "io");
  }
  if (e->error >= 0) {
    lua_pushnumber(L, e->error);
    lua_setfield(L, -2, "err");
  }
  if (e->message[0]) {
    lua_pushstring(L, e->message);
    lua_setfield(L, -2, "message");
  }
  /* how the time was measured, for strategies that weigh noisy results less */
  if (e->reps > 0) {
    lua_pushinteger(L, e->reps);
    lua_setfield(L, -2, "reps");
    if (e->iqr_ms >= 0 && e->time_ms > 0) {
      lua_pushnumber(L, e->iqr_ms / e->time_ms);
      lua_setfield(L, -2, "spread");
    }
  }
}

/* ---- space ---- */

static int l_size(lua_State *L) {
  lua_pushinteger(L, host(L)->t->space->count);
  return 1;
}

static int l_random(lua_State *L) {
  lhost *h = host(L);
  const attn_space *sp = h->t->space;
  if (sp->count == 0) return luaL_error(L, "space:random(): the space is empty");
  push_cfg(L, &sp->cfg[attn_rand_below(&h->rng, sp->count)]);
  return 1;
}

static int l_all(lua_State *L) {
  const attn_space *sp = host(L)->t->space;
  lua_createtable(L, sp->count, 0);
  for (int i = 0; i < sp->count; i++) {
    push_cfg(L, &sp->cfg[i]);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* A configuration the space does not hold has no neighbours (an empty table), not an error. */
static int l_neighbours(lua_State *L) {
  const attn_space *sp = host(L)->t->space;
  int arg = lua_gettop(L) >= 2 ? 2 : 1; /* space:neighbours(cfg) or space.neighbours(cfg) */
  attn_spec s;
  char why[256];
  int idx = to_cfg(L, arg, sp, &s, why, sizeof why) == 0 ? attn_space_find(sp, &s) : -1;
  int nb[2 * ATTN_SPACE_NPARAMS];
  int n = idx >= 0 ? attn_space_neighbours(sp, idx, nb, 2 * ATTN_SPACE_NPARAMS) : 0;
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    push_cfg(L, &sp->cfg[nb[i]]);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

static int l_contains(lua_State *L) {
  const attn_space *sp = host(L)->t->space;
  int arg = lua_gettop(L) >= 2 ? 2 : 1;
  attn_spec s;
  char why[256];
  lua_pushboolean(L, to_cfg(L, arg, sp, &s, why, sizeof why) == 0 && attn_space_find(sp, &s) >= 0);
  return 1;
}

/* {br = {16, 32, ...}, ...}: the distinct values each tunable takes in the space, ascending. */
static int l_params(lua_State *L) {
  const attn_space *sp = host(L)->t->space;
  lua_createtable(L, 0, ATTN_SPACE_NPARAMS);
  int *vals = malloc(sizeof(int) * (size_t)(sp->count + 1));
  if (!vals) return luaL_error(L, "out of memory");
  for (int p = 0; p < ATTN_SPACE_NPARAMS; p++) {
    int n = 0;
    for (int i = 0; i < sp->count; i++) {
      int v = attn_space_param_get(&sp->cfg[i], p), j = n;
      int dup = 0;
      for (int k = 0; k < n; k++) dup |= vals[k] == v;
      if (dup) continue;
      while (j > 0 && vals[j - 1] > v) {
        vals[j] = vals[j - 1];
        j--;
      }
      vals[j] = v;
      n++;
    }
    lua_createtable(L, n, 0);
    for (int k = 0; k < n; k++) {
      if (p == 0) lua_pushstring(L, attn_algo_name((attn_algo)vals[k]));
      else if (p == 7) lua_pushstring(L, vals[k] == ATTN_FEAT_TAYLOR ? "taylor" : "random");
      else lua_pushinteger(L, vals[k]);
      lua_rawseti(L, -2, k + 1);
    }
    lua_setfield(L, -2, attn_space_param_names[p]);
  }
  free(vals);
  return 1;
}

/* The model's estimates of the whole space, asked of the parent (which holds what the model needs: the compiled
 * kernels' resources come from the database) the first time a script wants one. */
static const attn_model_est *model_all(lua_State *L) {
  lhost *h = host(L);
  const int count = h->t->space->count;
  if (h->model || count == 0) return h->model;
  attn_model_est *m = malloc(sizeof *m * (size_t)count);
  if (!m) {
    luaL_error(L, "out of memory");
    return NULL;
  }
  if (send_msg(h->fd, MSG_MODEL, NULL, 0) != 0 || recv_all(h->fd, m, sizeof *m * (size_t)count) != 0) _exit(3);
  for (int i = 0; i < count; i++) {
    m[i].bound[sizeof m[i].bound - 1] = '\0';
    m[i].why[sizeof m[i].why - 1] = '\0';
  }
  h->model = m;
  return m;
}

/* space:model(cfg): {time_ms =, io =, bound =} (time_ms and bound only from a GPU's performance model), or nil and
 * the reason (not a point of the space, or one the model cannot rank). */
static int l_model(lua_State *L) {
  const attn_space *sp = host(L)->t->space;
  int arg = lua_gettop(L) >= 2 ? 2 : 1;
  attn_spec s;
  char why[256] = "not a point of the search space"; /* to_cfg's reason replaces it for what is no configuration */
  int idx = to_cfg(L, arg, sp, &s, why, sizeof why) == 0 ? attn_space_find(sp, &s) : -1;
  if (idx < 0) {
    lua_pushnil(L);
    lua_pushstring(L, why);
    return 2;
  }
  const attn_model_est *e = &model_all(L)[idx];
  if (!e->ok) {
    lua_pushnil(L);
    lua_pushstring(L, e->why);
    return 2;
  }
  lua_createtable(L, 0, 3);
  if (e->time_ms > 0) {
    lua_pushnumber(L, e->time_ms);
    lua_setfield(L, -2, "time_ms");
  }
  if (e->io >= 0) {
    lua_pushnumber(L, e->io);
    lua_setfield(L, -2, "io");
  }
  if (e->bound[0]) {
    lua_pushstring(L, e->bound);
    lua_setfield(L, -2, "bound");
  }
  return 1;
}

typedef struct ranked_entry {
  int idx, ok;
  double time_ms, io;
} ranked_entry;

/* The model's order: what it ranks before what it cannot, then the faster, then the fewer transfers (unknown
 * last), then grid order: a total order, so the ranking is the same on every run. */
static int cmp_ranked(const void *pa, const void *pb) {
  const ranked_entry *a = pa, *b = pb;
  if (a->ok != b->ok) return b->ok - a->ok;
  if (a->time_ms != b->time_ms) return a->time_ms < b->time_ms ? -1 : 1;
  const double ia = a->io >= 0 ? a->io : INFINITY, ib = b->io >= 0 ? b->io : INFINITY;
  if (ia != ib) return ia < ib ? -1 : 1;
  return (a->idx > b->idx) - (a->idx < b->idx);
}

/* space:ranked(): every configuration, the model's best first (on the CPU: the fewest transfers first). */
static int l_ranked(lua_State *L) {
  const attn_space *sp = host(L)->t->space;
  const attn_model_est *m = model_all(L);
  ranked_entry *r = malloc(sizeof *r * (size_t)(sp->count ? sp->count : 1));
  if (!r) return luaL_error(L, "out of memory");
  for (int i = 0; i < sp->count; i++)
    r[i] = (ranked_entry){.idx = i, .ok = m[i].ok, .time_ms = m[i].ok ? m[i].time_ms : 0, .io = m[i].io};
  qsort(r, (size_t)sp->count, sizeof *r, cmp_ranked);
  lua_createtable(L, sp->count, 0);
  for (int i = 0; i < sp->count; i++) {
    push_cfg(L, &sp->cfg[r[i].idx]);
    lua_rawseti(L, -2, i + 1);
  }
  free(r);
  return 1;
}

/* ---- tune ---- */

static int l_evaluate(lua_State *L) {
  lhost *h = host(L);
  attn_spec s;
  attn_eval e;
  char why[256];
  if (to_cfg(L, 1, h->t->space, &s, why, sizeof why) != 0) {
    memset(&e, 0, sizeof e);
    e.error = -1;
    e.io = -1;
    e.reads = e.writes = -1;
    snprintf(e.status, sizeof e.status, "invalid");
    snprintf(e.message, sizeof e.message, "%s", why);
  } else {
    ask(L, MSG_EVAL, &s, sizeof s, &e, sizeof e);
    e.status[sizeof e.status - 1] = '\0'; /* strings from the socket are terminated before use */
    e.message[sizeof e.message - 1] = '\0';
  }
  push_result(L, &e);
  return 1;
}

static int l_budget_left(lua_State *L) {
  int32_t left = 0;
  ask(L, MSG_BUDGET, NULL, 0, &left, sizeof left);
  lua_pushinteger(L, left);
  return 1;
}

static int l_best(lua_State *L) {
  best_msg b;
  ask(L, MSG_BEST, NULL, 0, &b, sizeof b);
  if (!b.have) {
    lua_pushnil(L);
    return 1;
  }
  b.eval.status[sizeof b.eval.status - 1] = '\0';
  b.eval.message[sizeof b.eval.message - 1] = '\0';
  b.cfg.arch[sizeof b.cfg.arch - 1] = '\0';
  push_cfg(L, &b.cfg);
  push_result(L, &b.eval);
  return 2;
}

/* {{cfg = ..., result = ...}, ...}: this run's evaluations in the order they were made (repeats answered from
 * memory and refusals, which use no budget, are not in it). */
static int l_history(lua_State *L) {
  const attn_space *sp = host(L)->t->space;
  int32_t count;
  ask(L, MSG_HISTORY, NULL, 0, &count, sizeof count);
  if (count < 0 || count > sp->count) _exit(3);
  lua_createtable(L, count, 0);
  for (int32_t i = 0; i < count; i++) {
    hist_msg m;
    if (recv_all(host(L)->fd, &m, sizeof m) != 0 || m.idx < 0 || m.idx >= sp->count) _exit(3);
    m.eval.status[sizeof m.eval.status - 1] = '\0';
    m.eval.message[sizeof m.eval.message - 1] = '\0';
    m.eval.bound[sizeof m.eval.bound - 1] = '\0';
    lua_createtable(L, 0, 2);
    push_cfg(L, &sp->cfg[m.idx]);
    lua_setfield(L, -2, "cfg");
    push_result(L, &m.eval);
    lua_setfield(L, -2, "result");
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

static int l_problem(lua_State *L) {
  const attn_space_opts *o = &host(L)->t->space->o;
  lua_createtable(L, 0, 6);
  lua_pushstring(L, attn_target_name(o->target));
  lua_setfield(L, -2, "target");
  lua_pushstring(L, attn_dtype_name(o->dtype));
  lua_setfield(L, -2, "dtype");
  lua_pushinteger(L, o->d);
  lua_setfield(L, -2, "d");
  lua_pushinteger(L, o->dv > 0 ? o->dv : o->d);
  lua_setfield(L, -2, "d_v");
  lua_pushboolean(L, o->causal);
  lua_setfield(L, -2, "causal");
  lua_pushnumber(L, o->tolerance);
  lua_setfield(L, -2, "tolerance");
  return 1;
}

/* print goes to stderr: stdout belongs to the tuner's report. One write(2) per line, not stdio: the parent flushed
 * both streams before fork and prints nothing while the child runs, so the order of the two streams is kept. */
static int l_print(lua_State *L) {
  int n = lua_gettop(L);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int i = 1; i <= n; i++) {
    if (i > 1) luaL_addchar(&b, '\t');
    luaL_tolstring(L, i, NULL);
    luaL_addvalue(&b);
  }
  luaL_addchar(&b, '\n');
  luaL_pushresult(&b);
  size_t len;
  const char *p = lua_tolstring(L, -1, &len);
  while (len > 0) { /* a failed write loses the line, as fwrite's did */
    ssize_t w = write(STDERR_FILENO, p, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    p += w;
    len -= (size_t)w;
  }
  lua_pop(L, 1);
  return 0;
}

static int msgh(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (!msg) msg = luaL_tolstring(L, 1, NULL);
  luaL_traceback(L, L, msg, 1);
  return 1;
}

static void open_sandbox(lua_State *L, unsigned long long seed) {
  luaL_requiref(L, LUA_GNAME, luaopen_base, 1);
  luaL_requiref(L, LUA_TABLIBNAME, luaopen_table, 1);
  luaL_requiref(L, LUA_STRLIBNAME, luaopen_string, 1);
  luaL_requiref(L, LUA_MATHLIBNAME, luaopen_math, 1);
  lua_pop(L, 4);
  static const char *const gone[] = {"dofile", "loadfile", "load", "require", "collectgarbage"};
  for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++) {
    lua_pushnil(L);
    lua_setglobal(L, gone[i]);
  }
  lua_pushcfunction(L, l_print);
  lua_setglobal(L, "print");
  lua_getglobal(L, "string");
  lua_pushnil(L);
  lua_setfield(L, -2, "dump"); /* bytecode out is useless without bytecode in */
  lua_pop(L, 1);
  lua_getglobal(L, "math");
  lua_getfield(L, -1, "randomseed");
  lua_pushinteger(L, (lua_Integer)(seed & 0x7fffffffffffLL));
  lua_pcall(L, 1, 0, 0); /* cannot fail: a C function with an integer */
  lua_pop(L, 1);
}

static void push_api(lua_State *L) {
  static const luaL_Reg space[] = {{"size", l_size},         {"random", l_random},     {"all", l_all},
                                   {"neighbours", l_neighbours}, {"neighbors", l_neighbours},
                                   {"contains", l_contains}, {"params", l_params},     {"model", l_model},
                                   {"ranked", l_ranked},     {NULL, NULL}};
  static const luaL_Reg tune[] = {{"evaluate", l_evaluate}, {"budget_left", l_budget_left}, {"best", l_best},
                                  {"problem", l_problem},   {"history", l_history},         {NULL, NULL}};
  luaL_newlib(L, space);
  luaL_newlib(L, tune);
}

/* "strategy FILE:LINE: msg" (Lua's message already starts with FILE:LINE:) or "strategy FILE: msg". */
static void report(char *err, size_t len, const char *path, const char *msg) {
  size_t pl = strlen(path);
  if (strncmp(msg, path, pl) == 0 && msg[pl] == ':')
    snprintf(err, len, "strategy %s", msg);
  else
    snprintf(err, len, "strategy %s: %s", path, msg);
}

/* ---- the child: the interpreter ---- */

/* Runs the script and sends DONE with its outcome; never returns. No lua_close: the process's exit frees the
 * state, and closing would run finalizers (a looping __gc) after the script has finished. */
static void child_main(const attn_tuner *t, const char *path, int fd) {
  struct sigaction ign;
  memset(&ign, 0, sizeof ign);
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  /* Ctrl-C reaches the whole process group: the parent decides what a stop means and kills the child. A closed
   * stderr must not kill the interpreter either: print only loses its line. */
  if (sigaction(SIGINT, &ign, NULL) != 0 || sigaction(SIGPIPE, &ign, NULL) != 0) _exit(3);
  lhost h = {.t = t, .fd = fd, .rng = t->seed ^ 0x5bd1e995ULL};
  char err[ERR_TEXT_MAX];
  int32_t rc = ATTN_OK;
  err[0] = '\0';
  lua_State *L = lua_newstate(lalloc, &h);
  if (!L) {
    snprintf(err, sizeof err, "strategy %s: cannot create a Lua state", path);
    rc = ATTN_ENOMEM;
  } else {
    open_sandbox(L, t->seed);
    lua_pushcfunction(L, msgh);
    int base = lua_gettop(L);
    int st = luaL_loadfilex(L, path, "t");
    if (st != LUA_OK) {
      report(err, sizeof err, path, lua_tostring(L, -1) ? lua_tostring(L, -1) : "cannot load");
      rc = ATTN_EINVAL;
    } else if (lua_pcall(L, 0, 1, base) != LUA_OK) {
      report(err, sizeof err, path, lua_tostring(L, -1) ? lua_tostring(L, -1) : "error");
      rc = ATTN_EINVAL;
    } else if (!lua_isfunction(L, -1)) {
      snprintf(err, sizeof err, "strategy %s: must return function(space, tune), returned %s", path,
               luaL_typename(L, -1));
      rc = ATTN_EINVAL;
    } else {
      push_api(L);
      if (lua_pcall(L, 2, 0, base) != LUA_OK) {
        const char *m = lua_tostring(L, -1);
        report(err, sizeof err, path, m ? m : "error");
        rc = ATTN_EINVAL;
      }
    }
  }
  size_t len = strlen(err);
  char msg[sizeof rc + ERR_TEXT_MAX];
  memcpy(msg, &rc, sizeof rc);
  memcpy(msg + sizeof rc, err, len);
  _exit(send_msg(fd, MSG_DONE, msg, sizeof rc + len) == 0 ? 0 : 3);
}

/* ---- the parent: answers requests, keeps the time ---- */

typedef struct lparent {
  attn_tuner *t;
  int fd;
  double limit_s, used_s; /* the script's own time: the parent's waits for the child */
} lparent;

enum { RD_OK = 0, RD_EOF, RD_STOP, RD_EXPIRED, RD_ERR /* errno */, RD_PROTO /* a malformed message */ };

/* Reads len bytes from the child, waiting at most until the script's time is used up and looking at the stop
 * flag every POLL_SLICE_MS (SIGINT also interrupts poll, which is never restarted after a handler). */
static int parent_read(lparent *c, void *buf, size_t len) {
  char *p = buf;
  while (len > 0) {
    if (attn_tuner_stopped(c->t)) return RD_STOP;
    double left = c->limit_s - c->used_s;
    if (left <= 0) return RD_EXPIRED;
    int ms = left * 1000 > POLL_SLICE_MS ? POLL_SLICE_MS : (int)ceil(left * 1000);
    struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
    double t0 = now_s();
    int r = poll(&pfd, 1, ms);
    c->used_s += now_s() - t0;
    if (r < 0) {
      if (errno == EINTR) continue;
      return RD_ERR;
    }
    if (r == 0) continue;
    ssize_t n = read(c->fd, p, len); /* readable (or hung up): does not block */
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return RD_ERR;
    }
    if (n == 0) return RD_EOF;
    p += n;
    len -= (size_t)n;
  }
  return RD_OK;
}

/* Kills the child and reaps it: its wait status, or -1 when waitpid fails. Until reaped the child stays ours (a
 * zombie if it has exited), so kill cannot hit another process and cannot fail in a way that matters. */
static int reap(pid_t pid) {
  (void)kill(pid, SIGKILL);
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  return st;
}

/* One request: its payload is read and answered. RD_OK, or why the conversation ended. */
static int serve(lparent *c, const msg_hdr *hd) {
  switch (hd->type) {
  case MSG_EVAL: {
    attn_spec s;
    attn_eval e;
    if (hd->len != sizeof s) return RD_PROTO;
    int r = parent_read(c, &s, sizeof s);
    if (r != RD_OK) return r;
    s.arch[sizeof s.arch - 1] = '\0';
    attn_tuner_evaluate(c->t, &s, &e); /* not the script's time: outside parent_read */
    fflush(stdout);                    /* the progress line before anything the script prints next */
    return send_all(c->fd, &e, sizeof e) == 0 ? RD_OK : RD_EOF;
  }
  case MSG_BUDGET: {
    if (hd->len != 0) return RD_PROTO;
    int32_t left = attn_tuner_stopped(c->t) ? 0 : attn_tuner_budget_left(c->t);
    return send_all(c->fd, &left, sizeof left) == 0 ? RD_OK : RD_EOF;
  }
  case MSG_BEST: {
    if (hd->len != 0) return RD_PROTO;
    best_msg b;
    memset(&b, 0, sizeof b);
    b.have = c->t->have_best;
    if (b.have) {
      b.cfg = c->t->best;
      b.eval = c->t->best_eval;
    }
    return send_all(c->fd, &b, sizeof b) == 0 ? RD_OK : RD_EOF;
  }
  case MSG_HISTORY: {
    if (hd->len != 0) return RD_PROTO;
    int32_t count = c->t->order ? c->t->norder : 0;
    if (send_all(c->fd, &count, sizeof count) != 0) return RD_EOF;
    for (int32_t i = 0; i < count; i++) {
      hist_msg m;
      memset(&m, 0, sizeof m);
      m.idx = c->t->order[i];
      m.eval = c->t->memo[m.idx];
      if (send_all(c->fd, &m, sizeof m) != 0) return RD_EOF;
    }
    return RD_OK;
  }
  case MSG_MODEL: { /* computed here, not in the child: the model may read the database's compiled resources */
    if (hd->len != 0) return RD_PROTO;
    for (int i = 0; i < c->t->space->count; i++) {
      attn_model_est m;
      attn_tuner_model(c->t, i, &m);
      if (send_all(c->fd, &m, sizeof m) != 0) return RD_EOF;
    }
    return RD_OK;
  }
  default:
    return RD_PROTO;
  }
}

int attn_strategy_lua(attn_tuner *t, const char *path, char *err, size_t errlen) {
  lparent c = {.t = t, .limit_s = 10.0};
  const char *env = getenv("ATTN_LUA_TIMEOUT_S");
  if (env && *env) {
    char *end;
    double v = strtod(env, &end);
    if (*end == '\0' && v > 0 && v < 1e6) c.limit_s = v;
  }
  int sv[2];
  /* CLOEXEC: compilers the parent starts while evaluating must not hold the socket open */
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    snprintf(err, errlen, "strategy %s: cannot start the interpreter: socketpair: %s", path, strerror(errno));
    return ATTN_ERUNTIME;
  }
  /* Buffered output would be written twice (the child's copy at its exit) or out of order. */
  fflush(stdout);
  fflush(stderr);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(err, errlen, "strategy %s: cannot start the interpreter: fork: %s", path, strerror(errno));
    close(sv[0]);
    close(sv[1]);
    return ATTN_ERUNTIME;
  }
  if (pid == 0) {
    close(sv[0]);
#ifdef __linux__
    /* a tuner killed outright (SIGKILL) must not leave a runaway interpreter behind */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(3);
#else
    (void)parent;
#endif
    child_main(t, path, sv[1]);
  }
  close(sv[1]);
  c.fd = sv[0];

  int rc = ATTN_OK, r;
  char text[ERR_TEXT_MAX + 1];
  for (;;) {
    msg_hdr hd;
    r = parent_read(&c, &hd, sizeof hd);
    if (r != RD_OK) break;
    if (hd.type == MSG_DONE) {
      int32_t crc;
      if (hd.len < sizeof crc || hd.len > sizeof crc + ERR_TEXT_MAX) {
        r = RD_PROTO;
        break;
      }
      if ((r = parent_read(&c, &crc, sizeof crc)) != RD_OK) break;
      size_t tl = hd.len - sizeof crc;
      if ((r = parent_read(&c, text, tl)) != RD_OK) break;
      text[tl] = '\0';
      if (crc != ATTN_OK) snprintf(err, errlen, "%s", text);
      rc = crc;
      break;
    }
    if ((r = serve(&c, &hd)) != RD_OK) break;
  }
  /* Whatever happened, the child goes: after DONE it has nothing left to do (and shutting its state down could
   * run finalizers forever). */
  int rd_errno = errno; /* RD_ERR's reason, before kill and waitpid touch errno */
  int st = reap(pid);
  close(c.fd);
  switch (r) {
  case RD_OK:
    break;
  case RD_STOP: /* SIGINT: the caller reports it; the evaluations made are stored */
    rc = ATTN_OK;
    break;
  case RD_EXPIRED:
    snprintf(err, errlen, "strategy %s: stopped after %d s (runaway script?)", path, (int)ceil(c.limit_s));
    rc = ATTN_EINVAL;
    break;
  case RD_EOF: /* died without a word: a crash, out of memory in C, a signal from outside */
    if (st != -1 && WIFSIGNALED(st))
      snprintf(err, errlen, "strategy %s: the interpreter died (%s)", path, strsignal(WTERMSIG(st)));
    else
      snprintf(err, errlen, "strategy %s: the interpreter exited without a result (status %d)", path,
               st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    rc = ATTN_EINVAL;
    break;
  case RD_ERR:
    snprintf(err, errlen, "strategy %s: lost contact with the interpreter: %s", path, strerror(rd_errno));
    rc = ATTN_EINVAL;
    break;
  default:
    snprintf(err, errlen, "strategy %s: lost contact with the interpreter: a malformed message", path);
    rc = ATTN_EINVAL;
    break;
  }
  return rc;
}
