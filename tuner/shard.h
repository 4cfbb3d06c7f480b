/* shard.h: `attntune tune --shard K/N`: the problems of one command split into N disjoint parts, each problem whole
 * (its search, finalist round and stored rows) in exactly one part, so that the N parts' databases merged hold the
 * rows one unsharded run would (docs/tuning.md). */
#ifndef ATTN_SHARD_H
#define ATTN_SHARD_H

#include <stddef.h>

#define ATTN_SHARD_MAX 100000

/* "K/N" with 1 <= K <= N <= ATTN_SHARD_MAX, decimal, nothing else: 0 with *k, *n; -1 with a one-line reason. */
int attn_shard_parse(const char *s, int *k, int *n, char *err, size_t errlen);

/* Each of count problems (in the command's order, with an estimate of its cost) to a part 1..n, into owner[i]:
 * the largest first, each to the part with the least cost so far (the lowest-numbered of equals). The result depends
 * only on the costs, their order and n, so every part of one command computes the same partition. 0, or -1 when out
 * of memory. */
int attn_shard_assign(const double *cost, int count, int n, int *owner);

/* The cost estimate attn_shard_assign balances: the problem's attention work plus a fixed share for compiling and
 * checking its configurations. */
double attn_shard_cost(int n, int n_kv, int d, int dv, int causal); /* dv 0: d_v = d */

#endif
