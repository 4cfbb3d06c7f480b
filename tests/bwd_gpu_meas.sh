#!/bin/sh
# bwd_gpu_meas.sh CASE ATTNTUNE WORKDIR BWD_GPU_MEAS: `attntune tune --pass bwd --gpu H100` on the fake driver posing
# as an H100 (ATTN_LIBCUDA, FAKE_LIBCUDA_NAME): the GPU present's backward is measured, not modelled.
#   fake:   the CLI measures (provenance measured, time the fake's 1 ms by events); the fake's kernels write nothing,
#           so every row is checked and stored wrong (error inf, the reason in its log) and the run says none ran
#           correctly (exit 1)
#   interp: the same tune in-process (bwd_gpu_meas tune; two configurations, the default and the finalist round)
#           with every checked launch on the PTX interpreter: rows ok, each with its real error against fp64
#           (non-zero, within f16's limit) and the fake's event time, one chosen row
#   sweep:  (nightly) the same over f32 and bf16, d = 40 with d_v = 24, n = 1 and 33 against 17 keys, 3 query heads on
#           one KV head, causal and not, with --nondeterministic's dq=atomic points: every row ok at 1 ms within the
#           dtype's limit, some dq=atomic, one chosen a problem
set -u
case_=$1 T=$2 W=$3 MEAS=$4
# shellcheck source-path=SCRIPTDIR source=sh_util.sh
. "$(dirname "$0")/sh_util.sh"
prob="--gpu H100 --pass bwd --d 64 --n 19 --n-kv 23 --heads 4 --heads-kv 2 --dtype f16 --causal 1"
case $case_ in
fake)
  # shellcheck disable=SC2086
  "$T" tune $prob --strategy random --budget 2 --reps 1 --time-cap 0.02 --db "$W/b.db" >"$out" 2>&1
  rc=$?
  if grep -q "NVRTC is not available" "$out"; then echo "SKIP (fake): NVRTC is not available"; exit 77; fi
  [ $rc -eq 1 ] || fail "tune exit $rc, want 1 (no configuration ran correctly)"
  grep -q "^H100 is present (NVIDIA H100 80GB HBM3, sm_90): measuring on the device" "$out" || fail "not measured"
  grep -q "^best bwd n=19 n_kv=23 d=64 f16 causal=1: none of 2 evaluated" "$out" || fail "no best line"
  [ "$(q "$W/b.db" "SELECT count(*) FROM measurements WHERE pass = 'bwd' AND provenance = 'measured' AND
       status = 'wrong' AND time_ms = 1.0 AND log LIKE 'gradients'' relative error inf exceeds%'")" -eq 2 ] ||
    fail "not two measured wrong rows of 1 ms"
  [ "$(q "$W/b.db" "SELECT count(*) FROM measurements WHERE provenance != 'measured' OR pass != 'bwd'")" -eq 0 ] ||
    fail "a model or forward row stored"
  ;;
interp)
  # shellcheck disable=SC2086
  "$MEAS" tune $prob --strategy random --budget 2 --reps 1 --time-cap 0.02 --db "$W/b.db" >"$out" 2>&1
  rc=$?
  [ $rc -eq 77 ] && { cat "$out"; exit 77; } # no NVRTC
  [ $rc -eq 0 ] || fail "tune exit $rc"
  grep -q "^best bwd n=19 n_kv=23 d=64 f16 causal=1: flash .*(measured, " "$out" || fail "no best line"
  grep -q "^launches on the interpreter: [1-9][0-9]* run, 0 failed" "$out" || fail "launches failed or none ran"
  # every row measured and checked: a real error within f16's limit, the time the fake's events'
  [ "$(q "$W/b.db" "SELECT count(*) FROM measurements WHERE pass = 'bwd' AND provenance = 'measured' AND
       status = 'ok' AND error > 0 AND error <= 1e-2 AND time_ms = 1.0")" -ge 2 ] || fail "not two ok rows"
  [ "$(q "$W/b.db" "SELECT count(*) FROM measurements WHERE NOT (status = 'ok' AND provenance = 'measured' AND
       error > 0 AND error <= 1e-2 AND time_ms = 1.0)")" -eq 0 ] || fail "a row not measured ok at 1 ms"
  [ "$(q "$W/b.db" "SELECT count(*) FROM kernels WHERE spec LIKE '%arch=sm_80%' OR spec NOT LIKE '%cuda%'")" -eq 0 ] ||
    fail "a kernel not the sm_90 device's"
  [ "$(q "$W/b.db" "SELECT count(*) FROM measurements WHERE chosen = 1")" -eq 1 ] || fail "not one chosen row"
  ;;
sweep)
  "$MEAS" tune --gpu H100 --pass bwd --nondeterministic --d 40 --dv 24 --n 1,33 --n-kv 17,17 --heads 3 --heads-kv 1 \
    --dtype f32,bf16 --causal 0,1 --strategy random --budget 3 --reps 1 --time-cap 0.02 --db "$W/b.db" >"$out" 2>&1
  rc=$?
  [ $rc -eq 77 ] && { cat "$out"; exit 77; }
  [ $rc -eq 0 ] || fail "tune exit $rc"
  grep -q "^launches on the interpreter: [1-9][0-9]* run, 0 failed" "$out" || fail "launches failed or none ran"
  [ "$(q "$W/b.db" "SELECT count(*) FROM measurements WHERE NOT (status = 'ok' AND provenance = 'measured' AND
       time_ms = 1.0 AND error > 0 AND error <= CASE dtype WHEN 'f32' THEN 1e-4 ELSE 1e-2 END)")" -eq 0 ] ||
    fail "a row not measured ok at 1 ms within its dtype's limit"
  [ "$(q "$W/b.db" "SELECT count(DISTINCT dtype || n || causal) FROM measurements WHERE chosen = 1")" -eq 8 ] ||
    fail "not a chosen row for each of the 8 problems"
  [ "$(q "$W/b.db" "SELECT count(*) FROM kernels WHERE spec LIKE '%dq=atomic%'")" -gt 0 ] || fail "no dq=atomic row"
  ;;
*)
  echo "unknown case $case_" >&2
  exit 2
  ;;
esac
exit 0
