/* check.h: what the C tests share: CHECK, which counts a failure and says where and what, and the seed of the
 * fresh random inputs (printed, so that ATTN_TEST_SEED=<seed> replays a failing run). */
#ifndef ATTN_TEST_CHECK_H
#define ATTN_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int failures, checks;

#define CHECK(cond, ...)                                                     \
  do {                                                                       \
    checks++;                                                                \
    if (!(cond)) {                                                           \
      failures++;                                                            \
      fprintf(stderr, "%s:%d: FAIL: %s: ", __FILE__, __LINE__, #cond);       \
      fprintf(stderr, __VA_ARGS__);                                          \
      fputc('\n', stderr);                                                   \
    }                                                                        \
  } while (0)

__attribute__((unused)) static unsigned long long test_seed(void) {
  static unsigned long long s;
  if (!s) {
    const char *e = getenv("ATTN_TEST_SEED");
    s = e && *e ? strtoull(e, NULL, 10) : (unsigned long long)time(NULL) * 2654435761ULL % 1000000007ULL + 1;
    printf("ATTN_TEST_SEED=%llu\n", s);
  }
  return s;
}

#endif
