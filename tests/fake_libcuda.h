/* fake_libcuda.h: what tests/fake_libcuda.c records of the runtime's calls, read back by a test through
 * dlsym(handle, "fake_cuda_record") on the same library the runtime loaded (ATTN_LIBCUDA). */
#ifndef FAKE_LIBCUDA_H
#define FAKE_LIBCUDA_H

typedef struct fake_cuda_calls {
  int launches;           /* cuLaunchKernel calls */
  void *last_stream;      /* the stream of the last cuLaunchKernel */
  int stream_syncs;       /* cuStreamSynchronize calls */
  void *last_synced;      /* the stream of the last cuStreamSynchronize */
  int ctx_syncs;          /* cuCtxSynchronize calls */
  int pending;            /* launches queued and not yet waited for (a synchronize of their stream, or all) */
  int async_allocs, async_frees; /* cuMemAllocAsync, cuMemFreeAsync calls */
  void *async_stream;     /* the stream of the last cuMemFreeAsync */
  int freed_in_use;       /* cuMemFree_v2 of memory a pending launch uses (its scratch or constants) */
  int unloaded_in_use;    /* cuModuleUnload while launches are pending */
  int last_window;        /* the last launch's score modifiers (attn_cuda_kargs) */
  float last_softcap;
  const float *last_alibi;
  unsigned last_grid;     /* the last launch's grid, and its heads and n (attn_cuda_kargs) */
  long long last_heads, last_n;
  /* stream-ordered work: cuMemcpyHtoDAsync_v2 copies when its stream gets there (a synchronization of the stream, of
   * all, or of an event behind it), as a copy from pinned memory does; a launch "runs" then too, after the copies
   * queued before it, and what a serving layout's kernel would read of its tables then is kept here */
  int async_copies;       /* cuMemcpyHtoDAsync_v2 calls */
  int event_syncs;        /* cuEventSynchronize calls (cuEventQuery never waits) */
  int host_allocs, host_frees; /* cuMemHostAlloc, cuMemFreeHost */
  int freed_host_in_use;  /* cuMemFreeHost of memory a queued copy has still to read */
  char log[2048];         /* the calls in order, "name@stream " each: alloc, hostalloc, copy, launch, record, sync,
                           * ctxsync, eventsync, free, hostfree (a stream printed by %p) */
  int ran;                /* launches run (drained) since the last reset */
  /* launch i run (i = 0..ran-1, the first FAKE_RAN of them): its batch and the tables it read (0 where it has none) */
#define FAKE_RAN 32
  struct {
    int batch, cu_q[65], cu_kv[65], seq_kv[64], table[256];
  } ran_tables[FAKE_RAN];
} fake_cuda_calls;

/* fake_cuda_record(out, reset): copies the record, then clears it when reset (pending launches stay pending). */
typedef void (*fake_cuda_record_fn)(fake_cuda_calls *, int);

/* fake_cuda_set_hook(fn, user): fn(params, grid, block, smem, user) is called as each launch runs (when its stream
 * gets there), with the parameter block as the runtime passed it to cuLaunchKernel and its grid, block and dynamic
 * shared memory: a test may run the kernel there (tests/cuda_emu_serve.c: on the PTX interpreter). fn runs with the
 * fake's lock held and must not call the driver. NULL: none. */
typedef void (*fake_cuda_hook)(const void *params, unsigned grid, unsigned block, unsigned smem, void *user);
typedef void (*fake_cuda_set_hook_fn)(fake_cuda_hook, void *);

#endif
