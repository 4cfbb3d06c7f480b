#!/bin/sh
# sm90_tune.sh ATTNTUNE WORKDIR: `attntune tune --gpu H100 --model` ranks flash_sm90.cu's configurations (impl=wgmma)
# beside flash.cu's and stores them with provenance model; an sm_80 GPU's space (A100) has none.
set -u
T=$1 W=$2
rm -rf "$W"
mkdir -p "$W"
out=$W/out.txt
fail() { echo "FAIL: $*" >&2; echo "--- output:" >&2; cat "$out" >&2; exit 1; }
q() { sqlite3 "$1" "$2" 2>/dev/null || echo -1; }
rows="SELECT count(*) FROM measurements m JOIN kernels k ON k.id = m.kernel_id WHERE m.status = 'ok' AND"
"$T" tune --gpu H100 --model --d 128 --dtype bf16 --causal 1 --n 2048 --db "$W/h100.db" >"$out" 2>&1 ||
  fail "tune --gpu H100 --model failed"
w=$(q "$W/h100.db" "$rows k.spec LIKE '% impl=wgmma%' AND m.provenance = 'model'")
o=$(q "$W/h100.db" "$rows k.spec NOT LIKE '% impl=wgmma%' AND m.provenance = 'model'")
x=$(q "$W/h100.db" "SELECT count(*) FROM measurements WHERE provenance <> 'model'")
[ "$w" -gt 0 ] && [ "$o" -gt 0 ] && [ "$x" = 0 ] ||
  fail "H100 rows: $w wgmma and $o mma.sync of provenance model (want both > 0), $x others (want 0)"
# ranked by tuner/model_sm90.c (its registers: setmaxnreg's, 168 for every configuration), not flash.cu's model
l=$(q "$W/h100.db" "$rows k.spec LIKE '% impl=wgmma%' AND m.log <> '168 registers estimated'")
[ "$l" = 0 ] || fail "$l impl=wgmma rows not ranked by the Hopper template's model"
"$T" tune --gpu A100 --model --d 128 --dtype bf16 --causal 1 --n 2048 --db "$W/a100.db" >"$out" 2>&1 ||
  fail "tune --gpu A100 --model failed"
a=$(q "$W/a100.db" "$rows k.spec LIKE '% impl=wgmma%'")
grep -q 'wgmma' "$out" && fail "A100 (sm_80) ranked an impl=wgmma configuration"
[ "$a" = 0 ] || fail "A100: $a impl=wgmma rows stored"
echo "ok: H100 $w wgmma and $o mma.sync model rows; A100 none"
