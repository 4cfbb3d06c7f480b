/* artifact.h: the trust model of compiled kernels (shared objects and cubins). A kernel is loaded only from bytes
 * that were checked: a file in a cache directory that this user owns and nobody else can write, opened without
 * following a link and without blocking (a FIFO under a kernel's name is refused, not waited on), a regular file
 * owned by the user and writable by nobody else, a well-formed ELF image whose segments lie inside the file (a
 * truncated object would otherwise fault when mapped), and, when the database records the artifact, the same
 * SHA-256 as the record. What fails is never loaded: the kernel is compiled again. */
#ifndef ATTN_ARTIFACT_H
#define ATTN_ARTIFACT_H

#include <stddef.h>
#include "internal.h"

/* Makes rt->cache_dir usable once: created when missing; one that is not a directory, not owned by this user, or
 * writable by group or others is refused and replaced by a private one ($XDG_RUNTIME_DIR/attntune-so, else
 * /tmp/attntune-<uid>/so, mode 0700), with the reason in rt->cache_note. ATTN_OK, or ATTN_ERUNTIME when no usable
 * directory exists. Safe from several threads at once; rt->cache_dir and cache_note are final once it returned
 * ATTN_OK. */
int attn_cache_dir_ready(attn_runtime *rt);

/* Hex digits of the hash that names a cached kernel (attn_hash_hex). */
#define ATTN_CACHE_HASH_LEN 16

/* Removes the temporaries that killed processes left in dir (cache_sweep.c says which, and why a live process's are
 * never touched). Run by attn_cache_dir_ready; returns the number of files removed, -1 when dir cannot be read. */
int attn_cache_sweep(const char *dir);

/* 0 when data holds an ELF image of this machine's class whose program and section headers and every segment's
 * file bytes lie inside len bytes (type ET_DYN when shared_object, any type for a cubin); -1 with why. */
int attn_elf_check(const void *data, size_t len, int shared_object, char *why, size_t wlen);

/* Opens path as a checked artifact (see above; want_sha256 NULL or "": no hash to match) and returns its descriptor
 * (close-on-exec, to be loaded through /proc/self/fd), with the bytes when bytes is not NULL (malloc'd). -1 with why
 * when it is missing (errno ENOENT, why "") or fails a check. */
int attn_artifact_open(const char *path, const char *want_sha256, int shared_object, void **bytes, size_t *len,
                       char *why, size_t wlen);

#endif
