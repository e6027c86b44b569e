-- kiln.graph: the graph IR — tensors with UIDs, nodes with named ports — and the builder
-- that spec bodies call (g:add(a, b), g:rmsnorm(x, w, {epsilon = 1e-6}), ...).
local errors = require "kiln.errors"
local dtypes = require "kiln.dtypes"
local ops = require "kiln.ops"
local shape = require "kiln.shape"

local M = {}

local Tensor = {}
Tensor.__index = Tensor
M.Tensor = Tensor

local Graph = {}
Graph.__index = function(g, key)
  local v = Graph[key]
  if v ~= nil then return v end
  if type(key) == "string" and ops.by_name[key] then
    return function(self, ...) return self:op(key, ...) end
  end
  if type(key) == "string" then
    return function() errors.raise("E_UNKNOWN_OP", "unknown op '%s'%s", key, M.suggest(key)) end
  end
end

-- Names users bring from other frameworks -> what kiln calls them (for unknown-op hints).
local HINTS = {
  where = "binary_select(a, b, mask): a where mask, else b", select = "binary_select(a, b, mask)",
  maximum = "max", minimum = "min", greater = "cmp_gt", less = "cmp_lt", equal = "cmp_eq",
  gt = "cmp_gt", ge = "cmp_ge", lt = "cmp_lt", le = "cmp_le", eq = "cmp_eq", ne = "cmp_neq",
  sum = "reduction(x, { mode = \"add\" })", mean = "reduction(x, { mode = \"avg\" })",
  layer_norm = "layernorm", rms_norm = "rmsnorm", silu = "swish", mm = "matmul", linear = "matmul",
  scaled_dot_product_attention = "sdpa",
}

-- ", did you mean 'gelu'?" for a known alias or a near miss among op names (edit distance <= 2).
function M.suggest(name)
  if HINTS[name] then return string.format(" (kiln calls it g:%s)", HINTS[name]) end
  local function dist(a, b)
    local prev = {}
    for j = 0, #b do prev[j] = j end
    for i = 1, #a do
      local cur = { [0] = i }
      for j = 1, #b do
        cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a:sub(i, i) == b:sub(j, j) and 0 or 1))
      end
      prev = cur
    end
    return prev[#b]
  end
  local best, bd = nil, 3
  local names = {}
  for n in pairs(ops.by_name) do names[#names + 1] = n end
  table.sort(names)
  for _, n in ipairs(names) do
    local d = dist(name, n)
    if d < bd then best, bd = n, d end
  end
  return best and string.format(" (did you mean '%s'?)", best) or ""
end
M.Graph = Graph

function M.is_tensor(x) return getmetatable(x) == Tensor end

-- Arithmetic on tensors builds nodes too: x + y is g:add(x, y).
local function binop(opname)
  return function(a, b)
    local g = (M.is_tensor(a) and a.graph) or b.graph
    return g:op(opname, a, b)
  end
end
Tensor.__add = binop("add")
Tensor.__sub = binop("sub")
Tensor.__mul = binop("mul")
Tensor.__div = binop("div")
Tensor.__pow = binop("pow")
Tensor.__unm = function(a) return a.graph:op("neg", a) end

-- A tensor or number as a spec wrote it, for hints ("x", "0").
local function operand(v)
  return M.is_tensor(v) and v.name or tostring(v)
end

-- Lua turns what <, <=, >, >= return into a boolean, so they cannot build a node: a typed
-- error names the op that does. a > b reaches here as b < a, hence both spellings.
local function compare(lua_op, flipped, cmp, flipped_cmp)
  return function(a, b)
    errors.raise("E_SPEC", "'%s %s %s' (or '%s %s %s') on tensors: Lua makes a boolean of it, not a tensor; use g:%s(%s, %s) (or g:%s(%s, %s))",
      operand(a), lua_op, operand(b), operand(b), flipped, operand(a), cmp, operand(a), operand(b), flipped_cmp, operand(b), operand(a))
  end
end
Tensor.__lt = compare("<", ">", "cmp_lt", "cmp_gt")
Tensor.__le = compare("<=", ">=", "cmp_le", "cmp_ge")
-- What a spec gets for x == w on tensors (its tensors are proxies, see spec.lua): Lua would
-- make a boolean of it, so a typed error points to cmp_eq, or rawequal for identity.
function M.eq_error(a, b)
  errors.raise("E_SPEC", "'%s == %s' (or ~=) on tensors: Lua makes a boolean of it, not a tensor; use g:cmp_eq(%s, %s) (or g:cmp_neq), or rawequal(%s, %s) to ask whether they are the same tensor",
    operand(a), operand(b), operand(a), operand(b), operand(a), operand(b))
end
Tensor.__tostring = function(t)
  return string.format("tensor %s (uid %d, %s %s)", t.name, t.uid, t.dtype or "?", shape.format(t.dims))
end

-- What a spec gets, after an op's present outputs, for each optional output the op did not
-- generate: a value that fails wherever it is used, so `local y, inv = g:rmsnorm(...)` without
-- phase = "training" cannot lose `inv` silently.
local Absent = {}
Absent.__index = Absent
M.Absent = Absent

function M.is_absent(x) return getmetatable(x) == Absent end

-- node: the op's node; port: the absent output; position: its place among the returned values;
-- file and line: the op call's, where an error found once the body has returned points.
function M.absent(node, port, position)
  local file, line = errors.location()
  return setmetatable({ node = node, port = port, position = position, file = file, line = line }, Absent)
end

-- The attribute that generates an optional output (generate_stats for Stats, has_dbias for
-- DBIAS, ...), for the hint; nil where an input does.
local function generating_attr(def, port)
  if def.attrs and def.attrs.phase then return 'phase = "training"' end
  local want = port:lower():gsub("[^%w]", "")
  local names = {}
  for k, a in pairs(def.attrs or {}) do
    if a.type == "boolean" and k:lower():gsub("[^%w]", ""):find(want, 1, true) then names[#names + 1] = k .. " = true" end
  end
  table.sort(names)
  return names[1]
end

-- "value 2 of rmsnorm 'rmsnorm_1', which does not generate INV_VARIANCE (...)".
function M.describe_absent(a)
  local n, present = a.node, {}
  for _, p in ipairs(n.def.output_ports) do
    if n.outputs[p.name] then present[#present + 1] = p.name end
  end
  local attr = generating_attr(n.def, a.port)
  return string.format("value %d of %s '%s', which returned only %s: its optional output %s is not generated (%s: docs/OPS.md)",
    a.position, n.op, n.name, table.concat(present, ", "), a.port,
    attr and ("the attribute " .. attr .. " generates it") or "an optional input of the op generates it")
end

-- Absent values for the optional outputs a node did not generate, numbered after the present ones.
function M.absent_outputs(node)
  local out, k = {}, 0
  for _, p in ipairs(node.def.output_ports) do
    if node.outputs[p.name] then k = k + 1 end
  end
  for _, p in ipairs(node.def.output_ports) do
    if not node.outputs[p.name] then out[#out + 1] = M.absent(node, p.name, k + #out + 1) end
  end
  return out
end

-- opts: name, io_dtype, intermediate_dtype, compute_dtype, dims ({name = {kind=, value=}}).
function M.new(opts)
  local g = setmetatable({
    name = opts.name,
    io_dtype = opts.io_dtype or "fp32",
    intermediate_dtype = opts.intermediate_dtype or "fp32",
    compute_dtype = opts.compute_dtype or "fp32",
    dims = opts.dims or {},
    tensors = {}, by_uid = {}, nodes = {}, used_names = {},
    next_uid = 1, producers = {},
  }, Graph)
  return g
end

function Graph:unique_name(base)
  local name, n = base, 1
  while self.used_names[name] do n = n + 1; name = base .. "_" .. n end
  self.used_names[name] = true
  return name
end

function Graph:new_uid(uid)
  if uid then
    if math.type(uid) ~= "integer" or uid <= 0 then errors.raise("E_UID", "uid must be a positive integer, got %s", tostring(uid)) end
    if self.by_uid[uid] then errors.raise("E_UID", "duplicate uid %d", uid) end
  else
    while self.by_uid[self.next_uid] do self.next_uid = self.next_uid + 1 end
    uid = self.next_uid
  end
  self.next_uid = math.max(self.next_uid, uid + 1)
  return uid
end

-- t: {name=, dtype=, dims=, strides=, role=, value=, uid=}
function Graph:add_tensor(t)
  t.uid = self:new_uid(t.uid)
  t.graph = self
  t.strides = t.strides or shape.row_major(t.dims)
  setmetatable(t, Tensor)
  self.by_uid[t.uid] = t
  self.tensors[#self.tensors + 1] = t
  return t
end

function Graph:input(name, dims, dtype, extra)
  extra = extra or {}
  if self.used_names[name] then errors.raise("E_SPEC", "two tensors named '%s'", name) end
  self.used_names[name] = true
  local dt = dtypes.canonical(dtype or self.io_dtype)
  if not dt then errors.raise("E_DTYPE", "input '%s': unknown dtype '%s'", name, tostring(dtype)) end
  return self:add_tensor { name = name, dtype = dt, dims = dims, strides = extra.strides,
                           role = extra.role or "input", uid = extra.uid }
end

function Graph:constant(value)
  if type(value) == "boolean" then value = value and 1 or 0 end
  return self:add_tensor { name = self:unique_name("const"), dtype = "fp32", dims = { 1 }, role = "constant",
                           value = value }
end

-- Validated attributes: defaults filled, types checked, unknown names rejected.
local function check_attrs(def, given, where)
  local out = {}
  local known = def.attrs or {}
  for k, v in pairs(given) do
    local spec = known[k]
    if not spec then
      local names = {}
      for n in pairs(known) do names[#names + 1] = n end
      table.sort(names)
      errors.raise("E_ATTR", "%s: unknown attribute '%s' (known: %s)", where, tostring(k),
        #names > 0 and table.concat(names, ", ") or "none")
    end
    local ty = spec.type or "any"
    local ok = ty == "any"
      or (ty == "number" and type(v) == "number")
      or (ty == "integer" and math.type(v) == "integer")
      or (ty == "boolean" and type(v) == "boolean")
      or (ty == "string" and type(v) == "string")
      or (ty == "list" and type(v) == "table")
    if not ok then errors.raise("E_ATTR", "%s: attribute '%s' must be a %s, got %s", where, k, ty, type(v)) end
    if spec.enum then
      local found = false
      for _, e in ipairs(spec.enum) do if e == v then found = true end end
      if not found then
        local vals = {}
        for _, e in ipairs(spec.enum) do vals[#vals + 1] = tostring(e) end
        errors.raise("E_ATTR", "%s: attribute '%s' must be one of %s, got '%s'", where, k, table.concat(vals, ", "), tostring(v))
      end
    end
    out[k] = v
  end
  for k, spec in pairs(known) do
    if out[k] == nil then
      if spec.required then errors.raise("E_ATTR", "%s: attribute '%s' is required", where, k) end
      if spec.default ~= nil then out[k] = spec.default end
    end
  end
  return out
end
M.check_attrs = check_attrs

-- The context handed to op infer functions (docs/INTERNALS.md, "Op registry").
local function make_ctx(g, where, compute_dtype)
  local ctx = { io_dtype = g.io_dtype, intermediate_dtype = g.intermediate_dtype,
                compute_dtype = compute_dtype or g.compute_dtype, op = where }
  function ctx:fail(code, fmt, ...) errors.raise(code, "%s: " .. fmt, where, ...) end
  function ctx:broadcast(a, b)
    local r, why = shape.broadcast(a, b)
    if not r then errors.raise("E_SHAPE", "%s: %s", where, why) end
    return r
  end
  function ctx:same_dim(a, b) return shape.same_dim(a, b) end
  -- a dim as the instance's tensors carry it: a specialized dim's name becomes its value
  function ctx:dim(d)
    local dd = type(d) == "string" and g.dims[d]
    return dd and dd.kind == "fixed" and dd.value or d
  end
  function ctx:rank(t) return #t.dims end
  function ctx:check_dtype(port, t, allowed)
    for _, d in ipairs(allowed) do if t.dtype == d then return end end
    errors.raise("E_DTYPE", "%s: port '%s' has dtype %s, allowed: %s", where, port, tostring(t.dtype), table.concat(allowed, ", "))
  end
  ctx.format = shape.format
  return ctx
end
M.make_ctx = make_ctx

-- Builds one node: g:op("add", a, b, {attrs}). Returns the present outputs in port order.
function Graph:op(opname, ...)
  local def = ops.get(opname)
  local args = table.pack(...)
  local attrs_given = {}
  if args.n > 0 and type(args[args.n]) == "table" and not M.is_tensor(args[args.n]) and not M.is_absent(args[args.n]) then
    attrs_given = args[args.n]
    args[args.n] = nil  -- the attribute table is no positional input
    args.n = args.n - 1
  end
  local node_name = attrs_given.name
  local compute = attrs_given.compute_data_type
  local out_dtypes = {}
  local rest = {}
  for k, v in pairs(attrs_given) do
    if k == "dtype" then out_dtypes[def.output_ports[1].name] = v
    elseif k == "dtypes" then for p, d in pairs(v) do out_dtypes[p] = d end
    elseif k ~= "name" and k ~= "compute_data_type" then rest[k] = v end
  end
  if node_name ~= nil and type(node_name) ~= "string" then errors.raise("E_ATTR", "%s: name must be a string", opname) end
  node_name = self:unique_name(node_name or (def.name .. "_" .. (#self.nodes + 1)))
  local where = string.format("%s '%s'", def.name, node_name)
  -- Tensors by keyword too: g:op("sdpa", {q = q, ...}) is not supported; inputs are positional.
  local ins = {}
  local np = #def.input_ports
  -- g:mul(x, g:rmsnorm(h, w)) expands the norm's absent outputs past mul's ports: not inputs
  while args.n > np and M.is_absent(args[args.n]) do args[args.n] = nil; args.n = args.n - 1 end
  if args.n > np then
    errors.raise("E_PORT", "%s takes at most %d inputs (%s), got %d", where, np, M.port_list(def.input_ports), args.n)
  end
  for i, p in ipairs(def.input_ports) do
    local v = args[i]
    if type(v) == "number" or type(v) == "boolean" then v = self:constant(v) end
    -- Ops may take keyword tensors in the attribute table (optional ports like bias).
    if v == nil and M.is_tensor(rest[p.name]) then v = rest[p.name]; rest[p.name] = nil end
    if M.is_absent(v) then
      errors.raise("E_PORT", "%s: port '%s' gets the %s (a call's trailing values: put it in parentheses to pass its first value only)", where, p.name,
        M.describe_absent(v))
    end
    if v ~= nil and not M.is_tensor(v) then
      errors.raise("E_PORT", "%s: port '%s' expects a tensor or a number, got %s", where, p.name, type(v))
    end
    if v ~= nil and v.graph ~= self then errors.raise("E_PORT", "%s: port '%s' gets a tensor of another graph", where, p.name) end
    if v == nil and not p.optional then
      errors.raise("E_PORT", "%s: missing input '%s' (inputs: %s)", where, p.name, M.port_list(def.input_ports))
    end
    ins[p.name] = v
  end
  for k, v in pairs(rest) do
    if M.is_absent(v) then errors.raise("E_PORT", "%s: '%s' gets the %s", where, k, M.describe_absent(v)) end
    if M.is_tensor(v) then errors.raise("E_PORT", "%s: unknown port '%s'", where, k) end
  end
  if compute ~= nil then
    compute = dtypes.canonical(compute) or errors.raise("E_DTYPE", "%s: unknown compute_data_type '%s'", where, tostring(compute))
  end
  for _, a in ipairs((def.alias_requires or {})[opname] or {}) do
    if rest[a] == nil then errors.raise("E_ATTR", "%s: %s needs attribute '%s'", where, opname, a) end
  end
  local attrs = check_attrs(def, rest, where)
  local ctx = make_ctx(self, where, compute)
  local outs = def.infer(ctx, ins, attrs) or {}
  local node = { op = def.name, name = node_name, inputs = {}, outputs = {}, attrs = attrs,
                 compute_dtype = compute or self.compute_dtype, def = def }
  for p, t in pairs(ins) do node.inputs[p] = t.uid end
  local results = {}
  for _, p in ipairs(def.output_ports) do
    local o = outs[p.name]
    if o then
      local want = out_dtypes[p.name]
      local dt = o.dtype
      if want ~= nil then
        dt = dtypes.canonical(want) or errors.raise("E_DTYPE", "%s: unknown dtype '%s' for output %s", where, tostring(want), p.name)
      end
      local allowed = def.out_dtypes and def.out_dtypes[p.name]
      if allowed and dt then
        local found = false
        for _, a in ipairs(allowed) do found = found or a == dt end
        if not found then
          errors.raise("E_DTYPE", "%s: output %s cannot be %s (allowed: %s); cast it with g:cast(t, \"%s\")", where,
            p.name, dt, table.concat(allowed, ", "), dt)
        end
      end
      local t = self:add_tensor { name = node_name .. "." .. p.name, dtype = dt or self.intermediate_dtype,
                                  dtype_default = dt == nil, dims = o.dims, strides = o.strides,
                                  role = "virtual" }
      node.outputs[p.name] = t.uid
      self.producers[t.uid] = node
      results[#results + 1] = t
    elseif not p.optional then
      errors.raise("E_PORT", "%s: op produced no '%s'", where, p.name)
    end
  end
  for p in pairs(out_dtypes) do
    if not node.outputs[p] then errors.raise("E_PORT", "%s: dtype given for absent output '%s'", where, p) end
  end
  self.nodes[#self.nodes + 1] = node
  return table.unpack(results)
end

-- g:cast(x, "bf16") is identity with a declared output dtype.
function Graph:cast(x, dtype, attrs)
  attrs = attrs or {}
  attrs.dtype = dtype
  return self:op("identity", x, attrs)
end

function M.port_list(ports)
  local t = {}
  for _, p in ipairs(ports) do t[#t + 1] = p.optional and (p.name .. "?") or p.name end
  return table.concat(t, ", ")
end

-- Marks the body's results as outputs, renamed to their keys; resolves context dtypes.
function Graph:finish(outputs)
  local names = {}
  for name in pairs(outputs) do
    if type(name) ~= "string" then errors.raise("E_SPEC", "body must return a table of name = tensor") end
    names[#names + 1] = name
  end
  table.sort(names)
  if #names == 0 then errors.raise("E_SPEC", "graph '%s' has no outputs (the body returned none)", self.name) end
  for _, name in ipairs(names) do
    local t = outputs[name]
    if M.is_absent(t) then
      errors.raise_at(t.file, t.line, "E_SPEC", "output '%s' is the %s", name, M.describe_absent(t))
    end
    if not M.is_tensor(t) then errors.raise("E_SPEC", "output '%s' is not a tensor", name) end
    if t.role == "input" then errors.raise("E_SPEC", "output '%s' is the input '%s' itself", name, t.name) end
    if t.role == "constant" then errors.raise("E_SPEC", "output '%s' is a constant", name) end
    if t.role == "output" then errors.raise("E_SPEC", "outputs '%s' and '%s' are the same tensor", t.name, name) end
    if self.used_names[name] and t.name ~= name then errors.raise("E_SPEC", "output name '%s' is already used", name) end
    self.used_names[name] = true
    t.role = "output"
    t.name = name
    if t.dtype_default then t.dtype = self.io_dtype end
  end
  self.output_names = names
  for _, t in ipairs(self.tensors) do t.dtype_default = nil end
  return self
end

-- Plain data (graph JSON form, docs/INTERNALS.md).
function Graph:to_data()
  local json_array = require("kiln.c").json_array
  local dims = {}
  for name, d in pairs(self.dims) do dims[name] = d end
  local tensors = json_array()
  for _, t in ipairs(self.tensors) do
    tensors[#tensors + 1] = { uid = t.uid, name = t.name, dtype = t.dtype, dims = json_array(shape.copy(t.dims)),
                              strides = json_array(shape.copy(t.strides)),
                              role = t.role == "scratch" and "virtual" or t.role, value = t.value }
  end
  local nodes = json_array()
  for _, n in ipairs(self.nodes) do
    nodes[#nodes + 1] = { op = n.op, name = n.name, inputs = n.inputs, outputs = n.outputs,
                          attrs = n.attrs, compute_dtype = n.compute_dtype }
  end
  return { schema = "kiln.graph", version = 1, name = self.name, io_dtype = self.io_dtype,
           intermediate_dtype = self.intermediate_dtype, compute_dtype = self.compute_dtype,
           dims = dims, tensors = tensors, nodes = nodes }
end

function Graph:to_json(indent)
  return require("kiln.c").json_encode(self:to_data(), indent)
end

function Graph:instance_key()
  local names = {}
  for name, d in pairs(self.dims) do if d.kind == "fixed" then names[#names + 1] = name end end
  table.sort(names)
  local parts = {}
  for _, n in ipairs(names) do parts[#parts + 1] = n .. "=" .. self.dims[n].value end
  return table.concat(parts, ",")
end

function Graph:dynamic_dims()
  local names = {}
  for name, d in pairs(self.dims) do if d.kind == "dynamic" then names[#names + 1] = name end end
  table.sort(names)
  return names
end

-- Consumers of each tensor uid: {uid = {node, ...}}.
function Graph:consumers()
  local c = {}
  for _, n in ipairs(self.nodes) do
    for _, uid in pairs(n.inputs) do
      c[uid] = c[uid] or {}
      table.insert(c[uid], n)
    end
  end
  return c
end

return M
