/* kcount.h: what templates/flash.cu executes per key block, derived from its loop structure (the performance model's
 * input; tests/model_ptx.c checks the instruction counts against the PTX NVRTC generates). */
#ifndef ATTN_KCOUNT_H
#define ATTN_KCOUNT_H

#include "spec.h"

/* Per thread, per key block of the main loop (the same for every thread of the block). */
typedef struct attn_kb_thread {
  int mma;        /* mma.sync.m16n8k16 (f16/bf16; 0 for f32) */
  int ldmatrix;   /* ldmatrix .x4 (K, V and, when Q's fragments do not stay in registers, Q) */
  int ld_shared;  /* other loads from shared memory (f32: ld.shared.v4 of Q, K, P, V) */
  int st_shared;  /* stores to shared memory (f32: P) */
  int ex2;        /* ex2.approx: one per score and one rescale factor per row the thread holds */
  int ffma;       /* fp32 fma of the products (f32 only: tensor cores do them in f16/bf16) */
  int falu;       /* other fp32 work of the online softmax: scale, max, subtract, sum, rescale of O, convert */
  int cp_async;   /* 16-byte cp.async copies of K and V into shared memory */
  int q_in_regs;  /* 1: Q's fragments stay in registers for the whole key loop (FA_QREGS) */
  int qk_unroll;  /* Q from shared memory: the k-steps of S = Q K^T run in a loop unrolled this many times */
} attn_kb_thread;

/* Per thread block and key block: warp instructions by unit and shared-memory bytes. */
typedef struct attn_kb_work {
  double mma_flops;     /* tensor-core FLOPs (mma.sync) */
  double ex2;           /* thread-level ex2 operations (special-function unit) */
  double alu;           /* thread-level fp32 operations other than ex2 (fma counted once) */
  double smem_bytes;    /* shared memory read and written (ldmatrix, ld/st.shared, cp.async fills) */
  double threads;
} attn_kb_work;

/* 0, or -1 when s is not a CUDA flash configuration. */
int attn_kb_thread_counts(const attn_spec *s, attn_kb_thread *out);
int attn_kb_work_of(const attn_spec *s, attn_kb_work *out);

#endif
