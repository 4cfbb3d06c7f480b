/* cuda_compile: the CUDA templates through NVRTC to cubin, no GPU needed.
 *   cuda_compile defaults ARCH [ALGO [all | DTYPE:D,D,...]...]
 *                                       the default configuration of every (algorithm, d, dtype) compiles with zero
 *                                       errors, no local-memory spills, and shared memory within the arch's per-block
 *                                       limit, causal alternating with d and dtype (`all`: both causal values for
 *                                       each; `f16:16,112,256`: only those d in that dtype, so a slow template's CI
 *                                       share can be a spread of d split over several tests); the counting builds of
 *                                       d = 64, 128, 192, 256 compile too
 *   cuda_compile space ARCH STRIDE      every STRIDE-th configuration of the tuner's CUDA space (flash, smallcache,
 *                                       lowrank) for a spread of d, dtypes and causal, with the same checks as the
 *                                       defaults; STRIDE 1 is the whole space
 *   cuda_compile dims ARCH ALGO D[/DV],...
 *                                       the default configuration (attn_spec_default, its d_v, attn_spec_fit) of
 *                                       each (d, d_v) listed (DV absent: d_v = d) in every dtype, with the same
 *                                       checks; causal alternating
 *   cuda_compile ptx ARCH               the PTX the interpreter tests run is the PTX of the cubin compile, byte for
 *                                       byte, for the default of each algorithm at one d
 *   cuda_compile spec "SPEC" [count]    one spec (canonical text), its resource report and, on failure, the log
 * A kernel must not spill; its counting build may (a few registers for the counters). A run that compiled nothing
 * (a selection that matches no kernel) fails. Exit 77 (CTest: skipped) when NVRTC cannot be loaded, with the
 * reason. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "launch.h"
#include "space.h"

static int failures, compiled;

/* Per-block shared memory a kernel may opt into (A100: 163 KiB, H100: 227 KiB). */
static long long smem_limit(const char *arch) { return strncmp(arch, "sm_8", 4) == 0 ? 163 * 1024 : 227 * 1024; }

/* Compiles s (with count_io, its counting build); prints a line; returns 0 when it is clean: it compiles, fits the
 * arch's shared memory and, unless it is a counting build, does not spill. Every mode checks through here. */
static int check(const attn_spec *s, int count_io, int verbose) {
  char err[512], label[400];
  attn_spec_format(s, label, sizeof label);
  char *src = attn_spec_source(s, count_io, err, sizeof err);
  if (!src) {
    printf("FAIL %s: %s\n", label, err);
    failures++;
    return -1;
  }
  void *cubin = NULL;
  size_t len = 0;
  char *log = NULL;
  int rc = attn_nvrtc_compile(src, "attn.cu", s->arch, &cubin, &len, &log);
  compiled++;
  int bad = 0;
  if (rc != ATTN_OK) {
    printf("FAIL %s%s: %s\n%s\n", label, count_io ? " (counting)" : "", attn_strerror(rc), log ? log : "");
    bad = 1;
  } else {
    attn_cuda_resources r;
    if (attn_nvrtc_resources(log, "attn_kernel", &r) != 0) {
      printf("FAIL %s: no ptxas report for attn_kernel in the log\n%s\n", label, log ? log : "");
      bad = 1;
    } else {
      long long smem = attn_spec_cuda_smem(s) + r.smem_static; /* with the spec's d_v */
      if (!count_io && (r.spill_stores || r.spill_loads || r.stack)) {
        printf("FAIL %s%s: spills (%ld bytes stores, %ld loads, %ld stack)\n", label, count_io ? " (counting)" : "",
               r.spill_stores, r.spill_loads, r.stack);
        bad = 1;
      }
      if (smem > smem_limit(s->arch)) {
        printf("FAIL %s: %lld bytes of shared memory, the %s limit is %lld\n", label, smem, s->arch,
               smem_limit(s->arch));
        bad = 1;
      }
      if (verbose || bad)
        printf("%s %s%s: %d registers, %lld bytes smem (%ld static), spills %ld/%ld, stack %ld, cubin %zu bytes\n",
               bad ? "FAIL" : "ok", label, count_io ? " (counting)" : "", r.registers, smem, r.smem_static,
               r.spill_stores, r.spill_loads, r.stack, len);
      if (verbose > 1 && log) printf("%s\n", log);
    }
  }
  free(src);
  free(cubin);
  free(log);
  if (bad) failures++;
  return bad ? -1 : 0;
}

static int nvrtc_or_skip(void) {
  int maj = 0, min = 0;
  char why[512];
  if (attn_nvrtc_version(&maj, &min, why, sizeof why) != ATTN_OK) {
    printf("SKIP: %s\n", why);
    return 77;
  }
  printf("NVRTC %d.%d\n", maj, min);
  return 0;
}

/* The (dtype, d) pairs a defaults run covers: every one, or those named by DTYPE:D,D,... arguments. */
static int want[3][257], want_some;

static int pick(const char *arg) {
  static const char *names[] = {"f16", "bf16", "f32"};
  const char *colon = strchr(arg, ':');
  for (int t = 0; colon && t < 3; t++) {
    if (strlen(names[t]) != (size_t)(colon - arg) || strncmp(arg, names[t], (size_t)(colon - arg)) != 0) continue;
    for (const char *p = colon + 1; *p;) {
      char *end;
      long d = strtol(p, &end, 10);
      if (end == p || d < 16 || d > 256 || d % 16 || (*end && *end != ',')) break;
      want[t][d] = want_some = 1;
      p = *end ? end + 1 : end;
      if (!*p) return 0;
    }
  }
  fprintf(stderr, "cuda_compile: bad selection '%s' (expected DTYPE:D,D,... with DTYPE f16, bf16 or f32 and D a "
                  "multiple of 16 in 16..256)\n", arg);
  return -1;
}

/* all = 0: each (d, dtype) once, causal alternating so both values occur for every d and every dtype (CI);
 * all = 1: both causal values everywhere (nightly). */
static int defaults(const char *arch, const char *only, int all) {
  static const attn_algo algos[] = {ATTN_ALGO_FLASH, ATTN_ALGO_SMALLCACHE, ATTN_ALGO_LOWRANK};
  static const attn_dtype dtypes[] = {ATTN_F16, ATTN_BF16, ATTN_F32};
  for (int a = 0; a < 3; a++) {
    if (only && strcmp(only, attn_algo_name(algos[a])) != 0) continue;
    for (int d = 16; d <= 256; d += 16)
      for (int t = 0; t < 3; t++)
        for (int causal = 0; causal < 2; causal++) {
          if (want_some && !want[t][d]) continue;
          if (!all && causal != (d / 16 + t) % 2) continue;
          attn_spec s = attn_spec_default(algos[a], ATTN_TARGET_CUDA, dtypes[t], d, causal);
          snprintf(s.arch, sizeof s.arch, "%s", arch);
          check(&s, 0, 1);
          /* the counting build must compile as well */
          if (d % 64 == 0 && (causal == 1 || !all)) check(&s, 1, 0);
        }
  }
  return 0;
}

/* dims mode: the defaults of any d and d_v in 1..576 (padded tails, d_v != d), as the runtime sizes them. */
static int dims(const char *arch, const char *algo, const char *list) {
  const int a = attn_algo_parse(algo);
  if (a <= 0) {
    fprintf(stderr, "cuda_compile: unknown algorithm %s\n", algo);
    return 2;
  }
  int k = 0;
  for (const char *p = list; *p; k++) {
    char *end;
    const long d = strtol(p, &end, 10);
    long dv = d;
    if (*end == '/') dv = strtol(end + 1, &end, 10);
    if (d < 1 || d > ATTN_MAX_D || dv < 1 || dv > ATTN_MAX_D || (*end && *end != ',')) {
      fprintf(stderr, "cuda_compile: bad dims '%s' (expected D[/DV],... in 1..%d)\n", list, ATTN_MAX_D);
      return 2;
    }
    for (int t = ATTN_F32; t <= ATTN_BF16; t++) {
      attn_spec s = attn_spec_default((attn_algo)a, ATTN_TARGET_CUDA, (attn_dtype)t, (int)d, (k + t) % 2);
      s.dv = dv != d ? (int)dv : 0;
      char err[256];
      if (attn_spec_fit(&s, err, sizeof err) != ATTN_OK) {
        printf("FAIL d=%ld d_v=%ld: %s\n", d, dv, err);
        failures++;
        continue;
      }
      snprintf(s.arch, sizeof s.arch, "%s", arch);
      check(&s, 0, 1);
    }
    p = *end ? end + 1 : end;
  }
  return 0;
}

static int space(const char *arch, int stride) {
  char err[512];
  const attn_gpu *g = attn_gpu_find(strncmp(arch, "sm_8", 4) == 0 ? "A100" : "H100", err, sizeof err);
  if (!g) {
    printf("FAIL: %s\n", err);
    return 1;
  }
  static const int ds[] = {16, 64, 128, 256};
  static const attn_dtype dtypes[] = {ATTN_F16, ATTN_BF16, ATTN_F32};
  long seen = 0;
  for (int i = 0; i < 4; i++)
    for (int t = 0; t < 3; t++)
      for (int causal = 0; causal < 2; causal++) {
        attn_space_opts o;
        memset(&o, 0, sizeof o);
        o.target = ATTN_TARGET_CUDA;
        o.dtype = dtypes[t];
        o.d = ds[i];
        o.causal = causal;
        o.algos = ATTN_ALGO_BIT(ATTN_ALGO_FLASH) | ATTN_ALGO_BIT(ATTN_ALGO_SMALLCACHE) | ATTN_ALGO_BIT(ATTN_ALGO_LOWRANK);
        o.tolerance = 0.1;
        o.fast_mem_bytes = g->smem_per_block_kb * 1024.0;
        o.gpu = g;
        snprintf(o.arch, sizeof o.arch, "%s", arch);
        attn_space sp;
        if (attn_space_build(&o, &sp, err, sizeof err) != ATTN_OK) {
          printf("FAIL d=%d: %s\n", ds[i], err);
          failures++;
          continue;
        }
        for (int c = 0; c < sp.count; c++) {
          /* a sample leaves the Hopper template's points to its own compile tests (tests/cuda_sm90.cmake) */
          if (stride > 1 && sp.cfg[c].impl == ATTN_IMPL_WGMMA) continue;
          if (seen++ % stride == 0) check(&sp.cfg[c], 0, 1);
        }
        attn_space_free(&sp);
      }
  return 0;
}

/* ptx mode: the PTX the tests' interpreter runs (attn_nvrtc_ptx, the virtual architecture) must be, byte for byte,
 * the PTX of the cubin compile users' kernels come from (attn_nvrtc_cubin_ptx): the default spec of each algorithm
 * at one d, in a dtype that turns with the arch (sm_80 and sm_90 together cover two of each algorithm's three). */
static int ptx_skipped;
static int same_ptx(const char *arch) {
  static const attn_algo algos[] = {ATTN_ALGO_FLASH, ATTN_ALGO_SMALLCACHE, ATTN_ALGO_LOWRANK};
  static const attn_dtype dtypes[] = {ATTN_F16, ATTN_BF16, ATTN_F32};
  const int turn = strcmp(arch, "sm_80") != 0;
  for (int a = 0; a < 3; a++) {
    const int t = (a + turn) % 3;
    const int d = algos[a] == ATTN_ALGO_LOWRANK ? 32 : 64 + 32 * t;
    attn_spec s = attn_spec_default(algos[a], ATTN_TARGET_CUDA, dtypes[t], d, (a + t) % 2);
    snprintf(s.arch, sizeof s.arch, "%s", arch);
    char err[512], label[256];
    attn_spec_format(&s, label, sizeof label);
    char *src = attn_spec_source(&s, 0, err, sizeof err);
    char *p1 = NULL, *p2 = NULL, *l1 = NULL, *l2 = NULL;
    const int r1 = src ? attn_nvrtc_ptx(src, "attn_kernel.cu", arch, &p1, &l1) : ATTN_EINVAL;
    const int r2 = src ? attn_nvrtc_cubin_ptx(src, "attn_kernel.cu", arch, &p2, &l2) : ATTN_EINVAL;
    if (r2 == ATTN_EUNSUPPORTED) {
      printf("SKIP %s: this NVRTC keeps no PTX after a cubin compile\n", label);
      ptx_skipped++;
    } else if (r1 != ATTN_OK || r2 != ATTN_OK) {
      printf("FAIL %s: %s\n", label, !src ? err : r1 != ATTN_OK ? (l1 ? l1 : "ptx") : (l2 ? l2 : "cubin"));
      failures++;
    } else if (strcmp(p1, p2) != 0) {
      printf("FAIL %s: the PTX of the cubin compile differs from the PTX the interpreter runs\n", label);
      failures++;
    } else {
      compiled++;
      printf("ok   %s: the same %zu bytes of PTX\n", label, strlen(p1));
    }
    free(src);
    free(p1);
    free(p2);
    free(l1);
    free(l2);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: cuda_compile defaults ARCH [ALGO [all | DTYPE:D,D,...]...] | dims ARCH ALGO D[/DV],... | "
                    "space ARCH STRIDE | ptx ARCH | spec \"SPEC\" [count] [log]\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0); /* one line per kernel as it compiles: progress, and a log if CTest times out */
  int skip = nvrtc_or_skip();
  if (skip) return skip;
  if (strcmp(argv[1], "defaults") == 0) {
    int all = 0;
    for (int i = 4; i < argc; i++) {
      if (strcmp(argv[i], "all") == 0)
        all = 1;
      else if (pick(argv[i]) != 0)
        return 2;
    }
    defaults(argv[2], argc > 3 ? argv[3] : NULL, all);
  } else if (strcmp(argv[1], "dims") == 0) {
    if (argc != 5) {
      fprintf(stderr, "cuda_compile: dims ARCH ALGO D[/DV],...\n");
      return 2;
    }
    if (dims(argv[2], argv[3], argv[4])) return 2;
  } else if (strcmp(argv[1], "space") == 0) {
    char *end = NULL;
    long stride = argc > 3 ? strtol(argv[3], &end, 10) : 1;
    if (argc > 4 || (end && (end == argv[3] || *end)) || stride < 1 || stride > 1000000) {
      fprintf(stderr, "cuda_compile: space ARCH [STRIDE]: STRIDE must be a positive integer\n");
      return 2;
    }
    if (space(argv[2], (int)stride)) return 1;
  } else if (strcmp(argv[1], "ptx") == 0) {
    same_ptx(argv[2]);
  } else if (strcmp(argv[1], "spec") == 0) {
    attn_spec s;
    char err[512];
    if (attn_spec_parse(argv[2], &s, err, sizeof err) != ATTN_OK) {
      fprintf(stderr, "%s\n", err);
      return 2;
    }
    int count = argc > 3 && strcmp(argv[3], "count") == 0;
    int verbose = argc > 4 || (argc > 3 && strcmp(argv[3], "log") == 0) ? 2 : 1;
    check(&s, count, verbose);
  } else {
    fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
  }
  printf("%d compiled, %d failed\n", compiled, failures);
  if (compiled == 0 && ptx_skipped && !failures) return 77; /* the check cannot be made with this NVRTC */
  if (compiled == 0) {
    printf("FAIL: nothing was compiled\n");
    return 1;
  }
  return failures ? 1 : 0;
}
