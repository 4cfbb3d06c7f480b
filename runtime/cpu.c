/* cpu.c: the CPU backend — loads a compiled kernel (runtime/cc.c) with dlopen and runs its work items in parallel
 * with OpenMP, each thread with its own scratch and I/O counter. Split-K kernels (kernel_abi.h) also get one
 * partials buffer per call, and their merge items run after all the first-phase items. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cc.h"

struct attn_cpu_kernel {
  void *handle;
  attn_kernel_items_fn items;
  attn_kernel_scratch_fn scratch;
  attn_kernel_run_fn run;
  attn_kernel_partials_fn partials; /* both NULL unless the kernel splits the key range */
  attn_kernel_merge_fn merge;
  int was_cached;
  int fd;                           /* the checked file, open while the kernel is loaded (load_object) */
};

/* Kernels are loaded through /proc/self/fd/N, so that a file swapped in under the same name after the check is not
 * what runs. The dynamic loader knows an object by that name, and by its file: a second plan of the same kernel gets
 * the object already loaded (named after the first plan's descriptor), and a name it knows is answered with its
 * object whatever file now sits behind it. So every loaded file keeps one descriptor for the whole process, shared
 * by the plans that load it, closed only when the loader has let go of the object: no name is reused while the
 * loader may still answer it with another kernel. */
typedef struct { dev_t dev; ino_t ino; int fd, refs; } loaded_file;
static loaded_file *loaded;
static int nloaded, caploaded;
static pthread_mutex_t loaded_lock = PTHREAD_MUTEX_INITIALIZER;

/* The descriptor to load fd's file by (fd itself, or the one already open on that file, fd then closed), with a
 * reference taken; -1 (fd closed) when out of memory. */
static int file_acquire(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return fd; /* cannot tell: loaded by this descriptor, never shared */
  pthread_mutex_lock(&loaded_lock);
  int i = 0;
  while (i < nloaded && !(loaded[i].dev == st.st_dev && loaded[i].ino == st.st_ino)) i++;
  if (i == nloaded) {
    if (nloaded == caploaded) {
      const int cap = caploaded ? 2 * caploaded : 16;
      loaded_file *t = realloc(loaded, (size_t)cap * sizeof *t);
      if (!t) {
        pthread_mutex_unlock(&loaded_lock);
        close(fd);
        return -1;
      }
      loaded = t;
      caploaded = cap;
    }
    loaded[nloaded++] = (loaded_file){st.st_dev, st.st_ino, fd, 0};
  } else if (loaded[i].fd != fd) {
    close(fd);
  }
  loaded[i].refs++;
  const int use = loaded[i].fd;
  pthread_mutex_unlock(&loaded_lock);
  return use;
}

/* Drops a reference to the file open on fd (after dlclose); its descriptor closes once nothing holds it and the
 * loader has unloaded the object. An object the loader keeps (RTLD_NOLOAD still finds it) keeps its descriptor. */
static void file_release(int fd) {
  if (fd < 0) return;
  pthread_mutex_lock(&loaded_lock);
  int i = 0;
  while (i < nloaded && loaded[i].fd != fd) i++;
  if (i == nloaded) { /* never shared (fstat failed) */
    pthread_mutex_unlock(&loaded_lock);
    close(fd);
    return;
  }
  if (--loaded[i].refs == 0) {
    char byfd[64];
    snprintf(byfd, sizeof byfd, "/proc/self/fd/%d", fd);
    void *still = dlopen(byfd, RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
    if (still) {
      dlclose(still); /* kept by the loader: the name stays taken, so the descriptor stays open */
    } else {
      close(fd);
      loaded[i] = loaded[--nloaded];
    }
  }
  pthread_mutex_unlock(&loaded_lock);
}

/* Loads the checked file open on fd (taking it over) into k, by the descriptor file_acquire gives; by path where
 * /proc is not mounted. */
static int load_object(attn_runtime *rt, int fd, const char *path, const char *label, attn_cpu_kernel *k) {
  char byfd[64];
  file_release(k->fd);
  k->fd = file_acquire(fd);
  if (k->fd < 0) return attn_fail(rt, ATTN_ENOMEM, "out of memory loading %s", label);
  snprintf(byfd, sizeof byfd, "/proc/self/fd/%d", k->fd);
  k->handle = dlopen(access(byfd, R_OK) == 0 ? byfd : path, RTLD_NOW | RTLD_LOCAL);
  if (!k->handle) {
    const char *e = dlerror();
    return attn_fail(rt, ATTN_ERUNTIME, "cannot load %s (%s): %s", label, path, e ? e : "dlopen failed");
  }
  attn_kernel_abi_fn abi = (attn_kernel_abi_fn)dlsym(k->handle, "attn_kernel_abi");
  k->items = (attn_kernel_items_fn)dlsym(k->handle, "attn_kernel_items");
  k->scratch = (attn_kernel_scratch_fn)dlsym(k->handle, "attn_kernel_scratch");
  k->run = (attn_kernel_run_fn)dlsym(k->handle, "attn_kernel_run");
  k->partials = (attn_kernel_partials_fn)dlsym(k->handle, "attn_kernel_partials");
  k->merge = (attn_kernel_merge_fn)dlsym(k->handle, "attn_kernel_merge");
  int rc = ATTN_OK;
  if (!abi || !k->items || !k->scratch || !k->run)
    rc = attn_fail(rt, ATTN_ERUNTIME, "%s (%s) lacks the kernel entry points of kernel_abi.h", label, path);
  else if (!k->partials != !k->merge)
    rc = attn_fail(rt, ATTN_ERUNTIME, "%s (%s) exports only one of attn_kernel_partials and attn_kernel_merge",
                   label, path);
  else if (abi() != ATTN_KERNEL_ABI_VERSION)
    rc = attn_fail(rt, ATTN_ERUNTIME, "%s (%s) has kernel ABI %d, this runtime needs %d", label, path, abi(),
                   ATTN_KERNEL_ABI_VERSION);
  if (rc != ATTN_OK) {
    dlclose(k->handle);
    k->handle = NULL;
  }
  return rc;
}

static int load_kernel(attn_runtime *rt, const attn_spec *s, int count_io, int backward, attn_cpu_kernel **out) {
  *out = NULL;
  char err[512] = "", label[400];
  attn_spec_summary(s, label, sizeof label);
  if (backward) strncat(label, " backward", sizeof label - strlen(label) - 1);
  if (count_io) strncat(label, " (counting)", sizeof label - strlen(label) - 1);
  char *src = backward ? attn_spec_source_backward(s, count_io, err, sizeof err)
                       : attn_spec_source(s, count_io, err, sizeof err);
  if (!src) {
    int rc = attn_spec_check(s, NULL, 0);
    return attn_fail(rt, rc != ATTN_OK ? rc : ATTN_EUNSUPPORTED, "%s: %s", label, err);
  }
  attn_cpu_kernel *k = calloc(1, sizeof *k);
  if (!k) {
    free(src);
    return attn_fail(rt, ATTN_ENOMEM, "out of memory loading %s", label);
  }
  k->fd = -1;
  char path[4200];
  int fd = -1;
  int rc = attn_cc_object(rt, src, label, 0, path, sizeof path, &k->was_cached, &fd);
  if (rc == ATTN_OK) {
    rc = load_object(rt, fd, path, label, k);
    /* A cached object that will not load (another machine's, a damaged one the checks let through) is rebuilt once. */
    if (rc != ATTN_OK && k->was_cached) {
      rc = attn_cc_object(rt, src, label, 1, path, sizeof path, &k->was_cached, &fd);
      if (rc == ATTN_OK) rc = load_object(rt, fd, path, label, k);
    }
  }
  free(src);
  if (rc != ATTN_OK) {
    file_release(k->fd);
    free(k);
    return rc;
  }
  *out = k;
  return ATTN_OK;
}

int attn_cpu_load(attn_runtime *rt, const attn_spec *s, int count_io, attn_cpu_kernel **out) {
  return load_kernel(rt, s, count_io, 0, out);
}

int attn_cpu_load_backward(attn_runtime *rt, const attn_spec *s, int count_io, attn_cpu_kernel **out) {
  return load_kernel(rt, s, count_io, 1, out);
}

void attn_cpu_unload(attn_cpu_kernel *k) {
  if (!k) return;
  if (k->handle) dlclose(k->handle);
  file_release(k->fd);
  free(k);
}

int attn_cpu_was_cached(const attn_cpu_kernel *k) { return k ? k->was_cached : 0; }

/* Per-thread scratch, kept between calls so that executing a plan allocates nothing once warm
 * (OpenMP reuses its worker threads). */
static _Thread_local void *tls_scratch;
static _Thread_local size_t tls_cap;
static pthread_key_t scratch_key; /* frees a thread's scratch when the thread exits */
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_key_ok;

static void scratch_key_init(void) { scratch_key_ok = pthread_key_create(&scratch_key, free) == 0; }

static void *scratch_get(size_t bytes) {
  if (bytes < 64) bytes = 64;
  if (bytes > tls_cap) {
    pthread_once(&scratch_once, scratch_key_init);
    free(tls_scratch);
    size_t cap = (bytes + 63) & ~(size_t)63;
    tls_scratch = aligned_alloc(64, cap);
    tls_cap = tls_scratch ? cap : 0;
    if (scratch_key_ok) pthread_setspecific(scratch_key, tls_scratch);
  }
  return tls_scratch;
}

int attn_cpu_run(attn_runtime *rt, const attn_cpu_kernel *k, const attn_kargs *a0, attn_io *io) {
  if (!k || !a0) return attn_fail(rt, ATTN_EINVAL, "attn_cpu_run: kernel or arguments are NULL");
  attn_kargs args = *a0;
  const attn_kargs *a = &args;
  args.partials = NULL;
  long merges = 0;
  if (k->partials) {
    /* One buffer per call (not per plan): concurrent calls on one plan must not share it. */
    const size_t pbytes = k->partials(a, &merges);
    args.partials = pbytes ? aligned_alloc(64, (pbytes + 63) & ~(size_t)63) : NULL;
    if (pbytes && !args.partials)
      return attn_fail(rt, ATTN_ENOMEM, "out of memory for %zu bytes of split-K partials", pbytes);
  }
  const long items = k->items(a);
  const size_t bytes = k->scratch(a);
  unsigned long long reads = 0, writes = 0;
  int failed = 0;
  int threads = rt ? rt->threads : 1;
  if (threads > items) threads = (int)items;
  if (threads <= 1) {
    void *s = items > 0 ? scratch_get(bytes) : NULL;
    attn_io t = {0, 0};
    if (items > 0 && !s) failed = 1;
    for (long i = 0; i < items && !failed; i++) k->run(a, i, s, &t);
    for (long i = 0; i < merges && !failed; i++) k->merge(a, i, &t);
    reads = t.reads;
    writes = t.writes;
  } else {
#pragma omp parallel num_threads(threads) reduction(+ : reads, writes) shared(failed)
    {
      void *s = scratch_get(bytes);
      attn_io t = {0, 0};
      if (!s) {
#pragma omp atomic write
        failed = 1;
      }
      /* Dynamic: items differ in cost (causal blocks, the last partial block). */
#pragma omp for schedule(dynamic)
      for (long i = 0; i < items; i++)
        if (s) k->run(a, i, s, &t);
      /* The loop's implicit barrier: every partial is written before any merge reads it, and every thread sees the
       * same failed (a thread without scratch skipped its items, so there is nothing whole to merge). */
      int skip;
#pragma omp atomic read
      skip = failed;
      if (merges > 0 && !skip) {
#pragma omp for schedule(dynamic)
        for (long i = 0; i < merges; i++) k->merge(a, i, &t);
      }
      reads += t.reads;
      writes += t.writes;
    }
  }
  free(args.partials);
  if (failed) return attn_fail(rt, ATTN_ENOMEM, "out of memory for %zu bytes of kernel scratch", bytes);
  if (io) {
    io->reads = reads; /* this call's transfers, summed over threads */
    io->writes = writes;
  }
  return ATTN_OK;
}
