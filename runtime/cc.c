/* cc.c: compiles generated C kernels with the system compiler and caches the shared objects by a hash of
 * source + compiler + flags, in the cache directory and (when a database is open) as database artifacts, so that
 * a second process, or a machine with no compiler, loads the kernel without compiling. */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "artifact.h"
#include "cc.h"
#include "files.h"

extern char **environ;

#define LOG_MAX (ATTN_ERRLEN - 3072) /* room for the message and command around it */

/* The end of a compile: its source temporary removed, then its lock released (cache_sweep.c). */
static void unlock_remove(int lock, const char *src) {
  unlink(src);
  close(lock);
}

/* Splits $CC ("ccache gcc" is allowed) into argv words; returns the count, at most max-1. */
static int split_words(char *s, char **argv, int max) {
  int n = 0;
  for (char *save = NULL, *w = strtok_r(s, " \t", &save); w && n < max - 1; w = strtok_r(NULL, " \t", &save))
    argv[n++] = w;
  argv[n] = NULL;
  return n;
}

/* Runs argv with stdout and stderr captured into log (NUL-terminated, truncated at cap). Returns the exit status,
 * or -1 with errno-ish text in log when the program could not be started. */
static int run_capture(char *const argv[], char *log, size_t cap) {
  size_t used = 0;
  log[0] = '\0';
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) != 0) {
    snprintf(log, cap, "pipe: %s", strerror(errno));
    return -1;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
  posix_spawn_file_actions_adddup2(&fa, pfd[1], 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid;
  int e = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(pfd[1]);
  if (e != 0) {
    close(pfd[0]);
    snprintf(log, cap, "cannot run '%s': %s", argv[0], strerror(e));
    return -1;
  }
  char chunk[4096];
  for (;;) {
    ssize_t r = read(pfd[0], chunk, sizeof chunk);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    size_t take = (size_t)r < cap - 1 - used ? (size_t)r : cap - 1 - used;
    memcpy(log + used, chunk, take);
    used += take;
  }
  log[used] = '\0';
  close(pfd[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) {
      snprintf(log + used, cap - used, "waitpid: %s", strerror(errno));
      return -1;
    }
  if (WIFEXITED(status)) {
    /* glibc's posix_spawnp reports exec failures as exit status 127 with nothing written. */
    if (WEXITSTATUS(status) == 127 && used == 0) snprintf(log, cap, "cannot run '%s': command not found", argv[0]);
    return WEXITSTATUS(status);
  }
  snprintf(log + used, cap - used, "%skilled by signal %d", used ? "\n" : "", WTERMSIG(status));
  return 128 + WTERMSIG(status);
}

int attn_cc_object(attn_runtime *rt, const char *source, const char *label, int force, char *path, size_t len,
                   int *was_cached, int *fd_out) {
  *was_cached = 0;
  *fd_out = -1;
  const char *cc = getenv("CC");
  if (!cc || !*cc) cc = "cc";
  int rc = attn_cache_dir_ready(rt);
  if (rc != ATTN_OK) return rc;
  /* Key: the source, the compiler as named, the flags, and the CPU model (-march=native objects must not travel to
   * another CPU through a shared home directory). */
  size_t slen = strlen(source), klen = slen + strlen(cc) + sizeof ATTN_CC_FLAGS + strlen(rt->device) + 4;
  char *key = malloc(klen);
  if (!key) return attn_fail(rt, ATTN_ENOMEM, "out of memory hashing %s", label);
  int kl = snprintf(key, klen, "%s\n%s %s\n%s", source, cc, ATTN_CC_FLAGS, rt->device);
  char hash[17];
  attn_hash_hex(key, (size_t)kl, hash);
  free(key);
  const char *dir = rt->cache_dir;
  int w = snprintf(path, len, "%s/%s.so", dir, hash);
  if (w < 0 || (size_t)w >= len) return attn_fail(rt, ATTN_EINVAL, "cache path too long under %s", dir);

  /* Artifacts are compiled with -march=native: keyed by the CPU model so another machine never loads them. */
  const char *arch = rt->device;
  char want[65] = "", why[1024] = "";
  if (rt->db && attn_db_artifact_digest(rt->db, hash, cc, ATTN_CC_FLAGS, arch, want) != ATTN_OK) want[0] = '\0';
  if (!force) {
    int fd = attn_artifact_open(path, want, 1, NULL, NULL, why, sizeof why);
    if (fd >= 0) {
      *was_cached = 1;
      *fd_out = fd;
      return ATTN_OK;
    }
    /* one that failed a check is never loaded; the rename below replaces it (an unlink here could remove the good
     * object another thread or process has just renamed into place) */
  }
  if (rt->db && !force) {
    void *blob = NULL;
    size_t blen = 0;
    char bwhy[256], sha[65];
    if (attn_db_artifact_get(rt->db, hash, cc, ATTN_CC_FLAGS, arch, &blob, &blen) == ATTN_OK && blob && blen &&
        attn_elf_check(blob, blen, 1, bwhy, sizeof bwhy) == 0 && attn_sha256_hex(blob, blen, sha) == 0 &&
        attn_install_file(path, blob, blen) == 0) {
      free(blob);
      int fd = attn_artifact_open(path, sha, 1, NULL, NULL, why, sizeof why);
      if (fd >= 0) {
        *was_cached = 1;
        *fd_out = fd;
        return ATTN_OK;
      }
    } else {
      free(blob);
    }
  }

  /* Compile: source to a unique temporary HASH-XXXXXX.c, locked while this process works on it, and the object to
   * HASH-XXXXXX.so beside it, renamed into place. The source goes last, so the sweep of a later process
   * (cache_sweep.c) can tell what a killed one left from what a live one is using. */
  char src[4200], obj[4200];
  snprintf(src, sizeof src, "%s/%s-XXXXXX.c", dir, hash);
  const int lock = mkostemps(src, 2, O_CLOEXEC);
  if (lock < 0) return attn_fail(rt, ATTN_ERUNTIME, "cannot write kernel source in %s: %s", dir, strerror(errno));
  if (flock(lock, LOCK_EX) != 0 || attn_write_all(lock, source, slen) != 0) {
    const int e = errno;
    unlock_remove(lock, src);
    return attn_fail(rt, ATTN_ERUNTIME, "cannot write kernel source %s: %s", src, strerror(e));
  }
  snprintf(obj, sizeof obj, "%.*s.so", (int)(strlen(src) - 2), src);
  int fd = open(obj, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST && unlink(obj) == 0) /* the stem is ours, so an object by its name is an orphan */
    fd = open(obj, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int e = errno;
    unlock_remove(lock, src);
    return attn_fail(rt, ATTN_ERUNTIME, "cannot create %s: %s", obj, strerror(e));
  }
  close(fd);

  char ccbuf[1024], flags[] = ATTN_CC_FLAGS;
  snprintf(ccbuf, sizeof ccbuf, "%s", cc);
  char *argv[64];
  int ac = split_words(ccbuf, argv, 40);
  if (ac == 0) {
    unlink(obj);
    unlock_remove(lock, src);
    return attn_fail(rt, ATTN_ECOMPILE, "CC is empty");
  }
  ac += split_words(flags, argv + ac, 16);
  argv[ac++] = "-o";
  argv[ac++] = obj;
  argv[ac++] = src;
  argv[ac++] = "-lm";
  argv[ac] = NULL;

  char *log = malloc(LOG_MAX);
  if (!log) {
    unlink(obj);
    unlock_remove(lock, src);
    return attn_fail(rt, ATTN_ENOMEM, "out of memory compiling %s", label);
  }
  int status = run_capture(argv, log, LOG_MAX);
  if (status != 0) {
    char cmd[2048];
    size_t cl = 0;
    cmd[0] = '\0';
    for (int i = 0; i < ac && cl < sizeof cmd; i++) {
      int c = snprintf(cmd + cl, sizeof cmd - cl, "%s%s", i ? " " : "", argv[i]);
      if (c < 0) break;
      cl += (size_t)c;
    }
    unlink(obj);
    unlock_remove(lock, src);
    /* Not the source's fault: the compiler could not start, was not found (127 with no output), or was killed. */
    const int env = status < 0 || (status == 127 && strstr(log, "command not found")) || status >= 128;
    int rc = attn_fail(rt, ATTN_ECOMPILE, "compiling %s failed (%s%d)%s: %s\n%s", label,
                       status < 0 ? "could not start compiler, " : "exit status ", status < 0 ? -1 : status,
                       env ? " " ATTN_CC_ENV_MARK : "", cmd, log);
    free(log);
    return rc;
  }
  free(log);
  /* The bytes the compiler wrote are the ones loaded: checked and opened before the rename, so that the descriptor
   * handed back is this compile's object whatever another thread or process renames onto path meanwhile. */
  void *blob = NULL;
  size_t blen = 0;
  char sha[65];
  fd = attn_artifact_open(obj, NULL, 1, &blob, &blen, why, sizeof why);
  const char *fail = fd < 0 ? "failed its check" : attn_sha256_hex(blob, blen, sha) != 0 ? "cannot be hashed"
                     : rename(obj, path) != 0 ? "cannot be renamed into place" : NULL;
  if (fail) {
    const int e = errno;
    if (fd >= 0) close(fd);
    unlink(obj);
    unlock_remove(lock, src);
    free(blob);
    return attn_fail(rt, ATTN_ERUNTIME, "the compiled %s %s: %s", label, fail, why[0] ? why : strerror(e));
  }
  unlock_remove(lock, src);
  /* Best effort: a failure to store only means the next process compiles again. */
  if (rt->db) attn_db_artifact_put(rt->db, hash, cc, ATTN_CC_FLAGS, arch, blob, blen);
  free(blob);
  *fd_out = fd;
  return ATTN_OK;
}
