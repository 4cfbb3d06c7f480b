/* nvrtc.c: placeholder until the NVRTC loader lands. */
#include "internal.h"
int attn_nvrtc_compile(const char *src, const char *name, const char *arch, void **cubin, size_t *len, char **log) { (void)src; (void)name; (void)arch; *cubin = NULL; *len = 0; *log = NULL; return ATTN_ENODEV; }
