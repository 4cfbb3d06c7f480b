/* tune_report.c: tune's progress: the tty's one line (fastest so far, ETA), else a line per evaluation. */
#include <stdio.h>
#include <string.h>
#include "tune.h"

void attn_tune_progress(tune_state *ts, const attn_spec *s, const attn_eval *e, int resumed) {
  char sum[256];
  attn_spec_summary(s, sum, sizeof sum);
  if (e->ok && (ts->fastest_ms <= 0 || e->time_ms < ts->fastest_ms)) {
    ts->fastest_ms = e->time_ms;
    snprintf(ts->fastest_line, sizeof ts->fastest_line, "%.200s %.4g ms", sum, e->time_ms);
  }
  if (ts->tty) {
    double per = ts->done - ts->resumed > 0 ? ts->busy_s / (ts->done - ts->resumed) : 0;
    double eta = per * (ts->total - ts->done);
    fprintf(stderr, "\r\033[K[%d/%d] fastest: %s | ETA %.0f s", ts->done, ts->total,
            ts->fastest_line[0] ? ts->fastest_line : "-", eta);
    fflush(stderr);
  } else {
    char io[64] = "", tm[48] = "", er[48] = "";
    if (e->time_ms > 0) snprintf(tm, sizeof tm, " %.4g ms", e->time_ms);
    if (e->io >= 0) snprintf(io, sizeof io, " io=%.0f", e->io);
    if (e->error >= 0) snprintf(er, sizeof er, " err=%.2g", e->error);
    char kv[32] = "", st[64] = "";
    if (ts->prob.n_kv && ts->prob.n_kv != ts->prob.n) snprintf(kv, sizeof kv, " n_kv=%d", ts->prob.n_kv);
    if (e->reps > 0 && e->time_ms > 0)
      snprintf(st, sizeof st, " (%d reps, iqr %.1f%%)", e->reps, 100 * e->iqr_ms / e->time_ms);
    printf("[%d/%d] %sn=%d%s %s: %s%s%s%s%s%s\n", ts->done, ts->total, ts->backward ? "bwd " : "", ts->prob.n, kv,
           sum, e->status, tm, st, io, er, resumed ? " (stored before)" : "");
    if (!e->ok && e->message[0]) printf("    %.*s\n", (int)strcspn(e->message, "\n"), e->message);
    fflush(stdout);
  }
}
