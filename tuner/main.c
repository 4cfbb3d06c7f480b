/* main.c: the attntune command line: dispatches a verb to its attn_cmd_* (tuner/cmds.h). `tune` is the default
 * verb, so `attntune --gpu A100 --d 64..256` tunes. `attntune --man FILE` writes the manual page (attntune.1, made at
 * build time) from the very texts --help prints: this file's verb table and environment list, and each verb's own
 * --help output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
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
    {"replay", attn_cmd_replay, "search strategies replayed against stored whole spaces, compared"},
    {"source", attn_cmd_source, "the source a spec generates (what the runtime compiles), or NVRTC's PTX of it"},
};
#define NVERBS (sizeof verbs / sizeof verbs[0])

static const char synopsis[] = "attntune [VERB] [OPTIONS]   (VERB defaults to tune)";
static const char about[] =
    "An I/O-aware attention-kernel generator and autotuner: instantiates kernel templates for\n"
    "softmax(scale QK^T) V (flash, smallcache, lowrank) for this CPU or NVIDIA GPUs, checks each against fp64,\n"
    "searches the configurations, and stores the best per problem in a SQLite database that libattn reads.";

static const struct {
  const char *name, *what;
} envs[] = {
    {"ATTN_DB", "the database (default $XDG_CACHE_HOME/attntune/attntune.db, else ~/.cache/attntune/attntune.db)"},
    {"XDG_CACHE_HOME", "where attntune's cache directory goes when set to an absolute path (default ~/.cache)"},
    {"ATTN_CACHE_DIR", "compiled kernels (default $XDG_CACHE_HOME/attntune/so, else ~/.cache/attntune/so)"},
    {"ATTN_THREADS", "CPU threads (default all cores)"},
    {"CC", "the C compiler for CPU kernels"},
    {"ATTN_NVRTC", "the NVRTC library (default libnvrtc.so.13, .12, .11.2)"},
    {"ATTN_LIBCUDA", "the CUDA driver library (default libcuda.so.1)"},
    {"ATTN_CUDA_DEVICE", "the CUDA device ordinal (default 0)"},
    {"ATTN_SCRIPTS_DIR", "Lua strategies for --strategy NAME"},
    {"ATTN_DB_TIMEOUT_MS", "how long to wait for a database another process holds (default 5000)"},
};
#define NENVS (sizeof envs / sizeof envs[0])

static const char exit_status[] = "0 ok, 2 usage error (with a one-line reason), 1 anything else";

static void help(FILE *f) {
  fprintf(f, "usage: %s\n\n", synopsis);
  for (size_t i = 0; i < NVERBS; i++) fprintf(f, "  %-7s %s\n", verbs[i].name, verbs[i].what);
  fprintf(f, "\n  attntune help VERB (or attntune VERB --help) for a verb's options; attntune --version\n"
             "  e.g. attntune --gpu cpu --d 64..128 --n 256..2048 --db tuned.db\n"
             "environment:\n");
  for (size_t i = 0; i < NENVS; i++) fprintf(f, "  %-18s %s\n", envs[i].name, envs[i].what);
  fprintf(f, "exit status: %s\n", exit_status);
}

static int find_verb(const char *name) {
  for (size_t i = 0; i < NVERBS; i++)
    if (strcmp(name, verbs[i].name) == 0) return (int)i;
  return -1;
}

static int verb_help(int v) {
  char *args[] = {(char *)verbs[v].name, (char *)"--help", NULL};
  return verbs[v].fn(2, args);
}

/* Text for roff: backslashes and hyphens escaped, a leading '.' or '\'' kept from reading as a request. */
static void roff_text(FILE *f, const char *s) {
  int bol = 1;
  for (; *s; s++) {
    if (bol && (*s == '.' || *s == '\'')) fputs("\\&", f);
    bol = *s == '\n';
    if (*s == '\\') fputs("\\e", f);
    else if (*s == '-') fputs("\\-", f);
    else fputc(*s, f);
  }
}

/* A verb's --help output, captured from standard output (malloc'd; NULL on failure). */
static char *capture_help(int v) {
  if (fflush(stdout) != 0) return NULL;
  FILE *tmp = tmpfile();
  int saved = dup(STDOUT_FILENO);
  char *text = NULL;
  if (!tmp || saved < 0 || dup2(fileno(tmp), STDOUT_FILENO) < 0) goto out;
  int rc = verb_help(v);
  int flushed = fflush(stdout) == 0;
  if (dup2(saved, STDOUT_FILENO) < 0 || rc != 0 || !flushed) goto out;
  long len = ftell(tmp);
  if (len <= 0 || fseek(tmp, 0, SEEK_SET) != 0 || !(text = malloc((size_t)len + 1))) goto out;
  if (fread(text, 1, (size_t)len, tmp) != (size_t)len) {
    free(text);
    text = NULL;
    goto out;
  }
  text[len] = '\0';
out:
  if (saved >= 0) close(saved);
  if (tmp) fclose(tmp);
  return text;
}

/* The manual page, from the same texts as the help. */
static int write_man(const char *path) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
    fprintf(stderr, "attntune --man: path too long\n");
    return 2;
  }
  char *texts[NVERBS] = {0};
  for (size_t i = 0; i < NVERBS; i++)
    if (!(texts[i] = capture_help((int)i))) {
      fprintf(stderr, "attntune --man: could not capture '%s --help'\n", verbs[i].name);
      for (size_t k = 0; k < i; k++) free(texts[k]);
      return 1;
    }
  FILE *f = fopen(tmp, "w");
  if (!f) {
    perror(tmp);
    for (size_t i = 0; i < NVERBS; i++) free(texts[i]);
    return 1;
  }
  fprintf(f, ".TH ATTNTUNE 1 \"\" \"attntune %s\" \"User Commands\"\n.SH NAME\nattntune \\- attention-kernel "
             "generator and autotuner\n.SH SYNOPSIS\n.nf\n", attn_tuner_version());
  roff_text(f, synopsis);
  fputs("\n.fi\n.SH DESCRIPTION\n", f);
  roff_text(f, about);
  fputs("\n.SH COMMANDS\n", f);
  for (size_t i = 0; i < NVERBS; i++) {
    fprintf(f, ".TP\n.B %s\n", verbs[i].name);
    roff_text(f, verbs[i].what);
    fputc('\n', f);
  }
  fputs(".SH OPTIONS\nEach verb's options, as \\fBattntune help\\fR \\fIVERB\\fR prints them.\n", f);
  for (size_t i = 0; i < NVERBS; i++) {
    fprintf(f, ".SS %s\n.nf\n", verbs[i].name);
    roff_text(f, texts[i]);
    fputs(".fi\n", f);
  }
  fputs(".SH ENVIRONMENT\n", f);
  for (size_t i = 0; i < NENVS; i++) {
    fprintf(f, ".TP\n.B %s\n", envs[i].name);
    roff_text(f, envs[i].what);
    fputc('\n', f);
  }
  fputs(".SH EXIT STATUS\n", f);
  roff_text(f, exit_status);
  fputs("\n.SH SEE ALSO\nREADME.md and docs/tuning.md in the source tree.\n", f);
  for (size_t i = 0; i < NVERBS; i++) free(texts[i]);
  if (fclose(f) != 0 || rename(tmp, path) != 0) {
    perror(path);
    if (unlink(tmp) != 0) perror(tmp);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    help(stderr);
    return 2;
  }
  const char *v = argv[1];
  if (strcmp(v, "help") == 0 && argc > 2) { /* help VERB: that verb's options */
    int k = find_verb(argv[2]);
    if (k < 0 || argc > 3) {
      fprintf(stderr, "attntune help: %s '%s' (tune, show, export, import, merge, gpus, io, bench, replay)\n",
              k < 0 ? "unknown verb" : "one verb, not", k < 0 ? argv[2] : argv[3]);
      return 2;
    }
    return verb_help(k);
  }
  if (strcmp(v, "--help") == 0 || strcmp(v, "-h") == 0 || strcmp(v, "help") == 0) {
    help(stdout);
    return 0;
  }
  if (strcmp(v, "--version") == 0 || strcmp(v, "version") == 0) {
    printf("attntune %s\n", attn_tuner_version());
    return 0;
  }
  if (strcmp(v, "--man") == 0) { /* not in the help: the build's step that writes attntune.1 */
    if (argc != 3) {
      fprintf(stderr, "attntune --man FILE: writes the manual page to FILE\n");
      return 2;
    }
    return write_man(argv[2]);
  }
  if (strncmp(v, "--", 2) == 0) return attn_cmd_tune(argc - 1, argv + 1);
  int k = find_verb(v);
  if (k >= 0) return verbs[k].fn(argc - 1, argv + 1);
  fprintf(stderr, "attntune: unknown verb '%s' (tune, show, export, import, merge, gpus, io, bench, replay; see "
          "--help)\n", v);
  return 2;
}
