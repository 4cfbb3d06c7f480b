#!/bin/sh
# replay.sh CASE ATTNTUNE WORKDIR: `attntune replay` against a fixture of whole spaces stored by the performance
# model (--model: no compiling, no timing, even where the GPU is present; the fixture takes a fraction of a second),
# and against the spaces shipped in tests/data/spaces ($REPLAY_SPACES): measured on a CPU, and the model's for A100
# and H100.
set -u
case_=$1 T=$2 W=$3
SPACES=${REPLAY_SPACES:-$(dirname "$0")/data/spaces} # the whole spaces shipped (scripts/replay_spaces.sh)
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
  grep -q "^  to 5%  .* [0-9.]* \[[0-9.-]*,[0-9.-]*\]" "$W/a.txt" && grep -q "^  to 1%" "$W/a.txt" ||
    fail "no evaluations-to rows with their quartiles"
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
# grid order is the same for every seed: the quartiles of the evaluations-to are the median
assert s['evals_to_1pct_quartiles'] == [s['evals_to_1pct']] * 2, s
assert s['evals_to_5pct_quartiles'] == [s['evals_to_5pct']] * 2, s
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
model_api)  # space:model() and space:ranked(): the model's estimates and order, on a GPU's and on the CPU's space
  cat >"$W/api.lua" <<'LUA'
return function(space, tune)
  local gpu = tune.problem().target == "cuda"
  local ranked = space:ranked()
  assert(#ranked == space:size(), "ranked holds " .. #ranked .. " of " .. space:size())
  local seen, prev = {}, nil
  for i, cfg in ipairs(ranked) do
    local key = {}
    for k, v in pairs(cfg) do key[#key + 1] = k .. "=" .. tostring(v) end
    table.sort(key)
    key = table.concat(key, " ")
    assert(space:contains(cfg) and not seen[key], "ranked entry " .. i .. " is not a new point of the space")
    seen[key] = true
    local m, why = space:model(cfg)
    assert(m, "no estimate for ranked entry " .. i .. ": " .. tostring(why))
    assert(m.io and m.io > 0, "no I/O at entry " .. i)
    if gpu then assert(m.time_ms > 0 and type(m.bound) == "string", "a GPU estimate without a time or bound")
    else assert(m.time_ms == nil and m.bound == nil, "a CPU estimate with a time") end
    if prev then
      local t0, t1 = prev.time_ms or 0, m.time_ms or 0
      assert(t0 < t1 or (t0 == t1 and prev.io <= m.io), "out of the model's order at entry " .. i)
    end
    prev = m
  end
  local none, why = space:model({algo = "flash", br = 7})
  assert(none == nil and type(why) == "string" and #why > 0, "an estimate for what is not a point of the space")
  -- the model's estimate of a configuration is the model row stored for it; on the CPU the I/O is the closed form's
  local r = tune.evaluate(ranked[1])
  local m = space:model(ranked[1])
  assert(r.io == m.io, "I/O: model " .. m.io .. ", row " .. tostring(r.io))
  if gpu then assert(r.time_ms == m.time_ms, "time: model " .. m.time_ms .. ", row " .. tostring(r.time_ms)) end
  print("model api ok " .. (gpu and "gpu" or "cpu"))
end
LUA
  $R --strategy "$W/api.lua" --seeds 1 --budget 1 >"$W/stdout.txt" 2>"$out" || fail "exit $?"
  grep -q "^model api ok gpu$" "$out" || fail "the script did not finish on the GPU's space"
  if [ -n "${REPLAY_CPU_DB:-}" ]; then # called by the shipped case: the same on the CPU's measured space
    "$T" replay --from "$REPLAY_CPU_DB" --gpu cpu --d 64 --n 512 --strategy "$W/api.lua" --seeds 1 --budget 1 \
      >"$W/stdout.txt" 2>"$out" || fail "exit $?"
    grep -q "^model api ok cpu$" "$out" || fail "the script did not finish on the CPU's space"
  fi
  # guided.lua measures in that order: on the model's own space its first evaluation is the optimum, every seed
  $R --strategy guided --seeds 3 --json >"$W/g.json" 2>"$out" || fail "exit $?"
  python3 -c "
import json
s = json.load(open('$W/g.json'))['problems'][0]['strategies'][0]
assert s['q1'][0] == 1.0 and s['evals_to_1pct'] == 1, s
" || fail "guided did not start at the model's optimum"
  ;;
shipped)  # the spaces shipped in tests/data/spaces: every strategy, one seed, twice: the same bytes
  for f in cpu model-a100 model-h100; do
    "$T" import "$SPACES/$f.json" --db "$W/$f.db" >"$out" 2>&1 || fail "import $f.json: exit $?"
  done
  # space:model() and space:ranked() on the CPU's measured space: the I/O closed form, no time
  REPLAY_CPU_DB=$W/cpu.db sh "$0" model_api "$T" "$W/api" || fail "model_api on the CPU's space"
  all="--strategy exhaustive --strategy random --strategy anneal --strategy genetic --strategy bayes \
--strategy guided --seeds 1"
  for p in "cpu.db --gpu cpu --d 64 --n 512 --causal 1" "model-a100.db --gpu A100 --d 128 --n 4096 --dtype bf16" \
           "model-h100.db --gpu H100 --d 64 --n 1024 --causal 1 --dtype bf16 --algo flash,smallcache"; do
    # word splitting of $p and $all is intended
    set -- $p
    db=$1
    shift
    "$T" replay --from "$W/$db" "$@" $all >"$W/a.txt" 2>"$out" || fail "$db: exit $?"
    "$T" replay --from "$W/$db" "$@" $all >"$W/b.txt" 2>"$out" || fail "$db: exit $?"
    cmp "$W/a.txt" "$W/b.txt" >/dev/null || fail "$db: two replays differ"
    [ "$(grep -c ": [0-9]* configurations, optimum" "$W/a.txt")" -eq 1 ] || fail "$db: not one problem replayed"
    grep -q "^  k  *exhaustive  *random  *anneal  *genetic  *bayes  *guided$" "$W/a.txt" || fail "$db: header"
    # exhaustive covers the space: the optimum at the last k
    tail -n 3 "$W/a.txt" | head -n 1 | grep -q "^  [0-9]*  *1.000 \[1.000,1.000\]" || fail "$db: last k"
  done
  ;;
fresh)  # the shipped model spaces are the model's of this build: one made stale by a change to the model or the space
  # fails here, not as a strategy missing the stored optimum in the nightly sweep (scripts/replay_spaces.sh model)
  for g in A100 H100; do
    f=$SPACES/model-$(echo "$g" | tr 'A-Z' 'a-z').json
    "$T" --gpu "$g" --model --d 64,128 --n 1024,4096 --causal 0,1 --dtype bf16 --algo flash,smallcache \
      --strategy exhaustive --db "$W/$g.db" >"$out" 2>&1 || fail "$g: exit $?"
    "$T" export "$W/$g.json" --db "$W/$g.db" >"$out" 2>&1 || fail "$g: export exit $?"
    python3 - "$f" "$W/$g.json" >"$out" 2>&1 <<'EOF2' || fail "$f is not the model's space of this build: regenerate it with scripts/replay_spaces.sh model"
import json, sys
def rows(path):
    return {(m["spec"], m["n"], m["n_kv"], m["causal"], m["batch"], m["heads"], m["heads_kv"]): (m["status"], m["time_ms"])
            for m in json.load(open(path))["measurements"]}
shipped, now = rows(sys.argv[1]), rows(sys.argv[2])
for k in sorted(set(shipped) ^ set(now))[:3]:
    print("only in", "the shipped file" if k in shipped else "this build's space", k[0], "n=%d causal=%d" % (k[1], k[3]))
bad = [k for k in set(shipped) & set(now)
       if shipped[k][0] != now[k][0] or abs(shipped[k][1] - now[k][1]) > 1e-9 * abs(now[k][1])]
for k in sorted(bad)[:3]:
    print("time", shipped[k], "shipped,", now[k], "now:", k[0], "n=%d causal=%d" % (k[1], k[3]))
sys.exit(1 if bad or set(shipped) != set(now) else 0)
EOF2
  done
  ;;
sweep)  # nightly: every shipped problem, every strategy, 20 seeds, twice; what each strategy must reach
  args="--strategy exhaustive --strategy random --strategy anneal --strategy genetic --strategy bayes \
--strategy guided --seeds 20 --json"
  for f in cpu model-a100 model-h100; do
    "$T" import "$SPACES/$f.json" --db "$W/$f.db" >"$out" 2>&1 || fail "import $f.json: exit $?"
  done
  for p in "cpu.db --gpu cpu --d 64,128 --n 512,1024,2048 --causal 0,1 --dtype f32,bf16" \
           "model-a100.db --gpu A100 --d 64,128 --n 1024,4096 --causal 0,1 --dtype bf16 --algo flash,smallcache" \
           "model-h100.db --gpu H100 --d 64,128 --n 1024,4096 --causal 0,1 --dtype bf16 --algo flash,smallcache"; do
    set -- $p
    db=$1
    shift
    "$T" replay --from "$W/$db" "$@" $args >"$W/a.json" 2>"$out" || fail "$db: exit $?"
    "$T" replay --from "$W/$db" "$@" $args >"$W/b.json" 2>"$out" || fail "$db: exit $?"
    cmp "$W/a.json" "$W/b.json" >/dev/null || fail "$db: two replays differ"
    python3 -c "
import json, sys
doc = json.load(open('$W/a.json'))
assert len(doc['problems']) >= 8, len(doc['problems'])
for p in doc['problems']:
    for s in p['strategies']:
        m = s['median']
        assert all(0 <= a <= b <= 1.0 for a, b in zip(m, m[1:])), (p['d'], p['n'], s['strategy'])
        if s['strategy'] in ('exhaustive', 'random', 'bayes', 'guided'):  # they cover the space
            assert s['q1'][-1] == 1.0, (p['d'], p['n'], s['strategy'])
        if s['strategy'] == 'guided' and p['provenance'] == 'model':  # the model's own ranking
            assert s['q3'][0] == 1.0 and s['q1'][0] == 1.0, (p['d'], p['n'])
" || fail "$db: a strategy's figures"
  done
  ;;
*) echo "unknown case $case_" >&2; exit 2 ;;
esac
echo "ok ($case_)"
