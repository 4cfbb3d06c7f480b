/* model_sm90.h: the performance model of the Hopper flash template (templates/flash_sm90.cu, impl=wgmma): wgmma's
 * dense rate, the softmax on the CUDA cores overlapped with the products, the K/V ring's depth against the copies'
 * latency, one thread block per SM (docs/model.md, "Hopper: wgmma"). */
#ifndef ATTN_MODEL_SM90_H
#define ATTN_MODEL_SM90_H

#include "model.h"

/* The constants, each a guess until a GPU measures the kernel (docs/model.md says which). */
#define ATTN_SM90_TC_SUSTAINED 0.807 /* of the dense wgmma peak under load: an 8192^3 bf16 GEMM's 798 of 989 TFLOP/s */
#define ATTN_SM90_HIDDEN 0.6         /* share of the shorter of (tensor, softmax) hidden under the longer */
#define ATTN_SM90_START_CYCLES 2000  /* per thread block: barriers, Q and the first K/V from DRAM, O's stores */
#define ATTN_SM90_LOAD_CYCLES 700    /* a K/V tile's TMA copy before its bytes stream (mostly L2 hits; tuner/model.c's) */

/* ATTN_OK, or ATTN_EINVAL with a reason (not an impl=wgmma spec, a problem it does not serve, a GPU without the
 * per-SM rates). Fills out as attn_model_time does: time, FLOPs, the closed form's entries, the per-key-block cycles
 * (cyc_tensor at the sustained wgmma rate; cyc_sfu + cyc_alu: the softmax), blocks, waves and the bound. */
int attn_model_sm90_time(const attn_gpu *g, const attn_problem *p, const attn_spec *s, attn_model_result *out,
                         char *err, size_t errlen);

/* Cycles per key block that an impl=wgmma spec's consumers wait for K and V on g because its ring (stages) is too
 * shallow to hide the copies behind the work of the blocks before; 0 when hidden (a deeper ring would change
 * nothing the model sees); -1 when s is not such a spec or g lacks the rates. */
double attn_model_sm90_ring_wait(const attn_gpu *g, const attn_spec *s);

#endif
