/* lowrank.c: approximate attention through a feature map phi of rank r, exp(scale <q,k>) ~ <phi(q), phi(k)>.
 * Specialised on ATTN_D (Q, K width), ATTN_DV (V, O width), ATTN_DTYPE (f32, f16 or bf16 in slow memory; rows are
 * converted to fp32 as they are read, and all arithmetic and the state are fp32), ATTN_BR (query rows per step),
 * ATTN_BC (key rows per step), ATTN_CAUSAL, ATTN_FEATURE (0: Taylor features of degree ATTN_DEGREE, Alman & Song's
 * polynomial method; 1: ATTN_RANK positive random features, Performer-style, drawn from ATTN_SEED).
 *   Taylor: x = sqrt(scale) q; phi_alpha(x) = x^alpha / sqrt(alpha!) for every multi-index |alpha| <= g, so that
 *     <phi(x), phi(y)> = sum_{k<=g} <x,y>^k / k!; r = C(d+g, g). g even keeps that polynomial of exp positive.
 *   Random: phi_t(x) = exp(w_t.x - |x|^2/2 - c) with w_t ~ N(0, I_d); E <phi(x), phi(y)> = exp(<x,y>) e^{-2c}/m.
 *     The constant c (a per-row max for queries, a running max over keys for keys) cancels in the ratio below.
 * Work item = one (batch*heads index). Keys go by blocks of BC rows into KV = phi(K)^T V (r x d_v), z = phi(K)^T 1;
 * then O = phi(Q) KV / phi(Q) z by blocks of BR query rows. Causal (bottom-right aligned): the query rows are walked
 * in order and each row sees the prefix state of the keys it may see; a key block is folded into the state when
 * the first query row that sees all of it comes, and a row's visible keys past the state are added exactly.
 * I/O per item in entries: K and V read once (n_kv (d + d_v)), Q read once (n d), O written once (n d_v).
 * Fast memory must hold the r x (d_v + 1) state and the fp32 copies of a key block (BC (d + d_v)) and a query row
 * (converted for half dtypes; copied for f32 too, so that the loops over them read rows at the scratch's alignment
 * whatever the caller's: kernel_abi.h); the random directions are generated in fast memory (not transfers).
 *
 * Non-finite inputs, where the features mean nothing, follow the fp64 reference (runtime/reference.c) exactly: a
 * score with a non-finite q or k entry is +inf, -inf or NaN, never finite. So a query row with one makes its output
 * row NaN (its scores are all +inf/NaN, making it NaN, or all -inf, 0/0). A key row with one (checked as its block is
 * read) stays out of the features and the state; each row that sees it scores it exactly: +inf or NaN makes the row
 * NaN, -inf gives weight 0, still multiplying its V row (0 * NaN = NaN), and a row whose visible keys are all such
 * outputs 0/0 = NaN. Those rescoring reads of K and V rows are not counted: the I/O model is for finite inputs. A NaN
 * in V reaches, through the state, exactly the rows that see its key, as in the reference. */
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

#define LR_D ATTN_D
#define LR_DV ATTN_DV
#define LR_BC ATTN_BC
#define LR_BR ATTN_BR

/* Scratch layout, in floats (each part a multiple of 16). */
#define LR_UP(x) (((x) + 15) / 16 * 16)
typedef struct {
  float *kv, *z, *fk, *fq, *w, *num, *coef;
  float *kst, *vst, *qst; /* the key block's K and V rows and a query row in fp32 */
  int *par, *var;
  int *kbad; /* per key row of the current block: 1 when it holds a non-finite entry */
  long *bad; /* the non-finite key rows read so far, in order (at most n_kv) */
} lr_scratch;

static size_t lr_layout(void *base, lr_scratch *s, long n_kv) {
  const size_t r = (size_t)lf_rank();
  float *p = (float *)base;
  size_t off = 0;
#define LR_TAKE(field, cnt)                    \
  do {                                         \
    if (s) s->field = (void *)(p + off);       \
    off += LR_UP((size_t)(cnt));               \
  } while (0)
  LR_TAKE(kv, r * LR_DV);
  LR_TAKE(z, r);
  LR_TAKE(fk, (size_t)LR_BC * r);
  LR_TAKE(fq, r);
  LR_TAKE(num, LR_DV);
  LR_TAKE(kst, (size_t)LR_BC * LR_D);
  LR_TAKE(vst, (size_t)LR_BC * LR_DV);
  LR_TAKE(qst, LR_D);
#if ATTN_FEATURE == 0
  LR_TAKE(coef, r);
  LR_TAKE(par, r);
  LR_TAKE(var, r);
#else
  LR_TAKE(w, r * LR_D);
#endif
  LR_TAKE(kbad, LR_BC);
  LR_TAKE(bad, (size_t)(n_kv > 0 ? n_kv : 1) * (sizeof(long) / sizeof(float)));
#undef LR_TAKE
  return off;
}

int attn_kernel_abi(void) { return ATTN_KERNEL_ABI_VERSION; }
long attn_kernel_items(const attn_kargs *a) { return a->batch * a->heads; }
size_t attn_kernel_scratch(const attn_kargs *a) { return lr_layout(NULL, NULL, a->n_kv) * sizeof(float); }

/* A row in fast memory that the loops below read (the alignment check build notes where it lies). */
static inline const float *lr_tile(const float *p) {
  ATTN_ALIGN_NOTE(p, 64);
  return p;
}

#if ATTN_FEATURE == 0
/* phi(x) for x = sqrt(scale) * row; returns the log of the constant factored out (none for Taylor). */
static float lr_phi(const float *row, float sq, const lr_scratch *s, long r, float *f) {
  f[0] = 1.0f;
  for (long t = 1; t < r; t++) f[t] = f[s->par[t]] * (row[s->var[t]] * sq) * s->coef[t];
  return 0.0f;
}
#else
/* Exponents e_t = w_t.x - |x|^2/2 of x = sq * row into f; returns their max. */
static float lr_expo(const float *row, float sq, const lr_scratch *s, long r, float *f) {
  float x[LR_D];
  for (int i = 0; i < LR_D; i++) x[i] = row[i] * sq;
  return lf_expo(x, s->w, r, f);
}
#endif

/* O row = phi(q) KV / phi(q) z, plus the exact contribution of keys kb[0..extra) (features in fk, fp32 V rows in vb)
 * not yet in the state, for a row that sees keys: the first nbad of the non-finite ones (s->bad, scored exactly from
 * k, v in slow memory; scale: where they are) and good finite ones. qrow is fp32; orow gets d_v elements. */
static void lr_query(const float *qrow, float sq, const lr_scratch *s, long r, const float *vb, long extra,
                     long nbad, long good, const attn_el *k, const attn_el *v, float scale, attn_el *orow) {
  if (!lf_finite(qrow, LR_D)) { /* every score +inf, -inf or NaN: the reference's row is NaN */
    const attn_el nan = attn_f32_el(NAN);
    for (int i = 0; i < LR_DV; i++) orow[i] = nan;
    return;
  }
#if ATTN_FEATURE == 0
  lr_phi(qrow, sq, s, r, s->fq);
#else
  const float mx = lr_expo(qrow, sq, s, r, s->fq);
  for (long t = 0; t < r; t++) s->fq[t] = expf(s->fq[t] - mx); /* per-row constant: cancels in the ratio */
#endif
  float den = 0.0f;
  for (int i = 0; i < LR_DV; i++) s->num[i] = 0.0f;
  for (long t = 0; t < r; t++) {
    const float f = s->fq[t];
    const float *kvt = s->kv + t * LR_DV;
    for (int i = 0; i < LR_DV; i++) s->num[i] += f * kvt[i];
    den += f * s->z[t];
  }
  for (long j = 0; j < extra; j++) {
    if (s->kbad[j]) continue; /* scored below */
    float dot = 0.0f;
    const float *fk = s->fk + j * r;
    for (long t = 0; t < r; t++) dot += s->fq[t] * fk[t];
    for (int i = 0; i < LR_DV; i++) s->num[i] += dot * vb[j * LR_DV + i];
    den += dot;
  }
  /* good = 0: every visible key scored -inf below (or +inf/NaN, NaN anyway): 0/0 */
  float inv = good == 0 ? NAN : isnan(den) ? den : den > 0.0f ? 1.0f / den : 0.0f;
  for (long x = 0; x < nbad; x++) {
    const attn_el *kr = k + s->bad[x] * LR_D, *vr = v + s->bad[x] * LR_DV;
    float dot = 0.0f;
    for (int i = 0; i < LR_D; i++) dot += qrow[i] * attn_el_f32(kr[i]);
    if (!(dot * scale == -INFINITY)) inv = NAN; /* +inf (inf - inf in the softmax) or NaN */
    for (int i = 0; i < LR_DV; i++) s->num[i] += 0.0f * attn_el_f32(vr[i]); /* weight 0, but NaN and inf in V show */
  }
  for (int i = 0; i < LR_DV; i++) s->num[i] *= inv;
  attn_store_row(orow, s->num, lf_count(LR_DV));
}

void attn_kernel_run(const attn_kargs *a, long item, void *scratch, attn_io *io) {
  const long bh = item;
  const long b = bh / a->heads, h = bh % a->heads;
  const long heads_kv = a->heads_kv > 0 ? a->heads_kv : a->heads;
  const long hk = h / (a->heads / heads_kv);
  const long n = a->n, n_kv = a->n_kv, off = n_kv - n;
  const attn_el *q = (const attn_el *)a->q + bh * n * LR_D;
  const attn_el *k = (const attn_el *)a->k + (b * heads_kv + hk) * n_kv * LR_D;
  const attn_el *v = (const attn_el *)a->v + (b * heads_kv + hk) * n_kv * LR_DV;
  attn_el *out = (attn_el *)a->o + bh * n * LR_DV;
  const float scale = a->scale != 0.0f ? a->scale : 1.0f / sqrtf((float)LR_D);
  const float sq = sqrtf(scale);
  const long r = lf_rank();
  lr_scratch s;
  lr_layout(scratch, &s, n_kv);
  long nbad = 0; /* non-finite key rows read so far, in s.bad */
#if ATTN_FEATURE == 0
  lf_taylor_table(s.par, s.var, s.coef);
#else
  attn_lf_gauss(s.w, r * LR_D, ATTN_SEED);
  float c = -INFINITY; /* the keys' running constant */
#endif
  memset(s.kv, 0, sizeof(float) * (size_t)(r * LR_DV));
  memset(s.z, 0, sizeof(float) * (size_t)r);

  /* Current key block: keys [kb0, kb0 + kcols) read, features in fk, not yet in the state. */
  long kb0 = 0, kcols = 0;

/* Reads a key block into fast memory (K and V counted once each: the copy is that read); LR_KROW(j), LR_VROW(j):
 * key j's rows in fp32 there, j in the block. */
#define LR_READ_BLOCK()                                                                         \
  do {                                                                                          \
    kcols = n_kv - kb0 < LR_BC ? n_kv - kb0 : LR_BC;                                            \
    ATTN_IO_READ(io, kcols * LR_D);                                                             \
    ATTN_IO_READ(io, kcols * LR_DV);                                                            \
    attn_load_row(s.kst, k + kb0 * LR_D, kcols * LR_D);                                         \
    attn_load_row(s.vst, v + kb0 * LR_DV, kcols * LR_DV);                                       \
  } while (0)
#define LR_KROW(j) lr_tile(s.kst + ((j) - kb0) * LR_D)
#define LR_VROW(j) lr_tile(s.vst + ((j) - kb0) * LR_DV)
/* Features of a key block. */
#if ATTN_FEATURE == 0
#define LR_LOAD_BLOCK()                                                               \
  do {                                                                                \
    LR_READ_BLOCK();                                                                  \
    for (long j = 0; j < kcols; j++) {                                                \
      s.kbad[j] = !lf_finite(LR_KROW(kb0 + j), LR_D);                                 \
      if (s.kbad[j]) {                                                                \
        s.bad[nbad++] = kb0 + j;                                                      \
        memset(s.fk + j * r, 0, sizeof(float) * (size_t)r);                           \
      } else {                                                                        \
        lr_phi(LR_KROW(kb0 + j), sq, &s, r, s.fk + j * r);                               \
      }                                                                               \
    }                                                                                 \
  } while (0)
#else
#define LR_LOAD_BLOCK()                                                                         \
  do {                                                                                          \
    LR_READ_BLOCK();                                                                            \
    float bm = -INFINITY;                                                                       \
    for (long j = 0; j < kcols; j++) {                                                          \
      s.kbad[j] = !lf_finite(LR_KROW(kb0 + j), LR_D);                                           \
      if (s.kbad[j]) {                                                                          \
        s.bad[nbad++] = kb0 + j;                                                                \
        continue;                                                                               \
      }                                                                                         \
      float e = lr_expo(LR_KROW(kb0 + j), sq, &s, r, s.fk + j * r);                                \
      if (e > bm) bm = e;                                                                       \
    }                                                                                           \
    if (bm > c) { /* rescale the state to the new constant */                                   \
      const float f = c == -INFINITY ? 0.0f : expf(c - bm);                                     \
      for (long t = 0; t < r * LR_DV; t++) s.kv[t] *= f;                                        \
      for (long t = 0; t < r; t++) s.z[t] *= f;                                                 \
      c = bm;                                                                                   \
    }                                                                                           \
    for (long t = 0; t < kcols * r; t++) s.fk[t] = expf(s.fk[t] - c);                           \
    for (long j = 0; j < kcols; j++)                                                            \
      if (s.kbad[j]) memset(s.fk + j * r, 0, sizeof(float) * (size_t)r);                        \
  } while (0)
#endif
/* Fold the current block into KV and z. */
#define LR_FOLD_BLOCK()                                                  \
  do {                                                                   \
    for (long j = 0; j < kcols; j++) {                                   \
      if (s.kbad[j]) continue; /* scored exactly by each row */          \
      const float *fk = s.fk + j * r, *vr = LR_VROW(kb0 + j);              \
      for (long t = 0; t < r; t++) {                                     \
        float *kvt = s.kv + t * LR_DV;                                   \
        for (int i = 0; i < LR_DV; i++) kvt[i] += fk[t] * vr[i];         \
        s.z[t] += fk[t];                                                 \
      }                                                                  \
    }                                                                    \
    kb0 += kcols;                                                        \
    kcols = 0;                                                           \
  } while (0)

  if (!ATTN_CAUSAL) {
    while (kb0 < n_kv) {
      LR_LOAD_BLOCK();
      LR_FOLD_BLOCK();
    }
  }
  for (long i0 = 0; i0 < n; i0 += LR_BR) {
    const long rows = n - i0 < LR_BR ? n - i0 : LR_BR;
    ATTN_IO_READ(io, rows * LR_D);
    for (long i = i0; i < i0 + rows; i++) {
      long extra = 0, vis = n_kv;
      if (ATTN_CAUSAL) {
        vis = i + off + 1 < n_kv ? i + off + 1 : n_kv; /* keys 0..vis-1 visible */
        if (vis <= 0) {
          for (int x = 0; x < LR_DV; x++) out[i * LR_DV + x] = attn_f32_el(0.0f);
          continue;
        }
        /* advance: fold whole blocks the row sees entirely, load the block holding its last visible key */
        for (;;) {
          if (kcols == 0 && kb0 < vis) LR_LOAD_BLOCK();
          if (kcols > 0 && kb0 + kcols <= vis) {
            LR_FOLD_BLOCK();
            continue;
          }
          break;
        }
        extra = vis - kb0;
        if (extra < 0) extra = 0;
      }
      long nb = nbad; /* the non-finite keys the row sees: the first nb read (in key order) */
      while (nb > 0 && s.bad[nb - 1] >= vis) nb--;
      attn_load_row(s.qst, q + i * LR_D, lf_count(LR_D));
      const float *qf = lr_tile(s.qst);
      lr_query(qf, sq, &s, r, LR_VROW(kb0), extra, nb, vis - nb, k, v, scale, out + i * LR_DV);
    }
    ATTN_IO_WRITE(io, rows * LR_DV);
  }
  /* Causal with keys no query row sees cannot happen (the last row sees all n_kv), so K and V are each read once. */
#undef LR_READ_BLOCK
#undef LR_KROW
#undef LR_VROW
#undef LR_LOAD_BLOCK
#undef LR_FOLD_BLOCK
}
