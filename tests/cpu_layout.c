/* cpu_layout.c: CPU flash's paged kernel (spec.layout 2) is loaded apart from a plan's dense one: a dense plan loads
 * one kernel and its dense calls no other; its first attn_execute_paged loads the paged kernel, two threads racing for
 * it both get a correct result and the plan keeps one kernel (the other thread's unloaded), and later paged calls
 * load nothing. A plan made for pages (page_size > 0) loads only the paged kernel, which runs its dense calls too.
 * A counting plan's kernels, the lazily loaded one too (the plan's count_io), count decode's closed form.
 * Loads are counted by wrapping dlopen and dlclose at link time (tests/cpu_layout.cmake). */
#include <dlfcn.h>
#include <pthread.h>
#include "cpu_util.h"

void *__real_dlopen(const char *file, int mode);
int __real_dlclose(void *h);
/* loads; closes, less the runtime's look-ups (an RTLD_NOLOAD open that finds the object, closed again) */
static atomic_int loads, closes;
void *__wrap_dlopen(const char *file, int mode) {
  void *h = __real_dlopen(file, mode);
  if (h) atomic_fetch_add(mode & RTLD_NOLOAD ? &closes : &loads, mode & RTLD_NOLOAD ? -1 : 1);
  return h;
}
int __wrap_dlclose(void *h) {
  atomic_fetch_add(&closes, 1);
  return __real_dlclose(h);
}

/* decode, GQA 4:2 (the grouped items of the paged kernel), odd lengths, pages of 5 in shuffled order */
enum { B = 3, H = 4, HK = 2, NKV = 37, D = 32, PS = 5, MAXP = (NKV + PS - 1) / PS, NP = B * MAXP + 2 };
static const int lens[B] = {37, 1, 23};
static float q[B * H * D], kd[B * HK * NKV * D], vd[B * HK * NKV * D], kp[NP * PS * HK * D], vp[NP * PS * HK * D];
static int table[B * MAXP];
static double ref[B * H * D];

static void setup(void) {
  const unsigned long long seed = test_seed();
  attn_fill_random(q, sizeof q / sizeof *q, seed);
  attn_fill_random(kd, sizeof kd / sizeof *kd, seed + 1);
  attn_fill_random(vd, sizeof vd / sizeof *vd, seed + 2);
  int perm[NP];
  for (int i = 0; i < NP; i++) perm[i] = i;
  for (int i = NP - 1; i > 0; i--) { /* a fixed shuffle */
    const int j = (i * 7 + 3) % (i + 1), t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  for (int b = 0, k = 0; b < B; b++)
    for (int i = 0; i < MAXP; i++) table[b * MAXP + i] = i * PS < lens[b] ? perm[k++] : -1;
  attn_poison(kp, sizeof kp / sizeof *kp);
  attn_poison(vp, sizeof vp / sizeof *vp);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < lens[b]; t++)
      for (int h = 0; h < HK; h++) {
        const size_t src = ((size_t)(b * HK + h) * NKV + t) * D;
        const size_t dst = (((size_t)table[b * MAXP + t / PS] * PS + t % PS) * HK + h) * D;
        memcpy(kp + dst, kd + src, sizeof(float) * D);
        memcpy(vp + dst, vd + src, sizeof(float) * D);
      }
  /* each sequence's fp64 reference over its own keys (dense arrays, n_kv = its length) */
  for (int b = 0; b < B; b++) {
    const attn_problem one = {.batch = 1, .heads = H, .heads_kv = HK, .n = 1, .n_kv = lens[b], .d = D, .d_v = D,
                              .causal = 1, .scale = 0.25f};
    float k1[HK * NKV * D], v1[HK * NKV * D];
    for (int h = 0; h < HK; h++) {
      memcpy(k1 + (size_t)h * lens[b] * D, kd + (size_t)(b * HK + h) * NKV * D, sizeof(float) * lens[b] * D);
      memcpy(v1 + (size_t)h * lens[b] * D, vd + (size_t)(b * HK + h) * NKV * D, sizeof(float) * lens[b] * D);
    }
    attn_reference(&one, q + (size_t)b * H * D, k1, v1, ref + (size_t)b * H * D);
  }
}

static const attn_problem prob = {.batch = B, .heads = H, .heads_kv = HK, .n = 1, .n_kv = NKV, .d = D, .causal = 1};

static int paged(const attn_plan *plan, float *o) {
  return attn_execute_paged(plan, q, kp, vp, NP, PS, table, MAXP, lens, o);
}

static double paged_error(const attn_plan *plan) {
  float o[B * H * D];
  attn_poison(o, sizeof o / sizeof *o);
  if (paged(plan, o) != ATTN_OK) return INFINITY;
  return attn_rel_error(ref, o, sizeof o / sizeof *o);
}

typedef struct {
  const attn_plan *plan;
  pthread_barrier_t *go;
  int rc;
  double err;
} racer;

static void *race(void *arg) {
  racer *r = arg;
  float o[B * H * D];
  attn_poison(o, sizeof o / sizeof *o);
  pthread_barrier_wait(r->go);
  r->rc = paged(r->plan, o);
  r->err = r->rc == ATTN_OK ? attn_rel_error(ref, o, sizeof o / sizeof *o) : INFINITY;
  return NULL;
}

/* decode's closed form, heads_kv·len·2d + heads·d read and heads·d written, counted by kernel k on the paged batch */
static void check_counted(attn_runtime *rt, const attn_plan *plan, const attn_cpu_kernel *k, const char *what) {
  float o[B * H * D];
  attn_kargs a = attn_problem_kargs(&plan->p, q, kp, vp, o);
  a.block_table = table, a.page_size = PS, a.max_pages = MAXP, a.seq_lens = lens;
  attn_io io = {0, 0};
  CHECK(attn_cpu_run(rt, k, &a, &io) == ATTN_OK, "%s: counted run: %s", what, attn_last_error(rt));
  unsigned long long want = 0;
  for (int b = 0; b < B; b++) want += (unsigned long long)HK * lens[b] * 2 * D + H * D;
  CHECK(io.reads == want && io.writes == (unsigned long long)B * H * D,
        "%s: counted %llu read, %llu written; the closed form is %llu, %d", what, io.reads, io.writes, want, B * H * D);
}

int main(void) {
  setup();
  attn_runtime *rt = NULL;
  if (attn_open(NULL, ATTN_TARGET_CPU, &rt) != ATTN_OK) {
    fprintf(stderr, "attn_open: %s\n", attn_last_error(NULL));
    return 1;
  }
  attn_problem p = prob;
  p.scale = 0.25f;
  /* tests/cpu_paged.c's "decode GQA 4:2" kernels (the same sources: one compile between them in a cold cache) */
  attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, ATTN_F32, D, 1);
  s.dv = D;

  /* a dense plan: one kernel, no paged one until a paged call */
  attn_plan *plan = NULL;
  int rc = attn_plan_create_spec(rt, &p, &s, 0, "test", &plan);
  CHECK(rc == ATTN_OK, "dense plan: %s", attn_last_error(rt));
  if (rc != ATTN_OK) return 1;
  CHECK(loads == 1, "the dense plan loaded %d kernels", loads);
  float od[B * H * D];
  attn_poison(od, sizeof od / sizeof *od);
  attn_kargs a = attn_problem_kargs(&plan->p, q, kd, vd, od);
  a.batch = 1, a.n_kv = NKV; /* sequence 0 (full length) densely, through the plan's own kernel */
  CHECK(attn_cpu_run(rt, plan->cpu, &a, NULL) == ATTN_OK, "dense run: %s", attn_last_error(rt));
  CHECK(attn_rel_error(ref, od, H * D) < TOL, "dense sequence 0: error %g", attn_rel_error(ref, od, H * D));
  CHECK(attn_execute(plan, q, kd, vd, od) == ATTN_OK, "attn_execute: %s", attn_last_error(rt));
  CHECK(loads == 1 && atomic_load(&plan->cpu_paged) == NULL, "dense calls loaded a kernel (%d loads)", loads);

  /* two threads race for the first paged call: both right, one kernel kept */
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, 2);
  racer r[2] = {{plan, &go, -1, 0}, {plan, &go, -1, 0}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++)
    if (pthread_create(&th[i], NULL, race, &r[i]) != 0) abort();
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&go);
  for (int i = 0; i < 2; i++)
    CHECK(r[i].rc == ATTN_OK && r[i].err < TOL, "racer %d: rc %d, error %g (%s)", i, r[i].rc, r[i].err,
          attn_last_error(rt));
  attn_cpu_kernel *kept = atomic_load(&plan->cpu_paged);
  const int raced = loads - 1, raced_closes = closes;
  CHECK(kept != NULL && kept != plan->cpu, "no paged kernel kept");
  CHECK((raced == 1 && raced_closes == 0) || (raced == 2 && raced_closes == 1),
        "the race loaded %d paged kernels and closed %d", raced, raced_closes);
  for (int i = 0; i < 3; i++) CHECK(paged_error(plan) < TOL, "paged call %d after the race", i);
  CHECK(loads == 1 + raced && atomic_load(&plan->cpu_paged) == kept, "later paged calls loaded %d more kernels",
        loads - 1 - raced);
  attn_plan_destroy(plan);
  CHECK(closes == raced_closes + 2, "destroying the plan closed %d of its 2 kernels", closes - raced_closes);

  /* a plan made for pages: the paged kernel alone (here the counting build), which serves its dense calls too */
  int before = loads;
  p.page_size = PS;
  rc = attn_plan_create_spec(rt, &p, &s, 1, "test", &plan);
  CHECK(rc == ATTN_OK, "paged plan: %s", attn_last_error(rt));
  if (rc == ATTN_OK) {
    CHECK(loads == before + 1, "the paged plan loaded %d kernels", loads - before);
    CHECK(paged_error(plan) < TOL, "paged plan's paged call");
    attn_poison(od, sizeof od / sizeof *od);
    a = attn_problem_kargs(&plan->p, q, kd, vd, od);
    a.batch = 1, a.n_kv = NKV;
    CHECK(attn_cpu_run(rt, plan->cpu, &a, NULL) == ATTN_OK, "paged plan's dense run: %s", attn_last_error(rt));
    CHECK(attn_rel_error(ref, od, H * D) < TOL, "paged plan's dense run: error %g", attn_rel_error(ref, od, H * D));
    CHECK(loads == before + 1 && atomic_load(&plan->cpu_paged) == NULL, "the paged plan loaded another kernel");
    check_counted(rt, plan, plan->cpu, "the paged plan's kernel");
    attn_plan_destroy(plan);
  }

  /* a dense counting plan's paged kernel is the counting build too */
  p.page_size = 0;
  rc = attn_plan_create_spec(rt, &p, &s, 1, "test", &plan);
  CHECK(rc == ATTN_OK, "counting plan: %s", attn_last_error(rt));
  if (rc == ATTN_OK) {
    before = loads;
    CHECK(paged_error(plan) < TOL, "counting plan's paged call");
    CHECK(loads == before + 1 && atomic_load(&plan->cpu_paged), "the counting plan's paged call loaded %d kernels",
          loads - before);
    if (atomic_load(&plan->cpu_paged)) check_counted(rt, plan, atomic_load(&plan->cpu_paged), "the lazy kernel");
    attn_plan_destroy(plan);
  }
  attn_close(rt);
  printf("%d checks, %d failed; the race loaded %d paged kernel(s)\n", checks, failures, raced);
  return failures ? 1 : 0;
}
