/* cuda_mods_fake FAKE: CUDA plans with score modifiers on the fake driver (tests/fake_libcuda.c, its record in
 * fake_libcuda.h): attn_plan_create picks flash with the problem's modifiers switched on; each launch carries the
 * window and the cap, and a device pointer to the plan's own copy of the ALiBi slopes (the fake's device memory is
 * host memory: its bytes are the slopes given at plan creation, not the caller's array, changed after it); no
 * device memory for the slopes fails plan creation with ATTN_ENOMEM; smallcache is refused with the reason. Exit 77 without NVRTC: the fake driver needs real cubins to get as far as a launch. */
#include <dlfcn.h>
#include <string.h>
#include "cpu_util.h"
#include "fake_libcuda.h"

static fake_cuda_record_fn record;

/* a plan of p0 on rt; its launch must carry p0's modifiers. 77 without NVRTC, else 0 */
static int plan_launch(attn_runtime *rt, const attn_problem *p0, float *slopes) {
  attn_plan *plan = NULL;
  int rc = attn_plan_create(rt, p0, &plan);
  if (rc == ATTN_ECOMPILE && strstr(attn_last_error(rt), "NVRTC is not available")) {
    printf("SKIP: %s\n", attn_last_error(rt));
    return 77;
  }
  CHECK(rc == ATTN_OK, "attn_plan_create: %s: %s", attn_strerror(rc), attn_last_error(rt));
  if (rc != ATTN_OK) return 0;
  const char *desc = attn_plan_describe(plan);
  CHECK(strstr(desc, "flash") && strstr(desc, " window") && strstr(desc, " softcap") &&
            (strstr(desc, " alibi") != NULL) == (slopes != NULL),
        "the plan is not flash with the problem's modifiers: %s", desc);
  float want[8] = {0};
  if (slopes) {
    memcpy(want, slopes, sizeof(float) * (size_t)p0->heads);
    for (int h = 0; h < p0->heads; h++) slopes[h] = 99.0f; /* the plan keeps its own copy */
  }
  /* the fake's kernels do nothing: any 16-byte aligned host memory serves as q, k, v and o */
  static _Alignas(16) unsigned char buf[4][1 << 16];
  fake_cuda_calls c;
  record(&c, 1);
  rc = attn_execute(plan, buf[0], buf[1], buf[2], buf[3]);
  CHECK(rc == ATTN_OK, "attn_execute: %s", attn_last_error(rt));
  record(&c, 1);
  CHECK(c.launches == 1, "%d launches, want 1", c.launches);
  CHECK(c.last_window == p0->window && c.last_softcap == p0->softcap, "the launch has window=%d softcap=%g, want %d %g",
        c.last_window, (double)c.last_softcap, p0->window, (double)p0->softcap);
  if (slopes) {
    CHECK(c.last_alibi && c.last_alibi != slopes && memcmp(c.last_alibi, want, sizeof(float) * (size_t)p0->heads) == 0,
          "the launch's slopes are not the plan's copy on the device (%p)", (const void *)c.last_alibi);
  } else {
    CHECK(c.last_alibi == NULL, "a launch without ALiBi has slopes %p", (const void *)c.last_alibi);
  }
  printf("cuda: %s: its launch carries window=%d softcap=%g%s\n", desc, c.last_window, (double)c.last_softcap,
         slopes ? " and the slopes on the device" : "");
  attn_plan_destroy(plan);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: cuda_mods_fake FAKE_LIBCUDA\n");
    return 2;
  }
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  record = h ? (fake_cuda_record_fn)dlsym(h, "fake_cuda_record") : NULL;
  if (!record) {
    fprintf(stderr, "%s: no fake_cuda_record: %s\n", argv[1], dlerror());
    return 1;
  }
  setenv("ATTN_LIBCUDA", argv[1], 1);
  setenv("FAKE_LIBCUDA", "cc=80", 1);
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CUDA, &rt);
  CHECK(rc == ATTN_OK, "attn_open on the fake driver: %s: %s", attn_strerror(rc), attn_last_error(NULL));
  if (rc != ATTN_OK) return 1;
  float slopes[3] = {0.5f, 0.25f, -0.125f};
  attn_problem p = {.batch = 1, .heads = 3, .heads_kv = 1, .n = 40, .n_kv = 70, .d = 16, .dtype = ATTN_F16,
                    .causal = 1, .window = 17, .softcap = 30.0f, .alibi_slopes = slopes};
  if (plan_launch(rt, &p, slopes) == 77) {
    attn_close(rt);
    return 77;
  }
  /* no device memory for the slopes: plan creation fails, naming them */
  slopes[0] = 0.5f, slopes[1] = 0.25f, slopes[2] = -0.125f;
  setenv("FAKE_LIBCUDA", "cc=80,alloc=2", 1);
  attn_plan *plan = NULL;
  rc = attn_plan_create(rt, &p, &plan);
  CHECK(rc == ATTN_ENOMEM && !plan && strstr(attn_last_error(rt), "ALiBi slopes"),
        "no device memory for the slopes: %s: %s", attn_strerror(rc), attn_last_error(rt));
  setenv("FAKE_LIBCUDA", "cc=80", 1);
  /* smallcache on CUDA applies none of them: refused with the reason */
  p.algo = ATTN_ALGO_SMALLCACHE;
  rc = attn_plan_create(rt, &p, &plan);
  CHECK(rc == ATTN_EUNSUPPORTED && !plan && strstr(attn_last_error(rt), "applies no window"),
        "smallcache with modifiers on cuda: %s: %s", attn_strerror(rc), attn_last_error(rt));
  printf("cuda: smallcache with modifiers: %s\n", attn_last_error(rt));
  attn_close(rt);
  printf("cuda_mods_fake: %d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
