"""python_grad.py [numpy|torch|all]: attntune's gradients (tests/python_train.sh runs it on the source tree's
package; "all" when no part is named). NumPy:
attention(..., return_lse=True)'s lse and attention_backward's dq, dk, dv against an fp64 backward (itself checked
by finite differences) for every shape class (n = 1, odd n, n_kv != n, causal bottom-right, grouped-query heads,
d_v != d, 2-, 3- and 4-D), float32 and float16; its refusals. Torch (exit 77 without it, after the NumPy
part passed where it runs): attntune.attention on tensors that require grad against torch's own autograd of the math
attention in float64 on the same inputs, float32, float16 and bfloat16; torch.autograd.gradcheck on tiny shapes
(float32 inside, float64 outside); non-contiguous inputs and their gradients' layout; grad mode off, lowrank,
empty results."""
import math
import sys

import numpy as np

try:
    import torch
except ImportError:
    torch = None

import attntune

failures = 0


def check(cond, what):
    global failures
    print("%s: %s" % ("ok  " if cond else "FAIL", what))
    failures += not cond


def as4(x):
    return x.reshape((1,) * (4 - x.ndim) + x.shape)


def ref_forward(q, k, v, causal, scale):
    """fp64 (o, lse, P) in 4-D, k and v repeated over each KV head's query heads."""
    q, k, v = (as4(np.asarray(x, dtype=np.float64)) for x in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    n, nk = q.shape[2], k.shape[2]
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    if causal:
        s = np.where(np.arange(nk)[None, :] <= np.arange(n)[:, None] + nk - n, s, -np.inf)
    mx = s.max(axis=-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(mx), mx, 0))
    den = e.sum(axis=-1, keepdims=True)
    p = e / np.where(den > 0, den, 1)
    with np.errstate(divide="ignore"):
        lse = (np.log(den) + np.where(np.isfinite(mx), mx, 0))[..., 0]
    return np.einsum("bhij,bhjd->bhid", p, v), lse, p


def ref_backward(q, k, v, dout, causal, scale):
    """fp64 (dq, dk, dv) of the definition attn.h gives, shaped like q, k, v."""
    o, _, p = ref_forward(q, k, v, causal, scale)
    q4, k4, v4, do = (as4(np.asarray(x, dtype=np.float64)) for x in (q, k, v, dout))
    g = q4.shape[1] // k4.shape[1]
    kr, vr = np.repeat(k4, g, axis=1), np.repeat(v4, g, axis=1)
    dv = np.einsum("bhij,bhid->bhjd", p, do)
    dp = np.einsum("bhid,bhjd->bhij", do, vr)
    ds = p * (dp - (do * o).sum(axis=-1, keepdims=True))
    dq = scale * np.einsum("bhij,bhjd->bhid", ds, kr)
    dk = scale * np.einsum("bhij,bhid->bhjd", ds, q4)
    b, hk = k4.shape[:2]
    dk = dk.reshape(b, hk, g, *dk.shape[2:]).sum(axis=2)
    dv = dv.reshape(b, hk, g, *dv.shape[2:]).sum(axis=2)
    return dq.reshape(np.shape(q)), dk.reshape(np.shape(k)), dv.reshape(np.shape(v))


def rel_err(x, ref):
    ref = np.asarray(ref, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    den = np.linalg.norm(ref)
    return float(np.linalg.norm(x - ref) / (den if den > 0 else 1.0))


rng = np.random.default_rng(11)


def rand(shape, dtype=np.float32):
    return rng.uniform(-1, 1, size=shape).astype(dtype)


part = sys.argv[1] if len(sys.argv) > 1 else "all"   # numpy, torch or all


def raises(exc, code, what, fn):
    try:
        fn()
    except exc as e:
        check(code is None or e.code == code, "%s: %s" % (what, e))
        return
    except Exception as e:  # noqa: BLE001
        check(False, "%s: raised %r, want %s" % (what, e, exc.__name__))
        return
    check(False, "%s: nothing raised, want %s" % (what, exc.__name__))


# (q shape, k shape, d_v, causal, scale): the shape classes. NumPy's (the part CI runs) share d = 16, so that 6
# kernels are compiled (forward and backward of f32 with d_v = 16 and 24, f16 with d_v = 24); torch's vary d too.
np_cases = [
    ((1, 4, 1, 16), (1, 2, 37, 16), 16, False, None),     # decode: n = 1, GQA
    ((37, 16), (37, 16), 16, False, None),                # 2-D, odd n
    ((2, 2, 19, 16), (2, 2, 23, 16), 16, False, 0.3),     # cross-attention, a given scale
    ((1, 2, 1, 16), (1, 2, 37, 16), 24, True, None),      # n = 1, causal: the last row sees every key; d_v > d
    ((3, 65, 16), (3, 65, 16), 24, True, None),           # 3-D, causal, n past a 64-row block
    ((2, 4, 33, 16), (2, 2, 71, 16), 24, True, None),     # GQA, n_kv > n, causal bottom-right
    ((1, 3, 40, 16), (1, 1, 17, 16), 24, True, None),     # n > n_kv, causal: rows that see no key (zero dq)
]
cases = np_cases + [
    ((3, 65, 24), (3, 65, 24), 24, True, 0.3),            # d = 24
    ((2, 2, 19, 24), (2, 2, 23, 24), 40, False, None),    # d_v > d, cross-attention
    ((1, 4, 20, 7), (1, 2, 9, 7), 12, True, None),        # odd d, d_v != d, GQA
]
if part != "torch":
    # the fp64 backward against central differences of the fp64 forward (GQA, causal, n_kv != n, d_v != d)
    q, k, v = (rng.uniform(-1, 1, size=s) for s in ((4, 3, 5), (2, 6, 5), (2, 6, 3)))
    w = rng.uniform(-1, 1, size=(4, 3, 3))
    grads = ref_backward(q, k, v, w, True, 0.7)
    worst = 0.0
    for x, gx in zip((q, k, v), grads):
        for i in range(x.size):
            xi = x.flat[i]
            x.flat[i] = xi + 1e-6
            fp = (ref_forward(q, k, v, True, 0.7)[0].reshape(w.shape) * w).sum()
            x.flat[i] = xi - 1e-6
            fm = (ref_forward(q, k, v, True, 0.7)[0].reshape(w.shape) * w).sum()
            x.flat[i] = xi
            worst = max(worst, abs((fp - fm) / 2e-6 - gx.flat[i]))
    check(worst < 1e-7, "fp64 reference backward vs central differences: max error %.1e" % worst)

    for qs, ks, dv, causal, scale in np_cases:
        for dt, tol in ((np.float32, 2e-5), (np.float16, 1e-2)):
            if dt == np.float16 and (dv == 16 or qs[-2] == 1):
                continue
            q, k, v = rand(qs, dt), rand(ks, dt), rand(ks[:-1] + (dv,), dt)
            o, lse = attntune.attention(q, k, v, causal=causal, scale=scale, return_lse=True)
            sc = 1 / math.sqrt(qs[-1]) if scale is None else scale
            ro, rlse, _ = ref_forward(q, k, v, causal, sc)
            lse_ok = (lse.dtype == np.float32 and lse.shape == qs[:-1] and
                      np.array_equal(np.isinf(lse), np.isinf(rlse.reshape(qs[:-1]))) and
                      np.allclose(lse[np.isfinite(lse)], rlse.reshape(qs[:-1])[np.isfinite(lse)], atol=1e-5))
            dout = rand(o.shape, dt)
            dq, dk, dvv = attntune.attention_backward(q, k, v, o, lse, dout, causal=causal, scale=scale)
            refs = ref_backward(q, k, v, dout, causal, sc)
            errs = [rel_err(x, r) for x, r in zip((dq, dk, dvv), refs)]
            shapes_ok = [x.shape for x in (dq, dk, dvv)] == [q.shape, k.shape, v.shape] and \
                all(x.dtype == dt for x in (dq, dk, dvv))
            check(lse_ok and shapes_ok and max(errs) < tol and rel_err(o, ro.reshape(o.shape)) < tol,
                  "numpy %s q %s k %s d_v=%d causal=%d: lse %s, dq dk dv rel errors %.1e %.1e %.1e vs fp64"
                  % (np.dtype(dt).name, qs, ks, dv, causal, "ok" if lse_ok else "WRONG", *errs))

    # the same bits twice (no reduction whose order varies), GQA's dk and dv summed over heads included
    again = attntune.attention_backward(q, k, v, o, lse, dout, causal=causal, scale=scale)
    check(all(np.array_equal(a, b) for a, b in zip((dq, dk, dvv), again)), "the same gradients twice, bit for bit")

    # rows that see no key: zero dq, -inf lse
    q, k, v = rand((1, 1, 6, 16)), rand((1, 1, 3, 16)), rand((1, 1, 3, 24))
    o, lse = attntune.attention(q, k, v, causal=True, return_lse=True)
    dq, dk, dvv = attntune.attention_backward(q, k, v, o, lse, np.ones_like(o), causal=True)
    check(np.all(lse[0, 0, :3] == -np.inf) and np.all(dq[0, 0, :3] == 0) and np.all(np.isfinite(lse[0, 0, 3:])),
          "n > n_kv causal: rows 0..2 see no key: lse -inf, dq 0")

    # non-contiguous arrays are copied
    qb, kb = rand((2, 40, 16)), rand((2, 30, 16))
    q, k, v = qb[:, ::2], kb[:, ::3], kb[:, ::3]
    o, lse = attntune.attention(q, k, v, return_lse=True)
    dout = rand(o.shape)
    errs = [rel_err(x, r) for x, r in zip(attntune.attention_backward(q, k, v, o, lse, np.asfortranarray(dout)),
                                          ref_backward(q, k, v, dout, False, 0.25))]
    check(max(errs) < 2e-5, "strided views: rel errors %.1e %.1e %.1e" % tuple(errs))


    q, k, v = rand((2, 9, 16)), rand((2, 11, 16)), rand((2, 11, 16))
    o, lse = attntune.attention(q, k, v, return_lse=True)
    dout = rand(o.shape)
    bw = attntune.attention_backward
    raises(TypeError, None, "lse of float16", lambda: bw(q, k, v, o, lse.astype(np.float16), dout))
    raises(TypeError, None, "dout of float64", lambda: bw(q, k, v, o, lse, dout.astype(np.float64)))
    raises(TypeError, None, "o a list", lambda: bw(q, k, v, o.tolist(), lse, dout))
    raises(attntune.Error, attntune.EINVAL, "lse of another shape", lambda: bw(q, k, v, o, lse[:, :3], dout))
    raises(attntune.Error, attntune.EINVAL, "dout of another shape", lambda: bw(q, k, v, o, lse, dout[..., :4]))
    raises(attntune.Error, attntune.EINVAL, "lse of q's shape", lambda: bw(q, k, v, o, q, dout))
    # lowrank with no measured row: the forward runs flash, and so does libattn's backward
    check(all(np.array_equal(x, y) for x, y in zip(bw(q, k, v, o, lse, dout, algo="lowrank", tolerance=0.1),
                                                   bw(q, k, v, o, lse, dout))), "lowrank with no row: flash's gradients")
    raises(TypeError, None, "return_lse=1", lambda: attntune.attention(q, k, v, return_lse=1))
    g = bw(q[:0], k[:0], v[:0], o[:0], lse[:0], dout[:0])
    check([x.shape for x in g] == [(0, 9, 16), (0, 11, 16), (0, 11, 16)], "batch = 0: empty gradients")
    z = rand((2, 11, 0))
    o0 = attntune.attention(q, k, z)
    g = bw(q, k, z, o0, lse, o0)
    check(o0.shape == (2, 9, 0) and not g[0].any() and not g[1].any() and g[2].shape == (2, 11, 0),
          "d_v = 0: zero dq and dk, an empty dv")
    raises(attntune.Error, attntune.EINVAL, "return_lse with d_v = 0",
           lambda: attntune.attention(q, k, z, return_lse=True))

if part == "numpy" or failures:
    print("%d failed" % failures)
    sys.exit(1 if failures else 0)
if torch is None:
    print("%d failed; SKIP: torch is not importable: its autograd checks are left out" % failures)
    sys.exit(77)
torch.manual_seed(5)


def math_attention(q, k, v, causal, scale):
    """torch's own autograd reference: the math attention (GQA by repeat_interleave, causal bottom-right)."""
    g = q.shape[-3] // k.shape[-3] if q.dim() > 2 else 1
    if g > 1:
        k, v = k.repeat_interleave(g, dim=-3), v.repeat_interleave(g, dim=-3)
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        n, nk = q.shape[-2], k.shape[-2]
        seen = torch.arange(nk)[None, :] <= torch.arange(n)[:, None] + nk - n
        s = s.masked_fill(~seen, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)   # a row that sees no key is 0
    return p @ v


tols = {torch.float32: 2e-5, torch.float16: 1e-2, torch.bfloat16: 3e-2}
for qs, ks, dv, causal, scale in cases:
    for dt, tol in tols.items():
        if dt != torch.float32 and qs[-1] != 16:   # the half types at d = 16 only: fewer kernels to compile
            continue
        q, k, v = (torch.rand(s).mul(2).sub(1).to(dt).requires_grad_() for s in (qs, ks, ks[:-1] + (dv,)))
        o = attntune.attention(q, k, v, causal=causal, scale=scale)
        w = torch.rand(o.shape).mul(2).sub(1).to(dt)
        (o.float() * w.float()).sum().backward()
        sc = 1 / math.sqrt(qs[-1]) if scale is None else scale
        q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
        o64 = math_attention(q64, k64, v64, causal, sc)
        (o64 * w.double()).sum().backward()
        errs = [rel_err(x.grad.double().numpy(), r.grad.numpy()) for x, r in zip((q, k, v), (q64, k64, v64))]
        ok = all(x.grad.dtype == dt and x.grad.shape == x.shape for x in (q, k, v)) and o.grad_fn is not None
        check(ok and max(errs) < tol and rel_err(o.detach().double().numpy(), o64.detach().numpy()) < tol,
              "torch %s q %s k %s d_v=%d causal=%d: dq dk dv rel errors %.1e %.1e %.1e vs float64 autograd"
              % (str(dt)[6:], qs, ks, dv, causal, *errs))


def f32_inside(causal, scale=None):
    return lambda q, k, v: attntune.attention(q.float(), k.float(), v.float(), causal=causal, scale=scale).double()


# gradcheck: float64 outside, float32 inside, so finite differences of 1e-3 (f32's rounding is ~1e-7 relative)
for qs, ks, dv, causal in (((1, 1, 1, 4), (1, 1, 5, 4), 4, False), ((1, 2, 3, 4), (1, 1, 5, 4), 3, True),
                           ((2, 5, 4), (2, 4, 4), 3, True)):
    q, k, v = (torch.rand(s, dtype=torch.float64).mul(2).sub(1).requires_grad_() for s in (qs, ks, ks[:-1] + (dv,)))
    try:
        ok = torch.autograd.gradcheck(f32_inside(causal), (q, k, v), eps=1e-3, atol=1e-3, rtol=1e-2)
        why = ""
    except Exception as e:  # noqa: BLE001 - gradcheck raises GradcheckError with the Jacobians
        ok, why = False, ": " + str(e)[:400]
    check(ok, "gradcheck q %s k %s d_v=%d causal=%d%s" % (qs, ks, dv, causal, why))

# non-contiguous inputs: copied for libattn, gradients in the inputs' layout
base = torch.rand(2, 13, 4, 16, requires_grad=True)          # [batch][n][heads][d], as models hold it
kb = torch.rand(2, 2, 16, 21, requires_grad=True)            # k's d and n swapped
q, k = base.transpose(1, 2), kb.transpose(2, 3)
v = torch.rand(2, 2, 21, 48)[..., ::2].requires_grad_()       # every other column: not dense
o = attntune.attention(q, k, v, causal=True)
gq, gk, gv = torch.autograd.grad((o * o).sum(), (q, k, v))
q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
r = math_attention(q64, k64, v64, True, 0.25)
rq, rk, rv = torch.autograd.grad((r * r).sum(), (q64, k64, v64))
errs = [rel_err(a.double().numpy(), b.numpy()) for a, b in ((gq, rq), (gk, rk), (gv, rv))]
check(max(errs) < 2e-5 and gq.stride() == q.stride() and gk.stride() == k.stride() and gv.shape == v.shape,
      "transposed q and k, strided v: rel errors %.1e %.1e %.1e, dq strides %s (q's %s), dk %s (k's %s)"
      % (*errs, gq.stride(), q.stride(), gk.stride(), k.stride()))

# only the inputs that require grad get one; lse is returned and not differentiable
q, k, v = torch.rand(3, 9, 16), torch.rand(3, 9, 16, requires_grad=True), torch.rand(3, 9, 16)
o, lse = attntune.attention(q, k, v, return_lse=True)
o.sum().backward()
_, rlse, _ = ref_forward(q.numpy(), k.detach().numpy(), v.numpy(), False, 0.25)
check(k.grad is not None and q.grad is None and not lse.requires_grad and lse.dtype == torch.float32 and
      np.allclose(lse.numpy(), rlse.reshape(3, 9), atol=1e-5), "k alone requires grad; lse float32, not differentiable")
with torch.no_grad():
    o = attntune.attention(q, k, v)
check(o.grad_fn is None and not o.requires_grad, "grad mode off: no graph (attn_execute, as before)")
# lowrank with no measured row: flash serves the forward and the backward, through autograd too
grads = []
for kw in ({}, {"algo": "lowrank", "tolerance": 0.1}):
    kk = k.detach().clone().requires_grad_(True)
    attntune.attention(q, kk, v, **kw).sum().backward()
    grads.append(kk.grad)
check(torch.equal(grads[0], grads[1]), "lowrank with no row on tensors that require grad: flash's gradients")
q0 = torch.rand(0, 2, 5, 16, requires_grad=True)
o = attntune.attention(q0, q0, q0)
o.sum().backward()
check(o.shape == (0, 2, 5, 16) and q0.grad is not None and q0.grad.shape == q0.shape, "batch = 0 with grad")
# the plans: one forward and one backward per problem, cached as attention()'s are
rt = attntune._runtimes[(None, attntune.os.environ.get("ATTN_DB"), attntune._TARGET_CPU)]
keys = set(rt.plans)
q, k, v = (torch.rand(1, 2, 7, 16, requires_grad=True) for _ in range(3))
attntune.attention(q, k, v).sum().backward()
added = set(rt.plans) - keys
for _ in range(3):
    attntune.attention(q, k, v).sum().backward()
check(sorted(key[0] for key in added) == [False, True] and set(rt.plans) - keys == added,
      "four steps of one problem: %d plans made (a forward's and a backward's)" % len(set(rt.plans) - keys))

print("%d failed" % failures)
sys.exit(1 if failures else 0)
