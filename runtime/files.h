/* files.h: the kernel cache directory's file operations, shared by the CPU (shared objects) and CUDA (cubins)
 * backends. */
#ifndef ATTN_FILES_H
#define ATTN_FILES_H

#include <stddef.h>

/* mkdir -p; 0, or -1 with errno. */
int attn_mkdir_p(const char *dir);
/* write(2) until done (EINTR retried); 0, or -1. */
int attn_write_all(int fd, const void *data, size_t len);
/* The whole file, malloc'd, and its length; NULL when it cannot be read or is empty. */
void *attn_read_file(const char *path, size_t *len);
/* Writes data to a unique temporary beside path, then renames it onto path: readers never see a partial file, and
 * two processes doing the same both succeed (the last rename wins with identical content). 0, or -1. */
int attn_install_file(const char *path, const void *data, size_t len);

#endif
