/* cuda.c: the CUDA backend. The driver API is loaded with dlopen("libcuda.so.1"), so every binary starts on a
 * machine with no driver (ATTN_ENODEV with the reason); kernels are compiled by NVRTC (runtime/nvrtc.c) for the
 * device's architecture, cached as cubins in the cache directory and in the database's artifacts (an application
 * with a tuned database never runs NVRTC), and loaded with cuModuleLoadData. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "artifact.h"
#include "internal.h"
#include "kernel_abi_cuda.h"
#include "files.h"
#include "launch.h"
#include "kernel_abi_cuda_bwd.h"
#include "spec_bwd_cuda.h"
#include "spec_sm90.h"

/* Driver API types and constants, declared here so that no toolkit header is needed to build. */
typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef unsigned long long CUdeviceptr;
enum {
  CU_ATTR_SMS = 16, CU_ATTR_L2 = 38, CU_ATTR_CC_MAJOR = 75, CU_ATTR_CC_MINOR = 76, CU_ATTR_SMEM_OPTIN = 97,
  CU_ATTR_MEMORY_POOLS = 115, CU_FUNC_NUM_REGS = 4, CU_FUNC_LOCAL_BYTES = 3, CU_FUNC_MAX_DYN_SMEM = 8,
  CU_ERROR_STUB_LIBRARY = 34, CU_ERROR_NO_DEVICE = 100
};

#define CU_FUNCS(X)                                                                                            \
  X(cuInit, (unsigned))                                                                                        \
  X(cuDriverGetVersion, (int *))                                                                               \
  X(cuDeviceGetCount, (int *))                                                                                 \
  X(cuDeviceGet, (CUdevice *, int))                                                                            \
  X(cuDeviceGetName, (char *, int, CUdevice))                                                                  \
  X(cuDeviceGetAttribute, (int *, int, CUdevice))                                                              \
  X(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))                                                         \
  X(cuDevicePrimaryCtxRelease_v2, (CUdevice))                                                                  \
  X(cuCtxSetCurrent, (CUcontext))                                                                              \
  X(cuModuleLoadData, (CUmodule *, const void *))                                                              \
  X(cuModuleUnload, (CUmodule))                                                                                \
  X(cuModuleGetFunction, (CUfunction *, CUmodule, const char *))                                               \
  X(cuFuncSetAttribute, (CUfunction, int, int))                                                                \
  X(cuFuncGetAttribute, (int *, int, CUfunction))                                                              \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, (int *, CUfunction, int, size_t))                             \
  X(cuLaunchKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, \
                     void **, void **))                                                                        \
  X(cuMemAlloc_v2, (CUdeviceptr *, size_t))                                                                    \
  X(cuMemFree_v2, (CUdeviceptr))                                                                               \
  X(cuMemcpyHtoD_v2, (CUdeviceptr, const void *, size_t))                                                      \
  X(cuMemcpyDtoH_v2, (void *, CUdeviceptr, size_t))                                                            \
  X(cuMemsetD8_v2, (CUdeviceptr, unsigned char, size_t))                                                       \
  X(cuStreamSynchronize, (CUstream))                                                                           \
  X(cuEventCreate, (CUevent *, unsigned))                                                                      \
  X(cuEventRecord, (CUevent, CUstream))                                                                        \
  X(cuEventSynchronize, (CUevent))                                                                             \
  X(cuEventElapsedTime, (float *, CUevent, CUevent))                                                           \
  X(cuEventDestroy_v2, (CUevent))

struct attn_cuda {
  void *lib;
#define X(name, args) CUresult(*name) args;
  CU_FUNCS(X)
#undef X
  CUresult (*cuGetErrorString)(CUresult, const char **);
  /* optional: stream-ordered allocation (CUDA 11.2) for attn_execute_async's scratch, and a context-wide wait */
  CUresult (*cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream);
  CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
  CUresult (*cuCtxSynchronize)(void);
  /* optional (CUDA 12): the TMA tensor maps of impl=wgmma kernels (templates/flash_sm90.cu) */
  CUresult (*cuTensorMapEncodeTiled)(void *, int, unsigned, void *, const unsigned long long *,
                                     const unsigned long long *, const unsigned *, const unsigned *, int, int, int, int);
  CUdevice dev;
  CUcontext ctx;
  int cc_major, cc_minor, sms, smem_optin, l2_bytes;
  int pools;                /* cuMemAllocAsync and cuMemFreeAsync exist and the device has memory pools */
  char arch[16];
  char name[256];
};

struct attn_cuda_kernel {
  attn_cuda *cu;
  CUmodule mod;
  CUfunction fn;
  CUfunction pre;           /* a backward module's attn_bwd_pre (templates/flash_bwd.cu); NULL in a forward's */
  CUfunction post;          /* a dq=atomic backward's attn_bwd_post (dq from the fp32 scratch); NULL otherwise */
  CUfunction combine;       /* a split-KV forward's attn_combine (O from the parts in the scratch); NULL otherwise */
  int backward;
  attn_spec spec;           /* as compiled: arch is the device's */
  long long smem;
  int blocks_per_sm;
  CUdeviceptr consts;
  CUdeviceptr alibi;        /* the plan's ALiBi slopes on the device (attn_cuda_set_alibi); 0 without */
  int was_cached;
  attn_cuda_resources res;
  atomic_int queued;        /* attn_cuda_launch has run: unload waits for the device before freeing */
};

static const char *cu_err(const attn_cuda *c, CUresult r) {
  static _Thread_local char buf[48];
  const char *s = NULL;
  if (c && c->cuGetErrorString && c->cuGetErrorString(r, &s) == 0 && s) return s;
  snprintf(buf, sizeof buf, "CUDA error %d", r); /* e.g. 34: the toolkit's stub library, not a driver */
  return buf;
}

/* The spec table's name for a device ("NVIDIA H100 80GB HBM3" -> "H100"): the longest known family name found in
 * the device name (compared without case, spaces, '-' or '_'), so that rows tuned with `--gpu H100` apply to it.
 * tests/tuner_unit.c checks that every GPU of tuner/gpus.json is found here. */
static const char *const families[] = {"A100", "A10G", "A10", "A30", "A40", "H100", "H200", "H20", "GH200", "B200",
                                       "L4", "L40", "L40S", "RTX 3090", "RTX 4090", "RTX 5090", "RTX 6000", NULL};

static void squash(const char *in, char *out, size_t len) {
  size_t j = 0;
  for (; *in && j + 1 < len; in++) {
    char ch = *in;
    if (ch == ' ' || ch == '-' || ch == '_') continue;
    out[j++] = (char)(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
  }
  out[j] = '\0';
}

int attn_cuda_family(const char *device_name, char *out, size_t len) {
  char dev[256], fam[64];
  squash(device_name ? device_name : "", dev, sizeof dev);
  const char *best = NULL;
  size_t best_len = 0;
  for (int i = 0; families[i]; i++) {
    squash(families[i], fam, sizeof fam);
    size_t fl = strlen(fam);
    if (fl > best_len && strstr(dev, fam)) {
      best = families[i];
      best_len = fl;
    }
  }
  if (best) snprintf(out, len, "%s", best);
  else snprintf(out, len, "cuda:%s", device_name ? device_name : "unknown");
  return best ? 0 : -1;
}

/* Makes the runtime's primary context current in the calling thread (plans may be executed from any thread). */
static int make_current(attn_runtime *rt, attn_cuda *c) {
  CUresult r = c->cuCtxSetCurrent(c->ctx);
  return r == 0 ? ATTN_OK : attn_fail(rt, ATTN_ERUNTIME, "cuCtxSetCurrent: %s", cu_err(c, r));
}

/* Frees a half-opened driver and returns code with the message already set. */
static int open_failed(attn_cuda *c, int code) {
  if (c->ctx) c->cuDevicePrimaryCtxRelease_v2(c->dev);
  dlclose(c->lib);
  free(c);
  return code;
}

/* ATTN_ENODEV only when there is nothing to run on: no driver library, the toolkit's stub in its place, or a driver
 * that sees no device. A driver that is there but does not work, a device that cannot be opened, a bad
 * ATTN_CUDA_DEVICE or a device older than sm_80 are errors of their own, so that callers that skip without a GPU
 * do not skip over them. */
int attn_cuda_open(attn_runtime *rt, attn_cuda **out) {
  *out = NULL;
  attn_cuda *c = calloc(1, sizeof *c);
  if (!c) return attn_fail(rt, ATTN_ENOMEM, "out of memory opening CUDA");
  const char *libname = getenv("ATTN_LIBCUDA");
  if (!libname || !*libname) libname = "libcuda.so.1";
  c->lib = dlopen(libname, RTLD_NOW | RTLD_LOCAL);
  if (!c->lib) {
    const char *e = dlerror();
    free(c);
    return attn_fail(rt, ATTN_ENODEV, "no CUDA driver (%s)", e ? e : libname);
  }
  int missing = 0;
  const char *first_missing = NULL;
#define X(name, args)                                                 \
  if (!(*(void **)&c->name = dlsym(c->lib, #name))) {                 \
    missing++;                                                        \
    if (!first_missing) first_missing = #name;                        \
  }
  CU_FUNCS(X)
#undef X
  *(void **)&c->cuGetErrorString = dlsym(c->lib, "cuGetErrorString");
  *(void **)&c->cuMemAllocAsync = dlsym(c->lib, "cuMemAllocAsync");
  *(void **)&c->cuMemFreeAsync = dlsym(c->lib, "cuMemFreeAsync");
  *(void **)&c->cuCtxSynchronize = dlsym(c->lib, "cuCtxSynchronize");
  *(void **)&c->cuTensorMapEncodeTiled = dlsym(c->lib, "cuTensorMapEncodeTiled");
  /* cuInit first: the stub and a driver without devices say so there, whatever else they lack */
  if (!c->cuInit)
    return open_failed(c, attn_fail(rt, ATTN_ERUNTIME, "%s is not a CUDA driver: it has no cuInit", libname));
  CUresult r = c->cuInit(0);
  if (r == CU_ERROR_NO_DEVICE)
    return open_failed(c, attn_fail(rt, ATTN_ENODEV, "no CUDA device (cuInit: CUDA_ERROR_NO_DEVICE)"));
  if (r == CU_ERROR_STUB_LIBRARY)
    return open_failed(c, attn_fail(rt, ATTN_ENODEV, "no CUDA driver (%s is the CUDA toolkit's stub library)",
                                    libname));
  if (r != 0)
    return open_failed(c, attn_fail(rt, ATTN_ERUNTIME, "the CUDA driver %s does not initialise: cuInit: %s", libname,
                                    cu_err(c, r)));
  if (missing)
    return open_failed(c, attn_fail(rt, ATTN_ERUNTIME, "the CUDA driver %s lacks %s (a driver for CUDA 11 or later "
                                    "is needed)", libname, first_missing));
  int count = 0;
  r = c->cuDeviceGetCount(&count);
  if (r == CU_ERROR_NO_DEVICE || (r == 0 && count <= 0))
    return open_failed(c, attn_fail(rt, ATTN_ENODEV, "no CUDA device (the driver reports none)"));
  if (r != 0)
    return open_failed(c, attn_fail(rt, ATTN_ERUNTIME, "the CUDA driver %s cannot count devices: cuDeviceGetCount: %s",
                                    libname, cu_err(c, r)));
  /* the ordinal: digits only, below the count; anything else names a device that is not there */
  const char *ord = getenv("ATTN_CUDA_DEVICE");
  int idx = 0;
  if (ord && *ord) {
    char *end;
    errno = 0;
    long v = strtol(ord, &end, 10);
    if (errno || *end || ord[0] < '0' || ord[0] > '9' || v >= count)
      return open_failed(c, attn_fail(rt, ATTN_EINVAL, "ATTN_CUDA_DEVICE=%s: the CUDA devices are 0..%d", ord,
                                      count - 1));
    idx = (int)v;
  }
  const char *call = "cuDeviceGet";
  if ((r = c->cuDeviceGet(&c->dev, idx)) != 0 ||
      (call = "cuDeviceGetName", r = c->cuDeviceGetName(c->name, sizeof c->name, c->dev)) != 0 ||
      (call = "cuDeviceGetAttribute", r = c->cuDeviceGetAttribute(&c->cc_major, CU_ATTR_CC_MAJOR, c->dev)) != 0 ||
      (r = c->cuDeviceGetAttribute(&c->cc_minor, CU_ATTR_CC_MINOR, c->dev)) != 0 ||
      (r = c->cuDeviceGetAttribute(&c->sms, CU_ATTR_SMS, c->dev)) != 0 ||
      (r = c->cuDeviceGetAttribute(&c->smem_optin, CU_ATTR_SMEM_OPTIN, c->dev)) != 0 ||
      (r = c->cuDeviceGetAttribute(&c->l2_bytes, CU_ATTR_L2, c->dev)) != 0)
    return open_failed(c, attn_fail(rt, ATTN_ERUNTIME, "CUDA device %d: %s: %s", idx, call, cu_err(c, r)));
  c->name[sizeof c->name - 1] = '\0';
  if (c->cc_major < 8)
    return open_failed(c, attn_fail(rt, ATTN_EUNSUPPORTED, "CUDA device %d (%s) is sm_%d%d: the CUDA kernels need "
                                    "sm_80 or later", idx, c->name, c->cc_major, c->cc_minor));
  if ((r = c->cuDevicePrimaryCtxRetain(&c->ctx, c->dev)) != 0) {
    c->ctx = NULL;
    return open_failed(c, attn_fail(rt, ATTN_ERUNTIME, "CUDA device %d (%s): no context: cuDevicePrimaryCtxRetain: %s",
                                    idx, c->name, cu_err(c, r)));
  }
  /* an older driver does not know the attribute: no pools, which only costs attn_execute_async its asynchrony for
   * kernels with scratch */
  int pools = 0;
  c->pools = c->cuMemAllocAsync && c->cuMemFreeAsync &&
             c->cuDeviceGetAttribute(&pools, CU_ATTR_MEMORY_POOLS, c->dev) == 0 && pools == 1;
  snprintf(c->arch, sizeof c->arch, "sm_%d%d", c->cc_major, c->cc_minor);
  attn_cuda_family(c->name, rt->device, sizeof rt->device);
  *out = c;
  return ATTN_OK;
}

void attn_cuda_close(attn_cuda *c) {
  if (!c) return;
  c->cuDevicePrimaryCtxRelease_v2(c->dev);
  /* libcuda stays loaded: unloading a driver library while other contexts may use it gains nothing */
  free(c);
}

int attn_cuda_info(const attn_runtime *rt, attn_cuda_info_t *info) {
  memset(info, 0, sizeof *info);
  if (!rt || !rt->cuda) return ATTN_ENODEV;
  const attn_cuda *c = rt->cuda;
  snprintf(info->name, sizeof info->name, "%s", c->name);
  snprintf(info->arch, sizeof info->arch, "%s", c->arch);
  info->sms = c->sms;
  info->smem_optin = c->smem_optin;
  info->l2_bytes = c->l2_bytes;
  return ATTN_OK;
}

/* ---- compiled-kernel cache: cache directory, then database artifacts, then NVRTC. */

#define NVRTC_FLAGS "--std=c++17 --use_fast_math"

/* A cubin for src: *blob malloc'd. force != 0 skips the caches (a cached cubin that would not load). */
static int get_cubin(attn_runtime *rt, const char *src, const char *arch, const char *label, int force, void **blob,
                     size_t *len, int *was_cached, char **log) {
  *blob = NULL;
  *len = 0;
  *was_cached = 0;
  *log = NULL;
  size_t sl = strlen(src);
  char *key = malloc(sl + 128);
  if (!key) return attn_fail(rt, ATTN_ENOMEM, "out of memory hashing %s", label);
  int kl = snprintf(key, sl + 128, "%s\nnvrtc %s %s", src, NVRTC_FLAGS, arch);
  char hash[17];
  attn_hash_hex(key, (size_t)kl, hash);
  free(key);
  char path[4200];
  /* a cache directory that fails its checks is replaced by a private one (artifact.h); none at all: no file cache */
  const int files = attn_cache_dir_ready(rt) == ATTN_OK;
  snprintf(path, sizeof path, "%s/%s-%s.cubin", rt->cache_dir, hash, arch);
  if (!force) {
    char want[65] = "", why[1024];
    if (rt->db && attn_db_artifact_digest(rt->db, hash, "nvrtc", NVRTC_FLAGS, arch, want) != ATTN_OK) want[0] = '\0';
    int fd = files ? attn_artifact_open(path, want, 0, blob, len, why, sizeof why) : -1;
    if (fd >= 0) {
      close(fd); /* the checked bytes are in *blob: they are what cuModuleLoadData gets */
      *was_cached = 1;
      return ATTN_OK;
    }
    /* one that failed a check is never loaded; attn_install_file's rename below replaces it (an unlink could remove
     * what another thread or process has just installed) */
    if (rt->db && attn_db_artifact_get(rt->db, hash, "nvrtc", NVRTC_FLAGS, arch, blob, len) == ATTN_OK && *blob &&
        *len && attn_elf_check(*blob, *len, 0, why, sizeof why) == 0) {
      if (files) attn_install_file(path, *blob, *len); /* best effort */
      *was_cached = 1;
      return ATTN_OK;
    }
    free(*blob);
    *blob = NULL;
    *len = 0;
  }
  int rc = attn_nvrtc_compile(src, "attn.cu", arch, blob, len, log);
  if (rc == ATTN_ENODEV)
    return attn_fail(rt, ATTN_ECOMPILE, "%s: no compiled kernel is stored for %s and %s", label, arch,
                     *log ? *log : "NVRTC is not available");
  if (rc != ATTN_OK) return attn_fail(rt, ATTN_ECOMPILE, "NVRTC failed on %s for %s:\n%s", label, arch, *log ? *log : "");
  /* Best effort: failing to store only means the next process compiles again. */
  if (files) attn_install_file(path, *blob, *len);
  if (rt->db) attn_db_artifact_put(rt->db, hash, "nvrtc", NVRTC_FLAGS, arch, *blob, *len);
  return ATTN_OK;
}

/* The spec as it runs on this device: compiled for the device's architecture (a cubin does not run on another
 * major architecture); an sm_90a spec keeps its Hopper-only variant on a 9.0 device. */
static void spec_for_device(const attn_cuda *c, const attn_spec *s, attn_spec *out) {
  *out = *s;
  size_t l = strlen(s->arch);
  int arch_a = l > 0 && s->arch[l - 1] == 'a' && c->cc_major == 9 && c->cc_minor == 0;
  size_t al = strnlen(c->arch, sizeof out->arch - 2);
  memcpy(out->arch, c->arch, al);
  if (arch_a) out->arch[al++] = 'a';
  out->arch[al] = '\0';
}

/* cuLaunchKernel copies the arguments that params points to before it returns: a and params may live on the stack
 * even when the launch is queued behind others on the stream. */
static int launch(attn_runtime *rt, attn_cuda *c, CUfunction fn, unsigned grid, unsigned block, unsigned smem,
                  attn_cuda_kargs *a, CUstream stream, const char *what) {
  void *params[] = {a};
  CUresult r = c->cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, smem, stream, params, NULL);
  if (r != 0) return attn_fail(rt, ATTN_ERUNTIME, "launching %s (grid %u, block %u, %u bytes of shared memory): %s",
                               what, grid, block, smem, cu_err(c, r));
  return ATTN_OK;
}

/* impl=wgmma kernels take attn_cuda_sm90_kargs: the arguments and the tensor maps of Q, K and V, each encoded by the
 * driver from attn_sm90_tmap_params (gen/spec_sm90.c), in cuTensorMapEncodeTiled's argument order. */
static int sm90_encode(void *ctx, attn_cuda_tmap *map, const attn_sm90_tmap_params *p, char *err, size_t len) {
  const attn_cuda *c = ctx;
  if (!c->cuTensorMapEncodeTiled) {
    snprintf(err, len, "the CUDA driver has no cuTensorMapEncodeTiled (a driver for CUDA 12 or later is needed)");
    return -1;
  }
  const CUresult r = c->cuTensorMapEncodeTiled(map, p->data_type, p->rank, (void *)(uintptr_t)p->global_address,
                                               p->global_dim, p->global_strides, p->box_dim, p->element_strides,
                                               p->interleave, p->swizzle, p->l2_promotion, p->oob_fill);
  if (r != 0) {
    snprintf(err, len, "cuTensorMapEncodeTiled: %s", cu_err(c, r));
    return -1;
  }
  return 0;
}

/* The forward kernel's launch on stream s: a as it is, or inside attn_cuda_sm90_kargs for an impl=wgmma kernel. */
static int launch_forward(attn_runtime *rt, const attn_cuda_kernel *k, const attn_cuda_geom *g, attn_cuda_kargs *a,
                          CUstream s) {
  attn_cuda *c = k->cu;
  if (k->combine) { /* split-KV: the parts, then their merge, in the stream's order (the scratch is the call's) */
    const int rc = launch(rt, c, k->fn, g->grid, g->block, (unsigned)k->smem, a, s, "attn_kernel");
    return rc != ATTN_OK ? rc : launch(rt, c, k->combine, g->combine_grid, g->combine_block, 0, a, s, "attn_combine");
  }
  if (k->spec.impl != ATTN_IMPL_WGMMA) return launch(rt, c, k->fn, g->grid, g->block, (unsigned)k->smem, a, s,
                                                     "attn_kernel");
  attn_cuda_sm90_kargs ka;
  char err[512];
  const int rc = attn_sm90_kargs_make(&k->spec, a, sm90_encode, c, &ka, err, sizeof err);
  if (rc != ATTN_OK) return attn_fail(rt, rc, "attn_kernel: %s", err);
  void *params[] = {&ka};
  const CUresult r = c->cuLaunchKernel(k->fn, g->grid, 1, 1, g->block, 1, 1, (unsigned)k->smem, s, params, NULL);
  if (r != 0) return attn_fail(rt, ATTN_ERUNTIME, "launching attn_kernel (grid %u, block %u, %lld bytes of shared "
                               "memory): %s", g->grid, g->block, k->smem, cu_err(c, r));
  return ATTN_OK;
}

/* A forward kernel of spec s, or (backward) the flash backward module of a spec from attn_spec_backward_cuda. */
static int load_kernel(attn_runtime *rt, const attn_spec *s, int count_io, int backward, attn_cuda_kernel **out) {
  *out = NULL;
  attn_cuda *c = rt->cuda;
  if (!c) return attn_fail(rt, ATTN_ENODEV, "no CUDA device open");
  /* the split kernel has no causal mask: a causal n = 1 plan loads it without causal (attn_cuda_decode_unmasked) */
  if (s->split > 1 && s->causal)
    return attn_fail(rt, ATTN_EUNSUPPORTED, "split=%d: no causal split kernel (causal split-KV is n = 1's, built "
                     "without causal)", s->split);
  attn_cuda_kernel *k = calloc(1, sizeof *k);
  if (!k) return attn_fail(rt, ATTN_ENOMEM, "out of memory loading a CUDA kernel");
  k->cu = c;
  k->backward = backward;
  spec_for_device(c, s, &k->spec);
  char label[400], err[512];
  attn_spec_summary(&k->spec, label, sizeof label);
  if (count_io) strncat(label, " (counting)", sizeof label - strlen(label) - 1);
  if (backward) strncat(label, " backward", sizeof label - strlen(label) - 1);
  int rc = make_current(rt, c);
  /* with the spec's d_v */
  k->smem = backward ? attn_spec_backward_cuda_smem(&k->spec) : attn_spec_cuda_smem(&k->spec);
  if (rc == ATTN_OK && k->smem > c->smem_optin)
    rc = attn_fail(rt, ATTN_EUNSUPPORTED, "%s needs %lld bytes of shared memory per block; %s allows %d", label,
                   k->smem, c->name, c->smem_optin);
  char *src = NULL;
  if (rc == ATTN_OK && !(src = backward ? attn_spec_source_backward_cuda(&k->spec, err, sizeof err)
                                         : attn_spec_source(&k->spec, count_io, err, sizeof err)))
    rc = attn_fail(rt, ATTN_EUNSUPPORTED, "%s: %s", label, err);
  for (int attempt = 0; rc == ATTN_OK && attempt < 2; attempt++) {
    void *blob = NULL;
    size_t len = 0;
    char *log = NULL;
    rc = get_cubin(rt, src, k->spec.arch, label, attempt, &blob, &len, &k->was_cached, &log);
    if (rc == ATTN_OK) {
      if (log) attn_nvrtc_resources(log, "attn_kernel", &k->res);
      CUresult r = c->cuModuleLoadData(&k->mod, blob);
      if (r != 0) {
        k->mod = NULL;
        rc = attn_fail(rt, ATTN_ERUNTIME, "loading the cubin of %s: %s", label, cu_err(c, r));
        /* a cached cubin from another driver or toolkit is rebuilt once */
        if (k->was_cached) rc = ATTN_OK;
      }
    }
    free(blob);
    free(log);
    if (k->mod || rc != ATTN_OK) break;
    if (attempt == 1) rc = attn_fail(rt, ATTN_ERUNTIME, "the cubin of %s does not load on %s", label, c->name);
  }
  free(src);
  CUresult r = 0;
  if (rc == ATTN_OK && (r = c->cuModuleGetFunction(&k->fn, k->mod, "attn_kernel")) != 0)
    rc = attn_fail(rt, ATTN_ERUNTIME, "%s has no attn_kernel: %s", label, cu_err(c, r));
  if (rc == ATTN_OK && !backward && k->spec.split > 1 &&
      (r = c->cuModuleGetFunction(&k->combine, k->mod, "attn_combine")) != 0)
    rc = attn_fail(rt, ATTN_ERUNTIME, "%s has no attn_combine: %s", label, cu_err(c, r));
  if (rc == ATTN_OK && backward && (r = c->cuModuleGetFunction(&k->pre, k->mod, "attn_bwd_pre")) != 0)
    rc = attn_fail(rt, ATTN_ERUNTIME, "%s has no attn_bwd_pre: %s", label, cu_err(c, r));
  if (rc == ATTN_OK && backward && k->spec.dq && (r = c->cuModuleGetFunction(&k->post, k->mod, "attn_bwd_post")) != 0)
    rc = attn_fail(rt, ATTN_ERUNTIME, "%s has no attn_bwd_post: %s", label, cu_err(c, r));
  if (rc == ATTN_OK && k->smem > 48 * 1024 &&
      (r = c->cuFuncSetAttribute(k->fn, CU_FUNC_MAX_DYN_SMEM, (int)k->smem)) != 0)
    rc = attn_fail(rt, ATTN_EUNSUPPORTED, "%s: %lld bytes of dynamic shared memory refused: %s", label, k->smem,
                   cu_err(c, r));
  attn_cuda_geom g;
  if (rc == ATTN_OK) rc = attn_cuda_geometry(&k->spec, 1, 1, 1, 0, &g, err, sizeof err) == ATTN_OK
                              ? ATTN_OK : attn_fail(rt, ATTN_EINVAL, "%s: %s", label, err);
  if (rc == ATTN_OK) {
    if (k->res.registers <= 0) c->cuFuncGetAttribute(&k->res.registers, CU_FUNC_NUM_REGS, k->fn);
    r = c->cuOccupancyMaxActiveBlocksPerMultiprocessor(&k->blocks_per_sm, k->fn, (int)g.block, (size_t)k->smem);
    if (r != 0 || k->blocks_per_sm < 1)
      rc = attn_fail(rt, ATTN_EUNSUPPORTED, "%s cannot run on %s: %d registers per thread x %u threads and %lld "
                     "bytes of shared memory do not fit an SM%s%s", label, c->name, k->res.registers, g.block,
                     k->smem, r ? ": " : "", r ? cu_err(c, r) : "");
  }
  if (rc == ATTN_OK && g.consts > 0) {
    /* per-plan constants (lowrank's random directions or monomial table), written once here */
    CUfunction init = NULL;
    if ((r = c->cuModuleGetFunction(&init, k->mod, "attn_init")) != 0)
      rc = attn_fail(rt, ATTN_ERUNTIME, "%s has no attn_init: %s", label, cu_err(c, r));
    else if ((r = c->cuMemAlloc_v2(&k->consts, (size_t)g.consts)) != 0)
      rc = attn_fail(rt, ATTN_ENOMEM, "%s: %lld bytes of device memory for constants: %s", label, g.consts,
                     cu_err(c, r));
    else {
      attn_cuda_kargs a;
      memset(&a, 0, sizeof a);
      a.consts = (void *)(uintptr_t)k->consts;
      a.scale = 1.0f;
      rc = launch(rt, c, init, g.init_grid, g.init_block, 0, &a, NULL, "attn_init");
      if (rc == ATTN_OK && (r = c->cuStreamSynchronize(NULL)) != 0)
        rc = attn_fail(rt, ATTN_ERUNTIME, "%s: attn_init failed: %s", label, cu_err(c, r));
    }
  }
  if (rc != ATTN_OK) {
    attn_cuda_unload(k);
    return rc;
  }
  *out = k;
  return ATTN_OK;
}

int attn_cuda_load(attn_runtime *rt, const attn_spec *s, int count_io, attn_cuda_kernel **out) {
  return load_kernel(rt, s, count_io, 0, out);
}

int attn_cuda_load_backward(attn_runtime *rt, const attn_problem *p, attn_spec *spec, attn_cuda_kernel **out) {
  *out = NULL;
  char err[512];
  int rc = attn_spec_backward_cuda(p->dtype, p->d, p->d_v, p->causal, rt->cuda ? rt->cuda->arch : "sm_80", spec, err,
                                   sizeof err);
  if (rc != ATTN_OK) return attn_fail(rt, rc, "attn_plan_create_backward: %s", err);
  rc = load_kernel(rt, spec, 0, 1, out);
  if (rc == ATTN_OK) *spec = (*out)->spec;
  return rc;
}

int attn_cuda_load_backward_spec(attn_runtime *rt, const attn_spec *s, attn_spec *used, attn_cuda_kernel **out) {
  *out = NULL;
  attn_cuda *c = rt->cuda;
  if (!c) return attn_fail(rt, ATTN_ENODEV, "no CUDA device open");
  char err[512];
  attn_spec t;
  spec_for_device(c, s, &t);
  /* what the device's shared memory and the registers hold, before anything is compiled */
  int rc = attn_spec_check_backward_cuda(&t, c->smem_optin, err, sizeof err);
  if (rc != ATTN_OK) return attn_fail(rt, rc, "attn_plan_create_backward: %s", err);
  rc = load_kernel(rt, &t, 0, 1, out);
  if (rc == ATTN_OK) *used = (*out)->spec;
  return rc;
}

int attn_cuda_precompile(attn_runtime *rt, const attn_spec *s, int count_io) {
  attn_spec t = *s;
  if (rt->cuda) spec_for_device(rt->cuda, s, &t);
  char label[400], err[512];
  attn_spec_summary(&t, label, sizeof label);
  char *src = attn_spec_source(&t, count_io, err, sizeof err);
  if (!src) return attn_fail(rt, ATTN_EUNSUPPORTED, "%s: %s", label, err);
  void *blob = NULL;
  size_t len = 0;
  char *log = NULL;
  int cached = 0;
  int rc = get_cubin(rt, src, t.arch, label, 0, &blob, &len, &cached, &log);
  free(src);
  free(blob);
  free(log);
  return rc;
}

void attn_cuda_unload(attn_cuda_kernel *k) {
  if (!k) return;
  if (k->cu) {
    k->cu->cuCtxSetCurrent(k->cu->ctx);
    /* launches of attn_execute_async may still be queued: they read the constants and run the module's code */
    if (atomic_load_explicit(&k->queued, memory_order_relaxed) && k->cu->cuCtxSynchronize) k->cu->cuCtxSynchronize();
    if (k->consts) k->cu->cuMemFree_v2(k->consts);
    if (k->alibi) k->cu->cuMemFree_v2(k->alibi);
    if (k->mod) k->cu->cuModuleUnload(k->mod);
  }
  free(k);
}

int attn_cuda_set_alibi(attn_runtime *rt, attn_cuda_kernel *k, const float *slopes, int heads) {
  attn_cuda *c = k->cu;
  int rc = make_current(rt, c);
  if (rc != ATTN_OK) return rc;
  if (k->alibi) c->cuMemFree_v2(k->alibi);
  k->alibi = 0;
  if (!slopes) return ATTN_OK;
  const size_t bytes = sizeof(float) * (size_t)heads;
  CUresult r = c->cuMemAlloc_v2(&k->alibi, bytes);
  if (r != 0) {
    k->alibi = 0;
    return attn_fail(rt, ATTN_ENOMEM, "%zu bytes of device memory for the ALiBi slopes: %s", bytes, cu_err(c, r));
  }
  if ((r = c->cuMemcpyHtoD_v2(k->alibi, slopes, bytes)) != 0) {
    c->cuMemFree_v2(k->alibi);
    k->alibi = 0;
    return attn_fail(rt, ATTN_ERUNTIME, "copying the ALiBi slopes to the device: %s", cu_err(c, r));
  }
  return ATTN_OK;
}

int attn_cuda_was_cached(const attn_cuda_kernel *k) { return k ? k->was_cached : 0; }
const attn_spec *attn_cuda_kernel_spec(const attn_cuda_kernel *k) { return &k->spec; }

/* What both launches share: the pointers checked, the context current, the grid and the kernel's arguments. */
static int prepare(attn_runtime *rt, const attn_cuda_kernel *k, const attn_problem *p, const void *q, const void *kk,
                   const void *v, void *o, const char *what, attn_cuda_kargs *a, attn_cuda_geom *g) {
  attn_cuda *c = k->cu;
  /* the kernels move 16-byte vectors (cp.async, vector loads and stores) */
  const void *ptrs[4] = {q, kk, v, o};
  for (int i = 0; i < 4; i++)
    if ((uintptr_t)ptrs[i] % 16)
      return attn_fail(rt, ATTN_EINVAL, "%s: %c = %p is not 16-byte aligned (CUDA kernels load 16-byte vectors)",
                       what, "qkvo"[i], ptrs[i]);
  int rc = make_current(rt, c);
  if (rc != ATTN_OK) return rc;
  /* grouped-query attention packed (attn_cuda_gqa_packs): a KV head's query heads are the rows of its blocks, so K
   * and V are read once per KV head, not once per query head. Only a kernel without the causal mask: a causal one
   * would hide keys from all but the last of the packed rows. */
  attn_problem pk = *p;
  const int packed = !k->backward && !k->spec.causal && attn_cuda_launch_problem(p, &k->spec, &pk);
  p = &pk;
  char err[256];
  const long long bh = (long long)p->batch * p->heads;
  if (attn_cuda_geometry(&k->spec, bh, p->n, p->n_kv, (long long)c->sms * k->blocks_per_sm, g, err, sizeof err) !=
      ATTN_OK)
    return attn_fail(rt, ATTN_EUNSUPPORTED, "%s", err);
  memset(a, 0, sizeof *a);
  a->q = q;
  a->k = kk;
  a->v = v;
  a->o = o;
  a->consts = (void *)(uintptr_t)k->consts;
  a->batch = p->batch;
  a->heads = p->heads;
  a->heads_kv = p->heads_kv;
  a->n = p->n;
  a->n_kv = p->n_kv;
  a->scale = p->scale;
  a->grid_items = (int)(g->items < 0x7fffffff ? g->items : 0x7fffffff);
  /* the score modifiers' values; the kernel applies those its spec switches on */
  a->window = p->window;
  /* a windowed decode launched packed (n = 1: every row is the query at n_kv - 1, not rows of consecutive positions)
   * is told so by the window's sign (templates/flash.cu's FA_WPACK) */
  if (packed && k->spec.window && p->window > 0) a->window = -p->window;
  a->softcap = p->softcap;
  a->alibi = (const float *)(uintptr_t)k->alibi;
  if (k->spec.alibi && !k->alibi)
    return attn_fail(rt, ATTN_EINVAL, "%s: the plan's ALiBi slopes are not on the device", what);
  return ATTN_OK;
}

/* What queue(user, stream) queues on stream s, waited for; ms: between two CUDA events recorded on s around it. */
static int time_queued(attn_runtime *rt, attn_cuda *c, CUstream s, int (*queue)(void *user, void *stream),
                       void *user, const char *what, double *ms) {
  CUevent ev[2] = {NULL, NULL};
  CUresult r = 0;
  int rc = ATTN_OK;
  if (ms && ((r = c->cuEventCreate(&ev[0], 0)) != 0 || (r = c->cuEventCreate(&ev[1], 0)) != 0 ||
             (r = c->cuEventRecord(ev[0], s)) != 0)) {
    rc = attn_fail(rt, ATTN_ERUNTIME, "CUDA events: %s", cu_err(c, r));
    goto done;
  }
  rc = queue(user, s);
  if (rc != ATTN_OK) goto done;
  if (ms && (r = c->cuEventRecord(ev[1], s)) != 0) {
    rc = attn_fail(rt, ATTN_ERUNTIME, "cuEventRecord: %s", cu_err(c, r));
    goto done;
  }
  if ((r = c->cuStreamSynchronize(s)) != 0) {
    rc = attn_fail(rt, ATTN_ERUNTIME, "%s failed: %s", what, cu_err(c, r));
    goto done;
  }
  if (ms) {
    float t = 0;
    if ((r = c->cuEventElapsedTime(&t, ev[0], ev[1])) != 0) {
      rc = attn_fail(rt, ATTN_ERUNTIME, "cuEventElapsedTime: %s", cu_err(c, r));
      goto done;
    }
    *ms = t;
  }
done:
  if (ev[0]) c->cuEventDestroy_v2(ev[0]);
  if (ev[1]) c->cuEventDestroy_v2(ev[1]);
  return rc;
}

int attn_cuda_time_queued(attn_runtime *rt, void *stream, int (*queue)(void *user, void *stream), void *user,
                          const char *what, double *ms) {
  if (!rt || !rt->cuda) return attn_fail(rt, ATTN_ENODEV, "no CUDA device open");
  const int rc = make_current(rt, rt->cuda);
  return rc != ATTN_OK ? rc : time_queued(rt, rt->cuda, (CUstream)stream, queue, user, what, ms);
}

/* run_sync's launch, queued by time_queued */
typedef struct fwd_queue {
  attn_runtime *rt;
  const attn_cuda_kernel *k;
  const attn_cuda_geom *g;
  attn_cuda_kargs *a;
} fwd_queue;
static int queue_forward(void *user, void *stream) {
  const fwd_queue *f = user;
  return launch_forward(f->rt, f->k, f->g, f->a, (CUstream)stream);
}

/* One launch on stream s, waited for: attn_execute's, and the tuner's with I/O counters and event timing. */
static int run_sync(attn_runtime *rt, const attn_cuda_kernel *k, const attn_problem *p, CUstream s, const void *q,
                    const void *kk, const void *v, void *o, float *lse, attn_io *io, double *ms, const char *what) {
  attn_cuda *c = k->cu;
  attn_cuda_kargs a;
  attn_cuda_geom g;
  int rc = prepare(rt, k, p, q, kk, v, o, what, &a, &g);
  if (rc != ATTN_OK) return rc;
  a.lse = lse;
  CUdeviceptr scratch = 0, counters = 0;
  CUresult r = 0;
  /* Scratch per call: a plan may run in several threads at once (smallcache and split-KV flash need it). */
  if (g.scratch > 0 && (r = c->cuMemAlloc_v2(&scratch, (size_t)g.scratch)) != 0) {
    rc = attn_fail(rt, ATTN_ENOMEM, "%lld bytes of device scratch: %s", g.scratch, cu_err(c, r));
    goto done;
  }
  a.scratch = (void *)(uintptr_t)scratch;
  if (io) {
    if ((r = c->cuMemAlloc_v2(&counters, 2 * sizeof(unsigned long long))) != 0 ||
        (r = c->cuMemsetD8_v2(counters, 0, 2 * sizeof(unsigned long long))) != 0) {
      rc = attn_fail(rt, ATTN_ERUNTIME, "I/O counters: %s", cu_err(c, r));
      goto done;
    }
    a.io = (unsigned long long *)(uintptr_t)counters;
  }
  fwd_queue f = {rt, k, &g, &a};
  rc = time_queued(rt, c, s, queue_forward, &f, "attn_kernel", ms);
  if (rc != ATTN_OK) goto done;
  if (io) {
    unsigned long long h[2];
    if ((r = c->cuMemcpyDtoH_v2(h, counters, sizeof h)) != 0) {
      rc = attn_fail(rt, ATTN_ERUNTIME, "reading the I/O counters: %s", cu_err(c, r));
      goto done;
    }
    io->reads = h[0];
    io->writes = h[1];
  }
done:
  if (scratch) c->cuMemFree_v2(scratch);
  if (counters) c->cuMemFree_v2(counters);
  return rc;
}

int attn_cuda_run(attn_runtime *rt, const attn_cuda_kernel *k, const attn_problem *p, const void *q, const void *kk,
                  const void *v, void *o, attn_io *io, double *ms) {
  return run_sync(rt, k, p, NULL, q, kk, v, o, NULL, io, ms, "attn_execute");
}

int attn_cuda_run_lse(attn_runtime *rt, const attn_cuda_kernel *k, const attn_problem *p, const void *q,
                      const void *kk, const void *v, void *o, float *lse) {
  if (k->spec.algo != ATTN_ALGO_FLASH || k->backward)
    return attn_fail(rt, ATTN_EUNSUPPORTED, "attn_execute_lse: only CUDA flash kernels write lse (this plan is %s)",
                     k->backward ? "a backward" : attn_algo_name(k->spec.algo));
  return run_sync(rt, k, p, NULL, q, kk, v, o, lse, NULL, NULL, "attn_execute_lse");
}

int attn_cuda_launch(attn_runtime *rt, attn_cuda_kernel *k, const attn_problem *p, void *stream, const void *q,
                     const void *kk, const void *v, void *o) {
  attn_cuda *c = k->cu;
  attn_cuda_kargs a;
  attn_cuda_geom g;
  int rc = prepare(rt, k, p, q, kk, v, o, "attn_execute_async", &a, &g);
  if (rc != ATTN_OK) return rc;
  CUstream s = stream;
  /* without stream-ordered allocation, scratch freed after the launch must wait for it */
  if (g.scratch > 0 && !c->pools) return run_sync(rt, k, p, s, q, kk, v, o, NULL, NULL, NULL, "attn_execute_async");
  CUdeviceptr scratch = 0;
  CUresult r = 0;
  /* Scratch per launch (smallcache's, split-KV's parts), allocated and freed in the stream's order: a plan may be
   * queued on several streams at once, and the memory is reused only after this launch has finished with it. */
  if (g.scratch > 0 && (r = c->cuMemAllocAsync(&scratch, (size_t)g.scratch, s)) != 0)
    return attn_fail(rt, ATTN_ENOMEM, "%lld bytes of device scratch: cuMemAllocAsync: %s", g.scratch, cu_err(c, r));
  a.scratch = (void *)(uintptr_t)scratch;
  atomic_store_explicit(&k->queued, 1, memory_order_relaxed);
  rc = launch_forward(rt, k, &g, &a, s);
  if (scratch && (r = c->cuMemFreeAsync(scratch, s)) != 0 && rc == ATTN_OK)
    rc = attn_fail(rt, ATTN_ERUNTIME, "freeing device scratch: cuMemFreeAsync: %s", cu_err(c, r));
  return rc;
}

/* The backward (templates/flash_bwd.cu): attn_bwd_pre writes delta = rowsum(dO∘O) into scratch allocated per call,
 * then attn_kernel computes dK, dV and dQ; waited for. dq=atomic: the scratch also holds the fp32 dQ, which
 * attn_bwd_pre zeroes, attn_kernel's atomics sum and attn_bwd_post rounds into dq. */
int attn_cuda_run_backward(attn_runtime *rt, const attn_cuda_kernel *k, const attn_problem *p, const void *q,
                           const void *kk, const void *v, const void *o, const float *lse, const void *dout, void *dq,
                           void *dk, void *dv) {
  return attn_cuda_run_backward_timed(rt, k, p, q, kk, v, o, lse, dout, dq, dk, dv, NULL);
}

/* attn_cuda_run_backward_timed's launches, queued by time_queued */
typedef struct bwd_queue {
  attn_runtime *rt;
  const attn_cuda_kernel *k;
  const attn_cuda_bwd_geom *g;
  attn_cuda_bwd_kargs *a;
} bwd_queue;
static int queue_backward(void *user, void *stream) {
  const bwd_queue *b = user;
  attn_cuda *c = b->k->cu;
  const attn_cuda_bwd_geom *g = b->g;
  CUstream s = stream;
  void *params[] = {b->a};
  CUresult r;
  int rc = ATTN_OK;
  if ((r = c->cuLaunchKernel(b->k->pre, g->pre_grid, 1, 1, g->block, 1, 1, 0, s, params, NULL)) != 0)
    rc = attn_fail(b->rt, ATTN_ERUNTIME, "launching attn_bwd_pre (grid %u, block %u): %s", g->pre_grid, g->block,
                   cu_err(c, r));
  else if ((r = c->cuLaunchKernel(b->k->fn, g->grid, 1, 1, g->block, 1, 1, (unsigned)g->smem, s, params, NULL)) != 0)
    rc = attn_fail(b->rt, ATTN_ERUNTIME, "launching the backward's attn_kernel (grid %u, block %u, %lld bytes of "
                   "shared memory): %s", g->grid, g->block, g->smem, cu_err(c, r));
  else if (g->post_grid &&
           (r = c->cuLaunchKernel(b->k->post, g->post_grid, 1, 1, g->block, 1, 1, 0, s, params, NULL)) != 0)
    rc = attn_fail(b->rt, ATTN_ERUNTIME, "launching attn_bwd_post (grid %u, block %u): %s", g->post_grid, g->block,
                   cu_err(c, r));
  /* a launch refused: what was queued before it still reads delta, which the caller frees next */
  if (rc != ATTN_OK) c->cuStreamSynchronize(s);
  return rc;
}

int attn_cuda_run_backward_timed(attn_runtime *rt, const attn_cuda_kernel *k, const attn_problem *p, const void *q,
                                 const void *kk, const void *v, const void *o, const float *lse, const void *dout,
                                 void *dq, void *dk, void *dv, double *ms) {
  attn_cuda *c = k->cu;
  if (!k->backward) return attn_fail(rt, ATTN_EINVAL, "attn_execute_backward: not a backward kernel");
  /* the backward loads rows of whole 16-byte chunks as 16-byte vectors */
  const void *ptrs[5] = {q, kk, v, o, dout};
  for (int i = 0; i < 5; i++)
    if ((uintptr_t)ptrs[i] % 16)
      return attn_fail(rt, ATTN_EINVAL, "attn_execute_backward: %s = %p is not 16-byte aligned (the CUDA backward "
                       "loads 16-byte vectors)", i == 4 ? "dout" : (const char *[]){"q", "k", "v", "o"}[i], ptrs[i]);
  int rc = make_current(rt, c);
  if (rc != ATTN_OK) return rc;
  char err[256];
  attn_cuda_bwd_geom g;
  if (attn_cuda_backward_geometry(&k->spec, p->batch, p->heads, p->heads_kv, p->n, p->n_kv, &g, err, sizeof err) !=
      ATTN_OK)
    return attn_fail(rt, ATTN_EUNSUPPORTED, "attn_execute_backward: %s", err);
  CUdeviceptr delta = 0;
  CUresult r = c->cuMemAlloc_v2(&delta, (size_t)g.scratch);
  if (r != 0)
    return attn_fail(rt, ATTN_ENOMEM, "attn_execute_backward: %lld bytes of device scratch: %s", g.scratch,
                     cu_err(c, r));
  attn_cuda_bwd_kargs a;
  memset(&a, 0, sizeof a);
  a.q = q, a.k = kk, a.v = v, a.o = o, a.dout = dout, a.lse = lse;
  a.dq = dq, a.dk = dk, a.dv = dv;
  a.delta = (float *)(uintptr_t)delta;
  a.batch = p->batch, a.heads = p->heads, a.heads_kv = p->heads_kv, a.n = p->n, a.n_kv = p->n_kv;
  a.scale = p->scale;
  a.items_kv = g.items_kv, a.items_q = g.items_q;
  /* the legacy default stream, as attn_execute's; timed: its launches (pre, kernel, post) between two events */
  bwd_queue b = {rt, k, &g, &a};
  rc = time_queued(rt, c, NULL, queue_backward, &b, "the backward", ms);
  c->cuMemFree_v2(delta);
  return rc;
}

/* ---- device memory for the tuner, bench and tests. */

int attn_cuda_alloc(attn_runtime *rt, size_t bytes, void **dptr) {
  *dptr = NULL;
  if (!rt || !rt->cuda) return attn_fail(rt, ATTN_ENODEV, "no CUDA device open");
  attn_cuda *c = rt->cuda;
  int rc = make_current(rt, c);
  if (rc != ATTN_OK) return rc;
  CUdeviceptr p = 0;
  CUresult r = c->cuMemAlloc_v2(&p, bytes ? bytes : 1);
  if (r != 0) return attn_fail(rt, ATTN_ENOMEM, "%zu bytes of device memory: %s", bytes, cu_err(c, r));
  *dptr = (void *)(uintptr_t)p;
  return ATTN_OK;
}

void attn_cuda_free(attn_runtime *rt, void *dptr) {
  if (!rt || !rt->cuda || !dptr) return;
  rt->cuda->cuCtxSetCurrent(rt->cuda->ctx);
  rt->cuda->cuMemFree_v2((CUdeviceptr)(uintptr_t)dptr);
}

int attn_cuda_copy(attn_runtime *rt, void *dst, const void *src, size_t bytes, int to_device) {
  if (!rt || !rt->cuda) return attn_fail(rt, ATTN_ENODEV, "no CUDA device open");
  attn_cuda *c = rt->cuda;
  int rc = make_current(rt, c);
  if (rc != ATTN_OK) return rc;
  CUresult r = to_device ? c->cuMemcpyHtoD_v2((CUdeviceptr)(uintptr_t)dst, src, bytes)
                         : c->cuMemcpyDtoH_v2(dst, (CUdeviceptr)(uintptr_t)src, bytes);
  if (r != 0) return attn_fail(rt, ATTN_ERUNTIME, "copying %zu bytes %s the device: %s", bytes,
                               to_device ? "to" : "from", cu_err(c, r));
  return ATTN_OK;
}

/* ---- serving layouts' tables (runtime/cuda_serve.c): cu_seqlens, the block table and the lengths are host arrays
 * that the caller may reuse as soon as attn_execute_varlen(_async) or attn_execute_paged(_async) returns.
 * cuMemcpyHtoDAsync does not promise that: the driver API's "API synchronization behavior" says a transfer between
 * device memory and pageable host memory "might be synchronous" and that the driver "may synchronize with the stream"
 * to stage it, and a copy from pinned memory is fully asynchronous (the caller's array, if pinned, is read when the
 * stream gets there). So the arrays are copied on the host, before the call returns, into a staging block of the
 * plan: pinned host memory and device memory of the same size, the pinned copy queued to the device on the stream,
 * then the launch, then an event. A block is reused only once its event has passed (cuEventQuery, which does not
 * wait): by then the copy has read the pinned memory and the kernel the device memory. Nothing is allocated per call
 * once a plan's blocks exist, on any driver (no memory pools needed), and a plan queued on several streams or threads
 * at once takes a block per call in flight. Only when every block is in flight does a call wait, for the oldest. */
#define CU_EVENT_DISABLE_TIMING 2
#define CU_ERROR_NOT_READY 600
#define TABLE_BLOCKS 8
#define TABLE_MIN_BYTES 4096

typedef struct table_block {
  void *host;            /* pinned (cuMemHostAlloc) */
  CUdeviceptr dev;
  size_t bytes;          /* of each; 0: not allocated yet */
  CUevent done;          /* recorded after the block's last launch; NULL: never used */
  int busy;              /* taken by a call between its choice and its event's record */
  unsigned long long used; /* the call that last took it (the oldest in flight is waited for) */
} table_block;

struct attn_cuda_tables {
  attn_cuda *cu;
  pthread_mutex_t lock;
  unsigned long long calls;
  table_block block[TABLE_BLOCKS];
  CUresult (*memcpy_async)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*host_alloc)(void **, size_t, unsigned);
  CUresult (*host_free)(void *);
  CUresult (*event_query)(CUevent);
};

int attn_cuda_tables_new(attn_runtime *rt, attn_cuda_tables **out) {
  *out = NULL;
  attn_cuda *c = rt->cuda;
  if (!c) return attn_fail(rt, ATTN_ENODEV, "no CUDA device open");
  attn_cuda_tables *t = calloc(1, sizeof *t);
  if (!t) return attn_fail(rt, ATTN_ENOMEM, "out of memory for the serving tables' staging");
  t->cu = c;
  /* entry points of every CUDA 11 driver, looked up here: only the serving layouts use them */
  *(void **)&t->memcpy_async = dlsym(c->lib, "cuMemcpyHtoDAsync_v2");
  *(void **)&t->host_alloc = dlsym(c->lib, "cuMemHostAlloc");
  *(void **)&t->host_free = dlsym(c->lib, "cuMemFreeHost");
  *(void **)&t->event_query = dlsym(c->lib, "cuEventQuery");
  const char *missing = !t->memcpy_async ? "cuMemcpyHtoDAsync_v2" : !t->host_alloc ? "cuMemHostAlloc"
                      : !t->host_free ? "cuMemFreeHost" : !t->event_query ? "cuEventQuery" : NULL;
  if (missing || pthread_mutex_init(&t->lock, NULL) != 0) {
    free(t);
    return missing ? attn_fail(rt, ATTN_ERUNTIME, "the CUDA driver lacks %s (a driver for CUDA 11 or later is needed)",
                               missing)
                   : attn_fail(rt, ATTN_ERUNTIME, "the serving tables' lock could not be made");
  }
  *out = t;
  return ATTN_OK;
}

static void block_release(attn_cuda_tables *t, table_block *b) {
  attn_cuda *c = t->cu;
  if (b->done) c->cuEventSynchronize(b->done); /* its copy and launch may still be queued */
  if (b->host) t->host_free(b->host);
  if (b->dev) c->cuMemFree_v2(b->dev);
  if (b->done) c->cuEventDestroy_v2(b->done);
  memset(b, 0, sizeof *b);
}

void attn_cuda_tables_free(attn_cuda_tables *t) {
  if (!t) return;
  t->cu->cuCtxSetCurrent(t->cu->ctx);
  for (int i = 0; i < TABLE_BLOCKS; i++) block_release(t, &t->block[i]);
  pthread_mutex_destroy(&t->lock);
  free(t);
}

/* A block of at least `bytes` taken for this call (busy): one whose event has passed, else an unused slot, else the
 * oldest in flight, waited for; its memory (re)allocated where it is smaller. */
static int block_take(attn_runtime *rt, attn_cuda_tables *t, size_t bytes, table_block **out) {
  attn_cuda *c = t->cu;
  table_block *b = NULL;
  int passed = 0;
  for (;;) {
    pthread_mutex_lock(&t->lock);
    table_block *fits = NULL, *idle = NULL, *oldest = NULL;
    for (int i = 0; i < TABLE_BLOCKS && !fits; i++) {
      table_block *x = &t->block[i];
      if (x->busy) continue;
      const int done = !x->done || t->event_query(x->done) != CU_ERROR_NOT_READY;
      if (done && x->bytes >= bytes) fits = x;
      else if (done && (!idle || x->bytes > idle->bytes)) idle = x;
      else if (!done && (!oldest || x->used < oldest->used)) oldest = x;
    }
    b = fits ? fits : idle ? idle : oldest;
    passed = b && b != oldest;
    if (b) {
      b->busy = 1;
      b->used = ++t->calls;
    }
    pthread_mutex_unlock(&t->lock);
    if (b) break;
    sched_yield(); /* every block taken by calls between their choice and their launch: a moment */
  }
  CUresult r;
  if (!passed && (r = c->cuEventSynchronize(b->done)) != 0) {
    b->busy = 0;
    return attn_fail(rt, ATTN_ERUNTIME, "waiting for an earlier serving launch's tables: %s", cu_err(c, r));
  }
  if (b->bytes < bytes) {
    size_t want = b->bytes * 2 > bytes ? b->bytes * 2 : bytes;
    if (want < TABLE_MIN_BYTES) want = TABLE_MIN_BYTES;
    if (b->host) t->host_free(b->host);
    if (b->dev) c->cuMemFree_v2(b->dev);
    b->host = NULL, b->dev = 0, b->bytes = 0;
    if ((r = t->host_alloc(&b->host, want, 0)) != 0) {
      b->host = NULL, b->busy = 0;
      return attn_fail(rt, ATTN_ENOMEM, "%zu bytes of pinned host memory for the serving tables: %s", want,
                       cu_err(c, r));
    }
    if ((r = c->cuMemAlloc_v2(&b->dev, want)) != 0) {
      t->host_free(b->host);
      b->host = NULL, b->dev = 0, b->busy = 0;
      return attn_fail(rt, ATTN_ENOMEM, "%zu bytes of device memory for the serving tables: %s", want, cu_err(c, r));
    }
    b->bytes = want;
  }
  if (!b->done && (r = c->cuEventCreate(&b->done, CU_EVENT_DISABLE_TIMING)) != 0) {
    b->done = NULL, b->busy = 0;
    return attn_fail(rt, ATTN_ERUNTIME, "cuEventCreate: %s", cu_err(c, r));
  }
  *out = b;
  return ATTN_OK;
}

int attn_cuda_launch_layout(attn_runtime *rt, attn_cuda_tables *t, attn_cuda_kernel *k, const attn_problem *p,
                            void *stream, int sync, const void *q, const void *kk, const void *v, void *o,
                            const attn_cuda_kargs *lay, const int *const *parts, const size_t *count,
                            const size_t *fields, int nparts, const char *what) {
  attn_cuda *c = k->cu;
  attn_cuda_kargs a;
  attn_cuda_geom g;
  int rc = prepare(rt, k, p, q, kk, v, o, what, &a, &g);
  if (rc != ATTN_OK) return rc;
  a.max_pages = lay->max_pages, a.page_size = lay->page_size;
  size_t total = 0;
  for (int i = 0; i < nparts; i++) total += count[i];
  table_block *b = NULL;
  if ((rc = block_take(rt, t, total * sizeof(int), &b)) != ATTN_OK) return rc;
  /* the caller's arrays read here, and only here */
  size_t off = 0;
  for (int i = 0; i < nparts; i++) {
    memcpy((int *)b->host + off, parts[i], count[i] * sizeof(int));
    const int *dev = (const int *)(uintptr_t)(b->dev + off * sizeof(int));
    memcpy((char *)&a + fields[i], &dev, sizeof dev);
    off += count[i];
  }
  CUstream s = stream;
  CUresult r;
  if ((r = t->memcpy_async(b->dev, b->host, total * sizeof(int), s)) != 0)
    rc = attn_fail(rt, ATTN_ERUNTIME, "%s: copying the tables to the device: cuMemcpyHtoDAsync: %s", what,
                   cu_err(c, r));
  if (rc == ATTN_OK) {
    atomic_store_explicit(&k->queued, 1, memory_order_relaxed);
    rc = launch(rt, c, k->fn, g.grid, g.block, (unsigned)k->smem, &a, s, "attn_kernel");
  }
  /* recorded whatever happened: a queued copy still reads the block (an event on a failed stream passes) */
  if ((r = c->cuEventRecord(b->done, s)) != 0) {
    if (rc == ATTN_OK) rc = attn_fail(rt, ATTN_ERUNTIME, "%s: cuEventRecord: %s", what, cu_err(c, r));
    c->cuStreamSynchronize(s); /* the block is unusable until its copy is done: wait here rather than guess */
  }
  pthread_mutex_lock(&t->lock);
  b->busy = 0;
  pthread_mutex_unlock(&t->lock);
  if (rc == ATTN_OK && sync && (r = c->cuStreamSynchronize(s)) != 0)
    rc = attn_fail(rt, ATTN_ERUNTIME, "%s: attn_kernel failed: %s", what, cu_err(c, r));
  return rc;
}
