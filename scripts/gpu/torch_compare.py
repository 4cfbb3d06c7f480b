#!/usr/bin/env python3
"""torch_compare.py: attntune's plans against PyTorch's attention on the same GPU, same inputs, same process.

For every (dtype, causal, d, d_v, n): the plan libattn picks from the database (tuned, or the default), run through
the Python binding (attntune.plan; python/ of this repository when attntune is not installed), checked against an
fp64 reference and against torch.nn.functional.scaled_dot_product_attention; then timed the same way as each SDPA
backend forced in turn with torch.nn.attention.sdpa_kernel (flash, efficient, cuDNN, math where it fits in memory),
with TFLOP/s and the ratio of the best backend's time to the plan's. Results as a table and, with --json, as JSON.

  python3 scripts/gpu/torch_compare.py --lib build/runtime/libattn.so --db tuned.db \\
      --n 1024,4096,16384 --d 64,128,256 --causal 0,1 --dtype f16,bf16 [--dv 128] [--heads 16] [--batch 1] \\
      [--reps 20] [--rounds 5] [--json out.json]

Timing, the same for both sides: S input sets (q, k, v and an output each) whose bytes together exceed twice the
GPU's L2 (torch.cuda.get_device_properties().L2_cache_size), so a launch does not find its inputs in L2; each set
runs once (warm-up); then in each of --rounds rounds a CUDA event is recorded, --reps launches (at least 20) run back
to back on the current stream cycling through the sets, with no host synchronisation in between, a second event is
recorded and only then waited for; a round's time is the events' elapsed time / launches, and the figure the median
over rounds. The plan writes into the set's output (plan.run(q, k, v, out=o)); SDPA allocates its own. With a
libattn that has attn_execute_async the plan's launches are stream-ordered like SDPA's; an older one synchronises
each launch (the row says so: stream_ordered false).

--lib PATH sets ATTNTUNE_LIB (the libattn the binding loads) before the binding is imported; without it, and
without ATTNTUNE_LIB, an installed attntune package uses its own libattn and the source tree's python/ uses
build/runtime/libattn.so.0 of this repository.

JSON (--json FILE): a list with one object per (dtype, causal, d, d_v, n); validate.sh and others read these fields:
  device          torch.cuda.get_device_name()
  n, n_kv         query rows and keys per head (n_kv = n)
  d, d_v          head dimension of Q and K, and of V and O
  causal          0 or 1
  dtype           "f16", "bf16" or "f32"
  heads, batch    query heads (= KV heads) and batch
  plan            the plan's attn_plan_describe ("... (tuned)" or "... (default)")
  stream_ordered  the plan ran through attn_execute_async (false: attn_execute, which waits each launch)
  err_fp64        relative Frobenius error of the plan's output against fp64 (batch 0, the last 256 query rows)
  err_vs_sdpa     relative Frobenius error of the plan's output against SDPA's (the backend torch picks)
  ok              err_fp64 <= 1e-2 and err_vs_sdpa finite
  flops           2 n n_kv (d + d_v) batch heads, halved when causal: what TFLOP/s count
  plan_ms         median time of one plan launch (ms), as above; plan_tflops the same as TFLOP/s
  plan_host_ms    host time of one launch in the timed loop (close to plan_ms: the loop was launch-bound)
  <b>_ms, <b>_tflops, <b>_host_ms for each backend b of flash, efficient, cudnn, math (those this torch has);
                  <b>_ms null and <b>_note saying why when the backend refused the shape or was left out
  best_sdpa       the fastest backend's name, best_sdpa_ms its time (absent when every backend refused)
  ratio_vs_best   best_sdpa_ms / plan_ms (> 1: the plan is faster)
  launches        launches per timed round (--reps, at least 20); rounds: --rounds
  input_sets      S; l2_bytes the L2 size the sets exceed twice over; set_bytes one set's q, k, v and output

Exit status: 0 every plan correct, 1 one was not (the row says "WRONG"), 2 a usage error, 77 nothing to compare
here (no PyTorch, or no CUDA device).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DTYPES = ("f16", "bf16", "f32")
BACKENDS = ("flash", "efficient", "cudnn", "math")
MIN_LAUNCHES = 20
TAIL_ROWS = 256   # query rows the fp64 reference covers


def values(s, name):
    """A RANGE as the CLI takes it: "64,128", "64..256" (doubling) or "64..256:32" (step); positive integers."""
    out = []
    for part in s.split(","):
        try:
            if ".." in part:
                lo, rest = part.split("..", 1)
                hi, _, step = rest.partition(":")
                lo, hi = int(lo), int(hi)
                if step:
                    out += list(range(lo, hi + 1, int(step)))
                else:
                    v = lo
                    while 0 < v <= hi:
                        out.append(v)
                        v *= 2
            else:
                out.append(int(part))
        except ValueError:
            raise argparse.ArgumentTypeError("--%s %s: expected integers, a..b or a..b:step" % (name, s)) from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError("--%s %s: expected positive integers" % (name, s))
    return out


def flops(n, n_kv, d, d_v, batch, heads, causal):
    """2 n n_kv (d + d_v) per head: Q K^T and P V; half of it when causal."""
    return 2.0 * n * n_kv * (d + d_v) * batch * heads * (0.5 if causal else 1.0)


def input_sets(set_bytes, l2_bytes):
    """The fewest input sets of set_bytes that together exceed twice the L2 (at least 1)."""
    return 2 * l2_bytes // set_bytes + 1


def time_launches(launch, sets, launches, rounds, cuda, clock=time.perf_counter):
    """(median ms of one launch by CUDA events, host ms of one launch): every set once (warm-up), then per round an
    event, `launches` back-to-back launch(*set) cycling through `sets` with no host synchronisation in between, an
    event, and only then a wait for it. `cuda` is torch.cuda (Event, synchronize)."""
    for s in sets:
        launch(*s)
    cuda.synchronize()
    gpu, host = [], []
    i = 0
    for _ in range(rounds):
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        t0 = clock()
        start.record()
        for _ in range(launches):
            launch(*sets[i % len(sets)])
            i += 1
        end.record()
        host.append((clock() - t0) * 1e3 / launches)
        end.synchronize()
        gpu.append(start.elapsed_time(end) / launches)
    return statistics.median(gpu), statistics.median(host)


def import_binding():
    """The attntune package: the installed one when it has attntune.plan, else the one in this repository's
    python/ (with libattn from build/ when ATTNTUNE_LIB is unset)."""
    try:
        import attntune
        if hasattr(attntune, "plan"):
            return attntune
        sys.modules.pop("attntune", None)
    except ImportError:
        pass
    sys.path.insert(0, os.path.join(REPO, "python"))
    import attntune
    built = os.path.join(REPO, "build", "runtime", "libattn.so.0")
    if not os.environ.get("ATTNTUNE_LIB") and os.path.isfile(built):
        os.environ["ATTNTUNE_LIB"] = built
    return attntune


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Timing, JSON fields and exit status: the docstring atop %s"
                                 % os.path.relpath(os.path.abspath(__file__)))
    ap.add_argument("--lib", default=None, help="libattn.so the binding loads (sets ATTNTUNE_LIB)")
    ap.add_argument("--db", default=None, help="tuned database (default: $ATTN_DB)")
    ap.add_argument("--n", default="1024,4096,16384", help="query rows = keys per head (RANGE)")
    ap.add_argument("--d", default="64,128,256", help="head dimension of Q and K (RANGE)")
    ap.add_argument("--dv", default=None, help="head dimension of V and O (RANGE; default: d)")
    ap.add_argument("--causal", default="0,1", help="0, 1 or 0,1")
    ap.add_argument("--dtype", default="f16,bf16", help="f16, bf16, f32 or a list")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--reps", type=int, default=MIN_LAUNCHES,
                    help="launches per timed round, at least %d (smaller values are raised)" % MIN_LAUNCHES)
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds; the median is reported")
    ap.add_argument("--json", default=None, help="write the rows to this file")
    a = ap.parse_args(argv)
    try:
        a.n_list, a.d_list = values(a.n, "n"), values(a.d, "d")
        a.dv_list = values(a.dv, "dv") if a.dv else None
    except argparse.ArgumentTypeError as e:
        ap.error(str(e))
    a.causal_list = [{"0": 0, "1": 1}.get(c) for c in a.causal.split(",")]
    if None in a.causal_list:
        ap.error("--causal %s: expected 0, 1 or 0,1" % a.causal)
    a.dtypes = a.dtype.split(",")
    if any(t not in DTYPES for t in a.dtypes):
        ap.error("--dtype %s: expected a list of %s" % (a.dtype, ", ".join(DTYPES)))
    if a.heads < 1 or a.batch < 1 or a.rounds < 1 or a.reps < 1:
        ap.error("--heads, --batch, --reps and --rounds must be positive")
    if a.reps < MIN_LAUNCHES:
        print("torch_compare: --reps %d raised to %d launches per timed round" % (a.reps, MIN_LAUNCHES))
        a.reps = MIN_LAUNCHES
    return a


def rel_err(x, ref):
    import torch
    x, ref = x.double(), ref.double()
    return (torch.linalg.vector_norm(x - ref) / torch.linalg.vector_norm(ref)).item()


def sdpa_backends():
    from torch.nn.attention import SDPBackend
    names = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION",
             "math": "MATH"}
    return [(b, getattr(SDPBackend, names[b])) for b in BACKENDS if hasattr(SDPBackend, names[b])]


def compare(a, attntune, torch, dname, causal, d, dv, n, l2):
    """One row: correctness, then the plan and each SDPA backend timed alike."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dname]
    b, h = a.batch, a.heads
    esize = torch.tensor([], dtype=tdt).element_size()
    set_bytes = b * h * n * (2 * d + 2 * dv) * esize
    count = input_sets(set_bytes, l2)
    g = torch.Generator(device="cuda").manual_seed(n * 1000 + d * 10 + dv * 7 + causal)

    def rand(*shape):
        return torch.rand(*shape, device="cuda", generator=g, dtype=torch.float32).mul_(2).sub_(1).to(tdt)

    sets = [(rand(b, h, n, d), rand(b, h, n, d), rand(b, h, n, dv), torch.full((b, h, n, dv), float("nan"),
                                                                               device="cuda", dtype=tdt))
            for _ in range(count)]
    q, k, v, o = sets[0]
    fl = flops(n, n, d, dv, b, h, causal)
    row = {"device": torch.cuda.get_device_name(), "n": n, "n_kv": n, "d": d, "d_v": dv, "causal": causal,
           "dtype": dname, "heads": h, "batch": b, "launches": a.reps, "rounds": a.rounds, "input_sets": count,
           "l2_bytes": l2, "set_bytes": set_bytes, "flops": fl}
    with attntune.plan(q, k, v, causal=bool(causal), db=a.db) as plan:
        row["plan"] = plan.describe()
        row["stream_ordered"] = plan.stream_ordered
        plan.run(q, k, v, out=o)
        # fp64 reference on batch 0's last rows (all keys they may see), to keep memory bounded
        rows_ref = min(n, TAIL_ROWS)
        s = torch.matmul(q[:1, :, -rows_ref:].double(), k[:1].double().transpose(-1, -2)) / math.sqrt(d)
        if causal:
            i = torch.arange(n - rows_ref, n, device="cuda")[:, None]
            j = torch.arange(n, device="cuda")[None, :]
            s = s.masked_fill(j > i, float("-inf"))
        ref = torch.matmul(torch.softmax(s, dim=-1), v[:1].double())
        row["err_fp64"] = rel_err(o[:1, :, -rows_ref:], ref)
        del s, ref
        sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
        row["err_vs_sdpa"] = rel_err(o, sdpa)
        del sdpa
        row["ok"] = row["err_fp64"] <= 1e-2 and math.isfinite(row["err_vs_sdpa"])
        row["plan_ms"], row["plan_host_ms"] = time_launches(lambda q, k, v, o: plan.run(q, k, v, out=o), sets,
                                                            a.reps, a.rounds, torch.cuda)
    row["plan_tflops"] = fl / row["plan_ms"] * 1e-9
    best = None
    for name, be in sdpa_backends():
        if name == "math":  # materialises batch x heads x n x n scores (fp32) more than once
            need = 3 * b * h * n * n * 4
            if need > torch.cuda.mem_get_info()[0] // 2:
                row[name + "_ms"] = None
                row[name + "_note"] = "left out: needs about %.1f GiB" % (need / 2**30)
                continue
        try:
            with warnings.catch_warnings(), sdpa_kernel(be):
                warnings.simplefilter("ignore")   # a refusing backend warns why before it raises
                ms, host = time_launches(
                    lambda q, k, v, o: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)), sets,
                    a.reps, a.rounds, torch.cuda)
        except RuntimeError as e:  # the backend refuses this shape / dtype / device
            row[name + "_ms"] = None
            row[name + "_note"] = str(e).split("\n")[0][:160]
            continue
        row[name + "_ms"], row[name + "_host_ms"] = ms, host
        row[name + "_tflops"] = fl / ms * 1e-9
        if best is None or ms < best[1]:
            best = (name, ms)
    if best:
        row["best_sdpa"], row["best_sdpa_ms"] = best
        row["ratio_vs_best"] = best[1] / row["plan_ms"]
    del sets, q, k, v, o
    torch.cuda.empty_cache()
    return row


def main(argv=None):
    a = parse_args(argv)
    if a.lib:
        os.environ["ATTNTUNE_LIB"] = os.path.abspath(a.lib)
    try:
        import torch
    except ImportError as e:
        print("torch_compare: PyTorch is not importable (%s): nothing to compare" % e, file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("torch_compare: no CUDA device (torch.cuda.is_available() is False): nothing to compare",
              file=sys.stderr)
        return 77
    try:
        import torch.nn.attention  # noqa: F401 - sdpa_kernel and SDPBackend (torch 2.3 and later)
    except ImportError:
        print("torch_compare: torch %s lacks torch.nn.attention.sdpa_kernel (torch 2.3 or later)" % torch.__version__,
              file=sys.stderr)
        return 77
    attntune = import_binding()
    # an older torch does not report the L2: 128 MiB is more than any GPU it runs on has
    l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0) or 128 << 20
    print("device: %s; torch %s; attntune %s (libattn %s); %d launches per round, median of %d rounds (CUDA "
          "events), inputs rotated past 2 x L2 (%d MiB); TFLOP/s count 2*n*n*(d+d_v)*batch*heads (/2 causal)"
          % (torch.cuda.get_device_name(), torch.__version__, os.path.dirname(attntune.__file__),
             attntune.library_path(), a.reps, a.rounds, l2 >> 20))
    rows, failures = [], 0
    for dname in a.dtypes:
        for causal in a.causal_list:
            for d in a.d_list:
                for dv in a.dv_list or [d]:
                    for n in a.n_list:
                        row = compare(a, attntune, torch, dname, causal, d, dv, n, l2)
                        failures += not row["ok"]
                        rows.append(row)
                        best = (row["best_sdpa"], row["best_sdpa_ms"]) if "best_sdpa" in row else None
                        print("%-4s n=%-6d d=%-4d d_v=%-4d causal=%d plan %8.3f ms %6.1f TFLOP/s | best SDPA %-9s "
                              "%8s ms | ratio %5s | err fp64 %.1e vs sdpa %.1e %s| %s%s"
                              % (dname, n, d, dv, causal, row["plan_ms"], row["plan_tflops"],
                                 best[0] if best else "-", "%.3f" % best[1] if best else "-",
                                 "%.2fx" % row["ratio_vs_best"] if best else "-", row["err_fp64"],
                                 row["err_vs_sdpa"], "" if row["ok"] else "WRONG ", row["plan"],
                                 "" if row["stream_ordered"] else " [synchronous]"))
                        sys.stdout.flush()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
