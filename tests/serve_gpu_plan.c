/* serve_gpu_plan.c: the configuration a CUDA plan for a serving layout is served (attn_plan_choose, as
 * attn_plan_create chooses it, without compiling anything), on the driver ATTN_LIBCUDA names (the fake driver with
 * FAKE_LIBCUDA_NAME set to a GPU of the spec table, so that rows tuned with --gpu NAME apply). Prints
 * "plan: SPEC (ORIGIN)", SPEC the canonical text as the database's kernels table holds it.
 * Usage: serve_gpu_plan DB D N N_KV HEADS BATCH CAUSAL DTYPE PAGE_SIZE VARLEN; exit 0, or 1 with the reason. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

int main(int argc, char **argv) {
  if (argc != 11) {
    fprintf(stderr, "usage: serve_gpu_plan DB D N N_KV HEADS BATCH CAUSAL DTYPE PAGE_SIZE VARLEN\n");
    return 2;
  }
  attn_problem in = {.d = atoi(argv[2]), .n = atoi(argv[3]), .n_kv = atoi(argv[4]), .heads = atoi(argv[5]),
                     .batch = atoi(argv[6]), .causal = atoi(argv[7]), .page_size = atoi(argv[9]),
                     .varlen = atoi(argv[10])};
  in.dtype = !strcmp(argv[8], "bf16") ? ATTN_BF16 : !strcmp(argv[8], "f16") ? ATTN_F16 : ATTN_F32;
  attn_runtime *rt = NULL;
  if (attn_open(argv[1], ATTN_TARGET_CUDA, &rt) != ATTN_OK) {
    fprintf(stderr, "serve_gpu_plan: %s\n", attn_last_error(NULL));
    return 1;
  }
  attn_problem p;
  attn_spec s;
  char origin[128], text[512];
  int rc = attn_problem_normalize(rt, &in, &p);
  if (rc == ATTN_OK) rc = attn_plan_choose(rt, &p, &s, origin, sizeof origin);
  if (rc != ATTN_OK) {
    fprintf(stderr, "serve_gpu_plan: %s\n", attn_last_error(rt));
    attn_close(rt);
    return 1;
  }
  attn_spec_format(&s, text, sizeof text);
  printf("device: %s\nplan: %s (%s)\n", rt->device, text, origin);
  attn_close(rt);
  return 0;
}
