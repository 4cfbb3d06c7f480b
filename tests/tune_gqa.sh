#!/bin/sh
# tune_gqa.sh CASE ATTNTUNE WORKDIR: `attntune tune --heads-kv G` (grouped-query attention) end to end.
#   run:   a GQA decode problem ranked by the model for an H100 and one measured on this CPU: their rows carry
#          heads_kv G, apart from the same problem's rows without it, and the CPU's were checked against fp64
#   usage: --heads-kv that does not divide --heads, or is out of range, exits 2 with one line, before anything is stored
set -u
case_=$1 T=$2 W=$3
# shellcheck source-path=SCRIPTDIR source=sh_util.sh
. "$(dirname "$0")/sh_util.sh"

case $case_ in
run)
  "$T" tune --gpu H100 --d 64 --n 1 --n-kv 4096 --heads 32 --heads-kv 8 --dtype f16 --db "$W/g.db" >"$out" 2>&1 ||
    fail "model tune exit $?"
  "$T" tune --gpu H100 --d 64 --n 1 --n-kv 4096 --heads 32 --dtype f16 --db "$W/g.db" >>"$out" 2>&1 ||
    fail "model tune (MHA) exit $?"
  [ "$(q "$W/g.db" "SELECT count(DISTINCT heads_kv) FROM measurements WHERE heads = 32")" -eq 2 ] ||
    fail "the GQA and MHA problems' rows are not apart"
  "$T" show --db "$W/g.db" --json >"$W/show.json" 2>>"$out" || fail "show exit $?"
  # the best row of each problem: one for 8 KV heads, one for 32
  [ "$(grep -o '"heads_kv": *[0-9]*' "$W/show.json" | tr -d ' ' | sort | tr '\n' ' ')" = '"heads_kv":32 "heads_kv":8 ' ] ||
    fail "show --json: not one best row for each of heads_kv 8 and 32"
  # measured: every configuration checked against the fp64 reference of the grouped problem
  "$T" tune --gpu cpu --d 64 --n 33 --n-kv 70 --heads 4 --heads-kv 2 --budget 1 --reps 1 --time-cap 0.02 \
    --db "$W/c.db" >>"$out" 2>&1 || fail "cpu tune exit $?"
  [ "$(q "$W/c.db" "SELECT count(*) FROM measurements WHERE heads = 4 AND heads_kv = 2 AND status = 'ok' AND
       error IS NOT NULL AND error < 1e-4")" -ge 1 ] || fail "no checked GQA row measured on the CPU"
  [ "$(q "$W/c.db" "SELECT count(*) FROM measurements WHERE heads_kv <> 2")" -eq 0 ] || fail "a row without heads_kv 2"
  ;;
usage)
  for bad in "--heads 4 --heads-kv 3" "--heads-kv 0" "--heads 8 --heads-kv 16" "--heads-kv x"; do
    # shellcheck disable=SC2086
    "$T" tune --gpu cpu --d 16 $bad --db "$W/u.db" >"$out" 2>&1
    rc=$?
    [ $rc -eq 2 ] || fail "$bad: exit $rc, expected 2"
    [ "$(wc -l <"$out")" -eq 1 ] && grep -q -- "--heads-kv" "$out" || fail "$bad: not one line naming --heads-kv"
    [ ! -e "$W/u.db" ] || fail "$bad: a database was made"
  done
  ;;
*) echo "tune_gqa.sh: unknown case $case_" >&2; exit 2 ;;
esac
echo "tune_gqa $case_: ok"
