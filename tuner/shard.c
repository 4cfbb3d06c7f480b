/* shard.c: the partition behind `tune --shard K/N` (shard.h). */
#include "shard.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A decimal count without sign or spaces, at most ATTN_SHARD_MAX; -1 when it is not one. */
static int count_of(const char *s, size_t len) {
  if (len == 0 || len > 6) return -1;
  int v = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

int attn_shard_parse(const char *s, int *k, int *n, char *err, size_t errlen) {
  const char *slash = s ? strchr(s, '/') : NULL;
  int kk = slash ? count_of(s, (size_t)(slash - s)) : -1, nn = slash ? count_of(slash + 1, strlen(slash + 1)) : -1;
  if (kk < 0 || nn < 0 || nn > ATTN_SHARD_MAX) {
    snprintf(err, errlen, "--shard %s: expected K/N, this part K of N parts (1 <= K <= N <= %d), e.g. 1/4", s ? s : "",
             ATTN_SHARD_MAX);
    return -1;
  }
  if (nn == 0) {
    snprintf(err, errlen, "--shard %s: N, the number of parts, must be at least 1", s);
    return -1;
  }
  if (kk == 0 || kk > nn) {
    snprintf(err, errlen, "--shard %s: K counts the parts from 1 to N (1..%d)", s, nn);
    return -1;
  }
  *k = kk;
  *n = nn;
  return 0;
}

double attn_shard_cost(int n, int n_kv, int d, int dv, int causal) {
  /* 2^26: the work of an n = n_kv = 1024, d = 64 problem, about what compiling and checking its candidates costs;
   * Q K^T is d deep and P V d_v wide (dv 0: d) */
  return (double)n * n_kv * (d + (dv > 0 ? dv : d)) * 0.5 * (causal ? 0.5 : 1.0) + 67108864.0;
}

int attn_shard_assign(const double *cost, int count, int n, int *owner) {
  if (count <= 0) return 0;
  int *order = malloc(sizeof *order * (size_t)count);
  double *load = calloc((size_t)n, sizeof *load);
  if (!order || !load) {
    free(order);
    free(load);
    return -1;
  }
  /* largest first; equal costs in the command's order (an insertion sort: stable, and the lists are short) */
  for (int i = 0; i < count; i++) {
    int j = i;
    for (; j > 0 && cost[order[j - 1]] < cost[i]; j--) order[j] = order[j - 1];
    order[j] = i;
  }
  for (int i = 0; i < count; i++) {
    int best = 0;
    for (int p = 1; p < n; p++)
      if (load[p] < load[best]) best = p;
    load[best] += cost[order[i]];
    owner[order[i]] = best + 1;
  }
  free(order);
  free(load);
  return 0;
}
