/* bwd_util.h: what the CUDA backward's tests share (tests/cuda_emu_bwd.c on the interpreter, tests/cuda_backward.c
 * on a GPU): the fp64 lse, the gradients' magnitudes and the error limits. */
#ifndef ATTN_TEST_BWD_UTIL_H
#define ATTN_TEST_BWD_UTIL_H

#include <math.h>
#include <stdlib.h>
#include "internal.h"

static inline void round_to(attn_dtype t, float *x, size_t count) {
  for (size_t i = 0; i < count && t != ATTN_F32; i++)
    x[i] = t == ATTN_F16 ? attn_f16_to_f32(attn_f32_to_f16(x[i])) : attn_bf16_to_f32(attn_f32_to_bf16(x[i]));
}

/* fp64 lse of every row: log of the sum over the keys it sees of exp(scale q.k); -inf for none. */
static inline void ref_lse(const attn_problem *p, const float *q, const float *k, float *lse) {
  const long G = p->heads / p->heads_kv;
  for (long bh = 0; bh < (long)p->batch * p->heads; bh++) {
    const long bkv = bh / p->heads * p->heads_kv + bh % p->heads / G;
    for (long i = 0; i < p->n; i++) {
      long vis = p->n_kv;
      if (p->causal) {
        const long last = i + p->n_kv - p->n + 1;
        vis = last < 0 ? 0 : last < p->n_kv ? last : p->n_kv;
      }
      double mx = -INFINITY, sum = 0;
      for (int pass = 0; pass < 2; pass++)
        for (long j = 0; j < vis; j++) {
          double s = 0;
          for (long c = 0; c < p->d; c++)
            s += (double)q[(bh * p->n + i) * p->d + c] * (double)k[(bkv * p->n_kv + j) * p->d + c];
          s *= (double)p->scale;
          if (pass == 0) mx = s > mx ? s : mx;
          else sum += exp(s - mx);
        }
      lse[bh * p->n + i] = vis == 0 ? -INFINITY : (float)(mx + log(sum));
    }
  }
}

/* Error limits from the dtype's unit roundoff u (2^-11 f16, 2^-8 bf16, 2^-24 f32), as tests/cuda_emu.c derives
 * the forward's: the gradients carry the rounding of the outputs to the dtype (u), on the tensor cores that of P and
 * dS to the dtype before the products (u each), and the fp32 logits' errors, u32 (1 + |scale| sqrt(d)), which exp
 * turns into relative errors of P. A gradient's error (Frobenius) over the norm of its magnitude (magnitudes(): the
 * same sums of absolute values, which the roundings scale with where dP - delta cancels) must stay within
 * C (u + u32 (1 + |scale| sqrt(d))), C = 4. Measured on the interpreter (the "worst error" each run logs): f16 and
 * bf16 at most 0.7 u, f32 at most 12 u32 (at |scale| sqrt(d) = 15, a sixth of its limit). */
static inline double unit_roundoff(attn_dtype t) { return t == ATTN_F32 ? 0x1p-24 : t == ATTN_F16 ? 0x1p-11 : 0x1p-8; }
static inline double limit_of(const attn_problem *p) {
  const double u = unit_roundoff(p->dtype), u32 = 0x1p-24;
  return 4.0 * (u + u32 * (1.0 + fabs((double)p->scale) * sqrt((double)p->d)));
}

/* The norms of the gradients' magnitudes |dQ|, |dK|, |dV|: the same sums with every term's absolute value, P from
 * the fp64 lse, delta from the O given, |dS| <= P (|dO| |V| + |delta|) (the fp32 dP - delta cancels where the
 * gradient is small: its rounding scales with the terms, not with the difference). */
static inline void magnitudes(const attn_problem *p, const float *q, const float *k, const float *v, const float *o,
                       const float *go, const float *lse, double norm[3]) {
  const long G = p->heads / p->heads_kv, n = p->n, nkv = p->n_kv, d = p->d, dv = p->d_v;
  const size_t cq = (size_t)p->batch * p->heads * n * d, ck = (size_t)p->batch * p->heads_kv * nkv * d;
  const size_t cv = (size_t)p->batch * p->heads_kv * nkv * dv;
  double *aq = calloc(cq, 8), *ak = calloc(ck, 8), *av = calloc(cv, 8);
  norm[0] = norm[1] = norm[2] = NAN; /* out of memory: every comparison fails */
  if (aq && ak && av) {
    for (long bh = 0; bh < (long)p->batch * p->heads; bh++) {
      const long bkv = bh / p->heads * p->heads_kv + bh % p->heads / G;
      for (long i = 0; i < n; i++) {
        const float *qi = q + (bh * n + i) * d, *gi = go + (bh * n + i) * dv, *oi = o + (bh * n + i) * dv;
        double delta = 0;
        for (long c = 0; c < dv; c++) delta += (double)gi[c] * oi[c];
        for (long j = 0; j < nkv; j++) {
          if (p->causal && j > i + nkv - n) break;
          const float *kj = k + (bkv * nkv + j) * d, *vj = v + (bkv * nkv + j) * dv;
          double s = 0, gv = 0;
          for (long c = 0; c < d; c++) s += (double)qi[c] * kj[c];
          for (long c = 0; c < dv; c++) gv += fabs((double)gi[c] * vj[c]);
          const double P = exp(s * p->scale - (double)lse[bh * n + i]);
          const double ds = fabs((double)p->scale) * P * (gv + fabs(delta));
          for (long c = 0; c < d; c++) {
            aq[(bh * n + i) * d + c] += ds * fabs((double)kj[c]);
            ak[(bkv * nkv + j) * d + c] += ds * fabs((double)qi[c]);
          }
          for (long c = 0; c < dv; c++) av[(bkv * nkv + j) * dv + c] += P * fabs((double)gi[c]);
        }
      }
    }
    double *a3[3] = {aq, ak, av};
    const size_t c3[3] = {cq, ck, cv};
    for (int t = 0; t < 3; t++) {
      double sum = 0;
      for (size_t i = 0; i < c3[t]; i++) sum += a3[t][i] * a3[t][i];
      norm[t] = sqrt(sum);
    }
  }
  free(aq), free(ak), free(av);
}

/* Frobenius norm of x - ref over mag (a gradient that is 0 everywhere has no error to measure: 0) */
static inline double rel_err(const double *x, const double *ref, size_t count, double mag) {
  double e = 0;
  for (size_t i = 0; i < count; i++) e += (x[i] - ref[i]) * (x[i] - ref[i]);
  return mag > 0 ? sqrt(e) / mag : e > 0 ? INFINITY : 0.0;
}

#endif
