/* attn.h: the public API of libattn, the attntune runtime.
 * Open a runtime, create a plan for a problem (the tuned kernel from the database, or a default), execute it. */
#ifndef ATTN_H
#define ATTN_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct attn_runtime attn_runtime;
typedef struct attn_plan attn_plan;

enum { ATTN_OK = 0, ATTN_EINVAL, ATTN_ENOMEM, ATTN_ENODEV, ATTN_ECOMPILE, ATTN_EDB, ATTN_ERUNTIME, ATTN_EUNSUPPORTED };

typedef enum { ATTN_TARGET_AUTO, ATTN_TARGET_CPU, ATTN_TARGET_CUDA } attn_target;
typedef enum { ATTN_F32, ATTN_F16, ATTN_BF16 } attn_dtype;
typedef enum { ATTN_ALGO_AUTO, ATTN_ALGO_FLASH, ATTN_ALGO_SMALLCACHE, ATTN_ALGO_LOWRANK } attn_algo;

/* Limits: n and n_kv at most INT_MAX - 1024; batch*heads*max(n, n_kv)*max(d, d_v) at most PTRDIFF_MAX / 8 elements
 * (checked exactly in 64 bits). A larger problem is refused with ATTN_EINVAL and a one-line reason. d and d_v: 1..576
 * on the CPU (any value: tails are masked) in f32, f16 and bf16 (fp32 accumulation); CUDA's limits are in
 * docs/cuda.md (a configuration that does not fit a GPU's shared memory is refused with the limit named). */
typedef struct attn_problem {
  int batch, heads, n, d;   /* Q,K contiguous [batch][heads(_kv)][n(_kv)][d]; zero-initialise unused fields */
  int n_kv, heads_kv;       /* 0: same as n / heads (decode, cross-attention, grouped-query) */
  attn_dtype dtype;
  int causal;               /* bottom-right aligned when n < n_kv */
  float scale;              /* 0: 1/sqrt(d) */
  double tolerance;         /* 0: exact algorithms only; > 0: an approximate algorithm may serve within this error */
  attn_algo algo;           /* AUTO: the tuned choice, else a default heuristic */
  int d_v;                  /* 0: same as d; V is [batch][heads_kv][n_kv][d_v], O [batch][heads][n][d_v] */
  /* Score modifiers (0 / NULL: off). With i' = i + n_kv - n (query i's position among the keys), the score of query
   * row i and key j is computed in this order, as FlashAttention does: s = scale·q_i·k_j; softcap c > 0:
   * s = c·tanh(s/c); ALiBi: s = s - slope_h·|i' - j|; then the mask hides keys (causal: j > i'; window w > 0:
   * causal j <= i' - w, not causal |i' - j| >= w). A row that sees no key is 0, as causal rows are. Key blocks
   * wholly outside the window are skipped, not read. A window >= max(n, n_kv) hides nothing (same as none).
   * NaN and Inf: softcap maps ±Inf scores to ±c (finite: the row does not become NaN) and keeps NaN; ALiBi's bias is
   * finite and changes no NaN pattern; the window hides keys as the causal mask does (a NaN key outside a row's
   * window does not reach it). Refused at plan creation (ATTN_EINVAL, one line): window < 0; softcap NaN, Inf or
   * < 0; a slope that is NaN or Inf. The slopes (heads floats) are copied at plan creation. */
  int window;               /* w > 0: causal: i' - w < j <= i'; not causal: |i' - j| < w */
  float softcap;            /* c > 0: each scaled score s becomes c·tanh(s/c) before the bias and the softmax */
  const float *alibi_slopes; /* NULL, or one slope per query head: the score gains -slope_h·|i' - j| */
  /* Serving layouts (0: dense), each part of the tuning key as the modifiers are. page_size > 0: the plan serves
   * attn_execute_paged calls with pages of this many tokens (another page size is refused) from the row tuned for
   * them; varlen 1: the plan serves attn_execute_varlen batches from the row tuned for them (n and n_kv the longest
   * sequence's). Either plan still runs the other calls. */
  int page_size;
  int varlen;
  /* 1: attn_plan_create_backward may serve a tuned row whose dQ is summed by fp32 atomics (CUDA's dq=atomic,
   * `attntune tune --nondeterministic`: faster; dK and dV stay bitwise reproducible, dQ's last bits vary from run to
   * run). 0: the gradients are the same bits on every run. The forward ignores it. */
  int nondeterministic;
} attn_problem;

/* db_path NULL: $ATTN_DB, else attntune.db in the cache directory: $XDG_CACHE_HOME/attntune when XDG_CACHE_HOME is
 * set to an absolute path, else ~/.cache/attntune (compiled kernels: its so/, or $ATTN_CACHE_DIR). A missing database
 * is not an error: plans use defaults.
 * $ATTN_THREADS: CPU worker threads, digits only, 1..min(4 x cores, 1024); unset: all cores (at most 1024). A value
 * that is not such an integer ("0", "-3", "abc", "2x") is ignored (all cores serve) and one above the cap is clamped
 * to it; neither fails attn_open, and after such an open attn_last_error(rt) says what was done (in every thread until
 * that thread's own failure on rt replaces it; "" otherwise).
 * ATTN_TARGET_CUDA fails with ATTN_ENODEV only when there is nothing to run on: no driver library ($ATTN_LIBCUDA,
 * default libcuda.so.1), the CUDA toolkit's stub library in its place, or a driver that reports no device. A driver
 * that does not work (cuInit fails otherwise, entry points missing) or a device that cannot be opened gives
 * ATTN_ERUNTIME, a device older than sm_80 ATTN_EUNSUPPORTED, an $ATTN_CUDA_DEVICE that names no device ATTN_EINVAL;
 * each with a one-line reason in attn_last_error(NULL). ATTN_TARGET_AUTO opens CUDA when it can, else the CPU. */
int  attn_open(const char *db_path, attn_target target, attn_runtime **out);
int  attn_plan_create(attn_runtime *rt, const attn_problem *p, attn_plan **out);   /* *out stays NULL on error */
/* Host pointers on the CPU; on CUDA device pointers, 16-byte aligned, and the call returns when o is written.
 * On the CPU, q, k, v and o need only be aligned to their element (4 bytes for f32, 2 for f16 and bf16) and run at
 * the same speed at any such alignment: the kernels copy what their compute-bound loops read into aligned tiles, so
 * arrays from malloc run as fast as 64-byte aligned ones (64 bytes saves flash one copy of each f32 V block).
 * NaN and Inf propagate as in an fp64 softmax(scale QK^T)V, on the CPU and on CUDA, in every dtype (docs/io.md,
 * docs/cuda.md): NaN in q row i makes row i NaN; NaN in key row j makes every row that sees key j NaN; NaN or Inf in
 * v[j][c] reaches column c of exactly the rows that see key j; a +Inf score makes its row NaN; -Inf scores weigh 0
 * unless all of a row's visible scores are -Inf (0/0: NaN); rows that see no key (causal, n > n_kv) are 0. lowrank
 * gives the same NaN pattern with approximate finite values.
 * Kernels run compiled code in this process: it is loaded only from checked bytes (a private cache directory,
 * well-formed ELF, the SHA-256 the database records; README "The kernel cache's trust model"). */
int  attn_execute(const attn_plan *plan, const void *q, const void *k, const void *v, void *o);
const char *attn_plan_describe(const attn_plan *plan);   /* "flash d=64 Br=64 Bc=128 cpu f32 (tuned)" */
/* Lifetime: a plan holds a reference to its runtime. attn_close ends the handle (rt must not be used again: no
 * attn_plan_create, no attn_last_error(rt)) and closes the database, but plans created before stay valid: they
 * execute and describe as before (a failure's detail in attn_last_error(NULL), as rt is gone), and the runtime's
 * memory and CUDA context are freed when the last of them is destroyed. Plans of one runtime may be destroyed from
 * several threads at once (an atomic count); a plan must not be destroyed while another thread still executes it. */
void attn_plan_destroy(attn_plan *plan);                  /* NULL is fine */
void attn_close(attn_runtime *rt);                        /* NULL is fine */
const char *attn_strerror(int code);
/* Detail of the calling thread's last failure (compiler log, SQL error, ...): attn_last_error(rt) of its last failure
 * on rt, attn_last_error(NULL) of its last failing call of any kind. Kept per thread: other threads' failures never
 * change it, and the text stays valid until this thread's next failing call into libattn or its exit. A thread that
 * has not failed on rt since attn_open gets the open's note (see attn_open; "" when there was none), valid until
 * attn_close.
 * Threads: attn_plan_create, attn_execute(_async), attn_plan_describe and attn_last_error may be called from several
 * threads at once on one runtime (a kernel that two threads need at once may be compiled by both: each loads the
 * object it checked). attn_open and attn_close of different runtimes may run in any threads at once. attn_close must
 * be the last call on its handle, made after every other call on it has returned. */
const char *attn_last_error(const attn_runtime *rt);

/* attn_execute without waiting, for applications that queue work on a CUDA stream (PyTorch's current stream, an
 * inference engine's). On CUDA: stream is a CUstream of the runtime's device in its primary context (NULL: the
 * default stream); the kernel is queued there and the call returns before it runs, with no host synchronization.
 * ATTN_OK means it was queued: errors of the kernel itself surface at the caller's next synchronization of the stream
 * (cuStreamSynchronize, an event, a copy), not here. The caller guarantees that q, k, v and o stay allocated, and
 * that q, k, v are not written and o not read, until the stream has finished the launch. A plan launched this way
 * may be destroyed at once: attn_plan_destroy then waits for the device (cuCtxSynchronize) before unloading it. Scratch
 * device memory (smallcache) is allocated and freed in the stream's order; on a driver older than CUDA 11.2 or a
 * device without memory pools such a kernel waits for its launch instead. The same plan may be queued on several
 * streams and from several threads at once. On the CPU: stream is ignored and this is attn_execute. */
int  attn_execute_async(const attn_plan *plan, void *stream, const void *q, const void *k, const void *v, void *o);

/* Training. attn_execute_lse is the forward, also writing lse [batch][heads][n] (fp32): log Σ_j exp(scale·q_i·k_j)
 * over the keys row i sees (the score after softcap and ALiBi when the problem has them), -inf for a row that sees
 * none (NaN where the row's output is NaN). CPU flash and smallcache plans, and CUDA flash plans (the kernel writes
 * lse with O); lowrank plans give ATTN_EUNSUPPORTED (its own normaliser is an approximation, not this lse), and so do
 * CUDA smallcache plans. A backward plan gives ATTN_EINVAL. */
int  attn_execute_lse(const attn_plan *plan, const void *q, const void *k, const void *v, void *o, float *lse);
/* A plan for the gradients of what attn_plan_create serves for the problem: exact attention's (FlashAttention-2's
 * backward: P recomputed from lse, never stored; on the CPU with the window, softcap and ALiBi too), or, where a
 * lowrank row serves the forward (tolerance > 0), the gradient of that approximation (templates/lowrank_bwd.c: the
 * same features, rank and seed). On CUDA the kernel is templates/flash_bwd.cu with tiles of its own (docs/cuda.md);
 * score modifiers and lowrank give ATTN_EUNSUPPORTED there. Such a plan runs only attn_execute_backward
 * (attn_execute and attn_execute_lse refuse it with ATTN_EINVAL), and it is destroyed with attn_plan_destroy. */
int  attn_plan_create_backward(attn_runtime *rt, const attn_problem *p, attn_plan **out);
/* q, k, v, o (the forward's output), dout [batch][heads][n][d_v] and the forward's lse (attn_execute_lse) in; dq like
 * q, dk like k, dv like v, in the problem's dtype (fp32 accumulation); GQA: dk and dv summed over each KV head's
 * query heads. Every element of dq, dk and dv is written: rows that see no key get zero dq, keys no row sees zero dk
 * and dv. NaN and Inf give what an fp64 backward of the same definition gives (P = softmax(S), dV = Pᵀ dO,
 * dP = dO Vᵀ, dS = P∘(dP − rowsum(dO∘O)), dQ = scale·dS K, dK = scale·dSᵀ Q; softcap c multiplies dS by
 * 1 − tanh²(s/c), s the scaled score): hidden keys take no part. lowrank plans read o but no lse (it may be NULL) and
 * give the gradients of O_i = Σ_j φ(q_i)·φ(k_j) v_j / Σ_j φ(q_i)·φ(k_j), not exact attention's; a NaN or Inf in a KV
 * head's inputs makes all of that head's gradients NaN. On the CPU the gradients are the same bits from run to run and for any thread count: each output element is summed by one work
 * item in a fixed order (dk, dv by key block; dq by query block, in a second set of items that recomputes P). On
 * CUDA (device pointers, q, k, v, o and dout 16-byte aligned, waited for) the same holds for a plan on a device (no
 * atomics; one thread block sums each element), but NaN and Inf are not matched element by element (docs/cuda.md). */
int  attn_execute_backward(const attn_plan *plan, const void *q, const void *k, const void *v, const void *o,
                           const float *lse, const void *dout, void *dq, void *dk, void *dv);

/* Variable-length batches (FlashAttention's varlen layout): the plan's batch is the number of sequences, its n and
 * n_kv their most rows. q [total_q][heads][d], k [total_kv][heads_kv][d], v [total_kv][heads_kv][d_v], o
 * [total_q][heads][d_v]; sequence b is rows cu_seqlens_q[b] .. cu_seqlens_q[b+1]-1 (and of k, v by cu_seqlens_kv),
 * both batch + 1 entries from 0, non-decreasing, each length <= n (n_kv). Each sequence is attention on its own (causal
 * bottom-right within it); a sequence with no keys gives zero rows. CPU flash and smallcache plans, and CUDA flash
 * plans (q, k, v, o device pointers, 16-byte aligned; cu_seqlens host arrays; a kernel that reads the rows in place,
 * waited for); lowrank, backward and CUDA smallcache plans give ATTN_EUNSUPPORTED. Bad cu_seqlens or NULL pointers:
 * ATTN_EINVAL, and o is not written. */
int  attn_execute_varlen(const attn_plan *plan, const int *cu_seqlens_q, const int *cu_seqlens_kv, const void *q,
                         const void *k, const void *v, void *o);

/* Serving: a paged KV cache (vLLM's layout). q [batch][heads][n][d], k_pages [num_pages][page_size][heads_kv][d],
 * v_pages [num_pages][page_size][heads_kv][d_v], block_table [batch][max_pages] of page indices, seq_lens_kv[b]
 * (0..the plan's n_kv, at most max_pages·page_size) keys of sequence b; o [batch][heads][n][d_v]. Causal is
 * bottom-right aligned per sequence; a sequence of length 0 gets zero rows. CPU flash and smallcache plans: the
 * kernel reads the pages in place through the block table (decode moves the dense kernel's bytes, each page once per
 * KV head). CUDA flash plans: q, the pages and o device pointers (16-byte aligned), block_table
 * and seq_lens_kv host arrays, a kernel that reads the pages in place, waited for. Lowrank, backward and CUDA
 * smallcache plans: ATTN_EUNSUPPORTED. Bad input (NULL, page_size < 1,
 * a used page index outside 0..num_pages-1, a sequence longer than its pages or n_kv): ATTN_EINVAL, o untouched. */
int  attn_execute_paged(const attn_plan *plan, const void *q, const void *k_pages, const void *v_pages, int num_pages,
                        int page_size, const int *block_table, int max_pages, const int *seq_lens_kv, void *o);

/* attn_execute_varlen and attn_execute_paged without waiting, for inference engines that queue work on a CUDA stream
 * (as attn_execute_async does: stream a CUstream of the runtime's device in its primary context, NULL the legacy
 * default stream; ATTN_OK means queued, and the kernel's own errors surface at the caller's next synchronization of
 * the stream; q, k, v (the pages), o stay allocated and untouched by the caller until the stream has finished).
 * cu_seqlens, block_table and seq_lens_kv are host arrays, checked before anything is queued (the same checks and
 * errors as the synchronous calls: ATTN_EINVAL, nothing queued, o untouched), and read before the call returns: the
 * caller may overwrite or free them at once. They reach the device through the plan's own pinned and device buffers
 * (copied there on the host, then queued on the stream before the kernel), each reused only once the launch that
 * used it has finished, with no host synchronization; a call made while eight calls of one plan are in flight
 * waits for the oldest. Nothing is allocated per call once the plan's buffers have grown to the largest tables.
 * The synchronous calls are these on the legacy default stream, then waited for. On the CPU: stream is ignored and
 * these are the synchronous calls. */
int  attn_execute_varlen_async(const attn_plan *plan, void *stream, const int *cu_seqlens_q, const int *cu_seqlens_kv,
                               const void *q, const void *k, const void *v, void *o);
int  attn_execute_paged_async(const attn_plan *plan, void *stream, const void *q, const void *k_pages,
                              const void *v_pages, int num_pages, int page_size, const int *block_table, int max_pages,
                              const int *seq_lens_kv, void *o);

#ifdef __cplusplus
}
#endif
#endif
