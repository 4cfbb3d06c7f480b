#!/bin/sh
# tune_pass.sh CASE ATTNTUNE WORKDIR TUNER_BWD_PLAN: `attntune --pass fwd,bwd` end to end (one CTest entry per case).
#   run:   one tiny CPU problem, both passes: rows of each pass stored apart, the runtime's backward plan is the tuned
#          row and a database without backward rows serves the default; show, export, import and merge carry the pass
#   usage: bad --pass values exit 2 with one line, before anything is stored (the backward on a GPU: tune_bwd_gpu.sh)
set -u
case_=$1 T=$2 W=$3 PLAN=${4:-}
# shellcheck source-path=SCRIPTDIR source=sh_util.sh
. "$(dirname "$0")/sh_util.sh"

case $case_ in
run)
  "$T" --gpu cpu --d 64 --n 128 --pass fwd,bwd --budget 1 --reps 1 --time-cap 0.02 --db "$W/p.db" >"$out" 2>&1 ||
    fail "tune exit $?"
  grep -q "^best n=128 d=64 f32 causal=0: flash" "$out" || fail "no forward best line"
  grep -q "^best bwd n=128 d=64 f32 causal=0: flash" "$out" || fail "no backward best line"
  [ "$(q "$W/p.db" "SELECT count(*) FROM measurements WHERE pass = 'fwd' AND status = 'ok'")" -ge 1 ] || fail "fwd rows"
  [ "$(q "$W/p.db" "SELECT count(*) FROM measurements WHERE pass = 'bwd' AND status = 'ok'")" -ge 1 ] || fail "bwd rows"
  [ "$(q "$W/p.db" "SELECT count(*) FROM measurements WHERE chosen = 1 GROUP BY pass" | tr '\n' ' ')" = "1 1 " ] ||
    fail "not one chosen row per pass"
  # every backward row was checked against the fp64 backward (its error recorded) and counted
  [ "$(q "$W/p.db" "SELECT count(*) FROM measurements WHERE pass = 'bwd' AND (error IS NULL OR error > 1e-4 OR
       reads IS NULL OR writes IS NULL)")" -eq 0 ] || fail "a bwd row without its check or its count"
  # the backward's rows are of its template (no forward-only tunables) and its default is 64 x 64
  [ "$(q "$W/p.db" "SELECT count(*) FROM measurements m JOIN kernels k ON k.id = m.kernel_id WHERE pass = 'bwd' AND
       (k.spec LIKE '% unroll=4%' OR k.spec LIKE '% split=%')")" -eq 0 ] || fail "a forward tunable in a bwd row"
  [ "$(q "$W/p.db" "SELECT count(*) FROM measurements m JOIN kernels k ON k.id = m.kernel_id WHERE pass = 'bwd' AND
       is_default = 1 AND k.spec LIKE '% br=64 bc=64 %'")" -eq 1 ] || fail "the backward's default row"
  "$PLAN" "$W/p.db" 64 128 2 >"$out" 2>&1 || fail "the backward plan is not the tuned one (exit $?)"
  grep -q "^forward: flash .*(tuned)" "$out" || fail "the forward plan is not tuned"
  # a rerun finds both passes stored
  "$T" --gpu cpu --d 64 --n 128 --pass fwd,bwd --budget 1 --reps 1 --time-cap 0.02 --db "$W/p.db" >"$out" 2>&1 ||
    fail "rerun exit $?"
  grep -q "(0 stored now" "$out" || fail "a rerun measured again"
  # show and show --json carry the pass
  "$T" show --db "$W/p.db" >"$out" 2>&1 || fail "show exit $?"
  [ "$(grep -c " backward " "$out")" -eq 1 ] && [ "$(grep -c "^cpu:" "$out")" -eq 2 ] || fail "show: a row per pass"
  "$T" show --json --db "$W/p.db" >"$out" 2>&1 || fail "show --json exit $?"
  grep -q '"pass": "bwd"' "$out" && grep -q '"pass": "fwd"' "$out" && grep -q '"variant": ""' "$out" ||
    fail "show --json lacks pass or variant"
  # export -> import, and merge, keep the backward's rows as backward
  n=$(q "$W/p.db" "SELECT count(*) FROM measurements WHERE pass = 'bwd'")
  "$T" export "$W/p.json" --db "$W/p.db" >"$out" 2>&1 || fail "export exit $?"
  grep -q '"pass": "bwd"' "$W/p.json" || fail "export lacks pass"
  "$T" import "$W/p.json" --db "$W/i.db" >"$out" 2>&1 || fail "import exit $?"
  [ "$(q "$W/i.db" "SELECT count(*) FROM measurements WHERE pass = 'bwd'")" -eq "$n" ] || fail "import lost bwd rows"
  "$T" merge "$W/m.db" "$W/p.db" >"$out" 2>&1 || fail "merge exit $?"
  [ "$(q "$W/m.db" "SELECT count(*) FROM measurements WHERE pass = 'bwd'")" -eq "$n" ] || fail "merge lost bwd rows"
  "$PLAN" "$W/m.db" 64 128 2 >"$out" 2>&1 || fail "the merged database does not serve the backward (exit $?)"
  # without backward rows the forward's never serve it: the default does, and says so
  "$T" merge "$W/f.db" "$W/p.db" >"$out" 2>&1 || fail "merge exit $?"
  sqlite3 "$W/f.db" "DELETE FROM measurements WHERE pass = 'bwd'" || fail "sqlite3"
  "$PLAN" "$W/f.db" 64 128 2 >"$out" 2>&1
  [ $? -eq 3 ] && grep -q "^backward: .* backward (default)" "$out" && grep -q "^forward: .*(tuned)" "$out" ||
    fail "a forward row served the backward"
  ;;
usage)
  for v in sideways "fwd,up" "" ","; do
    "$T" --gpu cpu --d 64 --n 128 --pass "$v" --db "$W/u.db" >"$out" 2>&1
    [ $? -eq 2 ] && [ "$(wc -l <"$out")" -eq 1 ] && grep -q "^attntune tune: --pass: unknown pass" "$out" ||
      fail "--pass '$v'"
  done
  "$T" --gpu cpu --d 16 --pass >"$out" 2>&1
  [ $? -eq 2 ] && grep -q "needs a value" "$out" || fail "--pass without a value"
  [ ! -e "$W/u.db" ] || fail "a usage error made a database"
  "$T" tune --help >"$out" 2>&1 && grep -q -- "--pass fwd,bwd" "$out" || fail "--help lacks --pass"
  ;;
*)
  echo "unknown case $case_" >&2
  exit 2
  ;;
esac
exit 0
