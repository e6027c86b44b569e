-- kiln.spec: loads a spec file in the sandbox and instantiates its graphs, one graph
-- instance per combination of specialized dim values.
local c = require "kiln.c"
local errors = require "kiln.errors"
local shape = require "kiln.shape"
local dsl = require "kiln.dsl"
local dtypes = require "kiln.dtypes"
local graph = require "kiln.graph"

local M = {}

local MAX_INSTR = tonumber(c.getenv("KILN_SPEC_MAX_INSTR") or "") or 200000000
local MAX_MEM = tonumber(c.getenv("KILN_SPEC_MAX_MEM") or "") or 256 * 1024 * 1024

-- Globals a spec may not touch: each access is a typed sandbox error.
local FORBIDDEN = { io = true, os = true, debug = true, package = true, load = true, loadfile = true,
                    dofile = true, collectgarbage = true, loadstring = true, rawset = false }

local function copy_lib(lib, drop)
  local t = {}
  for k, v in pairs(lib) do if not (drop and drop[k]) then t[k] = v end end
  return t
end

local function sandbox_env()
  local env = {
    assert = assert, error = error, ipairs = ipairs, next = next, pairs = pairs, pcall = pcall,
    select = select, tonumber = tonumber, tostring = tostring, type = type, xpcall = xpcall,
    rawequal = rawequal, rawlen = rawlen, rawget = rawget, setmetatable = setmetatable,
    getmetatable = getmetatable, _VERSION = _VERSION,
    string = copy_lib(string, { dump = true }), table = copy_lib(table), math = copy_lib(math),
    utf8 = copy_lib(utf8),
    print = function(...)  -- specs may print diagnostics; they go to stderr, never stdout
      local t = table.pack(...)
      for i = 1, t.n do t[i] = tostring(t[i]) end
      io.stderr:write(table.concat(t, "\t"), "\n")
    end,
  }
  env.require = function(name)
    if name == "kiln" then return dsl end
    errors.raise("E_SANDBOX", "specs may only require \"kiln\" (not \"%s\")", tostring(name))
  end
  return setmetatable(env, {
    __index = function(_, k)
      if FORBIDDEN[k] then errors.raise("E_SANDBOX", "'%s' is not available to specs (sandbox)", tostring(k)) end
      return nil
    end,
  })
end

-- Runs fn under the spec budget; the budget stops whatever happens.
local function budgeted(fn, ...)
  c.budget(MAX_INSTR, MAX_MEM)
  local res = table.pack(pcall(fn, ...))
  c.budget(0)
  if not res[1] then error(errors.from_lua(res[2], "E_SPEC"), 0) end
  return table.unpack(res, 2, res.n)
end

-- The dims of a graph spec: { name = {kind = "dynamic"} | {kind = "fixed", values = {...}} }.
local function parse_dims(gs, sets, keep_dynamic)
  local out = {}
  for name, v in pairs(gs.def.dims or {}) do
    if type(name) ~= "string" or not name:match("^[%a_][%w_]*$") then
      errors.raise_at(gs.file, gs.line, "E_SPEC", "graph '%s': bad dim name %s", gs.name, tostring(name))
    end
    if v == dsl.dynamic then out[name] = { kind = "dynamic" }
    elseif math.type(v) == "integer" and v > 0 then out[name] = { kind = "fixed", values = { v } }
    elseif type(v) == "table" and #v > 0 then
      for _, x in ipairs(v) do
        if math.type(x) ~= "integer" or x <= 0 then
          errors.raise_at(gs.file, gs.line, "E_SPEC", "graph '%s': dim %s values must be positive integers", gs.name, name)
        end
      end
      out[name] = { kind = "fixed", values = v }
    else
      errors.raise_at(gs.file, gs.line, "E_SPEC",
        "graph '%s': dim %s must be k.dynamic, a positive integer or a list of them", gs.name, name)
    end
  end
  for name, value in pairs(sets or {}) do
    -- keep_dynamic: --set gives a dynamic dim its run-time value, not a specialization
    if out[name] and not (keep_dynamic and out[name].kind == "dynamic") then
      out[name] = { kind = "fixed", values = { value } }
    end
  end
  return out
end

-- Every combination of fixed values, in sorted dim-name order.
local function combinations(dims)
  local names = {}
  for n, d in pairs(dims) do if d.kind == "fixed" then names[#names + 1] = n end end
  table.sort(names)
  local combos = { {} }
  for _, n in ipairs(names) do
    local next_combos = {}
    for _, combo in ipairs(combos) do
      for _, v in ipairs(dims[n].values) do
        local c2 = {}
        for k, x in pairs(combo) do c2[k] = x end
        c2[n] = v
        next_combos[#next_combos + 1] = c2
      end
    end
    combos = next_combos
  end
  return combos
end

local function param_names(fn)
  local names, i = {}, 1
  while true do
    local n = debug.getlocal(fn, i)
    if not n then break end
    names[#names + 1] = n
    i = i + 1
  end
  return names
end

-- Builds one graph instance of a graph spec for one combination of dim values.
local function instantiate(gs, dims, combo)
  local def = gs.def
  local where = function() return gs.file, gs.line end
  local io_dtype = dtypes.canonical(def.dtype or "fp32")
  if not io_dtype then errors.raise_at(gs.file, gs.line, "E_DTYPE", "graph '%s': unknown dtype '%s'", gs.name, def.dtype) end
  local inter = dtypes.canonical(def.intermediate_dtype or "fp32")
  local compute = dtypes.canonical(def.compute_dtype or "fp32")
  if not inter or not compute then
    errors.raise_at(gs.file, gs.line, "E_DTYPE", "graph '%s': unknown intermediate or compute dtype", gs.name)
  end
  local gdims = {}
  for n, d in pairs(dims) do
    gdims[n] = d.kind == "dynamic" and { kind = "dynamic" } or { kind = "fixed", value = combo[n] }
  end
  local g = graph.new { name = gs.name, io_dtype = io_dtype, intermediate_dtype = inter, compute_dtype = compute,
                        dims = gdims }
  local function resolve_dim(iname, d)
    if math.type(d) == "integer" and d > 0 then return d end
    if type(d) == "string" then
      local dd = dims[d]
      if not dd then
        local f, l = where()
        errors.raise_at(f, l, "E_SPEC", "graph '%s': input '%s' uses undeclared dim '%s'", gs.name, iname, d)
      end
      return dd.kind == "dynamic" and d or combo[d]
    end
    local f, l = where()
    errors.raise_at(f, l, "E_SPEC", "graph '%s': input '%s' has a bad dim %s", gs.name, iname, tostring(d))
  end
  -- a stride: a dim, or a product of dims and integers ("S*512": BSHD's batch stride)
  local function resolve_stride(iname, s)
    local names, const = {}, 1
    for part in s:gmatch("[^*]+") do
      local v = part:match("^%d+$") and math.tointeger(tonumber(part)) or resolve_dim(iname, part)
      if type(v) == "string" then names[#names + 1] = v else const = const * v end
    end
    return shape.product_value(names, const)
  end
  local params = param_names(def.body)
  local order, seen = {}, {}
  for i = 2, #params do
    local p = params[i]
    if def.inputs[p] == nil then
      errors.raise_at(gs.file, gs.line, "E_SPEC", "graph '%s': body parameter '%s' is not an input", gs.name, p)
    end
    order[#order + 1] = p
    seen[p] = true
  end
  local rest = {}
  for name in pairs(def.inputs) do if not seen[name] then rest[#rest + 1] = name end end
  table.sort(rest)
  for _, n in ipairs(rest) do order[#order + 1] = n end
  local args = {}
  for i, name in ipairs(order) do
    local spec = def.inputs[name]
    if type(name) ~= "string" or type(spec) ~= "table" then
      errors.raise_at(gs.file, gs.line, "E_SPEC", "graph '%s': inputs must be name = { dims... }", gs.name)
    end
    local d = {}
    for j, x in ipairs(spec) do d[j] = resolve_dim(name, x) end
    if #d == 0 then d = { 1 } end
    for k in pairs(spec) do
      if math.type(k) ~= "integer" and k ~= "dtype" and k ~= "uid" and k ~= "strides" and k ~= "scalar" then
        errors.raise_at(gs.file, gs.line, "E_SPEC", "graph '%s': input '%s' has unknown field '%s'", gs.name, name, tostring(k))
      end
    end
    local strides
    if spec.strides then
      strides = {}
      for j, s in ipairs(spec.strides) do strides[j] = type(s) == "string" and resolve_stride(name, s) or s end
      if #strides ~= #d then
        errors.raise_at(gs.file, gs.line, "E_SHAPE", "graph '%s': input '%s' has %d dims but %d strides", gs.name, name, #d, #strides)
      end
    end
    args[i] = g:input(name, d, spec.dtype, { uid = spec.uid, strides = strides, role = spec.scalar and "scalar" or nil })
  end
  local outs = def.body(g, table.unpack(args, 1, #order))
  if graph.is_tensor(outs) then outs = { y = outs } end
  if type(outs) ~= "table" then
    errors.raise_at(gs.file, gs.line, "E_SPEC", "graph '%s': body must return { name = tensor, ... }", gs.name)
  end
  return g:finish(outs)
end

-- Loads a spec file: returns a list of graph instances (opts.set = {DIM = value};
-- opts.keep_dynamic leaves dynamic dims dynamic).
function M.load(path, opts)
  opts = opts or {}
  local text, err = c.read_file(path)
  if not text then errors.raise_at(nil, nil, "E_IO", "cannot read spec: %s", err) end
  local chunk, perr = load(text, "@" .. path, "t", sandbox_env())
  if not chunk then
    local e = errors.from_lua(perr, "E_SYNTAX")
    e.code = "E_SYNTAX"
    error(e, 0)
  end
  -- `return k.graph "x" {...}` is a tail call, so the line comes from the text itself.
  local function graph_line(name)
    local n = 0
    for line in (text .. "\n"):gmatch("([^\n]*)\n") do
      n = n + 1
      if line:find("graph%s*%(?%s*[\"']" .. name:gsub("%p", "%%%0") .. "[\"']") then return n end
    end
  end
  local ok, result = pcall(budgeted, function()
    local res = chunk()
    local specs = {}
    if getmetatable(res) == dsl.GraphSpec then specs = { res }
    elseif type(res) == "table" and #res > 0 then
      for _, s in ipairs(res) do
        if getmetatable(s) ~= dsl.GraphSpec then
          errors.raise_at(path, nil, "E_SPEC", "a spec returns k.graph(...) or a list of them")
        end
        specs[#specs + 1] = s
      end
    else
      errors.raise_at(path, nil, "E_SPEC", "a spec must return k.graph \"name\" { ... } (or a list of them)")
    end
    local instances = {}
    for _, gs in ipairs(specs) do
      gs.file = gs.file or path
      gs.line = gs.line or graph_line(gs.name)
      if opts.graph == nil or opts.graph == gs.name then
        local dims = parse_dims(gs, opts.set, opts.keep_dynamic)
        for _, combo in ipairs(combinations(dims)) do
          local ok, g = pcall(instantiate, gs, dims, combo)
          if not ok then
            local e = errors.from_lua(g, "E_SPEC")
            if not e.file then e.file, e.line = gs.file, gs.line end
            error(e, 0)
          end
          instances[#instances + 1] = g
        end
      end
    end
    if opts.graph and #instances == 0 then
      errors.raise_at(path, nil, "E_SPEC", "no graph named '%s' in this spec", opts.graph)
    end
    return instances
  end)
  if not ok then
    if not result.file then result.file = path end
    error(result, 0)
  end
  return result
end

-- Any graph file: graph JSON (.json, one instance) or a spec (.lua, its instances).
function M.load_graphs(path, opts)
  if path:match("%.json$") then
    local text, err = c.read_file(path)
    if not text then errors.raise_at(nil, nil, "E_IO", "cannot read %s", err) end
    return { require("kiln.graphjson").parse(text, path) }
  end
  return M.load(path, opts)
end

return M
