/* tuner_unit.c: the tuner's pure parts: RANGE parsing (every accepted form and every bad one), the GPU table
 * lookup, the search space's constraints and neighbourhoods, and the performance model's orderings, its rates
 * against the published ranges, its bound, and the space's admission of FlashAttention-2's tiles. */
#include "check.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "finalist.h"
#include "internal.h"
#include "gpus.h"
#include "timing.h"
#include "model.h"
#include "range.h"
#include "space.h"
#include "strategy.h"


static void range_ok(const char *s, const int *want, int nwant) {
  int *v = NULL, n = -1;
  char err[256] = "";
  int rc = attn_range_parse(s, &v, &n, err, sizeof err);
  CHECK(rc == ATTN_OK, "range '%s' rejected: %s", s, err);
  if (rc == ATTN_OK) {
    CHECK(n == nwant, "range '%s': %d values, want %d", s, n, nwant);
    for (int i = 0; i < n && i < nwant; i++) CHECK(v[i] == want[i], "range '%s'[%d] = %d, want %d", s, i, v[i], want[i]);
  }
  free(v);
}

static void range_bad(const char *s, const char *want_in_msg) {
  int *v = (int *)&failures, n = 7;
  char err[256] = "";
  int rc = attn_range_parse(s, &v, &n, err, sizeof err);
  CHECK(rc == ATTN_EINVAL, "range '%s' accepted", s ? s : "(null)");
  CHECK(v == NULL && n == 0, "range '%s': outputs not cleared on error", s ? s : "(null)");
  CHECK(err[0] && strchr(err, '\n') == NULL, "range '%s': no one-line message", s ? s : "(null)");
  if (want_in_msg) CHECK(strstr(err, want_in_msg) != NULL, "range '%s': message '%s' lacks '%s'", s, err, want_in_msg);
  if (rc == ATTN_OK) free(v);
}

static void test_range(void) {
  range_ok("64..256", (const int[]){64, 128, 256}, 3);
  range_ok("64..200", (const int[]){64, 128}, 2);
  range_ok("64..256:32", (const int[]){64, 96, 128, 160, 192, 224, 256}, 7);
  range_ok("64..100:32", (const int[]){64, 96}, 2);
  range_ok("64,80,128", (const int[]){64, 80, 128}, 3);
  range_ok("128,64,128", (const int[]){128, 64}, 2);
  range_ok("64", (const int[]){64}, 1);
  range_ok("1", (const int[]){1}, 1);
  range_ok("64..64", (const int[]){64}, 1);
  range_bad("64..", "upper end is missing");
  range_bad("..64", NULL);
  range_bad("a..b", "'a' is not a number");
  range_bad("64..b", "'b' is not a number");
  range_bad("256..64", "descending");
  range_bad("64..256:0", "step 0");
  range_bad("64..256:", NULL);
  range_bad("64..256:x", NULL);
  range_bad("", "empty");
  range_bad(NULL, NULL);
  range_bad("0", "positive");
  range_bad("-64", "positive");
  range_bad("0..64", "positive");
  range_bad("64,,80", "empty item");
  range_bad("64,", "empty item");
  range_bad(",64", "empty item");
  range_bad("64,abc", "not a number");
  range_bad("99999999999", "too large");
  range_bad("64..99999999999", "too large");
  range_bad("1..100000:1", "more than");
  range_bad("64...128", NULL);
  range_bad("64..128,256", "not both");
  range_bad("6 4", NULL);
  /* the top of int: the steps and the doubling pass INT_MAX without wrapping */
  range_ok("2147483647", (const int[]){2147483647}, 1);
  range_ok("2147483600..2147483647:40", (const int[]){2147483600, 2147483640}, 2);
  range_ok("1073741824..2147483647", (const int[]){1073741824}, 1);
  range_ok("2147483647..2147483647:2147483647", (const int[]){2147483647}, 1);
  {
    int *v = NULL, n = 0;
    char err[256];
    CHECK(attn_range_parse("1..2147483647", &v, &n, err, sizeof err) == ATTN_OK && n == 31 && v[30] == 1 << 30,
          "doubling to INT_MAX: %d values", n);
    free(v);
  }
  range_bad("1..2147483647:1", "more than 4096 values");
  range_bad("2147483648", "too large");
  range_bad("1..2147483648", "too large");
  range_bad("2147483647..", "2147483647..4294967294");
}

static void test_gpus(void) {
  char err[512];
  const attn_gpu *g = attn_gpu_find("h100", err, sizeof err);
  CHECK(g && strcmp(g->name, "H100") == 0 && strcmp(g->arch, "sm_90") == 0 && g->sms == 132, "h100 lookup");
  g = attn_gpu_find("RTX 4090", err, sizeof err);
  CHECK(g && strcmp(g->name, "RTX 4090") == 0, "RTX 4090 lookup");
  g = attn_gpu_find("rtx4090", err, sizeof err);
  CHECK(g && strcmp(g->name, "RTX 4090") == 0, "rtx4090 alias");
  g = attn_gpu_find("A100-SXM4", err, sizeof err);
  CHECK(g && strcmp(g->name, "A100") == 0 && g->bandwidth_tbs > 2.0, "A100 alias");
  int n = 0;
  CHECK(attn_gpus(&n, err, sizeof err) && n >= 6, "table has %d GPUs", n);
  static const char *const need[] = {"A100", "H100", "H200", "L4", "L40S", "RTX 4090"};
  for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
    g = attn_gpu_find(need[i], err, sizeof err);
    CHECK(g && g->fp16_tflops > 0 && g->bf16_tflops > 0 && g->fp32_tflops > 0 && g->smem_per_block_kb > 0 &&
              g->regs_per_sm > 0 && g->l2_mb > 0,
          "%s incomplete", need[i]);
  }
  CHECK(attn_gpu_find("V100", err, sizeof err) == NULL, "V100 found");
  CHECK(strstr(err, "unknown GPU 'V100'") && strstr(err, "A100") && strstr(err, "RTX 4090"), "message: %s", err);
}

static void test_space(void) {
  char err[256];
  attn_space sp;
  attn_space_opts o = {.target = ATTN_TARGET_CPU, .dtype = ATTN_F32, .d = 64, .algos = ATTN_ALGO_BIT(ATTN_ALGO_FLASH),
                       .fast_mem_bytes = 2 << 20};
  CHECK(attn_space_build(&o, &sp, err, sizeof err) == ATTN_OK && sp.count > 8, "cpu flash space: %d", sp.count);
  /* every point satisfies its constraints, and none is repeated */
  for (int i = 0; i < sp.count; i++) {
    char why[256];
    CHECK(attn_space_admit(&o, &sp.cfg[i], why, sizeof why) == 0, "point %d not admitted: %s", i, why);
    CHECK(attn_space_find(&sp, &sp.cfg[i]) == i, "point %d repeated", i);
    CHECK(attn_space_fast_bytes(&sp.cfg[i]) <= o.fast_mem_bytes, "point %d too large", i);
  }
  /* neighbours differ in exactly one tunable, and the relation is symmetric */
  int nb[32];
  int total = 0;
  for (int i = 0; i < sp.count; i++) {
    int k = attn_space_neighbours(&sp, i, nb, 32);
    total += k;
    for (int j = 0; j < k; j++) {
      int diff = 0;
      for (int p = 0; p < ATTN_SPACE_NPARAMS; p++)
        diff += attn_space_param_get(&sp.cfg[i], p) != attn_space_param_get(&sp.cfg[nb[j]], p);
      CHECK(diff == 1, "neighbour of %d differs in %d tunables", i, diff);
      int back[32], kb = attn_space_neighbours(&sp, nb[j], back, 32), found = 0;
      for (int q = 0; q < kb; q++) found |= back[q] == i;
      CHECK(found, "neighbourhood not symmetric (%d, %d)", i, nb[j]);
    }
  }
  CHECK(total > 0, "no neighbours at all");
  /* split: in the space when the problem is unknown, a neighbour step like any tunable, 1 the same point as 0 */
  int with_split = 0, split_steps = 0;
  for (int i = 0; i < sp.count; i++) {
    if (sp.cfg[i].split <= 1) continue;
    with_split++;
    int k = attn_space_neighbours(&sp, i, nb, 32);
    for (int j = 0; j < k; j++) split_steps += sp.cfg[nb[j]].split != sp.cfg[i].split;
  }
  CHECK(with_split > 0 && split_steps > 0, "split: %d points, %d steps", with_split, split_steps);
  {
    attn_spec one = sp.cfg[0];
    CHECK(one.split == 0, "first point has split=%d", one.split);
    attn_space_param_set(&one, ATTN_SPACE_NPARAMS - 1, 1);
    CHECK(strcmp(attn_space_param_names[ATTN_SPACE_NPARAMS - 1], "split") == 0 && one.split == 0 &&
              attn_space_find(&sp, &one) == 0,
          "split=1 is not the point without split");
  }
  /* the problem known: split only where the query blocks leave threads idle and each part gets a key block */
  {
    attn_space_opts k = o;
    k.n = 1, k.n_kv = 8192, k.heads = 1, k.threads = 2;
    attn_space dec;
    CHECK(attn_space_build(&k, &dec, err, sizeof err) == ATTN_OK && dec.count == sp.count, "decode: %d of %d",
          dec.count, sp.count);
    k.n = 1024, k.n_kv = 1024, k.heads = 2;
    attn_space big;
    int splits = 0;
    CHECK(attn_space_build(&k, &big, err, sizeof err) == ATTN_OK && big.count > 0, "n=1024: %d", big.count);
    for (int i = 0; i < big.count; i++) splits += big.cfg[i].split > 1;
    CHECK(splits == 0, "n=1024 on 2 threads keeps %d split points", splits);
    attn_spec c = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, ATTN_F32, 64, 0);
    c.split = 2;
    char why[256];
    CHECK(attn_space_admit(&k, &c, why, sizeof why) != 0 && strstr(why, "already keep the 2 threads busy"),
          "split with 32 query blocks on 2 threads: %s", why);
    k.n = 1, k.n_kv = 200, k.heads = 1; /* Bc = 128: two key blocks */
    c.split = 4;
    CHECK(attn_space_admit(&k, &c, why, sizeof why) != 0 && strstr(why, "more parts than the 2 key blocks"),
          "split 4 over 2 key blocks: %s", why);
    c.split = 2;
    CHECK(attn_space_admit(&k, &c, why, sizeof why) == 0, "split 2 over 2 key blocks: %s", why);
    attn_space_free(&dec);
    attn_space_free(&big);
  }
  /* a small fast memory prunes the large tiles, with a reason */
  attn_space small;
  o.fast_mem_bytes = 64 * 1024;
  CHECK(attn_space_build(&o, &small, err, sizeof err) == ATTN_OK && small.count < sp.count && small.count > 0,
        "64 KiB: %d of %d", small.count, sp.count);
  CHECK(strstr(small.pruned_example, "fast memory") != NULL, "pruned reason: %s", small.pruned_example);
  attn_space_free(&small);
  /* registers: unroll 8 never fits (8 rows x 4 vectors + operands > 32 registers with AVX-512, 8 x 2 + 3 > 16 else) */
  attn_spec c = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, ATTN_F32, 64, 0);
  c.br = 64, c.unroll = 8;
  char why[256];
  o.fast_mem_bytes = 2 << 20;
  CHECK(attn_space_admit(&o, &c, why, sizeof why) != 0 && strstr(why, "registers"), "unroll 8 admitted: %s", why);
  c.unroll = 0, c.algo = ATTN_ALGO_LOWRANK;
  CHECK(attn_space_admit(&o, &c, why, sizeof why) != 0, "lowrank admitted into a flash space");
  attn_space_free(&sp);
  /* lowrank only with a tolerance */
  o.algos = ATTN_ALGO_BIT(ATTN_ALGO_LOWRANK);
  CHECK(attn_space_build(&o, &sp, err, sizeof err) == ATTN_OK && sp.count == 0, "lowrank without tolerance");
  attn_space_free(&sp);
  o.tolerance = 0.1;
  CHECK(attn_space_build(&o, &sp, err, sizeof err) == ATTN_OK && sp.count > 0, "lowrank with tolerance");
  attn_space_free(&sp);
  /* d_v != d and odd head dimensions, half dtypes on the CPU: every point carries the space's d_v (dv 0 when it is
   * d: the key of before), and fast memory counts d_v for V and O */
  {
    static const int dims[][2] = {{64, 128}, {7, 13}, {576, 512}, {1, 1}, {33, 33}};
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++)
      for (int t = ATTN_F32; t <= ATTN_BF16; t++) {
        attn_space_opts v = {.target = ATTN_TARGET_CPU, .dtype = (attn_dtype)t, .d = dims[k][0], .dv = dims[k][1],
                             .algos = ATTN_ALGO_BIT(ATTN_ALGO_FLASH) | ATTN_ALGO_BIT(ATTN_ALGO_SMALLCACHE),
                             .fast_mem_bytes = 2 << 20};
        attn_space vs;
        CHECK(attn_space_build(&v, &vs, err, sizeof err) == ATTN_OK && vs.count > 0, "d=%d d_v=%d %s: %d points (%s)",
              dims[k][0], dims[k][1], attn_dtype_name((attn_dtype)t), vs.count, vs.pruned_example);
        for (int i = 0; i < vs.count; i++) {
          CHECK(attn_spec_dv(&vs.cfg[i]) == dims[k][1] && vs.cfg[i].dtype == (attn_dtype)t, "point %d: d_v %d", i,
                attn_spec_dv(&vs.cfg[i]));
          CHECK((dims[k][0] == dims[k][1]) == (vs.cfg[i].dv == 0), "point %d: dv %d for d=%d d_v=%d", i,
                vs.cfg[i].dv, dims[k][0], dims[k][1]);
        }
        attn_space_free(&vs);
      }
    attn_spec a = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, ATTN_F32, 64, 0), b = a;
    b.dv = 128;
    CHECK(attn_space_fast_bytes(&b) - attn_space_fast_bytes(&a) == 4.0 * 64 * (a.br + a.bc),
          "fast memory: V and O rows of d_v");
    attn_space_opts v = o;
    v.dv = 128;
    char why[256];
    CHECK(attn_space_admit(&v, &a, why, sizeof why) != 0 && strstr(why, "d_v=64"), "a d_v = d point in a d_v = 128 "
          "space: %s", why);
    CHECK(attn_space_dims_ok(ATTN_TARGET_CPU, 577, 0, why, sizeof why) != 0 && strstr(why, "d=577"), "d 577: %s", why);
    CHECK(attn_space_dims_ok(ATTN_TARGET_CPU, 64, 600, why, sizeof why) != 0 && strstr(why, "d_v=600"), "d_v: %s", why);
    CHECK(attn_space_dims_ok(ATTN_TARGET_CUDA, 59, 128, why, sizeof why) == 0, "cuda d 59 d_v 128: %s", why);
    CHECK(attn_space_dims_ok(ATTN_TARGET_CUDA, 64, 577, why, sizeof why) != 0 && strstr(why, "d_v=577"), "cuda: %s",
          why);
    CHECK(attn_space_dims_ok(ATTN_TARGET_CPU, 1, 576, why, sizeof why) == 0, "d 1 d_v 576: %s", why);
  }
  /* CUDA: f32 flash at d=256 does not fit an L4's 99 KiB per block; f16 does */
  const attn_gpu *l4 = attn_gpu_find("L4", err, sizeof err);
  attn_space_opts g = {.target = ATTN_TARGET_CUDA, .dtype = ATTN_F32, .d = 256,
                       .algos = ATTN_ALGO_BIT(ATTN_ALGO_FLASH), .fast_mem_bytes = l4->smem_per_block_kb * 1024,
                       .gpu = l4};
  snprintf(g.arch, sizeof g.arch, "%s", l4->arch);
  CHECK(attn_space_build(&g, &sp, err, sizeof err) == ATTN_OK && sp.count == 0 && sp.considered > 0,
        "L4 f32 d=256: %d", sp.count);
  attn_space_free(&sp);
  g.dtype = ATTN_F16;
  g.d = 64;
  CHECK(attn_space_build(&g, &sp, err, sizeof err) == ATTN_OK && sp.count > 4, "L4 f16 d=64: %d", sp.count);
  for (int i = 0; i < sp.count; i++) {
    CHECK(sp.cfg[i].br % (16 * sp.cfg[i].warps) == 0, "cuda Br not divisible by warps");
    CHECK(strcmp(sp.cfg[i].arch, "sm_89") == 0, "cuda arch %s", sp.cfg[i].arch);
  }
  attn_space_free(&sp);
}

/* One CUDA (algorithm, dtype, d, d_v, causal): the documented default (attn_spec_fit) is in the space, it has a
 * neighbour there whenever one of its one-step moves is admissible, and the model ranks it (no compiles). */
static void default_in_space(const attn_gpu *g, attn_algo algo, attn_dtype t, int d, int dv, int causal) {
  char err[256], why[256];
  attn_spec fit = attn_spec_default(algo, ATTN_TARGET_CUDA, t, d, causal);
  fit.dv = dv != d ? dv : 0;
  snprintf(fit.arch, sizeof fit.arch, "%s", g->arch);
  if (attn_spec_fit(&fit, err, sizeof err) != ATTN_OK) {
    CHECK(0, "%s %s %s d=%d d_v=%d: no default: %s", g->name, attn_algo_name(algo), attn_dtype_name(t), d, dv, err);
    return;
  }
  attn_space_opts o = {.target = ATTN_TARGET_CUDA, .dtype = t, .d = d, .dv = dv, .causal = causal,
                       .algos = ATTN_ALGO_BIT(algo), .tolerance = 0.05, .gpu = g,
                       .fast_mem_bytes = g->smem_per_block_kb * 1024};
  snprintf(o.arch, sizeof o.arch, "%s", g->arch);
  attn_space sp;
  if (attn_space_build(&o, &sp, err, sizeof err) != ATTN_OK) {
    CHECK(0, "%s d=%d d_v=%d: %s", g->name, d, dv, err);
    return;
  }
  const int at = attn_space_find(&sp, &fit);
  char txt[512];
  attn_spec_format(&fit, txt, sizeof txt);
  CHECK(at >= 0, "%s: the default %s is not in the space of %d (%s)", g->name, txt, sp.count,
        attn_space_admit(&o, &fit, why, sizeof why) ? why : sp.pruned_example);
  int movable = 0, nb[32];
  for (int k = 0; k < 8; k++) { /* Br and warps halved or doubled, Bc (lowrank: and the rank) by 16, stages by 1 */
    attn_spec c = fit;
    if (k == 0) c.br *= 2;
    if (k == 1) c.br /= 2;
    if (k == 2) c.bc += 16;
    if (k == 3) c.bc -= 16;
    if (k == 4) c.warps *= 2, c.rank += algo == ATTN_ALGO_LOWRANK ? 16 : 0;
    if (k == 5) c.warps /= 2, c.rank -= algo == ATTN_ALGO_LOWRANK ? 16 : 0;
    if (k == 6) c.stages++;
    if (k == 7) c.stages--;
    movable |= attn_space_admit(&o, &c, why, sizeof why) == 0;
  }
  CHECK(at < 0 || !movable || attn_space_neighbours(&sp, at, nb, 32) > 0, "%s: the default %s has no neighbour in "
        "the space of %d", g->name, txt, sp.count);
  if (algo != ATTN_ALGO_LOWRANK) { /* the model ranks flash and smallcache */
    attn_problem p = {.batch = 1, .heads = 16, .n = 1024, .d = d, .d_v = dv, .dtype = t, .causal = causal};
    attn_model_result r;
    CHECK(attn_model_time(g, &p, &fit, &r, err, sizeof err) == ATTN_OK && r.time_ms > 0, "%s: model of %s: %s",
          g->name, txt, err);
  }
  attn_space_free(&sp);
}

/* README: any d and d_v in 1..576 on CUDA. d < 16 (padded to one mma k-step) and d_v > 256 (split over warps sharing
 * the query rows, docs/cuda.md) included: every default of A100 and H100 in their space. */
static void test_space_defaults(void) {
  char err[256];
  const char *const gpus[] = {"A100", "H100"};
  static const int pairs[][2] = {{576, 512}, {192, 128}, {64, 128}};
  for (int gi = 0; gi < 2; gi++) {
    const attn_gpu *g = attn_gpu_find(gpus[gi], err, sizeof err);
    for (int a = ATTN_ALGO_FLASH; a <= ATTN_ALGO_LOWRANK; a++)
      for (int t = ATTN_F32; t <= ATTN_BF16; t++)
        for (int c = 0; c < 2; c++) {
          const int before = failures;
          for (int d = 1; d <= ATTN_MAX_D && failures - before < 3; d++)
            default_in_space(g, (attn_algo)a, (attn_dtype)t, d, d, c);
          for (int k = 0; k < 3 && failures - before < 3; k++)
            default_in_space(g, (attn_algo)a, (attn_dtype)t, pairs[k][0], pairs[k][1], c);
        }
  }
  /* DeepSeek's 576/512 in half precision: the default and more than it */
  const attn_gpu *h100 = attn_gpu_find("H100", err, sizeof err);
  attn_space_opts o = {.target = ATTN_TARGET_CUDA, .dtype = ATTN_BF16, .d = 576, .dv = 512,
                       .algos = ATTN_ALGO_BIT(ATTN_ALGO_FLASH), .gpu = h100,
                       .fast_mem_bytes = h100->smem_per_block_kb * 1024};
  snprintf(o.arch, sizeof o.arch, "%s", h100->arch);
  attn_space sp;
  CHECK(attn_space_build(&o, &sp, err, sizeof err) == ATTN_OK && sp.count >= 2, "H100 bf16 576/512: %d (%s)", sp.count,
        sp.pruned_example);
  attn_space_free(&sp);
}

static void test_model(void) {
  char err[256];
  const attn_gpu *a100 = attn_gpu_find("A100", err, sizeof err), *h100 = attn_gpu_find("H100", err, sizeof err);
  attn_problem p = {.batch = 1, .heads = 16, .n = 4096, .d = 128, .dtype = ATTN_F16};
  attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, ATTN_F16, 128, 0);
  s.br = 128, s.bc = 64, s.warps = 8, s.stages = 2;
  attn_model_result ra, rh, rs;
  CHECK(attn_model_time(a100, &p, &s, &ra, err, sizeof err) == ATTN_OK && ra.time_ms > 0, "model A100: %s", err);
  CHECK(attn_model_time(h100, &p, &s, &rh, err, sizeof err) == ATTN_OK && rh.time_ms < ra.time_ms,
        "H100 (%g ms) not faster than A100 (%g ms)", rh.time_ms, ra.time_ms);
  /* the model's FLOP rate stays under the peak */
  double tflops = ra.flops / (ra.time_ms * 1e-3) / 1e12;
  CHECK(tflops > 50 && tflops < a100->fp16_tflops, "A100 model rate %.0f TFLOP/s", tflops);
  /* tiny tiles are slower than large ones; causal is cheaper than full */
  attn_spec t = s;
  t.br = 16, t.bc = 16, t.warps = 1, t.stages = 1;
  CHECK(attn_model_time(a100, &p, &t, &rs, err, sizeof err) == ATTN_OK && rs.time_ms > ra.time_ms,
        "16x16 tiles (%g) not slower than 128x64 (%g)", rs.time_ms, ra.time_ms);
  p.causal = 1;
  s.causal = 1;
  CHECK(attn_model_time(a100, &p, &s, &rs, err, sizeof err) == ATTN_OK && rs.time_ms < 0.7 * ra.time_ms,
        "causal %g vs %g", rs.time_ms, ra.time_ms);
  /* the I/O beside the time is the kernel's closed form: K, V once per query block */
  CHECK(ra.reads == 16ULL * (4096ULL * 128 + 2ULL * 4096 * 128 * (4096 / 128)) && ra.writes == 16ULL * 4096 * 128,
        "model I/O %llu/%llu", ra.reads, ra.writes);
  attn_spec cpu = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, ATTN_F32, 128, 0);
  CHECK(attn_model_time(a100, &p, &cpu, &rs, err, sizeof err) != ATTN_OK, "model accepted a CPU spec");
}

/* The best flash configuration of the space by the model, with its rate in TFLOP/s. */
static double best_rate(const attn_gpu *g, const attn_problem *p, attn_model_result *out, attn_spec *spec) {
  char err[256];
  attn_space_opts o = {.target = ATTN_TARGET_CUDA, .dtype = p->dtype, .d = p->d, .causal = p->causal,
                       .algos = ATTN_ALGO_BIT(ATTN_ALGO_FLASH), .fast_mem_bytes = g->smem_per_block_kb * 1024,
                       .gpu = g};
  snprintf(o.arch, sizeof o.arch, "%s", g->arch);
  attn_space sp;
  double best = 0;
  if (attn_space_build(&o, &sp, err, sizeof err) != ATTN_OK) return 0;
  for (int i = 0; i < sp.count; i++) {
    attn_model_result r;
    if (attn_model_time(g, p, &sp.cfg[i], &r, err, sizeof err) != ATTN_OK) continue;
    double rate = r.flops / (r.time_ms * 1e-3) / 1e12;
    if (rate > best) {
      best = rate;
      *out = r;
      *spec = sp.cfg[i];
    }
  }
  attn_space_free(&sp);
  return best;
}

/* Fake compiled resources: the tile FlashAttention-2 uses at d=128 spills, every other one needs 200 registers. */
static int fake_res(void *ctx, const attn_spec *c, attn_kernel_res *out) {
  (void)ctx;
  memset(out, 0, sizeof *out);
  out->registers = 200;
  if (c->d == 128 && c->br == 128 && c->bc == 64 && c->warps == 4) out->registers = 255, out->spill_bytes = 96;
  return 0;
}

/* The model against the published figures it is meant to stay near (docs/model.md), its bound, causal work, the L2
 * resident set, occupancy from registers, and the space's admission of FlashAttention-2's own tiles. */
static void test_model_figures(void) {
  char err[256];
  const attn_gpu *a100 = attn_gpu_find("A100", err, sizeof err), *h100 = attn_gpu_find("H100", err, sizeof err);
  attn_problem p = {.batch = 1, .heads = 16, .n = 4096, .d = 128, .dtype = ATTN_BF16};
  attn_model_result r;
  attn_spec s;
  /* attntune --gpu H100 --dtype bf16 --d 128 --n 4096: an mma.sync kernel, about FlashAttention-2's 368 */
  double h = best_rate(h100, &p, &r, &s);
  CHECK(h > 150 && h < 400 && r.bound && attn_model_bound_known(r.bound), "H100 d=128 n=4096: %.0f TFLOP/s, bound %s", h,
        r.bound ? r.bound : "(none)");
  double a = best_rate(a100, &p, &r, &s);
  CHECK(a > 100 && a < 235 && r.bound && attn_model_bound_known(r.bound), "A100 d=128 n=4096: %.0f TFLOP/s, bound %s", a,
        r.bound ? r.bound : "(none)");
  /* no drop at n = 8192: the K/V resident at once fit the L2, whatever the number of heads */
  p.n = 8192;
  double h8 = best_rate(h100, &p, &r, &s);
  CHECK(h8 >= 0.98 * h, "H100 n=8192 %.0f TFLOP/s below n=4096's %.0f", h8, h);
  CHECK(r.l2_resident_bytes < 16 * 2.0 * 8192 * 128 * 2 && r.l2_resident_bytes < h100->l2_mb * 1048576.0,
        "resident %.0f bytes", r.l2_resident_bytes);
  CHECK(strcmp(r.bound, "dram") != 0 && strcmp(r.bound, "l2") != 0, "n=8192 bound %s", r.bound);
  /* causal: about half the work, a lower rate than non-causal (the diagonal blocks, the tail), not the same */
  p.causal = 1;
  double hc = best_rate(h100, &p, &r, &s);
  CHECK(hc > 0.5 * h8 && hc < h8, "causal %.0f vs %.0f TFLOP/s", hc, h8);
  /* few blocks: occupancy bounds it */
  p.causal = 0, p.n = 512, p.heads = 1;
  best_rate(h100, &p, &r, &s);
  CHECK(strcmp(r.bound, "occupancy") == 0 || strcmp(r.bound, "launch") == 0, "n=512 one head: %s", r.bound);
  /* d=256: shared memory or tensor cores, never special functions */
  p.n = 8192, p.heads = 8, p.d = 256;
  best_rate(h100, &p, &r, &s);
  CHECK(strcmp(r.bound, "shared_memory") == 0 || strcmp(r.bound, "tensor_cores") == 0, "d=256 bound %s", r.bound);
  /* more registers, fewer blocks per SM, never faster */
  p.d = 128, p.heads = 16;
  attn_spec f = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, ATTN_BF16, 128, 0);
  f.br = 64, f.bc = 64, f.warps = 4, f.stages = 1; /* 48 KiB: four blocks fit the shared memory */
  snprintf(f.arch, sizeof f.arch, "sm_90");
  attn_kernel_res lo = {.registers = 128}, hi = {.registers = 255};
  attn_model_result rl, rh;
  CHECK(attn_model_time_res(h100, &p, &f, &lo, &rl, err, sizeof err) == ATTN_OK &&
            attn_model_time_res(h100, &p, &f, &hi, &rh, err, sizeof err) == ATTN_OK &&
            rl.blocks_per_sm > rh.blocks_per_sm && rl.time_ms <= rh.time_ms && strcmp(rl.resources_from, "ptxas") == 0,
        "128 registers: %d blocks/SM %g ms; 255: %d, %g ms", rl.blocks_per_sm, rl.time_ms, rh.blocks_per_sm,
        rh.time_ms);

  /* FlashAttention-2's tiles (d=64 128x128, d=128 128x64, 4 warps) are in the space on both GPUs without a
   * compiler (the estimate), and ruled out when the compiled kernel spills */
  const attn_gpu *gs[] = {a100, h100};
  for (int gi = 0; gi < 2; gi++)
    for (int k = 0; k < 2; k++) {
      const int d = k ? 128 : 64, bc = k ? 64 : 128;
      attn_space_opts o = {.target = ATTN_TARGET_CUDA, .dtype = ATTN_BF16, .d = d,
                           .algos = ATTN_ALGO_BIT(ATTN_ALGO_FLASH),
                           .fast_mem_bytes = gs[gi]->smem_per_block_kb * 1024, .gpu = gs[gi]};
      snprintf(o.arch, sizeof o.arch, "%s", gs[gi]->arch);
      attn_spec c = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, ATTN_BF16, d, 0);
      c.br = 128, c.bc = bc, c.warps = 4, c.stages = 2;
      snprintf(c.arch, sizeof c.arch, "%s", gs[gi]->arch);
      char why[256] = "";
      CHECK(attn_space_admit(&o, &c, why, sizeof why) == 0, "%s d=%d 128x%d 4 warps ruled out: %s", gs[gi]->name, d,
            bc, why);
      o.resources = fake_res;
      const int spills = d == 128;
      CHECK((attn_space_admit(&o, &c, why, sizeof why) != 0) == spills && (!spills || strstr(why, "spills")),
            "%s d=%d with compiled resources: %s", gs[gi]->name, d, why);
    }
  /* and the tiles that always spill (256 accumulator words per lane) stay out without a compiler */
  attn_space_opts o = {.target = ATTN_TARGET_CUDA, .dtype = ATTN_BF16, .d = 128,
                       .algos = ATTN_ALGO_BIT(ATTN_ALGO_FLASH),
                       .fast_mem_bytes = h100->smem_per_block_kb * 1024, .gpu = h100};
  attn_spec c = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, ATTN_BF16, 128, 0);
  c.br = 128, c.bc = 128, c.warps = 4, c.stages = 2;
  char why[256] = "";
  CHECK(attn_space_admit(&o, &c, why, sizeof why) != 0 && strstr(why, "registers"), "d=128 128x128 4 warps: %s",
        why);
}

/* The tuner's best follows the database's tie rule (db.h): a fake evaluator gives every configuration a time and a
 * transfer count from its Br; the best must not depend on the order the strategy evaluates in. */
static void fake_eval(attn_tuner *t, const attn_spec *s, attn_eval *out) {
  (void)t;
  memset(out, 0, sizeof *out);
  out->ok = 1;
  snprintf(out->status, sizeof out->status, "ok");
  /* Br=32 fastest; Br=64 2% slower with half the transfers; Br=128 5% slower with a quarter; others 20% slower */
  out->time_ms = s->br == 32 ? 10.0 : s->br == 64 ? 10.2 : s->br == 128 ? 10.5 : 12.0;
  out->io = 1e6 * 64.0 / s->br;
  out->reads = (long long)out->io, out->writes = 0;
  out->error = 1e-7;
}

static void test_best(void) {
  char err[256];
  attn_space sp;
  attn_space_opts o = {.target = ATTN_TARGET_CPU, .dtype = ATTN_F32, .d = 64, .algos = ATTN_ALGO_BIT(ATTN_ALGO_FLASH),
                       .fast_mem_bytes = 2 << 20};
  CHECK(attn_space_build(&o, &sp, err, sizeof err) == ATTN_OK, "space: %s", err);
  for (int order = 0; order < 2; order++) {
    attn_tuner t = {.space = &sp, .budget = sp.count, .eval = fake_eval};
    attn_eval e;
    for (int i = 0; i < sp.count; i++) attn_tuner_evaluate(&t, &sp.cfg[order ? sp.count - 1 - i : i], &e);
    CHECK(t.have_best && t.best.br == 64 && t.best_eval.time_ms == 10.2,
          "order %d: best Br=%d %.1f ms, want Br=64 (within 3%% of Br=32, half the transfers)", order, t.best.br,
          t.best_eval.time_ms);
    attn_tuner_release(&t);
  }
  attn_space_free(&sp);
}

/* The finalist round's rule: the default stays unless beaten beyond the noise; the tie rule among the rest. */
static void test_finalist(void) {
  char why[256];
  /* 1.5% faster, tiny noise: below the 2% floor, the default stays */
  attn_finalist a[] = {{10.0, 0.001, 100, 1, 1}, {9.85, 0.001, 100, 0, 1}};
  CHECK(attn_finalist_pick(a, 2, why, sizeof why) == 0 && strstr(why, "default kept"), "1.5%%: %s", why);
  /* 10% faster, 3% + 3% noise: replaces it */
  attn_finalist b[] = {{10.0, 0.03, 100, 1, 1}, {9.0, 0.03, 100, 0, 1}};
  CHECK(attn_finalist_pick(b, 2, why, sizeof why) == 1 && strstr(why, "faster than the default"), "10%%: %s", why);
  /* 10% faster but 8% + 4% noise: the default stays */
  attn_finalist c[] = {{10.0, 0.04, 100, 1, 1}, {9.0, 0.08, 100, 0, 1}};
  CHECK(attn_finalist_pick(c, 2, why, sizeof why) == 0, "noisy win: %s", why);
  /* unknown noise (INFINITY) never replaces the default */
  attn_finalist d[] = {{10.0, INFINITY, 100, 1, 1}, {5.0, 0.01, 100, 0, 1}};
  CHECK(attn_finalist_pick(d, 2, why, sizeof why) == 0, "unknown noise: %s", why);
  /* two winners within 3% of each other: the one moving fewer entries; the default, slower, is out */
  attn_finalist e[] = {{10.0, 0.01, 50, 1, 1}, {8.0, 0.01, 400, 0, 1}, {8.2, 0.01, 200, 0, 1}};
  CHECK(attn_finalist_pick(e, 3, why, sizeof why) == 2, "tie rule among winners: %s", why);
  /* the default within 3% of a winner and moving fewer entries stays */
  attn_finalist f[] = {{10.0, 0.005, 50, 1, 1}, {9.75, 0.002, 400, 0, 1}};
  CHECK(attn_finalist_pick(f, 2, why, sizeof why) == 0, "default by transfers: %s", why);
  /* a finalist that did not run never wins; without a default the fastest does */
  attn_finalist g[] = {{1.0, 0.01, 100, 0, 0}, {9.0, 0.01, 100, 0, 1}, {8.0, 0.01, 100, 0, 1}};
  CHECK(attn_finalist_pick(g, 3, why, sizeof why) == 2, "no default: %s", why);
  attn_finalist h[] = {{1.0, 0.01, 100, 1, 0}};
  CHECK(attn_finalist_pick(h, 1, why, sizeof why) == -1, "none ok");
}

/* The timing statistics: clean repetitions when there are enough; the corrected time otherwise; the stop rule. */
static void test_timing(void) {
  attn_timing t;
  attn_timing_stats s;
  attn_timing_init(&t, 2);
  /* 6 clean runs of ~1 ms and 6 delayed by another process (wall 2 ms, 1.5 ms waiting): the clean median */
  for (int i = 0; i < 6; i++) {
    CHECK(attn_timing_add(&t, 1.0 + 0.001 * i, 0) == 0, "add");
    CHECK(attn_timing_add(&t, 2.0, 1.5) == 0, "add");
  }
  attn_timing_stats_of(&t, &s);
  CHECK(!strcmp(s.method, "clean") && s.clean == 6 && fabs(s.median_ms - 1.0025) < 1e-9, "clean: %s %d %g", s.method,
        s.clean, s.median_ms);
  attn_timing_free(&t);
  /* every run delayed: wall - delay/threads */
  attn_timing_init(&t, 2);
  for (int i = 0; i < 7; i++) CHECK(attn_timing_add(&t, 100.0, 40.0) == 0, "add");
  attn_timing_stats_of(&t, &s);
  CHECK(!strcmp(s.method, "corrected") && fabs(s.median_ms - 80.0) < 1e-9 && s.ci_rel == 0, "corrected: %s %g",
        s.method, s.median_ms);
  CHECK(attn_timing_enough(&t, &s, 0.02, 5, 0.7, 1.0), "7 identical corrected runs are enough");
  /* one-sided leftovers of interference: the lower quartile, not the median */
  for (int i = 0; i < 8; i++) CHECK(attn_timing_add(&t, 100.0 + 10 * i, 40.0) == 0, "add");
  attn_timing_stats_of(&t, &s);
  CHECK(!strcmp(s.method, "corrected") && s.median_ms == 80.0, "corrected quartile: %g", s.median_ms);
  attn_timing_free(&t);
  /* no scheduler statistics: the wall median; spread keeps it going until the cap */
  attn_timing_init(&t, 2);
  for (int i = 0; i < 9; i++) CHECK(attn_timing_add(&t, i % 2 ? 1.0 : 1.5, -1) == 0, "add");
  attn_timing_stats_of(&t, &s);
  CHECK(!strcmp(s.method, "wall") && s.ci_rel > 0.02, "wall: %s ci %g", s.method, s.ci_rel);
  CHECK(!attn_timing_enough(&t, &s, 0.02, 5, 0.01, 1.0), "a wide interval is not enough before the cap");
  CHECK(attn_timing_enough(&t, &s, 0.02, 5, 1.0, 1.0), "the cap ends it");
  attn_timing_free(&t);
}

/* ptxas's report as the tuner reads it (registers, spills): a device function the kernel calls without inlining
 * reports its own stack and spills after the kernel's, which must not replace them. */
static void test_ptxas_report(void) {
  static const char log[] =
      "ptxas info    : 8 bytes gmem\n"
      "ptxas info    : Compiling entry function 'attn_kernel' for 'sm_90'\n"
      "ptxas info    : Function properties for attn_kernel\n"
      "ptxas         .     2496 bytes stack frame, 6132 bytes spill stores, 5300 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers, 2496 bytes cumulative stack size\n"
      "ptxas info    : Compile time = 1003.297 ms\n"
      "ptxas info    : Function properties for _Z6fa_fixPKtS0_S0_Ptiixxf\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n";
  attn_cuda_resources r;
  CHECK(attn_nvrtc_resources(log, "attn_kernel", &r) == 0 && r.registers == 255 && r.spill_stores == 6132 &&
            r.spill_loads == 5300 && r.stack == 2496,
        "ptxas report: %d registers, spills %ld/%ld, stack %ld", r.registers, r.spill_stores, r.spill_loads, r.stack);
}

int main(void) {
  test_ptxas_report();
  test_finalist();
  test_timing();
  test_range();
  test_gpus();
  test_space();
  test_space_defaults();
  test_model();
  test_model_figures();
  test_best();
  if (failures) {
    fprintf(stderr, "tuner_unit: %d failures\n", failures);
    return 1;
  }
  printf("tuner_unit: all checks passed\n");
  return 0;
}
