-- a strategy that does not parse (line 3)
return function(space, tune)
  local x = = 1
end
