/* measure.h: one measurement of one configuration on one problem (on the CPU, or on the CUDA device present): compile (through the runtime), check against the
 * fp64 reference on fresh random inputs with a poisoned output, time (warm-up, median of repetitions rotating among
 * input buffers that together exceed the last-level cache), and count I/O with the counting build. Never fatal:
 * every failure becomes a status with a message. */
#ifndef ATTN_MEASURE_H
#define ATTN_MEASURE_H

#include <stddef.h>
#include "internal.h"

typedef struct attn_meas_ctx {
  attn_runtime *rt;
  attn_problem p;              /* normalised */
  int reps;                    /* timed repetitions (median) */
  size_t q_count, kv_count, o_count, set_count; /* floats per tensor, per input set (q, k, v) */
  float *arena;                /* sets of inputs, set 0 is the checked one */
  int sets, next_set;
  float *out;
  double *ref;                 /* fp64 reference for set 0 (the checked rows), made on first use */
  int check_rows;              /* the last check_rows query rows of each head are checked (all when n is small) */
  float *check_out;            /* those rows of the output, gathered */
  /* CUDA: input sets in the problem's dtype on the device, rotated past the L2 cache, and the output */
  void *dev_arena, *dev_out;
  int dev_sets, dev_next;
  size_t dev_set_bytes;
} attn_meas_ctx;

typedef struct attn_meas_result {
  char status[16];             /* "ok" | "wrong" | "compile_error" | "invalid" | "error" */
  double time_ms;              /* median; 0 unless ok/wrong */
  double error;                /* relative Frobenius error vs fp64 (INFINITY: NaN/Inf in the output) */
  unsigned long long reads, writes; /* entries, from the counting build */
  int have_io;
  char message[4096];          /* one line, or the compiler's log for compile_error */
} attn_meas_result;

/* reps <= 0: 5. ATTN_OK, or an error code with err (out of memory, problem invalid for the runtime). */
int  attn_meas_init(attn_meas_ctx *c, attn_runtime *rt, const attn_problem *p, int reps, char *err, size_t errlen);
void attn_meas_free(attn_meas_ctx *c);

/* Largest relative error an exact algorithm may show in a dtype before it is recorded as wrong. */
double attn_meas_exact_tolerance(attn_dtype t);

/* Measures s on the context's problem into *r (status and message always set). */
void attn_measure(attn_meas_ctx *c, const attn_spec *s, attn_meas_result *r);

/* Compiles s (and its counting build) into the runtime's cache without running it, so that a later attn_measure
 * finds it compiled; safe to call from several threads at once (each uses its own runtime copy). */
int attn_meas_precompile(const attn_runtime *rt, const attn_spec *s);

#endif
