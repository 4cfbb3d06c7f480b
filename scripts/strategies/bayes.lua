-- bayes.lua: Bayesian optimization: a Gaussian process over the space's tunables, the next configuration the one of
-- largest expected improvement.
-- Each tunable that takes more than one value is a coordinate in [0, 1]: its value's rank among the values the space
-- holds (space:params()), so 16, 32, 64, 128 are evenly spaced, as are "taylor", "random". The process models the
-- logarithm of the time, standardized, with a squared-exponential kernel whose length scale is picked from a few by
-- the marginal likelihood at each step. A configuration that fails counts as a little slower than the slowest one
-- that ran. A few random configurations start it; at most 64 points (the fastest) enter the fit, whose Cholesky
-- factorization is then cheap in plain Lua; spaces of more than 2000 configurations are searched through a random
-- sample of 2000 at each step.
return function(space, tune)
  if space:size() == 0 then return end
  local MAX_FIT, MAX_CAND, INIT = 64, 2000, 5
  local names = {"algo", "br", "bc", "unroll", "warps", "stages", "tile", "feature", "degree", "rank", "split"}
  local params = space:params()
  -- the coordinates: tunables with more than one value, each value's rank scaled to [0, 1]
  local dims, pos = {}, {}
  for _, nm in ipairs(names) do
    local vals = params[nm] or {}
    if #vals > 1 then
      dims[#dims + 1] = nm
      local m = {}
      for i, v in ipairs(vals) do m[v] = (i - 1) / (#vals - 1) end
      pos[nm] = m
    end
  end
  local function key(c)
    local parts = {}
    for i, nm in ipairs(names) do parts[i] = tostring(c[nm]) end
    return table.concat(parts, "/")
  end
  local function coords(c)
    local x = {}
    for i, nm in ipairs(dims) do x[i] = pos[nm][c[nm]] or 0 end
    return x
  end

  local all = space:all()
  local seen, hist = {}, {}   -- key -> true; {x =, t = time or nil when it failed}
  local function try(c)
    local r = tune.evaluate(c)
    if r.status == "budget" or r.status == "interrupted" then return false end
    seen[key(c)] = true
    hist[#hist + 1] = {x = coords(c), t = r.ok and r.time_ms or nil}
    return true
  end

  -- the standard normal's density and distribution (Abramowitz and Stegun 7.1.26 for erf: error below 1.5e-7)
  local function pdf(z) return math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi) end
  local function cdf(z)
    local x = math.abs(z) / math.sqrt(2)
    local t = 1 / (1 + 0.3275911 * x)
    local erf = 1 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) *
      t * math.exp(-x * x)
    return z >= 0 and 0.5 * (1 + erf) or 0.5 * (1 - erf)
  end
  local function sqdist(a, b)
    local s = 0
    for i = 1, #a do
      local d = a[i] - b[i]
      s = s + d * d
    end
    return s
  end
  -- lower-triangular L with L L^T = A (A: n x n, positive definite thanks to the noise term), or nil
  local function cholesky(A, n)
    local L = {}
    for i = 1, n do
      L[i] = {}
      for j = 1, i do
        local s = A[i][j]
        for k = 1, j - 1 do s = s - L[i][k] * L[j][k] end
        if i == j then
          if s <= 0 then return nil end
          L[i][i] = math.sqrt(s)
        else
          L[i][j] = s / L[j][j]
        end
      end
    end
    return L
  end
  local function forward(L, b, n) -- L z = b
    local z = {}
    for i = 1, n do
      local s = b[i]
      for k = 1, i - 1 do s = s - L[i][k] * z[k] end
      z[i] = s / L[i][i]
    end
    return z
  end
  local function backward(L, z, n) -- L^T a = z
    local a = {}
    for i = n, 1, -1 do
      local s = z[i]
      for k = i + 1, n do s = s - L[k][i] * a[k] end
      a[i] = s / L[i][i]
    end
    return a
  end

  -- a few random configurations first
  local init = math.min(INIT, space:size())
  local tries = 0
  while #hist < init and tune.budget_left() > 0 and tries < 20 * init do
    tries = tries + 1
    local c = space:random()
    if not seen[key(c)] and not try(c) then return end
  end

  while tune.budget_left() > 0 and #hist < #all do
    -- the training set: log times standardized, failures a little above the slowest, the fastest MAX_FIT points
    local worst, pts = nil, {}
    for _, h in ipairs(hist) do
      if h.t and (not worst or math.log(h.t) > worst) then worst = math.log(h.t) end
    end
    local cands = {}
    for _, c in ipairs(all) do
      if not seen[key(c)] then cands[#cands + 1] = c end
    end
    if #cands == 0 then return end
    local pick
    if worst and #dims > 0 then
      for _, h in ipairs(hist) do pts[#pts + 1] = {x = h.x, y = h.t and math.log(h.t) or worst + 0.5} end
      table.sort(pts, function(a, b) return a.y < b.y end)
      while #pts > MAX_FIT do pts[#pts] = nil end
      local n, mean, var = #pts, 0, 0
      for _, p in ipairs(pts) do mean = mean + p.y end
      mean = mean / n
      for _, p in ipairs(pts) do var = var + (p.y - mean) ^ 2 end
      local sd = math.sqrt(var / n)
      if sd <= 0 then sd = 1 end
      local y = {}
      for i, p in ipairs(pts) do y[i] = (p.y - mean) / sd end
      -- the length scale of the largest marginal likelihood
      local best_fit
      for _, ell in ipairs({0.15, 0.3, 0.6, 1.2}) do
        local K = {}
        for i = 1, n do
          K[i] = {}
          for j = 1, i do
            K[i][j] = math.exp(-0.5 * sqdist(pts[i].x, pts[j].x) / (ell * ell)) + (i == j and 1e-4 or 0)
          end
        end
        local L = cholesky(K, n)
        if L then
          local alpha = backward(L, forward(L, y, n), n)
          local ll = 0
          for i = 1, n do ll = ll - 0.5 * y[i] * alpha[i] - math.log(L[i][i]) end
          if not best_fit or ll > best_fit.ll then best_fit = {ll = ll, L = L, alpha = alpha, ell = ell} end
        end
      end
      if best_fit then
        local ybest = y[1] -- pts are sorted: the fastest
        for i = 2, n do if y[i] < ybest then ybest = y[i] end end
        -- the candidates: all, or a random sample of MAX_CAND of them
        local pool = cands
        if #cands > MAX_CAND then
          pool = {}
          for i = 1, MAX_CAND do
            local j = math.random(i, #cands)
            cands[i], cands[j] = cands[j], cands[i]
            pool[i] = cands[i]
          end
        end
        local best_ei, ell2 = -1, best_fit.ell * best_fit.ell
        for _, c in ipairs(pool) do
          local x = coords(c)
          local ks = {}
          for i = 1, n do ks[i] = math.exp(-0.5 * sqdist(x, pts[i].x) / ell2) end
          local mu = 0
          for i = 1, n do mu = mu + ks[i] * best_fit.alpha[i] end
          local v = forward(best_fit.L, ks, n)
          local s2 = 1 + 1e-4
          for i = 1, n do s2 = s2 - v[i] * v[i] end
          local s = math.sqrt(math.max(s2, 1e-12))
          local imp = ybest - mu - 0.01
          local z = imp / s
          local ei = imp * cdf(z) + s * pdf(z)
          if ei > best_ei then best_ei, pick = ei, c end
        end
      end
    end
    if not pick then pick = cands[math.random(#cands)] end -- nothing has run yet: keep sampling
    if not try(pick) then return end
  end
end
