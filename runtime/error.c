/* error.c: the runtime's error state (error.h). Per thread: a failure reported in one thread never overwrites what
 * another thread reads, so that attn_last_error's text stays valid and unchanged until the calling thread's next
 * failure, whatever other threads do with the same runtime. */
#include "error.h"
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include "internal.h"

static _Thread_local char tls_any[ATTN_ERRLEN];      /* this thread's last failure, on any runtime or none */
static _Thread_local char tls_rt[ATTN_ERRLEN];       /* this thread's last failure on a runtime ... */
static _Thread_local unsigned long long tls_rt_id;   /* ... which one (attn_runtime.id; 0: none yet) */

int attn_fail(attn_runtime *rt, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tls_any, sizeof tls_any, fmt, ap);
  va_end(ap);
  if (rt) {
    memcpy(tls_rt, tls_any, strlen(tls_any) + 1);
    tls_rt_id = rt->id;
  }
  return code;
}

const char *attn_error_last(const attn_runtime *rt) {
  if (!rt) return tls_any;
  return rt->id == tls_rt_id ? tls_rt : rt->note;
}

void attn_error_forget(const attn_runtime *rt) {
  if (rt && rt->id == tls_rt_id) tls_rt_id = 0;
}

unsigned long long attn_error_runtime_id(void) {
  static atomic_ullong next = 1;
  return atomic_fetch_add_explicit(&next, 1, memory_order_relaxed);
}
