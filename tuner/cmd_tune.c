/* cmd_tune.c: `attntune [tune]`: for every (dtype, causal, d, d_v, n) asked for, builds the search space, runs a
 * strategy over it and stores each evaluation as it is made: measured on this CPU (--gpu cpu) or, for a GPU that
 * is not present, ranked by the performance model (provenance "model"); the GPU present is measured. A rerun of the same command skips what is
 * stored, so SIGINT loses at most the measurement in flight.
 * Here: the arguments and every problem's checks; the run is tune_run.c and its parts (tune.h). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cmds.h"
#include "range.h"
#include "shard.h"
#include "space.h"
#include "strategy_find.h"
#include "tune.h"

static const char tune_usage[] =
    "usage: attntune [tune] --gpu NAME|cpu --d RANGE [--dv RANGE] [--n RANGE] [--n-kv RANGE] [--algo LIST]\n"
    "                [--strategy NAME|FILE.lua] [--budget K] [--tolerance EPS] [--db PATH] [--model] [--jobs J]\n"
    "                [--dtype LIST] [--causal 0,1] [--heads H] [--heads-kv G] [--batch B] [--reps R] [--time-cap S] [--remeasure]\n"
    "                [--compiled] [--shard K/N] [--pass fwd,bwd] [--nondeterministic] [--page-size P | --varlen LENS]\n"
    "                [--window W] [--softcap C] [--alibi]\n"
    "  RANGE: 64..256 (doubling), 64..256:32 (step), 64,80,128 (list), 64\n"
    "  --d RANGE head dimension of Q and K; --dv RANGE head dimension of V and O (default: the same as d; every d\n"
    "  with every d_v): each in 1..576 (tiles that do not fit a GPU's shared memory are left out of its space)\n"
    "  --gpu (required) cpu measures this CPU, --gpu NAME the GPU present; one that is not present is ranked by\n"
    "  the performance model (attntune gpus lists the names; a variant's name, H100-SXM, is taken as its entry\n"
    "  with a note)\n"
    "  --n RANGE query rows (default 1024); --n-kv RANGE keys per head (default: n; every n with every n_kv):\n"
    "  decode (n below 64) and cross-attention are tuned under their own key; every problem (each dtype, causal,\n"
    "  d, d_v, n and n_kv with every other) is checked before anything runs, at most 65536 in one command\n"
    "  --algo flash,smallcache,lowrank (default flash; lowrank needs --tolerance > 0)\n"
    "  --strategy exhaustive|random|anneal|genetic|bayes|guided|FILE.lua (default: exhaustive\n"
    "  when the budget covers the space)\n"
    "  --budget K: configurations evaluated per problem (default: CPU 24, a GPU the whole space)\n"
    "  --dtype LIST of f32, f16, bf16 (default: cpu f32, GPU f16,bf16); --causal 0,1; --heads H (cpu 2, GPU 16);\n"
    "  --heads-kv G: K/V heads (grouped-query attention: H a multiple of G; default H), tuned under their own key,\n"
    "  which plans with the nearest ratio H/G are served; --batch B (1);\n"
    "  --reps R: at least R timed repetitions per configuration (default 5; more until the median is known within\n"
    "  2% or --time-cap S seconds are spent, default 1); the best few and the untuned default are then re-timed\n"
    "  interleaved (up to 4 S), and a configuration replaces the default only when it wins beyond the noise\n"
    "  --remeasure: time again what is stored (a rerun otherwise skips it); --jobs J parallel compiles;\n"
    "  --compiled: for the performance model, compile every candidate with NVRTC (J at a time, kept in the\n"
    "  database) and rule out and rank by its real registers, spills and shared memory (without it: those the\n"
    "  database already holds, else an estimate)\n"
    "  --shard K/N: only part K of N (1..N) of the problems, each problem whole in one part, the parts balanced by\n"
    "  size; run the N parts with the same other arguments (e.g. a job array) and `attntune merge` their\n"
    "  databases: the rows of one unsharded run\n"
    "  --pass fwd,bwd: the forward (fwd, the default), the backward (bwd: attn_plan_create_backward's flash kernel;\n"
    "  its Br and Bc tuned apart from the forward's; on the CPU and on the GPU present each configuration checked\n"
    "  against the fp64 backward and timed (CUDA: by events); a GPU that is not present, or --model, ranked by the\n"
    "  performance model), or both: each pass of each problem is its own problem, stored under its own key\n"
    "  --nondeterministic: a GPU's backward space also holds dQ summed by fp32 atomics (dq=atomic: faster, dQ's last\n"
    "  bits vary from run to run); only plans made with attn_problem.nondeterministic = 1 are served those rows\n"
    "  --page-size P: paged KV cache (attn_execute_paged, vLLM's layout): pages of P tokens in shuffled order, every\n"
    "  sequence n_kv keys (decode: --n 1); rows of variant paged=P, which serve plans made with page_size P\n"
    "  --varlen LENS: a packed variable-length batch (attn_execute_varlen): LENS a comma list of sequences, each Q\n"
    "  (Q queries and Q keys) or Q:KV, e.g. 1,17,300:1024; it sets the batch (their count), n and n_kv (their\n"
    "  maxima) in place of --batch, --n, --n-kv; rows of variant varlen, which serve plans made with varlen 1.\n"
    "  Both: forward only. --gpu cpu: flash and smallcache, each configuration measured and checked against fp64\n"
    "  per sequence; --gpu NAME: flash, measured on the GPU present (the layout's kernel on device buffers, checked\n"
    "  against fp64 per sequence, not counted), else ranked by the performance model (the layout's kernel: paged\n"
    "  decode's page runs, varlen's query tiles per sequence)\n"
    "  --window W, --softcap C, --alibi: score modifiers (attn_problem.window, .softcap, .alibi_slopes), each problem\n"
    "  tuned with them under its own key: rows of variant window=W, softcap=C, alibi (joined by ','), which serve the\n"
    "  plans made with the same window and cap and with ALiBi on (any slopes), never those without. W: keys, > 0 (a\n"
    "  problem whose rows all see their keys within W is the one without a window, as its plans are, and tuned so);\n"
    "  C > 0, finite (scores become C*tanh(s/C)); --alibi: the standard slopes of the H query heads, 2^(-8(i+1)/H)\n"
    "  for a power-of-two H, else the ALiBi paper's: those of the largest power of two P below H, then the\n"
    "  odd-indexed of 2P's. Any layout, GQA, d_v, causal; each kernel applies them and is checked against the fp64\n"
    "  reference that does (or ranked by the model: windows' visited key blocks; softcap and ALiBi cost it nothing).\n"
    "  Left out, with the reason: the algorithms that cannot apply them (lowrank; smallcache on a GPU); a GPU's\n"
    "  --pass bwd is refused (the CUDA backward applies none; the CPU's does)\n"
    "  --db PATH (default $ATTN_DB, else $XDG_CACHE_HOME/attntune/attntune.db, else ~/.cache/attntune/attntune.db)\n";

/* Problems one command tunes at most: each holds its search space for the whole run, and a model run of this many
 * takes about an hour; a larger sweep is a mistake in a range, or several commands. */
#define ATTN_TUNE_MAX_PROBLEMS 65536

/* --varlen LENS: a comma list of sequences, each Q (as many keys) or Q:KV, at most ATTN_VARLEN_MAX of them, at least
 * one query and one key in all: 0 with the lists malloc'd, else -1 with a one-line reason. */
#define ATTN_VARLEN_MAX 4096
#define ATTN_VARLEN_LEN_MAX (1 << 24)
static int varlen_parse(const char *s, int **q, int **kv, int *count, char *err, size_t elen) {
  *q = *kv = NULL;
  *count = 0;
  int cap = 1;
  for (const char *t = s; *t; t++) cap += *t == ',';
  if (cap > ATTN_VARLEN_MAX) {
    snprintf(err, elen, "--varlen %s: more than %d sequences", s, ATTN_VARLEN_MAX);
    return -1;
  }
  int *a = malloc(sizeof *a * (size_t)cap), *b = malloc(sizeof *b * (size_t)cap);
  if (!a || !b) {
    free(a), free(b);
    snprintf(err, elen, "out of memory");
    return -1;
  }
  long most_q = 0, most_kv = 0;
  const char *p = s;
  for (int i = 0; i < cap; i++) {
    long v[2];
    int parts = 0;
    for (;;) {
      if (*p < '0' || *p > '9') goto bad; /* no sign, no space: strtol would take them */
      char *end;
      errno = 0;
      v[parts] = strtol(p, &end, 10);
      if (errno || v[parts] > ATTN_VARLEN_LEN_MAX) goto bad;
      p = end;
      if (++parts == 1 && *p == ':') {
        p++;
        continue;
      }
      break;
    }
    if (parts == 1) v[1] = v[0];
    if (*p != (i + 1 < cap ? ',' : '\0')) goto bad;
    if (*p) p++;
    a[i] = (int)v[0], b[i] = (int)v[1];
    if (v[0] > most_q) most_q = v[0];
    if (v[1] > most_kv) most_kv = v[1];
  }
  if (most_q == 0 || most_kv == 0) {
    free(a), free(b);
    snprintf(err, elen, "--varlen %s: no sequence has a %s (a batch of empty sequences computes nothing)", s,
             most_q == 0 ? "query" : "key");
    return -1;
  }
  *q = a, *kv = b, *count = cap;
  return 0;
bad:
  free(a), free(b);
  snprintf(err, elen, "--varlen %s: expected a comma list of Q or Q:KV sequence lengths in 0..%d (e.g. 1,17,300:1024)",
           s, ATTN_VARLEN_LEN_MAX);
  return -1;
}

/* ALiBi's standard slopes for h query heads (Press et al., as BLOOM and MPT build them): 2^(-8(i+1)/h) when h is a
 * power of two; else those of p, the largest power of two below h, then 2^(-4(2k+1)/p) for k < h - p (every other
 * slope of 2p heads, the odd-indexed ones). */
static void alibi_slopes(int h, float *out) {
  int p = 1;
  while (p * 2 <= h) p *= 2;
  for (int i = 0; i < h; i++)
    out[i] = (float)exp2(i < p ? -8.0 * (i + 1) / p : -4.0 * (2 * (i - p) + 1) / p);
}

/* --pass's names: bit 0 the forward, bit 1 the backward */
static int pass_parse(const char *s) { return strcmp(s, "fwd") == 0 ? 0 : strcmp(s, "bwd") == 0 ? 1 : -1; }

int attn_tune_usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "attntune tune: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 2;
}

#ifndef ATTN_VERSION
#define ATTN_VERSION "0"
#endif

const char *attn_tuner_version(void);
const char *attn_tuner_version(void) { return ATTN_VERSION; }

/* The arguments into *op, every problem checked: -1 when the run goes on, else the exit status (0 after --help). */
static int tune_args(int argc, char **argv, tune_opts *op) {
  tune_opts o = {.gpu_name = NULL, .budget = 0, .jobs = 1, .heads = 0, .batch = 1, .reps = 5, .cap_s = ATTN_MEAS_CAP_S,
                .target = ATTN_TARGET_CPU};
  const char *d_s = NULL, *dv_s = NULL, *n_s = "1024", *nkv_s = NULL, *algo_s = "flash", *dtype_s = NULL,
             *causal_s = "0", *pass_s = "fwd", *varlen_s = NULL;
  int n_given = 0, batch_given = 0, alibi_given = 0;
  int i0 = argc > 0 && strcmp(argv[0], "tune") == 0 ? 1 : 0;
  for (int i = i0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      fputs(tune_usage, stdout);
      return 0;
    }
    if (strcmp(a, "--model") == 0) {
      o.force_model = 1;
      continue;
    }
    if (strcmp(a, "--remeasure") == 0) {
      o.remeasure = 1;
      continue;
    }
    if (strcmp(a, "--compiled") == 0) {
      o.compiled = 1;
      continue;
    }
    if (strcmp(a, "--nondeterministic") == 0) {
      o.nondeterministic = 1;
      continue;
    }
    if (strcmp(a, "--alibi") == 0) {
      alibi_given = 1;
      continue;
    }
    static const char *const with_value[] = {"--gpu",  "--d",     "--n",    "--algo",  "--strategy",
                                             "--budget", "--tolerance", "--db", "--jobs", "--dtype",
                                             "--causal", "--heads", "--heads-kv", "--batch", "--reps", "--n-kv",
                                             "--time-cap", "--shard", "--dv", "--pass", "--page-size",
                                             "--varlen", "--window", "--softcap"};
    int known = 0;
    for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++) known |= strcmp(a, with_value[k]) == 0;
    if (!known) return attn_tune_usage("unknown option '%s' (see attntune tune --help)", a);
    if (i + 1 >= argc) return attn_tune_usage("%s needs a value", a);
    const char *v = argv[++i];
    if (strcmp(a, "--gpu") == 0) o.gpu_name = v;
    else if (strcmp(a, "--d") == 0) d_s = v;
    else if (strcmp(a, "--dv") == 0) dv_s = v;
    else if (strcmp(a, "--n") == 0) n_s = v, n_given = 1;
    else if (strcmp(a, "--varlen") == 0) varlen_s = v;
    else if (strcmp(a, "--page-size") == 0) {
      if (attn_parse_int(v, 1, 65536, &o.page_size)) return attn_tune_usage("--page-size %s: expected 1..65536", v);
    }
    else if (strcmp(a, "--window") == 0) {
      if (attn_parse_int(v, 1, INT_MAX, &o.window))
        return attn_tune_usage("--window %s: expected a width in keys, 1..%d (no window: leave --window out)", v,
                               INT_MAX);
    } else if (strcmp(a, "--softcap") == 0) {
      char *end;
      errno = 0;
      const double c = strtod(v, &end);
      /* as the float the problem holds: one that rounds to 0 or overflows is no cap */
      if (errno || end == v || *end || !(c > 0) || !isfinite(c) || !((float)c > 0) || !isfinite((float)c))
        return attn_tune_usage("--softcap %s: expected a finite cap > 0 (scores become C*tanh(s/C))", v);
      o.softcap = (float)c;
    }
    else if (strcmp(a, "--n-kv") == 0) nkv_s = v;
    else if (strcmp(a, "--algo") == 0) algo_s = v;
    else if (strcmp(a, "--strategy") == 0) o.strategy = v;
    else if (strcmp(a, "--db") == 0) o.db_path = v;
    else if (strcmp(a, "--dtype") == 0) dtype_s = v;
    else if (strcmp(a, "--causal") == 0) causal_s = v;
    else if (strcmp(a, "--pass") == 0) pass_s = v;
    else if (strcmp(a, "--shard") == 0) {
      char serr[160];
      if (attn_shard_parse(v, &o.shard_k, &o.shard_n, serr, sizeof serr)) return attn_tune_usage("%s", serr);
    }
    else if (strcmp(a, "--budget") == 0) {
      if (attn_parse_int(v, 0, 1000000, &o.budget)) return attn_tune_usage("--budget %s: expected a count >= 1", v);
      if (o.budget == 0) return attn_tune_usage("--budget 0: nothing would be evaluated; give --budget 1 or more");
      o.budget_given = 1;
    } else if (strcmp(a, "--jobs") == 0) {
      if (attn_parse_int(v, 1, 64, &o.jobs)) return attn_tune_usage("--jobs %s: expected 1..64", v);
    } else if (strcmp(a, "--heads") == 0) {
      if (attn_parse_int(v, 1, 4096, &o.heads)) return attn_tune_usage("--heads %s: expected 1..4096", v);
    } else if (strcmp(a, "--heads-kv") == 0) {
      if (attn_parse_int(v, 1, 4096, &o.heads_kv)) return attn_tune_usage("--heads-kv %s: expected 1..4096", v);
    } else if (strcmp(a, "--batch") == 0) {
      if (attn_parse_int(v, 1, 4096, &o.batch)) return attn_tune_usage("--batch %s: expected 1..4096", v);
      batch_given = 1;
    } else if (strcmp(a, "--reps") == 0) {
      if (attn_parse_int(v, 1, 64, &o.reps)) return attn_tune_usage("--reps %s: expected 1..64", v);
    } else if (strcmp(a, "--time-cap") == 0) {
      char *end;
      errno = 0;
      o.cap_s = strtod(v, &end);
      if (errno || end == v || *end || !(o.cap_s > 0) || o.cap_s > 3600)
        return attn_tune_usage("--time-cap %s: expected seconds in (0, 3600]", v);
    } else if (strcmp(a, "--tolerance") == 0) {
      char *end;
      errno = 0;
      o.tolerance = strtod(v, &end);
      if (errno || end == v || *end || !(o.tolerance >= 0) || o.tolerance >= 1)
        return attn_tune_usage("--tolerance %s: expected a relative error in [0, 1)", v);
    }
  }
  /* no silent default: a forgotten --gpu A100 would otherwise spend the run measuring this CPU */
  if (!o.gpu_name)
    return attn_tune_usage(
        "--gpu is required: --gpu cpu measures this CPU, --gpu NAME a GPU (attntune gpus lists them)");
  if (!d_s) return attn_tune_usage("--d RANGE is required (e.g. --d 64..256)");
  char err[4096], bad[128];
  /* a serving layout: the CPU forward of the kernels attn_execute_paged and attn_execute_varlen run */
  const char *layout = o.page_size ? "--page-size" : varlen_s ? "--varlen" : NULL;
  if (o.page_size && varlen_s)
    return attn_tune_usage("--page-size and --varlen are two layouts, each tuned as its own problem: give one");
  char nbuf[16], kvbuf[16];
  if (varlen_s) {
    if (n_given || nkv_s || batch_given)
      return attn_tune_usage("--varlen sets the batch, n and n_kv (the sequences' count and longest): drop %s",
                             n_given ? "--n" : nkv_s ? "--n-kv" : "--batch");
    if (varlen_parse(varlen_s, &o.vl_q, &o.vl_kv, &o.nvl, err, sizeof err)) return attn_tune_usage("%s", err);
    int most_q = 0, most_kv = 0;
    for (int i = 0; i < o.nvl; i++) {
      if (o.vl_q[i] > most_q) most_q = o.vl_q[i];
      if (o.vl_kv[i] > most_kv) most_kv = o.vl_kv[i];
    }
    snprintf(nbuf, sizeof nbuf, "%d", most_q);
    snprintf(kvbuf, sizeof kvbuf, "%d", most_kv);
    n_s = nbuf;
    nkv_s = kvbuf;
    o.batch = o.nvl;
  }

  /* Target: this CPU, or a GPU from the spec table. */
  if (strcmp(o.gpu_name, "cpu") != 0) {
    o.gpu = attn_gpu_match(o.gpu_name, o.gpu_note, sizeof o.gpu_note, err, sizeof err);
    if (!o.gpu) return attn_tune_usage("%s", err);
    o.target = ATTN_TARGET_CUDA;
  } else if (o.force_model) {
    return attn_tune_usage("--model ranks GPU configurations: with --gpu cpu the CPU is measured");
  }

  int status = 0;
  if (attn_range_parse(d_s, &o.ds, &o.nd, err, sizeof err) != ATTN_OK) FAIL_USAGE("--d: %s", err);
  if (attn_range_parse(n_s, &o.ns, &o.nn, err, sizeof err) != ATTN_OK) FAIL_USAGE("--n: %s", err);
  if (nkv_s && attn_range_parse(nkv_s, &o.nkvs, &o.nnkv, err, sizeof err) != ATTN_OK) FAIL_USAGE("--n-kv: %s", err);
  if (dv_s && attn_range_parse(dv_s, &o.dvs, &o.ndv, err, sizeof err) != ATTN_OK) FAIL_USAGE("--dv: %s", err);
  if (!o.dvs) o.ndv = 1; /* d_v values per d (without --dv: d_v = d) */
  for (int i = 0; i < o.nd; i++)
    for (int j = 0; j < o.ndv; j++)
      if (attn_space_dims_ok(o.target, o.ds[i], o.dvs ? o.dvs[j] : 0, err, sizeof err) != 0) FAIL_USAGE("%s", err);
  if (attn_names_parse(pass_s, pass_parse, &o.passes, bad, sizeof bad))
    FAIL_USAGE("--pass: unknown pass '%s' (fwd, bwd)", bad);
  if (attn_names_parse(algo_s, attn_algo_parse_exact, &o.algos, bad, sizeof bad))
    FAIL_USAGE("--algo: unknown algorithm '%s' (flash, smallcache, lowrank)", bad);
  if (o.nondeterministic && (!(o.passes & 2) || o.target != ATTN_TARGET_CUDA))
    FAIL_USAGE("--nondeterministic admits the CUDA backward's dQ summed by fp32 atomics: give a GPU and --pass bwd "
               "(or fwd,bwd)");
  if (layout && (o.passes & 2))
    FAIL_USAGE("%s with --pass bwd: attn_execute_paged and attn_execute_varlen have no backward", layout);
  if (layout && o.target == ATTN_TARGET_CUDA && (o.algos & ATTN_ALGO_BIT(ATTN_ALGO_SMALLCACHE)))
    FAIL_USAGE("%s with --algo smallcache on a GPU: CUDA smallcache has no paged or varlen kernel (flash has)", layout);
  if (layout && (o.algos & ATTN_ALGO_BIT(ATTN_ALGO_LOWRANK)))
    FAIL_USAGE("%s with --algo lowrank: lowrank's projections need each sequence's whole dense KV (flash, "
               "smallcache)", layout);
  if ((o.algos & ATTN_ALGO_BIT(ATTN_ALGO_LOWRANK)) && o.tolerance <= 0)
    FAIL_USAGE("--algo lowrank is approximate: give --tolerance > 0 (e.g. --tolerance 0.05)");
  if (dtype_s) {
    if (attn_names_parse(dtype_s, attn_dtype_parse, &o.dtypes, bad, sizeof bad))
      FAIL_USAGE("--dtype: unknown dtype '%s' (f32, f16, bf16)", bad);
  } else {
    o.dtypes = o.target == ATTN_TARGET_CPU ? 1u << ATTN_F32 : (1u << ATTN_F16) | (1u << ATTN_BF16);
  }
  {
    /* 0 is not a positive RANGE value: the causal list is parsed by hand */
    char buf[64];
    snprintf(buf, sizeof buf, "%s", causal_s);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
      if (strcmp(t, "0") && strcmp(t, "1")) FAIL_USAGE("--causal %s: expected 0, 1 or 0,1", causal_s);
      int v = t[0] == '1';
      if (o.ncausal == 0 || o.causals[0] != v) o.causals[o.ncausal++] = v;
      if (o.ncausal == 2) break;
    }
    if (!o.ncausal) FAIL_USAGE("--causal %s: expected 0, 1 or 0,1", causal_s);
  }
  if (!o.heads) o.heads = o.target == ATTN_TARGET_CPU ? 2 : 16;
  if (o.heads_kv && o.heads % o.heads_kv)
    FAIL_USAGE("--heads-kv %d: the %d query heads must be a whole multiple of it (each K/V head serves H/G query "
               "heads)", o.heads_kv, o.heads);
  /* Score modifiers: the spaces' kernels apply them (tune_run.c); an algorithm whose kernel cannot is left out with
   * attn_spec_check's reason (said once the arguments are all good, so that a usage error stays one line) */
  char mods_note[1024] = "";
  if (o.window > 0 || o.softcap > 0 || alibi_given) {
    char names[40];
    snprintf(names, sizeof names, "%s%s%s", o.window > 0 ? "--window" : "",
             o.softcap > 0 ? (o.window > 0 ? ", --softcap" : "--softcap") : "",
             alibi_given ? (o.window > 0 || o.softcap > 0 ? ", --alibi" : "--alibi") : "");
    if ((o.passes & 2) && o.target == ATTN_TARGET_CUDA)
      FAIL_USAGE("%s with --pass bwd on a GPU: the CUDA backward applies no window, softcap or ALiBi (the CPU "
                 "backward does)", names);
    attn_dtype dt = ATTN_F32;
    while (!((o.dtypes >> dt) & 1)) dt++;
    char first[400] = "";
    size_t nl = 0;
    for (int a = ATTN_ALGO_FLASH; a <= ATTN_ALGO_LOWRANK; a++) {
      if (!(o.algos & ATTN_ALGO_BIT(a)) || !(o.passes & 1)) continue; /* the backward is flash's */
      attn_spec s = attn_spec_default((attn_algo)a, o.target, dt, o.ds[0], o.causals[0]);
      char why[400];
      if (attn_spec_check(&s, why, sizeof why) != ATTN_OK) continue; /* not the modifiers' doing: the space says */
      s.window = o.window > 0, s.softcap = o.softcap > 0, s.alibi = alibi_given;
      if (attn_spec_check(&s, why, sizeof why) == ATTN_OK) continue;
      if (!first[0]) snprintf(first, sizeof first, "%s", why);
      o.algos &= ~ATTN_ALGO_BIT(a);
      nl += (size_t)snprintf(mods_note + nl, nl < sizeof mods_note ? sizeof mods_note - nl : 0,
                             "note: --algo %s is left out: %s\n", attn_algo_name((attn_algo)a), why);
    }
    if (!o.algos) FAIL_USAGE("%s: no algorithm of --algo %s applies them (%s)", names, algo_s, first);
    if (alibi_given) {
      if (!(o.alibi = malloc(sizeof *o.alibi * (size_t)o.heads))) {
        fprintf(stderr, "attntune tune: out of memory\n");
        status = 1;
        goto out;
      }
      alibi_slopes(o.heads, o.alibi);
    }
  }
  /* a GPU's layouts: the layout's own kernel, measured where the GPU is present (tune_run.c decides) */
  if (layout && o.target == ATTN_TARGET_CUDA && !o.force_model)
    printf("note: %s on %s: the layout's own kernel, measured where %s is present, else ranked by the performance "
           "model\n", layout, o.gpu->name, o.gpu->name);

  /* The problems: every dtype, causal value, d, d_v, n and n_kv with every other, counted in 64 bits (each list has
   * at most ATTN_RANGE_MAX values, so the product cannot wrap) and capped before anything is allocated for them. */
  {
    const int nkv = o.nkvs ? o.nnkv : 1;
    const long long ndtypes = __builtin_popcount(o.dtypes), total = ndtypes * __builtin_popcount(o.passes) *
                                                                    o.ncausal * (long long)o.nd * o.ndv *
                                                                    (long long)o.nn * nkv;
    if (total > ATTN_TUNE_MAX_PROBLEMS)
      FAIL_USAGE("--pass, --dtype, --causal, --d, --dv, --n and --n-kv make %lld problems, more than the %d one run "
                 "tunes: narrow the ranges", total, ATTN_TUNE_MAX_PROBLEMS);
    /* every n with every n_kv (n_kv defaults to n) */
    const int count = o.nn * nkv;
    int *ns = malloc(sizeof *ns * (size_t)count), *kv = malloc(sizeof *kv * (size_t)count);
    if (!ns || !kv) {
      free(ns), free(kv);
      fprintf(stderr, "attntune tune: out of memory\n");
      status = 1;
      goto out;
    }
    for (int i = 0, k = 0; i < o.nn; i++)
      for (int j = 0; j < nkv; j++, k++) ns[k] = o.ns[i], kv[k] = o.nkvs ? o.nkvs[j] : o.ns[i];
    free(o.ns);
    o.ns = ns;
    o.kv = kv;
    o.nn = count;
    /* each problem within the runtime's limits (rows, elements), before anything runs: its message names the first
     * that is not (the dtype and causal value do not change the limits) */
    for (int di = 0; di < o.nd; di++)
      for (int vi = 0; vi < o.ndv; vi++)
        for (int ni = 0; ni < o.nn; ni++) {
          const attn_problem p = {.batch = o.batch, .heads = o.heads, .heads_kv = o.heads_kv, .n = o.ns[ni], .n_kv = o.kv[ni],
                                  .d = o.ds[di], .d_v = o.dvs ? o.dvs[vi] : 0, .dtype = ATTN_F32,
                                  .page_size = o.page_size, .varlen = o.nvl > 0, .window = o.window,
                                  .softcap = o.softcap, .alibi_slopes = o.alibi};
          attn_problem norm;
          if (attn_problem_normalize(NULL, &p, &norm) != ATTN_OK)
            FAIL_USAGE("%s (--n %d --n-kv %d --d %d --dv %d --heads %d --heads-kv %d --batch %d)",
                       attn_last_error(NULL), p.n, p.n_kv, p.d, p.d_v ? p.d_v : p.d, p.heads,
                       p.heads_kv ? p.heads_kv : p.heads, p.batch);
        }
  }

  /* Strategy: a built-in name, a Lua strategy by name, or a file. */
  char why[1400];
  if (o.strategy) {
    size_t sl = strlen(o.strategy);
    if (strcmp(o.strategy, "exhaustive") == 0) o.builtin = 1;
    else if (strcmp(o.strategy, "random") == 0) o.builtin = 2;
    else if (sl > 4 && strcmp(o.strategy + sl - 4, ".lua") == 0) {
      if (access(o.strategy, R_OK) != 0) FAIL_USAGE("--strategy %s: %s", o.strategy, strerror(errno));
      snprintf(o.lua_path, sizeof o.lua_path, "%s", o.strategy);
      o.builtin = 3;
    } else if (attn_strategy_find(o.strategy, o.lua_path, sizeof o.lua_path, why, sizeof why) == 0) {
      o.builtin = 3;
    } else {
      FAIL_USAGE("--strategy %s: %s", o.strategy, why);
    }
  }
  fputs(mods_note, stdout);
  *op = o;
  return -1;
out:
  free(o.ds);
  free(o.dvs);
  free(o.ns);
  free(o.nkvs);
  free(o.kv);
  free(o.vl_q);
  free(o.vl_kv);
  free(o.alibi);
  return status;
}

int attn_cmd_tune(int argc, char **argv) {
  tune_opts o;
  const int status = tune_args(argc, argv, &o);
  return status >= 0 ? status : attn_tune_run(&o, argc, argv);
}
