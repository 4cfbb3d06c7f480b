/* quickstart: an application of libattn. Opens the runtime on a tuning database, plans one attention problem
 * (the tuned kernel when the database has one, else a default), runs it on random data and checks the result
 * against a plain double-precision attention.
 *   quickstart [DB [batch heads n d [causal]]]     DB: a path, or "-" for $ATTN_DB / the default database */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "attn.h"

/* O = softmax(scale Q K^T) V in double precision, per (batch, head); causal: key j visible to query i iff j <= i. */
static void reference(const attn_problem *p, const float *q, const float *k, const float *v, double *o) {
  const int n = p->n, d = p->d;
  const double scale = 1.0 / sqrt((double)d);
  double *s = malloc(sizeof(double) * (size_t)n);
  if (!s) return;
  for (long bh = 0; bh < (long)p->batch * p->heads; bh++) {
    const float *qh = q + bh * n * d, *kh = k + bh * n * d, *vh = v + bh * n * d;
    for (int i = 0; i < n; i++) {
      const int seen = p->causal ? i + 1 : n;
      double mx = -INFINITY, sum = 0;
      for (int j = 0; j < seen; j++) {
        double acc = 0;
        for (int c = 0; c < d; c++) acc += (double)qh[(long)i * d + c] * kh[(long)j * d + c];
        s[j] = acc * scale;
        mx = s[j] > mx ? s[j] : mx;
      }
      for (int j = 0; j < seen; j++) sum += (s[j] = exp(s[j] - mx));
      double *orow = o + (bh * n + i) * d;
      for (int c = 0; c < d; c++) orow[c] = 0;
      for (int j = 0; j < seen; j++)
        for (int c = 0; c < d; c++) orow[c] += s[j] / sum * vh[(long)j * d + c];
    }
  }
  free(s);
}

int main(int argc, char **argv) {
  const char *db = argc > 1 && strcmp(argv[1], "-") != 0 ? argv[1] : NULL;
  attn_problem p = {.batch = 1, .heads = 4, .n = 1024, .d = 64};
  if (argc > 2) {
    if (argc < 6) {
      fprintf(stderr, "usage: quickstart [DB|- [batch heads n d [causal]]]\n");
      return 2;
    }
    p.batch = atoi(argv[2]);
    p.heads = atoi(argv[3]);
    p.n = atoi(argv[4]);
    p.d = atoi(argv[5]);
    p.causal = argc > 6 ? atoi(argv[6]) : 0;
  }
  attn_runtime *rt = NULL;
  int rc = attn_open(db, ATTN_TARGET_CPU, &rt);
  if (rc != ATTN_OK) {
    fprintf(stderr, "quickstart: attn_open: %s: %s\n", attn_strerror(rc), attn_last_error(NULL));
    return 1;
  }
  attn_plan *plan = NULL;
  rc = attn_plan_create(rt, &p, &plan);
  if (rc != ATTN_OK) {
    fprintf(stderr, "quickstart: attn_plan_create: %s: %s\n", attn_strerror(rc), attn_last_error(rt));
    attn_close(rt);
    return 1;
  }
  const size_t count = (size_t)p.batch * p.heads * p.n * p.d;
  float *q = malloc(count * sizeof *q), *k = malloc(count * sizeof *k), *v = malloc(count * sizeof *v);
  float *o = malloc(count * sizeof *o);
  double *ref = malloc(count * sizeof *ref);
  if (!q || !k || !v || !o || !ref) {
    fprintf(stderr, "quickstart: out of memory\n");
    return 1;
  }
  unsigned long long x = 0x2545f4914f6cdd1dULL;
  float *arrays[] = {q, k, v};
  for (int a = 0; a < 3; a++)
    for (size_t i = 0; i < count; i++) { /* xorshift64*: uniform(-1, 1) */
      x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
      arrays[a][i] = (float)((double)((x * 0x2545f4914f6cdd1dULL) >> 40) / 8388608.0 - 1.0);
    }
  for (size_t i = 0; i < count; i++) o[i] = NAN; /* any entry the kernel misses shows up as an error */
  rc = attn_execute(plan, q, k, v, o);
  if (rc != ATTN_OK) {
    fprintf(stderr, "quickstart: attn_execute: %s: %s\n", attn_strerror(rc), attn_last_error(rt));
    return 1;
  }
  reference(&p, q, k, v, ref);
  double num = 0, den = 0;
  for (size_t i = 0; i < count; i++) {
    const double e = o[i] - ref[i];
    num += isfinite(o[i]) ? e * e : INFINITY;
    den += ref[i] * ref[i];
  }
  const double err = den > 0 ? sqrt(num / den) : sqrt(num);
  const int pass = err <= 1e-5;
  printf("quickstart: %s: rel error %.2e, %s\n", attn_plan_describe(plan), err, pass ? "PASS" : "FAIL");
  free(q), free(k), free(v), free(o), free(ref);
  attn_plan_destroy(plan);
  attn_close(rt);
  return pass ? 0 : 1;
}
