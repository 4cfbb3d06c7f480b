/* fake_nvrtc: a stand-in NVRTC (through ATTN_NVRTC) that compiles nothing: each nvrtcCompileProgram appends one line
 * to $FAKE_NVRTC_LOG (one write of O_APPEND: whole lines from parallel compiles) and answers a ptxas report of 96
 * registers and no spills, so that a test counts what `attntune tune --compiled` compiles in no time. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct prog { int compiled; } prog;

static const char report[] = "ptxas info    : Compiling entry function 'attn_kernel' for 'sm_90'\n"
                             "ptxas info    : Function properties for attn_kernel\n"
                             "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
                             "ptxas info    : Used 96 registers, 0 bytes smem, 400 bytes cmem[0]\n";

int nvrtcVersion(int *major, int *minor) {
  *major = 99, *minor = 1; /* a version no real toolkit has: its rows are this test's own */
  return 0;
}

int nvrtcCreateProgram(prog **p, const char *src, const char *name, int n, const char *const *h,
                       const char *const *inc) {
  (void)src, (void)name, (void)n, (void)h, (void)inc;
  *p = calloc(1, sizeof **p);
  return *p ? 0 : 1;
}

int nvrtcCompileProgram(prog *p, int n, const char *const *opts) {
  (void)n, (void)opts;
  p->compiled = 1;
  const char *path = getenv("FAKE_NVRTC_LOG");
  if (path && *path) {
    const int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0) return 1;
    const int ok = write(fd, "compile\n", 8) == 8;
    close(fd);
    if (!ok) return 1;
  }
  return 0;
}

int nvrtcGetProgramLogSize(prog *p, size_t *n) {
  *n = p->compiled ? sizeof report : 1;
  return 0;
}

int nvrtcGetProgramLog(prog *p, char *out) {
  if (p->compiled) memcpy(out, report, sizeof report);
  else out[0] = '\0';
  return 0;
}

int nvrtcGetCUBINSize(prog *p, size_t *n) {
  *n = p->compiled ? 16 : 0;
  return 0;
}

int nvrtcGetCUBIN(prog *p, char *out) {
  (void)p;
  memset(out, 0, 16);
  return 0;
}

int nvrtcDestroyProgram(prog **p) {
  free(*p);
  *p = NULL;
  return 0;
}

const char *nvrtcGetErrorString(int r) { return r ? "fake NVRTC error" : "NVRTC_SUCCESS"; }
