/* cpu_compile: a compiler that is missing or fails gives ATTN_ECOMPILE, *out NULL, and a message naming the
 * compiler and carrying its log. argv[1]: a directory for fresh (empty) cache directories. */
#include <string.h>
#include <unistd.h>
#include "cpu_util.h"

static void expect_compile_failure(const char *dir, const char *cc, const char *needle) {
  char cache[4096];
  snprintf(cache, sizeof cache, "%s/cc-XXXXXX", dir);
  if (!mkdtemp(cache)) {
    CHECK(0, "mkdtemp %s failed", cache);
    return;
  }
  setenv("ATTN_CACHE_DIR", cache, 1);
  setenv("CC", cc, 1);
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CPU, &rt);
  CHECK(rc == ATTN_OK, "attn_open: %s", attn_strerror(rc));
  if (rc != ATTN_OK) return;
  attn_problem p = {.batch = 1, .heads = 1, .n = 10, .d = 40};
  attn_plan *plan = (attn_plan *)(void *)&failures;
  rc = attn_plan_create(rt, &p, &plan);
  const char *msg = attn_last_error(rt);
  printf("CC=%s -> %s: %s\n", cc, attn_strerror(rc), msg);
  CHECK(rc == ATTN_ECOMPILE, "CC=%s: got %s, want ATTN_ECOMPILE", cc, attn_strerror(rc));
  CHECK(plan == NULL, "CC=%s: *out not NULL", cc);
  CHECK(strstr(msg, cc) != NULL, "CC=%s: message does not name the compiler", cc);
  CHECK(strstr(msg, needle) != NULL, "CC=%s: message lacks the log line '%s'", cc, needle);
  attn_close(rt);
  rmdir(cache); /* a failed compile leaves nothing behind, so the directory is empty again */
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: cpu_compile DIR\n");
    return 2;
  }
  expect_compile_failure(argv[1], "/nonexistent/cc", "/nonexistent/cc");
  /* A real compiler that fails: its own output must reach the message. */
  expect_compile_failure(argv[1], "cc -fno-such-option-attntune", "no-such-option-attntune");
  printf("cpu_compile: %d failures\n", failures);
  return failures ? 1 : 0;
}
