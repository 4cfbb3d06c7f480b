#!/bin/sh
# replay.sh CASE ATTNTUNE WORKDIR: `attntune replay` against a fixture of whole spaces stored by the performance
# model (--model: no compiling, no timing, even where the GPU is present; the fixture takes a fraction of a second).
set -u
case_=$1 T=$2 W=$3
rm -rf "$W"
mkdir -p "$W"
out=$W/out.txt
fail() { echo "FAIL ($case_): $*" >&2; echo "--- output:" >&2; cat "$out" >&2; exit 1; }
# exit status $1 and exactly one line on stderr naming $2, for the command after them
expect() {
  want=$1 text=$2
  shift 2
  "$@" >"$W/stdout.txt" 2>"$out"
  rc=$?
  [ "$rc" -eq "$want" ] || fail "exit $rc, expected $want: $*"
  [ "$(wc -l <"$out")" -eq 1 ] || fail "not one line on stderr: $*"
  grep -q -- "$text" "$out" || fail "stderr does not say '$text': $*"
}
full=$W/full.db
"$T" --gpu A100 --model --d 64 --n 1024 --dtype f16 --strategy exhaustive --db "$full" >"$out" 2>&1 ||
  fail "fixture exit $?"
size=$(sqlite3 "$full" "SELECT COUNT(*) FROM measurements WHERE provenance = 'model'")
[ "$size" -gt 4 ] || fail "fixture has $size rows"
R="$T replay --from $full --gpu A100 --d 64 --dtype f16"

case $case_ in
same)  # two strategies, one seed, twice: byte-identical reports, text and JSON; another seed differs
  $R --strategy random --strategy anneal --seeds 1 >"$W/a.txt" 2>"$out" || fail "exit $?"
  $R --strategy random --strategy anneal --seeds 1 >"$W/b.txt" 2>"$out" || fail "exit $?"
  cmp "$W/a.txt" "$W/b.txt" >/dev/null || fail "two replays differ"
  grep -q "A100 model n=1024 d=64 f16 causal=0 heads=16 batch=1: $size configurations" "$W/a.txt" || fail "header"
  grep -q "^  to 5%" "$W/a.txt" && grep -q "^  to 1%" "$W/a.txt" || fail "no evaluations-to rows"
  $R --strategy random --strategy anneal --seeds 3 --json --plot "$W/c.svg" >"$W/c.json" 2>"$out" || fail "exit $?"
  $R --strategy random --strategy anneal --seeds 3 --json --plot "$W/d.svg" >"$W/d.json" 2>"$out" || fail "exit $?"
  cmp "$W/c.json" "$W/d.json" >/dev/null && cmp "$W/c.svg" "$W/d.svg" >/dev/null || fail "JSON or plot differ"
  grep -q '"evals_to_5pct"' "$W/c.json" && grep -q '"strategy": "anneal"' "$W/c.json" || fail "JSON fields"
  grep -q '^<svg' "$W/c.svg" && [ "$(grep -c '<polyline' "$W/c.svg")" -eq 2 ] || fail "plot: not two curves"
  # the seed reaches the strategy: 8 seeds of random search do not all take the same path
  $R --strategy random --seeds 8 --budget 1 --json >"$W/e.json" 2>"$out" || fail "exit $?"
  python3 -c "
import json, sys
s = json.load(open('$W/e.json'))['problems'][0]['strategies'][0]
sys.exit(0 if s['q1'][0] != s['q3'][0] else 1)" || fail "random search: the same first pick for every seed"
  ;;
optimum)  # exhaustive over the whole space reaches the optimum exactly at the space's size, never before 1.0
  $R --strategy exhaustive --seeds 2 --json >"$W/x.json" 2>"$out" || fail "exit $?"
  python3 -c "
import json, sys
p = json.load(open('$W/x.json'))['problems'][0]
s = p['strategies'][0]
assert p['budget'] == p['space'] == $size, p
assert s['median'][-1] == 1.0 and s['q1'][-1] == 1.0, s
assert all(0 < r <= 1.0 for r in s['median']), s
assert s['evals_to_1pct'] is not None and s['evals_to_1pct'] <= $size
" || fail "exhaustive did not reach ratio 1.0"
  ;;
missing)  # a space stored in part: skipped (an error when nothing qualifies); --partial: the missing row is named
  part=$W/part.db
  "$T" --gpu A100 --model --d 64 --n 1024 --dtype f16 --strategy exhaustive --budget 3 --db "$part" >"$out" 2>&1 ||
    fail "partial fixture exit $?"
  expect 1 "holds no whole search space" $T replay --from "$part" --gpu A100 --d 64 --dtype f16 --strategy random
  grep -q "skipped: 3 of $size configurations stored (no row for flash cuda f16 " "$W/stdout.txt" || fail "skip line"
  expect 1 "strategy exhaustive (seed 0) evaluated flash cuda f16 .*, which $part holds no row for" \
    $T replay --from "$part" --gpu A100 --d 64 --dtype f16 --strategy exhaustive --partial --seeds 1
  # within what is stored, --partial replays
  $T replay --from "$part" --gpu A100 --d 64 --dtype f16 --strategy exhaustive --partial --budget 3 >"$out" 2>&1 ||
    fail "partial replay within the stored rows: exit $?"
  ;;
bayes)  # bayes.lua: distinct configurations until the budget is spent, the optimum by the end of the space, seeded
  $R --strategy bayes --seeds 2 --json >"$W/b1.json" 2>"$out" || fail "exit $?"
  $R --strategy bayes --seeds 2 --json >"$W/b2.json" 2>"$out" || fail "exit $?"
  cmp "$W/b1.json" "$W/b2.json" >/dev/null || fail "two replays differ"
  python3 -c "
import json
p = json.load(open('$W/b1.json'))['problems'][0]
s = p['strategies'][0]
assert s['median'][-1] == 1.0 and s['q1'][-1] == 1.0, s
assert all(a <= b for a, b in zip(s['median'], s['median'][1:])), s
" || fail "bayes did not reach the optimum over the whole space"
  "$T" --gpu H100 --model --d 64 --n 2048 --dtype bf16 --strategy bayes --budget 8 --db "$W/t.db" >"$out" 2>&1 ||
    fail "tune exit $?"
  grep -q "(model, 8 evaluated)" "$out" || fail "tune with bayes: not 8 evaluations"
  ;;
history)  # tune.history(): this run's evaluations in order, repeats and refusals left out
  cat >"$W/hist.lua" <<'LUA'
return function(space, tune)
  local all = space:all()
  assert(#tune.history() == 0, "history before any evaluation")
  local ra = tune.evaluate(all[2])
  local rb = tune.evaluate(all[1])
  tune.evaluate(all[2])                       -- a repeat: from memory, not in the history
  tune.evaluate({algo = "flash", br = 7})     -- refused: no budget, not in the history
  local rc = tune.evaluate(all[3])
  local h = tune.history()
  assert(#h == 3, "history has " .. #h .. " entries")
  local want = {{all[2], ra}, {all[1], rb}, {all[3], rc}}
  for i, w in ipairs(want) do
    for k, v in pairs(w[1]) do assert(h[i].cfg[k] == v, "entry " .. i .. ": cfg." .. k) end
    assert(h[i].result.time_ms == w[2].time_ms and h[i].result.status == w[2].status, "entry " .. i .. ": result")
  end
  print("history ok")
end
LUA
  $R --strategy "$W/hist.lua" --seeds 1 --budget 3 >"$W/stdout.txt" 2>"$out" || fail "exit $?"
  grep -q "^history ok$" "$out" || fail "the script did not finish"
  ;;
bad_args)  # usage errors: exit 2, one line, before anything runs
  expect 2 "--from $W/nosuch.db: No such file" $T replay --from "$W/nosuch.db" --gpu A100 --d 64 --strategy random
  expect 2 "--budget 0: expected a count >= 1" $R --strategy random --budget 0
  expect 2 "--strategy nosuch: not exhaustive, random" $R --strategy nosuch
  expect 2 "--strategy is required" $R
  expect 2 "--seeds 0: expected" $R --strategy random --seeds 0
  expect 2 "unknown option '--bogus'" $R --strategy random --bogus
  expect 2 "--from FULL.db is required" $T replay --gpu A100 --d 64 --strategy random
  "$T" help replay >"$out" 2>&1 && grep -q "^usage: attntune replay --from FULL.db" "$out" || fail "help replay"
  grep -q "^\.B replay" "$(dirname "$T")/attntune.1" || fail "the manual page lacks replay"
  ;;
lua_error)  # a Lua strategy that raises: exit 1 with its file, line and message
  printf 'return function(space, tune)\n  tune.evaluate(space:random())\n  error("boom")\nend\n' >"$W/boom.lua"
  # (the traceback follows the first line, as tune prints it)
  $R --strategy random --strategy "$W/boom.lua" --seeds 2 >"$W/stdout.txt" 2>"$out"
  [ $? -eq 1 ] || fail "exit status"
  [ "$(head -n 1 "$out")" = "attntune replay: strategy $W/boom.lua:3: boom" ] || fail "first line"
  [ ! -s "$W/stdout.txt" ] || fail "a report after the strategy failed"
  ;;
*) echo "unknown case $case_" >&2; exit 2 ;;
esac
echo "ok ($case_)"
