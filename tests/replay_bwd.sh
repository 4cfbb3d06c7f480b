#!/bin/sh
# replay_bwd.sh CASE ATTNTUNE WORKDIR: `attntune replay --pass` on the backward's rows (tune --pass bwd), against the
# whole spaces the performance model stores for an H100 problem (a fraction of a second each, nothing compiled), with
# the same shape's forward beside them:
#   space:  --pass bwd replays the backward's rows over the backward's own space (its size the rows stored, its
#           optimum their fastest), labelled bwd; --pass fwd,bwd both, the forward first, each its own problem
#   fwd:    --pass fwd prints what replay without --pass prints, byte for byte; the JSON says "pass": "fwd"; a
#           backward asked for with none stored is skipped (no rows stored), the forward still replayed
#   nondet: tune --nondeterministic's dq=atomic rows are points of the replayed space, without the option too; the
#           option on a deterministic database asks for points it lacks
#   usage:  a bad --pass, --nondeterministic without a GPU or without bwd: exit 2 with one line, nothing on stdout
# shellcheck disable=SC2086 # $shape, $R and $bad are word-split on purpose
set -u
case_=$1 T=$2 W=$3
# shellcheck source-path=SCRIPTDIR source=sh_util.sh
. "$(dirname "$0")/sh_util.sh"
db=$W/t.db
shape="--gpu H100 --n 256 --d 64 --dtype bf16"
{ "$T" tune $shape --model --pass bwd --strategy exhaustive --db "$db" &&
  "$T" tune $shape --model --strategy exhaustive --db "$db"; } >"$out" 2>&1 || fail "model tune exit $?"
R="$T replay --from $db $shape --strategy exhaustive --strategy random --seeds 2"
# rows PASS WHAT [WHERE]: the stored rows' aggregate
rows() { q "$db" "SELECT $2 FROM measurements m JOIN kernels k ON k.id = m.kernel_id WHERE pass = '$1' ${3:-}"; }
nb=$(rows bwd "count(*)") nf=$(rows fwd "count(*)")
[ "$nb" -gt 0 ] && [ "$nf" -gt 0 ] && [ "$nb" -ne "$nf" ] || fail "fixture: $nb bwd rows, $nf fwd rows"

case $case_ in
space)
  $R --pass bwd --json >"$W/b.json" 2>"$out" || fail "--pass bwd: exit $?"
  $R --pass fwd,bwd --json >"$W/fb.json" 2>"$out" || fail "--pass fwd,bwd: exit $?"
  python3 - "$W/b.json" "$W/fb.json" "$nb" "$(rows bwd "min(time_ms)" "AND status = 'ok'")" "$nf" \
    "$(rows fwd "min(time_ms)" "AND status = 'ok'")" >"$out" 2>&1 <<'PY' || fail "a problem is not its pass's rows'"
import json, sys
b, fb = (json.load(open(f)) for f in sys.argv[1:3])
want = {"bwd": (int(sys.argv[3]), float(sys.argv[4])), "fwd": (int(sys.argv[5]), float(sys.argv[6]))}
def check(p):
    space, opt = want[p["pass"]]
    print(p["pass"], p["space"], p["optimum_ms"], "stored:", space, opt)
    assert p["space"] == space and abs(p["optimum_ms"] - opt) <= 1e-9 * opt, p["pass"]
    assert p["budget"] == space and (p["n"], p["d"], p["dtype"], p["heads"]) == (256, 64, "bf16", 16)
print("bwd:", [p["pass"] for p in b["problems"]], b["skipped"], "fwd,bwd:", [p["pass"] for p in fb["problems"]])
assert [p["pass"] for p in b["problems"]] == ["bwd"] and not b["skipped"]
assert [p["pass"] for p in fb["problems"]] == ["fwd", "bwd"] and not fb["skipped"]
for p in b["problems"] + fb["problems"]:
    check(p)
# the same bwd problem alone and beside the forward: the same seeds, the same figures
assert fb["problems"][1]["strategies"] == b["problems"][0]["strategies"]
PY
  $R --pass bwd >"$W/b.txt" 2>"$out" || fail "--pass bwd (text): exit $?"
  grep -q "^H100 model bwd n=256 d=64 bf16 causal=0 heads=16 batch=1: $nb configurations, optimum" "$W/b.txt" ||
    fail "the backward's header does not say bwd and its $nb configurations"
  [ "$(grep -c configurations "$W/b.txt")" -eq 1 ] || fail "--pass bwd: more than the backward's problem"
  ;;
fwd)
  $R >"$W/none.txt" 2>"$out" || fail "replay exit $?"
  $R --pass fwd >"$W/fwd.txt" 2>"$out" || fail "--pass fwd: exit $?"
  cmp "$W/none.txt" "$W/fwd.txt" >"$out" 2>&1 || fail "--pass fwd prints other bytes than replay without it"
  grep -q "^H100 model n=256 d=64 bf16 causal=0 heads=16 batch=1: $nf configurations" "$W/fwd.txt" &&
    ! grep -q bwd "$W/fwd.txt" || fail "the forward's report: not its $nf configurations alone"
  $R --json >"$W/fwd.json" 2>"$out" || fail "--json: exit $?"
  python3 - "$W/fwd.json" >"$out" 2>&1 <<'PY' || fail "the forward's JSON"
import json, sys
p = json.load(open(sys.argv[1]))["problems"]
print([(q["pass"], q["space"]) for q in p])
assert len(p) == 1 and p[0]["pass"] == "fwd"
assert list(p[0])[:4] == ["device", "provenance", "threads", "pass"] and "optimum_ms" in p[0]
PY
  # a backward asked for and not stored: skipped, the forward replayed as without it
  "$T" tune $shape --model --strategy exhaustive --db "$W/f.db" >"$out" 2>&1 || fail "forward tune exit $?"
  "$T" replay --from "$W/f.db" $shape --strategy random --seeds 2 --pass fwd,bwd >"$W/fb.txt" 2>"$out" ||
    fail "--pass fwd,bwd on forward rows alone: exit $?"
  cat "$W/fb.txt" >>"$out"
  grep -q "^bwd n=256 d=64 bf16 causal=0 heads=16 batch=1: skipped: no rows stored" "$W/fb.txt" &&
    grep -q "^H100 model n=256 d=64 bf16 causal=0 heads=16 batch=1: $nf configurations" "$W/fb.txt" ||
    fail "the backward without rows: not skipped, or the forward not replayed"
  "$T" replay --from "$W/f.db" $shape --strategy random --seeds 2 --pass bwd --json >"$W/b.json" 2>"$out"
  rc=$?
  [ $rc -eq 1 ] || fail "--pass bwd on forward rows alone: exit $rc, expected 1"
  ;;
nondet)
  "$T" tune $shape --model --pass bwd --nondeterministic --strategy exhaustive --db "$W/nd.db" >"$out" 2>&1 ||
    fail "--nondeterministic tune exit $?"
  na=$(q "$W/nd.db" "SELECT count(*) FROM measurements m JOIN kernels k ON k.id = m.kernel_id
                     WHERE pass = 'bwd' AND k.spec LIKE '%dq=atomic%'")
  nall=$(q "$W/nd.db" "SELECT count(*) FROM measurements WHERE pass = 'bwd'")
  [ "$na" -gt 0 ] && [ "$nall" -eq $((nb + na)) ] || fail "fixture: $na dq=atomic of $nall rows, $nb deterministic"
  for opt in "" --nondeterministic; do
    "$T" replay --from "$W/nd.db" $shape --strategy random --seeds 2 --pass bwd $opt >"$W/nd.txt" 2>"$out" ||
      fail "replay of the dq=atomic rows ($opt): exit $?"
    grep -q "^H100 model bwd n=256 d=64 bf16 causal=0 heads=16 batch=1: $nall configurations" "$W/nd.txt" ||
      fail "the space ($opt) is not the $nall rows, dq=atomic's among them"
  done
  $R --pass bwd --nondeterministic >"$W/d.txt" 2>"$out"
  rc=$?
  cat "$W/d.txt" >>"$out"
  [ $rc -eq 1 ] && grep -q "skipped: $nb of $nall configurations stored (no row for .* dq=atomic)" "$W/d.txt" ||
    fail "exit $rc: --nondeterministic on deterministic rows did not ask for the dq=atomic points"
  ;;
usage)
  for bad in "--pass x" "--pass fwd,x" "--pass ''" "--pass fwd,bwd,sdpa" "--gpu cpu --nondeterministic --pass bwd" \
    "--nondeterministic" "--pass fwd --nondeterministic"; do
    eval "$R $bad" >"$W/stdout.txt" 2>"$out"
    rc=$?
    [ $rc -eq 2 ] || fail "$bad: exit $rc, expected 2"
    [ "$(wc -l <"$out")" -eq 1 ] && grep -q -- "^attntune replay: --\(pass\|nondeterministic\)" "$out" ||
      fail "$bad: not one line naming the option"
    [ ! -s "$W/stdout.txt" ] || fail "$bad: a report"
  done
  $R --pass x 2>"$out"
  grep -q -- "--pass: unknown pass 'x' (fwd, bwd)" "$out" || fail "the unknown pass's line"
  "$T" help replay >"$out" 2>&1 && grep -q -- "--pass fwd,bwd" "$out" && grep -q -- "--nondeterministic" "$out" ||
    fail "help replay lacks --pass or --nondeterministic"
  ;;
*) echo "replay_bwd.sh: unknown case $case_" >&2; exit 2 ;;
esac
echo "replay_bwd $case_: ok"
