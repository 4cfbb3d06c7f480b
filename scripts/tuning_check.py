#!/usr/bin/env python3
"""tuning_check.py: is a tuned database trustworthy on this machine?

For every measured CPU problem in the database (attntune show --json), runs `attntune bench` on that shape: the
runtime's plan and the untuned default timed in interleaved rounds in one process. A problem passes when
  - the plan is the tuned row of that very problem (describe says "(tuned)"),
  - the plan is at least MIN_VS_DEFAULT times the default's speed, and
  - the stored time is within [LOW, HIGH] times the time measured now.
Prints a table and exits 1 when any problem fails.

usage: scripts/tuning_check.py --db DB [--attntune PATH] [--reps R]
"""
import argparse
import json
import os
import subprocess
import sys

MIN_VS_DEFAULT = 0.97
LOW, HIGH = 0.7, 1.43


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--attntune", default=os.path.join(here, "..", "build", "tuner", "attntune"))
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    show = subprocess.run([a.attntune, "show", "--db", a.db, "--json"], capture_output=True, text=True)
    if show.returncode != 0:
        sys.exit("tuning_check: show: " + show.stderr.strip())
    rows = [r for r in json.loads(show.stdout) if r["provenance"] == "measured" and r["device"].startswith("cpu:")]
    if not rows:
        sys.exit("tuning_check: no measured CPU rows in " + a.db)
    print("%6s %6s %4s %5s %6s %10s %10s %8s %10s %8s  %s" % ("n", "n_kv", "d", "b*h", "causal", "stored ms",
          "now ms", "stored/now", "default ms", "vs def", "verdict"))
    failed = 0
    for r in rows:
        width = r["batch"] * r["heads"]
        cmd = [a.attntune, "bench", "--target", "cpu", "--n", str(r["n"]), "--n-kv", str(r["n_kv"]), "--d",
               str(r["d"]), "--heads", str(width), "--reps", str(a.reps), "--no-blas", "--json", "--db", a.db]
        if r["causal"]:
            cmd.append("--causal")
        b = subprocess.run(cmd, capture_output=True, text=True)
        if b.returncode != 0:
            print("bench failed for n=%d d=%d: %s" % (r["n"], r["d"], b.stderr.strip()))
            failed += 1
            continue
        p = json.loads(b.stdout)[0]
        ratio = r["time_ms"] / p["plan_ms"]
        why = []
        if "(tuned)" not in p["plan"]:
            why.append("plan is not this problem's tuned row: " + p["plan"])
        if not p["vs_default"] >= MIN_VS_DEFAULT:
            why.append("slower than the default")
        if not LOW <= ratio <= HIGH:
            why.append("stored time off")
        failed += bool(why)
        print("%6d %6d %4d %5d %6d %10.4g %10.4g %8.2fx %10.4g %7.3fx  %s" % (r["n"], r["n_kv"], r["d"], width,
              r["causal"], r["time_ms"], p["plan_ms"], ratio, p["default_ms"], p["vs_default"],
              "; ".join(why) if why else "ok"))
        sys.stdout.flush()
    print("%d passed, %d failed" % (len(rows) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
