/* cuda_sm90: the Hopper flash template (templates/flash_sm90.cu, spec impl=wgmma arch=sm_90a) without a GPU.
 *   cuda_sm90 unit                  its specs: defaults, text round trip, attn_spec_check's refusals (each names what
 *                                   does not fit), the generated source, the launch geometry, the tensor maps'
 *                                   parameters (Q, K, V of a grouped-query problem) and the kernel argument built
 *                                   with them by an encoder
 *   cuda_sm90 model                 the model's H100 predictions (tuner/model_sm90.c) in FlashAttention's setting;
 *                                   unit checks them: bf16 d = 128 n = 8192 at least 550 TFLOP/s, tensor-core bound
 *   cuda_sm90 fake                  the runtime's launch of an impl=wgmma kernel on the fake driver (ATTN_LIBCUDA,
 *                                   FAKE_LIBCUDA=cc=90): it loads (NVRTC for sm_90a), and its execution needs the
 *                                   driver's cuTensorMapEncodeTiled (the fake has none: refused with the reason,
 *                                   nothing launched); on an sm_80 device (cc=80) it is refused at load
 *   cuda_sm90 compile SEL...        NVRTC compiles for sm_90a, each with no spills, shared memory within 227 KiB and
 *                                   no wgmma serialized by ptxas (its C7513/C7514 notes: the overlap of the softmax
 *                                   with P V would be lost); SEL is DTYPE:D[/DV],...[:causal] (the default of each
 *                                   d) or a canonical spec text; and the model's counts in the PTX of the compile:
 *                                   2 (d/16 + Bc/16) wgmma, Bc + 2 ex2 (tuner/model_sm90.c). Exit 77 without NVRTC. */
#include <stdint.h>
#include <string.h>
#include "check.h"
#include "internal.h"
#include "launch.h"
#include "spec_sm90.h"
#include "model_sm90.h"

static int refused(const char *text, int code, const char *needle) {
  attn_spec s;
  char err[512] = "";
  const int rc = attn_spec_parse(text, &s, err, sizeof err);
  CHECK(rc == code && strstr(err, needle), "'%s': rc %d (want %d), '%s' (want '%s')", text, rc, code, err, needle);
  return rc;
}

#define BASE "flash cuda bf16 unroll=0 tile=0 feature=taylor degree=0 rank=0 seed=0 arch=sm_90a impl=wgmma "

/* A fake cuTensorMapEncodeTiled: keeps the parameters it was given and marks the map with the operand's rows. */
static attn_sm90_tmap_params seen[3];
static int encoded, fail_at = -1;
static int fake_encode(void *ctx, attn_cuda_tmap *map, const attn_sm90_tmap_params *prm, char *err, size_t len) {
  (void)ctx;
  if (encoded == fail_at) {
    snprintf(err, len, "CUDA_ERROR_INVALID_VALUE");
    return 1;
  }
  seen[encoded % 3] = *prm;
  map->opaque[0] = prm->global_dim[1];
  encoded++;
  return 0;
}

static void unit(void) {
  static const int ds[] = {64, 128, 256};
  for (int t = 1; t <= 2; t++)
    for (int i = 0; i < 3; i++)
      for (int c = 0; c < 2; c++) {
        attn_spec s = attn_spec_default_sm90((attn_dtype)t, ds[i], c), u;
        char text[512], err[256] = "", src_err[256] = "";
        attn_spec_format(&s, text, sizeof text);
        CHECK(attn_spec_check(&s, err, sizeof err) == ATTN_OK, "default %s: %s", text, err);
        CHECK(strstr(text, " arch=sm_90a ") && strstr(text, " impl=wgmma"), "%s", text);
        CHECK(attn_spec_parse(text, &u, err, sizeof err) == ATTN_OK && memcmp(&s, &u, sizeof s) == 0,
              "round trip of %s: %s", text, err);
        CHECK(s.br == 128 && s.warps == 12 && s.bc == (ds[i] <= 128 ? 128 : 80) && s.stages == 2, "%s", text);
        CHECK(attn_spec_cuda_smem(&s) == ATTN_FLASH_SM90_SMEM(s.d, s.d, s.br, s.bc, s.stages) &&
                  attn_spec_cuda_smem(&s) <= 227 * 1024,
              "%s: %lld bytes", text, attn_spec_cuda_smem(&s));
        CHECK(strcmp(attn_spec_template(&s), "flash_sm90.cu") == 0, "%s", attn_spec_template(&s));
        char *src = attn_spec_source(&s, 0, src_err, sizeof src_err);
        CHECK(src && strstr(src, "#define ATTN_SM90_NPV") && strstr(src, "attn_cuda_sm90_kargs") &&
                  strstr(src, "#line 1 \"templates/flash_sm90.cu\""),
              "source of %s: %s", text, src_err);
        free(src);
        attn_cuda_geom g;
        CHECK(attn_cuda_geometry(&s, 6, 1000, 777, 0, &g, err, sizeof err) == ATTN_OK && g.block == 384 &&
                  g.grid == 6 * 8 && g.smem == attn_spec_cuda_smem(&s),
              "geometry of %s: block %u grid %u: %s", text, g.block, g.grid, err);
      }
  /* what does not fit is named */
  refused("flash cuda bf16 unroll=0 tile=0 feature=taylor degree=0 rank=0 seed=0 arch=sm_90 impl=wgmma d=128 br=128 "
          "bc=128 causal=0 warps=12 stages=2", ATTN_EINVAL, "needs arch=sm_90a");
  refused("flash cuda f32 unroll=0 tile=0 feature=taylor degree=0 rank=0 seed=0 arch=sm_90a impl=wgmma d=64 br=128 "
          "bc=128 causal=0 warps=12 stages=2", ATTN_EUNSUPPORTED, "f16 or bf16");
  refused(BASE "d=60 br=128 bc=128 causal=0 warps=12 stages=2", ATTN_EUNSUPPORTED, "multiples of 8");
  refused(BASE "d=64 dv=260 br=128 bc=64 causal=0 warps=12 stages=1", ATTN_EUNSUPPORTED, "up to 256");
  refused(BASE "d=64 br=128 bc=128 causal=0 warps=12 stages=2 window=1", ATTN_EUNSUPPORTED, "no window");
  refused(BASE "d=64 br=128 bc=128 causal=0 warps=12 stages=2 layout=2", ATTN_EUNSUPPORTED, "dense Q, K and V only");
  refused(BASE "d=64 br=128 bc=128 causal=0 warps=10 stages=2", ATTN_EINVAL, "producer warpgroup");
  refused(BASE "d=64 br=64 bc=128 causal=0 warps=12 stages=2", ATTN_EINVAL, "64 query rows per consumer");
  refused(BASE "d=64 br=128 bc=120 causal=0 warps=12 stages=2", ATTN_EINVAL, "multiple of 16");
  refused(BASE "d=256 br=128 bc=96 causal=0 warps=12 stages=2", ATTN_EUNSUPPORTED, "bytes of shared memory");
  refused(BASE "d=64 br=128 bc=256 causal=0 warps=12 stages=1", ATTN_EUNSUPPORTED, "accumulators per consumer");
  refused(BASE "d=64 br=192 bc=128 causal=0 warps=16 stages=1", ATTN_EUNSUPPORTED, "two consumer warpgroups");
  refused("flash cuda bf16 d=64 br=128 bc=128 causal=0 warps=12 stages=2 arch=sm_90a impl=tma", ATTN_EINVAL,
          "not mma or wgmma");
  refused("flash cpu bf16 d=64 br=64 bc=64 causal=0 impl=wgmma", ATTN_EINVAL, "cuda flash only");
  /* a spec without impl is the mma.sync template, whatever its arch */
  {
    attn_spec s;
    char err[256];
    CHECK(attn_spec_parse("flash cuda bf16 d=64 br=128 bc=64 causal=0 warps=4 stages=2 arch=sm_90a", &s, err,
                          sizeof err) == ATTN_OK && s.impl == ATTN_IMPL_MMA &&
              strcmp(attn_spec_template(&s), "flash.cu") == 0,
          "%s", err);
  }
  /* d_v != d: fitted by stages, then Bc */
  {
    attn_spec s = attn_spec_default_sm90(ATTN_F16, 256, 0);
    s.dv = 128;
    char err[256] = "";
    CHECK(attn_spec_fit_sm90(&s, err, sizeof err) == ATTN_OK && attn_spec_cuda_smem(&s) <= 227 * 1024, "%s", err);
    s = attn_spec_default_sm90(ATTN_F16, 64, 0);
    s.dv = 256;
    CHECK(attn_spec_fit_sm90(&s, err, sizeof err) == ATTN_OK && attn_sm90_accumulators(&s) <= 200 &&
              s.bc < 128,
          "d=64 d_v=256: Bc %d: %s", s.bc, err);
  }
  /* tensor maps: batch 2, 8 query heads over 2 KV heads, n 1000, n_kv 777, d 128 (Q, K) and d_v 64 (V) */
  {
    attn_spec s = attn_spec_default_sm90(ATTN_BF16, 128, 1);
    s.dv = 64;
    char err[256] = "";
    CHECK(attn_spec_fit_sm90(&s, err, sizeof err) == ATTN_OK, "%s", err);
    static uint16_t buf[64];
    attn_cuda_kargs a;
    memset(&a, 0, sizeof a);
    a.q = buf, a.k = buf + 8, a.v = buf + 16, a.o = buf;
    a.batch = 2, a.heads = 8, a.heads_kv = 2, a.n = 1000, a.n_kv = 777, a.scale = 0.125f;
    attn_cuda_sm90_kargs k;
    CHECK(attn_sm90_kargs_make(&s, &a, fake_encode, NULL, &k, err, sizeof err) == ATTN_OK && encoded == 3, "%s", err);
    const unsigned long long dims[3][3] = {{128, 1000, 16}, {128, 777, 4}, {64, 777, 4}};
    const unsigned box1[3] = {(unsigned)s.br, (unsigned)s.bc, (unsigned)s.bc};
    for (int i = 0; i < 3; i++) {
      const attn_sm90_tmap_params *p = &seen[i];
      CHECK(p->data_type == ATTN_SM90_TMAP_BF16 && p->rank == 3 && p->global_address == (i == 0 ? a.q : i == 1 ? a.k : a.v),
            "map %d: type %d rank %u", i, p->data_type, p->rank);
      CHECK(p->global_dim[0] == dims[i][0] && p->global_dim[1] == dims[i][1] && p->global_dim[2] == dims[i][2],
            "map %d dims %llu %llu %llu", i, p->global_dim[0], p->global_dim[1], p->global_dim[2]);
      CHECK(p->global_strides[0] == dims[i][0] * 2 && p->global_strides[1] == dims[i][0] * dims[i][1] * 2,
            "map %d strides %llu %llu", i, p->global_strides[0], p->global_strides[1]);
      CHECK(p->box_dim[0] == 64 && p->box_dim[1] == box1[i] && p->box_dim[2] == 1 && p->element_strides[0] == 1 &&
                p->element_strides[2] == 1,
            "map %d box %u %u %u", i, p->box_dim[0], p->box_dim[1], p->box_dim[2]);
      CHECK(p->swizzle == ATTN_SM90_SWIZZLE_128B && p->interleave == 0 && p->oob_fill == 0, "map %d modes", i);
    }
    CHECK(k.tq.opaque[0] == 1000 && k.tk.opaque[0] == 777 && k.tv.opaque[0] == 777 && k.a.n_kv == 777 &&
              k.a.scale == 0.125f,
          "maps in their places");
    CHECK((uintptr_t)&k.tq % 64 == 0 && (uintptr_t)&k.tk % 64 == 0 && sizeof k.tq == 128, "maps 64-byte aligned");
    /* the encoder's failure and a misaligned pointer are errors that say which operand */
    fail_at = encoded + 1;
    CHECK(attn_sm90_kargs_make(&s, &a, fake_encode, NULL, &k, err, sizeof err) == ATTN_ERUNTIME &&
              strstr(err, "tensor map of k") && strstr(err, "CUDA_ERROR_INVALID_VALUE"),
          "%s", err);
    fail_at = -1;
    a.v = (const char *)buf + 2;
    CHECK(attn_sm90_kargs_make(&s, &a, fake_encode, NULL, &k, err, sizeof err) == ATTN_EINVAL &&
              strstr(err, "v = ") && strstr(err, "16-byte aligned"),
          "%s", err);
  }
}

/* The model: FlashAttention's setting (batch x n = 16k tokens, 16 heads of d = 128, bf16, H100), TFLOP/s counting
 * 4 n^2 d per head (halved causal). */
static double model_tflops(int n, int causal, const char **bound) {
  char err[256] = "";
  const attn_gpu *g = attn_gpu_find("H100", err, sizeof err);
  CHECK(g, "%s", err);
  if (!g) return 0;
  attn_problem p;
  memset(&p, 0, sizeof p);
  p.batch = 16384 / n, p.heads = 16, p.n = n, p.d = 128, p.dtype = ATTN_BF16, p.causal = causal;
  attn_spec s = attn_spec_default_sm90(ATTN_BF16, 128, causal);
  attn_model_result r;
  CHECK(attn_model_sm90_time(g, &p, &s, &r, err, sizeof err) == ATTN_OK, "%s", err);
  *bound = r.bound ? r.bound : "?";
  return 4.0 * n * (double)n * 128 * 16 * p.batch / (causal ? 2 : 1) / (r.time_ms * 1e-3) / 1e12;
}

static void model(int print) {
  const char *bound = "";
  const double t8k = model_tflops(8192, 0, &bound);
  /* issue: at least 550 TFLOP/s, bound by the tensor cores; never past the sustained wgmma rate */
  CHECK(t8k >= 550 && t8k <= 989 * ATTN_SM90_TC_SUSTAINED && strcmp(bound, "tensor_cores") == 0,
        "H100 bf16 d=128 n=8192: %.0f TFLOP/s, %s", t8k, bound);
  for (int causal = 0; causal < 2; causal++) {
    if (print) printf("H100 bf16 d=128%s (wgmma, default tiles):", causal ? " causal" : "");
    double last = 0;
    for (int n = 512; n <= 16384; n *= 2) {
      const double t = model_tflops(n, causal, &bound);
      CHECK(t > 0 && t < 989, "n=%d causal=%d: %.0f", n, causal, t);
      CHECK(t >= last * 0.98, "n=%d causal=%d: %.0f after %.0f (longer sequences amortise more)", n, causal, t, last);
      last = t;
      if (print) printf(" %d: %.0f (%s)", n, t, bound);
    }
    if (print) printf("\n");
  }
  /* a spec that is not impl=wgmma is refused */
  attn_spec mma = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, ATTN_BF16, 128, 0);
  attn_problem p;
  memset(&p, 0, sizeof p);
  p.batch = 1, p.heads = 1, p.n = 128, p.d = 128, p.dtype = ATTN_BF16;
  attn_model_result r;
  char err[256] = "";
  const attn_gpu *g = attn_gpu_find("H100", err, sizeof err);
  CHECK(g && attn_model_sm90_time(g, &p, &mma, &r, err, sizeof err) == ATTN_EINVAL && strstr(err, "impl=wgmma"), "%s",
        err);
}

static int compiled;

/* ptxas's notes when it serializes wgmma (C7513 input registers written, C7514 accumulators read while pending) */
static int serialized(const char *log) { return log && strstr(log, "wgmma.mma_async instructions are serialized"); }

static int count_of(const char *text, const char *word) {
  int c = 0;
  for (const char *p = text; p && (p = strstr(p, word)) != NULL; p += strlen(word)) c++;
  return c;
}

/* The model's counts (tuner/model_sm90.c) in the PTX of the compile: S = QK^T's d16/16 and PV's Bc/16 wgmma, twice
 * each (the peeled first key block and the loop, the last PV after it); ex2: Bc/2 per block and 2 rescale factors
 * in the loop (the first block's are constant 0 and folded away). */
static void check_counts(const attn_spec *s, const char *ptx, const char *text) {
  const int dk = (s->d + 15) / 16, kb = s->bc / 16;
  const int wg = count_of(ptx, "wgmma.mma_async"), ex2 = count_of(ptx, "ex2.approx");
  CHECK(wg == 2 * (dk + kb) && ex2 == s->bc + 2, "%s: %d wgmma (want %d), %d ex2 (want %d)", text, wg, 2 * (dk + kb),
        ex2, s->bc + 2);
}

static void compile_one(const attn_spec *s) {
  char text[512], err[512] = "";
  attn_spec_format(s, text, sizeof text);
  char *src = attn_spec_source(s, 0, err, sizeof err);
  CHECK(src, "%s: %s", text, err);
  if (!src) return;
  char *log = NULL, *ptx = NULL;
  /* one compile: the cubin's ptxas report in the log, and the PTX it came from for the counts */
  int rc = attn_nvrtc_cubin_ptx(src, "attn.cu", s->arch, &ptx, &log);
  if (rc == ATTN_EUNSUPPORTED) { /* this NVRTC keeps no PTX of a cubin compile: the report alone */
    void *cubin = NULL;
    size_t len = 0;
    free(log);
    log = NULL;
    rc = attn_nvrtc_compile(src, "attn.cu", s->arch, &cubin, &len, &log);
    free(cubin);
  } else if (rc == ATTN_OK && ptx) {
    check_counts(s, ptx, text);
  }
  free(ptx);
  compiled++;
  attn_cuda_resources r = {0};
  const int have = rc == ATTN_OK && attn_nvrtc_resources(log, "attn_kernel", &r) == 0;
  CHECK(rc == ATTN_OK, "%s: %s\n%s", text, attn_strerror(rc), log ? log : "");
  CHECK(rc != ATTN_OK || have, "%s: no ptxas report\n%s", text, log ? log : "");
  if (have) {
    CHECK(!r.spill_stores && !r.spill_loads && !r.stack, "%s: spills %ld/%ld stack %ld", text, r.spill_stores,
          r.spill_loads, r.stack);
    CHECK(attn_spec_cuda_smem(s) + r.smem_static <= 227 * 1024, "%s: shared memory", text);
    CHECK(!serialized(log), "%s: ptxas serialized its wgmma\n%s", text, log);
    printf("ok %s: %d registers at launch, %lld bytes smem\n", text, r.registers, attn_spec_cuda_smem(s));
  }
  free(src);
  free(log);
}

/* DTYPE:D[/DV],...[:causal] (defaults, causal 0 unless :causal) or a canonical spec */
static int compile_sel(const char *arg) {
  if (strchr(arg, ' ')) {
    attn_spec s;
    char err[512];
    if (attn_spec_parse(arg, &s, err, sizeof err) != ATTN_OK) {
      fprintf(stderr, "cuda_sm90: %s\n", err);
      return -1;
    }
    compile_one(&s);
    return 0;
  }
  const char *colon = strchr(arg, ':');
  int t = -1;
  char dt[8] = "";
  if (colon && (size_t)(colon - arg) < sizeof dt) {
    memcpy(dt, arg, (size_t)(colon - arg));
    t = attn_dtype_parse(dt);
  }
  if (t != ATTN_F16 && t != ATTN_BF16) {
    fprintf(stderr, "cuda_sm90: bad selection '%s' (DTYPE:D[/DV],...[:causal], DTYPE f16 or bf16)\n", arg);
    return -1;
  }
  const int causal = strstr(colon, ":causal") != NULL;
  for (const char *p = colon + 1; *p && *p != ':';) {
    char *end;
    const long d = strtol(p, &end, 10);
    long dv = d;
    if (*end == '/') dv = strtol(end + 1, &end, 10);
    if (end == p || d < 8 || d > 256 || dv < 8 || dv > 256 || (*end && *end != ',' && *end != ':')) {
      fprintf(stderr, "cuda_sm90: bad d in '%s'\n", arg);
      return -1;
    }
    attn_spec s = attn_spec_default_sm90((attn_dtype)t, (int)d, causal);
    s.dv = dv == d ? 0 : (int)dv;
    char err[256];
    if (attn_spec_fit_sm90(&s, err, sizeof err) != ATTN_OK) {
      CHECK(0, "d=%ld d_v=%ld: %s", d, dv, err);
    } else {
      compile_one(&s);
    }
    p = *end == ',' ? end + 1 : end;
  }
  return 0;
}

/* The runtime's hook (runtime/cuda.c: launch_forward, sm90_encode) on the fake driver. */
static int fake(void) {
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CUDA, &rt);
  if (rc == ATTN_ENODEV) {
    printf("SKIP: %s\n", attn_last_error(rt));
    attn_close(rt);
    return 77;
  }
  CHECK(rc == ATTN_OK, "attn_open: %s", attn_last_error(rt));
  if (rc != ATTN_OK) return 1;
  const char *fl = getenv("FAKE_LIBCUDA");
  const int sm90 = fl && strstr(fl, "cc=90");
  attn_spec s = attn_spec_default_sm90(ATTN_F16, 64, 1);
  attn_cuda_kernel *k = NULL;
  rc = attn_cuda_load(rt, &s, 0, &k);
  if (rc == ATTN_ECOMPILE && strstr(attn_last_error(rt), "NVRTC")) {
    printf("SKIP: %s\n", attn_last_error(rt));
    attn_close(rt);
    return 77;
  }
  if (!sm90) {
    /* another architecture: refused before anything is compiled, with the reason */
    CHECK(rc == ATTN_EUNSUPPORTED && strstr(attn_last_error(rt), "needs arch=sm_90a"), "rc %d: %s", rc,
          attn_last_error(rt));
    attn_cuda_unload(k);
  } else {
    CHECK(rc == ATTN_OK && strcmp(attn_cuda_kernel_spec(k)->arch, "sm_90a") == 0, "load: rc %d: %s", rc,
          attn_last_error(rt));
    attn_problem p;
    memset(&p, 0, sizeof p);
    p.batch = 1, p.heads = 2, p.heads_kv = 1, p.n = 100, p.n_kv = 77, p.d = 64, p.d_v = 64, p.dtype = ATTN_F16;
    p.causal = 1, p.scale = 0.125f;
    void *q = NULL, *kk = NULL, *v = NULL, *o = NULL;
    CHECK(attn_cuda_alloc(rt, 2 * 100 * 64 * 2, &q) == ATTN_OK && attn_cuda_alloc(rt, 77 * 64 * 2, &kk) == ATTN_OK &&
              attn_cuda_alloc(rt, 77 * 64 * 2, &v) == ATTN_OK && attn_cuda_alloc(rt, 2 * 100 * 64 * 2, &o) == ATTN_OK,
          "device memory: %s", attn_last_error(rt));
    if (k && q && kk && v && o) {
      rc = attn_cuda_run(rt, k, &p, q, kk, v, o, NULL, NULL);
      CHECK(rc == ATTN_ERUNTIME && strstr(attn_last_error(rt), "tensor map of q") &&
                strstr(attn_last_error(rt), "no cuTensorMapEncodeTiled"),
            "run: rc %d: %s", rc, attn_last_error(rt));
      rc = attn_cuda_launch(rt, k, &p, NULL, q, kk, v, o);
      CHECK(rc == ATTN_ERUNTIME && strstr(attn_last_error(rt), "no cuTensorMapEncodeTiled"), "launch: rc %d: %s", rc,
            attn_last_error(rt));
    }
    attn_cuda_free(rt, q), attn_cuda_free(rt, kk), attn_cuda_free(rt, v), attn_cuda_free(rt, o);
    attn_cuda_unload(k);
  }
  attn_close(rt);
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc >= 2 && strcmp(argv[1], "unit") == 0) {
    unit();
    model(0);
  } else if (argc >= 2 && strcmp(argv[1], "fake") == 0) {
    const int r = fake();
    if (r) return r;
  } else if (argc >= 2 && strcmp(argv[1], "model") == 0) {
    model(1);
  } else if (argc >= 3 && strcmp(argv[1], "compile") == 0) {
    int maj = 0, min = 0;
    char why[512];
    if (attn_nvrtc_version(&maj, &min, why, sizeof why) != ATTN_OK) {
      printf("SKIP: %s\n", why);
      return 77;
    }
    printf("NVRTC %d.%d\n", maj, min);
    for (int i = 2; i < argc; i++)
      if (compile_sel(argv[i])) return 2;
    CHECK(compiled > 0, "nothing compiled");
  } else {
    fprintf(stderr, "usage: cuda_sm90 unit | cuda_sm90 fake | cuda_sm90 model | cuda_sm90 compile DTYPE:D[/DV],...[:causal] | \"SPEC\" ...\n");
    return 2;
  }
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
