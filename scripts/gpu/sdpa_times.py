#!/usr/bin/env python3
"""sdpa_times.py: PyTorch SDPA's times for the problems gpukit_check times (validate.sh's sm90-speed and backward
steps), each backend forced in turn (flash, cuDNN, efficient).

  python3 scripts/gpu/sdpa_times.py --n 4096,8192 --tokens 16384 --heads 16 --d 128 --dtype bf16 --causal 0,1 \\
      [--bwd] [--batch B] --json out.json

batch = tokens / n unless --batch is given. Forward: CUDA events around 10 back-to-back launches, the median of 5
rounds. --bwd: also the backward (torch.autograd.grad of the output with a random dO, the graph kept), timed the
same way. Rows: {"backend", "pass": "fwd"|"bwd", "dtype", "batch", "heads", "n", "d", "causal", "ms", "tflops"} (the
backward's TFLOP/s count 2.5 times the forward's products), "note" where a backend refused the shape.
Each row is also printed as a line "RESULT {json}" (with "kind": "sdpa") as it is measured. Exit 0, 2 usage, 77 no PyTorch or no CUDA device."""
import argparse
import json
import statistics
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", default="4096,8192")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--dtype", default="bf16", choices=["f16", "bf16"])
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--bwd", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001 (any import failure means: nothing to compare here)
        print("SKIP: PyTorch is not importable: %s" % e)
        return 77
    if not torch.cuda.is_available():
        print("SKIP: PyTorch sees no CUDA device")
        return 77
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
    if hasattr(SDPBackend, "CUDNN_ATTENTION"):
        backends.insert(1, ("cudnn", SDPBackend.CUDNN_ATTENTION))

    def timed(fn, reps=10, rounds=5):
        fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(rounds):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(reps):
                fn()
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e) / reps)
        return statistics.median(ts)

    rows, done = [], 0
    for n in [int(x) for x in a.n.split(",")]:
        b = a.batch or max(1, a.tokens // n)
        for causal in [int(x) for x in a.causal.split(",")]:
            g = torch.Generator(device="cuda").manual_seed(n + causal)
            q, k, v, go = (torch.randn(b, a.heads, n, a.d, device="cuda", dtype=dt, generator=g) for _ in range(4))
            flops = 4.0 * b * a.heads * n * n * a.d * (0.5 if causal else 1.0)
            for name, be in backends:
                base = {"backend": name, "dtype": a.dtype, "batch": b, "heads": a.heads, "n": n, "d": a.d,
                        "causal": causal}
                try:
                    with sdpa_kernel([be]):
                        ms = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)))
                        rows.append(dict(base, **{"pass": "fwd", "ms": ms, "tflops": flops / ms / 1e9}))
                        if a.bwd:
                            qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))
                            o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=bool(causal))
                            ms = timed(lambda: torch.autograd.grad(o, (qg, kg, vg), go, retain_graph=True))
                            rows.append(dict(base, **{"pass": "bwd", "ms": ms, "tflops": 2.5 * flops / ms / 1e9}))
                            del o, qg, kg, vg
                except RuntimeError as e:
                    rows.append(dict(base, **{"pass": "fwd", "ms": None, "tflops": None, "note": str(e)[:200]}))

            for r in rows[done:]:
                print("RESULT " + json.dumps(dict(r, kind="sdpa")), flush=True)
            done = len(rows)
            del q, k, v, go
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
