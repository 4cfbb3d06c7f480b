/* nvrtc.c: NVRTC, loaded with dlopen on first use, so that libattn builds and starts without the CUDA toolkit.
 * Compiles a generated CUDA source to a cubin for one architecture and keeps ptxas's resource report in the log, or
 * to PTX (the instruction stream the performance model's counts are checked against). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

/* The few NVRTC entry points used, declared here so no toolkit header is needed to build. */
typedef struct _nvrtcProgram *nvrtc_prog;
typedef int (*nvrtc_create_fn)(nvrtc_prog *, const char *, const char *, int, const char *const *, const char *const *);
typedef int (*nvrtc_compile_fn)(nvrtc_prog, int, const char *const *);
typedef int (*nvrtc_size_fn)(nvrtc_prog, size_t *);
typedef int (*nvrtc_get_fn)(nvrtc_prog, char *);
typedef int (*nvrtc_destroy_fn)(nvrtc_prog *);
typedef const char *(*nvrtc_errstr_fn)(int);
typedef int (*nvrtc_version_fn)(int *, int *);

static struct {
  void *handle;
  char why[512];
  nvrtc_create_fn create;
  nvrtc_compile_fn compile;
  nvrtc_size_fn log_size, cubin_size, ptx_size;
  nvrtc_get_fn log, cubin, ptx;
  nvrtc_destroy_fn destroy;
  nvrtc_errstr_fn errstr;
  nvrtc_version_fn version;
} nv;
static pthread_once_t nv_once = PTHREAD_ONCE_INIT;

static void nv_load(void) {
  /* $ATTN_NVRTC names the library outright; otherwise the sonames of the toolkits that can target sm_80..sm_90. */
  const char *env = getenv("ATTN_NVRTC");
  const char *names[] = {env && *env ? env : NULL, "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2",
                         "libnvrtc.so", NULL};
  const char *last = "not found";
  for (int i = 0; i < 5 && !nv.handle; i++) {
    if (!names[i]) continue;
    nv.handle = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!nv.handle) {
      const char *e = dlerror();
      if (e) last = e;
    }
    if (env && *env && i == 0 && !nv.handle) break; /* an explicit choice is not second-guessed */
  }
  if (!nv.handle) {
    snprintf(nv.why, sizeof nv.why, "NVRTC is not available (%s); install the CUDA toolkit or set ATTN_NVRTC", last);
    return;
  }
  nv.create = (nvrtc_create_fn)dlsym(nv.handle, "nvrtcCreateProgram");
  nv.compile = (nvrtc_compile_fn)dlsym(nv.handle, "nvrtcCompileProgram");
  nv.log_size = (nvrtc_size_fn)dlsym(nv.handle, "nvrtcGetProgramLogSize");
  nv.log = (nvrtc_get_fn)dlsym(nv.handle, "nvrtcGetProgramLog");
  nv.cubin_size = (nvrtc_size_fn)dlsym(nv.handle, "nvrtcGetCUBINSize");
  nv.cubin = (nvrtc_get_fn)dlsym(nv.handle, "nvrtcGetCUBIN");
  nv.ptx_size = (nvrtc_size_fn)dlsym(nv.handle, "nvrtcGetPTXSize"); /* optional: only attn_nvrtc_ptx needs them */
  nv.ptx = (nvrtc_get_fn)dlsym(nv.handle, "nvrtcGetPTX");
  nv.destroy = (nvrtc_destroy_fn)dlsym(nv.handle, "nvrtcDestroyProgram");
  nv.errstr = (nvrtc_errstr_fn)dlsym(nv.handle, "nvrtcGetErrorString");
  nv.version = (nvrtc_version_fn)dlsym(nv.handle, "nvrtcVersion");
  if (!nv.create || !nv.compile || !nv.log_size || !nv.log || !nv.cubin_size || !nv.cubin || !nv.destroy ||
      !nv.errstr || !nv.version) {
    snprintf(nv.why, sizeof nv.why, "the NVRTC library found lacks nvrtcGetCUBIN (CUDA 11.1 or later is needed)");
    dlclose(nv.handle);
    nv.handle = NULL;
  }
}

int attn_nvrtc_version(int *major, int *minor, char *why, size_t len) {
  pthread_once(&nv_once, nv_load);
  if (!nv.handle) {
    if (why && len) snprintf(why, len, "%s", nv.why);
    return ATTN_ENODEV;
  }
  if (nv.version(major, minor) != 0) {
    if (why && len) snprintf(why, len, "nvrtcVersion failed");
    return ATTN_ENODEV;
  }
  return ATTN_OK;
}

static char *dup_str(const char *s) {
  size_t l = strlen(s) + 1;
  char *p = malloc(l);
  if (p) memcpy(p, s, l);
  return p;
}

/* Creates and compiles one program. ATTN_OK with *prog to be destroyed by the caller, or ATTN_ECOMPILE with nothing
 * left to destroy; *log is NVRTC's log either way (malloc'd; on failure never empty: the reason at least). */
static int nv_compile(const char *src, const char *name, const char *const *opts, int nopts, nvrtc_prog *prog,
                      char **log) {
  int r = nv.create(prog, src, name, 0, NULL, NULL);
  if (r != 0) {
    char msg[256];
    snprintf(msg, sizeof msg, "nvrtcCreateProgram: %s", nv.errstr(r));
    *log = dup_str(msg);
    *prog = NULL;
    return ATTN_ECOMPILE;
  }
  const int cr = nv.compile(*prog, nopts, opts);
  size_t ls = 0;
  if (nv.log_size(*prog, &ls) == 0 && ls > 0 && (*log = malloc(ls + 1))) {
    if (nv.log(*prog, *log) == 0)
      (*log)[ls] = '\0';
    else
      (*log)[0] = '\0';
  }
  if (cr == 0) return ATTN_OK;
  if (!*log || !(*log)[0]) {
    free(*log);
    *log = dup_str(nv.errstr(cr));
  }
  nv.destroy(prog);
  return ATTN_ECOMPILE;
}

/* The options of every compile, cubin or PTX: the PTX the tests' interpreter runs (attn_nvrtc_ptx) is what ptxas
 * turns into the cubin users run only while both share them (tests/cuda_compile.c's ptx mode checks it). */
#define NV_OPTS "--std=c++17", "--use_fast_math", "--device-as-default-execution-space"

/* A program's PTX (NUL-terminated), or NULL. */
static char *program_ptx(nvrtc_prog prog) {
  size_t ps = 0;
  char *ptx = NULL;
  if (!nv.ptx_size || !nv.ptx || nv.ptx_size(prog, &ps) != 0 || ps == 0 || !(ptx = malloc(ps + 1))) return NULL;
  if (nv.ptx(prog, ptx) != 0) {
    free(ptx);
    return NULL;
  }
  ptx[ps] = '\0';
  return ptx;
}

/* The cubin compile: for arch (sm_XX), with ptxas's resource report (-v) in the log; the cubin and, when ptx is not
 * NULL, the PTX NVRTC generated on the way. */
static int cubin_compile(const char *src, const char *name, const char *arch, void **cubin, size_t *len, char **ptx,
                         char **log) {
  *cubin = NULL;
  *len = 0;
  *log = NULL;
  if (ptx) *ptx = NULL;
  pthread_once(&nv_once, nv_load);
  if (!nv.handle) {
    *log = dup_str(nv.why);
    return ATTN_ENODEV;
  }
  char archopt[64];
  snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
  /* -v makes ptxas report registers, spills and shared memory into the log, which the tuner and tests read. */
  const char *opts[] = {archopt, "--ptxas-options=-v", NV_OPTS};
  nvrtc_prog prog;
  if (nv_compile(src, name, opts, (int)(sizeof opts / sizeof opts[0]), &prog, log) != ATTN_OK) return ATTN_ECOMPILE;
  int rc = ATTN_OK;
  size_t cs = 0;
  if (nv.cubin_size(prog, &cs) != 0 || cs == 0 || !(*cubin = malloc(cs)) || nv.cubin(prog, *cubin) != 0) {
    free(*cubin);
    *cubin = NULL;
    rc = ATTN_ECOMPILE;
  } else {
    *len = cs;
  }
  if (rc == ATTN_OK && ptx && !(*ptx = program_ptx(prog))) rc = ATTN_EUNSUPPORTED;
  nv.destroy(&prog);
  return rc;
}

int attn_nvrtc_compile(const char *src, const char *name, const char *arch, void **cubin, size_t *len, char **log) {
  return cubin_compile(src, name, arch, cubin, len, NULL, log);
}

int attn_nvrtc_cubin_ptx(const char *src, const char *name, const char *arch, char **ptx, char **log) {
  void *cubin = NULL;
  size_t len = 0;
  const int rc = cubin_compile(src, name, arch, &cubin, &len, ptx, log);
  free(cubin);
  return rc;
}

int attn_nvrtc_ptx(const char *src, const char *name, const char *arch, char **ptx, char **log) {
  *ptx = NULL;
  *log = NULL;
  pthread_once(&nv_once, nv_load);
  if (!nv.handle || !nv.ptx_size || !nv.ptx) {
    *log = dup_str(nv.handle ? "the NVRTC library found lacks nvrtcGetPTX" : nv.why);
    return ATTN_ENODEV;
  }
  /* the virtual architecture: a real one (sm_XX) makes NVRTC go on to SASS, and not every version keeps the PTX */
  char archopt[64];
  snprintf(archopt, sizeof archopt, "--gpu-architecture=compute_%s", strncmp(arch, "sm_", 3) == 0 ? arch + 3 : arch);
  const char *opts[] = {archopt, NV_OPTS};
  nvrtc_prog prog;
  if (nv_compile(src, name, opts, (int)(sizeof opts / sizeof opts[0]), &prog, log) != ATTN_OK) return ATTN_ECOMPILE;
  *ptx = program_ptx(prog);
  nv.destroy(&prog);
  return *ptx ? ATTN_OK : ATTN_ECOMPILE;
}

/* The integer written just before pos in the same line ("32768 bytes smem" -> 32768), or 0. */
static long number_before(const char *line, const char *pos) {
  const char *b = pos;
  while (b > line && b[-1] == ' ') b--;
  const char *e = b;
  while (b > line && b[-1] >= '0' && b[-1] <= '9') b--;
  return b < e ? atol(b) : 0;
}

/* ptxas -v, per entry after "Compiling entry function 'name' for 'sm_80'":
 *   "Function properties for name" / "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"
 *   "Used 96 registers, used 1 barriers, 32768 bytes smem, 400 bytes cmem[0]"
 * then the same properties for each device function it calls that was not inlined ("Function properties for
 * _Z6fa_fix..."), which are that function's, not the entry's. */
int attn_nvrtc_resources(const char *log, const char *entry, attn_cuda_resources *out) {
  memset(out, 0, sizeof *out);
  out->registers = -1;
  if (!log || !entry) return -1;
  char want[160];
  snprintf(want, sizeof want, "Compiling entry function '%s'", entry);
  const char *at = strstr(log, want);
  if (!at) return -1;
  const char *end = strstr(at + strlen(want), "Compiling entry function");
  char line[512];
  const size_t el = strlen(entry);
  /* the stack and spill line belongs to the function the last "Function properties for" line names: a device
   * function the entry calls (not inlined) reports its own after the entry's, and must not replace them */
  int own = 0;
  for (const char *p = at; *p && (!end || p < end);) {
    size_t l = strcspn(p, "\n");
    snprintf(line, sizeof line, "%.*s", (int)(l < sizeof line ? l : sizeof line - 1), p);
    const char *fp = strstr(line, "Function properties for ");
    if (fp) {
      const char *name = fp + strlen("Function properties for ");
      own = strncmp(name, entry, el) == 0 && (name[el] == '\0' || name[el] == ' ' || name[el] == '\r');
    }
    const char *u = strstr(line, "Used ");
    if (u) sscanf(u, "Used %d registers", &out->registers);
    const char *f;
    if ((f = strstr(line, " bytes smem"))) out->smem_static = number_before(line, f);
    if (own && (f = strstr(line, " bytes stack frame"))) out->stack = number_before(line, f);
    if (own && (f = strstr(line, " bytes spill stores"))) out->spill_stores = number_before(line, f);
    if (own && (f = strstr(line, " bytes spill loads"))) out->spill_loads = number_before(line, f);
    p += l;
    if (*p) p++;
  }
  return out->registers >= 0 ? 0 : -1;
}
