#!/usr/bin/env python3
"""tuning_check.py: is a tuned database trustworthy on this machine?

For every measured CPU problem in the database (attntune show --json), runs `attntune bench` on that very problem
(n, n_kv, d, d_v, dtype, causal, batch*heads, heads_kv, and the row's thread count as ATTN_THREADS): the runtime's
plan and the untuned default timed in interleaved rounds in one process. A problem passes when
  - the plan is the tuned row of that very problem (describe says "(tuned)"),
  - the plan is at least MIN_VS_DEFAULT times the default's speed, unless the tuned row is the default
    configuration itself (the same kernel timed against itself differs by noise only), and
  - the stored time is within [LOW, HIGH] times the time measured now.
Prints a table and exits 1 when any problem fails.

--json FILE writes one object per problem: n, n_kv, d, d_v, dtype, causal, heads (batch*heads), heads_kv, plan,
default, plan_is_default, stored_ms, now_ms, default_ms, vs_default, and failures, a list of "not_tuned_row",
"slower_than_default", "stored_time_off" or "bench_failed" (empty when the problem passes).

usage: scripts/tuning_check.py --db DB [--attntune PATH] [--reps R] [--json FILE]
"""
import argparse
import json
import os
import re
import subprocess
import sys

MIN_VS_DEFAULT = 0.97
LOW, HIGH = 0.7, 1.43


def kernel(describe):
    """The kernel a describe string names, without its origin: "flash d=64 Br=64 Bc=128 cpu f32 (tuned)" ->
    "flash d=64 Br=64 Bc=128 cpu f32"."""
    return re.sub(r"\s*\([^()]*\)\s*$", "", describe)


def bench_command(a, r):
    width = r["batch"] * r["heads"]
    cmd = [a.attntune, "bench", "--target", "cpu", "--n", str(r["n"]), "--n-kv", str(r["n_kv"]), "--d", str(r["d"]),
           "--dv", str(r.get("d_v") or r["d"]), "--dtype", r.get("dtype") or "f32", "--heads", str(width),
           "--heads-kv", str(r["batch"] * (r.get("heads_kv") or r["heads"])), "--reps", str(a.reps), "--no-blas",
           "--json", "--db", a.db]
    if r["causal"]:
        cmd.append("--causal")
    return cmd


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--attntune", default=os.path.join(here, "..", "build", "tuner", "attntune"))
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--json", default=None, help="write one object per problem to this file")
    a = ap.parse_args()
    show = subprocess.run([a.attntune, "show", "--db", a.db, "--json"], capture_output=True, text=True)
    if show.returncode != 0:
        sys.exit("tuning_check: show: " + show.stderr.strip())
    rows = [r for r in json.loads(show.stdout) if r["provenance"] == "measured" and r["device"].startswith("cpu:")]
    if not rows:
        sys.exit("tuning_check: no measured CPU rows in " + a.db)
    print("%6s %6s %4s %4s %5s %5s %6s %10s %10s %8s %10s %8s  %s" % ("n", "n_kv", "d", "d_v", "dtype", "b*h",
          "causal", "stored ms", "now ms", "stored/now", "default ms", "vs def", "verdict"))
    failed, out = 0, []
    for r in rows:
        res = {"n": r["n"], "n_kv": r["n_kv"], "d": r["d"], "d_v": r.get("d_v") or r["d"],
               "dtype": r.get("dtype") or "f32", "causal": int(bool(r["causal"])), "heads": r["batch"] * r["heads"],
               "heads_kv": r["batch"] * (r.get("heads_kv") or r["heads"]), "stored_ms": r["time_ms"],
               "failures": []}
        out.append(res)
        env = dict(os.environ)
        if r.get("threads"):  # the row is keyed by the threads it ran on: the runtime must have as many
            env["ATTN_THREADS"] = str(r["threads"])
        b = subprocess.run(bench_command(a, r), capture_output=True, text=True, env=env)
        if b.returncode != 0:
            print("bench failed for n=%d d=%d d_v=%d %s: %s" % (r["n"], r["d"], res["d_v"], res["dtype"],
                                                                b.stderr.strip()))
            res["failures"].append("bench_failed")
            failed += 1
            continue
        p = json.loads(b.stdout)[0]
        ratio = r["time_ms"] / p["plan_ms"]
        is_default = kernel(p["plan"]) == kernel(p["default"])
        res.update(plan=p["plan"], default=p["default"], plan_is_default=is_default, now_ms=p["plan_ms"],
                   default_ms=p["default_ms"], vs_default=p["vs_default"])
        why = []
        if "(tuned)" not in p["plan"]:
            why.append("plan is not this problem's tuned row: " + p["plan"])
            res["failures"].append("not_tuned_row")
        if not is_default and not p["vs_default"] >= MIN_VS_DEFAULT:
            why.append("slower than the default")
            res["failures"].append("slower_than_default")
        if not LOW <= ratio <= HIGH:
            why.append("stored time off")
            res["failures"].append("stored_time_off")
        failed += bool(why)
        print("%6d %6d %4d %4d %5s %5d %6d %10.4g %10.4g %8.2fx %10.4g %7.3fx  %s" % (
              r["n"], r["n_kv"], r["d"], res["d_v"], res["dtype"], res["heads"], r["causal"], r["time_ms"],
              p["plan_ms"], ratio, p["default_ms"], p["vs_default"],
              "; ".join(why) if why else "ok" + (" (the default configuration)" if is_default else "")))
        sys.stdout.flush()
    print("%d passed, %d failed" % (len(rows) - failed, failed))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
