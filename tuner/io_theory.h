/* io_theory.h: the I/O model of the kernels (CPU and CUDA) — closed forms of what each template's counting build moves,
 * the theory's lower bound, the fast memory a configuration needs, the tiles that minimise transfers within a
 * fast memory of M entries, and a measurement of the counting build through the runtime. */
#ifndef ATTN_IO_THEORY_H
#define ATTN_IO_THEORY_H

#include <stddef.h>
#include "internal.h"

/* Exact entries read and written by the template's loop structure (partial blocks counted by real sizes), for
 * batch*heads = bh (query) heads of n rows against n_kv keys; split-K flash counts its partials as slow-memory
 * traffic (docs/io.md). ATTN_OK, or ATTN_EINVAL for an unknown algorithm. */
int attn_io_formula(const attn_spec *s, long bh, long n, long n_kv, unsigned long long *reads,
                    unsigned long long *writes);
/* The same with attn_problem's window (0: none, as attn_io_formula): flash and smallcache count only the keys each
 * query block's rows can see (the CUDA flash kernel: whole key blocks); ATTN_EINVAL for a window < 0, and for lowrank
 * and CUDA smallcache with a window (their kernels apply none). */
int attn_io_formula_window(const attn_spec *s, long bh, long n, long n_kv, long window, unsigned long long *reads,
                           unsigned long long *writes);

/* Keys a flash block loads whose rows ask the queries at shifted positions a..z (i' = i + n_kv - n; a GQA-packed
 * decode block's rows are all at n_kv - 1), under s->causal and the window (0: none): the CPU kernel the keys some row
 * sees, the CUDA kernel whole key blocks from the one holding the first seen key to the one holding the last (rows
 * past n_kv are zero-filled, not read). The first key loaded into *first (NULL allowed; 0 when none). */
long attn_io_flash_keys(const attn_spec *s, long a, long z, long n_kv, long window, long *first);

/* The same for batch x heads query heads on heads_kv KV heads: CPU flash packs the heads/heads_kv query heads of a KV
 * head into one block when n < Br (templates/flash.c, decode), and CUDA flash launches a KV head's G·n query rows as
 * one head's where attn_cuda_gqa_packs holds (runtime/cuda.c), so that K and V are read once per KV head; every
 * other case is attn_io_formula on batch * heads heads. */
int attn_io_formula_gqa(const attn_spec *s, long batch, long heads, long heads_kv, long n, long n_kv,
                        unsigned long long *reads, unsigned long long *writes);
int attn_io_formula_gqa_window(const attn_spec *s, long batch, long heads, long heads_kv, long n, long n_kv,
                               long window, unsigned long long *reads, unsigned long long *writes);

/* Feature-map rank of a lowrank spec (Taylor: C(d+g, g); random: rank); -1 when too large. */
long attn_io_rank(const attn_spec *s);

/* Fast-memory entries a configuration needs: flash (Br + Bc)(d + d_v) + Br Bc; smallcache 3 T^2 + 2 Br (three T x T
 * tiles plus the row statistics, see io.md); lowrank r (d_v+1) + Bc r + r + d_v. */
double attn_io_fast_need(const attn_spec *s);

/* Saha & Ye's lower bound for exact attention, min(n^2 m^2 / M, n^2 m / sqrt(M)) with m = min(d, d_v) (dv <= 0:
 * d_v = d), and the floor 2 n (d + d_v): Q, K, V read and O written once (4 n d when d_v = d). */
double attn_io_bound_theory(double n, double d, double dv, double M);
double attn_io_floor(double n, double d, double dv);
double attn_io_lower_bound(double n, double d, double dv, double M); /* max of the two above */

/* Tiles minimising transfers within M for (algo, d, d_v, n): flash maximises Br (then Bc) under
 * (Br + Bc)(d + d_v) + Br Bc <= M; smallcache T = Br = floor(sqrt(M/4)); lowrank the largest Bc whose state fits.
 * Fields already set in *s (feature, degree, rank, causal, dv) are kept. ATTN_EINVAL with "M=... is too small:
 * <algo> needs at least ..." */
int attn_io_choose(attn_spec *s, long n, double M, char *err, size_t errlen);

/* Runs the counting build of spec s once on random inputs (batch = heads = 1, n_kv = n unless given): entries read
 * and written into *io, relative error against fp64 into *relerr (NULL allowed). */
int attn_io_measure(attn_runtime *rt, const attn_spec *s, long n, long n_kv, attn_io *io, double *relerr);
/* The same with the problem's window (0: none); the spec's window flag follows whether the window hides a key. */
int attn_io_measure_window(attn_runtime *rt, const attn_spec *s, long n, long n_kv, long window, attn_io *io,
                           double *relerr);

/* The backward (templates/flash_bwd.c, CPU flash): exact entries read and written for batch x heads query heads on
 * heads_kv KV heads (docs/io.md), the fast memory its blocks need (K_j, V_j, dK_j, dV_j: Bc (2 d + 2 d_v); Q_i, dO_i,
 * dQ_i, lse_i, D_i: Br (2 d + d_v + 2); S or P and dP or dS: 2 Br Bc), and the tiles that minimise its transfers
 * within M (they depend on Bc only: the largest Bc with Br = 1, then the largest Br, at most 128, that keeps it). */
int attn_io_formula_bwd(const attn_spec *s, long batch, long heads, long heads_kv, long n, long n_kv,
                        unsigned long long *reads, unsigned long long *writes);
double attn_io_fast_need_bwd(const attn_spec *s);
int attn_io_choose_bwd(attn_spec *s, long n, double M, char *err, size_t errlen);
/* The counting build of the backward of s (f32) once on random q, k, v, dO with the fp64 forward's O and lse (batch =
 * heads = 1, n_kv = n unless given): *io, and the gradients' worst relative error against fp64 into *relerr. */
int attn_io_measure_bwd(attn_runtime *rt, const attn_spec *s, long n, long n_kv, attn_io *io, double *relerr);

#endif
