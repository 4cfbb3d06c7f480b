/* cpu_paged.c: attn_execute_paged (a paged KV cache, vLLM's layout, read in place by the kernels) against the fp64
 * reference on the same data laid out densely, sequence by sequence: decode (GQA packed, split-K, one query per head)
 * and prefill (flash's dot and lane kernels, smallcache), causal and not, page sizes that divide neither the tiles
 * nor the lengths (3, 5, 7) and 16 (key tiles span pages; a window's edge tiles read in place end at a page's end),
 * two and four query rows a KV head and one KV head, pages in shuffled order, lengths 0, 1 and odd in one batch, f32,
 * f16 and bf16, a window, softcap and ALiBi; the counting build's transfers equal dense ones (and decode's closed
 * form); then bad input, which must leave o untouched. */
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
  float *q, *kp, *vp, *o; /* fp32, rounded through the plan's dtype (o: the output converted back) */
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
  attn_round_dtype(p->dtype, c->q, nq);
  attn_round_dtype(p->dtype, c->kp, c->num_pages * prow * p->d);
  attn_round_dtype(p->dtype, c->vp, c->num_pages * prow * p->d_v);
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

/* x in the plan's dtype (a copy; fp32 as it is). */
static void *in_dtype(attn_dtype dt, const float *x, size_t count) {
  void *y = malloc(count * sizeof(float) + 1);
  if (!y) abort();
  if (dt == ATTN_F32) memcpy(y, x, count * sizeof(float));
  else attn_to_dtype(dt, x, count, y);
  return y;
}

/* Runs the plan on c (inputs in its dtype, the NaN-poisoned o too) and checks every sequence's rows against fp64
 * (exact zeros for a sequence without keys). */
static void paged_check(attn_plan *plan, paged *c, double tol, const char *what) {
  const attn_problem *p = &c->p;
  const size_t prow = (size_t)c->page_size * p->heads_kv;
  const size_t nq = (size_t)p->batch * p->heads * p->n * p->d, no = (size_t)p->batch * p->heads * p->n * p->d_v;
  void *q = in_dtype(p->dtype, c->q, nq), *kp = in_dtype(p->dtype, c->kp, c->num_pages * prow * p->d);
  void *vp = in_dtype(p->dtype, c->vp, c->num_pages * prow * p->d_v), *o = in_dtype(p->dtype, c->o, no);
  int rc = attn_execute_paged(plan, q, kp, vp, c->num_pages, c->page_size, c->table, c->max_pages, c->lens, o);
  CHECK(rc == ATTN_OK, "%s page_size=%d: %s: %s", what, c->page_size, attn_strerror(rc), attn_last_error(NULL));
  if (p->dtype == ATTN_F32) memcpy(c->o, o, no * sizeof(float));
  else attn_from_dtype(p->dtype, o, no, c->o);
  free(q), free(kp), free(vp), free(o);
  if (rc != ATTN_OK) return;
  const size_t qseq = (size_t)p->heads * p->n * p->d, oseq = (size_t)p->heads * p->n * p->d_v;
  for (int b = 0; b < c->batch; b++) {
    const float *ob = c->o + b * oseq;
    if (c->lens[b] == 0) {
      int zero = 1;
      for (size_t i = 0; i < oseq; i++) zero &= ob[i] == 0.0f;
      CHECK(zero, "%s page_size=%d: sequence %d of length 0: rows not zero", what, c->page_size, b);
      continue;
    }
    attn_problem one = *p, norm;
    one.batch = 1, one.n_kv = c->lens[b];
    if (attn_problem_normalize(NULL, &one, &norm) != ATTN_OK) abort();
    float *k = dense(c, c->kp, b, p->d), *v = dense(c, c->vp, b, p->d_v);
    double *ref = malloc(sizeof(double) * oseq);
    if (!ref) abort();
    attn_reference(&norm, c->q + b * qseq, k, v, ref);
    const double e = attn_rel_error(ref, ob, oseq);
    CHECK(e < tol, "%s page_size=%d: sequence %d (n_kv=%d): rel error %g", what, c->page_size, b, c->lens[b], e);
    free(k), free(v), free(ref);
  }
}

/* Counted transfers (the counting build) of attn_execute_paged's kernel call on c (the whole batch, its block table
 * and key counts) against those of the same kernel on each sequence laid out densely: reading pages in place moves
 * what dense K and V move, each page once per KV head. Decode flash without split-K also against the closed form:
 * per sequence heads_kv·len·(d + d_v) + heads·d read, heads·d_v written. */
static void paged_io(attn_runtime *rt, const attn_spec *s, paged *c, const char *what) {
  const attn_problem *p = &c->p;
  attn_plan *plan = NULL;
  attn_spec sp = *s; /* flash: the paged kernel (layout 2), the one attn_execute_paged runs and the only one reading
                      * pages; the same kernel runs the dense calls below */
  if (sp.algo == ATTN_ALGO_FLASH) sp.layout = 2;
  int rc = attn_plan_create_spec(rt, p, &sp, 1, "test", &plan);
  CHECK(rc == ATTN_OK, "%s: counting plan: %s", what, attn_last_error(rt));
  if (rc != ATTN_OK) return;
  const size_t qseq = (size_t)p->heads * p->n * p->d, oseq = (size_t)p->heads * p->n * p->d_v;
  float *o = malloc(sizeof(float) * oseq * p->batch);
  if (!o) abort();
  attn_kargs a = attn_problem_kargs(p, c->q, c->kp, c->vp, o);
  a.block_table = c->table, a.page_size = c->page_size, a.max_pages = c->max_pages, a.seq_lens = c->lens;
  attn_io io_paged = {0, 0}, io_dense = {0, 0};
  rc = attn_cpu_run(rt, plan->cpu, &a, &io_paged);
  unsigned long long r = 0, w = 0;
  for (int b = 0; b < c->batch && rc == ATTN_OK; b++) {
    const long len = c->lens[b]; /* 0 too: the batch call runs that sequence's items (zeroed afterwards) */
    float *k = dense(c, c->kp, b, p->d), *v = dense(c, c->vp, b, p->d_v);
    attn_kargs d = attn_problem_kargs(p, c->q + b * qseq, k, v, o);
    d.batch = 1, d.n_kv = len;
    attn_io one = {0, 0};
    rc = attn_cpu_run(rt, plan->cpu, &d, &one);
    io_dense.reads += one.reads, io_dense.writes += one.writes;
    r += (unsigned long long)p->heads_kv * len * (p->d + p->d_v) + (unsigned long long)p->heads * p->d;
    w += (unsigned long long)p->heads * p->d_v;
    free(k), free(v);
  }
  CHECK(rc == ATTN_OK, "%s: counted run: %s", what, attn_last_error(rt));
  CHECK(io_paged.reads == io_dense.reads && io_paged.writes == io_dense.writes,
        "%s page_size=%d: paged moved %llu/%llu entries, dense %llu/%llu", what, c->page_size, io_paged.reads,
        io_paged.writes, io_dense.reads, io_dense.writes);
  if (s->algo == ATTN_ALGO_FLASH && p->n == 1 && s->split <= 1 && !p->window)
    CHECK(io_paged.reads == r && io_paged.writes == w,
          "%s page_size=%d: %llu/%llu entries moved, the decode closed form is %llu/%llu", what, c->page_size,
          io_paged.reads, io_paged.writes, r, w);
  printf("  %s page_size=%d: counted %llu read, %llu written (dense: %llu, %llu)\n", what, c->page_size,
         io_paged.reads, io_paged.writes, io_dense.reads, io_dense.writes);
  free(o);
  attn_plan_destroy(plan);
}

static const float SLOPES[8] = {0.5f, 0.25f, 0.125f, 0.0625f, 0.03125f, 0.4f, 0.2f, 0.1f};

typedef struct {
  const char *what;
  attn_problem p;
  const int *lens;
  int br, bc, split; /* the spec's tiles (0: the default's) */
  int sizes[3];      /* page sizes (0: unused) */
  double tol;
  int io;            /* also count the transfers: 1 with the argument "all", 2 always */
  int nightly;       /* only with the argument "all" (each case compiles its own kernels) */
} pcase;

static void correct(attn_runtime *rt, int all) {
  static const int dec_lens[6] = {0, 1, 37, 40, 23, 15};
  static const int pre_lens[5] = {33, 0, 1, 3, 19};
  static const int long_lens[4] = {61, 2, 0, 45};
  const pcase cases[] = {
      /* decode, GQA 8:2 (packed rows, the dot kernels): pages of 16, 7 and 5 in tiles of 16 keys (a tile spans
       * pages) */
      {"decode GQA", {.batch = 6, .heads = 8, .heads_kv = 2, .n = 1, .n_kv = 40, .d = 32, .causal = 1}, dec_lens,
       0, 16, 0, {16, 7, 5}, TOL, 2, 0},
      /* two query rows a KV head (fl_block_heads' two-row copy), tiles over pages of 3 */
      {"decode GQA 4:2", {.batch = 6, .heads = 4, .heads_kv = 2, .n = 1, .n_kv = 40, .d = 32, .causal = 1},
       dec_lens, 0, 16, 0, {3, 16, 0}, TOL, 2, 0},
      /* one KV head (not grouped): a tile read in place a page's run of rows at a time */
      {"decode GQA 4:1", {.batch = 6, .heads = 4, .heads_kv = 1, .n = 1, .n_kv = 40, .d = 32, .causal = 1},
       dec_lens, 0, 16, 0, {3, 0, 0}, TOL, 2, 0},
      /* split-K: each part's key range starts inside a page */
      {"decode GQA split 3", {.batch = 6, .heads = 8, .heads_kv = 2, .n = 1, .n_kv = 40, .d = 32}, dec_lens, 0, 8, 3,
       {7, 16, 0}, TOL, 0, 1},
      /* one query per head (no packing), d_v != d */
      {"decode MHA", {.batch = 6, .heads = 3, .heads_kv = 3, .n = 1, .n_kv = 40, .d = 16, .d_v = 24, .causal = 1},
       dec_lens, 0, 0, 0, {16, 3, 0}, TOL, 1, 1},
      /* n = 5 causal (bottom-right per sequence: lengths 1 and 3 leave rows without keys), d_v != d */
      {"prefill n=5 causal",
       {.batch = 5, .heads = 4, .heads_kv = 2, .n = 5, .n_kv = 33, .d = 16, .d_v = 24, .causal = 1}, pre_lens, 0, 0,
       0, {16, 7, 0}, TOL, 0, 1},
      {"smallcache n=5 causal",
       {.batch = 5, .heads = 4, .heads_kv = 2, .n = 5, .n_kv = 33, .d = 16, .d_v = 24, .causal = 1,
        .algo = ATTN_ALGO_SMALLCACHE},
       pre_lens, 0, 0, 0, {16, 7, 0}, TOL, 1, 0},
      /* whole query blocks of the lane kernels (Br 8) over 16-key tiles, pages of 5 and 16, bf16, a window of 6,
       * softcap and ALiBi */
      {"prefill n=19 bf16 window 6 softcap alibi",
       {.batch = 4, .heads = 4, .heads_kv = 2, .n = 19, .n_kv = 61, .d = 16, .causal = 1, .dtype = ATTN_BF16,
        .window = 6, .softcap = 2.5f, .alibi_slopes = SLOPES},
       long_lens, 8, 16, 0, {5, 16, 0}, 2e-2, 0, 0},
      /* f16 decode with every modifier: softcap, ALiBi and a window shorter than a tile */
      {"decode f16 softcap alibi window 9",
       {.batch = 6, .heads = 8, .heads_kv = 2, .n = 1, .n_kv = 40, .d = 32, .causal = 1, .dtype = ATTN_F16,
        .window = 9, .softcap = 2.0f, .alibi_slopes = SLOPES},
       dec_lens, 0, 16, 0, {7, 0, 0}, 1e-2, 0, 1},
      /* f32 decode with every modifier: every KV head's key block at once (fl_block_heads), a window's edge blocks
       * head by head */
      {"decode f32 softcap alibi window 9",
       {.batch = 6, .heads = 8, .heads_kv = 2, .n = 1, .n_kv = 40, .d = 32, .causal = 1, .window = 9,
        .softcap = 2.0f, .alibi_slopes = SLOPES},
       dec_lens, 0, 16, 0, {7, 0, 0}, TOL, 1, 1},
      /* the window's edge tiles, read in place, end at a page's end: two rows a KV head, and one KV head */
      {"decode f32 GQA 4:2 softcap alibi window 9",
       {.batch = 6, .heads = 4, .heads_kv = 2, .n = 1, .n_kv = 40, .d = 32, .causal = 1, .window = 9,
        .softcap = 2.0f, .alibi_slopes = SLOPES},
       dec_lens, 0, 16, 0, {3, 0, 0}, TOL, 1, 1},
      {"decode f32 GQA 4:1 softcap alibi window 9",
       {.batch = 6, .heads = 4, .heads_kv = 1, .n = 1, .n_kv = 40, .d = 32, .causal = 1, .window = 9,
        .softcap = 2.0f, .alibi_slopes = SLOPES},
       dec_lens, 0, 16, 0, {3, 0, 0}, TOL, 1, 1},
      /* one query per KV head (one row of fl_block_heads' two), 4 KV heads, split-K over the batch's items */
      {"decode MHA f32 alibi split 2",
       {.batch = 6, .heads = 4, .heads_kv = 4, .n = 1, .n_kv = 40, .d = 32, .alibi_slopes = SLOPES}, dec_lens, 0,
       8, 2, {5, 16, 0}, TOL, 1, 1},
      /* not causal, softcap: prefill rows against all of each sequence's keys */
      {"prefill n=19 softcap",
       {.batch = 4, .heads = 2, .heads_kv = 1, .n = 19, .n_kv = 61, .d = 24, .softcap = 3.0f}, long_lens, 8, 16, 0,
       {7, 0, 0}, TOL, 1, 1},
      {"smallcache f16 window 5 alibi",
       {.batch = 4, .heads = 4, .heads_kv = 2, .n = 6, .n_kv = 61, .d = 16, .causal = 1, .dtype = ATTN_F16,
        .window = 5, .alibi_slopes = SLOPES, .algo = ATTN_ALGO_SMALLCACHE},
       long_lens, 0, 0, 0, {3, 0, 0}, 1e-2, 0, 1},
  };
  for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
    const pcase *pc = &cases[t];
    if (pc->nightly && !all) continue;
    attn_problem p = pc->p;
    if (!p.algo) p.algo = ATTN_ALGO_FLASH;
    attn_problem norm;
    if (attn_problem_normalize(NULL, &p, &norm) != ATTN_OK) abort();
    attn_spec s = attn_spec_default(p.algo, ATTN_TARGET_CPU, p.dtype, p.d, p.causal);
    s.dv = norm.d_v;
    if (pc->br) s.br = pc->br;
    if (pc->bc) s.bc = pc->bc;
    s.split = pc->split;
    s.window = p.window > 0, s.softcap = p.softcap > 0, s.alibi = p.alibi_slopes != NULL;
    attn_plan *plan = NULL;
    int rc = attn_plan_create_spec(rt, &p, &s, 0, "test", &plan);
    CHECK(rc == ATTN_OK, "%s: plan: %s", pc->what, attn_last_error(rt));
    if (rc != ATTN_OK) continue;
    printf("%s [%s]\n", pc->what, attn_plan_describe(plan));
    for (int z = 0; z < 3 && pc->sizes[z]; z++) {
      paged c;
      paged_setup(&c, &plan->p, pc->lens, pc->sizes[z], 100 * t + z);
      paged_check(plan, &c, pc->tol, pc->what);
      if (pc->io > 1 || (pc->io && all)) paged_io(rt, &plan->spec, &c, pc->what);
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
  paged_check(plan, &c, TOL, "after bad calls");
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

/* No argument: the cases CI runs; "all": every case (nightly). */
int main(int argc, char **argv) {
  const int all = argc > 1 && !strcmp(argv[1], "all");
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CPU, &rt);
  if (rc != ATTN_OK) {
    fprintf(stderr, "attn_open: %s: %s\n", attn_strerror(rc), attn_last_error(NULL));
    return 1;
  }
  correct(rt, all);
  bad(rt);
  attn_close(rt);
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
