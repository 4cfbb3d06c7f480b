/* kcount.c: templates/flash.cu's key loop, counted from its structure (the names follow the template's macros).
 * f16/bf16, per warp of W, with MT = Br/(16 W) row tiles, per key block of Bc keys:
 *   S = Q K^T: d/16 k-steps x Bc/8 n-tiles x MT mma, K by Bc/16 ldmatrix.x4 per k-step (Q's too when they do not
 *   stay in registers); softmax: Bc/4 scores and one rescale factor for each of the 2 MT rows a lane holds, each an
 *   ex2; O += P V: Bc/16 x d/16 ldmatrix.x4.trans, each feeding 2 MT mma.
 * f32, lanes in RL rows x CL columns: S by fma over d/4 float4 chunks, P through shared memory, O += P V by fma. */
#include "kcount.h"
#include <string.h>

int attn_kb_thread_counts(const attn_spec *s, attn_kb_thread *out) {
  memset(out, 0, sizeof *out);
  if (s->algo != ATTN_ALGO_FLASH || s->target != ATTN_TARGET_CUDA || s->warps < 1 || s->d < 16 || s->bc < 16)
    return -1;
  const int d = s->d, bc = s->bc, w = s->warps, rw = s->br / w, t = 32 * w;
  const int es = s->dtype == ATTN_F32 ? 4 : 2, nc = d * es / 16; /* 16-byte chunks per row */
  const int chunks = bc * nc;
  out->cp_async = 2 * ((chunks + t - 1) / t); /* K_j and V_j */
  if (s->dtype != ATTN_F32) {
    const int mt = rw / 16;
    out->q_in_regs = mt * (d / 2 + bc / 2 + d / 4) <= 160; /* FA_QREGS */
    out->qk_unroll = s->unroll > 0 ? s->unroll : 2;      /* FA_QK_UNROLL */
    out->mma = mt * d * bc / 64;
    out->ldmatrix = d * bc / 128 + (out->q_in_regs ? 0 : mt * d / 16);
    out->ex2 = mt * (2 + bc / 2);
    const int e = mt * bc / 2; /* scores per lane */
    /* per score: scale, max, subtract, add to the sum, half a convert; per row: shuffles' max, alpha, l */
    out->falu = 4 * e + e / 2 + mt * d / 2 + 20 * mt;
  } else {
    const int cl = nc % 8 == 0 ? 8 : 4, rl = 32 / cl, tm = rw / rl, ts = bc / cl, to = nc / cl, pnc = bc / 4;
    out->ld_shared = nc * (tm + ts) + pnc * (tm + 4 * to);
    out->st_shared = tm * ts;
    out->ffma = nc * ts * tm * 4 + pnc * 4 * to * tm * 4;
    out->ex2 = tm * (1 + ts);
    out->falu = 4 * tm * ts + 4 * tm * to + 10 * tm;
  }
  return 0;
}

int attn_kb_work_of(const attn_spec *s, attn_kb_work *out) {
  memset(out, 0, sizeof *out);
  attn_kb_thread k;
  if (attn_kb_thread_counts(s, &k) != 0) return -1;
  const double t = 32.0 * s->warps;
  out->threads = t;
  out->mma_flops = (double)s->warps * k.mma * (2.0 * 16 * 8 * 16);
  out->ex2 = t * k.ex2;
  out->alu = t * (k.ffma + k.falu);
  /* ldmatrix.x4 and ld.shared.v4 move 16 bytes per lane, a P store 4, a cp.async fill 16 */
  out->smem_bytes = t * (16.0 * k.ldmatrix + 16.0 * k.ld_shared + 4.0 * k.st_shared + 16.0 * k.cp_async);
  return 0;
}
