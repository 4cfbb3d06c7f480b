"""python_stream.py: the binding's CUDA path where there is no GPU (tests/python_attention.py runs it in its own
process): a stand-in torch module whose CUDA tensors are plain objects, and a stand-in libattn that records its
calls (tests/stand_in_torch.py). With attn_execute_async in libattn, CUDA tensors are launched on
torch.cuda.current_stream()'s handle (or the stream given to Plan.run) and nothing is synchronised; without it, the
stream is synchronised and attn_execute waits. attn_problem gets no 0 where attn.h means "the default", an empty
result calls nothing, and a CUDA plan is destroyed after the device's queued work."""
import sys

sys.dont_write_bytecode = True  # stand_in_torch: no __pycache__ in the source tree
from stand_in_torch import CUDA0, Stream, calls, check, cuda, current, finish, fresh, torch  # noqa: E402
from stand_in_torch import Lib as BaseLib  # noqa: E402


# --- a stand-in libattn: the dense calls ---------------------------------------------------------------------------
class Lib(BaseLib):
    def attn_plan_create(self, rt, p, out):
        p = p._obj
        calls.append(("create", {f: getattr(p, f) for f, _ in p._fields_}))
        out._obj.value = 0x200
        return 0

    def attn_execute(self, plan, q, k, v, o):
        calls.append(("execute", getattr(plan, "value", plan)))
        return 0


class AsyncLib(Lib):
    def attn_execute_async(self, plan, stream, q, k, v, o):
        calls.append(("async", stream))
        return 0


import attntune  # noqa: E402 - after the stand-in torch

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
check(p.stream_ordered and launched == [("async", 0x99), ("async", 0x77)] and r is out and current[0].cuda_stream == 0x77,
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

finish()
