#!/bin/sh
# tune_bwd_gpu.sh ATTNTUNE WORKDIR: `attntune --gpu H100 --pass bwd` on a machine without that GPU ranks the CUDA
# backward's space (templates/flash_bwd.cu: Br and Bc apart, warps, stages) by the performance model and stores its
# rows (provenance model, pass bwd): a best per problem, every evaluation stored, and a rerun finds them all stored.
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
exit 0
