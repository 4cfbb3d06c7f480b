-- genetic.lua: a genetic search over the tuner's search space.
-- A population of configurations evolves by tournament selection, uniform crossover of the tunables of two parents
-- of the same algorithm, and mutation (a step to a neighbour). Children that the space does not hold (a mix the
-- constraints rule out) are replaced by a random configuration. Fitness is the time; failures are unfit.
return function(space, tune)
  local size = space:size()
  if size == 0 then return end
  local POP = math.max(2, math.min(8, size, tune.budget_left()))
  local MUTATE = 0.3
  local FIELDS = {"br", "bc", "unroll", "warps", "stages", "tile", "feature", "degree", "rank", "split"}

  local function key(c)
    local parts = {c.algo}
    for _, f in ipairs(FIELDS) do parts[#parts + 1] = tostring(c[f]) end
    return table.concat(parts, "/")
  end
  local seen = {}
  local stop = false
  local function fitness(c)
    local k = key(c)
    if seen[k] == nil then
      local r = tune.evaluate(c)
      if r.status == "budget" or r.status == "interrupted" then stop = true; return math.huge end
      seen[k] = r.ok and r.time_ms or math.huge
    end
    return seen[k]
  end

  local function copy(c)
    local t = {}
    for k, v in pairs(c) do t[k] = v end
    return t
  end

  local pop = {}
  for i = 1, POP do
    local c = space:random()
    pop[i] = {cfg = c, t = fitness(c)}
    if stop then return end
  end

  local function tournament()
    local a, b = pop[math.random(#pop)], pop[math.random(#pop)]
    return (a.t <= b.t) and a or b
  end

  local function child_of(p1, p2)
    local c = copy(p1.cfg)
    if p1.cfg.algo == p2.cfg.algo then
      for _, f in ipairs(FIELDS) do
        if math.random() < 0.5 then c[f] = p2.cfg[f] end
      end
    end
    if math.random() < MUTATE then
      local nb = space:neighbours(c)
      if #nb > 0 then c = nb[math.random(#nb)] end
    end
    if not space:contains(c) then c = space:random() end
    return c
  end

  local stale = 0
  while tune.budget_left() > 0 and not stop do
    local c = child_of(tournament(), tournament())
    if seen[key(c)] ~= nil then
      -- known already: no budget spent; after many repeats the population has converged, so explore
      stale = stale + 1
      if stale > 50 then
        c = space:random()
        if seen[key(c)] ~= nil then
          local left = {}
          for _, x in ipairs(space:all()) do
            if seen[key(x)] == nil then left[#left + 1] = x end
          end
          if #left == 0 then return end
          c = left[math.random(#left)]
        end
        stale = 0
      end
    end
    if seen[key(c)] == nil then
      local t = fitness(c)
      if stop then return end
      -- replace the worst member when the child beats it
      local worst = 1
      for i = 2, #pop do
        if pop[i].t > pop[worst].t then worst = i end
      end
      if t < pop[worst].t or pop[worst].t == math.huge then pop[worst] = {cfg = c, t = t} end
    end
  end
end
