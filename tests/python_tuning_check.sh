#!/bin/sh
# python_tuning_check.sh ATTNTUNE WORKDIR: scripts/tuning_check.py on a database tuned here for one half-precision
# problem with d_v != d (the kind README's `--dtype f16,bf16` and `--dv` commands store). Whatever the timings say
# on a loaded machine, the check must bench that very problem (dtype and d_v too, so the runtime serves the tuned
# row), and must not fail a tuned row that is the default configuration against the default (itself). The timing
# verdicts (slower than the default, stored time off) are left to the machine: not asserted. Exit 77 without python3.
set -u
T=$1 W=$2
S=$(cd "$(dirname "$0")/.." && pwd)/scripts/tuning_check.py
PY=${ATTN_PYTHON:-python3}
out=$W/out.txt
fail() { echo "FAIL (tuning_check): $*" >&2; echo "--- output:" >&2; cat "$out" >&2; exit 1; }
command -v "$PY" >/dev/null 2>&1 || { echo "SKIP: no $PY here"; exit 77; }
rm -rf "$W"
mkdir -p "$W"
: >"$out"

"$T" --gpu cpu --d 7 --dv 12 --dtype f16 --n 64 --budget 1 --reps 1 --time-cap 0.05 --db "$W/t.db" >"$out" 2>&1 ||
  fail "tune exit $?"
"$T" show --db "$W/t.db" --json >"$W/show.json" 2>"$out" || fail "show exit $?"
"$PY" "$S" --db "$W/t.db" --attntune "$T" --reps 3 --json "$W/check.json" >"$out" 2>&1
rc=$?
[ $rc -le 1 ] || fail "tuning_check.py exit $rc"
cat "$out"
"$PY" - "$W/check.json" "$W/show.json" >"$out" 2>&1 <<'PYEOF' || fail "tuning_check.py's verdicts"
import json, sys
rows = json.load(open(sys.argv[1]))
show = json.load(open(sys.argv[2]))
bad = []
if len(rows) != 1 or len(show) != 1:
    sys.exit("want one problem checked and one row stored: %d and %d" % (len(rows), len(show)))
r, s = rows[0], show[0]
if (r["dtype"], r["d"], r["d_v"]) != ("f16", 7, 12):
    bad.append("benched %s d=%d d_v=%d, the row is f16 d=7 d_v=12" % (r["dtype"], r["d"], r["d_v"]))
for f in ("bench_failed", "not_tuned_row"):
    if f in r["failures"]:
        bad.append("%s: %s" % (f, r.get("plan")))
if "f16" not in r.get("plan", "") or "d_v=12" not in r.get("plan", ""):
    bad.append("the plan benched is not the row's kernel: %s" % r.get("plan"))
if r.get("plan_is_default") != bool(s["is_default"]):
    bad.append("plan_is_default %s, the stored row's is_default %s" % (r.get("plan_is_default"), s["is_default"]))
if r.get("plan_is_default") and "slower_than_default" in r["failures"]:
    bad.append("the default configuration failed against itself (vs default %.3f)" % r["vs_default"])
print("tuning_check: %s, plan %s (default: %s), failures %s" % ("ok" if not bad else "; ".join(bad), r.get("plan"),
      r.get("plan_is_default"), r["failures"]))
sys.exit(1 if bad else 0)
PYEOF
cat "$out"
echo "PASS (tuning_check)"
