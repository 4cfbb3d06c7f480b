"""attntune: attention through libattn, the attntune runtime. O = softmax(scale * Q K^T) V with the tuned kernel
from the database (`attntune tune`), else a default one, checked against fp64 when tuned.

    import numpy as np, attntune
    o = attntune.attention(q, k, v, causal=True)
    p = attntune.plan(q, k, v, causal=True)      # the same, created once and run many times
    o = p.run(q, k, v)                            # inputs of the shapes, dtype and device the plan was made for

The layouts are attn.h's: q [batch][heads][n][d], k [batch][heads_kv][n_kv][d], v [batch][heads_kv][n_kv][d_v] and
the result [batch][heads][n][d_v], C-contiguous (other strides are copied); d_v, v's last dimension, may differ from d
(each in 1..576 on the CPU). A 2-D array (n, d) is batch 1, heads 1; a 3-D array (heads, n, d) is batch 1. heads_kv
must divide heads (grouped-query attention); n_kv may differ from n (causal is then bottom-right aligned: query i
sees the keys j <= i + n_kv - n). NumPy arrays (float32, float16) and PyTorch CPU tensors (float32, float16,
bfloat16) run on the CPU; PyTorch CUDA tensors run on the GPU by device pointer (float16, bfloat16, float32) when
libattn's CUDA target opens, stream-ordered on torch's current stream like any torch operation (no host
synchronisation; with a libattn older than attn_execute_async the stream is synchronised and the call waits). The
result has the inputs' dtype. Score modifiers, attn.h's (0 or None: off): window=, softcap=, alibi_slopes= (one slope
per query head) on attention(), plan() and describe(); on tensors that require grad, where libattn's backward takes
them (else EUNSUPPORTED, before the forward runs).
Serving layouts, forward only: attention() and describe() take cu_seqlens_q=/cu_seqlens_kv= (a packed
variable-length batch, attn_execute_varlen) or block_table=/seq_lens_kv=/page_size= (a paged KV cache,
attn_execute_paged); attention()'s docstring gives their shapes. CUDA tensors run them stream-ordered on torch's
current stream (attn_execute_varlen_async/paged_async; with a libattn older than those the stream is synchronised
and the call waits).

Training: attention() on torch tensors is differentiable (a torch.autograd.Function) when grad mode is on and q, k or
v requires grad: the forward runs attn_execute_lse and keeps each row's log-sum-exp (fp32), the backward runs
attn_execute_backward, which recomputes the softmax from it (FlashAttention-2's backward, no n x n matrix kept), in
the inputs' dtype with fp32 accumulation. Every shape the forward takes (causal, n_kv != n, grouped-query heads,
d_v != d); non-contiguous inputs are copied and their gradients come back in the inputs' layout (a transposed view's
gradient is transposed alike). No double backward. algo='lowrank' trains where a lowrank kernel serves the forward
(libattn's gradient of the approximation, on the CPU; elsewhere EUNSUPPORTED before the forward runs), else as
flash. CUDA tensors take the same calls after torch's current stream is synchronised (both return when their results are written); where libattn's
CUDA target lacks them it raises its EUNSUPPORTED (under torch.no_grad() CUDA tensors run stream-ordered as before).
On NumPy arrays (or tensors, read detached): o, lse = attention(q, k, v, return_lse=True), then
dq, dk, dv = attention_backward(q, k, v, o, lse, dout, causal=...). Plan objects (attntune.plan) run the forward
only and read tensors detached. attntune.hf registers attention() as a Hugging Face transformers attention
implementation (its docstring says what it takes).

Empty dimensions: a result with no elements (batch, heads, n or d_v of 0) is returned empty, of its shape and
dtype, without running a kernel; d = 0 (no score to scale by 1/sqrt(d)), n_kv = 0 under a non-empty result (a
softmax over no keys) and heads_kv = 0 with heads > 0 raise attntune.Error with EINVAL. No 0 ever reaches libattn,
whose attn_problem reads 0 as "the default".

Errors: everything libattn refuses raises attntune.Error, whose .code is the C API's code (EINVAL, EUNSUPPORTED,
...) and whose message is attn_last_error's; shapes that do not fit together and argument values out of range
(scale <= 0, causal=2, ...) raise it too, with EINVAL. Arguments of the wrong type raise TypeError: inputs other than
NumPy arrays or torch tensors or of another dtype, causal other than a bool or the int 0 or 1, scale other than a
real number or None, db other than a str, bytes or os.PathLike path or None. A db path with an embedded NUL raises
ValueError, as open() does.

libattn is the one bundled into the package when it was installed (see python/attntune_build.py), or the file
$ATTNTUNE_LIB names. A runtime per (database, target) is kept for the life of the process, and attention() keeps a
plan per problem (the 64 most recent), so a database tuned afterwards is seen by a new process.
"""
import ctypes
import math
import numbers
import os
import shutil
import threading
from collections import OrderedDict

import numpy as np

__version__ = "0.1.0"
__all__ = ["attention", "attention_backward", "describe", "plan", "Plan", "Error", "library_path", "cli_path",
           "__version__"]

# attn.h's codes
OK, EINVAL, ENOMEM, ENODEV, ECOMPILE, EDB, ERUNTIME, EUNSUPPORTED = range(8)
_CODE_NAMES = {OK: "OK", EINVAL: "EINVAL", ENOMEM: "ENOMEM", ENODEV: "ENODEV", ECOMPILE: "ECOMPILE", EDB: "EDB",
               ERUNTIME: "ERUNTIME", EUNSUPPORTED: "EUNSUPPORTED"}
_TARGET_CPU, _TARGET_CUDA = 1, 2
_F32, _F16, _BF16 = 0, 1, 2
_ALGOS = {"auto": 0, "flash": 1, "smallcache": 2, "lowrank": 3}
_INT_MAX = 2**31 - 1
_HERE = os.path.dirname(os.path.abspath(__file__))
_EMPTY_DESCRIBE = "empty result (batch, heads, n or d_v is 0): no kernel runs"


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
                ("algo", ctypes.c_int), ("d_v", ctypes.c_int),
                # score modifiers (0 / NULL: off); alibi_slopes points into _Args.slopes, which outlives the call
                ("window", ctypes.c_int), ("softcap", ctypes.c_float), ("alibi_slopes", ctypes.c_void_p),
                # serving layouts (0: dense)
                ("page_size", ctypes.c_int), ("varlen", ctypes.c_int),
                # the backward may sum dQ by atomics (tuned dq=atomic rows; CUDA)
                ("nondeterministic", ctypes.c_int)]


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


_lock = threading.Lock()   # guards the library, the runtimes, plan creation and attention()'s plan cache (an
_lib = None                # evicted plan must not be destroyed while it executes)
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
    if hasattr(lib, "attn_execute_async"):  # a libattn older than it runs CUDA plans synchronously (_run)
        lib.attn_execute_async.argtypes = [vp, vp, vp, vp, vp, vp]
    if hasattr(lib, "attn_execute_backward"):  # training: a libattn older than it refuses (_training)
        lib.attn_execute_lse.argtypes = [vp, vp, vp, vp, vp, vp]
        lib.attn_plan_create_backward.argtypes = [vp, ctypes.POINTER(_Problem), ctypes.POINTER(vp)]
        lib.attn_execute_backward.argtypes = [vp] + [vp] * 9
    if hasattr(lib, "attn_execute_varlen"):  # serving layouts: a libattn older than them refuses (_layout_call)
        lib.attn_execute_varlen.argtypes = [vp] * 7
    if hasattr(lib, "attn_execute_paged"):
        lib.attn_execute_paged.argtypes = [vp, vp, vp, vp, ctypes.c_int, ctypes.c_int, vp, ctypes.c_int, vp, vp]
    if hasattr(lib, "attn_execute_varlen_async"):  # their stream-ordered forms (_layout_attention)
        lib.attn_execute_varlen_async.argtypes = [vp] * 8
    if hasattr(lib, "attn_execute_paged_async"):
        lib.attn_execute_paged_async.argtypes = [vp, vp, vp, vp, vp, ctypes.c_int, ctypes.c_int, vp, ctypes.c_int, vp,
                                                 vp]
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


def _training(lib):
    if not hasattr(lib, "attn_execute_backward"):
        raise Error(EUNSUPPORTED, "this libattn (%s) has no backward (attn_execute_lse, attn_execute_backward): "
                    "gradients need a newer one" % library_path())


class _Runtime:
    def __init__(self, lib, db, target):
        self.lib = lib
        self.target = target
        self.rt = ctypes.c_void_p()
        rc = lib.attn_open(db, target, ctypes.byref(self.rt))
        if rc != OK:
            detail = _last_error(lib, None)
            if target == _TARGET_CUDA:
                detail = "CUDA tensors need libattn's CUDA target, which did not open: " + detail
            raise Error(rc, detail)
        self.plans = OrderedDict()   # attention()'s plans, most recently used last

    def create(self, p, backward=False):
        """A new plan for problem p, its gradients' when backward (the caller owns it); the lock is held."""
        plan = ctypes.c_void_p()
        if backward:
            _training(self.lib)
            rc = self.lib.attn_plan_create_backward(self.rt, ctypes.byref(p), ctypes.byref(plan))
        else:
            rc = self.lib.attn_plan_create(self.rt, ctypes.byref(p), ctypes.byref(plan))
        if rc != OK:
            raise Error(rc, _last_error(self.lib, self.rt))
        return plan

    def cached(self, p, backward=False):
        """attention()'s plan for problem p (the backward's when backward), created when it is not cached; the lock
        is held."""
        # the slopes by value, not by address: another array of equal slopes is the same problem
        key = (backward,) + tuple(getattr(p, f) for f, _ in _Problem._fields_ if f != "alibi_slopes") + (
            ctypes.string_at(p.alibi_slopes, 4 * p.heads) if p.alibi_slopes else None,)
        plan = self.plans.get(key)
        if plan is not None:
            self.plans.move_to_end(key)
            return plan
        plan = self.plans[key] = self.create(p, backward)
        if len(self.plans) > _MAX_PLANS:
            _destroy(self.lib, self.target, self.plans.popitem(last=False)[1])
        return plan


def _destroy(lib, target, plan):
    if target == _TARGET_CUDA:
        import torch
        torch.cuda.synchronize()   # launches queued on streams may still read the plan's kernel
    lib.attn_plan_destroy(plan)


def _runtime(db, target):
    # db None means $ATTN_DB (else the default database) as attn_open reads it now
    key = (db, os.environ.get("ATTN_DB"), target)
    rt = _runtimes.get(key)
    if rt is None:
        rt = _runtimes[key] = _Runtime(_load(), db, target)
    return rt


# --- arguments -------------------------------------------------------------------------------------------------

def _is_torch(x):
    m = type(x).__module__
    return (m == "torch" or m.startswith("torch.")) and hasattr(x, "data_ptr")


def _db_path(db):
    """db as the bytes attn_open takes, or None."""
    if db is None:
        return None
    if not isinstance(db, (str, bytes, os.PathLike)):
        raise TypeError("db is of type %s: expected a path (str, bytes or os.PathLike) or None" % type(db).__name__)
    path = os.fsencode(db)
    if b"\0" in path:
        raise ValueError("db %r: embedded null byte" % (db,))
    return path


def _causal(causal):
    if isinstance(causal, (bool, np.bool_)):
        return int(bool(causal))
    if isinstance(causal, numbers.Integral):
        if causal in (0, 1):
            return int(causal)
        raise Error(EINVAL, "causal=%r: expected True, False, 0 or 1" % (causal,))
    raise TypeError("causal is of type %s: expected a bool (or the int 0 or 1)" % type(causal).__name__)


def _scale(scale):
    """scale as a float attn.h takes: None is 0.0 there (1/sqrt(d)); anything else a float32 that is > 0."""
    if scale is None:
        return 0.0
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, numbers.Real):
        raise TypeError("scale is of type %s: expected a real number, or None for 1/sqrt(d)" % type(scale).__name__)
    s = float(scale)
    f32 = ctypes.c_float(s).value   # what libattn gets: a value that rounds to 0 would mean 1/sqrt(d)
    if not (math.isfinite(s) and s > 0 and math.isfinite(f32) and f32 > 0):
        raise Error(EINVAL, "scale=%r: must be finite and > 0 as a float32, or None for 1/sqrt(d)" % (scale,))
    return s


def _tolerance(tolerance):
    if isinstance(tolerance, (bool, np.bool_)) or not isinstance(tolerance, numbers.Real):
        raise TypeError("tolerance is of type %s: expected a real number" % type(tolerance).__name__)
    t = float(tolerance)
    if not (math.isfinite(t) and t >= 0):
        raise Error(EINVAL, "tolerance=%r: must be finite and >= 0 (0: exact algorithms only)" % (tolerance,))
    return t


def _algo(algo):
    if not isinstance(algo, str):
        raise TypeError("algo is of type %s: expected one of %s" % (type(algo).__name__, ", ".join(_ALGOS)))
    if algo not in _ALGOS:
        raise Error(EINVAL, "algo=%r: expected one of %s" % (algo, ", ".join(_ALGOS)))
    return _ALGOS[algo]


def _window(window):
    if isinstance(window, (bool, np.bool_)) or not isinstance(window, numbers.Integral):
        raise TypeError("window is of type %s: expected an int (0: no window)" % type(window).__name__)
    if not 0 <= window <= _INT_MAX:
        raise Error(EINVAL, "window=%d: must be >= 0 (0: no window) and at most %d" % (window, _INT_MAX))
    return int(window)


def _softcap(softcap):
    if isinstance(softcap, (bool, np.bool_)) or not isinstance(softcap, numbers.Real):
        raise TypeError("softcap is of type %s: expected a real number (0: no soft-capping)" % type(softcap).__name__)
    c = float(softcap)
    f32 = ctypes.c_float(c).value   # what libattn gets: a value that rounds to 0 would mean no soft-capping
    if not (math.isfinite(c) and c >= 0 and math.isfinite(f32) and (f32 > 0) == (c > 0)):
        raise Error(EINVAL, "softcap=%r: must be finite and >= 0 as a float32 (0: no soft-capping)" % (softcap,))
    return c


def _slopes(slopes, heads):
    """alibi_slopes as a C-contiguous float32 array of `heads` finite values, or None."""
    if slopes is None:
        return None
    if _is_torch(slopes):
        import torch
        if slopes.is_complex() or slopes.dtype == torch.bool:
            raise TypeError("alibi_slopes has dtype %s: expected real numbers" % slopes.dtype)
        a = slopes.detach().to("cpu", torch.float32).numpy()
    else:
        if isinstance(slopes, (str, bytes, numbers.Number)):
            raise TypeError("alibi_slopes is of type %s: expected a sequence, array or tensor of one slope per query "
                            "head, or None" % type(slopes).__name__)
        try:
            a = np.asarray(slopes)
        except (TypeError, ValueError) as e:
            raise TypeError("alibi_slopes: not an array of numbers (%s)" % e) from None
        if a.dtype.kind not in "fiu":
            raise TypeError("alibi_slopes has dtype %s: expected real numbers (float32 or convertible)" % a.dtype)
    if a.ndim != 1:
        raise Error(EINVAL, "alibi_slopes has shape %s: expected one dimension, one slope per query head" % (a.shape,))
    if a.shape[0] != heads:
        raise Error(EINVAL, "alibi_slopes has %d values: expected one per query head (heads = %d)"
                    % (a.shape[0], heads))
    with np.errstate(over="ignore"):   # a slope past float32's range becomes inf, refused below
        a = np.ascontiguousarray(a, dtype=np.float32)
    bad = np.flatnonzero(~np.isfinite(a))
    if bad.size:
        raise Error(EINVAL, "alibi_slopes[%d] is %r as a float32: every slope must be finite" % (bad[0],
                                                                                               float(a[bad[0]])))
    return a


def _dims(name, shape):
    """(batch, heads, rows, d) of a 2-, 3- or 4-D shape."""
    if len(shape) not in (2, 3, 4):
        raise Error(EINVAL, "%s has %d dimensions: expected (n, d), (heads, n, d) or (batch, heads, n, d)"
                    % (name, len(shape)))
    dims = (1,) * (4 - len(shape)) + tuple(int(s) for s in shape)
    if any(s > _INT_MAX for s in dims):
        raise Error(EINVAL, "%s has shape %s: each dimension at most %d" % (name, tuple(shape), _INT_MAX))
    return dims


def _shape_problem(qs, ks, vs):
    """(batch, heads, n, d, n_kv, heads_kv, d_v) of shapes that fit together, and whether the result is empty."""
    if len(qs) != len(ks) or len(ks) != len(vs):
        raise Error(EINVAL, "q, k and v have %d, %d and %d dimensions: they must have the same number"
                    % (len(qs), len(ks), len(vs)))
    b, h, n, d = _dims("q", qs)
    bk, hk, nk, dk = _dims("k", ks)
    dv = _dims("v", vs)[3]
    if tuple(ks[:-1]) != tuple(vs[:-1]):
        raise Error(EINVAL, "k has shape %s and v %s: they must be the same but for the last dimension (d_v)"
                    % (tuple(ks), tuple(vs)))
    if bk != b or dk != d:
        raise Error(EINVAL, "q has shape %s and k %s: batch and d must be the same (layout: q [batch][heads][n][d], "
                    "k [batch][heads_kv][n_kv][d], v [batch][heads_kv][n_kv][d_v])" % (tuple(qs), tuple(ks)))
    if hk == 0 and h > 0:
        raise Error(EINVAL, "k and v have no heads (heads_kv = 0) for q's %d: heads_kv must divide heads" % h)
    if hk > 0 and h % hk:
        raise Error(EINVAL, "heads_kv = %d does not divide heads = %d (grouped-query attention)" % (hk, h))
    if d == 0:
        raise Error(EINVAL, "q and k have d = 0 (their last dimension): no score, and no 1/sqrt(d) to scale it by")
    empty = b == 0 or h == 0 or n == 0 or dv == 0
    if nk == 0 and not empty:
        raise Error(EINVAL, "k and v have no keys (n_kv = 0) for q's %d rows: a softmax over no keys is undefined"
                    % n)
    return (b, h, n, d, nk, hk, dv), empty


_NP_DTYPES = {np.dtype(np.float32): _F32, np.dtype(np.float16): _F16}


def _inputs(q, k, v):
    """(kind, dtype code, target, device) of three inputs of one kind, dtype and device."""
    if _is_torch(q):
        import torch
        dtypes = {torch.float32: _F32, torch.float16: _F16, torch.bfloat16: _BF16}
        for name, x in (("q", q), ("k", k), ("v", v)):
            if not isinstance(x, torch.Tensor):
                raise TypeError("%s is a %s: expected numpy arrays or torch tensors, all three of one kind"
                                % (name, type(x).__name__))
            if x.dtype not in dtypes:
                raise TypeError("%s has dtype %s: libattn takes float32, float16 or bfloat16" % (name, x.dtype))
        if not q.dtype == k.dtype == v.dtype:
            raise TypeError("q, k and v have dtypes %s, %s and %s: they must be the same" % (q.dtype, k.dtype,
                                                                                          v.dtype))
        if not q.device == k.device == v.device:
            raise Error(EINVAL, "q, k and v are on %s, %s and %s: they must be on one device" % (q.device, k.device,
                                                                                              v.device))
        if q.device.type == "cpu":
            return "torch", dtypes[q.dtype], _TARGET_CPU, q.device
        if q.device.type == "cuda":
            ordinal = int(os.environ.get("ATTN_CUDA_DEVICE") or 0)
            if (q.device.index or 0) != ordinal:
                raise Error(EINVAL, "the tensors are on %s, libattn runs on cuda:%d ($ATTN_CUDA_DEVICE)"
                            % (q.device, ordinal))
            return "torch", dtypes[q.dtype], _TARGET_CUDA, q.device
        raise Error(EUNSUPPORTED, "tensors on %s: libattn runs on the CPU and on CUDA" % q.device)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, np.ndarray):
            raise TypeError("%s is a %s: expected numpy arrays or torch tensors, all three of one kind"
                            % (name, type(x).__name__))
        if x.dtype not in _NP_DTYPES:
            raise TypeError("%s has dtype %s: libattn takes float32 or float16 arrays; convert with "
                            "%s.astype(numpy.float32)" % (name, x.dtype, name))
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError("q, k and v have dtypes %s, %s and %s: they must be the same" % (q.dtype, k.dtype, v.dtype))
    return "numpy", _NP_DTYPES[q.dtype], _TARGET_CPU, None


def _contiguous(kind, target, xs):
    """xs in attn.h's layout: C-contiguous (copied where they are not), device pointers 16-byte aligned."""
    if kind == "numpy":
        return [np.ascontiguousarray(x) for x in xs]
    xs = [x if x.is_contiguous() else x.detach().contiguous() for x in xs]   # data_ptr() needs no detach
    if target == _TARGET_CUDA:  # libattn wants 16-byte aligned device pointers; a view into a larger tensor may not be
        xs = [x if x.data_ptr() % 16 == 0 else x.clone() for x in xs]
    return xs


def _ptr(x):
    return x.data_ptr() if _is_torch(x) else x.ctypes.data


def _nbytes(x):
    return x.numel() * x.element_size() if _is_torch(x) else x.nbytes


def _new_out(kind, shape, like):
    if kind == "numpy":
        return np.empty(shape, dtype=like.dtype)
    import torch
    return torch.empty(shape, dtype=like.dtype, device=like.device)


class _Args:
    """Everything about a call but the data: the problem (None when the result is empty), its target and the
    inputs' kind, dtype and device."""

    def __init__(self, q, k, v, causal, scale, algo, tolerance, window=0, softcap=0.0, alibi_slopes=None):
        self.kind, dtype, self.target, self.device = _inputs(q, k, v)
        self.dtype = q.dtype
        self.shapes = tuple(tuple(int(s) for s in x.shape) for x in (q, k, v))
        self.out_shape = self.shapes[0][:-1] + self.shapes[2][-1:]
        (b, h, n, d, nk, hk, dv), empty = _shape_problem(*self.shapes)
        causal, scale, tolerance, algo = _causal(causal), _scale(scale), _tolerance(tolerance), _algo(algo)
        window, softcap = _window(window), _softcap(softcap)
        self.slopes = _slopes(alibi_slopes, h)   # kept while the problem points at it (libattn copies it)
        self.mods = bool(window or softcap or self.slopes is not None)
        # every size is >= 1 here: attn.h reads a 0 in n_kv, heads_kv, d_v or scale as "the default"
        self.problem = None if empty else _Problem(batch=b, heads=h, n=n, d=d, n_kv=nk, heads_kv=hk, dtype=dtype,
                                                   causal=causal, scale=scale, tolerance=tolerance, algo=algo,
                                                   d_v=dv, window=window, softcap=softcap,
                                                   alibi_slopes=None if self.slopes is None else
                                                   self.slopes.ctypes.data)


def _int_array(name, x, ndim):
    """x (a sequence, NumPy array or torch tensor of integers) as a C-contiguous int32 NumPy array of ndim
    dimensions, on the host (libattn reads lengths and page indices there)."""
    if _is_torch(x):
        import torch
        if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
            raise TypeError("%s has dtype %s: expected integers" % (name, x.dtype))
        a = x.detach().cpu().numpy()
    else:
        if isinstance(x, (str, bytes, numbers.Number)) or x is None:
            raise TypeError("%s is of type %s: expected a sequence, array or tensor of integers"
                            % (name, type(x).__name__))
        try:
            a = np.asarray(x)
        except (TypeError, ValueError) as e:
            raise TypeError("%s: not an array of integers (%s)" % (name, e)) from None
        if a.size == 0 and a.dtype == np.float64:   # [] or [[]]: no values, of no particular type
            a = a.astype(np.int64)
        if a.dtype.kind not in "iu":
            raise TypeError("%s has dtype %s: expected integers" % (name, a.dtype))
    if a.ndim != ndim:
        raise Error(EINVAL, "%s has shape %s: expected %d dimension%s" % (name, a.shape, ndim, "s" * (ndim > 1)))
    if a.size and (int(a.min()) < -2**31 or int(a.max()) > _INT_MAX):
        raise Error(EINVAL, "%s has values outside int32's range" % name)
    return np.ascontiguousarray(a, dtype=np.int32)


def _cu_seqlens(name, cu, total):
    """A cumulative-lengths array: from 0, non-decreasing, ending at total (the packed array's rows)."""
    a = _int_array(name, cu, 1)
    if a.shape[0] < 2:
        raise Error(EINVAL, "%s has %d entries: expected batch + 1 >= 2 (cumulative lengths from 0)"
                    % (name, a.shape[0]))
    if a[0] != 0:
        raise Error(EINVAL, "%s[0] is %d: cumulative lengths start at 0" % (name, a[0]))
    drop = np.flatnonzero(np.diff(a) < 0)
    if drop.size:
        i = int(drop[0]) + 1
        raise Error(EINVAL, "%s decreases at %d (%d then %d): lengths must be >= 0" % (name, i, a[i - 1], a[i]))
    if a[-1] != total:
        raise Error(EINVAL, "%s ends at %d, but the packed array has %d rows" % (name, a[-1], total))
    return a


class _Layout:
    """_Args of a serving layout: varlen (cu_seqlens_q/kv: q [total_q][heads][d], k [total_kv][heads_kv][d],
    v [total_kv][heads_kv][d_v], the result [total_q][heads][d_v]; batch the sequences, n and n_kv the longest) or
    paged (block_table, seq_lens_kv, page_size: q [batch][heads][n][d], k_pages [num_pages][page_size][heads_kv][d],
    v_pages [..][d_v], block_table [batch][max_pages], the result [batch][heads][n][d_v]; n_kv = max_pages *
    page_size, what the table can address). The problem carries varlen = 1 or page_size, as the tuner's rows."""

    def __init__(self, q, k, v, causal, scale, algo, tolerance, window, softcap, alibi_slopes, cu_seqlens_q,
                 cu_seqlens_kv, block_table, seq_lens_kv, page_size):
        self.kind, dtype, self.target, self.device = _inputs(q, k, v)
        self.dtype = q.dtype
        self.varlen = cu_seqlens_q is not None or cu_seqlens_kv is not None
        paged = block_table is not None or seq_lens_kv is not None or page_size is not None
        if self.varlen and paged:
            raise Error(EINVAL, "cu_seqlens_q/cu_seqlens_kv (varlen) and block_table/seq_lens_kv/page_size (paged) "
                        "are two layouts: give one")
        self.shapes = tuple(tuple(int(s) for s in x.shape) for x in (q, k, v))
        qs, ks, vs = self.shapes
        if self.varlen:
            if cu_seqlens_q is None or cu_seqlens_kv is None:
                raise Error(EINVAL, "varlen needs both cu_seqlens_q and cu_seqlens_kv")
            if not len(qs) == len(ks) == len(vs) == 3:
                raise Error(EINVAL, "varlen: q, k and v have shapes %s, %s and %s: expected (total_q, heads, d), "
                            "(total_kv, heads_kv, d) and (total_kv, heads_kv, d_v)" % (qs, ks, vs))
            (tq, h, d), (tk, hk, dk), dv = qs, ks, vs[2]
            self.cu_q = _cu_seqlens("cu_seqlens_q", cu_seqlens_q, tq)
            self.cu_kv = _cu_seqlens("cu_seqlens_kv", cu_seqlens_kv, tk)
            if self.cu_q.shape[0] != self.cu_kv.shape[0]:
                raise Error(EINVAL, "cu_seqlens_q has %d entries and cu_seqlens_kv %d: one sequence each, batch + 1 "
                            "entries both" % (self.cu_q.shape[0], self.cu_kv.shape[0]))
            b = self.cu_q.shape[0] - 1
            n, nk = int(np.diff(self.cu_q).max()), int(np.diff(self.cu_kv).max())
            self.out_shape = (tq, h, dv)
        else:
            if block_table is None or seq_lens_kv is None:
                raise Error(EINVAL, "paged needs block_table and seq_lens_kv (page_size is k_pages' second dimension)")
            if not len(qs) == len(ks) == len(vs) == 4:
                raise Error(EINVAL, "paged: q, k_pages and v_pages have shapes %s, %s and %s: expected (batch, heads, "
                            "n, d), (num_pages, page_size, heads_kv, d) and (num_pages, page_size, heads_kv, d_v)"
                            % (qs, ks, vs))
            (b, h, n, d), (self.num_pages, ps, hk, dk), dv = qs, ks, vs[3]
            if page_size is not None:
                if isinstance(page_size, (bool, np.bool_)) or not isinstance(page_size, numbers.Integral):
                    raise TypeError("page_size is of type %s: expected an int" % type(page_size).__name__)
                if page_size != ps:
                    raise Error(EINVAL, "page_size=%d, but k_pages has pages of %d (shape %s)" % (page_size, ps, ks))
            self.page_size = ps
            self.table = _int_array("block_table", block_table, 2)
            self.lens = _int_array("seq_lens_kv", seq_lens_kv, 1)
            if self.table.shape[0] != b or self.lens.shape[0] != b:
                raise Error(EINVAL, "block_table has %d rows and seq_lens_kv %d entries: one per sequence of q's "
                            "batch %d" % (self.table.shape[0], self.lens.shape[0], b))
            self.max_pages = self.table.shape[1]
            if self.num_pages == 0 or ps == 0 or self.max_pages == 0:
                raise Error(EINVAL, "paged: no pages (num_pages %d, page_size %d, max_pages %d)"
                            % (self.num_pages, ps, self.max_pages))
            nk = self.max_pages * ps
            if nk > _INT_MAX:
                raise Error(EINVAL, "block_table addresses %d keys per sequence: at most %d" % (nk, _INT_MAX))
            self.out_shape = (b, h, n, dv)
        if tuple(ks[:-1]) != tuple(vs[:-1]):
            raise Error(EINVAL, "k has shape %s and v %s: they must be the same but for the last dimension (d_v)"
                        % (ks, vs))
        if dk != d:
            raise Error(EINVAL, "q has d = %d and k %d: they must be the same" % (d, dk))
        if hk == 0 or h % hk:
            raise Error(EINVAL, "heads_kv = %d does not divide heads = %d (grouped-query attention)" % (hk, h))
        if d == 0:
            raise Error(EINVAL, "q and k have d = 0 (their last dimension): no score, and no 1/sqrt(d) to scale it by")
        causal, scale, tolerance, algo = _causal(causal), _scale(scale), _tolerance(tolerance), _algo(algo)
        window, softcap = _window(window), _softcap(softcap)
        self.slopes = _slopes(alibi_slopes, h)
        self.mods = bool(window or softcap or self.slopes is not None)
        # an empty result runs nothing; sequences that all have no key give zeros without a kernel
        self.zeros = nk == 0
        empty = math.prod(self.out_shape) == 0 or n == 0
        self.problem = None if empty or self.zeros else _Problem(
            batch=b, heads=h, n=n, d=d, n_kv=nk, heads_kv=hk, dtype=dtype, causal=causal, scale=scale,
            tolerance=tolerance, algo=algo, d_v=dv, window=window, softcap=softcap,
            alibi_slopes=None if self.slopes is None else self.slopes.ctypes.data,
            page_size=0 if self.varlen else self.page_size, varlen=int(self.varlen))


def _layout_call(lib, rt, plan, a, xs, o, stream=None):
    """attn_execute_varlen or attn_execute_paged of plan for _Layout a on xs (q, k, v) into o; with a torch stream,
    their _async forms queued on it (libattn reads the lengths and the table before it returns)."""
    fn = "attn_execute_varlen" if a.varlen else "attn_execute_paged"
    if not hasattr(lib, fn):
        raise Error(EUNSUPPORTED, "this libattn (%s) has no %s: the layout needs a newer one" % (library_path(), fn))
    q, k, v = (_ptr(x) for x in xs)
    if a.varlen and stream is not None:
        rc = lib.attn_execute_varlen_async(plan, stream.cuda_stream, a.cu_q.ctypes.data, a.cu_kv.ctypes.data, q, k,
                                           v, _ptr(o))
    elif a.varlen:
        rc = lib.attn_execute_varlen(plan, a.cu_q.ctypes.data, a.cu_kv.ctypes.data, q, k, v, _ptr(o))
    elif stream is not None:
        rc = lib.attn_execute_paged_async(plan, stream.cuda_stream, q, k, v, a.num_pages, a.page_size,
                                          a.table.ctypes.data, a.max_pages, a.lens.ctypes.data, _ptr(o))
    else:
        rc = lib.attn_execute_paged(plan, q, k, v, a.num_pages, a.page_size, a.table.ctypes.data, a.max_pages,
                                    a.lens.ctypes.data, _ptr(o))
    if rc != OK:
        raise Error(rc, _last_error(lib, rt))


def _layout_attention(a, dbp, q, k, v):
    if a.problem is None:
        return (_zeros if a.zeros else _new_out)(a.kind, a.out_shape, q)
    xs = _contiguous(a.kind, a.target, (q, k, v))
    o = _new_out(a.kind, a.out_shape, xs[0])
    stream = _cuda_stream(None, a.device) if a.target == _TARGET_CUDA else None
    with _lock:
        rt = _runtime(dbp, a.target)
        if stream is not None and not hasattr(rt.lib, "attn_execute_%s_async" % ("varlen" if a.varlen else "paged")):
            stream.synchronize()   # attn_execute_varlen/paged run on the default stream and return when done
            stream = None
        _layout_call(rt.lib, rt.rt, rt.cached(a.problem), a, xs, o, stream)
    return o


def _run(lib, rt, target, plan, xs, o, stream):
    """Executes plan on xs (q, k, v in attn.h's layout) into o. CUDA: on `stream` (a torch stream) without waiting
    when libattn has attn_execute_async, else after synchronising the stream, waiting for the result."""
    ptrs = [_ptr(x) for x in xs] + [_ptr(o)]
    if target != _TARGET_CUDA:
        rc = lib.attn_execute(plan, *ptrs)
    elif hasattr(lib, "attn_execute_async"):
        rc = lib.attn_execute_async(plan, stream.cuda_stream, *ptrs)
    else:
        stream.synchronize()   # attn_execute launches on the default stream and returns when o is written
        rc = lib.attn_execute(plan, *ptrs)
    if rc != OK:
        raise Error(rc, _last_error(lib, rt))


def _run_lse(lib, rt, target, plan, xs, o, lse, stream):
    """The forward of plan on xs into o, with each row's log-sum-exp into lse (fp32). CUDA: attn_execute_lse runs
    on the default stream and returns when done, so `stream` is synchronised first."""
    _training(lib)
    if target == _TARGET_CUDA:
        stream.synchronize()
    rc = lib.attn_execute_lse(plan, *[_ptr(x) for x in xs], _ptr(o), _ptr(lse))
    if rc != OK:
        raise Error(rc, _last_error(lib, rt))


def _run_backward(lib, rt, target, plan, xs, grads, stream):
    """attn_execute_backward of plan: xs are q, k, v, o, lse, dout and grads dq, dk, dv, all in attn.h's layout.
    CUDA: synchronised as _run_lse."""
    _training(lib)
    if target == _TARGET_CUDA:
        stream.synchronize()
    rc = lib.attn_execute_backward(plan, *[None if x is None else _ptr(x) for x in list(xs) + list(grads)])
    if rc != OK:
        raise Error(rc, _last_error(lib, rt))


def _cuda_stream(stream, device):
    import torch
    if stream is None:
        return torch.cuda.current_stream(device)
    if not isinstance(stream, torch.cuda.Stream):
        raise TypeError("stream is of type %s: expected a torch.cuda.Stream (torch.cuda.ExternalStream for a raw "
                        "handle) or None for the current stream" % type(stream).__name__)
    if stream.device != device:
        raise Error(EINVAL, "stream is on %s, the tensors on %s" % (stream.device, device))
    return stream


# --- the API ---------------------------------------------------------------------------------------------------

def attention(q, k, v, causal=False, scale=None, db=None, *, algo="auto", tolerance=0.0, return_lse=False, window=0,
              softcap=0.0, alibi_slopes=None, cu_seqlens_q=None, cu_seqlens_kv=None, block_table=None,
              seq_lens_kv=None, page_size=None):
    """softmax(scale * q k^T) v for NumPy arrays or PyTorch tensors (layouts, empty sizes and errors: the module's
    docstring).

    causal: a bool (or 0 or 1); key j is visible to query i iff j <= i + n_kv - n. scale: None for 1/sqrt(d), else a
    finite number > 0. db: the tuning database, a path (None: attn_open's default, $ATTN_DB or the cache directory's;
    without a database the default kernels serve). algo: "auto", "flash", "smallcache" or "lowrank" (approximate: it
    needs tolerance > 0). Returns a new array or tensor shaped like q with v's last dimension (d_v), of the inputs'
    dtype; with return_lse=True the pair (o, lse), lse each row's log-sum-exp of its scaled scores (float32, q's shape
    without its last dimension; -inf for a row that sees no key), what attention_backward takes.
    Differentiable on torch tensors: when grad mode is on and q, k or v requires grad, o's backward is libattn's
    (attn_execute_backward from the lse the forward keeps). The plan is cached per problem; attntune.plan() keeps
    one in hand instead.

    Score modifiers (attn.h's; 0 / None: off), with i' = i + n_kv - n: window w > 0 lets row i see key j only if
    i' - w < j <= i' (causal) or |i' - j| < w (not causal); softcap c > 0 makes each scaled score c*tanh(s/c);
    alibi_slopes (a sequence, array or tensor of one finite slope per query head) adds -slope_h*|i' - j| to it. A
    row that sees no key is 0. On tensors that require grad the backward has to take them (else EUNSUPPORTED).

    Serving layouts (forward only; CUDA tensors stream-ordered on torch's current stream), the plan made for them and
    served their tuned rows (attntune tune --varlen, --page-size):
    - varlen, FlashAttention's packed batch: cu_seqlens_q and cu_seqlens_kv (batch + 1 cumulative lengths from 0,
      sequences of int, arrays or tensors), q (total_q, heads, d), k (total_kv, heads_kv, d), v (total_kv, heads_kv,
      d_v); the result (total_q, heads, d_v). Each sequence is its own problem (causal bottom-right within it); a
      sequence without keys gives zero rows. attn_execute_varlen.
    - paged, vLLM's KV cache: block_table (batch, max_pages) of page indices and seq_lens_kv (batch,) the keys of
      each sequence, q (batch, heads, n, d), k (num_pages, page_size, heads_kv, d), v (num_pages, page_size,
      heads_kv, d_v); page_size, when given, must be k's second dimension. The result (batch, heads, n, d_v).
      attn_execute_paged."""
    if any(x is not None for x in (cu_seqlens_q, cu_seqlens_kv, block_table, seq_lens_kv, page_size)):
        a = _Layout(q, k, v, causal, scale, algo, tolerance, window, softcap, alibi_slopes, cu_seqlens_q,
                    cu_seqlens_kv, block_table, seq_lens_kv, page_size)
        dbp = _db_path(db)
        if not isinstance(return_lse, (bool, np.bool_)):
            raise TypeError("return_lse is of type %s: expected a bool" % type(return_lse).__name__)
        what = "cu_seqlens_q/cu_seqlens_kv (varlen)" if a.varlen else "block_table (paged)"
        if return_lse:
            raise Error(EUNSUPPORTED, "return_lse with %s: attn_execute_varlen and attn_execute_paged write no lse"
                        % what)
        if a.kind == "torch" and _needs_grad(q, k, v):
            raise Error(EUNSUPPORTED, "%s on tensors that require grad: these layouts have no backward; run under "
                        "torch.no_grad(), or detach the inputs" % what)
        return _layout_attention(a, dbp, q, k, v)
    a = _Args(q, k, v, causal, scale, algo, tolerance, window, softcap, alibi_slopes)
    dbp = _db_path(db)
    if not isinstance(return_lse, (bool, np.bool_)):
        raise TypeError("return_lse is of type %s: expected a bool" % type(return_lse).__name__)
    if a.kind == "torch" and _needs_grad(q, k, v):
        if a.problem is not None and (a.mods or a.problem.algo == _ALGOS["lowrank"]):
            _backward_takes_mods(a, dbp)
        o, lse = _function().apply(q, k, v, a, dbp, bool(return_lse))
        return (o, lse) if return_lse else o
    if return_lse:
        return _forward_lse(a, dbp, q, k, v, True)
    if a.problem is None:
        return _new_out(a.kind, a.out_shape, q)
    xs = _contiguous(a.kind, a.target, (q, k, v))
    o = _new_out(a.kind, a.out_shape, xs[0])
    stream = _cuda_stream(None, a.device) if a.target == _TARGET_CUDA else None
    with _lock:
        rt = _runtime(dbp, a.target)
        _run(rt.lib, rt.rt, a.target, rt.cached(a.problem), xs, o, stream)
    return o


def attention_backward(q, k, v, o, lse, dout, causal=False, scale=None, db=None, *, algo="auto", tolerance=0.0):
    """The gradients (dq, dk, dv) of attention(q, k, v, ...) for dout, the gradient of its result: o and lse are
    what attention(..., return_lse=True) returned for the same inputs and arguments, dout is shaped like o. dq is
    shaped like q, dk like k and dv like v, in the inputs' dtype (fp32 accumulation); grouped-query heads: dk and dv
    summed over each KV head's query heads. NumPy arrays, or torch tensors (read detached; attention() is
    differentiable itself). Rows that see no key get zero dq, keys no row sees zero dk and dv; an empty result gives
    zero gradients. lowrank kernels write no lse: their gradient is attention()'s autograd's alone. The backward
    plan is cached per problem, as
    attention()'s."""
    a = _Args(q, k, v, causal, scale, algo, tolerance)
    dbp = _db_path(db)
    kind = "numpy arrays" if a.kind == "numpy" else "torch tensors"
    for name, x, shape, dtype in (("o", o, a.out_shape, a.dtype), ("dout", dout, a.out_shape, a.dtype),
                                  ("lse", lse, a.shapes[0][:-1], None)):
        if (a.kind == "numpy") != isinstance(x, np.ndarray) or (a.kind == "torch" and not _is_torch(x)):
            raise TypeError("%s is a %s: q, k and v are %s" % (name, type(x).__name__, kind))
        if dtype is None:
            ok = x.dtype == np.float32 if a.kind == "numpy" else str(x.dtype) == "torch.float32"
            if not ok:
                raise TypeError("lse has dtype %s: expected float32 (attention(..., return_lse=True)'s)" % x.dtype)
        elif x.dtype != dtype:
            raise TypeError("%s has dtype %s: expected q's, %s" % (name, x.dtype, dtype))
        if a.kind == "torch" and x.device != a.device:
            raise Error(EINVAL, "%s is on %s, q on %s: they must be on one device" % (name, x.device, a.device))
        if tuple(x.shape) != shape:
            raise Error(EINVAL, "%s has shape %s: expected %s for q %s and v %s" % (name, tuple(x.shape), shape,
                                                                                  a.shapes[0], a.shapes[2]))
    if a.kind == "torch":
        q, k, v, o, lse, dout = (x.detach() for x in (q, k, v, o, lse, dout))
    return _backward(a, dbp, q, k, v, o, lse, dout)


def _backward_takes_mods(a, dbp):
    """The backward plan of a problem with score modifiers or algo='lowrank', made before the forward runs: a
    libattn (or a target) whose backward does not take them refuses here, with the reason, rather than after the
    forward."""
    with _lock:
        rt = _runtime(dbp, a.target)
        try:
            rt.cached(a.problem, backward=True)
        except Error as e:
            if e.code != EUNSUPPORTED:
                raise
            what = "algo='lowrank'" if a.problem.algo == _ALGOS["lowrank"] else "window, softcap or alibi_slopes"
            raise Error(EUNSUPPORTED, "%s on tensors that require grad: this libattn's backward does not take it "
                        "(%s); run under torch.no_grad(), or detach the inputs" % (what, e.detail)) from None


def _needs_grad(q, k, v):
    if not any(getattr(x, "requires_grad", False) for x in (q, k, v)):
        return False
    import torch
    return torch.is_grad_enabled()


def _new_lse(kind, shape, like):
    if kind == "numpy":
        return np.empty(shape, dtype=np.float32)
    import torch
    return torch.empty(shape, dtype=torch.float32, device=like.device)


def _zeros(kind, shape, like):
    if kind == "numpy":
        return np.zeros(shape, dtype=like.dtype)
    import torch
    return torch.zeros(shape, dtype=like.dtype, device=like.device)


def _forward_lse(a, dbp, q, k, v, want_lse, lowrank_ok=False):
    """(o, lse) for _Args a: the forward through attn_execute_lse. An empty result runs nothing; its lse (only
    wanted when want_lse) is empty too unless d_v = 0, which is refused as there is no kernel to compute it.
    lowrank_ok: where a lowrank kernel serves the plan (it has no exact lse), o through attn_execute and lse None,
    which lowrank's backward takes."""
    lse_shape = a.shapes[0][:-1]
    if a.problem is None:
        if want_lse and math.prod(lse_shape) and a.out_shape[-1] == 0:
            raise Error(EINVAL, "return_lse with d_v = 0: no kernel runs for an empty result, so there is no lse")
        return _new_out(a.kind, a.out_shape, q), _new_lse(a.kind, lse_shape, q)
    xs = _contiguous(a.kind, a.target, (q, k, v))
    o = _new_out(a.kind, a.out_shape, xs[0])
    lse = _new_lse(a.kind, lse_shape, xs[0])
    stream = _cuda_stream(None, a.device) if a.target == _TARGET_CUDA else None
    with _lock:
        rt = _runtime(dbp, a.target)
        plan = rt.cached(a.problem)
        try:
            _run_lse(rt.lib, rt.rt, a.target, plan, xs, o, lse, stream)
        except Error as e:
            if not (lowrank_ok and e.code == EUNSUPPORTED and a.problem.algo == _ALGOS["lowrank"]):
                raise
            _run(rt.lib, rt.rt, a.target, plan, xs, o, stream)
            return o, None
    return o, lse


def _backward(a, dbp, q, k, v, o, lse, dout):
    """[dq, dk, dv], new and in attn.h's layout, for checked inputs of _Args a (torch tensors detached)."""
    like = q
    if a.problem is None:   # the result has no elements: nothing depends on the inputs
        return [_zeros(a.kind, s, like) for s in a.shapes]
    xs = _contiguous(a.kind, a.target, (q, k, v, o, dout) if lse is None else (q, k, v, o, lse, dout))
    if lse is None:   # lowrank's backward takes no lse
        xs = list(xs[:4]) + [None] + [xs[4]]
    grads = [_new_out(a.kind, s, xs[0]) for s in a.shapes]
    stream = _cuda_stream(None, a.device) if a.target == _TARGET_CUDA else None
    with _lock:
        rt = _runtime(dbp, a.target)
        _run_backward(rt.lib, rt.rt, a.target, rt.cached(a.problem, backward=True), xs, grads, stream)
    return grads


_Function = None


def _function():
    """attention()'s torch.autograd.Function, made on first use (torch is imported only for torch tensors)."""
    global _Function
    if _Function is not None:
        return _Function
    import torch
    from torch.autograd.function import once_differentiable

    class _Attention(torch.autograd.Function):
        # forward through attn_execute_lse, keeping the inputs, o and lse (fp32); backward through
        # attn_execute_backward, which recomputes P from lse
        @staticmethod
        def forward(ctx, q, k, v, a, dbp, want_lse):
            o, lse = _forward_lse(a, dbp, q, k, v, want_lse, lowrank_ok=not want_lse)
            ctx.a, ctx.dbp, ctx.no_lse = a, dbp, lse is None
            if lse is None:   # a lowrank kernel served: its backward needs no lse
                lse = torch.empty(0, dtype=torch.float32, device=o.device)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.mark_non_differentiable(lse)
            return o, lse

        @staticmethod
        @once_differentiable
        def backward(ctx, dout, _dlse):
            q, k, v, o, lse = ctx.saved_tensors
            if dout.dtype != o.dtype:
                dout = dout.to(o.dtype)
            grads = _backward(ctx.a, ctx.dbp, q, k, v, o, None if ctx.no_lse else lse, dout)
            out = []
            for x, g, need in zip((q, k, v), grads, ctx.needs_input_grad[:3]):
                if need and g.stride() != x.stride() and x.numel() > 1:
                    # the input's layout (a transposed view's gradient is transposed alike) where it is dense
                    g = torch.empty_like(x, memory_format=torch.preserve_format).copy_(g)
                out.append(g if need else None)
            return out[0], out[1], out[2], None, None, None

    _Function = _Attention
    return _Function


def describe(q, k, v, causal=False, scale=None, db=None, *, algo="auto", tolerance=0.0, window=0, softcap=0.0,
             alibi_slopes=None, cu_seqlens_q=None, cu_seqlens_kv=None, block_table=None, seq_lens_kv=None,
             page_size=None):
    """The plan attention() runs for the same arguments, as attn_plan_describe says it:
    "flash d=64 Br=64 Bc=128 cpu f32 (tuned)" (a configuration from the database) or "... (default)"."""
    if any(x is not None for x in (cu_seqlens_q, cu_seqlens_kv, block_table, seq_lens_kv, page_size)):
        a = _Layout(q, k, v, causal, scale, algo, tolerance, window, softcap, alibi_slopes, cu_seqlens_q,
                    cu_seqlens_kv, block_table, seq_lens_kv, page_size)
    else:
        a = _Args(q, k, v, causal, scale, algo, tolerance, window, softcap, alibi_slopes)
    dbp = _db_path(db)
    if a.problem is None:
        return _EMPTY_DESCRIBE
    with _lock:
        rt = _runtime(dbp, a.target)
        return rt.lib.attn_plan_describe(rt.cached(a.problem)).decode()


class Plan:
    """A plan for one problem, created once and run many times: attntune.plan(q, k, v, ...) takes the arguments of
    attention() and checks them as it does; q, k and v give the shapes, the dtype and the device, not data.

    run(q, k, v, out=None, stream=None) computes the attention of inputs of exactly those shapes, dtype and
    device (others raise Error EINVAL, or TypeError for another kind or dtype) into `out` (an array or tensor of
    the result's shape and dtype on that device, C-contiguous, not overlapping the inputs), or into a new one, and
    returns it. stream: CUDA plans only, a torch.cuda.Stream to run on (None: the current stream); copies and the
    new result are then made on that stream too. describe() says which kernel serves ("... (tuned)"). Attributes:
    q_shape, k_shape, v_shape, out_shape, dtype, device (None for NumPy), stream_ordered (a CUDA plan that runs
    without waiting, through attn_execute_async). The plan is released by close(), by `with`, or when it is
    collected; a CUDA plan's close() waits for the device's queued work first. run() may be called from several
    threads at once, close() not while another thread runs the plan."""

    def __init__(self, q, k, v, causal=False, scale=None, db=None, *, algo="auto", tolerance=0.0, window=0,
                 softcap=0.0, alibi_slopes=None):
        self._handle = None
        a = _Args(q, k, v, causal, scale, algo, tolerance, window, softcap, alibi_slopes)
        dbp = _db_path(db)
        self._kind, self._target, self._problem = a.kind, a.target, a.problem
        self._slopes = a.slopes   # what self._problem.alibi_slopes points at
        self.q_shape, self.k_shape, self.v_shape = a.shapes
        self.out_shape = a.out_shape
        self.dtype, self.device = a.dtype, a.device
        self._lib = self._rt = None
        self.stream_ordered = False
        if a.problem is not None:
            with _lock:
                rt = _runtime(dbp, a.target)
                self._lib, self._rt = rt.lib, rt.rt
                self._handle = rt.create(a.problem)
            self.stream_ordered = a.target == _TARGET_CUDA and hasattr(self._lib, "attn_execute_async")

    def _check(self, name, x, shape):
        if self._kind == "numpy":
            if not isinstance(x, np.ndarray):
                raise TypeError("%s is a %s: this plan takes numpy arrays" % (name, type(x).__name__))
        elif not _is_torch(x):
            raise TypeError("%s is a %s: this plan takes torch tensors" % (name, type(x).__name__))
        if x.dtype != self.dtype:
            raise TypeError("%s has dtype %s: this plan takes %s" % (name, x.dtype, self.dtype))
        if self.device is not None and x.device != self.device:
            raise Error(EINVAL, "%s is on %s: this plan runs on %s" % (name, x.device, self.device))
        if tuple(x.shape) != shape:
            raise Error(EINVAL, "%s has shape %s: this plan was made for %s" % (name, tuple(x.shape), shape))

    def run(self, q, k, v, out=None, stream=None):
        """The attention of q, k, v into out (or a new array or tensor), returned; see the class's docstring."""
        for name, x, shape in (("q", q, self.q_shape), ("k", k, self.k_shape), ("v", v, self.v_shape)):
            self._check(name, x, shape)
        if stream is not None and self._target != _TARGET_CUDA:
            raise TypeError("stream: only a plan for CUDA tensors runs on a stream")
        s = _cuda_stream(stream, self.device) if self._target == _TARGET_CUDA else None
        if stream is not None:
            import torch
            with torch.cuda.stream(s):
                return self._run(q, k, v, out, s)
        return self._run(q, k, v, out, s)

    def _run(self, q, k, v, out, s):
        xs = _contiguous(self._kind, self._target, (q, k, v))
        if out is None:
            out = _new_out(self._kind, self.out_shape, xs[0])
        else:
            self._check("out", out, self.out_shape)
            if not (out.flags.c_contiguous and out.flags.writeable if self._kind == "numpy" else out.is_contiguous()):
                raise Error(EINVAL, "out is not a C-contiguous%s result to write into" %
                            (" writeable" if self._kind == "numpy" else ""))
            if self._target == _TARGET_CUDA and out.data_ptr() % 16:
                raise Error(EINVAL, "out's device pointer is not 16-byte aligned")
            lo, hi = _ptr(out), _ptr(out) + _nbytes(out)
            for name, x in zip("qkv", xs):
                if _nbytes(x) and _nbytes(out) and _ptr(x) < hi and lo < _ptr(x) + _nbytes(x):
                    raise Error(EINVAL, "out overlaps %s" % name)
        if self._problem is None:
            return out
        if self._handle is None:
            raise Error(EINVAL, "the plan is closed")
        _run(self._lib, self._rt, self._target, self._handle, xs, out, s)
        return out

    def describe(self):
        """attn_plan_describe's text: "flash d=64 Br=64 Bc=128 cpu f32 (tuned)", or "... (default)"."""
        if self._problem is None:
            return _EMPTY_DESCRIBE
        if self._handle is None:
            raise Error(EINVAL, "the plan is closed")
        return self._lib.attn_plan_describe(self._handle).decode()

    def close(self):
        """Releases the plan (a CUDA plan after the device's queued work); run() then raises. Again: nothing."""
        h, self._handle = self._handle, None
        if h is not None:
            _destroy(self._lib, self._target, h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at interpreter exit torch may be gone; the process frees the plan
            pass

    def __repr__(self):
        what = self.describe() if self._problem is None or self._handle is not None else "closed"
        return "<attntune.Plan %s: q %s k %s v %s %s>" % (what, self.q_shape, self.k_shape, self.v_shape, self.dtype)


def plan(q, k, v, causal=False, scale=None, db=None, *, algo="auto", tolerance=0.0, window=0, softcap=0.0,
         alibi_slopes=None):
    """A Plan for the problem q, k and v describe, taking attention()'s arguments (score modifiers included): run it
    with .run(q, k, v, out=None, stream=None) as often as needed, see which kernel serves with .describe()."""
    return Plan(q, k, v, causal, scale, db, algo=algo, tolerance=tolerance, window=window, softcap=softcap,
                alibi_slopes=alibi_slopes)
