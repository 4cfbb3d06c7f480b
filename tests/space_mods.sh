#!/bin/sh
# space_mods.sh CASE ATTNTUNE WORKDIR FAKE_NVRTC: `attntune tune --window W` with the space built for the window
# (attn_space_opts window, softcap, alibi), the model for H100 (no GPU).
#   lua:      a Lua strategy's space:model for n = n_kv = 16384, w = 256 is the windowed model's: the row tune.evaluate
#             stores (the C model for the windowed problem) has its time and I/O, for the model's three best and a
#             configuration the script names by its tiles alone (the space's modifiers put on it)
#   compiled: --compiled compiles each candidate once, as the kernel with the window (a stand-in NVRTC counts the
#             compiles): as many compiles as resources stored, every one window=1, the count the tune line reports
set -u
case_=$1 T=$2 W=$3 FAKE=$4
# shellcheck source-path=SCRIPTDIR source=sh_util.sh
. "$(dirname "$0")/sh_util.sh"

case $case_ in
lua)
  cat >"$W/model.lua" <<'LUA'
return function(space, tune)
  local ranked = space:ranked()
  local cfgs = {ranked[1], ranked[2], ranked[3], {br = 128, bc = 64, warps = 4, stages = 2}}
  for i, cfg in ipairs(cfgs) do
    assert(space:contains(cfg), "configuration " .. i .. " is not of the space")
    local m, why = space:model(cfg)
    assert(m, "no estimate for configuration " .. i .. ": " .. tostring(why))
    local r = tune.evaluate(cfg)
    assert(r.status == "ok", "configuration " .. i .. ": " .. tostring(r.status) .. " " .. tostring(r.message))
    assert(r.time_ms == m.time_ms and r.io == m.io, string.format(
      "configuration %d: space:model %.6g ms io %.0f, the windowed model's row %.6g ms io %.0f", i, m.time_ms, m.io,
      r.time_ms, r.io))
  end
  print("space model windowed ok")
end
LUA
  "$T" tune --gpu H100 --model --d 128 --n 16384 --dtype bf16 --window 256 --strategy "$W/model.lua" --budget 4 \
    --db "$W/m.db" >"$out" 2>&1 || fail "exit $?"
  grep -q "^space model windowed ok$" "$out" || fail "the script did not finish"
  [ "$(q "$W/m.db" "SELECT COUNT(*) FROM measurements WHERE status = 'ok'")" -ge 3 ] || fail "not 3 rows stored"
  ;;
compiled)
  ATTN_NVRTC=$FAKE FAKE_NVRTC_LOG=$W/compiles.log "$T" tune --gpu H100 --model --d 64 --n 1024 --dtype bf16 \
    --window 256 --compiled --jobs 2 --db "$W/c.db" >"$out" 2>&1 || fail "exit $?"
  compiles=$(wc -l <"$W/compiles.log" 2>/dev/null || echo 0)
  stored=$(q "$W/c.db" "SELECT COUNT(*) FROM kernel_resources")
  plain=$(q "$W/c.db" "SELECT COUNT(*) FROM kernel_resources WHERE ' ' || spec || ' ' NOT LIKE '% window=1 %'")
  [ "$compiles" -gt 0 ] || fail "nothing compiled"
  [ "$plain" -eq 0 ] || fail "$plain kernels without the window compiled (of $compiles compiles)"
  [ "$compiles" -eq "$stored" ] || fail "$compiles compiles for $stored kernels"
  grep -q "($compiles compiled now)" "$out" || fail "the tune line does not count $compiles compiles"
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "PASS ($case_)"
