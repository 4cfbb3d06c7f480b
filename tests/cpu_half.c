/* cpu_half: f16 and bf16 conversions — exact values, round to nearest even, overflow, subnormals, Inf and NaN. */
#include <string.h>
#include "cpu_util.h"

static unsigned bits(float x) {
  unsigned u;
  memcpy(&u, &x, 4);
  return u;
}

int main(void) {
  static const struct { float x; unsigned short h; } f16[] = {
      {0.0f, 0x0000},         {-0.0f, 0x8000},        {1.0f, 0x3c00},          {-2.0f, 0xc000},
      {65504.0f, 0x7bff},     {65519.99f, 0x7bff},    {65520.0f, 0x7c00},      {1e9f, 0x7c00},
      {0x1p-14f, 0x0400},     {0x1p-24f, 0x0001},     {0x1p-25f, 0x0000},      {0x1.8p-25f, 0x0001},
      {0x3p-25f, 0x0002},     {0x1.ffcp-15f, 0x0400}, {1.0f + 0x1p-11f, 0x3c00}, {1.0f + 0x3p-11f, 0x3c02},
      {0.1f, 0x2e66},         {INFINITY, 0x7c00},     {-INFINITY, 0xfc00},     {0x1p-15f, 0x0200}};
  for (size_t i = 0; i < sizeof f16 / sizeof f16[0]; i++) {
    unsigned short h = attn_f32_to_f16(f16[i].x);
    CHECK(h == f16[i].h, "f32_to_f16(%a) = 0x%04x, want 0x%04x", (double)f16[i].x, h, f16[i].h);
  }
  CHECK((attn_f32_to_f16(NAN) & 0x7c00) == 0x7c00 && (attn_f32_to_f16(NAN) & 0x3ff), "f16 NaN");
  CHECK(isnan(attn_f16_to_f32(0x7e00)), "f16 NaN back");
  CHECK(attn_f16_to_f32(0x7c00) == INFINITY && attn_f16_to_f32(0xfc00) == -INFINITY, "f16 Inf back");
  CHECK(attn_f16_to_f32(0x0001) == 0x1p-24f, "f16 smallest subnormal back");
  CHECK(attn_f16_to_f32(0x03ff) == 0x3ffp-24f, "f16 largest subnormal back");
  CHECK(bits(attn_f16_to_f32(0x8000)) == 0x80000000u, "f16 -0 back");
  /* Every finite f16 round-trips exactly. */
  int rt_bad = 0;
  for (unsigned h = 0; h < 0x10000; h++) {
    if ((h & 0x7c00) == 0x7c00) continue;
    if (attn_f32_to_f16(attn_f16_to_f32((unsigned short)h)) != h) rt_bad++;
  }
  CHECK(rt_bad == 0, "%d f16 values do not round-trip", rt_bad);

  static const struct { float x; unsigned short h; } bf[] = {
      {1.0f, 0x3f80}, {-1.0f, 0xbf80}, {0x1.01p0f, 0x3f80}, {0x1.018p0f, 0x3f81}, {0x1.03p0f, 0x3f82},
      {0x1.fffffep127f, 0x7f80}, {INFINITY, 0x7f80}, {0x1p-133f, 0x0001}, {0.0f, 0x0000}};
  for (size_t i = 0; i < sizeof bf / sizeof bf[0]; i++) {
    unsigned short h = attn_f32_to_bf16(bf[i].x);
    CHECK(h == bf[i].h, "f32_to_bf16(%a) = 0x%04x, want 0x%04x", (double)bf[i].x, h, bf[i].h);
  }
  CHECK(isnan(attn_bf16_to_f32(attn_f32_to_bf16(NAN))), "bf16 NaN");
  CHECK(attn_bf16_to_f32(0x3fc0) == 1.5f, "bf16 1.5 back");
  for (unsigned h = 0; h < 0x10000; h++) {
    if ((h & 0x7f80) == 0x7f80) continue;
    if (attn_f32_to_bf16(attn_bf16_to_f32((unsigned short)h)) != h) rt_bad++;
  }
  CHECK(rt_bad == 0, "%d bf16 values do not round-trip", rt_bad);
  printf("cpu_half: %d failures\n", failures);
  return failures ? 1 : 0;
}
