/* cpu_paged.c: attn_execute_paged (a paged KV cache, vLLM's layout) against the fp64 reference on the same data laid
 * out densely, sequence by sequence: decode with GQA and a causal n = 5 prefill (flash, and smallcache), page sizes
 * 16 and 7 (7 divides none of the lengths), pages in shuffled order, lengths 0, 1 and odd in one batch; then bad
 * input, which must leave o untouched. */
#include "cpu_util.h"

static unsigned long long rng = 88172645463325252ULL;
static unsigned long long next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

typedef struct {
  attn_problem p; /* the plan's (normalised) */
  int batch, page_size, max_pages, num_pages;
  const int *lens;
  int *table;
  float *q, *kp, *vp, *o;
} paged;

/* Random q and pages; each sequence's pages drawn from a shuffled cache with spare pages, unused table entries -1. */
static void paged_setup(paged *c, const attn_problem *p, const int *lens, int page_size, unsigned long long seed) {
  c->p = *p, c->batch = p->batch, c->lens = lens, c->page_size = page_size;
  c->max_pages = (p->n_kv + page_size - 1) / page_size;
  int used = 0;
  for (int b = 0; b < p->batch; b++) used += (lens[b] + page_size - 1) / page_size;
  c->num_pages = used + 3;
  int *perm = malloc(sizeof(int) * c->num_pages);
  c->table = malloc(sizeof(int) * p->batch * c->max_pages);
  const size_t prow = (size_t)page_size * p->heads_kv;
  c->kp = malloc(sizeof(float) * c->num_pages * prow * p->d);
  c->vp = malloc(sizeof(float) * c->num_pages * prow * p->d_v);
  const size_t nq = (size_t)p->batch * p->heads * p->n * p->d, no = (size_t)p->batch * p->heads * p->n * p->d_v;
  c->q = malloc(sizeof(float) * nq);
  c->o = malloc(sizeof(float) * no);
  if (!perm || !c->table || !c->kp || !c->vp || !c->q || !c->o) abort();
  for (int i = 0; i < c->num_pages; i++) perm[i] = i;
  for (int i = c->num_pages - 1; i > 0; i--) {
    const int j = (int)(next() % (unsigned long long)(i + 1)), t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  int k = 0;
  for (int b = 0; b < p->batch; b++)
    for (int i = 0; i < c->max_pages; i++)
      c->table[b * c->max_pages + i] = i < (lens[b] + page_size - 1) / page_size ? perm[k++] : -1;
  free(perm);
  seed = seed * 1000003ULL + test_seed() * 3;
  attn_fill_random(c->q, nq, seed + 1);
  attn_fill_random(c->kp, c->num_pages * prow * p->d, seed + 2);
  attn_fill_random(c->vp, c->num_pages * prow * p->d_v, seed + 3);
  attn_poison(c->o, no);
}

static void paged_free(paged *c) {
  free(c->table), free(c->kp), free(c->vp), free(c->q), free(c->o);
}

/* Sequence b densely ([1][heads_kv][len][dim]) from its pages. */
static float *dense(const paged *c, const float *pages, int b, int dim) {
  const int len = c->lens[b], hk = c->p.heads_kv;
  float *x = malloc(sizeof(float) * ((size_t)hk * len * dim + 1));
  if (!x) abort();
  for (int t = 0; t < len; t++) {
    const int page = c->table[b * c->max_pages + t / c->page_size];
    for (int h = 0; h < hk; h++)
      memcpy(x + ((size_t)h * len + t) * dim,
             pages + (((size_t)page * c->page_size + t % c->page_size) * hk + h) * dim, sizeof(float) * dim);
  }
  return x;
}

/* Runs the plan on c and checks every sequence's rows against fp64 (zeros for a sequence without keys). */
static void paged_check(attn_plan *plan, paged *c, const char *what) {
  const attn_problem *p = &c->p;
  int rc = attn_execute_paged(plan, c->q, c->kp, c->vp, c->num_pages, c->page_size, c->table, c->max_pages, c->lens,
                              c->o);
  CHECK(rc == ATTN_OK, "%s page_size=%d: %s: %s", what, c->page_size, attn_strerror(rc), attn_last_error(NULL));
  if (rc != ATTN_OK) return;
  const size_t qseq = (size_t)p->heads * p->n * p->d, oseq = (size_t)p->heads * p->n * p->d_v;
  for (int b = 0; b < c->batch; b++) {
    const float *o = c->o + b * oseq;
    if (c->lens[b] == 0) {
      int zero = 1;
      for (size_t i = 0; i < oseq; i++) zero &= o[i] == 0.0f;
      CHECK(zero, "%s page_size=%d: sequence %d of length 0: rows not zero", what, c->page_size, b);
      continue;
    }
    attn_problem one = *p, norm;
    one.batch = 1, one.n_kv = c->lens[b], one.window = 0;
    if (attn_problem_normalize(NULL, &one, &norm) != ATTN_OK) abort();
    float *k = dense(c, c->kp, b, p->d), *v = dense(c, c->vp, b, p->d_v);
    double *ref = malloc(sizeof(double) * oseq);
    if (!ref) abort();
    attn_reference(&norm, c->q + b * qseq, k, v, ref);
    const double e = attn_rel_error(ref, o, oseq);
    CHECK(e < TOL, "%s page_size=%d: sequence %d (n_kv=%d): rel error %g", what, c->page_size, b, c->lens[b], e);
    free(k), free(v), free(ref);
  }
}

static void correct(attn_runtime *rt) {
  /* decode, GQA 8:2 */
  const attn_problem dec = {.batch = 6, .heads = 8, .heads_kv = 2, .n = 1, .n_kv = 40, .d = 32, .causal = 1,
                            .algo = ATTN_ALGO_FLASH};
  const int dec_lens[6] = {0, 1, 37, 40, 23, 15};
  /* prefill-ish: n = 5 causal (bottom-right per sequence: lengths 1 and 3 leave rows without keys), d_v != d */
  const attn_problem pre = {.batch = 5, .heads = 4, .heads_kv = 2, .n = 5, .n_kv = 33, .d = 16, .d_v = 24,
                            .causal = 1, .algo = ATTN_ALGO_FLASH};
  const int pre_lens[5] = {33, 0, 1, 3, 19};
  attn_problem sc = pre;
  sc.algo = ATTN_ALGO_SMALLCACHE;
  const struct { const attn_problem *p; const int *lens; const char *what; } cases[] = {
      {&dec, dec_lens, "decode GQA"}, {&pre, pre_lens, "prefill n=5 causal"}, {&sc, pre_lens, "smallcache n=5"}};
  for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
    attn_plan *plan = NULL;
    int rc = attn_plan_create(rt, cases[t].p, &plan);
    CHECK(rc == ATTN_OK, "%s: plan: %s", cases[t].what, attn_last_error(rt));
    if (rc != ATTN_OK) continue;
    const int sizes[2] = {16, 7};
    for (int s = 0; s < 2; s++) {
      paged c;
      paged_setup(&c, &plan->p, cases[t].lens, sizes[s], 100 * t + s);
      paged_check(plan, &c, cases[t].what);
      paged_free(&c);
    }
    attn_plan_destroy(plan);
  }
}

/* Each bad call: ATTN_EINVAL, a one-line message naming the fault, o's bytes unchanged. */
static void bad(attn_runtime *rt) {
  const attn_problem p = {.batch = 2, .heads = 4, .heads_kv = 2, .n = 1, .n_kv = 20, .d = 16};
  attn_plan *plan = NULL;
  CHECK(attn_plan_create(rt, &p, &plan) == ATTN_OK, "bad: plan: %s", attn_last_error(rt));
  if (!plan) return;
  const int lens[2] = {9, 20};
  paged c;
  paged_setup(&c, &plan->p, lens, 7, 900);
  const size_t obytes = sizeof(float) * p.batch * p.heads * p.n * p.d;
  float *keep = malloc(obytes);
  if (!keep) abort();
  memcpy(keep, c.o, obytes);
  int t_lo[2] = {9, 20}, t_long[2] = {9, 21}, t_neg[2] = {-1, 20};
  for (int k = 0; k < 10; k++) {
    const void *q = c.q;
    const int *table = c.table, *ls = lens;
    int num = c.num_pages, ps = c.page_size, maxp = c.max_pages, saved = 0, slot = -1;
    const char *what = "", *needle = "";
    switch (k) {
    case 0: q = NULL, what = "q NULL", needle = "q is NULL"; break;
    case 1: table = NULL, what = "block_table NULL", needle = "block_table is NULL"; break;
    case 2: ps = 0, what = "page_size 0", needle = "page_size 0"; break;
    case 3: slot = 1 * maxp + 2, saved = num, what = "page index = num_pages", needle = "outside"; break;
    case 4: slot = 0 * maxp + 1, saved = -1, what = "page index -1", needle = "outside"; break;
    case 5: ls = t_long, what = "longer than n_kv", needle = "n_kv"; break;
    case 6: maxp = 2, ls = t_lo, what = "longer than its pages", needle = "pages"; break;
    case 7: ls = t_neg, what = "negative length", needle = "< 0"; break;
    case 8: num = 0, what = "num_pages 0", needle = "num_pages"; break;
    case 9: ps = 2, what = "page_size 2 (20 keys need 10 pages)", needle = "pages"; break;
    }
    if (slot >= 0) {
      const int old = c.table[slot];
      c.table[slot] = saved, saved = old;
    }
    int rc = attn_execute_paged(plan, q, c.kp, c.vp, num, ps, table, maxp, ls, c.o);
    if (slot >= 0) c.table[slot] = saved;
    const char *msg = attn_last_error(rt);
    CHECK(rc == ATTN_EINVAL, "%s: got %s", what, attn_strerror(rc));
    CHECK(msg && strstr(msg, needle) && !strchr(msg, '\n'), "%s: message '%s' lacks '%s'", what, msg ? msg : "",
          needle);
    CHECK(memcmp(keep, c.o, obytes) == 0, "%s: o was written", what);
    printf("%-36s -> %s: %s\n", what, attn_strerror(rc), msg ? msg : "");
  }
  /* entries past a sequence's pages are not read (-1 there is fine) and a good call still works */
  paged_check(plan, &c, "after bad calls");
  /* a plan made for a page size refuses another */
  attn_problem pp = p;
  pp.page_size = c.page_size + 1;
  attn_plan *sized = NULL;
  CHECK(attn_plan_create(rt, &pp, &sized) == ATTN_OK, "plan with page_size: %s", attn_last_error(rt));
  if (sized) {
    CHECK(attn_execute_paged(sized, c.q, c.kp, c.vp, c.num_pages, c.page_size, c.table, c.max_pages, lens, c.o) ==
              ATTN_EINVAL && strstr(attn_last_error(rt), "made for pages"),
          "page size other than the plan's accepted: %s", attn_last_error(rt));
    attn_plan_destroy(sized);
  }
  CHECK(attn_execute_paged(NULL, c.q, c.kp, c.vp, 1, 1, lens, 1, lens, keep) == ATTN_EINVAL, "plan NULL accepted");
  free(keep);
  paged_free(&c);
  attn_plan_destroy(plan);
}

int main(void) {
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CPU, &rt);
  if (rc != ATTN_OK) {
    fprintf(stderr, "attn_open: %s: %s\n", attn_strerror(rc), attn_last_error(NULL));
    return 1;
  }
  correct(rt);
  bad(rt);
  attn_close(rt);
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
