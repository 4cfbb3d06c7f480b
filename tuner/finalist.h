/* finalist.h: the decision of the finalist round. The best few configurations of a problem and its untuned default,
 * re-timed interleaved in one process, compete; a configuration replaces the default only when it is faster beyond
 * the noise of both medians, and among those that do (and the default) the tie rule of db.h picks: the fastest, except
 * that of those within ATTN_DB_TIE_FACTOR of it the one that moves the fewest entries wins. */
#ifndef ATTN_FINALIST_H
#define ATTN_FINALIST_H

#include <stddef.h>

#define ATTN_FINALISTS 3          /* screened configurations that enter the round, besides the default */
#define ATTN_FINAL_MIN_MARGIN 0.02 /* the least relative win that replaces the default, whatever the noise says */

typedef struct attn_finalist {
  double median_ms;  /* from the round */
  double ci_rel;     /* relative half-width of that median's 95% interval */
  double io;         /* entries moved; < 0 unknown (counts as more than any known) */
  int is_default;    /* the untuned default (at most one) */
  int ok;            /* timed in the round; others never win */
} attn_finalist;

/* The index of the winner, or -1 when none is ok. why (may be NULL) gets one line: "default kept: ...",
 * "beats the default by 12% (noise 3%)", ... */
int attn_finalist_pick(const attn_finalist *f, int count, char *why, size_t len);

#endif
