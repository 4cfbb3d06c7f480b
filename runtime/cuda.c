/* cuda.c: placeholder until the CUDA backend lands; every call reports no device. */
#include "internal.h"
int attn_cuda_open(attn_runtime *rt, attn_cuda **out) { *out = NULL; return attn_fail(rt, ATTN_ENODEV, "CUDA backend not built"); }
void attn_cuda_close(attn_cuda *c) { (void)c; }
int attn_cuda_load(attn_runtime *rt, const attn_spec *s, int count_io, attn_cuda_kernel **out) { (void)s; (void)count_io; *out = NULL; return attn_fail(rt, ATTN_ENODEV, "CUDA backend not built"); }
int attn_cuda_run(attn_runtime *rt, const attn_cuda_kernel *k, const attn_problem *p, const void *q, const void *kk, const void *v, void *o) { (void)k; (void)p; (void)q; (void)kk; (void)v; (void)o; return attn_fail(rt, ATTN_ENODEV, "CUDA backend not built"); }
void attn_cuda_unload(attn_cuda_kernel *k) { (void)k; }
