#!/bin/sh
# serve_gpu.sh CASE ATTNTUNE WORKDIR SERVE_GPU_PLAN FAKE_LIBCUDA: `attntune tune --gpu NAME --page-size P` and
# `--varlen LENS` ranked by the performance model (no GPU, no compiler: seconds).
#   run:   rows of variants paged=16 and varlen (provenance model) for H100; the model sees the layouts: pages of one
#          token cost more than pages of 64 (page runs), and a varlen batch of one long and three one-token
#          sequences less than half of four long ones (query tiles per sequence, not the longest's); on the fake
#          driver named as an H100 a CUDA plan made with page_size 16 (varlen 1) is served its row, and dense plans,
#          pages of 32 and the other layout are not
#   usage: what still cannot be done exits 2 with one line, before anything is stored
set -u
case_=$1 T=$2 W=$3 PLAN=$4 FAKE=$5
rm -rf "$W"
mkdir -p "$W"
out=$W/out.txt
fail() { echo "FAIL ($case_): $*" >&2; echo "--- output:" >&2; cat "$out" >&2; exit 1; }
q() { sqlite3 "$1" "$2" 2>/dev/null || echo -1; }
# the fastest ok row's time of a database (the model's best)
best() { q "$1" "SELECT min(time_ms) FROM measurements WHERE status = 'ok'"; }
# is $2 > $3 * $4 (awk: floating point)
gt() { awk -v a="$1" -v b="$2" -v f="$3" 'BEGIN { exit !(a > b * f) }'; }

case $case_ in
run)
  paged="--gpu H100 --d 64 --n 1 --n-kv 4096 --heads 8 --batch 64 --dtype f16"
  # shellcheck disable=SC2086
  "$T" tune $paged --page-size 16 --db "$W/s.db" >"$out" 2>&1 || fail "paged tune exit $?"
  grep -q "^note: --page-size on H100: .*performance model" "$out" || fail "no note on the model"
  grep -q "^best n=1 n_kv=4096 d=64 paged=16 f16 causal=0: flash .*(model, " "$out" || fail "no paged best line"
  varlen="--gpu H100 --d 64 --causal 1 --dtype f16"
  # shellcheck disable=SC2086
  "$T" tune $varlen --varlen 1024,1,1,1 --db "$W/s.db" >"$out" 2>&1 || fail "varlen tune exit $?"
  grep -q "^best n=1024 d=64 varlen f16 causal=1: flash .*(model, " "$out" || fail "no varlen best line"
  [ "$(q "$W/s.db" "SELECT count(*) FROM measurements WHERE variant = 'paged=16' AND status = 'ok' AND
       provenance = 'model' AND n = 1 AND n_kv = 4096 AND batch = 64 AND bound IS NOT NULL")" -ge 1 ] ||
    fail "paged rows"
  [ "$(q "$W/s.db" "SELECT count(*) FROM measurements WHERE variant = 'varlen' AND status = 'ok' AND
       provenance = 'model' AND n = 1024 AND batch = 4")" -ge 1 ] || fail "varlen rows"
  [ "$(q "$W/s.db" "SELECT count(*) FROM measurements WHERE variant = ''")" -eq 0 ] || fail "a dense row stored"
  # the layouts' own kernels: the Hopper template has none (its rows invalid, with the reason)
  [ "$(q "$W/s.db" "SELECT count(*) FROM measurements WHERE status = 'invalid' AND log LIKE '%wgmma%no paged%'")" \
    -ge 1 ] || fail "an impl=wgmma row ranked for pages"
  # the model sees the layouts
  # shellcheck disable=SC2086
  "$T" tune $paged --page-size 1 --db "$W/p1.db" >"$out" 2>&1 || fail "pages of 1: exit $?"
  # shellcheck disable=SC2086
  "$T" tune $paged --page-size 64 --db "$W/p64.db" >"$out" 2>&1 || fail "pages of 64: exit $?"
  gt "$(best "$W/p1.db")" "$(best "$W/p64.db")" 1.05 ||
    fail "pages of 1 ($(best "$W/p1.db") ms) not slower than pages of 64 ($(best "$W/p64.db") ms)"
  # shellcheck disable=SC2086
  "$T" tune $varlen --varlen 1024,1024,1024,1024 --db "$W/v4.db" >"$out" 2>&1 || fail "varlen x4: exit $?"
  gt "$(best "$W/v4.db")" "$(best "$W/s.db" | head -1)" 0 || fail "no varlen time"
  v1=$(q "$W/s.db" "SELECT min(time_ms) FROM measurements WHERE status = 'ok' AND variant = 'varlen'")
  gt "$(best "$W/v4.db")" "$v1" 2 || fail "1024,1,1,1 ($v1 ms) is not under half of 1024 x 4 ($(best "$W/v4.db") ms)"
  # served to CUDA plans on the fake driver named as an H100: DB D N N_KV HEADS BATCH CAUSAL DTYPE PAGE_SIZE VARLEN
  served() {
    ATTN_LIBCUDA=$FAKE FAKE_LIBCUDA=cc=90 FAKE_LIBCUDA_NAME="NVIDIA H100 80GB HBM3" "$PLAN" "$W/s.db" "$@" >"$out" 2>&1
  }
  served 64 1 4096 8 64 0 f16 16 0 || fail "paged plan exit $?"
  grep -q "^device: H100$" "$out" || fail "the fake driver is not an H100"
  spec=$(sed -n 's/^plan: \(.*\) (model)$/\1/p' "$out")
  [ -n "$spec" ] || fail "the paged plan is not served a model row"
  [ "$(q "$W/s.db" "SELECT count(*) FROM measurements m JOIN kernels k ON k.id = m.kernel_id WHERE
       m.variant = 'paged=16' AND k.spec = '$spec' AND m.time_ms = (SELECT min(time_ms) FROM measurements WHERE
       variant = 'paged=16' AND status = 'ok')")" -ge 1 ] || fail "the paged plan's row ($spec) is not the best"
  served 64 1024 1024 16 4 1 f16 0 1 || fail "varlen plan exit $?"
  grep -q "^plan: .* (model)$" "$out" || fail "the varlen plan is not served its row"
  served 64 1 4096 8 64 0 f16 0 0 || fail "dense plan exit $?"
  grep -q "^plan: .* (default" "$out" || fail "a paged row served a dense plan"
  served 64 1 4096 8 64 0 f16 32 0 || fail "paged=32 plan exit $?"
  grep -q "^plan: .* (default" "$out" || fail "a paged=16 row served pages of 32"
  served 64 1024 1024 16 4 1 f16 16 0 || fail "paged plan at the varlen shape exit $?"
  grep -q "^plan: .* (default" "$out" || fail "a varlen row served a paged plan"
  ;;
usage)
  for args in "--page-size 16 --pass bwd" "--varlen 4,9 --pass fwd,bwd" "--page-size 16 --algo smallcache" \
              "--varlen 4 --algo flash,smallcache" "--page-size 16 --varlen 4"; do
    eval "set -- $args"
    "$T" tune --gpu H100 --d 64 "$@" --db "$W/u.db" >"$out" 2>&1
    rc=$?
    [ $rc -eq 2 ] || fail "$args: exit $rc, want 2"
    [ "$(wc -l <"$out")" -eq 1 ] || fail "$args: not one line"
  done
  "$T" tune --gpu H100 --d 64 --page-size 16 --algo smallcache --db "$W/u.db" >"$out" 2>&1
  grep -q "CUDA smallcache has no paged or varlen kernel" "$out" || fail "smallcache's reason"
  "$T" tune --gpu H100 --d 64 --page-size 16 --pass bwd --db "$W/u.db" >"$out" 2>&1
  grep -q "no backward" "$out" || fail "the backward's reason"
  [ ! -e "$W/u.db" ] || [ "$(q "$W/u.db" "SELECT count(*) FROM measurements")" -eq 0 ] || fail "a usage error stored"
  ;;
*)
  echo "unknown case $case_" >&2
  exit 2
  ;;
esac
exit 0
