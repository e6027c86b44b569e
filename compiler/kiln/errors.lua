-- kiln.errors: typed errors ({code, msg, file, line}) located at the spec line that caused them.
local M = {}

local Error = {}
Error.__index = Error
Error.__tostring = function(e)
  local where = e.file and (e.line and (e.file .. ":" .. e.line .. ": ") or (e.file .. ": ")) or ""
  return where .. e.code .. ": " .. e.msg
end
M.Error = Error

-- C raises its typed errors with the metatable registered under this name.
debug.getregistry()["kiln.error"] = Error

-- The innermost stack frame that runs user spec code (chunk names "@path") locates the error.
local function spec_location(level)
  for l = level, 60 do
    local info = debug.getinfo(l, "Sl")
    if not info then break end
    if info.source:sub(1, 1) == "@" and info.currentline > 0 then
      return info.source:sub(2), info.currentline
    end
  end
end

-- The spec file and line running now (nil outside spec code): for errors found later.
function M.location() return spec_location(3) end

function M.new(code, msg, file, line)
  return setmetatable({ code = code, msg = msg, file = file, line = line }, Error)
end

function M.raise(code, fmt, ...)
  local msg = select("#", ...) > 0 and string.format(fmt, ...) or fmt
  local file, line = spec_location(3)
  error(M.new(code, msg, file, line), 0)
end

-- Raises at an explicit location (used when the location is known, e.g. a JSON file).
function M.raise_at(file, line, code, fmt, ...)
  local msg = select("#", ...) > 0 and string.format(fmt, ...) or fmt
  error(M.new(code, msg, file, line), 0)
end

function M.is(e) return getmetatable(e) == Error end

-- Turns any error value into a typed error (syntax errors, Lua runtime errors in a spec).
function M.from_lua(e, default_code)
  if M.is(e) then return e end
  if type(e) == "table" and e.code then return setmetatable(e, Error) end
  local s = tostring(e)
  if s:find("not enough memory", 1, true) then
    return M.new("E_LIMIT", "spec exceeded its memory budget (KILN_SPEC_MAX_MEM)")
  end
  local file, line, rest = s:match("^([^:\n]+%.%w+):(%d+): (.*)$")
  if file then return M.new(default_code, rest, file, tonumber(line)) end
  return M.new(default_code, s)
end

return M
