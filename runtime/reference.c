/* reference.c: what kernels are checked against — a plain fp64 attention with the library's semantics (GQA,
 * bottom-right causal mask, window, softcap, ALiBi, zero rows), the relative error, reproducible random inputs, and
 * poisoning. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

void attn_visible_keys(const attn_problem *p, long i, long *lo, long *hi) {
  const long n_kv = p->n_kv > 0 ? p->n_kv : p->n, ip = i + (n_kv - p->n), w = p->window > 0 ? p->window : 0;
  long a = 0, b = n_kv;
  if (p->causal && ip + 1 < b) b = ip + 1;
  if (w) {
    if (ip - w + 1 > a) a = ip - w + 1;
    if (!p->causal && ip + w < b) b = ip + w;
  }
  if (b < a) b = a;
  *lo = a < n_kv ? a : n_kv;
  *hi = b < n_kv ? b : n_kv;
}

double attn_score_mod(const attn_problem *p, double s, long h, long i, long j) {
  const long n_kv = p->n_kv > 0 ? p->n_kv : p->n, ip = i + (n_kv - p->n);
  if (p->softcap > 0) s = (double)p->softcap * tanh(s / (double)p->softcap);
  if (p->alibi_slopes) s -= (double)p->alibi_slopes[h] * (double)labs(ip - j);
  return s;
}

void attn_reference(const attn_problem *p, const float *q, const float *k, const float *v, double *o) {
  const long n = p->n, n_kv = p->n_kv > 0 ? p->n_kv : p->n, d = p->d, dv = p->d_v > 0 ? p->d_v : p->d;
  const long heads = p->heads, heads_kv = p->heads_kv > 0 ? p->heads_kv : p->heads, group = heads / heads_kv;
  const double scale = p->scale != 0.0f ? (double)p->scale : 1.0 / sqrt((double)d);
  double *s = malloc(sizeof(double) * (size_t)(n_kv > 0 ? n_kv : 1));
  if (!s) {
    /* No way to report from here: NaN output makes the comparison fail loudly instead of passing. */
    for (long i = 0; i < (long)p->batch * heads * n * dv; i++) o[i] = NAN;
    return;
  }
  for (long b = 0; b < p->batch; b++)
    for (long h = 0; h < heads; h++) {
      const long hk = h / group;
      const float *qh = q + (b * heads + h) * n * d;
      const float *kh = k + (b * heads_kv + hk) * n_kv * d, *vh = v + (b * heads_kv + hk) * n_kv * dv;
      double *oh = o + (b * heads + h) * n * dv;
      for (long i = 0; i < n; i++) {
        long lo, hi;
        attn_visible_keys(p, i, &lo, &hi);
        double *orow = oh + i * dv;
        memset(orow, 0, sizeof(double) * (size_t)dv);
        if (hi <= lo) continue;
        double mx = -INFINITY;
        for (long j = lo; j < hi; j++) {
          double acc = 0;
          for (long c = 0; c < d; c++) acc += (double)qh[i * d + c] * (double)kh[j * d + c];
          s[j] = attn_score_mod(p, acc * scale, h, i, j);
          if (s[j] > mx) mx = s[j];
        }
        double sum = 0;
        for (long j = lo; j < hi; j++) {
          s[j] = exp(s[j] - mx);
          sum += s[j];
        }
        for (long j = lo; j < hi; j++) {
          const double w = s[j] / sum;
          for (long c = 0; c < dv; c++) orow[c] += w * (double)vh[j * dv + c];
        }
      }
    }
  free(s);
}

double attn_rel_error(const double *ref, const float *out, size_t count) {
  double num = 0, den = 0;
  for (size_t i = 0; i < count; i++) {
    if (!isfinite(out[i])) return INFINITY;
    const double e = (double)out[i] - ref[i];
    num += e * e;
    den += ref[i] * ref[i];
  }
  if (den == 0) return num == 0 ? 0 : INFINITY;
  return sqrt(num / den);
}

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void attn_fill_random(float *x, size_t count, unsigned long long seed) {
  /* xoshiro256** seeded through splitmix64, as its authors recommend. */
  uint64_t sm = seed, st[4];
  for (int i = 0; i < 4; i++) st[i] = splitmix64(&sm);
  for (size_t i = 0; i < count; i++) {
    const uint64_t r = rotl(st[1] * 5, 7) * 9, t = st[1] << 17;
    st[2] ^= st[0];
    st[3] ^= st[1];
    st[1] ^= st[2];
    st[0] ^= st[3];
    st[2] ^= t;
    st[3] = rotl(st[3], 45);
    /* 24 random bits: exactly representable, uniform on [-1, 1). */
    x[i] = (float)((double)(r >> 40) * (2.0 / 16777216.0) - 1.0);
  }
}

void attn_poison(float *x, size_t count) {
  for (size_t i = 0; i < count; i++) x[i] = NAN;
}

void attn_reference_backward(const attn_problem *p, const float *q, const float *k, const float *v, const float *o,
                             const float *dout, double *dq, double *dk, double *dv) {
  const long n = p->n, n_kv = p->n_kv > 0 ? p->n_kv : p->n, d = p->d, dvw = p->d_v > 0 ? p->d_v : p->d;
  const long heads = p->heads, heads_kv = p->heads_kv > 0 ? p->heads_kv : p->heads, group = heads / heads_kv;
  const double scale = p->scale != 0.0f ? (double)p->scale : 1.0 / sqrt((double)d);
  memset(dq, 0, sizeof(double) * (size_t)(p->batch * heads * n * d));
  memset(dk, 0, sizeof(double) * (size_t)(p->batch * heads_kv * n_kv * d));
  memset(dv, 0, sizeof(double) * (size_t)(p->batch * heads_kv * n_kv * dvw));
  double *P = malloc(sizeof(double) * (size_t)(n_kv > 0 ? n_kv : 1));
  double *orow = malloc(sizeof(double) * (size_t)dvw);
  if (!P || !orow) {
    /* no way to report from here: NaN gradients fail the comparison loudly */
    for (long i = 0; i < (long)p->batch * heads * n * d; i++) dq[i] = NAN;
    free(P);
    free(orow);
    return;
  }
  for (long b = 0; b < p->batch; b++)
    for (long h = 0; h < heads; h++) {
      const long hk = h / group;
      const float *qh = q + (b * heads + h) * n * d, *gh = dout + (b * heads + h) * n * dvw;
      const float *oh = o ? o + (b * heads + h) * n * dvw : NULL;
      const float *kh = k + (b * heads_kv + hk) * n_kv * d, *vh = v + (b * heads_kv + hk) * n_kv * dvw;
      double *dqh = dq + (b * heads + h) * n * d;
      double *dkh = dk + (b * heads_kv + hk) * n_kv * d, *dvh = dv + (b * heads_kv + hk) * n_kv * dvw;
      for (long i = 0; i < n; i++) {
        long visible = n_kv;
        if (p->causal) {
          long last = i + (n_kv - n);
          visible = last < 0 ? 0 : last + 1 < n_kv ? last + 1 : n_kv;
        }
        if (visible == 0) continue;
        double mx = -INFINITY, sum = 0;
        for (long j = 0; j < visible; j++) {
          double acc = 0;
          for (long c = 0; c < d; c++) acc += (double)qh[i * d + c] * (double)kh[j * d + c];
          P[j] = acc * scale;
          if (P[j] > mx) mx = P[j];
        }
        for (long j = 0; j < visible; j++) sum += (P[j] = exp(P[j] - mx));
        for (long j = 0; j < visible; j++) P[j] /= sum;
        /* D = rowsum(dO ∘ O), O the given one or this forward's */
        for (long c = 0; c < dvw; c++) {
          orow[c] = 0;
          if (oh) orow[c] = oh[i * dvw + c];
          else
            for (long j = 0; j < visible; j++) orow[c] += P[j] * (double)vh[j * dvw + c];
        }
        double D = 0;
        for (long c = 0; c < dvw; c++) D += (double)gh[i * dvw + c] * orow[c];
        for (long j = 0; j < visible; j++) {
          double dp = 0;
          for (long c = 0; c < dvw; c++) {
            dp += (double)gh[i * dvw + c] * (double)vh[j * dvw + c];
            dvh[j * dvw + c] += P[j] * (double)gh[i * dvw + c];
          }
          const double ds = P[j] * (dp - D);
          for (long c = 0; c < d; c++) {
            dqh[i * d + c] += scale * ds * (double)kh[j * d + c];
            dkh[j * d + c] += scale * ds * (double)qh[i * d + c];
          }
        }
      }
    }
  free(P);
  free(orow);
}
