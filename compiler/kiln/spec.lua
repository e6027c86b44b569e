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
                    dofile = true, collectgarbage = true, loadstring = true, coroutine = true, _G = true }

local MAX_STRING = 64 * 1024   -- longest string a spec may hand to the compiler
local MAX_DEPTH = 16           -- deepest table nesting a spec may hand to the compiler
local MAX_ITEMS = 65536        -- most table entries one call may hand to the compiler
local TENSOR_FIELDS = { name = true, uid = true, dtype = true, dims = true, strides = true, role = true, value = true }
local GRAPH_FIELDS = { name = true, io_dtype = true, intermediate_dtype = true, compute_dtype = true, dims = true }
local GRAPH_METHODS = { op = true, cast = true, constant = true }

local function copy_lib(lib, drop)
  local t = {}
  for k, v in pairs(lib) do if not (drop and drop[k]) then t[k] = v end end
  return t
end

local function sandbox_error(fmt, ...) errors.raise("E_SANDBOX", fmt, ...) end

-- A membrane per spec load: the spec sees only proxies and copies of compiler objects, and
-- the compiler sees only plain copies of what the spec hands it, so neither can reach into
-- the other's tables, metatables or closures.
local function new_membrane()
  local m = { real = setmetatable({}, { __mode = "k" }), proxy = setmetatable({}, { __mode = "k" }) }
  m.dynamic = setmetatable({}, { __tostring = function() return "k.dynamic" end, __metatable = "kiln.dynamic",
                                 __newindex = function() sandbox_error("k.dynamic is read-only") end })
  m.real[m.dynamic] = dsl.dynamic
  m.proxy[dsl.dynamic] = m.dynamic
  return m
end

-- A compiler-bound copy of a spec value: raw reads only, so no spec metamethod runs later.
local function to_host(m, v, depth, count, keep_fn)
  local ty = type(v)
  if ty == "string" then
    if #v > MAX_STRING then errors.raise("E_LIMIT", "a string of %d bytes is too long for the compiler (max %d)", #v, MAX_STRING) end
    return v
  end
  if ty == "number" or ty == "boolean" or ty == "nil" then return v end
  if ty == "function" and keep_fn then return v end
  if ty ~= "table" then sandbox_error("a %s value cannot be handed to the compiler", ty) end
  if m.real[v] ~= nil then return m.real[v] end
  if depth > MAX_DEPTH then errors.raise("E_LIMIT", "tables nested deeper than %d (or cyclic) cannot be handed to the compiler", MAX_DEPTH) end
  local out = {}
  for k, x in next, v do
    count[1] = count[1] + 1
    if count[1] > MAX_ITEMS then errors.raise("E_LIMIT", "more than %d table entries in one call to the compiler", MAX_ITEMS) end
    local kt = type(k)
    if kt ~= "string" and kt ~= "number" and kt ~= "boolean" then sandbox_error("a %s table key cannot be handed to the compiler", kt) end
    out[to_host(m, k, depth + 1, count)] = to_host(m, x, depth + 1, count)
  end
  return out
end

local function host_args(m, ...)
  local t, count = table.pack(...), { 0 }
  for i = 1, t.n do t[i] = to_host(m, t[i], 1, count) end
  return t
end

local to_spec

-- A read-only proxy for a compiler object: an empty table whose guarded metatable forwards.
local function make_proxy(m, real, mt)
  local p = setmetatable({}, mt)
  m.real[p], m.proxy[real] = real, p
  return p
end

-- Methods of the graph builder, as the spec calls them: g:add(x, y), g:cast(x, "bf16").
local function graph_method(m, name)
  return function(self, ...)
    local g = m.real[self]
    if type(g) ~= "table" or graph.is_tensor(g) then
      errors.raise("E_SPEC", "call g:%s(...) with a colon, on the graph builder", tostring(name))
    end
    local args = host_args(m, ...)
    local before = #g.nodes
    local res = table.pack(g[name](g, table.unpack(args, 1, args.n)))
    if #g.nodes == before + 1 then
      for _, a in ipairs(graph.absent_outputs(g.nodes[#g.nodes])) do res.n = res.n + 1; res[res.n] = a end
    end
    return to_spec(m, table.unpack(res, 1, res.n))
  end
end

local function tensor_binop(m, fn)
  return function(a, b)
    local args = host_args(m, a, b)
    return to_spec(m, fn(args[1], args[2]))
  end
end

local function proxy_metatables(m)
  local T = graph.Tensor
  m.tensor_mt = {
    __metatable = "kiln.tensor",
    __index = function(p, key) return TENSOR_FIELDS[key] and to_spec(m, m.real[p][key]) or nil end,
    __newindex = function() sandbox_error("tensors are read-only") end,
    __tostring = function(p) return T.__tostring(m.real[p]) end,
    __add = tensor_binop(m, T.__add), __sub = tensor_binop(m, T.__sub), __mul = tensor_binop(m, T.__mul),
    __div = tensor_binop(m, T.__div), __pow = tensor_binop(m, T.__pow),
    __lt = tensor_binop(m, T.__lt), __le = tensor_binop(m, T.__le), __eq = tensor_binop(m, graph.eq_error),
    __unm = function(a) return to_spec(m, T.__unm(m.real[a])) end,
  }
  local function absent_use(what)
    return function(p) errors.raise("E_SPEC", "%s the %s", what, graph.describe_absent(m.real[p])) end
  end
  local arith = function(a, b)
    local p = m.real[a] and graph.is_absent(m.real[a]) and a or b
    errors.raise("E_SPEC", "arithmetic on the %s", graph.describe_absent(m.real[p]))
  end
  m.absent_mt = {
    __metatable = "kiln.absent_output",
    __index = absent_use("reading a field of"), __newindex = absent_use("writing to"),
    __tostring = function(p) return "absent " .. graph.describe_absent(m.real[p]) end,
    __add = arith, __sub = arith, __mul = arith, __div = arith, __pow = arith, __unm = arith, __lt = arith, __le = arith,
  }
  m.graph_mt = {
    __metatable = "kiln.graph",
    __index = function(p, key)
      if GRAPH_FIELDS[key] then return to_spec(m, m.real[p][key]) end
      if type(key) ~= "string" then return nil end
      if GRAPH_METHODS[key] or graph.Graph[key] == nil then return graph_method(m, key) end
      return function() errors.raise("E_UNKNOWN_OP", "unknown op '%s'", key) end
    end,
    __newindex = function() sandbox_error("the graph builder is read-only") end,
    __tostring = function(p) return "graph " .. tostring(m.real[p].name) end,
  }
end

-- What the spec gets for a compiler value: the same primitive, a proxy, or a fresh copy.
function to_spec(m, v, ...)
  if select("#", ...) > 0 then return to_spec(m, v), to_spec(m, ...) end
  if type(v) ~= "table" then return v end
  if m.proxy[v] then return m.proxy[v] end
  if graph.is_tensor(v) then return make_proxy(m, v, m.tensor_mt) end
  if graph.is_absent(v) then return make_proxy(m, v, m.absent_mt) end
  if rawequal(debug.getmetatable(v), graph.Graph) then return make_proxy(m, v, m.graph_mt) end
  local out = {}
  for k, x in next, v do
    if type(x) ~= "function" then out[k] = to_spec(m, x) end
  end
  return out
end

-- A spec-safe copy of a caught kiln error (the real one carries the shared metatable).
local function spec_error(m, e)
  if type(e) ~= "table" or not rawequal(debug.getmetatable(e), errors.Error) then return e end
  m.error_mt = m.error_mt or { __tostring = errors.Error.__tostring, __metatable = "kiln.error" }
  return setmetatable({ code = rawget(e, "code"), msg = rawget(e, "msg"), file = rawget(e, "file"),
                        line = rawget(e, "line") }, m.error_mt)
end

local function spec_pcall(m)
  local function pass(ok, ...) if ok then return ok, ... end return ok, spec_error(m, (...)) end
  return function(f, ...) return pass(pcall(f, ...)) end
end

-- The handler runs after the unwind, not as the message handler: a message handler runs
-- with hooks off, out of reach of the budget.
local function spec_xpcall(m)
  return function(f, handler, ...)
    local function pass(ok, ...)
      if ok then return ok, ... end
      local e = spec_error(m, (...))
      if type(handler) ~= "function" then return false, e end
      return false, select(2, pcall(handler, e))
    end
    return pass(pcall(f, ...))
  end
end

-- k.graph for this load: the graph spec itself stays on the compiler's side of the membrane.
local function spec_graph(m)
  return function(name)
    local make = dsl.graph(name)
    return function(def)
      if type(def) ~= "table" then errors.raise("E_SPEC", "k.graph '%s' needs a table { ... }", name) end
      local copy = {}
      for k, v in next, def do copy[to_host(m, k, 1, { 0 })] = to_host(m, v, 1, { 0 }, k == "body") end
      local gs = make(copy)
      local info = debug.getinfo(2, "Sl")
      if info and info.source:sub(1, 1) == "@" then gs.file, gs.line = info.source:sub(2), info.currentline end
      local handle = setmetatable({}, { __metatable = "kiln.graph_spec", __index = { name = name },
                                        __newindex = function() sandbox_error("a graph spec is read-only") end })
      m.specs[handle] = gs
      return handle
    end
  end
end

local function spec_module(m)
  local k = copy_lib(dsl, { GraphSpec = true })
  k.dynamic, k.graph = m.dynamic, spec_graph(m)
  return k
end

-- Raw access only to the spec's own tables: proxies and sentinels are the compiler's.
local function guard_target(m, t, what)
  if m.real[t] ~= nil or m.specs[t] ~= nil then sandbox_error("%s on a kiln object is not allowed", what) end
end

local function spec_setmetatable(m)
  return function(t, mt)
    guard_target(m, t, "setmetatable")
    -- a finalizer would run later, outside the spec budget
    if type(mt) == "table" and rawget(mt, "__gc") ~= nil then sandbox_error("__gc metamethods are not available to specs") end
    return setmetatable(t, mt)
  end
end

local function spec_rawset(m)
  return function(t, k, v) guard_target(m, t, "rawset"); return rawset(t, k, v) end
end

local function sandbox_env(m)
  local k = spec_module(m)
  local env = {
    assert = assert, error = error, ipairs = ipairs, next = next, pairs = pairs, pcall = spec_pcall(m),
    select = select, tonumber = tonumber, tostring = tostring, type = type, xpcall = spec_xpcall(m),
    rawequal = rawequal, rawlen = rawlen, rawget = rawget, rawset = spec_rawset(m),
    setmetatable = spec_setmetatable(m), getmetatable = getmetatable, _VERSION = _VERSION,
    string = copy_lib(string, { dump = true }), table = copy_lib(table), math = copy_lib(math, { randomseed = true }),
    utf8 = copy_lib(utf8),
    print = function(...)  -- specs may print diagnostics; they go to stderr, never stdout
      local t = table.pack(...)
      for i = 1, t.n do t[i] = tostring(t[i]) end
      io.stderr:write(table.concat(t, "\t"), "\n")
    end,
  }
  env.require = function(name)
    if name == "kiln" then return k end
    errors.raise("E_SANDBOX", "specs may only require \"kiln\" (not \"%s\")", tostring(name))
  end
  return setmetatable(env, {
    __index = function(_, key)
      if FORBIDDEN[key] then errors.raise("E_SANDBOX", "'%s' is not available to specs (sandbox)", tostring(key)) end
      return nil
    end,
  })
end

-- A typed error built from raw fields only: whatever the spec threw, printing it runs no spec code.
local function host_error(e)
  if type(e) == "string" then
    if #e > MAX_STRING then e = e:sub(1, MAX_STRING) .. "..." end
    return errors.from_lua(e, "E_SPEC")
  end
  if type(e) ~= "table" then return errors.new("E_SPEC", "spec raised a " .. type(e) .. " value") end
  local code, msg, file, line = rawget(e, "code"), rawget(e, "msg"), rawget(e, "file"), rawget(e, "line")
  if type(code) ~= "string" or not code:match("^E_[%u_]+$") or #code > 64 then
    return errors.new("E_SPEC", "spec raised a table value")
  end
  if type(msg) ~= "string" then msg = "(no message)" end
  if #msg > MAX_STRING then msg = msg:sub(1, MAX_STRING) .. "..." end
  if type(file) ~= "string" or #file > 4096 then file = nil end
  if math.type(line) ~= "integer" then line = nil end
  return errors.new(code, msg, file, line)
end

-- Runs fn under the spec budget; the budget stops whatever happens.
local function budgeted(fn, ...)
  c.budget(MAX_INSTR, MAX_MEM)
  local res = table.pack(pcall(fn, ...))
  c.budget(0)
  if not res[1] then error(host_error(res[2]), 0) end
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
local function instantiate(m, gs, dims, combo)
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
      for j, s in ipairs(spec.strides) do
        if type(s) ~= "string" and math.type(s) ~= "integer" then
          errors.raise_at(gs.file, gs.line, "E_SPEC", "graph '%s': input '%s' has a bad stride", gs.name, name)
        end
        strides[j] = type(s) == "string" and resolve_stride(name, s) or s
      end
      if #strides ~= #d then
        errors.raise_at(gs.file, gs.line, "E_SHAPE", "graph '%s': input '%s' has %d dims but %d strides", gs.name, name, #d, #strides)
      end
    end
    args[i] = g:input(name, d, spec.dtype, { uid = spec.uid, strides = strides, role = spec.scalar and "scalar" or nil })
  end
  local outs = def.body(to_spec(m, g, table.unpack(args, 1, #order)))
  outs = to_host(m, outs, 1, { 0 })
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
  local m = new_membrane()
  m.specs = setmetatable({}, { __mode = "k" })
  proxy_metatables(m)
  local chunk, perr = load(text, "@" .. path, "t", sandbox_env(m))
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
    if m.specs[res] then specs = { m.specs[res] }
    elseif type(res) == "table" and rawlen(res) > 0 then
      for i = 1, rawlen(res) do
        local s = m.specs[rawget(res, i)]
        if not s then errors.raise_at(path, nil, "E_SPEC", "a spec returns k.graph(...) or a list of them") end
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
          local ok, g = pcall(instantiate, m, gs, dims, combo)
          if not ok then
            local e = host_error(g)
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
