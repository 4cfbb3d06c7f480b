/* rule.c: attn_db_meas_better, the tuner's rule for two rows with one key (import, merge). Pure C on the struct,
 * no SQL: callers hold both rows already (meas_foreach / meas_exists / a parsed file). */
#include <string.h>
#include "db.h"

static const char *str(const char *s) { return s ? s : ""; }

/* Rank of a status: 2 ok; 1 the kernel's own verdict (it compiled and ran, or was refused, on its merits);
 * 0 an environmental failure (the machine, the driver, a timeout), which says nothing about the kernel. */
static int status_rank(const char *s) {
  if (strcmp(s, "ok") == 0) return 2;
  if (strcmp(s, "wrong") == 0 || strcmp(s, "compile_error") == 0 || strcmp(s, "invalid") == 0) return 1;
  return 0; /* error, launch_error, skipped (and anything unknown: never preferred over a verdict) */
}

/* The lookup and the `best` view use only ok rows with time_ms > 0: an ok row without a time is not usable, so
 * it must not win by "lower time" (0 < any real time). NaN fails the test too. */
static int has_time(const attn_db_meas *m) { return m->time_ms > 0; }

int attn_db_meas_better(const attn_db_meas *a, const attn_db_meas *b) {
  if (!a || !b) return a != NULL;
  int ra = status_rank(str(a->status)), rb = status_rank(str(b->status));
  if (ra != rb) return ra > rb;
  if (ra == 2) {
    if (has_time(a) != has_time(b)) return has_time(a);
    /* the finalist round times interleaved with the default: a fairer number than a screening time */
    if ((a->final != 0) != (b->final != 0)) return a->final != 0;
    /* interference only adds time: of two medians of one kernel on one problem the lower is the truer */
    if (has_time(a) && a->time_ms != b->time_ms) return a->time_ms < b->time_ms;
  }
  /* ISO-8601 text orders as time; equal (a re-import of the same row) keeps b. Only as much as created_buf holds is
   * compared: attn_db_meas_exists's copy of a stored row ends there, and a longer text (a timestamp is 24 characters)
   * would otherwise be newer than its own stored copy, so that a re-import replaced it */
  return strncmp(str(a->created), str(b->created), sizeof a->created_buf - 1) > 0;
}
