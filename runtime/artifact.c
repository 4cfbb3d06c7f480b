/* artifact.c: checked kernel artifacts (artifact.h). */
#include "artifact.h"
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "files.h"

#if UINTPTR_MAX == 0xffffffffffffffffULL
typedef Elf64_Ehdr ehdr_t;
typedef Elf64_Phdr phdr_t;
typedef Elf64_Shdr shdr_t;
#define ATTN_ELFCLASS ELFCLASS64
#else
typedef Elf32_Ehdr ehdr_t;
typedef Elf32_Phdr phdr_t;
typedef Elf32_Shdr shdr_t;
#define ATTN_ELFCLASS ELFCLASS32
#endif

/* a + b <= len without overflow */
static int inside(uint64_t a, uint64_t b, size_t len) { return a <= len && b <= len - a; }

int attn_elf_check(const void *data, size_t len, int shared_object, char *why, size_t wlen) {
  const unsigned char *p = data;
  ehdr_t e;
  if (len < sizeof e) return snprintf(why, wlen, "%zu bytes: shorter than an ELF header", len), -1;
  memcpy(&e, p, sizeof e);
  if (memcmp(e.e_ident, ELFMAG, SELFMAG) != 0) return snprintf(why, wlen, "not an ELF file"), -1;
  if (e.e_ident[EI_CLASS] != ATTN_ELFCLASS) return snprintf(why, wlen, "ELF class of another machine"), -1;
  if (shared_object && e.e_type != ET_DYN) return snprintf(why, wlen, "not a shared object (ELF type %d)", e.e_type), -1;
  if (e.e_phnum && (e.e_phentsize != sizeof(phdr_t) || !inside(e.e_phoff, (uint64_t)e.e_phnum * sizeof(phdr_t), len)))
    return snprintf(why, wlen, "program headers lie outside its %zu bytes (truncated?)", len), -1;
  if (shared_object && !e.e_phnum) return snprintf(why, wlen, "a shared object without program headers"), -1;
  if (e.e_shnum && (e.e_shentsize != sizeof(shdr_t) || !inside(e.e_shoff, (uint64_t)e.e_shnum * sizeof(shdr_t), len)))
    return snprintf(why, wlen, "section headers lie outside its %zu bytes (truncated?)", len), -1;
  for (unsigned i = 0; i < e.e_phnum; i++) {
    phdr_t ph;
    memcpy(&ph, p + e.e_phoff + (size_t)i * sizeof ph, sizeof ph);
    if (ph.p_type == PT_LOAD && !inside(ph.p_offset, ph.p_filesz, len))
      return snprintf(why, wlen, "segment %u ends at byte %llu of %zu (truncated)", i,
                      (unsigned long long)ph.p_offset + ph.p_filesz, len), -1;
  }
  for (unsigned i = 0; i < e.e_shnum; i++) {
    shdr_t sh;
    memcpy(&sh, p + e.e_shoff + (size_t)i * sizeof sh, sizeof sh);
    if (sh.sh_type != SHT_NOBITS && sh.sh_type != SHT_NULL && !inside(sh.sh_offset, sh.sh_size, len))
      return snprintf(why, wlen, "section %u ends at byte %llu of %zu (truncated)", i,
                      (unsigned long long)sh.sh_offset + sh.sh_size, len), -1;
  }
  return 0;
}

/* A directory this user owns and nobody else can write; 0, or -1 with why. */
static int private_enough(const char *dir, char *why, size_t wlen) {
  struct stat st;
  if (stat(dir, &st) != 0) return snprintf(why, wlen, "%s: %s", dir, strerror(errno)), -1;
  if (!S_ISDIR(st.st_mode)) return snprintf(why, wlen, "%s is not a directory", dir), -1;
  if (st.st_uid != geteuid())
    return snprintf(why, wlen, "%s belongs to uid %u, not to this user (%u)", dir, (unsigned)st.st_uid,
                    (unsigned)geteuid()), -1;
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return snprintf(why, wlen, "%s is writable by %s (mode %04o)", dir, st.st_mode & S_IWOTH ? "others" : "its group",
                    (unsigned)(st.st_mode & 07777)), -1;
  return 0;
}

/* attn_cache_dir_ready's work, under cache_lock: rt->cache_dir and cache_note are written only here, before
 * cache_checked is published. */
static int cache_dir_setup(attn_runtime *rt) {
  if (atomic_load_explicit(&rt->cache_checked, memory_order_relaxed)) return ATTN_OK; /* another thread did it */
  char why[1200] = "";
  if (attn_mkdir_p(rt->cache_dir) == 0 && private_enough(rt->cache_dir, why, sizeof why) == 0) {
    attn_cache_sweep(rt->cache_dir); /* best effort: leftovers only cost disk space */
    atomic_store_explicit(&rt->cache_checked, 1, memory_order_release);
    return ATTN_OK;
  }
  if (!why[0]) snprintf(why, sizeof why, "cannot create %.1100s: %s", rt->cache_dir, strerror(errno));
  /* A private directory instead: the user's runtime directory, else one under /tmp made 0700 here. */
  char dir[4096];
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  int ok = 0;
  if (xdg && *xdg && snprintf(dir, sizeof dir, "%s/attntune-so", xdg) < (int)sizeof dir) {
    char w2[1200];
    if ((mkdir(dir, 0700) == 0 || errno == EEXIST) && private_enough(dir, w2, sizeof w2) == 0) ok = 1;
  }
  if (!ok) {
    char top[64], w2[1200];
    snprintf(top, sizeof top, "/tmp/attntune-%u", (unsigned)geteuid());
    snprintf(dir, sizeof dir, "%s/so", top);
    if ((mkdir(top, 0700) == 0 || errno == EEXIST) && private_enough(top, w2, sizeof w2) == 0 &&
        (mkdir(dir, 0700) == 0 || errno == EEXIST) && private_enough(dir, w2, sizeof w2) == 0)
      ok = 1;
  }
  if (!ok) return attn_fail(rt, ATTN_ERUNTIME, "kernel cache refused (%s) and no private directory could be made", why);
  snprintf(rt->cache_note, sizeof rt->cache_note, "kernel cache %.1500s: using %.1500s instead", why, dir);
  snprintf(rt->cache_dir, sizeof rt->cache_dir, "%s", dir);
  attn_cache_sweep(rt->cache_dir);
  atomic_store_explicit(&rt->cache_checked, 1, memory_order_release);
  return ATTN_OK;
}

/* One lock for the process, not one per runtime: the setup runs once per runtime, and the tuner copies a runtime by
 * value for its parallel compiles (a mutex must not be copied, least of all while held). */
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

int attn_cache_dir_ready(attn_runtime *rt) {
  /* acquire: a thread that sees the flag sees the cache_dir and cache_note written before it */
  if (atomic_load_explicit(&rt->cache_checked, memory_order_acquire)) return ATTN_OK;
  pthread_mutex_lock(&cache_lock);
  const int rc = cache_dir_setup(rt);
  pthread_mutex_unlock(&cache_lock);
  return rc;
}

int attn_artifact_open(const char *path, const char *want_sha256, int shared_object, void **bytes, size_t *len,
                       char *why, size_t wlen) {
  why[0] = '\0';
  if (bytes) *bytes = NULL;
  if (len) *len = 0;
  struct stat st;
  const int fd = attn_open_regular(AT_FDCWD, path, &st, why, wlen);
  if (fd < 0) return -1; /* errno and why from attn_open_regular: a FIFO there is refused, not waited on */
  void *buf = NULL;
  if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
    snprintf(why, wlen, "%s is not this user's alone (uid %u, mode %04o)", path, (unsigned)st.st_uid,
             (unsigned)(st.st_mode & 07777));
  } else if (st.st_size <= 0 || st.st_size > (off_t)1 << 30) {
    snprintf(why, wlen, "%s has %lld bytes", path, (long long)st.st_size);
  } else if (!(buf = malloc((size_t)st.st_size))) {
    snprintf(why, wlen, "out of memory reading %s", path);
  } else {
    size_t n = (size_t)st.st_size, got = 0;
    while (got < n) {
      ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += (size_t)r;
    }
    char sha[65];
    if (got != n) snprintf(why, wlen, "%s: short read", path);
    else if (attn_elf_check(buf, n, shared_object, why, wlen) == 0) {
      if (want_sha256 && *want_sha256 && (attn_sha256_hex(buf, n, sha) != 0 || strcmp(sha, want_sha256) != 0))
        snprintf(why, wlen, "%s does not match the SHA-256 the database records for it", path);
      else {
        if (bytes) *bytes = buf, buf = NULL;
        if (len) *len = n;
        free(buf);
        return fd;
      }
    } else {
      char inner[512];
      snprintf(inner, sizeof inner, "%s", why);
      snprintf(why, wlen, "%s: %s", path, inner);
    }
  }
  free(buf);
  close(fd);
  errno = EINVAL;
  return -1;
}
