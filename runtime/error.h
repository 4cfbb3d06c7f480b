/* error.h: the runtime's error state (runtime/error.c), below every other runtime file: api.c and the backends
 * report failures here, and attn_last_error reads them back. */
#ifndef ATTN_ERROR_H
#define ATTN_ERROR_H

#include <stddef.h>

#define ATTN_ERRLEN 16384

typedef struct attn_runtime attn_runtime;

/* Records a one-line (or longer, e.g. a compiler log) detail of a failure for the calling thread and returns code.
 * rt may be NULL; a failure on a runtime is kept apart for attn_last_error(rt) in this thread (attn.h). */
int attn_fail(attn_runtime *rt, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* attn_last_error: the calling thread's last failure on rt (rt NULL: on any runtime, or none); for a runtime this
 * thread has not failed on since its open, the runtime's note from attn_open ("" when there was nothing to say). */
const char *attn_error_last(const attn_runtime *rt);

/* Forgets the calling thread's failure on rt: attn_open succeeded after a failure on its way (AUTO without CUDA). */
void attn_error_forget(const attn_runtime *rt);

/* A number no other runtime of this process has had: what the thread's record names its runtime by, so that a new
 * runtime at a freed one's address never shows the old one's failure. */
unsigned long long attn_error_runtime_id(void);

#endif
