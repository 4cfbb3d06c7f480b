/* range.c: parses the CLI's RANGE arguments (doubling, stepped, list, single value) into a list of ints, its
 * single integers and its comma lists of names (--algo, --dtype). */
#include "range.h"
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "attn.h"
#include "spec.h"

/* A positive decimal int spanning exactly [b, e); -1 when not a number, -2 when <= 0, -3 when too large. */
static int number(const char *b, const char *e, int *out) {
  if (b == e) return -1;
  for (const char *p = b; p < e; p++)
    if (!isdigit((unsigned char)*p) && !(p == b && (*p == '-' || *p == '+') && e - b > 1)) return -1;
  char buf[32];
  if ((size_t)(e - b) >= sizeof buf) return -3;
  memcpy(buf, b, (size_t)(e - b));
  buf[e - b] = '\0';
  errno = 0;
  long long v = strtoll(buf, NULL, 10);
  if (errno == ERANGE || v > INT_MAX) return -3;
  if (v <= 0) return -2;
  *out = (int)v;
  return 0;
}

static int bad_number(int why, const char *s, const char *b, const char *e, char *err, size_t len) {
  int w = (int)(e - b);
  if (why == -2) return attn_errf(err, len, ATTN_EINVAL, "range '%s': %.*s must be a positive integer", s, w, b);
  if (why == -3) return attn_errf(err, len, ATTN_EINVAL, "range '%s': %.*s is too large", s, w, b);
  if (b == e) return attn_errf(err, len, ATTN_EINVAL, "range '%s': a number is missing", s);
  return attn_errf(err, len, ATTN_EINVAL, "range '%s': '%.*s' is not a number", s, w, b);
}

static int push(int **v, int *n, int *cap, int x, const char *s, char *err, size_t len) {
  for (int i = 0; i < *n; i++)
    if ((*v)[i] == x) return ATTN_OK;
  if (*n >= ATTN_RANGE_MAX)
    return attn_errf(err, len, ATTN_EINVAL, "range '%s' has more than %d values", s, ATTN_RANGE_MAX);
  if (*n == *cap) {
    int c = *cap ? *cap * 2 : 16;
    int *p = realloc(*v, (size_t)c * sizeof *p);
    if (!p) return attn_errf(err, len, ATTN_EINVAL, "range '%s': out of memory", s);
    *v = p;
    *cap = c;
  }
  (*v)[(*n)++] = x;
  return ATTN_OK;
}

int attn_range_parse(const char *s, int **vals, int *count, char *err, size_t errlen) {
  if (vals) *vals = NULL;
  if (count) *count = 0;
  if (!vals || !count) return attn_errf(err, errlen, ATTN_EINVAL, "range: no output");
  if (!s) return attn_errf(err, errlen, ATTN_EINVAL, "range is missing");
  const char *end = s + strlen(s);
  if (s == end) return attn_errf(err, errlen, ATTN_EINVAL, "range is empty: expected 64..256, 64..256:32, 64,80,128 or 64");
  int *v = NULL, n = 0, cap = 0, rc = ATTN_OK, why;
  const char *dots = strstr(s, "..");
  if (dots) {
    if (strchr(s, ','))
      return attn_errf(err, errlen, ATTN_EINVAL, "range '%s': use either a list (64,80) or a range (64..256), not both", s);
    const char *colon = strchr(dots + 2, ':');
    const char *hi_end = colon ? colon : end;
    int lo, hi, step = 0;
    if ((why = number(s, dots, &lo))) return bad_number(why, s, s, dots, err, errlen);
    if (dots + 2 == hi_end) /* 2L: lo may be INT_MAX */
      return attn_errf(err, errlen, ATTN_EINVAL, "range '%s': the upper end is missing (e.g. %d..%lld)", s, lo, 2LL * lo);
    if ((why = number(dots + 2, hi_end, &hi))) return bad_number(why, s, dots + 2, hi_end, err, errlen);
    if (colon) {
      if (colon[1] == '0' && strspn(colon + 1, "0") == strlen(colon + 1))
        return attn_errf(err, errlen, ATTN_EINVAL, "range '%s': step 0 never reaches %d", s, hi);
      if ((why = number(colon + 1, end, &step))) return bad_number(why, s, colon + 1, end, err, errlen);
    }
    if (hi < lo) return attn_errf(err, errlen, ATTN_EINVAL, "range '%s': %d..%d is descending (write %d..%d)", s, lo, hi, hi, lo);
    /* in 64 bits: hi - lo, x + step and x * 2 pass INT_MAX near the top of the range (long is 32 bits on some ABIs) */
    if (step && ((long long)hi - lo) / step + 1 > ATTN_RANGE_MAX)
      return attn_errf(err, errlen, ATTN_EINVAL, "range '%s' has more than %d values", s, ATTN_RANGE_MAX);
    for (long long x = lo; x <= hi && rc == ATTN_OK; x = step ? x + step : x * 2)
      rc = push(&v, &n, &cap, (int)x, s, err, errlen);
  } else {
    for (const char *b = s; rc == ATTN_OK;) {
      const char *c = strchr(b, ',');
      const char *e = c ? c : end;
      int x;
      if ((why = number(b, e, &x))) {
        free(v);
        if (b == e) return attn_errf(err, errlen, ATTN_EINVAL, "range '%s': empty item in the list", s);
        return bad_number(why, s, b, e, err, errlen);
      }
      rc = push(&v, &n, &cap, x, s, err, errlen);
      if (!c) break;
      b = c + 1;
    }
  }
  if (rc != ATTN_OK) {
    free(v);
    return rc;
  }
  *vals = v;
  *count = n;
  return ATTN_OK;
}

int attn_parse_long(const char *s, long lo, long hi, long *out) {
  char *end;
  /* strtol would skip leading white space (" 5", "\n5"): the number must be all there is */
  if (!isdigit((unsigned char)*s) && *s != '-' && *s != '+') return -1;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

int attn_parse_int(const char *s, long lo, long hi, int *out) {
  long v;
  if (lo < INT_MIN || hi > INT_MAX || attn_parse_long(s, lo, hi, &v)) return -1;
  *out = (int)v;
  return 0;
}

int attn_names_parse(const char *s, int (*parse)(const char *), unsigned *mask, char *bad, size_t blen) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s);
  *mask = 0;
  char *save = NULL;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int v = parse(t);
    if (v < 0) {
      snprintf(bad, blen, "%s", t);
      return -1;
    }
    *mask |= 1u << v;
  }
  if (!*mask) snprintf(bad, blen, "%s", s);
  return *mask ? 0 : -1;
}

int attn_algo_parse_exact(const char *s) {
  int v = attn_algo_parse(s);
  return v == ATTN_ALGO_AUTO ? -1 : v;
}
