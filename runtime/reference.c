/* reference.c: what kernels are checked against — a plain fp64 attention with the library's semantics (GQA,
 * bottom-right causal mask, window, softcap, ALiBi, zero rows), the relative error, reproducible random inputs, and
 * poisoning. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "lowrank_feat.h"

void attn_visible_keys(const attn_problem *p, long i, long *lo, long *hi) {
  const long n_kv = p->n_kv > 0 ? p->n_kv : p->n, ip = i + (n_kv - p->n), w = p->window > 0 ? p->window : 0;
  long a = 0, b = n_kv;
  if (p->causal && ip + 1 < b) b = ip + 1;
  if (w) {
    if (ip - w + 1 > a) a = ip - w + 1;
    if (!p->causal && ip + w < b) b = ip + w;
  }
  if (b < a) b = a;
  *lo = a < n_kv ? a : n_kv;
  *hi = b < n_kv ? b : n_kv;
}

double attn_score_mod(const attn_problem *p, double s, long h, long i, long j) {
  const long n_kv = p->n_kv > 0 ? p->n_kv : p->n, ip = i + (n_kv - p->n);
  if (p->softcap > 0) s = (double)p->softcap * tanh(s / (double)p->softcap);
  if (p->alibi_slopes) s -= (double)p->alibi_slopes[h] * (double)labs(ip - j);
  return s;
}

/* The references' threads. The work is cut into units whose outputs no other unit touches (the forward: a block
 * of one head's rows; the backward: one KV head, whose dK and dV sum over its query heads); each unit is computed
 * by the same code, in the same order, as the single-threaded loop, so any thread count gives the same bits. The
 * threads claim units from a shared counter. A thread that cannot be created (or get its scratch) leaves its units
 * to the others; the calling thread always works. */
typedef struct ref_job ref_job;
struct ref_job {
  void (*unit)(const ref_job *j, long u, double *scratch);
  long units;
  size_t scratch; /* doubles per worker */
  atomic_long next;
  const attn_problem *p;
  const float *q, *k, *v, *o, *dout;
  double *out, *dq, *dk, *dv;
  double *rows; /* the split backward's max, sum and D of each row (batch x heads x n x 3) */
};

typedef struct {
  ref_job *job;
  double *scratch;
  pthread_t tid;
  int started;
} ref_worker;

static void ref_work(ref_job *j, double *scratch) {
  for (long u; (u = atomic_fetch_add(&j->next, 1)) < j->units;) j->unit(j, u, scratch);
}

static void *ref_thread(void *arg) {
  ref_worker *w = arg;
  ref_work(w->job, w->scratch);
  return NULL;
}

/* Runs every unit of j on up to `threads` threads; -1 when the calling thread's scratch cannot be had (nothing run). */
static int ref_run(ref_job *j, int threads) {
  const long want = threads < 1 ? 1 : threads < j->units ? threads : j->units;
  double *mine = malloc(sizeof(double) * j->scratch);
  if (!mine) return -1;
  atomic_init(&j->next, 0);
  ref_worker *w = want > 1 ? calloc((size_t)want - 1, sizeof *w) : NULL;
  const long extra = w ? want - 1 : 0;
  for (long t = 0; t < extra; t++) {
    w[t].job = j;
    w[t].scratch = malloc(sizeof(double) * j->scratch);
    w[t].started = w[t].scratch && pthread_create(&w[t].tid, NULL, ref_thread, &w[t]) == 0;
  }
  ref_work(j, mine);
  for (long t = 0; t < extra; t++) {
    if (w[t].started) pthread_join(w[t].tid, NULL);
    free(w[t].scratch);
  }
  free(w);
  free(mine);
  return 0;
}

/* Forward rows per unit: fine enough that causal heads (whose last rows cost the most) spread over the threads. */
#define REF_ROWS 32

static void ref_forward_unit(const ref_job *jb, long u, double *s) {
  const attn_problem *p = jb->p;
  const long n = p->n, n_kv = p->n_kv > 0 ? p->n_kv : p->n, d = p->d, dv = p->d_v > 0 ? p->d_v : p->d;
  const long heads = p->heads, heads_kv = p->heads_kv > 0 ? p->heads_kv : p->heads, group = heads / heads_kv;
  const double scale = p->scale != 0.0f ? (double)p->scale : 1.0 / sqrt((double)d);
  const long blocks = (n + REF_ROWS - 1) / REF_ROWS, bh = u / blocks, i0 = u % blocks * REF_ROWS;
  const long b = bh / heads, h = bh % heads, hk = h / group, i1 = i0 + REF_ROWS < n ? i0 + REF_ROWS : n;
  const float *qh = jb->q + (b * heads + h) * n * d;
  const float *kh = jb->k + (b * heads_kv + hk) * n_kv * d, *vh = jb->v + (b * heads_kv + hk) * n_kv * dv;
  double *oh = jb->out + (b * heads + h) * n * dv;
  for (long i = i0; i < i1; i++) {
    long lo, hi;
    attn_visible_keys(p, i, &lo, &hi);
    double *orow = oh + i * dv;
    memset(orow, 0, sizeof(double) * (size_t)dv);
    if (hi <= lo) continue;
    double mx = -INFINITY;
    for (long j = lo; j < hi; j++) {
      double acc = 0;
      for (long c = 0; c < d; c++) acc += (double)qh[i * d + c] * (double)kh[j * d + c];
      s[j] = attn_score_mod(p, acc * scale, h, i, j);
      if (s[j] > mx) mx = s[j];
    }
    double sum = 0;
    for (long j = lo; j < hi; j++) {
      s[j] = exp(s[j] - mx);
      sum += s[j];
    }
    for (long j = lo; j < hi; j++) {
      const double w = s[j] / sum;
      for (long c = 0; c < dv; c++) orow[c] += w * (double)vh[j * dv + c];
    }
  }
}

void attn_reference_threads(const attn_problem *p, int threads, const float *q, const float *k, const float *v,
                            double *o) {
  const long n = p->n, n_kv = p->n_kv > 0 ? p->n_kv : p->n, dv = p->d_v > 0 ? p->d_v : p->d;
  ref_job j = {.unit = ref_forward_unit, .units = (long)p->batch * p->heads * ((n + REF_ROWS - 1) / REF_ROWS),
               .scratch = (size_t)(n_kv > 0 ? n_kv : 1), .p = p, .q = q, .k = k, .v = v, .out = o};
  if (ref_run(&j, threads) != 0)
    /* No way to report from here: NaN output makes the comparison fail loudly instead of passing. */
    for (long i = 0; i < (long)p->batch * p->heads * n * dv; i++) o[i] = NAN;
}

void attn_reference(const attn_problem *p, const float *q, const float *k, const float *v, double *o) {
  attn_reference_threads(p, 1, q, k, v, o);
}

double attn_rel_error(const double *ref, const float *out, size_t count) {
  double num = 0, den = 0;
  for (size_t i = 0; i < count; i++) {
    if (!isfinite(out[i])) return INFINITY;
    const double e = (double)out[i] - ref[i];
    num += e * e;
    den += ref[i] * ref[i];
  }
  if (den == 0) return num == 0 ? 0 : INFINITY;
  return sqrt(num / den);
}

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void attn_fill_random(float *x, size_t count, unsigned long long seed) {
  /* xoshiro256** seeded through splitmix64, as its authors recommend. */
  uint64_t sm = seed, st[4];
  for (int i = 0; i < 4; i++) st[i] = splitmix64(&sm);
  for (size_t i = 0; i < count; i++) {
    const uint64_t r = rotl(st[1] * 5, 7) * 9, t = st[1] << 17;
    st[2] ^= st[0];
    st[3] ^= st[1];
    st[1] ^= st[2];
    st[0] ^= st[3];
    st[2] ^= t;
    st[3] = rotl(st[3], 45);
    /* 24 random bits: exactly representable, uniform on [-1, 1). */
    x[i] = (float)((double)(r >> 40) * (2.0 / 16777216.0) - 1.0);
  }
}

void attn_poison(float *x, size_t count) {
  for (size_t i = 0; i < count; i++) x[i] = NAN;
}

/* Row i of query head h over its visible keys [lo, hi): the probabilities P, the softcap's derivative
 * d/ds c tanh(s/c) = 1 - tanh^2(s/c) in C (applied to dS), the softmax's max and sum, and D = rowsum(dO ∘ O) with O
 * the given one (oh) or this row's. Both backwards take it, so their values are the same operations on the same
 * operands. */
static double ref_bwd_row(const attn_problem *p, double scale, long h, long i, long lo, long hi, const float *qh,
                          const float *kh, const float *vh, const float *oh, const float *gh, double *P, double *C,
                          double *orow, double *mx_out, double *sum_out) {
  const long d = p->d, dvw = p->d_v > 0 ? p->d_v : p->d;
  double mx = -INFINITY, sum = 0;
  for (long j = lo; j < hi; j++) {
    double acc = 0;
    for (long c = 0; c < d; c++) acc += (double)qh[i * d + c] * (double)kh[j * d + c];
    P[j] = attn_score_mod(p, acc * scale, h, i, j);
    if (p->softcap > 0) {
      const double t = tanh(acc * scale / (double)p->softcap);
      C[j] = 1.0 - t * t;
    } else {
      C[j] = 1.0;
    }
    if (P[j] > mx) mx = P[j];
  }
  for (long j = lo; j < hi; j++) sum += (P[j] = exp(P[j] - mx));
  for (long j = lo; j < hi; j++) P[j] /= sum;
  for (long c = 0; c < dvw; c++) {
    orow[c] = 0;
    if (oh) orow[c] = oh[i * dvw + c];
    else
      for (long j = lo; j < hi; j++) orow[c] += P[j] * (double)vh[j * dvw + c];
  }
  double D = 0;
  for (long c = 0; c < dvw; c++) D += (double)gh[i * dvw + c] * orow[c];
  *mx_out = mx, *sum_out = sum;
  return D;
}

/* One KV head (b, hk) of the backward: its query heads in order, as the single-threaded loop visits them. */
static void ref_backward_unit(const ref_job *jb, long u, double *P) {
  const attn_problem *p = jb->p;
  const long n = p->n, n_kv = p->n_kv > 0 ? p->n_kv : p->n, d = p->d, dvw = p->d_v > 0 ? p->d_v : p->d;
  const long heads = p->heads, heads_kv = p->heads_kv > 0 ? p->heads_kv : p->heads, group = heads / heads_kv;
  const double scale = p->scale != 0.0f ? (double)p->scale : 1.0 / sqrt((double)d);
  const long b = u / heads_kv, hk = u % heads_kv;
  double *C = P + (n_kv > 0 ? n_kv : 1), *orow = C + (n_kv > 0 ? n_kv : 1);
  const float *q = jb->q, *k = jb->k, *v = jb->v, *o = jb->o, *dout = jb->dout;
  for (long h = hk * group; h < (hk + 1) * group; h++) {
    const float *qh = q + (b * heads + h) * n * d, *gh = dout + (b * heads + h) * n * dvw;
    const float *oh = o ? o + (b * heads + h) * n * dvw : NULL;
    const float *kh = k + (b * heads_kv + hk) * n_kv * d, *vh = v + (b * heads_kv + hk) * n_kv * dvw;
    double *dqh = jb->dq + (b * heads + h) * n * d;
    double *dkh = jb->dk + (b * heads_kv + hk) * n_kv * d, *dvh = jb->dv + (b * heads_kv + hk) * n_kv * dvw;
    for (long i = 0; i < n; i++) {
      long lo, hi;
      attn_visible_keys(p, i, &lo, &hi);
      if (hi <= lo) continue;
      double mx, sum;
      const double D = ref_bwd_row(p, scale, h, i, lo, hi, qh, kh, vh, oh, gh, P, C, orow, &mx, &sum);
      for (long j = lo; j < hi; j++) {
        double dp = 0;
        for (long c = 0; c < dvw; c++) {
          dp += (double)gh[i * dvw + c] * (double)vh[j * dvw + c];
          dvh[j * dvw + c] += P[j] * (double)gh[i * dvw + c];
        }
        const double ds = P[j] * (dp - D) * C[j];
        for (long c = 0; c < d; c++) {
          dqh[i * d + c] += scale * ds * (double)kh[j * d + c];
          dkh[j * d + c] += scale * ds * (double)qh[i * d + c];
        }
      }
    }
  }
}

/* The split backward, where there are fewer KV heads than threads have use for: pass 1, one block of one query head's
 * rows, gives dQ and each row's max, sum and D; pass 2, one block of one KV head's keys, gives their dK and dV from
 * the scores recomputed with those rows' max and sum, over the query heads and rows in ref_backward_unit's order.
 * Each value is the same operation on the same operands as there, so the bits too; the scores and dP are computed
 * twice (about 1.4 times the work at d_v = d). */
#define REF_KEYS 32

static void ref_bwd_rows_unit(const ref_job *jb, long u, double *P) {
  const attn_problem *p = jb->p;
  const long n = p->n, n_kv = p->n_kv > 0 ? p->n_kv : p->n, d = p->d, dvw = p->d_v > 0 ? p->d_v : p->d;
  const long heads = p->heads, heads_kv = p->heads_kv > 0 ? p->heads_kv : p->heads, group = heads / heads_kv;
  const double scale = p->scale != 0.0f ? (double)p->scale : 1.0 / sqrt((double)d);
  const long blocks = (n + REF_ROWS - 1) / REF_ROWS, bh = u / blocks, i0 = u % blocks * REF_ROWS;
  const long b = bh / heads, h = bh % heads, hk = h / group, i1 = i0 + REF_ROWS < n ? i0 + REF_ROWS : n;
  double *C = P + (n_kv > 0 ? n_kv : 1), *orow = C + (n_kv > 0 ? n_kv : 1), *st = jb->rows + bh * n * 3;
  const float *qh = jb->q + (b * heads + h) * n * d, *gh = jb->dout + (b * heads + h) * n * dvw;
  const float *oh = jb->o ? jb->o + (b * heads + h) * n * dvw : NULL;
  const float *kh = jb->k + (b * heads_kv + hk) * n_kv * d, *vh = jb->v + (b * heads_kv + hk) * n_kv * dvw;
  double *dqh = jb->dq + (b * heads + h) * n * d;
  for (long i = i0; i < i1; i++) {
    long lo, hi;
    attn_visible_keys(p, i, &lo, &hi);
    if (hi <= lo) continue;
    double mx, sum;
    const double D = ref_bwd_row(p, scale, h, i, lo, hi, qh, kh, vh, oh, gh, P, C, orow, &mx, &sum);
    st[i * 3] = mx, st[i * 3 + 1] = sum, st[i * 3 + 2] = D;
    for (long j = lo; j < hi; j++) {
      double dp = 0;
      for (long c = 0; c < dvw; c++) dp += (double)gh[i * dvw + c] * (double)vh[j * dvw + c];
      const double ds = P[j] * (dp - D) * C[j];
      for (long c = 0; c < d; c++) dqh[i * d + c] += scale * ds * (double)kh[j * d + c];
    }
  }
}

static void ref_bwd_keys_unit(const ref_job *jb, long u, double *unused) {
  (void)unused;
  const attn_problem *p = jb->p;
  const long n = p->n, n_kv = p->n_kv > 0 ? p->n_kv : p->n, d = p->d, dvw = p->d_v > 0 ? p->d_v : p->d;
  const long heads = p->heads, heads_kv = p->heads_kv > 0 ? p->heads_kv : p->heads, group = heads / heads_kv;
  const double scale = p->scale != 0.0f ? (double)p->scale : 1.0 / sqrt((double)d);
  const long blocks = (n_kv + REF_KEYS - 1) / REF_KEYS, bk = u / blocks, j0 = u % blocks * REF_KEYS;
  const long b = bk / heads_kv, hk = bk % heads_kv, j1 = j0 + REF_KEYS < n_kv ? j0 + REF_KEYS : n_kv;
  const float *kh = jb->k + (b * heads_kv + hk) * n_kv * d, *vh = jb->v + (b * heads_kv + hk) * n_kv * dvw;
  double *dkh = jb->dk + (b * heads_kv + hk) * n_kv * d, *dvh = jb->dv + (b * heads_kv + hk) * n_kv * dvw;
  for (long h = hk * group; h < (hk + 1) * group; h++) {
    const float *qh = jb->q + (b * heads + h) * n * d, *gh = jb->dout + (b * heads + h) * n * dvw;
    const double *st = jb->rows + (b * heads + h) * n * 3;
    for (long i = 0; i < n; i++) {
      long lo, hi;
      attn_visible_keys(p, i, &lo, &hi);
      if (lo < j0) lo = j0;
      if (hi > j1) hi = j1;
      if (hi <= lo) continue;
      const double mx = st[i * 3], sum = st[i * 3 + 1], D = st[i * 3 + 2];
      for (long j = lo; j < hi; j++) {
        double acc = 0, C = 1.0;
        for (long c = 0; c < d; c++) acc += (double)qh[i * d + c] * (double)kh[j * d + c];
        double P = attn_score_mod(p, acc * scale, h, i, j);
        if (p->softcap > 0) {
          const double t = tanh(acc * scale / (double)p->softcap);
          C = 1.0 - t * t;
        }
        P = exp(P - mx);
        P /= sum;
        double dp = 0;
        for (long c = 0; c < dvw; c++) {
          dp += (double)gh[i * dvw + c] * (double)vh[j * dvw + c];
          dvh[j * dvw + c] += P * (double)gh[i * dvw + c];
        }
        const double ds = P * (dp - D) * C;
        for (long c = 0; c < d; c++) dkh[j * d + c] += scale * ds * (double)qh[i * d + c];
      }
    }
  }
}

void attn_reference_backward_threads(const attn_problem *p, int threads, const float *q, const float *k,
                                     const float *v, const float *o, const float *dout, double *dq, double *dk,
                                     double *dv) {
  const long n = p->n, n_kv = p->n_kv > 0 ? p->n_kv : p->n, d = p->d, dvw = p->d_v > 0 ? p->d_v : p->d;
  const long heads = p->heads, heads_kv = p->heads_kv > 0 ? p->heads_kv : p->heads;
  memset(dq, 0, sizeof(double) * (size_t)(p->batch * heads * n * d));
  memset(dk, 0, sizeof(double) * (size_t)(p->batch * heads_kv * n_kv * d));
  memset(dv, 0, sizeof(double) * (size_t)(p->batch * heads_kv * n_kv * dvw));
  /* scratch: P and C (a row's keys), and O's row */
  const size_t scratch = 2 * (size_t)(n_kv > 0 ? n_kv : 1) + (size_t)dvw;
  const long kv_units = (long)p->batch * heads_kv;
  double *rows = threads > 1 && 2 * kv_units <= threads && n > 0 && n_kv > 0
                     ? malloc(sizeof(double) * 3 * (size_t)(p->batch * heads * n))
                     : NULL;
  if (rows) { /* the split backward; without the rows' memory, the one by KV head */
    ref_job r = {.unit = ref_bwd_rows_unit, .units = (long)p->batch * heads * ((n + REF_ROWS - 1) / REF_ROWS),
                 .scratch = scratch, .p = p, .q = q, .k = k, .v = v, .o = o, .dout = dout, .dq = dq, .rows = rows};
    ref_job kj = {.unit = ref_bwd_keys_unit, .units = kv_units * ((n_kv + REF_KEYS - 1) / REF_KEYS), .scratch = 1,
                  .p = p, .q = q, .k = k, .v = v, .dout = dout, .dk = dk, .dv = dv, .rows = rows};
    const int rc = ref_run(&r, threads) != 0 || ref_run(&kj, threads) != 0;
    free(rows);
    if (rc)
      for (long i = 0; i < (long)p->batch * heads * n * d; i++) dq[i] = NAN;
    return;
  }
  ref_job j = {.unit = ref_backward_unit, .units = (long)p->batch * heads_kv,
               .scratch = scratch, .p = p, .q = q, .k = k, .v = v, .o = o, .dout = dout, .dq = dq, .dk = dk, .dv = dv};
  if (ref_run(&j, threads) != 0)
    /* no way to report from here: NaN gradients fail the comparison loudly */
    for (long i = 0; i < (long)p->batch * heads * n * d; i++) dq[i] = NAN;
}

void attn_reference_backward(const attn_problem *p, const float *q, const float *k, const float *v, const float *o,
                             const float *dout, double *dq, double *dk, double *dv) {
  attn_reference_backward_threads(p, 1, q, k, v, o, dout, dq, dk, dv);
}

/* lowrank's feature map (templates/lowrank.c) in fp64: the same Taylor table, or the same Gaussian directions (the
 * kernels' generator, templates/lowrank_feat.h, in float as they keep them). */
typedef struct {
  long r, d;
  int taylor;
  float *w;     /* random: r x d */
  int *par, *var;
  double *coef; /* Taylor */
} lr_map;

static int lr_map_init(const attn_spec *s, long d, lr_map *m) {
  memset(m, 0, sizeof *m);
  m->d = d;
  m->taylor = s->feature == ATTN_FEAT_TAYLOR;
  if (!m->taylor) {
    m->r = s->rank;
    m->w = malloc(sizeof(float) * (size_t)(m->r * d + 1));
    if (!m->w) return -1;
    attn_lf_gauss(m->w, m->r * d, (uint64_t)s->seed);
    return 0;
  }
  m->r = attn_taylor_rank((int)d, s->degree, 1L << 16);
  if (m->r < 1) return -1;
  m->par = malloc(sizeof(int) * (size_t)m->r), m->var = malloc(sizeof(int) * (size_t)m->r);
  m->coef = malloc(sizeof(double) * (size_t)m->r);
  if (!m->par || !m->var || !m->coef) return -1;
  long cnt = 1, lo = 0;
  m->par[0] = m->var[0] = -1;
  m->coef[0] = 1.0;
  for (int deg = 1; deg <= s->degree; deg++) {
    const long hi = cnt;
    for (long p = lo; p < hi; p++) {
      const int lastv = m->var[p];
      int runlen = 0;
      for (long t = p; t > 0 && m->var[t] == lastv; t = m->par[t]) runlen++;
      for (int i = lastv < 0 ? 0 : lastv; i < d; i++, cnt++) {
        m->par[cnt] = (int)p;
        m->var[cnt] = i;
        m->coef[cnt] = 1.0 / sqrt((double)(i == lastv ? runlen + 1 : 1));
      }
    }
    lo = hi;
  }
  return 0;
}

static void lr_map_free(lr_map *m) { free(m->w), free(m->par), free(m->var), free(m->coef); }

/* phi(x) of x = sq row into f (r), no constant factored out. */
static void lr_phi64(const lr_map *m, const float *row, double sq, double *x, double *f) {
  double nrm = 0;
  for (long i = 0; i < m->d; i++) {
    x[i] = sq * (double)row[i];
    nrm += x[i] * x[i];
  }
  if (m->taylor) {
    f[0] = 1;
    for (long t = 1; t < m->r; t++) f[t] = f[m->par[t]] * x[m->var[t]] * m->coef[t];
    return;
  }
  for (long t = 0; t < m->r; t++) {
    double e = 0;
    for (long i = 0; i < m->d; i++) e += (double)m->w[t * m->d + i] * x[i];
    f[t] = exp(e - 0.5 * nrm);
  }
}

/* out (d) += sq dL/dx from g = dL/dphi at x with features f (g is overwritten for Taylor). */
static void lr_chain64(const lr_map *m, double sq, const double *x, const double *f, double *g, double *out) {
  if (m->taylor) {
    for (long t = m->r - 1; t >= 1; t--) {
      out[m->var[t]] += sq * g[t] * f[m->par[t]] * m->coef[t];
      g[m->par[t]] += g[t] * x[m->var[t]] * m->coef[t];
    }
    return;
  }
  for (long t = 0; t < m->r; t++)
    for (long i = 0; i < m->d; i++) out[i] += sq * g[t] * f[t] * ((double)m->w[t * m->d + i] - x[i]);
}

int attn_reference_lowrank(const attn_problem *p, const attn_spec *s, const float *q, const float *k, const float *v,
                           const float *dout, double *o, double *dq, double *dk, double *dv) {
  const long n = p->n, n_kv = p->n_kv > 0 ? p->n_kv : p->n, d = p->d, dvw = p->d_v > 0 ? p->d_v : p->d;
  const long heads = p->heads, heads_kv = p->heads_kv > 0 ? p->heads_kv : p->heads, group = heads / heads_kv;
  const double scale = p->scale != 0.0f ? (double)p->scale : 1.0 / sqrt((double)d), sq = sqrt(scale);
  lr_map m;
  int rc = lr_map_init(s, d, &m);
  const long r = m.r;
  double *fk = rc ? NULL : malloc(sizeof(double) * (size_t)(n_kv * r + 1));
  double *gk = rc ? NULL : malloc(sizeof(double) * (size_t)(n_kv * r + 1));
  double *fq = malloc(sizeof(double) * (size_t)(r + 1)), *gq = malloc(sizeof(double) * (size_t)(r + 1));
  double *x = malloc(sizeof(double) * (size_t)d), *a = malloc(sizeof(double) * (size_t)(n_kv + 1));
  rc = !fk || !gk || !fq || !gq || !x || !a ? -1 : 0;
  if (dq && !rc) {
    memset(dq, 0, sizeof(double) * (size_t)(p->batch * heads * n * d));
    memset(dk, 0, sizeof(double) * (size_t)(p->batch * heads_kv * n_kv * d));
    memset(dv, 0, sizeof(double) * (size_t)(p->batch * heads_kv * n_kv * dvw));
  }
  for (long b = 0; b < p->batch && !rc; b++)
    for (long hk = 0; hk < heads_kv; hk++) {
      const float *kh = k + (b * heads_kv + hk) * n_kv * d, *vh = v + (b * heads_kv + hk) * n_kv * dvw;
      for (long j = 0; j < n_kv; j++) lr_phi64(&m, kh + j * d, sq, x, fk + j * r);
      memset(gk, 0, sizeof(double) * (size_t)(n_kv * r));
      for (long h = hk * group; h < (hk + 1) * group; h++) {
        const long bh = b * heads + h;
        for (long i = 0; i < n; i++) {
          long lo, hi;
          attn_visible_keys(p, i, &lo, &hi);
          double *oi = o + (bh * n + i) * dvw;
          for (long c = 0; c < dvw; c++) oi[c] = 0;
          if (hi <= lo) continue;
          lr_phi64(&m, q + (bh * n + i) * d, sq, x, fq);
          double den = 0;
          for (long j = lo; j < hi; j++) {
            a[j] = 0;
            for (long t = 0; t < r; t++) a[j] += fq[t] * fk[j * r + t];
            den += a[j];
          }
          for (long j = lo; j < hi; j++)
            for (long c = 0; c < dvw; c++) oi[c] += a[j] / den * (double)vh[j * dvw + c];
          if (!dq) continue;
          const float *gi = dout + (bh * n + i) * dvw;
          double D = 0;
          for (long c = 0; c < dvw; c++) D += (double)gi[c] * oi[c];
          memset(gq, 0, sizeof(double) * (size_t)r);
          for (long j = lo; j < hi; j++) {
            double dp = 0;
            for (long c = 0; c < dvw; c++) {
              dp += (double)gi[c] * (double)vh[j * dvw + c];
              dv[((b * heads_kv + hk) * n_kv + j) * dvw + c] += a[j] / den * (double)gi[c];
            }
            const double da = (dp - D) / den;
            for (long t = 0; t < r; t++) {
              gq[t] += da * fk[j * r + t];
              gk[j * r + t] += da * fq[t];
            }
          }
          lr_chain64(&m, sq, x, fq, gq, dq + (bh * n + i) * d);
        }
      }
      if (!dq) continue;
      for (long j = 0; j < n_kv; j++) {
        lr_phi64(&m, kh + j * d, sq, x, fq);
        lr_chain64(&m, sq, x, fq, gk + j * r, dk + ((b * heads_kv + hk) * n_kv + j) * d);
      }
    }
  lr_map_free(&m);
  free(fk), free(gk), free(fq), free(gq), free(x), free(a);
  return rc ? ATTN_ENOMEM : ATTN_OK;
}
