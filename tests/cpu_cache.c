/* cpu_cache: a second process loads the compiled kernel from the cache instead of compiling.
 *   cpu_cache DIR         driver: fresh cache dir, runs "cpu_cache child" twice, expects was_cached=0 then 1;
 *   cpu_cache DIR db      the same through the database: the first child stores the artifact, the cache directory is
 *                         emptied, and the second child still loads without compiling (no compiler on PATH);
 *   cpu_cache DIR race    two processes compile the same kernel into one empty cache at once: both succeed;
 *   cpu_cache DIR fifo    a FIFO under the cached kernel's name (it would block an open for reading until a writer
 *                         came): the next process refuses it, compiles again and replaces it with the object;
 *   cpu_cache child [small]  opens the runtime from the environment, plans, checks the result, prints was_cached=N
 *                         (small: a smallcache kernel of d = 8, quick to compile). */
#include <dirent.h>
#include <spawn.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cpu_util.h"

extern char **environ;
static char *child_arg; /* passed on to the child: NULL, or "small" */

/* "small": a smallcache kernel of d = 8, which compiles in a fraction of the default's time (the fifo case). */
static int child(int small) {
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CPU, &rt);
  if (rc != ATTN_OK) {
    fprintf(stderr, "child: attn_open: %s: %s\n", attn_strerror(rc), attn_last_error(NULL));
    return 1;
  }
  attn_problem p = {.batch = 2, .heads = 2, .n = 77, .d = 48, .causal = 1};
  if (small) p.d = 8, p.algo = ATTN_ALGO_SMALLCACHE;
  case_bufs c;
  attn_plan *plan = NULL;
  if (case_alloc(&p, 5, &c) != 0) return 1;
  rc = attn_plan_create(rt, &p, &plan);
  if (rc != ATTN_OK) {
    fprintf(stderr, "child: attn_plan_create: %s: %s\n", attn_strerror(rc), attn_last_error(rt));
    return 1;
  }
  rc = attn_execute(plan, c.q, c.k, c.v, c.o);
  double err = rc == ATTN_OK ? attn_rel_error(c.ref, c.o, c.no) : INFINITY;
  printf("was_cached=%d err=%.3g\n", attn_cpu_was_cached(plan->cpu), err);
  attn_plan_destroy(plan);
  case_free(&c);
  attn_close(rt);
  return err <= TOL ? 0 : 1;
}

/* Starts this program as "child" with its stdout on a pipe; returns the pid, or -1. */
static pid_t spawn_child(int *fd) {
  int pfd[2];
  if (pipe(pfd) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
  posix_spawn_file_actions_addclose(&fa, pfd[0]);
  char self[4096];
  ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
  if (l <= 0) return -1;
  self[l] = '\0';
  char *argv[] = {self, "child", child_arg, NULL};
  pid_t pid;
  int e = posix_spawn(&pid, self, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(pfd[1]);
  if (e != 0) {
    close(pfd[0]);
    return -1;
  }
  *fd = pfd[0];
  return pid;
}

/* Waits for a child, returns the was_cached it printed, or -1 when it failed. */
static int finish_child(pid_t pid, int fd) {
  if (pid < 0) {
    CHECK(0, "cannot start the child process");
    return -1;
  }
  char out[4096];
  size_t used = 0;
  ssize_t r;
  while ((r = read(fd, out + used, sizeof out - 1 - used)) > 0) used += (size_t)r;
  out[used] = '\0';
  close(fd);
  int status = 0;
  waitpid(pid, &status, 0);
  printf("child: %s", out);
  const char *w = strstr(out, "was_cached=");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !w) {
    CHECK(0, "child failed (status %d)", status);
    return -1;
  }
  return atoi(w + 11);
}

static int run_child(void) {
  int fd = -1;
  pid_t pid = spawn_child(&fd);
  return finish_child(pid, fd);
}

static void empty_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char path[8192];
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') {
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      unlink(path);
    }
  closedir(d);
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "child") == 0) return child(argc > 2 && strcmp(argv[2], "small") == 0);
  if (argc < 2) {
    fprintf(stderr, "usage: cpu_cache DIR [db|race|fifo] | cpu_cache child\n");
    return 2;
  }
  const int use_db = argc > 2 && strcmp(argv[2], "db") == 0;
  const int race = argc > 2 && strcmp(argv[2], "race") == 0;
  const int fifo = argc > 2 && strcmp(argv[2], "fifo") == 0;
  if (fifo) child_arg = "small";
  unsetenv("CC"); /* the default compiler, "cc", so the database mode can hide it through PATH */
  char cache[4096], db[4200];
  snprintf(cache, sizeof cache, "%s/cache-XXXXXX", argv[1]);
  if (!mkdtemp(cache)) {
    fprintf(stderr, "mkdtemp %s failed\n", cache);
    return 1;
  }
  setenv("ATTN_CACHE_DIR", cache, 1);
  snprintf(db, sizeof db, "%s/tune.db", cache);
  setenv("ATTN_DB", db, 1);
  if (use_db) {
    attn_db *h = NULL;
    char err[512];
    int rc = attn_db_open(db, 1, &h, err, sizeof err);
    CHECK(rc == ATTN_OK, "creating %s: %s", db, err);
    attn_db_close(h);
  }
  if (race) {
    /* Two processes compiling the same kernel into one empty cache at the same moment: both must succeed. */
    int fa = -1, fb = -1;
    pid_t a = spawn_child(&fa), b = spawn_child(&fb);
    int ra = finish_child(a, fa), rb = finish_child(b, fb);
    CHECK(ra >= 0 && rb >= 0, "racing processes: %d and %d", ra, rb);
    CHECK(run_child() == 1, "after the race the kernel should be cached");
    if (!failures) empty_dir(cache), rmdir(cache);
    printf("cpu_cache race: %d failures\n", failures);
    return failures ? 1 : 0;
  }
  int first = run_child();
  CHECK(first == 0, "first process: was_cached=%d, want 0 (it should compile)", first);
  if (fifo) {
    /* Nothing ever writes to these: a plain open for reading waits forever (the test's TIMEOUT fails it then). */
    DIR *d = opendir(cache);
    struct dirent *e;
    char path[8192], fifos[8][8192];
    int planted = 0;
    while (d && (e = readdir(d)) && planted < 8)
      if (strstr(e->d_name, ".so")) {
        snprintf(path, sizeof path, "%s/%s", cache, e->d_name);
        CHECK(unlink(path) == 0 && mkfifo(path, 0600) == 0, "cannot plant a FIFO at %s", path);
        snprintf(fifos[planted++], sizeof fifos[0], "%s", path);
      }
    if (d) closedir(d);
    CHECK(planted == 1, "%d cached objects, want the one kernel's", planted);
    printf("planted a FIFO under the cached kernel's name; the next process must compile again\n");
    int again = run_child();
    CHECK(again == 0, "FIFO in the cache: was_cached=%d, want 0 (it should compile again)", again);
    struct stat st;
    for (int i = 0; i < planted; i++)
      CHECK(lstat(fifos[i], &st) == 0 && S_ISREG(st.st_mode), "%s was not replaced by the compiled object", fifos[i]);
    if (!failures) empty_dir(cache), rmdir(cache);
    printf("cpu_cache fifo: %d failures\n", failures);
    return failures ? 1 : 0;
  }
  if (use_db) {
    /* Only the database holds the kernel now, and there is no compiler to fall back on. */
    char so[4096];
    snprintf(so, sizeof so, "%s", cache);
    DIR *d = opendir(so);
    struct dirent *e;
    char path[8192];
    while (d && (e = readdir(d)))
      if (strstr(e->d_name, ".so")) {
        snprintf(path, sizeof path, "%s/%s", cache, e->d_name);
        unlink(path);
      }
    if (d) closedir(d);
    /* Same compiler name (part of the artifact key) but nothing on PATH to run. */
    setenv("PATH", "/nonexistent", 1);
  }
  int second = run_child();
  CHECK(second == 1, "second process: was_cached=%d, want 1 (it should load the cached kernel)", second);
  if (!use_db) {
    /* A damaged object in the cache (say a full disk) is rebuilt, not fatal. */
    DIR *d = opendir(cache);
    struct dirent *e;
    char path[8192];
    while (d && (e = readdir(d)))
      if (strstr(e->d_name, ".so")) {
        snprintf(path, sizeof path, "%s/%s", cache, e->d_name);
        FILE *f = fopen(path, "wb");
        if (f) fputs("truncated", f), fclose(f);
      }
    if (d) closedir(d);
    int third = run_child();
    CHECK(third == 0, "damaged cache: was_cached=%d, want 0 (it should recompile)", third);
  }
  if (!failures) empty_dir(cache), rmdir(cache);
  printf("cpu_cache%s: %d failures\n", use_db ? " db" : "", failures);
  return failures ? 1 : 0;
}
