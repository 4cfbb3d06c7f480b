"""python_stream.py: the binding's CUDA path where there is no GPU (tests/python_attention.py runs it in its own
process): a stand-in torch module whose CUDA tensors are plain objects, and a stand-in libattn that records its
calls. With attn_execute_async in libattn, CUDA tensors are launched on torch.cuda.current_stream()'s handle (or the
stream given to Plan.run) and nothing is synchronised; without it, the stream is synchronised and attn_execute
waits. attn_problem gets no 0 where attn.h means "the default", an empty result calls nothing, and a CUDA plan is
destroyed after the device's queued work."""
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


class Stream:
    def __init__(self, handle, dev):
        self.cuda_stream, self.device = handle, dev

    def synchronize(self):
        calls.append(("sync", self.cuda_stream))


CUDA0 = device("cuda", 0)
_current = [Stream(0x77, CUDA0)]
torch.cuda.Stream = Stream
torch.cuda.current_stream = lambda dev=None: _current[0]
torch.cuda.synchronize = lambda dev=None: calls.append(("device sync",))


@contextlib.contextmanager
def _stream(s):
    old, _current[0] = _current[0], s
    try:
        yield
    finally:
        _current[0] = old


torch.cuda.stream = _stream


# --- a stand-in libattn -------------------------------------------------------------------------------------------
class Lib:
    def attn_open(self, db, target, out):
        calls.append(("open", target))
        out._obj.value = 0x100
        return 0

    def attn_plan_create(self, rt, p, out):
        p = p._obj
        calls.append(("create", {f: getattr(p, f) for f, _ in p._fields_}))
        out._obj.value = 0x200
        return 0

    def attn_execute(self, plan, q, k, v, o):
        calls.append(("execute", getattr(plan, "value", plan)))
        return 0

    def attn_plan_describe(self, plan):
        return b"flash fake cuda f16 (default)"

    def attn_plan_destroy(self, plan):
        calls.append(("destroy", getattr(plan, "value", plan)))

    def attn_last_error(self, rt):
        return b""


class AsyncLib(Lib):
    def attn_execute_async(self, plan, stream, q, k, v, o):
        calls.append(("async", stream))
        return 0


import attntune  # noqa: E402 - after the stand-in torch

failures = 0


def check(cond, what):
    global failures
    print("%s: %s" % ("ok  " if cond else "FAIL", what))
    failures += not cond


def cuda(*shape):
    return Tensor(shape, torch.float16, CUDA0)


def fresh(lib):
    attntune._lib = lib
    attntune._runtimes.clear()
    del calls[:]


q, k, v = cuda(2, 4, 33, 64), cuda(2, 2, 71, 64), cuda(2, 2, 71, 40)
fresh(AsyncLib())
o = attntune.attention(q, k, v, causal=True)
created = [c[1] for c in calls if c[0] == "create"]
check([c for c in calls if c[0] in ("async", "execute", "sync", "device sync")] == [("async", 0x77)],
      "attn_execute_async on the current stream's handle, nothing synchronised: %s" % calls)
check(len(created) == 1 and all(created[0][f] > 0 for f in ("batch", "heads", "n", "d", "n_kv", "heads_kv", "d_v"))
      and (created[0]["n_kv"], created[0]["heads_kv"], created[0]["d_v"]) == (71, 2, 40),
      "attn_problem without a 0: %s" % created)
check(o.shape == (2, 4, 33, 40) and o.device == CUDA0 and o.dtype is torch.float16, "the result's shape and dtype")

del calls[:]
p = attntune.plan(q, k, v, causal=True)
side = Stream(0x99, CUDA0)
p.run(q, k, v, stream=side)
out = cuda(2, 4, 33, 40)
r = p.run(q, k, v, out=out)
launched = [c for c in calls if c[0] in ("async", "execute", "sync")]
check(p.stream_ordered and launched == [("async", 0x99), ("async", 0x77)] and r is out and _current[0].cuda_stream == 0x77,
      "Plan.run(stream=) launches there, then on the current stream again: %s" % calls)
del calls[:]
p.close()
check(calls == [("device sync",), ("destroy", 0x200)], "a CUDA plan is destroyed after the device's work: %s" % calls)

del calls[:]
o = attntune.attention(q, k, cuda(2, 2, 71, 0))
check(calls == [] and o.shape == (2, 4, 33, 0), "d_v = 0: an empty result, libattn not called: %s" % calls)

fresh(Lib())
o = attntune.attention(q, k, v)
check([c for c in calls if c[0] in ("async", "execute", "sync")] == [("sync", 0x77), ("execute", 0x200)],
      "without attn_execute_async: the stream synchronised, then attn_execute: %s" % calls)
check(not attntune.plan(q, k, v).stream_ordered, "without attn_execute_async: stream_ordered is False")

attntune._lib = None
print("%d failures" % failures)
sys.exit(1 if failures else 0)
