/* strategy_find.c: the Lua strategies are looked up relative to the running executable, so that an install or a
 * build tree that has been moved finds its own copies; no path into the source tree is compiled in. */
#include "strategy_find.h"
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* From the install's bin directory to its strategies (tuner/CMakeLists.txt, from GNUInstallDirs). */
#ifndef ATTN_STRATEGIES_REL
#define ATTN_STRATEGIES_REL "../share/attntune/strategies"
#endif

int attn_strategy_dir(char *dir, size_t len) {
  char exe[PATH_MAX];
  ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (l <= 0) return -1;
  exe[l] = '\0';
  char *slash = strrchr(exe, '/');
  if (!slash) return -1;
  *slash = '\0';
  char joined[PATH_MAX + sizeof ATTN_STRATEGIES_REL + 1];
  snprintf(joined, sizeof joined, "%s/%s", exe, ATTN_STRATEGIES_REL);
  /* canonical when it exists, so that messages name the real directory rather than bin/../share/... */
  char real[PATH_MAX];
  const char *out = realpath(joined, real) ? real : joined;
  return snprintf(dir, len, "%s", out) < (int)len ? 0 : -1;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* "anneal, genetic": the strategies dir holds, sorted; "" when none; -1 with errno when it cannot be read. */
static int list_strategies(const char *dir, char *out, size_t len) {
  out[0] = '\0';
  DIR *d = opendir(dir);
  if (!d) return -1;
  char *names[64];
  int count = 0;
  struct dirent *e;
  while ((e = readdir(d)) && count < 64) {
    size_t l = strlen(e->d_name);
    if (l <= 4 || e->d_name[0] == '.' || strcmp(e->d_name + l - 4, ".lua") != 0) continue;
    names[count] = strndup(e->d_name, l - 4);
    if (names[count]) count++;
  }
  closedir(d);
  qsort(names, (size_t)count, sizeof names[0], cmp_str);
  size_t used = 0;
  for (int i = 0; i < count; i++) {
    int w = snprintf(out + used, len - used, "%s%s", i ? ", " : "", names[i]);
    if (w > 0 && (size_t)w < len - used) used += (size_t)w;
    free(names[i]);
  }
  return 0;
}

int attn_strategy_find(const char *name, char *path, size_t len, char *why, size_t whylen) {
  const char *env = getenv("ATTN_SCRIPTS_DIR");
  char dir[PATH_MAX];
  if (env && *env) {
    snprintf(dir, sizeof dir, "%s", env);
  } else if (attn_strategy_dir(dir, sizeof dir) != 0) {
    snprintf(why, whylen, "not exhaustive, random or a .lua file (and this executable's path is unknown)");
    return -1;
  }
  const char *from = env && *env ? " ($ATTN_SCRIPTS_DIR)" : "";
  /* a name, not a path: FILE.lua is the way to name a file */
  if (*name && !strchr(name, '/') && snprintf(path, len, "%s/%s.lua", dir, name) < (int)len &&
      access(path, R_OK) == 0)
    return 0;
  char have[1024];
  if (list_strategies(dir, have, sizeof have) != 0)
    snprintf(why, whylen, "not exhaustive, random or a .lua file; no strategies at %s%s: %s", dir, from,
             strerror(errno));
  else if (!have[0])
    snprintf(why, whylen, "not exhaustive, random or a .lua file; %s%s holds no strategies", dir, from);
  else
    snprintf(why, whylen, "not exhaustive, random, a .lua file or one of the strategies in %s%s (%s)", dir, from,
             have);
  return -1;
}
