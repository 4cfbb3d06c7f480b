/* ref_par: the fp64 references on several threads (attn_reference_threads, attn_reference_backward_threads) give the
 * single-threaded result bit for bit (memcmp; the loops as they were before threads, copied below), with 1, 2, 3 and 7
 * threads (the backward by KV head, or split where there are at least twice as many threads as KV heads), as do
 * attn_reference and attn_reference_backward: GQA (G = 4), MHA, causal both ways, a
 * window, ALiBi, a softcap, d_v != d, n_kv != n both ways, n = 1, rows that see no key, the backward from a given O
 * and from its own. argv[1]:
 *   bits   those cases;
 *   tiny   one of them on 2 and 7 threads: what the TSan build runs (tests/tsan.cmake);
 *   fail   (built with -Wl,--wrap=pthread_create,--wrap=malloc, REF_PAR_WRAP) thread creation failing always and
 *          once: the calling thread does the rest, same bits; a worker's scratch not allocated: same bits; the
 *          calling thread's not allocated: NaN output (o, dq), as out of memory always gave; the split backward's
 *          rows not allocated: the backward by KV head, same bits;
 *   time N D HEADS THREADS [HEADS_KV]   not a test: the wall and CPU time on 1 and THREADS threads
 *          (docs/results/cpu.md).
 * Exit 0 when every check holds, 1 otherwise. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "internal.h"

static int failures, checks;

#define CHECK(cond, ...)                    \
  do {                                      \
    checks++;                               \
    if (!(cond)) {                          \
      failures++;                           \
      fprintf(stderr, "FAIL: " __VA_ARGS__); \
      fputc('\n', stderr);                  \
    }                                       \
  } while (0)

#ifdef REF_PAR_WRAP
/* Countdowns: the k-th call from now fails (0: none); pthread_create_fail_all: every call fails. */
static atomic_int malloc_fail_in, create_fail_in, create_fail_all, creates;
void *__real_malloc(size_t size);
void *__wrap_malloc(size_t size) {
  if (atomic_load(&malloc_fail_in) > 0 && atomic_fetch_sub(&malloc_fail_in, 1) == 1) return NULL;
  return __real_malloc(size);
}
int __real_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg);
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg) {
  atomic_fetch_add(&creates, 1);
  if (atomic_load(&create_fail_all)) return 11; /* EAGAIN */
  if (atomic_load(&create_fail_in) > 0 && atomic_fetch_sub(&create_fail_in, 1) == 1) return 11;
  return __real_pthread_create(t, a, fn, arg);
}
#endif

/* The single-threaded references as they were before threads (runtime/reference.c), kept verbatim: the threaded
 * ones must reproduce their bits, so a change of summation order in the runtime's shows here. */
static void seq_forward(const attn_problem *p, const float *q, const float *k, const float *v, double *o) {
  const long n = p->n, n_kv = p->n_kv > 0 ? p->n_kv : p->n, d = p->d, dv = p->d_v > 0 ? p->d_v : p->d;
  const long heads = p->heads, heads_kv = p->heads_kv > 0 ? p->heads_kv : p->heads, group = heads / heads_kv;
  const double scale = p->scale != 0.0f ? (double)p->scale : 1.0 / sqrt((double)d);
  double *s = malloc(sizeof(double) * (size_t)(n_kv > 0 ? n_kv : 1));
  if (!s) {
    /* No way to report from here: NaN output makes the comparison fail loudly instead of passing. */
    for (long i = 0; i < (long)p->batch * heads * n * dv; i++) o[i] = NAN;
    return;
  }
  for (long b = 0; b < p->batch; b++)
    for (long h = 0; h < heads; h++) {
      const long hk = h / group;
      const float *qh = q + (b * heads + h) * n * d;
      const float *kh = k + (b * heads_kv + hk) * n_kv * d, *vh = v + (b * heads_kv + hk) * n_kv * dv;
      double *oh = o + (b * heads + h) * n * dv;
      for (long i = 0; i < n; i++) {
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
  free(s);
}

static void seq_backward(const attn_problem *p, const float *q, const float *k, const float *v, const float *o,
                         const float *dout, double *dq, double *dk, double *dv) {
  const long n = p->n, n_kv = p->n_kv > 0 ? p->n_kv : p->n, d = p->d, dvw = p->d_v > 0 ? p->d_v : p->d;
  const long heads = p->heads, heads_kv = p->heads_kv > 0 ? p->heads_kv : p->heads, group = heads / heads_kv;
  const double scale = p->scale != 0.0f ? (double)p->scale : 1.0 / sqrt((double)d);
  memset(dq, 0, sizeof(double) * (size_t)(p->batch * heads * n * d));
  memset(dk, 0, sizeof(double) * (size_t)(p->batch * heads_kv * n_kv * d));
  memset(dv, 0, sizeof(double) * (size_t)(p->batch * heads_kv * n_kv * dvw));
  double *P = malloc(sizeof(double) * (size_t)(n_kv > 0 ? n_kv : 1));
  double *C = malloc(sizeof(double) * (size_t)(n_kv > 0 ? n_kv : 1));
  double *orow = malloc(sizeof(double) * (size_t)dvw);
  if (!P || !C || !orow) {
    /* no way to report from here: NaN gradients fail the comparison loudly */
    for (long i = 0; i < (long)p->batch * heads * n * d; i++) dq[i] = NAN;
    free(P);
    free(C);
    free(orow);
    return;
  }
  for (long b = 0; b < p->batch; b++)
    for (long h = 0; h < heads; h++) {
      const long hk = h / group;
      const float *qh = q + (b * heads + h) * n * d, *gh = dout + (b * heads + h) * n * dvw;
      const float *oh = o ? o + (b * heads + h) * n * dvw : NULL;
      const float *kh = k + (b * heads_kv + hk) * n_kv * d, *vh = v + (b * heads_kv + hk) * n_kv * dvw;
      double *dqh = dq + (b * heads + h) * n * d;
      double *dkh = dk + (b * heads_kv + hk) * n_kv * d, *dvh = dv + (b * heads_kv + hk) * n_kv * dvw;
      for (long i = 0; i < n; i++) {
        long lo, hi;
        attn_visible_keys(p, i, &lo, &hi);
        if (hi <= lo) continue;
        double mx = -INFINITY, sum = 0;
        for (long j = lo; j < hi; j++) {
          double acc = 0;
          for (long c = 0; c < d; c++) acc += (double)qh[i * d + c] * (double)kh[j * d + c];
          P[j] = attn_score_mod(p, acc * scale, h, i, j);
          /* the softcap's derivative d/ds c tanh(s/c) = 1 - tanh^2(s/c), applied to dS below */
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
        /* D = rowsum(dO ∘ O), O the given one or this forward's */
        for (long c = 0; c < dvw; c++) {
          orow[c] = 0;
          if (oh) orow[c] = oh[i * dvw + c];
          else
            for (long j = lo; j < hi; j++) orow[c] += P[j] * (double)vh[j * dvw + c];
        }
        double D = 0;
        for (long c = 0; c < dvw; c++) D += (double)gh[i * dvw + c] * orow[c];
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
  free(P);
  free(C);
  free(orow);
}

typedef struct {
  attn_problem p;
  size_t nq, nk, nv, no;
  float *q, *k, *v, *o, *g;
  double *ro, *rq, *rk, *rv; /* single-threaded */
  double *to, *tq, *tk, *tv; /* threaded */
} ref_case;

static const float slopes[8] = {0.5f, 0.25f, 0.125f, 0.0625f, 0.03125f, 0.75f, 0.2f, 0.01f};

static const char *desc(const attn_problem *p) {
  static char buf[192];
  snprintf(buf, sizeof buf, "b=%d h=%d/%d n=%d n_kv=%d d=%d d_v=%d causal=%d window=%d softcap=%g alibi=%s", p->batch,
           p->heads, p->heads_kv, p->n, p->n_kv, p->d, p->d_v, p->causal, p->window, (double)p->softcap,
           p->alibi_slopes ? "on" : "off");
  return buf;
}

static void case_free(ref_case *c) {
  free(c->q), free(c->k), free(c->v), free(c->o), free(c->g);
  free(c->ro), free(c->rq), free(c->rk), free(c->rv), free(c->to), free(c->tq), free(c->tk), free(c->tv);
}

static int case_init(ref_case *c, const attn_problem *p, unsigned long long seed) {
  memset(c, 0, sizeof *c);
  c->p = *p;
  c->nq = (size_t)p->batch * p->heads * p->n * p->d;
  c->nk = (size_t)p->batch * p->heads_kv * p->n_kv * p->d;
  c->nv = (size_t)p->batch * p->heads_kv * p->n_kv * p->d_v;
  c->no = (size_t)p->batch * p->heads * p->n * p->d_v;
  float **f[5] = {&c->q, &c->k, &c->v, &c->o, &c->g};
  const size_t fc[5] = {c->nq, c->nk, c->nv, c->no, c->no};
  for (int i = 0; i < 5; i++) {
    if (!(*f[i] = malloc(fc[i] * sizeof(float) + 1))) return -1;
    attn_fill_random(*f[i], fc[i], seed + (unsigned long long)i * 131);
  }
  for (size_t i = 0; i < c->nq; i++) c->q[i] *= 2.0f; /* scores of a few units: the softcap bites */
  double **r[8] = {&c->ro, &c->rq, &c->rk, &c->rv, &c->to, &c->tq, &c->tk, &c->tv};
  const size_t rc[4] = {c->no, c->nq, c->nk, c->nv};
  for (int i = 0; i < 8; i++)
    if (!(*r[i] = malloc(rc[i % 4] * sizeof(double) + 1))) return -1;
  return 0;
}

/* Threaded outputs poisoned with a pattern no result has, so an unwritten element shows. */
static void scribble(ref_case *c) {
  memset(c->to, 0x5a, c->no * sizeof(double));
  memset(c->tq, 0x5a, c->nq * sizeof(double));
  memset(c->tk, 0x5a, c->nk * sizeof(double));
  memset(c->tv, 0x5a, c->nv * sizeof(double));
}

static int all_nan(const double *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isnan(x[i])) return 0;
  return 1;
}

/* The single-threaded results, then the threaded ones against them, with each thread count. */
static void check_case(const attn_problem *p, unsigned long long seed, const int *threads, int nthreads) {
  ref_case c;
  if (case_init(&c, p, seed) != 0) {
    CHECK(0, "%s: out of memory for the case", desc(p));
    case_free(&c);
    return;
  }
  for (int given = 0; given < 2; given++) {
    const float *o = given ? c.o : NULL;
    seq_forward(&c.p, c.q, c.k, c.v, c.ro);
    seq_backward(&c.p, c.q, c.k, c.v, o, c.g, c.rq, c.rk, c.rv);
    CHECK(!all_nan(c.ro, c.no) || c.no == 0, "%s: the single-threaded forward is NaN", desc(p));
    /* the old signatures: one thread */
    scribble(&c);
    attn_reference(&c.p, c.q, c.k, c.v, c.to);
    attn_reference_backward(&c.p, c.q, c.k, c.v, o, c.g, c.tq, c.tk, c.tv);
    CHECK(!memcmp(c.ro, c.to, c.no * sizeof(double)) && !memcmp(c.rq, c.tq, c.nq * sizeof(double)) &&
              !memcmp(c.rk, c.tk, c.nk * sizeof(double)) && !memcmp(c.rv, c.tv, c.nv * sizeof(double)),
          "%s: attn_reference, attn_reference_backward: other bits", desc(p));
    for (int t = 0; t < nthreads; t++) {
      scribble(&c);
      attn_reference_threads(&c.p, threads[t], c.q, c.k, c.v, c.to);
      attn_reference_backward_threads(&c.p, threads[t], c.q, c.k, c.v, o, c.g, c.tq, c.tk, c.tv);
      CHECK(!memcmp(c.ro, c.to, c.no * sizeof(double)), "%s: forward, %d threads: other bits", desc(p), threads[t]);
      CHECK(!memcmp(c.rq, c.tq, c.nq * sizeof(double)), "%s: dq (O %s), %d threads: other bits", desc(p),
            given ? "given" : "fp64", threads[t]);
      CHECK(!memcmp(c.rk, c.tk, c.nk * sizeof(double)), "%s: dk (O %s), %d threads: other bits", desc(p),
            given ? "given" : "fp64", threads[t]);
      CHECK(!memcmp(c.rv, c.tv, c.nv * sizeof(double)), "%s: dv (O %s), %d threads: other bits", desc(p),
            given ? "given" : "fp64", threads[t]);
    }
  }
  case_free(&c);
}

static attn_problem prob(int batch, int heads, int heads_kv, int n, int n_kv, int d, int d_v, int causal, int window,
                         float softcap, int alibi) {
  attn_problem p = {.batch = batch, .heads = heads, .heads_kv = heads_kv, .n = n, .n_kv = n_kv, .d = d, .d_v = d_v,
                    .causal = causal, .window = window, .softcap = softcap, .dtype = ATTN_F32};
  p.alibi_slopes = alibi ? slopes : NULL;
  return p;
}

static void group_bits(void) {
  static const int threads[4] = {1, 2, 3, 7};
  /* GQA G = 4 (8 query heads on 2 KV heads, 2 batches: 4 backward units, 7 threads > units), d_v != d; the
   * forward's row blocks are 32 rows: n = 70 gives a short last block */
  const attn_problem ps[] = {
      prob(2, 8, 2, 70, 70, 16, 24, 1, 0, 0, 0),     /* causal */
      prob(2, 8, 2, 37, 45, 16, 24, 1, 0, 0, 1),     /* causal, n_kv > n, ALiBi */
      prob(1, 8, 2, 45, 37, 16, 8, 1, 0, 0, 0),      /* causal, n > n_kv: rows that see no key */
      prob(2, 8, 2, 41, 53, 16, 24, 0, 9, 0, 1),     /* window both sides, ALiBi */
      prob(1, 8, 2, 66, 66, 24, 16, 1, 5, 3.0f, 1), /* causal window, softcap, ALiBi */
      prob(3, 3, 3, 33, 17, 8, 8, 0, 0, 0, 0),       /* MHA, odd sizes */
      prob(1, 4, 1, 1, 29, 16, 24, 1, 0, 0, 0),      /* MQA decode: n = 1, one backward unit */
      prob(1, 4, 1, 50, 70, 16, 24, 0, 11, 2.0f, 1), /* MQA, window both sides, softcap, ALiBi */
  };
  for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) check_case(&ps[i], 1000 + i, threads, 4);
}

/* One small GQA case (causal window, ALiBi, d_v != d) on 2 threads (the backward by KV head) and 7 (split): what the
 * TSan build runs. */
static void group_tiny(void) {
  static const int threads[2] = {2, 7};
  const attn_problem p = prob(1, 8, 2, 40, 44, 8, 12, 1, 9, 0, 1);
  check_case(&p, 5, threads, 2);
}

#ifdef REF_PAR_WRAP
/* One failure mode: the threaded results against the single-threaded ones, or all-NaN o and dq (oom). */
static void fail_case(const char *what, int heads_kv, int threads, int malloc_k, int create_k, int create_all,
                      int oom, int bwd_only) {
  const attn_problem p = prob(heads_kv > 1 ? 2 : 1, 8, heads_kv, 40, 40, 16, 24, 1, 0, 0, 1);
  ref_case c;
  if (case_init(&c, &p, 77) != 0) {
    CHECK(0, "%s: out of memory for the case", what);
    case_free(&c);
    return;
  }
  attn_reference(&c.p, c.q, c.k, c.v, c.ro);
  attn_reference_backward(&c.p, c.q, c.k, c.v, NULL, c.g, c.rq, c.rk, c.rv);
  for (int pass = bwd_only; pass < 2; pass++) { /* forward, backward: each with the failure armed anew */
    scribble(&c);
    atomic_store(&creates, 0);
    atomic_store(&malloc_fail_in, malloc_k);
    atomic_store(&create_fail_in, create_k);
    atomic_store(&create_fail_all, create_all);
    if (pass == 0) attn_reference_threads(&c.p, threads, c.q, c.k, c.v, c.to);
    else attn_reference_backward_threads(&c.p, threads, c.q, c.k, c.v, NULL, c.g, c.tq, c.tk, c.tv);
    const int armed = atomic_load(&malloc_fail_in) + atomic_load(&create_fail_in);
    atomic_store(&malloc_fail_in, 0);
    atomic_store(&create_fail_in, 0);
    atomic_store(&create_fail_all, 0);
    CHECK(armed == 0, "%s (%s): the failure was never reached", what, pass ? "backward" : "forward");
    CHECK(create_k == 0 && !create_all ? 1 : atomic_load(&creates) > 0, "%s: no thread was asked for", what);
    if (oom) {
      CHECK(pass ? all_nan(c.tq, c.nq) : all_nan(c.to, c.no), "%s (%s): not all NaN", what,
            pass ? "backward" : "forward");
    } else if (pass == 0) {
      CHECK(!memcmp(c.ro, c.to, c.no * sizeof(double)), "%s: forward: other bits", what);
    } else {
      CHECK(!memcmp(c.rq, c.tq, c.nq * sizeof(double)) && !memcmp(c.rk, c.tk, c.nk * sizeof(double)) &&
                !memcmp(c.rv, c.tv, c.nv * sizeof(double)),
            "%s: backward: other bits", what);
    }
  }
  case_free(&c);
}

static void group_fail(void) {
  /* 2 x 2 KV heads: the backward by KV head */
  fail_case("no thread can be created, 7 asked", 2, 7, 0, 0, 1, 0, 0);
  fail_case("the second thread cannot be created, 3 asked", 2, 3, 0, 2, 0, 0, 0);
  fail_case("a worker's scratch is not allocated, 3 asked", 2, 3, 2, 0, 0, 0, 0);
  fail_case("the calling thread's scratch is not allocated, 3 asked", 2, 3, 1, 0, 0, 1, 0);
  fail_case("the calling thread's scratch is not allocated, 1 asked", 2, 1, 1, 0, 0, 1, 0);
  /* one KV head: the split backward (its first allocation the rows' max, sum and D) */
  fail_case("split backward: no thread can be created, 3 asked", 1, 3, 0, 0, 1, 0, 1);
  fail_case("split backward: the rows' memory is not allocated, 3 asked", 1, 3, 1, 0, 0, 0, 1);
  fail_case("split backward: a worker's scratch is not allocated, 3 asked", 1, 3, 3, 0, 0, 0, 1);
  fail_case("split backward: the calling thread's scratch is not allocated, 3 asked", 1, 3, 2, 0, 0, 1, 1);
  fail_case("split backward: the key pass's scratch is not allocated, 2 asked", 1, 2, 4, 0, 0, 1, 1);
}
#endif

/* Wall and process CPU seconds of the forward and the backward (O its own) at batch 1, n = n_kv, d = d_v, not causal,
 * on 1 and `threads` threads, the bits compared: docs/results/cpu.md's figures. Not a test. */
static int group_time(long n, int d, int heads, int heads_kv, int threads) {
  const attn_problem p = prob(1, heads, heads_kv, (int)n, (int)n, d, d, 0, 0, 0, 0);
  ref_case c;
  if (case_init(&c, &p, 9) != 0) {
    fprintf(stderr, "ref_par time: out of memory\n");
    case_free(&c);
    return 1;
  }
  double sec[2][2], cpu[2][2]; /* wall and process CPU seconds */
  const int th[2] = {1, threads};
  for (int t = 0; t < 2; t++) {
    double *o = t ? c.to : c.ro, *dq = t ? c.tq : c.rq, *dk = t ? c.tk : c.rk, *dv = t ? c.tv : c.rv;
    struct timespec w[3], u[3];
    clock_gettime(CLOCK_MONOTONIC, &w[0]), clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &u[0]);
    attn_reference_threads(&c.p, th[t], c.q, c.k, c.v, o);
    clock_gettime(CLOCK_MONOTONIC, &w[1]), clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &u[1]);
    attn_reference_backward_threads(&c.p, th[t], c.q, c.k, c.v, NULL, c.g, dq, dk, dv);
    clock_gettime(CLOCK_MONOTONIC, &w[2]), clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &u[2]);
    for (int i = 0; i < 2; i++) {
      sec[t][i] = (double)(w[i + 1].tv_sec - w[i].tv_sec) + 1e-9 * (double)(w[i + 1].tv_nsec - w[i].tv_nsec);
      cpu[t][i] = (double)(u[i + 1].tv_sec - u[i].tv_sec) + 1e-9 * (double)(u[i + 1].tv_nsec - u[i].tv_nsec);
    }
  }
  const int same = !memcmp(c.ro, c.to, c.no * sizeof(double)) && !memcmp(c.rq, c.tq, c.nq * sizeof(double)) &&
                   !memcmp(c.rk, c.tk, c.nk * sizeof(double)) && !memcmp(c.rv, c.tv, c.nv * sizeof(double));
  printf("n=%ld d=%d heads=%d/%d, wall (CPU) seconds: forward %.2f (%.2f) on 1 thread, %.2f (%.2f) on %d; "
         "backward %.2f (%.2f), %.2f (%.2f); bits %s\n",
         n, d, heads, heads_kv, sec[0][0], cpu[0][0], sec[1][0], cpu[1][0], threads, sec[0][1], cpu[0][1],
         sec[1][1], cpu[1][1], same ? "equal" : "DIFFER");
  case_free(&c);
  return same ? 0 : 1;
}

int main(int argc, char **argv) {
  const char *g = argc > 1 ? argv[1] : "";
  if (!strcmp(g, "time") && (argc == 6 || argc == 7))
    return group_time(strtol(argv[2], NULL, 10), atoi(argv[3]), atoi(argv[4]), atoi(argv[argc == 7 ? 6 : 4]),
                      atoi(argv[5]));
  if (!strcmp(g, "bits")) {
    group_bits();
  } else if (!strcmp(g, "tiny")) {
    group_tiny();
#ifdef REF_PAR_WRAP
  } else if (!strcmp(g, "fail")) {
    group_fail();
#endif
  } else {
    fprintf(stderr, "usage: ref_par bits|tiny|fail, or ref_par time N D HEADS THREADS [HEADS_KV]\n");
    return 2;
  }
  printf("ref_par %s: %d checks, %d failed\n", g, checks, failures);
  return failures ? 1 : 0;
}
