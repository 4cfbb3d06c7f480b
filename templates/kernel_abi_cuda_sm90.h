/* kernel_abi_cuda_sm90.h: what the Hopper flash kernel (templates/flash_sm90.cu, spec impl=wgmma, arch sm_90a)
 * takes besides kernel_abi_cuda.h: its argument with three TMA tensor maps, the parameters each map is encoded from
 * (one struct, handed to cuTensorMapEncodeTiled as it is, or to anything else that builds or decodes a map), and
 * its shared memory. Appended after kernel_abi_cuda.h to each generated sm_90a source; included by the C side. */
#ifndef ATTN_KERNEL_ABI_CUDA_SM90_H
#define ATTN_KERNEL_ABI_CUDA_SM90_H

/* A CUtensorMap: 128 opaque bytes, 64-byte aligned (cuda.h's CU_TENSOR_MAP_NUM_QWORDS = 16). */
typedef struct attn_cuda_tmap {
  unsigned long long opaque[16];
} __attribute__((aligned(64))) attn_cuda_tmap;

/* The kernel's only argument (passed as a __grid_constant__ parameter: TMA reads the maps from parameter space).
 * tq, tk, tv are encoded from attn_sm90_tmap_params of Q, K and V (gen/spec_sm90.c: attn_sm90_kargs_make). The maps
 * come first: the host's attn_cuda_kargs may be longer than the kernel's (fields only other kernels declare), so the
 * kernel's parameter is a prefix of the host's struct, ATTN_CUDA_SM90_KARGS_BYTES long. */
typedef struct attn_cuda_sm90_kargs {
  attn_cuda_tmap tq, tk, tv;
  attn_cuda_kargs a; /* as every CUDA kernel: pointers (o, lse written by plain stores), shape, scale */
} attn_cuda_sm90_kargs;
#if !(defined(__CUDACC__) || defined(__CUDACC_RTC__))
#ifdef ATTN_CUDA_KARGS_DENSE_BYTES
#define ATTN_SM90_KARGS_A_BYTES ATTN_CUDA_KARGS_DENSE_BYTES
#else
#define ATTN_SM90_KARGS_A_BYTES sizeof(attn_cuda_kargs)
#endif
/* the bytes of the kernel's parameter (what an interpreter is given; the driver reads as many) */
#define ATTN_CUDA_SM90_KARGS_BYTES \
  ((__builtin_offsetof(attn_cuda_sm90_kargs, a) + ATTN_SM90_KARGS_A_BYTES + 63) / 64 * 64)
#endif

/* The arguments of cuTensorMapEncodeTiled for one operand, in its order; the values are cuda.h's enums.
 * A tensor [batch * heads(_kv)][rows][cols] in row-major order (rows = n or n_kv, cols = d or d_v) is a rank-3 map
 * with dims {cols, rows, batch * heads(_kv)} (innermost first) and byte strides {cols * 2, rows * cols * 2} of dims 1
 * and 2; a box of {64, Br or Bc, 1} elements is one 128-byte-swizzled chunk of 64 columns of a tile, and the kernel
 * loads a tile as ceil(cols / 64) boxes. Elements outside the dims (columns past d, rows past n or n_kv) arrive as
 * zeros, as the hardware fills them (oob_fill NONE). */
typedef struct attn_sm90_tmap_params {
  int data_type;                    /* CU_TENSOR_MAP_DATA_TYPE_FLOAT16 (6) or _BFLOAT16 (9) */
  unsigned rank;                    /* 3 */
  const void *global_address;       /* a.q, a.k or a.v: 16-byte aligned */
  unsigned long long global_dim[3]; /* {cols, rows, batch * heads(_kv)} */
  unsigned long long global_strides[2]; /* bytes between consecutive indices of dims 1 and 2; multiples of 16 */
  unsigned box_dim[3];              /* {64, Br (Q) or Bc (K, V), 1} */
  unsigned element_strides[3];      /* {1, 1, 1} */
  int interleave;                   /* CU_TENSOR_MAP_INTERLEAVE_NONE (0) */
  int swizzle;                      /* CU_TENSOR_MAP_SWIZZLE_128B (3): the wgmma descriptors' swizzle mode 1 */
  int l2_promotion;                 /* CU_TENSOR_MAP_L2_PROMOTION_L2_256B (3) */
  int oob_fill;                     /* CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE (0): zeros */
} attn_sm90_tmap_params;

#define ATTN_SM90_TMAP_F16 6
#define ATTN_SM90_TMAP_BF16 9
#define ATTN_SM90_SWIZZLE_128B 3
#define ATTN_SM90_L2_256B 3
#define ATTN_SM90_BOX_COLS 64 /* 64 two-byte elements: one 128-byte swizzle row */

/* Shared memory of flash_sm90.cu in bytes (f16/bf16): Q (Br rows), `stages` x (K_j, V_j) (Bc rows), each a row of
 * d or d_v padded to 64 columns (whole 128-byte swizzle chunks, every chunk of a tile 1024-byte aligned), then the
 * mbarriers: Q full, and per stage K full, V full, K empty and V empty (8 bytes each). */
#define ATTN_SM90_CP(d) ATTN_CUDA_RUP(d, 64)
#define ATTN_FLASH_SM90_SMEM(d, dv, br, bc, stages)                                                           \
  (2LL * ((long long)(br) * ATTN_SM90_CP(d) + (long long)(stages) * (bc) * (ATTN_SM90_CP(d) + ATTN_SM90_CP(dv))) + \
   8LL * (1 + 4 * (stages)))

#endif
