-- exponential backtracking inside string.find: C code, where no Lua hook ever fires
return function(space, tune)
  tune.evaluate(space:random())
  print("pattern: matching")
  string.find(("a"):rep(5000), ("a-"):rep(12) .. "b")
end
