/* lowrank_bwd.c: the gradient of lowrank's approximation (templates/lowrank.c), dq, dk and dv of
 *   O_i = sum_j a_ij v_j / den_i,  a_ij = <phi(q_i), phi(k_j)>,  den_i = sum_j a_ij  (j over the keys row i sees)
 * with the forward's feature map phi, specialised on the same macros (ATTN_FEATURE, ATTN_DEGREE, ATTN_RANK,
 * ATTN_SEED, ATTN_D, ATTN_DV, ATTN_CAUSAL, ATTN_DTYPE): the same Taylor monomials or the same Gaussian directions
 * (lowrank_feat.h's generator, lowrank.c's too). It is not exact attention's gradient: it differentiates what
 * the forward computed.
 *
 * With D_i = dO_i . O_i (O the forward's output, as the flash backward reads it) and inv_i = 1 / den_i:
 *   dL/da_ij = inv_i (dO_i . v_j - D_i), so, with the key state KV = sum_j phi(k_j) v_jᵀ and z = sum_j phi(k_j),
 *   dL/dphi(q_i) = inv_i (KV dO_i - D_i z)                      (the keys row i sees: a prefix when causal)
 *   dL/dphi(k_j) = M v_j - m,  dv_j = Mᵀ phi(k_j),  M = sum_i inv_i phi(q_i) dO_iᵀ, m = sum_i inv_i D_i phi(q_i)
 *                                                                (the rows that see key j: a suffix when causal)
 * and the chain rule through phi, x = sqrt(scale) row: random features phi_t = exp(w_t.x - |x|^2/2 - c) give
 * dL/dx = sum_t g_t phi_t (w_t - x); Taylor monomials are differentiated along lowrank.c's table (each feature a
 * parent's times one x entry), children before parents. dq = sqrt(scale) dL/dx, and so dk.
 * The constants c cancel in O (per query row: its max exponent; keys: one per KV head), so they are constants of
 * the gradient too. The forward takes the keys' running max; here it is their overall max (a pass over K first):
 * the same function, different only where a causal row's keys are ~87 below the later keys' exponents (fp32 range).
 *
 * Work item = (batch, KV head): linear in n and n_kv. Pass 0 (random features): the keys' constant. Pass 1, query
 * rows in order (the G heads of the KV head at each row): the key state grows by the keys the row sees (all keys
 * first when not causal), each row's dq is written and inv_i, D_i kept (2 G n floats of scratch). Pass 2, keys in
 * reverse order: M and m grow by the rows that see the key (all rows first when not causal), each key's dk and dv
 * are written. GQA's sums over the G heads are in M and m. Every element is summed by one item in a fixed order:
 * the same bits from run to run and for any thread count. Rows that see no key (causal, n > n_kv) get zero dq.
 * den <= 0 (underflow) gives inv = 0, as the forward's 1/den does.
 *
 * Non-finite inputs mean nothing to the features (lowrank.c scores such keys exactly instead): a NaN or Inf in
 * any q, k, v, O or dO row an item reads makes all of that item's dq, dk and dv NaN.
 *
 * I/O accounting, in entries: K read once more for the random features' constant (n_kv d); pass 1 reads K and V
 * (n_kv (d + d_v)) and Q, dO and O (G n (d + 2 d_v)) and writes dq (G n d); pass 2 reads K and V again, Q and dO
 * again (G n (d + d_v)) and writes dk and dv (n_kv (d + d_v)). inv and D stay in fast memory. */
#ifndef ATTN_D
#define ATTN_D 64
#endif
#ifndef ATTN_BR
#define ATTN_BR 64
#endif
#ifndef ATTN_BC
#define ATTN_BC 64
#endif
#ifndef ATTN_DV
#define ATTN_DV ATTN_D
#endif
#ifndef ATTN_CAUSAL
#define ATTN_CAUSAL 0
#endif

#ifndef ATTN_KERNEL_ABI_H
#include "kernel_abi.h"
#endif
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "lowrank_feat.h"

#define LB_D ATTN_D
#define LB_DV ATTN_DV
#define LB_UP(x) (((x) + 15) / 16 * 16)

static long lb_heads_kv(const attn_kargs *a) { return a->heads_kv > 0 ? a->heads_kv : a->heads; }
static long lb_group(const attn_kargs *a) { return a->heads / lb_heads_kv(a); }

typedef struct {
  float *kv, *z, *mm, *m;   /* key state (r x d_v, r); query state (r x d_v, r) */
  float *f, *g;             /* a row's features and the loss's gradient in them (r each) */
  float *x, *gx;            /* a row times sqrt(scale), and the gradient in it (d each) */
  float *row, *vr, *dor, *orow, *tmp; /* fp32 rows: q or k (d), v, dO, O, one out (d_v or d) */
  float *inv, *dd;          /* 1 / den and D of the item's G n rows */
  float *w, *coef;          /* random directions (r x d); Taylor coefficients */
  int *par, *var;           /* Taylor table */
} lb_scratch;

static size_t lb_layout(void *base, lb_scratch *s, long gn) {
  const size_t r = (size_t)lf_rank(), big = LB_D > LB_DV ? LB_D : LB_DV;
  float *p = (float *)base;
  size_t off = 0;
#define LB_TAKE(field, cnt)              \
  do {                                   \
    if (s) s->field = (void *)(p + off); \
    off += LB_UP((size_t)(cnt));         \
  } while (0)
  LB_TAKE(kv, r * LB_DV);
  LB_TAKE(z, r);
  LB_TAKE(mm, r * LB_DV);
  LB_TAKE(m, r);
  LB_TAKE(f, r);
  LB_TAKE(g, r);
  LB_TAKE(x, LB_D);
  LB_TAKE(gx, LB_D);
  LB_TAKE(row, LB_D);
  LB_TAKE(vr, LB_DV);
  LB_TAKE(dor, LB_DV);
  LB_TAKE(orow, LB_DV);
  LB_TAKE(tmp, big);
  LB_TAKE(inv, gn);
  LB_TAKE(dd, gn);
#if ATTN_FEATURE == 0
  LB_TAKE(coef, r);
  LB_TAKE(par, r);
  LB_TAKE(var, r);
#else
  LB_TAKE(w, r * LB_D);
#endif
#undef LB_TAKE
  return off;
}

int attn_kernel_abi(void) { return ATTN_KERNEL_ABI_VERSION; }
long attn_kernel_items(const attn_kargs *a) { return a->batch * lb_heads_kv(a); }
size_t attn_kernel_scratch(const attn_kargs *a) { return lb_layout(NULL, NULL, lb_group(a) * a->n) * sizeof(float); }

/* s->x = sq * s->row, then its features in s->f: random ones relative to the constant c (NAN: the row's own max). */
static void lb_features(lb_scratch *s, long r, float sq, float c) {
  for (int i = 0; i < LB_D; i++) s->x[i] = s->row[i] * sq;
#if ATTN_FEATURE == 0
  (void)c;
  s->f[0] = 1.0f;
  for (long t = 1; t < r; t++) s->f[t] = s->f[s->par[t]] * s->x[s->var[t]] * s->coef[t];
#else
  const float mx = lf_expo(s->x, s->w, r, s->f);
  if (isnan(c)) c = mx;
  for (long t = 0; t < r; t++) s->f[t] = expf(s->f[t] - c);
#endif
}

/* s->tmp = sq * dL/dx from g = dL/dphi (s->g) through the features s->f of s->x (s->g is overwritten). */
static void lb_chain(lb_scratch *s, long r, float sq) {
  for (int i = 0; i < LB_D; i++) s->gx[i] = 0.0f;
#if ATTN_FEATURE == 0
  for (long t = r - 1; t >= 1; t--) { /* children come after their parents in the table */
    const long p = s->par[t];
    const int v = s->var[t];
    s->gx[v] += s->g[t] * s->f[p] * s->coef[t];
    s->g[p] += s->g[t] * s->x[v] * s->coef[t];
  }
#else
  float sum = 0.0f;
  for (long t = 0; t < r; t++) {
    const float gf = s->g[t] * s->f[t];
    const float *wt = s->w + t * LB_D;
    for (int i = 0; i < LB_D; i++) s->gx[i] += gf * wt[i];
    sum += gf;
  }
  for (int i = 0; i < LB_D; i++) s->gx[i] -= sum * s->x[i];
#endif
  for (int i = 0; i < LB_D; i++) s->tmp[i] = sq * s->gx[i];
}

void attn_kernel_run(const attn_kargs *a, long item, void *scratch, attn_io *io) {
  const long heads_kv = lb_heads_kv(a), G = lb_group(a), b = item / heads_kv, hk = item % heads_kv;
  const long n = a->n, n_kv = a->n_kv, off = n_kv - n, r = lf_rank();
  const float scale = a->scale != 0.0f ? a->scale : 1.0f / sqrtf((float)LB_D), sq = sqrtf(scale);
  const attn_el *k = (const attn_el *)a->k + item * n_kv * LB_D, *v = (const attn_el *)a->v + item * n_kv * LB_DV;
  attn_el *dk = (attn_el *)a->dk + item * n_kv * LB_D, *dv = (attn_el *)a->dv + item * n_kv * LB_DV;
  lb_scratch s;
  lb_layout(scratch, &s, G * n);
  int bad = 0;
#if ATTN_FEATURE == 0
  lf_taylor_table(s.par, s.var, s.coef);
  const float c = 0.0f;
#else
  attn_lf_gauss(s.w, r * LB_D, ATTN_SEED);
  /* the keys' constant: their largest exponent */
  float c = -INFINITY;
  ATTN_IO_READ(io, n_kv * LB_D);
  for (long j = 0; j < n_kv; j++) {
    attn_load_row(s.row, k + j * LB_D, lf_count(LB_D));
    for (int i = 0; i < LB_D; i++) s.x[i] = s.row[i] * sq;
    const float e = lf_expo(s.x, s.w, r, s.f);
    if (e > c) c = e;
  }
  if (!(c > -INFINITY)) c = 0.0f; /* no key, or only non-finite ones (then NaN below anyway) */
#endif
  /* rows of query head g: q, dO, O of (b, hk G + g) */
#define LB_ROW(arr, g, i, w) ((const attn_el *)(arr) + (((b * a->heads + hk * G + (g)) * n) + (i)) * (w))

  /* Pass 1: query rows in order, the key state over the keys each sees. */
  memset(s.kv, 0, sizeof(float) * (size_t)(r * LB_DV));
  memset(s.z, 0, sizeof(float) * (size_t)r);
  long folded = 0; /* keys 0 .. folded-1 are in kv, z */
  ATTN_IO_READ(io, n_kv * (LB_D + LB_DV) + G * n * (LB_D + 2 * LB_DV));
  ATTN_IO_WRITE(io, G * n * LB_D);
  for (long i = 0; i < n; i++) {
    long vis = ATTN_CAUSAL ? i + off + 1 : n_kv;
    if (vis > n_kv) vis = n_kv;
    for (; folded < vis; folded++) {
      attn_load_row(s.row, k + folded * LB_D, lf_count(LB_D));
      attn_load_row(s.vr, v + folded * LB_DV, lf_count(LB_DV));
      bad |= !lf_finite(s.row, LB_D) || !lf_finite(s.vr, LB_DV);
      lb_features(&s, r, sq, c);
      for (long t = 0; t < r; t++) {
        const float ft = s.f[t];
        float *kvt = s.kv + t * LB_DV;
        for (int x = 0; x < LB_DV; x++) kvt[x] += ft * s.vr[x];
        s.z[t] += ft;
      }
    }
    for (long g = 0; g < G; g++) {
      attn_el *dq = (attn_el *)a->dq + (((b * a->heads + hk * G + g) * n) + i) * LB_D;
      if (vis <= 0) { /* the row sees no key: its output was 0, whatever it holds */
        for (int x = 0; x < LB_D; x++) s.tmp[x] = 0.0f;
        attn_store_row(dq, s.tmp, lf_count(LB_D));
        s.inv[g * n + i] = s.dd[g * n + i] = 0.0f;
        continue;
      }
      attn_load_row(s.row, LB_ROW(a->q, g, i, LB_D), lf_count(LB_D));
      attn_load_row(s.dor, LB_ROW(a->dout, g, i, LB_DV), lf_count(LB_DV));
      attn_load_row(s.orow, LB_ROW(a->o, g, i, LB_DV), lf_count(LB_DV));
      bad |= !lf_finite(s.row, LB_D) || !lf_finite(s.dor, LB_DV) || !lf_finite(s.orow, LB_DV);
      float dd = 0.0f;
      for (int x = 0; x < LB_DV; x++) dd += s.dor[x] * s.orow[x];
      lb_features(&s, r, sq, NAN);
      float den = 0.0f;
      for (long t = 0; t < r; t++) den += s.f[t] * s.z[t];
      const float inv = den > 0.0f ? 1.0f / den : 0.0f;
      for (long t = 0; t < r; t++) {
        const float *kvt = s.kv + t * LB_DV;
        float u = 0.0f;
        for (int x = 0; x < LB_DV; x++) u += kvt[x] * s.dor[x];
        s.g[t] = inv * (u - dd * s.z[t]);
      }
      lb_chain(&s, r, sq);
      attn_store_row(dq, s.tmp, lf_count(LB_D));
      s.inv[g * n + i] = inv;
      s.dd[g * n + i] = dd;
    }
  }

  /* Pass 2: keys in reverse order, the query state over the rows that see each (rows i >= j - off when causal). */
  memset(s.mm, 0, sizeof(float) * (size_t)(r * LB_DV));
  memset(s.m, 0, sizeof(float) * (size_t)r);
  long added = n; /* rows added..n-1 are in mm, m */
  ATTN_IO_READ(io, n_kv * (LB_D + LB_DV) + G * n * (LB_D + LB_DV));
  ATTN_IO_WRITE(io, n_kv * (LB_D + LB_DV));
  for (long j = n_kv - 1; j >= 0; j--) {
    long first = ATTN_CAUSAL ? j - off : 0;
    if (first < 0) first = 0;
    for (; added > first; ) {
      added--;
      for (long g = 0; g < G; g++) {
        const float inv = s.inv[g * n + added], dd = s.dd[g * n + added];
        attn_load_row(s.row, LB_ROW(a->q, g, added, LB_D), lf_count(LB_D));
        attn_load_row(s.dor, LB_ROW(a->dout, g, added, LB_DV), lf_count(LB_DV));
        lb_features(&s, r, sq, NAN);
        for (long t = 0; t < r; t++) {
          const float ft = s.f[t] * inv;
          float *mt = s.mm + t * LB_DV;
          for (int x = 0; x < LB_DV; x++) mt[x] += ft * s.dor[x];
          s.m[t] += ft * dd;
        }
      }
    }
    attn_load_row(s.row, k + j * LB_D, lf_count(LB_D));
    attn_load_row(s.vr, v + j * LB_DV, lf_count(LB_DV));
    lb_features(&s, r, sq, c);
    for (int x = 0; x < LB_DV; x++) s.orow[x] = 0.0f;
    for (long t = 0; t < r; t++) {
      const float *mt = s.mm + t * LB_DV;
      float u = 0.0f;
      for (int x = 0; x < LB_DV; x++) {
        s.orow[x] += s.f[t] * mt[x];
        u += mt[x] * s.vr[x];
      }
      s.g[t] = u - s.m[t];
    }
    attn_store_row(dv + j * LB_DV, s.orow, lf_count(LB_DV));
    lb_chain(&s, r, sq);
    attn_store_row(dk + j * LB_D, s.tmp, lf_count(LB_D));
  }

  if (bad) { /* a non-finite input: the item's gradients are NaN, not finite values that mean nothing */
    for (int x = 0; x < (LB_D > LB_DV ? LB_D : LB_DV); x++) s.tmp[x] = NAN;
    for (long g = 0; g < G; g++)
      for (long i = 0; i < n; i++)
        attn_store_row((attn_el *)a->dq + (((b * a->heads + hk * G + g) * n) + i) * LB_D, s.tmp, lf_count(LB_D));
    for (long j = 0; j < n_kv; j++) {
      attn_store_row(dk + j * LB_D, s.tmp, lf_count(LB_D));
      attn_store_row(dv + j * LB_DV, s.tmp, lf_count(LB_DV));
    }
  }
#undef LB_ROW
}
