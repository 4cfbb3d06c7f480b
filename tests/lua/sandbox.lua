-- the sandbox: no io, os, package, require, dofile, loadfile, load, string.dump
return function(space, tune)
  for _, name in ipairs({"io", "os", "package", "require", "dofile", "loadfile", "load", "debug"}) do
    if _G[name] ~= nil then error("sandbox leaks " .. name) end
  end
  if string.dump ~= nil then error("sandbox leaks string.dump") end
  print("sandbox ok")
end
