/* cmd_gpus.c: `attntune gpus [--json]`: the GPU spec table the performance model uses. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cmds.h"
#include "gpus.h"

int attn_cmd_gpus(int argc, char **argv) {
  int json = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) {
      json = 1;
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("usage: attntune gpus [--json]\n  the GPU spec table used by the performance model (--gpu NAME)\n");
      return 0;
    } else {
      fprintf(stderr, "attntune gpus: unknown option '%s' (usage: attntune gpus [--json])\n", argv[i]);
      return 2;
    }
  }
  char err[256];
  int n;
  const attn_gpu *t = attn_gpus(&n, err, sizeof err);
  if (!t) {
    fprintf(stderr, "attntune gpus: %s\n", err);
    return 1;
  }
  if (json) {
    json_t *arr = json_array();
    for (int i = 0; i < n && arr; i++) {
      json_t *o = json_pack("{s:s, s:s, s:s, s:i, s:f, s:f, s:i, s:f, s:f, s:f, s:f, s:f}", "name", t[i].name,
                            "full_name", t[i].full_name, "arch", t[i].arch, "sms", t[i].sms, "smem_per_sm_kb",
                            t[i].smem_per_sm_kb, "smem_per_block_kb", t[i].smem_per_block_kb, "regs_per_sm",
                            t[i].regs_per_sm, "l2_mb", t[i].l2_mb, "bandwidth_tbs", t[i].bandwidth_tbs,
                            "fp16_tflops", t[i].fp16_tflops, "bf16_tflops", t[i].bf16_tflops, "fp32_tflops",
                            t[i].fp32_tflops);
      /* the performance model's per-SM figures (docs/model.md) */
      json_t *m = o ? json_pack("{s:f, s:f, s:f, s:f, s:f, s:i}", "clock_mhz", t[i].clock_mhz, "mma_flops_clk_sm",
                                t[i].mma_flops_clk_sm, "fp32_flops_clk_sm", t[i].fp32_flops_clk_sm, "sfu_clk_sm",
                                t[i].sfu_clk_sm, "smem_bytes_clk_sm", t[i].smem_bytes_clk_sm, "max_threads_sm",
                                t[i].max_threads_sm)
                    : NULL;
      if (m) json_object_update(o, m);
      json_decref(m);
      json_array_append_new(arr, o);
    }
    char *s = arr ? json_dumps(arr, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(arr);
    if (!s) {
      fprintf(stderr, "attntune gpus: out of memory\n");
      return 1;
    }
    puts(s);
    free(s);
    return 0;
  }
  printf("%-9s %-6s %4s %12s %7s %6s %9s %11s %9s\n", "name", "arch", "SMs", "smem SM/blk", "regs", "L2", "HBM",
         "f16/bf16", "fp32");
  for (int i = 0; i < n; i++)
    printf("%-9s %-6s %4d %5.0f/%3.0f KB %6dK %3.0f MB %5.2f TB/s %4.0f/%4.0f TF %6.1f TF\n", t[i].name, t[i].arch,
           t[i].sms, t[i].smem_per_sm_kb, t[i].smem_per_block_kb, t[i].regs_per_sm / 1024, t[i].l2_mb,
           t[i].bandwidth_tbs, t[i].fp16_tflops, t[i].bf16_tflops, t[i].fp32_tflops);
  return 0;
}
