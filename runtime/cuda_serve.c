/* cuda_serve.c: attn_execute_varlen and attn_execute_paged on CUDA plans, and their _async forms. The plan's flash
 * spec is built again with a serving layout (spec.layout, ATTN_LAYOUT in templates/flash.cu) whose kernel reads the
 * packed rows or the pages in place: no staging copy of Q, K, V or O. Each layout's kernel is loaded by the plan's
 * first call of it and kept until the plan is destroyed. cu_seqlens, the block table and the lengths are host arrays
 * (attn.h): they are checked here, as on the CPU, before anything is queued, then copied through the plan's staging
 * blocks (attn_cuda_tables, runtime/cuda.c) on the call's stream: read before the call returns, nothing allocated per
 * call. The synchronous calls are the async ones on the legacy default stream, then waited for. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "internal.h"
#include "kernel_abi_cuda.h"

/* The plan's spec for a serving layout in templates/flash.cu (the layouts are that template's): its tiles, modifiers
 * and arch, every other field zero; where those tiles are not flash.cu's (a spec of another CUDA flash template), the
 * default tiles for the plan's shape. */
static void serve_spec(const attn_spec *p, int layout, attn_spec *s) {
  memset(s, 0, sizeof *s);
  s->algo = ATTN_ALGO_FLASH, s->target = ATTN_TARGET_CUDA, s->dtype = p->dtype;
  s->d = p->d, s->dv = p->dv, s->causal = p->causal;
  s->br = p->br, s->bc = p->bc, s->warps = p->warps, s->stages = p->stages;
  memcpy(s->arch, p->arch, sizeof s->arch);
  s->window = p->window, s->softcap = p->softcap, s->alibi = p->alibi;
  s->layout = layout;
  char err[256];
  if (attn_spec_check(s, err, sizeof err) != ATTN_OK) {
    *s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, p->dtype, p->d, p->causal);
    s->dv = p->dv;
    attn_spec_fit(s, NULL, 0); /* a failure shows at the load, with the limit named */
    memcpy(s->arch, p->arch, sizeof s->arch);
    s->window = p->window, s->softcap = p->softcap, s->alibi = p->alibi;
    s->layout = layout;
  }
}

/* The plan's kernel for layout 1 (varlen), 2 (paged) or 3 (paged decode, query heads packed), loaded once; two threads that race both load, one keeps
 * its kernel and the other unloads its own. */
static int serve_kernel(const attn_plan *plan, int layout, const char *what, attn_cuda_kernel **out) {
  /* the plan is const to the caller; its serve slots are a cache filled by the first call */
  _Atomic(attn_cuda_kernel *) *slot = &((attn_plan *)(uintptr_t)plan)->serve[layout - 1];
  attn_cuda_kernel *k = atomic_load(slot);
  if (k) {
    *out = k;
    return ATTN_OK;
  }
  attn_runtime *rt = plan->rt;
  attn_spec s;
  serve_spec(&plan->spec, layout, &s);
  int rc = attn_cuda_load(rt, &s, 0, &k);
  if (rc == ATTN_OK && plan->alibi && (rc = attn_cuda_set_alibi(rt, k, plan->alibi, plan->p.heads)) != ATTN_OK)
    attn_cuda_unload(k);
  if (rc != ATTN_OK) return attn_fail(rt, rc, "%s: its kernel: %s", what, attn_last_error(rt));
  attn_cuda_kernel *none = NULL;
  if (!atomic_compare_exchange_strong(slot, &none, k)) {
    attn_cuda_unload(k);
    k = none;
  }
  *out = k;
  return ATTN_OK;
}

void attn_cuda_serve_release(attn_plan *plan) {
  for (int i = 0; i < 3; i++) {
    attn_cuda_kernel *k = atomic_exchange(&plan->serve[i], NULL);
    if (k) attn_cuda_unload(k);
  }
  attn_cuda_tables_free(atomic_exchange(&plan->serve_tables, NULL)); /* waits for its blocks' launches */
}

/* What both calls refuse before looking at their arrays: a backward plan, and the kernels without these layouts. */
static int check_plan(const attn_plan *plan, const char *what) {
  if (plan->backward)
    return attn_fail(plan->rt, ATTN_EUNSUPPORTED, "%s: a backward plan runs only attn_execute_backward", what);
  if (plan->spec.algo != ATTN_ALGO_FLASH)
    return attn_fail(plan->rt, ATTN_EUNSUPPORTED, "%s: CUDA %s has no varlen or paged kernel (CUDA flash has)", what,
                     attn_algo_name(plan->spec.algo));
  return ATTN_OK;
}

/* The plan's staging of the tables (attn_cuda_tables), made once; two threads that race both make one, one keeps
 * its own and the other frees its. */
static int serve_tables(const attn_plan *plan, const char *what, attn_cuda_tables **out) {
  _Atomic(attn_cuda_tables *) *slot = &((attn_plan *)(uintptr_t)plan)->serve_tables;
  attn_cuda_tables *t = atomic_load(slot);
  if (!t) {
    int rc = attn_cuda_tables_new(plan->rt, &t);
    if (rc != ATTN_OK) return attn_fail(plan->rt, rc, "%s: %s", what, attn_last_error(plan->rt));
    attn_cuda_tables *none = NULL;
    if (!atomic_compare_exchange_strong(slot, &none, t)) {
      attn_cuda_tables_free(t);
      t = none;
    }
  }
  *out = t;
  return ATTN_OK;
}

int attn_cuda_execute_varlen(const attn_plan *plan, void *stream, int sync, const char *what,
                             const int *cu_seqlens_q, const int *cu_seqlens_kv, const void *q, const void *k,
                             const void *v, void *o) {
  attn_runtime *rt = plan->rt;
  int rc = check_plan(plan, what);
  if (rc != ATTN_OK) return rc;
  if (!q || !k || !v || !o)
    return attn_fail(rt, ATTN_EINVAL, "%s: %s is NULL", what, !q ? "q" : !k ? "k" : !v ? "v" : "o");
  const attn_problem *p = &plan->p;
  long max_q, max_kv;
  rc = attn_varlen_check_cu(rt, what, "cu_seqlens_q", cu_seqlens_q, p->batch, p->n, &max_q);
  if (rc == ATTN_OK) rc = attn_varlen_check_cu(rt, what, "cu_seqlens_kv", cu_seqlens_kv, p->batch, p->n_kv, &max_kv);
  if (rc != ATTN_OK) return rc;
  if (max_q == 0) return ATTN_OK; /* no query row: nothing to write */
  attn_cuda_kernel *kern;
  attn_cuda_tables *tab = NULL;
  if ((rc = serve_kernel(plan, 1, what, &kern)) != ATTN_OK || (rc = serve_tables(plan, what, &tab)) != ATTN_OK)
    return rc;
  /* the grid is the dense one's for the longest sequence's rows; its blocks past their own sequence exit */
  attn_problem g = *p;
  g.n = (int)max_q;
  g.n_kv = max_kv > 0 ? (int)max_kv : 1;
  attn_cuda_kargs lay;
  memset(&lay, 0, sizeof lay);
  const size_t nb = (size_t)p->batch + 1;
  const int *parts[2] = {cu_seqlens_q, cu_seqlens_kv};
  const size_t count[2] = {nb, nb};
  const size_t fields[2] = {offsetof(attn_cuda_kargs, cu_q), offsetof(attn_cuda_kargs, cu_kv)};
  return attn_cuda_launch_layout(rt, tab, kern, &g, stream, sync, q, k, v, o, &lay, parts, count, fields, 2, what);
}

/* Every argument checked before anything is launched (the layout's by runtime/paged.c, as on the CPU). */
static int check_paged(const attn_plan *plan, const char *what, const void *q, const void *k_pages,
                       const void *v_pages, int num_pages, int page_size, const int *block_table, int max_pages,
                       const int *seq_lens_kv, void *o, long *longest) {
  attn_runtime *rt = plan->rt;
  const char *null = !q ? "q" : !k_pages ? "k_pages" : !v_pages ? "v_pages" : !block_table ? "block_table"
                   : !seq_lens_kv ? "seq_lens_kv" : !o ? "o" : NULL;
  if (null) return attn_fail(rt, ATTN_EINVAL, "%s: %s is NULL", what, null);
  int rc = check_plan(plan, what);
  if (rc != ATTN_OK) return rc;
  return attn_paged_check_layout(plan, what, num_pages, page_size, block_table, max_pages, seq_lens_kv, longest);
}

int attn_cuda_execute_paged(const attn_plan *plan, void *stream, int sync, const char *what, const void *q,
                            const void *k_pages, const void *v_pages, int num_pages, int page_size,
                            const int *block_table, int max_pages, const int *seq_lens_kv, void *o) {
  attn_runtime *rt = plan->rt;
  long longest = 0;
  int rc = check_paged(plan, what, q, k_pages, v_pages, num_pages, page_size, block_table, max_pages, seq_lens_kv, o,
                       &longest);
  if (rc != ATTN_OK) return rc;
  const attn_problem *p = &plan->p;
  /* decode with grouped-query heads: a block's rows are the query heads of one KV head, each page read once per KV
   * head (the kernel's grid and heads are the KV heads', its n the query heads of each) */
  const int packed = p->n == 1 && p->heads > p->heads_kv;
  attn_cuda_kernel *kern;
  attn_cuda_tables *tab = NULL;
  if ((rc = serve_kernel(plan, packed ? 3 : 2, what, &kern)) != ATTN_OK ||
      (rc = serve_tables(plan, what, &tab)) != ATTN_OK)
    return rc;
  attn_problem g = *p;
  g.n_kv = longest > 0 ? (int)longest : 1; /* the grid's (flash's does not depend on it) */
  if (packed) g.n = p->heads / p->heads_kv, g.heads = p->heads_kv;
  attn_cuda_kargs lay;
  memset(&lay, 0, sizeof lay);
  lay.max_pages = max_pages;
  lay.page_size = page_size;
  const int *parts[2] = {seq_lens_kv, block_table};
  const size_t count[2] = {(size_t)p->batch, (size_t)p->batch * (size_t)max_pages};
  const size_t fields[2] = {offsetof(attn_cuda_kargs, seq_kv), offsetof(attn_cuda_kargs, block_table)};
  /* a sequence of length 0 still gets its rows: the kernel writes them as zeros */
  return attn_cuda_launch_layout(rt, tab, kern, &g, stream, sync, q, k_pages, v_pages, o, &lay, parts, count, fields,
                                 2, what);
}
