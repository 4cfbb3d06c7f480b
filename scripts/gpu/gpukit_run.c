/* gpukit_run: the one-plan driver scripts/gpu/validate.sh runs on a GPU (alone, under compute-sanitizer, under ncu).
 *   gpukit_run nvrtc                         NVRTC's version (no device needed; exit 1 without NVRTC)
 *   gpukit_run info                          the device attn_open(CUDA) finds: name, the spec table's name for it
 *                                            (tuner/gpus.json; cuda:NAME when it has none), arch, SMs, shared memory, L2
 *   gpukit_run run ALGO DTYPE N D CAUSAL [HEADS [BATCH]] [--nocheck]
 *                                            the algorithm's default spec for this device, once, on random inputs;
 *                                            the relative error against fp64 (skipped with --nocheck) and the closed
 *                                            form of its slow-memory entries (tuner/io_theory.c), as key=value words
 * Exit: 0 ok, 1 a failure (an exact algorithm beyond 1e-2 in f16/bf16 or 1e-4 in f32, a lowrank output that is not
 * finite, a plan or run that fails), 2 usage, 77 no CUDA device (attn_open says ATTN_ENODEV). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "io_theory.h"

static const char usage[] =
    "usage: gpukit_run nvrtc | info | run flash|smallcache|lowrank f16|bf16|f32 N D 0|1 [HEADS [BATCH]] [--nocheck]\n";

static int open_cuda(attn_runtime **rt) {
  int rc = attn_open(NULL, ATTN_TARGET_CUDA, rt);
  if (rc == ATTN_ENODEV) {
    printf("SKIP: no CUDA device: %s\n", attn_last_error(NULL));
    return 77;
  }
  if (rc != ATTN_OK) {
    fprintf(stderr, "FAIL: attn_open(cuda): %s: %s\n", attn_strerror(rc), attn_last_error(NULL));
    return 1;
  }
  return 0;
}

static int positive(const char *s, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < 1 || v > (1L << 24)) return -1;
  *out = (int)v;
  return 0;
}

static int run(int argc, char **argv) {
  int nocheck = 0;
  if (argc > 0 && strcmp(argv[argc - 1], "--nocheck") == 0) {
    nocheck = 1;
    argc--;
  }
  attn_problem p = {.batch = 1, .heads = 2};
  int algo = argc >= 5 ? attn_algo_parse(argv[0]) : -1;
  int dt = argc >= 5 ? attn_dtype_parse(argv[1]) : -1;
  if (argc < 5 || argc > 7 || algo <= ATTN_ALGO_AUTO || dt < 0 || positive(argv[2], &p.n) || positive(argv[3], &p.d) ||
      (strcmp(argv[4], "0") && strcmp(argv[4], "1")) || (argc > 5 && positive(argv[5], &p.heads)) ||
      (argc > 6 && positive(argv[6], &p.batch))) {
    fputs(usage, stderr);
    return 2;
  }
  p.dtype = (attn_dtype)dt;
  p.causal = argv[4][0] == '1';
  p.algo = (attn_algo)algo;
  p.tolerance = algo == ATTN_ALGO_LOWRANK ? 0.5 : 0; /* as tests/cuda_correct.c plans lowrank */
  attn_runtime *rt = NULL;
  int rc = open_cuda(&rt);
  if (rc) return rc;
  attn_problem np;
  if (attn_problem_normalize(rt, &p, &np) != ATTN_OK) {
    fprintf(stderr, "FAIL: the problem is invalid: %s\n", attn_last_error(rt));
    attn_close(rt);
    return 2;
  }
  attn_spec s = attn_spec_default((attn_algo)algo, ATTN_TARGET_CUDA, np.dtype, np.d, np.causal);
  char err[256] = "";
  attn_cuda_info_t info;
  if (attn_spec_fit(&s, err, sizeof err) != ATTN_OK || attn_cuda_info(rt, &info) != ATTN_OK) {
    fprintf(stderr, "FAIL: no default for %s d=%d on this device: %s\n", argv[0], np.d, err[0] ? err : "no info");
    attn_close(rt);
    return 1;
  }
  snprintf(s.arch, sizeof s.arch, "%s", info.arch);
  const size_t nq = (size_t)np.batch * np.heads * np.n * np.d, nkv = (size_t)np.batch * np.heads_kv * np.n_kv * np.d;
  const size_t nv = (size_t)np.batch * np.heads_kv * np.n_kv * np.d_v, no = (size_t)np.batch * np.heads * np.n * np.d_v;
  float *q = malloc(nq * sizeof *q), *k = malloc(nkv * sizeof *k), *v = malloc(nv * sizeof *v);
  float *o = malloc(no * sizeof *o);
  double *ref = nocheck ? NULL : malloc(no * sizeof *ref);
  attn_plan *plan = NULL;
  int status = 1;
  if (!q || !k || !v || !o || (!nocheck && !ref)) {
    fprintf(stderr, "FAIL: out of host memory for %zu + %zu + %zu + %zu entries\n", nq, nkv, nv, no);
    goto out;
  }
  attn_fill_random(q, nq, 11);
  attn_fill_random(k, nkv, 12);
  attn_fill_random(v, nv, 13);
  attn_round_dtype(np.dtype, q, nq);
  attn_round_dtype(np.dtype, k, nkv);
  attn_round_dtype(np.dtype, v, nv);
  attn_poison(o, no);
  rc = attn_plan_create_spec(rt, &np, &s, 0, "gpukit", &plan);
  if (rc != ATTN_OK) {
    fprintf(stderr, "FAIL: plan: %s: %s\n", attn_strerror(rc), attn_last_error(rt));
    goto out;
  }
  rc = attn_plan_run_f32(plan, q, k, v, o, NULL, NULL);
  if (rc != ATTN_OK) {
    fprintf(stderr, "FAIL: run [%s]: %s: %s\n", attn_plan_describe(plan), attn_strerror(rc), attn_last_error(rt));
    goto out;
  }
  unsigned long long fr = 0, fw = 0;
  const size_t es = attn_dtype_size(np.dtype);
  if (attn_io_formula(&s, (long)np.batch * np.heads, np.n, np.n_kv, &fr, &fw) != ATTN_OK) fr = fw = 0;
  const double floor_bytes = (double)(nq + nkv + nv + no) * (double)es;
  printf("plan=\"%s\" closed_read_bytes=%llu closed_write_bytes=%llu floor_bytes=%.0f", attn_plan_describe(plan),
         fr * es, fw * es, floor_bytes);
  status = 0;
  if (nocheck) {
    for (size_t i = 0; i < no; i++)
      if (!isfinite(o[i])) {
        status = 1;
        break;
      }
    printf(" finite=%d\n", !status);
  } else {
    attn_reference(&np, q, k, v, ref);
    const double e = attn_rel_error(ref, o, no);
    const double lim = np.dtype == ATTN_F32 ? 1e-4 : 1e-2;
    /* lowrank approximates: its output must be finite; its error is reported, bounded by the gpu tests */
    status = algo == ATTN_ALGO_LOWRANK ? !isfinite(e) : !(e <= lim);
    printf(" rel_err=%.3e limit=%s\n", e, algo == ATTN_ALGO_LOWRANK ? "finite" : np.dtype == ATTN_F32 ? "1e-4" : "1e-2");
  }
  if (status) fprintf(stderr, "FAIL: %s n=%d d=%d causal=%d: wrong output\n", attn_plan_describe(plan), np.n, np.d,
                      np.causal);
out:
  attn_plan_destroy(plan);
  attn_close(rt);
  free(q);
  free(k);
  free(v);
  free(o);
  free(ref);
  return status;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "nvrtc") == 0 && argc == 2) {
    int major = 0, minor = 0;
    char why[512] = "";
    if (attn_nvrtc_version(&major, &minor, why, sizeof why) != ATTN_OK) {
      fprintf(stderr, "FAIL: NVRTC: %s\n", why);
      return 1;
    }
    printf("nvrtc=%d.%d\n", major, minor);
    return 0;
  }
  if (argc >= 2 && strcmp(argv[1], "info") == 0 && argc == 2) {
    attn_runtime *rt = NULL;
    int rc = open_cuda(&rt);
    if (rc) return rc;
    attn_cuda_info_t info;
    rc = attn_cuda_info(rt, &info);
    if (rc == ATTN_OK)
      printf("name=\"%s\" table=\"%s\" arch=%s sms=%d smem_optin=%d l2_bytes=%d\n", info.name, rt->device, info.arch,
             info.sms, info.smem_optin, info.l2_bytes);
    else
      fprintf(stderr, "FAIL: attn_cuda_info: %s\n", attn_strerror(rc));
    attn_close(rt);
    return rc == ATTN_OK ? 0 : 1;
  }
  if (argc >= 2 && strcmp(argv[1], "run") == 0) return run(argc - 2, argv + 2);
  fputs(usage, stderr);
  return 2;
}
