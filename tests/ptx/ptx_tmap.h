/* ptx_tmap.h: how a tensor map reaches the PTX interpreter. On a GPU, cuTensorMapEncodeTiled fills an opaque
 * 128-byte CUtensorMap that the kernel takes as a __grid_constant__ parameter (or reads from global memory) and
 * names in cp.async.bulk.tensor. Its bytes are undocumented, so the interpreter reads its own encoding instead: the
 * same arguments cuTensorMapEncodeTiled takes, behind a magic tag, written by ptx_tmap_encode into the same 128
 * bytes. A harness (or a runtime running its kernels on the interpreter) calls ptx_tmap_encode where it would call
 * cuTensorMapEncodeTiled and passes the 128 bytes the same way. The enumerations are the driver's (cuda.h's
 * CUtensorMapDataType, CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
 * CUtensorMapFloatOOBfill), so their values pass through unchanged. Header only: no library to link. */
#ifndef ATTN_PTX_TMAP_H
#define ATTN_PTX_TMAP_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define PTX_TMAP_MAGIC 0x3170616d54787470ull /* "ptxTmap1" */

/* cuda.h's values */
enum { PTX_TMAP_U8 = 0, PTX_TMAP_U16, PTX_TMAP_U32, PTX_TMAP_I32, PTX_TMAP_U64, PTX_TMAP_I64, PTX_TMAP_F16,
       PTX_TMAP_F32, PTX_TMAP_F64, PTX_TMAP_BF16, PTX_TMAP_F32_FTZ, PTX_TMAP_TF32, PTX_TMAP_TF32_FTZ };
enum { PTX_TMAP_SWIZZLE_NONE = 0, PTX_TMAP_SWIZZLE_32B, PTX_TMAP_SWIZZLE_64B, PTX_TMAP_SWIZZLE_128B };
enum { PTX_TMAP_INTERLEAVE_NONE = 0, PTX_TMAP_INTERLEAVE_16B, PTX_TMAP_INTERLEAVE_32B };
enum { PTX_TMAP_OOB_ZERO = 0, PTX_TMAP_OOB_NAN = 1 };

/* the 128 bytes as the interpreter reads them (little-endian, 120 used) */
typedef struct {
  uint64_t magic;
  uint8_t dtype, rank, interleave, swizzle, l2promotion, oobfill, pad[2];
  uint64_t address;      /* global address of element (0, ..., 0) */
  uint32_t dim[5];       /* elements in each dimension, innermost first */
  uint32_t pad2;
  uint64_t stride[4];    /* bytes from one index to the next in dimensions 1 .. rank-1 (dimension 0 is dense) */
  uint32_t box[5];       /* the box a copy moves, in elements per dimension */
  uint32_t estride[5];   /* traversal strides (1: every element) */
} ptx_tmap;

_Static_assert(sizeof(ptx_tmap) <= 128, "a tensor map is 128 bytes");

static inline unsigned ptx_tmap_elsize(unsigned dtype) {
  static const unsigned char SZ[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
  return dtype < sizeof SZ ? SZ[dtype] : 0;
}

/* cuTensorMapEncodeTiled's arguments (strides: rank - 1 of them, in bytes) -> map (128 bytes, 64-byte aligned).
 * 0, or -1 with the rule the driver would refuse them for in err. */
static inline int ptx_tmap_encode(void *map, unsigned dtype, unsigned rank, uint64_t address, const uint64_t *dims,
                                  const uint64_t *strides, const uint32_t *box, const uint32_t *estrides,
                                  unsigned interleave, unsigned swizzle, unsigned l2promotion, unsigned oobfill,
                                  char *err, size_t errlen) {
  const unsigned es = ptx_tmap_elsize(dtype);
#define PTX_TMAP_BAD(...) return snprintf(err, errlen, __VA_ARGS__), -1
  if (!es) PTX_TMAP_BAD("tensor map: unknown data type %u", dtype);
  if (rank < 1 || rank > 5) PTX_TMAP_BAD("tensor map: rank %u (1 to 5)", rank);
  if (interleave != PTX_TMAP_INTERLEAVE_NONE) PTX_TMAP_BAD("tensor map: only CU_TENSOR_MAP_INTERLEAVE_NONE");
  if (swizzle > PTX_TMAP_SWIZZLE_128B) PTX_TMAP_BAD("tensor map: swizzle %u (none, 32B, 64B or 128B)", swizzle);
  if (oobfill > PTX_TMAP_OOB_NAN) PTX_TMAP_BAD("tensor map: oob fill %u", oobfill);
  if (oobfill == PTX_TMAP_OOB_NAN && (dtype < PTX_TMAP_F16 || dtype == PTX_TMAP_I32))
    PTX_TMAP_BAD("tensor map: NaN fill of an integer type");
  if (address % 16) PTX_TMAP_BAD("tensor map: global address 0x%llx not 16-byte aligned", (unsigned long long)address);
  ptx_tmap t;
  memset(&t, 0, sizeof t);
  t.magic = PTX_TMAP_MAGIC;
  t.dtype = (uint8_t)dtype;
  t.rank = (uint8_t)rank;
  t.swizzle = (uint8_t)swizzle;
  t.l2promotion = (uint8_t)l2promotion;
  t.oobfill = (uint8_t)oobfill;
  t.address = address;
  for (unsigned i = 0; i < rank; i++) {
    if (dims[i] < 1 || dims[i] > (1ull << 32)) PTX_TMAP_BAD("tensor map: dimension %u of %llu", i,
                                                             (unsigned long long)dims[i]);
    if (box[i] < 1 || box[i] > 256) PTX_TMAP_BAD("tensor map: box dimension %u of %u (1 to 256)", i, box[i]);
    if (estrides[i] < 1 || estrides[i] > 8) PTX_TMAP_BAD("tensor map: element stride %u of %u (1 to 8)", i,
                                                          estrides[i]);
    t.dim[i] = (uint32_t)(dims[i] - (dims[i] == 1ull << 32)); /* 2^32 itself does not fit: clamp */
    t.box[i] = box[i];
    t.estride[i] = estrides[i];
    if (i > 0) {
      if (strides[i - 1] % 16 || strides[i - 1] >= 1ull << 40)
        PTX_TMAP_BAD("tensor map: stride %u of %llu bytes (a multiple of 16 below 2^40)", i - 1,
                     (unsigned long long)strides[i - 1]);
      t.stride[i - 1] = strides[i - 1];
    }
  }
  if (box[0] * es % 16) PTX_TMAP_BAD("tensor map: the box's inner dimension, %u bytes, is not a multiple of 16",
                                     box[0] * es);
  const unsigned span = swizzle == PTX_TMAP_SWIZZLE_32B ? 32 : swizzle == PTX_TMAP_SWIZZLE_64B ? 64 : 128;
  if (swizzle != PTX_TMAP_SWIZZLE_NONE && box[0] * es > span)
    PTX_TMAP_BAD("tensor map: the box's inner dimension, %u bytes, exceeds the %u-byte swizzle", box[0] * es, span);
#undef PTX_TMAP_BAD
  memset(map, 0, 128);
  memcpy(map, &t, sizeof t);
  return 0;
}

#endif
