#!/bin/sh
# tune_bwd_gpu.sh ATTNTUNE WORKDIR: `attntune --gpu H100 --pass bwd` on a machine without that GPU ranks the CUDA
# backward's space (templates/flash_bwd.cu: Br and Bc apart, warps, stages) by the performance model and stores its
# rows (provenance model, pass bwd): a best per problem, every evaluation stored, and a rerun finds them all stored.
# --nondeterministic adds dQ by atomics (dq=atomic) to that space, and is refused without a GPU's backward.
T=$1
W=$2
rm -rf "$W" && mkdir -p "$W" || exit 1
out=$W/out
fail() {
  echo "FAIL: $*"
  cat "$out"
  exit 1
}
"$T" --gpu H100 --model --pass bwd --d 64 --n 256 --heads 2 --dtype f16 --causal 0,1 --db "$W/m.db" >"$out" 2>&1 ||
  fail "exit $?"
for c in 0 1; do
  grep -q "^best bwd n=256 d=64 f16 causal=$c: flash d=64 Br=[0-9]* Bc=[0-9]* cuda f16 warps=[248] stages=[12] sm_90.*(model, [0-9]* evaluated)" "$out" ||
    fail "no model row for the backward at causal=$c"
done
stored=$(sed -n 's/^\([0-9]*\) evaluations (\([0-9]*\) stored now.*/\2/p' "$out")
[ -n "$stored" ] && [ "$stored" -gt 20 ] || fail "stored $stored rows"
"$T" --gpu H100 --model --pass bwd --d 64 --n 256 --heads 2 --dtype f16 --causal 0,1 --db "$W/m.db" >"$out" 2>&1 ||
  fail "rerun: exit $?"
grep -q "(0 stored now, $stored found stored)" "$out" || fail "the rerun did not find the $stored rows stored"
q() { sqlite3 "$1" "$2" 2>/dev/null || echo -1; }
[ "$(q "$W/m.db" "SELECT count(*) FROM kernels WHERE spec LIKE '%dq=atomic%'")" -eq 0 ] ||
  fail "a deterministic run stored dq=atomic kernels"
# --nondeterministic: the same space and each tile's atomic twin; the deterministic rows are found stored
"$T" --gpu H100 --model --pass bwd --nondeterministic --d 64 --n 256 --heads 2 --dtype f16 --causal 0 \
  --db "$W/m.db" >"$out" 2>&1 || fail "--nondeterministic: exit $?"
atomic=$(q "$W/m.db" "SELECT count(*) FROM measurements m JOIN kernels k ON k.id = m.kernel_id WHERE m.pass = 'bwd'
         AND m.causal = 0 AND k.spec LIKE '%dq=atomic%'")
det=$(q "$W/m.db" "SELECT count(*) FROM measurements m JOIN kernels k ON k.id = m.kernel_id WHERE m.pass = 'bwd'
      AND m.causal = 0 AND k.spec NOT LIKE '%dq=atomic%'")
[ "$atomic" -gt 0 ] && [ "$atomic" -le "$det" ] || fail "--nondeterministic: $atomic atomic rows beside $det"
grep -q "found stored" "$out" || fail "--nondeterministic: the deterministic rows were not found stored"
# a Lua strategy's copies of the space's tables keep dq: every atomic point evaluated once, none folded into its twin
"$T" --gpu H100 --model --pass bwd --nondeterministic --d 64 --n 256 --heads 2 --dtype f16 --causal 0 \
  --strategy "$(dirname "$0")/lua/copy_all.lua" --db "$W/lua.db" >"$out" 2>&1 || fail "copy_all.lua: exit $?"
[ "$(q "$W/lua.db" "SELECT count(*) FROM kernels WHERE spec LIKE '%dq=atomic%'")" -eq "$atomic" ] ||
  fail "copy_all.lua: not the $atomic dq=atomic kernels"
for bad in "--gpu cpu --pass bwd" "--gpu H100 --pass fwd" "--gpu H100"; do
  # shellcheck disable=SC2086
  "$T" $bad --nondeterministic --d 64 --n 256 --db "$W/bad.db" >"$out" 2>&1
  rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$out")" -eq 1 ] && grep -q -- "--nondeterministic" "$out" ||
    fail "$bad --nondeterministic: exit $rc, expected 2 and one line naming the option"
  [ ! -e "$W/bad.db" ] || fail "$bad --nondeterministic: a database was made"
done
exit 0
