/* cmd_bench.c: `attntune bench`: the runtime's plan (tuned or default) against the standard three-pass attention
 * on OpenBLAS (S = Q K^T, row softmax, O = P V) on the same data, with medians of alternating runs, GFLOP/s, the
 * square-sgemm rate as the machine's ceiling, peak extra memory of each, and a cross-check of the outputs; the fp32
 * FMA peak and the read bandwidth measured in the same run (peak.c), and each result as a fraction of its ceiling.
 * Here: the arguments and the order of a CPU run; the parts are bench_cpu.c, bench_cuda.c, bench_ceiling.c and
 * bench_report.c (bench.h). */
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "artifact.h"
#include "bench.h"
#include "cmds.h"
#include "range.h"
#include "space.h"
#include "timing_env.h"

#define BENCH_CAP_S 20.0      /* default --time-cap: timed running per point beyond --reps rounds while a median is
                               * not yet known */
double attn_bench_cap_s = BENCH_CAP_S;
int attn_bench_heads_kv;

static const char bench_usage[] =
    "usage: attntune bench [--target cpu|cuda] --n RANGE --d RANGE [--heads H] [--causal] [--db PATH] [--reps R]\n"
    "                      [--dtype LIST] [--no-blas] [--json] [--n-kv RANGE] [--split LIST] [--time-cap S]\n"
    "                      [--dv RANGE] [--heads-kv HK] [--pass fwd|bwd] [--no-torch]\n"
    "                      [--serve [--batch B] [--page-size P] [--window LIST]]\n"
    "  RANGE: 64..256 (doubling), 64..256:32 (step), 64,80,128 (list)\n"
    "  --reps R: at least R interleaved rounds (default 5), more until every median is known within 2%, or\n"
    "  --time-cap S seconds of timed running per point are spent (default 20); the timing harness of `attntune\n"
    "  tune` (docs/tuning.md)\n"
    "  cpu: the plan against the untuned default and the standard algorithm on OpenBLAS (f32), on input sets\n"
    "       rotated through more than the last-level cache; vs def = default ms / plan ms; plan ms with Q, K, V\n"
    "       and O 64-byte aligned, +16B ms each 16 bytes past (what malloc returns for large blocks)\n"
    "       the fp32 FMA peak and the read bandwidth are measured first, on the kernels' threads; 'of peak':\n"
    "       prefill (n >= 64) plan GFLOP/s / FMA peak, decode (n < 64) K+V bytes per second / read bandwidth;\n"
    "       a ceiling measured under load is measured again after the points and, without a clean measurement,\n"
    "       flagged '*' (JSON ceiling_under_load)\n"
    "       the header names the database read (--db, else ATTN_DB, else the cache's), or says there was none:\n"
    "       then every plan is the untuned default (JSON database: null)\n"
    "       PyTorch's CPU attention is compared by scripts/torch_compare_cpu.py\n"
    "       --n-kv: keys per head (default n; every n with every n_kv)\n"
    "       --heads-kv: KV heads shared by the query heads (grouped-query attention; default --heads); decode's\n"
    "                bytes count K and V once per KV head\n"
    "       --dv: head dimension of V and O (default: d; every d with every d_v), d and d_v in 1..576\n"
    "       --dtype f32 (default), f16, bf16 or a list: a half dtype's plan runs on inputs converted once, the\n"
    "                baseline in fp32 on the same rounded inputs; outputs agree within 1e-2 (f32: 1e-4)\n"
    "       --split: the plan's configuration with each split-K value (1: none, up to 64), one row each, all timed in\n"
    "                alternation with the baseline\n"
    "       --pass bwd: the backward plan (attn_execute_backward) against the standard backward on OpenBLAS (P\n"
    "                materialised by the forward, four sgemm a head) and the forward plan, timed in alternation, then\n"
    "                PyTorch's CPU SDPA backward on the same shape and threads when python3 imports torch\n"
    "                (--no-torch: not); GFLOP/s count 2.5x the forward's flops, as FlashAttention does\n"
    "       --serve: the serving layouts against the dense kernel on the same data, and PyTorch (--no-torch: not):\n"
    "                paged decode (n = 1, --n-kv keys, default --n; B sequences over shuffled pages of P keys,\n"
    "                default 4 and 16) against dense decode, each as a fraction of the read bandwidth; varlen prefill\n"
    "                (B sequences of n down to n/2 rows) against one call per sequence; prefill at each --window\n"
    "                (default n/16, n/8, n/4) against none, time against the share of scores left (JSON: one row per\n"
    "                comparison, field serve: paged_decode, varlen_prefill, window_prefill)\n"
    "  cuda: the plan (tuned or default) against the default flash kernel on device buffers, CUDA events, TFLOP/s\n"
    "        against the GPU's dense peak (--dtype f16 by default; f16,bf16,f32); PyTorch's attention is compared by\n"
    "        scripts/gpu/torch_compare.py\n";

static int usage(const char *fmt, const char *arg) {
  fprintf(stderr, "attntune bench: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, " (attntune bench --help)\n");
  return 2;
}

int attn_cmd_bench(int argc, char **argv) {
  const char *n_s = NULL, *d_s = NULL, *db = NULL, *nkv_s = NULL, *split_s = NULL, *dv_s = NULL;
  int heads = 2, causal = 0, reps = 5, json = 0, no_blas = 0, bwd = 0, no_torch = 0, serve = 0;
  bench_serve_args sa = {.batch = 4, .page_size = 16};
  const char *win_s = NULL, *serve_arg = NULL;
  const char *dtype_s = NULL;
  attn_target target = ATTN_TARGET_CPU;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(bench_usage, stdout);
      return 0;
    } else if (!strcmp(a, "--causal")) {
      causal = 1;
    } else if (!strcmp(a, "--json")) {
      json = 1;
    } else if (!strcmp(a, "--no-blas")) {
      no_blas = 1;
    } else if (!strcmp(a, "--no-torch")) {
      no_torch = 1;
    } else if (!strcmp(a, "--serve")) {
      serve = 1;
    } else if (!strcmp(a, "--batch") || !strcmp(a, "--page-size") || !strcmp(a, "--window")) {
      if (!val) return usage("%s needs a value", a);
      i++;
      serve_arg = a;
      if (!strcmp(a, "--window")) win_s = val;
      else if (attn_parse_int(val, 1, !strcmp(a, "--batch") ? 64 : 1 << 20, !strcmp(a, "--batch") ? &sa.batch
                                                                                                  : &sa.page_size))
        return usage(!strcmp(a, "--batch") ? "--batch %s: expected an integer in 1..64"
                                           : "--page-size %s: expected an integer in 1..1048576", val);
    } else if (!strcmp(a, "--pass")) {
      if (!val) return usage("%s needs a value", a);
      i++;
      if (strcmp(val, "fwd") && strcmp(val, "bwd")) return usage("--pass %s: expected fwd or bwd", val);
      bwd = !strcmp(val, "bwd");
    } else if (!strcmp(a, "--target") || !strcmp(a, "--n") || !strcmp(a, "--d") || !strcmp(a, "--heads") ||
               !strcmp(a, "--db") || !strcmp(a, "--reps") || !strcmp(a, "--dtype") || !strcmp(a, "--n-kv") ||
               !strcmp(a, "--split") || !strcmp(a, "--time-cap") || !strcmp(a, "--dv") || !strcmp(a, "--heads-kv")) {
      if (!val) return usage("%s needs a value", a);
      i++;
      if (!strcmp(a, "--target")) {
        int t = attn_target_parse(val);
        if (t != ATTN_TARGET_CPU && t != ATTN_TARGET_CUDA) return usage("--target %s: expected cpu or cuda", val);
        target = (attn_target)t;
      } else if (!strcmp(a, "--n")) {
        n_s = val;
      } else if (!strcmp(a, "--d")) {
        d_s = val;
      } else if (!strcmp(a, "--dv")) {
        dv_s = val;
      } else if (!strcmp(a, "--n-kv")) {
        nkv_s = val;
      } else if (!strcmp(a, "--split")) {
        split_s = val;
      } else if (!strcmp(a, "--time-cap")) {
        char *end;
        errno = 0;
        attn_bench_cap_s = strtod(val, &end);
        if (errno || end == val || *end || !(attn_bench_cap_s >= 0) || attn_bench_cap_s > 86400)
          return usage("--time-cap %s: expected seconds in 0..86400", val);
      } else if (!strcmp(a, "--db")) {
        db = val;
      } else if (!strcmp(a, "--dtype")) {
        dtype_s = val;
      } else if (!strcmp(a, "--heads")) {
        if (attn_parse_int(val, 1, 4096, &heads)) return usage("--heads %s: expected an integer in 1..4096", val);
      } else if (!strcmp(a, "--heads-kv")) {
        if (attn_parse_int(val, 1, 4096, &attn_bench_heads_kv))
          return usage("--heads-kv %s: expected an integer in 1..4096", val);
      } else if (attn_parse_int(val, 1, 1000, &reps)) {
        return usage("--reps %s: expected an integer in 1..1000", val);
      }
    } else {
      return usage("unknown argument '%s'", a);
    }
  }
  unsigned dtypes = 0;
  if (dtype_s) {
    char buf[64];
    snprintf(buf, sizeof buf, "%s", dtype_s);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
      int v = attn_dtype_parse(t);
      if (v < 0) return usage("--dtype %s: expected f32, f16, bf16 or a list of them", dtype_s);
      dtypes |= 1u << v;
    }
    if (!dtypes) return usage("--dtype %s: expected f32, f16, bf16 or a list of them", dtype_s);
  } else {
    dtypes = target == ATTN_TARGET_CUDA ? 1u << ATTN_F16 : 1u << ATTN_F32;
  }
  if (bwd && target == ATTN_TARGET_CUDA) return usage("%s", "--pass bwd: the backward runs on the cpu only");
  if (bwd && split_s) return usage("%s", "--split applies to the forward only (the backward has no split-K)");
  if (serve && (bwd || split_s || target == ATTN_TARGET_CUDA))
    return usage("--serve: %s", bwd ? "the forward only (not --pass bwd)" : split_s ? "--split does not apply"
                                                                           : "--target cpu only");
  if (!serve && serve_arg) return usage("%s applies to --serve only", serve_arg);
  if (!n_s) return usage("%s", "--n RANGE is required");
  if (!d_s) return usage("%s", "--d RANGE is required");
  int *ns = NULL, *ds = NULL, nn = 0, nd = 0;
  char err[256];
  if (attn_range_parse(n_s, &ns, &nn, err, sizeof err) != ATTN_OK) return usage("--n: %s", err);
  if (attn_range_parse(d_s, &ds, &nd, err, sizeof err) != ATTN_OK) {
    free(ns);
    return usage("--d: %s", err);
  }
  if (target == ATTN_TARGET_CUDA && (nkv_s || split_s || dv_s || attn_bench_heads_kv)) {
    free(ns);
    free(ds);
    return usage("%s applies to --target cpu only",
                 nkv_s ? "--n-kv" : split_s ? "--split" : dv_s ? "--dv" : "--heads-kv");
  }
  if (attn_bench_heads_kv > heads || (attn_bench_heads_kv && heads % attn_bench_heads_kv)) {
    char hk[16];
    snprintf(hk, sizeof hk, "%d", attn_bench_heads_kv);
    free(ns);
    free(ds);
    return usage("--heads-kv %s: must divide --heads", hk);
  }
  int *dvs = NULL, ndv = 0;
  if (dv_s && attn_range_parse(dv_s, &dvs, &ndv, err, sizeof err) != ATTN_OK) {
    free(ns);
    free(ds);
    return usage("--dv: %s", err);
  }
  for (int i = 0; i < nd && target == ATTN_TARGET_CPU; i++)
    for (int j = 0; j < (dvs ? ndv : 1); j++)
      if (attn_space_dims_ok(ATTN_TARGET_CPU, ds[i], dvs ? dvs[j] : 0, err, sizeof err) != 0) {
        free(ns), free(ds), free(dvs);
        return usage("%s", err);
      }
  int *nkvs = NULL, nnkv = 0, *splits = NULL, nsplit = 0;
  if (nkv_s && attn_range_parse(nkv_s, &nkvs, &nnkv, err, sizeof err) != ATTN_OK) {
    free(ns);
    free(ds);
    free(dvs);
    return usage("--n-kv: %s", err);
  }
  if (split_s) {
    int bad = attn_range_parse(split_s, &splits, &nsplit, err, sizeof err) != ATTN_OK;
    if (!bad && nsplit > BENCH_MAX_SPLITS) snprintf(err, sizeof err, "more than %d values", BENCH_MAX_SPLITS), bad = 1;
    for (int i = 0; i < nsplit && !bad; i++)
      if (splits[i] > 64) snprintf(err, sizeof err, "%d is not in 1..64", splits[i]), bad = 1;
    if (bad) {
      free(ns), free(ds), free(nkvs), free(splits), free(dvs);
      return usage("--split: %s", err);
    }
  }
  int *wins = NULL, nwin = 0;
  if (win_s && attn_range_parse(win_s, &wins, &nwin, err, sizeof err) != ATTN_OK) {
    free(ns), free(ds), free(nkvs), free(splits), free(dvs);
    return usage("--window: %s", err);
  }
  if (serve && dvs) {
    free(ns), free(ds), free(nkvs), free(splits), free(dvs), free(wins);
    return usage("%s", "--serve: --dv does not apply (d_v = d)");
  }
  if (target == ATTN_TARGET_CUDA) {
    int rc = attn_bench_cuda(db, ns, nn, ds, nd, heads, causal, reps, dtypes, json);
    free(ns);
    free(ds);
    return rc;
  }
  attn_timing_env("bench", json);
  /* Large buffers straight from mmap and back to the system on free, so that each memory probe starts clean. */
  mallopt(M_MMAP_THRESHOLD, 1 << 20);

  attn_runtime *rt = NULL;
  int e = attn_open(db, target, &rt);
  if (e != ATTN_OK) {
    fprintf(stderr, "attntune bench: cannot open the runtime: %s: %s\n", attn_strerror(e), attn_last_error(rt));
    free(ns), free(ds), free(nkvs), free(splits), free(dvs), free(wins);
    return 1;
  }
  if (attn_cache_dir_ready(rt) == ATTN_OK && rt->cache_note[0]) fprintf(stderr, "attntune bench: %s\n", rt->cache_note);
  attn_peak pk;
  attn_bench_ceilings(rt->threads, reps, &pk);
  if (serve) {
    sa.heads = heads, sa.heads_kv = attn_bench_heads_kv, sa.causal = causal, sa.reps = reps, sa.no_torch = no_torch;
    sa.windows = wins, sa.nwindows = nwin;
    int src = attn_bench_serve(rt, &pk, &sa, ns, nn, nkvs, nnkv, ds, nd, dtypes, json);
    fflush(stdout);
    attn_close(rt);
    free(ns), free(ds), free(nkvs), free(splits), free(dvs), free(wins);
    return src;
  }
  bench_row *all = NULL;
  int nall = 0, capall = 0, rc = 0;
  for (int t = 0; t < 3; t++)
    for (int i = 0; (dtypes >> t) & 1 && i < nn; i++)
      for (int kv = 0; kv < (nkvs ? nnkv : 1); kv++)
        for (int j = 0; j < nd * (dvs ? ndv : 1); j++) {
          const int d = ds[dvs ? j / ndv : j], dv = dvs ? dvs[j % ndv] : d;
          if (nall + BENCH_MAX_SPLITS > capall) {
            int cap = capall ? 2 * capall : 4 * BENCH_MAX_SPLITS;
            bench_row *x = realloc(all, sizeof *x * (size_t)cap);
            if (!x) {
              fprintf(stderr, "attntune bench: out of memory for the rows\n");
              rc = 1;
              goto points_done;
            }
            all = x, capall = cap;
          }
          int nrows = 0;
          if (bwd) {
            if (attn_bench_point_bwd(rt, ns[i], nkvs ? nkvs[kv] : ns[i], d, dv, (attn_dtype)t, heads, causal, reps,
                                     no_blas, no_torch, all + nall))
              rc = 1;
            else
              nrows = 1;
          } else if (attn_bench_point(rt, ns[i], nkvs ? nkvs[kv] : ns[i], d, dv, (attn_dtype)t, heads, causal, reps,
                                      no_blas, splits, nsplit, all + nall, &nrows)) {
            rc = 1;
          }
          nall += nrows;
        }
points_done:;
  const int flagged = attn_bench_ceilings_again(rt->threads, reps, &pk, all, nall);
  if ((bwd ? attn_bench_report_bwd(rt, &pk, all, nall, reps, causal, flagged, json)
           : attn_bench_report(rt, &pk, all, nall, reps, causal, flagged, json)))
    rc = 1;
  fflush(stdout);
  free(all);
  attn_close(rt);
  free(ns), free(ds), free(nkvs), free(splits), free(dvs), free(wins);
  return rc;
}
