/* paged.c: attn_execute_paged, attention over a paged KV cache (vLLM's layout) on the CPU. The plan's own kernel runs
 * once on the whole batch and reads K and V through the block table (attn_kargs.block_table, seq_lens): no copy, so
 * decode moves the bytes dense decode moves, each page once per KV head; flash's decode items take every KV head of
 * a sequence's key block in turn (templates/flash.c, fl_group), so a page's interleaved heads cross the memory bus
 * once. Flash runs its paged kernel (spec.layout 2, paged_kernel), so that dense kernels carry no paged code. */
#include <stdint.h>
#include <string.h>
#include "internal.h"

/* The shared library hides everything but the public API. */
#define ATTN_API __attribute__((visibility("default")))

/* Every argument checked before anything is written: ATTN_EINVAL (one line) leaves o untouched. */
static int check_args(const attn_plan *plan, const char *what, const void *q, const void *k_pages,
                      const void *v_pages, int num_pages, int page_size, const int *block_table, int max_pages,
                      const int *seq_lens_kv, void *o) {
  attn_runtime *rt = plan->rt;
  const char *null = !q ? "q" : !k_pages ? "k_pages" : !v_pages ? "v_pages" : !block_table ? "block_table"
                   : !seq_lens_kv ? "seq_lens_kv" : !o ? "o" : NULL;
  if (null) return attn_fail(rt, ATTN_EINVAL, "%s: %s is NULL", what, null);
  if (plan->backward)
    return attn_fail(rt, ATTN_EUNSUPPORTED, "%s: a backward plan (no paged backward; attn_execute_backward)", what);
  if (plan->spec.algo == ATTN_ALGO_LOWRANK)
    return attn_fail(rt, ATTN_EUNSUPPORTED, "%s: lowrank's projections need the whole KV, not pages (use flash)", what);
  if (!plan->cpu) return attn_fail(rt, ATTN_ERUNTIME, "%s: plan has no kernel", what);
  long longest;
  return attn_paged_check_layout(plan, what, num_pages, page_size, block_table, max_pages, seq_lens_kv, &longest);
}

/* The page size, the table and the lengths (the CPU's and CUDA's checks): ATTN_EINVAL with one line, else the
 * longest sequence in *longest. */
int attn_paged_check_layout(const attn_plan *plan, const char *what, int num_pages, int page_size,
                            const int *block_table, int max_pages, const int *seq_lens_kv, long *longest) {
  attn_runtime *rt = plan->rt;
  if (page_size < 1) return attn_fail(rt, ATTN_EINVAL, "%s: page_size %d is not >= 1", what, page_size);
  if (plan->p.page_size > 0 && page_size != plan->p.page_size)
    return attn_fail(rt, ATTN_EINVAL, "%s: page_size %d, but the plan was made for pages of %d", what, page_size,
                     plan->p.page_size);
  if (num_pages < 1) return attn_fail(rt, ATTN_EINVAL, "%s: num_pages %d is not >= 1", what, num_pages);
  if (max_pages < 1) return attn_fail(rt, ATTN_EINVAL, "%s: max_pages %d is not >= 1", what, max_pages);
  const attn_problem *p = &plan->p;
  *longest = 0;
  for (int b = 0; b < p->batch; b++) {
    const long len = seq_lens_kv[b];
    if (len < 0) return attn_fail(rt, ATTN_EINVAL, "%s: sequence %d has length %ld < 0", what, b, len);
    if (len > p->n_kv)
      return attn_fail(rt, ATTN_EINVAL, "%s: sequence %d has %ld keys, more than the plan's n_kv %d", what, b, len,
                       p->n_kv);
    if (len > (long)max_pages * page_size)
      return attn_fail(rt, ATTN_EINVAL, "%s: sequence %d has %ld keys, more than its %d pages of %d hold", what, b,
                       len, max_pages, page_size);
    const long used = (len + page_size - 1) / page_size;
    for (long i = 0; i < used; i++) {
      const int page = block_table[(size_t)b * max_pages + i];
      if (page < 0 || page >= num_pages)
        return attn_fail(rt, ATTN_EINVAL, "%s: sequence %d's page %ld is %d, outside the cache's 0..%d", what, b, i,
                         page, num_pages - 1);
    }
    if (len > *longest) *longest = len;
  }
  return ATTN_OK;
}

/* The kernel a CPU plan's paged call runs: flash's paged kernel (spec.layout 2; templates/flash.c has the paged code
 * in no other), the plan's own where it is that (attn_cpu_plan_paged), else loaded by the plan's first paged call and
 * kept until the plan is destroyed: two threads that race both load, one keeps its kernel and the other unloads its
 * own. Other algorithms (smallcache) read pages with their one kernel. */
static int paged_kernel(const attn_plan *plan, const char *what, const attn_cpu_kernel **out) {
  if (plan->spec.algo != ATTN_ALGO_FLASH || attn_cpu_plan_paged(&plan->p, &plan->spec)) {
    *out = plan->cpu;
    return ATTN_OK;
  }
  /* the plan is const to the caller; its slot is a cache filled by the first call */
  _Atomic(attn_cpu_kernel *) *slot = &((attn_plan *)(uintptr_t)plan)->cpu_paged;
  attn_cpu_kernel *k = atomic_load(slot);
  if (!k) {
    attn_spec s = plan->spec;
    s.layout = 2;
    const int rc = attn_cpu_load(plan->rt, &s, plan->count_io, &k);
    if (rc != ATTN_OK) return attn_fail(plan->rt, rc, "%s: its paged kernel: %s", what, attn_last_error(plan->rt));
    attn_cpu_kernel *none = NULL;
    if (!atomic_compare_exchange_strong(slot, &none, k)) {
      attn_cpu_unload(k);
      k = none;
    }
  }
  *out = k;
  return ATTN_OK;
}

/* Both entry points: on CUDA queued on stream, and waited for when sync; on the CPU the one synchronous run. */
static int execute_paged(const char *what, const attn_plan *plan, void *stream, int sync, const void *q,
                         const void *k_pages, const void *v_pages, int num_pages, int page_size,
                         const int *block_table, int max_pages, const int *seq_lens_kv, void *o) {
  if (!plan) return attn_fail(NULL, ATTN_EINVAL, "%s: plan is NULL", what);
  if (plan->cuda) /* runtime/cuda_serve.c */
    return attn_cuda_execute_paged(plan, stream, sync, what, q, k_pages, v_pages, num_pages, page_size, block_table,
                                   max_pages, seq_lens_kv, o);
  int rc = check_args(plan, what, q, k_pages, v_pages, num_pages, page_size, block_table, max_pages, seq_lens_kv, o);
  if (rc != ATTN_OK) return rc;
  attn_runtime *rt = plan->rt;
  const attn_problem *p = &plan->p;
  const size_t esz = attn_dtype_size(p->dtype);
  const size_t oseq = (size_t)p->heads * p->n * p->d_v * esz;
  /* One call for the whole batch: each sequence's items read its pages through its row of the block table and see
   * its own key count (causal bottom-right aligned per sequence: i' = i + len - n). */
  attn_kargs a = attn_problem_kargs(p, q, k_pages, v_pages, o);
  a.block_table = block_table;
  a.page_size = page_size;
  a.max_pages = max_pages;
  a.seq_lens = seq_lens_kv;
  const attn_cpu_kernel *kern = NULL;
  rc = paged_kernel(plan, what, &kern);
  if (rc == ATTN_OK) rc = attn_cpu_run(rt, kern, &a, NULL);
  /* a sequence without keys: zero rows, as rows that see no key are (all-zero bits are 0 in every dtype) */
  for (int b = 0; b < p->batch && rc == ATTN_OK; b++)
    if (seq_lens_kv[b] == 0) memset((char *)o + (size_t)b * oseq, 0, oseq);
  return rc;
}

ATTN_API int attn_execute_paged(const attn_plan *plan, const void *q, const void *k_pages, const void *v_pages,
                                int num_pages, int page_size, const int *block_table, int max_pages,
                                const int *seq_lens_kv, void *o) {
  return execute_paged("attn_execute_paged", plan, NULL, 1, q, k_pages, v_pages, num_pages, page_size, block_table,
                       max_pages, seq_lens_kv, o);
}

ATTN_API int attn_execute_paged_async(const attn_plan *plan, void *stream, const void *q, const void *k_pages,
                                      const void *v_pages, int num_pages, int page_size, const int *block_table,
                                      int max_pages, const int *seq_lens_kv, void *o) {
  return execute_paged("attn_execute_paged_async", plan, stream, 0, q, k_pages, v_pages, num_pages, page_size,
                       block_table, max_pages, seq_lens_kv, o);
}
