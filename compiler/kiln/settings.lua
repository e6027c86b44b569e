-- kiln.settings: the settings an engine builds its candidate plans under, and the build-time
-- environment settings that are no engine's.
-- An engine's settings (E.settings: NAME -> its values, the default first; a list may also have
-- `valid`, a function that accepts more values, `want`, what it takes, for messages, and `tune`,
-- the values `kiln tune` measures where not all) are
-- chosen by KILN_PLAN's ENGINE.NAME=VALUE items (kiln.engines). The router makes an engine's
-- the current ones while it proposes, judges a fusion or builds (M.during); the engine's code,
-- however deep, reads them with M.get.
local c = require "kiln.c"
local errors = require "kiln.errors"

local M = {}

local current = nil

-- fn(...) with `set` (NAME -> value) as the current settings, then the previous ones again
-- (also when fn raises).
function M.during(set, fn, ...)
  local saved = current
  current = set
  local r = table.pack(pcall(fn, ...))
  current = saved
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end

-- The current value of setting `name` (a string); an engine reading one it does not declare is
-- a bug in kiln.
function M.get(name)
  local v = current and current[name]
  if v == nil then error("kiln.settings: the engine running has no setting '" .. name .. "'", 2) end
  return v
end

-- The current settings (nil: none).
function M.current() return current end

-- Whether `v` is one of the setting's values.
function M.accepts(values, v)
  for _, x in ipairs(values) do
    if x == v then return true end
  end
  return values.valid ~= nil and values.valid(v)
end

-- The values as an error message lists them: `want`, all, or the range of many whole numbers.
function M.describe(values)
  if values.want then return values.want end
  local nums = {}
  for i, v in ipairs(values) do nums[i] = math.tointeger(tonumber(v)) end
  if #values > 8 and #nums == #values then
    table.sort(nums)
    return string.format("a whole number, %d to %d", nums[1], nums[#nums])
  end
  return #values > 1 and table.concat(values, ", ", 1, #values - 1) .. " or " .. values[#values] or values[1]
end

-- NAME's value (an environment variable) when it is one of `values`, "" when unset or empty;
-- else nil and the reason.
function M.choice(name, values)
  local v = c.getenv(name) or ""
  if v == "" then return v end
  if M.accepts(values, v) then return v end
  return nil, string.format("%s=%s: want %s", name, v, M.describe(values))
end

-- NAME's value as M.choice gives it, a value outside `values` raised as E_USAGE by name.
function M.pick(name, values)
  local v, bad = M.choice(name, values)
  if not v then errors.raise_at(nil, nil, "E_USAGE", "%s", bad) end
  return v
end

return M
