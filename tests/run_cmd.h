/* run_cmd.h: what the C tests that drive the attntune binary share: running a command and keeping its output. */
#ifndef ATTN_TEST_RUN_CMD_H
#define ATTN_TEST_RUN_CMD_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

/* Runs cmd through the shell; its stdout into *out (malloc'd, NUL-terminated) when out is not NULL. Returns its exit
 * status, -1 when it could not run or did not exit normally. */
__attribute__((unused)) static int run_cmd(const char *cmd, char **out) {
  if (out) *out = NULL;
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  if (!buf) {
    pclose(p);
    return -1;
  }
  size_t got;
  while ((got = fread(buf + len, 1, cap - len - 1, p)) > 0) {
    len += got;
    if (len + 1 == cap) {
      char *nb = realloc(buf, cap *= 2);
      if (!nb) break;
      buf = nb;
    }
  }
  buf[len] = 0;
  const int st = pclose(p);
  if (out)
    *out = buf;
  else
    free(buf);
  return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#endif
