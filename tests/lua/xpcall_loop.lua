-- an error whose message handler never returns: an error raised inside the handler (as a hook's would be) only
-- calls the handler again, so only a limit outside the interpreter can stop it
return function(space, tune)
  tune.evaluate(space:random())
  xpcall(function() error("boom") end, function(m) while true do end end)
end
