/* model_table: the performance model's predictions in the FlashAttention papers' setting (batch x n = 16k tokens,
 * hidden 2048: heads = 2048/d; bf16; forward), the best flash configuration of the space per (GPU, d, n, causal):
 * TFLOP/s (4 n^2 d per head, halved when causal), the bound and the tile. docs/model.md shows its output.
 *   model_table [--compiled [--db PATH]] [GPU ...]   (default: A100 H100; --compiled: registers and spills from
 *                        NVRTC, two compiles at a time, instead of the estimate, kept in the database PATH if given) */
#include <stdio.h>
#include <string.h>
#include "kres.h"
#include "model.h"
#include "space.h"

int main(int argc, char **argv) {
  const char *def[] = {"A100", "H100"};
  const int compiled = argc > 1 && strcmp(argv[1], "--compiled") == 0;
  const int withdb = compiled && argc > 3 && strcmp(argv[2], "--db") == 0;
  const int skip = 1 + compiled + 2 * withdb;
  const char **names = argc > skip ? (const char **)argv + skip : def;
  const int ng = argc > skip ? argc - skip : 2;
  attn_db *db = NULL;
  char dberr[512];
  if (withdb && attn_db_open(argv[3], 1, &db, dberr, sizeof dberr) != ATTN_OK) {
    fprintf(stderr, "model_table: %s\n", dberr);
    return 1;
  }
  attn_kres kres;
  attn_kres_init(&kres, db, compiled);
  if (compiled && !kres.compiler[0]) {
    printf("model_table: NVRTC is not available\n");
    return 77;
  }
  static const int ds[] = {64, 128, 256}, ns[] = {512, 1024, 2048, 4096, 8192, 16384};
  for (int gi = 0; gi < ng; gi++) {
    char err[256];
    const attn_gpu *g = attn_gpu_find(names[gi], err, sizeof err);
    if (!g) {
      fprintf(stderr, "model_table: %s\n", err);
      return 2;
    }
    printf("%s (%s), bf16, TFLOP/s and bound per n; tile of the n=16k row\n", g->name, g->arch);
    for (int c = 0; c < 2; c++)
      for (int di = 0; di < 3; di++) {
        attn_space_opts o = {.target = ATTN_TARGET_CUDA, .dtype = ATTN_BF16, .d = ds[di], .causal = c,
                             .algos = ATTN_ALGO_BIT(ATTN_ALGO_FLASH), .fast_mem_bytes = g->smem_per_block_kb * 1024,
                             .gpu = g};
        snprintf(o.arch, sizeof o.arch, "%s", g->arch);
        attn_space sp;
        if (compiled) {
          o.resources = attn_kres_get;
          o.resources_ctx = &kres;
          attn_kres_collect(&kres);
          if (attn_space_build(&o, &sp, err, sizeof err) == ATTN_OK) attn_space_free(&sp);
          attn_kres_fill(&kres, 2);
        }
        if (attn_space_build(&o, &sp, err, sizeof err) != ATTN_OK) continue;
        printf("| d=%-3d causal=%d |", ds[di], c);
        attn_spec last = {0};
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
          attn_problem p = {.batch = 16384 / ns[ni], .heads = 2048 / ds[di], .n = ns[ni], .d = ds[di],
                            .dtype = ATTN_BF16, .causal = c};
          double best = 0;
          const char *bound = "-";
          for (int i = 0; i < sp.count; i++) {
            attn_model_result r;
            attn_kernel_res kr;
            const int known = compiled && attn_kres_get(&kres, &sp.cfg[i], &kr) == 0;
            if (attn_model_time_res(g, &p, &sp.cfg[i], known ? &kr : NULL, &r, err, sizeof err) != ATTN_OK) continue;
            const double rate = r.flops / (r.time_ms * 1e-3) / 1e12;
            if (rate > best) best = rate, bound = r.bound, last = sp.cfg[i];
          }
          printf(" %3.0f %-17s |", best, bound);
        }
        printf(" %dx%d, %d warps, %d stage%s |\n", last.br, last.bc, last.warps, last.stages,
               last.stages > 1 ? "s" : "");
        attn_space_free(&sp);
      }
  }
  attn_kres_free(&kres);
  attn_db_close(db);
  return 0;
}
