/* tune_model.c: the performance model's evaluations and the --compiled re-ranking of stored model rows. */
#include <stdio.h>
#include <string.h>
#include "model.h"
#include "model_sm90.h"
#include "tune.h"

/* In a model row's log: its registers are the compiled kernel's */
#define MODEL_PTXAS "from ptxas"

/* A stored model row ranked by estimated registers, where the compiled kernel's are known now (--compiled, or stored
 * by an earlier one): to be ranked again with them, and the row replaced. */
int attn_tune_model_stale(const tune_state *ts, const attn_spec *s, const attn_eval *e) {
  attn_kernel_res kr0;
  return ts->model && ts->kres && !ts->backward && s->impl != ATTN_IMPL_WGMMA && !strstr(e->message, MODEL_PTXAS) &&
         attn_kres_get(ts->kres, s, &kr0) == 0;
}

/* The model's evaluation of s for the problem in ts->prob, into *e (cleared by the caller). */
void attn_tune_model_eval(tune_state *ts, const attn_spec *s, attn_eval *e) {
  char err[512];
  attn_model_result m;
  attn_kernel_res kr;
  /* the compiled resources are the forward kernel's (keyed by spec text): the backward's model estimates its own */
  /* (model_sm90.c takes none: setmaxnreg, not ptxas's count, sets what its consumers hold) */
  const int known = !ts->backward && s->impl != ATTN_IMPL_WGMMA && ts->kres && attn_kres_get(ts->kres, s, &kr) == 0;
  /* flash_sm90.cu (impl=wgmma) has a model of its own: wgmma's rate, the softmax overlapped, one block per SM */
  /* a serving layout (--page-size, --varlen) ranks its own kernel: flash.cu with ATTN_LAYOUT, --varlen's sequences */
  const tune_opts *o = ts->o;
  const attn_model_layout lay = {.page_size = ts->prob.page_size, .lq = o ? o->vl_q : NULL, .lk = o ? o->vl_kv : NULL,
                                 .nseq = ts->prob.varlen && o ? o->nvl : 0};
  const int serve = !ts->backward && (lay.page_size > 0 || lay.nseq > 0);
  const int rc = ts->backward ? attn_model_time_bwd(ts->gpu, &ts->prob, s, &m, err, sizeof err)
                 : serve ? attn_model_time_layout(ts->gpu, &ts->prob, s, known ? &kr : NULL, &lay, &m, err, sizeof err)
                 : s->impl == ATTN_IMPL_WGMMA ? attn_model_sm90_time(ts->gpu, &ts->prob, s, &m, err, sizeof err)
                              : attn_model_time_res(ts->gpu, &ts->prob, s, known ? &kr : NULL, &m, err, sizeof err);
  if (rc == ATTN_OK) {
    snprintf(e->status, sizeof e->status, "ok");
    /* where the registers came from, kept in the row's log: a later run with the compiled ones ranks it again */
    if (known) snprintf(e->message, sizeof e->message, "%d registers " MODEL_PTXAS " (%s)", m.registers,
                        ts->kres->compiler);
    else snprintf(e->message, sizeof e->message, "%d registers estimated", m.registers);
    snprintf(e->bound, sizeof e->bound, "%s", m.bound);
    e->time_ms = m.time_ms;
    e->io = (double)(m.reads + m.writes);
    e->reads = (long long)m.reads;
    e->writes = (long long)m.writes;
    e->ok = 1;
  } else {
    snprintf(e->status, sizeof e->status, "invalid");
    snprintf(e->message, sizeof e->message, "%.480s%s", err, known ? " (" MODEL_PTXAS ")" : "");
  }
}

/* Its stored model row, where one says "ok" (ranked by estimated registers, or by an older space), is stored
 * "invalid" with the reason: the database's best never names what the compiled kernel rules out. */
void attn_tune_on_pruned(void *ctx, const attn_spec *c, const char *why) {
  prune_ctx *pc = ctx;
  tune_state *ts = pc->ts;
  attn_eval e;
  char err[512];
  const int found = attn_store_find(ts->store, &pc->p, c, "model", &e, err, sizeof err);
  if (found < 0) attn_tune_db_failed(ts, err);
  if (found <= 0 || strcmp(e.status, "ok") != 0) return;
  memset(&e, 0, sizeof e);
  e.error = e.io = -1;
  e.reads = e.writes = -1;
  e.iqr_ms = e.ci_rel = e.load = -1;
  snprintf(e.status, sizeof e.status, "invalid");
  snprintf(e.message, sizeof e.message, "%.400s (ruled out of the space now, registers " MODEL_PTXAS ")", why);
  if (attn_store_put(ts->store, &pc->p, c, "model", &e, err, sizeof err) != ATTN_OK) attn_tune_db_failed(ts, err);
  else ts->invalidated++;
}
