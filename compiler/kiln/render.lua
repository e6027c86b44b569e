-- kiln.render: fills CUDA templates (${name} placeholders) and gathers only the helper
-- snippets a kernel uses, so every generated source is header-free and lean.
local c = require "kiln.c"
local errors = require "kiln.errors"

local M = {}

local cache = {}
function M.template(name)
  local t = cache[name]
  if not t then
    t = c.template(name)
    cache[name] = t
  end
  return t
end

-- "${x}" -> vars.x; a placeholder without a value is a bug in the engine.
function M.fill(text, vars, name)
  return (text:gsub("%${([%w_]+)}", function(k)
    local v = vars[k]
    if v == nil then errors.raise("E_INTERNAL", "template %s: no value for ${%s}", name or "?", k) end
    return tostring(v)
  end))
end

-- A source builder: need("common/bf16.cuh") adds a snippet once, in first-use order.
function M.source()
  local s = { parts = {}, seen = {} }
  function s:need(snippet)
    if not self.seen[snippet] then
      self.seen[snippet] = true
      self.parts[#self.parts + 1] = M.template(snippet)
    end
  end
  function s:add(text) self.parts[#self.parts + 1] = text end
  function s:text() return table.concat(self.parts, "\n") end
  return s
end

-- A float literal CUDA parses exactly (inf/nan through bit patterns).
function M.float_literal(v)
  if v ~= v then return "__int_as_float(0x7fc00000)" end
  if v >= 3.4028234663852886e38 then return v == math.huge and "__int_as_float(0x7f800000)" or "3.40282347e+38f" end
  if v <= -3.4028234663852886e38 then return v == -math.huge and "__int_as_float(0xff800000)" or "-3.40282347e+38f" end
  local s = string.format("%.9g", v)
  if not s:find("[%.eEn]") then s = s .. ".0" end
  return s .. "f"
end

return M
