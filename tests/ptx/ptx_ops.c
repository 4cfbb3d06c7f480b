/* ptx_ops.c: what one lane's arithmetic, logic, comparison and conversion instructions compute, and mma.sync's
 * product of fragments, as the PTX ISA defines them: .ftz flushes subnormal f32 inputs and results to signed zero;
 * f32 add, sub, mul, div and sqrt are computed in double and rounded once (exact for these, as 53 >= 2*24 + 2);
 * .approx instructions return the correctly rounded value, well inside their documented error; float-to-integer
 * conversions saturate and send NaN to 0. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "ptx_internal.h"

static uint64_t mask_of(int bits) { return bits >= 64 ? ~0ull : (1ull << bits) - 1; }
static int64_t sext(uint64_t v, int bits) {
  if (bits >= 64) return (int64_t)v;
  const uint64_t m = 1ull << (bits - 1);
  v &= mask_of(bits);
  return (int64_t)((v ^ m) - m);
}

static double f64(uint64_t b) {
  double d;
  memcpy(&d, &b, 8);
  return d;
}
static uint64_t bits64(double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  return u;
}

/* a double rounded to float in mode r (RN when R_NONE) */
static float round_f32(double x, ptx_round r) {
  float f = (float)x;
  if (isnan(x) || isinf(x) || (double)f == x || r == R_NONE || r == R_RN) return f;
  if (r == R_RZ) {
    if (fabs((double)f) > fabs(x)) f = nextafterf(f, 0.0f);
  } else if (r == R_RM) {
    if ((double)f > x) f = nextafterf(f, -INFINITY);
  } else if (r == R_RP) {
    if ((double)f < x) f = nextafterf(f, INFINITY);
  }
  return f;
}

/* ---- half precision ---- */

float ptx_f16_to_f32(uint16_t h) {
  const uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
  uint32_t u;
  if (e == 31) {
    u = s | 0x7f800000u | (m << 13);
  } else if (e == 0) {
    float f = ldexpf((float)m, -24);
    return s ? -f : f;
  } else {
    u = s | ((e + 112) << 23) | (m << 13);
  }
  return ptx_f32(u);
}

uint16_t ptx_f32_to_f16(float f, ptx_round r) {
  const uint32_t u = (uint32_t)ptx_bits32(f);
  const uint16_t s = (uint16_t)((u >> 16) & 0x8000);
  if (isnan(f)) return 0x7fff;
  const double a = fabs((double)f);
  if (isinf(f)) return (uint16_t)(s | 0x7c00);
  /* scale to the f16 grid: ulp 2^-24 below 2^-14, else 2^(e-10) */
  int e;
  frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
  int ulpexp = e - 11;
  if (ulpexp < -24) ulpexp = -24;
  const double q = ldexp(a, -ulpexp); /* integral part: the significand on the grid */
  double fl = floor(q), rem = q - fl;
  const int neg = s != 0;
  int up;
  switch (r) {
  case R_RZ: up = 0; break;
  case R_RM: up = neg && rem > 0; break;
  case R_RP: up = !neg && rem > 0; break;
  default: up = rem > 0.5 || (rem == 0.5 && fmod(fl, 2.0) != 0); break;
  }
  const double v = ldexp(fl + up, ulpexp);
  if (v >= 65520.0 || (v > 65504.0)) {
    if (r == R_RZ || (r == R_RM && !neg) || (r == R_RP && neg)) return (uint16_t)(s | 0x7bff);
    return (uint16_t)(s | 0x7c00);
  }
  if (v < ldexp(1.0, -14)) return (uint16_t)(s | (uint16_t)ldexp(v, 24));
  int ve;
  const double vm = frexp(v, &ve); /* v = vm * 2^ve, vm in [0.5,1) */
  const uint16_t exp = (uint16_t)(ve - 1 + 15), man = (uint16_t)((vm * 2.0 - 1.0) * 1024.0);
  return (uint16_t)(s | (exp << 10) | man);
}

float ptx_bf16_to_f32(uint16_t h) { return ptx_f32((uint64_t)h << 16); }

uint16_t ptx_f32_to_bf16(float f, ptx_round r) {
  uint32_t u = (uint32_t)ptx_bits32(f);
  if (isnan(f)) return 0x7fff;
  const uint32_t low = u & 0xffff, sign = u >> 31;
  uint32_t hi = u >> 16;
  int up;
  switch (r) {
  case R_RZ: up = 0; break;
  case R_RM: up = sign && low; break;
  case R_RP: up = !sign && low; break;
  default: up = low > 0x8000 || (low == 0x8000 && (hi & 1)); break;
  }
  return (uint16_t)(hi + (uint32_t)up);
}

/* ---- helpers ---- */

static int err(char *why, size_t len, const char *msg) {
  snprintf(why, len, "%s", msg);
  return -1;
}

static int fcmp(ptx_cmp c, double a, double b) {
  const int un = isnan(a) || isnan(b);
  switch (c) {
  case C_EQ: return !un && a == b;
  case C_NE: return !un && a != b;
  case C_LT: return !un && a < b;
  case C_LE: return !un && a <= b;
  case C_GT: return !un && a > b;
  case C_GE: return !un && a >= b;
  case C_EQU: return un || a == b;
  case C_NEU: return un || a != b;
  case C_LTU: return un || a < b;
  case C_LEU: return un || a <= b;
  case C_GTU: return un || a > b;
  case C_GEU: return un || a >= b;
  case C_NUM: return !un;
  case C_NAN: return un;
  default: return -1;
  }
}

static int icmp(ptx_cmp c, uint64_t a, uint64_t b, int bits, int sgn) {
  const int64_t sa = sext(a, bits), sb = sext(b, bits);
  a &= mask_of(bits);
  b &= mask_of(bits);
  switch (c) {
  case C_EQ: return a == b;
  case C_NE: return a != b;
  case C_LT: return sgn ? sa < sb : a < b;
  case C_LE: return sgn ? sa <= sb : a <= b;
  case C_GT: return sgn ? sa > sb : a > b;
  case C_GE: return sgn ? sa >= sb : a >= b;
  case C_LO: return a < b;
  case C_LS: return a <= b;
  case C_HI: return a > b;
  case C_HS: return a >= b;
  default: return -1;
  }
}

static int boolop(int bop, int x, int c) {
  switch (bop) {
  case M_AND: return x && c;
  case M_OR: return x || c;
  case M_XOR: return x != c;
  default: return x;
  }
}

/* float value of bits of type t (f16, bf16, f32, f64) */
static double fval(ptx_type t, uint64_t b, int flush) {
  switch (t) {
  case T_F16: return ptx_f16_to_f32((uint16_t)b);
  case T_BF16: return ptx_bf16_to_f32((uint16_t)b);
  case T_F32: return flush ? ptx_ftz(ptx_f32(b)) : ptx_f32(b);
  default: return f64(b);
  }
}

static uint64_t fbits(ptx_type t, double v, ptx_round r, int flush) {
  switch (t) {
  case T_F16: return ptx_f32_to_f16((float)v, r); /* only exact f32 values reach here */
  case T_BF16: return ptx_f32_to_bf16((float)v, r);
  case T_F32: {
    float f = round_f32(v, r);
    return ptx_bits32(flush ? ptx_ftz(f) : f);
  }
  default: return bits64(v);
  }
}

static double round_integral(double x, ptx_round r) {
  switch (r) {
  case R_RNI: return nearbyint(x); /* the default rounding mode is to nearest even */
  case R_RZI: return trunc(x);
  case R_RMI: return floor(x);
  case R_RPI: return ceil(x);
  default: return x;
  }
}

static int cvt(const ptx_insn *in, const uint64_t *src, uint64_t *dst, char *why, size_t len) {
  const ptx_type dt = (ptx_type)in->type, st = (ptx_type)in->type2;
  const int flush = (in->flags & F_FTZ) != 0;
  const int db = ptx_type_bits(dt), sb = ptx_type_bits(st);
  if (dt == T_F16X2 || dt == T_BF16X2) { /* cvt.rn.f16x2.f32 d, a, b: a to the upper half, b to the lower */
    if (st != T_F32) return err(why, len, "cvt to f16x2/bf16x2 from a type other than f32");
    float a = ptx_f32(src[0]), b = ptx_f32(src[1]);
    if (in->flags & F_RELU) {
      a = isnan(a) ? a : fmaxf(a, 0.0f);
      b = isnan(b) ? b : fmaxf(b, 0.0f);
    }
    const ptx_round r = in->rnd ? (ptx_round)in->rnd : R_RN;
    const uint16_t ha = dt == T_F16X2 ? ptx_f32_to_f16(a, r) : ptx_f32_to_bf16(a, r);
    const uint16_t hb = dt == T_F16X2 ? ptx_f32_to_f16(b, r) : ptx_f32_to_bf16(b, r);
    *dst = ((uint64_t)ha << 16) | hb;
    return 0;
  }
  const int dfl = ptx_type_is_float(dt), sfl = ptx_type_is_float(st);
  if (!db || !sb) return err(why, len, "cvt between unsupported types");
  if (!dfl && !sfl) { /* integer to integer: truncate or extend, .sat clamps to the destination's range */
    const int ss = ptx_type_is_signed(st), ds = ptx_type_is_signed(dt);
    uint64_t v = ss ? (uint64_t)sext(src[0], sb) : src[0] & mask_of(sb);
    if (in->flags & F_SAT) {
      if (ss) {
        const int64_t x = (int64_t)v;
        const int64_t lo = ds ? -(int64_t)(1ull << (db - 1)) : 0;
        const int64_t hi = ds ? (int64_t)((1ull << (db - 1)) - 1) : (db >= 64 ? INT64_MAX : (int64_t)mask_of(db));
        v = (uint64_t)(x < lo ? lo : x > hi ? hi : x);
      } else {
        const uint64_t hi = ds ? (1ull << (db - 1)) - 1 : mask_of(db);
        if (v > hi) v = hi;
      }
    }
    *dst = v & mask_of(db);
    return 0;
  }
  if (sfl && dfl) {
    double v = fval(st, src[0], flush && st == T_F32);
    ptx_round r = (ptx_round)in->rnd;
    if (r >= R_RNI) {
      if (dt != st) return err(why, len, "cvt with an integral rounding between float types");
      v = round_integral(v, r);
      r = R_RN;
    }
    if (dt == T_F16 || dt == T_BF16) {
      /* the f32 or f64 value rounded once to the 16-bit format */
      const float fv = st == T_F64 ? (float)v : (float)v;
      if (st == T_F64 && (double)fv != v) return err(why, len, "cvt f64 -> f16/bf16 of an inexact value");
      *dst = dt == T_F16 ? ptx_f32_to_f16(fv, r ? r : R_RN) : ptx_f32_to_bf16(fv, r ? r : R_RN);
      return 0;
    }
    if (in->flags & F_SAT) v = isnan(v) ? 0.0 : v < 0 ? 0.0 : v > 1 ? 1.0 : v;
    *dst = fbits(dt, v, r, flush && dt == T_F32);
    return 0;
  }
  if (!sfl && dfl) { /* integer to float, rounded */
    const double v = ptx_type_is_signed(st) ? (double)sext(src[0], sb) : (double)(src[0] & mask_of(sb));
    if (sb == 64) { /* 64-bit integers need not be exact in double: round from the integer itself */
      if (dt == T_F64 && (in->rnd == R_RN || !in->rnd)) {
        *dst = bits64(ptx_type_is_signed(st) ? (double)(int64_t)src[0] : (double)src[0]);
        return 0;
      }
      if (dt == T_F32 && (in->rnd == R_RN || !in->rnd)) {
        *dst = ptx_bits32(ptx_type_is_signed(st) ? (float)(int64_t)src[0] : (float)src[0]);
        return 0;
      }
      return err(why, len, "cvt from a 64-bit integer with a rounding other than .rn");
    }
    if (dt == T_F16 || dt == T_BF16) {
      const float fv = (float)v;
      *dst = dt == T_F16 ? ptx_f32_to_f16(fv, in->rnd ? (ptx_round)in->rnd : R_RN)
                         : ptx_f32_to_bf16(fv, in->rnd ? (ptx_round)in->rnd : R_RN);
      return 0;
    }
    *dst = fbits(dt, v, (ptx_round)in->rnd, 0);
    return 0;
  }
  /* float to integer: integral rounding (.rzi default for f -> i is not allowed: the mode is required), saturate */
  double v = fval(st, src[0], flush && st == T_F32);
  if (in->rnd < R_RNI) return err(why, len, "cvt from float to integer needs .rni, .rzi, .rmi or .rpi");
  v = round_integral(v, (ptx_round)in->rnd);
  const int ds = ptx_type_is_signed(dt);
  if (isnan(v)) {
    *dst = 0;
    return 0;
  }
  if (ds) {
    const double lo = -ldexp(1.0, db - 1), hi = ldexp(1.0, db - 1) - 1;
    const int64_t x = v <= lo ? (int64_t)lo : v >= hi ? (db == 64 ? INT64_MAX : (int64_t)hi) : (int64_t)v;
    *dst = (uint64_t)x & mask_of(db);
  } else {
    const double hi = ldexp(1.0, db) - 1;
    const uint64_t x = v <= 0 ? 0 : v >= hi ? mask_of(db) : (uint64_t)v;
    *dst = x;
  }
  return 0;
}

/* fmin/fmax as PTX: NaN only when both are NaN (or .NaN); -0 < +0 */
static double fminmax(int is_max, double a, double b, int nan_prop) {
  if (isnan(a) || isnan(b)) {
    if (nan_prop || (isnan(a) && isnan(b))) return NAN;
    return isnan(a) ? b : a;
  }
  if (a == b && a == 0) return is_max ? (signbit(a) ? b : a) : (signbit(a) ? a : b);
  return is_max ? (a > b ? a : b) : (a < b ? a : b);
}

/* The approximate f32 instructions' error, made as large as the bounds below in direction sign (worst-case mode):
 * 2 units in the last place for ex2, div, sqrt and rsqrt, 1 for rcp, 2^-22 absolute for lg2, 2^-20.5 absolute
 * for sin and cos, 2^-10.987 relative for tanh (at or above what the PTX ISA and the CUDA intrinsics' tables give
 * for them). */
static double approx_error(ptx_op op, double v, int sign) {
  if (!sign || !isfinite(v) || v == 0) return v;
  switch (op) {
  case OP_EX2: case OP_DIV: case OP_SQRT: case OP_RSQRT: return v * (1 + sign * ldexp(1.0, -22));
  case OP_RCP: return v * (1 + sign * ldexp(1.0, -23));
  case OP_LG2: return v + sign * ldexp(1.0, -22);
  case OP_SIN: case OP_COS: return v + sign * ldexp(1.4142135623730951, -21); /* 2^-20.5 */
  case OP_TANH: return v * (1 + sign * exp2(-10.987));
  default: return v;
  }
}

static int float_op(const ptx_insn *in, const uint64_t *s, uint64_t *dst, int approx, char *why, size_t len) {
  const ptx_type t = (ptx_type)in->type;
  const int flush = (in->flags & F_FTZ) != 0 && t == T_F32;
  const int is32 = t == T_F32;
  if (t != T_F32 && t != T_F64) return err(why, len, "half-precision arithmetic is not supported");
  const double a = fval(t, s[0], flush), b = in->nops > 2 ? fval(t, s[1], flush) : 0,
               c = in->nops > 3 ? fval(t, s[2], flush) : 0;
  const ptx_round r = (ptx_round)in->rnd;
  double v;
  switch ((ptx_op)in->op) {
  case OP_ADD: v = a + b; break;
  case OP_SUB: v = a - b; break;
  case OP_MUL: v = a * b; break;
  case OP_FMA:
  case OP_MAD:
    if (r != R_RN && r != R_NONE && !is32) return err(why, len, "fma.f64 with a rounding other than .rn");
    if (is32) {
      if (r != R_RN && r != R_NONE) return err(why, len, "fma.f32 with a rounding other than .rn");
      float f = fmaf((float)a, (float)b, (float)c);
      *dst = ptx_bits32(flush ? ptx_ftz(f) : f);
      if (in->flags & F_SAT) *dst = ptx_bits32(isnan(f) ? 0.0f : f < 0 ? 0.0f : f > 1 ? 1.0f : f);
      return 0;
    }
    *dst = bits64(fma(a, b, c));
    return 0;
  case OP_DIV:
    if (is32 && (in->flags & F_APPROX) && fabs(b) > ldexp(1.0, 126) && fabs(b) < INFINITY && isfinite(a)) {
      v = copysign(0.0, a) * (b < 0 ? -1 : 1); /* documented: 0 for 2^126 < |b| < 2^128 */
    } else {
      v = a / b;
    }
    break;
  case OP_NEG:
    if (is32) {
      *dst = ptx_bits32(flush ? ptx_ftz(-(float)a) : -(float)a);
      return 0;
    }
    *dst = s[0] ^ 0x8000000000000000ull;
    return 0;
  case OP_ABS:
    if (is32) {
      *dst = ptx_bits32(fabsf(flush ? ptx_ftz(ptx_f32(s[0])) : ptx_f32(s[0])));
      return 0;
    }
    *dst = s[0] & 0x7fffffffffffffffull;
    return 0;
  case OP_MIN:
  case OP_MAX: v = fminmax(in->op == OP_MAX, a, b, (in->flags & F_NAN) != 0); break;
  case OP_RCP: v = 1.0 / a; break;
  case OP_SQRT: v = sqrt(a); break;
  case OP_RSQRT: v = 1.0 / sqrt(a); break;
  case OP_EX2: v = exp2(a); break;
  case OP_LG2: v = log2(a); break;
  case OP_SIN: v = sin(a); break;
  case OP_COS: v = cos(a); break;
  case OP_TANH: v = tanh(a); break;
  case OP_COPYSIGN: v = copysign(b, a); break;
  default: return err(why, len, "no float form");
  }
  if (is32 && approx &&
      ((in->flags & F_APPROX) || in->op == OP_EX2 || in->op == OP_LG2 || in->op == OP_SIN || in->op == OP_COS ||
       in->op == OP_TANH))
    v = approx_error((ptx_op)in->op, v, approx);
  if (in->flags & F_SAT) v = isnan(v) ? 0.0 : v < 0 ? 0.0 : v > 1 ? 1.0 : v;
  *dst = is32 ? fbits(T_F32, v, r, flush) : bits64(v);
  return 0;
}

int ptx_alu(const ptx_insn *in, const uint64_t *s, int nsrc, uint64_t *dst, uint32_t *carry, int approx, char *why,
            size_t len) {
  (void)nsrc;
  const ptx_type t = (ptx_type)in->type;
  const int bits = ptx_type_bits(t), sgn = ptx_type_is_signed(t);
  const uint64_t m = mask_of(bits);
  const ptx_op op = (ptx_op)in->op;
  if (op == OP_CVT) return cvt(in, s, dst, why, len);
  if (op == OP_SETP) { /* setp.cmp[.bop].type p[|q], a, b[, c] */
    int x;
    if (ptx_type_is_float(t)) {
      const int flush = (in->flags & F_FTZ) != 0 && t == T_F32;
      x = fcmp((ptx_cmp)in->cmp, fval(t, s[0], flush), fval(t, s[1], flush));
    } else {
      x = icmp((ptx_cmp)in->cmp, s[0], s[1], bits, sgn);
    }
    if (x < 0) return err(why, len, "comparison not defined for the type");
    const int c = in->bop ? (int)(s[2] & 1) : 0;
    dst[0] = (uint64_t)boolop(in->bop, x, c);
    dst[1] = (uint64_t)boolop(in->bop, !x, c);
    return 0;
  }
  if (op == OP_SELP) {
    dst[0] = (s[2] & 1) ? s[0] : s[1];
    return 0;
  }
  if (ptx_type_is_float(t) &&
      (op == OP_ADD || op == OP_SUB || op == OP_MUL || op == OP_FMA || op == OP_MAD || op == OP_DIV || op == OP_NEG ||
       op == OP_ABS || op == OP_MIN || op == OP_MAX || op == OP_RCP || op == OP_SQRT || op == OP_RSQRT ||
       op == OP_EX2 || op == OP_LG2 || op == OP_SIN || op == OP_COS || op == OP_TANH || op == OP_COPYSIGN))
    return float_op(in, s, dst, approx, why, len);
  const uint64_t a = s[0] & m, b = s[1] & m, c = s[2] & m;
  const int64_t sa = sext(a, bits), sb = sext(b, bits);
  switch (op) {
  case OP_ADD:
  case OP_ADDC: {
    const uint64_t cin = op == OP_ADDC ? (*carry & 1) : 0;
    const unsigned __int128 w = (unsigned __int128)a + b + cin;
    if (in->flags & F_SAT) { /* .sat: s32 only */
      const int64_t v = sa + sb;
      dst[0] = (uint64_t)(v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : v) & m;
      return 0;
    }
    if (in->flags & F_CC) *carry = (uint32_t)((w >> bits) & 1);
    dst[0] = (uint64_t)w & m;
    return 0;
  }
  case OP_SUB:
  case OP_SUBC: { /* CC.CF is the borrow */
    const uint64_t bin = op == OP_SUBC ? (*carry & 1) : 0;
    if (in->flags & F_SAT) {
      const int64_t v = sa - sb;
      dst[0] = (uint64_t)(v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : v) & m;
      return 0;
    }
    if (in->flags & F_CC) *carry = (unsigned __int128)a < (unsigned __int128)b + bin;
    dst[0] = (a - b - bin) & m;
    return 0;
  }
  case OP_MUL:
  case OP_MAD:
  case OP_MADC: {
    /* the full product, then .lo / .hi / .wide */
    __int128 p;
    if (sgn) p = (__int128)sa * sb;
    else p = (__int128)((unsigned __int128)a * b);
    unsigned __int128 r;
    int rbits = bits;
    if (in->flags & F_WIDE) {
      r = (unsigned __int128)p;
      rbits = 2 * bits;
    } else if (in->flags & F_HI) {
      r = (unsigned __int128)(p >> bits);
    } else {
      r = (unsigned __int128)p;
    }
    const uint64_t rm = mask_of(rbits);
    if (op == OP_MUL) {
      dst[0] = (uint64_t)r & rm;
      return 0;
    }
    const uint64_t addend = (in->flags & F_WIDE) ? s[2] & rm : c;
    const uint64_t cin = op == OP_MADC ? (*carry & 1) : 0;
    const unsigned __int128 w = (unsigned __int128)((uint64_t)r & rm) + addend + cin;
    if (in->flags & F_CC) *carry = (uint32_t)((w >> rbits) & 1);
    dst[0] = (uint64_t)w & rm;
    return 0;
  }
  case OP_DIV:
  case OP_REM:
    if (b == 0) return err(why, len, "integer division by zero");
    if (sgn) {
      if (sa == (int64_t)(bits == 64 ? INT64_MIN : -(int64_t)(1ull << (bits - 1))) && sb == -1)
        dst[0] = op == OP_DIV ? a : 0;
      else
        dst[0] = (uint64_t)(op == OP_DIV ? sa / sb : sa % sb) & m;
    } else {
      dst[0] = op == OP_DIV ? a / b : a % b;
    }
    return 0;
  case OP_NEG: dst[0] = (uint64_t)(-sa) & m; return 0;
  case OP_ABS: dst[0] = (uint64_t)(sa < 0 ? -sa : sa) & m; return 0;
  case OP_MIN: dst[0] = sgn ? (uint64_t)(sa < sb ? sa : sb) & m : (a < b ? a : b); return 0;
  case OP_MAX: dst[0] = sgn ? (uint64_t)(sa > sb ? sa : sb) & m : (a > b ? a : b); return 0;
  case OP_AND: dst[0] = a & b; return 0;
  case OP_OR: dst[0] = a | b; return 0;
  case OP_XOR: dst[0] = a ^ b; return 0;
  case OP_NOT: dst[0] = t == T_PRED ? !(a & 1) : ~a & m; return 0;
  case OP_CNOT: dst[0] = a == 0; return 0;
  case OP_SHL: {
    const uint64_t sh = s[1] & 0xffffffffu;
    dst[0] = sh >= (uint64_t)bits ? 0 : (a << sh) & m;
    return 0;
  }
  case OP_SHR: {
    const uint64_t sh = s[1] & 0xffffffffu;
    if (sgn) dst[0] = (uint64_t)(sh >= (uint64_t)bits ? (sa < 0 ? -1 : 0) : sa >> sh) & m;
    else dst[0] = sh >= (uint64_t)bits ? 0 : a >> sh;
    return 0;
  }
  case OP_BFI: { /* bfi d, a, b, pos, len: a's low len bits into b at pos */
    const uint64_t pos = s[2] & 0xff, ln = s[3] & 0xff;
    uint64_t r = b;
    for (uint64_t i = 0; i < ln && pos + i < (uint64_t)bits; i++)
      r = (r & ~(1ull << (pos + i))) | (((a >> i) & 1) << (pos + i));
    dst[0] = r & m;
    return 0;
  }
  case OP_BFE: { /* bfe d, a, pos, len */
    const uint64_t pos = s[1] & 0xff, ln = s[2] & 0xff;
    uint64_t r = 0;
    int sbit = 0;
    if (sgn) sbit = ln == 0 ? 0 : (int)((a >> (pos + ln - 1 < (uint64_t)bits ? pos + ln - 1 : (uint64_t)bits - 1)) & 1);
    for (int i = 0; i < bits; i++) {
      int bit;
      if ((uint64_t)i < ln && pos + (uint64_t)i < (uint64_t)bits) bit = (int)((a >> (pos + (uint64_t)i)) & 1);
      else bit = sgn ? sbit : 0;
      r |= (uint64_t)bit << i;
    }
    dst[0] = r & m;
    return 0;
  }
  case OP_PRMT: { /* default mode only: selector nibbles pick bytes of {b, a} */
    if (in->mode) return err(why, len, "prmt modes other than the default are not supported");
    const uint64_t x = (a & 0xffffffffu) | ((b & 0xffffffffu) << 32);
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) {
      const unsigned sel = (unsigned)(c >> (4 * i)) & 0xf;
      uint32_t byte = (uint32_t)(x >> (8 * (sel & 7))) & 0xff;
      if (sel & 8) byte = (byte & 0x80) ? 0xff : 0;
      r |= byte << (8 * i);
    }
    dst[0] = r;
    return 0;
  }
  case OP_POPC: dst[0] = (uint64_t)__builtin_popcountll(a); return 0;
  case OP_CLZ: dst[0] = a == 0 ? (uint64_t)bits : (uint64_t)(__builtin_clzll(a) - (64 - bits)); return 0;
  case OP_BREV: {
    uint64_t r = 0;
    for (int i = 0; i < bits; i++) r |= ((a >> i) & 1) << (bits - 1 - i);
    dst[0] = r;
    return 0;
  }
  case OP_LOP3: {
    const uint64_t lut = s[3] & 0xff;
    uint64_t r = 0;
    for (int i = 0; i < bits; i++) {
      const unsigned idx = (unsigned)((((a >> i) & 1) << 2) | (((b >> i) & 1) << 1) | ((c >> i) & 1));
      r |= ((lut >> idx) & 1) << i;
    }
    dst[0] = r;
    return 0;
  }
  default: break;
  }
  snprintf(why, len, "%s is not implemented for this type", in->text);
  return -1;
}

/* ---- mma.sync ----
 * m16n8k16 (row A, col B), 16-bit A and B, f32 C and D. Lane l: group g = l / 4, t = l % 4.
 *   A (16 x 16): a0 = A[g][2t, 2t+1], a1 = A[g+8][2t, 2t+1], a2 = A[g][2t+8, +9], a3 = A[g+8][2t+8, +9]
 *   B (16 x 8):  b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g]
 *   C, D (16 x 8): c0, c1 = C[g][2t, 2t+1], c2, c3 = C[g+8][2t, 2t+1]
 * m16n8k8: a0 = A[g][2t, 2t+1], a1 = A[g+8][2t, 2t+1]; b0 = B[2t, 2t+1][g].
 * Each register's lower half is the lower column (or row) index. The products of 16-bit values are exact in
 * double and the sum is rounded once to f32. */
int ptx_mma(const ptx_insn *in, const uint32_t a[32][4], const uint32_t b[32][2], const uint32_t c[32][4],
            uint32_t d[32][4], char *why, size_t len) {
  const int K = in->num;
  const int bf = in->mma_ab == T_BF16;
  if (K != 16 && K != 8) return err(why, len, "unsupported mma shape");
  double A[16][16], B[16][8], C[16][8];
#define H(x) (bf ? (double)ptx_bf16_to_f32((uint16_t)(x)) : (double)ptx_f16_to_f32((uint16_t)(x)))
  for (int l = 0; l < 32; l++) {
    const int g = l / 4, t = l % 4;
    for (int h = 0; h < 2; h++) {
      const int sh = 16 * h;
      A[g][2 * t + h] = H(a[l][0] >> sh);
      A[g + 8][2 * t + h] = H(a[l][1] >> sh);
      if (K == 16) {
        A[g][2 * t + 8 + h] = H(a[l][2] >> sh);
        A[g + 8][2 * t + 8 + h] = H(a[l][3] >> sh);
      }
      B[2 * t + h][g] = H(b[l][0] >> sh);
      if (K == 16) B[2 * t + 8 + h][g] = H(b[l][1] >> sh);
      C[g][2 * t + h] = ptx_f32(c[l][h]);
      C[g + 8][2 * t + h] = ptx_f32(c[l][2 + h]);
    }
  }
#undef H
  for (int l = 0; l < 32; l++) {
    const int g = l / 4, t = l % 4;
    for (int r = 0; r < 2; r++)
      for (int h = 0; h < 2; h++) {
        const int row = g + 8 * r, col = 2 * t + h;
        double sum = C[row][col];
        int nan = isnan(sum);
        for (int k = 0; k < K; k++) sum += A[row][k] * B[k][col];
        nan |= isnan(sum);
        d[l][2 * r + h] = (uint32_t)ptx_bits32(nan ? NAN : (float)sum);
      }
  }
  return 0;
}

/* ---- sm_90 layouts ---- */

uint32_t ptx_swizzle(uint32_t addr, int bits) {
  /* 32B, 64B, 128B swizzles (1, 2, 3 bits): the 16-byte chunk index (address bits 4..) XOR the 128-byte row index
   * (bits 7..) within a repeat of 256, 512 or 1024 bytes (CUTLASS's Swizzle<bits,4,3>) */
  return bits ? addr ^ (((addr >> 7) & ((1u << bits) - 1)) << 4) : addr;
}

uint32_t ptx_gmma_offset(uint64_t desc, int mn, int k, int mnmajor) {
  const uint32_t start = (uint32_t)(desc & 0x3fff) << 4, lbo = (uint32_t)((desc >> 16) & 0x3fff) << 4,
                 sbo = (uint32_t)((desc >> 32) & 0x3fff) << 4;
  const int mode = (int)(desc >> 62); /* 0 interleave (no swizzle), 1 128B, 2 64B, 3 32B */
  const int bits = mode == 1 ? 3 : mode == 2 ? 2 : mode == 3 ? 1 : 0, x = bits ? 1 << bits : 0; /* 16-byte units */
  const uint32_t umn = (uint32_t)mn, uk = (uint32_t)k;
  uint32_t a;
  if (!mnmajor) { /* K-major: 8-row core matrices of 16 bytes per row (a swizzle's width per row when swizzled) */
    if (!x) a = start + umn % 8 * 16 + umn / 8 * sbo + uk % 8 * 2 + uk / 8 * lbo;
    else a = start + umn % 8 * 16 * (uint32_t)x + umn / 8 * sbo + uk * 2;
  } else { /* MN-major: 16-byte runs of 8 MN elements; rows along K */
    if (!x) a = start + umn % 8 * 2 + umn / 8 * sbo + uk % 8 * 16 + uk / 8 * lbo;
    else a = start + umn % (8 * (uint32_t)x) * 2 + umn / (8 * (uint32_t)x) * lbo + uk % 8 * 16 * (uint32_t)x + uk / 8 * sbo;
  }
  return ptx_swizzle(a, bits);
}
