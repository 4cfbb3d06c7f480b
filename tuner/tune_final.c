/* tune_final.c: a measured problem's finalist round, and the run's closing confirmation pass. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "finalist.h"
#include "tune.h"

/* How a measurement's time was taken, onto the evaluation that carries it to the store and the strategy. */
void attn_tune_take_timing(attn_eval *e, const attn_meas_result *r) {
  e->time_ms = r->time_ms;
  e->reps = r->reps;
  e->clean = r->clean;
  e->iqr_ms = r->iqr_ms;
  e->ci_rel = r->ci_rel;
  e->load = r->load;
}

static int cmp_time(const void *a, const void *b, void *ctx) {
  const attn_eval *m = ctx;
  double x = m[*(const int *)a].time_ms, y = m[*(const int *)b].time_ms;
  return (x > y) - (x < y);
}

/* The finalist round of one measured problem (finalist.h): the ATTN_FINALISTS fastest exact configurations the
 * strategy found and the untuned default, re-timed interleaved; their rows get the round's times and the winner is
 * marked chosen. A rerun that measured nothing new keeps the stored choice. Fills *best and *why with the winner. */
int attn_tune_finalist_round(tune_state *ts, attn_tuner *tu, attn_spec *best, attn_eval *best_eval, char *why,
                             size_t wlen) {
  char err[512];
  attn_spec specs[ATTN_FINALISTS + 1];
  attn_eval evals[ATTN_FINALISTS + 1];
  int count = 0, def = -1;
  /* the default: from this run's memory when the strategy evaluated it, else evaluated now (checked, counted) */
  const attn_spec ds = ts->default_cfg;
  int di = attn_space_find(tu->space, &ds);
  attn_eval de;
  if (di >= 0 && tu->memo && tu->memo_have[di]) {
    de = tu->memo[di];
  } else {
    ts->total++;
    attn_tune_eval(tu, &ds, &de);
  }
  if (attn_tune_stop || ts->db_error) return -1;
  if (strcmp(de.status, "ok") == 0) {
    de.is_default = 1;
    specs[count] = ds;
    evals[count] = de;
    def = count++;
  }
  /* the fastest exact candidates */
  int *idx = malloc(sizeof *idx * (size_t)(tu->space->count > 0 ? tu->space->count : 1)), ni = 0;
  if (!idx) return -1;
  for (int i = 0; tu->memo && i < tu->space->count; i++)
    if (tu->memo_have[i] && tu->memo[i].ok && tu->space->cfg[i].algo != ATTN_ALGO_LOWRANK && i != di) idx[ni++] = i;
  qsort_r(idx, (size_t)ni, sizeof *idx, cmp_time, tu->memo);
  for (int k = 0; k < ni && count < ATTN_FINALISTS + 1 && (count - (def >= 0)) < ATTN_FINALISTS; k++) {
    specs[count] = tu->space->cfg[idx[k]];
    evals[count] = tu->memo[idx[k]];
    evals[count].is_default = 0;
    count++;
  }
  free(idx);
  if (count == 0) return -1;
  int stored_choice = -1;
  for (int i = 0; i < count; i++)
    if (evals[i].chosen) stored_choice = i;
  if (!ts->o->remeasure && ts->fresh == 0 && stored_choice >= 0) {
    *best = specs[stored_choice];
    *best_eval = evals[stored_choice];
    snprintf(why, wlen, "%s", "the stored finalist round's choice (nothing new measured)");
    return 0;
  }
  attn_meas_result res[ATTN_FINALISTS + 1];
  attn_finalist f[ATTN_FINALISTS + 1];
  int pick = 0;
  if (count == 1) {
    snprintf(why, wlen, "%s", def == 0 ? "the default is the only correct configuration" : "the only candidate");
  } else {
    if (attn_meas_finalists(&ts->meas, specs, count, 4 * ts->o->cap_s, res) != ATTN_OK) {
      for (int i = 0; i < count; i++)
        if (strcmp(res[i].status, "ok")) fprintf(stderr, "attntune tune: finalist round: %s\n", res[i].message);
      return -1;
    }
    for (int i = 0; i < count; i++)
      f[i] = (attn_finalist){.median_ms = res[i].time_ms, .ci_rel = res[i].ci_rel, .io = evals[i].io,
                             .is_default = i == def, .ok = strcmp(res[i].status, "ok") == 0};
    pick = attn_finalist_pick(f, count, why, wlen);
    if (pick < 0) return -1;
    if (!ts->tty) {
      printf("  finalists (%d interleaved rounds):", res[0].reps);
      for (int i = 0; i < count; i++) {
        char sum[256];
        attn_spec_summary(&specs[i], sum, sizeof sum);
        printf("%s %s%s %.4g ms", i ? ";" : "", i == def ? "[default] " : "", sum, res[i].time_ms);
      }
      printf("\n");
    }
    /* the round's times replace the screening ones: measured side by side, they are the comparable ones */
    for (int i = 0; i < count; i++) {
      attn_tune_take_timing(&evals[i], &res[i]);
      evals[i].final = 1;
      if (attn_store_put(ts->store, &ts->prob, &specs[i], ts->provenance, &evals[i], err, sizeof err) != ATTN_OK) {
        attn_tune_db_failed(ts, err);
        return -1;
      }
    }
  }
  if (attn_store_choose(ts->store, &ts->prob, &specs[pick], ts->provenance, err, sizeof err) != ATTN_OK) {
    attn_tune_db_failed(ts, err);
    return -1;
  }
  *best = specs[pick];
  *best_eval = evals[pick];
  best_eval->chosen = 1;
  if (count > 1) {
    if (ts->nconfirm == ts->confirm_cap) {
      int cap = ts->confirm_cap ? 2 * ts->confirm_cap : 16;
      confirm_item *c = realloc(ts->confirm, sizeof *c * (size_t)cap);
      if (!c) return 0; /* the confirmation is a refinement: without memory for it the round's result stands */
      ts->confirm = c;
      ts->confirm_cap = cap;
    }
    confirm_item *c = &ts->confirm[ts->nconfirm++];
    c->p = ts->prob;
    c->backward = ts->backward;
    c->count = 0;
    c->spec[c->count] = specs[pick];
    c->eval[c->count++] = evals[pick];
    if (def >= 0 && def != pick) {
      c->spec[c->count] = specs[def];
      c->eval[c->count++] = evals[def];
    }
  }
  return 0;
}

/* The confirmation pass: at the end of the run, each problem's chosen configuration and default are timed once more,
 * interleaved. A slowdown of the whole machine (another guest on the host, a frequency drop) that the run delay does
 * not show slows every configuration of a round alike: the decision stands, but the stored times would carry it.
 * A row takes the confirmation's figure when it is lower, or higher beyond the noise of both
 * (attn_meas_confirm_keeps). */
void attn_tune_confirm_pass(tune_state *ts) {
  if (ts->nconfirm == 0 || attn_tune_stop || ts->db_error) return;
  printf("confirmation: timing the chosen and default configurations of %d problem%s again\n", ts->nconfirm,
         ts->nconfirm > 1 ? "s" : "");
  char err[512];
  for (int k = 0; k < ts->nconfirm && !attn_tune_stop && !ts->db_error; k++) {
    confirm_item *c = &ts->confirm[k];
    ts->prob = c->p;
    ts->backward = c->backward;
    attn_store_set_backward(ts->store, c->backward);
    if (attn_meas_init(&ts->meas, ts->rt, &c->p, ts->o->reps, err, sizeof err) != ATTN_OK) continue;
    ts->meas.cap_s = ts->o->cap_s;
    ts->meas.backward = c->backward;
    attn_meas_result res[2];
    int rc = attn_meas_finalists(&ts->meas, c->spec, c->count, 2 * ts->o->cap_s, res);
    attn_meas_free(&ts->meas);
    if (rc != ATTN_OK) continue;
    char kv[32] = "";
    if (c->p.n_kv != c->p.n) snprintf(kv, sizeof kv, " n_kv=%d", c->p.n_kv);
    char dvs[24] = "";
    if (c->p.d_v && c->p.d_v != c->p.d) snprintf(dvs, sizeof dvs, " d_v=%d", c->p.d_v);
    printf("  %sn=%d%s d=%d%s causal=%d:", c->backward ? "bwd " : "", c->p.n, kv, c->p.d, dvs, c->p.causal);
    for (int i = 0; i < c->count; i++) {
      attn_eval *e = &c->eval[i];
      const int lower = attn_meas_confirm_keeps(e->time_ms, e->ci_rel, &res[i]);
      printf(" %s %.4g ms then %.4g ms%s", i ? "; default" : "chosen", e->time_ms, res[i].time_ms,
             lower ? " (kept the later)" : "");
      if (!lower) continue;
      attn_tune_take_timing(e, &res[i]);
      /* a put replaces the row: the choice is marked again */
      if (attn_store_put(ts->store, &c->p, &c->spec[i], ts->provenance, e, err, sizeof err) != ATTN_OK ||
          (i == 0 && attn_store_choose(ts->store, &c->p, &c->spec[0], ts->provenance, err, sizeof err) != ATTN_OK)) {
        attn_tune_db_failed(ts, err);
        break;
      }
    }
    printf("\n");
    fflush(stdout);
  }
}
