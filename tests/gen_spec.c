/* gen_spec: every default spec validates, its canonical text parses back to the same spec (split-K specs and d_v != d
 * too, with old keys unchanged), on CUDA for every d and a spread of d_v once attn_spec_fit has sized it (within an
 * A100's shared memory), bad specs are rejected with a reason naming the limit, and instantiation carries the spec's
 * constants and the template text. */
#include "check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spec.h"


static void round_trip(const attn_spec *s) {
  char text[512], again[512], err[256] = "";
  attn_spec t;
  attn_spec_format(s, text, sizeof text);
  int rc = attn_spec_parse(text, &t, err, sizeof err);
  CHECK(rc == ATTN_OK, "parse '%s': %s", text, err);
  if (rc != ATTN_OK) return;
  attn_spec_format(&t, again, sizeof again);
  CHECK(strcmp(text, again) == 0, "'%s' came back as '%s'", text, again);
}

static void expect_bad(const char *text, int code, const char *words) {
  attn_spec t;
  char err[256] = "";
  int rc = attn_spec_parse(text, &t, err, sizeof err);
  CHECK(rc == code, "'%s' gave %d, expected %d (%s)", text, rc, code, err);
  CHECK(strstr(err, words) != NULL, "'%s': message '%s' lacks '%s'", text, err, words);
}

int main(void) {
  int checked = 0;
  for (int t = ATTN_TARGET_CPU; t <= ATTN_TARGET_CUDA; t++)
    for (int a = ATTN_ALGO_FLASH; a <= ATTN_ALGO_LOWRANK; a++)
      for (int dt = ATTN_F32; dt <= ATTN_BF16; dt++)
        for (int d = 1; d <= ATTN_MAX_D; d++)
          for (int c = 0; c <= 1; c++) {
            CHECK(attn_d_supported((attn_target)t, d), "d=%d not supported on %s", d, attn_target_name(t));
            attn_spec s = attn_spec_default((attn_algo)a, (attn_target)t, (attn_dtype)dt, d, c);
            char err[256] = "";
            CHECK(attn_spec_check(&s, err, sizeof err) == ATTN_OK, "default %s/%s/%s d=%d: %s", attn_algo_name(s.algo),
                  attn_target_name(s.target), attn_dtype_name(s.dtype), d, err);
            if (t == ATTN_TARGET_CUDA)
              CHECK(attn_spec_cuda_smem(&s) <= 163 * 1024, "default %s/%s d=%d: %lld bytes of shared memory",
                    attn_algo_name(s.algo), attn_dtype_name(s.dtype), d, attn_spec_cuda_smem(&s));
            if (d % 8 == 0 || d < 4) round_trip(&s);
            checked++;
          }
  CHECK(checked > 10000, "only %d default specs checked", checked);
  CHECK(!attn_d_supported(ATTN_TARGET_CPU, 0) && !attn_d_supported(ATTN_TARGET_CUDA, ATTN_MAX_D + 1), "d range");

  /* d_v: the default spec with dv set, then attn_spec_fit (as the runtime does); CUDA defaults stay within an A100's
   * shared memory for every (d, d_v); " dv=N" is in the text only when d_v != d */
  static const int dvs[] = {1, 3, 16, 37, 64, 100, 128, 192, 256, 257, 320, 448, 512, 576};
  int dv_checked = 0;
  for (int t = ATTN_TARGET_CPU; t <= ATTN_TARGET_CUDA; t++)
    for (int a = ATTN_ALGO_FLASH; a <= ATTN_ALGO_LOWRANK; a++)
      for (int dt = ATTN_F32; dt <= ATTN_BF16; dt++)
        for (int d = 1; d <= ATTN_MAX_D; d += (d < 16 ? 1 : 7))
          for (size_t i = 0; i < sizeof dvs / sizeof dvs[0]; i++) {
            attn_spec s = attn_spec_default((attn_algo)a, (attn_target)t, (attn_dtype)dt, d, (int)(i & 1));
            s.dv = dvs[i] != d ? dvs[i] : 0;
            char err[256] = "", text[512];
            CHECK(attn_spec_fit(&s, err, sizeof err) == ATTN_OK, "fit %s/%s/%s d=%d d_v=%d: %s", attn_algo_name(s.algo),
                  attn_target_name(s.target), attn_dtype_name(s.dtype), d, dvs[i], err);
            CHECK(attn_spec_check(&s, err, sizeof err) == ATTN_OK, "%s/%s/%s d=%d d_v=%d: %s", attn_algo_name(s.algo),
                  attn_target_name(s.target), attn_dtype_name(s.dtype), d, dvs[i], err);
            if (t == ATTN_TARGET_CUDA)
              CHECK(attn_spec_cuda_smem(&s) <= 163 * 1024, "%s/%s d=%d d_v=%d: %lld bytes of shared memory",
                    attn_algo_name(s.algo), attn_dtype_name(s.dtype), d, dvs[i], attn_spec_cuda_smem(&s));
            attn_spec_format(&s, text, sizeof text);
            char want[32];
            snprintf(want, sizeof want, " dv=%d", dvs[i]);
            CHECK(dvs[i] != d ? strstr(text, want) != NULL : strstr(text, " dv=") == NULL,
                  "d=%d d_v=%d formats as '%s'", d, dvs[i], text);
            if (d < 16 || d % 64 == 1) round_trip(&s);
            dv_checked++;
          }
  CHECK(dv_checked > 10000, "only %d (d, d_v) specs checked", dv_checked);
  {
    /* dv = d is spelled without dv; a key without dv is d_v = d */
    attn_spec a1, a2;
    char e1[256] = "", e2[256] = "";
    CHECK(attn_spec_parse("flash cuda f16 d=192 br=128 bc=48 causal=0 unroll=0 warps=8 stages=1 arch=sm_80 tile=0 "
                          "feature=taylor degree=0 rank=0 seed=0 dv=192", &a1, e1, sizeof e1) == ATTN_OK && a1.dv == 0,
          "dv=d: %s", e1);
    CHECK(attn_spec_parse("flash cuda f16 d=192 br=128 bc=48 causal=0 unroll=0 warps=8 stages=1 arch=sm_80 tile=0 "
                          "feature=taylor degree=0 rank=0 seed=0 dv=128",
                          &a2, e2, sizeof e2) == ATTN_OK &&
              a2.dv == 128,
          "dv=128: %s", e2);
  }

  expect_bad("flash cpu f32 d=577 br=64 bc=64 causal=0", ATTN_EUNSUPPORTED, "d=577 is not supported on cpu");
  expect_bad("flash cuda f16 d=0 br=64 bc=64 warps=4 stages=1 arch=sm_80", ATTN_EUNSUPPORTED,
             "d=0 is not supported on cuda");
  expect_bad("flash cpu f32 d=64 dv=577 br=64 bc=64", ATTN_EUNSUPPORTED, "dv=577 is not supported on cpu");
  {
    attn_spec h;
    char e[256] = "";
    CHECK(attn_spec_parse("flash cpu f16 d=12 dv=7 br=64 bc=64", &h, e, sizeof e) == ATTN_OK && h.dv == 7 &&
              h.dtype == ATTN_F16,
          "cpu f16 d=12 dv=7: %s", e);
    CHECK(attn_spec_parse("flash cuda bf16 d=59 dv=37 br=64 bc=64 warps=4 stages=2 arch=sm_80", &h, e, sizeof e) ==
              ATTN_OK,
          "cuda bf16 d=59 dv=37: %s", e);
  }
  /* the limits that remain on CUDA, each named */
  expect_bad("smallcache cuda f32 d=64 br=144 bc=64 warps=4 stages=1 arch=sm_80 tile=144", ATTN_EUNSUPPORTED,
             "bytes of shared memory per block, more than the 232448 (227 KiB) of any GPU");
  expect_bad("lowrank cuda f32 d=64 br=64 bc=16 warps=4 stages=1 arch=sm_80 feature=taylor degree=2",
             ATTN_EUNSUPPORTED, "or a smaller rank");
  expect_bad("flash cuda f16 d=256 br=256 bc=64 warps=4 stages=1 arch=sm_80", ATTN_EUNSUPPORTED,
             "fp32 accumulators per thread, more than the 255 registers");
  expect_bad("flash cuda f16 d=64 dv=512 br=64 bc=64 warps=3 stages=1 arch=sm_80", ATTN_EINVAL,
             "is split over 2 warps");
  expect_bad("flash cuda f16 d=64 dv=512 br=48 bc=64 warps=4 stages=1 arch=sm_80", ATTN_EINVAL,
             "Br=48 must be a multiple of 16 rows per warp x 2 warps");
  expect_bad("flash cpu f32 d=64 br=0 bc=64", ATTN_EINVAL, "Br=0");
  expect_bad("warp cpu f32 d=64 br=64 bc=64", ATTN_EINVAL, "unknown algorithm 'warp'");
  expect_bad("flash cpu f32 d=64 br=64 bc=64 colour=3", ATTN_EINVAL, "unknown key 'colour'");
  expect_bad("flash cpu f32 d=x", ATTN_EINVAL, "d=x is not an integer");
  expect_bad("flash cpu", ATTN_EINVAL, "expected");
  expect_bad("flash cuda f16 d=64 br=64 bc=64 warps=4 stages=2 arch=gfx90", ATTN_EINVAL, "arch 'gfx90'");
  expect_bad("lowrank cpu f32 d=64 br=64 bc=64 feature=taylor degree=3", ATTN_EINVAL, "must be even");
  expect_bad("lowrank cpu f32 d=256 br=64 bc=64 feature=taylor degree=4", ATTN_EUNSUPPORTED, "random features");

  /* split: written only when > 1 (old keys unchanged), parsed back, validated */
  static const int splits[] = {0, 1, 2, 3, 8, 64};
  for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++)
    for (int c = 0; c <= 1; c++) {
      attn_spec sp = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, ATTN_F32, 64, c);
      sp.split = splits[i];
      char text[512], want[32] = "", sum[256], err2[256] = "";
      attn_spec_format(&sp, text, sizeof text);
      if (sp.split > 1) snprintf(want, sizeof want, " split=%d", sp.split);
      const char *at = sp.split > 1 ? strstr(text, want) : NULL;
      CHECK(sp.split > 1 ? at && at[strlen(want)] == '\0' : !strstr(text, "split"), "split=%d formats as '%s'",
            sp.split, text);
      round_trip(&sp);
      attn_spec back;
      CHECK(attn_spec_parse(text, &back, err2, sizeof err2) == ATTN_OK && back.split == (sp.split > 1 ? sp.split : 0),
            "'%s' parsed to split=%d (%s)", text, back.split, err2);
      attn_spec_summary(&sp, sum, sizeof sum);
      CHECK(sp.split > 1 ? strstr(sum, want) != NULL : !strstr(sum, "split"), "summary '%s' for split=%d", sum,
            sp.split);
    }
  {
    /* a key stored before split existed reads as split 0 */
    attn_spec old;
    char err2[256] = "";
    CHECK(attn_spec_parse("flash cpu f32 d=64 br=64 bc=128 causal=0 unroll=0 warps=0 stages=0 arch=- tile=0 "
                          "feature=taylor degree=0 rank=0 seed=0",
                          &old, err2, sizeof err2) == ATTN_OK && old.split == 0,
          "old key: split=%d (%s)", old.split, err2);
    CHECK(attn_spec_parse("flash cpu f32 d=64 br=64 bc=128 split=1", &old, err2, sizeof err2) == ATTN_OK,
          "split=1: %s", err2);
  }
  expect_bad("flash cpu f32 d=64 br=64 bc=128 split=65", ATTN_EINVAL, "split=65 must be in 0..64");
  expect_bad("flash cpu f32 d=64 br=64 bc=128 split=-1", ATTN_EINVAL, "split=-1 must be in 0..64");
  expect_bad("flash cpu f32 d=64 br=64 bc=128 split=two", ATTN_EINVAL, "split=two is not an integer");
  expect_bad("flash cuda f16 d=64 br=64 bc=64 window=1 warps=4 stages=2 arch=sm_80 split=2", ATTN_EUNSUPPORTED,
             "split=2 on cuda is for dense flash without window");
  { /* causal split is a causal n = 1 plan's (its kernel built without causal): the spec itself is valid */
    attn_spec cs;
    char e[256];
    CHECK(attn_spec_parse("flash cuda f16 d=64 br=64 bc=64 causal=1 warps=4 stages=2 arch=sm_80 split=2", &cs, e,
                          sizeof e) == ATTN_OK &&
              cs.split == 2 && cs.causal == 1,
          "causal split=2 spec refused: %s", e);
  }
  expect_bad("flash cuda f16 d=64 br=64 bc=64 warps=4 stages=2 arch=sm_80 split=1", ATTN_EINVAL, "cuda specs keep");
  expect_bad("smallcache cpu f32 d=64 br=64 bc=64 tile=32 split=4", ATTN_EINVAL, "not smallcache");

  CHECK(attn_taylor_rank(64, 2, 1L << 16) == 2145, "C(66,2) = %ld", attn_taylor_rank(64, 2, 1L << 16));
  CHECK(attn_taylor_rank(16, 4, 1L << 16) == 4845, "C(20,4) = %ld", attn_taylor_rank(16, 4, 1L << 16));

  /* Instantiation: the constants and the template's own text are in the source; counting adds its define. */
  attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, ATTN_F32, 80, 1);
  char err[256] = "";
  const char *tmpl = attn_template_text("flash.c");
  if (tmpl) {
    char *src = attn_spec_source(&s, 0, err, sizeof err);
    char *counted = attn_spec_source(&s, 1, err, sizeof err);
    CHECK(src && counted, "instantiation failed: %s", err);
    if (src && counted) {
      CHECK(strncmp(src, "/* generated by attntune ", 25) == 0, "first line: %.60s", src);
      CHECK(strstr(src, "#define ATTN_D 80\n") && strstr(src, "#define ATTN_CAUSAL 1\n"), "defines missing");
      CHECK(strstr(src, "ATTN_KERNEL_ABI_VERSION") != NULL, "kernel ABI not inlined");
      CHECK(strstr(src, tmpl) != NULL, "template text not included");
      CHECK(!strstr(src, "ATTN_COUNT_IO 1") && strstr(counted, "#define ATTN_COUNT_IO 1\n"), "count define");
      const char *body = strstr(src, "#line 1 \"templates/flash.c\""), *def = strstr(src, "#define ATTN_SPLIT");
      CHECK(body && (!def || def > body), "a spec without split defines ATTN_SPLIT before the template");
      char h1[17], h2[17];
      attn_hash_hex(src, strlen(src), h1);
      attn_hash_hex(counted, strlen(counted), h2);
      CHECK(strlen(h1) == 16 && strcmp(h1, h2) != 0, "hashes %s %s", h1, h2);
    }
    free(src);
    free(counted);
  }
  if (tmpl) {
    attn_spec sp = s;
    sp.split = 4;
    char *src = attn_spec_source(&sp, 0, err, sizeof err);
    CHECK(src && strstr(src, "#define ATTN_SPLIT 4\n"), "split=4 source lacks its define: %s", src ? "" : err);
    free(src);
  }
  attn_spec bad = s;
  bad.d = 0;
  CHECK(attn_spec_source(&bad, 0, err, sizeof err) == NULL && strstr(err, "d=0"), "bad spec instantiated: %s", err);

  char h[17];
  attn_hash_hex("", 0, h);
  CHECK(strcmp(h, "cbf29ce484222325") == 0, "FNV-1a of empty is %s", h);
  if (failures) fprintf(stderr, "gen_spec: %d failures\n", failures);
  else printf("gen_spec: %d default specs round-trip; bad specs rejected\n", checked);
  return failures ? 1 : 0;
}
