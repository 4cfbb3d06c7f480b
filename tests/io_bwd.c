/* io_bwd: the counting build of the CPU flash backward (templates/flash_bwd.c) moves exactly what
 * attn_io_formula_bwd says — partial blocks, Br != Bc, causal with n_kv != n both ways, grouped-query heads, batch,
 * d_v != d, one chunk a KV head and several — never less than reading Q, K, V, O, dO and writing dQ, dK, dV once,
 * and its gradients are still right (within 1e-5 of fp64). The closed form is Theta(n^2 d^2 / M) at the tiles
 * attn_io_choose_bwd picks: 4x for 2n, about half for 2M, n^2 d^2 / M within a constant over M; the chunks' partials
 * within 1 GiB. */
#include "check.h"
#include <math.h>
#include <string.h>
#include "io_theory.h"
#include "spec_bwd.h"

static attn_spec bwd_spec(int d, int dv, int br, int bc, int causal) {
  attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, ATTN_F32, d, causal);
  s.dv = dv == d ? 0 : dv;
  s.br = br;
  s.bc = bc;
  return s;
}

/* fp64 lse of each row over the keys it sees (-inf for none). */
static void lse_ref(const attn_problem *p, const float *q, const float *k, float *lse) {
  const long G = p->heads / p->heads_kv;
  for (long bh = 0; bh < (long)p->batch * p->heads; bh++)
    for (long i = 0; i < p->n; i++) {
      const long bkv = bh / p->heads * p->heads_kv + bh % p->heads / G;
      long lo, hi;
      attn_visible_keys(p, i, &lo, &hi);
      double mx = -INFINITY, sum = 0;
      for (int pass = 0; pass < 2; pass++)
        for (long j = lo; j < hi; j++) {
          double a = 0;
          for (int c = 0; c < p->d; c++) a += (double)q[(bh * p->n + i) * p->d + c] * k[(bkv * p->n_kv + j) * p->d + c];
          a *= p->scale;
          if (!pass && a > mx) mx = a;
          if (pass) sum += exp(a - mx);
        }
      lse[bh * p->n + i] = hi > lo ? (float)(mx + log(sum)) : -INFINITY;
    }
}

static void bwd_case(attn_runtime *rt, attn_cpu_kernel *kern, const attn_spec *s, int batch, int heads, int heads_kv,
                     int n, int n_kv) {
  attn_problem p0 = {.batch = batch, .heads = heads, .heads_kv = heads_kv, .n = n, .n_kv = n_kv, .d = s->d,
                     .d_v = attn_spec_dv(s), .causal = s->causal}, p;
  if (attn_problem_normalize(rt, &p0, &p) != ATTN_OK) {
    CHECK(0, "normalize: %s", attn_last_error(rt));
    return;
  }
  const size_t nq = (size_t)batch * heads * n * p.d, nk = (size_t)batch * heads_kv * n_kv * p.d;
  const size_t nv = (size_t)batch * heads_kv * n_kv * p.d_v, no = (size_t)batch * heads * n * p.d_v;
  float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nv * 4), *g = malloc(no * 4), *o = malloc(no * 4);
  float *lse = malloc((size_t)batch * heads * n * 4), *dq = malloc(nq * 4), *dk = malloc(nk * 4), *dv = malloc(nv * 4);
  double *ro = malloc(no * 8), *rq = malloc(nq * 8), *rk = malloc(nk * 8), *rv = malloc(nv * 8);
  if (!q || !k || !v || !g || !o || !lse || !dq || !dk || !dv || !ro || !rq || !rk || !rv) {
    CHECK(0, "out of memory");
  } else {
    const unsigned long long seed = test_seed() * 31 + (unsigned long long)n * 7 + (unsigned long long)n_kv;
    attn_fill_random(q, nq, seed), attn_fill_random(k, nk, seed + 1), attn_fill_random(v, nv, seed + 2);
    attn_fill_random(g, no, seed + 3);
    attn_reference(&p, q, k, v, ro);
    for (size_t i = 0; i < no; i++) o[i] = (float)ro[i];
    lse_ref(&p, q, k, lse);
    attn_poison(dq, nq), attn_poison(dk, nk), attn_poison(dv, nv);
    attn_kargs a = {.q = q, .k = k, .v = v, .o = o, .batch = batch, .heads = heads, .heads_kv = heads_kv, .n = n,
                    .n_kv = n_kv, .scale = p.scale, .lse = lse, .dout = g, .dq = dq, .dk = dk, .dv = dv};
    attn_io io = {0, 0};
    int rc = attn_cpu_run(rt, kern, &a, &io);
    CHECK(rc == ATTN_OK, "run: %s", attn_last_error(rt));
    unsigned long long fr = 0, fw = 0;
    CHECK(attn_io_formula_bwd(s, batch, heads, heads_kv, n, n_kv, &fr, &fw) == ATTN_OK, "formula refused");
    attn_reference_backward(&p, q, k, v, o, g, rq, rk, rv);
    const double e = fmax(attn_rel_error(rq, dq, nq), fmax(attn_rel_error(rk, dk, nk), attn_rel_error(rv, dv, nv)));
    const double floor = (double)(nq + nk + nv + 2 * no) + (double)(nq + nk + nv);
    char txt[256];
    attn_spec_summary(s, txt, sizeof txt);
    printf("%-36s b=%d h=%d/%d n=%-3d n_kv=%-3d reads %8llu (formula %8llu) writes %7llu (formula %7llu) err %.2e\n",
           txt, batch, heads, heads_kv, n, n_kv, io.reads, fr, io.writes, fw, e);
    CHECK(io.reads == fr && io.writes == fw, "%s b=%d h=%d/%d n=%d n_kv=%d: counted %llu/%llu, formula %llu/%llu", txt,
          batch, heads, heads_kv, n, n_kv, io.reads, io.writes, fr, fw);
    CHECK((double)(io.reads + io.writes) >= floor, "%s: count %llu below the floor %.0f", txt, io.reads + io.writes,
          floor);
    CHECK(e <= 1e-5, "%s b=%d h=%d/%d n=%d n_kv=%d: gradients' rel error %.3e", txt, batch, heads, heads_kv, n, n_kv,
          e);
  }
  free(q), free(k), free(v), free(g), free(o), free(lse), free(dq), free(dk), free(dv);
  free(ro), free(rq), free(rk), free(rv);
}

static double total_at(int d, long n, double M) {
  attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, ATTN_F32, d, 0);
  char err[256];
  if (attn_io_choose_bwd(&s, n, M, err, sizeof err) != ATTN_OK) return -1;
  unsigned long long r = 0, w = 0;
  if (attn_io_formula_bwd(&s, 1, 1, 1, n, n, &r, &w) != ATTN_OK) return -1;
  return (double)(r + w);
}

int main(void) {
  attn_runtime *rt = NULL;
  if (attn_open(NULL, ATTN_TARGET_CPU, &rt) != ATTN_OK) {
    fprintf(stderr, "attn_open: %s\n", attn_last_error(NULL));
    return 1;
  }
  /* two kernels (each a compile): Br != Bc, causal, partial blocks; d_v != d, odd tiles, not causal */
  const attn_spec s1 = bwd_spec(32, 32, 16, 24, 1), s2 = bwd_spec(16, 24, 7, 13, 0);
  const attn_spec *specs[2] = {&s1, &s2};
  for (int i = 0; i < 2; i++) {
    char err[256];
    CHECK(attn_spec_check_backward(specs[i], err, sizeof err) == ATTN_OK, "spec %d: %s", i, err);
    attn_cpu_kernel *kern = NULL;
    if (attn_cpu_load_backward(rt, specs[i], 1, &kern) != ATTN_OK) {
      CHECK(0, "counting backward kernel %d: %s", i, attn_last_error(rt));
      continue;
    }
    bwd_case(rt, kern, specs[i], 1, 1, 1, 70, 70);  /* chunks: one a key block */
    bwd_case(rt, kern, specs[i], 1, 1, 1, 45, 100); /* n_kv > n: causal keys no row sees */
    bwd_case(rt, kern, specs[i], 1, 4, 2, 61, 33);  /* GQA; n > n_kv: causal rows that see no key */
    bwd_case(rt, kern, specs[i], 4, 4, 4, 30, 50);  /* 16 KV heads: one chunk each */
    attn_cpu_unload(kern);
  }
  /* Theta(n^2 d^2 / M) at the chosen tiles, from the closed form, where the n^2 term leads (the chunks' partials add
   * Theta(C n d) with C <= 16: about 12% at M = 2^15 here) */
  const int d = 64;
  const long n = 16384;
  for (double M = 4096; M <= 32768; M *= 2) {
    const double t1 = total_at(d, n, M), t2 = total_at(d, 2 * n, M), tm = total_at(d, n, 2 * M);
    const double c = t1 * M / ((double)n * n * d * d);
    printf("M=%-6.0f n=%ld: %.4g entries (x M / n^2 d^2 = %.2f); 2n: x%.2f; 2M: x%.2f\n", M, n, t1, c, t2 / t1,
           tm / t1);
    CHECK(t1 > 0 && t2 / t1 > 3.5 && t2 / t1 < 4.1, "M=%.0f: doubling n multiplies the count by %.2f, not ~4", M,
          t2 / t1);
    CHECK(tm / t1 > 0.45 && tm / t1 < 0.6, "M=%.0f: doubling M multiplies the count by %.2f, not ~1/2", M, tm / t1);
    CHECK(c > 4 && c < 32, "M=%.0f: count x M / (n^2 d^2) = %.2f, outside the constant's [4, 32]", M, c);
  }
  /* the chunks' partials stay within 1 GiB: one head of n = 2^18, d = 128 (128 MiB of fp32 dQ) takes 8 chunks, not
   * 16 (C read back from the writes: C n (d + 1) + key blocks x n d + n_kv (d + d_v) + n d, non-causal) */
  {
    attn_spec s = bwd_spec(128, 128, 64, 64, 0);
    const long nn = 1L << 18;
    unsigned long long r = 0, w = 0;
    CHECK(attn_io_formula_bwd(&s, 1, 1, 1, nn, nn, &r, &w) == ATTN_OK, "formula refused n=%ld", nn);
    const double C = ((double)w - (double)(nn / 64) * nn * 128 - (double)nn * 256 - (double)nn * 128) / (nn * 129.0);
    printf("n=%ld d=128, one head: %.0f chunks\n", nn, C);
    CHECK(C == 8, "n=%ld d=128: %.3f chunks, expected 8 (1 GiB of partials)", nn, C);
  }
  attn_close(rt);
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
