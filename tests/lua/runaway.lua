-- a strategy that never ends, even swallowing errors: the count hook must still stop it
return function(space, tune)
  local i = 0
  while true do
    pcall(function() i = i + 1 end)
  end
end
