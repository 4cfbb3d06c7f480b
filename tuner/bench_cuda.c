/* bench_cuda.c: bench --target cuda: the plan against the default flash kernel on the device present. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"
#include "gpus.h"

typedef struct cuda_row {
  int n, d, heads, causal;
  attn_dtype dtype;
  char plan[512], base[512];
  double plan_ms, base_ms, plan_tflops, base_tflops, ratio, peak_frac, ref_error;
  const char *database; /* the database the runtime read, or NULL */
} cuda_row;

static json_t *cuda_row_json(const cuda_row *r) {
  json_t *o = json_object();
  json_object_set_new(o, "n", json_integer(r->n));
  json_object_set_new(o, "d", json_integer(r->d));
  json_object_set_new(o, "heads", json_integer(r->heads));
  json_object_set_new(o, "causal", json_boolean(r->causal));
  json_object_set_new(o, "dtype", json_string(attn_dtype_name(r->dtype)));
  json_object_set_new(o, "plan", json_string(r->plan));
  json_object_set_new(o, "plan_ms", attn_bench_num_or_null(r->plan_ms));
  json_object_set_new(o, "plan_tflops", attn_bench_num_or_null(r->plan_tflops));
  json_object_set_new(o, "baseline", json_string(r->base));
  json_object_set_new(o, "baseline_ms", attn_bench_num_or_null(r->base_ms));
  json_object_set_new(o, "baseline_tflops", attn_bench_num_or_null(r->base_tflops));
  json_object_set_new(o, "ratio", attn_bench_num_or_null(r->ratio));
  json_object_set_new(o, "peak_fraction", attn_bench_num_or_null(r->peak_frac));
  json_object_set_new(o, "ref_error", json_real(isfinite(r->ref_error) ? r->ref_error : 1e300));
  json_object_set_new(o, "database", r->database ? json_string(r->database) : json_null());
  return o;
}

typedef struct cuda_runs {
  attn_runtime *rt;
  const attn_plan *const *both;
  void *dq, *dk, *dv, *dout;
  int n, d;
} cuda_runs;

static int cuda_run(void *user, int side, int timed, double *ms, double *delay) {
  (void)timed;
  cuda_runs *c = user;
  const attn_plan *pl = c->both[side];
  *delay = 0;
  int e = attn_cuda_run(c->rt, pl->cuda, &pl->p, c->dq, c->dk, c->dv, c->dout, NULL, ms);
  if (e == ATTN_OK) return 0;
  fprintf(stderr, "attntune bench: n=%d d=%d: %s: %s\n", c->n, c->d, attn_plan_describe(pl), attn_last_error(c->rt));
  return 1;
}

/* One point: both plans checked on sample rows against fp64, then alternating timed runs on device buffers. */
static int cuda_point(attn_runtime *rt, const attn_gpu *gpu, int n, int d, int heads, int causal, attn_dtype t,
                      int reps, cuda_row *row) {
  memset(row, 0, sizeof *row);
  row->n = n, row->d = d, row->heads = heads, row->causal = causal, row->dtype = t;
  row->peak_frac = -1;
  row->database = rt->db ? rt->db_path : NULL;
  attn_problem p = {.batch = 1, .heads = heads, .n = n, .d = d, .dtype = t, .causal = causal};
  const size_t cnt = (size_t)heads * n * d, es = attn_dtype_size(t);
  float *hq = malloc(cnt * sizeof(float)), *hk = malloc(cnt * sizeof(float)), *hv = malloc(cnt * sizeof(float));
  float *ho = malloc(cnt * sizeof(float));
  attn_timing_stats stp, stb;
  void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL;
  attn_plan *plan = NULL, *base = NULL;
  int rc = 1, e = ATTN_OK;
  if (!hq || !hk || !hv || !ho) {
    fprintf(stderr, "attntune bench: out of memory for n=%d d=%d\n", n, d);
    goto done;
  }
  attn_fill_random(hq, cnt, 1), attn_fill_random(hk, cnt, 2), attn_fill_random(hv, cnt, 3);
  /* the reference sees the inputs as the kernel does: rounded to the dtype */
  for (size_t i = 0; i < cnt && t != ATTN_F32; i++) {
    float *x[3] = {&hq[i], &hk[i], &hv[i]};
    for (int j = 0; j < 3; j++)
      *x[j] = t == ATTN_F16 ? attn_f16_to_f32(attn_f32_to_f16(*x[j])) : attn_bf16_to_f32(attn_f32_to_bf16(*x[j]));
  }
  attn_spec ds = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, t, d, causal);
  if ((e = attn_plan_create(rt, &p, &plan)) != ATTN_OK ||
      (e = attn_plan_create_spec(rt, &p, &ds, 0, "default", &base)) != ATTN_OK) {
    fprintf(stderr, "attntune bench: n=%d d=%d %s: %s: %s\n", n, d, attn_dtype_name(t), attn_strerror(e),
            attn_last_error(rt));
    goto done;
  }
  snprintf(row->plan, sizeof row->plan, "%s", attn_plan_describe(plan));
  snprintf(row->base, sizeof row->base, "%s", attn_plan_describe(base));
  p = plan->p; /* normalised: the reference needs the scale */
  const double tol = t == ATTN_F32 ? 1e-4 : 1e-2;
  const attn_plan *both[2] = {plan, base};
  for (int w = 0; w < 2; w++) {
    attn_poison(ho, cnt);
    if ((e = attn_plan_run_f32(both[w], hq, hk, hv, ho, NULL, NULL)) != ATTN_OK) {
      fprintf(stderr, "attntune bench: n=%d d=%d: %s: %s\n", n, d, attn_plan_describe(both[w]), attn_last_error(rt));
      goto done;
    }
    double err = attn_bench_ref_error(&p, hq, hk, hv, ho);
    if (w == 0) row->ref_error = err;
    if (!(err <= tol)) {
      fprintf(stderr, "attntune bench: n=%d d=%d: %s is wrong: relative error %.3g against fp64 (limit %g)\n", n, d,
              attn_plan_describe(both[w]), err, tol);
      goto done;
    }
  }
  if ((e = attn_cuda_alloc(rt, cnt * es, &dq)) || (e = attn_cuda_alloc(rt, cnt * es, &dk)) ||
      (e = attn_cuda_alloc(rt, cnt * es, &dv)) || (e = attn_cuda_alloc(rt, cnt * es, &dout))) {
    fprintf(stderr, "attntune bench: n=%d d=%d: %s\n", n, d, attn_last_error(rt));
    goto done;
  }
  /* device inputs in the dtype (random bits are fine for timing; correctness was checked above) */
  {
    unsigned short *h = malloc(cnt * es);
    const float *src[3] = {hq, hk, hv};
    void *dst[3] = {dq, dk, dv};
    for (int j = 0; j < 3 && h && e == ATTN_OK; j++) {
      for (size_t i = 0; i < cnt && t != ATTN_F32; i++)
        h[i] = t == ATTN_F16 ? attn_f32_to_f16(src[j][i]) : attn_f32_to_bf16(src[j][i]);
      e = attn_cuda_copy(rt, dst[j], t == ATTN_F32 ? (const void *)src[j] : h, cnt * es, 1);
    }
    if (!h) e = ATTN_ENOMEM;
    free(h);
    if (e != ATTN_OK) {
      fprintf(stderr, "attntune bench: n=%d d=%d: uploading inputs: %s\n", n, d, attn_last_error(rt));
      goto done;
    }
  }
  /* The rounds (timing.h): a warm-up round, then both in alternation. CUDA events do not see the host's scheduler:
   * every repetition counts as clean. */
  {
    cuda_runs cr = {.rt = rt, .both = both, .dq = dq, .dk = dk, .dv = dv, .dout = dout, .n = n, .d = d};
    attn_rounds_caps caps;
    attn_bench_caps(reps, 1, &caps);
    caps.warmup = 1;
    attn_timing_stats st2[2];
    attn_rounds_out ro;
    if (attn_rounds(&caps, 2, cuda_run, &cr, st2, &ro) != 0) goto done;
    stp = st2[0], stb = st2[1];
  }
  const double flops = 4.0 * n * (double)n * d * heads * (causal ? 0.5 : 1.0);
  row->plan_ms = stp.median_ms;
  row->base_ms = stb.median_ms;
  row->plan_tflops = flops / row->plan_ms * 1e-9;
  row->base_tflops = flops / row->base_ms * 1e-9;
  row->ratio = row->base_ms / row->plan_ms;
  if (gpu) row->peak_frac = row->plan_tflops * 1e12 / attn_gpu_peak(gpu, t);
  rc = 0;
done:
  attn_cuda_free(rt, dq), attn_cuda_free(rt, dk), attn_cuda_free(rt, dv), attn_cuda_free(rt, dout);
  attn_plan_destroy(plan);
  attn_plan_destroy(base);
  free(hq), free(hk), free(hv), free(ho);
  return rc;
}

int attn_bench_cuda(const char *db, const int *ns, int nn, const int *ds, int nd, int heads, int causal, int reps,
                    unsigned dtypes, int json) {
  attn_runtime *rt = NULL;
  int e = attn_open(db, ATTN_TARGET_CUDA, &rt);
  if (e != ATTN_OK) {
    fprintf(stderr, "attntune bench: --target cuda: %s\n", attn_last_error(NULL));
    return 1;
  }
  attn_cuda_info_t info;
  attn_cuda_info(rt, &info);
  char err[256];
  const attn_gpu *gpu = attn_gpu_find(rt->device, err, sizeof err); /* NULL: not in the table, no peak column */
  if (!json) {
    printf("device %s (%s, %s, %d SMs); baseline: the default flash kernel; medians of at least %d interleaved "
           "rounds (CUDA events); TFLOP/s count 4*n*n_kv*d*heads%s%s\n",
           rt->device, info.name, info.arch, info.sms, reps, causal ? "/2 (causal)" : "",
           gpu ? "; peak: the spec table's dense rate" : "");
    attn_bench_print_database(rt);
    printf("%6s %4s %5s %6s %5s %10s %8s %6s %10s %8s %7s %9s  %s\n", "n", "d", "heads", "causal", "dtype", "plan ms",
           "TFLOP/s", "peak", "base ms", "TFLOP/s", "ratio", "ref err", "plan");
  }
  json_t *arr = json_array();
  int rc = 0;
  for (int t = 0; t < 3; t++) {
    if (!((dtypes >> t) & 1)) continue;
    for (int i = 0; i < nn; i++)
      for (int j = 0; j < nd; j++) {
        cuda_row row;
        if (cuda_point(rt, gpu, ns[i], ds[j], heads, causal, (attn_dtype)t, reps, &row)) {
          rc = 1;
          continue;
        }
        if (json) {
          json_array_append_new(arr, cuda_row_json(&row));
          continue;
        }
        char pk[16];
        attn_bench_fmt_num(pk, sizeof pk, "%.0f%%", row.peak_frac * 100);
        printf("%6d %4d %5d %6s %5s %10.3f %8.1f %6s %10.3f %8.1f %6.2fx %9.1e  %s\n", row.n, row.d, row.heads,
               row.causal ? "yes" : "no", attn_dtype_name(row.dtype), row.plan_ms, row.plan_tflops, pk, row.base_ms,
               row.base_tflops, row.ratio, row.ref_error, row.plan);
        fflush(stdout);
      }
  }
  if (json) {
    char *text = json_dumps(arr, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
    if (text) puts(text), free(text);
    else rc = 1;
  }
  json_decref(arr);
  attn_close(rt);
  return rc;
}
