/* path.c: where the database lives by default: $ATTN_DB, else attntune.db in attntune's cache directory. */
#define _POSIX_C_SOURCE 200809L
#include "db.h"
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int attn_cache_home(char *buf, size_t len) {
  /* XDG base directories: $XDG_CACHE_HOME when set to an absolute path (the spec says to ignore a relative one) */
  const char *xdg = getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/') {
    int w = snprintf(buf, len, "%s/attntune", xdg);
    return w >= 0 && (size_t)w < len ? 0 : -1;
  }
  const char *home = getenv("HOME");
  if (!home || !*home) {
    struct passwd *pw = getpwuid(getuid());
    home = pw && pw->pw_dir && *pw->pw_dir ? pw->pw_dir : "/tmp";
  }
  int w = snprintf(buf, len, "%s/.cache/attntune", home);
  return w >= 0 && (size_t)w < len ? 0 : -1;
}

int attn_db_default_path(char *buf, size_t len) {
  const char *e = getenv("ATTN_DB");
  if (e && *e) return snprintf(buf, len, "%s", e) < (int)len ? 0 : -1;
  char dir[4096];
  if (attn_cache_home(dir, sizeof dir) != 0) return -1;
  /* every missing parent too (~/.cache, a new $XDG_CACHE_HOME); a failure is left to the open, which says why */
  for (char *p = dir + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      mkdir(dir, 0755);
      *p = '/';
    }
  mkdir(dir, 0755);
  return snprintf(buf, len, "%s/attntune.db", dir) < (int)len ? 0 : -1;
}
