/* model.c: ranking CUDA configurations for a GPU that is not present.
 *   time = max(t_compute, t_memory) + t_overhead
 *   t_compute = waves-limited FLOPs at the dtype's peak, scaled by an efficiency that grows with the tile sizes
 *               (small tiles cannot keep the tensor cores fed) and with pipelining (stages > 1);
 *   t_memory  = compulsory traffic (Q, K, V read once, O written once) at HBM bandwidth plus the re-reads the
 *               closed form counts (K, V once per query block) at L2 bandwidth when one head's K, V fit in L2;
 *   t_overhead = launch latency plus a small per-wave cost.
 * The constants are coarse by design: the model orders configurations, it does not predict to the percent. */
#include "model.h"
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "io_theory.h"
#include "space.h"

#define LAUNCH_MS 0.005          /* kernel launch latency */
#define WAVE_MS 0.001            /* per wave: block scheduling, prologue/epilogue */
#define L2_OVER_HBM 3.0          /* L2 bandwidth as a multiple of HBM bandwidth */
#define ATTAINABLE 0.75          /* fraction of peak a well-tiled attention kernel reaches (FA2 on A100: ~73%) */

static double clamp01(double x) { return x < 0 ? 0 : x > 1 ? 1 : x; }

/* A count kept in double, as an int field: saturated, since converting a double beyond INT_MAX is undefined. */
static int clamp_int(double x) { return x < INT_MAX ? (int)x : INT_MAX; }

/* Visible (query, key) pairs of one head: all, or bottom-right causal. */
static double pairs(int causal, double n, double n_kv) {
  if (!causal) return n * n_kv;
  double sum = 0;
  for (long i = 0; i < (long)n; i++) {
    double v = i + (n_kv - n) + 1;
    sum += v < 0 ? 0 : v > n_kv ? n_kv : v;
  }
  return sum;
}

int attn_model_time(const attn_gpu *g, const attn_problem *prob, const attn_spec *s, attn_model_result *out,
                    char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (s->target != ATTN_TARGET_CUDA) {
    snprintf(err, errlen, "the performance model is for CUDA configurations");
    return ATTN_EINVAL;
  }
  attn_problem p = *prob;
  if (p.n_kv == 0) p.n_kv = p.n;
  if (p.heads_kv == 0) p.heads_kv = p.heads;
  if (p.batch < 1 || p.heads < 1 || p.n < 1 || p.n_kv < 1 || p.d != s->d || s->br < 1) {
    snprintf(err, errlen, "problem batch=%d heads=%d n=%d n_kv=%d d=%d does not fit spec d=%d", p.batch, p.heads,
             p.n, p.n_kv, p.d, s->d);
    return ATTN_EINVAL;
  }
  const double bh = (double)p.batch * p.heads, n = p.n, n_kv = p.n_kv, d = p.d;
  const double esize = (double)attn_dtype_size(s->dtype);
  /* One head's transfers, scaled by batch*heads in double: the closed form is linear in bh, and one head's count
   * stays below 2^64 up to n = 2^31 for the usual tiles, while the total passes 2^64 from n = 2^29 at 32 heads. The
   * reported totals saturate at ULLONG_MAX there; the times, taken from the doubles, keep growing with n. */
  unsigned long long rd1 = 0, wr1 = 0;
  if (attn_io_formula(s, 1, p.n, p.n_kv, &rd1, &wr1) != ATTN_OK) {
    snprintf(err, errlen, "no I/O closed form for %s", attn_algo_name(s->algo));
    return ATTN_EINVAL;
  }
  const unsigned long long ubh = (unsigned long long)p.batch * (unsigned long long)p.heads; /* < 2^62: exact */
  if (__builtin_mul_overflow(rd1, ubh, &out->reads)) out->reads = ULLONG_MAX;
  if (__builtin_mul_overflow(wr1, ubh, &out->writes)) out->writes = ULLONG_MAX;
  const double reads = (double)rd1 * bh, writes = (double)wr1 * bh;

  /* FLOPs the kernel executes (lowrank: feature maps and the two rank-r products instead of n x n_kv work). */
  double flops;
  double useful = 4.0 * d * pairs(p.causal, n, n_kv) * bh;
  if (s->algo == ATTN_ALGO_LOWRANK) {
    double r = (double)attn_io_rank(s);
    flops = bh * (2.0 * n_kv * r * (d + 1) + 2.0 * n * r * (d + 1) + (n + n_kv) * r * d * 2.0);
  } else if (s->algo == ATTN_ALGO_SMALLCACHE) {
    flops = useful * 1.1; /* the extra pass over S for the row statistics */
  } else {
    flops = useful;
  }
  out->flops = useful;

  /* Blocks, occupancy and waves. */
  const double smem = attn_space_fast_bytes(s);
  const int threads = 32 * (s->warps > 0 ? s->warps : 4);
  const double regs = (s->algo == ATTN_ALGO_FLASH ? (s->br * d + (double)s->br * s->bc) / threads : 64.0) + 40.0;
  int by_smem = smem > 0 ? (int)floor(g->smem_per_sm_kb * 1024.0 / smem) : 32;
  int by_regs = (int)floor(g->regs_per_sm / (regs * threads));
  int by_threads = 2048 / threads;
  int bps = by_smem < by_regs ? by_smem : by_regs;
  if (by_threads < bps) bps = by_threads;
  if (bps < 1) bps = 1;
  const double blocks = ceil(n / s->br) * bh;
  const double per_sm = ceil(blocks / g->sms); /* blocks one SM runs over the kernel's life */
  out->blocks = clamp_int(blocks);
  out->blocks_per_sm = bps;
  out->waves = clamp_int(ceil(per_sm / bps));

  /* Efficiency: tensor-core tiles want Br, Bc >= 128; one stage leaves loads exposed; few warps per SM hide
   * little latency. fp32 runs on the CUDA cores at the fp32 rate. */
  double eff = ATTAINABLE * pow(clamp01(s->br / 128.0), 0.5) * pow(clamp01(s->bc / 128.0), 0.3);
  if (s->stages <= 1) eff *= 0.8;
  double resident_warps = (per_sm < bps ? per_sm : bps) * (threads / 32.0);
  eff *= 0.6 + 0.4 * clamp01(resident_warps / 8.0);
  if (s->algo == ATTN_ALGO_SMALLCACHE) eff *= 0.7; /* S goes through slow memory between the two products */
  const double peak_sm = attn_gpu_peak(g, s->dtype) / g->sms;
  out->t_compute_ms = per_sm * (flops / blocks) / (peak_sm * eff) * 1e3;

  const double bw = g->bandwidth_tbs * 1e12;
  const double compulsory = bh * (2.0 * n * d + 2.0 * n_kv * d) * esize;
  double total = (reads + writes) * esize, rereads = total > compulsory ? total - compulsory : 0;
  const double kv_head = 2.0 * n_kv * d * esize;
  const double reread_bw = kv_head * fmin(bh, g->sms) <= g->l2_mb * 1048576.0 ? bw * L2_OVER_HBM : bw;
  out->t_memory_ms = (compulsory / bw + rereads / reread_bw) * 1e3;
  out->t_overhead_ms = LAUNCH_MS + WAVE_MS * ceil(per_sm / bps); /* the unclamped count */
  out->time_ms = fmax(out->t_compute_ms, out->t_memory_ms) + out->t_overhead_ms;
  return ATTN_OK;
}
