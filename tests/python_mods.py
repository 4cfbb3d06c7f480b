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
    tq, tk, tv = (torch.from_numpy(x).requires_grad_() for x in (q, k, v))
    for kw in (dict(window=3), dict(softcap=2.0), dict(alibi_slopes=torch.tensor(SLOPES))):
        check(raises(lambda: attntune.attention(tq, tk, tv, causal=True, **kw), E, attntune.EUNSUPPORTED),
              "tensors that require grad with %s raise EUNSUPPORTED" % list(kw))
    with torch.no_grad():   # the same kernel, forward only, slopes from a tensor
        o = attntune.attention(tq, tk, tv, causal=True, window=3, softcap=2.0, alibi_slopes=torch.tensor(SLOPES))
    check(close(o.numpy(), ref(q, k, v, True, 3, 2.0, SLOPES)), "torch under no_grad, slopes a tensor")

print("%d failure(s)" % failures)
sys.exit(1 if failures else 0)
