/* lowrank_feat.h: lowrank's feature map, shared by its forward (lowrank.c) and its gradient (lowrank_bwd.c), which
 * must draw the same Taylor monomials or the same Gaussian directions, bit for bit: the gradient differentiates what
 * the forward computed. The directions' generator is the fp64 reference's too (runtime/reference.c); the rest is
 * specialised on the including template's ATTN_D, ATTN_FEATURE, ATTN_DEGREE, ATTN_RANK and ATTN_SEED.
 * gen/embed.cmake puts this text in place of the templates' #include, so that the generated source, and with it the
 * compiled kernel's cache key, holds it. */
#ifndef ATTN_LOWRANK_FEAT_H
#define ATTN_LOWRANK_FEAT_H

#include <math.h>
#include <stdint.h>

/* splitmix64, then Box-Muller: cnt entries of Gaussian directions from the seed, in float as the kernels keep them. */
static inline uint64_t attn_lf_next(uint64_t *st) {
  uint64_t z = (*st += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static inline void attn_lf_gauss(float *w, long cnt, uint64_t seed) {
  uint64_t st = seed * 0x2545F4914F6CDD1Dull + 1;
  for (long i = 0; i < cnt; i += 2) {
    double u1 = ((attn_lf_next(&st) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double u2 = (attn_lf_next(&st) >> 11) * (1.0 / 9007199254740992.0);
    double rad = sqrt(-2.0 * log(u1));
    w[i] = (float)(rad * cos(6.283185307179586 * u2));
    if (i + 1 < cnt) w[i + 1] = (float)(rad * sin(6.283185307179586 * u2));
  }
}

#ifdef ATTN_D /* a template */
/* The feature map's defaults, for a template compiled on its own */
#ifndef ATTN_FEATURE
#define ATTN_FEATURE 1
#endif
#ifndef ATTN_DEGREE
#define ATTN_DEGREE 2
#endif
#ifndef ATTN_RANK
#define ATTN_RANK 256
#endif
#ifndef ATTN_SEED
#define ATTN_SEED 1
#endif

/* Rank of the feature map. */
static long lf_rank(void) {
#if ATTN_FEATURE == 0
  long r = 1, c = 1; /* C(d+g, g) = prod_{i=1..g} (d+i)/i, exact at each step */
  for (long i = 1; i <= ATTN_DEGREE; i++) {
    c = c * (ATTN_D + i) / i;
    r = c;
  }
  return r;
#else
  return ATTN_RANK;
#endif
}

/* A row length the compiler cannot see: GCC 12 warns (-Waggressive-loop-optimizations) on the half conversions'
 * scalar tail, which never runs, when the count is a constant. */
static inline long lf_count(long x) {
  __asm__("" : "+r"(x));
  return x;
}

/* 1 when every entry of the row is finite: x - x is 0 for a finite x, NaN for inf and NaN (no branch per entry). */
static int lf_finite(const float *row, long cnt) {
  float z = 0.0f;
  for (long i = 0; i < cnt; i++) z += row[i] - row[i];
  return z == 0.0f;
}

#if ATTN_FEATURE == 0
/* Monomials of degree <= g in d variables, each built from a parent by one more factor x[var] with an index not
 * below the parent's last one (so each multiset once); coef = 1/sqrt(multiplicity of var in the child), whose
 * product along the chain is 1/sqrt(alpha!). Returns the number built (= r). */
static long lf_taylor_table(int *par, int *var, float *coef) {
  long cnt = 1, lo = 0;
  par[0] = -1;
  var[0] = -1;
  coef[0] = 1.0f;
  for (int deg = 1; deg <= ATTN_DEGREE; deg++) {
    const long hi = cnt;
    for (long p = lo; p < hi; p++) {
      const int lastv = var[p];
      int runlen = 0;
      for (long t = p; t > 0 && var[t] == lastv; t = par[t]) runlen++;
      for (int i = lastv < 0 ? 0 : lastv; i < ATTN_D; i++) {
        par[cnt] = (int)p;
        var[cnt] = i;
        coef[cnt] = 1.0f / sqrtf((float)(i == lastv ? runlen + 1 : 1));
        cnt++;
      }
    }
    lo = hi;
  }
  return cnt;
}
#else
/* Exponents e_t = w_t.x - |x|^2/2 of x (a row times sqrt(scale)) into f, w the r x d directions; returns their max. */
static float lf_expo(const float *x, const float *w, long r, float *f) {
  float nrm = 0.0f;
  for (int i = 0; i < ATTN_D; i++) nrm += x[i] * x[i];
  float mx = -INFINITY;
  for (long t = 0; t < r; t++) {
    float e = 0.0f;
    const float *wt = w + t * ATTN_D;
    for (int i = 0; i < ATTN_D; i++) e += wt[i] * x[i];
    e -= 0.5f * nrm;
    f[t] = e;
    if (e > mx) mx = e;
  }
  return mx;
}
#endif
#endif /* ATTN_D */

#endif
