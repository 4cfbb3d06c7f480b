/* sm90_tune: the Hopper template (impl=wgmma) in the tuner's space and in the runtime's choice.
 *   sm90_tune space   the CUDA forward space of an sm_90 GPU holds impl=wgmma configurations (each passing
 *                     attn_spec_check_sm90, 1..3 consumer warpgroups, no ring deeper than hides the K/V copies in
 *                     model_sm90); an sm_80 GPU's, f32's and a d that is not a multiple of 8 hold none; the model
 *                     tells stages apart where the copies wait
 *   sm90_tune serve   on the fake driver (ATTN_LIBCUDA, FAKE_LIBCUDA=cc=90, ATTN_DB a scratch path): a stored
 *                     impl=wgmma row of provenance model is not served (the mma.sync default is, or the best
 *                     mma.sync row stored, and describe says a wgmma row was passed over), a measured one is
 *                     (its execution is refused: the fake has no cuTensorMapEncodeTiled); a backward's plan is never
 *                     served a stored dq=atomic row (dQ by atomics) unless it says nondeterministic; with cc=80 an impl=wgmma
 *                     spec's plan is refused with the reason */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "check.h"
#include "gpus.h"
#include "internal.h"
#include "model_sm90.h"
#include "space.h"
#include "spec_bwd_cuda.h"
#include "spec_sm90.h"
#include "store.h"

static int ring_pruned; /* points left out for a ring deeper than hides the copies */
static void pruned(void *ctx, const attn_spec *c, const char *why) {
  (void)ctx;
  if (c->impl == ATTN_IMPL_WGMMA && strstr(why, "already hide the K/V copies")) ring_pruned++;
}

/* wgmma configurations in the space of (gpu, dtype, d); every one checked, and the consumer counts seen. A deeper
 * ring is there only where the one a stage shallower (there too) leaves the consumers waiting for K and V. */
static int wgmma_count(const char *gpu_name, attn_dtype dt, int d, int *consumers) {
  char err[512];
  const attn_gpu *g = attn_gpu_find(gpu_name, err, sizeof err);
  CHECK(g != NULL, "%s: %s", gpu_name, err);
  if (!g) return -1;
  attn_space_opts o = {.target = ATTN_TARGET_CUDA, .dtype = dt, .d = d, .causal = 1,
                       .algos = ATTN_ALGO_BIT(ATTN_ALGO_FLASH), .gpu = g, .fast_mem_bytes = g->smem_per_block_kb * 1024.0,
                       .pruned = pruned};
  snprintf(o.arch, sizeof o.arch, "%s", g->arch);
  attn_space sp;
  CHECK(attn_space_build(&o, &sp, err, sizeof err) == ATTN_OK, "%s d=%d: %s", gpu_name, d, err);
  int n = 0, mma = 0;
  if (consumers) *consumers = 0;
  for (int i = 0; i < sp.count; i++) {
    const attn_spec *c = &sp.cfg[i];
    if (c->impl != ATTN_IMPL_WGMMA) {
      mma++;
      continue;
    }
    n++;
    CHECK(attn_spec_check_sm90(c, err, sizeof err) == ATTN_OK, "%s: %s", gpu_name, err);
    CHECK(strcmp(c->arch, "sm_90a") == 0 && c->br == 64 * (c->warps / 4 - 1), "arch %s Br %d warps %d", c->arch,
          c->br, c->warps);
    if (consumers) *consumers |= 1 << (c->warps / 4 - 1);
    if (c->stages > 1) {
      attn_spec sh = *c;
      sh.stages--;
      CHECK(attn_space_find(&sp, &sh) >= 0 && attn_model_sm90_ring_wait(g, &sh) > 0,
            "%s d=%d Bc=%d warps=%d stages=%d: the ring a stage shallower is not there or hides the copies", gpu_name,
            d, c->bc, c->warps, c->stages);
    }
  }
  CHECK(mma > 0 || dt == ATTN_F32, "%s d=%d: no mma.sync configuration left", gpu_name, d);
  attn_space_free(&sp);
  return n;
}

/* The model tells stages apart: H100 bf16 d=128, n=8192, 16 heads. Two consumers with 128-key blocks wait for K and V
 * with one stage (S_j's copy has only the softmax and P V to hide behind) and not with two, a third changes nothing;
 * one consumer with 16-key blocks waits even with two (a block's work is shorter than a copy), less with three. */
static double stage_ms(const attn_gpu *g, int warps, int bc, int stages) {
  attn_problem p;
  memset(&p, 0, sizeof p);
  p.batch = 1, p.heads = p.heads_kv = 16, p.n = p.n_kv = 8192, p.d = p.d_v = 128, p.dtype = ATTN_BF16;
  attn_spec s = attn_spec_default_sm90(ATTN_BF16, 128, 0);
  s.warps = warps, s.br = 64 * (warps / 4 - 1), s.bc = bc, s.stages = stages;
  attn_model_result r;
  char err[256] = "";
  CHECK(attn_model_sm90_time(g, &p, &s, &r, err, sizeof err) == ATTN_OK, "warps=%d Bc=%d stages=%d: %s", warps, bc,
        stages, err);
  return r.time_ms;
}

/* The runtime packs grouped-query heads for this template as for mma.sync (attn_cuda_gqa_packs): decode with 32 query
 * heads over 8 KV heads reads each KV head's K and V once, a quarter of what 32 KV heads read, and its FLOPs are
 * the unpacked problem's; with ALiBi nothing is packed. */
static void gqa_decode(void) {
  char err[256] = "";
  const attn_gpu *g = attn_gpu_find("H100", err, sizeof err);
  CHECK(g != NULL, "%s", err);
  if (!g) return;
  attn_problem p;
  memset(&p, 0, sizeof p);
  p.batch = 4, p.heads = 32, p.n = 1, p.n_kv = 8192, p.d = p.d_v = 128, p.dtype = ATTN_BF16, p.causal = 1;
  attn_spec s = attn_spec_default_sm90(ATTN_BF16, 128, 1);
  attn_model_result mha, gqa, alibi;
  p.heads_kv = 32;
  CHECK(attn_model_sm90_time(g, &p, &s, &mha, err, sizeof err) == ATTN_OK, "MHA: %s", err);
  p.heads_kv = 8;
  CHECK(attn_model_sm90_time(g, &p, &s, &gqa, err, sizeof err) == ATTN_OK, "GQA: %s", err);
  const double kv = 4.0 * 8 * 8192 * 256; /* K and V entries, once per KV head */
  CHECK(gqa.reads < 1.01 * kv + 4.0 * 32 * 128 && mha.reads > 3.9 * gqa.reads && gqa.flops == mha.flops &&
            gqa.time_ms < mha.time_ms,
        "GQA decode: %llu entries read (K and V once per KV head: %.0f), MHA %llu; flops %g / %g; %g / %g ms",
        gqa.reads, kv, mha.reads, gqa.flops, mha.flops, gqa.time_ms, mha.time_ms);
  s.alibi = 1;
  CHECK(attn_model_sm90_time(g, &p, &s, &alibi, err, sizeof err) != ATTN_OK || alibi.reads > 3.9 * gqa.reads,
        "ALiBi packed: %llu entries read", alibi.reads);
}

static void stages(void) {
  char err[256] = "";
  const attn_gpu *g = attn_gpu_find("H100", err, sizeof err);
  CHECK(g != NULL, "%s", err);
  if (!g) return;
  const double a1 = stage_ms(g, 12, 128, 1), a2 = stage_ms(g, 12, 128, 2), a3 = stage_ms(g, 12, 128, 3);
  CHECK(a1 > 1.1 * a2 && a2 == a3, "warps=12 Bc=128: stages 1, 2, 3: %g %g %g ms", a1, a2, a3);
  const double b1 = stage_ms(g, 8, 16, 1), b2 = stage_ms(g, 8, 16, 2), b3 = stage_ms(g, 8, 16, 3);
  CHECK(b1 > b2 && b2 > b3, "warps=8 Bc=16: stages 1, 2, 3: %g %g %g ms", b1, b2, b3);
  attn_spec s = attn_spec_default_sm90(ATTN_BF16, 128, 0);
  s.stages = 1;
  CHECK(attn_model_sm90_ring_wait(g, &s) > 0, "one stage hides the copies");
  s.stages = 2;
  CHECK(attn_model_sm90_ring_wait(g, &s) == 0, "two stages leave a wait");
  attn_spec mma = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, ATTN_BF16, 128, 0);
  CHECK(attn_model_sm90_ring_wait(g, &mma) < 0 && attn_model_sm90_ring_wait(NULL, &s) < 0, "not refused");
}

static void space(void) {
  int cons = 0;
  stages();
  gqa_decode();
  ring_pruned = 0;
  const int h100 = wgmma_count("H100", ATTN_BF16, 128, &cons);
  CHECK(h100 > 0 && cons == (2 | 4 | 8), "H100 bf16 d=128: %d wgmma configurations, consumers mask %d", h100, cons);
  /* 72 points fit before the deeper rings were left out, 60 now */
  CHECK(ring_pruned > 0 && h100 + ring_pruned == 72,
        "H100 bf16 d=128: %d wgmma configurations, %d deeper rings left out", h100, ring_pruned);
  CHECK(wgmma_count("H200", ATTN_F16, 72, NULL) > 0, "H200 f16 d=72: no wgmma configuration");
  CHECK(wgmma_count("H100", ATTN_F16, 256, NULL) > 0, "H100 f16 d=256: no wgmma configuration");
  CHECK(wgmma_count("A100", ATTN_BF16, 128, NULL) == 0, "A100 (sm_80) got wgmma configurations");
  CHECK(wgmma_count("L4", ATTN_F16, 64, NULL) == 0, "L4 (sm_89) got wgmma configurations");
  CHECK(wgmma_count("H100", ATTN_F32, 64, NULL) == 0, "H100 f32 got wgmma configurations");
  CHECK(wgmma_count("H100", ATTN_F16, 60, NULL) == 0, "H100 d=60 got wgmma configurations");
}

/* Stores one row of spec s for problem p under device, with provenance prov (a backward's row when bwd). */
static void store_pass(const char *db, const char *device, const attn_problem *p, const attn_spec *s,
                       const char *prov, double ms, int bwd) {
  attn_store *st = NULL;
  char err[512];
  CHECK(attn_store_open(db, &st, err, sizeof err) == ATTN_OK, "store: %s", err);
  if (!st) return;
  attn_store_set_backward(st, bwd);
  CHECK(attn_store_begin(st, device, "{\"kind\": \"gpu\"}", "sm90_tune", err, sizeof err) == ATTN_OK, "begin: %s",
        err);
  attn_eval e;
  memset(&e, 0, sizeof e);
  e.ok = 1;
  snprintf(e.status, sizeof e.status, "ok");
  e.time_ms = ms;
  e.error = strcmp(prov, "measured") == 0 ? 1e-4 : -1;
  e.io = e.reads = e.writes = -1;
  e.iqr_ms = e.ci_rel = e.load = -1;
  CHECK(attn_store_put(st, p, s, prov, &e, err, sizeof err) == ATTN_OK, "put: %s", err);
  attn_store_end(st, 0);
  attn_store_close(st);
}

static void store_row(const char *db, const char *device, const attn_problem *p, const attn_spec *s,
                      const char *prov, double ms) {
  store_pass(db, device, p, s, prov, ms, 0);
}

/* The plan a fresh runtime on db makes for p: its describe text in buf; the rc of attn_plan_create. */
static int plan_for(const char *db, const attn_problem *p, char *buf, size_t len, attn_plan **keep,
                    attn_runtime **keep_rt) {
  attn_runtime *rt = NULL;
  buf[0] = '\0';
  int rc = attn_open(db, ATTN_TARGET_CUDA, &rt);
  CHECK(rc == ATTN_OK, "attn_open: %s", attn_last_error(NULL));
  if (rc != ATTN_OK) return rc;
  attn_plan *plan = NULL;
  rc = attn_plan_create(rt, p, &plan);
  snprintf(buf, len, "%s", rc == ATTN_OK ? attn_plan_describe(plan) : attn_last_error(rt));
  if (keep) *keep = plan;
  else attn_plan_destroy(plan);
  if (keep_rt) *keep_rt = rt;
  else attn_close(rt);
  return rc;
}

static int serve(void) {
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CUDA, &rt);
  if (rc == ATTN_ENODEV) {
    printf("SKIP: %s\n", attn_last_error(rt));
    attn_close(rt);
    return 77;
  }
  CHECK(rc == ATTN_OK, "attn_open: %s", attn_last_error(rt));
  if (rc != ATTN_OK) return 1;
  char device[256];
  snprintf(device, sizeof device, "%s", rt->device);
  const char *fl = getenv("FAKE_LIBCUDA");
  const int sm90 = fl && strstr(fl, "cc=90");
  attn_problem p;
  memset(&p, 0, sizeof p);
  p.batch = 1, p.heads = 2, p.heads_kv = 2, p.n = 256, p.n_kv = 256, p.d = 64, p.d_v = 64, p.dtype = ATTN_F16;
  p.causal = 1;
  attn_spec w = attn_spec_default_sm90(ATTN_F16, 64, 1);
  if (!sm90) {
    /* another architecture: an impl=wgmma spec's plan is refused before anything runs, with the reason */
    attn_plan *plan = NULL;
    rc = attn_plan_create_spec(rt, &p, &w, 0, "test", &plan);
    CHECK(rc == ATTN_EUNSUPPORTED && !plan && strstr(attn_last_error(rt), "needs arch=sm_90a"), "rc %d: %s", rc,
          attn_last_error(rt));
    attn_plan_destroy(plan);
    attn_close(rt);
    return 0;
  }
  attn_close(rt);
  /* the plans below compile their kernels through NVRTC: without it there is nothing to serve */
  char why[256];
  int major = 0, minor = 0;
  if (attn_nvrtc_version(&major, &minor, why, sizeof why) == ATTN_ENODEV) {
    printf("SKIP: %s\n", why);
    return 77;
  }
  const char *db = getenv("ATTN_DB");
  if (!db || !db[0]) {
    fprintf(stderr, "sm90_tune serve: set ATTN_DB to a scratch path\n");
    return 2;
  }
  unlink(db);
  char text[512];
  /* nothing stored: the mma.sync default */
  rc = plan_for(db, &p, text, sizeof text, NULL, NULL);
  CHECK(rc == ATTN_OK && !strstr(text, "wgmma") && strstr(text, "(default"), "empty database: rc %d: %s", rc, text);
  /* the model's wgmma row, the fastest stored: not served, and describe says why */
  store_row(db, device, &p, &w, "model", 0.001);
  rc = plan_for(db, &p, text, sizeof text, NULL, NULL);
  CHECK(rc == ATTN_OK && !strstr(text, "sm_90a wgmma") && strstr(text, "(default: the stored impl=wgmma row is the model's"),
        "model row: rc %d: %s", rc, text);
  /* beside it a slower model row of mma.sync tiles: the best row the device can serve, and describe says that a
   * wgmma row ranked first */
  attn_spec m = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, ATTN_F16, 64, 1);
  m.bc = m.bc == 32 ? 64 : 32;
  store_row(db, device, &p, &m, "model", 0.0015);
  rc = plan_for(db, &p, text, sizeof text, NULL, NULL);
  CHECK(rc == ATTN_OK && !strstr(text, "sm_90a wgmma") &&
            strstr(text, "(model; unmeasured impl=wgmma row passed over)"),
        "mma model row beside the wgmma one: rc %d: %s", rc, text);
  /* alone, a model row of mma.sync tiles is served as before */
  unlink(db);
  store_row(db, device, &p, &m, "model", 0.001);
  rc = plan_for(db, &p, text, sizeof text, NULL, NULL);
  CHECK(rc == ATTN_OK && !strstr(text, "wgmma") && strstr(text, "(model)"), "mma model row: rc %d: %s", rc, text);
  /* measured on this device: served (measured rows rank before model rows) */
  store_row(db, device, &p, &w, "measured", 0.002);
  attn_plan *plan = NULL;
  rc = plan_for(db, &p, text, sizeof text, &plan, &rt);
  CHECK(rc == ATTN_OK && strstr(text, "sm_90a wgmma") && strstr(text, "(tuned"), "measured row: rc %d: %s", rc, text);
  if (plan) {
    /* the fake driver has no cuTensorMapEncodeTiled: execution is refused with the reason, nothing launched */
    void *buf = NULL;
    if (attn_cuda_alloc(rt, 4 * 256 * 64 * 2, &buf) == ATTN_OK) {
      char *b = buf;
      rc = attn_execute(plan, b, b + 256 * 64 * 2 * 2, b + 256 * 64 * 2 * 2, b);
      CHECK(rc == ATTN_ERUNTIME && strstr(attn_last_error(rt), "cuTensorMapEncodeTiled"), "execute: rc %d: %s", rc,
            attn_last_error(rt));
      attn_cuda_free(rt, buf);
    }
  }
  attn_plan_destroy(plan);
  attn_close(rt);
  /* a backward's plan is deterministic: a stored row of dQ by atomics never serves it, however fast and measured */
  unlink(db);
  char err[256] = "";
  attn_spec det;
  CHECK(attn_spec_backward_cuda(ATTN_F16, 64, 64, 1, "sm_90", &det, err, sizeof err) == ATTN_OK, "%s", err);
  det.bc = det.bc == 32 ? 64 : 32; /* not the default, so that describe's origin tells the row served */
  attn_spec atomic = det;
  atomic.dq = 1;
  store_pass(db, device, &p, &atomic, "measured", 0.001, 1);
  store_pass(db, device, &p, &det, "model", 0.002, 1);
  rc = attn_open(db, ATTN_TARGET_CUDA, &rt);
  CHECK(rc == ATTN_OK, "attn_open: %s", attn_last_error(NULL));
  if (rc == ATTN_OK) {
    plan = NULL;
    rc = attn_plan_create_backward(rt, &p, &plan);
    snprintf(text, sizeof text, "%s", rc == ATTN_OK ? attn_plan_describe(plan) : attn_last_error(rt));
    CHECK(rc == ATTN_OK && !strstr(text, "dq=atomic") && strstr(text, "(model"), "backward: rc %d: %s", rc, text);
    attn_plan_destroy(plan);
    /* a caller that accepts dQ's last bits varying (attn_problem.nondeterministic) is served the faster atomic row */
    attn_problem pn = p;
    pn.nondeterministic = 1;
    plan = NULL;
    rc = attn_plan_create_backward(rt, &pn, &plan);
    snprintf(text, sizeof text, "%s", rc == ATTN_OK ? attn_plan_describe(plan) : attn_last_error(rt));
    CHECK(rc == ATTN_OK && strstr(text, "dq=atomic") && strstr(text, "(tuned)"), "nondeterministic backward: rc %d: "
          "%s", rc, text);
    attn_plan_destroy(plan);
    pn.nondeterministic = 2;
    plan = NULL;
    rc = attn_plan_create_backward(rt, &pn, &plan);
    CHECK(rc == ATTN_EINVAL && plan == NULL && strstr(attn_last_error(rt), "nondeterministic=2"),
          "nondeterministic=2: rc %d: %s", rc, attn_last_error(rt));
    attn_close(rt);
  }
  unlink(db);
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 2 && strcmp(argv[1], "space") == 0) {
    space();
  } else if (argc == 2 && strcmp(argv[1], "serve") == 0) {
    const int r = serve();
    if (r) return r;
  } else {
    fprintf(stderr, "usage: sm90_tune space | sm90_tune serve\n");
    return 2;
  }
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
