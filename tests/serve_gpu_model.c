/* serve_gpu_model.c: tuner/model.c's serving layouts (attn_model_time_layout) on their own, what serve_gpu.sh's
 * tuning runs cannot reach: grouped-query paged decode on the packed kernel (a block per KV head: batch x heads_kv
 * blocks, each page's rows once per KV head), varlen's transfers summed per sequence (a sequence of no keys, one of no
 * queries), page runs (pages of 7 slower than pages of 64 at the same tiles), and the refusals (impl=wgmma, CUDA
 * smallcache, both layouts at once). */
#include <stdio.h>
#include <string.h>
#include "check.h"
#include "io_theory.h"
#include "model.h"

int main(void) {
  char err[512];
  const attn_gpu *g = attn_gpu_find("H100", err, sizeof err);
  if (!g) {
    printf("FAIL no H100 in the spec table: %s\n", err);
    return 1;
  }
  attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, ATTN_F16, 128, 0);
  attn_model_result r, r7, r64;
  /* GQA decode: 8 sequences, 32 query heads on 4 KV heads, 4096 keys in pages of 16 */
  const attn_problem dec = {.batch = 8, .heads = 32, .heads_kv = 4, .n = 1, .n_kv = 4096, .d = 128,
                            .dtype = ATTN_F16};
  attn_model_layout paged = {.page_size = 16};
  int rc = attn_model_time_layout(g, &dec, &s, NULL, &paged, &r, err, sizeof err);
  unsigned long long rd = 0, wr = 0;
  attn_io_formula(&s, 8 * 4, 8, 4096, &rd, &wr); /* the packed kernel's problem: 8 query heads a KV head */
  CHECK(rc == ATTN_OK && r.blocks == 8 * 4 && r.reads == rd && r.time_ms > 0,
        "packed paged decode: %s, %d blocks (want 32: one per KV head), %llu reads (want %llu)",
        rc ? err : "ok", r.blocks, r.reads, rd);
  /* page runs: pages of 7 break the tiles more than pages of 64; one KV head, so a page is a short run */
  attn_problem one = dec;
  one.heads = one.heads_kv = 1;
  one.batch = 512;
  paged.page_size = 7;
  const int rc7 = attn_model_time_layout(g, &one, &s, NULL, &paged, &r7, err, sizeof err);
  paged.page_size = 64;
  const int rc64 = attn_model_time_layout(g, &one, &s, NULL, &paged, &r64, err, sizeof err);
  CHECK(rc7 == ATTN_OK && rc64 == ATTN_OK && r7.t_dram_ms > 1.05 * r64.t_dram_ms,
        "page runs: DRAM %.4g ms with pages of 7, %.4g with 64 (want more with 7)", r7.t_dram_ms, r64.t_dram_ms);
  /* varlen: queries 0, 5, 300 and keys 9, 0, 300: the transfers of the sequences that have both, zeros written */
  const int lq[3] = {0, 5, 300}, lk[3] = {9, 0, 300};
  attn_model_layout var = {.lq = lq, .lk = lk, .nseq = 3};
  attn_spec c = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, ATTN_F16, 64, 1);
  const attn_problem vp = {.heads = 4, .d = 64, .dtype = ATTN_F16, .causal = 1};
  rc = attn_model_time_layout(g, &vp, &c, NULL, &var, &r, err, sizeof err);
  attn_io_formula(&c, 4, 300, 300, &rd, &wr);
  const unsigned long long zeros = 5ULL * 64 * 4;
  CHECK(rc == ATTN_OK && r.reads == rd && r.writes == wr + zeros && r.time_ms > 0,
        "varlen: %s, %llu reads, %llu writes (want %llu, %llu)", rc ? err : "ok", r.reads, r.writes, rd, wr + zeros);
  /* refusals, one line each */
  attn_spec w = s;
  w.impl = ATTN_IMPL_WGMMA;
  paged.page_size = 16;
  rc = attn_model_time_layout(g, &dec, &w, NULL, &paged, &r, err, sizeof err);
  CHECK(rc == ATTN_EINVAL && strstr(err, "impl=wgmma flash has no paged kernel"), "wgmma: '%s'", err);
  attn_spec sc = attn_spec_default(ATTN_ALGO_SMALLCACHE, ATTN_TARGET_CUDA, ATTN_F16, 64, 1);
  rc = attn_model_time_layout(g, &vp, &sc, NULL, &var, &r, err, sizeof err);
  CHECK(rc == ATTN_EINVAL && strstr(err, "smallcache has no varlen kernel"), "smallcache: '%s'", err);
  attn_model_layout both = {.page_size = 16, .lq = lq, .lk = lk, .nseq = 3};
  rc = attn_model_time_layout(g, &vp, &c, NULL, &both, &r, err, sizeof err);
  CHECK(rc == ATTN_EINVAL && strstr(err, "not both"), "both layouts: '%s'", err);
  printf("%s: %d checks, %d failures\n", failures ? "FAILED" : "PASSED", checks, failures);
  return failures ? 1 : 0;
}
