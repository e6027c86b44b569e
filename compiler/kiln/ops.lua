-- kiln.ops: the op registry (every op family of compiler/kiln/ops/*.lua), by name and alias.
local errors = require "kiln.errors"

local FAMILIES = { "pointwise", "reduction", "norm", "softmax", "matmul", "sdpa", "gdn", "conv1d", "quantize" }

local M = { by_name = {}, list = {} }

local function add(def, family_file)
  assert(def.name, family_file .. ": op without a name")
  local function claim(name)
    if M.by_name[name] then error(family_file .. ": duplicate op name " .. name) end
    M.by_name[name] = def
  end
  claim(def.name)
  for _, a in ipairs(def.aliases or {}) do claim(a) end
  M.list[#M.list + 1] = def
end

for _, fam in ipairs(FAMILIES) do
  local ok, defs = pcall(require, "kiln.ops." .. fam)
  if ok then
    for _, def in ipairs(defs) do
      def.family = def.family or fam
      add(def, fam)
    end
  elseif not tostring(defs):find("module 'kiln.ops." .. fam .. "' not found", 1, true) then
    error(defs, 0)
  end
end

-- Port lists in the registry are names or {name, optional=true}: normalize to {name=, optional=}.
local function ports(list)
  local out = {}
  for i, p in ipairs(list or {}) do
    if type(p) == "string" then out[i] = { name = p, optional = false }
    else out[i] = { name = p[1] or p.name, optional = p.optional and true or false } end
  end
  return out
end

for _, def in ipairs(M.list) do
  def.input_ports = ports(def.inputs)
  def.output_ports = ports(def.outputs)
end

function M.get(name)
  local def = M.by_name[name]
  if not def then errors.raise("E_UNKNOWN_OP", "unknown op '%s'", tostring(name)) end
  return def
end

return M
