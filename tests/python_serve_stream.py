"""python_serve_stream.py: the binding's serving layouts on CUDA tensors where there is no GPU, on a stand-in torch
(CUDA tensors are plain objects) and a stand-in libattn that records its calls (as tests/python_stream.py does for
dense calls). With attn_execute_varlen_async / attn_execute_paged_async in libattn, attention(cu_seqlens_q=...) and
attention(block_table=...) queue on torch.cuda.current_stream()'s handle and synchronise nothing, passing the
lengths and the table as int32 host arrays; without them the stream is synchronised and the synchronous call
waits."""
import ctypes
import math
import sys
import types

calls = []

# --- a stand-in torch: what the binding touches for CUDA tensors --------------------------------------------------
torch = types.ModuleType("torch")
torch.cuda = types.ModuleType("torch.cuda")
sys.modules["torch"], sys.modules["torch.cuda"] = torch, torch.cuda


class device:
    def __init__(self, type_, index=None):
        self.type, self.index = type_, index

    def __eq__(self, other):
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)


class dtype:
    def __init__(self, name):
        self.name = name


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

    def numel(self):
        return math.prod(self.shape)

    def element_size(self):
        return 2


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
torch.cuda.Stream = Stream
torch.cuda.current_stream = lambda dev=None: Stream(0x77, CUDA0)
torch.cuda.synchronize = lambda dev=None: calls.append(("device sync",))


def ints(addr, count):
    return list((ctypes.c_int32 * count).from_address(addr))


# --- a stand-in libattn -------------------------------------------------------------------------------------------
class Lib:
    def attn_open(self, db, target, out):
        out._obj.value = 0x100
        return 0

    def attn_plan_create(self, rt, p, out):
        p = p._obj
        calls.append(("create", p.page_size, p.varlen))
        out._obj.value = 0x200
        return 0

    def attn_execute_varlen(self, plan, cu_q, cu_kv, q, k, v, o):
        calls.append(("varlen", ints(cu_q, 3), ints(cu_kv, 3)))
        return 0

    def attn_execute_paged(self, plan, q, k, v, num_pages, page_size, table, max_pages, lens, o):
        calls.append(("paged", num_pages, page_size, ints(table, 2 * max_pages), ints(lens, 2)))
        return 0

    def attn_plan_describe(self, plan):
        return b"flash fake cuda f16 (default)"

    def attn_plan_destroy(self, plan):
        calls.append(("destroy",))

    def attn_last_error(self, rt):
        return b""


class AsyncLib(Lib):
    def attn_execute_varlen_async(self, plan, stream, cu_q, cu_kv, q, k, v, o):
        calls.append(("varlen_async", stream, ints(cu_q, 3), ints(cu_kv, 3)))
        return 0

    def attn_execute_paged_async(self, plan, stream, q, k, v, num_pages, page_size, table, max_pages, lens, o):
        calls.append(("paged_async", stream, num_pages, page_size, ints(table, 2 * max_pages), ints(lens, 2)))
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


def launched():
    return [c for c in calls if c[0] not in ("create", "destroy")]


# varlen: sequences of 5 and 7 queries, 9 and 3 keys
vq, vk, vv = cuda(12, 4, 64), cuda(12, 2, 64), cuda(12, 2, 64)
# paged: 2 sequences of 1 query, pages of 16, 3 pages each
pq, kp, vp = cuda(2, 4, 1, 64), cuda(6, 16, 2, 64), cuda(6, 16, 2, 64)
table, lens = [[5, 4, 3], [2, 1, 0]], [40, 17]

fresh(AsyncLib())
o = attntune.attention(vq, vk, vv, causal=True, cu_seqlens_q=[0, 5, 12], cu_seqlens_kv=[0, 9, 12])
check(launched() == [("varlen_async", 0x77, [0, 5, 12], [0, 9, 12])] and o.shape == (12, 4, 64),
      "varlen: attn_execute_varlen_async on the current stream's handle, nothing synchronised: %s" % calls)
check(("create", 0, 1) in calls, "varlen: the plan carries varlen = 1: %s" % calls)
del calls[:]
o = attntune.attention(pq, kp, vp, block_table=table, seq_lens_kv=lens, page_size=16)
check(launched() == [("paged_async", 0x77, 6, 16, [5, 4, 3, 2, 1, 0], [40, 17])] and o.shape == (2, 4, 1, 64),
      "paged: attn_execute_paged_async on the current stream's handle, nothing synchronised: %s" % calls)

fresh(Lib())
attntune.attention(vq, vk, vv, causal=True, cu_seqlens_q=[0, 5, 12], cu_seqlens_kv=[0, 9, 12])
check(launched() == [("sync", 0x77), ("varlen", [0, 5, 12], [0, 9, 12])],
      "varlen without the async form: the stream synchronised, then attn_execute_varlen: %s" % calls)
del calls[:]
attntune.attention(pq, kp, vp, block_table=table, seq_lens_kv=lens)
check(launched() == [("sync", 0x77), ("paged", 6, 16, [5, 4, 3, 2, 1, 0], [40, 17])],
      "paged without the async form: the stream synchronised, then attn_execute_paged: %s" % calls)

attntune._lib = None
print("%d failures" % failures)
sys.exit(1 if failures else 0)
