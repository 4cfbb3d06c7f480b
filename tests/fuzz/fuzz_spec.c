/* fuzz_spec.c: libFuzzer target for the canonical spec text (gen/spec.c), the key under which the database stores a
 * kernel and which the runtime parses back from every stored row. The input is the text (cut at its first NUL, as a
 * database TEXT column read with sqlite3_column_text would be). A text that parses must be a valid spec whose
 * canonical form (attn_spec_format) parses back to the same spec and formats to the same text again; and the spec
 * must instantiate (attn_spec_source) and describe itself (attn_spec_summary) without fault. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spec.h"

#define CHECK(c)                                                                   \
  do {                                                                             \
    if (!(c)) {                                                                    \
      fprintf(stderr, "fuzz_spec: %s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
      abort();                                                                     \
    }                                                                              \
  } while (0)

/* Field by field (no padding bytes compared); split 0 and 1 are one kernel (spec.h: 1 comes back as 0). */
static int same_spec(const attn_spec *a, const attn_spec *b) {
  return a->algo == b->algo && a->target == b->target && a->dtype == b->dtype && a->d == b->d && a->br == b->br &&
         a->bc == b->bc && a->causal == b->causal && a->unroll == b->unroll &&
         (a->split > 1 ? a->split : 0) == (b->split > 1 ? b->split : 0) && a->warps == b->warps &&
         a->stages == b->stages && strcmp(a->arch, b->arch) == 0 && a->tile == b->tile && a->feature == b->feature &&
         a->degree == b->degree && a->rank == b->rank && a->seed == b->seed;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) abort();
  memcpy(text, data, size);
  text[size] = '\0';
  attn_spec s, t;
  char err[256], canon[512], canon2[512];
  memset(&s, 0xa5, sizeof s); /* a parser that reads a field it never set shows up as a mismatch below */
  err[0] = '\0';
  int rc = attn_spec_parse(text, &s, err, sizeof err);
  if (rc != ATTN_OK) {
    CHECK(rc == ATTN_EINVAL || rc == ATTN_EUNSUPPORTED);
    CHECK(err[0] != '\0');
    free(text);
    return 0;
  }
  CHECK(memchr(s.arch, '\0', sizeof s.arch) != NULL);
  CHECK(attn_spec_check(&s, err, sizeof err) == ATTN_OK);
  /* canonical text: fits the parser's limit, parses back to this spec, and is a fixed point */
  int n = attn_spec_format(&s, canon, sizeof canon);
  CHECK(n > 0 && (size_t)n < sizeof canon);
  CHECK(strchr(canon, '\n') == NULL);
  memset(&t, 0x5a, sizeof t);
  rc = attn_spec_parse(canon, &t, err, sizeof err);
  if (rc != ATTN_OK) fprintf(stderr, "fuzz_spec: '%s' does not parse back: %s\n", canon, err);
  CHECK(rc == ATTN_OK);
  if (!same_spec(&s, &t)) fprintf(stderr, "fuzz_spec: '%s' parses back to another spec\n", canon);
  CHECK(same_spec(&s, &t));
  CHECK(attn_spec_format(&t, canon2, sizeof canon2) == n && strcmp(canon, canon2) == 0);
  /* truncated output keeps snprintf's contract */
  char small[16];
  CHECK(attn_spec_format(&s, small, sizeof small) == n && strlen(small) == sizeof small - 1);
  char sum[256];
  int k = attn_spec_summary(&s, sum, sizeof sum);
  CHECK(k > 0 && (size_t)k < sizeof sum);
  /* instantiation: a valid spec always has a template in this build, and its canonical text is in the first line */
  CHECK(attn_spec_template(&s) != NULL);
  char *src = attn_spec_source(&s, (int)(size & 1), err, sizeof err);
  if (!src) fprintf(stderr, "fuzz_spec: no source for '%s': %s\n", canon, err);
  CHECK(src != NULL);
  const char *nl = strchr(src, '\n');
  CHECK(nl && memmem(src, (size_t)(nl - src), canon, (size_t)n) != NULL);
  free(src);
  free(text);
  return 0;
}
