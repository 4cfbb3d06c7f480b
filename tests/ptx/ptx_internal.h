/* ptx_internal.h: the decoded form of a PTX module, shared by the parser (ptx_parse.c), the machine (ptx_exec.c)
 * and the instruction semantics (ptx_ops.c). Nothing here is seen by the interpreter's users (ptx.h). */
#ifndef ATTN_PTX_INTERNAL_H
#define ATTN_PTX_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "ptx.h"

/* opcodes the interpreter executes; anything else in a module is refused when it is loaded */
typedef enum {
  OP_MOV, OP_LD, OP_ST, OP_CVTA, OP_CVT, OP_ADD, OP_SUB, OP_MUL, OP_MAD, OP_FMA, OP_DIV, OP_REM, OP_NEG, OP_ABS,
  OP_MIN, OP_MAX, OP_AND, OP_OR, OP_XOR, OP_NOT, OP_CNOT, OP_SHL, OP_SHR, OP_SETP, OP_SELP, OP_SET, OP_BFI, OP_BFE,
  OP_PRMT, OP_POPC, OP_CLZ, OP_BREV, OP_RCP, OP_SQRT, OP_RSQRT, OP_EX2, OP_LG2, OP_SIN, OP_COS, OP_TESTP,
  OP_TANH,
  OP_COPYSIGN, OP_ADDC, OP_SUBC, OP_MADC, OP_BRA, OP_CALL, OP_RET, OP_EXIT, OP_BAR, OP_BARWARP, OP_BARRED, OP_SHFL,
  OP_VOTE, OP_MMA, OP_LDMATRIX, OP_CPASYNC, OP_CPCOMMIT, OP_CPWAIT, OP_CPWAITALL, OP_ATOM, OP_RED, OP_MEMBAR,
  OP_FENCE, OP_LOP3, OP_MUL24, OP_MAD24, OP_FNS,
  /* sm_90: warpgroup MMA, mbarriers, the tensor memory accelerator and their companions */
  OP_WGMMA, OP_WGFENCE, OP_WGCOMMIT, OP_WGWAIT, OP_MBAR, OP_TMA, OP_BULKCOMMIT, OP_BULKWAIT, OP_SETMAXNREG,
  OP_ELECT, OP_STMATRIX, OP_NOP, OP_BARARRIVE, OP_COUNT
} ptx_op;

/* value types (.s32, .f16x2, ...) */
typedef enum {
  T_NONE, T_PRED, T_B8, T_B16, T_B32, T_B64, T_U8, T_U16, T_U32, T_U64, T_S8, T_S16, T_S32, T_S64, T_F16, T_F16X2,
  T_BF16, T_BF16X2, T_F32, T_F64, T_B128
} ptx_type;

typedef enum { SP_NONE, SP_GLOBAL, SP_SHARED, SP_LOCAL, SP_PARAM, SP_CONST, SP_GENERIC } ptx_space;

/* rounding: .rn .rz .rm .rp (floating) and .rni .rzi .rmi .rpi (to integral) */
typedef enum { R_NONE, R_RN, R_RZ, R_RM, R_RP, R_RNI, R_RZI, R_RMI, R_RPI } ptx_round;

/* setp comparisons */
typedef enum {
  C_NONE, C_EQ, C_NE, C_LT, C_LE, C_GT, C_GE, C_LO, C_LS, C_HI, C_HS, C_EQU, C_NEU, C_LTU, C_LEU, C_GTU, C_GEU,
  C_NUM, C_NAN
} ptx_cmp;

/* instruction flags */
enum {
  F_FTZ = 1 << 0, F_SAT = 1 << 1, F_APPROX = 1 << 2, F_FULL = 1 << 3, F_WIDE = 1 << 4, F_HI = 1 << 5, F_LO = 1 << 6,
  F_CC = 1 << 7, F_UNI = 1 << 8, F_SYNC = 1 << 9, F_ALIGNED = 1 << 10, F_TRANS = 1 << 11, F_NC = 1 << 12,
  F_ROW_COL = 1 << 13, F_VOLATILE = 1 << 14, F_SHIFTAMT = 1 << 15, F_NAN = 1 << 16, F_RELU = 1 << 17,
  F_PAIR = 1 << 18, /* a second destination written d|p */
  F_TO = 1 << 19,   /* cvta.to.space: generic -> space */
  F_PARITY = 1 << 20, /* mbarrier.try_wait / test_wait .parity */
  F_EXPECTTX = 1 << 21, /* mbarrier.arrive.expect_tx */
  F_PROXYASYNC = 1 << 22, /* fence.proxy.async */
  F_INC = 1 << 23,  /* setmaxnreg.inc (else .dec) */
  F_MBARINIT = 1 << 24 /* fence.mbarrier_init */
};

/* mbarrier operations (ptx_insn.mode of OP_MBAR); OP_TMA's mode: 1 global -> shared, 2 shared -> global */
enum { MB_INIT = 1, MB_ARRIVE, MB_EXPECT_TX, MB_TRY_WAIT, MB_TEST_WAIT, MB_INVAL };

/* shfl modes, vote modes, bool ops of setp / bar.red, atomic ops */
enum { M_NONE, M_BFLY, M_UP, M_DOWN, M_IDX, M_ANY, M_ALL, M_UNIV, M_BALLOT, M_AND, M_OR, M_XOR, M_POPC,
       M_ADD, M_MIN, M_MAX, M_INC, M_DEC, M_EXCH, M_CAS, M_F4E, M_B4E, M_RC8, M_ECL, M_ECR, M_RC16 };

/* the common forms with a short path: f32 arithmetic (.rn or none; .ftz or not; no .sat), integer add, sub, shl and
 * logic (no .cc, .sat), register moves; every source a register or an immediate of the instruction's kind */
enum { FAST_NONE, FAST_F32_FMA, FAST_F32_ADD, FAST_F32_SUB, FAST_F32_MUL, FAST_INT_ADD, FAST_INT_SUB, FAST_INT_SHL,
       FAST_INT_AND, FAST_INT_OR, FAST_INT_XOR, FAST_MOV };

typedef enum { K_NONE, K_REG, K_IMM, K_ADDR, K_VEC, K_SYM, K_LABEL, K_SREG, K_SINK } ptx_kind;

/* special registers */
enum { S_TID, S_NTID, S_CTAID, S_NCTAID, S_LANEID, S_WARPID, S_NWARPID, S_SMID, S_NSMID, S_CLOCK, S_CLOCK64,
       S_LANEMASK_EQ, S_LANEMASK_LT, S_LANEMASK_LE, S_LANEMASK_GT, S_LANEMASK_GE, S_DYNSMEM, S_TOTALSMEM, S_GRIDID };

typedef struct {
  uint8_t kind, n;  /* n: registers of a vector */
  uint8_t neg;      /* !%p as a source predicate */
  uint8_t comp;     /* special register component: 0 x, 1 y, 2 z */
  int32_t reg;      /* K_REG, K_ADDR (base register, -1: none), K_SREG (which) */
  int32_t sym;      /* K_ADDR / K_SYM: symbol index (-1: none); K_LABEL: instruction index */
  int32_t vec[4];   /* K_VEC registers (-1: the sink _); K_ADDR with n > 0: [base, {vec}] (a tensor's coordinates) */
  int32_t vx;       /* n > 4: all n registers at ptx_module.vregs[vx] (wgmma's accumulators, 5-d coordinates) */
  int64_t imm;      /* K_IMM bits (f32/f64 immediates as their bits); K_ADDR byte offset */
  uint8_t fimm;     /* K_IMM written as a floating literal: 1 f32 (0f...), 2 f64 (0d... or decimal) */
} ptx_operand;

#define PTX_MAXOPS 16

typedef struct {
  uint16_t op;
  uint8_t type, type2;  /* type2: cvt's source type, the second type of a few ops */
  uint8_t space, rnd, cmp, mode, bop; /* bop: setp's combining op, bar.red's op */
  uint8_t vec;          /* .v2 / .v4: 2 or 4; 0 scalar */
  uint8_t num;          /* ldmatrix/stmatrix .x1/.x2/.x4; mma: k of m16n8k; wgmma: n / 8; TMA: dimensions */
  uint8_t nops;
  uint8_t fast;         /* a common form ptx_exec.c runs without the general path (FAST_*), 0 otherwise */
  uint32_t flags;
  int32_t guard;        /* predicate register, -1: none */
  uint8_t guard_neg;
  int32_t line;         /* in the PTX text */
  int32_t func;         /* the function the instruction belongs to */
  ptx_type mma_ab;      /* mma: the A/B element type */
  ptx_operand o[PTX_MAXOPS];
  char text[96];        /* the instruction as written (truncated), for messages */
} ptx_insn;

typedef struct {
  char name[80];
  uint8_t space;        /* SP_GLOBAL, SP_SHARED, SP_CONST (module); SP_LOCAL, SP_PARAM (function) */
  uint32_t align;
  uint64_t size;        /* 0 for .extern .shared arrays (dynamic shared memory) */
  int dynamic;
  int func;             /* function-level symbols: the owner; -1 module */
  uint64_t addr;        /* assigned: global address, shared offset, or offset in the frame's local/param area */
  unsigned char *init;  /* module .global/.const initialiser (size bytes) or NULL: zero */
  int formal;           /* function parameter (in order), -1 otherwise; -2 the return parameter */
} ptx_symbol;

typedef struct {
  char name[80];
  int entry;
  int first, count;     /* instructions [first, first + count) of the module */
  int nregs;
  uint8_t *regbits;     /* width of each register in bits (1 for .pred) */
  uint64_t *regmask;    /* the bits a register holds */
  char (*regname)[24];  /* for messages */
  int nformal, retsym;  /* formal parameter symbols are found by owner and formal index */
  int *formal;          /* symbol indices of the parameters in order */
  uint64_t local_size, param_size; /* param_size: the parameters and the call sites' .param variables */
  uint64_t formal_size;             /* the parameters' bytes */
  int maxntid;
  int defined;          /* has a body */
} ptx_func;

struct ptx_module {
  ptx_insn *insn;
  int ninsn;
  ptx_symbol *sym;
  int nsym;
  ptx_func *func;
  int nfunc;
  uint64_t static_shared;  /* bytes of .shared variables; the dynamic array starts after them */
  uint64_t dyn_base;       /* where the dynamic array starts: static_shared rounded up to its alignment */
  uint32_t dyn_align;
  int32_t *vregs;          /* the registers of vector operands of more than 4 */
  int nvregs, capvregs;
  int target_sm;           /* .target sm_XX */
};

static inline int ptx_type_bits(ptx_type t) {
  switch (t) {
  case T_PRED: return 1;
  case T_B8: case T_U8: case T_S8: return 8;
  case T_B16: case T_U16: case T_S16: case T_F16: case T_BF16: return 16;
  case T_B32: case T_U32: case T_S32: case T_F32: case T_F16X2: case T_BF16X2: return 32;
  case T_B64: case T_U64: case T_S64: case T_F64: return 64;
  case T_B128: return 128;
  default: return 0;
  }
}
static inline int ptx_type_is_float(ptx_type t) {
  return t == T_F16 || t == T_BF16 || t == T_F32 || t == T_F64 || t == T_F16X2 || t == T_BF16X2;
}
static inline int ptx_type_is_signed(ptx_type t) { return t == T_S8 || t == T_S16 || t == T_S32 || t == T_S64; }

/* f32 <-> its bits, and .ftz's flush of a subnormal to a zero of its sign */
static inline float ptx_f32(uint64_t b) {
  float f;
  const uint32_t u = (uint32_t)b;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint64_t ptx_bits32(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float ptx_ftz(float x) { return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x; }

/* *cap grown (doubling, new slots zeroed) to hold need elements of el bytes; the array, or NULL (a left as it was) */
static inline void *ptx_grow(void *a, int *cap, int need, size_t el) {
  if (need <= *cap) return a;
  int nc = *cap ? *cap * 2 : 16;
  while (nc < need) nc *= 2;
  void *b = realloc(a, (size_t)nc * el);
  if (!b) return NULL;
  memset((char *)b + (size_t)*cap * el, 0, (size_t)(nc - *cap) * el);
  *cap = nc;
  return b;
}

/* register i of a vector operand (K_VEC, or K_ADDR's coordinates) */
static inline int32_t ptx_vreg(const ptx_module *m, const ptx_operand *o, int i) {
  return o->n > 4 ? m->vregs[o->vx + i] : o->vec[i];
}

/* ---- ptx_ops.c ---- */
float ptx_f16_to_f32(uint16_t h);
uint16_t ptx_f32_to_f16(float f, ptx_round r);
float ptx_bf16_to_f32(uint16_t h);
uint16_t ptx_f32_to_bf16(float f, ptx_round r);

/* Per-lane ALU instructions: d = op(sources). The source values are read by the caller into src (raw bits, width
 * of the instruction's type); *dst gets the result bits; returns 0, or -1 with a reason in why. carry: the thread's
 * CC.CF, read and written by the .cc / addc / madc forms. approx: 0 computes the approximate f32 instructions
 * correctly rounded; +1 or -1 moves them by their largest error in that direction. */
int ptx_alu(const ptx_insn *in, const uint64_t *src, int nsrc, uint64_t *dst, uint32_t *carry, int approx, char *why,
            size_t len);

/* mma.sync m16n8k16 / m16n8k8: a[32][4], b[32][2], c[32][4] hold each lane's fragment registers; d gets the result
 * fragments. */
int ptx_mma(const ptx_insn *in, const uint32_t a[32][4], const uint32_t b[32][2], const uint32_t c[32][4],
            uint32_t d[32][4], char *why, size_t len);

/* sm_90: the 32B/64B/128B swizzle (bits 1, 2, 3; 0 none) of a shared-memory address, as TMA writes and wgmma reads
 * it; and the shared offset of element (mn, k) of a wgmma operand (16-bit elements) under its matrix descriptor,
 * K-major or MN-major (imm-trans 1): the canonical layouts of the PTX ISA (CUTLASS's make_gmma_desc) */
uint32_t ptx_swizzle(uint32_t addr, int bits);
uint32_t ptx_gmma_offset(uint64_t desc, int mn, int k, int mnmajor);

#endif
