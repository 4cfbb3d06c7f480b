/* lua_host.c: runs a strategy written in Lua 5.4 in a sandbox: only the base (without dofile, loadfile and load),
 * table, string (without dump) and math libraries, text chunks only, a capped allocator, and a count hook that
 * stops a script after a wall-clock limit of its own time (evaluations do not count). The script returns
 * function(space, tune); see docs/strategies.md for the API. */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "strategy.h"

#define LUA_MEM_LIMIT ((size_t)512 << 20)
#define HOOK_EVERY 10000

typedef struct lhost {
  attn_tuner *t;
  const char *path;
  double limit_s, deadline;
  int expired, interrupted;
  size_t mem;
  unsigned long long rng;
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

static void hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lhost *h = host(L);
  if (attn_tuner_stopped(h->t)) {
    h->interrupted = 1;
    lua_sethook(L, hook, LUA_MASKCOUNT, 1); /* keep failing even inside a pcall loop */
    lua_pushstring(L, "interrupted");
    lua_error(L);
  }
  if (!h->expired && now_s() < h->deadline) return;
  h->expired = 1;
  lua_sethook(L, hook, LUA_MASKCOUNT, 1);
  lua_pushfstring(L, "stopped after %d s (runaway script?)", (int)ceil(h->limit_s));
  lua_error(L);
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
  if (algo == ATTN_ALGO_LOWRANK && s->feature == ATTN_FEAT_TAYLOR) s->rank = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) != LUA_TSTRING) {
      snprintf(why, len, "configuration keys must be names (algo, br, bc, ...)");
      lua_pop(L, 2);
      return -1;
    }
    const char *key = lua_tostring(L, -2);
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
    double t0 = now_s();
    attn_tuner_evaluate(h->t, &s, &e);
    h->deadline += now_s() - t0; /* the limit is on the script's own time */
  }
  push_result(L, &e);
  return 1;
}

static int l_budget_left(lua_State *L) {
  attn_tuner *t = host(L)->t;
  lua_pushinteger(L, attn_tuner_stopped(t) ? 0 : attn_tuner_budget_left(t));
  return 1;
}

static int l_best(lua_State *L) {
  attn_tuner *t = host(L)->t;
  if (!t->have_best) {
    lua_pushnil(L);
    return 1;
  }
  push_cfg(L, &t->best);
  push_result(L, &t->best_eval);
  return 2;
}

static int l_problem(lua_State *L) {
  const attn_space_opts *o = &host(L)->t->space->o;
  lua_createtable(L, 0, 5);
  lua_pushstring(L, attn_target_name(o->target));
  lua_setfield(L, -2, "target");
  lua_pushstring(L, attn_dtype_name(o->dtype));
  lua_setfield(L, -2, "dtype");
  lua_pushinteger(L, o->d);
  lua_setfield(L, -2, "d");
  lua_pushboolean(L, o->causal);
  lua_setfield(L, -2, "causal");
  lua_pushnumber(L, o->tolerance);
  lua_setfield(L, -2, "tolerance");
  return 1;
}

/* print goes to stderr: stdout belongs to the tuner's report. */
static int l_print(lua_State *L) {
  int n = lua_gettop(L);
  fflush(stdout); /* keep the order of the two streams on a terminal or in one log */
  for (int i = 1; i <= n; i++) {
    size_t len;
    const char *s = luaL_tolstring(L, i, &len);
    if (i > 1) fputc('\t', stderr);
    fwrite(s, 1, len, stderr);
    lua_pop(L, 1);
  }
  fputc('\n', stderr);
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
                                   {"contains", l_contains}, {"params", l_params},     {NULL, NULL}};
  static const luaL_Reg tune[] = {{"evaluate", l_evaluate}, {"budget_left", l_budget_left}, {"best", l_best},
                                  {"problem", l_problem},   {NULL, NULL}};
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

int attn_strategy_lua(attn_tuner *t, const char *path, char *err, size_t errlen) {
  lhost h = {.t = t, .path = path, .limit_s = 10.0, .rng = t->seed ^ 0x5bd1e995ULL};
  const char *env = getenv("ATTN_LUA_TIMEOUT_S");
  if (env && *env) {
    char *end;
    double v = strtod(env, &end);
    if (*end == '\0' && v > 0 && v < 1e6) h.limit_s = v;
  }
  lua_State *L = lua_newstate(lalloc, &h);
  if (!L) {
    snprintf(err, errlen, "strategy %s: cannot create a Lua state", path);
    return ATTN_ENOMEM;
  }
  open_sandbox(L, t->seed);
  h.deadline = now_s() + h.limit_s;
  lua_sethook(L, hook, LUA_MASKCOUNT, HOOK_EVERY);
  lua_pushcfunction(L, msgh);
  int base = lua_gettop(L);
  int rc = ATTN_OK;
  int st = luaL_loadfilex(L, path, "t");
  if (st != LUA_OK) {
    report(err, errlen, path, lua_tostring(L, -1) ? lua_tostring(L, -1) : "cannot load");
    rc = ATTN_EINVAL;
  } else if (lua_pcall(L, 0, 1, base) != LUA_OK) {
    report(err, errlen, path, lua_tostring(L, -1) ? lua_tostring(L, -1) : "error");
    rc = ATTN_EINVAL;
  } else if (!lua_isfunction(L, -1)) {
    snprintf(err, errlen, "strategy %s: must return function(space, tune), returned %s", path,
             luaL_typename(L, -1));
    rc = ATTN_EINVAL;
  } else {
    push_api(L);
    if (lua_pcall(L, 2, 0, base) != LUA_OK) {
      if (h.interrupted && !h.expired) {
        rc = ATTN_OK; /* SIGINT: the caller reports it */
      } else {
        const char *m = lua_tostring(L, -1);
        report(err, errlen, path, m ? m : "error");
        rc = ATTN_EINVAL;
      }
    }
  }
  lua_close(L);
  return rc;
}
