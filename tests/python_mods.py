"""python_mods.py: attntune.attention's score modifiers (window=, softcap=, alibi_slopes=) on NumPy float32 against an
fp64 reference of attn.h's definitions, causal and not, grouped-query heads, n < n_kv and n > n_kv (rows that see no
key), each modifier with the others neutral and all together; plan() and describe() with them; their refusals (and,
where torch is importable, on tensors that require grad). Three kernels: every modifier on, causal and not, and
softcap with ALiBi, causal (a window that hides no key is no window); a modifier is tried alone, or nearly, by making
the others neutral (no window, zero slopes, a large softcap) on those kernels."""
import gc
import math
import sys

import numpy as np

import attntune

failures = 0


def check(cond, what):
    global failures
    print("%s: %s" % ("ok  " if cond else "FAIL", what))
    failures += not cond


def ref(q, k, v, causal, window, softcap, slopes):
    """fp64 attention of 4-D q, k, v with attn.h's modifiers: scale, softcap c*tanh(s/c), -slope_h*|i' - j|, then
    the mask (i' = i + n_kv - n); a row that sees no key is 0."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    n, nk = q.shape[2], k.shape[2]
    s = np.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(q.shape[3])
    if softcap:
        s = softcap * np.tanh(s / softcap)
    ip = np.arange(n)[:, None] + nk - n
    j = np.arange(nk)[None, :]
    if slopes is not None:
        s = s - np.asarray(slopes, dtype=np.float64)[None, :, None, None] * np.abs(ip - j)
    seen = np.ones((n, nk), dtype=bool)
    if causal:
        seen &= j <= ip
    if window:
        seen &= (ip - window < j) if causal else (np.abs(ip - j) < window)
    s = np.where(seen, s, -np.inf)
    mx = s.max(axis=-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(mx), mx, 0))
    den = e.sum(axis=-1, keepdims=True)
    return np.einsum("bhij,bhjd->bhid", e / np.where(den > 0, den, 1), v)


def close(o, r):
    return o.shape == r.shape and np.all(np.isfinite(o)) and np.max(np.abs(o - r), initial=0) < 2e-5


def raises(fn, exc, code=None):
    try:
        fn()
    except exc as e:
        return code is None or e.code == code
    return False


rng = np.random.default_rng(28)
HEADS, HEADS_KV, D, DV = 4, 2, 16, 8
SLOPES = [0.5, 0.25, 0.125, 0.0625]
ZERO = [0.0] * HEADS


def inputs(n, nk):
    q = rng.standard_normal((2, HEADS, n, D)).astype(np.float32) * 2   # scores of several units: softcap 2 bites
    k = rng.standard_normal((2, HEADS_KV, nk, D)).astype(np.float32) * 2
    v = rng.standard_normal((2, HEADS_KV, nk, DV)).astype(np.float32)
    return q, k, v


# (what, window, softcap, slopes): a window of 1000 hides no key (libattn then runs its kernel without a window,
# causal only here), zero slopes add nothing, softcap 50 changes these scores (|s| of a few units) by about 1% (the
# reference applies it)
CASES = [("window 3 (softcap 50)", 3, 50.0, ZERO), ("softcap 2 alone", 1000, 2.0, ZERO),
         ("alibi (softcap 50)", 1000, 50.0, SLOPES),
         ("window 1, softcap 0.5, alibi as a float64 array", 1, 0.5, np.array(SLOPES[::-1]))]
for causal in (True, False):
    for n, nk in ((7, 19), (9, 4)):   # n < n_kv; n > n_kv, where some rows see no key (causal, and the window)
        q, k, v = inputs(n, nk)
        for what, w, c, sl in CASES if causal else [x for x in CASES if x[1] < 1000]:
            o = attntune.attention(q, k, v, causal=causal, window=w, softcap=c, alibi_slopes=sl)
            r = ref(q, k, v, causal, w, c, sl)
            check(close(o, r), "causal=%s n=%d n_kv=%d %s: max |o - ref| %.2g" % (causal, n, nk, what,
                                                                                   np.max(np.abs(o - r))))
        # the checks above can fail: the modifiers change the result (o is the last case's)
        check(not np.allclose(o, ref(q, k, v, causal, 0, 0, None), atol=1e-2),
              "causal=%s n=%d n_kv=%d: the modifiers change the result" % (causal, n, nk))

q, k, v = inputs(7, 19)
for sl in (SLOPES, [4 * x for x in SLOPES]):   # one problem but for the slopes' values: two cached plans
    o = attntune.attention(q, k, v, causal=True, window=3, softcap=2.0, alibi_slopes=sl)
    check(close(o, ref(q, k, v, True, 3, 2.0, sl)), "slopes %s after other slopes" % sl)
sl = list(SLOPES)
p = attntune.plan(q, k, v, causal=True, window=3, softcap=2.0, alibi_slopes=np.array(sl, dtype=np.float32))
gc.collect()   # the slopes array is gone: libattn copied it at plan creation
check(close(p.run(q, k, v), ref(q, k, v, True, 3, 2.0, sl)), "plan() with every modifier")
d = p.describe()
check(all(w in d for w in ("window", "softcap", "alibi")), "plan.describe() names them: %s" % d)
p.close()
d = attntune.describe(q, k, v, causal=False, window=3, softcap=2.0, alibi_slopes=SLOPES)
check(all(w in d for w in ("window", "softcap", "alibi")) and "causal" not in d, "describe() names them: %s" % d)

E = attntune.Error
BAD = [("window=-1", dict(window=-1), E, attntune.EINVAL), ("window=1.5", dict(window=1.5), TypeError, None),
       ("window=True", dict(window=True), TypeError, None), ("window=2**31", dict(window=2**31), E, attntune.EINVAL),
       ("softcap=nan", dict(softcap=float("nan")), E, attntune.EINVAL),
       ("softcap=inf", dict(softcap=float("inf")), E, attntune.EINVAL),
       ("softcap=-1", dict(softcap=-1.0), E, attntune.EINVAL),
       ("softcap=1e-50 (0 as a float32)", dict(softcap=1e-50), E, attntune.EINVAL),
       ("softcap='2'", dict(softcap="2"), TypeError, None),
       ("alibi_slopes of 3 for 4 heads", dict(alibi_slopes=SLOPES[:3]), E, attntune.EINVAL),
       ("alibi_slopes for KV heads", dict(alibi_slopes=SLOPES[:HEADS_KV]), E, attntune.EINVAL),
       ("alibi_slopes 2-D", dict(alibi_slopes=[SLOPES]), E, attntune.EINVAL),
       ("alibi_slopes with a NaN", dict(alibi_slopes=[0.5, float("nan"), 0.1, 0.1]), E, attntune.EINVAL),
       ("alibi_slopes past float32", dict(alibi_slopes=[0.5, 1e39, 0.1, 0.1]), E, attntune.EINVAL),
       ("alibi_slopes a number", dict(alibi_slopes=0.5), TypeError, None),
       ("alibi_slopes a string", dict(alibi_slopes="0.5"), TypeError, None),
       ("alibi_slopes of strings", dict(alibi_slopes=["a", "b", "c", "d"]), TypeError, None)]
for what, kw, exc, code in BAD:
    for name, fn in (("attention", attntune.attention), ("plan", attntune.plan), ("describe", attntune.describe)):
        check(raises(lambda: fn(q, k, v, causal=True, **kw), exc, code), "%s(%s) raises %s" % (name, what,
                                                                                             exc.__name__))

try:
    import torch
except ImportError:
    torch = None
    print("skip: torch is not importable here, so the refusal on tensors that require grad is not checked")
if torch is not None:
    def tref(q, k, v, causal, window, softcap, slopes):
        """ref in torch float64, differentiable: torch's autograd gives the reference gradients."""
        g = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        n, nk = q.shape[2], k.shape[2]
        s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[3])
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        ip = torch.arange(n)[:, None] + nk - n
        j = torch.arange(nk)[None, :]
        if slopes is not None:
            s = s - torch.tensor(slopes, dtype=torch.float64)[None, :, None, None] * (ip - j).abs()
        seen = torch.ones(n, nk, dtype=torch.bool)
        if causal:
            seen &= j <= ip
        if window:
            seen &= (ip - window < j) if causal else ((ip - j).abs() < window)
        return torch.softmax(s.masked_fill(~seen, -math.inf), dim=-1) @ v

    # training with the modifiers: the gradients against torch's float64 autograd where libattn's backward takes
    # them, else a refusal that says so before the forward runs (one backward kernel: every modifier, causal, GQA,
    # d_v != d, n < n_kv)
    for causal, kw in ((True, dict(window=3, softcap=2.0, alibi_slopes=SLOPES)),):
        tq, tk, tv = (torch.from_numpy(x).requires_grad_() for x in (q, k, v))
        dout = torch.from_numpy(rng.standard_normal(q.shape[:3] + (DV,)).astype(np.float32))
        try:
            o = attntune.attention(tq, tk, tv, causal=causal, **kw)
        except E as e:
            check(e.code == attntune.EUNSUPPORTED and "require grad" in str(e),
                  "causal=%s %s on tensors that require grad: a clear refusal (%s)" % (causal, list(kw), e))
            continue
        o.backward(dout)
        rq, rk, rv = (x.detach().double().requires_grad_() for x in (tq, tk, tv))
        tref(rq, rk, rv, causal, kw.get("window", 0), kw["softcap"], kw["alibi_slopes"]).backward(dout.double())
        worst = max(float((x.grad.double() - r.grad).abs().max() / r.grad.abs().max())
                    for x, r in ((tq, rq), (tk, rk), (tv, rv)))
        check(worst < 1e-4, "causal=%s %s: gradients within %.1e of torch's float64 autograd" % (causal, list(kw),
                                                                                                 worst))
    with torch.no_grad():   # the same kernel, forward only, slopes from a tensor
        o = attntune.attention(tq, tk, tv, causal=True, window=3, softcap=2.0, alibi_slopes=torch.tensor(SLOPES))
    check(close(o.numpy(), ref(q, k, v, True, 3, 2.0, SLOPES)), "torch under no_grad, slopes a tensor")

# --- serving layouts: varlen (cu_seqlens_q/kv) and paged (block_table, seq_lens_kv, page_size) against the same
# reference per sequence, on the kernels above (every modifier, causal and not; softcap with ALiBi, causal)
LAYOUT_CASES = [(True, 3, 2.0, SLOPES), (False, 3, 50.0, ZERO), (True, 0, 2.0, SLOPES)]


def ref_seq(q, k, v, causal, w, c, sl):
    """ref of one sequence: q (heads, n, d), k and v (heads_kv, n_kv, .); zero rows without keys."""
    if k.shape[1] == 0:
        return np.zeros(q.shape[:2] + (v.shape[2],))
    return ref(q[None], k[None], v[None], causal, w, c, sl)[0]


def ref_varlen(q, k, v, cu_q, cu_kv, causal, w, c, sl):
    o = np.zeros(q.shape[:2] + (v.shape[2],))
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = cu_q[b], cu_q[b + 1], cu_kv[b], cu_kv[b + 1]
        if q1 > q0:
            o[q0:q1] = ref_seq(q[q0:q1].transpose(1, 0, 2), k[k0:k1].transpose(1, 0, 2), v[k0:k1].transpose(1, 0, 2),
                               causal, w, c, sl).transpose(1, 0, 2)
    return o


def ref_paged(q, kp, vp, table, lens, causal, w, c, sl):
    o = np.zeros(q.shape[:3] + (vp.shape[3],))
    for b in range(q.shape[0]):
        t = np.arange(lens[b])
        rows = (np.asarray(table[b])[t // kp.shape[1]], t % kp.shape[1])   # token t: page, slot
        o[b] = ref_seq(q[b], kp[rows].transpose(1, 0, 2), vp[rows].transpose(1, 0, 2), causal, w, c, sl)
    return o


# lengths 0 and 1, a sequence without keys, n > n_kv (rows that see no key), n_kv > n, odd lengths
LQ, LK = [0, 1, 7, 4, 9, 1], [5, 0, 19, 4, 3, 1]
cu_q, cu_kv = np.concatenate([[0], np.cumsum(LQ)]), np.concatenate([[0], np.cumsum(LK)])
vq = rng.standard_normal((cu_q[-1], HEADS, D)).astype(np.float32) * 2
vk = rng.standard_normal((cu_kv[-1], HEADS_KV, D)).astype(np.float32) * 2
vv = rng.standard_normal((cu_kv[-1], HEADS_KV, DV)).astype(np.float32)
for causal, w, c, sl in LAYOUT_CASES:
    o = attntune.attention(vq, vk, vv, causal=causal, window=w, softcap=c, alibi_slopes=sl,
                           cu_seqlens_q=list(cu_q), cu_seqlens_kv=cu_kv)
    r = ref_varlen(vq, vk, vv, cu_q, cu_kv, causal, w, c, sl)
    check(close(o, r), "varlen causal=%s window=%d softcap=%g: max |o - ref| %.2g" % (causal, w, c,
                                                                                     np.max(np.abs(o - r))))
# pages of 5 in shuffled order, one unused; lengths 7 (a part-full page), 0 and 13; decode (n = 1) and n = 5
PS, LENS = 5, [7, 0, 13]
table = np.array([[3, 0, 6], [1, 1, 1], [5, 2, 4]])
kp = rng.standard_normal((7, PS, HEADS_KV, D)).astype(np.float32) * 2
vp = rng.standard_normal((7, PS, HEADS_KV, DV)).astype(np.float32)
for n in (1, 5):
    pq = rng.standard_normal((3, HEADS, n, D)).astype(np.float32) * 2
    for causal, w, c, sl in LAYOUT_CASES:
        o = attntune.attention(pq, kp, vp, causal=causal, window=w, softcap=c, alibi_slopes=sl, block_table=table,
                               seq_lens_kv=LENS, page_size=PS)
        r = ref_paged(pq, kp, vp, table, LENS, causal, w, c, sl)
        check(close(o, r), "paged n=%d causal=%s window=%d softcap=%g: max |o - ref| %.2g"
              % (n, causal, w, c, np.max(np.abs(o - r))))
d = attntune.describe(pq, kp, vp, causal=True, softcap=2.0, alibi_slopes=SLOPES, block_table=table, seq_lens_kv=LENS)
check(d.endswith("(default)"), "describe() of a paged problem: %s" % d)
check(attntune.attention(vq, vk[:0], vv[:0], cu_seqlens_q=cu_q, cu_seqlens_kv=[0] * len(cu_q)).shape == vq.shape[:2] +
      (DV,), "varlen with no key at all: zero rows of the result's shape")

LBAD = [("both layouts", dict(cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv, block_table=table), E, attntune.EINVAL),
        ("cu_seqlens_q alone", dict(cu_seqlens_q=cu_q), E, attntune.EINVAL),
        ("cu_seqlens_q not from 0", dict(cu_seqlens_q=cu_q + 1, cu_seqlens_kv=cu_kv), E, attntune.EINVAL),
        ("cu_seqlens_q short of total_q", dict(cu_seqlens_q=np.minimum(cu_q, 20), cu_seqlens_kv=cu_kv), E,
         attntune.EINVAL),
        ("cu_seqlens_kv decreasing", dict(cu_seqlens_q=cu_q, cu_seqlens_kv=[0, 5, 4, 23, 27, 30, 32]), E,
         attntune.EINVAL),
        ("cu_seqlens of floats", dict(cu_seqlens_q=cu_q * 1.0, cu_seqlens_kv=cu_kv), TypeError, None),
        ("cu_seqlens of other lengths", dict(cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv[:-1]), E, attntune.EINVAL),
        ("return_lse", dict(cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv, return_lse=True), E, attntune.EUNSUPPORTED)]
for what, kw, exc, code in LBAD:
    check(raises(lambda: attntune.attention(vq, vk, vv, **kw), exc, code), "varlen %s raises %s" % (what,
                                                                                                   exc.__name__))
PBAD = [("page_size 4 for pages of 5", dict(page_size=4), E, attntune.EINVAL),
        ("page_size 5.0", dict(page_size=5.0), TypeError, None),
        ("a page outside the cache", dict(block_table=table + 4), E, attntune.EINVAL),
        ("a sequence longer than its pages", dict(seq_lens_kv=[7, 0, 16]), E, attntune.EINVAL),
        ("block_table of 2 rows", dict(block_table=table[:2]), E, attntune.EINVAL),
        ("block_table 1-D", dict(block_table=table[0]), E, attntune.EINVAL),
        ("seq_lens_kv missing", dict(seq_lens_kv=None), E, attntune.EINVAL)]
for what, kw, exc, code in PBAD:
    args = dict(block_table=table, seq_lens_kv=LENS)
    args.update(kw)
    check(raises(lambda: attntune.attention(pq, kp, vp, causal=True, softcap=2.0, alibi_slopes=SLOPES, **args), exc,
                 code), "paged %s raises %s" % (what, exc.__name__))

if torch is not None:   # CPU tensors, lengths and tables as tensors too
    causal, w, c, sl = LAYOUT_CASES[0]
    o = attntune.attention(*(torch.from_numpy(x) for x in (vq, vk, vv)), causal=causal, window=w, softcap=c,
                           alibi_slopes=torch.tensor(sl), cu_seqlens_q=torch.from_numpy(cu_q).int(),
                           cu_seqlens_kv=torch.from_numpy(cu_kv))
    check(isinstance(o, torch.Tensor) and close(o.numpy(), ref_varlen(vq, vk, vv, cu_q, cu_kv, causal, w, c, sl)),
          "varlen on torch tensors")
    o = attntune.attention(*(torch.from_numpy(x) for x in (pq, kp, vp)), causal=causal, window=w, softcap=c,
                           alibi_slopes=sl, block_table=torch.from_numpy(table), seq_lens_kv=torch.tensor(LENS),
                           page_size=PS)
    check(isinstance(o, torch.Tensor) and close(o.numpy(), ref_paged(pq, kp, vp, table, LENS, causal, w, c, sl)),
          "paged on torch tensors")
    tq = torch.from_numpy(vq).requires_grad_()
    check(raises(lambda: attntune.attention(tq, torch.from_numpy(vk), torch.from_numpy(vv), cu_seqlens_q=cu_q,
                                            cu_seqlens_kv=cu_kv), E, attntune.EUNSUPPORTED),
          "varlen on tensors that require grad raises EUNSUPPORTED")

print("%d failure(s)" % failures)
sys.exit(1 if failures else 0)
