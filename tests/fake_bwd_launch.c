/* fake_bwd_launch LIBCUDA: tests/fake_libcuda.c copies a launch's parameter block as the driver does, the kernel's
 * own size: a backward module's entries (attn_bwd_pre asked for) take attn_cuda_bwd_kargs, 136 bytes on the caller's
 * stack, which the fake read as the forward's 168-byte attn_cuda_kargs before (an overread: the sanitizer build's
 * AddressSanitizer sees it, label sanitize). Here: a backward launch's record (its heads and n) and the block the
 * hook gets are the caller's, the rest zero; a forward module's launch still copies attn_cuda_kargs whole. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include "check.h"
#include "fake_libcuda.h"
#include "kernel_abi_cuda.h"
#include "kernel_abi_cuda_bwd.h"

typedef int (*load_fn)(void **, const void *);
typedef int (*get_fn)(void **, void *, const char *);
typedef int (*unload_fn)(void *);
typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                         void **, void **);
typedef int (*sync_fn)(void *);

static unsigned char seen[sizeof(attn_cuda_kargs)];
static void hook(const void *params, unsigned grid, unsigned block, unsigned smem, void *user) {
  (void)grid, (void)block, (void)smem, (void)user;
  memcpy(seen, params, sizeof seen);
}

int main(int argc, char **argv) {
  void *h = argc > 1 ? dlopen(argv[1], RTLD_NOW) : NULL;
  load_fn load = h ? (load_fn)dlsym(h, "cuModuleLoadData") : NULL;
  get_fn get = h ? (get_fn)dlsym(h, "cuModuleGetFunction") : NULL;
  unload_fn unload = h ? (unload_fn)dlsym(h, "cuModuleUnload") : NULL;
  launch_fn launch = h ? (launch_fn)dlsym(h, "cuLaunchKernel") : NULL;
  sync_fn sync = h ? (sync_fn)dlsym(h, "cuStreamSynchronize") : NULL;
  fake_cuda_record_fn record = h ? (fake_cuda_record_fn)dlsym(h, "fake_cuda_record") : NULL;
  fake_cuda_set_hook_fn set_hook = h ? (fake_cuda_set_hook_fn)dlsym(h, "fake_cuda_set_hook") : NULL;
  if (!load || !get || !unload || !launch || !sync || !record || !set_hook) {
    printf("FAIL: the fake driver %s is not loadable: %s\n", argc > 1 ? argv[1] : "(none given)", dlerror());
    return 1;
  }
  set_hook(hook, NULL);
  for (int backward = 0; backward < 2; backward++) {
    void *mod = NULL, *fn = NULL, *pre = NULL;
    CHECK(load(&mod, "image") == 0 && get(&fn, mod, "attn_kernel") == 0, "a module and its attn_kernel");
    if (backward) CHECK(get(&pre, mod, "attn_bwd_pre") == 0, "attn_bwd_pre");
    attn_cuda_bwd_kargs b;
    attn_cuda_kargs a;
    memset(&b, 0x5a, sizeof b); /* padding too: every byte the caller's */
    memset(&a, 0x5a, sizeof a);
    b.heads = 3, b.n = 77, a.heads = 5, a.n = 11;
    void *params[] = {backward ? (void *)&b : (void *)&a};
    fake_cuda_calls calls;
    record(&calls, 1);
    memset(seen, 0xee, sizeof seen);
    CHECK(launch(fn, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL) == 0 && sync(NULL) == 0, "launch and wait");
    record(&calls, 0);
    const long long heads = backward ? b.heads : a.heads, n = backward ? b.n : a.n;
    CHECK(calls.launches == 1 && calls.last_heads == heads && calls.last_n == n,
          "backward=%d: the record says heads %lld n %lld, the block %lld and %lld", backward, calls.last_heads,
          calls.last_n, heads, n);
    const size_t mine = backward ? sizeof b : sizeof a;
    int rest_zero = 1;
    for (size_t i = mine; i < sizeof seen; i++) rest_zero &= seen[i] == 0;
    CHECK(memcmp(seen, params[0], mine) == 0 && rest_zero,
          "backward=%d: the hook's block is not the caller's %zu bytes then zeros", backward, mine);
    CHECK(unload(mod) == 0, "unload");
  }
  printf("fake_bwd_launch: %d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
