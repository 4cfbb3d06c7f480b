/* bench_report.c: bench's output: the CPU table or JSON, and the formatting and agreement measure its parts share. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"
#include "measure.h"
#include "timing_env.h"
#ifdef ATTN_HAVE_OPENBLAS
#include <cblas.h>
#endif

double attn_bench_rel_diff(const float *a, const float *ref, size_t cnt) {
  double num = 0, den = 0;
  for (size_t i = 0; i < cnt; i++) {
    const double e = (double)a[i] - ref[i];
    num += e * e, den += (double)ref[i] * ref[i];
  }
  if (num != num) return INFINITY;
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* The baseline's threads: OpenBLAS's, 0 in a build without it. */
static int baseline_threads(void) {
#ifdef ATTN_HAVE_OPENBLAS
  return openblas_get_num_threads();
#else
  return 0;
#endif
}

json_t *attn_bench_num_or_null(double x) { return x >= 0 && isfinite(x) ? json_real(x) : json_null(); }

static json_t *row_json(const bench_row *r) {
  json_t *o = json_object();
  json_object_set_new(o, "n", json_integer(r->n));
  json_object_set_new(o, "d", json_integer(r->d));
  json_object_set_new(o, "heads", json_integer(r->heads));
  json_object_set_new(o, "heads_kv", json_integer(r->heads_kv));
  json_object_set_new(o, "causal", json_boolean(r->causal));
  json_object_set_new(o, "plan", json_string(r->plan));
  json_object_set_new(o, "plan_ms", attn_bench_num_or_null(r->plan_ms));
  json_object_set_new(o, "plan_gflops", attn_bench_num_or_null(r->plan_gflops));
  json_object_set_new(o, "blas_ms", attn_bench_num_or_null(r->blas_ms));
  json_object_set_new(o, "blas_gflops", attn_bench_num_or_null(r->blas_gflops));
  json_object_set_new(o, "ratio", attn_bench_num_or_null(r->ratio));
  json_object_set_new(o, "sgemm_gflops", attn_bench_num_or_null(r->sgemm_gflops));
  json_object_set_new(o, "plan_peak_mib", attn_bench_num_or_null(r->plan_peak_mib));
  json_object_set_new(o, "blas_peak_mib", attn_bench_num_or_null(r->blas_peak_mib));
  /* rel_error: plan vs BLAS output when the baseline ran, else plan vs the fp64 reference rows */
  json_object_set_new(o, "rel_error", json_real(isfinite(r->rel_error) ? r->rel_error : 1e300));
  json_object_set_new(o, "ref_error", json_real(isfinite(r->ref_error) ? r->ref_error : 1e300));
  if (r->blas_note) json_object_set_new(o, "blas_note", json_string(r->blas_note));
  json_object_set_new(o, "n_kv", json_integer(r->n_kv));
  json_object_set_new(o, "split", json_integer(r->split)); /* key-range parts per query block; 1: none */
  json_object_set_new(o, "default", json_string(r->def));
  json_object_set_new(o, "default_ms", attn_bench_num_or_null(r->default_ms));
  json_object_set_new(o, "vs_default", attn_bench_num_or_null(r->vs_default)); /* default_ms / plan_ms */
  json_object_set_new(o, "plan_iqr_ms", attn_bench_num_or_null(r->plan_iqr_ms));
  json_object_set_new(o, "rounds", json_integer(r->rounds));
  json_object_set_new(o, "load", attn_bench_num_or_null(r->load));
  json_object_set_new(o, "fma_peak_gflops", attn_bench_num_or_null(r->fma_peak_gflops));
  json_object_set_new(o, "fma_isa", json_string(r->fma_isa ? r->fma_isa : ""));
  json_object_set_new(o, "read_bw_gbs", attn_bench_num_or_null(r->read_bw_gbs));
  json_object_set_new(o, "kv_gbs", attn_bench_num_or_null(r->kv_gbs));
  json_object_set_new(o, "peak_kind", json_string(r->peak_kind ? r->peak_kind : ""));
  json_object_set_new(o, "fraction_of_peak", attn_bench_num_or_null(r->peak_frac));
  json_object_set_new(o, "d_v", json_integer(r->d_v));
  json_object_set_new(o, "dtype", json_string(attn_dtype_name(r->dtype)));
  json_object_set_new(o, "plan_ms_misaligned", attn_bench_num_or_null(r->plan_ms_misaligned));
  json_object_set_new(o, "ceiling_under_load", json_boolean(r->ceiling_under_load));
  json_object_set_new(o, "database", r->database ? json_string(r->database) : json_null());
  if (r->bwd) { /* the backward's: plan_* and blas_* are backward times; default is the forward plan */
    json_object_set_new(o, "pass", json_string("bwd"));
    json_object_set_new(o, "fwd_ms", attn_bench_num_or_null(r->fwd_ms));
    json_object_set_new(o, "bwd_vs_fwd", attn_bench_num_or_null(r->bwd_vs_fwd));
    json_object_set_new(o, "torch_ms", attn_bench_num_or_null(r->torch_ms));
    json_object_set_new(o, "vs_torch", attn_bench_num_or_null(r->vs_torch)); /* torch_ms / plan_ms */
    json_object_set_new(o, "torch_version", r->torch_version[0] ? json_string(r->torch_version) : json_null());
    if (r->torch_note) json_object_set_new(o, "torch_note", json_string(r->torch_note));
  }
  return o;
}

void attn_bench_fmt_num(char *buf, size_t len, const char *f, double x) {
  if (x >= 0 && isfinite(x))
    snprintf(buf, len, f, x);
  else
    snprintf(buf, len, "-");
}

static void row_text(const bench_row *r) {
  char pm[32], pg[32], bm[32], bg[32], ra[32], sg[32], pp[32], bp[32], dm[32], vd[32], pf[48], mm[32];
  attn_bench_fmt_num(pm, sizeof pm, "%.3f", r->plan_ms), attn_bench_fmt_num(pg, sizeof pg, "%.1f", r->plan_gflops);
  attn_bench_fmt_num(bm, sizeof bm, "%.3f", r->blas_ms), attn_bench_fmt_num(bg, sizeof bg, "%.1f", r->blas_gflops);
  attn_bench_fmt_num(ra, sizeof ra, "%.2fx", r->ratio), attn_bench_fmt_num(sg, sizeof sg, "%.1f", r->sgemm_gflops);
  attn_bench_fmt_num(pp, sizeof pp, "%.1f", r->plan_peak_mib);
  attn_bench_fmt_num(bp, sizeof bp, "%.1f", r->blas_peak_mib);
  attn_bench_fmt_num(dm, sizeof dm, "%.3f", r->default_ms), attn_bench_fmt_num(vd, sizeof vd, "%.3fx", r->vs_default);
  attn_bench_fmt_num(mm, sizeof mm, "%.3f", r->plan_ms_misaligned);
  char frac[32];
  attn_bench_fmt_num(frac, sizeof frac, "%.1f%%", 100 * r->peak_frac);
  /* '*': the ceiling was measured under load (footnote under the table) */
  snprintf(pf, sizeof pf, "%s %s%s", frac, !strcmp(r->peak_kind, "fma") ? "fma" : "bw",
           r->ceiling_under_load ? "*" : "");
  printf("%6d %6d %4d %5d %6s %10s %8s %10s %10s %10s %8s %7s %10s %8s %7s %9s %9s %9.1e  %s%s%s\n", r->n, r->n_kv,
         r->d, r->heads, r->causal ? "yes" : "no", pm, pg, pf, mm, dm, vd, sg, bm, bg, ra, pp, bp, r->rel_error,
         r->plan,
         r->blas_note ? "; blas: " : "", r->blas_note ? r->blas_note : "");
}

static void row_text_bwd(const bench_row *r) {
  char pm[32], pg[32], pf[48], fm[32], bf[32], bm[32], bg[32], ra[32], tm[32], vt[32], frac[32];
  attn_bench_fmt_num(pm, sizeof pm, "%.2f", r->plan_ms), attn_bench_fmt_num(pg, sizeof pg, "%.1f", r->plan_gflops);
  attn_bench_fmt_num(frac, sizeof frac, "%.1f%%", 100 * r->peak_frac);
  snprintf(pf, sizeof pf, "%s%s", frac, r->ceiling_under_load ? "*" : "");
  attn_bench_fmt_num(fm, sizeof fm, "%.2f", r->fwd_ms), attn_bench_fmt_num(bf, sizeof bf, "%.2fx", r->bwd_vs_fwd);
  attn_bench_fmt_num(bm, sizeof bm, "%.2f", r->blas_ms), attn_bench_fmt_num(bg, sizeof bg, "%.1f", r->blas_gflops);
  attn_bench_fmt_num(ra, sizeof ra, "%.2fx", r->ratio);
  attn_bench_fmt_num(tm, sizeof tm, "%.2f", r->torch_ms), attn_bench_fmt_num(vt, sizeof vt, "%.2fx", r->vs_torch);
  printf("%6d %6d %4d %5d %6s %5s %10s %8s %8s %10s %8s %10s %8s %7s %10s %8s %9.1e  %s%s%s%s%s\n", r->n, r->n_kv,
         r->d, r->heads, r->causal ? "yes" : "no", attn_dtype_name(r->dtype), pm, pg, pf, fm, bf, bm, bg, ra, tm, vt,
         r->rel_error, r->plan, r->blas_note ? "; blas: " : "", r->blas_note ? r->blas_note : "",
         r->torch_note ? "; torch: " : "", r->torch_note ? r->torch_note : "");
}

int attn_bench_report_bwd(const attn_runtime *rt, const attn_peak *pk, const bench_row *all, int nall, int reps,
                          int causal, int flagged, int json) {
  if (json) return attn_bench_report(rt, pk, all, nall, reps, causal, flagged, json);
  const int blas_threads = baseline_threads();
  char base[160] = "none (built without OpenBLAS)";
  if (blas_threads)
    snprintf(base, sizeof base, "the standard backward on OpenBLAS (P kept from the forward; %d threads)",
             blas_threads);
  printf("backward: device %s, %d threads (%s); baseline: %s; the forward plan beside it; medians of at least %d "
         "interleaved rounds (at most %.0f s); GFLOP/s count 2.5 x 2*n*n_kv*(d+d_v)*heads%s; PyTorch: its CPU SDPA "
         "backward after the rounds, median of %d\n",
         rt->device, rt->threads, attn_timing_env_text(), base, reps, attn_bench_cap_s, causal ? "/2 (causal)" : "",
         reps);
  attn_bench_print_database(rt);
  char fp[32];
  attn_bench_fmt_num(fp, sizeof fp, "%.1f", pk->fma_gflops);
  printf("ceiling measured %s on %d threads: fp32 FMA peak %s GFLOP/s%s (%s); of peak: backward GFLOP/s / FMA peak\n",
         pk->measurements > 1 ? "before and after the points" : "before the points", pk->threads, fp,
         pk->fma_under_load ? " (under load)" : "", pk->fma_isa[0] ? pk->fma_isa : "-");
  printf("%6s %6s %4s %5s %6s %5s %10s %8s %8s %10s %8s %10s %8s %7s %10s %8s %9s  %s\n", "n", "n_kv", "d", "heads",
         "causal", "dtype", "bwd ms", "GFLOP/s", "of peak", "fwd ms", "bwd/fwd", "blas ms", "GFLOP/s", "ratio",
         "torch ms", "vs torch", "rel err", "plan");
  for (int r = 0; r < nall; r++) row_text_bwd(&all[r]);
  printf("ratio: blas ms / bwd ms; vs torch: torch ms / bwd ms; rel err: the gradients against the BLAS backward's "
         "(else dq against fp64 on 16 rows)\n");
  if (flagged)
    printf("* ceiling measured under load (no clean measurement, or a row above it): the fraction is an upper "
           "bound\n");
  return 0;
}

/* The header's line on what the plans come from: the database read, or none (the untuned defaults). */
void attn_bench_print_database(const attn_runtime *rt) {
  if (rt->db)
    printf("database: %s\n", rt->db_path);
  else
    printf("no database: untuned defaults (none usable at %s; --db PATH to bench a tuned one)\n", rt->db_path);
}

/* The CPU rows: the table with its header, the ceilings' line and the footnotes, or a JSON array. Returns 1 when the
 * JSON could not be written. */
int attn_bench_report(const attn_runtime *rt, const attn_peak *pk, const bench_row *all, int nall, int reps,
                      int causal, int flagged, int json) {
  int rc = 0;
  if (!json) {
    const int blas_threads = baseline_threads();
    char base[128] = "none (built without OpenBLAS)";
    if (blas_threads) snprintf(base, sizeof base, "OpenBLAS sgemm + softmax + sgemm (%d threads)", blas_threads);
    printf("device %s, %d threads (%s); baseline: %s; the untuned default beside the plan; medians of at least %d "
           "interleaved rounds on rotating inputs, more until each is known within %.0f%% (at most %.0f s); GFLOP/s "
           "count 2*n*n_kv*(d+d_v)*heads%s\n",
           rt->device, rt->threads, attn_timing_env_text(), base, reps, ATTN_MEAS_REL_TOL * 100, attn_bench_cap_s,
           causal ? "/2 (causal)" : "");
    attn_bench_print_database(rt);
    char fp[32], bw[32];
    attn_bench_fmt_num(fp, sizeof fp, "%.1f", pk->fma_gflops), attn_bench_fmt_num(bw, sizeof bw, "%.1f", pk->read_gbs);
    printf("ceilings measured %s on %d threads: fp32 FMA peak %s GFLOP/s%s (%s, %d chains per thread), read bandwidth "
           "%s GB/s%s (streaming sum over %.0f MiB); of peak: prefill (n >= %d) GFLOP/s / FMA peak, decode (n < %d) "
           "K+V bytes/s / read bandwidth\n",
           pk->measurements > 1 ? "before and after the points" : "before the points", pk->threads, fp,
           pk->fma_under_load ? " (under load)" : "", pk->fma_isa[0] ? pk->fma_isa : "-", pk->fma_chains, bw,
           pk->read_under_load ? " (under load)" : "", pk->read_mib > 0 ? pk->read_mib : 0.0, ATTN_DB_DECODE_BELOW,
           ATTN_DB_DECODE_BELOW);
    printf("%6s %6s %4s %5s %6s %10s %8s %10s %10s %10s %8s %7s %10s %8s %7s %9s %9s %9s  %s\n", "n", "n_kv", "d",
           "heads", "causal", "plan ms", "GFLOP/s", "of peak", "+16B ms", "default ms", "vs def", "sgemm", "blas ms",
           "GFLOP/s", "ratio", "plan MiB", "blas MiB", "rel err", "plan");
    for (int r = 0; r < nall; r++) row_text(&all[r]);
    printf("plan ms: Q, K, V and O each %d-byte aligned; +16B ms: each %d bytes past such a boundary (what malloc "
           "returns for large blocks)\n",
           BENCH_ALIGN, BENCH_OFFSET);
    if (flagged)
      printf("* ceiling measured under load (no clean measurement, or a row above it): the fraction is an upper "
             "bound\n");
  } else {
    json_t *arr = json_array();
    for (int r = 0; r < nall; r++) json_array_append_new(arr, row_json(&all[r]));
    char *text = json_dumps(arr, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
    if (text) {
      puts(text);
      free(text);
    } else {
      rc = 1;
    }
    json_decref(arr);
  }
  return rc;
}
