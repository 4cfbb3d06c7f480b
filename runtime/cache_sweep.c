/* cache_sweep.c: removes what killed processes left in the kernel cache directory (artifact.h).
 *
 * A compile writes HASH-XXXXXX.c, holds an exclusive flock on it until it is done, and has the compiler write
 * HASH-XXXXXX.so beside it, renamed into place on success; the .c goes last, so a .so temporary without its .c
 * belongs to nobody. Installs from the database write NAME.XXXXXX and rename it within milliseconds. A process
 * killed in between (SIGKILL, OOM, power) leaves these behind; the next process that opens the cache removes them.
 * Only names of these shapes are touched, only regular files, and only after a grace period, so a process that has
 * just created its temporary (and not yet locked it) is never disturbed. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "artifact.h"
#include "files.h"

#define SWEEP_GRACE_S 60           /* a compile's temporaries are locked within microseconds of their creation */
#define SWEEP_INSTALL_AGE_S (3600) /* an install's temporary lives for milliseconds; nothing locks it */

static int is_hex(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
  return 1;
}

static int is_alnum(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const char c = s[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) return 0;
  }
  return 1;
}

/* HASH-XXXXXX followed by ext: a compile's temporary (cc.c) */
static int compile_temp(const char *name, const char *ext) {
  const size_t stem = ATTN_CACHE_HASH_LEN + 1 + 6, len = strlen(name);
  return len == stem + strlen(ext) && is_hex(name, ATTN_CACHE_HASH_LEN) && name[ATTN_CACHE_HASH_LEN] == '-' &&
         is_alnum(name + ATTN_CACHE_HASH_LEN + 1, 6) && strcmp(name + stem, ext) == 0;
}

/* NAME.so.XXXXXX or NAME.cubin.XXXXXX: an install's temporary (files.c) */
static int install_temp(const char *name) {
  const size_t len = strlen(name);
  if (len < 7 || name[len - 7] != '.' || !is_alnum(name + len - 6, 6)) return 0;
  return (len > 10 && memcmp(name + len - 10, ".so", 3) == 0) || (len > 13 && memcmp(name + len - 13, ".cubin", 6) == 0);
}

/* A regular file of this user, last modified at least age seconds ago. */
static int stale(int dfd, const char *name, time_t now, time_t age) {
  struct stat st;
  return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
         now - st.st_mtime >= age;
}

/* The compile that created name (a .c temporary) is gone: nobody holds its lock. Opened as a regular file only (a
 * FIFO swapped in after stale() looked would block a plain open). */
static int abandoned(int dfd, const char *name) {
  int fd = attn_open_regular(dfd, name, NULL, NULL, 0);
  if (fd < 0) return 0;
  int free_ = flock(fd, LOCK_EX | LOCK_NB) == 0;
  close(fd);
  return free_;
}

int attn_cache_sweep(const char *dir) {
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return -1;
  DIR *d = fdopendir(dfd);
  if (!d) {
    close(dfd);
    return -1;
  }
  const time_t now = time(NULL);
  int removed = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    const char *name = e->d_name;
    char other[256];
    if (compile_temp(name, ".c")) {
      if (!stale(dfd, name, now, SWEEP_GRACE_S) || !abandoned(dfd, name)) continue;
      memcpy(other, name, ATTN_CACHE_HASH_LEN + 7);
      strcpy(other + ATTN_CACHE_HASH_LEN + 7, ".so");
      if (unlinkat(dfd, other, 0) == 0) removed++; /* the object first: a .so without its .c is an orphan */
      if (unlinkat(dfd, name, 0) == 0) removed++;
    } else if (compile_temp(name, ".so")) {
      memcpy(other, name, ATTN_CACHE_HASH_LEN + 7);
      strcpy(other + ATTN_CACHE_HASH_LEN + 7, ".c");
      struct stat st;
      if (fstatat(dfd, other, &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT) continue; /* its compile's */
      if (stale(dfd, name, now, SWEEP_GRACE_S) && unlinkat(dfd, name, 0) == 0) removed++;
    } else if (install_temp(name)) {
      if (stale(dfd, name, now, SWEEP_INSTALL_AGE_S) && unlinkat(dfd, name, 0) == 0) removed++;
    }
  }
  closedir(d);
  return removed;
}
