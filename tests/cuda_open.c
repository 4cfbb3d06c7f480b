/* cuda_open: attn_open(ATTN_TARGET_CUDA) against fake drivers (tests/fake_libcuda.c through ATTN_LIBCUDA): no device
 * and the stub give ATTN_ENODEV; a broken driver, a failed context, a missing entry point, a pre-sm_80 device and a
 * bad ATTN_CUDA_DEVICE give their own codes with a one-line reason naming the cause; a working one opens.
 *   cuda_open FAKE_LIBCUDA FAKE_LIBCUDA_NOCTX */
#include "check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

typedef struct {
  const char *lib;      /* "full", "noctx", or a path */
  const char *fake;     /* $FAKE_LIBCUDA */
  const char *ordinal;  /* $ATTN_CUDA_DEVICE, NULL: unset */
  int code;
  const char *says[2];  /* the reason contains these */
} open_case;

static const open_case cases[] = {
    {"full", "init=100", NULL, ATTN_ENODEV, {"no CUDA device", "CUDA_ERROR_NO_DEVICE"}},
    {"full", "init=34", NULL, ATTN_ENODEV, {"no CUDA driver", "stub"}},
    {"full", "count=0", NULL, ATTN_ENODEV, {"no CUDA device", "reports none"}},
    {"noctx", "init=100", NULL, ATTN_ENODEV, {"no CUDA device", NULL}},
    {"full", "init=999", NULL, ATTN_ERUNTIME, {"cuInit", "unknown error"}},
    {"full", "init=3", NULL, ATTN_ERUNTIME, {"cuInit", "CUDA error 3"}},
    {"full", "ctx=2", NULL, ATTN_ERUNTIME, {"cuDevicePrimaryCtxRetain", "out of memory"}},
    {"noctx", "", NULL, ATTN_ERUNTIME, {"lacks cuDevicePrimaryCtxRetain", NULL}},
    {"libm.so.6", "", NULL, ATTN_ERUNTIME, {"not a CUDA driver", "cuInit"}},
    {"full", "cc=75", NULL, ATTN_EUNSUPPORTED, {"sm_75", "sm_80 or later"}},
    {"full", "cc=70,ctx=2", NULL, ATTN_EUNSUPPORTED, {"sm_70", NULL}},
    {"full", "count=1", "1", ATTN_EINVAL, {"ATTN_CUDA_DEVICE=1", "0..0"}},
    {"full", "count=2", "x1", ATTN_EINVAL, {"ATTN_CUDA_DEVICE=x1", "0..1"}},
    {"full", "count=2", "-1", ATTN_EINVAL, {"ATTN_CUDA_DEVICE=-1", NULL}},
    {"full", "cc=86", NULL, ATTN_OK, {"sm_86", "Fake GPU 0"}},
    {"full", "count=2,cc=90", "1", ATTN_OK, {"sm_90", "Fake GPU 1"}},
};

static int set(const char *name, const char *value) {
  int rc = value ? setenv(name, value, 1) : unsetenv(name);
  CHECK(rc == 0, "cannot set %s", name);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: cuda_open FAKE_LIBCUDA FAKE_LIBCUDA_NOCTX\n");
    return 2;
  }
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const open_case *c = &cases[i];
    const char *lib = !strcmp(c->lib, "full") ? argv[1] : !strcmp(c->lib, "noctx") ? argv[2] : c->lib;
    if (set("ATTN_LIBCUDA", lib) || set("FAKE_LIBCUDA", c->fake) || set("ATTN_CUDA_DEVICE", c->ordinal)) continue;
    attn_runtime *rt = (attn_runtime *)&cases; /* must come back NULL on failure */
    int rc = attn_open(NULL, ATTN_TARGET_CUDA, &rt);
    char said[1200];
    if (rc == ATTN_OK && rt) {
      attn_cuda_info_t info;
      int irc = attn_cuda_info(rt, &info);
      CHECK(irc == ATTN_OK, "attn_cuda_info: %s", attn_strerror(irc));
      snprintf(said, sizeof said, "%s %s filed as %s", info.arch, info.name, rt->device);
      /* lowrank's backward is not on CUDA either: refused with its reason, nothing created (flash's: cuda_backward) */
      attn_problem bp = {.batch = 1, .heads = 1, .n = 16, .d = 64, .dtype = ATTN_F16, .algo = ATTN_ALGO_LOWRANK,
                         .tolerance = 0.1};
      attn_plan *bw = (attn_plan *)&cases;
      int brc = attn_plan_create_backward(rt, &bp, &bw);
      CHECK(brc == ATTN_EUNSUPPORTED && bw == NULL && strstr(attn_last_error(rt), "lowrank"),
            "case %zu: attn_plan_create_backward on CUDA gave %s (%s)", i, attn_strerror(brc), attn_last_error(rt));
      attn_close(rt);
    } else {
      snprintf(said, sizeof said, "%s", attn_last_error(NULL));
      CHECK(rt == NULL, "case %zu: a failed attn_open left a runtime behind", i);
    }
    printf("%-12s FAKE_LIBCUDA=%-14s ATTN_CUDA_DEVICE=%-4s -> %s: %s\n", c->lib, c->fake, c->ordinal ? c->ordinal : "",
           attn_strerror(rc), said);
    CHECK(rc == c->code, "case %zu (%s, %s): expected %s, got %s", i, c->lib, c->fake, attn_strerror(c->code),
          attn_strerror(rc));
    CHECK(said[0] && !strchr(said, '\n'), "case %zu: expected a one-line reason, got \"%s\"", i, said);
    for (int k = 0; k < 2; k++)
      CHECK(!c->says[k] || strstr(said, c->says[k]), "case %zu: the reason \"%s\" does not say \"%s\"", i, said,
            c->says[k]);
  }
  /* a CPU runtime still opens after all of that */
  attn_runtime *cpu = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CPU, &cpu);
  CHECK(rc == ATTN_OK && cpu, "the CPU runtime: %s", attn_last_error(NULL));
  attn_close(cpu);
  /* AUTO on a driver without a device serves on the CPU, and the CUDA attempt is not the new runtime's failure */
  if (!set("ATTN_LIBCUDA", argv[1]) && !set("FAKE_LIBCUDA", "init=100") && !set("ATTN_CUDA_DEVICE", NULL)) {
    attn_runtime *rt = NULL;
    rc = attn_open(NULL, ATTN_TARGET_AUTO, &rt);
    CHECK(rc == ATTN_OK && rt, "AUTO without a device: %s: %s", attn_strerror(rc), attn_last_error(NULL));
    if (rc == ATTN_OK) {
      CHECK(rt->target == ATTN_TARGET_CPU, "AUTO without a device opened %d", (int)rt->target);
      CHECK(attn_last_error(rt)[0] == '\0', "AUTO's runtime reports the CUDA attempt: \"%s\"", attn_last_error(rt));
      attn_close(rt);
    }
  }
  printf("cuda_open: %d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
