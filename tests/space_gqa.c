/* space_gqa: the tuner's CUDA space counts decode's query blocks as the runtime launches them, a KV head's query heads
 * packed into its blocks where attn_cuda_gqa_packs holds, so split-KV is offered where those blocks leave SMs idle.
 *   space_gqa          the space and the model on an H100 (132 SMs), bf16 d = 128, n = 1, 4096 keys: batch 8 of
 *                      32 query heads over 8 KV heads (64 packed blocks) holds split points, the untuned default's
 *                      tile split in 2 among them, and the best point the runtime serves from a model tune (impl=wgmma
 *                      model rows are passed over) is a split one, faster than every unsplit mma.sync point; the same
 *                      heads without grouping (256 blocks), a non-GQA prefill and a GQA prefill hold none; batch 16
 *                      (128 packed blocks) holds splits, batch 17 (136) none.
 *   space_gqa DB       DB after `attntune tune --gpu H100` of that decode: the row the runtime would serve
 *                      (attn_db_lookup with unmeasured impl=wgmma rows skipped, as runtime/api.c asks) has
 *                      split > 1. */
#include <string.h>
#include "check.h"
#include "db.h"
#include "gpus.h"
#include "model.h"
#include "space.h"

static int build(const attn_gpu *g, int batch, int heads, int heads_kv, int n, attn_space *sp) {
  char err[512];
  attn_space_opts o = {.target = ATTN_TARGET_CUDA, .dtype = ATTN_BF16, .d = 128,
                       .algos = ATTN_ALGO_BIT(ATTN_ALGO_FLASH), .gpu = g,
                       .fast_mem_bytes = g->smem_per_block_kb * 1024.0, .n = n, .n_kv = 4096,
                       .heads = (long)batch * heads, .heads_kv = (long)batch * heads_kv};
  snprintf(o.arch, sizeof o.arch, "%s", g->arch);
  const int rc = attn_space_build(&o, sp, err, sizeof err);
  CHECK(rc == ATTN_OK, "batch %d heads %d/%d n=%d: %s", batch, heads, heads_kv, n, err);
  return rc;
}

static int splits(const attn_space *sp) {
  int k = 0;
  for (int i = 0; i < sp->count; i++) k += sp->cfg[i].split > 1;
  return k;
}

static int count_splits(const attn_gpu *g, int batch, int heads, int heads_kv, int n) {
  attn_space sp;
  if (build(g, batch, heads, heads_kv, n, &sp) != ATTN_OK) return -1;
  const int k = splits(&sp);
  attn_space_free(&sp);
  return k;
}

static int served(const char *path) {
  attn_db *db = NULL;
  char err[512];
  if (attn_db_open_ex(path, ATTN_DB_READONLY, &db, err, sizeof err) != ATTN_OK) {
    fprintf(stderr, "space_gqa: %s: %s\n", path, err);
    return 1;
  }
  attn_db_query q = {.device = "H100", .d = 128, .n = 1, .dtype = ATTN_BF16, .n_kv = 4096, .batch = 8, .heads = 32,
                     .heads_kv = 8, .pass = "fwd", .variant = "", .unmeasured_skip = "impl=wgmma"};
  attn_db_best best;
  memset(&best, 0, sizeof best);
  const int rc = attn_db_lookup(db, &q, &best);
  attn_db_close(db);
  CHECK(rc == ATTN_OK, "no row served for the decode (rc %d)", rc);
  attn_spec s;
  CHECK(rc != ATTN_OK || attn_spec_parse(best.spec, &s, err, sizeof err) == ATTN_OK, "%s: %s", best.spec, err);
  CHECK(rc != ATTN_OK || s.split > 1, "served row without split: %s (%.4f ms)", best.spec, best.time_ms);
  if (rc == ATTN_OK) printf("served: %s (%.4f ms, %s)\n", best.spec, best.time_ms, best.provenance);
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc > 1) return served(argv[1]);
  char err[512] = "";
  const attn_gpu *g = attn_gpu_find("H100", err, sizeof err);
  CHECK(g != NULL && g->sms == 132, "%s", err);
  if (!g) return 1;
  attn_space sp;
  if (build(g, 8, 32, 8, 1, &sp) != ATTN_OK) return 1;
  CHECK(splits(&sp) > 0, "batch 8, heads 32/8, n=1: no split point in %d (e.g. %s)", sp.count, sp.pruned_example);
  /* the untuned default's tile with the runtime's split = 2 (64 packed blocks x 2 <= 132 SMs) */
  attn_spec def = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, ATTN_BF16, 128, 0);
  CHECK(attn_spec_fit(&def, NULL, 0) == ATTN_OK, "default tile");
  def.split = 2;
  CHECK(attn_space_find(&sp, &def) >= 0, "default Br=%d Bc=%d warps=%d stages=%d split=2 not in the space", def.br,
        def.bc, def.warps, def.stages);
  /* the model's ranking of the mma.sync points, what a model tune's row serves */
  const attn_problem p = {.batch = 8, .heads = 32, .heads_kv = 8, .n = 1, .n_kv = 4096, .d = 128,
                          .dtype = ATTN_BF16};
  double best_split = 1e30, best_plain = 1e30;
  for (int i = 0; i < sp.count; i++) {
    const attn_spec *c = &sp.cfg[i];
    if (c->impl == ATTN_IMPL_WGMMA) continue;
    attn_model_result r;
    const int rc = attn_model_time(g, &p, c, &r, err, sizeof err);
    CHECK(rc == ATTN_OK, "model: %s", err);
    if (rc != ATTN_OK) continue;
    double *b = c->split > 1 ? &best_split : &best_plain;
    if (r.time_ms < *b) *b = r.time_ms;
  }
  CHECK(best_split < best_plain, "best split point %.4f ms, best without split %.4f ms", best_split, best_plain);
  printf("H100 bf16 d=128 batch 8 heads 32/8 n=1 n_kv=4096: %d points, %d split; mma.sync best %.4f ms split, "
         "%.4f ms without\n", sp.count, splits(&sp), best_split, best_plain);
  /* a split point's refusal names the packing where it packs */
  attn_space_opts big = sp.o;
  big.heads = 17 * 32, big.heads_kv = 17 * 8;
  char why[256] = "";
  CHECK(attn_space_admit(&big, &def, why, sizeof why) != 0 && strstr(why, "136 query blocks") && strstr(why, "packed"),
        "batch 17: %s", why);
  attn_space_free(&sp);
  /* the same query heads without grouping: 256 blocks on 132 SMs */
  CHECK(count_splits(g, 8, 32, 0, 1) == 0, "batch 8, 32 heads MHA: split offered");
  CHECK(count_splits(g, 8, 32, 32, 1) == 0, "batch 8, 32/32 heads: split offered");
  /* prefill: never */
  CHECK(count_splits(g, 1, 8, 0, 512) == 0, "prefill n=512, 8 heads: split offered");
  CHECK(count_splits(g, 1, 8, 2, 512) == 0, "GQA prefill n=512, 8/2 heads: split offered");
  /* the boundary: 16 x 8 = 128 packed blocks leave SMs idle, 17 x 8 = 136 do not */
  CHECK(count_splits(g, 16, 32, 8, 1) > 0, "batch 16 heads 32/8: no split");
  CHECK(count_splits(g, 17, 32, 8, 1) == 0, "batch 17 heads 32/8: split offered");
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
