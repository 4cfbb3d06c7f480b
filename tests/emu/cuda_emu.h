/* cuda_emu.h: a host emulator of the CUDA subset that templates/{flash,smallcache,lowrank}.cu use, so that
 * tests/cuda_emu.c can run the generated kernels on the CPU. C++17, the standard library and POSIX ucontext; the
 * machine itself is tests/emu/cuda_emu.cpp.
 *
 * Every CUDA thread of a block is a fiber; blocks run one after another. A fiber runs until it reaches a barrier
 * (__syncthreads and its counting forms), a warp collective (__syncwarp, shuffles, votes, ldmatrix, mma) or its end,
 * so every interleaving it produces is one a GPU may produce; the thread order (forward, reverse, random) and the
 * moment cp.async copies land (at issue, or only at the cp.async.wait_group that requires them) vary between runs.
 * Warp collectives wait for all 32 lanes and compute their results from the PTX ISA definitions.
 *
 * What a kernel source may use:
 *   - the CUDA keywords, built-in variables, vector types and intrinsics of this header (included first);
 *   - inline PTX only inside its PTX wrapper section, between the comment lines "---- PTX wrappers ----" and
 *     "---- end of PTX wrappers ----" (templates/flash.cu). tests/cuda_emu.c puts tests/emu/ptx_<template>.h in
 *     place of that section: the same functions on this machine (attn_emu::), written from the PTX ISA
 *     definition of each instruction, and used only while the section's text hashes to the value recorded there.
 *
 * Not modelled: the memory model (every write is visible at once to every thread; no reordering, no caches, so
 * __threadfence and volatile make no difference), concurrency between blocks, timing, the hardware's bank
 * behaviour (ldmatrix phases are only counted against the usual 8 x 16-byte bank-group model), partial-warp
 * member masks, and fast-math's flushing of subnormals and approximate division and square root (host IEEE
 * arithmetic; the approximate exponentials are computed exactly, then flushed as .ftz says). */
#ifndef ATTN_CUDA_EMU_H
#define ATTN_CUDA_EMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __shared__
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
/* kernel_abi_cuda.h defines its I/O-counting macros for device compiles only */
#ifndef __CUDACC_RTC__
#define __CUDACC_RTC__ 1
#endif

struct uint3 { unsigned x, y, z; };
struct __align__(8) float2 { float x, y; };
struct __align__(16) float4 { float x, y, z, w; };
struct __align__(8) uint2 { unsigned x, y; };
struct __align__(16) uint4 { unsigned x, y, z, w; };
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }

/* The dynamic shared memory of the running block (the templates declare it extern __shared__ attn_smem[]). */
extern unsigned char attn_smem[];

namespace attn_emu {

enum Format { F16 = 1, BF16 = 2 }; /* the attn_dtype values of the 16-bit types */

/* the running thread */
uint3 thread_idx();
uint3 block_idx();
uint3 block_dim();
uint3 grid_dim();

/* fatal: the kernel broke a rule of the CUDA/PTX model; reports block, thread and message, exits 3 */
[[noreturn]] void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* shared memory: the shared-window address of a generic pointer into attn_smem, and loads and stores through such
 * addresses (bytes = the access size, which the address must be aligned to) */
unsigned cvta_shared(const void *p);
void ld_shared(unsigned addr, void *dst, int bytes);
void st_shared(unsigned addr, const void *src, int bytes);

/* global memory: a read through the non-coherent path (ld.global.nc) must lie in an input the kernel does not
 * write (q, k, v, and the per-plan constants after attn_init) */
void check_ldg(const void *p, size_t bytes);

/* Barriers and warp collectives, with the source line of the call (the call sites' default arguments
 * __builtin_FILE() and __builtin_LINE()): all threads of a block must wait at the same __syncthreads, and all lanes
 * of a warp at the same .aligned instruction (ldmatrix, mma). Only the full-warp member mask is emulated. */
void bar_sync(const char *file, int line);
/* bar.red.popc: a __syncthreads that also counts the threads whose predicate is nonzero */
int bar_red_popc(int pred, const char *file, int line);
void bar_warp_sync(unsigned mask, const char *file, int line);
/* vote.sync.ballot.b32: bit l of the result is lane l's predicate */
uint32_t vote_ballot(unsigned mask, int pred, const char *file, int line);
enum ShflMode { SHFL_UP, SHFL_DOWN, SHFL_BFLY, SHFL_IDX };
uint32_t shfl_sync(unsigned mask, uint32_t a, ShflMode mode, int b, int c, const char *file, int line);

/* ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 {r0..r3}, [addr] */
void ldmatrix_x4(unsigned addr, bool trans, uint32_t r[4], const char *file, int line);
/* mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32 d, a, b, c with d = c in place */
void mma_m16n8k16(Format f, float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1, const char *file, int line);

/* cp.async.cg.shared.global [dst], [src], cp_size, src_size; commit_group; wait_group n */
void cp_async(unsigned dst, const void *src, int cp_size, int src_size);
void cp_async_commit_group();
void cp_async_wait_group(int n);

/* conversions (round to nearest even; NaN to the canonical NaN) */
uint16_t f32_to_f16(float x);
float f16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float x);
inline float bf16_to_f32(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
/* cvt.rn.{f16,bf16}x2.f32 d, a, b: a converted into the upper half of d, b into the lower */
inline uint32_t cvt_rn_x2(Format f, float a, float b) {
  const uint32_t hi = f == F16 ? f32_to_f16(a) : f32_to_bf16(a), lo = f == F16 ? f32_to_f16(b) : f32_to_bf16(b);
  return hi << 16 | lo;
}
/* ex2.approx.ftz.f32: 2^x with subnormal inputs and results flushed to zero (computed exactly here) */
inline float ex2_approx_ftz(float x) {
  if (fabsf(x) < 1.17549435e-38f) x = 0.0f;
  const float y = exp2f(x);
  return y < 1.17549435e-38f ? 0.0f * y : y;
}

/* the driver: runs the case file argv[1] (tests/emu/emu_case.h) through the kernel (after init, when not null,
 * for the per-plan constants) and writes the result file argv[2]; an entry takes a pointer to attn_cuda_kargs */
typedef void (*Entry)(const void *kargs);
int main_with(int argc, char **argv, Entry kernel, Entry init);

} // namespace attn_emu

#define threadIdx (::attn_emu::thread_idx())
#define blockIdx (::attn_emu::block_idx())
#define blockDim (::attn_emu::block_dim())
#define gridDim (::attn_emu::grid_dim())

#define ATTN_EMU_SITE const char *file_ = __builtin_FILE(), int line_ = __builtin_LINE()
inline void __syncthreads(ATTN_EMU_SITE) { attn_emu::bar_sync(file_, line_); }
inline void __syncwarp(unsigned mask = 0xffffffffu, ATTN_EMU_SITE) { attn_emu::bar_warp_sync(mask, file_, line_); }
inline int __syncthreads_count(int pred, ATTN_EMU_SITE) { return attn_emu::bar_red_popc(pred, file_, line_); }
inline int __syncthreads_or(int pred, ATTN_EMU_SITE) { return attn_emu::bar_red_popc(pred, file_, line_) != 0; }
inline int __syncthreads_and(int pred, ATTN_EMU_SITE) {
  return attn_emu::bar_red_popc(!pred, file_, line_) == 0;
}
inline unsigned __ballot_sync(unsigned mask, int pred, ATTN_EMU_SITE) {
  return attn_emu::vote_ballot(mask, pred, file_, line_);
}
inline int __any_sync(unsigned mask, int pred, ATTN_EMU_SITE) {
  return attn_emu::vote_ballot(mask, pred, file_, line_) != 0;
}
inline int __all_sync(unsigned mask, int pred, ATTN_EMU_SITE) {
  return attn_emu::vote_ballot(mask, pred, file_, line_) == 0xffffffffu;
}

/* CUDA's shuffles in terms of shfl.sync (the operand c built from width as the CUDA headers build it) */
template <class T>
inline T attn_emu_shfl(unsigned mask, T v, attn_emu::ShflMode m, int b, int c, const char *file, int line) {
  static_assert(sizeof(T) == 4, "32-bit shuffles only");
  uint32_t u;
  memcpy(&u, &v, 4);
  u = attn_emu::shfl_sync(mask, u, m, b, c, file, line);
  memcpy(&v, &u, 4);
  return v;
}
template <class T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32, ATTN_EMU_SITE) {
  return attn_emu_shfl(mask, v, attn_emu::SHFL_IDX, src, ((32 - width) << 8) | 0x1f, file_, line_);
}
template <class T> inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32, ATTN_EMU_SITE) {
  return attn_emu_shfl(mask, v, attn_emu::SHFL_UP, (int)delta, (32 - width) << 8, file_, line_);
}
template <class T> inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32, ATTN_EMU_SITE) {
  return attn_emu_shfl(mask, v, attn_emu::SHFL_DOWN, (int)delta, ((32 - width) << 8) | 0x1f, file_, line_);
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32, ATTN_EMU_SITE) {
  return attn_emu_shfl(mask, v, attn_emu::SHFL_BFLY, lane_mask, ((32 - width) << 8) | 0x1f, file_, line_);
}

/* Blocks run one at a time and a fiber is never preempted between its own instructions: a read-modify-write is
 * atomic. */
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
  const unsigned long long old = *p;
  *p = old + v;
  return old;
}
inline int atomicAdd(int *p, int v) {
  const int old = *p;
  *p = old + v;
  return old;
}
inline float atomicAdd(float *p, float v) {
  const float old = *p;
  *p = old + v;
  return old;
}

inline size_t __cvta_generic_to_shared(const void *p) { return attn_emu::cvta_shared(p); }
template <class T> inline T __ldg(const T *p) {
  attn_emu::check_ldg(p, sizeof(T));
  return *p;
}

inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
/* __expf is ex2.approx.ftz.f32 of x * log2(e) (the CUDA math library's fast path) */
inline float __expf(float x) { return attn_emu::ex2_approx_ftz(x * 1.44269504088896341f); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fdividef(float a, float b) { return a / b; }

/* CUDA's integer and floating min/max overloads */
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }

/* The generated main of a kernel's emulation binary: ATTN_EMU_MAIN(attn_kernel, attn_init) or
 * ATTN_EMU_MAIN(attn_kernel, nullptr). The kernels take the ABI's attn_cuda_kargs by value. */
#define ATTN_EMU_CALL(fn) [](const void *a) { fn(*(const attn_cuda_kargs *)a); }
#define ATTN_EMU_MAIN(kernel, init)                                                             \
  int main(int argc, char **argv) {                                                             \
    attn_emu::Entry run_init = nullptr;                                                         \
    ATTN_EMU_INIT_##init;                                                                       \
    return attn_emu::main_with(argc, argv, ATTN_EMU_CALL(kernel), run_init);                    \
  }
#define ATTN_EMU_INIT_attn_init run_init = ATTN_EMU_CALL(attn_init)
#define ATTN_EMU_INIT_nullptr (void)0

#endif
