-- kiln.dsl: what a spec sees as `require "kiln"` — k.graph, k.dynamic and the dtype names.
local errors = require "kiln.errors"

local M = {}

M.dynamic = setmetatable({}, { __tostring = function() return "k.dynamic" end, __name = "kiln.dynamic" })

local GraphSpec = { __name = "kiln.graph_spec" }
GraphSpec.__index = GraphSpec
M.GraphSpec = GraphSpec

local FIELDS = { dims = "table", dtype = "string", intermediate_dtype = "string", compute_dtype = "string",
                 inputs = "table", body = "function", doc = "string" }

-- k.graph "name" { dims = ..., dtype = ..., inputs = ..., body = function(g, x, ...) ... end }
function M.graph(name)
  if type(name) ~= "string" or not name:match("^[%a_][%w_]*$") then
    errors.raise("E_SPEC", "k.graph needs a name made of letters, digits and _ (got %s)", tostring(name))
  end
  return function(def)
    if type(def) ~= "table" then errors.raise("E_SPEC", "k.graph '%s' needs a table { ... }", name) end
    for k, v in pairs(def) do
      local want = FIELDS[k]
      if not want then errors.raise("E_SPEC", "graph '%s': unknown field '%s'", name, tostring(k)) end
      if type(v) ~= want then errors.raise("E_SPEC", "graph '%s': field '%s' must be a %s", name, k, want) end
    end
    if not def.inputs then errors.raise("E_SPEC", "graph '%s' has no inputs", name) end
    if not def.body then errors.raise("E_SPEC", "graph '%s' has no body", name) end
    local info = debug.getinfo(2, "Sl")
    local file = info and info.source:sub(1, 1) == "@" and info.source:sub(2) or nil
    return setmetatable({ name = name, def = def, file = file, line = file and info.currentline or nil }, GraphSpec)
  end
end

M.fp32, M.fp16, M.bf16 = "fp32", "fp16", "bf16"
M.fp8_e4m3, M.fp8_e5m2, M.fp8_e8m0 = "fp8_e4m3", "fp8_e5m2", "fp8_e8m0"
M.int32, M.int64, M.bool = "int32", "int64", "bool"

return M
