/* io_window: with a sliding window the closed forms of tuner/io_theory.c count only the keys each query block's rows
 * can see, and the CPU counting build moves exactly that: flash (unsplit, split-K, packed GQA decode) and smallcache,
 * causal both ways, windows shorter and longer than a 16-key tile (5, 20), n_kv != n both ways; the CUDA closed form (whole
 * key blocks) at a shape worked by hand. */
#include "io_util.h"

/* Counting build of s on the shape with the problem's window: *io and the relative error against fp64. */
static int run_window(attn_runtime *rt, attn_spec s, int heads, int heads_kv, int n, int n_kv, int window,
                      attn_io *io, double *err) {
  attn_problem p0 = {.batch = 1, .heads = heads, .heads_kv = heads_kv, .n = n, .n_kv = n_kv, .d = s.d,
                     .d_v = attn_spec_dv(&s), .causal = s.causal, .dtype = ATTN_F32, .window = window};
  attn_problem norm;
  if (attn_problem_normalize(rt, &p0, &norm) != ATTN_OK) return ATTN_EINVAL;
  s.window = norm.window > 0;
  attn_plan *plan = NULL;
  int rc = attn_plan_create_spec(rt, &p0, &s, 1, "test", &plan);
  if (rc != ATTN_OK) {
    fprintf(stderr, "plan: %s\n", attn_last_error(rt));
    return rc;
  }
  const attn_problem *p = &plan->p;
  const size_t nq = (size_t)heads * n * p->d, nk = (size_t)heads_kv * n_kv * p->d;
  const size_t nv = (size_t)heads_kv * n_kv * p->d_v, no = (size_t)heads * n * p->d_v;
  float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nv * 4), *o = malloc(no * 4);
  double *ref = malloc(no * 8);
  rc = ATTN_ENOMEM;
  if (q && k && v && o && ref) {
    attn_fill_random(q, nq, 31);
    attn_fill_random(k, nk, 32);
    attn_fill_random(v, nv, 33);
    attn_poison(o, no);
    rc = attn_plan_run_f32(plan, q, k, v, o, io, NULL);
    if (rc == ATTN_OK) {
      attn_reference(p, q, k, v, ref);
      *err = attn_rel_error(ref, o, no);
    }
  }
  free(q), free(k), free(v), free(o), free(ref);
  attn_plan_destroy(plan);
  return rc;
}

static void window_case(attn_runtime *rt, attn_spec s, int heads, int heads_kv, int n, int n_kv, int window) {
  attn_io io = {0, 0};
  double err = INFINITY;
  char txt[512];
  attn_spec_summary(&s, txt, sizeof txt);
  int rc = run_window(rt, s, heads, heads_kv, n, n_kv, window, &io, &err);
  CHECK(rc == ATTN_OK, "%s h=%d/%d n=%d n_kv=%d window=%d: run failed", txt, heads, heads_kv, n, n_kv, window);
  if (rc != ATTN_OK) return;
  unsigned long long fr = 0, fw = 0, dr = 0, dw = 0;
  CHECK(attn_io_formula_gqa_window(&s, 1, heads, heads_kv, n, n_kv, window, &fr, &fw) == ATTN_OK, "formula refused");
  attn_io_formula_gqa(&s, 1, heads, heads_kv, n, n_kv, &dr, &dw);
  printf("%-44s h=%d/%d n=%-3d n_kv=%-3d window=%-4d reads %7llu (formula %7llu, none %7llu) writes %6llu (%6llu)\n",
         txt, heads, heads_kv, n, n_kv, window, io.reads, fr, dr, io.writes, fw);
  CHECK(io.reads == fr && io.writes == fw, "%s h=%d/%d n=%d n_kv=%d window=%d: counted %llu/%llu, formula %llu/%llu",
        txt, heads, heads_kv, n, n_kv, window, io.reads, io.writes, fr, fw);
  CHECK(err <= 1e-5, "%s n=%d n_kv=%d window=%d: rel error %.3e", txt, n, n_kv, window, err);
}

int main(void) {
  attn_runtime *rt = io_open();
  static const int shapes[][2] = {{37, 37}, {29, 61}, {45, 23}};
  static const int windows[] = {5, 20}; /* both hide keys at every shape: no dense kernel to build */
  for (int c = 0; c < 2; c++) {
    for (int si = 0; si < 3; si++)
      for (int wi = 0; wi < 2; wi++) {
        window_case(rt, io_spec(ATTN_ALGO_FLASH, 16, 16, 16, 0, c), 1, 1, shapes[si][0], shapes[si][1], windows[wi]);
        attn_spec sp = io_spec(ATTN_ALGO_FLASH, 16, 8, 16, 0, c);
        sp.split = 2;
        if ((si + wi) % 2 == 0) window_case(rt, sp, 1, 1, shapes[si][0], shapes[si][1], windows[wi]);
      }
    window_case(rt, io_spec(ATTN_ALGO_FLASH, 16, 16, 16, 0, c), 6, 2, 7, 33, 5); /* packed rows of three heads */
  }
  window_case(rt, io_spec(ATTN_ALGO_SMALLCACHE, 16, 16, 16, 16, 1), 1, 1, 45, 23, 5);

  /* n = n_kv = 64, Br = Bc = 16, d = d_v = 16, causal, window 5: the blocks see keys [0,16), [12,32), [28,48),
   * [44,64): the CPU kernel reads 76 keys, the CUDA one whole key blocks, 16 + 32 + 32 + 32 = 112 */
  attn_spec cpu = io_spec(ATTN_ALGO_FLASH, 16, 16, 16, 0, 1), cuda = cpu;
  cuda.target = ATTN_TARGET_CUDA;
  unsigned long long r = 0, w = 0;
  CHECK(attn_io_formula_window(&cpu, 1, 64, 64, 5, &r, &w) == ATTN_OK && r == 64 * 16 + 76 * 32 && w == 64 * 16,
        "CPU closed form %llu/%llu, want %d/%d", r, w, 64 * 16 + 76 * 32, 64 * 16);
  CHECK(attn_io_formula_window(&cuda, 1, 64, 64, 5, &r, &w) == ATTN_OK && r == 64 * 16 + 112 * 32 && w == 64 * 16,
        "CUDA closed form %llu/%llu, want %d/%d", r, w, 64 * 16 + 112 * 32, 64 * 16);
  /* not causal, window 5: [0,20), [12,36), [28,52), [44,64): CUDA [0,32), [0,48), [16,64), [32,64) = 160 keys */
  cuda.causal = 0;
  CHECK(attn_io_formula_window(&cuda, 1, 64, 64, 5, &r, &w) == ATTN_OK && r == 64 * 16 + 160 * 32,
        "CUDA closed form (not causal) %llu, want %d", r, 64 * 16 + 160 * 32);
  /* window 0 is attn_io_formula; a negative window, and lowrank or CUDA smallcache with one, are refused */
  unsigned long long r0 = 0, w0 = 0;
  attn_io_formula(&cuda, 3, 64, 100, &r0, &w0);
  CHECK(attn_io_formula_window(&cuda, 3, 64, 100, 0, &r, &w) == ATTN_OK && r == r0 && w == w0, "window 0 differs");
  CHECK(attn_io_formula_window(&cpu, 1, 64, 64, -1, &r, &w) == ATTN_EINVAL && r == 0 && w == 0, "window -1 taken");
  attn_spec lr = io_spec(ATTN_ALGO_LOWRANK, 16, 32, 16, 0, 0);
  CHECK(attn_io_formula_window(&lr, 1, 64, 64, 5, &r, &w) == ATTN_EINVAL, "lowrank with a window taken");
  attn_spec sc = io_spec(ATTN_ALGO_SMALLCACHE, 16, 16, 16, 16, 0);
  sc.target = ATTN_TARGET_CUDA;
  CHECK(attn_io_formula_window(&sc, 1, 64, 64, 5, &r, &w) == ATTN_EINVAL, "CUDA smallcache with a window taken");
  attn_close(rt);
  printf("%s\n", failures ? "FAIL" : "PASS");
  return failures ? 1 : 0;
}
