/* io_theory.c: closed forms of the counting builds' transfers, the lower bound, tile choice for a fast memory of
 * M entries, and one counted run through the runtime. The closed forms follow each template's loop structure
 * (templates/flash.c, smallcache.c, lowrank.c), so a counted run must equal them exactly. */
#include "io_theory.h"
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static long lmin(long a, long b) { return a < b ? a : b; }
static long cdiv(long a, long b) { return (a + b - 1) / b; }

/* Counts saturate at ULLONG_MAX instead of wrapping: from n = 2^29 with a few dozen heads the exact count passes 2^64,
 * and a wrapped one reads as small (the model would rank that configuration fastest). One block's terms stay below
 * 2^55 (rows, keys < 2^31; d, tiles and splits at most a few thousand), so they are exact in long. */
static unsigned long long sat_add(unsigned long long a, unsigned long long b) {
  unsigned long long s;
  return __builtin_add_overflow(a, b, &s) ? ULLONG_MAX : s;
}
static unsigned long long sat_mul(unsigned long long a, unsigned long long b) {
  unsigned long long p;
  return __builtin_mul_overflow(a, b, &p) ? ULLONG_MAX : p;
}

/* Keys seen by at least one of the query rows [i0, i0 + rows): all, or bottom-right causal. */
static long visible(int causal, long i0, long rows, long n, long n_kv) {
  if (!causal) return n_kv;
  long last = i0 + rows + (n_kv - n);
  return last < 0 ? 0 : lmin(last, n_kv);
}

long attn_io_rank(const attn_spec *s) {
  if (s->feature == ATTN_FEAT_TAYLOR) return attn_taylor_rank(s->d, s->degree, 1L << 16);
  return s->rank;
}

int attn_io_formula(const attn_spec *s, long bh, long n, long n_kv, unsigned long long *reads,
                    unsigned long long *writes) {
  unsigned long long r = 0, w = 0;
  const long d = s->d;
  *reads = *writes = 0;
  if (bh < 0 || n < 0 || n_kv < 0) return ATTN_EINVAL; /* a negative count would convert to a huge one */
  if (s->algo == ATTN_ALGO_FLASH) {
    /* per query block: Q_i, then K_j and V_j over the visible keys; O_i written once */
    for (long i0 = 0; i0 < n; i0 += s->br) {
      long rows = lmin(s->br, n - i0), c = visible(s->causal, i0, rows, n, n_kv);
      /* the CUDA kernel loads whole key blocks up to the one holding the last visible key (rows past n_kv are
       * zero-filled, not read); the CPU kernel stops at that key */
      if (s->target == ATTN_TARGET_CUDA && c > 0) c = lmin(n_kv, cdiv(c, s->bc) * s->bc);
      if (s->split > 1) {
        /* split-K: Q_i read by each part that has a key block (min(S, key blocks) of them); every part writes
         * O, m, l (rows (d + 2)); the merge reads the S partials and writes O_i */
        const long S = s->split, parts = lmin(S, cdiv(c, s->bc));
        r = sat_add(r, (unsigned long long)(parts * rows * d + 2 * c * d + S * rows * (d + 2)));
        w = sat_add(w, (unsigned long long)(S * rows * (d + 2) + rows * d));
        continue;
      }
      r = sat_add(r, (unsigned long long)(rows * d + 2 * c * d));
      w = sat_add(w, (unsigned long long)(rows * d));
    }
  } else if (s->algo == ATTN_ALGO_SMALLCACHE) {
    const long t = s->tile > 0 ? s->tile : s->br;
    for (long i0 = 0; i0 < n; i0 += s->br) {
      long R = lmin(s->br, n - i0), C = visible(s->causal, i0, R, n, n_kv);
      long nr = cdiv(R, t), nc = cdiv(C, t), nd = cdiv(d, t);
      r = sat_add(r, (unsigned long long)(d * R * nc + d * C * nr + R * C * nd + d * C * nr));
      w = sat_add(w, (unsigned long long)(R * C + R * d));
    }
  } else if (s->algo == ATTN_ALGO_LOWRANK) {
    r = (unsigned long long)(2 * n_kv * d + n * d);
    w = (unsigned long long)(n * d);
  } else {
    return ATTN_EINVAL;
  }
  *reads = sat_mul(r, (unsigned long long)bh);
  *writes = sat_mul(w, (unsigned long long)bh);
  return ATTN_OK;
}

double attn_io_fast_need(const attn_spec *s) {
  const double d = s->d;
  if (s->algo == ATTN_ALGO_FLASH) return 2.0 * s->br * d + 2.0 * s->bc * d + (double)s->br * s->bc;
  if (s->algo == ATTN_ALGO_SMALLCACHE) {
    double t = s->tile > 0 ? s->tile : s->br;
    return 3.0 * t * t + 2.0 * s->br; /* Q|P tile, K|V tile, accumulator; m and l of the block's rows */
  }
  double r = (double)attn_io_rank(s);
  return r * (d + 1) + (double)s->bc * r + r + d; /* state KV|z, a key block's features, phi(q), a numerator */
}

double attn_io_bound_theory(double n, double d, double M) {
  double a = n * n * d * d / M, b = n * n * d / sqrt(M);
  return a < b ? a : b;
}

double attn_io_lower_bound(double n, double d, double M) {
  double t = attn_io_bound_theory(n, d, M), f = 4.0 * n * d;
  return t > f ? t : f;
}

int attn_io_choose(attn_spec *s, long n, double M, char *err, size_t errlen) {
  const long d = s->d;
  if (s->algo == ATTN_ALGO_FLASH) {
    /* transfers depend on Br only (K, V read once per query block): the largest Br with Bc = 1, then the
     * largest Bc (at most 128) that keeps it */
    double need = 4.0 * d + 1;
    if (M < need) {
      snprintf(err, errlen, "M=%.0f is too small: flash needs at least %.0f (2 Br d + 2 Bc d + Br Bc, Br = Bc = 1)",
               M, need);
      return ATTN_EINVAL;
    }
    long br = (long)((M - 2.0 * d) / (2.0 * d + 1));
    br = lmin(lmin(br, n > 0 ? n : 1), 1024);
    long bc = 1;
    while (bc < 128 && bc < n && 2.0 * br * d + 2.0 * (bc + 1) * d + (double)br * (bc + 1) <= M) bc++;
    s->br = (int)br;
    s->bc = (int)bc;
    s->tile = 0;
    return ATTN_OK;
  }
  if (s->algo == ATTN_ALGO_SMALLCACHE) {
    if (M < 5) {
      snprintf(err, errlen, "M=%.0f is too small: smallcache needs at least 5 (3 T^2 + 2 Br, T = Br = 1)", M);
      return ATTN_EINVAL;
    }
    long t = (long)floor(sqrt(M / 4.0));
    if (t < 1) t = 1;
    t = lmin(lmin(t, 1024), n > 0 ? n : 1);
    s->tile = (int)t;
    s->br = (int)t;
    s->bc = (int)t;
    return ATTN_OK;
  }
  if (s->algo == ATTN_ALGO_LOWRANK) {
    long r = attn_io_rank(s);
    if (r < 1) {
      snprintf(err, errlen, "lowrank features of degree %d for d=%d are too many", s->degree, s->d);
      return ATTN_EINVAL;
    }
    s->br = 64;
    s->bc = 1;
    double need = attn_io_fast_need(s);
    if (M < need) {
      snprintf(err, errlen, "M=%.0f is too small: lowrank needs at least %.0f (r (d+1) + 2 r + d with r=%ld)", M,
               need, r);
      return ATTN_EINVAL;
    }
    for (;;) { /* the largest key block (at most 64 rows) whose features fit beside the state */
      if (s->bc >= 64) break;
      s->bc++;
      if (attn_io_fast_need(s) > M) {
        s->bc--;
        break;
      }
    }
    return ATTN_OK;
  }
  snprintf(err, errlen, "unknown algorithm");
  return ATTN_EINVAL;
}

int attn_io_measure(attn_runtime *rt, const attn_spec *s, long n, long n_kv, attn_io *io, double *relerr) {
  attn_problem p = {0};
  p.batch = 1;
  p.heads = 1;
  p.n = (int)n;
  p.n_kv = (int)(n_kv > 0 ? n_kv : n);
  p.d = s->d;
  p.dtype = s->dtype;
  p.causal = s->causal;
  p.tolerance = s->algo == ATTN_ALGO_LOWRANK ? 1.0 : 0.0; /* lowrank's error is measured here, not required */
  attn_plan *plan = NULL;
  int rc = attn_plan_create_spec(rt, &p, s, 1, "io", &plan);
  if (rc != ATTN_OK) return rc;
  const size_t nq = (size_t)n * (size_t)s->d, nk = (size_t)p.n_kv * (size_t)s->d;
  float *q = malloc(nq * sizeof *q), *k = malloc(nk * sizeof *k), *v = malloc(nk * sizeof *v);
  float *o = malloc(nq * sizeof *o);
  double *ref = relerr ? malloc(nq * sizeof *ref) : NULL;
  if (!q || !k || !v || !o || (relerr && !ref)) {
    rc = attn_fail(rt, ATTN_ENOMEM, "out of memory for n=%ld d=%d", n, s->d);
  } else {
    attn_fill_random(q, nq, 11);
    attn_fill_random(k, nk, 12);
    attn_fill_random(v, nk, 13);
    attn_poison(o, nq);
    rc = attn_plan_run_f32(plan, q, k, v, o, io, NULL);
    if (rc == ATTN_OK && relerr) {
      attn_reference(&plan->p, q, k, v, ref);
      *relerr = attn_rel_error(ref, o, nq);
    }
  }
  free(q);
  free(k);
  free(v);
  free(o);
  free(ref);
  attn_plan_destroy(plan);
  return rc;
}
