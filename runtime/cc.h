/* cc.h: the CPU backend's compiler driver and shared-object cache (runtime/cc.c). */
#ifndef ATTN_CC_H
#define ATTN_CC_H

#include <stddef.h>
#include "internal.h"

/* Flags every CPU kernel is compiled with (part of the cache key). */
#define ATTN_CC_FLAGS "-O3 -march=native -fPIC -shared"

/* A shared object for source in the cache directory: found there, fetched from the database's artifacts, or compiled
 * with $CC (default "cc") and renamed into place atomically; in every case checked as artifact.h says, and handed
 * back as an open descriptor of the checked file (*fd_out, to load through /proc/self/fd: what was checked is what
 * loads) with its path. force != 0 ignores the caches (a file that would not load). label names the kernel in
 * messages. *was_cached: 1 unless this call compiled. */
int attn_cc_object(attn_runtime *rt, const char *source, const char *label, int force, char *path, size_t len,
                   int *was_cached, int *fd_out);

#endif
