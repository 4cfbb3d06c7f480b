/* io_theory.c: closed forms of the counting builds' transfers, the lower bound, tile choice for a fast memory of
 * M entries, and one counted run through the runtime. The closed forms follow each template's loop structure
 * (templates/flash.c, smallcache.c, lowrank.c), so a counted run must equal them exactly. */
#include "io_theory.h"
#include "spec_bwd.h"
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

static void flash_block(const attn_spec *s, long rows, long c, unsigned long long *r, unsigned long long *w);

/* Keys [*lo, *hi) seen by at least one of the query rows whose shifted indices (i' = i + n_kv - n) run from a to z:
 * causal hides j > i'; a window w > 0 hides j <= i' - w (causal) or |i' - j| >= w (not causal). Empty: *hi <= *lo. */
static void seen_keys(int causal, long window, long a, long z, long n_kv, long *lo, long *hi) {
  *lo = 0;
  *hi = n_kv;
  if (causal) *hi = lmin(*hi, z + 1);
  if (window > 0) {
    if (a - window + 1 > *lo) *lo = lmin(a - window + 1, n_kv);
    if (!causal) *hi = lmin(*hi, z + window);
  }
  if (*hi < 0) *hi = 0;
}

long attn_io_flash_keys(const attn_spec *s, long a, long z, long n_kv, long window, long *first) {
  long lo, hi;
  seen_keys(s->causal, window, a, z, n_kv, &lo, &hi);
  if (first) *first = 0;
  if (hi <= lo) return 0;
  if (s->target != ATTN_TARGET_CUDA) {
    if (first) *first = lo;
    return hi - lo;
  }
  lo = lo / s->bc * s->bc;
  if (first) *first = lo;
  return lmin(n_kv, cdiv(hi, s->bc) * s->bc) - lo;
}

/* Keys one flash block of rows [i0, i0 + rows) loads. */
static long flash_keys(const attn_spec *s, long i0, long rows, long n, long n_kv, long window) {
  return attn_io_flash_keys(s, i0 + n_kv - n, i0 + rows - 1 + n_kv - n, n_kv, window, NULL);
}

/* One flash block of rows query rows that reads the first c keys. */
static void flash_block(const attn_spec *s, long rows, long c, unsigned long long *r, unsigned long long *w) {
  const long d = s->d, dv = attn_spec_dv(s);
  if (s->split > 1) {
    /* split-K: Q_i read by each part that has a key block (min(S, key blocks) of them); every part writes O, m, l
     * (rows (d_v + 2)), one without keys the empty partial (O = 0, m = -inf, l = 0) that lets the merge read every
     * part alike; the merge reads the S partials and writes O_i. flash.c and flash.cu (attn_combine included) count
     * exactly this. */
    const long S = s->split, parts = lmin(S, cdiv(c, s->bc));
    *r = sat_add(*r, (unsigned long long)(parts * rows * d + c * (d + dv) + S * rows * (dv + 2)));
    *w = sat_add(*w, (unsigned long long)(S * rows * (dv + 2) + rows * dv));
    return;
  }
  *r = sat_add(*r, (unsigned long long)(rows * d + c * (d + dv)));
  *w = sat_add(*w, (unsigned long long)(rows * dv));
}

int attn_io_formula_gqa(const attn_spec *s, long batch, long heads, long heads_kv, long n, long n_kv,
                        unsigned long long *reads, unsigned long long *writes) {
  return attn_io_formula_gqa_window(s, batch, heads, heads_kv, n, n_kv, 0, reads, writes);
}

int attn_io_formula_gqa_window(const attn_spec *s, long batch, long heads, long heads_kv, long n, long n_kv,
                               long window, unsigned long long *reads, unsigned long long *writes) {
  *reads = *writes = 0;
  if (batch < 0 || heads < 0 || heads_kv <= 0 || heads % heads_kv || n < 0 || n_kv < 0 || window < 0)
    return ATTN_EINVAL;
  const long G = heads / heads_kv;
  /* CUDA: packed where the runtime packs (attn_cuda_gqa_packs, runtime/cuda.c), with the kernel it runs there (no
   * causal mask: not causal, or n = 1, whose rows see every key up to theirs) */
  attn_problem pp = {.batch = (int)batch, .heads = (int)heads, .heads_kv = (int)heads_kv, .n = (int)n,
                     .n_kv = (int)n_kv, .causal = s->causal, .window = (int)window};
  attn_spec sw = *s;
  sw.window = window > 0;
  const int cuda_packs = s->target == ATTN_TARGET_CUDA && heads <= INT_MAX && n <= INT_MAX && n_kv <= INT_MAX &&
                         window <= INT_MAX && attn_cuda_gqa_packs(&pp, &sw);
  if (s->algo != ATTN_ALGO_FLASH || (s->target == ATTN_TARGET_CPU ? n >= s->br || G < 2 : !cuda_packs))
    return attn_io_formula_window(s, batch * heads, n, n_kv, window, reads, writes);
  sw.causal = s->target == ATTN_TARGET_CPU && s->causal;
  /* packed: the G*n rows X = i*G + g of a KV head in blocks of Br; a block's rows ask queries X0/G to
   * (X0+rows-1)/G (CUDA: unmasked but for a window, and that only at n = 1, every row at n_kv - 1; whole key blocks
   * from the one holding the first key seen) */
  unsigned long long r = 0, w = 0;
  const long total = n * G;
  for (long X0 = 0; X0 < total; X0 += s->br) {
    const long rows = lmin(s->br, total - X0);
    const long c = attn_io_flash_keys(&sw, X0 / G + (n_kv - n), (X0 + rows - 1) / G + (n_kv - n), n_kv, window, NULL);
    flash_block(s, rows, c, &r, &w);
  }
  *reads = sat_mul(r, (unsigned long long)(batch * heads_kv));
  *writes = sat_mul(w, (unsigned long long)(batch * heads_kv));
  return ATTN_OK;
}

long attn_io_rank(const attn_spec *s) {
  if (s->feature == ATTN_FEAT_TAYLOR) return attn_taylor_rank(s->d, s->degree, 1L << 16);
  return s->rank;
}

int attn_io_formula(const attn_spec *s, long bh, long n, long n_kv, unsigned long long *reads,
                    unsigned long long *writes) {
  return attn_io_formula_window(s, bh, n, n_kv, 0, reads, writes);
}

int attn_io_formula_window(const attn_spec *s, long bh, long n, long n_kv, long window, unsigned long long *reads,
                           unsigned long long *writes) {
  unsigned long long r = 0, w = 0;
  const long d = s->d, dv = attn_spec_dv(s); /* Q and K rows are d wide, V and O rows d_v */
  *reads = *writes = 0;
  if (bh < 0 || n < 0 || n_kv < 0 || window < 0) return ATTN_EINVAL; /* a negative count would convert to a huge one */
  if (s->algo == ATTN_ALGO_FLASH) {
    /* per query block: Q_i, then K_j (d) and V_j (d_v) over the keys it loads; O_i (d_v) written once */
    for (long i0 = 0; i0 < n; i0 += s->br) {
      const long rows = lmin(s->br, n - i0);
      flash_block(s, rows, flash_keys(s, i0, rows, n, n_kv, window), &r, &w);
    }
  } else if (s->algo == ATTN_ALGO_SMALLCACHE) {
    if (window > 0 && s->target == ATTN_TARGET_CUDA) return ATTN_EINVAL; /* smallcache.cu applies no window */
    const long t = s->tile > 0 ? s->tile : s->br;
    for (long i0 = 0; i0 < n; i0 += s->br) {
      long R = lmin(s->br, n - i0), lo, hi;
      seen_keys(s->causal, window, i0 + n_kv - n, i0 + R - 1 + n_kv - n, n_kv, &lo, &hi);
      long C = hi > lo ? hi - lo : 0; /* the tiles start at the first seen key */
      /* S = Q K^T over d, written; then O = P V over d_v: P read once per column tile of O */
      long nr = cdiv(R, t), nc = cdiv(C, t), ndv = cdiv(dv, t);
      r = sat_add(r, (unsigned long long)(d * R * nc + d * C * nr + R * C * ndv + dv * C * nr));
      w = sat_add(w, (unsigned long long)(R * C + R * dv));
    }
  } else if (s->algo == ATTN_ALGO_LOWRANK) {
    if (window > 0) return ATTN_EINVAL; /* a running sum over all keys has no window */
    r = (unsigned long long)(n_kv * (d + dv) + n * d);
    w = (unsigned long long)(n * dv);
  } else {
    return ATTN_EINVAL;
  }
  *reads = sat_mul(r, (unsigned long long)bh);
  *writes = sat_mul(w, (unsigned long long)bh);
  return ATTN_OK;
}

double attn_io_fast_need(const attn_spec *s) {
  const double d = s->d, dv = attn_spec_dv(s);
  /* Q_i (Br d), O_i (Br d_v), K_j (Bc d), V_j (Bc d_v), S_ij (Br Bc) */
  if (s->algo == ATTN_ALGO_FLASH) return (double)(s->br + s->bc) * (d + dv) + (double)s->br * s->bc;
  if (s->algo == ATTN_ALGO_SMALLCACHE) {
    double t = s->tile > 0 ? s->tile : s->br;
    return 3.0 * t * t + 2.0 * s->br; /* Q|P tile, K|V tile, accumulator; m and l of the block's rows */
  }
  double r = (double)attn_io_rank(s);
  return r * (dv + 1) + (double)s->bc * r + r + dv; /* state KV|z, a key block's features, phi(q), a numerator */
}

double attn_io_bound_theory(double n, double d, double dv, double M) {
  /* with d != d_v, the bound of the smaller: padding it with zeros to the other solves the smaller problem */
  const double m = dv > 0 && dv < d ? dv : d;
  double a = n * n * m * m / M, b = n * n * m / sqrt(M);
  return a < b ? a : b;
}

double attn_io_floor(double n, double d, double dv) { return 2.0 * n * (d + (dv > 0 ? dv : d)); }

double attn_io_lower_bound(double n, double d, double dv, double M) {
  double t = attn_io_bound_theory(n, d, dv, M), f = attn_io_floor(n, d, dv);
  return t > f ? t : f;
}

int attn_io_choose(attn_spec *s, long n, double M, char *err, size_t errlen) {
  const long d = s->d, w = d + attn_spec_dv(s); /* a row of Q and O, or of K and V */
  if (s->algo == ATTN_ALGO_FLASH) {
    /* transfers depend on Br only (K, V read once per query block): the largest Br with Bc = 1, then the
     * largest Bc (at most 128) that keeps it */
    double need = 2.0 * w + 1;
    if (M < need) {
      snprintf(err, errlen,
               "M=%.0f is too small: flash needs at least %.0f ((Br + Bc)(d + d_v) + Br Bc, Br = Bc = 1)", M, need);
      return ATTN_EINVAL;
    }
    long br = (long)((M - (double)w) / ((double)w + 1));
    br = lmin(lmin(br, n > 0 ? n : 1), 1024);
    long bc = 1;
    while (bc < 128 && bc < n && (double)(br + bc + 1) * w + (double)br * (bc + 1) <= M) bc++;
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
      snprintf(err, errlen, "M=%.0f is too small: lowrank needs at least %.0f (r (d_v+1) + 2 r + d_v with r=%ld)", M,
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
  return attn_io_measure_window(rt, s, n, n_kv, 0, io, relerr);
}

/* The problem a count is of, forward or backward: one head (batch 1) of spec s at n query rows and n_kv keys (<= 0:
 * n). */
static attn_problem one_head(const attn_spec *s, long n, long n_kv) {
  attn_problem p = {0};
  p.batch = 1;
  p.heads = 1;
  p.n = (int)n;
  p.n_kv = (int)(n_kv > 0 ? n_kv : n);
  p.d = s->d;
  p.d_v = attn_spec_dv(s);
  p.dtype = s->dtype;
  p.causal = s->causal;
  return p;
}

int attn_io_measure_window(attn_runtime *rt, const attn_spec *s, long n, long n_kv, long window, attn_io *io,
                           double *relerr) {
  attn_problem p = one_head(s, n, n_kv);
  attn_spec sw = *s;
  p.tolerance = s->algo == ATTN_ALGO_LOWRANK ? 1.0 : 0.0; /* lowrank's error is measured here, not required */
  p.window = (int)window;
  /* the kernel applies a window only where it hides a key (a problem's window that hides none becomes 0) */
  attn_problem norm;
  int rc = attn_problem_normalize(rt, &p, &norm);
  if (rc != ATTN_OK) return rc;
  sw.window = norm.window > 0;
  attn_plan *plan = NULL;
  rc = attn_plan_create_spec(rt, &p, &sw, 1, "io", &plan);
  if (rc != ATTN_OK) return rc;
  const size_t nq = (size_t)n * (size_t)s->d, nk = (size_t)p.n_kv * (size_t)s->d;
  const size_t nv = (size_t)p.n_kv * (size_t)p.d_v, no = (size_t)n * (size_t)p.d_v;
  float *q = malloc(nq * sizeof *q), *k = malloc(nk * sizeof *k), *v = malloc(nv * sizeof *v);
  float *o = malloc(no * sizeof *o);
  double *ref = relerr ? malloc(no * sizeof *ref) : NULL;
  if (!q || !k || !v || !o || (relerr && !ref)) {
    rc = attn_fail(rt, ATTN_ENOMEM, "out of memory for n=%ld d=%d", n, s->d);
  } else {
    attn_fill_random(q, nq, 11);
    attn_fill_random(k, nk, 12);
    attn_fill_random(v, nv, 13);
    /* a half dtype: the reference sees the rounded inputs the kernel reads */
    attn_round_dtype(p.dtype, q, nq);
    attn_round_dtype(p.dtype, k, nk);
    attn_round_dtype(p.dtype, v, nv);
    attn_poison(o, no);
    rc = attn_plan_run_f32(plan, q, k, v, o, io, NULL);
    if (rc == ATTN_OK && relerr) {
      attn_reference(&plan->p, q, k, v, ref);
      *relerr = attn_rel_error(ref, o, no);
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

/* --- the backward (templates/flash_bwd.c) --- */

/* The template's chunks of a KV head's key blocks (fb_chunks): enough items for 16 threads, at most one a block, the
 * partials (G n rows of d rounded up to 32 floats a KV head and chunk) within 1 GiB. */
static long bwd_chunks(long kv_heads, long G, long n, long d, long nkb) {
  const double one = (double)kv_heads * (double)G * (double)n * (double)((d + 31) / 32 * 32) * 4.0;
  long c = (16 + kv_heads - 1) / kv_heads;
  if (c > nkb) c = nkb;
  while (c > 1 && c * one > (double)(1L << 30)) c--;
  return c < 1 ? 1 : c;
}

int attn_io_formula_bwd(const attn_spec *s, long batch, long heads, long heads_kv, long n, long n_kv,
                        unsigned long long *reads, unsigned long long *writes) {
  *reads = *writes = 0;
  if (s->algo != ATTN_ALGO_FLASH || s->target != ATTN_TARGET_CPU) return ATTN_EINVAL;
  if (batch < 1 || heads_kv < 1 || heads % heads_kv || n < 1 || n_kv < 1) return ATTN_EINVAL;
  const long d = s->d, dv = attn_spec_dv(s), G = heads / heads_kv, nkb = cdiv(n_kv, s->bc);
  const long C = bwd_chunks(batch * heads_kv, G, n, d, nkb);
  /* per KV head: each chunk zeroes its G n rows of dQ partials and reads O and dO for D (one entry a row, written) */
  unsigned long long r = (unsigned long long)(C * G * n * 2 * dv), w = (unsigned long long)(C * G * n * (d + 1));
  for (long j0 = 0; j0 < n_kv; j0 += s->bc) {
    const long cols = lmin(s->bc, n_kv - j0);
    long i_first = s->causal ? j0 - (n_kv - n) : 0;
    if (i_first < 0) i_first = 0;
    if (i_first < n) {
      /* K_j, V_j; per query block of each query head: Q_i, dO_i, lse_i, D_i and the dQ partial read, the partial
       * written back */
      const long q_rows = n - i_first / s->br * s->br; /* from the query block that holds the first such row */
      r = sat_add(r, (unsigned long long)(cols * (d + dv) + G * q_rows * (2 * d + dv + 2)));
      w = sat_add(w, (unsigned long long)(G * q_rows * d));
    }
    w = sat_add(w, (unsigned long long)(cols * (d + dv))); /* dK_j, dV_j (zeros for a block no query sees) */
  }
  /* merge: C partial rows read and dq written, per row of each query head */
  r = sat_add(r, (unsigned long long)(G * n * C * d));
  w = sat_add(w, (unsigned long long)(G * n * d));
  *reads = sat_mul(r, (unsigned long long)(batch * heads_kv));
  *writes = sat_mul(w, (unsigned long long)(batch * heads_kv));
  return ATTN_OK;
}

double attn_io_fast_need_bwd(const attn_spec *s) {
  const double d = s->d, dv = attn_spec_dv(s), br = s->br, bc = s->bc;
  return bc * (2 * d + 2 * dv) + br * (2 * d + dv + 2) + 2 * br * bc;
}

int attn_io_choose_bwd(attn_spec *s, long n, double M, char *err, size_t errlen) {
  const double d = s->d, dv = attn_spec_dv(s);
  if (s->algo != ATTN_ALGO_FLASH) {
    snprintf(err, errlen, "the backward is flash's (FlashAttention-2's recomputation), not %s", attn_algo_name(s->algo));
    return ATTN_EINVAL;
  }
  s->br = s->bc = 1;
  const double need = attn_io_fast_need_bwd(s);
  if (M < need) {
    snprintf(err, errlen,
             "M=%.0f is too small: the flash backward needs at least %.0f (Bc (2d + 2d_v) + Br (2d + d_v + 2) + "
             "2 Br Bc, Br = Bc = 1)", M, need);
    return ATTN_EINVAL;
  }
  /* transfers fall with Bc alone (Q_i, dO_i and the dQ partials are read once per key block) */
  long bc = (long)((M - (2 * d + dv + 2)) / (2 * d + 2 * dv + 2));
  bc = lmin(lmin(bc, n > 0 ? n : 1), ATTN_BWD_MAX_BLOCK);
  long br = 1;
  s->bc = (int)bc;
  while (br < 128 && br < n) {
    s->br = (int)(br + 1);
    if (attn_io_fast_need_bwd(s) > M) break;
    br++;
  }
  s->br = (int)br;
  s->tile = 0;
  return ATTN_OK;
}

int attn_io_measure_bwd(attn_runtime *rt, const attn_spec *s, long n, long n_kv, attn_io *io, double *relerr) {
  attn_problem p0 = one_head(s, n, n_kv), p;
  if (s->dtype != ATTN_F32) return attn_fail(rt, ATTN_EINVAL, "the backward's count runs f32 (a count is the dtype's)");
  int rc = attn_problem_normalize(rt, &p0, &p);
  if (rc != ATTN_OK) return rc;
  attn_cpu_kernel *kern = NULL;
  rc = attn_cpu_load_backward(rt, s, 1, &kern);
  if (rc != ATTN_OK) return rc;
  const size_t nq = (size_t)n * (size_t)p.d, nk = (size_t)p.n_kv * (size_t)p.d;
  const size_t nv = (size_t)p.n_kv * (size_t)p.d_v, no = (size_t)n * (size_t)p.d_v;
  float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nv * 4), *g = malloc(no * 4), *o = malloc(no * 4);
  float *lse = malloc((size_t)n * 4), *dq = malloc(nq * 4), *dk = malloc(nk * 4), *dv = malloc(nv * 4);
  double *ro = malloc(no * 8), *rq = malloc(nq * 8), *rk = malloc(nk * 8), *rv = malloc(nv * 8);
  rc = ATTN_ENOMEM;
  if (q && k && v && g && o && lse && dq && dk && dv && ro && rq && rk && rv) {
    attn_fill_random(q, nq, 21);
    attn_fill_random(k, nk, 22);
    attn_fill_random(v, nv, 23);
    attn_fill_random(g, no, 24);
    attn_reference(&p, q, k, v, ro);
    for (size_t i = 0; i < no; i++) o[i] = (float)ro[i];
    for (long i = 0; i < n; i++) { /* fp64 lse over the keys row i sees; -inf for none */
      long lo, hi;
      attn_visible_keys(&p, i, &lo, &hi);
      double mx = -INFINITY, sum = 0;
      for (int pass = 0; pass < 2; pass++)
        for (long j = lo; j < hi; j++) {
          double a = 0;
          for (int c = 0; c < p.d; c++) a += (double)q[i * p.d + c] * k[j * p.d + c];
          a *= p.scale;
          if (pass == 0 && a > mx) mx = a;
          if (pass == 1) sum += exp(a - mx);
        }
      lse[i] = hi > lo ? (float)(mx + log(sum)) : -INFINITY;
    }
    attn_poison(dq, nq);
    attn_poison(dk, nk);
    attn_poison(dv, nv);
    attn_kargs a = {.q = q, .k = k, .v = v, .o = o, .batch = 1, .heads = 1, .heads_kv = 1, .n = p.n, .n_kv = p.n_kv,
                    .scale = p.scale, .lse = lse, .dout = g, .dq = dq, .dk = dk, .dv = dv};
    rc = attn_cpu_run(rt, kern, &a, io);
    if (rc == ATTN_OK && relerr) {
      attn_reference_backward(&p, q, k, v, o, g, rq, rk, rv);
      const double e[3] = {attn_rel_error(rq, dq, nq), attn_rel_error(rk, dk, nk), attn_rel_error(rv, dv, nv)};
      *relerr = fmax(e[0], fmax(e[1], e[2]));
    }
  }
  free(q), free(k), free(v), free(g), free(o), free(lse), free(dq), free(dk), free(dv);
  free(ro), free(rq), free(rk), free(rv);
  attn_cpu_unload(kern);
  return rc;
}
