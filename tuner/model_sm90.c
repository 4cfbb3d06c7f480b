/* model_sm90.c: the Hopper flash template's performance model (model_sm90.h, docs/model.md).
 *
 * Per key block of one thread block (Br = 64 C query rows, Bc keys), in SM cycles:
 *   tensor  = 2 Br Bc (d16 + dv16) / (wgmma dense FLOP/clk/SM x ATTN_SM90_TC_SUSTAINED), d16, dv16: padded to 16
 *   sfu     = Br (Bc + 4) / ex2 per clk (every P; each row's rescale factor, computed by the 4 lanes of its quad)
 *   alu     = (5 Br Bc + Br dv16 + 10 Br) / fp32 lanes (scale, max, subtract, sum, convert; O's rescale; per row)
 *   work    = max(tensor, softmax) + (1 - ATTN_SM90_HIDDEN) min(tensor, softmax), softmax = sfu + alu
 *   load    = ATTN_SM90_LOAD_CYCLES + Bc (d + d_v) bytes / the SM's share of L2 (3 x 90% of DRAM's, as below)
 *   block   = work + max(0, load - (stages - 1/2) work)
 * A warpgroup's softmax of block j runs while its P_{j-1} V_{j-1} and the other consumer's products keep the
 * tensor cores busy; without FA3's ping-pong barriers the two consumers are not kept out of phase, hence a share.
 * The ring: a stage's K is released once S_j's wgmma completes and needed again `stages` blocks on (its V likewise,
 * a block later on both ends), so a refill has about stages - 1/2 blocks of work to hide behind; with one stage, the
 * next K's copy runs during the softmax and P V only. The wait it leaves is the block's.
 * One thread block per SM (setmaxnreg gives the consumers the whole register file): a deeper ring costs shared
 * memory only, which no second block would use, so once the loads are hidden more stages change nothing (the space
 * leaves those out). Blocks are scheduled heaviest first as the grid orders them (causal: the key blocks below the
 * diagonal), each paying ATTN_SM90_START_CYCLES.
 * Memory: the closed form's entries through L2 (3 x DRAM bandwidth, as tuner/model.c), DRAM Q, K, V, O once, at
 * 90% of the datasheet. time = max(compute, DRAM, L2) + 5 us. */
#include "model_sm90.h"
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "spec_sm90.h"

static int key_blocks(const attn_spec *s, long long n, long long n_kv, long long qb) {
  const long long nqb = (n + s->br - 1) / s->br, q = s->causal ? nqb - 1 - qb : qb;
  const long long i0 = q * s->br, rows = n - i0 < s->br ? n - i0 : s->br;
  long long L = n_kv;
  if (s->causal) {
    const long long e = i0 + rows + n_kv - n;
    L = e < 0 ? 0 : e < n_kv ? e : n_kv;
  }
  return L > 0 ? (int)((L - 1) / s->bc + 1) : 0;
}

static int cmp_ll(const void *a, const void *b) {
  const long long x = *(const long long *)a, y = *(const long long *)b;
  return (x > y) - (x < y);
}

/* The per-key-block cycles of s on g (the header's table) into out's cyc_* fields; *wait: the ring's share of
 * cyc_key_block. */
static void key_block(const attn_gpu *g, const attn_spec *s, attn_model_result *out, double *wait) {
  const double br = s->br, bc = s->bc, d16 = (s->d + 15) / 16 * 16, dv16 = attn_sm90_npv(s);
  const double tc_rate = attn_gpu_peak(g, s->dtype) / (g->sms * g->clock_mhz * 1e6);
  out->cyc_tensor = 2.0 * br * bc * (d16 + dv16) / (tc_rate * ATTN_SM90_TC_SUSTAINED);
  out->cyc_sfu = br * (bc + 4) / g->sfu_clk_sm;
  out->cyc_alu = (5.0 * br * bc + br * dv16 + 10.0 * br) / (g->fp32_flops_clk_sm / 2);
  out->cyc_smem = 0; /* wgmma reads its operands from shared memory itself, TMA writes them: no ld/st.shared */
  const double soft = out->cyc_sfu + out->cyc_alu, hi = soft > out->cyc_tensor ? soft : out->cyc_tensor;
  const double lo = soft > out->cyc_tensor ? out->cyc_tensor : soft, work = hi + (1.0 - ATTN_SM90_HIDDEN) * lo;
  const double l2_clk = 3 * 0.9 * g->bandwidth_tbs * 1e12 / (g->sms * g->clock_mhz * 1e6); /* bytes/clk/SM */
  const double load = ATTN_SM90_LOAD_CYCLES + bc * (s->d + attn_spec_dv(s)) * attn_dtype_size(s->dtype) / l2_clk;
  const double w = load - (s->stages - 0.5) * work;
  *wait = w > 0 ? w : 0;
  out->cyc_key_block = work + *wait;
}

static int rates_ok(const attn_gpu *g) {
  return g && g->clock_mhz > 0 && g->sfu_clk_sm > 0 && g->fp32_flops_clk_sm > 0 && g->sms >= 1 && g->bandwidth_tbs > 0;
}

double attn_model_sm90_ring_wait(const attn_gpu *g, const attn_spec *s) {
  if (!s || s->impl != ATTN_IMPL_WGMMA || s->stages < 1 || s->br < 1 || s->bc < 1 || !rates_ok(g)) return -1;
  attn_model_result r;
  double wait;
  key_block(g, s, &r, &wait);
  return wait;
}

static int sm90_time(const attn_gpu *g, const attn_problem *p, const attn_spec *s, attn_model_result *out, char *err,
                     size_t len);

/* The runtime's grouped-query packing (attn_cuda_gqa_packs, runtime/cuda.c) holds for this template too: the grid is
 * heads_kv heads of (heads / heads_kv)·n unmasked rows, so K and V are counted once per KV head. The FLOPs are the
 * problem's either way (packing needs no mask, or n = 1, whose causal row sees every key). */
int attn_model_sm90_time(const attn_gpu *g, const attn_problem *p, const attn_spec *s, attn_model_result *out,
                         char *err, size_t len) {
  attn_problem q = *p, k;
  if (q.heads_kv == 0) q.heads_kv = q.heads;
  if (!s || !attn_cuda_launch_problem(&q, s, &k)) return sm90_time(g, p, s, out, err, len);
  attn_spec ks = *s;
  ks.causal = 0;
  return sm90_time(g, &k, &ks, out, err, len);
}

static int sm90_time(const attn_gpu *g, const attn_problem *p, const attn_spec *s, attn_model_result *out, char *err,
                     size_t len) {
  memset(out, 0, sizeof *out);
  if (!s || s->impl != ATTN_IMPL_WGMMA) return attn_errf(err, len, ATTN_EINVAL, "not an impl=wgmma spec");
  const int rc = attn_spec_check_sm90(s, err, len);
  if (rc != ATTN_OK) return attn_errf(err, len, ATTN_EINVAL, "%s", err ? err : "spec refused");
  if (!rates_ok(g))
    return attn_errf(err, len, ATTN_EINVAL, "GPU %s has no per-SM rates for the model", g ? g->name : "(none)");
  const long long n = p->n, n_kv = p->n_kv > 0 ? p->n_kv : p->n, heads = p->heads;
  const long long heads_kv = p->heads_kv > 0 ? p->heads_kv : heads, bh = (long long)p->batch * heads;
  const int d = p->d, dv = p->d_v > 0 ? p->d_v : p->d;
  if (n < 1 || bh < 1 || d != s->d || dv != attn_spec_dv(s) || (p->causal != 0) != (s->causal != 0))
    return attn_errf(err, len, ATTN_EINVAL, "problem (n=%lld, batch*heads=%lld, d=%d, d_v=%d, causal=%d) is not the "
                     "spec's", n, bh, d, dv, p->causal);
  double wait;
  key_block(g, s, out, &wait);
  const double soft = out->cyc_sfu + out->cyc_alu;
  out->blocks_per_sm = 1;
  out->registers = 168;
  out->resources_from = "estimate";

  /* the schedule: each SM takes the next block of the grid when its current one ends */
  const long long nqb = (n + s->br - 1) / s->br, blocks = nqb * bh;
  if (blocks > 1LL << 24) return attn_errf(err, len, ATTN_EINVAL, "%lld thread blocks: too many to schedule", blocks);
  long long *sm = calloc((size_t)g->sms, sizeof *sm);
  if (!sm) return attn_errf(err, len, ATTN_ENOMEM, "out of memory");
  double flops = 0, total = 0;
  unsigned long long reads = 0, writes = 0;
  for (long long b = 0; b < blocks; b++) {
    const long long qb = b % nqb, q = s->causal ? nqb - 1 - qb : qb;
    const int kb = key_blocks(s, n, n_kv, qb);
    const long long rows = n - q * s->br < s->br ? n - q * s->br : s->br;
    int m = 0; /* the SM that frees first */
    for (int i = 1; i < g->sms; i++)
      if (sm[i] < sm[m]) m = i;
    sm[m] += (long long)(ATTN_SM90_START_CYCLES + kb * out->cyc_key_block);
    total += ATTN_SM90_START_CYCLES + kb * out->cyc_key_block;
    const long long keys = kb ? (kb * (long long)s->bc < n_kv ? kb * (long long)s->bc : n_kv) : 0;
    reads += (unsigned long long)(rows * d + keys * (d + dv));
    writes += (unsigned long long)(rows * dv);
  }
  qsort(sm, (size_t)g->sms, sizeof *sm, cmp_ll);
  const double span = (double)sm[g->sms - 1];
  free(sm);
  /* useful FLOPs: visible pairs only */
  for (long long i = 0; i < n; i++) {
    long long vis = n_kv;
    if (p->causal) {
      const long long e = i + n_kv - n + 1;
      vis = e < 0 ? 0 : e < n_kv ? e : n_kv;
    }
    flops += 2.0 * vis * (d + dv);
  }
  flops *= (double)bh;
  out->flops = flops;
  out->reads = reads;
  out->writes = writes;
  out->blocks = (int)(blocks < 0x7fffffff ? blocks : 0x7fffffff);
  out->waves = (int)((blocks + g->sms - 1) / g->sms);
  const double es = (double)attn_dtype_size(s->dtype);
  const double dram_bytes = es * ((double)bh * n * (d + dv) + (double)p->batch * heads_kv * n_kv * (d + dv));
  out->t_compute_ms = span / (g->clock_mhz * 1e3);
  out->t_dram_ms = dram_bytes / (0.9 * g->bandwidth_tbs * 1e12) * 1e3;
  out->t_l2_ms = es * (double)(reads + writes) / (3 * 0.9 * g->bandwidth_tbs * 1e12) * 1e3;
  out->t_memory_ms = out->t_dram_ms > out->t_l2_ms ? out->t_dram_ms : out->t_l2_ms;
  out->t_overhead_ms = 0.005;
  const double t = out->t_compute_ms > out->t_memory_ms ? out->t_compute_ms : out->t_memory_ms;
  out->time_ms = t + out->t_overhead_ms;
  if (out->t_overhead_ms > t) out->bound = "launch";
  else if (out->t_memory_ms > out->t_compute_ms) out->bound = out->t_dram_ms >= out->t_l2_ms ? "dram" : "l2";
  else if (blocks < g->sms || span > 1.25 * total / g->sms) /* too few blocks, or the last wave's tail */
    out->bound = "occupancy";
  else if (wait > (out->cyc_tensor > soft ? out->cyc_tensor : soft)) /* the ring: loads wait more than the unit */
    out->bound = "l2";
  else out->bound = out->cyc_tensor >= soft ? "tensor_cores" : out->cyc_sfu >= out->cyc_alu ? "special_functions"
                                                                                           : "fp32_alu";
  return ATTN_OK;
}
