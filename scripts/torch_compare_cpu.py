#!/usr/bin/env python3
"""torch_compare_cpu.py: attntune's CPU plans against PyTorch's scaled_dot_product_attention on the CPU.

For every (n, n_kv, d) point: `attntune bench --target cpu --json` times the plan (tuned or default) and measures
the machine's FMA peak and read bandwidth; then torch.nn.functional.scaled_dot_product_attention runs the same shape
(batch 1, the same dtype, heads and KV heads, causal aligned to the last key as attntune does; grouped-query heads
through SDPA's enable_gqa) on the same number of threads,
its median over repetitions on input sets rotated through more than the last-level cache, checked against
attntune's output semantics by an fp64 softmax reference on a few rows. Prints both medians, torch ms / attntune ms,
and each side's fraction of the ceiling bench measured (prefill n >= 64: GFLOP/s / FMA peak; decode n < 64: K+V
bytes per second / read bandwidth). Not part of the test suite.

  python3 scripts/torch_compare_cpu.py --attntune build/tuner/attntune --n 4096 --d 128 --heads 8
  python3 scripts/torch_compare_cpu.py --attntune build/tuner/attntune --n 1 --n-kv 8192 --d 128 --heads 32
  python3 scripts/torch_compare_cpu.py --attntune build/tuner/attntune --n 1 --n-kv 8192 --d 128 --heads 32 --heads-kv 8
  python3 scripts/torch_compare_cpu.py --attntune build/tuner/attntune --n 4096 --d 128 --heads 8 --dtype bf16
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

DECODE_BELOW = 64  # cache_db/db.h ATTN_DB_DECODE_BELOW: bench's decode/prefill line


def ints(s):
    return [int(x) for x in s.split(",")]


def llc_bytes():
    try:
        v = os.sysconf("SC_LEVEL3_CACHE_SIZE")
        if v > 0:
            return v
    except (ValueError, OSError):
        pass
    return 32 << 20


def bench(a, n, n_kv, d, threads):
    cmd = [a.attntune, "bench", "--target", "cpu", "--n", str(n), "--n-kv", str(n_kv), "--d", str(d), "--heads",
           str(a.heads), "--reps", str(a.reps), "--json", "--no-blas", "--dtype", a.dtype]
    if a.heads_kv:
        cmd += ["--heads-kv", str(a.heads_kv)]
    if a.causal:
        cmd.append("--causal")
    if a.db:
        cmd += ["--db", a.db]
    env = dict(os.environ, ATTN_THREADS=str(threads))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit("torch_compare_cpu: %s failed (%d): %s" % (" ".join(cmd), r.returncode, r.stderr.strip()))
    return json.loads(r.stdout)[0]


def torch_point(torch, F, a, n, n_kv, d):
    h, hk = a.heads, a.heads_kv or a.heads
    es = 4 if a.dtype == "f32" else 2
    dt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
    set_bytes = es * d * (h * n + 2 * hk * n_kv)
    sets = max(2, min(int(math.ceil(3 * llc_bytes() / set_bytes)) + 1, max(2, (1 << 30) // set_bytes)))
    g = torch.Generator().manual_seed(1)
    inputs = [tuple((torch.rand((1, hh, m, d), generator=g) * 2 - 1).to(dt) for hh, m in ((h, n), (hk, n_kv), (hk, n_kv)))
              for _ in range(sets)]
    gqa = {"enable_gqa": True} if hk != h else {}
    mask = None
    if a.causal and n != n_kv:
        # attntune's causal mask: query i sees keys 0 .. i + n_kv - n (aligned to the last key); torch's is_causal
        # aligns to the first, so the mask is explicit when n != n_kv
        mask = torch.arange(n_kv).unsqueeze(0) <= torch.arange(n).unsqueeze(1) + (n_kv - n)

    def run(s):
        q, k, v = inputs[s % sets]
        if a.causal and mask is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **gqa)

    # fp64 check on a few rows: the comparison is of equal work
    q, k, v = inputs[0]
    o = run(0)
    rows = sorted({0, n // 2, n - 1})
    kx = k[0].double().repeat_interleave(h // hk, dim=0)
    vx = v[0].double().repeat_interleave(h // hk, dim=0)
    s = (q[0, :, rows].double() @ kx.transpose(-1, -2)) / math.sqrt(d)
    if a.causal:
        for r, i in enumerate(rows):
            s[:, r, i + (n_kv - n) + 1:] = -math.inf
    ref = torch.softmax(s, dim=-1) @ vx
    err = (torch.linalg.vector_norm(o[0, :, rows].double() - ref) / torch.linalg.vector_norm(ref)).item()
    for w in range(2):
        run(w)  # warm-up: threads started, code paged in
    times, spent, r = [], 0.0, 0
    while r < a.reps or (spent < a.time_cap and len(times) < 1000 and not known(times)):
        t0 = time.perf_counter()
        run(r)
        ms = (time.perf_counter() - t0) * 1e3
        times.append(ms)
        spent += ms / 1e3
        r += 1
    return statistics.median(times), err, len(times)


def known(times):
    """The median's 95% interval (order statistics) within 2% of it, as bench's harness asks."""
    m = len(times)
    if m < 5:
        return False
    x = sorted(times)
    k = 1.96 * math.sqrt(m * 0.25)
    lo, hi = max(0, int(math.floor(m / 2 - k))), min(m - 1, int(math.ceil(m / 2 + k)))
    med = statistics.median(x)
    return med > 0 and 0.5 * (x[hi] - x[lo]) / med <= 0.02


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--attntune", default="attntune", help="the attntune CLI (default: on PATH)")
    ap.add_argument("--db", default=None, help="tuned database (default: $ATTN_DB)")
    ap.add_argument("--n", default="4096")
    ap.add_argument("--n-kv", default=None, help="keys per head (default n)")
    ap.add_argument("--d", default="128")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--heads-kv", type=int, default=None, help="KV heads (grouped-query attention; default heads)")
    ap.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"], help="inputs and output on both sides")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--threads", type=int, default=None, help="threads for both sides (default: all cores)")
    ap.add_argument("--reps", type=int, default=5, help="at least this many timed runs per side")
    ap.add_argument("--time-cap", type=float, default=20.0, help="seconds of timed torch runs per point at most")
    ap.add_argument("--json", default=None, help="write the rows to this file")
    a = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        sys.exit("torch_compare_cpu: PyTorch is not importable (%s); install it (pip install torch) to compare" % e)
    threads = a.threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    print("torch %s, %d threads on both sides; attntune: `attntune bench --target cpu --json` (its medians and "
          "ceilings); torch: median of at least %d runs on rotating inputs; of peak: prefill (n >= %d) GFLOP/s / FMA "
          "peak, decode K+V GB/s / read bandwidth" % (torch.__version__, threads, a.reps, DECODE_BELOW))
    print("%6s %6s %4s %5s %6s %10s %10s %8s %9s %9s %9s  %s" % ("n", "n_kv", "d", "heads", "causal", "attn ms",
          "torch ms", "torch/at", "attn peak", "torch pk", "torch err", "plan"))
    rows = []
    for n in ints(a.n):
        for n_kv in ints(a.n_kv) if a.n_kv else [n]:
            for d in ints(a.d):
                b = bench(a, n, n_kv, d, threads)
                t_ms, err, reps = torch_point(torch, F, a, n, n_kv, d)
                flops = 4.0 * n * n_kv * d * a.heads * (0.5 if a.causal else 1.0)
                kv_bytes = 2.0 * (a.heads_kv or a.heads) * n_kv * d * (4 if a.dtype == "f32" else 2)
                if n < DECODE_BELOW:
                    ceil = b.get("read_bw_gbs")
                    t_frac = kv_bytes / t_ms * 1e-6 / ceil if ceil else None
                else:
                    ceil = b.get("fma_peak_gflops")
                    t_frac = flops / t_ms * 1e-6 / ceil if ceil else None
                row = {"n": n, "n_kv": n_kv, "d": d, "heads": a.heads, "heads_kv": a.heads_kv or a.heads,
                       "dtype": a.dtype, "causal": a.causal, "threads": threads,
                       "attntune_ms": b["plan_ms"], "torch_ms": t_ms, "torch_over_attntune": t_ms / b["plan_ms"],
                       "attntune_fraction_of_peak": b.get("fraction_of_peak"), "torch_fraction_of_peak": t_frac,
                       "fma_peak_gflops": b.get("fma_peak_gflops"), "read_bw_gbs": b.get("read_bw_gbs"),
                       "torch_rel_error": err, "torch_reps": reps, "plan": b["plan"], "torch": torch.__version__}
                rows.append(row)

                def pct(x):
                    return "%.1f%%" % (100 * x) if x is not None else "-"
                print("%6d %6d %4d %5d %6s %10.3f %10.3f %7.2fx %9s %9s %9.1e  %s" % (
                    n, n_kv, d, a.heads, "yes" if a.causal else "no", b["plan_ms"], t_ms, t_ms / b["plan_ms"],
                    pct(row["attntune_fraction_of_peak"]), pct(t_frac), err, b["plan"]))
                sys.stdout.flush()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
