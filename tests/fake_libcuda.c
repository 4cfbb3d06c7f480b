/* fake_libcuda.c: a stand-in for libcuda.so.1 (loaded through ATTN_LIBCUDA) whose answers a test chooses, so that
 * attn_open's handling of broken drivers and unusable devices is checked on a machine without a GPU.
 * $FAKE_LIBCUDA, comma-separated (defaults in brackets):
 *   init=N   cuInit returns N [0]          count=N  devices [1]            cc=MAJMIN  compute capability [80]
 *   ctx=N    cuDevicePrimaryCtxRetain returns N [0]                        alloc=N  cuMemAlloc_v2 returns N [0]
 *   pools=N  the device attribute "memory pools supported" (stream-ordered allocation) [1]
 *   smem=N   the per-block shared memory opt-in in bytes [166912: an A100's]
 *   sms=N    multiprocessors [4] (an H100 has 132: the untuned CUDA plan's split-KV counts them)
 *   hang=1   a kernel that never ends: once one was launched, every wait for the device (stream, context, event)
 *            blocks forever [0]
 * $FAKE_LIBCUDA_NAME: the device's name [Fake GPU N]
 * Built twice: fake_libcuda has every entry point attn_cuda_open resolves, fake_libcuda_noctx (FAKE_NO_CTX) lacks
 * cuDevicePrimaryCtxRetain. Kernels "run" without doing anything; device memory is host memory. A launch copies its
 * kernel's parameter block, as the driver does: attn_cuda_bwd_kargs for a backward module's entries (a module whose
 * attn_bwd_pre was asked for: templates/flash_bwd.cu's attn_bwd_pre, attn_kernel and attn_bwd_post take it),
 * attn_cuda_kargs for the others. What the runtime
 * asked for is recorded (fake_libcuda.h: launches and their streams, synchronizations, memory freed while a queued
 * launch still uses it, the calls' order and the serving tables a launch reads when it runs) for a test to read
 * through fake_cuda_record. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "fake_libcuda.h"
#include "kernel_abi_cuda.h"
#include "kernel_abi_cuda_bwd.h"

_Static_assert(sizeof(attn_cuda_bwd_kargs) <= sizeof(attn_cuda_kargs), "a queued launch keeps either block");

#define API __attribute__((visibility("default")))
#define ATTR_SMS 16
#define ATTR_L2 38
#define ATTR_CC_MAJOR 75
#define ATTR_CC_MINOR 76
#define ATTR_SMEM_OPTIN 97
#define ATTR_MEMORY_POOLS 115

typedef unsigned long long devptr;

/* One setting of $FAKE_LIBCUDA, or def when it is not given. */
static int setting(const char *key, int def) {
  const char *e = getenv("FAKE_LIBCUDA");
  size_t kl = strlen(key);
  for (const char *p = e; p && *p;) {
    if (strncmp(p, key, kl) == 0 && p[kl] == '=') return atoi(p + kl + 1);
    p = strchr(p, ',');
    if (p) p++;
  }
  return def;
}

/* The record, and the launches not yet waited for: their stream and the device memory they use. */
#define MAX_PENDING 256
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static fake_cuda_calls rec;
static struct {
  void *stream;
  const void *scratch, *consts;
  long seq;               /* its place among the stream-ordered work */
  int backward;           /* a is an attn_cuda_bwd_kargs (the rest zero) */
  attn_cuda_kargs a;
  unsigned grid, block, smem;
} queued[MAX_PENDING];
static fake_cuda_hook hook;
static void *hook_user;

API void fake_cuda_set_hook(fake_cuda_hook fn, void *user) {
  pthread_mutex_lock(&mu);
  hook = fn, hook_user = user;
  pthread_mutex_unlock(&mu);
}
/* cuMemcpyHtoDAsync_v2's copies not yet made */
static struct {
  void *stream, *dst;
  const void *src;
  size_t n;
  long seq;
} copies[MAX_PENDING];
static int n_copies;
static long seq_now;
/* pinned host memory handed out */
static void *pinned[MAX_PENDING];
static int n_pinned;

/* "name@stream " appended to the log (called with mu held) */
static void note(const char *name, const void *stream) {
  const size_t l = strlen(rec.log);
  if (l + 64 < sizeof rec.log) snprintf(rec.log + l, sizeof rec.log - l, "%s@%p ", name, stream);
}

/* Device memory handed out (cuMemAlloc_v2, cuMemAllocAsync) and not freed: what a launch's tables may be read from.
 * A launch's parameter block is read as attn_cuda_kargs, which other kernels' (the backward's) are not: their bytes
 * where the tables' pointers would be are read only where they name such memory. */
#define MAX_ALLOCS 4096
static struct {
  const char *p;
  size_t n;
} allocs[MAX_ALLOCS];
static int n_allocs;

static void alloc_add(const void *p, size_t n) {
  pthread_mutex_lock(&mu);
  if (p && n_allocs < MAX_ALLOCS) allocs[n_allocs].p = p, allocs[n_allocs++].n = n;
  pthread_mutex_unlock(&mu);
}
static void alloc_drop(const void *p) { /* called with mu held */
  for (int i = 0; i < n_allocs; i++)
    if (allocs[i].p == p) allocs[i] = allocs[--n_allocs];
}
static int readable(const void *p, long count) {
  for (int i = 0; p && count >= 0 && i < n_allocs; i++)
    if ((const char *)p >= allocs[i].p && (const char *)p + sizeof(int) * (size_t)count <= allocs[i].p + allocs[i].n)
      return 1;
  return 0;
}

/* What a launch reads of its serving layout's tables when it runs, and the test's hook (called with mu held). */
static void run_launch(const attn_cuda_kargs *a, int backward, unsigned grid, unsigned block, unsigned smem) {
  if (hook) hook(a, grid, block, smem, hook_user);
  const int i = rec.ran++;
  if (i >= FAKE_RAN) return;
  memset(&rec.ran_tables[i], 0, sizeof rec.ran_tables[i]);
  if (backward) return; /* no tables */
  rec.ran_tables[i].batch = (int)a->batch;
  const int b = a->batch < 0 ? 0 : a->batch < 64 ? (int)a->batch : 64;
  if (readable(a->cu_q, b + 1)) memcpy(rec.ran_tables[i].cu_q, a->cu_q, sizeof(int) * (size_t)(b + 1));
  if (readable(a->cu_kv, b + 1)) memcpy(rec.ran_tables[i].cu_kv, a->cu_kv, sizeof(int) * (size_t)(b + 1));
  if (readable(a->seq_kv, b)) memcpy(rec.ran_tables[i].seq_kv, a->seq_kv, sizeof(int) * (size_t)b);
  const long t = a->max_pages > 0 ? (long)b * a->max_pages : 0, tn = t < 256 ? t : 256;
  if (readable(a->block_table, tn)) memcpy(rec.ran_tables[i].table, a->block_table, sizeof(int) * (size_t)tn);
}

/* memory freed in a stream's order while a launch on that stream still used it: freed when the stream is drained */
static struct {
  void *stream, *p;
} deferred[MAX_PENDING];
static int n_deferred;

API void fake_cuda_record(fake_cuda_calls *out, int reset) {
  pthread_mutex_lock(&mu);
  *out = rec;
  if (reset) {
    const int pending = rec.pending;
    memset(&rec, 0, sizeof rec);
    rec.pending = pending;
  }
  pthread_mutex_unlock(&mu);
}

/* The work on stream s (all: every stream) queued up to seq `upto` runs, copies and launches in their order. */
static void run_upto(void *s, int all, long upto) {
  for (;;) {
    int ci = -1, li = -1;
    for (int i = 0; i < n_copies; i++)
      if ((all || copies[i].stream == s) && copies[i].seq <= upto && (ci < 0 || copies[i].seq < copies[ci].seq))
        ci = i;
    for (int i = 0; i < rec.pending; i++)
      if ((all || queued[i].stream == s) && queued[i].seq >= 0 && queued[i].seq <= upto &&
          (li < 0 || queued[i].seq < queued[li].seq))
        li = i;
    if (ci < 0 && li < 0) break;
    if (ci >= 0 && (li < 0 || copies[ci].seq < queued[li].seq)) {
      memcpy(copies[ci].dst, copies[ci].src, copies[ci].n);
      copies[ci] = copies[--n_copies];
    } else {
      run_launch(&queued[li].a, queued[li].backward, queued[li].grid, queued[li].block, queued[li].smem);
      queued[li].seq = -1;
    }
  }
  int k = 0; /* what ran leaves the queue, in order */
  for (int i = 0; i < rec.pending; i++)
    if (queued[i].seq >= 0) queued[k++] = queued[i];
  rec.pending = k;
}

/* Launches on stream s are done (all: every stream), and what was freed behind them goes. */
static void drain(void *s, int all) {
  run_upto(s, all, seq_now);
  int k = 0;
  for (int i = 0; i < rec.pending; i++)
    if (queued[i].seq >= 0 && !all && queued[i].stream != s) queued[k++] = queued[i];
  rec.pending = k;
  k = 0;
  for (int i = 0; i < n_deferred; i++)
    if (!all && deferred[i].stream != s) deferred[k++] = deferred[i];
    else alloc_drop(deferred[i].p), free(deferred[i].p);
  n_deferred = k;
}

static int in_use(const void *p) {
  for (int i = 0; i < rec.pending; i++)
    if (p && queued[i].seq >= 0 &&
        (queued[i].scratch == p || queued[i].consts == p ||
         (!queued[i].backward && ((const void *)queued[i].a.cu_q == p || (const void *)queued[i].a.seq_kv == p))))
      return 1;
  for (int i = 0; i < n_copies; i++)
    if (p && copies[i].dst == p) return 1;
  return 0;
}

API int cuInit(unsigned flags) { return flags ? 1 : setting("init", 0); }
API int cuDriverGetVersion(int *v) { *v = 12040; return 0; }
API int cuDeviceGetCount(int *n) { *n = setting("count", 1); return 0; }
API int cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return ordinal < setting("count", 1) ? 0 : 101; }
/* $FAKE_LIBCUDA_NAME: the device's name (e.g. "NVIDIA H100 80GB HBM3", so that rows tuned for H100 apply) */
API int cuDeviceGetName(char *name, int len, int dev) {
  const char *e = getenv("FAKE_LIBCUDA_NAME");
  if (e && *e) snprintf(name, (size_t)len, "%s", e);
  else snprintf(name, (size_t)len, "Fake GPU %d", dev);
  return 0;
}
API int cuDeviceGetAttribute(int *v, int attr, int dev) {
  (void)dev;
  const int cc = setting("cc", 80);
  switch (attr) {
  case ATTR_SMS: *v = setting("sms", 4); return 0;
  case ATTR_L2: *v = 1 << 20; return 0;
  case ATTR_CC_MAJOR: *v = cc / 10; return 0;
  case ATTR_CC_MINOR: *v = cc % 10; return 0;
  case ATTR_SMEM_OPTIN: *v = setting("smem", 163 * 1024); return 0;
  case ATTR_MEMORY_POOLS: *v = setting("pools", 1); return 0;
  default: return 1; /* CUDA_ERROR_INVALID_VALUE: an attribute this fake does not know */
  }
}
#ifndef FAKE_NO_CTX
static int ctx_object;
API int cuDevicePrimaryCtxRetain(void **ctx, int dev) {
  (void)dev;
  int r = setting("ctx", 0);
  *ctx = r ? NULL : &ctx_object;
  return r;
}
#endif
API int cuDevicePrimaryCtxRelease_v2(int dev) { (void)dev; return 0; }
API int cuCtxSetCurrent(void *ctx) { (void)ctx; return 0; }
/* A module and the entries asked of it: a function is its module's entry of that name. */
#define MAX_ENTRIES 8
typedef struct fake_module fake_module;
typedef struct fake_function {
  fake_module *mod;
  char name[32];
} fake_function;
struct fake_module {
  int backward; /* its attn_bwd_pre was asked for: every entry takes attn_cuda_bwd_kargs */
  int entries;
  fake_function fn[MAX_ENTRIES];
};
API int cuModuleLoadData(void **mod, const void *image) {
  (void)image;
  *mod = calloc(1, sizeof(fake_module));
  return *mod ? 0 : 2;
}
API int cuModuleUnload(void *mod) {
  pthread_mutex_lock(&mu);
  if (rec.pending) rec.unloaded_in_use++;
  pthread_mutex_unlock(&mu);
  free(mod);
  return 0;
}
API int cuModuleGetFunction(void **fn, void *mod, const char *name) {
  fake_module *m = mod;
  int i = 0;
  while (i < m->entries && strcmp(m->fn[i].name, name) != 0) i++;
  if (i == MAX_ENTRIES || strlen(name) >= sizeof m->fn[i].name) return 500; /* CUDA_ERROR_NOT_FOUND */
  if (i == m->entries) {
    m->fn[m->entries].mod = m;
    snprintf(m->fn[m->entries++].name, sizeof m->fn[i].name, "%s", name);
  }
  if (strcmp(name, "attn_bwd_pre") == 0) m->backward = 1;
  *fn = &m->fn[i];
  return 0;
}
API int cuFuncSetAttribute(void *fn, int attr, int v) { (void)fn, (void)attr, (void)v; return 0; }
API int cuFuncGetAttribute(int *v, int attr, void *fn) { (void)attr, (void)fn; *v = 64; return 0; }
API int cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, void *fn, int block, size_t smem) {
  (void)fn, (void)block, (void)smem;
  *n = 1;
  return 0;
}
API int cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned smem, void *stream, void **params, void **extra) {
  (void)gy, (void)gz, (void)by, (void)bz, (void)extra;
  /* the driver copies the kernel's parameter block now, as here: the caller's may go away once this returns */
  const int backward = ((const fake_function *)fn)->mod->backward;
  attn_cuda_kargs a;
  attn_cuda_bwd_kargs b;
  memset(&a, 0, sizeof a);
  memcpy(&a, params[0], backward ? sizeof b : sizeof a);
  memcpy(&b, &a, sizeof b);
  pthread_mutex_lock(&mu);
  rec.launches++;
  rec.last_stream = stream;
  rec.last_window = backward ? 0 : a.window, rec.last_softcap = backward ? 0 : a.softcap;
  rec.last_alibi = backward ? NULL : a.alibi;
  rec.last_grid = gx, rec.last_heads = backward ? b.heads : a.heads, rec.last_n = backward ? b.n : a.n;
  note("launch", stream);
  if (rec.pending < MAX_PENDING) {
    queued[rec.pending].stream = stream;
    queued[rec.pending].scratch = backward ? (const void *)b.delta : a.scratch;
    queued[rec.pending].consts = backward ? NULL : a.consts;
    queued[rec.pending].backward = backward;
    queued[rec.pending].seq = ++seq_now;
    queued[rec.pending].a = a;
    queued[rec.pending].grid = gx, queued[rec.pending].block = bx, queued[rec.pending].smem = smem;
    rec.pending++;
  }
  pthread_mutex_unlock(&mu);
  return 0;
}
API int cuMemAlloc_v2(devptr *p, size_t bytes) {
  int r = setting("alloc", 0);
  void *m = r ? NULL : malloc(bytes);
  if (!r && !m) r = 2; /* CUDA_ERROR_OUT_OF_MEMORY */
  *p = (devptr)(size_t)m;
  alloc_add(m, bytes);
  pthread_mutex_lock(&mu);
  note("alloc", NULL);
  pthread_mutex_unlock(&mu);
  return r;
}
API int cuMemFree_v2(devptr p) {
  pthread_mutex_lock(&mu);
  if (in_use((const void *)(size_t)p)) rec.freed_in_use++;
  note("free", NULL);
  alloc_drop((const void *)(size_t)p);
  pthread_mutex_unlock(&mu);
  free((void *)(size_t)p);
  return 0;
}
API int cuMemAllocAsync(devptr *p, size_t bytes, void *stream) {
  (void)stream;
  pthread_mutex_lock(&mu);
  rec.async_allocs++;
  pthread_mutex_unlock(&mu);
  return cuMemAlloc_v2(p, bytes);
}
/* Stream-ordered: freed when the stream gets there, which is after the launches before it on that stream. */
API int cuMemFreeAsync(devptr p, void *stream) {
  pthread_mutex_lock(&mu);
  rec.async_frees++;
  rec.async_stream = stream;
  void *m = (void *)(size_t)p;
  if (in_use(m) && n_deferred < MAX_PENDING) {
    deferred[n_deferred].stream = stream;
    deferred[n_deferred++].p = m;
    m = NULL;
  }
  if (m) alloc_drop(m);
  pthread_mutex_unlock(&mu);
  free(m);
  return 0;
}
API int cuMemcpyHtoD_v2(devptr dst, const void *src, size_t n) { memcpy((void *)(size_t)dst, src, n); return 0; }
/* made when the stream gets there (the worst the driver API allows: a copy from pinned memory reads it then) */
API int cuMemcpyHtoDAsync_v2(devptr dst, const void *src, size_t n, void *stream) {
  pthread_mutex_lock(&mu);
  rec.async_copies++;
  note("copy", stream);
  int r = 0;
  if (n_copies < MAX_PENDING) {
    copies[n_copies].stream = stream, copies[n_copies].dst = (void *)(size_t)dst, copies[n_copies].src = src;
    copies[n_copies].n = n, copies[n_copies].seq = ++seq_now;
    n_copies++;
  } else {
    r = 2;
  }
  pthread_mutex_unlock(&mu);
  return r;
}
API int cuMemHostAlloc(void **p, size_t bytes, unsigned flags) {
  (void)flags;
  int r = setting("hostalloc", 0);
  *p = r ? NULL : malloc(bytes);
  if (!r && !*p) r = 2;
  pthread_mutex_lock(&mu);
  rec.host_allocs++;
  note("hostalloc", NULL);
  if (*p && n_pinned < MAX_PENDING) pinned[n_pinned++] = *p;
  pthread_mutex_unlock(&mu);
  return r;
}
API int cuMemFreeHost(void *p) {
  pthread_mutex_lock(&mu);
  rec.host_frees++;
  note("hostfree", NULL);
  for (int i = 0; i < n_copies; i++)
    if (copies[i].src == p) rec.freed_host_in_use++;
  for (int i = 0; i < n_pinned; i++)
    if (pinned[i] == p) pinned[i] = pinned[--n_pinned];
  pthread_mutex_unlock(&mu);
  free(p);
  return 0;
}
API int cuMemcpyDtoH_v2(void *dst, devptr src, size_t n) { memcpy(dst, (const void *)(size_t)src, n); return 0; }
API int cuMemsetD8_v2(devptr dst, unsigned char v, size_t n) { memset((void *)(size_t)dst, v, n); return 0; }
/* hang=1: what a wait does once a kernel that never ends was launched */
static void hang_if_launched(void) {
  pthread_mutex_lock(&mu);
  const int launched = rec.launches > 0;
  pthread_mutex_unlock(&mu);
  if (launched && setting("hang", 0))
    for (;;) pause();
}
API int cuStreamSynchronize(void *stream) {
  hang_if_launched();
  pthread_mutex_lock(&mu);
  rec.stream_syncs++;
  rec.last_synced = stream;
  note("sync", stream);
  drain(stream, stream == NULL); /* the legacy default stream waits for the others */
  pthread_mutex_unlock(&mu);
  return 0;
}
API int cuCtxSynchronize(void) {
  hang_if_launched();
  pthread_mutex_lock(&mu);
  rec.ctx_syncs++;
  note("ctxsync", NULL);
  drain(NULL, 1);
  pthread_mutex_unlock(&mu);
  return 0;
}
/* An event: the stream it was recorded on and the stream-ordered work queued before it. */
typedef struct fake_event {
  void *stream;
  long seq;
} fake_event;
API int cuEventCreate(void **ev, unsigned flags) {
  (void)flags;
  fake_event *e = calloc(1, sizeof *e);
  *ev = e;
  return e ? 0 : 2;
}
API int cuEventRecord(void *ev, void *stream) {
  fake_event *e = ev;
  pthread_mutex_lock(&mu);
  e->stream = stream, e->seq = seq_now;
  note("record", stream);
  pthread_mutex_unlock(&mu);
  return 0;
}
/* 600 (CUDA_ERROR_NOT_READY) while work queued before the record on its stream has not run */
API int cuEventQuery(void *ev) {
  const fake_event *e = ev;
  int r = 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < n_copies; i++)
    if ((!e->stream || copies[i].stream == e->stream) && copies[i].seq <= e->seq) r = 600;
  for (int i = 0; i < rec.pending; i++)
    if (queued[i].seq >= 0 && (!e->stream || queued[i].stream == e->stream) && queued[i].seq <= e->seq) r = 600;
  pthread_mutex_unlock(&mu);
  return r;
}
API int cuEventSynchronize(void *ev) {
  const fake_event *e = ev;
  hang_if_launched();
  pthread_mutex_lock(&mu);
  rec.event_syncs++;
  note("eventsync", e->stream);
  run_upto(e->stream, e->stream == NULL, e->seq);
  pthread_mutex_unlock(&mu);
  return 0;
}
API int cuEventElapsedTime(float *ms, void *a, void *b) { (void)a, (void)b; *ms = 1.0f; return 0; }
API int cuEventDestroy_v2(void *ev) { free(ev); return 0; }
API int cuGetErrorString(int r, const char **s) {
  switch (r) {
  case 0: *s = "no error"; return 0;
  case 2: *s = "out of memory"; return 0;
  case 100: *s = "no CUDA-capable device is detected"; return 0;
  case 999: *s = "unknown error"; return 0;
  default: *s = NULL; return 1; /* CUDA_ERROR_INVALID_VALUE, as the driver answers for a code it does not know */
  }
}
