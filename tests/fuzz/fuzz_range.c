/* fuzz_range.c: libFuzzer target for the CLI's numbers (tuner/range.c): attn_range_parse (RANGE arguments) and
 * attn_parse_long / attn_parse_int (single integers). The input is the argument's text (cut at its first NUL, as
 * argv would be). Beyond "no crash, no leak, no UB", every accepted value must be what range.h promises. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "attn.h"
#include "range.h"

#define CHECK(c)                                                                    \
  do {                                                                              \
    if (!(c)) {                                                                     \
      fprintf(stderr, "fuzz_range: %s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
      abort();                                                                      \
    }                                                                               \
  } while (0)

/* The text as a C string: a NUL inside ends it, as it would end an argv entry. */
static char *text_of(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s) abort();
  memcpy(s, data, size);
  s[size] = '\0';
  return s;
}

/* 1 when s is [+-]?[0-9]+ and nothing else: what "a whole decimal integer" (range.h) means. */
static int plain_integer(const char *s) {
  if (*s == '+' || *s == '-') s++;
  if (!*s) return 0;
  for (; *s; s++)
    if (*s < '0' || *s > '9') return 0;
  return 1;
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

static void check_range(const char *s) {
  int *v = (int *)(uintptr_t)1, n = -1; /* poisoned: the parser must set both */
  char err[256];
  err[0] = '\0';
  int rc = attn_range_parse(s, &v, &n, err, sizeof err);
  if (rc != ATTN_OK) {
    CHECK(rc == ATTN_EINVAL);
    CHECK(v == NULL && n == 0);
    CHECK(err[0] != '\0'); /* a reason (it quotes the argument as given, newlines and all) */
    return;
  }
  CHECK(v != NULL && n >= 1 && n <= ATTN_RANGE_MAX);
  /* positive, duplicates dropped (sorted copy: up to 4096 values, quadratic checks would dominate the run) */
  int *sorted = malloc((size_t)n * sizeof *sorted);
  if (!sorted) abort();
  memcpy(sorted, v, (size_t)n * sizeof *sorted);
  qsort(sorted, (size_t)n, sizeof *sorted, cmp_int);
  CHECK(sorted[0] > 0);
  for (int i = 1; i < n; i++) CHECK(sorted[i] != sorted[i - 1]);
  const char *dots = strstr(s, "..");
  if (dots) {
    /* a range: ascending from lo, never past hi, by doubling or by the step */
    long lo = strtol(s, NULL, 10), hi = strtol(dots + 2, NULL, 10);
    const char *colon = strchr(dots + 2, ':');
    long step = colon ? strtol(colon + 1, NULL, 10) : 0;
    CHECK(v[0] == lo && v[n - 1] <= hi);
    for (int i = 1; i < n; i++) CHECK(step ? v[i] == v[i - 1] + step : v[i] == 2L * v[i - 1]);
    CHECK(step ? v[n - 1] + step > hi : 2L * v[n - 1] > hi); /* and none left out at the top */
  } else {
    /* a list: every item, in order; a single value is a list of one */
    CHECK(strchr(s, ':') == NULL);
    char *end;
    const char *p = s;
    int k = 0;
    for (;;) {
      long x = strtol(p, &end, 10);
      /* the next new value, or one kept already (its first place is before k) */
      if (k < n && v[k] == x) {
        k++;
      } else {
        CHECK(x >= 1 && x <= INT_MAX);
        int *hit = bsearch(&(int){(int)x}, sorted, (size_t)n, sizeof *sorted, cmp_int);
        CHECK(hit != NULL);
        int seen = 0; /* its first place is before k: v[0..k) holds it */
        for (int j = 0; j < k && !seen; j++) seen = v[j] == x;
        CHECK(seen);
      }
      if (*end != ',') break;
      p = end + 1;
    }
    CHECK(*end == '\0' && k == n);
  }
  free(sorted);
  free(v);
}

static void check_single(const char *s) {
  static const long bounds[][2] = {{LONG_MIN, LONG_MAX}, {0, 0xffffffffL}, {1, 4096}, {INT_MIN, INT_MAX}};
  for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++) {
    long lv = 12345;
    int iv = 12345;
    if (attn_parse_long(s, bounds[i][0], bounds[i][1], &lv) == 0) {
      CHECK(plain_integer(s));
      CHECK(lv >= bounds[i][0] && lv <= bounds[i][1]);
      CHECK(lv == strtol(s, NULL, 10));
    } else {
      CHECK(lv == 12345); /* untouched on failure */
    }
    if (attn_parse_int(s, bounds[i][0], bounds[i][1], &iv) == 0) {
      CHECK(plain_integer(s));
      CHECK(bounds[i][0] >= INT_MIN && bounds[i][1] <= INT_MAX && iv >= bounds[i][0] && iv <= bounds[i][1]);
      CHECK(iv == strtol(s, NULL, 10));
    } else {
      CHECK(iv == 12345);
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = text_of(data, size);
  check_range(s);
  check_single(s);
  free(s);
  return 0;
}
