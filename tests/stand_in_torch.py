"""stand_in_torch.py: a stand-in torch and libattn for the binding's CUDA tests with no GPU (import before attntune)"""
import contextlib
import math
import sys
import types

calls = []

# --- a stand-in torch: just what the binding touches -------------------------------------------------------------
torch = types.ModuleType("torch")
torch.cuda = types.ModuleType("torch.cuda")
sys.modules["torch"], sys.modules["torch.cuda"] = torch, torch.cuda


class device:
    def __init__(self, type_, index=None):
        self.type, self.index = type_, index

    def __eq__(self, other):
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __repr__(self):
        return "%s:%s" % (self.type, self.index)


class dtype:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "torch." + self.name


torch.device, torch.dtype = device, dtype
torch.float32, torch.float16, torch.bfloat16 = dtype("float32"), dtype("float16"), dtype("bfloat16")
_next_ptr = [0x10000]


class Tensor:
    def __init__(self, shape, dtype, device):
        self.shape, self.dtype, self.device = tuple(shape), dtype, device
        self.ptr = _next_ptr[0]
        _next_ptr[0] += 16 * (math.prod(self.shape) + 1)

    def is_contiguous(self):
        return True

    def data_ptr(self):
        return self.ptr

    def detach(self):
        return self

    def contiguous(self):
        return self

    def clone(self):
        return Tensor(self.shape, self.dtype, self.device)

    def element_size(self):
        return 4 if self.dtype is torch.float32 else 2

    def numel(self):
        return math.prod(self.shape)


Tensor.__module__ = "torch"
torch.Tensor = Tensor
torch.empty = lambda shape, dtype, device: Tensor(shape, dtype, device)
torch.zeros = torch.empty


class Stream:
    def __init__(self, handle, dev):
        self.cuda_stream, self.device = handle, dev

    def synchronize(self):
        calls.append(("sync", self.cuda_stream))


CUDA0 = device("cuda", 0)
current = [Stream(0x77, CUDA0)]  # torch.cuda.current_stream(): handle 0x77 outside `with torch.cuda.stream(s)`
torch.cuda.Stream = Stream
torch.cuda.current_stream = lambda dev=None: current[0]
torch.cuda.synchronize = lambda dev=None: calls.append(("device sync",))


@contextlib.contextmanager
def _stream(s):
    old, current[0] = current[0], s
    try:
        yield
    finally:
        current[0] = old


torch.cuda.stream = _stream


# --- a stand-in libattn: what every test needs; each adds attn_plan_create and the calls it tests --------------------
class Lib:
    def attn_open(self, db, target, out):
        calls.append(("open", target))
        out._obj.value = 0x100
        return 0

    def attn_plan_describe(self, plan):
        return b"flash fake cuda f16 (default)"

    def attn_plan_destroy(self, plan):
        calls.append(("destroy", getattr(plan, "value", plan)))

    def attn_last_error(self, rt):
        return b""


import attntune  # noqa: E402 - after the stand-in torch

failures = [0]


def check(cond, what):
    print("%s: %s" % ("ok  " if cond else "FAIL", what))
    failures[0] += not cond


def cuda(*shape):
    return Tensor(shape, torch.float16, CUDA0)


def fresh(lib):
    """lib as the binding's libattn, no runtime open, no calls recorded"""
    attntune._lib = lib
    attntune._runtimes.clear()
    del calls[:]


def finish():
    """the binding's own libattn back; the count of failures, and exit 1 where there were any"""
    attntune._lib = None
    print("%d failures" % failures[0])
    sys.exit(1 if failures[0] else 0)
