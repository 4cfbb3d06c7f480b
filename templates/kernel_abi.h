/* kernel_abi.h: what every generated CPU kernel exports, and the I/O-counting macros.
 * Prepended to each generated C source; the runtime includes it too, so both sides agree. */
#ifndef ATTN_KERNEL_ABI_H
#define ATTN_KERNEL_ABI_H

#include <stddef.h>

/* 2: attn_kargs.partials and the optional split-K entry points attn_kernel_partials / attn_kernel_merge. */
#define ATTN_KERNEL_ABI_VERSION 2

typedef struct attn_kargs {
  const float *q, *k, *v;  /* [batch][heads|heads_kv][n|n_kv][d] */
  float *o;                /* [batch][heads][n][d] */
  long batch, heads, heads_kv, n, n_kv;
  float scale;
  void *partials;          /* split-K kernels: the partials buffer (set by the runtime); NULL otherwise */
} attn_kargs;

/* Entries (not bytes) moved between slow memory (the arrays above, and any slow scratch) and fast memory. */
typedef struct attn_io { unsigned long long reads, writes; } attn_io;

/* Counting build: every transfer between slow and fast memory goes through these. */
#ifdef ATTN_COUNT_IO
#define ATTN_IO_READ(io, cnt)  ((io)->reads += (unsigned long long)(cnt))
#define ATTN_IO_WRITE(io, cnt) ((io)->writes += (unsigned long long)(cnt))
#else
#define ATTN_IO_READ(io, cnt)  ((void)(io), (void)(cnt))
#define ATTN_IO_WRITE(io, cnt) ((void)(io), (void)(cnt))
#endif

/* Exported by every CPU kernel (symbols looked up with dlsym):
 *   int    attn_kernel_abi(void);                       returns ATTN_KERNEL_ABI_VERSION
 *   long   attn_kernel_items(const attn_kargs *a);      number of independent work items
 *   size_t attn_kernel_scratch(const attn_kargs *a);    bytes of scratch one thread needs (64-byte aligned by caller)
 *   void   attn_kernel_run(const attn_kargs *a, long item, void *scratch, attn_io *io);
 * Items may run in any order on any thread; io is that thread's own counter (never NULL).
 *
 * Exported, both or neither, by kernels whose items leave partial results to be combined (split-K flash):
 *   size_t attn_kernel_partials(const attn_kargs *a, long *merge_items);
 *          bytes of the partials buffer (64-byte aligned by caller, one per call, shared by all threads; passed to
 *          every item as a->partials) and the number of merge items
 *   void   attn_kernel_merge(const attn_kargs *a, long item, attn_io *io);
 *          merge item 0 .. merge_items-1: combines partials into o; runs after every attn_kernel_run item of the
 *          call has finished, in any order on any thread. */
typedef int    (*attn_kernel_abi_fn)(void);
typedef long   (*attn_kernel_items_fn)(const attn_kargs *);
typedef size_t (*attn_kernel_scratch_fn)(const attn_kargs *);
typedef void   (*attn_kernel_run_fn)(const attn_kargs *, long, void *, attn_io *);
typedef size_t (*attn_kernel_partials_fn)(const attn_kargs *, long *);
typedef void   (*attn_kernel_merge_fn)(const attn_kargs *, long, attn_io *);

#endif
