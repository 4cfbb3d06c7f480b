/* cpu_varlen: attn_execute_varlen (the kernels read the packed rows in place) on packed sequences of lengths 0, 1, odd
 * and the plan's full n, n_kv != n, GQA, d_v != d, causal both ways; flash in f32 and bf16 (whole 8-row query blocks
 * over 8-key tiles, a window, softcap and ALiBi) and smallcache in f16; with "all" also split-K flash and smallcache
 * with the modifiers. Each sequence is compared with the fp64 reference of that sequence alone (a key-less sequence
 * must give exact zeros), o poisoned first and its guard rows past total_q left alone. Bad cu_seqlens and NULL
 * pointers give ATTN_EINVAL with o untouched; lowrank and backward plans ATTN_EUNSUPPORTED. */
#include "cpu_util.h"

enum { NSEQ = 6, HEADS = 4, HEADS_KV = 2, N = 17, N_KV = 23, D = 16, DV = 24, GUARD = 3 };
/* 0 query rows; 1; a sequence with no keys; the full n; odd lengths; more queries than keys (causal rows see none). */
static const int LQ[NSEQ] = {0, 1, 7, 17, 5, 13}, LK[NSEQ] = {4, 5, 23, 11, 0, 9};

typedef struct {
  int cq[NSEQ + 1], ck[NSEQ + 1];
  long tq, tk;
  float *q, *k, *v, *o;   /* packed fp32 (rounded through the dtype); o has GUARD extra rows */
} packed;

static long qrow(void) { return (long)HEADS * D; }

static int pack_alloc(packed *b, attn_dtype dt, unsigned long long seed) {
  b->cq[0] = b->ck[0] = 0;
  for (int s = 0; s < NSEQ; s++) b->cq[s + 1] = b->cq[s] + LQ[s], b->ck[s + 1] = b->ck[s] + LK[s];
  b->tq = b->cq[NSEQ];
  b->tk = b->ck[NSEQ];
  b->q = malloc(sizeof(float) * (size_t)(b->tq * qrow()));
  b->k = malloc(sizeof(float) * (size_t)(b->tk * HEADS_KV * D));
  b->v = malloc(sizeof(float) * (size_t)(b->tk * HEADS_KV * DV));
  b->o = malloc(sizeof(float) * (size_t)((b->tq + GUARD) * HEADS * DV));
  if (!b->q || !b->k || !b->v || !b->o) return -1;
  seed = seed * 1000003ULL + test_seed() * 3;
  attn_fill_random(b->q, (size_t)(b->tq * qrow()), seed * 3 + 1);
  attn_fill_random(b->k, (size_t)(b->tk * HEADS_KV * D), seed * 3 + 2);
  attn_fill_random(b->v, (size_t)(b->tk * HEADS_KV * DV), seed * 3 + 3);
  attn_round_dtype(dt, b->q, (size_t)(b->tq * qrow()));
  attn_round_dtype(dt, b->k, (size_t)(b->tk * HEADS_KV * D));
  attn_round_dtype(dt, b->v, (size_t)(b->tk * HEADS_KV * DV));
  attn_poison(b->o, (size_t)((b->tq + GUARD) * HEADS * DV));
  return 0;
}

static void pack_free(packed *b) { free(b->q), free(b->k), free(b->v), free(b->o); }

/* rows [r0, r0 + len) of packed [total][heads][w] into [heads][len][w] */
static void gather(const float *pk, float *out, long r0, long len, long heads, long w) {
  for (long t = 0; t < len; t++)
    for (long h = 0; h < heads; h++) memcpy(out + (h * len + t) * w, pk + ((r0 + t) * heads + h) * w, sizeof(float) * w);
}

/* Runs varlen with inputs in the plan's dtype; o converted back to fp32 (guard rows too). */
static int run_varlen(attn_plan *plan, attn_dtype dt, const int *cq, const int *ck, packed *b) {
  if (dt == ATTN_F32) return attn_execute_varlen(plan, cq, ck, b->q, b->k, b->v, b->o);
  const size_t nq = (size_t)(b->tq * qrow()), nk = (size_t)(b->tk * HEADS_KV * D), nv = (size_t)(b->tk * HEADS_KV * DV),
               no = (size_t)((b->tq + GUARD) * HEADS * DV);
  unsigned short *q = malloc(2 * nq + 2), *k = malloc(2 * nk + 2), *v = malloc(2 * nv + 2), *o = malloc(2 * no + 2);
  int rc = ATTN_ENOMEM;
  if (q && k && v && o) {
    attn_to_dtype(dt, b->q, nq, q);
    attn_to_dtype(dt, b->k, nk, k);
    attn_to_dtype(dt, b->v, nv, v);
    attn_to_dtype(dt, b->o, no, o); /* the NaN poison, in half bits */
    rc = attn_execute_varlen(plan, cq, ck, q, k, v, o);
    attn_from_dtype(dt, o, no, b->o);
  }
  free(q), free(k), free(v), free(o);
  return rc;
}

static void check_sequences(const attn_problem *pp, const packed *b, double tol, const char *what) {
  for (int s = 0; s < NSEQ; s++) {
    const long lq = LQ[s], lk = LK[s];
    if (lq == 0) continue;
    float *got = malloc(sizeof(float) * (size_t)(HEADS * lq * DV));
    if (!got) {
      CHECK(0, "%s: out of memory", what);
      return;
    }
    gather(b->o, got, b->cq[s], lq, HEADS, DV);
    if (lk == 0) {
      long nonzero = 0;
      for (long x = 0; x < HEADS * lq * DV; x++) nonzero += got[x] != 0.0f;
      CHECK(nonzero == 0, "%s: sequence %d has no keys but %ld outputs are not 0", what, s, nonzero);
      free(got);
      continue;
    }
    attn_problem p1 = *pp, p;
    p1.batch = 1, p1.n = (int)lq, p1.n_kv = (int)lk;
    float *q = malloc(sizeof(float) * (size_t)(HEADS * lq * D)), *k = malloc(sizeof(float) * (size_t)(HEADS_KV * lk * D)),
          *v = malloc(sizeof(float) * (size_t)(HEADS_KV * lk * DV));
    double *ref = malloc(sizeof(double) * (size_t)(HEADS * lq * DV));
    CHECK(attn_problem_normalize(NULL, &p1, &p) == ATTN_OK, "%s: sequence %d: problem", what, s);
    if (q && k && v && ref) {
      gather(b->q, q, b->cq[s], lq, HEADS, D);
      gather(b->k, k, b->ck[s], lk, HEADS_KV, D);
      gather(b->v, v, b->ck[s], lk, HEADS_KV, DV);
      attn_reference(&p, q, k, v, ref);
      const double err = attn_rel_error(ref, got, (size_t)(HEADS * lq * DV));
      CHECK(err <= tol, "%s: sequence %d (n=%ld n_kv=%ld): rel error %g > %g", what, s, lq, lk, err, tol);
    } else {
      CHECK(0, "%s: out of memory", what);
    }
    free(q), free(k), free(v), free(ref), free(got);
  }
  long guard_written = 0;
  for (long x = b->tq * HEADS * DV; x < (b->tq + GUARD) * HEADS * DV; x++) guard_written += !isnan(b->o[x]);
  CHECK(guard_written == 0, "%s: %ld elements past total_q written", what, guard_written);
}

/* Every element of o still the poison: nothing was written. */
static long written(const packed *b) {
  long w = 0;
  for (long x = 0; x < (b->tq + GUARD) * HEADS * DV; x++) w += !isnan(b->o[x]);
  return w;
}

static void bad_inputs(attn_runtime *rt, attn_plan *plan, packed *b) {
  int cq[NSEQ + 1], ck[NSEQ + 1];
  struct { const char *what; int which, at, val; } cases[] = {
      {"cu_seqlens_q[0] = 1", 0, 0, 1},
      {"cu_seqlens_kv[0] = -1", 1, 0, -1},
      {"cu_seqlens_q decreasing", 0, 3, 0},
      {"cu_seqlens_kv decreasing at the end", 1, NSEQ, 0},
      {"a query sequence above n", 0, 4, 1 + N + 1 + 7},   /* sequence 3 gets n + 1 rows */
      {"a key sequence above n_kv", 1, 3, 4 + 5 + N_KV + 1}, /* sequence 2 gets n_kv + 1 rows */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    memcpy(cq, b->cq, sizeof cq);
    memcpy(ck, b->ck, sizeof ck);
    int *cu = cases[i].which ? ck : cq;
    const int delta = cases[i].val - cu[cases[i].at];
    /* shift the rest too, so only the named fault is present (not a decrease after it) */
    for (int j = cases[i].at; j <= NSEQ && cases[i].at != 0 && delta > 0; j++) cu[j] += delta;
    cu[cases[i].at] = cases[i].val;
    attn_poison(b->o, (size_t)((b->tq + GUARD) * HEADS * DV));
    const int rc = attn_execute_varlen(plan, cq, ck, b->q, b->k, b->v, b->o);
    const char *msg = attn_last_error(rt);
    CHECK(rc == ATTN_EINVAL, "%s: got %s", cases[i].what, attn_strerror(rc));
    CHECK(msg && *msg && !strchr(msg, '\n'), "%s: reason \"%s\" is not one line", cases[i].what, msg ? msg : "");
    CHECK(written(b) == 0, "%s: o was written", cases[i].what);
    printf("  %s: %s\n", cases[i].what, msg);
  }
  const void *ptrs[6] = {b->cq, b->ck, b->q, b->k, b->v, b->o};
  for (int i = 0; i < 6; i++) {
    const void *p[6];
    memcpy(p, ptrs, sizeof p);
    p[i] = NULL;
    attn_poison(b->o, (size_t)((b->tq + GUARD) * HEADS * DV));
    const int rc = attn_execute_varlen(plan, p[0], p[1], p[2], p[3], p[4], (void *)(uintptr_t)p[5]);
    CHECK(rc == ATTN_EINVAL, "NULL argument %d: got %s", i, attn_strerror(rc));
    CHECK(written(b) == 0, "NULL argument %d: o was written", i);
  }
  CHECK(attn_execute_varlen(NULL, b->cq, b->ck, b->q, b->k, b->v, b->o) == ATTN_EINVAL, "NULL plan");
  /* The refusals come before the kernel is touched: a copy of the plan marked as each kind shows them without
   * compiling one (lowrank's and the backward's kernels compile slowly). */
  const char *kinds[2] = {"lowrank", "backward"};
  for (int i = 0; i < 2; i++) {
    attn_plan fake = *plan;
    if (i == 0) fake.spec.algo = ATTN_ALGO_LOWRANK;
    if (i == 1) fake.backward = 1;
    attn_poison(b->o, (size_t)((b->tq + GUARD) * HEADS * DV));
    const int rc = attn_execute_varlen(&fake, b->cq, b->ck, b->q, b->k, b->v, b->o);
    const char *msg = attn_last_error(rt);
    CHECK(rc == ATTN_EUNSUPPORTED, "%s plan: got %s", kinds[i], attn_strerror(rc));
    CHECK(msg && *msg && !strchr(msg, '\n'), "%s plan: reason \"%s\" is not one line", kinds[i], msg ? msg : "");
    CHECK(written(b) == 0, "%s plan: o was written", kinds[i]);
    printf("  %s plan: %s\n", kinds[i], msg);
  }
}

static const float SLOPES[HEADS] = {0.5f, 0.25f, 0.125f, 0.0625f};

/* No argument: the runs CI makes; "all": every run (nightly; each compiles its own kernel). */
int main(int argc, char **argv) {
  const int all = argc > 1 && !strcmp(argv[1], "all");
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CPU, &rt);
  CHECK(rc == ATTN_OK, "attn_open: %s: %s", attn_strerror(rc), attn_last_error(NULL));
  if (rc != ATTN_OK) return 1;
  /* br, bc, split: the spec's (0: the default's); window, softcap, alibi: the modifiers */
  struct { attn_algo algo; attn_dtype dt; int causal; double tol; int br, bc, split, window; float softcap; int alibi, nightly; } runs[] = {
      {ATTN_ALGO_FLASH, ATTN_F32, 0, TOL, 0, 0, 0, 0, 0, 0, 0},
      {ATTN_ALGO_FLASH, ATTN_F32, 1, TOL, 0, 0, 0, 0, 0, 0, 0},
      {ATTN_ALGO_SMALLCACHE, ATTN_F16, 1, 1e-2, 0, 0, 0, 0, 0, 0, 0},
      /* whole query blocks of 8 rows (the lane kernels on rows heads·d apart) over 8-key tiles, every modifier */
      {ATTN_ALGO_FLASH, ATTN_BF16, 1, 2e-2, 8, 8, 0, 6, 2.5f, 1, 0},
      {ATTN_ALGO_FLASH, ATTN_F32, 0, TOL, 8, 8, 3, 5, 0, 0, 1},
      {ATTN_ALGO_SMALLCACHE, ATTN_F32, 0, TOL, 0, 0, 0, 4, 3.0f, 1, 1},
  };
  unsigned long long seed = 1;
  for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
    if (runs[r].nightly && !all) continue;
    attn_problem p = {.batch = NSEQ, .heads = HEADS, .heads_kv = HEADS_KV, .n = N, .n_kv = N_KV, .d = D, .d_v = DV,
                      .dtype = runs[r].dt, .causal = runs[r].causal, .algo = runs[r].algo, .window = runs[r].window,
                      .softcap = runs[r].softcap, .alibi_slopes = runs[r].alibi ? SLOPES : NULL};
    attn_spec s = attn_spec_default(p.algo, ATTN_TARGET_CPU, p.dtype, D, p.causal);
    s.dv = DV;
    if (runs[r].br) s.br = runs[r].br, s.bc = runs[r].bc;
    s.split = runs[r].split;
    s.window = p.window > 0, s.softcap = p.softcap > 0, s.alibi = p.alibi_slopes != NULL;
    attn_plan *plan = NULL;
    rc = attn_plan_create_spec(rt, &p, &s, 0, "test", &plan);
    CHECK(rc == ATTN_OK, "plan: %s: %s", attn_strerror(rc), attn_last_error(rt));
    if (rc != ATTN_OK) continue;
    char what[512];
    snprintf(what, sizeof what, "%s [%s]", shape(&p), attn_plan_describe(plan));
    printf("%s\n", what);
    packed b;
    if (pack_alloc(&b, runs[r].dt, seed++) == 0) {
      rc = run_varlen(plan, runs[r].dt, b.cq, b.ck, &b);
      CHECK(rc == ATTN_OK, "%s: attn_execute_varlen: %s: %s", what, attn_strerror(rc), attn_last_error(rt));
      if (rc == ATTN_OK) check_sequences(&p, &b, runs[r].tol, what);
      if (r == 0) bad_inputs(rt, plan, &b);
    } else {
      CHECK(0, "%s: out of memory", what);
    }
    pack_free(&b);
    attn_plan_destroy(plan);
  }
  attn_close(rt);
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
