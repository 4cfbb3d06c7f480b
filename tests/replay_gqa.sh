#!/bin/sh
# replay_gqa.sh CASE ATTNTUNE WORKDIR: `attntune replay` on grouped-query rows (tune --heads-kv), against the whole
# spaces the performance model stores for an H100 decode (a fraction of a second each, nothing compiled):
#   groups: a GQA decode (32 query heads on 8 K/V heads, batch 8: packed blocks leave SMs idle, so its space has
#           split-KV points) and the same shape without GQA, in one database: each replayed as a problem of its own
#           over its own space (every stored row a point of it, the split rows included) and optimum; --heads-kv G
#           picks one
#   usage:  --heads-kv that does not divide --heads, or is out of range: exit 2 with one line, nothing on stdout
#   passes: backward rows (tune --pass bwd: the same spec texts, other times) answer for no forward configuration
# shellcheck disable=SC2086 # $shape, $R and $bad are word-split on purpose
set -u
case_=$1 T=$2 W=$3
# shellcheck source-path=SCRIPTDIR source=sh_util.sh
. "$(dirname "$0")/sh_util.sh"
db=$W/g.db
shape="--gpu H100 --n 1 --n-kv 4096 --heads 32 --batch 8 --d 128 --dtype bf16"
{ "$T" tune $shape --heads-kv 8 --strategy exhaustive --db "$db" && "$T" tune $shape --strategy exhaustive --db "$db"; } \
  >"$out" 2>&1 || fail "model tune exit $?"
R="$T replay --from $db $shape --strategy exhaustive --seeds 1"

case $case_ in
groups)
  rows() { q "$db" "SELECT $1 FROM measurements m JOIN kernels k ON k.id = m.kernel_id WHERE heads_kv = $2"; }
  g=$(rows "count(*)" 8) gsplit=$(rows "count(*)" "8 AND k.spec LIKE '% split=%'") m=$(rows "count(*)" 32)
  [ "$gsplit" -gt 0 ] && [ "$m" -gt 0 ] && [ "$(rows "count(*)" "32 AND k.spec LIKE '% split=%'")" -eq 0 ] ||
    fail "fixture: $g GQA rows ($gsplit split), $m MHA rows: expected split rows for GQA only"
  $R --json >"$W/all.json" 2>"$out" || fail "replay exit $?"
  python3 - "$W/all.json" "$g" "$(rows "min(time_ms)" "8 AND status = 'ok'")" "$m" \
    "$(rows "min(time_ms)" "32 AND status = 'ok'")" >"$out" 2>&1 <<'PY' || fail "replay did not keep GQA and MHA apart"
import json, sys
doc = json.load(open(sys.argv[1]))
want = {8: (int(sys.argv[2]), float(sys.argv[3])), 32: (int(sys.argv[4]), float(sys.argv[5]))}
got = {p["heads_kv"]: (p["space"], p["optimum_ms"]) for p in doc["problems"]}
print("problems (heads_kv: space, optimum):", got, "stored:", want, "skipped:", doc["skipped"])
assert len(doc["problems"]) == 2 and set(got) == set(want) and not doc["skipped"]
for hkv, (space, opt) in want.items():
    # every stored row is a point of its own space (the split rows too), and the optimum is its own rows'
    assert got[hkv][0] == space and abs(got[hkv][1] - opt) <= 1e-9 * opt, hkv
PY
  $R >"$W/all.txt" 2>"$out" || fail "replay (text) exit $?"
  grep -q "^H100 model n=1 n_kv=4096 d=128 bf16 causal=0 heads=32 heads_kv=8 batch=8: $g configurations" \
    "$W/all.txt" && grep -q "^H100 model n=1 n_kv=4096 d=128 bf16 causal=0 heads=32 batch=8: $m configurations" \
    "$W/all.txt" || fail "the problems' headers do not name their K/V heads and spaces"
  for hkv in 8 32; do # --heads-kv G: that problem alone
    $R --heads-kv $hkv --json >"$W/one.json" 2>"$out" || fail "--heads-kv $hkv: exit $?"
    python3 -c "
import json
p = json.load(open('$W/one.json'))['problems']
assert [q['heads_kv'] for q in p] == [$hkv], p" >"$out" 2>&1 || fail "--heads-kv $hkv: not that problem alone"
  done
  ;;
passes)
  # the forward's space answered only by its own rows: the backward's alone leave the problem without rows
  "$T" tune $shape --pass bwd --strategy exhaustive --db "$W/b.db" >"$out" 2>&1 || fail "bwd tune exit $?"
  [ "$(q "$W/b.db" "SELECT count(*) FROM measurements WHERE pass = 'bwd'")" -gt 0 ] || fail "no bwd rows stored"
  "$T" replay --from "$W/b.db" $shape --strategy exhaustive --seeds 1 --partial >"$W/stdout.txt" 2>"$out"
  rc=$?
  cat "$W/stdout.txt" >>"$out"
  [ $rc -eq 1 ] && grep -q "heads=32 batch=8: skipped: no rows stored" "$W/stdout.txt" ||
    fail "exit $rc: the backward's rows replayed as the forward's"
  # with the forward's rows beside them, the forward's optimum and every one of its rows
  "$T" tune $shape --pass bwd --strategy exhaustive --db "$db" >"$out" 2>&1 || fail "bwd tune exit $?"
  $R --heads-kv 32 --json >"$W/f.json" 2>"$out" || fail "replay exit $?"
  python3 - "$W/f.json" "$(q "$db" "SELECT count(*) FROM measurements WHERE heads_kv = 32 AND pass = 'fwd'")" \
    "$(q "$db" "SELECT min(time_ms) FROM measurements WHERE heads_kv = 32 AND pass = 'fwd' AND status = 'ok'")" \
    >"$out" 2>&1 <<'PY' || fail "the forward's problem is not its rows'"
import json, sys
p = json.load(open(sys.argv[1]))["problems"]
print(p[0]["space"], p[0]["optimum_ms"], "stored:", sys.argv[2:])
assert len(p) == 1 and p[0]["space"] == int(sys.argv[2])
assert abs(p[0]["optimum_ms"] - float(sys.argv[3])) <= 1e-9 * float(sys.argv[3])
PY
  ;;
usage)
  for bad in "--heads-kv 3" "--heads-kv 0" "--heads-kv 64" "--heads-kv x" "--heads 4 --heads-kv 8"; do
    $R $bad >"$W/stdout.txt" 2>"$out"
    rc=$?
    [ $rc -eq 2 ] || fail "$bad: exit $rc, expected 2"
    [ "$(wc -l <"$out")" -eq 1 ] && grep -q -- "^attntune replay: --heads-kv" "$out" ||
      fail "$bad: not one line naming --heads-kv"
    [ ! -s "$W/stdout.txt" ] || fail "$bad: a report"
  done
  $R --heads-kv 3 2>"$out"
  grep -q -- "--heads-kv 3: the 32 query heads must be a whole multiple of it" "$out" || fail "the divisor's line"
  "$T" help replay >"$out" 2>&1 && grep -q -- "--heads-kv G" "$out" || fail "help replay lacks --heads-kv"
  ;;
*) echo "replay_gqa.sh: unknown case $case_" >&2; exit 2 ;;
esac
echo "replay_gqa $case_: ok"
