/* range.h: the numbers of the attntune CLI: the RANGE syntax (--d, --n, ...) and single integers:
 *   "64..256"     doubling: 64, 128, 256
 *   "64..256:32"  step: 64, 96, ..., 256
 *   "64,80,128"   list (duplicates dropped, order kept)
 *   "64"          one value */
#ifndef ATTN_RANGE_H
#define ATTN_RANGE_H

#include <stddef.h>

#define ATTN_RANGE_MAX 4096 /* more values than this is a mistake, not a range */

/* ATTN_OK with *vals malloc'd (caller frees) and *count >= 1; ATTN_EINVAL with a one-line reason in err
 * (empty text, not a number, non-positive or too large values, "64..", "256..64", step 0, too many values). */
int attn_range_parse(const char *s, int **vals, int *count, char *err, size_t errlen);

/* A whole decimal integer in [lo, hi], nothing else in s: 0 and *out, or -1. For single-valued options. */
int attn_parse_long(const char *s, long lo, long hi, long *out);
int attn_parse_int(const char *s, long lo, long hi, int *out);

/* A comma list of names, each through parse (< 0 for an unknown name): 0 with their bits set in *mask, or -1 with
 * the first unknown name (or all of s when it names none) in bad. For --algo and --dtype. */
int attn_names_parse(const char *s, int (*parse)(const char *), unsigned *mask, char *bad, size_t blen);
/* attn_algo_parse without "auto": a value for attn_names_parse. */
int attn_algo_parse_exact(const char *s);

#endif
