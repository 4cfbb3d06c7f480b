-- tune.evaluate must answer nonsense with ok=false, status='invalid' and a message, never raise
return function(space, tune)
  local bad = {
    42, "flash", true, function() end,
    {algo = "nosuch"}, {algo = 7}, {br = "x"}, {br = 1.5}, {br = -64}, {br = 1e12},
    {bogus = 1}, {[1] = 64}, {feature = "other"}, {algo = "flash", br = 64, bc = 3},
    {algo = "lowrank"}, {algo = "flash", br = 48},
  }
  local before = tune.budget_left()
  for i, cfg in ipairs(bad) do
    local ok, r = pcall(tune.evaluate, cfg)
    if not ok then error("evaluate raised for case " .. i .. ": " .. tostring(r)) end
    if type(r) ~= "table" or r.ok ~= false or r.status ~= "invalid" or type(r.message) ~= "string" then
      error("case " .. i .. ": expected ok=false status=invalid, got " .. tostring(r and r.status))
    end
  end
  if tune.budget_left() ~= before then error("invalid configurations used budget") end
  -- the space's own configurations are fine; a repeat is answered from memory, free
  local c = space:random()
  local r = tune.evaluate(c)
  if not r.ok or r.status ~= "ok" or not r.time_ms then error("a valid configuration failed: " .. tostring(r.status)) end
  if tune.budget_left() ~= before - 1 then error("budget not counted") end
  local again = tune.evaluate(c)
  if tune.budget_left() ~= before - 1 or again.time_ms ~= r.time_ms then error("a repeat was charged or differs") end
  if #space:neighbours({br = 3}) ~= 0 then error("neighbours of nonsense") end
  local best = tune.best()
  if not best or not best.algo then error("tune.best() is empty after a success") end
  print("nonsense ok: " .. #bad .. " bad configurations answered invalid")
end
