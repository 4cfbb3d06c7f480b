/* cpu_mods: the score modifiers of attn.h (window, softcap, ALiBi) on the CPU.
 * "ref": the fp64 reference (runtime/reference.c) against a direct reading of attn.h's definitions (a mask per
 * (i, j), the score's steps in order), a window that hides nothing equal to none, the refusals of bad modifiers
 * (one-line errors, *out NULL, nothing changed), spec texts, the tuned rows' variant.
 * "flash": flash kernels and a smallcache one against the reference, and their I/O against the closed forms: each
 * modifier alone and combined, with causal, GQA, d_v != d, odd lengths, n_kv != n, n = 1, windows shorter and longer
 * than a tile, split-K; NaN and Inf; a plan end to end; lowrank's refusal.
 * "sweep" (nightly): every shape and modifier on more kernels, f16 and bf16, the default tiles. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <string.h>
#include <unistd.h>
#include "cpu_util.h"

#define SENTINEL ((attn_plan *)(void *)&failures)

/* attn.h's words, one key at a time: i' = i + n_kv - n; causal hides j > i'; a window w hides j <= i' - w (causal)
 * or |i' - j| >= w (not causal); s = scale·q·k, then c·tanh(s/c), then - slope·|i' - j|. */
static void direct(const attn_problem *p, const float *q, const float *k, const float *v, double *o) {
  const long n = p->n, nk = p->n_kv, d = p->d, dv = p->d_v, g = p->heads / p->heads_kv;
  double *s = malloc(sizeof(double) * (size_t)nk);
  char *seen = malloc((size_t)nk);
  if (!s || !seen) abort();
  for (long b = 0; b < p->batch; b++)
    for (long h = 0; h < p->heads; h++)
      for (long i = 0; i < n; i++) {
        const long ip = i + nk - n, hk = h / g;
        double mx = -INFINITY, sum = 0;
        double *orow = o + ((b * p->heads + h) * n + i) * dv;
        for (long j = 0; j < nk; j++) {
          const long dist = ip > j ? ip - j : j - ip;
          seen[j] = !(p->causal && j > ip) && !(p->window > 0 && (p->causal ? j <= ip - p->window : dist >= p->window));
          if (!seen[j]) continue;
          double acc = 0;
          const float *qi = q + ((b * p->heads + h) * n + i) * d, *kj = k + ((b * p->heads_kv + hk) * nk + j) * d;
          for (long c = 0; c < d; c++) acc += (double)qi[c] * (double)kj[c];
          acc *= p->scale;
          if (p->softcap > 0) acc = p->softcap * tanh(acc / p->softcap);
          if (p->alibi_slopes) acc -= p->alibi_slopes[h] * (double)dist;
          s[j] = acc;
          if (acc > mx) mx = acc;
        }
        for (long c = 0; c < dv; c++) orow[c] = 0;
        for (long j = 0; j < nk; j++)
          if (seen[j]) sum += (s[j] = exp(s[j] - mx));
        for (long j = 0; j < nk; j++)
          if (seen[j])
            for (long c = 0; c < dv; c++) orow[c] += s[j] / sum * v[((b * p->heads_kv + hk) * nk + j) * dv + c];
      }
  free(s);
  free(seen);
}

static double max_diff(const double *a, const double *b, size_t count) {
  double m = 0;
  for (size_t i = 0; i < count; i++) {
    const double e = fabs(a[i] - b[i]);
    if (!(e <= m)) m = e; /* NaN wins */
  }
  return m;
}

static const float slopes8[8] = {0.5f, 0.25f, 0.125f, 0.0625f, 0.03125f, 0.015625f, 0.0078125f, 0.00390625f};

static void ref_checks(void) {
  const struct {
    int n, n_kv, heads, heads_kv, d, dv, causal, window;
    float softcap;
    int alibi;
  } cases[] = {
      {7, 7, 2, 1, 5, 3, 0, 3, 0, 0},      {7, 7, 2, 1, 5, 3, 1, 3, 0, 0},     {5, 11, 2, 2, 4, 4, 1, 4, 0, 0},
      {11, 5, 2, 2, 4, 4, 1, 2, 0, 0},     {11, 5, 2, 2, 4, 4, 0, 2, 0, 0},    {1, 9, 4, 2, 6, 6, 1, 3, 0, 0},
      {1, 9, 4, 2, 6, 6, 0, 3, 0, 0},      {9, 9, 2, 1, 8, 8, 0, 0, 0.5f, 0}, {9, 13, 2, 1, 8, 8, 1, 0, 0, 1},
      {9, 13, 4, 2, 8, 5, 1, 4, 2.0f, 1},  {13, 9, 4, 1, 8, 5, 0, 5, 1.5f, 1},
  };
  for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
    attn_problem p0 = {.batch = 2, .heads = cases[t].heads, .heads_kv = cases[t].heads_kv, .n = cases[t].n,
                       .n_kv = cases[t].n_kv, .d = cases[t].d, .d_v = cases[t].dv, .causal = cases[t].causal,
                       .window = cases[t].window, .softcap = cases[t].softcap,
                       .alibi_slopes = cases[t].alibi ? slopes8 : NULL, .scale = 2.0f};
    case_bufs c;
    if (case_alloc(&p0, 1000 + t, &c) != 0) {
      CHECK(0, "case %zu: cannot set up", t);
      continue;
    }
    double *want = malloc(sizeof(double) * c.no);
    if (!want) abort();
    direct(&c.p, c.q, c.k, c.v, want);
    const double e = max_diff(c.ref, want, c.no);
    CHECK(e < 1e-12, "reference case %zu (%s window=%d softcap=%g alibi=%d): differs from the definition by %g", t,
          shape(&c.p), cases[t].window, (double)cases[t].softcap, cases[t].alibi, e);
    free(want);
    case_free(&c);
  }
  /* a window every row's keys fit in hides nothing: normalised to 0, and the reference agrees */
  const int wide[][4] = {{9, 9, 1, 9}, {9, 13, 1, 13}, {13, 9, 0, 13}, {9, 13, 0, 13}, {1, 9, 1, 9}};
  for (size_t t = 0; t < sizeof wide / sizeof wide[0]; t++) {
    attn_problem p0 = {.batch = 1, .heads = 2, .n = wide[t][0], .n_kv = wide[t][1], .d = 4, .causal = wide[t][2]};
    case_bufs dense, win;
    if (case_alloc(&p0, 77, &dense) != 0) abort();
    p0.window = wide[t][3];
    attn_problem norm;
    CHECK(attn_problem_normalize(NULL, &p0, &norm) == ATTN_OK && norm.window == 0, "window=%d n=%d n_kv=%d: not 0",
          p0.window, p0.n, p0.n_kv);
    p0.window--; /* one less hides a key somewhere */
    CHECK(attn_problem_normalize(NULL, &p0, &norm) == ATTN_OK && norm.window == p0.window,
          "window=%d n=%d n_kv=%d causal=%d: changed to %d", p0.window, p0.n, p0.n_kv, p0.causal, norm.window);
    attn_problem full = dense.p;
    full.window = wide[t][3];
    if (case_alloc(&dense.p, 77, &win) != 0) abort();
    attn_reference(&full, win.q, win.k, win.v, win.ref);
    CHECK(max_diff(dense.ref, win.ref, dense.no) == 0, "window=%d: not the same as none", wide[t][3]);
    case_free(&dense);
    case_free(&win);
  }
}

/* attn_plan_create on p must return want, leave *out NULL and say needle in one line. */
static void expect_plan(attn_runtime *rt, const attn_problem *p, int want, const char *needle, const char *what) {
  attn_plan *plan = SENTINEL;
  int rc = attn_plan_create(rt, p, &plan);
  CHECK(rc == want, "%s: got %s, want %s", what, attn_strerror(rc), attn_strerror(want));
  CHECK(plan == NULL, "%s: *out not NULL", what);
  const char *msg = attn_last_error(rt);
  CHECK(msg && strstr(msg, needle), "%s: message '%s' lacks '%s'", what, msg ? msg : "", needle);
  CHECK(msg && !strchr(msg, '\n'), "%s: message is not one line", what);
  printf("%-32s -> %s: %s\n", what, attn_strerror(rc), msg ? msg : "");
  if (plan != SENTINEL) attn_plan_destroy(plan);
}

static void bad_checks(attn_runtime *rt) {
  const attn_problem good = {.batch = 1, .heads = 2, .n = 33, .d = 16};
  const float nan_slopes[2] = {0.5f, NAN}, inf_slopes[2] = {INFINITY, 0.5f};
  attn_problem p;
  int rc;
  p = good, p.window = -1;
  expect_plan(rt, &p, ATTN_EINVAL, "window=-1 must be >= 0", "window < 0");
  p = good, p.softcap = NAN;
  expect_plan(rt, &p, ATTN_EINVAL, "softcap=nan must be finite", "NaN softcap");
  p = good, p.softcap = INFINITY;
  expect_plan(rt, &p, ATTN_EINVAL, "softcap=inf must be finite", "Inf softcap");
  p = good, p.softcap = -1;
  expect_plan(rt, &p, ATTN_EINVAL, "softcap=-1 must be finite and >= 0", "negative softcap");
  p = good, p.alibi_slopes = nan_slopes;
  expect_plan(rt, &p, ATTN_EINVAL, "alibi_slopes[1]=nan must be finite", "NaN slope");
  p = good, p.alibi_slopes = inf_slopes;
  expect_plan(rt, &p, ATTN_EINVAL, "alibi_slopes[0]=inf must be finite", "Inf slope");
  /* a kernel that applies ALiBi needs slopes; one with a window a problem with one */
  attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, ATTN_F32, 16, 0);
  s.alibi = 1;
  attn_plan *plan = SENTINEL;
  rc = attn_plan_create_spec(rt, &good, &s, 0, "test", &plan);
  CHECK(rc == ATTN_EINVAL && plan == NULL && strstr(attn_last_error(rt), "alibi=1") &&
            strstr(attn_last_error(rt), "alibi off"),
        "ALiBi kernel without slopes: %s: %s", attn_strerror(rc), attn_last_error(rt));
  s.alibi = 0, s.window = 1;
  p = good, p.softcap = 2.0f;
  plan = SENTINEL;
  rc = attn_plan_create_spec(rt, &p, &s, 0, "test", &plan);
  CHECK(rc == ATTN_EINVAL && plan == NULL && strstr(attn_last_error(rt), "does not match"),
        "window kernel for a softcap problem: %s: %s", attn_strerror(rc), attn_last_error(rt));
  /* the CPU backward applies them too (tests/cpu_bwd_mods.c), from a kernel built for them */
  p = good, p.window = 8;
  plan = SENTINEL;
  s.window = 0;
  rc = attn_plan_create_backward_spec(rt, &p, &s, 0, "test", &plan);
  CHECK(rc == ATTN_EINVAL && plan == NULL && strstr(attn_last_error(rt), "does not match"),
        "backward kernel without the problem's window: %s: %s", attn_strerror(rc), attn_last_error(rt));
  /* the refusals leave the runtime working: the next problem gets its configuration */
  p = good;
  attn_problem norm;
  char origin[128];
  rc = attn_problem_normalize(rt, &p, &norm);
  if (rc == ATTN_OK) rc = attn_plan_choose(rt, &norm, &s, origin, sizeof origin);
  CHECK(rc == ATTN_OK && s.d == 16, "a good problem after the refusals: %s: %s", attn_strerror(rc),
        attn_last_error(rt));
}

/* One kernel with all three modifiers compiled in serves every case of its (d, d_v, dtype, causal, tiles, split):
 * the shape and the modifiers' values are run-time arguments, and a modifier given as 0 / NULL is off, so each alone
 * and each combination runs through the same code the plans of that problem run. */
typedef struct {
  attn_dtype dtype;
  int d, dv, causal, br, bc, split;
  attn_algo algo;
} kspec;

static attn_plan *kernel_plan(attn_runtime *rt, const kspec *k, int count_io) {
  static const float sl[1] = {0.25f};
  attn_problem p = {.batch = 1, .heads = 1, .n = 64, .n_kv = 64, .d = k->d, .d_v = k->dv, .dtype = k->dtype,
                    .causal = k->causal, .window = 8, .softcap = 5.0f, .alibi_slopes = sl};
  attn_spec s = attn_spec_default(k->algo, ATTN_TARGET_CPU, k->dtype, k->d, k->causal);
  s.dv = k->dv != k->d ? k->dv : 0;
  s.br = k->br;
  s.bc = k->bc;
  s.split = k->split;
  if (k->algo == ATTN_ALGO_SMALLCACHE) s.tile = k->bc; /* T x T tiles */
  s.window = s.softcap = s.alibi = 1;
  attn_plan *plan = NULL;
  int rc = attn_plan_create_spec(rt, &p, &s, count_io, "test", &plan);
  CHECK(rc == ATTN_OK, "d=%d dv=%d %s causal=%d br=%d bc=%d split=%d: %s: %s", k->d, k->dv,
        attn_dtype_name(k->dtype), k->causal, k->br, k->bc, k->split, attn_strerror(rc), attn_last_error(rt));
  return rc == ATTN_OK ? plan : NULL;
}

/* Runs the plan's kernel on c's problem (shape and modifiers from c->p) through dtype copies of the inputs. */
static int kernel_run(attn_runtime *rt, const attn_plan *plan, case_bufs *c, attn_io *io) {
  const attn_problem *p = &c->p;
  const size_t es = attn_dtype_size(p->dtype);
  void *q = malloc(c->nq * es), *k = malloc(c->nkv * es), *v = malloc(c->nv * es), *o = malloc(c->no * es);
  int rc = ATTN_ENOMEM;
  if (q && k && v && o) {
    attn_to_dtype(p->dtype, c->q, c->nq, q);
    attn_to_dtype(p->dtype, c->k, c->nkv, k);
    attn_to_dtype(p->dtype, c->v, c->nv, v);
    attn_to_dtype(p->dtype, c->o, c->no, o); /* the poison */
    attn_kargs a = {.q = q, .k = k, .v = v, .o = o, .batch = p->batch, .heads = p->heads, .heads_kv = p->heads_kv,
                    .n = p->n, .n_kv = p->n_kv, .scale = p->scale, .window = p->window, .softcap = p->softcap,
                    .alibi = p->alibi_slopes};
    rc = attn_cpu_run(rt, plan->cpu, &a, io);
    attn_from_dtype(p->dtype, o, c->no, c->o);
  }
  free(q);
  free(k);
  free(v);
  free(o);
  return rc;
}

/* smallcache's (templates/smallcache.c) per block of R rows and C keys [lo, hi) as flash's below, T x T tiles:
 * reads d·R·⌈C/T⌉ + d·C·⌈R/T⌉ + R·C·⌈d_v/T⌉ + d_v·C·⌈R/T⌉, writes R·C + R·d_v. */
static void smallcache_io(const attn_problem *p, const kspec *ks, attn_io *want) {
  const long T = ks->bc, off = p->n_kv - p->n, w = p->window, d = p->d, dv = p->d_v;
  want->reads = want->writes = 0;
  for (long i0 = 0; i0 < p->n; i0 += ks->br) {
    const long R = p->n - i0 < ks->br ? p->n - i0 : ks->br, a = i0 + off, z = i0 + R - 1 + off;
    long lo = 0, hi = p->n_kv;
    if (p->causal && z + 1 < hi) hi = z + 1;
    if (w > 0 && a - w + 1 > lo) lo = a - w + 1;
    if (w > 0 && !p->causal && z + w < hi) hi = z + w;
    const long C = hi > lo ? hi - lo : 0, nr = (R + T - 1) / T, nc = (C + T - 1) / T, ndv = (dv + T - 1) / T;
    const long heads = (long)p->batch * p->heads;
    want->reads += (unsigned long long)(heads * (d * R * nc + d * C * nr + R * C * ndv + dv * C * nr));
    want->writes += (unsigned long long)(heads * (R * C + R * dv));
  }
}

/* docs/io.md's closed form of flash with a window: per block of R rows (packed: G heads' rows of one KV head) whose
 * first and last rows are at i0', i1', the keys [lo, hi) with lo = max(0, i0' - w + 1) and hi = min(n_kv, i1' + 1)
 * causal, min(n_kv, i1' + w) not (without a window lo = 0, hi = n_kv or causal's); C = max(0, hi - lo). Unsplit:
 * reads R·d + C·(d + d_v), writes R·d_v. Split S: P = min(S, ⌈C/Bc⌉) parts read Q; reads P·R·d + C·(d + d_v) +
 * S·R·(d_v + 2), writes S·R·(d_v + 2) + R·d_v. */
static void window_io(const attn_problem *p, const kspec *ks, attn_io *want) {
  if (ks->algo == ATTN_ALGO_SMALLCACHE) {
    smallcache_io(p, ks, want);
    return;
  }
  const long G = p->heads / p->heads_kv, packed = p->n < ks->br && G > 1, gp = packed ? G : 1;
  const long total = p->n * gp, groups = (long)p->batch * (packed ? p->heads_kv : p->heads), off = p->n_kv - p->n;
  const long w = p->window, d = p->d, dv = p->d_v, S = ks->split > 1 ? ks->split : 1;
  want->reads = want->writes = 0;
  for (long X0 = 0; X0 < total; X0 += ks->br) {
    const long R = total - X0 < ks->br ? total - X0 : ks->br, i0 = X0 / gp + off, i1 = (X0 + R - 1) / gp + off;
    long lo = 0, hi = p->n_kv;
    if (p->causal && i1 + 1 < hi) hi = i1 + 1;
    if (w > 0 && i0 - w + 1 > lo) lo = i0 - w + 1;
    if (w > 0 && !p->causal && i1 + w < hi) hi = i1 + w;
    const long C = hi > lo ? hi - lo : 0, nkb = (C + ks->bc - 1) / ks->bc, P = nkb < S ? nkb : S;
    if (S == 1) {
      want->reads += (unsigned long long)(groups * (R * d + C * (d + dv)));
      want->writes += (unsigned long long)(groups * R * dv);
    } else {
      want->reads += (unsigned long long)(groups * (P * R * d + C * (d + dv) + S * R * (dv + 2)));
      want->writes += (unsigned long long)(groups * (S * R * (dv + 2) + R * dv));
    }
  }
}

static const float slopes6[6] = {0.5f, 0.25f, 0.125f, 1.0f, 0.0625f, 0.75f};

static const char *mods_text(const attn_problem *p) {
  static char buf[96];
  attn_problem_variant(p, buf, sizeof buf);
  return buf[0] ? buf : "dense";
}

/* Shapes x modifiers on one kernel against the fp64 reference. */
static void kernel_cases(attn_runtime *rt, const kspec *ks, int full) {
  attn_plan *plan = kernel_plan(rt, ks, 1); /* the counting build: the same kernel, its I/O counted */
  if (!plan) return;
  const struct { int batch, heads, heads_kv, n, n_kv; } shapes[] = {
      {2, 4, 2, 37, 37}, /* GQA, odd, several query and key blocks */
      {1, 4, 1, 1, 50},  /* decode: the packed heads take the dot kernels */
      {1, 6, 2, 7, 33},  /* packed rows of three heads in the lanes */
      {1, 2, 2, 29, 61}, /* n < n_kv */
      {1, 2, 1, 45, 23}, /* n > n_kv: rows that see no key (causal; a window that is not) */
      {1, 1, 1, 1, 1},
  };
  /* windows shorter and longer than a 16-key tile, 0 (none), and one that hides nothing */
  const struct { int window; float softcap; int alibi; } mods[] = {
      {5, 0, 0}, {40, 0, 0}, {0, 2.0f, 0}, {0, 0, 1}, {7, 1.5f, 1}, {21, 30.0f, 1}, {1, 0, 0}, {1000, 0, 0},
      {0, 3e4f, 0}, /* a cap far above the scores: tanh of small arguments, where 1 - 2/(e^2x + 1) cancels */
  };
  const size_t nshapes = full ? sizeof shapes / sizeof shapes[0] : 4;
  for (size_t si = 0; si < nshapes; si++)
    for (size_t mi = 0; mi < sizeof mods / sizeof mods[0]; mi++) {
      if (!full && (mi + si) % 2) continue; /* CI: half the pairs, every shape and every modifier */
      attn_problem p0 = {.batch = shapes[si].batch, .heads = shapes[si].heads, .heads_kv = shapes[si].heads_kv,
                         .n = shapes[si].n, .n_kv = shapes[si].n_kv, .d = ks->d, .d_v = ks->dv, .dtype = ks->dtype,
                         .causal = ks->causal, .window = mods[mi].window, .softcap = mods[mi].softcap,
                         .alibi_slopes = mods[mi].alibi ? slopes6 : NULL};
      case_bufs c;
      if (case_alloc(&p0, si * 100 + mi, &c) != 0) {
        CHECK(0, "%s: cannot set up", shape(&p0));
        continue;
      }
      attn_io io = {0, 0}, want;
      int rc = kernel_run(rt, plan, &c, &io);
      window_io(&c.p, ks, &want);
      CHECK(io.reads == want.reads && io.writes == want.writes,
            "%s %s [br=%d bc=%d split=%d]: counted %llu reads, %llu writes; the closed form %llu, %llu", shape(&c.p),
            mods_text(&c.p), ks->br, ks->bc, ks->split, io.reads, io.writes, want.reads, want.writes);
      const double err = rc == ATTN_OK ? attn_rel_error(c.ref, c.o, c.no) : INFINITY;
      const double tol = ks->dtype == ATTN_F32 ? TOL : 1e-2;
      CHECK(rc == ATTN_OK && err <= tol, "%s %s [br=%d bc=%d split=%d]: %s, relative error %.3g > %g", shape(&c.p),
            mods_text(&c.p), ks->br, ks->bc, ks->split, attn_strerror(rc), err, tol);
      if (full || err > tol) printf("%-90s %-28s err %.2e\n", shape(&c.p), mods_text(&c.p), err);
      case_free(&c);
    }
  attn_plan_destroy(plan);
}

/* NaN and Inf as attn.h says: softcap turns a +Inf score into c (the row stays finite), a NaN key outside a row's
 * window does not reach it; the NaN pattern and the finite values must be the reference's. */
static void nan_cases(attn_runtime *rt, const kspec *ks) {
  attn_plan *plan = kernel_plan(rt, ks, 1);
  if (!plan) return;
  for (int t = 0; t < 3; t++) {
    attn_problem p0 = {.batch = 1, .heads = 2, .n = 40, .n_kv = 40, .d = ks->d, .d_v = ks->dv, .dtype = ks->dtype,
                       .causal = ks->causal, .window = t == 0 ? 0 : 6, .softcap = t == 1 ? 0 : 3.0f,
                       .alibi_slopes = t == 2 ? slopes6 : NULL};
    case_bufs c;
    if (case_alloc(&p0, 900 + t, &c) != 0) abort();
    if (t == 0) c.q[5 * c.p.d + 1] = INFINITY; /* head 0, row 5: scores of +-inf, capped */
    else c.k[20 * c.p.d + 2] = NAN;            /* head 0, key 20: NaN only in the rows whose window holds it */
    attn_reference(&c.p, c.q, c.k, c.v, c.ref);
    attn_io io = {0, 0};
    CHECK(kernel_run(rt, plan, &c, &io) == ATTN_OK, "nan case %d: %s", t, attn_last_error(rt));
    size_t nan_ref = 0, bad = 0;
    double num = 0, den = 0;
    for (size_t i = 0; i < c.no; i++) {
      nan_ref += isnan(c.ref[i]) != 0;
      if (isnan(c.ref[i]) != isnan(c.o[i]) || isinf(c.o[i])) bad++;
      else if (!isnan(c.ref[i])) num += (c.o[i] - c.ref[i]) * (c.o[i] - c.ref[i]), den += c.ref[i] * c.ref[i];
    }
    const double tol = ks->dtype == ATTN_F32 ? TOL : 1e-2;
    CHECK(bad == 0 && num <= tol * tol * den, "nan case %d (%s %s): %zu entries differ in NaN, error %.3g", t,
          shape(&c.p), mods_text(&c.p), bad, sqrt(num / (den > 0 ? den : 1)));
    /* the case means something: softcap keeps the row finite; a window keeps the NaN to the rows that see key 20 */
    CHECK(t == 0 ? nan_ref == 0 : nan_ref > 0 && nan_ref < c.no / 2, "nan case %d: %zu NaN in the reference", t,
          nan_ref);
    case_free(&c);
  }
  attn_plan_destroy(plan);
}

/* attn_plan_create and attn_execute end to end: the default spec carries the modifiers, describe names them. */
static void plan_cases(attn_runtime *rt) {
  attn_problem p0 = {.batch = 1, .heads = 6, .heads_kv = 2, .n = 70, .n_kv = 90, .d = 16, .causal = 1,
                     .window = 33, .softcap = 4.0f, .alibi_slopes = slopes6};
  const double err = run_case(rt, &p0, 4242);
  CHECK(err <= TOL, "plan with window, softcap and alibi: error %.3g", err);
  attn_plan *plan = NULL;
  if (attn_plan_create(rt, &p0, &plan) == ATTN_OK) {
    CHECK(strstr(attn_plan_describe(plan), "window softcap alibi"), "describe: '%s'", attn_plan_describe(plan));
    /* lse: log sum_j exp(s_ij) of the modified scores over the keys row i sees */
    case_bufs c;
    float *lse = malloc(sizeof(float) * (size_t)(p0.heads * p0.n));
    if (!lse || case_alloc(&p0, 4243, &c) != 0) abort();
    CHECK(attn_execute_lse(plan, c.q, c.k, c.v, c.o, lse) == ATTN_OK, "attn_execute_lse: %s", attn_last_error(rt));
    double worst = 0;
    for (long h = 0; h < c.p.heads; h++)
      for (long i = 0; i < c.p.n; i++) {
        const float *qi = c.q + (h * c.p.n + i) * c.p.d;
        const float *kh = c.k + (h / (c.p.heads / c.p.heads_kv)) * c.p.n_kv * c.p.d;
        long lo, hi;
        attn_visible_keys(&c.p, i, &lo, &hi);
        double mx = -INFINITY, sum = 0, sc[90];
        for (long j = lo; j < hi; j++) {
          double acc = 0;
          for (long e = 0; e < c.p.d; e++) acc += (double)qi[e] * kh[j * c.p.d + e];
          sc[j] = attn_score_mod(&c.p, acc * c.p.scale, h, i, j);
          if (sc[j] > mx) mx = sc[j];
        }
        for (long j = lo; j < hi; j++) sum += exp(sc[j] - mx);
        const double want = hi > lo ? mx + log(sum) : -INFINITY, got = lse[h * c.p.n + i];
        const double e = want == got ? 0 : fabs(got - want);
        if (!(e <= worst)) worst = e;
      }
    CHECK(worst < 1e-4, "lse with modifiers: off by %g", worst);
    free(lse);
    case_free(&c);
    attn_plan_destroy(plan);
  }
  char v[96];
  attn_problem n;
  CHECK(attn_problem_normalize(NULL, &p0, &n) == ATTN_OK, "normalize");
  attn_problem_variant(&n, v, sizeof v);
  CHECK(strcmp(v, "window=33,softcap=4,alibi") == 0, "variant '%s'", v);
  n.softcap = 0.1f, n.window = 0;
  attn_problem_variant(&n, v, sizeof v);
  CHECK(strcmp(v, "softcap=0.1,alibi") == 0, "variant '%s'", v);
  n.page_size = 16, n.varlen = 1;
  attn_problem_variant(&n, v, sizeof v);
  CHECK(strcmp(v, "softcap=0.1,alibi,paged=16,varlen") == 0, "variant '%s'", v);
  n.alibi_slopes = NULL, n.softcap = 0;
  attn_problem_variant(&n, v, sizeof v);
  CHECK(strcmp(v, "paged=16,varlen") == 0, "variant '%s'", v);
  n.page_size = 0, n.varlen = 0;
  attn_problem_variant(&n, v, sizeof v);
  CHECK(strcmp(v, "") == 0, "variant '%s'", v);
  attn_problem bad_layout = p0;
  bad_layout.page_size = -1;
  CHECK(attn_problem_normalize(NULL, &bad_layout, &n) == ATTN_EINVAL, "page_size -1 accepted");
  bad_layout.page_size = 0, bad_layout.varlen = 2;
  CHECK(attn_problem_normalize(NULL, &bad_layout, &n) == ATTN_EINVAL, "varlen 2 accepted");
  /* lowrank says why not */
  p0.algo = ATTN_ALGO_LOWRANK;
  p0.tolerance = 0.1;
  attn_spec lr = attn_spec_default(ATTN_ALGO_LOWRANK, ATTN_TARGET_CPU, ATTN_F32, 16, 1);
  lr.window = lr.softcap = lr.alibi = 1;
  plan = NULL;
  int rc = attn_plan_create_spec(rt, &p0, &lr, 0, "test", &plan);
  CHECK(rc == ATTN_EUNSUPPORTED && !plan && strstr(attn_last_error(rt), "lowrank cannot apply"), "lowrank: %s: %s",
        attn_strerror(rc), attn_last_error(rt));
  attn_plan_destroy(plan);
}

/* The tuned rows' variant: a problem with modifiers gets only a row of its own variant, a dense one a dense row. */
static void put_row(attn_db *db, const char *device, const char *spec, const char *variant) {
  attn_db_meas m;
  memset(&m, 0, sizeof m);
  m.device = device;
  m.spec = spec;
  m.n = m.n_kv = 64, m.d = 16, m.batch = 1, m.heads = m.heads_kv = 2;
  m.dtype = ATTN_F32;
  m.time_ms = 1.0;
  m.reads = m.writes = -1;
  m.status = "ok";
  m.provenance = "measured";
  m.variant = variant;
  CHECK(attn_db_meas_put(db, &m) == ATTN_OK, "put %s [%s]: %s", spec, variant, attn_db_errmsg(db));
}

static void lookup_cases(void) {
  char dir[] = "/tmp/cpu_mods_XXXXXX", path[64], err[256], device[256];
  if (!mkdtemp(dir)) abort();
  snprintf(path, sizeof path, "%s/t.db", dir);
  attn_db *db = NULL;
  CHECK(attn_db_open(path, 1, &db, err, sizeof err) == ATTN_OK, "open %s: %s", path, err);
  if (!db) return;
  attn_device_name(ATTN_TARGET_CPU, device, sizeof device);
  const char *tail = " unroll=0 warps=0 stages=0 arch=- tile=0 feature=taylor degree=0 rank=0 seed=0";
  char dense[256], win[256];
  snprintf(dense, sizeof dense, "flash cpu f32 d=16 br=32 bc=32 causal=0%s", tail);
  snprintf(win, sizeof win, "flash cpu f32 d=16 br=48 bc=16 causal=0%s window=1", tail);
  put_row(db, device, dense, "");
  put_row(db, device, win, "window=8");
  attn_db_close(db);
  attn_runtime *rt = NULL;
  CHECK(attn_open(path, ATTN_TARGET_CPU, &rt) == ATTN_OK, "attn_open %s: %s", path, attn_last_error(NULL));
  const struct { int window; float softcap; int br; const char *origin; } want[] = {
      {0, 0, 32, "tuned"}, {8, 0, 48, "tuned"}, {9, 0, 64, "default"}, {0, 1.0f, 64, "default"}, {8, 1.0f, 64,
      "default"}};
  for (size_t i = 0; rt && i < sizeof want / sizeof want[0]; i++) {
    const attn_problem p0 = {.batch = 1, .heads = 2, .n = 64, .d = 16, .window = want[i].window,
                             .softcap = want[i].softcap};
    attn_problem p;
    attn_spec s;
    char origin[128] = "";
    int rc = attn_problem_normalize(rt, &p0, &p);
    if (rc == ATTN_OK) rc = attn_plan_choose(rt, &p, &s, origin, sizeof origin);
    CHECK(rc == ATTN_OK && s.br == want[i].br && strncmp(origin, want[i].origin, strlen(want[i].origin)) == 0 &&
              s.window == (want[i].window > 0) && s.softcap == (want[i].softcap > 0),
          "window=%d softcap=%g: br=%d (%s), want br=%d (%s)", want[i].window, (double)want[i].softcap, s.br, origin,
          want[i].br, want[i].origin);
  }
  attn_close(rt);
  unlink(path);
  rmdir(dir);
}

/* Spec texts: unchanged without modifiers, the flags round-trip with them. */
static void spec_cases(void) {
  attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, ATTN_F32, 64, 1);
  char txt[512], err[256];
  attn_spec_format(&s, txt, sizeof txt);
  CHECK(strcmp(txt, "flash cpu f32 d=64 br=64 bc=128 causal=1 unroll=0 warps=0 stages=0 arch=- tile=0 "
                    "feature=taylor degree=0 rank=0 seed=0") == 0, "dense spec text changed: '%s'", txt);
  s.window = s.alibi = 1;
  attn_spec_format(&s, txt, sizeof txt);
  CHECK(strstr(txt, "seed=0 window=1 alibi=1") != NULL, "spec text '%s'", txt);
  attn_spec t;
  CHECK(attn_spec_parse(txt, &t, err, sizeof err) == ATTN_OK && t.window == 1 && t.alibi == 1 && t.softcap == 0,
        "parse '%s': %s", txt, err);
  CHECK(attn_spec_parse("flash cpu f32 d=64 br=64 bc=128 causal=1 softcap=2", &t, err, sizeof err) == ATTN_EINVAL,
        "softcap=2 accepted");
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "ref";
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CPU, &rt);
  if (rc != ATTN_OK) {
    fprintf(stderr, "attn_open: %s: %s\n", attn_strerror(rc), attn_last_error(NULL));
    return 1;
  }
  /* CI: two f32 kernels (16-row tiles, so that short and long windows cross tiles at small n): not causal with
   * d_v != d, causal with split-K; the nightly sweep adds the other pairs, f16 and bf16, and the default tiles. */
  const kspec ci[] = {{ATTN_F32, 20, 12, 0, 16, 16, 0, ATTN_ALGO_FLASH},
                      {ATTN_F32, 16, 16, 1, 16, 16, 3, ATTN_ALGO_FLASH}};
  if (strcmp(mode, "ref") == 0) {
    ref_checks();
    bad_checks(rt);
    spec_cases();
    lookup_cases();
  } else if (strcmp(mode, "flash") == 0) {
    for (size_t i = 0; i < sizeof ci / sizeof ci[0]; i++) kernel_cases(rt, &ci[i], 0);
    const kspec sc = {ATTN_F32, 12, 20, 1, 16, 8, 0, ATTN_ALGO_SMALLCACHE};
    kernel_cases(rt, &sc, 0);
    nan_cases(rt, &ci[1]);
    plan_cases(rt);
  } else if (strcmp(mode, "sweep") == 0) {
    const attn_dtype dts[] = {ATTN_F32, ATTN_F16, ATTN_BF16};
    for (int di = 0; di < 3; di++)
      for (int causal = 0; causal < 2; causal++)
        for (int split = 0; split <= 2; split += 2) {
          const kspec small = {dts[di], 24, 40, causal, 16, 16, split, ATTN_ALGO_FLASH},
                      dflt = {dts[di], 64, 64, causal, 64, 128, 0, ATTN_ALGO_FLASH};
          const kspec sc = {dts[di], 24, 40, causal, 16, 8, 0, ATTN_ALGO_SMALLCACHE};
          kernel_cases(rt, &small, 1);
          if (!split) kernel_cases(rt, &dflt, 1);
          if (!split) kernel_cases(rt, &sc, 1);
          nan_cases(rt, &small);
          if (!split) nan_cases(rt, &sc);
        }
  } else {
    fprintf(stderr, "cpu_mods: unknown mode '%s'\n", mode);
    attn_close(rt);
    return 2;
  }
  attn_close(rt);
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
