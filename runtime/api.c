/* api.c: libattn's public API — runtimes, problem validation, plans (tuned row or default), execution. It calls the
 * backends (cpu.c, cuda.c) and the files below them; failures are recorded by error.c, which every runtime file
 * reports to. */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "internal.h"
#include "launch.h"
#include "spec_bwd.h"

/* The shared library hides everything but the public API. */
#define ATTN_API __attribute__((visibility("default")))

ATTN_API const char *attn_strerror(int code) {
  switch (code) {
  case ATTN_OK: return "ok";
  case ATTN_EINVAL: return "invalid argument";
  case ATTN_ENOMEM: return "out of memory";
  case ATTN_ENODEV: return "no such device";
  case ATTN_ECOMPILE: return "kernel compilation failed";
  case ATTN_EDB: return "database error";
  case ATTN_ERUNTIME: return "runtime error";
  case ATTN_EUNSUPPORTED: return "not supported";
  default: return "unknown error code";
  }
}

ATTN_API const char *attn_last_error(const attn_runtime *rt) { return attn_error_last(rt); }

/* <leaf> in attntune's cache directory ($XDG_CACHE_HOME/attntune, else ~/.cache/attntune: attn_cache_home). */
static int cache_path(char *buf, size_t len, const char *leaf) {
  char dir[4096];
  if (attn_cache_home(dir, sizeof dir) != 0) return -1;
  int w = snprintf(buf, len, "%s/%s", dir, leaf);
  return w >= 0 && (size_t)w < len ? 0 : -1;
}

static int copy_path(char *buf, size_t len, const char *s) {
  size_t l = strlen(s);
  if (l >= len) return -1;
  memcpy(buf, s, l + 1);
  return 0;
}

int attn_device_name(attn_target t, char *buf, size_t len) {
  if (!buf || !len) return ATTN_EINVAL;
  if (t == ATTN_TARGET_CUDA) {
    /* The CUDA backend files rows under the spec-table name it finds at open (rt->device); this is its fallback. */
    snprintf(buf, len, "cuda");
    return ATTN_OK;
  }
  char model[256] = "";
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[1024];
    while (fgets(line, sizeof line, f)) {
      /* x86: "model name"; some ARM kernels only give "Hardware" or "CPU part". */
      if (strncmp(line, "model name", 10) != 0 && strncmp(line, "Hardware", 8) != 0) continue;
      char *c = strchr(line, ':');
      if (!c) continue;
      c++;
      while (*c == ' ' || *c == '\t') c++;
      size_t l = strcspn(c, "\r\n");
      while (l && (c[l - 1] == ' ' || c[l - 1] == '\t')) l--;
      if (l >= sizeof model) l = sizeof model - 1;
      memcpy(model, c, l);
      model[l] = '\0';
      if (model[0]) break;
    }
    fclose(f);
  }
  snprintf(buf, len, "cpu:%s", model[0] ? model : "unknown");
  return ATTN_OK;
}

/* $ATTN_THREADS, strictly: digits only, 1..min(4 x cores, 1024). OpenMP exits the whole process when it cannot start
 * the threads asked for (ATTN_THREADS=100000), and atoi read "2x" as 2 and "abc" as 0; an environment variable must
 * not take the host down, so a bad value is ignored (all cores serve) and one over the cap is clamped, with the
 * reason in note (attn_last_error after a successful open; "" when the value was used as given). */
static int parse_threads(const char *t, char *note, size_t len) {
  int procs = omp_get_num_procs();
  if (procs < 1) procs = 1;
  const int cap = procs > ATTN_THREADS_CAP / 4 ? ATTN_THREADS_CAP : 4 * procs;
  const int dflt = procs < cap ? procs : cap;
  note[0] = '\0';
  if (!t || !*t) return dflt;
  long v = 0;
  size_t i = 0;
  for (; t[i] >= '0' && t[i] <= '9'; i++)
    if (v <= ATTN_THREADS_CAP) v = v * 10 + (t[i] - '0'); /* stops growing past the cap: no overflow */
  if (t[i] != '\0' || v < 1) {
    snprintf(note, len, "ATTN_THREADS=%.32s ignored: not an integer in 1..%d; using %d threads", t, cap, dflt);
    return dflt;
  }
  if (v > cap) {
    snprintf(note, len, "ATTN_THREADS=%.32s clamped to %d (the cap: 4 per core, at most %d)", t, cap,
             ATTN_THREADS_CAP);
    return cap;
  }
  return (int)v;
}

ATTN_API int attn_open(const char *db_path, attn_target target, attn_runtime **out) {
  if (!out) return attn_fail(NULL, ATTN_EINVAL, "attn_open: out is NULL");
  *out = NULL;
  if (target != ATTN_TARGET_AUTO && target != ATTN_TARGET_CPU && target != ATTN_TARGET_CUDA)
    return attn_fail(NULL, ATTN_EINVAL, "attn_open: unknown target %d", (int)target);
  attn_runtime *rt = calloc(1, sizeof *rt);
  if (!rt) return attn_fail(NULL, ATTN_ENOMEM, "attn_open: out of memory");

  atomic_init(&rt->refs, 1); /* the handle's own reference; each plan adds one */
  atomic_init(&rt->closed, 0);
  atomic_init(&rt->cache_checked, 0);
  rt->id = attn_error_runtime_id();
  rt->threads = parse_threads(getenv("ATTN_THREADS"), rt->threads_note, sizeof rt->threads_note);

  const char *cd = getenv("ATTN_CACHE_DIR");
  if (cd && *cd ? copy_path(rt->cache_dir, sizeof rt->cache_dir, cd)
                : cache_path(rt->cache_dir, sizeof rt->cache_dir, "so")) {
    free(rt);
    return attn_fail(NULL, ATTN_EINVAL, "attn_open: cache directory path is too long");
  }
  if (!db_path || !*db_path) db_path = getenv("ATTN_DB");
  if (db_path && *db_path ? copy_path(rt->db_path, sizeof rt->db_path, db_path)
                          : cache_path(rt->db_path, sizeof rt->db_path, "attntune.db")) {
    free(rt);
    return attn_fail(NULL, ATTN_EINVAL, "attn_open: database path is too long");
  }

  if (target == ATTN_TARGET_CUDA || target == ATTN_TARGET_AUTO) {
    int rc = attn_cuda_open(rt, &rt->cuda);
    if (rc == ATTN_OK) {
      rt->target = ATTN_TARGET_CUDA;
      if (!rt->device[0]) attn_device_name(ATTN_TARGET_CUDA, rt->device, sizeof rt->device);
    } else if (target == ATTN_TARGET_CUDA) {
      char why[1024]; /* attn_cuda_open's reason, copied: attn_fail below writes the same record */
      const char *said = attn_error_last(rt);
      size_t wl = strnlen(said, sizeof why - 1);
      memcpy(why, said, wl);
      why[wl] = '\0';
      free(rt);
      return attn_fail(NULL, rc, "attn_open: %s", why);
    } else {
      rt->cuda = NULL;
    }
  }
  if (!rt->cuda) {
    rt->target = ATTN_TARGET_CPU;
    attn_device_name(ATTN_TARGET_CPU, rt->device, sizeof rt->device);
  }

  /* A database that does not exist yet is the untuned case, not an error; one that exists must open. */
  struct stat st;
  char db_note[1200] = "";
  if (stat(rt->db_path, &st) == 0) {
    char err[1024] = "";
    /* a reader: read-only when this process cannot write the file (another user's, read-only media) */
    int drc = attn_db_open_ex(rt->db_path, ATTN_DB_READER, &rt->db, err, sizeof err);
    if (drc == ATTN_EUNSUPPORTED) {
      /* read-only at an older schema: its rows cannot be read, but the defaults serve; attn_last_error says why */
      rt->db = NULL;
      snprintf(db_note, sizeof db_note, "attn_open: database not used, default configurations serve: %s", err);
    } else if (drc != ATTN_OK) {
      rt->db = NULL;
      char path[4096];
      snprintf(path, sizeof path, "%s", rt->db_path);
      attn_close(rt);
      return attn_fail(NULL, ATTN_EDB, "attn_open: cannot open database %s: %s", path, err[0] ? err : "unknown error");
    }
  } else if (errno != ENOENT) {
    int e = errno;
    char path[4096];
    snprintf(path, sizeof path, "%s", rt->db_path);
    attn_close(rt);
    return attn_fail(NULL, ATTN_EDB, "attn_open: cannot access database %s: %s", path, strerror(e));
  }
  /* "" unless ATTN_THREADS was bad or the database could not be used */
  snprintf(rt->note, sizeof rt->note, "%s%s%s", rt->threads_note,
           rt->threads_note[0] && db_note[0] ? "; " : "", db_note);
  attn_error_forget(rt); /* the CUDA attempt of ATTN_TARGET_AUTO is not this runtime's failure */
  *out = rt;
  return ATTN_OK;
}

/* Drops one reference; the last one (the handle's after its plans', or a plan's after attn_close) frees. acq_rel: the
 * freeing thread sees every other holder's writes finished. */
static void runtime_release(attn_runtime *rt) {
  if (atomic_fetch_sub_explicit(&rt->refs, 1, memory_order_acq_rel) != 1) return;
  attn_db_close(rt->db);
  if (rt->cuda) attn_cuda_close(rt->cuda);
  free(rt);
}

ATTN_API void attn_close(attn_runtime *rt) {
  if (!rt) return;
  /* Plans made before stay usable until destroyed (they hold references): close only what they do not need. A
   * second close of a handle whose plans keep it alive is ignored rather than dropping a plan's reference. */
  if (atomic_exchange_explicit(&rt->closed, 1, memory_order_acq_rel)) return;
  attn_db_close(rt->db); /* plans never read the database after creation */
  rt->db = NULL;
  runtime_release(rt);
}

int attn_problem_normalize(attn_runtime *rt, const attn_problem *in, attn_problem *out) {
  if (!in) return attn_fail(rt, ATTN_EINVAL, "problem is NULL");
  if (!out) return attn_fail(rt, ATTN_EINVAL, "output problem is NULL");
  attn_target tg = rt ? rt->target : ATTN_TARGET_CPU;
  attn_problem p = *in;
  if (p.batch <= 0 || p.heads <= 0 || p.n <= 0)
    return attn_fail(rt, ATTN_EINVAL, "batch=%d heads=%d n=%d: each must be >= 1", p.batch, p.heads, p.n);
  if (p.n_kv < 0) return attn_fail(rt, ATTN_EINVAL, "n_kv=%d must be >= 0 (0: same as n)", p.n_kv);
  if (p.heads_kv < 0) return attn_fail(rt, ATTN_EINVAL, "heads_kv=%d must be >= 0 (0: same as heads)", p.heads_kv);
  if (p.n_kv == 0) p.n_kv = p.n;
  if (p.heads_kv == 0) p.heads_kv = p.heads;
  if (p.heads_kv > p.heads || p.heads % p.heads_kv != 0)
    return attn_fail(rt, ATTN_EINVAL, "heads_kv=%d must divide heads=%d", p.heads_kv, p.heads);
  if (p.d <= 0) return attn_fail(rt, ATTN_EINVAL, "d=%d must be >= 1", p.d);
  if (p.d_v < 0) return attn_fail(rt, ATTN_EINVAL, "d_v=%d must be >= 0 (0: same as d)", p.d_v);
  if (p.d_v == 0) p.d_v = p.d;
  if (!attn_d_supported(tg, p.d) || !attn_d_supported(tg, p.d_v))
    return attn_fail(rt, ATTN_EUNSUPPORTED, "%s=%d is not supported on %s: head dimensions must be in 1..%d",
                     attn_d_supported(tg, p.d) ? "d_v" : "d", attn_d_supported(tg, p.d) ? p.d_v : p.d,
                     attn_target_name(tg), ATTN_MAX_D);
  if ((unsigned)p.dtype > ATTN_BF16) return attn_fail(rt, ATTN_EINVAL, "unknown dtype %d", (int)p.dtype);
  if ((unsigned)p.algo > ATTN_ALGO_LOWRANK) return attn_fail(rt, ATTN_EINVAL, "unknown algorithm %d", (int)p.algo);
  if (!isfinite(p.scale)) return attn_fail(rt, ATTN_EINVAL, "scale must be finite (0: 1/sqrt(d))");
  if (!(p.tolerance >= 0) || !isfinite(p.tolerance))
    return attn_fail(rt, ATTN_EINVAL, "tolerance=%g must be finite and >= 0 (0: exact only)", p.tolerance);
  if (p.nondeterministic != 0 && p.nondeterministic != 1)
    return attn_fail(rt, ATTN_EINVAL, "nondeterministic=%d must be 0 or 1", p.nondeterministic);
  /* Rows: block counts are taken as (n + B - 1) / B in int with blocks B of up to 1024 rows (attn_spec_check), so n
   * and n_kv keep that much headroom below INT_MAX (n = INT_MAX overflowed there). */
  if (p.n > ATTN_MAX_ROWS || p.n_kv > ATTN_MAX_ROWS)
    return attn_fail(rt, ATTN_EINVAL, "n=%d n_kv=%d: at most %d rows", p.n, p.n_kv, ATTN_MAX_ROWS);
  /* Element counts, exact in 64 bits: each array's bytes (the fp64 reference's 8 per element the most) must fit
   * ptrdiff_t and size_t, which also keeps the kernels' long indexing exact. */
  const unsigned long long lim = (PTRDIFF_MAX < SIZE_MAX ? (unsigned long long)PTRDIFF_MAX : SIZE_MAX) / 8;
  const unsigned long long rows = (unsigned long long)(p.n > p.n_kv ? p.n : p.n_kv);
  const int dmax = p.d > p.d_v ? p.d : p.d_v;
  unsigned long long elems;
  if (__builtin_mul_overflow((unsigned long long)p.batch, (unsigned long long)p.heads, &elems) ||
      __builtin_mul_overflow(elems, rows, &elems) || __builtin_mul_overflow(elems, (unsigned long long)dmax, &elems) ||
      elems > lim)
    return attn_fail(rt, ATTN_EINVAL,
                     "problem too large: batch*heads*max(n, n_kv)*max(d, d_v) = %.3g elements, at most %llu",
                     (double)p.batch * p.heads * (double)rows * dmax, lim);
  if (p.window < 0) return attn_fail(rt, ATTN_EINVAL, "window=%d must be >= 0 (0: no window)", p.window);
  if (p.page_size < 0) return attn_fail(rt, ATTN_EINVAL, "page_size=%d must be >= 0 (0: dense KV)", p.page_size);
  if (p.varlen != 0 && p.varlen != 1) return attn_fail(rt, ATTN_EINVAL, "varlen=%d must be 0 or 1", p.varlen);
  if (!(p.softcap >= 0) || !isfinite(p.softcap))
    return attn_fail(rt, ATTN_EINVAL, "softcap=%g must be finite and >= 0 (0: no soft-capping)", (double)p.softcap);
  if (p.alibi_slopes)
    for (int h = 0; h < p.heads; h++)
      if (!isfinite(p.alibi_slopes[h]))
        return attn_fail(rt, ATTN_EINVAL, "alibi_slopes[%d]=%g must be finite", h, (double)p.alibi_slopes[h]);
  p.causal = p.causal ? 1 : 0;
  /* a window every row's keys fit in hides nothing: the dense problem (same kernel, same tuned rows) */
  if (p.window >= (p.causal ? p.n_kv : p.n > p.n_kv ? p.n : p.n_kv)) p.window = 0;
  if (p.scale == 0.0f) p.scale = (float)(1.0 / sqrt((double)p.d));
  *out = p;
  return ATTN_OK;
}

int attn_plan_create_spec(attn_runtime *rt, const attn_problem *prob, const attn_spec *s, int count_io,
                          const char *origin, attn_plan **out) {
  if (out) *out = NULL;
  if (!rt) return attn_fail(NULL, ATTN_EINVAL, "attn_plan_create: runtime is NULL");
  if (!out) return attn_fail(rt, ATTN_EINVAL, "attn_plan_create: out is NULL");
  if (!s) return attn_fail(rt, ATTN_EINVAL, "attn_plan_create: spec is NULL");
  /* only reachable while older plans keep a closed runtime's memory: a use after attn_close, refused */
  if (atomic_load_explicit(&rt->closed, memory_order_acquire))
    return attn_fail(rt, ATTN_EINVAL, "attn_plan_create: the runtime is closed");
  attn_problem p;
  int rc = attn_problem_normalize(rt, prob, &p);
  if (rc != ATTN_OK) return rc;
  char err[512];
  rc = attn_spec_check(s, err, sizeof err);
  if (rc != ATTN_OK) return attn_fail(rt, rc, "%s", err);
  if (s->target != rt->target)
    return attn_fail(rt, ATTN_EINVAL, "spec is for %s but the runtime runs on %s", attn_target_name(s->target),
                     attn_target_name(rt->target));
  if (s->d != p.d || attn_spec_dv(s) != p.d_v || s->causal != p.causal || s->dtype != p.dtype)
    return attn_fail(rt, ATTN_EINVAL,
                     "spec (d=%d d_v=%d causal=%d %s) does not match the problem (d=%d d_v=%d causal=%d %s)", s->d,
                     attn_spec_dv(s), s->causal, attn_dtype_name(s->dtype), p.d, p.d_v, p.causal,
                     attn_dtype_name(p.dtype));
  if (s->algo == ATTN_ALGO_LOWRANK && p.tolerance <= 0)
    return attn_fail(rt, ATTN_EUNSUPPORTED, "lowrank is approximate: it needs a problem tolerance > 0");
  if (s->window != (p.window > 0) || s->softcap != (p.softcap > 0) || s->alibi != (p.alibi_slopes != NULL))
    return attn_fail(rt, ATTN_EINVAL,
                     "spec (window=%d softcap=%d alibi=%d) does not match the problem (window=%d softcap=%g alibi %s)",
                     s->window, s->softcap, s->alibi, p.window, (double)p.softcap, p.alibi_slopes ? "on" : "off");

  attn_plan *plan = calloc(1, sizeof *plan);
  if (!plan) return attn_fail(rt, ATTN_ENOMEM, "attn_plan_create: out of memory");
  plan->rt = rt;
  plan->p = p;
  plan->spec = *s;
  if (p.alibi_slopes) {
    /* the plan's own copy: the caller's array need not outlive plan creation */
    plan->alibi = malloc(sizeof(float) * (size_t)p.heads);
    if (!plan->alibi) {
      free(plan);
      return attn_fail(rt, ATTN_ENOMEM, "attn_plan_create: out of memory");
    }
    memcpy(plan->alibi, p.alibi_slopes, sizeof(float) * (size_t)p.heads);
    plan->p.alibi_slopes = plan->alibi;
  }
  /* CUDA: causal n = 1, whose row sees every key, compiles the non-causal kernel (attn_cuda_decode_unmasked; the plan's
   * spec keeps causal), which grouped-query packing (attn_cuda_gqa_packs) and split-KV need */
  attn_spec ks = *s;
  const int packs = rt->target == ATTN_TARGET_CUDA && attn_cuda_gqa_packs(&p, s);
  if (rt->target == ATTN_TARGET_CUDA && (packs || attn_cuda_decode_unmasked(&p, s))) ks.causal = 0;
  if (rt->target == ATTN_TARGET_CUDA && ks.causal && ks.split > 1) {
    free(plan->alibi);
    free(plan);
    return attn_fail(rt, ATTN_EUNSUPPORTED,
                     "attn_plan_create: split=%d with causal needs n = 1 (this is n=%d): the split kernel has no causal "
                     "mask", s->split, p.n);
  }
  /* CPU flash: a plan made for pages compiles the paged kernel, which runs dense calls too (runtime/paged.c) */
  if (attn_cpu_plan_paged(&p, s)) ks.layout = 2;
  plan->count_io = count_io;
  rc = rt->target == ATTN_TARGET_CUDA ? attn_cuda_load(rt, &ks, count_io, &plan->cuda)
                                      : attn_cpu_load(rt, &ks, count_io, &plan->cpu);
  /* CUDA: the slopes on the device once; every launch of the plan reads them there */
  if (rc == ATTN_OK && plan->cuda && plan->alibi &&
      (rc = attn_cuda_set_alibi(rt, plan->cuda, plan->alibi, p.heads)) != ATTN_OK)
    attn_cuda_unload(plan->cuda);
  if (rc != ATTN_OK) {
    free(plan->alibi);
    free(plan);
    return rc;
  }
  if (plan->cuda) plan->spec = *attn_cuda_kernel_spec(plan->cuda), plan->spec.causal = s->causal;
  char sum[384];
  attn_spec_summary(&plan->spec, sum, sizeof sum);
  snprintf(plan->describe, sizeof plan->describe, "%s%s (%s)", sum, packs ? " GQA-packed" : "",
           origin && *origin ? origin : "given");
  /* the plan's reference keeps the runtime (threads, CUDA context) alive past attn_close; relaxed:
   * the caller holds a reference already, so the count cannot reach 0 meanwhile */
  atomic_fetch_add_explicit(&rt->refs, 1, memory_order_relaxed);
  *out = plan;
  return ATTN_OK;
}

/* Where the row differs from the problem, as " n=512 batch*heads=2 ..." (only the fields that differ); "" when it is
 * the same problem. heads_kv shows when the group size heads/heads_kv differs (the lookup's measure: with batch*heads
 * equal, heads_kv alone differs only between MHA shapes of one width). A row without threads ran on the runtime's. */
static void shape_diff(const attn_db_best *b, const attn_problem *p, int threads, char *buf, size_t len) {
  const long long bh = (long long)b->batch * b->heads, pbh = (long long)p->batch * p->heads;
  const struct {
    const char *name;
    long long row;
    int differs;
  } f[] = {{"n", b->n, b->n != p->n},
           {"n_kv", b->n_kv, b->n_kv != p->n_kv},
           {"batch*heads", bh, bh != pbh},
           {"heads_kv", b->heads_kv, (long long)b->heads * p->heads_kv != (long long)p->heads * b->heads_kv},
           {"threads", b->threads, b->threads > 0 && b->threads != threads}};
  size_t k = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
    if (f[i].differs && k < len) k += (size_t)snprintf(buf + k, len - k, " %s=%lld", f[i].name, f[i].row);
}

int attn_problem_variant(const attn_problem *p, char *buf, size_t len) {
  char cap[32] = "";
  if (p->softcap > 0)
    for (int prec = 6; prec <= 9; prec++) { /* the shortest text that reads back as the same float */
      snprintf(cap, sizeof cap, "%.*g", prec, (double)p->softcap);
      if (strtof(cap, NULL) == p->softcap) break;
    }
  char part[5][40] = {"", "", "", "", ""};
  if (p->window > 0) snprintf(part[0], sizeof part[0], "window=%d", p->window);
  if (cap[0]) snprintf(part[1], sizeof part[1], "softcap=%s", cap);
  if (p->alibi_slopes) snprintf(part[2], sizeof part[2], "alibi");
  if (p->page_size > 0) snprintf(part[3], sizeof part[3], "paged=%d", p->page_size);
  if (p->varlen) snprintf(part[4], sizeof part[4], "varlen");
  char all[sizeof part];
  size_t k = 0;
  for (int i = 0; i < 5; i++)
    if (part[i][0]) k += (size_t)snprintf(all + k, sizeof all - k, "%s%s", k ? "," : "", part[i]);
  all[k] = '\0';
  return snprintf(buf, len, "%s", all);
}

/* The tuned row for this problem and pass ("fwd", "bwd"), when the database has one that fits; 0 and *s filled, else
 * -1 (origin says why when it is worth saying). */
static int tuned_spec(attn_runtime *rt, const attn_problem *p, const char *pass, attn_spec *s, char *origin,
                      size_t olen) {
  if (!rt->db) return -1;
  /* the variant is part of the key: a dense row never serves a problem with modifiers, nor one with others */
  char variant[ATTN_DB_VARIANT_MAX + 1];
  attn_problem_variant(p, variant, sizeof variant);
  const int threads = rt->target == ATTN_TARGET_CPU ? rt->threads : 0;
  attn_db_query q = {.device = rt->device, .d = p->d, .causal = p->causal, .n = p->n, .dtype = p->dtype,
                     .tolerance = p->tolerance, .n_kv = p->n_kv, .batch = p->batch, .heads = p->heads,
                     .heads_kv = p->heads_kv, .threads = threads, .d_v = p->d_v, .pass = pass, .variant = variant,
                     /* the Hopper template (impl=wgmma) serves only once measured on this device: a model row of it
                      * has never been checked against fp64 on a GPU, so the best row without it serves (CPU rows
                      * have no impl: no second query) */
                     .unmeasured_skip = rt->target == ATTN_TARGET_CUDA ? "impl=wgmma" : NULL,
                     /* a backward's plan is deterministic unless the problem says otherwise: a row of dQ by atomics
                      * (its sum's order varies) serves only a nondeterministic one */
                     .exclude = strcmp(pass, "bwd") == 0 && !p->nondeterministic ? "dq=atomic" : NULL};
  attn_db_best best;
  memset(&best, 0, sizeof best);
  int rc = attn_db_lookup(rt->db, &q, &best);
  if (rc != ATTN_OK) {
    if (rc != ATTN_EUNSUPPORTED) snprintf(origin, olen, "default: database lookup failed");
    else if (best.skipped)
      snprintf(origin, olen, "default: the stored impl=wgmma row is the model's, not measured on this device");
    else if (best.n > 0 && p->n < ATTN_DB_DECODE_BELOW)
      snprintf(origin, olen, "default: no decode row (n < %d) stored; prefill rows do not apply", ATTN_DB_DECODE_BELOW);
    else if (best.n > 0)
      snprintf(origin, olen, "default: no prefill row (n >= %d) stored; decode rows do not apply",
               ATTN_DB_DECODE_BELOW);
    return -1;
  }
  attn_spec t;
  char err[512];
  /* a backward row's tiles are checked by the backward's rules where its plan is made (the CPU's here below, CUDA's
   * at load): the forward's refuse some of them */
  const int bwd = strcmp(pass, "bwd") == 0;
  if ((bwd ? attn_spec_parse_fields : attn_spec_parse)(best.spec, &t, err, sizeof err) != ATTN_OK) {
    snprintf(origin, olen, "default: stored row unreadable");
    return -1;
  }
  /* A row for another algorithm than the one asked for, or that does not fit this problem, is not used. */
  if ((p->algo != ATTN_ALGO_AUTO && t.algo != p->algo) || t.target != rt->target || t.d != p->d ||
      attn_spec_dv(&t) != p->d_v || t.window != (p->window > 0) || t.softcap != (p->softcap > 0) ||
      t.alibi != (p->alibi_slopes != NULL) ||
      t.causal != p->causal || t.dtype != p->dtype || (t.algo == ATTN_ALGO_LOWRANK && p->tolerance <= 0))
    return -1;
  /* the lookup left model impl=wgmma rows out; a guard all the same */
  if (t.impl == ATTN_IMPL_WGMMA && strcmp(best.provenance, "measured") != 0) {
    snprintf(origin, olen, "default: the stored impl=wgmma row is the model's, not measured on this device");
    return -1;
  }
  const char *kind = strcmp(best.provenance, "model") == 0 ? "model" : "tuned";
  char diff[128];
  shape_diff(&best, p, threads, diff, sizeof diff);
  /* the row ranked first was a model impl=wgmma one: this is the best the device can serve */
  const char *why = best.skipped ? "; unmeasured impl=wgmma row passed over" : "";
  if (!diff[0] || best.n <= 0)
    snprintf(origin, olen, "%s%s", kind, why);
  else
    snprintf(origin, olen, "%s at%s: nearest stored shape%s", kind, diff, why);
  *s = t;
  return 0;
}

/* Untuned CUDA flash whose query blocks leave SMs idle (decode: n <= 16 rows, as the tuner's space has it) splits
 * each block's key range into S parts (split-KV: templates/flash.cu, then attn_combine's launch). S is the largest
 * power of two with blocks x S <= the device's SMs, at most 64 and the key blocks, and only while the split spares
 * each block at least 8 key blocks. The performance model (tuner/model.c) over A100, H100, H200, L4, L40S, d = 64..256,
 * n = 1..16, 1..64 heads, n_kv = 64..65536: 1.10x its best split's time (geometric mean; no split: 2.52x), and no
 * slower than no split by over 5% outside L40S (63 of 8910 shapes, at most 1.19x); S up to two waves of SMs was
 * slower than no split on 129 shapes outside L40S (A100, L4: up to 1.14x at 1000 keys), where the second launch and
 * the partials cost more than the idle SMs give. The blocks are the launch's (gen/launch.c), GQA-packed where attn_cuda_gqa_packs holds.
 * Causal only at n = 1 (attn_cuda_decode_unmasked: the split kernel has no mask); window, impl=wgmma and plans for
 * paged or varlen calls never (runtime/cuda_serve.c's kernels have no split). */
static int default_split_cuda(const attn_runtime *rt, const attn_problem *p, const attn_spec *s) {
  if (s->algo != ATTN_ALGO_FLASH || s->impl == ATTN_IMPL_WGMMA || s->window || s->layout || p->page_size > 0 ||
      p->varlen || p->n > 16 || (p->causal && !attn_cuda_decode_unmasked(p, s)))
    return 0;
  attn_cuda_info_t dev;
  if (attn_cuda_info(rt, &dev) != ATTN_OK || dev.sms < 2) return 0;
  const long long items = attn_cuda_query_blocks(p, s);
  if (items < 0) return 0;
  const long long kblocks = ((long long)p->n_kv + s->bc - 1) / s->bc;
  int split = 1;
  while (split < 64 && items * split * 2 <= dev.sms && split * 2 <= kblocks) split *= 2;
  while (split > 1 && kblocks - (kblocks + split - 1) / split < 8) split /= 2;
  attn_spec t = *s;
  char err[256];
  t.split = split;
  return split > 1 && attn_spec_check(&t, err, sizeof err) == ATTN_OK ? split : 0;
}

/* Untuned CPU flash with fewer query blocks than threads (decode: n = 1) would leave cores idle: split each
 * block's key range so that there are about twice as many items as threads (the dynamic schedule then balances
 * them), in a power of two of parts, no more than the key blocks. Measured at n = 1, n_kv = 65536, d = 128 on 2
 * cores: 11.4 ms unsplit, 7.1 ms with 2 parts, 6.5 ms with 4 (docs/results/cpu.md). */
static int default_split(const attn_runtime *rt, const attn_problem *p, const attn_spec *s) {
  if (s->target == ATTN_TARGET_CUDA) return default_split_cuda(rt, p, s);
  if (s->target != ATTN_TARGET_CPU || s->algo != ATTN_ALGO_FLASH || rt->threads < 2) return 0;
  /* flash.c packs the query heads of a KV head into one block when n < Br (its fl_packed): count its blocks */
  const long blocks = attn_cpu_query_blocks(p, s);
  const long kblocks = ((long)p->n_kv + s->bc - 1) / s->bc;
  if (blocks >= rt->threads) return 0;
  int split = 1;
  while (split < 64 && blocks * split < 2L * rt->threads && split * 2 <= kblocks) split *= 2;
  return split > 1 ? split : 0;
}

void attn_plan_default(const attn_runtime *rt, const attn_problem *p, attn_algo algo, attn_spec *s) {
  attn_algo a = algo == ATTN_ALGO_AUTO || algo == ATTN_ALGO_LOWRANK ? ATTN_ALGO_FLASH : algo;
  *s = attn_spec_default(a, rt->target, p->dtype, p->d, p->causal);
  s->dv = p->d_v != p->d ? p->d_v : 0;
  s->window = p->window > 0;
  s->softcap = p->softcap > 0;
  s->alibi = p->alibi_slopes != NULL;
  /* CUDA tiles sized for d_v; a d_v that no tile fits is refused by attn_spec_check at plan creation, which names
   * the limit */
  if (attn_spec_fit(s, NULL, 0) != ATTN_OK) return;
  s->split = default_split(rt, p, s);
}

int attn_plan_choose(attn_runtime *rt, const attn_problem *p, attn_spec *s, char *origin, size_t olen) {
  if (p->algo == ATTN_ALGO_LOWRANK && p->tolerance <= 0)
    return attn_fail(rt, ATTN_EUNSUPPORTED,
                     "lowrank is approximate: set the problem's tolerance > 0 to allow it, or ask for flash");
  snprintf(origin, olen, "default");
  if (tuned_spec(rt, p, "fwd", s, origin, olen) != 0) {
    attn_algo a = p->algo == ATTN_ALGO_AUTO ? ATTN_ALGO_FLASH : p->algo;
    /* An approximation's error is measured, never assumed: without a stored row that met the tolerance on this
     * shape, the exact algorithm serves, and describe says why. */
    if (a == ATTN_ALGO_LOWRANK) {
      a = ATTN_ALGO_FLASH;
      snprintf(origin, olen, "default: no lowrank row measured within tolerance %g", p->tolerance);
    }
    attn_plan_default(rt, p, a, s);
  }
  return ATTN_OK;
}

ATTN_API int attn_plan_create(attn_runtime *rt, const attn_problem *prob, attn_plan **out) {
  if (out) *out = NULL;
  if (!rt) return attn_fail(NULL, ATTN_EINVAL, "attn_plan_create: runtime is NULL");
  if (!out) return attn_fail(rt, ATTN_EINVAL, "attn_plan_create: out is NULL");
  attn_problem p = {0}; /* set by normalize on success; zeroed for GCC, which cannot see that through the call */
  int rc = attn_problem_normalize(rt, prob, &p);
  if (rc != ATTN_OK) return rc;
  attn_spec s;
  char origin[128];
  rc = attn_plan_choose(rt, &p, &s, origin, sizeof origin);
  if (rc != ATTN_OK) return rc;
  return attn_plan_create_spec(rt, &p, &s, 0, origin, out);
}

/* Both entry points: stream NULL and sync 1 for attn_execute. */
static int execute(const char *what, const attn_plan *plan, void *stream, int sync, const void *q, const void *k,
                   const void *v, void *o) {
  if (!plan) return attn_fail(NULL, ATTN_EINVAL, "%s: plan is NULL", what);
  attn_runtime *rt = plan->rt;
  if (!q || !k || !v || !o)
    return attn_fail(rt, ATTN_EINVAL, "%s: %s is NULL", what, !q ? "q" : !k ? "k" : !v ? "v" : "o");
  if (plan->backward)
    return attn_fail(rt, ATTN_EINVAL, "%s: this is a backward plan: attn_execute_backward runs it", what);
  const attn_problem *p = &plan->p;
  if (plan->cuda)
    return sync ? attn_cuda_run(rt, plan->cuda, p, q, k, v, o, NULL, NULL)
                : attn_cuda_launch(rt, plan->cuda, p, stream, q, k, v, o);
  if (!plan->cpu) return attn_fail(rt, ATTN_ERUNTIME, "%s: plan has no kernel", what);
  attn_kargs a = attn_problem_kargs(p, q, k, v, o);
  return attn_cpu_run(rt, plan->cpu, &a, NULL);
}

ATTN_API int attn_execute(const attn_plan *plan, const void *q, const void *k, const void *v, void *o) {
  return execute("attn_execute", plan, NULL, 1, q, k, v, o);
}

ATTN_API int attn_execute_async(const attn_plan *plan, void *stream, const void *q, const void *k, const void *v,
                                void *o) {
  return execute("attn_execute_async", plan, stream, 0, q, k, v, o);
}

ATTN_API int attn_execute_lse(const attn_plan *plan, const void *q, const void *k, const void *v, void *o,
                              float *lse) {
  if (!plan) return attn_fail(NULL, ATTN_EINVAL, "attn_execute_lse: plan is NULL");
  attn_runtime *rt = plan->rt;
  if (plan->backward)
    return attn_fail(rt, ATTN_EINVAL, "attn_execute_lse: this is a backward plan: attn_execute_backward runs it");
  if (!q || !k || !v || !o || !lse)
    return attn_fail(rt, ATTN_EINVAL, "attn_execute_lse: %s is NULL",
                     !q ? "q" : !k ? "k" : !v ? "v" : !o ? "o" : "lse");
  if (plan->cuda) return attn_cuda_run_lse(rt, plan->cuda, &plan->p, q, k, v, o, lse);
  if (plan->spec.algo == ATTN_ALGO_LOWRANK)
    return attn_fail(rt, ATTN_EUNSUPPORTED,
                     "attn_execute_lse: lowrank's normaliser is its approximation's, not the exact lse (use flash)");
  if (!plan->cpu) return attn_fail(rt, ATTN_ERUNTIME, "attn_execute_lse: plan has no kernel");
  const attn_problem *p = &plan->p;
  attn_kargs a = attn_problem_kargs(p, q, k, v, o);
  a.lse = lse;
  return attn_cpu_run(rt, plan->cpu, &a, NULL);
}

/* CUDA: templates/flash_bwd.cu with the tiles attn_cuda_load_backward picks for the problem's d, d_v and dtype. */
static int create_backward_cuda(attn_runtime *rt, const attn_problem *p, const char *origin, attn_plan **out) {
  attn_plan *plan = calloc(1, sizeof *plan);
  if (!plan) return attn_fail(rt, ATTN_ENOMEM, "attn_plan_create_backward: out of memory");
  plan->rt = rt;
  plan->p = *p;
  plan->backward = 1;
  int rc = attn_cuda_load_backward(rt, p, &plan->spec, &plan->cuda);
  if (rc != ATTN_OK) {
    free(plan);
    return rc;
  }
  char sum[384];
  attn_spec_summary(&plan->spec, sum, sizeof sum);
  snprintf(plan->describe, sizeof plan->describe, "%s backward (%.100s)", sum, origin);
  atomic_fetch_add_explicit(&rt->refs, 1, memory_order_relaxed); /* as attn_plan_create_spec */
  *out = plan;
  return ATTN_OK;
}

int attn_plan_create_backward_spec(attn_runtime *rt, const attn_problem *prob, const attn_spec *s, int count_io,
                                   const char *origin, attn_plan **out) {
  if (out) *out = NULL;
  if (!rt) return attn_fail(NULL, ATTN_EINVAL, "attn_plan_create_backward: runtime is NULL");
  if (!out) return attn_fail(rt, ATTN_EINVAL, "attn_plan_create_backward: out is NULL");
  if (!s) return attn_fail(rt, ATTN_EINVAL, "attn_plan_create_backward: spec is NULL");
  if (atomic_load_explicit(&rt->closed, memory_order_acquire))
    return attn_fail(rt, ATTN_EINVAL, "attn_plan_create_backward: the runtime is closed");
  attn_problem p = {0};
  int rc = attn_problem_normalize(rt, prob, &p);
  if (rc != ATTN_OK) return rc;
  if (s->algo == ATTN_ALGO_LOWRANK && rt->target == ATTN_TARGET_CUDA)
    return attn_fail(rt, ATTN_EUNSUPPORTED,
                     "attn_plan_create_backward: the CUDA backward has no lowrank (its gradient runs on the CPU)");
  if (s->algo == ATTN_ALGO_LOWRANK && p.tolerance <= 0)
    return attn_fail(rt, ATTN_EUNSUPPORTED,
                     "attn_plan_create_backward: lowrank is approximate: it needs a problem tolerance > 0");
  if (attn_problem_has_mods(&p) && rt->target == ATTN_TARGET_CUDA)
    return attn_fail(rt, ATTN_EUNSUPPORTED,
                     "attn_plan_create_backward: the CUDA backward applies no window, softcap or ALiBi (the CPU "
                     "backward does)");
  if (rt->target == ATTN_TARGET_CUDA && count_io)
    return attn_fail(rt, ATTN_EUNSUPPORTED, "attn_plan_create_backward: the CUDA backward has no counting build");
  if (s->d != p.d || attn_spec_dv(s) != p.d_v || s->causal != p.causal || s->dtype != p.dtype)
    return attn_fail(rt, ATTN_EINVAL,
                     "attn_plan_create_backward: spec (d=%d d_v=%d causal=%d %s) does not match the problem (d=%d "
                     "d_v=%d causal=%d %s)", s->d, attn_spec_dv(s), s->causal, attn_dtype_name(s->dtype), p.d, p.d_v,
                     p.causal, attn_dtype_name(p.dtype));
  if (s->window != (p.window > 0) || s->softcap != (p.softcap > 0) || s->alibi != (p.alibi_slopes != NULL))
    return attn_fail(rt, ATTN_EINVAL,
                     "attn_plan_create_backward: spec (window=%d softcap=%d alibi=%d) does not match the problem "
                     "(window=%d softcap=%g alibi %s)", s->window, s->softcap, s->alibi, p.window, (double)p.softcap,
                     p.alibi_slopes ? "on" : "off");
  char err[512];
  /* CUDA: attn_cuda_load_backward_spec checks the spec against the device (shared memory, registers) */
  rc = rt->target == ATTN_TARGET_CUDA ? ATTN_OK : attn_spec_check_backward(s, err, sizeof err);
  if (rc != ATTN_OK) return attn_fail(rt, rc, "attn_plan_create_backward: %s", err);
  attn_plan *plan = calloc(1, sizeof *plan);
  if (!plan) return attn_fail(rt, ATTN_ENOMEM, "attn_plan_create_backward: out of memory");
  plan->rt = rt;
  plan->p = p;
  plan->spec = *s;
  plan->backward = 1;
  if (p.alibi_slopes) { /* the plan's own copy, as attn_plan_create_spec's */
    plan->alibi = malloc(sizeof(float) * (size_t)p.heads);
    if (!plan->alibi) {
      free(plan);
      return attn_fail(rt, ATTN_ENOMEM, "attn_plan_create_backward: out of memory");
    }
    memcpy(plan->alibi, p.alibi_slopes, sizeof(float) * (size_t)p.heads);
    plan->p.alibi_slopes = plan->alibi;
  }
  rc = rt->target == ATTN_TARGET_CUDA ? attn_cuda_load_backward_spec(rt, s, &plan->spec, &plan->cuda)
                                      : attn_cpu_load_backward(rt, s, count_io, &plan->cpu);
  if (rc != ATTN_OK) {
    free(plan->alibi);
    free(plan);
    return rc;
  }
  char sum[384];
  attn_spec_summary(&plan->spec, sum, sizeof sum); /* CUDA: the device's arch */
  snprintf(plan->describe, sizeof plan->describe, "%s backward (%s)", sum, origin && *origin ? origin : "given");
  atomic_fetch_add_explicit(&rt->refs, 1, memory_order_relaxed); /* as attn_plan_create_spec */
  *out = plan;
  return ATTN_OK;
}

/* The backward's tiles: the tuned row of pass bwd for this problem (FlashAttention-2 tunes Br and Bc apart from the
 * forward's), else Br = Bc = 64; d, d_v, dtype and causal as the problem's, flash whatever algorithm ran forward. */
ATTN_API int attn_plan_create_backward(attn_runtime *rt, const attn_problem *prob, attn_plan **out) {
  if (out) *out = NULL;
  if (!rt) return attn_fail(NULL, ATTN_EINVAL, "attn_plan_create_backward: runtime is NULL");
  if (!out) return attn_fail(rt, ATTN_EINVAL, "attn_plan_create_backward: out is NULL");
  if (atomic_load_explicit(&rt->closed, memory_order_acquire))
    return attn_fail(rt, ATTN_EINVAL, "attn_plan_create_backward: the runtime is closed");
  attn_problem p = {0};
  int rc = attn_problem_normalize(rt, prob, &p);
  if (rc != ATTN_OK) return rc;
  attn_spec s;
  char origin[128] = "default", err[512];
  attn_problem any = p;
  any.algo = ATTN_ALGO_AUTO;
  if (p.algo == ATTN_ALGO_LOWRANK && rt->target == ATTN_TARGET_CUDA)
    return attn_fail(rt, ATTN_EUNSUPPORTED,
                     "attn_plan_create_backward: the CUDA backward has no lowrank (its gradient runs on the CPU)");
  /* the gradient of what attn_plan_create runs: lowrank's approximation where a lowrank row serves the forward (the
   * same spec: the same features), else flash's exact one */
  if (rt->target == ATTN_TARGET_CPU && p.tolerance > 0 && (p.algo == ATTN_ALGO_AUTO || p.algo == ATTN_ALGO_LOWRANK)) {
    rc = attn_plan_choose(rt, &p, &s, origin, sizeof origin);
    if (rc != ATTN_OK) return rc;
    if (s.algo == ATTN_ALGO_LOWRANK) return attn_plan_create_backward_spec(rt, &p, &s, 0, origin, out);
    snprintf(origin, sizeof origin, "default");
  }
  if (rt->target == ATTN_TARGET_CUDA && p.algo != ATTN_ALGO_LOWRANK && !attn_problem_has_mods(&p)) {
    /* the tuned (or modelled) row of pass bwd, else attn_spec_backward_cuda's tiles */
    if (tuned_spec(rt, &any, "bwd", &s, origin, sizeof origin) == 0) {
      /* a row this device's shared memory or registers do not hold (another GPU of the family) or that is not a
       * backward kernel: the default serves */
      rc = s.algo == ATTN_ALGO_FLASH ? attn_plan_create_backward_spec(rt, &p, &s, 0, origin, out) : ATTN_EINVAL;
      if (rc != ATTN_EUNSUPPORTED && rc != ATTN_EINVAL) return rc;
      snprintf(origin, sizeof origin, "default: stored row not a backward kernel for this device");
    }
    return create_backward_cuda(rt, &p, origin, out);
  }
  int tuned = rt->target == ATTN_TARGET_CPU && p.algo != ATTN_ALGO_LOWRANK &&
              tuned_spec(rt, &any, "bwd", &s, origin, sizeof origin) == 0;
  if (tuned && (s.algo != ATTN_ALGO_FLASH || attn_spec_check_backward(&s, err, sizeof err) != ATTN_OK)) {
    tuned = 0; /* a row the backward template does not take (made elsewhere): the default serves */
    snprintf(origin, sizeof origin, "default: stored row not a backward kernel");
  }
  if (!tuned) {
    s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, p.dtype, p.d, p.causal);
    s.dv = p.d_v != p.d ? p.d_v : 0;
    s.window = p.window > 0;
    s.softcap = p.softcap > 0;
    s.alibi = p.alibi_slopes != NULL;
    s.br = 64;
    s.bc = 64;
  }
  return attn_plan_create_backward_spec(rt, &p, &s, 0, origin, out);
}

ATTN_API int attn_execute_backward(const attn_plan *plan, const void *q, const void *k, const void *v, const void *o,
                                   const float *lse, const void *dout, void *dq, void *dk, void *dv) {
  if (!plan) return attn_fail(NULL, ATTN_EINVAL, "attn_execute_backward: plan is NULL");
  attn_runtime *rt = plan->rt;
  if (!plan->backward)
    return attn_fail(rt, ATTN_EINVAL,
                     "attn_execute_backward: a forward plan (make one with attn_plan_create_backward)");
  const void *const ptr[] = {q, k, v, o, lse, dout, dq, dk, dv};
  static const char *const name[] = {"q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv"};
  for (size_t i = 0; i < sizeof ptr / sizeof ptr[0]; i++)
    if (!ptr[i] && !(i == 4 && plan->spec.algo == ATTN_ALGO_LOWRANK)) /* lowrank's gradient reads no lse */
      return attn_fail(rt, ATTN_EINVAL, "attn_execute_backward: %s is NULL", name[i]);
  const attn_problem *p = &plan->p;
  if (plan->cuda) return attn_cuda_run_backward(rt, plan->cuda, p, q, k, v, o, lse, dout, dq, dk, dv);
  if (!plan->cpu) return attn_fail(rt, ATTN_ERUNTIME, "attn_execute_backward: plan has no kernel");
  /* o is read, not written: the kernel ABI's o is the forward's output here */
  attn_kargs a = attn_problem_kargs(p, q, k, v, (void *)(uintptr_t)o);
  a.lse = (float *)(uintptr_t)lse;
  a.dout = dout;
  a.dq = dq;
  a.dk = dk;
  a.dv = dv;
  return attn_cpu_run(rt, plan->cpu, &a, NULL);
}

ATTN_API const char *attn_plan_describe(const attn_plan *plan) { return plan ? plan->describe : "(no plan)"; }

ATTN_API void attn_plan_destroy(attn_plan *plan) {
  if (!plan) return;
  attn_runtime *rt = plan->rt;
  if (plan->cpu) attn_cpu_unload(plan->cpu);
  attn_cpu_unload(atomic_exchange(&plan->cpu_paged, NULL)); /* runtime/paged.c's, NULL unless loaded */
  attn_cuda_serve_release(plan); /* the varlen and paged kernels (cuda_serve.c), before the release too */
  if (plan->cuda) attn_cuda_unload(plan->cuda); /* before the release: it needs the runtime's CUDA context */
  free(plan->alibi);
  free(plan);
  if (rt) runtime_release(rt);
}
