/* bench_python.c: the PyTorch side of bench's comparisons (bench_bwd.c, bench_serve.c), one way for both: the
 * embedded script written to a private temporary file after the import of torch both need, run by python3, its
 * output handed over line by line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bench.h"

/* Every script's start: torch imported, or one line saying why not ("skip torch not importable: ..."). */
static const char preamble[] =
    "import sys, time, statistics\n"
    "try:\n"
    "    import torch, torch.nn.functional as F\n"
    "except Exception as e:\n"
    "    print('skip torch not importable: %s' % type(e).__name__); sys.exit(0)\n";

int attn_bench_python(const char *script, const char *tag, const char *args, attn_bench_line_fn line, void *user,
                      int *status) {
  char path[64];
  snprintf(path, sizeof path, "/tmp/attntune-torch-%s-XXXXXX", tag);
  const int fd = mkstemp(path);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f || fputs(preamble, f) < 0 || fputs(script, f) < 0 || fclose(f) != 0) {
    if (fd >= 0) unlink(path);
    return -1;
  }
  const size_t cap = strlen(path) + strlen(args) + 32;
  char *cmd = malloc(cap);
  FILE *pp = NULL;
  if (cmd) {
    snprintf(cmd, cap, "python3 %s %s 2>&1", path, args);
    fflush(stdout);
    pp = popen(cmd, "r");
  }
  char text[512];
  while (pp && fgets(text, sizeof text, pp)) line(user, text);
  *status = pp ? pclose(pp) : -1;
  unlink(path);
  free(cmd);
  return 0;
}
