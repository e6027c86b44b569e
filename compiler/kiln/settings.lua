-- kiln.settings: build-time settings read from the environment (for measuring). An engine
-- that takes one declines on a value outside its list, naming it, so that a misspelt sweep
-- cannot quietly measure the default.
local c = require "kiln.c"
local errors = require "kiln.errors"

local M = {}

-- NAME's value when it is one of `values`, "" when unset or empty; else nil and the reason.
function M.choice(name, values)
  local v = c.getenv(name) or ""
  if v == "" then return v end
  for _, ok in ipairs(values) do
    if v == ok then return v end
  end
  local list = #values > 1 and table.concat(values, ", ", 1, #values - 1) .. " or " .. values[#values] or values[1]
  return nil, string.format("%s=%s: want %s", name, v, list)
end

-- NAME's value as M.choice gives it, a value outside `values` raised as E_USAGE by name (for
-- the settings no engine declines on).
function M.pick(name, values)
  local v, bad = M.choice(name, values)
  if not v then errors.raise_at(nil, nil, "E_USAGE", "%s", bad) end
  return v
end

return M
