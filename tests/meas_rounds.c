/* meas_rounds.c: the one rounds loop of tune, bench and the ceilings (timing.h's attn_rounds) and what it stores,
 * fed by a fake measurement source and a fake clock (no kernel runs, nothing is timed): the stop rule with each
 * caller's parameters, the load gate (a round the load made worthless is run again after a wait, bounded, and the
 * clean figure is the one kept), the confirmation pass's choice of figure, and bench's ceilings measured before and
 * after its points (the highest clean one, else flagged). */
#include "check.h"
#include <math.h>
#include <string.h>
#include "measure.h"
#include "peak.h"
#include "timing.h"
#include "attn.h"

/* The fake source: every timed run of side i takes ms[i] (+ jitter[i] on odd repetitions); while `loaded`, the
 * thread waited `steal` of each run for a CPU. The fake clock: sleep_s only adds
 * up, and a wait ends the load when clear_after_waits waits have passed. */
typedef struct fake {
  double ms[4], jitter[4];
  int loaded, clear_after_waits, waits, timed, warm;
  int threads; /* the run delay is the sum over them (0: 1) */
  double steal, slept;
} fake;

static fake *g_fake;

static void fake_sleep(double s) {
  g_fake->slept += s;
  if (++g_fake->waits >= g_fake->clear_after_waits && g_fake->clear_after_waits > 0) g_fake->loaded = 0;
}

static int fake_run(void *user, int side, int timed, double *ms, double *delay) {
  fake *f = user;
  if (!timed) {
    f->warm++;
    *ms = 1, *delay = -1;
    return 0;
  }
  const int k = f->timed++;
  double t = f->ms[side] + ((k / 2) % 2 ? f->jitter[side] : 0);
  if (f->loaded) t *= 2.5; /* the load's own time: what the issue saw, 9.17 ms for 3.67 */
  *ms = t;
  *delay = f->loaded ? f->steal * t * (f->threads > 0 ? f->threads : 1) : 0;
  return 0;
}

static attn_meas_ctx ctx(int reps, double cap_s) {
  attn_meas_ctx c;
  memset(&c, 0, sizeof c);
  c.reps = reps;
  c.rel_tol = ATTN_MEAS_REL_TOL;
  c.cap_s = cap_s;
  c.sleep_s = fake_sleep;
  return c;
}

/* The stop rule with screening's, the finalist round's and bench's parameters. */
static void test_stop_rule(void) {
  fake f = {.ms = {4, 5}};
  g_fake = &f;
  attn_meas_ctx c = ctx(5, 1.0);
  attn_rounds_caps k;
  attn_timing_stats st[2];
  attn_rounds_out o;
  /* steady times, clean: known after the minimum rounds */
  attn_meas_screen_caps(&c, &k);
  CHECK(k.retries == 0, "screening has no load gate");
  CHECK(attn_rounds(&k, 1, fake_run, &f, st, &o) == 0 && o.rounds == 5 && st[0].median_ms == 4, "steady: %d rounds",
        o.rounds);
  /* a spread that never narrows: the cap (1 s of 4 ms runs: 250 of them) ends it */
  f.jitter[0] = 2;
  CHECK(attn_rounds(&k, 1, fake_run, &f, st, &o) == 0 && o.spent_s >= 1.0 && o.spent_s < 1.01, "cap: %g s",
        o.spent_s);
  /* a cap of 0 (a wrong kernel): screening's 3 repetitions */
  k.cap_s = 0;
  CHECK(attn_rounds(&k, 1, fake_run, &f, st, &o) == 0 && o.rounds == 3, "cap 0: %d rounds", o.rounds);
  /* runs over 2 s: 3 rounds */
  f.ms[0] = 2500, f.jitter[0] = 0;
  attn_meas_screen_caps(&c, &k);
  CHECK(attn_rounds(&k, 1, fake_run, &f, st, &o) == 0 && o.rounds == 3, "long runs: %d rounds", o.rounds);
  /* the finalist round: the cap never cuts it below --reps rounds; one warm-up run per side */
  f.ms[0] = 4, f.jitter[0] = 2, f.warm = 0;
  attn_meas_final_caps(&c, 0.01, &k);
  CHECK(attn_rounds(&k, 2, fake_run, &f, st, &o) == 0 && o.rounds == 5 && f.warm == 2, "finalists at the cap: %d "
        "rounds, %d warm-up runs", o.rounds, f.warm);
  /* some clean repetitions come: the rounds wait for 5 of them while they fit before the cap */
  attn_meas_screen_caps(&c, &k);
  k.cap_s = 10;
  f.ms[0] = 4, f.jitter[0] = 0;
  f.loaded = 1, f.steal = 0.1, f.clear_after_waits = 0;
  o.rounds = 0;
  int r = attn_rounds(&k, 1, fake_run, &f, st, &o);
  CHECK(r == 0 && o.rounds == 5 && strcmp(st[0].method, "corrected") == 0, "all delayed: %d rounds, %s", o.rounds,
        st[0].method);
  f.loaded = 0;
}

/* The load gate of the finalist round: a noisy round, then a clean one after a wait; the clean figures are kept. */
static void test_gate(void) {
  fake f = {.ms = {3.67, 4.8}, .loaded = 1, .steal = 0.6, .clear_after_waits = 1};
  g_fake = &f;
  attn_meas_ctx c = ctx(5, 1.0);
  attn_rounds_caps k;
  attn_timing_stats st[2];
  attn_rounds_out o;
  attn_meas_final_caps(&c, 4.0, &k);
  CHECK(k.retries > 0 && k.retry_budget_s == 2.0, "the finalist round has a gate within half its cap");
  CHECK(attn_rounds(&k, 2, fake_run, &f, st, &o) == 0, "rounds");
  CHECK(o.attempts == 2 && f.waits == 1 && fabs(o.waited_s - ATTN_MEAS_RETRY_WAIT_S) < 1e-12,
        "one retry after one wait: %d attempts, %d waits, %g s", o.attempts, f.waits, o.waited_s);
  CHECK(!o.worthless && o.stolen == 0, "the kept attempt is clean: stolen %g", o.stolen);
  CHECK(fabs(st[0].median_ms - 3.67) < 1e-9 && fabs(st[1].median_ms - 4.8) < 1e-9,
        "the clean round's figures: %g %g", st[0].median_ms, st[1].median_ms);
  /* the finalist choice now sees the faster one: 23% faster than the default */
  CHECK(!strcmp(st[0].method, "clean") && !strcmp(st[1].method, "clean"), "clean estimates");

  /* the load never clears: bounded retries and waits, then the least disturbed attempt, flagged worthless */
  fake g = {.ms = {3.67, 4.8}, .loaded = 1, .steal = 0.6};
  g_fake = &g;
  attn_meas_final_caps(&c, 8.0, &k);
  CHECK(attn_rounds(&k, 2, fake_run, &g, st, &o) == 0, "rounds");
  CHECK(o.attempts == 1 + ATTN_MEAS_RETRIES && o.worthless && o.waited_s <= k.retry_budget_s,
        "worthless throughout: %d attempts, waited %g s", o.attempts, o.waited_s);
  /* a small budget: the waits stay within it */
  g.waits = 0, g.slept = 0;
  attn_meas_final_caps(&c, 1.2, &k);
  CHECK(attn_rounds(&k, 2, fake_run, &g, st, &o) == 0 && o.attempts == 2 && g.slept <= 0.6,
        "budget 0.6 s: %d attempts, slept %g s", o.attempts, g.slept);
  /* one core of two kept busy by another process (a quarter of the threads' time) is not worthless: no retry */
  fake h = {.ms = {3.67, 4.8}, .loaded = 1, .steal = 0.3};
  g_fake = &h;
  attn_meas_final_caps(&c, 4.0, &k);
  CHECK(attn_rounds(&k, 2, fake_run, &h, st, &o) == 0 && o.attempts == 1 && h.waits == 0, "30%%: %d attempts",
        o.attempts);
  /* clean estimates are trusted whatever the others' waiting */
  attn_timing_stats cl[2] = {{.method = "clean"}, {.method = "clean"}};
  CHECK(!attn_rounds_worthless(cl, 2, 0.9, 0), "clean estimates are never worthless");
  cl[1].method = "corrected";
  CHECK(attn_rounds_worthless(cl, 2, 0.9, 0) && !attn_rounds_worthless(cl, 2, -1, 0), "corrected under load");
}

/* The confirmation pass: which figure a finalist row keeps. */
static void test_confirm(void) {
  attn_meas_result r;
  memset(&r, 0, sizeof r);
  snprintf(r.status, sizeof r.status, "ok");
  r.ci_rel = 0.01;
  r.time_ms = 4.2;
  CHECK(attn_meas_confirm_keeps(14.5, 0.02, &r), "a lower confirmation replaces the round's 14.5 ms");
  r.time_ms = 9.17;
  CHECK(attn_meas_confirm_keeps(3.67, 0.01, &r), "a higher one beyond the noise, clean: the confirmation's");
  r.worthless = 1;
  CHECK(!attn_meas_confirm_keeps(3.67, 0.01, &r), "a higher one from a worthless attempt: the round's");
  r.worthless = 0;
  r.time_ms = 3.70;
  CHECK(!attn_meas_confirm_keeps(3.67, 0.01, &r), "higher within the noise: the round's (the lower)");
  r.time_ms = 9.17;
  CHECK(!attn_meas_confirm_keeps(3.67, -1, &r), "the round's noise unknown: only a lower figure replaces it");
  snprintf(r.status, sizeof r.status, "error");
  r.time_ms = 1;
  CHECK(!attn_meas_confirm_keeps(3.67, 0.01, &r), "a failed confirmation changes nothing");
}

/* bench's ceilings, measured before and after the points: the highest clean one, else the highest, flagged. */
static void test_peak_merge(void) {
  attn_peak a = {.fma_gflops = 100, .fma_under_load = 1, .read_gbs = 20, .read_under_load = 0, .measurements = 1,
                 .fma_isa = "avx2+fma"};
  attn_peak b = {.fma_gflops = 90, .fma_under_load = 0, .read_gbs = 25, .read_under_load = 1, .measurements = 1,
                 .fma_isa = "avx512f"};
  attn_peak_merge(&a, &b);
  CHECK(a.fma_gflops == 90 && !a.fma_under_load && !strcmp(a.fma_isa, "avx512f"), "a clean FMA peak over one under "
        "load: %g %d", a.fma_gflops, a.fma_under_load);
  CHECK(a.read_gbs == 20 && !a.read_under_load, "a clean bandwidth kept: %g", a.read_gbs);
  CHECK(a.measurements == 2, "measurements");
  attn_peak c = {.fma_gflops = 50, .fma_under_load = 1, .read_gbs = -1, .measurements = 1};
  attn_peak d = {.fma_gflops = 70, .fma_under_load = 1, .read_gbs = 12, .read_under_load = 1, .measurements = 1};
  attn_peak_merge(&c, &d);
  CHECK(c.fma_gflops == 70 && c.fma_under_load && c.read_gbs == 12 && c.read_under_load,
        "both under load: the highest, still flagged");
  attn_peak e = {.fma_gflops = 80, .measurements = 1}, f = {.fma_gflops = 95, .measurements = 1};
  attn_peak_merge(&e, &f);
  CHECK(e.fma_gflops == 95 && !e.fma_under_load, "both clean: the highest");
}

/* The finalist round itself (attn_meas_finalists on a real runtime and real plans, the timed runs from the fake
 * source): a noisy round, a wait, a clean round; the figures it hands the store are the clean round's. */
static void test_finalists(void) {
  attn_runtime *rt = NULL;
  if (attn_open(NULL, ATTN_TARGET_CPU, &rt) != ATTN_OK) {
    CHECK(0, "attn_open: %s", attn_last_error(NULL));
    return;
  }
  attn_problem p = {.batch = 1, .heads = 1, .n = 8, .d = 8, .dtype = ATTN_F32};
  attn_meas_ctx c;
  char err[256];
  if (attn_meas_init(&c, rt, &p, 5, err, sizeof err) != ATTN_OK) {
    CHECK(0, "attn_meas_init: %s", err);
    attn_close(rt);
    return;
  }
  fake f = {.ms = {3.67, 4.8}, .loaded = 1, .steal = 0.6, .clear_after_waits = 1, .threads = rt->threads};
  g_fake = &f;
  c.sleep_s = fake_sleep;
  c.run_hook = fake_run;
  c.run_hook_user = &f;
  attn_spec s[2];
  attn_plan_default(rt, &c.p, ATTN_ALGO_FLASH, &s[0]);
  s[1] = s[0]; /* one kernel twice: one compile */
  attn_meas_result out[2];
  int rc = attn_meas_finalists(&c, s, 2, 4.0, out);
  CHECK(rc == ATTN_OK && !strcmp(out[0].status, "ok") && !strcmp(out[1].status, "ok"), "finalists: %d %s %s", rc,
        out[0].message, out[1].message);
  CHECK(f.waits == 1 && out[0].attempts == 2 && !out[0].worthless, "one wait, two attempts: %d %d", f.waits,
        out[0].attempts);
  CHECK(fabs(out[0].time_ms - 3.67) < 1e-9 && fabs(out[1].time_ms - 4.8) < 1e-9 && out[0].reps >= 5,
        "the clean round's figures are the ones stored: %g %g", out[0].time_ms, out[1].time_ms);
  /* the confirmation pass then: a confirmation that disagrees beyond the noise replaces the round's figure */
  CHECK(attn_meas_confirm_keeps(9.17, out[0].ci_rel, &out[0]), "9.17 ms stored, 3.67 ms confirmed clean");
  attn_meas_free(&c);
  attn_close(rt);
}

int main(void) {
  test_stop_rule();
  test_gate();
  test_confirm();
  test_peak_merge();
  test_finalists();
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  printf("%d checks\n", checks);
  return failures ? 1 : 0;
}
