/* kernel_abi.h: what every generated CPU kernel exports, and the I/O-counting macros.
 * Prepended to each generated C source; the runtime includes it too, so both sides agree. */
#ifndef ATTN_KERNEL_ABI_H
#define ATTN_KERNEL_ABI_H

#include <stddef.h>

#define ATTN_KERNEL_ABI_VERSION 1

typedef struct attn_kargs {
  const float *q, *k, *v;  /* [batch][heads|heads_kv][n|n_kv][d] */
  float *o;                /* [batch][heads][n][d] */
  long batch, heads, heads_kv, n, n_kv;
  float scale;
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
 * Items may run in any order on any thread; io is that thread's own counter (never NULL). */
typedef int    (*attn_kernel_abi_fn)(void);
typedef long   (*attn_kernel_items_fn)(const attn_kargs *);
typedef size_t (*attn_kernel_scratch_fn)(const attn_kargs *);
typedef void   (*attn_kernel_run_fn)(const attn_kargs *, long, void *, attn_io *);

#endif
