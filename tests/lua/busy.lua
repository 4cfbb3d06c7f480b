-- one evaluation, then a pure Lua loop that never calls tune.* again: only Ctrl-C (or the limit) ends it
return function(space, tune)
  tune.evaluate(space:random())
  print("busy: looping")
  local i = 0
  while true do i = i + 1 end
end
