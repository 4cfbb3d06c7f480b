/* files.h: the kernel cache directory's file operations, shared by the CPU (shared objects) and CUDA (cubins)
 * backends. */
#ifndef ATTN_FILES_H
#define ATTN_FILES_H

#include <stddef.h>
#include <sys/stat.h>

/* mkdir -p; 0, or -1 with errno. */
int attn_mkdir_p(const char *dir);
/* write(2) until done (EINTR retried); 0, or -1. */
int attn_write_all(int fd, const void *data, size_t len);
/* Opens path (relative to dfd: AT_FDCWD or a directory) for reading, as every file of the cache directory is opened:
 * without following a link, close-on-exec, and non-blocking until fstat shows a regular file, so that a FIFO or a
 * device planted under a cached name is refused instead of hanging the open; the descriptor returned blocks as usual.
 * *st (may be NULL) gets its fstat. -1 with errno and why (may be NULL): "" for ENOENT, else the reason. */
int attn_open_regular(int dfd, const char *path, struct stat *st, char *why, size_t wlen);
/* Writes data to a unique temporary beside path, then renames it onto path: readers never see a partial file, and
 * two processes doing the same both succeed (the last rename wins with identical content). 0, or -1. */
int attn_install_file(const char *path, const void *data, size_t len);

#endif
