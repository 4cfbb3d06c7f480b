-- anneal.lua: simulated annealing over the tuner's search space.
-- A walk from a random configuration to random neighbours (one tunable one step up or down); a slower neighbour
-- is accepted with probability exp(-(t_new - t_cur) / (T * t_cur)), the temperature T cooling geometrically from
-- T0 to T1 over the budget. Configurations that fail (compile error, wrong result) count as infinitely slow.
-- A restart from a random point happens when a configuration has no neighbours left to try.
return function(space, tune)
  if space:size() == 0 then return end
  local T0, T1 = 0.30, 0.01
  local total = math.max(tune.budget_left(), 1)

  local function key(c)
    return string.format("%s/%d/%d/%d/%d/%d/%d/%s/%d/%d/%d", c.algo, c.br, c.bc, c.unroll, c.warps, c.stages,
      c.tile, c.feature, c.degree, c.rank, c.split)
  end
  local seen = {}          -- key -> time (math.huge when it failed)
  local function cost(c)
    local k = key(c)
    if seen[k] == nil then
      local r = tune.evaluate(c)
      if r.status == "budget" or r.status == "interrupted" then return nil end
      seen[k] = r.ok and r.time_ms or math.huge
    end
    return seen[k]
  end

  local cur = space:random()
  local tcur = cost(cur)
  if tcur == nil then return end
  while tune.budget_left() > 0 do
    local done = total - tune.budget_left()
    local T = T0 * (T1 / T0) ^ (done / total)
    -- a neighbour not measured yet, if there is one; else a fresh random start
    local nb, fresh = space:neighbours(cur), {}
    for _, c in ipairs(nb) do
      if seen[key(c)] == nil then fresh[#fresh + 1] = c end
    end
    local cand
    if #fresh > 0 then
      cand = fresh[math.random(#fresh)]
    else
      cand = space:random()
      if seen[key(cand)] ~= nil then
        -- every point around here is known: move on without spending budget
        local all = space:all()
        local left = {}
        for _, c in ipairs(all) do
          if seen[key(c)] == nil then left[#left + 1] = c end
        end
        if #left == 0 then return end
        cand = left[math.random(#left)]
      end
    end
    local tnew = cost(cand)
    if tnew == nil then return end
    local accept
    if tnew <= tcur then
      accept = true
    elseif tnew == math.huge then
      accept = false
    elseif tcur == math.huge then
      accept = true
    else
      accept = math.random() < math.exp(-(tnew - tcur) / (T * tcur))
    end
    if accept then cur, tcur = cand, tnew end
  end
end
