/* space_cpu_gqa: the CPU space admits split-K where the kernel's query blocks leave threads idle, counting them as
 * templates/flash.c runs them: a KV head's G query heads packed into one block when n < Br (fl_packed), as the
 * untuned default split counts them (attn_cpu_query_blocks, runtime/api.c's default_split). On 4 threads, f32
 * d = 64, n_kv = 4096, the default tiles: split = 2 is admitted exactly where attn_plan_default splits, and
 *   8 query heads over 1 KV head at n = 1 (one packed block; unpacked 8), 4 over 1 at n = 3 (12 rows, one block;
 *   unpacked 4) and 8 over 2 at n = 1 (2 blocks) are admitted; 8 heads without grouping at n = 1 (8 blocks), and
 *   8 over 1 at n = Br - 1 (8 (Br - 1) packed rows, 8 blocks) are not. */
#include <string.h>
#include "check.h"
#include "internal.h"
#include "space.h"

enum { THREADS = 4, N_KV = 4096 };

static void one(int heads, int heads_kv, int n, int want) {
  attn_runtime rt;
  memset(&rt, 0, sizeof rt);
  rt.target = ATTN_TARGET_CPU;
  rt.threads = THREADS;
  const attn_problem p = {.batch = 1, .heads = heads, .heads_kv = heads_kv, .n = n, .n_kv = N_KV, .d = 64,
                          .d_v = 64, .dtype = ATTN_F32};
  attn_spec def;
  attn_plan_default(&rt, &p, ATTN_ALGO_FLASH, &def);
  attn_spec c = def;
  c.split = 2;
  const attn_space_opts o = {.target = ATTN_TARGET_CPU, .dtype = ATTN_F32, .d = 64,
                             .algos = ATTN_ALGO_BIT(ATTN_ALGO_FLASH), .n = n, .n_kv = N_KV, .heads = heads,
                             .heads_kv = heads_kv, .threads = THREADS};
  char why[512] = "";
  const int admitted = attn_space_admit(&o, &c, why, sizeof why) == 0;
  CHECK(admitted == want, "heads %d/%d n=%d Br=%d: split=2 %s (%s), want %s", heads, heads_kv, n, c.br,
        admitted ? "admitted" : "refused", why, want ? "admitted" : "refused");
  CHECK(admitted == (def.split > 1), "heads %d/%d n=%d Br=%d: the space %s split=2, the untuned default split=%d",
        heads, heads_kv, n, c.br, admitted ? "admits" : "refuses", def.split);
  printf("heads %d/%d n=%d Br=%d: %ld blocks, split=2 %s, default split=%d\n", heads, heads_kv, n, c.br,
         attn_cpu_query_blocks(&p, &c), admitted ? "admitted" : "refused", def.split);
}

int main(void) {
  attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, ATTN_F32, 64, 0);
  CHECK(s.br > 8, "the default CPU Br=%d leaves no room for packed rows", s.br);
  one(8, 1, 1, 1);
  one(4, 1, 3, 1);
  one(8, 2, 1, 1);
  one(8, 8, 1, 0);
  one(8, 1, s.br - 1, 0);
  printf("space_cpu_gqa: %d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
