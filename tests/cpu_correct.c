/* cpu_correct: CPU kernels against the fp64 reference on fresh random inputs with poisoned outputs.
 * argv[1] picks a group so that CTest runs groups in parallel: "d<D>" (every n in {1, 17, 100, 1000}, causal on and
 * off, at head dimension D), "shapes" (n_kv != n both ways, grouped-query heads, batch > 1, a non-default scale),
 * "algos" (explicit algorithm choices) or "split_all" (split-K flash specs: S in {2, 3, 8}, n in {1, 17, 100}, n_kv
 * in {1, 100, 1000, 4097}, including more parts than key blocks and rows that see no key), "split" (CI's half of its
 * kernels: each S and tiling with one causal value, both values over each), or "packed" (flash's packed
 * rows: n below one query block with query heads sharing KV heads, G in {2, 3, 4, 8}, one or several packed blocks,
 * split-K, causal with n > 1, d_v != d and half precision; one kernel per case). */
#include <string.h>
#include "cpu_util.h"

/* One problem through an explicit spec (run_case plans from the defaults); the relative error, INFINITY on failure. */
static double run_spec_case(attn_runtime *rt, const attn_problem *p, const attn_spec *s, unsigned long long seed) {
  case_bufs c;
  memset(&c, 0, sizeof c); /* a failed case_alloc leaves what it did not allocate NULL for case_free */
  char sum[256];
  attn_spec_summary(s, sum, sizeof sum);
  if (case_alloc(p, seed, &c) != 0) {
    CHECK(0, "%s: cannot set up buffers", shape(p));
    case_free(&c);
    return INFINITY;
  }
  attn_plan *plan = NULL;
  double err = INFINITY;
  int rc = attn_plan_create_spec(rt, &c.p, s, 0, "test", &plan);
  CHECK(rc == ATTN_OK, "%s [%s]: plan: %s: %s", shape(p), sum, attn_strerror(rc), attn_last_error(rt));
  if (rc == ATTN_OK) {
    rc = case_run(plan, &c);
    CHECK(rc == ATTN_OK, "%s [%s]: attn_execute: %s: %s", shape(p), sum, attn_strerror(rc), attn_last_error(rt));
    if (rc == ATTN_OK) err = attn_rel_error(c.ref, c.o, c.no);
    const double tol = c.p.dtype == ATTN_F32 ? TOL : 1e-2;
    CHECK(err <= tol, "%s [%s]: relative error %.3g > %g", shape(p), sum, err, tol);
    if (err <= tol) printf("ok   %-80s %-40s err %.2e\n", shape(p), sum, err);
  }
  attn_plan_destroy(plan);
  case_free(&c);
  return err;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: cpu_correct d<D>|shapes|algos|split|split_all|packed\n");
    return 2;
  }
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CPU, &rt);
  if (rc != ATTN_OK) {
    fprintf(stderr, "attn_open: %s: %s\n", attn_strerror(rc), attn_last_error(NULL));
    return 1;
  }
  CHECK(rt->db == NULL, "the test expects no database (ATTN_DB=%s)", rt->db_path);
  int cases = 0;
  unsigned long long seed = 1;
  if (argv[1][0] == 'd') {
    const int d = atoi(argv[1] + 1);
    static const int ns[] = {1, 17, 100, 1000};
    for (int causal = 0; causal <= 1; causal++)
      for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        attn_problem p = {.batch = 1, .heads = 2, .n = ns[i], .d = d, .causal = causal};
        run_case(rt, &p, seed++);
        cases++;
      }
  } else if (strcmp(argv[1], "shapes") == 0) {
    static const int ds[] = {64, 80};
    for (size_t di = 0; di < 2; di++) {
      const int d = ds[di];
      for (int causal = 0; causal <= 1; causal++) {
        /* n_kv smaller and larger than n, including decode (n=1) and rows that see no key (n > n_kv, causal). */
        static const int nn[][2] = {{100, 37}, {37, 300}, {1, 1000}, {1000, 1}, {130, 129}, {129, 257}};
        for (size_t i = 0; i < sizeof nn / sizeof nn[0]; i++) {
          attn_problem p = {.batch = 1, .heads = 2, .n = nn[i][0], .n_kv = nn[i][1], .d = d, .causal = causal};
          run_case(rt, &p, seed++);
          cases++;
        }
        attn_problem gqa = {.batch = 1, .heads = 8, .heads_kv = 2, .n = 150, .d = d, .causal = causal};
        attn_problem mqa = {.batch = 2, .heads = 4, .heads_kv = 1, .n = 70, .n_kv = 90, .d = d, .causal = causal};
        attn_problem bat = {.batch = 3, .heads = 3, .n = 65, .d = d, .causal = causal};
        attn_problem scl = {.batch = 2, .heads = 2, .n = 200, .d = d, .causal = causal, .scale = 0.37f};
        attn_problem big = {.batch = 1, .heads = 1, .n = 300, .d = d, .causal = causal, .scale = 2.5f};
        const attn_problem *more[] = {&gqa, &mqa, &bat, &scl, &big};
        for (int i = 0; i < 5; i++) {
          run_case(rt, more[i], seed++);
          cases++;
        }
      }
    }
  } else if (strcmp(argv[1], "algos") == 0) {
    /* Explicit algorithm choices through the plan API: smallcache is exact; lowrank with no measured row falls
     * back to the exact flash and says so. */
    for (int causal = 0; causal <= 1; causal++) {
      attn_problem sc = {.batch = 2, .heads = 2, .n = 150, .n_kv = 170, .d = 64, .causal = causal,
                         .algo = ATTN_ALGO_SMALLCACHE};
      run_case(rt, &sc, seed++);
      attn_problem lr = {.batch = 1, .heads = 2, .n = 120, .d = 32, .causal = causal, .algo = ATTN_ALGO_LOWRANK,
                         .tolerance = 0.01};
      attn_plan *plan = NULL;
      int prc = attn_plan_create(rt, &lr, &plan);
      CHECK(prc == ATTN_OK, "lowrank fallback: %s: %s", attn_strerror(prc), attn_last_error(rt));
      const char *desc = plan ? attn_plan_describe(plan) : "";
      CHECK(strncmp(desc, "flash", 5) == 0 && strstr(desc, "lowrank"), "lowrank fallback: describe '%s'", desc);
      attn_plan_destroy(plan);
      run_case(rt, &lr, seed++);
      cases += 2;
    }
  } else if (strcmp(argv[1], "split") == 0 || strcmp(argv[1], "split_all") == 0) {
    /* Split-K against fp64: the default tiles (Bc = 128: n_kv = 1 and 100 have one key block, fewer than any S
     * here) and small ones (Br = 16, Bc = 32: many blocks per part, partial last blocks); one head, or batch 2 with
     * 4 query heads on 2 (causal: n > n_kv leaves rows with no visible key, which must output zeros). Each
     * (S, tiling, causal) is a kernel of its own: "split" keeps the causal value S's index picks (default tiles the
     * other one than io_exact's split sample of the same tiles, which checks its output against fp64 too). */
    const int all = strcmp(argv[1], "split_all") == 0;
    static const int splits[] = {2, 3, 8}, ns[] = {1, 17, 100}, nkvs[] = {1, 100, 1000, 4097};
    for (int causal = 0; causal <= 1; causal++)
      for (int si = 0; si < 3; si++)
        for (int ni = 0; ni < 3; ni++)
          for (int ki = 0; ki < 4; ki++) {
            const int small = (ni + ki) % 2, d = small ? 32 : 64;
            if (!all && causal != (small ? si % 2 : 1 - si % 2)) continue;
            attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, ATTN_F32, d, causal);
            if (small) s.br = 16, s.bc = 32;
            s.split = splits[si];
            attn_problem p = {.batch = 1, .heads = 1, .n = ns[ni], .n_kv = nkvs[ki], .d = d, .causal = causal};
            if ((si + ki) % 2) p.batch = 2, p.heads = 4, p.heads_kv = 2;
            run_spec_case(rt, &p, &s, seed++);
            cases++;
          }
  } else if (strcmp(argv[1], "packed") == 0) {
    /* Packed decode: G*n rows per KV head; n = 17 with G = 4 or 8 packs 68 or 136 rows: two or three blocks, the
     * last partial; causal with n > 1 masks per query inside the packed block. */
    static const struct { int heads, heads_kv, n, n_kv, d, d_v, split, causal; attn_dtype dt; } cs[] = {
        {8, 2, 1, 1000, 64, 0, 0, 0, ATTN_F32},    {32, 8, 1, 777, 128, 0, 4, 1, ATTN_F32},
        {4, 1, 3, 300, 40, 0, 0, 1, ATTN_F32},     {8, 1, 17, 200, 32, 0, 2, 0, ATTN_F32},
        {16, 4, 17, 129, 24, 0, 3, 1, ATTN_F32},   {8, 2, 5, 65, 64, 128, 0, 1, ATTN_F32},
        {8, 4, 1, 513, 576, 512, 2, 0, ATTN_F32},  {8, 2, 2, 300, 128, 0, 2, 1, ATTN_BF16},
        {6, 2, 7, 90, 59, 33, 0, 1, ATTN_F16},     {32, 8, 1, 2049, 128, 0, 8, 0, ATTN_BF16},
        {6, 2, 1, 300, 48, 0, 0, 1, ATTN_F32},     /* three rows: the four-row kernels with one zero query */
        {8, 2, 17, 9, 16, 0, 2, 1, ATTN_F32}};     /* causal: n > n_kv, packed rows that see no key output zeros */
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
      attn_problem p = {.batch = 1 + (int)(i % 2), .heads = cs[i].heads, .heads_kv = cs[i].heads_kv, .n = cs[i].n,
                        .n_kv = cs[i].n_kv, .d = cs[i].d, .d_v = cs[i].d_v, .dtype = cs[i].dt, .causal = cs[i].causal};
      attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, cs[i].dt, cs[i].d, cs[i].causal);
      s.dv = cs[i].d_v;
      s.split = cs[i].split;
      if (i % 3 == 2) s.br = 16, s.bc = 24; /* 3 * 17 rows or more: several packed blocks */
      run_spec_case(rt, &p, &s, seed++);
      cases++;
    }
    /* Br below the dot kernels' four rows: their accumulator still holds four (blocks of 2 rows and 1) */
    attn_problem p = {.batch = 1, .heads = 2, .n = 7, .n_kv = 50, .d = 64, .causal = 1};
    attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, ATTN_F32, 64, 1);
    s.br = 2, s.bc = 5;
    run_spec_case(rt, &p, &s, seed++);
    cases++;
  } else {
    fprintf(stderr, "cpu_correct: unknown group '%s'\n", argv[1]);
    attn_close(rt);
    return 2;
  }
  attn_close(rt);
  printf("cpu_correct %s: %d cases, %d failures\n", argv[1], cases, failures);
  return failures ? 1 : 0;
}
