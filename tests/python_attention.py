"""python_attention.py: the installed attntune package (tests/python_pkg.sh runs it in a venv) against a NumPy fp64
attention: 2-, 3- and 4-D layouts, odd n, causal with n_kv != n (bottom-right aligned), grouped-query heads, decode,
a given scale, non-contiguous inputs, d_v != d, float16 on the CPU; the C API's refusals as attntune.Error with its
code; wrong dtypes as TypeError; zero sizes answered empty or refused, never passed to libattn; arguments checked
(causal, scale, tolerance, algo, a db path with NUL); attntune.plan's run, out= and describe; the CUDA path's
streams on stand-ins (python_stream.py); `python -m attntune --version`. With torch importable: CPU tensors
against torch.nn.functional.scaled_dot_product_attention, and CUDA tensors when a GPU is present (on a side stream
too)."""
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
    ((4, 9, 16), (2, 11, 16), False, None),             # 3-D is (heads, n, d): grouped-query heads, batch 1
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
raises(attntune.Error, attntune.EINVAL, "heads_kv=3 with heads=4 (grouped-query heads must divide)",
       lambda: attntune.attention(rand(4, 8, 16), rand(3, 8, 16), rand(3, 8, 16)))
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

# Zero sizes never reach libattn (attn.h reads 0 as "the default"): an empty result is answered without a kernel,
# an undefined one refused.
for qs, ks, vs, dt in (((4, 16), (4, 16), (4, 0), np.float32),            # d_v = 0
                       ((0, 16), (4, 16), (4, 16), np.float32),            # n = 0
                       ((0, 4, 5, 8), (0, 2, 6, 8), (0, 2, 6, 8), np.float16),   # batch = 0
                       ((0, 5, 8), (0, 6, 8), (0, 6, 8), np.float32),      # heads = heads_kv = 0
                       ((0, 5, 8), (2, 6, 8), (2, 6, 8), np.float32),      # heads = 0
                       ((0, 8), (0, 8), (0, 8), np.float32),               # n = n_kv = 0
                       ((3, 8), (0, 8), (0, 0), np.float32)):              # n_kv = 0 and d_v = 0: nothing to compute
    q, k, v = (rand(*s).astype(dt) for s in (qs, ks, vs))
    o = attntune.attention(q, k, v, causal=True)
    want = qs[:-1] + vs[-1:]
    check(o.shape == want and o.dtype == dt and attntune.describe(q, k, v).startswith("empty result"),
          "q %s k %s v %s: an empty %s result, no kernel" % (qs, ks, vs, want))
for qs, ks, vs, what in (((4, 16), (0, 16), (0, 16), "n_kv = 0 (a softmax over no keys)"),
                         ((2, 1, 4, 16), (2, 1, 0, 16), (2, 1, 0, 16), "4-D n_kv = 0"),
                         ((4, 5, 8), (0, 6, 8), (0, 6, 8), "heads_kv = 0 with heads = 4"),
                         ((4, 0), (4, 0), (4, 8), "d = 0"),
                         ((0, 4, 0), (0, 4, 0), (0, 4, 8), "d = 0 under an empty result")):
    raises(attntune.Error, attntune.EINVAL, what, lambda: attntune.attention(rand(*qs), rand(*ks), rand(*vs)))
    raises(attntune.Error, attntune.EINVAL, "plan: " + what, lambda: attntune.plan(rand(*qs), rand(*ks), rand(*vs)))

# Arguments of the wrong type or value: raised before anything runs, nothing truncated or taken as truthy
raises(TypeError, None, "causal='yes'", lambda: attntune.attention(a, a, a, causal="yes"))
raises(TypeError, None, "causal=None", lambda: attntune.attention(a, a, a, causal=None))
raises(TypeError, None, "causal=0.5", lambda: attntune.attention(a, a, a, causal=0.5))
raises(attntune.Error, attntune.EINVAL, "causal=2", lambda: attntune.attention(a, a, a, causal=2))
c = rand(2, 16, 16)
want = attntune.attention(c, c, c, causal=True)
check(all(np.array_equal(attntune.attention(c, c, c, causal=x), want) for x in (1, np.bool_(True), np.int64(1))),
      "causal=1, numpy.bool_(True) and numpy.int64(1) are causal=True")
raises(TypeError, None, "scale='0.5'", lambda: attntune.attention(a, a, a, scale="0.5"))
raises(TypeError, None, "scale=True", lambda: attntune.attention(a, a, a, scale=True))
raises(attntune.Error, attntune.EINVAL, "scale=-1", lambda: attntune.attention(a, a, a, scale=-1.0))
raises(attntune.Error, attntune.EINVAL, "scale=inf", lambda: attntune.attention(a, a, a, scale=float("inf")))
raises(attntune.Error, attntune.EINVAL, "scale=nan", lambda: attntune.attention(a, a, a, scale=float("nan")))
raises(attntune.Error, attntune.EINVAL, "scale=1e-50 (0 as a float32, attn.h's 'default')",
       lambda: attntune.attention(a, a, a, scale=1e-50))
check(rel_err(attntune.attention(c, c, c, scale=np.float32(0.3)), reference(c, c, c, False, 0.3)) < 1e-5,
      "scale=numpy.float32(0.3)")
raises(attntune.Error, attntune.EINVAL, "tolerance=-1", lambda: attntune.attention(a, a, a, tolerance=-1.0))
raises(TypeError, None, "algo=1", lambda: attntune.attention(a, a, a, algo=1))
cut = os.path.join(os.getcwd(), "cut.db")
raises(ValueError, None, "a db path with an embedded NUL",
       lambda: attntune.attention(a, a, a, db=os.path.join(os.getcwd(), "cut.db\0/more")))
raises(ValueError, None, "a bytes db path with an embedded NUL", lambda: attntune.attention(a, a, a, db=b"cut.db\0x"))
check(not os.path.exists(cut), "the NUL path was not truncated to %s" % cut)
raises(TypeError, None, "db=3", lambda: attntune.attention(a, a, a, db=3))
import pathlib  # noqa: E402 - a PathLike database path
check(np.array_equal(attntune.attention(c, c, c, db=pathlib.Path(os.getcwd(), "none.db")), attntune.attention(c, c, c)),
      "db=pathlib.Path(...)")

# attntune.plan: created once, run many times, like attention()
q, k, v = rand(2, 4, 33, 24), rand(2, 2, 71, 24), rand(2, 2, 71, 40)   # the d_v kernel above: no compile
with attntune.plan(q, k, v, causal=True) as p:
    o1 = p.run(q, k, v)
    out = np.full(p.out_shape, np.nan, dtype=np.float32)
    o2 = p.run(q, k, v, out=out)
    q2 = rand(2, 4, 33, 24)
    o3 = p.run(q2, k, v)
    check(p.describe() == attntune.describe(q, k, v, causal=True) and p.out_shape == (2, 4, 33, 40),
          "plan.describe(): %s" % p.describe())
    check(np.array_equal(o1, attntune.attention(q, k, v, causal=True)) and o2 is out and np.array_equal(o2, o1)
          and rel_err(o3, reference(q2, k, v, True)) < 1e-5, "plan.run: as attention(), into out=, on new inputs")
    check(np.array_equal(p.run(q.transpose(0, 1, 3, 2).copy().transpose(0, 1, 3, 2), k, v), o1),
          "plan.run copies non-contiguous inputs")
    raises(attntune.Error, attntune.EINVAL, "plan.run on another shape", lambda: p.run(rand(2, 4, 34, 24), k, v))
    raises(TypeError, None, "plan.run on float16", lambda: p.run(q.astype(np.float16), k, v))
    raises(TypeError, None, "plan.run on a list", lambda: p.run(q.tolist(), k, v))
    raises(attntune.Error, attntune.EINVAL, "plan.run into an out of another shape",
           lambda: p.run(q, k, v, out=np.empty((2, 4, 33, 24), np.float32)))
    raises(attntune.Error, attntune.EINVAL, "plan.run into a non-contiguous out",
           lambda: p.run(q, k, v, out=np.empty((2, 4, 40, 33), np.float32).transpose(0, 1, 3, 2)))
    qq = rand(37, 16)
    raises(attntune.Error, attntune.EINVAL, "plan.run into an out that overlaps q",
           lambda: attntune.plan(qq, qq, qq).run(qq, qq, qq, out=qq))
    raises(TypeError, None, "plan.run with a stream on the CPU", lambda: p.run(q, k, v, stream=0))
raises(attntune.Error, attntune.EINVAL, "plan.run after close", lambda: p.run(q, k, v))
e = attntune.plan(rand(0, 8), rand(3, 8), rand(3, 8))
check(e.run(rand(0, 8), rand(3, 8), rand(3, 8)).shape == (0, 8) and e.describe().startswith("empty result"),
      "an empty plan: %s" % e.describe())

r = subprocess.run([sys.executable, "-m", "attntune", "--version"], capture_output=True, text=True, check=False)
check(r.returncode == 0 and r.stdout.strip() == "attntune " + attntune.__version__,
      "python -m attntune --version: %r (exit %d)" % (r.stdout.strip() or r.stderr.strip(), r.returncode))
r = subprocess.run([sys.executable, "-m", "attntune", "tune", "--gpu", "cpu", "--d", "32", "--strategy", "nosuch",
                    "--db", os.path.join(os.getcwd(), "unused.db")], capture_output=True, text=True, check=False)
bundled = os.path.dirname(os.path.realpath(attntune.__file__))
check(r.returncode == 2 and "(anneal, bayes, genetic, guided)" in r.stderr and bundled in r.stderr,
      "python -m attntune: the bundled CLI offers its bundled strategies: %r" % r.stderr.strip())

# the CUDA path on a stand-in torch and libattn, in a process of its own (python_stream.py)
r = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "python_stream.py")],
                   capture_output=True, text=True, check=False)
print(r.stdout + r.stderr, end="")
check(r.returncode == 0, "python_stream.py: CUDA tensors through attn_execute_async on torch's stream (exit %d)"
      % r.returncode)

try:
    if os.environ.get("ATTN_TEST_TORCH") == "0":   # CI's sample: the torch checks run in python_package_torch
        raise ImportError("ATTN_TEST_TORCH=0")
    import torch
    import torch.nn.functional as F
except ImportError as e:
    torch = None
    print("torch is not importable (%s): its checks are left out" % e)
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
    t = torch.rand(2, 3, 40, 16)
    tp = attntune.plan(t, t, t[..., :8], causal=True)
    check(torch.equal(tp.run(t, t, t[..., :8]), attntune.attention(t, t, t[..., :8], causal=True))
          and not tp.stream_ordered, "plan of torch CPU tensors: %s" % tp.describe())
    raises(TypeError, None, "a torch plan run on numpy arrays", lambda: tp.run(t.numpy(), t.numpy(), t.numpy()))
    raises(attntune.Error, attntune.EINVAL, "torch: n_kv = 0",
           lambda: attntune.attention(t, t[:, :, :0], t[:, :, :0]))
    check(attntune.attention(t[:0], t[:0], t[:0]).shape == (0, 3, 40, 16), "torch: batch = 0, an empty result")
    if torch.cuda.is_available():
        # stream-ordered: inputs made on a side stream, attention queued there, read once that stream alone is done
        import ctypes
        s = torch.cuda.Stream()
        g = torch.Generator(device="cuda").manual_seed(5)
        with torch.cuda.stream(s):
            q, k, v = (torch.rand((2, 4, 257, 64), device="cuda", generator=g).to(torch.float16) for _ in range(3))
            o = attntune.attention(q, k, v, causal=True)
            p = attntune.plan(q, k, v, causal=True)
        o2 = p.run(q, k, v, stream=s)
        out = torch.empty_like(q)
        with torch.cuda.stream(s):
            o3 = p.run(q, k, v, out=out)
        s.synchronize()
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
        errs = [((x.float() - ref).norm() / ref.norm()).item() for x in (o, o2, o3)]
        check(max(errs) < 2e-2 and o3 is out, "CUDA on a side stream (attention, plan.run(stream=), out=): rel "
              "errors %s" % ", ".join("%.1e" % e for e in errs))
        has_async = hasattr(ctypes.CDLL(attntune.library_path()), "attn_execute_async")
        check(p.stream_ordered == has_async, "CUDA plan stream_ordered=%s, libattn has attn_execute_async: %s"
              % (p.stream_ordered, has_async))
        check(attntune.attention(q[:, :, :0], k, v).shape == (2, 4, 0, 64), "CUDA: n = 0, an empty result")
    else:
        print("no CUDA device: torch CUDA tensors are left out")

print("%d failures" % failures)
sys.exit(1 if failures else 0)
