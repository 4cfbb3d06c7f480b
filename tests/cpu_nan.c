/* cpu_nan: NaN and infinity propagation of the CPU kernels, element by element against the fp64 reference
 * (runtime/reference.c), whose semantics are those of a plain softmax(scale Q K^T) V (PyTorch's
 * scaled_dot_product_attention): a NaN in query row i makes output row i NaN; a NaN in key row j makes every row that
 * sees key j NaN (causal: bottom-right aligned); a NaN in v[j][c] makes column c NaN in the rows that see key j; a
 * score of +inf gives inf - inf = NaN in its row; a score of -inf gets weight 0 unless every key the row sees has
 * one (0/0: NaN); a row that sees no key (causal, n > n_kv) outputs zeros whatever the inputs hold.
 *
 * argv[1] picks a group: "flash" (the default tiles and small ones), "flash_split_all" (split-K, S = 2 and 3, with
 * both tilings), "flash_split" (CI's sample of it: each tiling on two of the four d, so that every d meets one split
 * kernel; flash covers every d's unsplit kernel), "smallcache", "lowrank" (random and Taylor features; approximate:
 * the NaN pattern must be the reference's exactly, the finite elements within a relative error bound). Every group
 * but flash_split runs d in {16, 40, 64, 128},
 * causal off and on, shapes with n = 1, odd n, n < n_kv and n > n_kv (causal: rows that see no key), one and two KV
 * heads, and injects: nothing, a NaN in one q entry, a NaN in one k entry, a NaN in one v entry, +inf in one q entry,
 * -inf in one k entry, -inf in one k entry with q > 0 (every row gets a -inf score for that key; a row whose only
 * visible key it is gets 0/0), and -inf in one column of every key with q > 0 (every row that sees a key: 0/0). The
 * output is poisoned with a number (not NaN) before each run, so a NaN where one is expected comes from the kernel. */
#include <string.h>
#include "cpu_util.h"

#define POISON 12345.0f

enum { INJ_NONE, INJ_Q_NAN, INJ_K_NAN, INJ_V_NAN, INJ_Q_PINF, INJ_K_NINF, INJ_K_NINF_POSQ, INJ_K_NINF_ALL, INJ_COUNT };
static const char *const inj_names[INJ_COUNT] = {"none",     "q NaN",  "k NaN",         "v NaN",
                                                 "q +inf",   "k -inf", "k -inf, q >= 0", "all k -inf, q >= 0"};

static unsigned long long rng_state;
static long rnd(long below) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (long)((rng_state >> 33) % (unsigned long long)below);
}

/* Puts the injection into q, k, v (fresh random inputs of c); says where into what (for messages). */
static void inject(case_bufs *c, int inj, char *what, size_t len) {
  const attn_problem *p = &c->p;
  const long d = p->d, hq = rnd(p->heads), hk = rnd(p->heads_kv), b = rnd(p->batch);
  const long i = rnd(p->n), j = rnd(p->n_kv), col = rnd(d);
  float *qrow = c->q + ((b * p->heads + hq) * p->n + i) * d;
  float *krow = c->k + ((b * p->heads_kv + hk) * p->n_kv + j) * d;
  float *vrow = c->v + ((b * p->heads_kv + hk) * p->n_kv + j) * d;
  snprintf(what, len, "%s", inj_names[inj]);
  switch (inj) {
    case INJ_Q_NAN:
      qrow[col] = NAN;
      snprintf(what, len, "q NaN at batch %ld head %ld row %ld col %ld", b, hq, i, col);
      break;
    case INJ_K_NAN:
      krow[col] = NAN;
      snprintf(what, len, "k NaN at batch %ld kv head %ld row %ld col %ld", b, hk, j, col);
      break;
    case INJ_V_NAN:
      vrow[col] = NAN;
      snprintf(what, len, "v NaN at batch %ld kv head %ld row %ld col %ld", b, hk, j, col);
      break;
    case INJ_Q_PINF:
      qrow[col] = INFINITY;
      snprintf(what, len, "q +inf at batch %ld head %ld row %ld col %ld", b, hq, i, col);
      break;
    case INJ_K_NINF:
      krow[col] = -INFINITY;
      snprintf(what, len, "k -inf at batch %ld kv head %ld row %ld col %ld", b, hk, j, col);
      break;
    case INJ_K_NINF_POSQ:
    case INJ_K_NINF_ALL:
      for (size_t x = 0; x < c->nq; x++) c->q[x] = fabsf(c->q[x]) + 1e-3f; /* > 0: the -inf keeps its sign */
      if (inj == INJ_K_NINF_POSQ) {
        /* key 0 half the time: with causal and n = n_kv, row 0 sees only it */
        const long jj = rnd(2) ? 0 : j;
        c->k[((b * p->heads_kv + hk) * p->n_kv + jj) * d + col] = -INFINITY;
        snprintf(what, len, "k -inf, q > 0, at batch %ld kv head %ld row %ld col %ld", b, hk, jj, col);
      } else {
        for (long x = 0; x < (long)(c->nkv / (size_t)d); x++) c->k[x * d + col] = -INFINITY;
        snprintf(what, len, "k -inf in col %ld of every key, q > 0", col);
      }
      break;
    default:
      break;
  }
}

/* Element by element: NaN exactly where the reference is NaN; elsewhere finite and within tol of it (abs_tol >= 0:
 * |out - ref| <= abs_tol per element; else the relative error over the non-NaN elements <= rel_tol). Returns the
 * number of mismatches. */
static long compare(const case_bufs *c, double abs_tol, double rel_tol, const char *ctx, double *maxerr) {
  long bad = 0, nan_ref = 0;
  double num = 0, den = 0, mx = 0;
  for (size_t x = 0; x < c->nq; x++) {
    const double r = c->ref[x], o = c->o[x];
    const int rn = isnan(r), on = isnan(o);
    nan_ref += rn;
    if (rn != on || (!rn && !isfinite(o)) || (!rn && abs_tol >= 0 && !(fabs(o - r) <= abs_tol))) {
      if (bad < 5) {
        const long row = (long)(x / (size_t)c->p.d), col = (long)(x % (size_t)c->p.d);
        fprintf(stderr, "  %s: element %zu (q row %ld of head-major rows, col %ld): out %.9g, reference %.17g\n", ctx,
                x, row, col, o, r);
      }
      bad++;
      continue;
    }
    if (!rn) {
      const double e = fabs(o - r);
      if (e > mx) mx = e;
      num += e * e;
      den += r * r;
    }
  }
  if (abs_tol < 0 && bad == 0) {
    const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    if (!(rel <= rel_tol)) {
      fprintf(stderr, "  %s: relative error %.3g over the %zu non-NaN elements > %g\n", ctx, rel,
              c->nq - (size_t)nan_ref, rel_tol);
      bad++;
    }
    mx = rel;
  }
  *maxerr = mx;
  return bad;
}

typedef struct {
  const char *name;
  attn_algo algo;
  int br, bc, split, tile, feature; /* 0: the default's; feature 1: Taylor (lowrank's default: random) */
  float scale_mul;                   /* 0: the default scale 1/sqrt(d); else that times 1/sqrt(d) */
  double rel_tol;                    /* lowrank: the finite elements' relative error bound */
  unsigned dsel;                     /* which of ds[] (bit i: ds[i]); 0: all of them */
} variant;

static int cases;

static void run_variant(attn_runtime *rt, const variant *va, unsigned long long *seed) {
  /* 40: not a multiple of 16, so flash's vectors are 8 wide even with AVX-512 (its portable 2^x) */
  static const int ds[] = {16, 40, 64, 128};
  /* n, n_kv, heads_kv (heads = 2) */
  static const int shapes[][3] = {{1, 1, 1}, {1, 45, 2}, {17, 17, 1}, {33, 70, 2}, {70, 33, 1}, {97, 200, 2}};
  for (int di = 0; di < 4; di++)
    for (int causal = 0; causal <= 1; causal++) {
      if (va->dsel && !(va->dsel >> di & 1)) continue; /* not in this variant's sample */
      const int d = ds[di];
      attn_spec s = attn_spec_default(va->algo, ATTN_TARGET_CPU, ATTN_F32, d, causal);
      if (va->br) s.br = va->br;
      if (va->bc) s.bc = va->bc;
      if (va->split) s.split = va->split;
      if (va->tile) s.tile = va->tile;
      if (va->algo == ATTN_ALGO_LOWRANK && va->feature == 1) {
        s.feature = ATTN_FEAT_TAYLOR;
        s.degree = 2;
      }
      char sum[256];
      attn_spec_summary(&s, sum, sizeof sum);
      double worst = 0;
      long bad_cases = 0;
      for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        attn_problem p0 = {.batch = 1, .heads = 2, .heads_kv = shapes[si][2], .n = shapes[si][0],
                           .n_kv = shapes[si][1], .d = d, .causal = causal,
                           .tolerance = va->algo == ATTN_ALGO_LOWRANK ? 0.5 : 0,
                           .scale = va->scale_mul > 0 ? va->scale_mul / sqrtf((float)d) : 0.0f};
        for (int inj = 0; inj < INJ_COUNT; inj++) {
          case_bufs c;
          memset(&c, 0, sizeof c);
          cases++;
          if (case_alloc(&p0, (*seed)++, &c) != 0) {
            CHECK(0, "%s: cannot set up buffers", shape(&p0));
            case_free(&c);
            continue;
          }
          rng_state = test_seed() * 7919ULL + *seed;
          char what[160], ctx[1024];
          inject(&c, inj, what, sizeof what);
          attn_reference(&c.p, c.q, c.k, c.v, c.ref);
          for (size_t x = 0; x < c.nq; x++) c.o[x] = POISON;
          snprintf(ctx, sizeof ctx, "%s [%s] %s", shape(&c.p), sum, what);
          attn_plan *plan = NULL;
          int rc = attn_plan_create_spec(rt, &c.p, &s, 0, "test", &plan);
          CHECK(rc == ATTN_OK, "%s: plan: %s: %s", ctx, attn_strerror(rc), attn_last_error(rt));
          if (rc == ATTN_OK) {
            rc = attn_execute(plan, c.q, c.k, c.v, c.o);
            CHECK(rc == ATTN_OK, "%s: attn_execute: %s: %s", ctx, attn_strerror(rc), attn_last_error(rt));
            if (rc == ATTN_OK) {
              double err = 0;
              const long bad = va->algo == ATTN_ALGO_LOWRANK ? compare(&c, -1, va->rel_tol, ctx, &err)
                                                             : compare(&c, 2e-5, 0, ctx, &err);
              CHECK(bad == 0, "%s: %ld mismatches", ctx, bad);
              if (err > worst) worst = err;
              bad_cases += bad != 0;
            }
          }
          attn_plan_destroy(plan);
          case_free(&c);
        }
      }
      printf("%s   %-50s %d shapes x %d injections, worst %s %.2e\n", bad_cases ? "FAIL" : "ok  ", sum,
             (int)(sizeof shapes / sizeof shapes[0]), INJ_COUNT,
             va->algo == ATTN_ALGO_LOWRANK ? "relative error" : "abs error", worst);
    }
}

int main(int argc, char **argv) {
  /* Tiles: the defaults, and small ones so that these n span several query and key blocks (partial ones too). The
   * random features are accurate enough to check only at a smaller scale (at 1/sqrt(d) their error on these
   * inputs reaches 100% and more); the Taylor ones within a few percent at the default scale. */
  static const variant variants[] = {
      {"flash", ATTN_ALGO_FLASH, 0, 0, 0, 0, 0, 0, 0, 0},
      {"flash", ATTN_ALGO_FLASH, 16, 32, 0, 0, 0, 0, 0, 0},
      {"flash_split_all", ATTN_ALGO_FLASH, 0, 0, 2, 0, 0, 0, 0, 0},
      {"flash_split_all", ATTN_ALGO_FLASH, 16, 32, 3, 0, 0, 0, 0, 0},
      /* each split kernel compiles for its d: CI's sample, d 40 and 64 with the default tiles (cpu_correct's split
       * group compiles the d = 64 ones too), 16 and 128 with the small ones */
      {"flash_split", ATTN_ALGO_FLASH, 0, 0, 2, 0, 0, 0, 0, 1u << 1 | 1u << 2},
      {"flash_split", ATTN_ALGO_FLASH, 16, 32, 3, 0, 0, 0, 0, 1u << 0 | 1u << 3},
      {"smallcache", ATTN_ALGO_SMALLCACHE, 0, 0, 0, 0, 0, 0, 0, 0},
      {"smallcache", ATTN_ALGO_SMALLCACHE, 16, 16, 0, 8, 0, 0, 0, 0},
      {"lowrank", ATTN_ALGO_LOWRANK, 0, 0, 0, 0, 0, 0.2f, 0.5, 0},
      {"lowrank", ATTN_ALGO_LOWRANK, 16, 16, 0, 0, 1, 0, 0.25, 0},
  };
  if (argc != 2) {
    fprintf(stderr, "usage: cpu_nan flash|flash_split|flash_split_all|smallcache|lowrank\n");
    return 2;
  }
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CPU, &rt);
  if (rc != ATTN_OK) {
    fprintf(stderr, "attn_open: %s: %s\n", attn_strerror(rc), attn_last_error(NULL));
    return 1;
  }
  unsigned long long seed = 1;
  int found = 0;
  for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++)
    if (strcmp(variants[i].name, argv[1]) == 0) {
      found = 1;
      run_variant(rt, &variants[i], &seed);
    }
  attn_close(rt);
  if (!found) {
    fprintf(stderr, "cpu_nan: unknown group '%s'\n", argv[1]);
    return 2;
  }
  printf("cpu_nan %s: %d cases, %d checks, %d failures\n", argv[1], cases, checks, failures);
  return failures ? 1 : 0;
}
