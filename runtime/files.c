/* files.c: file operations of the kernel cache directory (see files.h). */
#include "files.h"
#include <errno.h>
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

void *attn_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  void *buf = NULL;
  long sz = -1;
  if (fseek(f, 0, SEEK_END) == 0 && (sz = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)sz)) &&
      fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf) *len = (size_t)sz;
  return buf;
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
