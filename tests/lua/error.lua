-- a strategy with a bug: indexing a nil value on line 4
return function(space, tune)
  local cfg = nil
  local r = tune.evaluate(cfg.missing)
end
