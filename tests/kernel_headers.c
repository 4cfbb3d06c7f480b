/* kernel_headers: the generated CPU kernels that need no <immintrin.h> do not include it (parsing it was a fifth of
 * a kernel's compile time, 0.33 s with gcc 12), on an AVX2 target (-march=haswell) and an AVX-512 one
 * (-march=skylake-avx512): half-precision forward kernels of every template, every backward kernel. The f16 backward,
 * which takes both the F16C conversions (templates/kernel_abi.h) and the backward's FMA builtins, compiles clean
 * (-Wall -Wextra -Werror) on both targets with $CC (else cc) and with clang where it is installed. Preprocessing and
 * syntax only: no object is built. argv[1]: a directory for the sources. */
#include "check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spec.h"

static const char *const marches[] = {"haswell", "skylake-avx512"};

typedef struct {
  const char *spec;
  int backward;
  int avx512; /* also free of it with AVX-512 (flash's forward takes its 512-bit intrinsics from the header) */
} kernel;

static const kernel kernels[] = {
    {"flash cpu bf16 d=64 br=64 bc=128 causal=0", 0, 0},
    {"flash cpu f16 d=64 br=64 bc=128 causal=1", 0, 0},
    {"flash cpu f32 d=64 br=64 bc=64 causal=0", 1, 1},
    {"flash cpu bf16 d=80 br=32 bc=64 causal=1", 1, 1},
    {"flash cpu f16 d=64 br=64 bc=64 causal=0", 1, 1},
    {"lowrank cpu bf16 d=64 br=64 bc=128 causal=0 feature=random degree=2 rank=256 seed=1", 0, 1},
    {"lowrank cpu f16 d=64 br=64 bc=128 causal=0 feature=random degree=2 rank=256 seed=1", 1, 1},
    {"smallcache cpu f16 d=64 br=64 bc=64 causal=0 tile=32", 0, 1},
};

/* Writes the kernel's source to path; 0 on success. */
static int write_source(const kernel *k, const char *path) {
  attn_spec s;
  char err[256];
  if (attn_spec_parse(k->spec, &s, err, sizeof err) != ATTN_OK) {
    CHECK(0, "%s: %s", k->spec, err);
    return -1;
  }
  char *src = k->backward ? attn_spec_source_backward(&s, 0, err, sizeof err) : attn_spec_source(&s, 0, err, sizeof err);
  CHECK(src != NULL, "%s: %s", k->spec, err);
  if (!src) return -1;
  FILE *f = fopen(path, "w");
  int ok = f && fputs(src, f) >= 0;
  if (f && fclose(f) != 0) ok = 0;
  free(src);
  CHECK(ok, "cannot write %s", path);
  return ok ? 0 : -1;
}

/* Runs cmd; returns its exit status (-1 if it did not run) and counts the output lines that contain needle. */
static int run(const char *cmd, const char *needle, int *hits) {
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  char line[4096];
  *hits = 0;
  while (fgets(line, sizeof line, p))
    if (needle && strstr(line, needle)) (*hits)++;
  return pclose(p);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: kernel_headers DIR\n");
    return 2;
  }
  const char *cc = getenv("CC");
  if (!cc || !*cc) cc = "cc";
  char cmd[8192];
  int hits;
  snprintf(cmd, sizeof cmd, "%s --version >/dev/null 2>&1", cc);
  if (run(cmd, NULL, &hits) != 0) {
    printf("skipped: no C compiler '%s'\n", cc);
    return 77;
  }
  const int clang = run("clang --version >/dev/null 2>&1", NULL, &hits) == 0;
  char path[4096];
  for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
    const kernel *k = &kernels[i];
    snprintf(path, sizeof path, "%s/kernel_headers_%zu.c", argv[1], i);
    if (write_source(k, path) != 0) continue;
    for (int m = 0; m < 1 + k->avx512; m++) {
      /* the line markers of the preprocessed text name every header read */
      snprintf(cmd, sizeof cmd, "%s -march=%s -E %s 2>&1", cc, marches[m], path);
      const int st = run(cmd, "immintrin.h\"", &hits);
      CHECK(st == 0, "%s: exit %d", cmd, st);
      CHECK(hits == 0, "%s%s -march=%s includes <immintrin.h>", k->spec, k->backward ? " backward" : "", marches[m]);
      printf("%s%s -march=%s: %s\n", k->spec, k->backward ? " backward" : "", marches[m], hits ? "immintrin.h" : "no immintrin.h");
    }
  }
  /* kernels[4]: the f16 backward */
  snprintf(path, sizeof path, "%s/kernel_headers_4.c", argv[1]);
  const char *ccs[] = {cc, clang ? "clang" : NULL};
  for (int c = 0; c < 2 && ccs[c]; c++)
    for (int m = 0; m < 2; m++) {
      snprintf(cmd, sizeof cmd, "%s -O3 -march=%s -Wall -Wextra -Werror -fsyntax-only %s 2>&1", ccs[c], marches[m], path);
      const int st = run(cmd, "", &hits);
      CHECK(st == 0 && hits == 0, "%s: exit %d, %d lines of diagnostics", cmd, st, hits);
      printf("%s -march=%s: f16 backward %s\n", ccs[c], marches[m], st == 0 && hits == 0 ? "clean" : "FAILED");
    }
  if (!clang) printf("clang not installed: its syntax check skipped\n");
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
