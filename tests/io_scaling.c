/* io_scaling: counted transfers follow the theory's regimes. With tiles chosen for a fast memory of M entries:
 * flash ~ n^2 d^2 / M for M >= d^2 (halves when M doubles); smallcache ~ n^2 d / sqrt(M) for M < d^2 (halves when
 * M quadruples) and beats flash there, by more the smaller M is; lowrank is 4 n d, linear in n; no count falls
 * below Saha & Ye's bound max(min(n^2 d^2/M, n^2 d/sqrt(M)), 4 n d). Every count equals its closed form. */
#include "io_util.h"

static double count(attn_runtime *rt, attn_algo algo, int n, int d, double M) {
  attn_spec s = attn_spec_default(algo, ATTN_TARGET_CPU, ATTN_F32, d, 0);
  char err[256];
  if (attn_io_choose(&s, n, M, err, sizeof err) != ATTN_OK) {
    CHECK(0, "%s M=%.0f: %s", attn_algo_name(algo), M, err);
    return -1;
  }
  attn_io io = {0, 0};
  double e = INFINITY;
  if (io_run(rt, &s, 1, 1, 1, n, n, &io, &e) != ATTN_OK) {
    CHECK(0, "%s M=%.0f: run failed", attn_algo_name(algo), M);
    return -1;
  }
  unsigned long long fr, fw;
  attn_io_formula(&s, 1, n, n, &fr, &fw);
  double total = (double)(io.reads + io.writes), lb = attn_io_lower_bound(n, d, d, M);
  printf("%-10s n=%-4d d=%-3d M=%-7.0f br=%-4d bc=%-4d tile=%-3d count %10.0f formula %10llu bound %9.0f err %.2e\n",
         attn_algo_name(algo), n, d, M, s.br, s.bc, s.tile, total, fr + fw, lb, e);
  CHECK(io.reads == fr && io.writes == fw, "%s M=%.0f: counted %llu/%llu, formula %llu/%llu", attn_algo_name(algo), M,
        io.reads, io.writes, fr, fw);
  CHECK(total >= lb, "%s M=%.0f: count %.0f below the lower bound %.0f", attn_algo_name(algo), M, total, lb);
  if (algo != ATTN_ALGO_LOWRANK) CHECK(e <= 1e-5, "%s M=%.0f: rel error %.3e", attn_algo_name(algo), M, e);
  return total;
}

int main(void) {
  attn_runtime *rt = io_open();
  /* flash, M >= d^2: count * M / (n^2 d^2) is a constant near 4, and doubling M halves the count */
  {
    const int n = 512, d = 32;
    double prev = 0;
    for (double M = 2048; M <= 8192; M *= 2) {
      double c = count(rt, ATTN_ALGO_FLASH, n, d, M);
      double k = c * M / ((double)n * n * d * d);
      CHECK(k > 2.0 && k < 8.0, "flash M=%.0f: count*M/(n^2 d^2) = %.2f, expected about 4", M, k);
      if (prev > 0) CHECK(prev / c > 1.5 && prev / c < 2.5, "flash: doubling M to %.0f gave ratio %.2f", M, prev / c);
      prev = c;
    }
  }
  /* smallcache, M < d^2: count * sqrt(M) / (n^2 d) is a constant near 8 + sqrt(M)/d, and quadrupling M halves it */
  {
    const int n = 256, d = 64;
    double prev = 0;
    for (double M = 64; M <= 1024; M *= 4) {
      double c = count(rt, ATTN_ALGO_SMALLCACHE, n, d, M);
      double k = c * sqrt(M) / ((double)n * n * d);
      CHECK(k > 6.0 && k < 12.0, "smallcache M=%.0f: count*sqrt(M)/(n^2 d) = %.2f, expected about 8", M, k);
      if (prev > 0)
        CHECK(prev / c > 1.7 && prev / c < 2.3, "smallcache: quadrupling M to %.0f gave ratio %.2f", M, prev / c);
      prev = c;
    }
  }
  /* below d^2 smallcache beats flash, by more as M shrinks (theory: flash/smallcache ~ d / (2 sqrt(M))) */
  {
    const int n = 256, d = 64;
    double prev = 0;
    for (double M = 1024; M >= 512; M /= 2) {
      double f = count(rt, ATTN_ALGO_FLASH, n, d, M), s = count(rt, ATTN_ALGO_SMALLCACHE, n, d, M);
      double gain = f / s, theory = d / (2.0 * sqrt(M));
      printf("M=%.0f: flash/smallcache = %.2f (d/(2 sqrt M) = %.2f)\n", M, gain, theory);
      CHECK(gain > 1.0, "smallcache does not beat flash at M=%.0f < d^2: %.0f vs %.0f", M, s, f);
      CHECK(gain > 0.5 * theory && gain < 4.0 * theory, "M=%.0f: gain %.2f far from d/(2 sqrt M) = %.2f", M, gain,
            theory);
      if (prev > 0) CHECK(gain > prev, "the gain does not grow as M shrinks: %.2f then %.2f", prev, gain);
      prev = gain;
    }
  }
  /* lowrank: exactly 4 n d, linear in n */
  {
    const int d = 32;
    for (int n = 128; n <= 512; n *= 2) {
      double c = count(rt, ATTN_ALGO_LOWRANK, n, d, 65536);
      CHECK(c == 4.0 * n * d, "lowrank n=%d: count %.0f, expected 4 n d = %.0f", n, c, 4.0 * n * d);
    }
  }
  attn_close(rt);
  printf("%s\n", failures ? "FAIL" : "PASS");
  return failures ? 1 : 0;
}
