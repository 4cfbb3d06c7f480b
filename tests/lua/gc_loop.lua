-- a finalizer that never returns: the collector runs it with hooks off, so only a limit outside the
-- interpreter can stop it (the evaluation made before stays stored)
return function(space, tune)
  tune.evaluate(space:random())
  setmetatable({}, {__gc = function() while true do end end})
  -- make garbage until the collector reaches the finalizer
  while true do local _ = {} end
end
