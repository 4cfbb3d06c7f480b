"""python_serve_stream.py: the binding's serving layouts on CUDA tensors where there is no GPU, on a stand-in torch
(CUDA tensors are plain objects) and a stand-in libattn that records its calls (as tests/python_stream.py does for
dense calls). With attn_execute_varlen_async / attn_execute_paged_async in libattn, attention(cu_seqlens_q=...) and
attention(block_table=...) queue on torch.cuda.current_stream()'s handle and synchronise nothing, passing the
lengths and the table as int32 host arrays; without them the stream is synchronised and the synchronous call
waits."""
import ctypes
import sys

sys.dont_write_bytecode = True  # stand_in_torch: no __pycache__ in the source tree
from stand_in_torch import calls, check, cuda, finish, fresh  # noqa: E402
from stand_in_torch import Lib as BaseLib  # noqa: E402


def ints(addr, count):
    return list((ctypes.c_int32 * count).from_address(addr))


# --- a stand-in libattn: the layouts' calls -------------------------------------------------------------------------
class Lib(BaseLib):
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


class AsyncLib(Lib):
    def attn_execute_varlen_async(self, plan, stream, cu_q, cu_kv, q, k, v, o):
        calls.append(("varlen_async", stream, ints(cu_q, 3), ints(cu_kv, 3)))
        return 0

    def attn_execute_paged_async(self, plan, stream, q, k, v, num_pages, page_size, table, max_pages, lens, o):
        calls.append(("paged_async", stream, num_pages, page_size, ints(table, 2 * max_pages), ints(lens, 2)))
        return 0


import attntune  # noqa: E402 - after the stand-in torch


def launched():
    return [c for c in calls if c[0] not in ("open", "create", "destroy")]


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

finish()
