"""attntune: attention through libattn, the attntune runtime. O = softmax(scale * Q K^T) V with the tuned kernel
from the database (`attntune tune`), else a default one, checked against fp64 when tuned.

    import numpy as np, attntune
    o = attntune.attention(q, k, v, causal=True)

The layouts are attn.h's: q [batch][heads][n][d], k [batch][heads_kv][n_kv][d], v [batch][heads_kv][n_kv][d_v] and
the result [batch][heads][n][d_v], C-contiguous (other strides are copied); d_v, v's last dimension, may differ from d
(each in 1..576 on the CPU). 2-D (n, d) and 3-D (heads, n, d) arrays are taken as batch 1 and heads 1. heads_kv must
divide heads (grouped-query attention); n_kv may differ from n (causal is then bottom-right aligned: query i sees the
keys j <= i + n_kv - n). NumPy arrays (float32, float16) and PyTorch CPU tensors (float32, float16, bfloat16) run on
the CPU; PyTorch CUDA tensors run on the GPU by device pointer (float16, bfloat16, float32) when libattn's CUDA target
opens. The result has the inputs' dtype. Everything libattn refuses
raises attntune.Error, whose .code is the C API's code (EINVAL, EUNSUPPORTED, ...) and whose message is
attn_last_error's; shapes that do not fit together raise it too, with EINVAL. Inputs of another type or dtype raise
TypeError. There is no autograd: torch tensors are read detached.

libattn is the one bundled into the package when it was installed (see python/attntune_build.py), or the file
$ATTNTUNE_LIB names. A runtime per (database, target) and a plan per problem are kept for the life of the process,
so a database tuned afterwards is seen by a new process.
"""
import ctypes
import math
import os
import shutil
import threading
from collections import OrderedDict

import numpy as np

__version__ = "0.1.0"
__all__ = ["attention", "describe", "Error", "library_path", "cli_path", "__version__"]

# attn.h's codes
OK, EINVAL, ENOMEM, ENODEV, ECOMPILE, EDB, ERUNTIME, EUNSUPPORTED = range(8)
_CODE_NAMES = {OK: "OK", EINVAL: "EINVAL", ENOMEM: "ENOMEM", ENODEV: "ENODEV", ECOMPILE: "ECOMPILE", EDB: "EDB",
               ERUNTIME: "ERUNTIME", EUNSUPPORTED: "EUNSUPPORTED"}
_TARGET_CPU, _TARGET_CUDA = 1, 2
_F32, _F16, _BF16 = 0, 1, 2
_ALGOS = {"auto": 0, "flash": 1, "smallcache": 2, "lowrank": 3}
_INT_MAX = 2**31 - 1
_HERE = os.path.dirname(os.path.abspath(__file__))


class Error(Exception):
    """A failure libattn reports: .code is attn.h's code (attntune.EINVAL, ...), .detail attn_last_error's text."""

    def __init__(self, code, detail):
        self.code = code
        self.detail = detail
        super().__init__("%s: %s" % (_CODE_NAMES.get(code, "error %d" % code), detail))


class _Problem(ctypes.Structure):
    # attn.h: attn_problem, field for field (d_v, appended last there, is last here)
    _fields_ = [("batch", ctypes.c_int), ("heads", ctypes.c_int), ("n", ctypes.c_int), ("d", ctypes.c_int),
                ("n_kv", ctypes.c_int), ("heads_kv", ctypes.c_int), ("dtype", ctypes.c_int),
                ("causal", ctypes.c_int), ("scale", ctypes.c_float), ("tolerance", ctypes.c_double),
                ("algo", ctypes.c_int), ("d_v", ctypes.c_int)]


def library_path():
    """The libattn this package loads: $ATTNTUNE_LIB, else the one bundled at install time."""
    env = os.environ.get("ATTNTUNE_LIB")
    if env:
        return env
    return os.path.join(_HERE, "_lib", "lib", "libattn.so.0")


def cli_path():
    """The attntune CLI `python -m attntune` runs: $ATTNTUNE_CLI, the bundled one, else attntune on PATH."""
    env = os.environ.get("ATTNTUNE_CLI")
    if env:
        return env
    bundled = os.path.join(_HERE, "_lib", "bin", "attntune")
    if os.access(bundled, os.X_OK):
        return bundled
    return shutil.which("attntune")


_lock = threading.Lock()   # guards the library, the runtimes and their plans, and runs plans (an evicted plan
_lib = None                # must not be destroyed while it executes)
_runtimes = {}
_MAX_PLANS = 64


def _load():
    global _lib
    if _lib is not None:
        return _lib
    path = library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise Error(ERUNTIME, "cannot load libattn (%s): %s; set ATTNTUNE_LIB to libattn.so, or reinstall the "
                    "package from a built tree (python/attntune_build.py)" % (path, e)) from None
    vp = ctypes.c_void_p
    lib.attn_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(vp)]
    lib.attn_plan_create.argtypes = [vp, ctypes.POINTER(_Problem), ctypes.POINTER(vp)]
    lib.attn_execute.argtypes = [vp, vp, vp, vp, vp]
    lib.attn_plan_describe.argtypes = [vp]
    lib.attn_plan_describe.restype = ctypes.c_char_p
    lib.attn_plan_destroy.argtypes = [vp]
    lib.attn_close.argtypes = [vp]
    lib.attn_last_error.argtypes = [vp]
    lib.attn_last_error.restype = ctypes.c_char_p
    _lib = lib
    return lib


def _last_error(lib, rt):
    msg = lib.attn_last_error(rt)
    return msg.decode(errors="replace") if msg else ""


class _Runtime:
    def __init__(self, lib, db, target):
        self.lib = lib
        self.rt = ctypes.c_void_p()
        rc = lib.attn_open(os.fsencode(db) if db is not None else None, target, ctypes.byref(self.rt))
        if rc != OK:
            detail = _last_error(lib, None)
            if target == _TARGET_CUDA:
                detail = "CUDA tensors need libattn's CUDA target, which did not open: " + detail
            raise Error(rc, detail)
        self.plans = OrderedDict()

    def plan(self, p):
        key = tuple(getattr(p, f) for f, _ in _Problem._fields_)
        plan = self.plans.get(key)
        if plan is not None:
            self.plans.move_to_end(key)
            return plan
        plan = ctypes.c_void_p()
        rc = self.lib.attn_plan_create(self.rt, ctypes.byref(p), ctypes.byref(plan))
        if rc != OK:
            raise Error(rc, _last_error(self.lib, self.rt))
        self.plans[key] = plan
        if len(self.plans) > _MAX_PLANS:
            self.lib.attn_plan_destroy(self.plans.popitem(last=False)[1])
        return plan

    def execute(self, plan, q, k, v, o):
        rc = self.lib.attn_execute(plan, q, k, v, o)
        if rc != OK:
            raise Error(rc, _last_error(self.lib, self.rt))


def _runtime(db, target):
    # db None means $ATTN_DB (else the default database) as attn_open reads it now
    key = (os.fspath(db) if db is not None else None, os.environ.get("ATTN_DB"), target)
    rt = _runtimes.get(key)
    if rt is None:
        rt = _runtimes[key] = _Runtime(_load(), key[0], target)
    return rt


def _is_torch(x):
    m = type(x).__module__
    return (m == "torch" or m.startswith("torch.")) and hasattr(x, "data_ptr")


def _dims(name, shape):
    """(batch, heads, rows, d) of a 2-, 3- or 4-D shape."""
    if len(shape) not in (2, 3, 4):
        raise Error(EINVAL, "%s has %d dimensions: expected (n, d), (heads, n, d) or (batch, heads, n, d)"
                    % (name, len(shape)))
    dims = (1,) * (4 - len(shape)) + tuple(int(s) for s in shape)
    if any(s > _INT_MAX for s in dims):
        raise Error(EINVAL, "%s has shape %s: each dimension at most %d" % (name, tuple(shape), _INT_MAX))
    return dims


def _problem(q, k, v, causal, scale, algo, tolerance):
    if len(q.shape) != len(k.shape) or len(k.shape) != len(v.shape):
        raise Error(EINVAL, "q, k and v have %d, %d and %d dimensions: they must have the same number"
                    % (len(q.shape), len(k.shape), len(v.shape)))
    b, h, n, d = _dims("q", q.shape)
    bk, hk, nk, dk = _dims("k", k.shape)
    dv = _dims("v", v.shape)[3]
    if tuple(k.shape[:-1]) != tuple(v.shape[:-1]):
        raise Error(EINVAL, "k has shape %s and v %s: they must be the same but for the last dimension (d_v)"
                    % (tuple(k.shape), tuple(v.shape)))
    if bk != b or dk != d:
        raise Error(EINVAL, "q has shape %s and k %s: batch and d must be the same (layout: q [batch][heads][n][d], "
                    "k [batch][heads_kv][n_kv][d], v [batch][heads_kv][n_kv][d_v])" % (tuple(q.shape),
                                                                                      tuple(k.shape)))
    if algo not in _ALGOS:
        raise Error(EINVAL, "algo=%r: expected one of %s" % (algo, ", ".join(_ALGOS)))
    if scale is not None:
        scale = float(scale)
        if scale == 0.0 or not math.isfinite(scale):
            raise Error(EINVAL, "scale=%r: must be finite and non-zero (None: 1/sqrt(d))" % scale)
    # an empty axis is passed on as 0 rows: libattn's own check refuses it with its message
    return _Problem(batch=b, heads=h, n=n, d=d, n_kv=nk, heads_kv=hk, causal=1 if causal else 0,
                    scale=scale or 0.0, tolerance=float(tolerance), algo=_ALGOS[algo], d_v=dv)


def _out_shape(q, v):
    """The result's shape: q's with v's last dimension (d_v)."""
    return tuple(q.shape[:-1]) + (v.shape[-1],)


_NP_DTYPES = {np.dtype(np.float32): _F32, np.dtype(np.float16): _F16}


def _numpy_args(q, k, v):
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, np.ndarray):
            raise TypeError("%s is a %s: expected numpy arrays or torch tensors, all three of one kind"
                            % (name, type(x).__name__))
        if x.dtype not in _NP_DTYPES:
            raise TypeError("%s has dtype %s: libattn takes float32 or float16 arrays; convert with "
                            "%s.astype(numpy.float32)" % (name, x.dtype, name))
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError("q, k and v have dtypes %s, %s and %s: they must be the same" % (q.dtype, k.dtype, v.dtype))
    q, k, v = (np.ascontiguousarray(x) for x in (q, k, v))
    return q, k, v, np.empty(_out_shape(q, v), dtype=q.dtype), _TARGET_CPU, _NP_DTYPES[q.dtype]


def _torch_args(q, k, v):
    import torch
    dtypes = {torch.float32: _F32, torch.float16: _F16, torch.bfloat16: _BF16}
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError("%s is a %s: expected numpy arrays or torch tensors, all three of one kind"
                            % (name, type(x).__name__))
        if x.dtype not in dtypes:
            raise TypeError("%s has dtype %s: libattn takes float32, float16 or bfloat16" % (name, x.dtype))
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError("q, k and v have dtypes %s, %s and %s: they must be the same" % (q.dtype, k.dtype, v.dtype))
    if not q.device == k.device == v.device:
        raise Error(EINVAL, "q, k and v are on %s, %s and %s: they must be on one device" % (q.device, k.device,
                                                                                          v.device))
    if q.device.type == "cpu":
        target = _TARGET_CPU
    elif q.device.type == "cuda":
        target = _TARGET_CUDA
        ordinal = int(os.environ.get("ATTN_CUDA_DEVICE") or 0)
        if (q.device.index or 0) != ordinal:
            raise Error(EINVAL, "the tensors are on %s, libattn runs on cuda:%d ($ATTN_CUDA_DEVICE)"
                        % (q.device, ordinal))
    else:
        raise Error(EUNSUPPORTED, "tensors on %s: libattn runs on the CPU and on CUDA" % q.device)
    q, k, v = (x.detach().contiguous() for x in (q, k, v))
    if target == _TARGET_CUDA:
        # libattn wants 16-byte aligned device pointers; a view into a larger tensor may not be
        q, k, v = (x if x.data_ptr() % 16 == 0 else x.clone() for x in (q, k, v))
        torch.cuda.current_stream(q.device).synchronize()  # libattn's kernels run on the default stream
    return q, k, v, torch.empty(_out_shape(q, v), dtype=q.dtype, device=q.device), target, dtypes[q.dtype]


def _prepare(q, k, v, causal, scale, algo, tolerance):
    """(arrays, target, problem): arrays are q, k, v (copied where their layout was not attn.h's) and the output;
    the caller holds them while libattn reads their pointers."""
    torch_in = _is_torch(q)
    q, k, v, o, target, dtype = (_torch_args if torch_in else _numpy_args)(q, k, v)
    p = _problem(q, k, v, causal, scale, algo, tolerance)
    p.dtype = dtype
    return (q, k, v, o), target, p


def _ptr(x):
    return x.data_ptr() if _is_torch(x) else x.ctypes.data


def attention(q, k, v, causal=False, scale=None, db=None, *, algo="auto", tolerance=0.0):
    """softmax(scale * q k^T) v for NumPy arrays or PyTorch tensors (layouts and errors: the module's docstring).

    causal: key j is visible to query i iff j <= i + n_kv - n. scale: None for 1/sqrt(d). db: the tuning database
    (None: attn_open's default, $ATTN_DB or the cache directory's; without a database the default kernels serve). algo:
    "auto", "flash", "smallcache" or "lowrank" (approximate: it needs tolerance > 0). Returns a new array or tensor
    shaped like q with v's last dimension (d_v), of the inputs' dtype."""
    arrays, target, p = _prepare(q, k, v, causal, scale, algo, tolerance)
    with _lock:
        rt = _runtime(db, target)
        rt.execute(rt.plan(p), *(_ptr(x) for x in arrays))
    return arrays[3]


def describe(q, k, v, causal=False, scale=None, db=None, *, algo="auto", tolerance=0.0):
    """The plan attention() runs for the same arguments, as attn_plan_describe says it:
    "flash d=64 Br=64 Bc=128 cpu f32 (tuned)" (a configuration from the database) or "... (default)"."""
    _, target, p = _prepare(q, k, v, causal, scale, algo, tolerance)
    with _lock:
        rt = _runtime(db, target)
        return rt.lib.attn_plan_describe(rt.plan(p)).decode()
