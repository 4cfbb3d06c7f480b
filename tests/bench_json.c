/* bench_json.c: `attntune bench` end to end: its JSON parses, carries every contract field, the plan's output agrees
 * with the OpenBLAS baseline (or the fp64 reference rows), d_v != d and half precision on the CPU, the plan timed at
 * both alignments of its inputs, the database it read (or none) in the JSON and the text, and bad usage exits 2.
 * argv[1]: the attntune binary;
 * argv[2]: a database path (need not exist). */
#include "check.h"
#include "run_cmd.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <sys/wait.h>

static void check_point(json_t *o, int n, int d, int causal) {
  static const char *fields[] = {"n", "d", "heads", "causal", "plan", "plan_ms", "plan_gflops", "blas_ms",
                                 "blas_gflops", "ratio", "sgemm_gflops", "plan_peak_mib", "blas_peak_mib", "rel_error"};
  for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
    CHECK(json_object_get(o, fields[i]), "field %s missing", fields[i]);
  CHECK(json_integer_value(json_object_get(o, "n")) == n, "n");
  CHECK(json_integer_value(json_object_get(o, "d")) == d, "d");
  CHECK(json_integer_value(json_object_get(o, "heads")) == 2, "heads");
  CHECK(json_is_true(json_object_get(o, "causal")) == causal, "causal");
  const char *plan = json_string_value(json_object_get(o, "plan"));
  CHECK(plan && strstr(plan, "flash"), "plan '%s' is not described as flash", plan ? plan : "(null)");
  CHECK(json_number_value(json_object_get(o, "plan_ms")) > 0, "plan_ms");
  CHECK(json_number_value(json_object_get(o, "plan_gflops")) > 0, "plan_gflops");
  double err = json_number_value(json_object_get(o, "rel_error"));
  CHECK(json_is_number(json_object_get(o, "rel_error")) && err >= 0 && err <= 1e-5, "rel_error %g", err);
  json_t *ref = json_object_get(o, "ref_error");
  CHECK(json_is_number(ref) && json_number_value(ref) <= 1e-5, "ref_error %g", json_number_value(ref));
  /* the plan with Q, K, V and O 16 bytes past a 64-byte boundary, beside plan_ms (aligned) */
  CHECK(json_number_value(json_object_get(o, "plan_ms_misaligned")) > 0, "plan_ms_misaligned");
  /* no database at the path given: null, never a silent default */
  CHECK(json_is_null(json_object_get(o, "database")), "database is not null without one");
  CHECK(json_is_boolean(json_object_get(o, "ceiling_under_load")), "ceiling_under_load");
  json_t *blas = json_object_get(o, "blas_ms");
  if (json_is_number(blas)) { /* built with OpenBLAS: the baseline ran and has figures */
    CHECK(json_number_value(blas) > 0, "blas_ms");
    CHECK(json_number_value(json_object_get(o, "ratio")) > 0, "ratio");
    CHECK(json_number_value(json_object_get(o, "sgemm_gflops")) > 0, "sgemm_gflops");
    double peak = json_number_value(json_object_get(o, "blas_peak_mib"));
    /* S alone is n*n floats, fresh from mmap from 1 MiB up: a probe that works must see most of it */
    if (n * n * 4.0 >= 1048576.0)
      CHECK(!json_is_number(json_object_get(o, "blas_peak_mib")) || peak >= 0.5 * n * n * 4 / 1048576.0,
            "blas_peak_mib %g below the size of S", peak);
  } else {
    CHECK(json_is_null(blas), "blas_ms neither a number nor null");
  }
}

/* Runs a bench command that prints JSON: exit 0 and an array of want rows, else a failure; the array (NULL on a parse
 * failure) for the caller to check and free. */
static json_t *bench_rows(const char *cmd, size_t want, const char *what) {
  char *out = NULL;
  int st = run_cmd(cmd, &out);
  CHECK(st == 0, "%s exited %d", cmd, st);
  json_error_t jerr;
  json_t *arr = json_loads(out ? out : "", 0, &jerr);
  CHECK(json_is_array(arr) && json_array_size(arr) == want, "%s: not a JSON array of %zu rows: %s", what, want,
        jerr.text);
  free(out);
  return arr;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: bench_json ATTNTUNE DB\n");
    return 2;
  }
  char cmd[8192], *out = NULL;
  snprintf(cmd, sizeof cmd, "'%s' bench --target cpu --n 600,100 --d 64 --reps 3 --time-cap 0.2 --db '%s' --json", argv[1], argv[2]);
  int st = run_cmd(cmd, &out);
  CHECK(st == 0, "%s exited %d", cmd, st);
  json_error_t jerr;
  json_t *arr = json_loads(out ? out : "", 0, &jerr);
  CHECK(json_is_array(arr) && json_array_size(arr) == 2, "output is not a JSON array of 2 points: %s", jerr.text);
  if (json_is_array(arr) && json_array_size(arr) == 2) {
    check_point(json_array_get(arr, 0), 600, 64, 0);
    check_point(json_array_get(arr, 1), 100, 64, 0);
  }
  json_decref(arr);
  free(out);

  snprintf(cmd, sizeof cmd, "'%s' bench --n 130 --d 32 --causal --reps 1 --time-cap 0.2 --db '%s' --json", argv[1], argv[2]);
  st = run_cmd(cmd, &out);
  CHECK(st == 0, "%s exited %d", cmd, st);
  arr = json_loads(out ? out : "", 0, &jerr);
  CHECK(json_is_array(arr) && json_array_size(arr) == 1, "causal: not a JSON array of 1 point: %s", jerr.text);
  if (json_is_array(arr) && json_array_size(arr) == 1) check_point(json_array_get(arr, 0), 130, 32, 1);
  json_decref(arr);
  free(out);

  /* decode with n_kv keys, the plan's configuration at each --split value: one row each, added fields n_kv, split */
  snprintf(cmd, sizeof cmd, "'%s' bench --n 1 --n-kv 300 --d 32 --heads 1 --split 1,2,4 --reps 1 --time-cap 0.2 --db '%s' --json",
           argv[1], argv[2]);
  st = run_cmd(cmd, &out);
  CHECK(st == 0, "%s exited %d", cmd, st);
  arr = json_loads(out ? out : "", 0, &jerr);
  CHECK(json_is_array(arr) && json_array_size(arr) == 3, "--split: not a JSON array of 3 rows: %s", jerr.text);
  for (size_t i = 0; json_is_array(arr) && i < json_array_size(arr) && i < 3; i++) {
    json_t *o = json_array_get(arr, i);
    const int want = i == 0 ? 1 : (int)(2 * i);
    CHECK(json_integer_value(json_object_get(o, "n")) == 1 && json_integer_value(json_object_get(o, "n_kv")) == 300,
          "--split row %zu: n, n_kv", i);
    CHECK(json_integer_value(json_object_get(o, "split")) == want, "--split row %zu: split %lld, want %d", i,
          (long long)json_integer_value(json_object_get(o, "split")), want);
    const char *plan = json_string_value(json_object_get(o, "plan"));
    char tag[32];
    snprintf(tag, sizeof tag, "split=%d", want);
    CHECK(plan && (want > 1 ? strstr(plan, tag) != NULL : strstr(plan, "split=") == NULL), "--split row %zu: plan '%s'",
          i, plan ? plan : "(null)");
    CHECK(json_number_value(json_object_get(o, "plan_ms")) > 0, "--split row %zu: plan_ms", i);
    json_t *ref = json_object_get(o, "ref_error");
    CHECK(json_is_number(ref) && json_number_value(ref) <= 1e-5, "--split row %zu: ref_error %g", i,
          json_number_value(ref));
  }
  json_decref(arr);
  free(out);

  /* d_v != d and the half dtypes on the CPU: "d_v" and "dtype" in every row; a half plan agrees with the fp32
   * baseline and the fp64 reference (both on the rounded inputs) within 1e-2 */
  snprintf(cmd, sizeof cmd,
           "'%s' bench --n 70 --d 24 --dv 40 --dtype f32,f16,bf16 --reps 1 --time-cap 0.2 --db '%s' --json", argv[1],
           argv[2]);
  arr = bench_rows(cmd, 3, "--dv --dtype");
  static const char *const dts[] = {"f32", "f16", "bf16"};
  for (size_t i = 0; json_is_array(arr) && i < json_array_size(arr) && i < 3; i++) {
    json_t *o = json_array_get(arr, i);
    const char *dt = json_string_value(json_object_get(o, "dtype")), *plan = json_string_value(json_object_get(o, "plan"));
    CHECK(json_integer_value(json_object_get(o, "d")) == 24 && json_integer_value(json_object_get(o, "d_v")) == 40,
          "--dv row %zu: d, d_v", i);
    CHECK(dt && strcmp(dt, dts[i]) == 0, "--dv row %zu: dtype %s, want %s", i, dt ? dt : "(null)", dts[i]);
    CHECK(plan && strstr(plan, "d_v=40") && strstr(plan, dts[i]), "--dv row %zu: plan '%s'", i, plan ? plan : "");
    const double tol = i == 0 ? 1e-5 : 1e-2;
    json_t *ref = json_object_get(o, "ref_error"), *rel = json_object_get(o, "rel_error");
    CHECK(json_is_number(ref) && json_number_value(ref) <= tol, "--dv row %zu: ref_error %g", i,
          json_number_value(ref));
    CHECK(json_is_number(rel) && json_number_value(rel) <= tol, "--dv row %zu: rel_error %g", i,
          json_number_value(rel));
    CHECK(json_number_value(json_object_get(o, "plan_ms")) > 0, "--dv row %zu: plan_ms", i);
  }
  json_decref(arr);

  /* grouped-query decode: "heads_kv" in the row, the packed plan agrees with fp64, and kv_gbs counts K and V once
   * per KV head (bytes over the plan's time) */
  snprintf(cmd, sizeof cmd,
           "'%s' bench --n 1 --n-kv 300 --d 24 --heads 8 --heads-kv 2 --reps 1 --time-cap 0.2 --db '%s' --json", argv[1],
           argv[2]);
  arr = bench_rows(cmd, 1, "--heads-kv");
  if (json_is_array(arr) && json_array_size(arr) == 1) {
    json_t *o = json_array_get(arr, 0);
    const double ms = json_number_value(json_object_get(o, "plan_ms")), gbs = json_number_value(json_object_get(o, "kv_gbs"));
    CHECK(json_integer_value(json_object_get(o, "heads_kv")) == 2, "--heads-kv: heads_kv");
    CHECK(json_number_value(json_object_get(o, "ref_error")) <= 1e-5, "--heads-kv: ref_error %g",
          json_number_value(json_object_get(o, "ref_error")));
    CHECK(ms > 0 && fabs(gbs * ms * 1e6 - 2.0 * 300 * 48 * 4) <= 1e-3 * 2.0 * 300 * 48 * 4, /* JSON's digits */
          "--heads-kv: kv_gbs %g at %g ms is not 2 KV heads' K and V", gbs, ms);
  }
  json_decref(arr);

  /* the database bench read: its path in every row and in the header; none: said so */
  char db[4096];
  snprintf(db, sizeof db, "%s.model.db", argv[2]);
  remove(db);
  snprintf(cmd, sizeof cmd, "'%s' --gpu A100 --d 32 --n 64 --budget 1 --db '%s' >/dev/null", argv[1], db);
  CHECK(run_cmd(cmd, NULL) == 0, "%s", cmd);
  snprintf(cmd, sizeof cmd, "'%s' bench --n 64 --d 32 --reps 1 --time-cap 0.05 --no-blas --db '%s' --json", argv[1], db);
  arr = bench_rows(cmd, 1, "--db");
  if (json_is_array(arr) && json_array_size(arr) == 1) {
    const char *got = json_string_value(json_object_get(json_array_get(arr, 0), "database"));
    CHECK(got && !strcmp(got, db), "database: %s, want %s", got ? got : "(null)", db);
  }
  json_decref(arr);
  snprintf(cmd, sizeof cmd, "'%s' bench --n 64 --d 32 --reps 1 --time-cap 0.05 --no-blas --db '%s'", argv[1], db);
  st = run_cmd(cmd, &out);
  char want[4200];
  snprintf(want, sizeof want, "\ndatabase: %s\n", db);
  CHECK(st == 0 && out && strstr(out, want), "the text names the database:\n%s", out ? out : "");
  free(out);
  snprintf(cmd, sizeof cmd, "'%s' bench --n 64 --d 32 --reps 1 --time-cap 0.05 --no-blas --db '%s'", argv[1], argv[2]);
  st = run_cmd(cmd, &out);
  CHECK(st == 0 && out && strstr(out, "\nno database: untuned defaults"), "the text says there was none:\n%s",
        out ? out : "");
  free(out);
  remove(db);

  static const char *bad[] = {"--n 64..x --d 64", "--n 1 --d 64 --heads 6 --heads-kv 4",
                              "--n 1 --d 64 --heads 2 --heads-kv 2 --target cuda", "--d 64", "--n 64", "--n 64 --d 64 --reps 0",
                              "--n 64 --d 64 --target tpu", "--n 64 --d 64 --frobnicate", "--n 256..64 --d 64",
                              "--n 1 --d 64 --split 0", "--n 1 --d 64 --split 65", "--n 1 --d 64 --n-kv x",
                              "--n 1 --d 64 --split 2 --target cuda", "--n 64 --d 64 --time-cap -1",
                              "--n 64 --d 64 --time-cap x", "--n 64 --d 577", "--n 64 --d 64 --dv 577",
                              "--n 64 --d 64 --dv 0", "--n 64 --d 64 --dtype f8", "--n 64 --d 64 --dv 32 --target cuda"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    snprintf(cmd, sizeof cmd, "'%s' bench %s --db '%s' 2>/dev/null", argv[1], bad[i], argv[2]);
    st = run_cmd(cmd, NULL);
    CHECK(st == 2, "'bench %s' exited %d, expected 2 (usage)", bad[i], st);
  }
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
