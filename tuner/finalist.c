/* finalist.c: the finalist round's rule (finalist.h). */
#include "finalist.h"
#include <math.h>
#include <stdio.h>
#include "db.h"

static double io_key(double io) { return io >= 0 ? io : INFINITY; }

int attn_finalist_pick(const attn_finalist *f, int count, char *why, size_t len) {
  int def = -1;
  for (int i = 0; i < count; i++)
    if (f[i].ok && f[i].is_default && def < 0) def = i;
  /* Eligible: the default, and whoever beats it beyond the noise of both medians (or everyone, without a default). */
  double margin = 0;
  int eligible[64], ne = 0;
  for (int i = 0; i < count && ne < 64; i++) {
    if (!f[i].ok || !(f[i].median_ms > 0)) continue;
    if (def >= 0 && i != def) {
      double m = f[i].ci_rel + f[def].ci_rel;
      if (!(m >= ATTN_FINAL_MIN_MARGIN)) m = ATTN_FINAL_MIN_MARGIN; /* also NaN/INF-safe: unknown noise is not 0 */
      if (!(f[i].median_ms < f[def].median_ms * (1 - m))) continue;
      if (m > margin) margin = m;
    }
    eligible[ne++] = i;
  }
  if (ne == 0) {
    if (why && len) snprintf(why, len, "no finalist ran");
    return -1;
  }
  double tmin = INFINITY;
  for (int k = 0; k < ne; k++)
    if (f[eligible[k]].median_ms < tmin) tmin = f[eligible[k]].median_ms;
  int best = -1;
  for (int k = 0; k < ne; k++) {
    int i = eligible[k];
    if (f[i].median_ms > ATTN_DB_TIE_FACTOR * tmin) continue;
    if (best < 0 || io_key(f[i].io) < io_key(f[best].io) ||
        (io_key(f[i].io) == io_key(f[best].io) && f[i].median_ms < f[best].median_ms))
      best = i;
  }
  if (why && len) {
    if (def < 0)
      snprintf(why, len, "no default to compare with; fastest of %d (ties within %.0f%% to fewer transfers)", ne,
               (ATTN_DB_TIE_FACTOR - 1) * 100);
    else if (best == def && ne == 1)
      snprintf(why, len, "default kept: no configuration beat it beyond the noise (at least %.0f%%)",
               ATTN_FINAL_MIN_MARGIN * 100);
    else if (best == def)
      snprintf(why, len, "default kept: within %.0f%% of the fastest and moves fewer entries",
               (ATTN_DB_TIE_FACTOR - 1) * 100);
    else
      snprintf(why, len, "%.1f%% faster than the default (noise %.1f%%)",
               (1 - f[best].median_ms / f[def].median_ms) * 100, margin * 100);
  }
  return best;
}
