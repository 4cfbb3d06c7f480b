/* model_window: the performance model times a sliding window (attn_problem.window) by the key blocks the kernel
 * visits (templates/flash.cu: a query block loads key blocks floor(max(0, e - w + 1)/Bc) .. ceil(L/Bc) - 1), not by
 * n_kv. No timing: the model's own terms on an H100, bf16, d = 128, 16 heads.
 *  - prefill n = n_kv = 16384, windows 256 and 1024, causal and not: FLOPs equal 2 (d + d_v) times the visible pairs
 *    counted row by row (attn_visible_keys), reads and writes io_theory's windowed closed form, the L2 time the ratio
 *    of their bytes to no window's, the compute time within 15% of the ratio of the key blocks visited (counted here
 *    from the kernel's bounds) to no window's, and the two windows' times in that ratio too; doubling n = n_kv at a
 *    window doubles the compute time (within 10%), where without one it more than triples (quadruples, less the
 *    causal blocks' and the waves' share);
 *  - a window >= n_kv (hides nothing) gives exactly the no-window result;
 *  - GQA-packed windowed decode (n = 1, 32/8 heads, as runtime/cuda.c launches it) reads what
 *    attn_io_formula_gqa_window counts, K and V once per KV head over the window's key blocks; the paged decode and a
 *    varlen prefill take the window too;
 *  - split-KV and smallcache with a window are refused with a reason (their kernels apply none). */
#include <math.h>
#include <string.h>
#include "check.h"
#include "gpus.h"
#include "io_theory.h"
#include "model.h"

enum { D = 128, HEADS = 16 };

static attn_spec spec_of(int causal) {
  attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, ATTN_BF16, D, causal);
  snprintf(s.arch, sizeof s.arch, "sm_90");
  s.split = 0;
  return s;
}

static attn_problem prob_of(int n, int n_kv, int causal, int window) {
  attn_problem p = {.batch = 1, .heads = HEADS, .n = n, .n_kv = n_kv, .d = D, .dtype = ATTN_BF16, .causal = causal,
                    .window = window};
  return p;
}

static int model(const attn_gpu *g, const attn_problem *p, const attn_spec *s, attn_model_result *m) {
  char err[512];
  const int rc = attn_model_time(g, p, s, m, err, sizeof err);
  CHECK(rc == ATTN_OK, "n=%d n_kv=%d causal=%d window=%d: %s", p->n, p->n_kv, p->causal, p->window, err);
  return rc;
}

/* key blocks a head's query blocks visit, from the kernel's bounds (flash.cu: e = i0 + n_kv - n, L = min(n_kv,
 * e + rows) causal, min(n_kv, e + rows - 1 + w) windowed; J = max(0, e - w + 1) windowed) */
static double kernel_key_blocks(const attn_spec *s, long n, long n_kv, long w) {
  double kb = 0;
  for (long i0 = 0; i0 < n; i0 += s->br) {
    const long rows = n - i0 < s->br ? n - i0 : s->br, e = i0 + n_kv - n;
    long L = n_kv, J = 0;
    if (s->causal) L = e + rows;
    else if (w > 0) L = e + rows - 1 + w;
    if (L > n_kv) L = n_kv;
    if (w > 0 && e - w + 1 > 0) J = e - w + 1;
    if (L > J) kb += (L - 1) / s->bc - J / s->bc + 1;
  }
  return kb;
}

static double visible_pairs(const attn_problem *p) {
  attn_problem q = *p;
  double sum = 0;
  for (long i = 0; i < p->n; i++) {
    long lo, hi;
    attn_visible_keys(&q, i, &lo, &hi);
    if (hi > lo) sum += (double)(hi - lo);
  }
  return sum;
}

static int near(double x, double want, double tol) { return fabs(x / want - 1) <= tol; }

static void prefill(const attn_gpu *g, int causal) {
  const attn_spec s = spec_of(causal);
  const long n = 16384;
  attn_model_result none, w256, w1024, half256, half0;
  attn_problem p0 = prob_of(n, n, causal, 0), p256 = prob_of(n, n, causal, 256), p1024 = prob_of(n, n, causal, 1024);
  attn_problem h256 = prob_of(n / 2, n / 2, causal, 256), h0 = prob_of(n / 2, n / 2, causal, 0);
  if (model(g, &p0, &s, &none) || model(g, &p256, &s, &w256) || model(g, &p1024, &s, &w1024) ||
      model(g, &h256, &s, &half256) || model(g, &h0, &s, &half0))
    return;
  const attn_problem *ps[] = {&p256, &p1024};
  const attn_model_result *ms[] = {&w256, &w1024};
  const double kb0 = kernel_key_blocks(&s, n, n, 0);
  for (int i = 0; i < 2; i++) {
    const attn_problem *p = ps[i];
    const attn_model_result *m = ms[i];
    const double want = 2.0 * (D + D) * visible_pairs(p) * HEADS;
    CHECK(near(m->flops, want, 1e-12), "causal=%d window=%d: flops %.6g, the visible pairs' %.6g", causal, p->window,
          m->flops, want);
    unsigned long long r = 0, w = 0;
    CHECK(attn_io_formula_window(&s, HEADS, n, n, p->window, &r, &w) == ATTN_OK, "no windowed closed form");
    CHECK(m->reads == r && m->writes == w, "causal=%d window=%d: reads %llu writes %llu, the closed form's %llu %llu",
          causal, p->window, m->reads, m->writes, r, w);
    const double bytes = (double)(m->reads + m->writes) / (double)(none.reads + none.writes);
    CHECK(near(m->t_l2_ms / none.t_l2_ms, bytes, 1e-9), "causal=%d window=%d: L2 time ratio %.6f, bytes' %.6f", causal,
          p->window, m->t_l2_ms / none.t_l2_ms, bytes);
    const double kb = kernel_key_blocks(&s, n, n, p->window) / kb0;
    CHECK(near(m->t_compute_ms / none.t_compute_ms, kb, 0.15),
          "causal=%d window=%d: compute time %.4g ms, %.4f of no window's (%.4g ms); key blocks visited %.4f of its",
          causal, p->window, m->t_compute_ms, m->t_compute_ms / none.t_compute_ms, none.t_compute_ms, kb);
    CHECK(m->time_ms < none.time_ms, "causal=%d window=%d: %.4g ms, no window %.4g", causal, p->window, m->time_ms,
          none.time_ms);
    printf("causal=%d n=n_kv=%ld window=%d: %.4f ms (%s), compute %.4f of no window's %.4f ms, key blocks %.4f\n",
           causal, n, p->window, m->time_ms, m->bound, m->t_compute_ms / none.t_compute_ms, none.time_ms, kb);
  }
  const double kb_ratio = kernel_key_blocks(&s, n, n, 1024) / kernel_key_blocks(&s, n, n, 256);
  CHECK(near(w1024.t_compute_ms / w256.t_compute_ms, kb_ratio, 0.15),
        "causal=%d: window 1024 over 256 compute %.4f, key blocks %.4f", causal,
        w1024.t_compute_ms / w256.t_compute_ms, kb_ratio);
  /* n, not n^2: twice the rows at one window, twice the work */
  CHECK(near(w256.t_compute_ms / half256.t_compute_ms, 2.0, 0.10), "causal=%d window=256: n=%ld over n=%ld %.4f",
        causal, n, n / 2, w256.t_compute_ms / half256.t_compute_ms);
  CHECK(none.t_compute_ms / half0.t_compute_ms > 3.0, "causal=%d no window: n=%ld over n=%ld %.4f", causal, n, n / 2,
        none.t_compute_ms / half0.t_compute_ms);

  /* a window that hides nothing is no window */
  attn_problem big = prob_of(n, n, causal, (int)n);
  attn_model_result wbig;
  if (model(g, &big, &s, &wbig)) return;
  CHECK(wbig.time_ms == none.time_ms && wbig.t_compute_ms == none.t_compute_ms && wbig.t_dram_ms == none.t_dram_ms &&
            wbig.t_l2_ms == none.t_l2_ms && wbig.flops == none.flops && wbig.reads == none.reads &&
            wbig.writes == none.writes && wbig.blocks == none.blocks &&
            wbig.l2_resident_bytes == none.l2_resident_bytes,
        "causal=%d window=n_kv: %.6g ms, no window %.6g", causal, wbig.time_ms, none.time_ms);
}

static void decode(const attn_gpu *g) {
  const long n_kv = 16384, w = 256;
  for (int causal = 0; causal < 2; causal++) {
    attn_spec s = spec_of(causal);
    attn_problem p = {.batch = 4, .heads = 32, .heads_kv = 8, .n = 1, .n_kv = (int)n_kv, .d = D, .dtype = ATTN_BF16,
                      .causal = causal, .window = (int)w};
    attn_problem p0 = p;
    p0.window = 0;
    attn_model_result m, m0;
    if (model(g, &p, &s, &m) || model(g, &p0, &s, &m0)) return;
    attn_spec sw = s;
    sw.window = 1;
    unsigned long long r = 0, wr = 0;
    CHECK(attn_io_formula_gqa_window(&sw, 4, 32, 8, 1, n_kv, w, &r, &wr) == ATTN_OK, "no GQA windowed closed form");
    CHECK(m.reads == r && m.writes == wr,
          "packed decode causal=%d: reads %llu writes %llu, the closed form's %llu %llu", causal, m.reads, m.writes, r,
          wr);
    /* K and V once per KV head over the window's key blocks: w / Bc blocks (w a multiple of Bc) */
    const double kv = 4.0 * 8 * (double)w * (D + D), q = 4.0 * 32 * D;
    CHECK(m.reads == (unsigned long long)(kv + q), "packed decode causal=%d: reads %llu, K/V of the window once per KV "
          "head and Q: %.0f", causal, m.reads, kv + q);
    CHECK(near(m.flops, 2.0 * (D + D) * (double)w * 4 * 32, 1e-12), "packed decode causal=%d: flops %.6g", causal,
          m.flops);
    CHECK(m.blocks == m0.blocks, "packed decode causal=%d: %d blocks, no window's %d", causal, m.blocks, m0.blocks);
    CHECK(m.time_ms < m0.time_ms / 4, "packed decode causal=%d: %.4g ms, no window %.4g", causal, m.time_ms,
          m0.time_ms);
    printf("decode 32/8 heads batch 4 n_kv=%ld causal=%d window=%ld: %.4f ms (%s), no window %.4f ms\n", n_kv, causal,
           w, m.time_ms, m.bound, m0.time_ms);

    /* the paged decode: the same keys */
    attn_model_layout lay = {.page_size = 16};
    attn_model_result pg, pg0;
    char err[512];
    CHECK(attn_model_time_layout(g, &p, &s, NULL, &lay, &pg, err, sizeof err) == ATTN_OK, "paged: %s", err);
    CHECK(attn_model_time_layout(g, &p0, &s, NULL, &lay, &pg0, err, sizeof err) == ATTN_OK, "paged: %s", err);
    CHECK(pg.reads == r && pg.time_ms < pg0.time_ms / 4, "paged decode causal=%d: reads %llu (want %llu), %.4g ms, "
          "no window %.4g", causal, pg.reads, r, pg.time_ms, pg0.time_ms);
  }
}

static void varlen(const attn_gpu *g) {
  const attn_spec s = spec_of(1);
  static const int lq[] = {4096, 1, 700}, lk[] = {4096, 3000, 700};
  attn_model_layout lay = {.lq = lq, .lk = lk, .nseq = 3};
  attn_problem p = prob_of(4096, 4096, 1, 128);
  attn_model_result m;
  char err[512];
  CHECK(attn_model_time_layout(g, &p, &s, NULL, &lay, &m, err, sizeof err) == ATTN_OK, "varlen: %s", err);
  double r = 0, w = 0, flops = 0;
  for (int b = 0; b < 3; b++) {
    unsigned long long r1, w1;
    CHECK(attn_io_formula_window(&s, HEADS, lq[b], lk[b], 128, &r1, &w1) == ATTN_OK, "no closed form");
    r += (double)r1, w += (double)w1;
    attn_problem one = prob_of(lq[b], lk[b], 1, 128);
    flops += 2.0 * (D + D) * visible_pairs(&one) * HEADS;
  }
  CHECK((double)m.reads == r && (double)m.writes == w && near(m.flops, flops, 1e-12),
        "varlen window 128: reads %llu writes %llu flops %.6g, want %.0f %.0f %.6g", m.reads, m.writes, m.flops, r, w,
        flops);
}

static void refused(const attn_gpu *g) {
  attn_model_result m;
  char err[512] = "";
  attn_spec s = spec_of(0);
  s.split = 2;
  attn_problem p = prob_of(1, 4096, 0, 256);
  CHECK(attn_model_time(g, &p, &s, &m, err, sizeof err) == ATTN_EINVAL && strstr(err, "split-KV applies no window"),
        "split=2 with a window: '%s'", err);
  attn_spec sc = attn_spec_default(ATTN_ALGO_SMALLCACHE, ATTN_TARGET_CUDA, ATTN_BF16, 64, 0);
  snprintf(sc.arch, sizeof sc.arch, "sm_90");
  attn_problem q = {.batch = 1, .heads = 4, .n = 1024, .d = 64, .dtype = ATTN_BF16, .window = 100};
  err[0] = 0;
  CHECK(attn_model_time(g, &q, &sc, &m, err, sizeof err) == ATTN_EINVAL && strstr(err, "applies no window"),
        "smallcache with a window: '%s'", err);
}

int main(void) {
  char err[256];
  const attn_gpu *g = attn_gpu_find("H100", err, sizeof err);
  CHECK(g != NULL, "%s", err);
  if (!g) return 1;
  prefill(g, 0);
  prefill(g, 1);
  decode(g);
  varlen(g);
  refused(g);
  printf("model_window: %d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
