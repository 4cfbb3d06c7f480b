#!/bin/sh
# python_torch_compare.sh LIBATTN WORKDIR: scripts/gpu/torch_compare.py. Everywhere: --help, its old flags and --dv
# parsed, and its timing loop on a fake torch.cuda (CUDA events around at least 20 back-to-back launches with no
# synchronisation between them, input sets cycled, their bytes past twice the L2). With PyTorch and a CUDA device
# ($ATTN_PYTHON, else python3): a small comparison through the binding, its JSON rows checked. Exit 77 (skipped,
# with the reason) when torch or CUDA is absent, after the checks that need neither have passed.
set -u
L=$1 W=$2
S=$(cd "$(dirname "$0")/.." && pwd)/scripts/gpu/torch_compare.py
PY=${ATTN_PYTHON:-python3}
out=$W/out.txt
fail() { echo "FAIL (torch_compare): $*" >&2; echo "--- output:" >&2; cat "$out" >&2; exit 1; }
command -v "$PY" >/dev/null 2>&1 || { echo "SKIP: no $PY here"; exit 77; }
rm -rf "$W"
mkdir -p "$W"
: >"$out"

"$PY" "$S" --help >"$out" 2>&1 || fail "--help exit $?"
for f in --lib --db --n --d --dv --causal --dtype --heads --batch --reps --rounds --json; do
  grep -q -- "$f " "$out" || fail "--help lacks $f"
done
"$PY" "$S" --dtype f8 >"$out" 2>&1
[ $? -eq 2 ] || fail "--dtype f8: want exit 2"

"$PY" - "$S" >"$out" 2>&1 <<'PYEOF' || fail "torch_compare.py's parts"
import importlib.util, sys
spec = importlib.util.spec_from_file_location("torch_compare", sys.argv[1])
tc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tc)   # importable without torch
bad = []
a = tc.parse_args("--lib x.so --db t.db --n 1024,4096 --d 64..256 --dv 32 --causal 0,1 --dtype f16,bf16 --heads 8 "
                  "--reps 10 --json o.json".split())
if (a.n_list, a.d_list, a.dv_list, a.causal_list, a.dtypes, a.heads, a.reps, a.json, a.lib, a.db) != \
        ([1024, 4096], [64, 128, 256], [32], [0, 1], ["f16", "bf16"], 8, 20, "o.json", "x.so", "t.db"):
    bad.append("old flags: %s" % vars(a))
if tc.flops(4, 4, 64, 64, 1, 1, 0) != 4 * 4 * 4 * 64 or tc.flops(4, 4, 64, 32, 2, 3, 1) != 2 * 4 * 4 * 96 * 6 / 2:
    bad.append("flops do not count 2 n n_kv (d + d_v) batch heads (/2 causal)")
for set_bytes, l2 in ((8 << 20, 50 << 20), (1 << 30, 50 << 20), (25 << 20, 50 << 20), (3, 7)):
    s = tc.input_sets(set_bytes, l2)
    if not (s >= 1 and s * set_bytes > 2 * l2 and (s == 1 or (s - 1) * set_bytes <= 2 * l2)):
        bad.append("input_sets(%d, %d) = %d: not the fewest sets past 2 x L2" % (set_bytes, l2, s))


class FakeCuda:
    """torch.cuda's Event and synchronize, logging what happens: each event's time is the launches before it."""
    def __init__(self):
        self.log = []

    def synchronize(self):
        self.log.append("sync")

    def Event(self, enable_timing=False):
        cuda = self

        class Ev:
            def record(self):
                self.t = sum(1 for x in cuda.log if isinstance(x, tuple))
                cuda.log.append("record")

            def synchronize(self):
                cuda.log.append("wait")

            def elapsed_time(self, other):
                return float(other.t - self.t) * 2.0   # 2 ms per launch
        assert enable_timing
        return Ev()


cuda = FakeCuda()
sets = [("q%d" % i, "k%d" % i, "v%d" % i, "o%d" % i) for i in range(3)]
ms, host = tc.time_launches(lambda q, k, v, o: cuda.log.append((q, o)), sets, 20, 4, cuda)
launched = [x for x in cuda.log if isinstance(x, tuple)]
rounds, cur = [], None
for x in cuda.log[cuda.log.index("sync") + 1:]:
    if x == "record":
        if cur is None:
            cur = []
        else:
            rounds.append(cur)
            cur = None
    elif cur is not None:
        cur.append(x)
if ms != 2.0 or host < 0:
    bad.append("time_launches: %s ms a launch, want 2.0 (events' elapsed time / launches)" % ms)
if len(rounds) != 4 or any(len(r) != 20 or not all(isinstance(x, tuple) for x in r) for r in rounds):
    bad.append("time_launches: want 4 rounds of 20 launches, nothing else, between two events: %s" % cuda.log)
if [x for x, _ in launched[:3]] != ["q0", "q1", "q2"] or launched[3:][:4] != [("q0", "o0"), ("q1", "o1"),
                                                                               ("q2", "o2"), ("q0", "o0")]:
    bad.append("time_launches: not every set warmed, then the sets cycled: %s" % launched[:8])
print("; ".join(bad) if bad else "torch_compare.py parts: ok")
sys.exit(1 if bad else 0)
PYEOF
cat "$out"

"$PY" -c "import torch" >/dev/null 2>&1 || { echo "SKIP: no PyTorch for $PY: the GPU comparison is left out"; exit 77; }
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1 ||
  { echo "SKIP: no CUDA device for torch: the GPU comparison is left out"; exit 77; }
"$PY" "$S" --lib "$L" --n 200,256 --d 64 --dv 64,40 --causal 1 --dtype f16 --heads 2 --rounds 2 \
  --json "$W/rows.json" >"$out" 2>&1 || fail "comparison exit $?"
cat "$out"
"$PY" - "$W/rows.json" >"$out" 2>&1 <<'PYEOF' || fail "comparison rows"
import json, sys
rows = json.load(open(sys.argv[1]))
want = ["device", "n", "n_kv", "d", "d_v", "causal", "dtype", "heads", "batch", "plan", "stream_ordered", "err_fp64",
        "err_vs_sdpa", "ok", "plan_ms", "plan_tflops", "launches", "input_sets", "l2_bytes"]
bad = ["row lacks %s: %s" % (f, r) for r in rows for f in want if f not in r]
bad += ["wrong: %s" % r for r in rows if not r.get("ok")]
if sorted((r["n"], r["d_v"]) for r in rows) != [(200, 40), (200, 64), (256, 40), (256, 64)]:
    bad.append("rows: %s" % [(r["n"], r["d_v"]) for r in rows])
bad += ["%d launches" % r["launches"] for r in rows if r["launches"] < 20]
bad += ["sets of %d bytes x %d within 2 x L2" % (r["set_bytes"], r["input_sets"]) for r in rows
        if r["set_bytes"] * r["input_sets"] <= 2 * r["l2_bytes"]]
print("; ".join(bad) if bad else "rows ok: %d" % len(rows))
sys.exit(1 if bad else 0)
PYEOF
cat "$out"
echo "PASS (torch_compare)"
