/* space_mods: a space built with the problem's score modifiers (attn_space_opts window, softcap, alibi). Its points are
 * the dense space's admitted again as the kernels that apply them (window=1 etc.; CUDA split-KV and impl=wgmma refused
 * with a window), in the same order; a configuration without the flags is not of it, nor one with them of the dense
 * space. The model's estimate of a point (attn_tuner_model, what a Lua strategy's space:model returns) is the C model's
 * for the windowed problem: H100 bf16 d = 128, n = n_kv = 16384, w = 256 visits about (2w + Bc) / n_kv of the keys,
 * so the dense time is over 10 times the windowed one; on the CPU the I/O is the windowed closed form's. */
#include <string.h>
#include "check.h"
#include "gpus.h"
#include "io_theory.h"
#include "model.h"
#include "space.h"
#include "strategy.h"

static attn_space_opts gpu_opts(const attn_gpu *g, long n, int window) {
  attn_space_opts o = {.target = ATTN_TARGET_CUDA, .dtype = ATTN_BF16, .d = 128, .causal = 0,
                       .algos = ATTN_ALGO_BIT(ATTN_ALGO_FLASH), .gpu = g, .n = n, .n_kv = n, .heads = 16,
                       .heads_kv = 16, .fast_mem_bytes = g->smem_per_block_kb * 1024.0, .window = window,
                       .softcap = window > 0, .alibi = window > 0};
  snprintf(o.arch, sizeof o.arch, "%s", g->arch);
  return o;
}

/* The windowed space is the dense one's points with the flags, those admitted as such, in order. */
static void same_points(const attn_space_opts *dense_o, const attn_space_opts *mods_o, const char *what) {
  char err[512], why[256];
  attn_space dense, mods;
  if (attn_space_build(dense_o, &dense, err, sizeof err) != ATTN_OK ||
      attn_space_build(mods_o, &mods, err, sizeof err) != ATTN_OK) {
    CHECK(0, "%s: %s", what, err);
    return;
  }
  int kept = 0, split = 0, wgmma = 0;
  for (int i = 0; i < dense.count; i++) {
    attn_spec c = dense.cfg[i];
    CHECK(!c.window && !c.softcap && !c.alibi, "%s: a dense point with a modifier", what);
    split += c.split > 1, wgmma += c.impl == ATTN_IMPL_WGMMA;
    c.window = mods_o->window > 0, c.softcap = mods_o->softcap, c.alibi = mods_o->alibi;
    if (attn_space_admit(mods_o, &c, why, sizeof why) != 0) continue;
    CHECK(kept < mods.count && attn_space_find(&mods, &c) == kept, "%s: point %d of the dense space not at %d", what,
          i, kept);
    if (kept < mods.count) {
      const attn_spec *m = &mods.cfg[kept];
      CHECK(m->window == (mods_o->window > 0) && m->softcap == 1 && m->alibi == 1, "%s: point %d's flags %d %d %d",
            what, kept, m->window, m->softcap, m->alibi);
      /* a point without the flags is of the dense space, not of this one */
      attn_spec plain = *m;
      plain.window = plain.softcap = plain.alibi = 0;
      CHECK(attn_space_admit(mods_o, &plain, why, sizeof why) != 0 && strstr(why, "window=0 softcap=0 alibi=0"),
            "%s: a plain point admitted: %s", what, why);
      CHECK(attn_space_admit(dense_o, m, why, sizeof why) != 0 && strstr(why, "the space for window=0"),
            "%s: a modified point admitted to the dense space: %s", what, why);
    }
    kept++;
  }
  CHECK(kept == mods.count && kept > 0, "%s: %d points, %d of the dense space's %d admitted with the flags", what,
        mods.count, kept, dense.count);
  printf("%s: dense %d points (%d split, %d wgmma), with modifiers %d\n", what, dense.count, split, wgmma, mods.count);
  attn_space_free(&dense);
  attn_space_free(&mods);
}

int main(void) {
  char err[512] = "";
  const attn_gpu *g = attn_gpu_find("H100", err, sizeof err);
  CHECK(g != NULL, "%s", err);
  if (!g) return 1;

  /* prefill (impl=wgmma points refused with a window) and decode (split-KV refused) */
  attn_space_opts d0 = gpu_opts(g, 16384, 0), w0 = gpu_opts(g, 16384, 256);
  same_points(&d0, &w0, "H100 prefill");
  attn_space_opts d1 = gpu_opts(g, 1, 0), w1 = gpu_opts(g, 1, 256);
  d1.n_kv = w1.n_kv = 16384;
  d1.heads = d1.heads_kv = w1.heads = w1.heads_kv = 2;
  same_points(&d1, &w1, "H100 decode");
  attn_space_opts dc = {.target = ATTN_TARGET_CPU, .dtype = ATTN_F32, .d = 64, .algos = ATTN_ALGO_BIT(ATTN_ALGO_FLASH),
                        .fast_mem_bytes = 1 << 20, .n = 1, .n_kv = 4096, .heads = 2, .threads = 4};
  attn_space_opts wc = dc;
  wc.window = 100, wc.softcap = wc.alibi = 1;
  same_points(&dc, &wc, "CPU decode");

  /* the model's estimate of the windowed space's points: the windowed problem's */
  attn_space ws, ds;
  if (attn_space_build(&w0, &ws, err, sizeof err) != ATTN_OK || attn_space_build(&d0, &ds, err, sizeof err) != ATTN_OK) {
    CHECK(0, "%s", err);
    return 1;
  }
  attn_tuner tw = {.space = &ws}, td = {.space = &ds};
  const attn_problem pw = {.batch = 1, .heads = 16, .n = 16384, .n_kv = 16384, .d = 128, .dtype = ATTN_BF16,
                           .window = 256};
  attn_problem pd = pw;
  pd.window = 0;
  int compared = 0;
  double min_ratio = 1e300;
  for (int i = 0; i < ws.count; i++) {
    const attn_spec *c = &ws.cfg[i];
    attn_model_est e, ed;
    attn_model_result m, md;
    attn_tuner_model(&tw, i, &e);
    const int rc = attn_model_time_res(g, &pw, c, NULL, &m, err, sizeof err);
    CHECK(e.ok == (rc == ATTN_OK), "point %d: estimate ok=%d, the model's rc %d (%s / %s)", i, e.ok, rc, e.why, err);
    if (!e.ok || rc != ATTN_OK) continue;
    CHECK(e.time_ms == m.time_ms && e.io == (double)m.reads + (double)m.writes,
          "point %d: space's estimate %.6g ms io %.6g, the windowed model %.6g ms io %llu", i, e.time_ms, e.io,
          m.time_ms, m.reads + m.writes);
    attn_spec plain = *c;
    plain.window = plain.softcap = plain.alibi = 0;
    const int at = attn_space_find(&ds, &plain);
    CHECK(at >= 0, "point %d is not in the dense space", i);
    if (at < 0) continue;
    attn_tuner_model(&td, at, &ed);
    CHECK(ed.ok && attn_model_time_res(g, &pd, &plain, NULL, &md, err, sizeof err) == ATTN_OK &&
              ed.time_ms == md.time_ms,
          "point %d: the dense estimate %.6g is not the dense model's %.6g", i, ed.time_ms, md.time_ms);
    const double ratio = ed.time_ms / e.time_ms;
    if (ratio < min_ratio) min_ratio = ratio;
    compared++;
  }
  CHECK(compared > 10 && min_ratio > 10 && min_ratio < 64, "%d points compared, dense/windowed at least %.3g", compared,
        min_ratio);
  printf("H100 n=16384 w=256: %d points, the dense model at least %.1fx the windowed\n", compared, min_ratio);
  attn_space_free(&ws);
  attn_space_free(&ds);

  /* the CPU's estimate is the windowed I/O closed form */
  attn_space cs;
  if (attn_space_build(&wc, &cs, err, sizeof err) != ATTN_OK) {
    CHECK(0, "%s", err);
    return 1;
  }
  attn_tuner tc = {.space = &cs};
  for (int i = 0; i < cs.count; i++) {
    attn_model_est e;
    unsigned long long r, w, rd, wd;
    attn_tuner_model(&tc, i, &e);
    const int ok = attn_io_formula_gqa_window(&cs.cfg[i], 1, 2, 2, 1, 4096, 100, &r, &w) == ATTN_OK &&
                   attn_io_formula_gqa(&cs.cfg[i], 1, 2, 2, 1, 4096, &rd, &wd) == ATTN_OK;
    CHECK(ok && e.ok && e.io == (double)(r + w) && r + w < rd + wd, "CPU point %d: io %.6g, windowed %llu, dense %llu",
          i, e.io, r + w, rd + wd);
  }
  attn_space_free(&cs);
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
