/* gen_embed: a header the templates share (lowrank_feat.h) is embedded in place of their #include (gen/embed.cmake):
 * the embedded lowrank.c, lowrank_bwd.c and lowrank.cu are the files on disk (argv[1]: the templates folder) with
 * the #include line replaced by the header's text between #line markers that keep the compiler's line numbers those
 * of the files, and the generated source of a lowrank kernel, forward and backward, whose hash is the compiled
 * kernel's cache key (runtime/cc.c), holds the header's text: a change to the header rebuilds the kernels that use it.
 */
#include "check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spec.h"
#include "spec_bwd.h"

#define HEADER "lowrank_feat.h"

static char *slurp(const char *dir, const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *text = NULL;
  long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  if (len >= 0 && fseek(f, 0, SEEK_SET) == 0 && (text = malloc((size_t)len + 1))) {
    if (fread(text, 1, (size_t)len, f) != (size_t)len) len = 0;
    text[len] = '\0';
  }
  fclose(f);
  return text;
}

/* The embedded text expected of template `name`: its #include of the header replaced. */
static void check_template(const char *dir, const char *name, const char *header) {
  char *raw = slurp(dir, name);
  const char *inc = raw ? strstr(raw, "#include \"" HEADER "\"\n") : NULL;
  CHECK(inc != NULL, "%s/%s does not include " HEADER, dir, name);
  if (!inc) {
    free(raw);
    return;
  }
  long line = 1;
  for (const char *c = raw; c < inc; c++) line += *c == '\n';
  const size_t cap = strlen(raw) + strlen(header) + 256;
  char *want = malloc(cap);
  if (!want) {
    CHECK(0, "out of memory");
    free(raw);
    return;
  }
  snprintf(want, cap, "%.*s#line 1 \"templates/" HEADER "\"\n%s#line %ld \"templates/%s\"\n%s", (int)(inc - raw), raw,
           header, line + 1, name, inc + strlen("#include \"" HEADER "\"\n"));
  const char *got = attn_template_text(name);
  CHECK(got && strcmp(got, want) == 0, "embedded %s is not %s with " HEADER " in place of its #include (line %ld)",
        name, name, line);
  printf("%s: " HEADER " embedded in place of line %ld\n", name, line);
  free(want);
  free(raw);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: gen_embed TEMPLATES_DIR\n");
    return 2;
  }
  const char *header = attn_template_text(HEADER);
  char *raw = slurp(argv[1], HEADER);
  CHECK(header && raw && strcmp(header, raw) == 0, HEADER " is not embedded as it is on disk");
  free(raw);
  if (!header) return 1;
  check_template(argv[1], "lowrank.c", header);
  check_template(argv[1], "lowrank_bwd.c", header);
  check_template(argv[1], "lowrank.cu", header);
  /* the generated sources (and so the cache keys) hold the header, Taylor and random features alike */
  for (int feat = 0; feat < 2; feat++) {
    attn_spec s = attn_spec_default(ATTN_ALGO_LOWRANK, ATTN_TARGET_CPU, ATTN_F32, 16, 1);
    if (!feat) s.feature = ATTN_FEAT_TAYLOR, s.degree = 2;
    char err[256] = "";
    for (int bwd = 0; bwd < 2; bwd++) {
      char *src = bwd ? attn_spec_source_backward(&s, 0, err, sizeof err) : attn_spec_source(&s, 0, err, sizeof err);
      CHECK(src && strstr(src, header) && !strstr(src, "#include \"" HEADER "\""),
            "%s source of feature %d lacks " HEADER "'s text: %s", bwd ? "backward" : "forward", feat, src ? "" : err);
      free(src);
    }
  }
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
