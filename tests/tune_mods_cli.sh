#!/bin/sh
# tune_mods_cli.sh CASE ATTNTUNE WORKDIR TUNE_MODS_PLAN [FAKE_LIBCUDA]: `attntune tune --window W --softcap C --alibi`,
# the score modifiers tuned as problems of their own (rows of variant window=W, softcap=C, alibi, as
# attn_problem_variant writes them) and served to the plans made with them.
#   gpu:     ranked by the model for H100 (no GPU, nothing compiled): every row's kernel applies the window, the best
#            line and rows name the variant; on the fake driver named as an H100 a plan with window 256 is served
#            the best row, plans without the window, with another or with a cap are not; window, softcap and ALiBi
#            combined on GQA decode (smallcache left out with the reason, served only with all three); a window that
#            hides no key tunes the problem without one
#   cpu:     one tiny problem (the default configuration, window, softcap and ALiBi in one kernel) measured on the CPU:
#            checked against the fp64 reference that applies them, counted; a plan made for it afterwards describes
#            the row as tuned; without ALiBi or the window a plan is not served it; a rerun finds it stored
#   cpu_bwd: (nightly) the CPU backward with the three, its rows checked against the fp64 backward
#   usage:   bad modifiers and what cannot take them exit 2 with one line, before anything is stored
set -u
case_=$1 T=$2 W=$3 PLAN=$4 FAKE=${5:-}
# shellcheck source-path=SCRIPTDIR source=sh_util.sh
. "$(dirname "$0")/sh_util.sh"
# the CPU cases measure the untuned default only: one kernel and its counting build
default_only

# served DB D N N_KV HEADS HEADS_KV CAUSAL DTYPE WINDOW SOFTCAP ALIBI: the fake H100's choice into $out
served() {
  ATTN_LIBCUDA=$FAKE FAKE_LIBCUDA=cc=90 FAKE_LIBCUDA_NAME="NVIDIA H100 80GB HBM3" "$PLAN" cuda choose "$@" >"$out" 2>&1
}
# spec_of DB SQL_WHERE: the kernel text of the fastest ok row that matches
spec_of() {
  q "$1" "SELECT k.spec FROM measurements m JOIN kernels k ON k.id = m.kernel_id WHERE m.status = 'ok' AND $2
          ORDER BY m.time_ms, k.spec LIMIT 1"
}

case $case_ in
gpu)
  "$T" tune --gpu H100 --d 64 --n 4096 --causal 1 --dtype f16 --window 256 --db "$W/g.db" >"$out" 2>&1 ||
    fail "window tune exit $?"
  grep -q "^best n=4096 d=64 window=256 f16 causal=1: flash .* causal window: .*(model, " "$out" ||
    fail "no windowed best line"
  [ "$(q "$W/g.db" "SELECT count(*) FROM measurements WHERE variant = 'window=256' AND status = 'ok' AND
       provenance = 'model' AND n = 4096")" -ge 8 ] || fail "window rows"
  [ "$(q "$W/g.db" "SELECT count(*) FROM measurements WHERE variant <> 'window=256'")" -eq 0 ] ||
    fail "a row of another variant"
  # every kernel ranked applies the window (none of split-KV or impl=wgmma, which cannot)
  [ "$(q "$W/g.db" "SELECT count(*) FROM measurements m JOIN kernels k ON k.id = m.kernel_id WHERE
       k.spec NOT LIKE '% window=1' OR k.spec LIKE '%impl=wgmma%'")" -eq 0 ] || fail "a kernel without the window"
  best=$(spec_of "$W/g.db" "m.variant = 'window=256'")
  served "$W/g.db" 64 4096 4096 16 16 1 f16 256 0 0 || fail "window plan exit $?"
  grep -q "^choice: $best (model)$" "$out" || fail "the window=256 plan is not served the best row ($best)"
  for args in "0 0 0" "512 0 0" "256 50 0" "256 0 1"; do
    # shellcheck disable=SC2086
    served "$W/g.db" 64 4096 4096 16 16 1 f16 $args || fail "plan ($args) exit $?"
    grep -q "^choice: .* (default" "$out" || fail "a window=256 row served window, softcap, alibi = $args"
  done
  # all three on GQA decode: smallcache left out (CUDA smallcache applies none); no split-KV point (window)
  "$T" tune --gpu H100 --d 64 --n 1 --n-kv 8192 --heads 32 --heads-kv 8 --dtype f16 --window 1024 --softcap 50 \
    --alibi --algo flash,smallcache --db "$W/c.db" >"$out" 2>&1 || fail "combined tune exit $?"
  grep -q "^note: --algo smallcache is left out: smallcache on cuda applies no window" "$out" ||
    fail "no note on smallcache"
  grep -q "^best n=1 n_kv=8192 d=64 window=1024,softcap=50,alibi f16 causal=0: flash .* window softcap alibi: " \
    "$out" || fail "no combined best line"
  [ "$(q "$W/c.db" "SELECT count(*) FROM measurements WHERE variant = 'window=1024,softcap=50,alibi' AND
       status = 'ok' AND heads = 32 AND heads_kv = 8")" -ge 4 ] || fail "combined rows"
  [ "$(q "$W/c.db" "SELECT count(*) FROM measurements m JOIN kernels k ON k.id = m.kernel_id WHERE m.variant <>
       'window=1024,softcap=50,alibi' OR k.spec NOT LIKE '% window=1 softcap=1 alibi=1' OR k.spec NOT LIKE 'flash %'
       OR k.spec LIKE '% split=%'")" -eq 0 ] || fail "a row of another variant, algorithm or kernel"
  best=$(spec_of "$W/c.db" "1")
  served "$W/c.db" 64 1 8192 32 8 0 f16 1024 50 1 || fail "combined plan exit $?"
  grep -q "^choice: $best (model)$" "$out" || fail "the combined plan is not served the best row ($best)"
  for args in "1024 50 0" "1024 30 1" "0 50 1"; do
    # shellcheck disable=SC2086
    served "$W/c.db" 64 1 8192 32 8 0 f16 $args || fail "plan ($args) exit $?"
    grep -q "^choice: .* (default" "$out" || fail "a combined row served window, softcap, alibi = $args"
  done
  # a window that hides no key (n = n_kv = 128 < 256): the problem without one, as its plans are
  "$T" tune --gpu H100 --d 64 --n 128 --dtype f16 --window 256 --db "$W/h.db" >"$out" 2>&1 || fail "n=128 exit $?"
  grep -q "^note: --window 256 hides no key at n=128 n_kv=128 causal=0" "$out" || fail "no note on the window"
  grep -q "^best n=128 d=64 f16 causal=0: " "$out" || fail "no dense best line"
  [ "$(q "$W/h.db" "SELECT count(*) FROM measurements WHERE variant = '' AND status = 'ok'")" -ge 1 ] &&
    [ "$(q "$W/h.db" "SELECT count(*) FROM measurements WHERE variant <> ''")" -eq 0 ] || fail "n=128 rows"
  served "$W/h.db" 64 128 128 16 16 0 f16 256 0 0 || fail "n=128 plan exit $?"
  grep -q "^choice: .* (model[;)]" "$out" || fail "the n=128 plan with the window is not served the row"
  ;;
cpu)
  mods="--gpu cpu --d 16 --n 37 --n-kv 45 --heads 3 --causal 1 --window 7 --softcap 5 --alibi"
  # shellcheck disable=SC2086
  "$T" tune $mods $quick --db "$W/s.db" >"$out" 2>&1 || fail "cpu tune exit $?"
  grep -q "^best n=37 n_kv=45 d=16 window=7,softcap=5,alibi f32 causal=1: flash .* causal window softcap alibi: " \
    "$out" || fail "no best line"
  # checked against the fp64 reference with the modifiers (a kernel without them is off by far more) and counted
  [ "$(q "$W/s.db" "SELECT count(*) FROM measurements m JOIN kernels k ON k.id = m.kernel_id WHERE
       m.variant = 'window=7,softcap=5,alibi' AND m.status = 'ok' AND m.error < 1e-4 AND m.reads > 0 AND
       m.provenance = 'measured' AND k.spec LIKE '% window=1 softcap=1 alibi=1'")" -eq 1 ] || fail "the row"
  [ "$(q "$W/s.db" "SELECT count(*) FROM measurements WHERE variant <> 'window=7,softcap=5,alibi'")" -eq 0 ] ||
    fail "a row of another variant"
  "$PLAN" cpu create "$W/s.db" 16 37 45 3 3 1 f32 7 5 1 >"$out" 2>&1 || fail "plan exit $?"
  grep -q "^plan: flash d=16 .*causal window softcap alibi (tuned)$" "$out" || fail "the plan is not served its row"
  for args in "7 5 0" "0 5 1" "7 0 1" "8 5 1"; do
    # shellcheck disable=SC2086
    "$PLAN" cpu choose "$W/s.db" 16 37 45 3 3 1 f32 $args >"$out" 2>&1 || fail "plan ($args) exit $?"
    grep -q "^choice: .* (default" "$out" || fail "the row served window, softcap, alibi = $args"
  done
  # shellcheck disable=SC2086
  "$T" tune $mods $quick --db "$W/s.db" >"$out" 2>&1 || fail "rerun exit $?"
  grep -q "(0 stored now, 1 found stored)" "$out" || fail "a rerun measured again"
  ;;
cpu_bwd)
  # shellcheck disable=SC2086
  "$T" tune --gpu cpu --d 16 --n 37 --n-kv 45 --heads 3 --causal 1 --window 7 --softcap 5 --alibi --pass bwd $quick \
    --db "$W/b.db" >"$out" 2>&1 || fail "backward tune exit $?"
  grep -q "^best bwd n=37 n_kv=45 d=16 window=7,softcap=5,alibi f32 causal=1: flash " "$out" || fail "no best line"
  [ "$(q "$W/b.db" "SELECT count(*) FROM measurements m JOIN kernels k ON k.id = m.kernel_id WHERE m.pass = 'bwd'
       AND m.variant = 'window=7,softcap=5,alibi' AND m.status = 'ok' AND m.error < 1e-4 AND
       k.spec LIKE '% window=1 softcap=1 alibi=1'")" -ge 1 ] || fail "backward rows"
  [ "$(q "$W/b.db" "SELECT count(*) FROM measurements WHERE status <> 'ok'")" -eq 0 ] || fail "a failed row"
  ;;
usage)
  for args in "--window 0" "--window -3" "--window x" "--window 2.5" "--window ''" "--softcap 0" "--softcap -1" \
              "--softcap nan" "--softcap inf" "--softcap 1e39" "--softcap 1e-50" "--softcap 5x" \
              "--window 16 --algo lowrank --tolerance 0.1" "--alibi --gpu H100 --pass bwd" \
              "--softcap 30 --gpu A100 --algo smallcache" "--window 8 --gpu H100 --pass fwd,bwd --model"; do
    eval "set -- $args"
    "$T" tune --gpu cpu --d 16 "$@" --db "$W/u.db" >"$out" 2>&1
    rc=$?
    [ $rc -eq 2 ] || fail "$args: exit $rc, want 2"
    [ "$(wc -l <"$out")" -eq 1 ] || fail "$args: not one line"
  done
  "$T" tune --gpu H100 --d 64 --window 16 --pass bwd --db "$W/u.db" >"$out" 2>&1
  grep -q "the CUDA backward applies no window, softcap or ALiBi" "$out" || fail "the backward's reason"
  "$T" tune --gpu cpu --d 16 --alibi --algo lowrank --tolerance 0.1 --db "$W/u.db" >"$out" 2>&1
  grep -q "lowrank cannot apply window, softcap or alibi" "$out" || fail "lowrank's reason"
  [ ! -e "$W/u.db" ] || [ "$(q "$W/u.db" "SELECT count(*) FROM measurements")" -eq 0 ] || fail "a usage error stored"
  ;;
*)
  echo "unknown case $case_" >&2
  exit 2
  ;;
esac
exit 0
