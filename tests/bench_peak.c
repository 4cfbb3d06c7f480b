/* bench_peak.c: `attntune bench --target cpu` reports the FMA peak and the read bandwidth it measured, and each
 * row's fraction of its ceiling: present, positive and finite, one measurement per run, and the fraction equal to
 * achieved / ceiling as printed (prefill: GFLOP/s / FMA peak; decode: K+V GB/s / read bandwidth), in the JSON and in
 * the text; a fraction above 100% never without the flag "ceiling measured under load" (JSON ceiling_under_load, a
 * '*' after the kind and its footnote in the text). No timing is asserted. argv[1]: the attntune binary; argv[2]: a
 * database path (need not exist). */
#include "check.h"
#include "run_cmd.h"
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static int positive(json_t *o, const char *f) {
  json_t *v = json_object_get(o, f);
  return json_is_number(v) && json_number_value(v) > 0 && isfinite(json_number_value(v));
}

/* JSON reals carry 6 significant digits: quotients of them agree to about 1e-5 */
static int close_to(double a, double b, double rel) { return fabs(a - b) <= rel * fabs(b); }

static void check_row(json_t *o, int n, int n_kv, int d, int heads) {
  static const char *fields[] = {"fma_peak_gflops", "read_bw_gbs", "kv_gbs", "fraction_of_peak", "plan_ms",
                                 "plan_gflops"};
  for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
    CHECK(positive(o, fields[i]), "n=%d: %s missing, not positive or not finite", n, fields[i]);
  const char *isa = json_string_value(json_object_get(o, "fma_isa"));
  CHECK(isa && *isa, "n=%d: fma_isa empty", n);
  const char *kind = json_string_value(json_object_get(o, "peak_kind"));
  const int decode = n < 64;
  CHECK(kind && !strcmp(kind, decode ? "read_bw" : "fma"), "n=%d: peak_kind %s", n, kind ? kind : "(null)");
  const double ms = json_number_value(json_object_get(o, "plan_ms"));
  const double gf = json_number_value(json_object_get(o, "plan_gflops"));
  const double kv = json_number_value(json_object_get(o, "kv_gbs"));
  const double fma = json_number_value(json_object_get(o, "fma_peak_gflops"));
  const double bw = json_number_value(json_object_get(o, "read_bw_gbs"));
  const double frac = json_number_value(json_object_get(o, "fraction_of_peak"));
  CHECK(close_to(kv, 2.0 * heads * n_kv * d * 4 / ms * 1e-6, 1e-4), "n=%d: kv_gbs %g != K+V bytes / plan_ms", n, kv);
  const double want = decode ? kv / bw : gf / fma;
  CHECK(close_to(frac, want, 1e-4), "n=%d: fraction_of_peak %g, achieved / ceiling %g", n, frac, want);
  json_t *flag = json_object_get(o, "ceiling_under_load");
  CHECK(json_is_boolean(flag), "n=%d: ceiling_under_load missing", n);
  CHECK(frac <= 1 || json_is_true(flag), "n=%d: fraction_of_peak %g above the ceiling without the flag", n, frac);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: bench_peak ATTNTUNE DB\n");
    return 2;
  }
  char cmd[8192], *out = NULL;
  /* a decode row (n = 1) and a prefill row (n = 64), both with 512 keys */
  const char *opts = "--target cpu --n 1,64 --n-kv 512 --d 32 --heads 2 --reps 1 --time-cap 0.2 --no-blas";
  snprintf(cmd, sizeof cmd, "'%s' bench %s --db '%s' --json", argv[1], opts, argv[2]);
  int st = run_cmd(cmd, &out);
  CHECK(st == 0, "%s exited %d", cmd, st);
  json_error_t jerr;
  json_t *arr = json_loads(out ? out : "", 0, &jerr);
  CHECK(json_is_array(arr) && json_array_size(arr) == 2, "not a JSON array of 2 rows: %s", jerr.text);
  if (json_is_array(arr) && json_array_size(arr) == 2) {
    json_t *a = json_array_get(arr, 0), *b = json_array_get(arr, 1);
    check_row(a, 1, 512, 32, 2);
    check_row(b, 64, 512, 32, 2);
    /* one measurement per run: every row carries the same ceilings */
    CHECK(json_equal(json_object_get(a, "fma_peak_gflops"), json_object_get(b, "fma_peak_gflops")) &&
              json_equal(json_object_get(a, "read_bw_gbs"), json_object_get(b, "read_bw_gbs")),
          "rows of one run carry different ceilings");
  }
  json_decref(arr);
  free(out);

  /* The text: the ceilings line, and each row's "of peak" column equal to its printed figure over the ceiling
   * (to the rounding of the printed digits). */
  snprintf(cmd, sizeof cmd, "'%s' bench %s --db '%s'", argv[1], opts, argv[2]);
  st = run_cmd(cmd, &out);
  CHECK(st == 0, "%s exited %d", cmd, st);
  const char *line = out ? strstr(out, "fp32 FMA peak ") : NULL;
  double fma = -1, bw = -1;
  CHECK(line && sscanf(line, "fp32 FMA peak %lf GFLOP/s", &fma) == 1 && fma > 0, "no FMA peak in the text:\n%s",
        out ? out : "");
  line = out ? strstr(out, "read bandwidth ") : NULL;
  CHECK(line && sscanf(line, "read bandwidth %lf GB/s", &bw) == 1 && bw > 0, "no read bandwidth in the text");
  int rows = 0, flagged = 0;
  for (char *l = out ? strstr(out, "\n") : NULL; l && fma > 0 && bw > 0; l = strstr(l + 1, "\n")) {
    int n, n_kv, d, heads;
    char causal[8], kind[8];
    double ms, gf, pct;
    if (sscanf(l + 1, "%d %d %d %d %7s %lf %lf %lf%% %7s", &n, &n_kv, &d, &heads, causal, &ms, &gf, &pct, kind) != 9)
      continue;
    rows++;
    const size_t kl = strlen(kind);
    const int starred = kl > 0 && kind[kl - 1] == '*';
    if (starred) kind[kl - 1] = '\0', flagged++;
    CHECK(!strcmp(kind, n < 64 ? "bw" : "fma"), "text row n=%d: kind %s", n, kind);
    CHECK(pct <= 100 || starred, "text row n=%d: %.1f%% of peak without the under-load flag", n, pct);
    /* decode: K+V GB/s from the printed ms (3 decimals); prefill: the printed GFLOP/s (1 decimal) */
    const double ach = n < 64 ? 2.0 * heads * n_kv * d * 4 / ms * 1e-6 : gf;
    const double ach_err = n < 64 ? ach * 0.0005 / ms : 0.05;
    const double ceil = n < 64 ? bw : fma, want = 100 * ach / ceil;
    const double tol = 0.05 + 100 * ach_err / ceil + want * 0.05 / ceil + 1e-9;
    CHECK(fabs(pct - want) <= tol, "text row n=%d: of peak %.1f%%, printed figures give %.3f%%", n, pct, want);
  }
  CHECK(rows == 2, "%d text rows parsed, expected 2:\n%s", rows, out ? out : "");
  CHECK(!flagged || (out && strstr(out, "\n* ceiling measured under load")), "a '*' without its footnote:\n%s",
        out ? out : "");
  free(out);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  printf("%d checks\n", checks);
  return failures ? 1 : 0;
}
