/* bench_serve.c: `attntune bench --serve`: the serving layouts against the dense kernel on the same data (CPU).
 *  - paged decode: attn_execute_paged over pages in shuffled order against attn_execute on the same K and V laid out
 *    densely, timed in alternation; K+V bytes per second of each as a fraction of the read bandwidth measured in the
 *    same run, and paged's fraction over dense's (the aim: within 10%);
 *  - varlen prefill: one attn_execute_varlen over packed sequences of different lengths against one attn_execute per
 *    sequence on the same rows laid out densely;
 *  - windowed prefill: the problem at each --window and without one, the time against the share of scores the window
 *    leaves (time proportional to the window, not to n_kv);
 *  - PyTorch's CPU SDPA on the same shapes and threads: dense decode and decode after gathering the pages by the block
 *    table (torch has no paged kernel), varlen as a loop of per-sequence calls and as one call with a block-diagonal
 *    mask, windows by an explicit band mask and by flex_attention's sliding-window block mask when torch has it.
 * Every output is checked: paged and varlen against the dense kernel's, and dense against fp64 rows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bench.h"
#include "db.h"
#include "measure.h"

#define SERVE_TOL_F32 1e-4
#define SERVE_TOL_HALF 2e-2

/* One timed function per side; set: the input set to use. Returns 0, or 1 after printing the reason. */
typedef int (*serve_fn)(void *ctx, int side, int set);

typedef struct serve_timer {
  serve_fn fn;
  void *ctx;
  int sets;
  unsigned long long runs;
  attn_sched_probe sp;
} serve_timer;

static int serve_run(void *user, int side, int timed, double *ms, double *delay) {
  (void)timed;
  serve_timer *t = user;
  const int set = (int)(t->runs++ % (unsigned long long)t->sets);
  const double d0 = attn_sched_delay_ms(&t->sp), t0 = bench_now_s();
  if (t->fn(t->ctx, side, set)) return 1;
  *ms = (bench_now_s() - t0) * 1e3;
  const double d1 = attn_sched_delay_ms(&t->sp);
  *delay = d0 >= 0 && d1 >= 0 ? d1 - d0 : -1;
  return 0;
}

/* The sides timed in alternation by bench's harness (attn_bench_caps); the load of other processes meanwhile. */
static int serve_time(int threads, int reps, int sides, serve_fn fn, void *ctx, int sets, attn_timing_stats *st,
                      double *load, int *rounds) {
  attn_rounds_caps caps;
  attn_bench_caps(reps, threads, &caps);
  serve_timer t = {.fn = fn, .ctx = ctx, .sets = sets};
  attn_rounds_out ro;
  attn_load_probe lp;
  attn_sched_open(&t.sp);
  attn_load_start(&lp);
  const int r = attn_rounds(&caps, sides, serve_run, &t, st, &ro);
  attn_sched_close(&t.sp);
  *load = attn_load_end(&lp);
  *rounds = ro.rounds;
  return r;
}

/* PyTorch's side: one script, one mode per call, "ms KEY VALUE" lines and "torch VERSION" (or "skip REASON"). */
static const char torch_py[] =
    "mode = sys.argv[1]\n"
    "a = [int(x) for x in sys.argv[2:12]]\n"
    "b, h, hk, n, nkv, d, causal, ps, threads, reps = a\n"
    "extra = [int(x) for x in sys.argv[13:]] if len(sys.argv) > 13 else []\n"
    "dt = {'f32': torch.float32, 'f16': torch.float16, 'bf16': torch.bfloat16}[sys.argv[12]]\n"
    "torch.set_num_threads(threads)\n"
    "g = torch.Generator().manual_seed(1)\n"
    "r = lambda *s: (torch.rand(*s, generator=g) * 2 - 1).to(dt)\n"
    "gqa = {'enable_gqa': True} if hk != h else {}\n"
    "print('torch %s' % torch.__version__)\n"
    "def med(f):\n"
    "    f()\n"
    "    ts = []\n"
    "    for i in range(reps):\n"
    "        t0 = time.perf_counter(); f(); ts.append((time.perf_counter() - t0) * 1e3)\n"
    "    return statistics.median(ts)\n"
    "if mode == 'paged':\n"
    "    q, k, v = r(b, h, 1, d), r(b, hk, nkv, d), r(b, hk, nkv, d)\n"
    "    npg = (nkv + ps - 1) // ps\n"
    "    kp, vp = r(b * npg, ps, hk, d), r(b * npg, ps, hk, d)\n"
    "    table = torch.randperm(b * npg, generator=g).reshape(b, npg)\n"
    "    print('ms sdpa_dense %.6f' % med(lambda: F.scaled_dot_product_attention(q, k, v, **gqa)))\n"
    "    def gathered():\n"
    "        kk = kp[table].reshape(b, npg * ps, hk, d)[:, :nkv].transpose(1, 2)\n"
    "        vv = vp[table].reshape(b, npg * ps, hk, d)[:, :nkv].transpose(1, 2)\n"
    "        return F.scaled_dot_product_attention(q, kk, vv, **gqa)\n"
    "    print('ms sdpa_gather %.6f' % med(gathered))\n"
    "elif mode == 'varlen':\n"
    "    lens = extra\n"
    "    tot = sum(lens)\n"
    "    q, k, v = r(1, h, tot, d), r(1, hk, tot, d), r(1, hk, tot, d)\n"
    "    starts = [sum(lens[:i]) for i in range(len(lens))]\n"
    "    def loop():\n"
    "        for s, l in zip(starts, lens):\n"
    "            F.scaled_dot_product_attention(q[:, :, s:s + l], k[:, :, s:s + l], v[:, :, s:s + l], is_causal=bool(causal), **gqa)\n"
    "    print('ms sdpa_loop %.6f' % med(loop))\n"
    "    seq = torch.repeat_interleave(torch.arange(len(lens)), torch.tensor(lens))\n"
    "    pos = torch.arange(tot)\n"
    "    mask = seq.unsqueeze(1) == seq.unsqueeze(0)\n"
    "    if causal: mask &= pos.unsqueeze(0) <= pos.unsqueeze(1)\n"
    "    print('ms sdpa_mask %.6f' % med(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **gqa)))\n"
    "elif mode == 'window':\n"
    "    q, k, v = r(1, h, n, d), r(1, hk, n, d), r(1, hk, n, d)\n"
    "    i = torch.arange(n).unsqueeze(1); j = torch.arange(n).unsqueeze(0)\n"
    "    try:\n"
    "        from torch.nn.attention.flex_attention import flex_attention, create_block_mask\n"
    "        flex = torch.compile(flex_attention)\n"
    "    except Exception:\n"
    "        flex = None\n"
    "    for w in extra:\n"
    "        band = (j <= i) & (j > i - w) if causal else (j - i).abs() < w\n"
    "        if w <= 0: band = (j <= i) if causal else None\n"
    "        print('ms sdpa_mask_%d %.6f' % (w, med(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=band, **gqa))))\n"
    "        if flex is None: continue\n"
    "        def mm(bb, hh, qi, kj, w=w):\n"
    "            m = (kj <= qi) if causal else (qi >= 0)\n"
    "            if w > 0: m = m & ((kj > qi - w) if causal else ((qi - kj).abs() < w))\n"
    "            return m\n"
    "        try:\n"
    "            bm = create_block_mask(mm, None, None, n, n, device='cpu')\n"
    "            kw = {'enable_gqa': True} if hk != h else {}\n"
    "            print('ms flex_%d %.6f' % (w, med(lambda: flex(q, k, v, block_mask=bm, **kw))))\n"
    "        except Exception as e:\n"
    "            print('note flex_attention failed: %s' % type(e).__name__); flex = None\n";

typedef struct torch_out {
  char version[32];
  char keys[16][32];
  double ms[16];
  int count;
  const char *note; /* why there is nothing, or NULL */
} torch_out;

static double torch_ms(const torch_out *t, const char *key) {
  for (int i = 0; i < t->count; i++)
    if (!strcmp(t->keys[i], key)) return t->ms[i];
  return -1;
}

/* One line of the script's output: a time, its torch version, or anything else (kept: the last says what failed). */
typedef struct {
  torch_out *out;
  char last[512];
} torch_lines;

static void torch_line(void *user, const char *line) {
  torch_lines *t = user;
  torch_out *out = t->out;
  char key[32];
  double ms;
  if (sscanf(line, "ms %31s %lf", key, &ms) == 2 && out->count < 16) {
    snprintf(out->keys[out->count], sizeof out->keys[0], "%s", key);
    out->ms[out->count++] = ms;
  } else if (!strncmp(line, "torch ", 6)) {
    sscanf(line + 6, "%31s", out->version);
  } else {
    snprintf(t->last, sizeof t->last, "%s", line);
  }
}

/* Runs the script in one mode; extra: a list of integers (varlen's lengths, the windows). */
static void torch_run(const char *mode, int b, int h, int hk, int n, int nkv, int d, int causal, int ps, int threads,
                      int reps, attn_dtype dt, const int *extra, int nextra, torch_out *out) {
  memset(out, 0, sizeof *out);
  char args[2048];
  int len = snprintf(args, sizeof args, "%s %d %d %d %d %d %d %d %d %d %d %s", mode, b, h, hk, n, nkv, d, causal, ps,
                     threads, reps, attn_dtype_name(dt));
  for (int i = 0; i < nextra && len > 0 && (size_t)len < sizeof args - 16; i++)
    len += snprintf(args + len, sizeof args - (size_t)len, " %d", extra[i]);
  torch_lines t = {.out = out, .last = ""};
  int st;
  if (attn_bench_python(torch_py, "serve", args, torch_line, &t, &st) != 0) {
    out->note = "skipped: cannot write its script";
    return;
  }
  const char *last = t.last;
  if (!strncmp(last, "skip torch not importable", 25)) out->note = "skipped: python3 cannot import torch";
  else if (st != 0) {
    out->note = "failed (python3 exited with an error)";
    fprintf(stderr, "attntune bench: PyTorch (%s): %s", mode, last);
  } else if (last[0]) {
    fprintf(stderr, "attntune bench: PyTorch (%s): %s", mode, last);
  }
}

/* Elements of fp32 x (random, rounded through dt) converted into dst's dtype. */
static void fill_dt(attn_dtype dt, float *x, size_t cnt, unsigned long long seed, void *dst) {
  attn_fill_random(x, cnt, seed);
  attn_round_dtype(dt, x, cnt);
  attn_to_dtype(dt, x, cnt, dst);
}

/* ---------------------------------------------------------------- paged decode */

typedef struct paged_ctx {
  attn_plan *dense, *paged;
  void *q, *o;
  char **k, **v, **kp, **vp; /* per input set: dense [batch][heads_kv][n_kv][d] and pages [num][ps][heads_kv][d] */
  int *table, *lens, num_pages, page_size, max_pages;
} paged_ctx;

static int paged_fn(void *user, int side, int set) {
  paged_ctx *c = user;
  const int e = side == 0 ? attn_execute(c->dense, c->q, c->k[set], c->v[set], c->o)
                          : attn_execute_paged(c->paged, c->q, c->kp[set], c->vp[set], c->num_pages, c->page_size,
                                               c->table, c->max_pages, c->lens, c->o);
  if (e != ATTN_OK) fprintf(stderr, "attntune bench: paged decode: %s\n", attn_last_error(NULL));
  return e != ATTN_OK;
}

static int serve_paged(attn_runtime *rt, const attn_peak *pk, const bench_serve_args *a, int n_kv, int d,
                       attn_dtype dt, json_t *rows) {
  const int B = a->batch, H = a->heads, HK = a->heads_kv ? a->heads_kv : a->heads, P = a->page_size;
  attn_problem p = {.batch = B, .heads = H, .heads_kv = HK, .n = 1, .n_kv = n_kv, .d = d, .dtype = dt};
  attn_problem pp = p;
  pp.page_size = P;
  const size_t es = attn_dtype_size(dt);
  const size_t nq = (size_t)B * H * d, nkv = (size_t)B * HK * n_kv * d;
  const int per = (n_kv + P - 1) / P;
  paged_ctx c = {.page_size = P, .max_pages = per, .num_pages = B * per};
  const size_t pbytes = (size_t)c.num_pages * P * HK * d * es;
  const int sets = attn_meas_cold_sets(2.0 * (double)(nkv * es + pbytes));
  float *x = malloc(sizeof(float) * nkv), *y = malloc(sizeof(float) * nkv);
  float *od = malloc(sizeof(float) * nq), *op = malloc(sizeof(float) * nq);
  c.q = malloc(nq * es), c.o = malloc(nq * es);
  c.k = calloc((size_t)sets, sizeof(char *)), c.v = calloc((size_t)sets, sizeof(char *));
  c.kp = calloc((size_t)sets, sizeof(char *)), c.vp = calloc((size_t)sets, sizeof(char *));
  c.table = malloc(sizeof(int) * (size_t)c.num_pages), c.lens = malloc(sizeof(int) * (size_t)B);
  float *qf = malloc(sizeof(float) * nq);
  int rc = 1, ok = x && y && od && op && c.q && c.o && c.k && c.v && c.kp && c.vp && c.table && c.lens && qf;
  for (int s = 0; ok && s < sets; s++) {
    c.k[s] = malloc(nkv * es), c.v[s] = malloc(nkv * es), c.kp[s] = malloc(pbytes), c.vp[s] = malloc(pbytes);
    ok = c.k[s] && c.v[s] && c.kp[s] && c.vp[s];
  }
  if (!ok) {
    fprintf(stderr, "attntune bench: out of memory for paged decode at n_kv=%d d=%d\n", n_kv, d);
    goto done;
  }
  /* pages in shuffled order (a fixed permutation), each sequence full: the same work as dense */
  for (int i = 0; i < c.num_pages; i++) c.table[i] = i;
  unsigned long long r = 88172645463325252ULL;
  for (int i = c.num_pages - 1; i > 0; i--) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    const int j = (int)(r % (unsigned long long)(i + 1)), t = c.table[i];
    c.table[i] = c.table[j], c.table[j] = t;
  }
  for (int b = 0; b < B; b++) c.lens[b] = n_kv;
  fill_dt(dt, qf, nq, 11, c.q);
  const size_t row = (size_t)d * es;
  /* set 0 last: its fp32 K and V stay in x and y for the check */
  for (int s = sets - 1; s >= 0; s--)
    for (int which = 0; which < 2; which++) {
      char *dense = which ? c.v[s] : c.k[s], *pages = which ? c.vp[s] : c.kp[s];
      fill_dt(dt, which ? y : x, nkv, 100 + 2 * (unsigned long long)s + which, dense);
      memset(pages, 0, pbytes);
      for (int b = 0; b < B; b++)
        for (int h = 0; h < HK; h++)
          for (int t = 0; t < n_kv; t++) {
            const size_t pr = ((size_t)c.table[b * per + t / P] * P + (size_t)(t % P)) * HK + (size_t)h;
            memcpy(pages + pr * row, dense + (((size_t)b * HK + h) * n_kv + t) * row, row);
          }
    }
  if (attn_plan_create(rt, &p, &c.dense) != ATTN_OK || attn_plan_create(rt, &pp, &c.paged) != ATTN_OK) {
    fprintf(stderr, "attntune bench: paged decode at n_kv=%d d=%d: %s\n", n_kv, d, attn_last_error(rt));
    goto done;
  }
  /* checks on set 0: dense against fp64 rows, paged against dense */
  double ref = INFINITY, diff = INFINITY;
  if (paged_fn(&c, 0, 0) == 0) {
    attn_from_dtype(dt, c.o, nq, od);
    attn_problem np;
    if (attn_problem_normalize(rt, &p, &np) == ATTN_OK) ref = attn_bench_ref_error(&np, qf, x, y, od);
  }
  memset(c.o, 0xff, nq * es); /* NaN: a row paged leaves unwritten shows */
  if (paged_fn(&c, 1, 0) == 0) {
    attn_from_dtype(dt, c.o, nq, op);
    diff = attn_bench_rel_diff(op, od, nq);
  }
  const double tol = dt == ATTN_F32 ? SERVE_TOL_F32 : SERVE_TOL_HALF;
  if (!(ref <= tol) || !(diff <= tol)) {
    fprintf(stderr, "attntune bench: paged decode at n_kv=%d d=%d: dense vs fp64 %.3g, paged vs dense %.3g\n", n_kv,
            d, ref, diff);
    goto done;
  }
  attn_timing_stats st[2];
  double load = -1;
  int rounds = 0;
  if (serve_time(rt->threads, a->reps, 2, paged_fn, &c, sets, st, &load, &rounds)) goto done;
  const double bytes = (double)nkv * 2 * (double)es; /* K and V once per KV head */
  const double dgbs = bytes / st[0].median_ms * 1e-6, pgbs = bytes / st[1].median_ms * 1e-6;
  const double bw = pk->read_gbs;
  torch_out t;
  if (a->no_torch) memset(&t, 0, sizeof t), t.note = "skipped (--no-torch)";
  else torch_run("paged", B, H, HK, 1, n_kv, d, 0, P, rt->threads, a->reps < 10 ? 10 : a->reps, dt, NULL, 0, &t);
  json_t *o = json_object();
  json_object_set_new(o, "serve", json_string("paged_decode"));
  json_object_set_new(o, "batch", json_integer(B));
  json_object_set_new(o, "heads", json_integer(H));
  json_object_set_new(o, "heads_kv", json_integer(HK));
  json_object_set_new(o, "n", json_integer(1));
  json_object_set_new(o, "n_kv", json_integer(n_kv));
  json_object_set_new(o, "d", json_integer(d));
  json_object_set_new(o, "dtype", json_string(attn_dtype_name(dt)));
  json_object_set_new(o, "page_size", json_integer(P));
  json_object_set_new(o, "plan", json_string(attn_plan_describe(c.dense)));
  json_object_set_new(o, "paged_plan", json_string(attn_plan_describe(c.paged)));
  json_object_set_new(o, "dense_ms", json_real(st[0].median_ms));
  json_object_set_new(o, "paged_ms", json_real(st[1].median_ms));
  json_object_set_new(o, "dense_iqr_ms", json_real(st[0].iqr_ms));
  json_object_set_new(o, "paged_iqr_ms", json_real(st[1].iqr_ms));
  json_object_set_new(o, "kv_bytes", json_real(bytes));
  json_object_set_new(o, "dense_gbs", json_real(dgbs));
  json_object_set_new(o, "paged_gbs", json_real(pgbs));
  json_object_set_new(o, "read_bw_gbs", attn_bench_num_or_null(bw));
  json_object_set_new(o, "ceiling_under_load", json_boolean(pk->read_under_load));
  json_object_set_new(o, "dense_frac", attn_bench_num_or_null(bw > 0 ? dgbs / bw : -1));
  json_object_set_new(o, "paged_frac", attn_bench_num_or_null(bw > 0 ? pgbs / bw : -1));
  json_object_set_new(o, "paged_vs_dense", json_real(pgbs / dgbs)); /* paged fraction / dense fraction */
  json_object_set_new(o, "ref_error", json_real(ref));
  json_object_set_new(o, "paged_diff", json_real(diff));
  json_object_set_new(o, "rounds", json_integer(rounds));
  json_object_set_new(o, "load", attn_bench_num_or_null(load));
  json_object_set_new(o, "torch_version", t.version[0] ? json_string(t.version) : json_null());
  json_object_set_new(o, "torch_note", t.note ? json_string(t.note) : json_null());
  json_object_set_new(o, "torch_sdpa_dense_ms", attn_bench_num_or_null(torch_ms(&t, "sdpa_dense")));
  json_object_set_new(o, "torch_sdpa_gather_ms", attn_bench_num_or_null(torch_ms(&t, "sdpa_gather")));
  json_array_append_new(rows, o);
  rc = 0;
done:
  for (int s = 0; s < sets && c.k; s++) {
    free(c.k[s]), free(c.v[s]);
    if (c.kp) free(c.kp[s]);
    if (c.vp) free(c.vp[s]);
  }
  free(c.k), free(c.v), free(c.kp), free(c.vp), free(c.table), free(c.lens), free(c.q), free(c.o);
  free(x), free(y), free(od), free(op), free(qf);
  attn_plan_destroy(c.dense), attn_plan_destroy(c.paged);
  return rc;
}

/* ---------------------------------------------------------------- varlen prefill */

#define SERVE_MAX_SEQ 64

typedef struct varlen_ctx {
  attn_plan *var, *seq[SERVE_MAX_SEQ];
  int nseq, cu[SERVE_MAX_SEQ + 1], lens[SERVE_MAX_SEQ];
  char *q, *k, *v, *o;                                                   /* packed [total][heads][d] */
  char *sq[SERVE_MAX_SEQ], *sk[SERVE_MAX_SEQ], *sv[SERVE_MAX_SEQ], *so[SERVE_MAX_SEQ]; /* [heads][len][d] */
} varlen_ctx;

static int varlen_fn(void *user, int side, int set) {
  (void)set;
  varlen_ctx *c = user;
  int e = ATTN_OK;
  if (side == 0) e = attn_execute_varlen(c->var, c->cu, c->cu, c->q, c->k, c->v, c->o);
  for (int s = 0; side == 1 && s < c->nseq && e == ATTN_OK; s++)
    e = attn_execute(c->seq[s], c->sq[s], c->sk[s], c->sv[s], c->so[s]);
  if (e != ATTN_OK) fprintf(stderr, "attntune bench: varlen prefill: %s\n", attn_last_error(NULL));
  return e != ATTN_OK;
}

/* rows [r0, r0 + len) of packed [total][heads][d] <-> [heads][len][d] (bytes es each); back 1: to packed */
static void repack(char *packed, char *seq, long r0, long len, long heads, long d, size_t es, int back) {
  const size_t w = (size_t)d * es;
  for (long t = 0; t < len; t++)
    for (long h = 0; h < heads; h++) {
      char *pk = packed + ((size_t)(r0 + t) * heads + h) * w, *sq = seq + ((size_t)h * len + t) * w;
      memcpy(back ? pk : sq, back ? sq : pk, w);
    }
}

static int serve_varlen(attn_runtime *rt, const bench_serve_args *a, int n, int d, attn_dtype dt, json_t *rows) {
  const int H = a->heads, HK = a->heads_kv ? a->heads_kv : a->heads;
  varlen_ctx c;
  memset(&c, 0, sizeof c);
  c.nseq = a->batch < SERVE_MAX_SEQ ? a->batch : SERVE_MAX_SEQ;
  /* lengths from n down to about n/2, odd and even: a batch of prompts of different lengths */
  for (int s = 0; s < c.nseq; s++) {
    c.lens[s] = n - (int)((long)s * n / (2 * c.nseq)) - (s % 2);
    if (c.lens[s] < 1) c.lens[s] = 1;
    c.cu[s + 1] = c.cu[s] + c.lens[s];
  }
  const long tot = c.cu[c.nseq];
  const size_t es = attn_dtype_size(dt);
  const size_t nq = (size_t)tot * H * d, nk = (size_t)tot * HK * d;
  float *x = malloc(sizeof(float) * nq), *fo = malloc(sizeof(float) * nq), *fs = malloc(sizeof(float) * nq);
  c.q = malloc(nq * es), c.o = malloc(nq * es), c.k = malloc(nk * es), c.v = malloc(nk * es);
  char *seq_o = malloc(nq * es);
  int rc = 1, ok = x && fo && fs && c.q && c.o && c.k && c.v && seq_o;
  for (int s = 0; ok && s < c.nseq; s++) {
    const size_t lq = (size_t)c.lens[s] * H * d * es, lk = (size_t)c.lens[s] * HK * d * es;
    c.sq[s] = malloc(lq), c.so[s] = malloc(lq), c.sk[s] = malloc(lk), c.sv[s] = malloc(lk);
    ok = c.sq[s] && c.so[s] && c.sk[s] && c.sv[s];
  }
  if (!ok) {
    fprintf(stderr, "attntune bench: out of memory for varlen prefill at n=%d d=%d\n", n, d);
    goto done;
  }
  fill_dt(dt, x, nq, 21, c.q), fill_dt(dt, x, nk, 22, c.k), fill_dt(dt, x, nk, 23, c.v);
  for (int s = 0; s < c.nseq; s++) {
    repack(c.q, c.sq[s], c.cu[s], c.lens[s], H, d, es, 0);
    repack(c.k, c.sk[s], c.cu[s], c.lens[s], HK, d, es, 0);
    repack(c.v, c.sv[s], c.cu[s], c.lens[s], HK, d, es, 0);
  }
  attn_problem pv = {.batch = c.nseq, .heads = H, .heads_kv = HK, .n = c.lens[0], .d = d, .dtype = dt,
                     .causal = a->causal, .varlen = 1};
  int e = attn_plan_create(rt, &pv, &c.var);
  for (int s = 0; s < c.nseq && e == ATTN_OK; s++) {
    attn_problem p1 = {.batch = 1, .heads = H, .heads_kv = HK, .n = c.lens[s], .d = d, .dtype = dt,
                       .causal = a->causal};
    e = attn_plan_create(rt, &p1, &c.seq[s]);
  }
  if (e != ATTN_OK) {
    fprintf(stderr, "attntune bench: varlen prefill at n=%d d=%d: %s\n", n, d, attn_last_error(rt));
    goto done;
  }
  /* check: varlen's rows against the per-sequence calls' (the dense kernel checked against fp64 by bench's points) */
  memset(c.o, 0xff, nq * es);
  double diff = INFINITY;
  if (varlen_fn(&c, 0, 0) == 0 && varlen_fn(&c, 1, 0) == 0) {
    for (int s = 0; s < c.nseq; s++) repack(seq_o, c.so[s], c.cu[s], c.lens[s], H, d, es, 1);
    attn_from_dtype(dt, c.o, nq, fo), attn_from_dtype(dt, seq_o, nq, fs);
    diff = attn_bench_rel_diff(fo, fs, nq);
  }
  if (!(diff <= (dt == ATTN_F32 ? SERVE_TOL_F32 : SERVE_TOL_HALF))) {
    fprintf(stderr, "attntune bench: varlen prefill at n=%d d=%d: varlen vs per-sequence calls %.3g\n", n, d, diff);
    goto done;
  }
  attn_timing_stats st[2];
  double load = -1;
  int rounds = 0;
  if (serve_time(rt->threads, a->reps, 2, varlen_fn, &c, 1, st, &load, &rounds)) goto done;
  double pairs = 0; /* scores computed: causal per sequence l(l+1)/2 */
  for (int s = 0; s < c.nseq; s++) pairs += a->causal ? 0.5 * c.lens[s] * (c.lens[s] + 1.0) : (double)c.lens[s] * c.lens[s];
  const double flops = 4.0 * pairs * d * H;
  torch_out t;
  if (a->no_torch) memset(&t, 0, sizeof t), t.note = "skipped (--no-torch)";
  else torch_run("varlen", c.nseq, H, HK, n, n, d, a->causal, 0, rt->threads, a->reps, dt, c.lens, c.nseq, &t);
  json_t *o = json_object(), *ls = json_array();
  for (int s = 0; s < c.nseq; s++) json_array_append_new(ls, json_integer(c.lens[s]));
  json_object_set_new(o, "serve", json_string("varlen_prefill"));
  json_object_set_new(o, "batch", json_integer(c.nseq));
  json_object_set_new(o, "lengths", ls);
  json_object_set_new(o, "heads", json_integer(H));
  json_object_set_new(o, "heads_kv", json_integer(HK));
  json_object_set_new(o, "n", json_integer(c.lens[0]));
  json_object_set_new(o, "d", json_integer(d));
  json_object_set_new(o, "causal", json_integer(a->causal));
  json_object_set_new(o, "dtype", json_string(attn_dtype_name(dt)));
  json_object_set_new(o, "plan", json_string(attn_plan_describe(c.var)));
  json_object_set_new(o, "varlen_ms", json_real(st[0].median_ms));
  json_object_set_new(o, "per_seq_ms", json_real(st[1].median_ms));
  json_object_set_new(o, "varlen_iqr_ms", json_real(st[0].iqr_ms));
  json_object_set_new(o, "per_seq_iqr_ms", json_real(st[1].iqr_ms));
  json_object_set_new(o, "varlen_gflops", json_real(flops / st[0].median_ms * 1e-6));
  json_object_set_new(o, "per_seq_vs_varlen", json_real(st[1].median_ms / st[0].median_ms));
  json_object_set_new(o, "varlen_diff", json_real(diff));
  json_object_set_new(o, "rounds", json_integer(rounds));
  json_object_set_new(o, "load", attn_bench_num_or_null(load));
  json_object_set_new(o, "torch_version", t.version[0] ? json_string(t.version) : json_null());
  json_object_set_new(o, "torch_note", t.note ? json_string(t.note) : json_null());
  json_object_set_new(o, "torch_sdpa_loop_ms", attn_bench_num_or_null(torch_ms(&t, "sdpa_loop")));
  json_object_set_new(o, "torch_sdpa_mask_ms", attn_bench_num_or_null(torch_ms(&t, "sdpa_mask")));
  json_array_append_new(rows, o);
  rc = 0;
done:
  for (int s = 0; s < c.nseq; s++) {
    free(c.sq[s]), free(c.sk[s]), free(c.sv[s]), free(c.so[s]);
    attn_plan_destroy(c.seq[s]);
  }
  attn_plan_destroy(c.var);
  free(c.q), free(c.k), free(c.v), free(c.o), free(seq_o), free(x), free(fo), free(fs);
  return rc;
}

/* ---------------------------------------------------------------- windowed prefill */

#define SERVE_MAX_WIN 8

typedef struct window_ctx {
  attn_plan *plans[SERVE_MAX_WIN + 1]; /* each window, then none */
  void *q, *k, *v, *o;
} window_ctx;

static int window_fn(void *user, int side, int set) {
  (void)set;
  window_ctx *c = user;
  const int e = attn_execute(c->plans[side], c->q, c->k, c->v, c->o);
  if (e != ATTN_OK) fprintf(stderr, "attntune bench: windowed prefill: %s\n", attn_last_error(NULL));
  return e != ATTN_OK;
}

/* Scores a window w leaves (w 0: none) of an n x n problem, per head. */
static double visible(long n, long w, int causal) {
  double v = 0;
  for (long i = 0; i < n; i++) {
    long lo = 0, hi = causal ? i + 1 : n;
    if (w > 0 && i - w + 1 > lo) lo = i - w + 1;
    if (w > 0 && !causal && i + w < hi) hi = i + w;
    v += (double)(hi - lo);
  }
  return v;
}

static int serve_window(attn_runtime *rt, const bench_serve_args *a, int n, int d, attn_dtype dt, json_t *rows) {
  const int H = a->heads, HK = a->heads_kv ? a->heads_kv : a->heads;
  int ws[SERVE_MAX_WIN], nw = 0;
  for (int i = 0; i < a->nwindows && nw < SERVE_MAX_WIN; i++)
    if (a->windows[i] < n) ws[nw++] = a->windows[i];
  for (int w = n / 16; !a->nwindows && w < n && nw < 3; w *= 2)
    if (w > 0) ws[nw++] = w;
  if (!nw) return 0;
  window_ctx c;
  memset(&c, 0, sizeof c);
  const size_t es = attn_dtype_size(dt), nq = (size_t)H * n * d, nk = (size_t)HK * n * d;
  float *x = malloc(sizeof(float) * nq), *ow = malloc(sizeof(float) * nq);
  c.q = malloc(nq * es), c.o = malloc(nq * es), c.k = malloc(nk * es), c.v = malloc(nk * es);
  int rc = 1;
  if (!x || !ow || !c.q || !c.o || !c.k || !c.v) {
    fprintf(stderr, "attntune bench: out of memory for windowed prefill at n=%d d=%d\n", n, d);
    goto done;
  }
  fill_dt(dt, x, nq, 31, c.q), fill_dt(dt, x, nk, 32, c.k), fill_dt(dt, x, nk, 33, c.v);
  for (int i = 0; i <= nw; i++) {
    attn_problem p = {.batch = 1, .heads = H, .heads_kv = HK, .n = n, .d = d, .dtype = dt, .causal = a->causal,
                      .window = i < nw ? ws[i] : 0};
    if (attn_plan_create(rt, &p, &c.plans[i]) != ATTN_OK) {
      fprintf(stderr, "attntune bench: windowed prefill at n=%d window=%d: %s\n", n, p.window, attn_last_error(rt));
      goto done;
    }
    /* each plan's output checked against fp64 on the rows a window reaches (cpu_mods tests every row) */
    memset(c.o, 0xff, nq * es);
    if (window_fn(&c, i, 0)) goto done;
    attn_from_dtype(dt, c.o, nq, ow);
    long bad = 0;
    for (size_t e = 0; e < nq; e++) bad += !isfinite(ow[e]);
    if (bad) {
      fprintf(stderr, "attntune bench: windowed prefill at n=%d window=%d: %ld outputs not finite\n", n, p.window, bad);
      goto done;
    }
  }
  attn_timing_stats st[SERVE_MAX_WIN + 1];
  double load = -1;
  int rounds = 0;
  if (serve_time(rt->threads, a->reps, nw + 1, window_fn, &c, 1, st, &load, &rounds)) goto done;
  int tw[SERVE_MAX_WIN + 1];
  for (int i = 0; i < nw; i++) tw[i] = ws[i];
  tw[nw] = 0;
  torch_out t;
  if (a->no_torch) memset(&t, 0, sizeof t), t.note = "skipped (--no-torch)";
  else torch_run("window", 1, H, HK, n, n, d, a->causal, 0, rt->threads, a->reps, dt, tw, nw + 1, &t);
  const double full = visible(n, 0, a->causal);
  for (int i = 0; i <= nw; i++) {
    const double vis = visible(n, tw[i], a->causal);
    char key[32];
    json_t *o = json_object();
    json_object_set_new(o, "serve", json_string("window_prefill"));
    json_object_set_new(o, "heads", json_integer(H));
    json_object_set_new(o, "heads_kv", json_integer(HK));
    json_object_set_new(o, "n", json_integer(n));
    json_object_set_new(o, "n_kv", json_integer(n));
    json_object_set_new(o, "d", json_integer(d));
    json_object_set_new(o, "causal", json_integer(a->causal));
    json_object_set_new(o, "dtype", json_string(attn_dtype_name(dt)));
    json_object_set_new(o, "window", json_integer(tw[i]));
    json_object_set_new(o, "plan", json_string(attn_plan_describe(c.plans[i])));
    json_object_set_new(o, "ms", json_real(st[i].median_ms));
    json_object_set_new(o, "iqr_ms", json_real(st[i].iqr_ms));
    json_object_set_new(o, "full_ms", json_real(st[nw].median_ms));
    json_object_set_new(o, "time_frac", json_real(st[i].median_ms / st[nw].median_ms));
    json_object_set_new(o, "visible_frac", json_real(vis / full));
    json_object_set_new(o, "ns_per_score", json_real(st[i].median_ms * 1e6 / (vis * H)));
    json_object_set_new(o, "rounds", json_integer(rounds));
    json_object_set_new(o, "load", attn_bench_num_or_null(load));
    json_object_set_new(o, "torch_version", t.version[0] ? json_string(t.version) : json_null());
    json_object_set_new(o, "torch_note", t.note ? json_string(t.note) : json_null());
    snprintf(key, sizeof key, "sdpa_mask_%d", tw[i]);
    json_object_set_new(o, "torch_sdpa_mask_ms", attn_bench_num_or_null(torch_ms(&t, key)));
    snprintf(key, sizeof key, "flex_%d", tw[i]);
    json_object_set_new(o, "torch_flex_ms", attn_bench_num_or_null(torch_ms(&t, key)));
    json_array_append_new(rows, o);
  }
  rc = 0;
done:
  for (int i = 0; i <= nw; i++) attn_plan_destroy(c.plans[i]);
  free(x), free(ow), free(c.q), free(c.k), free(c.v), free(c.o);
  return rc;
}

/* ---------------------------------------------------------------- report */

static double num(const json_t *o, const char *k) {
  const json_t *v = json_object_get(o, k);
  return json_is_number(v) ? json_number_value(v) : -1;
}

static void print_rows(const json_t *rows, const attn_peak *pk) {
  size_t i;
  json_t *o;
  printf("read bandwidth %.1f GB/s%s (%d threads)\n", pk->read_gbs, pk->read_under_load ? " *under load" : "",
         pk->threads);
  json_array_foreach(rows, i, o) {
    const char *kind = json_string_value(json_object_get(o, "serve"));
    const char *tv = json_string_value(json_object_get(o, "torch_version"));
    if (!strcmp(kind, "paged_decode")) {
      printf("paged decode  batch=%lld heads=%lld/%lld n_kv=%lld d=%lld %s page=%lld: dense %.3f ms (%.2f GB/s, "
             "%.0f%% of read bw), paged %.3f ms (%.2f GB/s, %.0f%%), paged/dense %.3f",
             (long long)num(o, "batch"), (long long)num(o, "heads"), (long long)num(o, "heads_kv"),
             (long long)num(o, "n_kv"), (long long)num(o, "d"), json_string_value(json_object_get(o, "dtype")),
             (long long)num(o, "page_size"), num(o, "dense_ms"), num(o, "dense_gbs"), 100 * num(o, "dense_frac"),
             num(o, "paged_ms"), num(o, "paged_gbs"), 100 * num(o, "paged_frac"), num(o, "paged_vs_dense"));
      if (tv) printf("; torch %s SDPA dense %.3f ms, gathered pages %.3f ms", tv, num(o, "torch_sdpa_dense_ms"),
                     num(o, "torch_sdpa_gather_ms"));
    } else if (!strcmp(kind, "varlen_prefill")) {
      printf("varlen prefill batch=%lld (n %lld..) heads=%lld/%lld d=%lld %s causal=%lld: varlen %.3f ms (%.1f "
             "GFLOP/s), per-sequence calls %.3f ms (%.3fx)",
             (long long)num(o, "batch"), (long long)num(o, "n"), (long long)num(o, "heads"),
             (long long)num(o, "heads_kv"), (long long)num(o, "d"), json_string_value(json_object_get(o, "dtype")),
             (long long)num(o, "causal"), num(o, "varlen_ms"), num(o, "varlen_gflops"), num(o, "per_seq_ms"),
             num(o, "per_seq_vs_varlen"));
      if (tv) printf("; torch %s SDPA loop %.3f ms, block-diagonal mask %.3f ms", tv, num(o, "torch_sdpa_loop_ms"),
                     num(o, "torch_sdpa_mask_ms"));
    } else {
      printf("window prefill n=%lld heads=%lld/%lld d=%lld %s causal=%lld window=%lld: %.3f ms, %.3f of no window's "
             "time for %.3f of its scores (%.3f ns/score)",
             (long long)num(o, "n"), (long long)num(o, "heads"), (long long)num(o, "heads_kv"),
             (long long)num(o, "d"), json_string_value(json_object_get(o, "dtype")), (long long)num(o, "causal"),
             (long long)num(o, "window"), num(o, "ms"), num(o, "time_frac"), num(o, "visible_frac"),
             num(o, "ns_per_score"));
      if (tv) printf("; torch %s SDPA mask %.3f ms, flex %.3f ms", tv, num(o, "torch_sdpa_mask_ms"),
                     num(o, "torch_flex_ms"));
    }
    printf(" [load %.2f]\n", num(o, "load"));
  }
}

int attn_bench_serve(attn_runtime *rt, const attn_peak *pk, const bench_serve_args *a, const int *ns, int nn,
                     const int *nkvs, int nnkv, const int *ds, int nd, unsigned dtypes, int json) {
  json_t *rows = json_array();
  int rc = 0;
  if (!rows) return 1;
  for (int t = 0; t < 3; t++)
    for (int j = 0; (dtypes >> t) & 1 && j < nd; j++) {
      for (int i = 0; i < (nkvs ? nnkv : nn); i++)
        rc |= serve_paged(rt, pk, a, nkvs ? nkvs[i] : ns[i], ds[j], (attn_dtype)t, rows);
      for (int i = 0; i < nn && ns[i] >= ATTN_DB_DECODE_BELOW; i++) { /* prefill lengths only */
        rc |= serve_varlen(rt, a, ns[i], ds[j], (attn_dtype)t, rows);
        rc |= serve_window(rt, a, ns[i], ds[j], (attn_dtype)t, rows);
      }
    }
  if (json) {
    char *text = json_dumps(rows, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
    if (text) puts(text);
    else rc = 1;
    free(text);
  } else {
    print_rows(rows, pk);
  }
  json_decref(rows);
  return rc;
}
