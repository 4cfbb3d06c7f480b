/* half.c: IEEE binary16 and bfloat16 conversions for host data, round to nearest even, with infinities, NaNs and
 * subnormals handled (the kernels read and write these formats); the bit-level work is kernel_abi.h's, which the
 * generated CPU kernels use too, so host and kernels round alike. */
#include "internal.h"

unsigned short attn_f32_to_f16(float x) { return attn_f32_f16(x); }
float attn_f16_to_f32(unsigned short h) { return attn_f16_f32(h); }
unsigned short attn_f32_to_bf16(float x) { return attn_f32_bf16(x); }
float attn_bf16_to_f32(unsigned short h) { return attn_bf16_f32(h); }
