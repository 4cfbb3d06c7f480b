/* io_exact: the counting build of each algorithm moves exactly what its closed form says (partial blocks, causal,
 * n_kv != n, grouped-query heads, split-K flash, d_v != d), never less than reading Q, K, V and writing O once, and its output is still
 * right: flash and smallcache within 1e-5 of fp64; lowrank's error is reported and shrinks as g or r grows. */
#include "io_util.h"

static void exact_case(attn_runtime *rt, attn_spec s, int batch, int heads, int heads_kv, int n, int n_kv) {
  attn_io io = {0, 0};
  double err = INFINITY;
  int rc = io_run(rt, &s, batch, heads, heads_kv, n, n_kv, &io, &err);
  char txt[512];
  attn_spec_summary(&s, txt, sizeof txt);
  CHECK(rc == ATTN_OK, "%s: run failed", txt);
  if (rc != ATTN_OK) return;
  unsigned long long fr = 0, fw = 0;
  attn_io_formula_gqa(&s, batch, heads, heads_kv, n, n_kv, &fr, &fw);
  /* Q read and O written once per query head; K and V at least once per KV head (the last row sees every key) */
  const double dv = attn_spec_dv(&s);
  double floor = (double)batch * ((double)heads * n * (s.d + dv) + (double)heads_kv * n_kv * (s.d + dv));
  printf("%-44s b=%d h=%d/%d n=%-4d n_kv=%-4d reads %9llu (formula %9llu) writes %8llu (formula %8llu) err %.2e\n",
         txt, batch, heads, heads_kv, n, n_kv, io.reads, fr, io.writes, fw, err);
  CHECK(io.reads == fr && io.writes == fw, "%s n=%d n_kv=%d: counted %llu/%llu, formula %llu/%llu", txt, n, n_kv,
        io.reads, io.writes, fr, fw);
  CHECK((double)(io.reads + io.writes) >= floor, "%s: count %llu below the floor %.0f", txt, io.reads + io.writes,
        floor);
  if (s.algo != ATTN_ALGO_LOWRANK) CHECK(err <= 1e-5, "%s n=%d n_kv=%d: rel error %.3e", txt, n, n_kv, err);
  else CHECK(isfinite(err) && err < 1.0, "%s: lowrank rel error %.3e", txt, err);
}

static double lowrank_err(attn_runtime *rt, int d, int feature, int g, int r, int causal) {
  attn_spec s = io_spec(ATTN_ALGO_LOWRANK, d, 32, 16, 0, causal);
  s.feature = feature;
  s.degree = g;
  s.rank = r;
  attn_io io;
  double err = INFINITY;
  if (io_run(rt, &s, 1, 2, 2, 96, 96, &io, &err) != ATTN_OK) return INFINITY;
  return err;
}

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "all";
  attn_runtime *rt = io_open();
  const int causal[2] = {0, 1};
  if (!strcmp(what, "flash") || !strcmp(what, "all")) {
    for (int c = 0; c < 2; c++) {
      exact_case(rt, io_spec(ATTN_ALGO_FLASH, 64, 64, 128, 0, causal[c]), 1, 1, 1, 256, 256);
      exact_case(rt, io_spec(ATTN_ALGO_FLASH, 32, 16, 24, 0, causal[c]), 1, 2, 1, 77, 77);
      exact_case(rt, io_spec(ATTN_ALGO_FLASH, 32, 16, 24, 0, causal[c]), 2, 2, 2, 50, 91);
      exact_case(rt, io_spec(ATTN_ALGO_FLASH, 16, 8, 8, 0, causal[c]), 1, 1, 1, 45, 20);
      exact_case(rt, io_spec(ATTN_ALGO_FLASH, 16, 8, 8, 0, causal[c]), 1, 1, 1, 1, 1);
    }
  }
  const int split_all = !strcmp(what, "split_all") || !strcmp(what, "all");
  if (!strcmp(what, "split") || split_all) {
    /* split-K flash: each part's partial (rows (d + 2)) and the merge's reads of them are slow-memory traffic;
     * K and V still once per query block. Decode (n = 1), odd n, n_kv != n both ways, more parts than key blocks,
     * grouped-query heads. Every (tiling t, S, causal) is a counting build of its own: "split" (CI) takes one causal
     * value per tiling and S, so that each tiling and each S meets both; split_all (nightly) takes both. */
    static const int splits[] = {2, 3, 8};
    for (int c = 0; c < 2; c++)
      for (int si = 0; si < 3; si++) {
        const int odd = (si + c) % 2; /* tilings 0 and 2 take the even (si + c), tiling 1 the odd */
        attn_spec s = io_spec(ATTN_ALGO_FLASH, 64, 64, 128, 0, causal[c]);
        s.split = splits[si];
        if (split_all || !odd) {
          exact_case(rt, s, 1, 1, 1, 1, 1000);
          exact_case(rt, s, 1, 2, 1, 77, 300);
        }
        s = io_spec(ATTN_ALGO_FLASH, 32, 16, 24, 0, causal[c]);
        s.split = splits[si];
        if (split_all || odd) {
          exact_case(rt, s, 2, 2, 2, 50, 91);
          exact_case(rt, s, 1, 4, 2, 1, 4097);
        }
        s = io_spec(ATTN_ALGO_FLASH, 16, 8, 8, 0, causal[c]);
        s.split = splits[si];
        if (split_all || !odd) {
          exact_case(rt, s, 1, 1, 1, 45, 20);
          exact_case(rt, s, 1, 1, 1, 1, 1);
        }
      }
    /* against the unsplit kernel: the same K, V and Q reads when every part has a key block, plus exactly the
     * partials' traffic */
    attn_spec s0 = io_spec(ATTN_ALGO_FLASH, 64, 32, 32, 0, 0), s4 = s0;
    s4.split = 4;
    unsigned long long r0, w0, r4, w4;
    attn_io_formula(&s0, 3, 33, 500, &r0, &w0);
    attn_io_formula(&s4, 3, 33, 500, &r4, &w4);
    const unsigned long long q = 3ULL * 33 * 64, part = 3ULL * 33 * (64 + 2);
    CHECK(r4 == r0 + 3 * q + 4 * part && w4 == w0 + 4 * part, "split closed form %llu/%llu vs %llu/%llu", r4, w4, r0,
          w0);
  }
  if (!strcmp(what, "smallcache") || !strcmp(what, "all")) {
    for (int c = 0; c < 2; c++) {
      exact_case(rt, io_spec(ATTN_ALGO_SMALLCACHE, 64, 16, 16, 16, causal[c]), 1, 1, 1, 128, 128);
      exact_case(rt, io_spec(ATTN_ALGO_SMALLCACHE, 64, 16, 16, 5, causal[c]), 1, 1, 1, 77, 77);
      exact_case(rt, io_spec(ATTN_ALGO_SMALLCACHE, 32, 12, 12, 7, causal[c]), 2, 4, 2, 37, 53);
      exact_case(rt, io_spec(ATTN_ALGO_SMALLCACHE, 32, 8, 8, 8, causal[c]), 1, 1, 1, 50, 20);
      exact_case(rt, io_spec(ATTN_ALGO_SMALLCACHE, 8, 4, 4, 3, causal[c]), 1, 1, 1, 1, 1);
      exact_case(rt, io_spec(ATTN_ALGO_SMALLCACHE, 128, 10, 10, 0, causal[c]), 1, 1, 1, 33, 64);
    }
    /* Saha & Ye's count with B dividing the sizes: 4 n^2 d / B + n^2 + n d */
    attn_spec s = io_spec(ATTN_ALGO_SMALLCACHE, 64, 16, 16, 16, 0);
    unsigned long long fr, fw;
    attn_io_formula(&s, 1, 256, 256, &fr, &fw);
    CHECK(fr + fw == 4ULL * 256 * 256 * 64 / 16 + 256 * 256 + 256 * 64, "smallcache closed form %llu vs Saha & Ye",
          fr + fw);
  }
  if (!strcmp(what, "dv") || !strcmp(what, "all")) {
    /* d_v != d (wider and narrower than d, odd): K and Q rows of d, V and O rows (and split-K partials) of d_v */
    static const int dims[][2] = {{32, 48}, {48, 16}, {7, 13}};
    for (int c = 0; c < 2; c++)
      for (int i = c; i < 3; i += 2) { /* each pair once, the middle one causal */
        attn_spec f = io_spec(ATTN_ALGO_FLASH, dims[i][0], 16, 24, 0, causal[c]);
        f.dv = dims[i][1];
        exact_case(rt, f, 1, 2, 1, 77, 77);
        exact_case(rt, f, 1, 1, 1, 50, 91);
        f.split = 3;
        exact_case(rt, f, 1, 1, 1, 1, 300);
        attn_spec sc = io_spec(ATTN_ALGO_SMALLCACHE, dims[i][0], 16, 16, 8, causal[c]);
        sc.dv = dims[i][1];
        exact_case(rt, sc, 1, 2, 2, 45, 70);
        attn_spec lr = io_spec(ATTN_ALGO_LOWRANK, dims[i][0], 16, 8, 0, causal[c]);
        lr.dv = dims[i][1];
        /* Taylor degree 2: its error stays well under 1 on every seed (64 random features reached 1.44 on one) */
        lr.feature = ATTN_FEAT_TAYLOR;
        lr.degree = 2;
        lr.rank = 0;
        exact_case(rt, lr, 1, 2, 1, 40, 60);
      }
  }
  if (!strcmp(what, "lowrank") || !strcmp(what, "all")) {
    for (int c = 0; c < 2; c++) {
      attn_spec s = io_spec(ATTN_ALGO_LOWRANK, 16, 16, 8, 0, causal[c]);
      s.feature = ATTN_FEAT_TAYLOR;
      s.degree = 2;
      exact_case(rt, s, 1, 2, 1, 77, 77);
      exact_case(rt, s, 1, 1, 1, 50, 20);
      exact_case(rt, s, 1, 1, 1, 20, 50);
      exact_case(rt, s, 1, 1, 1, 1, 1);
      s.feature = ATTN_FEAT_RANDOM;
      s.rank = 64;
      exact_case(rt, s, 2, 2, 2, 65, 65);
    }
    /* error against fp64, measured: it must shrink as the degree or the rank grows */
    for (int c = 0; c < 2; c++) {
      double e2 = lowrank_err(rt, 8, ATTN_FEAT_TAYLOR, 2, 0, c), e4 = lowrank_err(rt, 8, ATTN_FEAT_TAYLOR, 4, 0, c),
             e6 = lowrank_err(rt, 8, ATTN_FEAT_TAYLOR, 6, 0, c);
      printf("lowrank taylor d=8 causal=%d: g=2 err %.3e, g=4 %.3e, g=6 %.3e\n", c, e2, e4, e6);
      CHECK(e4 < e2 && e6 < e4, "Taylor error does not shrink with g: %.3e %.3e %.3e", e2, e4, e6);
      double r16 = lowrank_err(rt, 8, ATTN_FEAT_RANDOM, 2, 16, c), r256 = lowrank_err(rt, 8, ATTN_FEAT_RANDOM, 2, 256, c),
             r4096 = lowrank_err(rt, 8, ATTN_FEAT_RANDOM, 2, 4096, c);
      printf("lowrank random d=8 causal=%d: r=16 err %.3e, r=256 %.3e, r=4096 %.3e\n", c, r16, r256, r4096);
      /* the error is random (fresh features each seed) and falls as 1/sqrt(r): 16 and 256 can swap on one draw,
       * 4096 (4x below 256, 16x below 16 in expectation) beating both cannot in practice */
      CHECK(r4096 < r16 && r4096 < r256, "random-feature error does not shrink with r: %.3e %.3e %.3e", r16, r256,
            r4096);
    }
  }
  attn_close(rt);
  printf("%s\n", failures ? "FAIL" : "PASS");
  return failures ? 1 : 0;
}
