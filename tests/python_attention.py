"""python_attention.py: the installed attntune package (tests/python_pkg.sh runs it in a venv) against a NumPy fp64
attention: 2-, 3- and 4-D layouts, odd n, causal with n_kv != n (bottom-right aligned), grouped-query heads, decode,
a given scale, non-contiguous inputs, d_v != d, float16 on the CPU; the C API's refusals as attntune.Error with its code; wrong dtypes as
TypeError; `python -m attntune --version`. With torch importable: CPU tensors against
torch.nn.functional.scaled_dot_product_attention, and CUDA tensors when a GPU is present."""
import os
import subprocess
import sys

import numpy as np

import attntune

failures = 0


def check(cond, what):
    global failures
    print("%s: %s" % ("ok  " if cond else "FAIL", what))
    failures += not cond


def reference(q, k, v, causal=False, scale=None):
    """fp64 softmax(scale q k^T) v in attn.h's layout; heads of q share k/v heads in groups; causal bottom-right."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    shape = q.shape
    q, k, v = (x.reshape((1,) * (4 - x.ndim) + x.shape) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    n, n_kv, d = q.shape[2], k.shape[2], q.shape[3]  # v's last dimension (d_v) may differ from d
    s = np.einsum("bhid,bhjd->bhij", q, k) * (1.0 / np.sqrt(d) if scale is None else scale)
    if causal:
        s = np.where(np.arange(n_kv)[None, :] <= np.arange(n)[:, None] + n_kv - n, s, -np.inf)
    mx = s.max(axis=-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(mx), mx, 0))
    den = e.sum(axis=-1, keepdims=True)
    o = np.einsum("bhij,bhjd->bhid", e / np.where(den > 0, den, 1), v)
    return o.reshape(shape[:-1] + (v.shape[-1],))


def rel_err(o, ref):
    return float(np.linalg.norm(np.asarray(o, dtype=np.float64) - ref) / np.linalg.norm(ref))


rng = np.random.default_rng(7)


def rand(*shape):
    return rng.uniform(-1, 1, size=shape).astype(np.float32)


# (q shape, k/v shape, causal, scale)
cases = [
    ((37, 16), (37, 16), False, None),                  # 2-D, odd n
    ((3, 65, 64), (3, 65, 64), True, None),             # 3-D, causal
    ((2, 4, 33, 32), (2, 2, 71, 32), True, None),       # 4-D, grouped-query, n_kv != n, causal bottom-right
    ((1, 8, 1, 8), (1, 2, 50, 8), False, None),         # decode: n = 1
    ((2, 19, 24), (2, 23, 24), False, 0.3),             # cross-attention with a given scale
]
for qs, ks, causal, scale in cases:
    q, k, v = rand(*qs), rand(*ks), rand(*ks)
    o = attntune.attention(q, k, v, causal=causal, scale=scale)
    err = rel_err(o, reference(q, k, v, causal, scale))
    check(o.shape == q.shape and o.dtype == np.float32 and err < 1e-5,
          "q %s k %s causal=%d scale=%s: rel error %.1e vs fp64" % (qs, ks, causal, scale, err))

# d_v != d: v's last dimension, and the result's (odd head dimensions too)
for qs, ks, dv, causal in (((2, 3, 20, 24), (2, 3, 30, 24), 40, True), ((17, 7), (9, 7), 12, False)):
    q, k, v = rand(*qs), rand(*ks), rand(*(ks[:-1] + (dv,)))
    o = attntune.attention(q, k, v, causal=causal)
    err = rel_err(o, reference(q, k, v, causal))
    check(o.shape == qs[:-1] + (dv,) and o.dtype == np.float32 and err < 1e-5,
          "d_v=%d: q %s k %s: shape %s, rel error %.1e vs fp64" % (dv, qs, ks, o.shape, err))
check("d_v=12" in attntune.describe(rand(17, 7), rand(9, 7), rand(9, 12)), "describe names d_v")

# float16 on the CPU: the result is float16, within 1e-2 of fp64 on the same (rounded) inputs
q, k, v = (rand(2, 33, 16).astype(np.float16) for _ in range(3))
o = attntune.attention(q, k, v, causal=True)
err = rel_err(o, reference(q, k, v, True))
check(o.dtype == np.float16 and o.shape == q.shape and err < 1e-2, "float16 on the CPU: rel error %.1e" % err)

# strided views are copied to attn.h's layout
base = rand(2, 40, 3, 16)
q = base.transpose(0, 2, 1, 3)           # (2, 3, 40, 16), not contiguous
k, v = rand(2, 3, 40, 16), rand(2, 3, 40, 16)[:, :, ::-1]
o = attntune.attention(q, k, v, causal=True)
check(not q.flags.c_contiguous and rel_err(o, reference(q, k, v, True)) < 1e-5, "non-contiguous inputs")
desc = attntune.describe(q, k, v, causal=True)
check(desc.startswith("flash d=16") and "cpu f32" in desc and "causal" in desc, "describe: %s" % desc)


def raises(exc, code, what, fn):
    try:
        fn()
    except exc as e:
        ok = code is None or getattr(e, "code", None) == code
        check(ok, "%s raises %s%s: %s" % (what, type(e).__name__, "" if code is None else " code %d" % e.code, e))
        return
    except Exception as e:  # noqa: BLE001 - any other exception is the failure reported
        check(False, "%s raises %s, want %s: %s" % (what, type(e).__name__, exc.__name__, e))
        return
    check(False, "%s raises nothing" % what)


a = rand(2, 16, 16)
raises(attntune.Error, attntune.EUNSUPPORTED, "d=577 (the C API's d check)",
       lambda: attntune.attention(rand(8, 577), rand(8, 577), rand(8, 577)))
raises(attntune.Error, attntune.EUNSUPPORTED, "d_v=577 (the C API's d_v check)",
       lambda: attntune.attention(rand(8, 16), rand(8, 16), rand(8, 577)))
raises(attntune.Error, attntune.EINVAL, "heads_kv=3 with heads=4 (the C API's grouped-query check)",
       lambda: attntune.attention(rand(4, 8, 16), rand(3, 8, 16), rand(3, 8, 16)))
raises(attntune.Error, attntune.EINVAL, "an empty n (the C API's n check)",
       lambda: attntune.attention(rand(0, 16), rand(4, 16), rand(4, 16)))
raises(attntune.Error, attntune.EINVAL, "q and k with different d",
       lambda: attntune.attention(a, rand(2, 16, 8), rand(2, 16, 8)))
raises(attntune.Error, attntune.EINVAL, "k and v of different shapes", lambda: attntune.attention(a, a, rand(2, 8, 16)))
raises(attntune.Error, attntune.EINVAL, "5-D arrays", lambda: attntune.attention(*(rand(1, 1, 1, 4, 8),) * 3))
raises(attntune.Error, attntune.EINVAL, "2-D q with 3-D k", lambda: attntune.attention(rand(16, 16), a, a))
raises(attntune.Error, attntune.EINVAL, "scale=0", lambda: attntune.attention(a, a, a, scale=0))
raises(attntune.Error, attntune.EINVAL, "algo='nosuch'", lambda: attntune.attention(a, a, a, algo="nosuch"))
raises(attntune.Error, attntune.EUNSUPPORTED, "lowrank without a tolerance (the C API's check)",
       lambda: attntune.attention(a, a, a, algo="lowrank"))
raises(TypeError, None, "float64 arrays", lambda: attntune.attention(*(x.astype(np.float64) for x in (a, a, a))))
raises(TypeError, None, "a list", lambda: attntune.attention(a.tolist(), a, a))
raises(TypeError, None, "mixed dtypes", lambda: attntune.attention(a, a.astype(np.float16), a))

r = subprocess.run([sys.executable, "-m", "attntune", "--version"], capture_output=True, text=True, check=False)
check(r.returncode == 0 and r.stdout.strip() == "attntune " + attntune.__version__,
      "python -m attntune --version: %r (exit %d)" % (r.stdout.strip() or r.stderr.strip(), r.returncode))
r = subprocess.run([sys.executable, "-m", "attntune", "tune", "--gpu", "cpu", "--d", "32", "--strategy", "nosuch",
                    "--db", os.path.join(os.getcwd(), "unused.db")], capture_output=True, text=True, check=False)
bundled = os.path.dirname(os.path.realpath(attntune.__file__))
check(r.returncode == 2 and "(anneal, genetic)" in r.stderr and bundled in r.stderr,
      "python -m attntune: the bundled CLI offers its bundled strategies: %r" % r.stderr.strip())

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = None
    print("torch is not importable: its checks are left out")
if torch is not None:
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for dev in devices:
        g = torch.Generator().manual_seed(3)
        for qs, ks, causal in (((2, 4, 33, 32), (2, 2, 71, 32), True), ((1, 2, 64, 64), (1, 2, 64, 64), False)):
            dtypes = [torch.float32, torch.float16, torch.bfloat16]
            for dt in dtypes:
                q, k, v = (torch.rand(s, generator=g).mul(2).sub(1).to(dev, dt) for s in (qs, ks, ks))
                o = attntune.attention(q, k, v, causal=causal)
                group = qs[1] // ks[1]
                kk, vv = (x.repeat_interleave(group, dim=1).float() for x in (k, v))
                mask = None
                if causal:
                    mask = (torch.arange(ks[2], device=dev)[None, :] <=
                            torch.arange(qs[2], device=dev)[:, None] + ks[2] - qs[2])
                ref = F.scaled_dot_product_attention(q.float(), kk, vv, attn_mask=mask)
                err = ((o.float() - ref).norm() / ref.norm()).item()
                tol = 1e-5 if dt == torch.float32 else 2e-2
                check(o.shape == q.shape and o.dtype == dt and o.device == q.device and err < tol,
                      "torch %s %s q %s k %s causal=%d: rel error %.1e vs scaled_dot_product_attention"
                      % (dev, dt, qs, ks, causal, err))
    raises(TypeError, None, "torch float64", lambda: attntune.attention(*(torch.zeros(2, 8, 16, dtype=torch.float64),)
                                                                         * 3))
    if not torch.cuda.is_available():
        print("no CUDA device: torch CUDA tensors are left out")

print("%d failures" % failures)
sys.exit(1 if failures else 0)
