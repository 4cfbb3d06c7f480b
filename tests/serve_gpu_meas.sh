#!/bin/sh
# serve_gpu_meas.sh CASE ATTNTUNE WORKDIR SERVE_GPU_MEAS: `attntune tune --gpu H100 --page-size P` and `--varlen LENS`
# on the fake driver posing as an H100 (ATTN_LIBCUDA, FAKE_LIBCUDA_NAME): the GPU present is measured.
#   fake:   the CLI measures the layouts on the device (provenance measured); the fake's kernels write nothing, so each
#           row is checked and stored wrong (error inf, the reason in its log), and the run says none ran correctly
#   interp: the same tune runs in-process (serve_gpu_meas tune; two configurations and the default each) with every
#           layout launch on the PTX interpreter: rows ok, each with its real error against fp64 (non-zero, within
#           f16's limit) and a time, impl=wgmma rows invalid with the reason, one chosen row per layout
set -u
case_=$1 T=$2 W=$3 MEAS=$4
# shellcheck source-path=SCRIPTDIR source=sh_util.sh
. "$(dirname "$0")/sh_util.sh"
default_only
paged="--gpu H100 --d 64 --n 1 --n-kv 13 --heads 4 --heads-kv 2 --batch 2 --dtype f16 --causal 0 --page-size 8"
varlen="--gpu H100 --d 64 --heads 2 --heads-kv 1 --dtype f16 --causal 1 --varlen 1,7:9,3:0,0:5"

case $case_ in
fake)
  # shellcheck disable=SC2086
  "$T" tune $paged $quick --db "$W/s.db" >"$out" 2>&1
  rc=$?
  # the layout's kernel neither cached nor compiled: a skip, not the check that fails on the kernel's output
  if grep -q "NVRTC is not available" "$out"; then echo "SKIP (fake): NVRTC is not available"; exit 77; fi
  [ $rc -eq 1 ] || fail "paged tune exit $rc, want 1 (no configuration ran correctly)"
  grep -q "^H100 is present (NVIDIA H100 80GB HBM3, sm_90): measuring on the device" "$out" || fail "not measured"
  grep -q "^best n=1 n_kv=13 d=64 paged=8 f16 causal=0: none of 1 evaluated" "$out" || fail "no paged best line"
  # shellcheck disable=SC2086
  "$T" tune $varlen $quick --db "$W/s.db" >"$out" 2>&1
  rc=$?
  if grep -q "NVRTC is not available" "$out"; then echo "SKIP (fake): NVRTC is not available"; exit 77; fi
  [ $rc -eq 1 ] || fail "varlen tune exit $rc, want 1"
  grep -q "^best n=7 n_kv=9 d=64 varlen f16 causal=1: none of 1 evaluated" "$out" || fail "no varlen best line"
  [ "$(q "$W/s.db" "SELECT count(*) FROM measurements WHERE provenance = 'measured' AND status = 'wrong' AND
       log LIKE 'relative error inf exceeds%' AND ((variant = 'paged=8' AND batch = 2) OR (variant = 'varlen' AND
       batch = 4))")" -eq 2 ] || fail "not one measured wrong row per layout"
  [ "$(q "$W/s.db" "SELECT count(*) FROM measurements WHERE provenance != 'measured' OR variant = ''")" -eq 0 ] ||
    fail "a model or dense row stored"
  ;;
interp)
  # shellcheck disable=SC2086
  "$MEAS" tune $paged --strategy random --budget 2 --reps 1 --time-cap 0.02 --db "$W/s.db" >"$out" 2>&1
  rc=$?
  [ $rc -eq 77 ] && { cat "$out"; exit 77; } # no NVRTC
  [ $rc -eq 0 ] || fail "paged tune exit $rc"
  grep -q "^best n=1 n_kv=13 d=64 paged=8 f16 causal=0: flash .*(measured, " "$out" || fail "no paged best line"
  grep -q "^launches on the interpreter: [1-9][0-9]* run, 0 failed" "$out" || fail "launches failed or none ran"
  # shellcheck disable=SC2086
  "$MEAS" tune $varlen --strategy random --budget 2 --reps 1 --time-cap 0.02 --db "$W/s.db" >"$out" 2>&1 ||
    fail "varlen tune exit $?"
  grep -q "^best n=7 n_kv=9 d=64 varlen f16 causal=1: flash .*(measured, " "$out" || fail "no varlen best line"
  grep -q "^launches on the interpreter: [1-9][0-9]* run, 0 failed" "$out" || fail "varlen launches failed"
  # the untuned default is measured as the device's point (sm_90), as the space's are, not as sm_80
  [ "$(q "$W/s.db" "SELECT count(*) FROM kernels WHERE spec LIKE '%arch=sm_80%'")" -eq 0 ] ||
    fail "a kernel keyed sm_80 measured on the sm_90 device"
  # every ok row checked: a real error within f16's limit, and a time
  [ "$(q "$W/s.db" "SELECT count(*) FROM measurements WHERE status = 'ok' AND provenance = 'measured' AND
       error > 0 AND error <= 1e-2 AND time_ms > 0 AND variant = 'paged=8'")" -ge 1 ] || fail "no ok paged row"
  [ "$(q "$W/s.db" "SELECT count(*) FROM measurements WHERE status = 'ok' AND provenance = 'measured' AND
       error > 0 AND error <= 1e-2 AND time_ms > 0 AND variant = 'varlen'")" -ge 1 ] || fail "no ok varlen row"
  [ "$(q "$W/s.db" "SELECT count(*) FROM measurements WHERE status = 'invalid' AND log NOT LIKE '%wgmma%no %kernel%'")" \
    -eq 0 ] || fail "a row invalid for another reason than impl=wgmma's"
  [ "$(q "$W/s.db" "SELECT count(*) FROM measurements WHERE status = 'ok' AND NOT (error > 0 AND error <= 1e-2)")" \
    -eq 0 ] || fail "an ok row without its check"
  [ "$(q "$W/s.db" "SELECT count(*) FROM measurements WHERE chosen = 1 GROUP BY variant" | tr '\n' ' ')" = "1 1 " ] ||
    fail "not one chosen row per layout"
  ;;
*)
  echo "unknown case $case_" >&2
  exit 2
  ;;
esac
exit 0
