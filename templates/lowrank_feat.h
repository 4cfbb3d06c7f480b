/* lowrank_feat.h: lowrank's feature map, shared by its forward on the CPU (lowrank.c) and on CUDA (lowrank.cu) and
 * by its gradient (lowrank_bwd.c), which must draw the same Taylor monomials or the same Gaussian directions, bit
 * for bit: a plan's features are its spec's, whatever the target, and the gradient differentiates what the forward
 * computed. The directions' generator is the fp64 reference's too (runtime/reference.c); the rest is specialised on
 * the including template's ATTN_D, ATTN_FEATURE, ATTN_DEGREE, ATTN_RANK and ATTN_SEED.
 * gen/embed.cmake puts this text in place of the templates' #include, so that the generated source, and with it the
 * compiled kernel's cache key, holds it. */
#ifndef ATTN_LOWRANK_FEAT_H
#define ATTN_LOWRANK_FEAT_H

/* C on the CPU; device code under NVRTC (lowrank.cu), which has no C headers and compiles with --use_fast_math.
 * ATTN_FEAT_FN qualifies the shared functions, ATTN_FEAT_CONST those lowrank.cu also needs as constants (the rank
 * sizes its shared memory), and ATTN_FEAT_RSQRT_RN(x) is 1/sqrt(x) rounded twice to nearest as C's 1.0f / sqrtf(x)
 * is, which fast math's approximations are not. */
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define ATTN_FEAT_DEVICE 1
#define ATTN_FEAT_FN static __device__ __forceinline__
#define ATTN_FEAT_CONST static constexpr __host__ __device__
#define ATTN_FEAT_RSQRT_RN(x) __frcp_rn(__fsqrt_rn(x))
typedef unsigned long long attn_lf_u64;
#else
#define ATTN_FEAT_DEVICE 0
#include <math.h>
#include <stdint.h>
#define ATTN_FEAT_FN static inline
#define ATTN_FEAT_CONST static inline
#define ATTN_FEAT_RSQRT_RN(x) (1.0f / sqrtf(x))
typedef uint64_t attn_lf_u64;
#endif

/* The Gaussian directions: splitmix64 from the seed, then Box-Muller, in float as the kernels keep them. Draw m
 * (1-based) of splitmix64 mixes st0 + m * 0x9E3779B97F4A7C15, so pair p (entries 2p and 2p + 1 of the row-major
 * r x d directions) takes draws 2p + 1 and 2p + 2 and needs no walk through the draws before it: the CPU fills the
 * directions in order (attn_lf_gauss), CUDA's threads a pair each. */
ATTN_FEAT_FN attn_lf_u64 attn_lf_mix(attn_lf_u64 z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
ATTN_FEAT_FN attn_lf_u64 attn_lf_state(attn_lf_u64 seed) { return seed * 0x2545F4914F6CDD1Dull + 1; }
ATTN_FEAT_FN void attn_lf_pair(attn_lf_u64 st0, attn_lf_u64 p, float *w0, float *w1) {
  const attn_lf_u64 golden = 0x9E3779B97F4A7C15ull;
  const double u1 = ((attn_lf_mix(st0 + (2 * p + 1) * golden) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  const double u2 = (attn_lf_mix(st0 + (2 * p + 2) * golden) >> 11) * (1.0 / 9007199254740992.0);
  const double rad = sqrt(-2.0 * log(u1));
  *w0 = (float)(rad * cos(6.283185307179586 * u2));
  *w1 = (float)(rad * sin(6.283185307179586 * u2));
}
/* cnt entries of the directions from the seed. */
ATTN_FEAT_FN void attn_lf_gauss(float *w, long cnt, attn_lf_u64 seed) {
  const attn_lf_u64 st0 = attn_lf_state(seed);
  for (long i = 0; i < cnt; i += 2) {
    float w0, w1;
    attn_lf_pair(st0, (attn_lf_u64)i / 2, &w0, &w1);
    w[i] = w0;
    if (i + 1 < cnt) w[i + 1] = w1;
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

/* C(d+g, g), the monomials of degree <= g in d variables: prod_{i=1..g} (d+i)/i, exact at each step. */
ATTN_FEAT_CONST long lf_monomials(int g) {
  long c = 1;
  for (int i = 1; i <= g; i++) c = c * (ATTN_D + i) / i;
  return c;
}

/* Rank of the feature map. */
ATTN_FEAT_CONST long lf_rank(void) {
#if ATTN_FEATURE == 0
  return lf_monomials(ATTN_DEGREE);
#else
  return ATTN_RANK;
#endif
}

/* Exponent w.x - |x|^2/2 of a random feature from its dot product w.x and |x|^2. */
ATTN_FEAT_FN float lf_rf_expo(float dot, float nrm) { return dot - 0.5f * nrm; }

#if ATTN_FEATURE == 0
/* Monomials of degree <= g in d variables, each built from a parent by one more factor x[var] with an index not
 * below the parent's last one (so each multiset once); coef = 1/sqrt(multiplicity of var in the child), whose
 * product along the chain is 1/sqrt(alpha!). Returns the number built (= r). */
ATTN_FEAT_FN long lf_taylor_table(int *par, int *var, float *coef) {
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
        coef[cnt] = ATTN_FEAT_RSQRT_RN((float)(i == lastv ? runlen + 1 : 1));
        cnt++;
      }
    }
    lo = hi;
  }
  return cnt;
}
#endif

#if !ATTN_FEAT_DEVICE /* the CPU templates' loops (lowrank.cu spreads them over threads) */
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

#if ATTN_FEATURE == 1
/* Exponents e_t = w_t.x - |x|^2/2 of x (a row times sqrt(scale)) into f, w the r x d directions; returns their max. */
static float lf_expo(const float *x, const float *w, long r, float *f) {
  float nrm = 0.0f;
  for (int i = 0; i < ATTN_D; i++) nrm += x[i] * x[i];
  float mx = -INFINITY;
  for (long t = 0; t < r; t++) {
    float e = 0.0f;
    const float *wt = w + t * ATTN_D;
    for (int i = 0; i < ATTN_D; i++) e += wt[i] * x[i];
    e = lf_rf_expo(e, nrm);
    f[t] = e;
    if (e > mx) mx = e;
  }
  return mx;
}
#endif
#endif /* !ATTN_FEAT_DEVICE */
#endif /* ATTN_D */

#endif
