/* main.c: the attntune command line: dispatches a verb to its attn_cmd_* (tuner/cmds.h). `tune` is the default
 * verb, so `attntune --gpu A100 --d 64..256` tunes. */
#include <stdio.h>
#include <string.h>
#include "cmds.h"

const char *attn_tuner_version(void); /* cmd_tune.c, built with the project's version */

typedef int (*verb_fn)(int, char **);

static const struct {
  const char *name;
  verb_fn fn;
  const char *what;
} verbs[] = {
    {"tune", attn_cmd_tune, "tune kernels for a GPU (performance model) or this CPU (measured)"},
    {"show", attn_cmd_show, "best configuration per (device, d, n, dtype, causal)"},
    {"export", attn_cmd_export, "write the database as JSON"},
    {"import", attn_cmd_import, "read rows from JSON"},
    {"merge", attn_cmd_merge, "merge databases into one, keeping the better of two rows"},
    {"gpus", attn_cmd_gpus, "the GPU spec table"},
    {"io", attn_cmd_io, "count a kernel's transfers against the theory"},
    {"bench", attn_cmd_bench, "tuned plan against the baselines"},
};

static void help(FILE *f) {
  fprintf(f, "usage: attntune [VERB] [OPTIONS]   (VERB defaults to tune)\n\n");
  for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++) fprintf(f, "  %-7s %s\n", verbs[i].name, verbs[i].what);
  fprintf(f, "\n  attntune VERB --help for a verb's options; attntune --version\n"
             "  e.g. attntune --gpu cpu --d 64..128 --n 256..2048 --db tuned.db\n"
             "exit status: 0 ok, 2 usage error, 1 anything else\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    help(stderr);
    return 2;
  }
  const char *v = argv[1];
  if (strcmp(v, "--help") == 0 || strcmp(v, "-h") == 0 || strcmp(v, "help") == 0) {
    help(stdout);
    return 0;
  }
  if (strcmp(v, "--version") == 0 || strcmp(v, "version") == 0) {
    printf("attntune %s\n", attn_tuner_version());
    return 0;
  }
  if (strncmp(v, "--", 2) == 0) return attn_cmd_tune(argc - 1, argv + 1);
  for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
    if (strcmp(v, verbs[i].name) == 0) return verbs[i].fn(argc - 1, argv + 1);
  fprintf(stderr, "attntune: unknown verb '%s' (tune, show, export, import, merge, gpus, io, bench; see --help)\n", v);
  return 2;
}
