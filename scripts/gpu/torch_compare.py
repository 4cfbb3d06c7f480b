#!/usr/bin/env python3
"""torch_compare.py: attntune's plans against PyTorch's attention on the same GPU, same inputs, same process.

For every (n, d, causal, dtype): the plan libattn picks from the database (tuned, or the default), checked against
an fp64 reference and against torch.nn.functional.scaled_dot_product_attention; then median times by CUDA events
for the plan and for each SDPA backend forced in turn (flash, efficient, cuDNN, math where it fits), with TFLOP/s
and the ratio of the best backend's time to the plan's. Results as a table and, with --json, as JSON.

  python3 scripts/gpu/torch_compare.py --lib build/runtime/libattn.so --db tuned.db \
      --n 1024,4096,16384 --d 64,128,256 --causal 0,1 --dtype f16,bf16 [--heads 16] [--reps 20] [--json out.json]
"""
import argparse
import ctypes
import json
import math
import statistics
import sys

import torch
import torch.nn.functional as F

ATTN_F32, ATTN_F16, ATTN_BF16 = 0, 1, 2
ATTN_TARGET_CUDA = 2
DTYPES = {"f16": (torch.float16, ATTN_F16), "bf16": (torch.bfloat16, ATTN_BF16), "f32": (torch.float32, ATTN_F32)}


class Problem(ctypes.Structure):
    # runtime/attn.h: attn_problem
    _fields_ = [("batch", ctypes.c_int), ("heads", ctypes.c_int), ("n", ctypes.c_int), ("d", ctypes.c_int),
                ("n_kv", ctypes.c_int), ("heads_kv", ctypes.c_int), ("dtype", ctypes.c_int),
                ("causal", ctypes.c_int), ("scale", ctypes.c_float), ("tolerance", ctypes.c_double),
                ("algo", ctypes.c_int)]


class Attn:
    def __init__(self, path, db):
        self.lib = ctypes.CDLL(path)
        L = self.lib
        L.attn_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]
        L.attn_plan_create.argtypes = [ctypes.c_void_p, ctypes.POINTER(Problem), ctypes.POINTER(ctypes.c_void_p)]
        L.attn_execute.argtypes = [ctypes.c_void_p] * 5
        L.attn_plan_describe.argtypes = [ctypes.c_void_p]
        L.attn_plan_describe.restype = ctypes.c_char_p
        L.attn_plan_destroy.argtypes = [ctypes.c_void_p]
        L.attn_close.argtypes = [ctypes.c_void_p]
        L.attn_last_error.argtypes = [ctypes.c_void_p]
        L.attn_last_error.restype = ctypes.c_char_p
        self.rt = ctypes.c_void_p()
        rc = L.attn_open(db.encode() if db else None, ATTN_TARGET_CUDA, ctypes.byref(self.rt))
        if rc != 0:
            raise SystemExit("attn_open: %s" % L.attn_last_error(None).decode())

    def plan(self, heads, n, d, causal, dtype):
        p = Problem(batch=1, heads=heads, n=n, d=d, dtype=dtype, causal=causal)
        plan = ctypes.c_void_p()
        if self.lib.attn_plan_create(self.rt, ctypes.byref(p), ctypes.byref(plan)) != 0:
            raise RuntimeError("attn_plan_create: %s" % self.lib.attn_last_error(self.rt).decode())
        return plan

    def describe(self, plan):
        return self.lib.attn_plan_describe(plan).decode()

    def run(self, plan, q, k, v, o):
        rc = self.lib.attn_execute(plan, ctypes.c_void_p(q.data_ptr()), ctypes.c_void_p(k.data_ptr()),
                                   ctypes.c_void_p(v.data_ptr()), ctypes.c_void_p(o.data_ptr()))
        if rc != 0:
            raise RuntimeError("attn_execute: %s" % self.lib.attn_last_error(self.rt).decode())


def rel_err(x, ref):
    x, ref = x.double(), ref.double()
    return (torch.linalg.vector_norm(x - ref) / torch.linalg.vector_norm(ref)).item()


def median_ms(fn, reps):
    fn()  # warm-up
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def backends():
    from torch.nn.attention import SDPBackend
    out = [("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
    if hasattr(SDPBackend, "CUDNN_ATTENTION"):
        out.append(("cudnn", SDPBackend.CUDNN_ATTENTION))
    out.append(("math", SDPBackend.MATH))
    return out


def ints(s):
    return [int(x) for x in s.split(",")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", required=True, help="path to libattn.so")
    ap.add_argument("--db", default=None, help="tuned database (default: $ATTN_DB)")
    ap.add_argument("--n", default="1024,4096,16384")
    ap.add_argument("--d", default="64,128,256")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--dtype", default="f16,bf16")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", default=None, help="write the rows to this file")
    a = ap.parse_args()
    from torch.nn.attention import sdpa_kernel
    attn = Attn(a.lib, a.db)
    dev = torch.cuda.get_device_name()
    print("device: %s; torch %s; median of %d runs (CUDA events); TFLOP/s count 4*n*n*d*heads (/2 causal)"
          % (dev, torch.__version__, a.reps))
    rows, failures = [], 0
    for dname in a.dtype.split(","):
        tdt, adt = DTYPES[dname]
        for causal in ints(a.causal):
            for d in ints(a.d):
                for n in ints(a.n):
                    g = torch.Generator(device="cuda").manual_seed(n * 1000 + d * 10 + causal)
                    q, k, v = (torch.rand(1, a.heads, n, d, device="cuda", generator=g, dtype=torch.float32)
                               .mul_(2).sub_(1).to(tdt) for _ in range(3))
                    o = torch.full_like(q, float("nan"))
                    plan = attn.plan(a.heads, n, d, causal, adt)
                    row = {"device": dev, "n": n, "d": d, "causal": causal, "dtype": dname, "heads": a.heads,
                           "plan": attn.describe(plan)}
                    attn.run(plan, q, k, v, o)
                    torch.cuda.synchronize()
                    # fp64 reference on the last 256 query rows (all keys they may see), to keep memory bounded
                    rows_ref = min(n, 256)
                    s = torch.matmul(q[:, :, -rows_ref:].double(), k.double().transpose(-1, -2)) / math.sqrt(d)
                    if causal:
                        i = torch.arange(n - rows_ref, n, device="cuda")[:, None]
                        j = torch.arange(n, device="cuda")[None, :]
                        s = s.masked_fill(j > i, float("-inf"))
                    ref = torch.matmul(torch.softmax(s, dim=-1), v.double())
                    row["err_fp64"] = rel_err(o[:, :, -rows_ref:], ref)
                    sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
                    row["err_vs_sdpa"] = rel_err(o, sdpa)
                    ok = row["err_fp64"] <= 1e-2 and math.isfinite(row["err_vs_sdpa"])
                    failures += not ok
                    flops = 4.0 * n * n * d * a.heads * (0.5 if causal else 1.0)
                    row["plan_ms"] = median_ms(lambda: attn.run(plan, q, k, v, o), a.reps)
                    row["plan_tflops"] = flops / row["plan_ms"] * 1e-9
                    best = None
                    for name, be in backends():
                        if name == "math" and n > 8192:
                            continue  # materialises n x n per head
                        try:
                            with sdpa_kernel(be):
                                ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)),
                                               a.reps)
                        except RuntimeError as e:  # backend refuses this shape / dtype / device
                            row[name + "_ms"] = None
                            row[name + "_note"] = str(e).split("\n")[0][:160]
                            continue
                        row[name + "_ms"] = ms
                        row[name + "_tflops"] = flops / ms * 1e-9
                        if best is None or ms < best[1]:
                            best = (name, ms)
                    if best:
                        row["best_sdpa"], row["best_sdpa_ms"] = best
                        row["ratio_vs_best"] = best[1] / row["plan_ms"]
                    attn.lib.attn_plan_destroy(plan)
                    rows.append(row)
                    print("%-4s n=%-6d d=%-4d causal=%d plan %8.3f ms %6.1f TFLOP/s | best SDPA %-9s %8s ms | "
                          "ratio %5s | err fp64 %.1e vs sdpa %.1e %s| %s"
                          % (dname, n, d, causal, row["plan_ms"], row["plan_tflops"], best[0] if best else "-",
                             "%.3f" % best[1] if best else "-", "%.2fx" % row["ratio_vs_best"] if best else "-",
                             row["err_fp64"], row["err_vs_sdpa"], "" if ok else "WRONG ", row["plan"]))
                    sys.stdout.flush()
                    del q, k, v, o, sdpa, s, ref
                    torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
