-- guided.lua: measures in the order of the performance and I/O model's ranking (space:ranked(): on a GPU the
-- performance model's time, then the fewest transfers; on the CPU, which has no time model, the fewest transfers).
-- Configurations the model cannot tell apart (the same estimate: e.g. unroll on the CPU, which moves no fewer
-- entries) are taken in a seeded random order, so that the runs of a replay differ only where the model is silent.
return function(space, tune)
  local ranked = space:ranked()
  local function key(cfg)
    local m = space:model(cfg)
    if not m then return "none" end
    return string.format("%.17g/%.17g", m.time_ms or 0, m.io or -1)
  end
  local order, i = {}, 1
  while i <= #ranked do
    local j, k = i, key(ranked[i])
    while j < #ranked and key(ranked[j + 1]) == k do j = j + 1 end
    for a = j, i + 1, -1 do -- Fisher-Yates within the tie
      local b = math.random(i, a)
      ranked[a], ranked[b] = ranked[b], ranked[a]
    end
    for a = i, j do order[#order + 1] = ranked[a] end
    i = j + 1
  end
  for _, cfg in ipairs(order) do
    if tune.budget_left() == 0 then break end
    tune.evaluate(cfg)
  end
end
