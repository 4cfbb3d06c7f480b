/* half.c: IEEE binary16 and bfloat16 conversions for host data, round to nearest even, with infinities, NaNs and
 * subnormals handled (the GPU kernels read and write these formats). */
#include <stdint.h>
#include <string.h>
#include "internal.h"

static uint32_t bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

static float float_of(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

unsigned short attn_f32_to_f16(float x) {
  const uint32_t u = bits_of(x), sign = (u >> 16) & 0x8000u, mag = u & 0x7fffffffu;
  if (mag >= 0x7f800000u) /* Inf stays Inf; NaN stays a quiet NaN */
    return (unsigned short)(sign | 0x7c00u | (mag > 0x7f800000u ? 0x0200u | ((mag >> 13) & 0x3ffu) : 0));
  if (mag >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u); /* rounds to >= 65520: Inf */
  if (mag < 0x38800000u) {
    /* Subnormal half (or zero): value = mant * 2^-24. Shift the full significand and round to nearest even. */
    if (mag < 0x33000000u) return (unsigned short)sign; /* below half the smallest subnormal: zero */
    const uint32_t e = mag >> 23, m = (mag & 0x7fffffu) | 0x800000u;
    const int shift = 126 - (int)e; /* 14..24 */
    uint32_t h = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return (unsigned short)(sign | h);
  }
  /* Normal: rebias exponent (127 -> 15), round the 13 dropped bits to nearest even; a carry may bump the exponent. */
  uint32_t h = ((mag - 0x38000000u) >> 13);
  const uint32_t rem = mag & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
  return (unsigned short)(sign | h);
}

float attn_f16_to_f32(unsigned short hv) {
  const uint32_t sign = (uint32_t)(hv & 0x8000u) << 16, e = (hv >> 10) & 0x1fu, m = hv & 0x3ffu;
  if (e == 0x1f) return float_of(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    if (m == 0) return float_of(sign);
    /* Subnormal: m * 2^-24, exact in f32. */
    const float v = (float)m * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return float_of(sign | ((e + 112) << 23) | (m << 13));
}

unsigned short attn_f32_to_bf16(float x) {
  const uint32_t u = bits_of(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x0040u); /* quiet NaN */
  /* Round to nearest even on the dropped 16 bits; overflow into the exponent gives Inf, as it should. */
  const uint32_t r = u + 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(r >> 16);
}

float attn_bf16_to_f32(unsigned short h) { return float_of((uint32_t)h << 16); }
