#!/bin/sh
# lua_gqa.sh CASE ATTNTUNE WORKDIR: a Lua strategy on the problem tune tunes (H100 ranked by the model, no GPU).
#   model: GQA decode (32 query heads over 8 KV heads, batch 8, n = 1, n_kv = 4096): space:model is the row
#          tune.evaluate stores (the model of the problem with its KV grouping, as tune's model rows are made), for
#          the model's three best and its best split-KV configuration
#   dv:    d = 128, d_v = 64: a configuration the script names by its tiles alone is of the space (its d_v put on
#          it), evaluated and stored with d_v = 64
set -u
case_=$1 T=$2 W=$3
# shellcheck source-path=SCRIPTDIR source=sh_util.sh
. "$(dirname "$0")/sh_util.sh"

case $case_ in
model)
  cat >"$W/model.lua" <<'LUA'
return function(space, tune)
  local ranked = space:ranked()
  local split
  for _, c in ipairs(ranked) do
    if (c.split or 0) > 1 then split = c break end
  end
  assert(split, "no split-KV configuration in the space")
  local cfgs = {ranked[1], ranked[2], ranked[3], split}
  for i, cfg in ipairs(cfgs) do
    local m, why = space:model(cfg)
    assert(m, "no estimate for configuration " .. i .. ": " .. tostring(why))
    local r = tune.evaluate(cfg)
    assert(r.status == "ok", "configuration " .. i .. ": " .. tostring(r.status) .. " " .. tostring(r.message))
    assert(r.time_ms == m.time_ms and r.io == m.io, string.format(
      "configuration %d (split %d): space:model %.6g ms io %.0f, the stored row %.6g ms io %.0f", i, cfg.split or 0,
      m.time_ms, m.io, r.time_ms, r.io))
  end
  print("space model gqa ok")
end
LUA
  "$T" tune --gpu H100 --model --heads 32 --heads-kv 8 --batch 8 --n 1 --n-kv 4096 --d 128 --dtype bf16 \
    --strategy "$W/model.lua" --budget 4 --db "$W/m.db" >"$out" 2>&1 || fail "exit $?"
  grep -q "^space model gqa ok$" "$out" || fail "the script did not finish"
  [ "$(q "$W/m.db" "SELECT COUNT(*) FROM measurements WHERE status = 'ok' AND heads_kv = 8 AND batch = 8")" -eq 4 ] ||
    fail "not 4 GQA rows stored"
  ;;
dv)
  cat >"$W/dv.lua" <<'LUA'
return function(space, tune)
  local cfg = {br = 64, bc = 64, warps = 4, stages = 2}
  local ok, why = space:contains(cfg)
  assert(ok, "not of the space: " .. tostring(why))
  local r = tune.evaluate(cfg)
  assert(r.status == "ok", tostring(r.status) .. " " .. tostring(r.message))
  print("named d_v ok")
end
LUA
  "$T" tune --gpu H100 --model --d 128 --dv 64 --n 1024 --dtype bf16 --strategy "$W/dv.lua" --budget 1 \
    --db "$W/d.db" >"$out" 2>&1 || fail "exit $?"
  grep -q "^named d_v ok$" "$out" || fail "the script did not finish"
  [ "$(q "$W/d.db" "SELECT COUNT(*) FROM measurements m JOIN kernels k ON k.id = m.kernel_id WHERE m.status = 'ok'
        AND m.d_v = 64 AND k.d_v = 64 AND ' ' || k.spec || ' ' LIKE '% br=64 bc=64 % warps=4 stages=2 %'")" -eq 1 ] ||
    fail "the named configuration is not stored with d_v = 64"
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "PASS ($case_)"
