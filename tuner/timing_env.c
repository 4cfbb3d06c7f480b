/* timing_env.c: one environment for every timing.
 * - GOMP_SPINCOUNT=10000 and OPENBLAS_THREAD_TIMEOUT=4: after a parallel region idle OpenMP workers spin for ~300000
 *   pauses and idle OpenBLAS workers for ~2^28 cycles, on the very cores the next timed run needs; with a competing
 *   process libgomp also throttles its spin to 1000, so the same kernel is timed waking on the scheduler's tick in one
 *   process and spinning in another. Short, fixed spins make every process time the same way (measured at n=1024:
 *   a plan runs 2.7 or 11 ms depending on it, docs/results/cpu.md).
 * - OPENBLAS_CORETYPE: versions of OpenBLAS that do not know this CPU model fall back to the SSE3 "Prescott" kernels
 *   (0.3.21 on Sapphire Rapids: ~35 instead of ~220 GFLOP/s), which would make bench's baseline a straw man. */
#include "timing_env.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef ATTN_HAVE_OPENBLAS
#include <cblas.h>
char *openblas_get_corename(void); /* OpenBLAS extension, declared by some cblas.h versions only */
#endif

static char g_text[256];

const char *attn_timing_env_text(void) {
  static const char *const names[] = {"GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT",
                                      "OPENBLAS_CORETYPE"};
  g_text[0] = '\0';
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const char *v = getenv(names[i]);
    size_t l = strlen(g_text);
    if (v) snprintf(g_text + l, sizeof g_text - l, "%s%s=%.40s", l ? " " : "", names[i], v);
  }
  return g_text;
}

static void add(char *what, size_t len, const char *name, const char *value, const char *note) {
  if (setenv(name, value, 1) != 0) return;
  size_t l = strlen(what);
  snprintf(what + l, len - l, " %s=%s%s", name, value, note ? note : "");
}

void attn_timing_env(const char *who, int quiet) {
  if (getenv("ATTN_TIMING_REEXEC")) return;
  char what[256] = "";
#ifdef ATTN_HAVE_OPENBLAS
  const char *core = openblas_get_corename();
  if (!getenv("OPENBLAS_CORETYPE") && core && !strcmp(core, "Prescott")) {
    __builtin_cpu_init();
    const char *want = __builtin_cpu_supports("avx512f") ? "SkylakeX"
                       : __builtin_cpu_supports("avx2") ? "Haswell"
                                                        : NULL;
    if (want) add(what, sizeof what, "OPENBLAS_CORETYPE", want, " (OpenBLAS chose Prescott)");
  }
#endif
  if (!getenv("OPENBLAS_THREAD_TIMEOUT")) add(what, sizeof what, "OPENBLAS_THREAD_TIMEOUT", "4", NULL);
  if (!getenv("GOMP_SPINCOUNT") && !getenv("OMP_WAIT_POLICY")) add(what, sizeof what, "GOMP_SPINCOUNT", "10000", NULL);
  if (!what[0]) return;
  static char cmdline[65536];
  char *args[512];
  FILE *f = fopen("/proc/self/cmdline", "r");
  if (!f) return;
  size_t len = fread(cmdline, 1, sizeof cmdline - 1, f);
  fclose(f);
  if (len == 0 || len == sizeof cmdline - 1) return;
  cmdline[len] = 0;
  int argc = 0;
  for (size_t i = 0; i < len && argc < 511; i += strlen(cmdline + i) + 1) args[argc++] = cmdline + i;
  args[argc] = NULL;
  if (setenv("ATTN_TIMING_REEXEC", "1", 1) != 0) return;
  if (!quiet) fprintf(stderr, "attntune %s: timing with%s\n", who, what);
  fflush(NULL);
  execv("/proc/self/exe", args);
  fprintf(stderr, "attntune %s: could not run again with%s: %s (timings may differ from other runs)\n", who, what,
          strerror(errno));
}
