#!/bin/sh
# tune_serve.sh CASE ATTNTUNE WORKDIR TUNE_SERVE_PLAN: `attntune --page-size` and `--varlen` end to end.
#   run:   a tiny paged decode (pages of 16, 37 keys: the last page part full) and a varlen batch (lengths 0, 1, odd,
#          no keys) tuned on the CPU: rows of variants paged=16 and varlen, each checked against fp64 and counted;
#          show, show --json, export, import and merge carry the variant; a plan made with page_size 16 (varlen 1) is
#          served its row and runs; the same shapes dense, with pages of 32, or paged at the varlen shape are not
#   usage: the layouts' bad arguments exit 2 with one line, before anything is stored
set -u
case_=$1 T=$2 W=$3 PLAN=${4:-}
# shellcheck source-path=SCRIPTDIR source=sh_util.sh
. "$(dirname "$0")/sh_util.sh"
# one configuration, the untuned default, shared by both problems and by the other tuner tests at d = 64: at most two
# compiles
default_only

case $case_ in
run)
  # shellcheck disable=SC2086
  "$T" --gpu cpu --d 64 --n 1 --n-kv 37 --heads 4 --batch 3 --page-size 16 $quick --db "$W/s.db" >"$out" 2>&1 ||
    fail "paged tune exit $?"
  grep -q "^best n=1 n_kv=37 d=64 paged=16 f32 causal=0: flash" "$out" || fail "no paged best line"
  # shellcheck disable=SC2086
  "$T" --gpu cpu --d 64 --varlen 0,1,33:40,7:0,64 --heads 4 $quick --db "$W/s.db" >"$out" 2>&1 ||
    fail "varlen tune exit $?"
  grep -q "^best n=64 d=64 varlen f32 causal=0: flash" "$out" || fail "no varlen best line"
  # the key: the variant, and --varlen's batch (5 sequences), n and n_kv (the longest)
  [ "$(q "$W/s.db" "SELECT count(*) FROM measurements WHERE variant = 'paged=16' AND status = 'ok' AND n = 1 AND
       n_kv = 37 AND batch = 3")" -ge 1 ] || fail "paged rows"
  [ "$(q "$W/s.db" "SELECT count(*) FROM measurements WHERE variant = 'varlen' AND status = 'ok' AND n = 64 AND
       n_kv = 64 AND batch = 5")" -ge 1 ] || fail "varlen rows"
  [ "$(q "$W/s.db" "SELECT count(*) FROM measurements WHERE variant = ''")" -eq 0 ] || fail "a dense row stored"
  # every row checked against fp64 (its error recorded and small) and counted
  [ "$(q "$W/s.db" "SELECT count(*) FROM measurements WHERE error IS NULL OR error > 1e-4 OR reads IS NULL OR
       reads <= 0")" -eq 0 ] || fail "a row without its check or its count"
  [ "$(q "$W/s.db" "SELECT count(*) FROM measurements WHERE chosen = 1 GROUP BY variant" | tr '\n' ' ')" = "1 1 " ] ||
    fail "not one chosen row per variant"
  # a rerun finds both stored
  # shellcheck disable=SC2086
  "$T" --gpu cpu --d 64 --varlen 0,1,33:40,7:0,64 --heads 4 $quick --db "$W/s.db" >"$out" 2>&1 || fail "rerun $?"
  grep -q "(0 stored now" "$out" || fail "a rerun measured again"
  # show, show --json, export, import and merge carry the variant
  "$T" show --db "$W/s.db" >"$out" 2>&1 || fail "show exit $?"
  grep -q "cpu f32 \[paged=16\]" "$out" && grep -q "cpu f32 \[varlen\]" "$out" || fail "show lacks a variant"
  "$T" show --json --db "$W/s.db" >"$out" 2>&1 || fail "show --json exit $?"
  grep -q '"variant": "paged=16"' "$out" && grep -q '"variant": "varlen"' "$out" || fail "show --json lacks a variant"
  n=$(q "$W/s.db" "SELECT count(*) FROM measurements")
  "$T" export "$W/s.json" --db "$W/s.db" >"$out" 2>&1 || fail "export exit $?"
  grep -q '"variant": "paged=16"' "$W/s.json" || fail "export lacks the variant"
  "$T" import "$W/s.json" --db "$W/i.db" >"$out" 2>&1 || fail "import exit $?"
  [ "$(q "$W/i.db" "SELECT count(*) FROM measurements WHERE variant IN ('paged=16', 'varlen')")" -eq "$n" ] ||
    fail "import lost variant rows"
  "$T" merge "$W/m.db" "$W/s.db" >"$out" 2>&1 || fail "merge exit $?"
  [ "$(q "$W/m.db" "SELECT count(*) FROM measurements WHERE variant IN ('paged=16', 'varlen')")" -eq "$n" ] ||
    fail "merge lost variant rows"
  # plans: DB D N N_KV HEADS BATCH CAUSAL PAGE_SIZE VARLEN
  for db in s i m; do
    "$PLAN" "$W/$db.db" 64 1 37 4 3 0 16 0 >"$out" 2>&1 || fail "paged plan ($db.db) exit $?"
    grep -q "^plan: flash d=64 .*(tuned)$" "$out" || fail "the paged plan is not served its row ($db.db)"
  done
  "$PLAN" "$W/s.db" 64 64 64 4 5 0 0 1 >"$out" 2>&1 || fail "varlen plan exit $?"
  grep -q "^plan: flash d=64 .*(tuned)$" "$out" || fail "the varlen plan is not served its row"
  # no row of another layout serves: dense, pages of 32, pages of 16 at the varlen row's shape (all the same
  # default kernel, compiled already)
  "$PLAN" "$W/s.db" 64 1 37 4 3 0 0 0 >"$out" 2>&1 || fail "dense plan exit $?"
  grep -q "^plan: .*(default" "$out" || fail "a paged row served a dense plan"
  "$PLAN" "$W/s.db" 64 1 37 4 3 0 32 0 >"$out" 2>&1 || fail "paged=32 plan exit $?"
  grep -q "^plan: .*(default" "$out" || fail "a paged=16 row served pages of 32"
  "$PLAN" "$W/s.db" 64 64 64 4 5 0 16 0 >"$out" 2>&1 || fail "paged n=64 plan exit $?"
  grep -q "^plan: .*(default" "$out" || fail "a varlen row served a paged plan"
  ;;
usage)
  for args in "--page-size 0" "--page-size x" "--page-size 16 --varlen 4" "--page-size 16 --pass bwd" \
              "--page-size 16 --algo lowrank --tolerance 0.1" "--varlen 4 --n 8" "--varlen 4 --batch 2" \
              "--varlen 4 --n-kv 8" "--varlen ''" "--varlen 4," "--varlen 4:" "--varlen -1" "--varlen 0:4,0" \
              "--varlen 4:0" "--varlen 4::5" "--varlen 1x" "--varlen 99999999"; do
    eval "set -- $args"
    "$T" --gpu cpu --d 16 "$@" --db "$W/u.db" >"$out" 2>&1
    rc=$?
    [ $rc -eq 2 ] || fail "$args: exit $rc, want 2"
    [ "$(wc -l <"$out")" -eq 1 ] || fail "$args: not one line"
  done
  "$T" --gpu A100 --d 64 --page-size 16 --algo smallcache --db "$W/u.db" >"$out" 2>&1
  [ $? -eq 2 ] && grep -q "CUDA smallcache has no paged or varlen kernel" "$out" || fail "--page-size on a GPU"
  [ ! -e "$W/u.db" ] || [ "$(q "$W/u.db" "SELECT count(*) FROM measurements")" -eq 0 ] || fail "a usage error stored"
  ;;
*)
  echo "unknown case $case_" >&2
  exit 2
  ;;
esac
exit 0
