/* spec_bwd.h: the CPU backward's specs (templates/flash_bwd.c, and templates/lowrank_bwd.c for lowrank's
 * approximation): which ones the templates take. */
#ifndef ATTN_SPEC_BWD_H
#define ATTN_SPEC_BWD_H

#include "spec.h"

/* The largest Br (query rows per block) and Bc (key rows per block) the CPU backward takes, each on its own, and the
 * most scratch a thread may need for its blocks (templates/flash_bwd.c's FB_FIXED_FLOATS, in bytes). */
#define ATTN_BWD_MAX_BLOCK 512
#define ATTN_BWD_MAX_SCRATCH (8L << 20)

/* Bytes of a thread's scratch for the blocks of the backward of s (what grows with Br, Bc, d and d_v). */
long attn_spec_backward_scratch(const attn_spec *s);

/* attn_spec_check, then what the CPU backward templates need: lowrank on the cpu as attn_spec_check takes it (the
 * forward's spec: the same features), or flash on the cpu with Br and Bc each in
 * 1..ATTN_BWD_MAX_BLOCK (tuned apart, as FlashAttention-2 does); the blocks' scratch within ATTN_BWD_MAX_SCRATCH;
 * no split or unroll (forward-only fields: a value would name the same kernel twice). ATTN_OK, or ATTN_EINVAL /
 * ATTN_EUNSUPPORTED with a one-line reason in err. */
int attn_spec_check_backward(const attn_spec *s, char *err, size_t errlen);

#endif
