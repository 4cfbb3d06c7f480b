/* files.c: file operations of the kernel cache directory (see files.h). */
#include "files.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int attn_mkdir_p(const char *dir) {
  char buf[4096];
  size_t l = strlen(dir);
  if (l == 0 || l >= sizeof buf) return -1;
  memcpy(buf, dir, l + 1);
  for (char *s = buf + 1; *s; s++) {
    if (*s != '/') continue;
    *s = '\0';
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
    *s = '/';
  }
  if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
  struct stat st;
  return stat(buf, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
}

int attn_write_all(int fd, const void *data, size_t len) {
  const char *p = data;
  while (len) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

int attn_open_regular(int dfd, const char *path, struct stat *st, char *why, size_t wlen) {
  struct stat own;
  if (!st) st = &own;
  if (why && wlen) why[0] = '\0';
  const int fd = openat(dfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int e = errno;
    if (why && wlen && e != ENOENT)
      snprintf(why, wlen, "%s: %s", path, e == ELOOP ? "a symbolic link, not followed" : strerror(e));
    errno = e;
    return -1;
  }
  int e = 0, flags;
  if (fstat(fd, st) != 0) {
    e = errno;
    if (why && wlen) snprintf(why, wlen, "%s: %s", path, strerror(e));
  } else if (!S_ISREG(st->st_mode)) {
    e = EINVAL;
    if (why && wlen) snprintf(why, wlen, "%s is not a regular file", path);
  } else if ((flags = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    e = errno;
    if (why && wlen) snprintf(why, wlen, "%s: %s", path, strerror(e));
  }
  if (e) {
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

int attn_install_file(const char *path, const void *data, size_t len) {
  char tmp[4200];
  if (snprintf(tmp, sizeof tmp, "%s.XXXXXX", path) >= (int)sizeof tmp) return -1;
  int fd = mkstemp(tmp);
  if (fd < 0) return -1;
  int bad = attn_write_all(fd, data, len) != 0;
  bad |= close(fd) != 0;
  if (bad || rename(tmp, path) != 0) {
    unlink(tmp);
    return -1;
  }
  return 0;
}
