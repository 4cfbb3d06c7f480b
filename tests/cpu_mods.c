/* cpu_mods: the score modifiers of attn.h (window, softcap, ALiBi) on the CPU.
 * "ref": the fp64 reference (runtime/reference.c) against a direct reading of attn.h's definitions (a mask per
 * (i, j), the score's steps in order), a window that hides nothing equal to none, and the refusals of bad modifiers
 * (one-line errors, *out NULL, nothing changed). */
#include <string.h>
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
          for (long c = 0; c < d; c++)
            acc += (double)q[((b * p->heads + h) * n + i) * d + c] * (double)k[((b * p->heads_kv + hk) * nk + j) * d + c];
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
  p = good, p.window = 8;
  attn_plan *plan = SENTINEL;
  int rc = attn_plan_create_backward(rt, &p, &plan);
  CHECK(rc == ATTN_EUNSUPPORTED && plan == NULL, "backward with a window: %s", attn_strerror(rc));
  CHECK(strstr(attn_last_error(rt), "window, softcap or ALiBi"), "backward: '%s'", attn_last_error(rt));
  /* the refusals leave the runtime working */
  p = good;
  plan = NULL;
  rc = attn_plan_create(rt, &p, &plan);
  CHECK(rc == ATTN_OK, "a good problem after the refusals: %s: %s", attn_strerror(rc), attn_last_error(rt));
  attn_plan_destroy(plan);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "ref";
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CPU, &rt);
  if (rc != ATTN_OK) {
    fprintf(stderr, "attn_open: %s: %s\n", attn_strerror(rc), attn_last_error(NULL));
    return 1;
  }
  if (strcmp(mode, "ref") == 0) {
    ref_checks();
    bad_checks(rt);
  } else {
    fprintf(stderr, "cpu_mods: unknown mode '%s'\n", mode);
    attn_close(rt);
    return 2;
  }
  attn_close(rt);
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
