/* model.c: ranking CUDA configurations for a GPU that is not present (docs/model.md).
 *
 * flash, per key block of one thread block (tuner/kcount.c: the template's own instruction counts, which
 * tests/model_ptx.c checks against its PTX), in SM cycles at the spec table's per-SM rates:
 *   tensor = mma.sync FLOPs / mma rate, sfu = ex2 / 16, alu = other fp32 work / fp32 lanes,
 *   smem = ldmatrix, ld/st.shared and cp.async bytes / shared-memory bandwidth (+ spills).
 * A warp uses these units one after the other (S = Q K^T, then the softmax, then P V); what one warp leaves idle
 * another resident warp can use, so a key block costs the largest unit time plus the rest of the serial sum, of
 * which a share is hidden: half within a warp (unrolled independent mma and ldmatrix), more with more warps per
 * scheduler. A block's latency (its first loads, and each key block's when fewer stages are in flight than the
 * latency needs) is what few resident warps cannot hide.
 * Blocks are dispatched in grid order (causal: each head's heaviest query blocks first) to the SM slots the
 * occupancy allows (registers and shared memory of the compiled kernel, or their estimate); each block runs its
 * own number of key blocks (causal or windowed: those it sees). The makespan is the compute time.
 * Memory: the I/O closed form's entries all pass through L2; DRAM sees Q, K, V and O once plus the K/V re-reads
 * that miss L2, judged by the K/V of the heads being worked on at once (not every head's) against the L2.
 *   time = max(compute, DRAM, L2) + launch;   bound = the term that decides it.
 * smallcache and lowrank keep a coarse FLOP-rate estimate (their S and feature maps through global memory). */
#include "model.h"
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "io_theory.h"
#include "kcount.h"
#include "kernel_abi_cuda.h"
#include "launch.h"
#include "spec_bwd_cuda.h"

#define LAUNCH_MS 0.005          /* kernel launch latency */
#define L2_OVER_HBM 3.0          /* L2 bandwidth as a multiple of HBM bandwidth */
#define L2_USABLE 0.75           /* share of the L2 that K/V re-reads can count on (Q, O and other lines share it) */
#define DRAM_EFF 0.9             /* reachable share of the datasheet bandwidth (a device copy reaches ~90%) */
#define OVERLAP_WARP 0.4         /* share of the serial unit time hidden within one warp per scheduler (fitted: H200) */
#define OVERLAP_MORE 0.05        /* hidden more per further warp per scheduler (fitted: H200) */
#define OVERLAP_MAX 0.8
#define BLOCK_LATENCY_CYC 2000.0 /* a block's start (Q and the first K/V block from DRAM) and its output */
#define KEY_LATENCY_CYC 700.0    /* a key block's loads, mostly L2 hits, to be covered by the blocks in flight */
#define SIM_MAX_BLOCKS 2000000   /* beyond this the schedule is estimated, not simulated */
#define SLOWDOWN_OCCUPANCY 1.25  /* the schedule or the latency costs this much over the units: occupancy bound */

static double clamp01(double x) { return x < 0 ? 0 : x > 1 ? 1 : x; }

/* A count kept in double, as an int field: saturated, since converting a double beyond INT_MAX is undefined. */
static int clamp_int(double x) { return x < INT_MAX ? (int)x : INT_MAX; }

/* sum of min(N, max(0, t)) over t = t0 .. t1, in closed form */
static double sum_clamped(double t0, double t1, double N) {
  double sum = 0;
  const double a = fmax(t0, 1), b = fmin(t1, N - 1); /* 0 < t < N: t itself */
  if (b >= a) sum += (a + b) * (b - a + 1) / 2.0;
  const double c = fmax(t0, N); /* t >= N: N */
  if (t1 >= c) sum += N * (t1 - c + 1);
  return sum;
}

/* Visible (query, key) pairs of one head, in closed form: row i at i' = i + n_kv - n sees keys [lo, hi) (attn.h),
 * hi = min(n_kv, max(0, i' + 1)) causal, min(n_kv, max(0, i' + w)) windowed, else n_kv; lo = min(n_kv, max(0, i' - w +
 * 1)) windowed, else 0 (hi >= lo always). */
static double pairs(int causal, long window, double n, double n_kv) {
  const double x0 = n_kv - n, x1 = n_kv - 1; /* the rows' i' */
  const double w = (double)window;
  const double hi = causal ? sum_clamped(x0 + 1, x1 + 1, n_kv) : window > 0 ? sum_clamped(x0 + w, x1 + w, n_kv)
                                                                           : n * n_kv;
  return hi - (window > 0 ? sum_clamped(x0 - w + 1, x1 - w + 1, n_kv) : 0);
}

/* Key blocks query block q (0-based, in query order) of a head loads (tuner/io_theory.c's attn_io_flash_keys: those
 * from the block holding the first key some row sees, under s->causal and the window, to the one holding the last).
 * group: query rows at one position (a GQA-packed launch's query heads, n the packed rows; else 1). */
static double key_blocks(const attn_spec *s, long window, long group, long q, double n, double n_kv) {
  const double i0 = (double)q * s->br, rows = fmin(s->br, n - i0), shift = n_kv - n / group;
  const long a = (long)(floor(i0 / group) + shift), z = (long)(floor((i0 + rows - 1) / group) + shift);
  return ceil((double)attn_io_flash_keys(s, a, z, (long)n_kv, window, NULL) / s->bc);
}

/* min-heap of slot finish times */
static void heap_down(double *h, long n, long i) {
  for (;;) {
    long l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && h[l] < h[m]) m = l;
    if (r < n && h[r] < h[m]) m = r;
    if (m == i) return;
    double t = h[i];
    h[i] = h[m];
    h[m] = t;
    i = m;
  }
}

/* Makespan in cycles of bh heads' blocks (grid order: head-major, causal heaviest first) on `slots` slots, each
 * block costing kb_cyc per key block plus start_cyc; also the ideal (total / slots). */
static double schedule(const attn_spec *s, long window, long group, double bh, double n, double n_kv, long slots,
                       double kb_cyc, double start_cyc, double *ideal) {
  const long nqb = (long)ceil(n / s->br);
  const double blocks = bh * nqb;
  double per_head = 0, heaviest = 0;
  for (long q = 0; q < nqb; q++) {
    const double c = key_blocks(s, window, group, q, n, n_kv) * kb_cyc + start_cyc;
    per_head += c;
    if (c > heaviest) heaviest = c;
  }
  *ideal = per_head * bh / slots;
  if (!s->causal && window == 0) /* equal blocks: whole waves */
    return ceil(blocks / slots) * heaviest;
  if (blocks > SIM_MAX_BLOCKS) return fmax(*ideal, heaviest) + heaviest * 0.5; /* greedy's bound, roughly */
  double *h = calloc((size_t)slots, sizeof *h);
  if (!h) return fmax(*ideal, heaviest) + heaviest * 0.5;
  double end = 0;
  for (long head = 0; head < (long)bh; head++)
    for (long i = 0; i < nqb; i++) { /* causal: heaviest first, the last query blocks see the most keys */
      h[0] += key_blocks(s, window, group, s->causal ? nqb - 1 - i : i, n, n_kv) * kb_cyc + start_cyc;
      if (h[0] > end) end = h[0];
      heap_down(h, slots, 0);
    }
  free(h);
  return end;
}

/* A key block's work (kcount.c) as the template runs it: d and d_v padded (templates/kernel_abi_cuda.h), and with
 * d_v split over VS warps sharing the query rows each warp holds Br VS / W rows. kcount counts a d-deep Q K^T and a
 * d-wide P V: here Q K^T is d̂ deep and each warp's P V d̂_v / VS wide, so the counts are the mean of the two
 * widths' (equal to kcount's own where d = d_v is a multiple of 16; the V copies are then counted at d̂_v / VS). */
static int kb_work(const attn_spec *s, attn_kb_work *w) {
  const int es = (int)attn_dtype_size(s->dtype), dv = attn_spec_dv(s), vs = ATTN_FLASH_VS(es, dv);
  attn_spec qk = *s, pv;
  qk.d = ATTN_FLASH_DP(s->d);
  qk.dv = 0;
  qk.br = s->br * vs;
  pv = qk;
  pv.d = ATTN_FLASH_DVP(es, dv) / vs;
  attn_kb_work a, b;
  if (attn_kb_work_of(&qk, &a) != 0) return -1;
  if (pv.d == qk.d) {
    *w = a;
    return 0;
  }
  if (attn_kb_work_of(&pv, &b) != 0) return -1;
  w->mma_flops = (a.mma_flops + b.mma_flops) / 2;
  w->ex2 = (a.ex2 + b.ex2) / 2;
  w->alu = (a.alu + b.alu) / 2;
  w->smem_bytes = (a.smem_bytes + b.smem_bytes) / 2;
  w->threads = a.threads;
  return 0;
}

static const char *unit_name(double t, double sfu, double alu, double smem) {
  double m = fmax(fmax(t, sfu), fmax(alu, smem));
  return m == t ? "tensor_cores" : m == sfu ? "special_functions" : m == smem ? "shared_memory" : "fp32_alu";
}

int attn_model_time(const attn_gpu *g, const attn_problem *prob, const attn_spec *s, attn_model_result *out,
                    char *err, size_t errlen) {
  return attn_model_time_res(g, prob, s, NULL, out, err, errlen);
}

/* ---- serving layouts (templates/flash.cu's ATTN_LAYOUT; docs/cuda.md's serving part) ----
 * varlen: one launch whose grid is the dense one's for the longest sequence (batch x heads x ceil(max n / Br)
 * blocks); a block past its own sequence's query rows exits at once (EMPTY_BLOCK_CYC). The work is per sequence:
 * sum over sequences of ceil(n_b / Br) query blocks a head, each over its own keys (causal bottom-right in the
 * sequence), scheduled in grid order; transfers, FLOPs and the compulsory bytes summed over the sequences.
 * paged: the dense kernel's work (decode with grouped-query heads: one block per KV head, its query heads the rows),
 * but K and V come in runs: a key tile's rows within one page are contiguous across the KV heads ([page][slot]
 * [heads_kv][d]), and the tile breaks at each page boundary. A run costs DRAM its bytes plus PAGE_RUN_BYTES (a new
 * DRAM row and request stream: an assumption, not measured), so small pages of few narrow heads lose bandwidth and
 * tiles that cross page boundaries more often lose more; each KV head's row is read in 32-byte sectors on its own
 * (heads_kv > 1: rows of heads_kv x row bytes apart), which costs L2 the sectors a row straddles. */
#define EMPTY_BLOCK_CYC 200.0
#define PAGE_RUN_BYTES 128.0

typedef struct model_paged {
  double dram_factor; /* K/V DRAM bytes, runs' overhead included, over their bytes */
  double l2_factor;   /* K/V sectors' bytes over their bytes */
} model_paged;

/* The bytes of 32-byte sectors a segment of w bytes at byte offset o touches. */
static double sectors(double o, double w) {
  const double first = floor(o / 32.0), last = floor((o + w - 1) / 32.0);
  return w > 0 ? (last - first + 1) * 32.0 : 0;
}

/* Paged K/V of one sequence's keys [first, L) (first a tile's start), tiles of Bc rows, pages of ps slots of hk KV
 * heads' rows of `row` bytes (K's or V's). */
static void paged_runs(double first, double L, int bc, int ps, int hk, double row, double *bytes, double *dram,
                       double *l2) {
  for (double j0 = first; j0 < L; j0 += bc) {
    const double end = fmin(j0 + bc, L);
    for (double j = j0; j < end;) {
      const double stop = fmin(end, (floor(j / ps) + 1) * ps), len = stop - j, slot = fmod(j, ps);
      *bytes += len * hk * row;
      *dram += len * hk * row + PAGE_RUN_BYTES;
      if (hk == 1) {
        *l2 += sectors(slot * row, len * row);
      } else {
        for (int h = 0; h < hk; h++) /* each head's row on its own, len rows of them */
          *l2 += len * sectors((slot * hk + h) * row, row);
      }
      j = stop;
    }
  }
}

/* keys: those [first, first + keys) the query blocks load (a window's) */
static model_paged paged_factors(const attn_problem *p, const attn_spec *s, int ps, double first, double keys) {
  model_paged f = {1.0, 1.0};
  const double es = (double)attn_dtype_size(s->dtype);
  double bytes = 0, dram = 0, l2 = 0;
  paged_runs(first, first + keys, s->bc, ps, p->heads_kv, p->d * es, &bytes, &dram, &l2);
  paged_runs(first, first + keys, s->bc, ps, p->heads_kv, p->d_v * es, &bytes, &dram, &l2);
  if (bytes > 0) f.dram_factor = dram / bytes, f.l2_factor = fmax(1.0, l2 / bytes);
  return f;
}

/* varlen's grid in its order: blocks of sequence b, head h, query block q (causal: the sequence's heaviest first),
 * those past the sequence's rows exiting at once; the makespan on `slots` slots, the ideal in *ideal. */
static double schedule_varlen(const attn_spec *s, long window, const attn_model_layout *lay, double heads, long nqb,
                              long slots, double kb_cyc, double start_cyc, double *ideal) {
  const int causal = s->causal;
  double work = 0, heaviest = 0;
  for (int b = 0; b < lay->nseq; b++) {
    const long own = (lay->lq[b] + s->br - 1) / s->br;
    for (long q = 0; q < nqb; q++) {
      const double c = q < own ? key_blocks(s, window, 1, q, lay->lq[b], lay->lk[b]) * kb_cyc + start_cyc
                               : EMPTY_BLOCK_CYC;
      work += c * heads;
      if (c > heaviest) heaviest = c;
    }
  }
  *ideal = work / slots;
  const double blocks = (double)lay->nseq * heads * nqb;
  if (blocks > SIM_MAX_BLOCKS) return fmax(*ideal, heaviest) + heaviest * 0.5;
  double *h = calloc((size_t)slots, sizeof *h);
  if (!h) return fmax(*ideal, heaviest) + heaviest * 0.5;
  double end = 0;
  for (int b = 0; b < lay->nseq; b++) {
    const long own = (lay->lq[b] + s->br - 1) / s->br;
    for (long hd = 0; hd < (long)heads; hd++)
      for (long i = 0; i < nqb; i++) {
        const long q = i < own ? own - 1 - i : i; /* the grid's heaviest-first order within the sequence */
        h[0] += i < own ? key_blocks(s, window, 1, causal ? q : i, lay->lq[b], lay->lk[b]) * kb_cyc + start_cyc
                        : EMPTY_BLOCK_CYC;
        if (h[0] > end) end = h[0];
        heap_down(h, slots, 0);
      }
  }
  free(h);
  return end;
}

/* pos_rows: the grid's rows at one position (a GQA-packed launch: a KV head's G query heads, prob->n their G·n rows);
 * else 1 */
static int model_forward(const attn_gpu *g, const attn_problem *prob, const attn_spec *s, const attn_kernel_res *res,
                         const attn_model_layout *lay, long group, attn_model_result *out, char *err, size_t errlen);

/* The problem's window as the runtime applies it (attn_problem_normalize: one that hides no key is none), and the
 * spec's window flag with it (the kernel the runtime compiles for the problem). */
static void model_window(attn_problem *p, attn_spec *s) {
  if (p->n_kv == 0) p->n_kv = p->n;
  if (p->window > 0 && p->window >= (p->causal ? p->n_kv : p->n > p->n_kv ? p->n : p->n_kv)) p->window = 0;
  if (p->window >= 0) s->window = p->window > 0;
}

int attn_model_time_res(const attn_gpu *g, const attn_problem *prob, const attn_spec *spec,
                        const attn_kernel_res *res, attn_model_result *out, char *err, size_t errlen) {
  attn_problem p = *prob;
  attn_spec sw = *spec;
  const attn_spec *s = &sw;
  if (p.heads_kv == 0) p.heads_kv = p.heads;
  model_window(&p, &sw);
  attn_problem k;
  if (!attn_cuda_launch_problem(&p, s, &k)) {
    if (!attn_cuda_decode_unmasked(&p, s)) return model_forward(g, &p, s, res, NULL, 1, out, err, errlen);
    /* causal n = 1 runs the kernel without causal (its row sees every key): the same grid, split-KV's included */
    attn_spec ks = *s;
    k.causal = ks.causal = 0;
    return model_forward(g, &k, &ks, res, NULL, 1, out, err, errlen);
  }
  /* the runtime's grouped-query packing: the grid's problem has a KV head's query heads as its rows, unmasked, so
   * K and V are counted once per KV head (windowed: n = 1, every row at n_kv - 1); the flops stay the problem's */
  attn_spec ks = *s;
  ks.causal = 0;
  const int rc = model_forward(g, &k, &ks, res, NULL, p.heads / p.heads_kv, out, err, errlen);
  if (rc != ATTN_OK) return rc;
  out->flops = 2.0 * (p.d + (p.d_v ? p.d_v : p.d)) * pairs(p.causal, p.window, p.n, p.n_kv) * (double)p.batch *
               p.heads;
  return ATTN_OK;
}

int attn_model_time_layout(const attn_gpu *g, const attn_problem *prob, const attn_spec *spec,
                           const attn_kernel_res *res, const attn_model_layout *lay, attn_model_result *out,
                           char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  const int varlen = lay && lay->nseq > 0, paged = lay && lay->page_size > 0;
  if (!varlen && !paged) return attn_model_time_res(g, prob, spec, res, out, err, errlen);
  attn_spec sw = *spec;
  const attn_spec *s = &sw;
  if (varlen && paged) {
    snprintf(err, errlen, "a problem is paged or varlen, not both");
    return ATTN_EINVAL;
  }
  if (s->algo != ATTN_ALGO_FLASH || s->target != ATTN_TARGET_CUDA || s->impl == ATTN_IMPL_WGMMA) {
    snprintf(err, errlen, "CUDA %s has no %s kernel (flash.cu's mma.sync flash has)",
             s->impl == ATTN_IMPL_WGMMA ? "impl=wgmma flash" : attn_algo_name(s->algo), varlen ? "varlen" : "paged");
    return ATTN_EINVAL;
  }
  /* the tiles as the layout's kernel takes them (attn_spec_check with the layout; the runtime serves the default
   * tiles for a row whose tiles it refuses) */
  attn_problem p = *prob;
  if (p.n_kv == 0) p.n_kv = p.n;
  if (p.heads_kv == 0) p.heads_kv = p.heads;
  if (p.d_v == 0) p.d_v = p.d;
  model_window(&p, &sw);
  const int packed = paged && p.n == 1 && p.heads > p.heads_kv && p.heads_kv > 0 && p.heads % p.heads_kv == 0;
  attn_spec t = *s;
  t.layout = varlen ? 1 : packed ? 3 : 2;
  char why[400];
  if (attn_spec_check(&t, why, sizeof why) != ATTN_OK) {
    snprintf(err, errlen, "the %s kernel refuses these tiles: %s", varlen ? "varlen" : "paged", why);
    return ATTN_EINVAL;
  }
  if (varlen) {
    long most_q = 0, most_kv = 0;
    for (int b = 0; b < lay->nseq; b++) {
      if (lay->lq[b] < 0 || lay->lk[b] < 0) {
        snprintf(err, errlen, "varlen sequence %d has a negative length", b);
        return ATTN_EINVAL;
      }
      if (lay->lq[b] > most_q) most_q = lay->lq[b];
      if (lay->lk[b] > most_kv) most_kv = lay->lk[b];
    }
    if (most_q == 0) {
      snprintf(err, errlen, "no varlen sequence has a query row");
      return ATTN_EINVAL;
    }
    p.batch = lay->nseq, p.n = (int)most_q, p.n_kv = most_kv > 0 ? (int)most_kv : 1;
    return model_forward(g, &p, s, res, lay, 1, out, err, errlen);
  }
  /* the grid's problem: packed decode's rows are a KV head's query heads at one position, no mask among them */
  attn_problem k = p;
  if (packed) k.n = p.heads / p.heads_kv, k.heads = p.heads_kv, k.causal = 0;
  attn_spec ks = *s;
  ks.causal = k.causal;
  const int rc = model_forward(g, &k, &ks, res, lay, packed ? k.n : 1, out, err, errlen);
  if (rc != ATTN_OK) return rc;
  /* the flops are the problem's */
  out->flops = 2.0 * (p.d + p.d_v) * pairs(p.causal, p.window, p.n, p.n_kv) * (double)p.batch * p.heads;
  return ATTN_OK;
}

static int model_forward(const attn_gpu *g, const attn_problem *prob, const attn_spec *s, const attn_kernel_res *res,
                         const attn_model_layout *lay, long pos_rows, attn_model_result *out, char *err,
                         size_t errlen) {
  memset(out, 0, sizeof *out);
  const int varlen = lay && lay->nseq > 0;
  if (s->target != ATTN_TARGET_CUDA) {
    snprintf(err, errlen, "the performance model is for CUDA configurations");
    return ATTN_EINVAL;
  }
  attn_problem p = *prob;
  if (p.n_kv == 0) p.n_kv = p.n;
  if (p.heads_kv == 0) p.heads_kv = p.heads;
  if (p.d_v == 0) p.d_v = p.d;
  if (p.batch < 1 || p.heads < 1 || p.n < 1 || p.n_kv < 1 || p.d != s->d || p.d_v != attn_spec_dv(s) || s->br < 1 ||
      s->bc < 1 || p.heads_kv < 1 || p.heads % p.heads_kv) {
    snprintf(err, errlen, "problem batch=%d heads=%d n=%d n_kv=%d d=%d d_v=%d does not fit spec d=%d d_v=%d",
             p.batch, p.heads, p.n, p.n_kv, p.d, p.d_v, s->d, attn_spec_dv(s));
    return ATTN_EINVAL;
  }
  if (p.window < 0) {
    snprintf(err, errlen, "window=%d must be >= 0 (0: no window)", p.window);
    return ATTN_EINVAL;
  }
  /* a window: each query block loads only the key blocks its rows' windows reach (templates/flash.cu) */
  const long window = p.window;
  if (window > 0 && (s->algo != ATTN_ALGO_FLASH || s->split > 1 || s->impl == ATTN_IMPL_WGMMA)) {
    snprintf(err, errlen, "%s applies no window (mma.sync flash without split-KV does)",
             s->algo != ATTN_ALGO_FLASH ? attn_algo_name(s->algo) : s->split > 1 ? "split-KV" : "impl=wgmma flash");
    return ATTN_EINVAL;
  }
  attn_spec ms = *s; /* the key blocks' mask: the problem's */
  ms.causal = p.causal;
  /* Q K^T is d deep, P V d_v wide; Q, K rows are d and V, O rows d_v entries */
  const double bh = (double)p.batch * p.heads, n = p.n, n_kv = p.n_kv, d = p.d, dv = p.d_v;
  const double esize = (double)attn_dtype_size(s->dtype);
  /* One head's transfers, scaled by batch*heads in double: the closed form is linear in bh, and one head's count
   * stays below 2^64 up to n = 2^31 for the usual tiles, while the total passes 2^64 from n = 2^29 at 32 heads. The
   * reported totals saturate at ULLONG_MAX there; the times, taken from the doubles, keep growing with n. */
  unsigned long long rd1 = 0, wr1 = 0;
  attn_spec dense = *s; /* a packed windowed decode: the dense launch's count (attn_io_formula_gqa_window packs it) */
  dense.layout = 0;
  if ((pos_rows > 1 && window > 0
           ? attn_io_formula_gqa_window(&dense, 1, pos_rows, 1, p.n / pos_rows, p.n_kv, window, &rd1, &wr1)
           : attn_io_formula_window(s, 1, p.n, p.n_kv, window, &rd1, &wr1)) != ATTN_OK) {
    snprintf(err, errlen, "no I/O closed form for %s", attn_algo_name(s->algo));
    return ATTN_EINVAL;
  }
  const unsigned long long ubh = (unsigned long long)p.batch * (unsigned long long)p.heads; /* < 2^62: exact */
  if (__builtin_mul_overflow(rd1, ubh, &out->reads)) out->reads = ULLONG_MAX;
  if (__builtin_mul_overflow(wr1, ubh, &out->writes)) out->writes = ULLONG_MAX;
  double reads = (double)rd1 * bh, writes = (double)wr1 * bh;
  out->flops = 2.0 * (d + dv) * pairs(p.causal, window, n, n_kv) * bh;
  /* the keys some query block of a head loads (each at least once: a window's consecutive ranges overlap), from
   * key kv_first */
  long kv_first = 0;
  const long shift = p.n_kv - p.n / pos_rows; /* i' of the first row */
  const double kv_keys =
      (double)attn_io_flash_keys(&ms, shift, (p.n - 1) / pos_rows + shift, p.n_kv, window, &kv_first);
  /* varlen: each sequence's closed form, FLOPs and compulsory bytes (a sequence with no key writes zero rows) */
  double seq_bytes = 0, work_qb = 0;
  if (varlen) {
    reads = writes = out->flops = 0;
    const double heads = p.heads, hkv = p.heads_kv;
    for (int b = 0; b < lay->nseq; b++) {
      const long lq = lay->lq[b], lk = lay->lk[b];
      unsigned long long r1 = 0, w1 = 0;
      if (lq > 0 && lk > 0 && attn_io_formula_window(s, 1, lq, lk, window, &r1, &w1) == ATTN_OK)
        reads += (double)r1 * heads, writes += (double)w1 * heads;
      else if (lq > 0)
        writes += (double)lq * dv * heads;
      out->flops += 2.0 * (d + dv) * pairs(p.causal, window, (double)lq, (double)lk) * heads;
      const double keys = lq > 0 ? (double)attn_io_flash_keys(&ms, lk - lq, lk - 1, lk, window, NULL) : 0;
      seq_bytes += (heads * lq + hkv * keys) * (d + dv) * esize;
      work_qb += ceil((double)lq / s->br) * heads;
    }
    out->reads = reads < 1.8e19 ? (unsigned long long)reads : ULLONG_MAX;
    out->writes = writes < 1.8e19 ? (unsigned long long)writes : ULLONG_MAX;
  }

  /* Occupancy: the compiled kernel's registers and static shared memory when known. */
  const int threads = 32 * (s->warps > 0 ? s->warps : 4);
  double regs;
  long spill = 0, smem_static = 0;
  if (res && res->registers > 0) {
    regs = res->registers;
    spill = res->spill_bytes;
    smem_static = res->smem_static;
    out->resources_from = "ptxas";
  } else {
    regs = ceil(attn_cuda_regs_estimate(s));
    out->resources_from = "estimate";
  }
  if (regs > 255) regs = 255; /* ptxas spills beyond */
  out->registers = (int)regs;
  const double warp_regs = ceil(regs * 32.0 / 256.0) * 256.0; /* allocated per warp in units of 256 */
  const double smem = (double)attn_cuda_smem(s) + (double)smem_static;
  const int by_regs = (int)floor(floor(g->regs_per_sm / warp_regs) / (threads / 32));
  const int by_smem = smem > 0 ? (int)floor(g->smem_per_sm_kb * 1024.0 / (smem + 1024.0)) : 32;
  const int by_threads = g->max_threads_sm / threads;
  int bps = by_smem < by_regs ? by_smem : by_regs;
  if (by_threads < bps) bps = by_threads;
  if (bps > 32) bps = 32;
  if (bps < 1) {
    snprintf(err, errlen, "%s Br=%d Bc=%d with %d warps does not fit an SM of %s (%.0f registers, %.0f KiB shared)",
             attn_algo_name(s->algo), s->br, s->bc, s->warps, g->name, regs, smem / 1024);
    return ATTN_EINVAL;
  }
  const long nqb = (long)ceil(n / s->br);
  /* split-KV (split = S > 1, templates/flash.cu): S blocks a query block, each over its share of the key blocks (the
   * largest share, part_kv keys, sets the block's time); then attn_combine, a second launch, which writes and reads
   * the parts' fp32 O, m and l once each through L2 */
  const double nsplit = s->split > 1 && !varlen ? s->split : 1;
  const double part_kv = nsplit > 1 ? fmin(n_kv, ceil(ceil(n_kv / s->bc) / nsplit) * s->bc) : n_kv;
  const double partials = nsplit > 1 ? 2.0 * nsplit * bh * n * (dv + 2) * 4 : 0;
  const double blocks = (double)nqb * bh * nsplit;
  /* the blocks that work (varlen: the sequences' own query blocks; the others exit at once) */
  const double working = varlen ? work_qb : blocks;
  const long slots = (long)g->sms * bps;
  out->blocks = clamp_int(blocks);
  out->blocks_per_sm = bps;
  out->waves = clamp_int(ceil(blocks / slots));
  const double clk = g->clock_mhz * 1e6;

  /* Memory: every entry of the closed form through L2; DRAM sees each input once, O once, and the re-reads of K, V
   * that the K/V of the heads in flight push out of L2. */
  const double group = (double)p.heads / p.heads_kv;
  const double compulsory = varlen ? seq_bytes : (bh * n * (d + dv) + (bh / group) * kv_keys * (d + dv)) * esize;
  const double total = (reads + writes) * esize, rereads = total > compulsory ? total - compulsory : 0;
  const double in_flight = fmin(working, (double)slots);
  const double heads_in_flight = fmin(bh, ceil(in_flight / (varlen ? fmax(1.0, working / bh) : nqb)) + 1);
  /* a head's K/V at once: all of it, or with a window what its query blocks in flight reach */
  const double head_keys = window > 0 ? fmin(n_kv, fmin(n, in_flight * s->br) / pos_rows + window + s->bc) : n_kv;
  out->l2_resident_bytes = fmin(bh / group, ceil(heads_in_flight / group) + 1) * head_keys * (d + dv) * esize;
  const double l2 = L2_USABLE * g->l2_mb * 1048576.0;
  const double hit = out->l2_resident_bytes <= l2 ? 1.0 : l2 / out->l2_resident_bytes;
  const double bw = g->bandwidth_tbs * 1e12;
  out->t_dram_ms = (compulsory + rereads * (1 - hit)) / (bw * DRAM_EFF) * 1e3;
  out->t_l2_ms = (total + partials) / (bw * L2_OVER_HBM) * 1e3;
  if (lay && lay->page_size > 0) { /* K/V in page runs: their DRAM bytes and L2 sectors (paged_factors) */
    const model_paged f = paged_factors(&p, s, lay->page_size, kv_first, kv_keys);
    const double kv = (bh / group) * kv_keys * (d + dv) * esize, qo = bh * n * (d + dv) * esize;
    const double kv_l2 = total > qo ? total - qo : 0;
    out->t_dram_ms = (compulsory + kv * (f.dram_factor - 1) + rereads * (1 - hit) * f.dram_factor) /
                     (bw * DRAM_EFF) * 1e3;
    out->t_l2_ms = (total + kv_l2 * (f.l2_factor - 1)) / (bw * L2_OVER_HBM) * 1e3;
  }
  out->t_memory_ms = fmax(out->t_dram_ms, out->t_l2_ms);

  const char *cbound;
  if (s->algo == ATTN_ALGO_FLASH) {
    attn_kb_work w;
    if (kb_work(s, &w) != 0) {
      snprintf(err, errlen, "no instruction counts for this flash configuration");
      return ATTN_EINVAL;
    }
    out->cyc_tensor = w.mma_flops / g->mma_flops_clk_sm;
    out->cyc_sfu = w.ex2 / g->sfu_clk_sm;
    out->cyc_alu = w.alu / (g->fp32_flops_clk_sm / 2.0);
    /* spilled registers go to local memory once per key block, through the same L1/shared pipe */
    out->cyc_smem = (w.smem_bytes + (double)threads * spill) / g->smem_bytes_clk_sm;
    const double serial = out->cyc_tensor + out->cyc_sfu + out->cyc_alu + out->cyc_smem;
    const double top = fmax(fmax(out->cyc_tensor, out->cyc_sfu), fmax(out->cyc_alu, out->cyc_smem));
    const double resident = fmin((double)bps, ceil(working / g->sms));      /* blocks per SM at once */
    const double wps = resident * (threads / 32.0) / 4.0;                    /* warps per scheduler */
    const double hidden = fmin(OVERLAP_MAX, OVERLAP_WARP * fmin(wps, 1.0) + OVERLAP_MORE * fmax(0, wps - 1));
    out->cyc_key_block = top + (serial - top) * (1 - hidden);
    /* on its slot a block advances one key block per `resident` SM key blocks, unless its own loads are late:
     * stages - 1 blocks in flight (one stage: V during S, the next K during the softmax, about half a block) */
    const double depth = s->stages > 1 ? s->stages - 1 : 0.5;
    const double share = resident * out->cyc_key_block;
    const double per_kb = fmax(share, out->cyc_key_block + fmax(0, KEY_LATENCY_CYC - depth * share));
    double ideal = 0;
    const double makespan =
        varlen ? schedule_varlen(&ms, window, lay, p.heads, nqb, slots, per_kb, BLOCK_LATENCY_CYC, &ideal)
               : schedule(&ms, window, pos_rows, bh * nsplit, n, part_kv, slots, per_kb, BLOCK_LATENCY_CYC, &ideal);
    out->t_compute_ms = makespan / clk * 1e3;
    /* the schedule (few blocks, the last wave's tail) or exposed latency cost more than the units: occupancy */
    const double units_only = ideal * (share / per_kb);
    cbound = makespan > SLOWDOWN_OCCUPANCY * units_only || wps < 1 ? "occupancy"
                                                                     : unit_name(out->cyc_tensor, out->cyc_sfu,
                                                                                 out->cyc_alu, out->cyc_smem);
  } else {
    /* smallcache: both products and the pass over S at a share of the tensor-core (f32: fp32) rate; lowrank: its
     * feature maps and rank-r products likewise */
    double flops = out->flops * 1.1;
    if (s->algo == ATTN_ALGO_LOWRANK) {
      const double r = (double)attn_io_rank(s);
      flops = bh * (2.0 * n_kv * r * (dv + 1) + 2.0 * n * r * (dv + 1) + (n + n_kv) * r * d * 2.0);
    }
    const double rate = (s->dtype == ATTN_F32 ? g->fp32_flops_clk_sm : g->mma_flops_clk_sm) * clk * g->sms;
    const double eff = 0.35 * (s->stages > 1 ? 1.0 : 0.8) * (0.6 + 0.4 * clamp01(bps * threads / 32.0 / 8.0));
    out->t_compute_ms = flops / (rate * eff) * (ceil(blocks / slots) * slots / blocks) * 1e3;
    cbound = s->dtype == ATTN_F32 ? "fp32_alu" : "tensor_cores";
  }
  out->t_overhead_ms = LAUNCH_MS * (nsplit > 1 ? 2 : 1); /* split-KV: attn_combine's launch too */
  out->time_ms = fmax(out->t_compute_ms, out->t_memory_ms) + out->t_overhead_ms;
  if (out->t_overhead_ms > fmax(out->t_compute_ms, out->t_memory_ms)) out->bound = "launch";
  else if (out->t_memory_ms > out->t_compute_ms) out->bound = out->t_dram_ms >= out->t_l2_ms ? "dram" : "l2";
  else out->bound = cbound;
  return ATTN_OK;
}

int attn_model_bound_known(const char *name) {
  static const char *const bounds[] = {"tensor_cores", "special_functions", "fp32_alu", "shared_memory",
                                       "occupancy",    "dram",              "l2",       "launch"};
  for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++)
    if (strcmp(name, bounds[i]) == 0) return 1;
  return 0;
}

/* ---- the backward (templates/flash_bwd.cu; docs/model.md's backward part) ----
 * Two kinds of thread blocks, in grid order: a dK/dV block per key block of a KV head, whose inner loop visits every
 * query block of its query heads that sees a key of it (S, dP, dV += Pᵀ dO, dK += dSᵀ Q: four products of Br x Bc
 * x d), then a dQ block per query block of a head, whose loop visits the key blocks it sees (S, dP, dQ += dS K:
 * three). Per inner step, in SM cycles: tensor = mma FLOPs / mma rate (f32: fma on the CUDA cores); sfu = Br Bc ex2
 * / 16; alu = ~12 fp32 operations a score (scale, exp's argument, masks, P (dP - delta), two conversions) / lanes;
 * smem = the shared-memory wavefronts (128 B each) of the fragments the warps read, the P and dS they write and the
 * next block's rows. A warp owns U consecutive 16x8 tiles of a product (row-major, NT a row) and at each k-step
 * loads A's fragment by one ldmatrix.x4 (4 wavefronts) per tile row its tiles cross and B's by one .x2 (2) per tile:
 * (4 (1 + (U - 1) / NT) + 2 U) / U wavefronts an mma.sync.m16n8k16 (bwd_wf), U at most 4 for S and dP (their
 * tiles are computed 4 at a time). That is what bounds the kernel. Combined as the forward's key block (the largest
 * unit plus the hidden share of the rest); blocks scheduled greedily in grid order on the SM slots the occupancy
 * allows (registers: 110 + the accumulators; shared memory: ATTN_FLASH_BWD_SMEM); memory from the rows each step
 * loads.
 * Fitted: BWD_SMEM_EFF, the one number taken from a measurement, of the kernel before ldmatrix (an H200, bf16 and
 * f16, d = 128, n = 4096, 8 heads, Br = Bc = 32, 4 warps, 1 stage: 4.0 ms, causal 2.2; its 6 to 12 wavefronts an
 * mma alone predict 2.4 and 1.3): the shared-memory pipe at 60% of its 128 B a clock under these loads' issue and
 * latency, assumed to hold for the ldmatrix kernel until a GPU measures it.
 * dq=atomic: no dQ blocks; each dK/dV step adds dQ_i += dS K_j (a fifth product, its tiles 4 at a time) to an fp32
 * scratch by Br x d atomics: their issue through the load/store pipe (4 bytes a lane, 128 a warp, as the
 * shared-memory wavefronts), their read-modify-write at L2 (BWD_ATOMIC_L2 times the bytes), and the scratch zeroed
 * by attn_bwd_pre and read by attn_bwd_post (DRAM, a third launch). Not measured on a GPU: a prediction. */
#define BWD_SMEM_EFF 0.6
#define BWD_ATOMIC_L2 2.0 /* L2 traffic of a fp32 atomic add, in its bytes: read and write of the line's word */
#define BWD_REG_BASE 110.0 /* registers besides the accumulators (ptxas, sm_80/sm_90, d = 128) */
#define BWD_ALU_PER_SCORE 12.0

/* wavefronts an mma of a warp's u consecutive tiles, nt a tile row (see above) */
static double bwd_wf(int u, int nt) { return u < 1 ? 6.0 : (4.0 * (1.0 + (u - 1) / (double)nt) + 2.0 * u) / u; }

/* fp32 accumulators of a thread for a Rows x W product over `warps` warps in 16x8 tiles */
static double bwd_acc_of(int rows, int w, int warps) {
  const double tiles = (double)(rows / 16) * (double)((w + 15) / 16 * 2);
  return 4.0 * ceil(tiles / warps);
}

/* Cycles of one inner step of a block of kind kv (1: dK/dV, 0: dQ), and its units. */
static void bwd_step(const attn_gpu *g, const attn_spec *s, int kv, double hidden, double *cyc, double units[4]) {
  const double br = s->br, bc = s->bc, dp = (s->d + 15) / 16 * 16, dvp = (attn_spec_dv(s) + 15) / 16 * 16;
  const double es = (double)attn_dtype_size(s->dtype);
  /* multiply-adds of the products: S (d deep), dP (d_v deep), then dV (d_v wide) and dK (d wide), or dQ (d wide);
   * dq=atomic: dK/dV steps add dQ's (d wide) */
  const double macs =
      br * bc * (dp + dvp) + (kv ? br * bc * (dp + dvp) : br * bc * dp) + (kv && s->dq ? br * bc * dp : 0);
  double tensor, smem;
  if (s->dtype == ATTN_F32) { /* fmaf over k on the CUDA cores: one 4-byte operand load a multiply-add */
    tensor = 2.0 * macs / g->fp32_flops_clk_sm;
    smem = 4.0 * macs;
  } else { /* mma.sync.m16n8k16: 2048 multiply-adds; each wavefront 128 bytes */
    tensor = 2.0 * macs / g->mma_flops_clk_sm;
    const int w = s->warps, ns = s->br / 16 * (s->bc / 8), us = (ns + w - 1) / w;
    const double sd = br * bc * (dp + dvp) * bwd_wf(us < 4 ? us : 4, s->bc / 8);
    const int nk = s->bc / 16 * ((int)dp / 8), nv = s->bc / 16 * ((int)dvp / 8), nq = s->br / 16 * ((int)dp / 8);
    const double rest = kv ? br * bc * (dp * bwd_wf((nk + w - 1) / w, (int)dp / 8) +
                                        dvp * bwd_wf((nv + w - 1) / w, (int)dvp / 8))
                           : br * bc * dp * bwd_wf((nq + w - 1) / w, (int)dp / 8);
    const int uq = (nq + w - 1) / w;
    smem = (sd + rest + (kv && s->dq ? br * bc * dp * bwd_wf(uq < 4 ? uq : 4, (int)dp / 8) : 0)) / 2048.0 * 128.0;
  }
  /* P and dS written (dQ: dS only; a 16-bit store a lane, a wavefront a warp), the next rows loaded: Q_i and dO_i,
   * or K_j and V_j */
  smem += (kv ? 2.0 : 1.0) * br * bc * (s->dtype == ATTN_F32 ? 4.0 : 64.0 / 32.0 * 2.0) +
          (kv ? br : bc) * (dp + dvp) * es;
  if (kv && s->dq) smem += br * s->d * 4.0; /* the atomics' issue: 128 bytes a warp instruction */
  units[0] = tensor;
  units[1] = br * bc / g->sfu_clk_sm;
  units[2] = BWD_ALU_PER_SCORE * br * bc / (g->fp32_flops_clk_sm / 2.0);
  units[3] = smem / (g->smem_bytes_clk_sm * BWD_SMEM_EFF);
  const double top = fmax(fmax(units[0], units[1]), fmax(units[2], units[3]));
  *cyc = top + (units[0] + units[1] + units[2] + units[3] - top) * (1 - hidden);
}

int attn_model_time_bwd(const attn_gpu *g, const attn_problem *prob, const attn_spec *s, attn_model_result *out,
                        char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  char why[512];
  if (attn_spec_check_backward_cuda(s, (long long)(g->smem_per_block_kb * 1024.0), why, sizeof why) != ATTN_OK) {
    snprintf(err, errlen, "%s", why);
    return ATTN_EINVAL;
  }
  attn_problem p = *prob;
  if (p.n_kv == 0) p.n_kv = p.n;
  if (p.heads_kv == 0) p.heads_kv = p.heads;
  if (p.d_v == 0) p.d_v = p.d;
  if (p.batch < 1 || p.heads < 1 || p.n < 1 || p.n_kv < 1 || p.d != s->d || p.d_v != attn_spec_dv(s) ||
      p.heads_kv < 1 || p.heads % p.heads_kv || p.causal != s->causal) {
    snprintf(err, errlen, "problem batch=%d heads=%d n=%d n_kv=%d d=%d d_v=%d does not fit spec d=%d d_v=%d", p.batch,
             p.heads, p.n, p.n_kv, p.d, p.d_v, s->d, attn_spec_dv(s));
    return ATTN_EINVAL;
  }
  const double bh = (double)p.batch * p.heads, bhk = (double)p.batch * p.heads_kv, G = bh / bhk;
  const double n = p.n, n_kv = p.n_kv, d = p.d, dv = p.d_v, es = (double)attn_dtype_size(s->dtype);
  /* FlashAttention's count: 2.5 times the forward's 2 n n_kv (d + d_v) a head (causal: the visible pairs) */
  out->flops = 2.5 * 2.0 * (d + dv) * pairs(p.causal, 0, n, n_kv) * bh;

  /* occupancy */
  const int threads = 32 * s->warps;
  /* dq=atomic: dK/dV's and 4 tiles of dS K_j at a time; else the larger of dK/dV's and dQ's */
  const double acc_kv = bwd_acc_of(s->bc, s->d, s->warps) + bwd_acc_of(s->bc, attn_spec_dv(s), s->warps);
  const double acc = s->dq ? acc_kv + fmin(16.0, bwd_acc_of(s->br, s->d, s->warps))
                           : fmax(acc_kv, bwd_acc_of(s->br, s->d, s->warps));
  const double regs = fmin(255.0, BWD_REG_BASE + acc);
  out->registers = (int)regs;
  out->resources_from = "estimate";
  const double warp_regs = ceil(regs * 32.0 / 256.0) * 256.0;
  const double smem = (double)attn_spec_backward_cuda_smem(s);
  const int by_regs = (int)floor(floor(g->regs_per_sm / warp_regs) / (threads / 32));
  const int by_smem = (int)floor(g->smem_per_sm_kb * 1024.0 / (smem + 1024.0));
  int bps = by_regs < by_smem ? by_regs : by_smem;
  if (g->max_threads_sm / threads < bps) bps = g->max_threads_sm / threads;
  if (bps > 32) bps = 32;
  if (bps < 1) {
    snprintf(err, errlen, "backward Br=%d Bc=%d with %d warps does not fit an SM of %s (%.0f registers, %.0f KiB "
             "shared)", s->br, s->bc, s->warps, g->name, regs, smem / 1024);
    return ATTN_EINVAL;
  }
  const long nkb = (long)ceil(n_kv / s->bc), nqb = (long)ceil(n / s->br);
  const double blocks = bhk * nkb + (s->dq ? 0 : bh * nqb);
  const long slots = (long)g->sms * bps;
  out->blocks = clamp_int(blocks);
  out->blocks_per_sm = bps;
  out->waves = clamp_int(ceil(blocks / slots));
  const double resident = fmin((double)bps, ceil(blocks / g->sms));
  const double wps = resident * s->warps / 4.0;
  const double hidden = fmin(OVERLAP_MAX, OVERLAP_WARP * fmin(wps, 1.0) + OVERLAP_MORE * fmax(0, wps - 1));
  double ckv, cq, ukv[4], uq[4];
  bwd_step(g, s, 1, hidden, &ckv, ukv);
  bwd_step(g, s, 0, hidden, &cq, uq);
  out->cyc_tensor = ukv[0], out->cyc_sfu = ukv[1], out->cyc_alu = ukv[2], out->cyc_smem = ukv[3];
  out->cyc_key_block = ckv;
  /* a step's loads (~700 cycles) covered by the next block's rows in flight (stages 2) or half a step (1) */
  const double depth = s->stages > 1 ? 1.0 : 0.5;
  const double pkv = fmax(resident * ckv, ckv + fmax(0, KEY_LATENCY_CYC - depth * resident * ckv));
  const double pq = fmax(resident * cq, cq + fmax(0, KEY_LATENCY_CYC - depth * resident * cq));

  /* steps of each block: dK/dV block j sees the query blocks from the first row whose diagonal reaches it, times
   * the query heads of its KV head; dQ block i the key blocks below its last row's diagonal */
  double *h = calloc((size_t)slots, sizeof *h);
  if (!h) {
    snprintf(err, errlen, "out of memory");
    return ATTN_ENOMEM;
  }
  double end = 0, work = 0, steps_kv = 0, steps_q = 0;
  const int simulate = blocks <= SIM_MAX_BLOCKS;
  for (int kind = 1; kind >= (s->dq ? 1 : 0); kind--) {
    const long per = kind ? nkb : nqb;
    const double heads = kind ? bhk : bh;
    for (long b = 0; b < per; b++) {
      double st;
      if (kind) {
        const double first = p.causal ? (double)b * s->bc - (n_kv - n) : 0;
        const double ib0 = first <= 0 ? 0 : first >= n ? nqb : floor(first / s->br);
        st = G * (nqb - ib0);
        steps_kv += st * heads;
      } else {
        st = key_blocks(s, 0, 1, b, n, n_kv);
        steps_q += st * heads;
      }
      const double c = st * (kind ? pkv : pq) + BLOCK_LATENCY_CYC;
      work += c * heads;
      if (simulate)
        for (long k = 0; k < (long)heads; k++) {
          h[0] += c;
          if (h[0] > end) end = h[0];
          heap_down(h, slots, 0);
        }
    }
  }
  free(h);
  const double ideal = work / slots;
  if (!simulate) end = ideal * 1.05;
  const double clk = g->clock_mhz * 1e6;
  out->t_compute_ms = end / clk * 1e3;
  /* memory: each step's rows (Q_i, dO_i, lse, delta; or K_j, V_j) through L2, the inputs and gradients once from
   * DRAM; attn_bwd_pre reads O and dO once more */
  const double rows_q = n * (d + dv) * es + 8.0 * n, rows_kv = n_kv * (d + dv) * es;
  const double l2 = steps_kv * s->br * (d + dv) * es + steps_q * s->bc * (d + dv) * es;
  const double dram = 2.0 * (bh * rows_q + bhk * rows_kv) + bh * n * dv * es * 2.0;
  /* dq=atomic: every step's Br x d fp32 atomics at L2 (the scratch's zeroing and reading: t_overhead_ms) */
  const double scratch = s->dq ? bh * n * d * 4.0 : 0, atomics = s->dq ? steps_kv * s->br * d * 4.0 : 0;
  const double l2_all = l2 + BWD_ATOMIC_L2 * atomics;
  const double bw = g->bandwidth_tbs * 1e12;
  out->reads = (unsigned long long)((l2_all + dram / 2) / es);
  out->writes = (unsigned long long)((bh * n * d + bhk * n_kv * (d + dv)));
  out->t_dram_ms = dram / (bw * DRAM_EFF) * 1e3;
  out->t_l2_ms = (l2_all + dram) / (bw * L2_OVER_HBM) * 1e3;
  out->t_memory_ms = fmax(out->t_dram_ms, out->t_l2_ms);
  out->t_overhead_ms = 2 * LAUNCH_MS + bh * n * dv * es * 2.0 / (bw * DRAM_EFF) * 1e3; /* attn_bwd_pre */
  if (s->dq) /* attn_bwd_post: a launch, the scratch read, dq written; attn_bwd_pre's zeroing */
    out->t_overhead_ms += LAUNCH_MS + (2.0 * scratch + bh * n * d * es) / (bw * DRAM_EFF) * 1e3;
  out->time_ms = fmax(out->t_compute_ms, out->t_memory_ms) + out->t_overhead_ms;
  const double units_only = ideal * (fmax(resident * ckv, 1) / fmax(pkv, 1));
  if (out->t_overhead_ms > fmax(out->t_compute_ms, out->t_memory_ms)) out->bound = "launch";
  else if (out->t_memory_ms > out->t_compute_ms) out->bound = out->t_dram_ms >= out->t_l2_ms ? "dram" : "l2";
  else if (end > SLOWDOWN_OCCUPANCY * units_only || wps < 1) out->bound = "occupancy";
  else out->bound = unit_name(ukv[0], ukv[1], ukv[2], ukv[3]);
  return ATTN_OK;
}
