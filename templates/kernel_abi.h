/* kernel_abi.h: what every generated CPU kernel exports, and the I/O-counting macros.
 * Prepended to each generated C source; the runtime includes it too, so both sides agree. */
#ifndef ATTN_KERNEL_ABI_H
#define ATTN_KERNEL_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* 2: attn_kargs.partials and the optional split-K entry points attn_kernel_partials / attn_kernel_merge.
 * 3: q, k, v, o are untyped: elements of the kernel's ATTN_DTYPE (f32, or f16 / bf16 bits), V and O d_v wide.
 * 4: attn_kargs.lse (forward kernels write the log-normaliser when it is not NULL) and the backward's dout, dq, dk,
 *    dv (templates/flash_bwd.c, which reads o and lse).
 * 5: attn_kargs.window, softcap and alibi: the score modifiers' values (attn.h) for kernels built with ATTN_WINDOW,
 *    ATTN_SOFTCAP or ATTN_ALIBI; 0 (NULL) there means off.
 * 6: attn_kargs.layout, block_table, page_size, max_pages and seq_lens: token-major rows (varlen's packed arrays)
 *    and a paged K/V cache with a key count per sequence, read in place by flash and smallcache (lowrank and the
 *    backward take the dense layout only). */
#define ATTN_KERNEL_ABI_VERSION 6

typedef struct attn_kargs {
  const void *q, *k;       /* [batch][heads|heads_kv][n|n_kv][d] */
  const void *v;           /* [batch][heads_kv][n_kv][d_v] */
  void *o;                 /* [batch][heads][n][d_v] */
  long batch, heads, heads_kv, n, n_kv;
  float scale;
  void *partials;          /* split-K kernels: the partials buffer (set by the runtime); NULL otherwise */
  float *lse;              /* [batch][heads][n]: forward flash writes ln sum_j exp(scale q.k_j) when not NULL (-inf for
                            * a row that sees no key); the backward reads it. NULL for attn_execute */
  const void *dout;        /* backward only: dO like o; dq like q, dk like k, dv like v (o is read: the forward's) */
  void *dq, *dk, *dv;
  long window;             /* > 0: sliding window of w keys (attn.h); read by ATTN_WINDOW kernels */
  float softcap;           /* > 0: c·tanh(s/c) on the scaled scores; read by ATTN_SOFTCAP kernels */
  const float *alibi;      /* [heads] slopes: -slope_h·|i' - j| on the scores; read by ATTN_ALIBI kernels */
  /* Where the rows are (0 and NULL: the layouts above). Flash and smallcache forward kernels only. */
  int layout;              /* ATTN_LAYOUT_QO_TOKENS: q is [batch][n][heads][d], o [batch][n][heads][d_v];
                            * ATTN_LAYOUT_KV_TOKENS: k is [batch][n_kv][heads_kv][d], v [batch][n_kv][heads_kv][d_v] */
  const int *block_table;  /* not NULL: k and v are pages [num_pages][page_size][heads_kv][d or d_v] and key j of
                            * batch b is row j % page_size of page block_table[b * max_pages + j / page_size] */
  long page_size, max_pages;
  const int *seq_lens;     /* not NULL (paged): batch b has seq_lens[b] <= n_kv keys, causal aligned to its last */
} attn_kargs;
#define ATTN_LAYOUT_QO_TOKENS 1
#define ATTN_LAYOUT_KV_TOKENS 2

/* Entries (not bytes) moved between slow memory (the arrays above, and any slow scratch) and fast memory. */
typedef struct attn_io { unsigned long long reads, writes; } attn_io;

/* Counting build: every transfer between slow and fast memory goes through these. */
#ifdef ATTN_COUNT_IO
#define ATTN_IO_READ(io, cnt)  ((io)->reads += (unsigned long long)(cnt))
#define ATTN_IO_WRITE(io, cnt) ((io)->writes += (unsigned long long)(cnt))
#else
#define ATTN_IO_READ(io, cnt)  ((void)(io), (void)(cnt))
#define ATTN_IO_WRITE(io, cnt) ((void)(io), (void)(cnt))
#endif

/* Exported by every CPU kernel (symbols looked up with dlsym):
 *   int    attn_kernel_abi(void);                       returns ATTN_KERNEL_ABI_VERSION
 *   long   attn_kernel_items(const attn_kargs *a);      number of independent work items
 *   size_t attn_kernel_scratch(const attn_kargs *a);    bytes of scratch one thread needs (64-byte aligned by caller)
 *   void   attn_kernel_run(const attn_kargs *a, long item, void *scratch, attn_io *io);
 * Items may run in any order on any thread; io is that thread's own counter (never NULL).
 *
 * Exported, both or neither, by kernels whose items leave partial results to be combined (split-K flash):
 *   size_t attn_kernel_partials(const attn_kargs *a, long *merge_items);
 *          bytes of the partials buffer (64-byte aligned by caller, one per call, shared by all threads; passed to
 *          every item as a->partials) and the number of merge items
 *   void   attn_kernel_merge(const attn_kargs *a, long item, attn_io *io);
 *          merge item 0 .. merge_items-1: combines partials into o; runs after every attn_kernel_run item of the
 *          call has finished, in any order on any thread. */
/* Half-precision conversions, round to nearest even with infinities, NaNs and subnormals kept: the kernels' and the
 * runtime's (runtime/half.c) one definition. Unused attribute: pasted into each kernel's source, where a kernel that
 * needs none of them would otherwise warn. */
#define ATTN_ABI_FN static inline __attribute__((unused))
ATTN_ABI_FN uint32_t attn_bits_f32(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
ATTN_ABI_FN float attn_f32_bits(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

ATTN_ABI_FN uint16_t attn_f32_f16(float x) {
  const uint32_t u = attn_bits_f32(x), sign = (u >> 16) & 0x8000u, mag = u & 0x7fffffffu;
  if (mag >= 0x7f800000u) /* Inf stays Inf; NaN stays a quiet NaN */
    return (uint16_t)(sign | 0x7c00u | (mag > 0x7f800000u ? 0x0200u | ((mag >> 13) & 0x3ffu) : 0));
  if (mag >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: Inf */
  if (mag < 0x38800000u) {
    /* subnormal half (or zero): value = mant * 2^-24; shift the full significand and round to nearest even */
    if (mag < 0x33000000u) return (uint16_t)sign; /* below half the smallest subnormal: zero */
    const uint32_t e = mag >> 23, m = (mag & 0x7fffffu) | 0x800000u;
    const int shift = 126 - (int)e; /* 14..24 */
    uint32_t h = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  /* normal: rebias the exponent (127 -> 15), round the 13 dropped bits to nearest even (a carry bumps the exponent) */
  uint32_t h = (mag - 0x38000000u) >> 13;
  const uint32_t rem = mag & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

ATTN_ABI_FN float attn_f16_f32(uint16_t hv) {
  const uint32_t sign = (uint32_t)(hv & 0x8000u) << 16, e = (hv >> 10) & 0x1fu, m = hv & 0x3ffu;
  if (e == 0x1f) return attn_f32_bits(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    if (m == 0) return attn_f32_bits(sign);
    const float v = (float)m * (1.0f / 16777216.0f); /* subnormal: m * 2^-24, exact in f32 */
    return sign ? -v : v;
  }
  return attn_f32_bits(sign | ((e + 112) << 23) | (m << 13));
}

ATTN_ABI_FN uint16_t attn_f32_bf16(float x) {
  const uint32_t u = attn_bits_f32(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); /* nearest even; overflow gives Inf, as it should */
}

ATTN_ABI_FN float attn_bf16_f32(uint16_t h) { return attn_f32_bits((uint32_t)h << 16); }

#ifdef ATTN_D
/* Alignment. The caller's arrays are only element-aligned (malloc gives 16 bytes past a 64-byte line for large
 * blocks), and vector loads that straddle two cache lines slowed compute-bound loops by 8-25% (flash prefill, AVX2
 * and AVX-512). So the kernels' hot loops read vectors from their own scratch (64-byte aligned by the caller):
 * staged copies of K and V blocks and of Q rows, O accumulated there and stored once; flash reads fp32 V in place
 * only when its rows lie on vector boundaries, and its memory-bound decode kernels read in place (templates/flash.c).
 * A staged copy is the transfer the I/O count already has. ATTN_ALIGN_NOTE(p, bytes) marks such a read; in a build
 * with ATTN_CHECK_ALIGN (tests/cpu_align.c) it counts those not on a `bytes` boundary in attn_align_misses, which
 * must be zero at any alignment of the caller's arrays where the rows are whole vectors. */
#ifdef ATTN_CHECK_ALIGN
unsigned long long attn_align_misses;
#define ATTN_ALIGN_NOTE(p, bytes) \
  ((uintptr_t)(const void *)(p) % (bytes) ? (void)__atomic_fetch_add(&attn_align_misses, 1, __ATOMIC_RELAXED) : (void)0)
#else
#define ATTN_ALIGN_NOTE(p, bytes) ((void)0)
#endif

/* Inside a generated kernel: its element type (ATTN_DTYPE 0 f32, 1 f16, 2 bf16) and row conversions to and from the
 * fp32 the kernels compute in. Native conversions where the target has them (F16C / AVX-512 for f16; bf16 is a shift
 * and a rounding add in any vector unit), the scalar functions above elsewhere and for tails. */
#if !defined(ATTN_DTYPE) || ATTN_DTYPE == 0
typedef float attn_el;
#define ATTN_HALF 0
ATTN_ABI_FN float attn_el_f32(attn_el x) { return x; }
ATTN_ABI_FN attn_el attn_f32_el(float x) { return x; }
#else
typedef uint16_t attn_el;
#define ATTN_HALF 1
ATTN_ABI_FN float attn_el_f32(attn_el x) { return ATTN_DTYPE == 1 ? attn_f16_f32(x) : attn_bf16_f32(x); }
ATTN_ABI_FN attn_el attn_f32_el(float x) { return ATTN_DTYPE == 1 ? attn_f32_f16(x) : attn_f32_bf16(x); }
#endif

/* dst[0..count) = src[0..count) in fp32. */
ATTN_ABI_FN void attn_load_row(float *restrict dst, const attn_el *restrict src, long count) {
  long i = 0;
#if ATTN_HALF && ATTN_DTYPE == 1 && defined(__F16C__)
  /* _mm256_cvtph_ps without <immintrin.h>, whose parsing was a fifth of a kernel's compile time (GCC and Clang name
   * the builtin alike) */
  typedef short i16x8 __attribute__((vector_size(16), aligned(2), may_alias));
  typedef float f32x8 __attribute__((vector_size(32), aligned(4), may_alias));
  for (; i + 8 <= count; i += 8) *(f32x8 *)(dst + i) = __builtin_ia32_vcvtph2ps256(*(const i16x8 *)(src + i));
#elif ATTN_HALF && ATTN_DTYPE == 2
  typedef uint16_t u16x8 __attribute__((vector_size(16), aligned(2), may_alias));
  typedef uint32_t u32x8 __attribute__((vector_size(32)));
  typedef float f32x8 __attribute__((vector_size(32), aligned(4), may_alias));
  for (; i + 8 <= count; i += 8) *(f32x8 *)(dst + i) = (f32x8)(__builtin_convertvector(*(const u16x8 *)(src + i), u32x8) << 16);
#elif !ATTN_HALF
  memcpy(dst, src, sizeof(float) * (size_t)count);
  i = count;
#endif
  for (long t = count - i; t > 0; t--, i++) dst[i] = attn_el_f32(src[i]); /* a counted tail: GCC warns on the plain one */
}

/* dst[0..count) = src[0..count) rounded to the element type (nearest even). */
ATTN_ABI_FN void attn_store_row(attn_el *restrict dst, const float *restrict src, long count) {
  long i = 0;
#if ATTN_HALF && ATTN_DTYPE == 1 && defined(__F16C__)
  /* _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT): rounding immediate 0, nearest even */
  typedef short i16x8 __attribute__((vector_size(16), aligned(2), may_alias));
  typedef float f32x8 __attribute__((vector_size(32), aligned(4), may_alias));
  for (; i + 8 <= count; i += 8) *(i16x8 *)(dst + i) = __builtin_ia32_vcvtps2ph256(*(const f32x8 *)(src + i), 0);
#elif ATTN_HALF && ATTN_DTYPE == 2
  typedef uint16_t u16x8 __attribute__((vector_size(16), aligned(2), may_alias));
  typedef uint32_t u32x8 __attribute__((vector_size(32), aligned(4), may_alias));
  typedef int32_t i32x8 __attribute__((vector_size(32)));
  for (; i + 8 <= count; i += 8) {
    const u32x8 u = *(const u32x8 *)(src + i);
    const i32x8 nan = (u & 0x7fffffffu) > 0x7f800000u; /* lanes of all ones where NaN */
    const u32x8 r = ((u + 0x7fffu + ((u >> 16) & 1u)) & ~(u32x8)nan) | ((u | 0x00400000u) & (u32x8)nan);
    *(u16x8 *)(dst + i) = __builtin_convertvector(r >> 16, u16x8);
  }
#elif !ATTN_HALF
  memcpy(dst, src, sizeof(float) * (size_t)count);
  i = count;
#endif
  for (long t = count - i; t > 0; t--, i++) dst[i] = attn_f32_el(src[i]);
}
#endif

typedef int    (*attn_kernel_abi_fn)(void);
typedef long   (*attn_kernel_items_fn)(const attn_kargs *);
typedef size_t (*attn_kernel_scratch_fn)(const attn_kargs *);
typedef void   (*attn_kernel_run_fn)(const attn_kargs *, long, void *, attn_io *);
typedef size_t (*attn_kernel_partials_fn)(const attn_kargs *, long *);
typedef void   (*attn_kernel_merge_fn)(const attn_kargs *, long, attn_io *);

#endif
