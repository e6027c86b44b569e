-- tests/ops_registry.lua: checks the op registry (compiler/kiln/ops/*.lua) with a stub ctx.
-- Run from the repo root with a plain interpreter: lua5.4 tests/ops_registry.lua (TAP).
package.path = "compiler/?.lua;compiler/?/init.lua;" .. package.path

local FAMILIES = { "pointwise", "reduction", "norm", "softmax", "matmul", "sdpa", "gdn", "conv1d", "quantize" }

-- TAP ---------------------------------------------------------------------------------

local results = {}
local VERBOSE = os.getenv("KILN_TEST_VERBOSE") == "1"  -- also print the messages of expected errors
local function record(ok, name, diag)
  results[#results + 1] = { ok = ok, name = name, diag = diag }
end

-- Runs fn(); a test fails when fn raises or returns false, nil + message.
local function test(name, fn)
  local ok, res, msg = pcall(fn)
  if not ok then record(false, name, "raised: " .. tostring(type(res) == "table" and (res.code .. ": " .. res.msg) or res))
  elseif res == false then record(false, name, msg)
  else record(true, name, VERBOSE and msg or nil) end
end

-- Stub ctx (docs/INTERNALS.md "Op registry"), failing like kiln.graph: "op: message" -------

local Err = {}
Err.__tostring = function(e) return e.code .. ": " .. e.msg end

local function new_ctx(where, opts)
  opts = opts or {}
  local ctx = { io_dtype = opts.io_dtype or "bf16", intermediate_dtype = opts.intermediate_dtype or "fp32",
                compute_dtype = opts.compute_dtype or "fp32" }
  function ctx:fail(code, fmt, ...)
    error(setmetatable({ code = code, msg = where .. ": " .. string.format(fmt, ...) }, Err), 0)
  end
  function ctx:same_dim(a, b) return a == b end
  function ctx:dim(d) return (opts.dims or {})[d] or d end
  function ctx:rank(t) return #t.dims end
  function ctx:broadcast(a, b)
    local n, out = math.max(#a, #b), {}
    for i = 1, n do
      local x, y = a[#a - n + i] or 1, b[#b - n + i] or 1
      if x == y or y == 1 then out[i] = x
      elseif x == 1 then out[i] = y
      else self:fail("E_SHAPE", "cannot broadcast") end
    end
    return out
  end
  function ctx:check_dtype(port, t, allowed)
    local dt = t.dtype or self.intermediate_dtype
    for _, d in ipairs(allowed) do if d == dt then return end end
    self:fail("E_DTYPE", "port '%s' has dtype %s, allowed: %s", port, tostring(dt), table.concat(allowed, ", "))
  end
  return ctx
end

-- The attribute rules of docs/INTERNALS.md, as the graph applies them before infer.
local TYPES = { number = true, integer = true, boolean = true, string = true, list = true, any = true }
local function type_ok(ty, v)
  return ty == "any" or (ty == "number" and type(v) == "number") or (ty == "integer" and math.type(v) == "integer")
    or (ty == "boolean" and type(v) == "boolean") or (ty == "string" and type(v) == "string")
    or (ty == "list" and type(v) == "table")
end

local function check_attrs(ctx, def, given)
  local out, keys = {}, {}
  for k in pairs(given) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local spec, v = def.attrs[k], given[k]
    if not spec then ctx:fail("E_ATTR", "unknown attribute '%s'", k) end
    if not type_ok(spec.type or "any", v) then ctx:fail("E_ATTR", "attribute '%s' must be a %s", k, spec.type) end
    if spec.enum then
      local found = false
      for _, e in ipairs(spec.enum) do found = found or e == v end
      if not found then ctx:fail("E_ATTR", "attribute '%s': bad value '%s'", k, tostring(v)) end
    end
    out[k] = v
  end
  for k, spec in pairs(def.attrs) do
    if out[k] == nil then
      if spec.required then ctx:fail("E_ATTR", "attribute '%s' is required", k) end
      out[k] = spec.default
    end
  end
  return out
end

-- Registry ----------------------------------------------------------------------------

local util = require "kiln.ops.util"
local by_name, all, loaded = {}, {}, {}
for _, fam in ipairs(FAMILIES) do
  test("load kiln.ops." .. fam, function()
    local defs = require("kiln.ops." .. fam)
    if type(defs) ~= "table" or #defs == 0 then return false, "did not return a list of op definitions" end
    loaded[fam] = defs
    for _, d in ipairs(defs) do
      all[#all + 1] = d
      if type(d.name) == "string" and not by_name[d.name] then by_name[d.name] = d end
      for _, a in ipairs(type(d.aliases) == "table" and d.aliases or {}) do by_name[a] = by_name[a] or d end
    end
  end)
end

local function port_names(list)
  local t = {}
  for i, p in ipairs(list) do t[i] = util.port_name(p) end
  return t
end

-- Calls op `name` like the graph does: ports, attrs, infer, then checks what infer returned.
local function call(name, ins, attrs, opts)
  local def = assert(by_name[name], "no op " .. name)
  local ctx = new_ctx(name, opts)
  return pcall(function()
    local known = {}
    for _, p in ipairs(def.inputs) do
      local pn = util.port_name(p)
      known[pn] = true
      if ins[pn] == nil and not util.port_optional(p) then ctx:fail("E_PORT", "missing input '%s'", pn) end
    end
    for k in pairs(ins) do if not known[k] then ctx:fail("E_PORT", "unknown port '%s'", k) end end
    local a = check_attrs(ctx, def, attrs or {})
    local outs = def.infer(ctx, ins, a)
    local declared = {}
    for _, p in ipairs(def.outputs) do
      local pn = util.port_name(p)
      declared[pn] = true
      if outs[pn] == nil and not util.port_optional(p) then error("infer returned no required output " .. pn) end
    end
    for k, o in pairs(outs) do
      if not declared[k] then error("infer returned unknown output " .. tostring(k)) end
      if type(o.dims) ~= "table" or #o.dims == 0 then error("output " .. k .. " has no dims") end
      for _, d in ipairs(o.dims) do
        if not util.is_dim(d) then error("output " .. k .. " has a bad dim " .. tostring(d)) end
      end
    end
    return outs
  end)
end

local function T(dims, dtype, role) return { dims = dims, dtype = dtype or "bf16", role = role or "input" } end

local function same(a, b)
  if type(a) ~= "table" or type(b) ~= "table" or #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

-- expect_ok(desc, op, ins, attrs, {Port = {dims, dtype}}, opts): `false` as dtype = nil.
local function expect_ok(desc, op, ins, attrs, want, opts)
  test(desc, function()
    local ok, outs = call(op, ins, attrs, opts)
    if not ok then return false, "failed: " .. tostring(outs) end
    for port, w in pairs(want or {}) do
      local o = outs[port]
      if w == "absent" then
        if o ~= nil then return false, port .. " should be absent" end
      else
        if not o then return false, "no output " .. port end
        if not same(o.dims, w[1]) then return false, port .. " dims " .. util.fmt(o.dims) .. ", want " .. util.fmt(w[1]) end
        local wd = w[2]
        if wd == false then wd = nil end
        if wd ~= "any" and o.dtype ~= wd then
          return false, port .. " dtype " .. tostring(o.dtype) .. ", want " .. tostring(wd)
        end
        if w.strides and not same(o.strides, w.strides) then
          return false, port .. " strides " .. util.fmt(o.strides) .. ", want " .. util.fmt(w.strides)
        end
      end
    end
    return true
  end)
end

local function expect_err(desc, op, ins, attrs, code, pattern, opts)
  test(desc .. " -> " .. code, function()
    local ok, e = call(op, ins, attrs, opts)
    if ok then return false, "accepted" end
    if getmetatable(e) ~= Err then return false, "raised a non-typed error: " .. tostring(e) end
    if e.code ~= code then return false, "got " .. tostring(e) end
    if pattern and not e.msg:find(pattern, 1, true) then return false, "message lacks '" .. pattern .. "': " .. e.msg end
    return true, e.msg
  end)
end

-- Registry shape ------------------------------------------------------------------------

local function check_ports(list, what)
  if type(list) ~= "table" or #list == 0 then return false, what .. " must be a non-empty list" end
  local seen = {}
  for _, p in ipairs(list) do
    local pn = type(p) == "string" and p or (type(p) == "table" and p[1])
    if type(pn) ~= "string" or not pn:match("^[%a_][%w_]*$") then return false, what .. ": bad port entry" end
    if type(p) == "table" and p.optional ~= nil and type(p.optional) ~= "boolean" then
      return false, what .. ": optional must be a boolean"
    end
    if seen[pn] then return false, what .. ": duplicate port " .. pn end
    seen[pn] = true
  end
  return seen
end

for _, fam in ipairs(FAMILIES) do
  for _, d in ipairs(loaded[fam] or {}) do
    test(string.format("%s: definition fields", tostring(d.name)), function()
      if type(d.name) ~= "string" or not d.name:match("^[%l_][%w_]*$") then return false, "bad name" end
      if d.family ~= fam then return false, "family is " .. tostring(d.family) .. ", file is " .. fam end
      if type(d.mode) ~= "string" or not d.mode:match("^[%u%d_]+$") then return false, "bad mode" end
      local ins, e1 = check_ports(d.inputs, "inputs")
      if not ins then return false, e1 end
      local outs, e2 = check_ports(d.outputs, "outputs")
      if not outs then return false, e2 end
      if type(d.aliases) ~= "table" then return false, "aliases must be a list" end
      if type(d.attrs) ~= "table" then return false, "attrs must be a table" end
      if type(d.infer) ~= "function" then return false, "infer must be a function" end
      for k, s in pairs(d.attrs) do
        if not TYPES[s.type] then return false, "attr " .. k .. ": bad type " .. tostring(s.type) end
        if s.enum and (s.type ~= "string" or #s.enum == 0) then return false, "attr " .. k .. ": enum needs type string" end
        if s.required and s.default ~= nil then return false, "attr " .. k .. ": required with a default" end
        if s.default ~= nil then
          if not type_ok(s.type, s.default) then return false, "attr " .. k .. ": default has the wrong type" end
          if s.enum then
            local found = false
            for _, e in ipairs(s.enum) do found = found or e == s.default end
            if not found then return false, "attr " .. k .. ": default not in enum" end
          end
        end
      end
      for port, list in pairs(d.out_dtypes or {}) do
        if not outs[port] or type(list) ~= "table" then return false, "out_dtypes: bad entry " .. port end
      end
      for alias, map in pairs(d.alias_ports or {}) do
        local known = false
        for _, a in ipairs(d.aliases) do known = known or a == alias end
        if not known then return false, "alias_ports names a non-alias " .. alias end
        for _, real in pairs(map) do if not ins[real] then return false, "alias_ports maps to unknown " .. real end end
      end
      for _, list in pairs(d.alias_requires or {}) do
        for _, a in ipairs(list) do if not d.attrs[a] then return false, "alias_requires unknown attr " .. a end end
      end
      if fam == "pointwise" then
        if d.arity ~= #d.inputs then return false, "arity ~= #inputs" end
        if not same(port_names(d.outputs), { "OUT_0" }) then return false, "pointwise output must be OUT_0" end
        if type(d.ref) ~= "function" then return false, "no ref" end
        if d.cexpr == nil and d.special == nil then return false, "no cexpr and not special" end
        if d.cexpr ~= nil and type(d.cexpr) ~= "string" then return false, "cexpr must be a string" end
      end
      return true
    end)
  end
end

test("no duplicate op names or aliases", function()
  local seen = {}
  for _, d in ipairs(all) do
    for _, n in ipairs { d.name, table.unpack(d.aliases or {}) } do
      if seen[n] then return false, "duplicate " .. n end
      seen[n] = true
    end
  end
  return true
end)

test("README lists every op and alias", function()
  local f = io.open("compiler/kiln/ops/README.md", "r")
  if not f then return false, "no compiler/kiln/ops/README.md" end
  local text = f:read("a")
  f:close()
  for _, d in ipairs(all) do
    for _, n in ipairs { d.name, table.unpack(d.aliases or {}) } do
      if not text:find("`" .. n .. "`", 1, true) then return false, "README lacks `" .. n .. "`" end
    end
  end
  return true
end)

-- Pointwise: the mode surface -----------------------------------------------------------

local FE_MODES = {
  ADD = "add", SUB = "sub", MUL = "mul", DIV = "div", ADD_SQUARE = "add_square", MAX = "max", MIN = "min",
  MOD = "mod", POW = "pow", SQRT = "sqrt", RSQRT = "rsqrt", RECIPROCAL = "reciprocal", EXP = "exp", LOG = "log",
  NEG = "neg", ABS = "abs", CEIL = "ceil", FLOOR = "floor", SIN = "sin", COS = "cos", TAN = "tan", ERF = "erf",
  IDENTITY = "identity", RELU_FWD = "relu", TANH_FWD = "tanh", SIGMOID_FWD = "sigmoid", ELU_FWD = "elu",
  GELU_FWD = "gelu", GELU_APPROX_TANH_FWD = "gelu_approx_tanh", SOFTPLUS_FWD = "softplus", SWISH_FWD = "swish",
  RELU_BWD = "relu_backward", TANH_BWD = "tanh_backward", SIGMOID_BWD = "sigmoid_backward", ELU_BWD = "elu_backward",
  GELU_BWD = "gelu_backward", GELU_APPROX_TANH_BWD = "gelu_approx_tanh_backward", SOFTPLUS_BWD = "softplus_backward",
  SWISH_BWD = "swish_backward", CMP_EQ = "cmp_eq", CMP_NEQ = "cmp_neq", CMP_GT = "cmp_gt", CMP_GE = "cmp_ge",
  CMP_LT = "cmp_lt", CMP_LE = "cmp_le", LOGICAL_AND = "logical_and", LOGICAL_OR = "logical_or",
  LOGICAL_NOT = "logical_not", GEN_INDEX = "gen_index", BINARY_SELECT = "binary_select", ATAN2 = "atan2",
}

local pw = loaded.pointwise or {}

test("pointwise: the 50 FE modes + ATAN2 under their Python names, and the 4 aliases", function()
  local n = 0
  for mode, name in pairs(FE_MODES) do
    n = n + 1
    local d = by_name[name]
    if not d or d.family ~= "pointwise" or d.mode ~= mode or d.name ~= name then return false, "missing " .. name end
  end
  if n ~= 51 or #pw ~= 51 then return false, string.format("%d expected modes, %d defined", n, #pw) end
  for alias, real in pairs { bias = "add", scale = "mul", leaky_relu = "relu", leaky_relu_backward = "relu_backward" } do
    if not by_name[alias] or by_name[alias].name ~= real then return false, "alias " .. alias end
  end
  return true
end)

test("pointwise: arity by mode class (1 unary, 2 binary/backward/compare, 3 binary_select)", function()
  for _, d in ipairs(pw) do
    local want = 1
    if d.name == "binary_select" then want = 3
    elseif d.name:match("_backward$") or d.name:match("^cmp_") or d.name == "logical_and" or d.name == "logical_or"
      or ({ add = 1, sub = 1, mul = 1, div = 1, add_square = 1, max = 1, min = 1, mod = 1, pow = 1, atan2 = 1 })[d.name] then
      want = 2
    end
    if d.arity ~= want then return false, d.name .. " has arity " .. tostring(d.arity) end
  end
  return true
end)

-- Hand-computed values: {op, {a, b, c}, attrs, expected}.
local E = math.exp(1)
local HAND = {
  { "add", { 2, 3 }, nil, 5 }, { "sub", { 2, 3 }, nil, -1 }, { "mul", { 2, 3 }, nil, 6 }, { "div", { 1, 4 }, nil, 0.25 },
  { "add_square", { 1, 3 }, nil, 10 }, { "max", { -1, 2 }, nil, 2 }, { "min", { -1, 2 }, nil, -1 },
  { "mod", { -7, 3 }, nil, -1 }, { "mod", { 7, -3 }, nil, 1 }, { "mod", { 5.5, 2 }, nil, 1.5 },
  { "pow", { 2, 10 }, nil, 1024 }, { "pow", { 9, 0.5 }, nil, 3 },
  { "atan2", { 1, -1 }, nil, 2.356194490192345 }, { "atan2", { -1, -1 }, nil, -2.356194490192345 },
  { "sqrt", { 2 }, nil, 1.4142135623730951 }, { "rsqrt", { 4 }, nil, 0.5 }, { "reciprocal", { 8 }, nil, 0.125 },
  { "exp", { 1 }, nil, E }, { "log", { 10 }, nil, 2.302585092994046 }, { "neg", { 3 }, nil, -3 },
  { "abs", { -2.5 }, nil, 2.5 }, { "ceil", { -1.5 }, nil, -1 }, { "ceil", { 1.2 }, nil, 2 },
  { "floor", { -1.5 }, nil, -2 }, { "floor", { 1.7 }, nil, 1 },
  { "sin", { 0.5 }, nil, 0.479425538604203 }, { "cos", { 0.5 }, nil, 0.8775825618903728 },
  { "tan", { 0.5 }, nil, 0.5463024898437905 }, { "erf", { 1 }, nil, 0.8427007929497149 },
  { "erf", { -0.5 }, nil, -0.5204998778130465 }, { "identity", { -7.25 }, nil, -7.25 },
  { "relu", { -2 }, nil, 0 }, { "relu", { 3 }, nil, 3 },
  { "relu", { -2 }, { lower_clip = 0, upper_clip = 6, negative_slope = 0.1 }, -0.2 },
  { "relu", { 7 }, { lower_clip = 0, upper_clip = 6, negative_slope = 0.1 }, 6 },
  { "relu", { 3 }, { lower_clip = 0, upper_clip = 6, negative_slope = 0.1 }, 3 },
  { "relu", { -3 }, { lower_clip = -1, negative_slope = 0.5 }, -2 },
  { "tanh", { 0.5 }, nil, 0.46211715726000974 }, { "tanh", { 30 }, nil, 1 },
  { "sigmoid", { 0 }, nil, 0.5 }, { "sigmoid", { 2 }, nil, 0.8807970779778823 },
  { "elu", { -1 }, nil, math.exp(-1) - 1 }, { "elu", { 2 }, nil, 2 },
  { "elu", { -1 }, { elu_alpha = 0.5 }, -0.31606027941427883 },
  { "gelu", { 1 }, nil, 0.8413447460685429 }, { "gelu", { -1 }, nil, -0.15865525393145707 }, { "gelu", { 0 }, nil, 0 },
  { "gelu_approx_tanh", { 1 }, nil, 0.8411919906082768 }, { "gelu_approx_tanh", { -0.5 }, nil, -0.15428599017485606 },
  { "softplus", { 0 }, nil, math.log(2) }, { "softplus", { 1 }, nil, 1.3132616875182228 },
  { "softplus", { -3 }, nil, 0.04858735157374206 }, { "softplus", { 1 }, { softplus_beta = 2 }, 1.0634640055214863 },
  { "softplus", { 1000 }, nil, 1000 },
  { "swish", { 1 }, nil, 0.7310585786300049 }, { "swish", { 1 }, { swish_beta = 2 }, 0.8807970779778823 },
  { "swish", { -2 }, { swish_beta = 1.5 }, -0.09485174635513356 },
  { "relu_backward", { 2, -1 }, nil, 0 }, { "relu_backward", { 2, 1 }, nil, 2 },
  { "relu_backward", { 2, -1 }, { negative_slope = 0.1 }, 0.2 },
  { "relu_backward", { 2, 7 }, { upper_clip = 6 }, 0 },
  { "tanh_backward", { 1, 0.5 }, nil, 0.7864477329659274 }, { "tanh_backward", { 3, 0 }, nil, 3 },
  { "sigmoid_backward", { 1, 0 }, nil, 0.25 }, { "sigmoid_backward", { 1, 1 }, nil, 0.19661193324148185 },
  { "elu_backward", { 1, -1 }, nil, math.exp(-1) }, { "elu_backward", { 3, 2 }, nil, 3 },
  { "gelu_backward", { 1, 1 }, nil, 1.0833154705876864 }, { "gelu_backward", { 1, 0 }, nil, 0.5 },
  { "gelu_backward", { 2, -0.5 }, nil, 0.26500975068767424 },
  { "gelu_approx_tanh_backward", { 1, 0 }, nil, 0.5 }, { "gelu_approx_tanh_backward", { 1, 1 }, nil, 1.0829640838457826 },
  { "gelu_approx_tanh_backward", { 3, -0.5 }, nil, 0.39789028939607296 },
  { "softplus_backward", { 1, 0 }, nil, 0.5 }, { "softplus_backward", { 2, 1 }, nil, 1.4621171572600098 },
  { "swish_backward", { 1, 0 }, nil, 0.5 }, { "swish_backward", { 1, 1 }, nil, 0.9276705118714869 },
  { "swish_backward", { 1, -1 }, { swish_beta = 2 }, -0.09078424878489547 },
  { "cmp_eq", { 1, 1 }, nil, 1 }, { "cmp_eq", { 1, 2 }, nil, 0 }, { "cmp_neq", { 1, 2 }, nil, 1 },
  { "cmp_neq", { 2, 2 }, nil, 0 }, { "cmp_gt", { 2, 1 }, nil, 1 }, { "cmp_gt", { 1, 1 }, nil, 0 },
  { "cmp_ge", { 1, 1 }, nil, 1 }, { "cmp_ge", { 0, 1 }, nil, 0 }, { "cmp_lt", { 1, 1 }, nil, 0 },
  { "cmp_lt", { 0, 1 }, nil, 1 }, { "cmp_le", { 1, 1 }, nil, 1 }, { "cmp_le", { 2, 1 }, nil, 0 },
  { "logical_and", { 1, 0 }, nil, 0 }, { "logical_and", { 1, 1 }, nil, 1 }, { "logical_or", { 0, 0 }, nil, 0 },
  { "logical_or", { 0, 1 }, nil, 1 }, { "logical_not", { 0 }, nil, 1 }, { "logical_not", { 1 }, nil, 0 },
  { "gen_index", { 3 }, { axis = 0 }, 3 },
  { "binary_select", { 5, 7, 1 }, nil, 5 }, { "binary_select", { 5, 7, 0 }, nil, 7 },
}

local function close(x, y, rtol, atol)
  if x ~= x and y ~= y then return true end
  if x == y then return true end
  return math.abs(x - y) <= (atol or 1e-12) + (rtol or 1e-12) * math.abs(y)
end

local hand_by_op = {}
for _, h in ipairs(HAND) do
  hand_by_op[h[1]] = hand_by_op[h[1]] or {}
  table.insert(hand_by_op[h[1]], h)
end

for _, d in ipairs(pw) do
  test("pointwise " .. d.name .. ": ref matches hand-computed values", function()
    local list = hand_by_op[d.name]
    if not list then return false, "no hand values" end
    for _, h in ipairs(list) do
      local got = d.ref(h[2][1], h[2][2], h[2][3], h[3])
      if type(got) ~= "number" or not close(got, h[4], 1e-13, 1e-15) then
        return false, string.format("%s(%s) = %s, want %.17g", d.name, table.concat(h[2], ", "), tostring(got), h[4])
      end
    end
    return true
  end)
end

-- Pointwise: cexpr, evaluated as C in doubles, agrees with ref --------------------------

local function fmax(x, y) if x ~= x then return y elseif y ~= y then return x end return math.max(x, y) end
local function fmin(x, y) if x ~= x then return y elseif y ~= y then return x end return math.min(x, y) end
local C_FUNCS = {
  expf = math.exp, __expf = math.exp, expm1f = util.expm1, logf = math.log, log1pf = util.log1p,
  __fdividef = function(x, y) return x / y end,
  erff = util.erf, tanhf = util.tanh, sqrtf = math.sqrt,
  rsqrtf = function(x) return 1.0 / math.sqrt(x) end, powf = function(x, y) return x ^ y end,
  fmodf = function(x, y) return math.fmod(x + 0.0, y + 0.0) end,
  floorf = function(x) return math.floor(x) + 0.0 end, ceilf = function(x) return math.ceil(x) + 0.0 end,
  sinf = math.sin, cosf = math.cos, tanf = math.tan, fabsf = math.abs, fmaxf = fmax, fminf = fmin,
  atan2f = function(y, x) return math.atan(y, x) end,
}

local function c_tokens(s)
  local toks, i = {}, 1
  while i <= #s do
    local ch = s:sub(i, i)
    if ch:match("%s") then i = i + 1
    elseif ch:match("[%d%.]") then
      local a, b = s:find("^%d*%.?%d*[eE][%+%-]?%d+", i)
      if not a then a, b = s:find("^%d*%.?%d*", i) end
      toks[#toks + 1] = { k = "num", v = assert(tonumber(s:sub(a, b)), "bad number at " .. i) }
      i = b + 1
      if s:sub(i, i) == "f" then i = i + 1 end
    elseif ch:match("[%a_]") then
      local a, b = s:find("^[%w_]+", i)
      toks[#toks + 1] = { k = "id", v = s:sub(a, b) }
      i = b + 1
    else
      local two = s:sub(i, i + 1)
      if two == "<=" or two == ">=" or two == "==" or two == "!=" or two == "&&" or two == "||" then
        toks[#toks + 1] = { k = two }; i = i + 2
      elseif ("+-*/()?:,<>!"):find(ch, 1, true) then
        toks[#toks + 1] = { k = ch }; i = i + 1
      else error("unexpected character '" .. ch .. "' in cexpr") end
    end
  end
  return toks
end

-- Recursive descent over C's expression grammar; evaluates as it parses.
local function c_eval(src, env)
  local toks, pos = c_tokens(src), 1
  local function peek() return toks[pos] and toks[pos].k end
  local function take(k)
    if peek() ~= k then error(string.format("expected '%s' at token %d of %s", k, pos, src)) end
    pos = pos + 1
  end
  local truth = function(v) return v ~= 0 end
  local expr
  local function primary()
    local t = toks[pos]
    if not t then error("unexpected end of " .. src) end
    if t.k == "num" then pos = pos + 1; return t.v end
    if t.k == "(" then pos = pos + 1; local v = expr(); take(")"); return v end
    if t.k == "id" then
      pos = pos + 1
      if peek() == "(" then
        local fn = C_FUNCS[t.v] or error("function " .. t.v .. " is not allowed")
        take("(")
        local args = { expr() }
        while peek() == "," do take(","); args[#args + 1] = expr() end
        take(")")
        return fn(table.unpack(args))
      end
      local v = env[t.v]
      if v == nil then error("unknown operand " .. t.v) end
      return v
    end
    error("unexpected token " .. t.k)
  end
  local function unary()
    local k = peek()
    if k == "-" then pos = pos + 1; return -unary() end
    if k == "+" then pos = pos + 1; return unary() end
    if k == "!" then pos = pos + 1; return truth(unary()) and 0.0 or 1.0 end
    return primary()
  end
  local function binary(next_level, ops)
    return function()
      local v = next_level()
      while ops[peek() or ""] do
        local op = peek(); pos = pos + 1
        v = ops[op](v, next_level())
      end
      return v
    end
  end
  local b01 = function(c) return c and 1.0 or 0.0 end
  local mul = binary(unary, { ["*"] = function(x, y) return x * y end, ["/"] = function(x, y) return x / y end })
  local add = binary(mul, { ["+"] = function(x, y) return x + y end, ["-"] = function(x, y) return x - y end })
  local rel = binary(add, { ["<"] = function(x, y) return b01(x < y) end, ["<="] = function(x, y) return b01(x <= y) end,
                            [">"] = function(x, y) return b01(x > y) end, [">="] = function(x, y) return b01(x >= y) end })
  local eq = binary(rel, { ["=="] = function(x, y) return b01(x == y) end, ["!="] = function(x, y) return b01(x ~= y) end })
  local land = binary(eq, { ["&&"] = function(x, y) return b01(truth(x) and truth(y)) end })
  local lor = binary(land, { ["||"] = function(x, y) return b01(truth(x) or truth(y)) end })
  local function cond()
    local c = lor()
    if peek() == "?" then
      take("?")
      local a = expr()
      take(":")
      local b = cond()
      return truth(c) and a or b
    end
    return c
  end
  expr = cond
  local v = expr()
  if pos <= #toks then error("trailing tokens in " .. src) end
  return v
end

local function substitute(cexpr, d, attrs)
  return (cexpr:gsub("@([%w_]+)@", function(name)
    local v = attrs and attrs[name]
    if v == nil then v = d.attrs[name] and d.attrs[name].default end
    if v == nil then error("placeholder @" .. name .. "@ is not an attribute") end
    return string.format("%.17g", v)
  end))
end

local XS = { -3.7, -2, -1, -0.5, -1e-3, 0, 0.25, 0.5, 1, 2, 5.5 }
local YS = { -2, -0.5, 0, 0.5, 1, 3 }
local ATTR_VARIANTS = {
  relu = { {}, { negative_slope = 0.1, lower_clip = 0, upper_clip = 6 }, { lower_clip = -1, negative_slope = 0.2, upper_clip = 2 } },
  relu_backward = { {}, { negative_slope = 0.1, upper_clip = 1.5 }, { lower_clip = -1, negative_slope = 0.2 } },
  elu = { {}, { elu_alpha = 0.5 } }, elu_backward = { {}, { elu_alpha = 0.5 } },
  softplus = { {}, { softplus_beta = 2 } }, softplus_backward = { {}, { softplus_beta = 2 } },
  swish = { {}, { swish_beta = 1.5 } }, swish_backward = { {}, { swish_beta = 1.5 } },
}

for _, d in ipairs(pw) do
  if d.cexpr then
    test("pointwise " .. d.name .. ": cexpr uses operands a..c, allowed functions and its attributes only", function()
      local operands = { a = 1, b = 2, c = 3 }
      for _, t in ipairs(c_tokens((d.cexpr:gsub("@[%w_]+@", "1.0f")))) do
        if t.k == "id" then
          if operands[t.v] then
            if operands[t.v] > d.arity then return false, "operand " .. t.v .. " beyond the arity" end
          elseif not C_FUNCS[t.v] then return false, "identifier " .. t.v .. " is not allowed" end
        end
      end
      local seen = {}
      for name in d.cexpr:gmatch("@([%w_]+)@") do
        if not d.attrs[name] then return false, "placeholder @" .. name .. "@ is not an attribute" end
        seen[name] = true
      end
      for name in pairs(d.attrs) do
        if not seen[name] then return false, "attribute " .. name .. " is unused by cexpr" end
      end
      local depth = 0
      for ch in d.cexpr:gmatch("[()]") do
        depth = depth + (ch == "(" and 1 or -1)
        if depth < 0 then return false, "unbalanced parentheses" end
      end
      if depth ~= 0 then return false, "unbalanced parentheses" end
      return true
    end)
    test("pointwise " .. d.name .. ": cexpr agrees with ref", function()
      for _, attrs in ipairs(ATTR_VARIANTS[d.name] or { {} }) do
        local src = substitute(d.cexpr, d, attrs)
        local points = {}
        if d.arity == 1 then for _, x in ipairs(XS) do points[#points + 1] = { x } end
        elseif d.arity == 2 then
          for _, x in ipairs(XS) do for _, y in ipairs(YS) do points[#points + 1] = { x, y } end end
        else
          for _, x in ipairs(XS) do for _, m in ipairs { 0, 1 } do points[#points + 1] = { x, -x, m } end end
        end
        for _, p in ipairs(points) do
          local env = { a = p[1] + 0.0, b = p[2] and p[2] + 0.0, c = p[3] and p[3] + 0.0 }
          local got, want = c_eval(src, env), d.ref(p[1], p[2], p[3], attrs)
          if not close(got, want, 1e-9, 1e-12) then
            return false, string.format("at (%s): cexpr %.17g, ref %.17g", table.concat(p, ", "), got, want)
          end
        end
      end
      return true
    end)
  else
    test("pointwise " .. d.name .. ": special op without cexpr", function()
      if d.special ~= "gen_index" then return false, "cexpr is nil but special is " .. tostring(d.special) end
      return true
    end)
  end
end

-- Pointwise infer -------------------------------------------------------------------------

expect_ok("add: [T, 4096] + [4096] broadcasts", "add", { a = T { "T", 4096 }, b = T { 4096 } }, nil,
  { OUT_0 = { { "T", 4096 }, false } })
expect_ok("mul: [1] constant scales [B, 1, H]", "mul", { a = T({ 1 }, "fp32", "constant"), b = T { "B", 1, 64 } }, nil,
  { OUT_0 = { { "B", 1, 64 }, false } })
expect_ok("max: [4, 1] with [1, 8] -> [4, 8]", "max", { input0 = T { 4, 1 }, input1 = T { 1, 8 } }, nil,
  { OUT_0 = { { 4, 8 }, false } })
expect_ok("cmp_gt outputs bool", "cmp_gt", { input = T { "T", 8 }, comparison = T { 1 } }, nil,
  { OUT_0 = { { "T", 8 }, "bool" } })
expect_ok("logical_not outputs bool", "logical_not", { input = T({ 8 }, "bool") }, nil, { OUT_0 = { { 8 }, "bool" } })
expect_ok("gen_index outputs int32", "gen_index", { input = T { 4, 8 } }, { axis = -1 }, { OUT_0 = { { 4, 8 }, "int32" } })
expect_ok("binary_select with a bool mask", "binary_select",
  { input0 = T { 2, 8 }, input1 = T({ 1 }, "fp32"), mask = T({ 2, 8 }, "bool") }, nil, { OUT_0 = { { 2, 8 }, false } })
expect_ok("relu accepts its clip attributes", "relu", { input = T { 8 } },
  { negative_slope = 0.1, lower_clip = 0.0, upper_clip = 6.0 }, { OUT_0 = { { 8 }, false } })
expect_err("add: [T, 4096] + [1024]", "add", { a = T { "T", 4096 }, b = T { 1024 } }, nil, "E_SHAPE", "cannot broadcast")
expect_err("add: dynamic T vs dynamic S", "add", { a = T { "T", 4 }, b = T { "S", 4 } }, nil, "E_SHAPE")
expect_err("sub: dynamic T vs 8", "sub", { a = T { "T" }, b = T { 8 } }, nil, "E_SHAPE")
expect_err("logical_and of a bf16 input", "logical_and", { a = T { 8 }, b = T({ 8 }, "bool") }, nil, "E_DTYPE")
expect_err("binary_select with a float mask", "binary_select",
  { input0 = T { 8 }, input1 = T { 8 }, mask = T({ 8 }, "fp32") }, nil, "E_DTYPE")
expect_err("relu: unknown attribute alpha", "relu", { input = T { 8 } }, { alpha = 0.1 }, "E_ATTR")
expect_err("relu: negative_slope not a number", "relu", { input = T { 8 } }, { negative_slope = "x" }, "E_ATTR")
expect_err("gen_index: axis 2 on rank 2", "gen_index", { input = T { 4, 8 } }, { axis = 2 }, "E_ATTR", "out of range")
expect_err("gen_index: axis missing", "gen_index", { input = T { 4, 8 } }, {}, "E_ATTR")
expect_err("add: missing b", "add", { a = T { 8 } }, nil, "E_PORT")

-- Reduction ------------------------------------------------------------------------------

expect_ok("reduction: axes {-1} row-reduces", "reduction", { input = T { "T", 4096 } }, { mode = "add", axes = { -1 } },
  { Y = { { "T", 1 }, false } })
expect_ok("reduction: dims {1, 4096} column-reduces", "reduction", { input = T { "T", 4096 } },
  { mode = "max", dims = { 1, 4096 } }, { Y = { { 1, 4096 }, false } })
expect_ok("reduction: dims may keep a dynamic dim", "reduction", { input = T { "T", 4096 } },
  { mode = "avg", dims = { "T", 1 } }, { Y = { { "T", 1 }, false } })
expect_ok("reduction: dims may name a specialized dim (H = 4096)", "reduction", { input = T { "T", 4096 } },
  { mode = "add", dims = { 1, "H" } }, { Y = { { 1, 4096 }, false } }, { dims = { H = 4096 } })
expect_ok("reduction: global amax", "reduction", { input = T { "B", 16, 128 } }, { mode = "amax", axes = { 0, 1, 2 } },
  { Y = { { 1, 1, 1 }, false } })
expect_err("reduction: dims {T, 2048} on [T, 4096]", "reduction", { input = T { "T", 4096 } },
  { mode = "add", dims = { "T", 2048 } }, "E_SHAPE")
expect_err("reduction: dims of the wrong rank", "reduction", { input = T { "T", 4096 } }, { mode = "add", dims = { 1 } },
  "E_SHAPE")
expect_err("reduction: both dims and axes", "reduction", { input = T { 8, 8 } },
  { mode = "add", dims = { 8, 1 }, axes = { 1 } }, "E_ATTR")
expect_err("reduction: neither dims nor axes", "reduction", { input = T { 8, 8 } }, { mode = "add" }, "E_ATTR")
expect_err("reduction: mode sum", "reduction", { input = T { 8 } }, { mode = "sum", axes = { 0 } }, "E_ATTR")
expect_err("reduction: axis out of range", "reduction", { input = T { 8, 8 } }, { mode = "add", axes = { 2 } }, "E_ATTR")
expect_err("reduction: the same axis twice", "reduction", { input = T { 8, 8 } }, { mode = "add", axes = { 1, -1 } },
  "E_ATTR")
expect_err("reduction: bool input", "reduction", { input = T({ 8 }, "bool") }, { mode = "add", axes = { 0 } }, "E_DTYPE")

-- Norms ----------------------------------------------------------------------------------

local X2 = T { "T", 4096 }
local W1 = T { 4096 }
expect_ok("rmsnorm: inference emits Y only", "rmsnorm", { input = X2, scale = W1 }, { epsilon = 1e-6 },
  { Y = { { "T", 4096 }, false }, INV_VARIANCE = "absent" })
expect_ok("rmsnorm: training emits INV_VARIANCE fp32", "rmsnorm", { input = X2, scale = W1 },
  { epsilon = 1e-6, phase = "training" }, { Y = { { "T", 4096 }, false }, INV_VARIANCE = { { "T", 1 }, "fp32" } })
expect_ok("rmsnorm: epsilon as a scalar input", "rmsnorm",
  { input = X2, scale = W1, epsilon = T({ 1 }, "fp32", "constant") }, {}, { Y = { { "T", 4096 }, false } })
expect_ok("layernorm: cuDNN [T, H, 1, 1] with scale [1, H, 1, 1]", "layernorm",
  { input = T { "T", 1024, 1, 1 }, scale = T({ 1, 1024, 1, 1 }, "fp32"), bias = T({ 1, 1024, 1, 1 }, "fp32") },
  { epsilon = 1e-5, phase = "training" },
  { Y = { { "T", 1024, 1, 1 }, false }, MEAN = { { "T", 1, 1, 1 }, "fp32" }, INV_VARIANCE = { { "T", 1, 1, 1 }, "fp32" } })
expect_ok("layernorm_backward", "layernorm_backward",
  { grad = X2, input = X2, scale = T({ 4096 }, "fp32"), mean = T({ "T", 1 }, "fp32"), inv_variance = T({ "T", 1 }, "fp32") },
  {}, { DX = { { "T", 4096 }, false }, DSCALE = { { 4096 }, "fp32" }, DBIAS = { { 4096 }, "fp32" } })
expect_ok("rmsnorm_backward: has_dbias", "rmsnorm_backward",
  { grad = X2, input = X2, scale = W1, inv_variance = T({ "T", 1 }, "fp32") }, { has_dbias = true },
  { DX = { { "T", 4096 }, false }, DSCALE = { { 4096 }, "bf16" }, DBIAS = { { 4096 }, "bf16" } })
expect_ok("rmsnorm_backward: no dbias by default", "rmsnorm_backward",
  { grad = X2, input = X2, scale = W1, inv_variance = T({ "T", 1 }, "fp32") }, {}, { DBIAS = "absent" })
local NCHW, C1 = T { "N", 64, 28, 28 }, T({ 1, 64, 1, 1 }, "fp32")
expect_ok("batchnorm: training with running stats", "batchnorm",
  { input = NCHW, scale = C1, bias = C1, in_running_mean = C1, in_running_var = C1 }, { epsilon = 1e-5, momentum = 0.1 },
  { Y = { { "N", 64, 28, 28 }, false }, MEAN = { { 1, 64, 1, 1 }, "fp32" }, INV_VARIANCE = { { 1, 64, 1, 1 }, "fp32" },
    NEXT_RUNNING_MEAN = { { 1, 64, 1, 1 }, "fp32" }, NEXT_RUNNING_VAR = { { 1, 64, 1, 1 }, "fp32" } })
expect_ok("batchnorm_inference", "batchnorm_inference",
  { input = NCHW, mean = C1, inv_variance = C1, scale = C1, bias = C1 }, {}, { Y = { { "N", 64, 28, 28 }, false } })
expect_ok("batchnorm_backward", "batchnorm_backward",
  { grad = NCHW, input = NCHW, scale = C1, mean = C1, inv_variance = C1 }, {}, { DSCALE = { { 1, 64, 1, 1 }, "fp32" } })
expect_ok("instancenorm: stats per (n, c)", "instancenorm", { input = NCHW, scale = C1, bias = C1 },
  { epsilon = 1e-5, phase = "training" }, { MEAN = { { "N", 64, 1, 1 }, "fp32" } })
expect_ok("instancenorm_backward without saved stats", "instancenorm_backward",
  { grad = NCHW, input = NCHW, scale = C1 }, {}, { DX = { { "N", 64, 28, 28 }, false } })
local XA = T { "B", "S", 1024 }
expect_ok("adalayernorm: per-sample scale [B, 1, D]", "adalayernorm",
  { input = XA, scale = T { "B", 1, 1024 }, bias = T { "B", 1, 1024 } }, { epsilon = 1e-6, phase = "training" },
  { Y = { { "B", "S", 1024 }, false }, MEAN = { { "B", "S", 1 }, "fp32" } })
expect_ok("adalayernorm_backward", "adalayernorm_backward",
  { grad = XA, input = XA, scale = T { "B", 1, 1024 }, mean = T({ "B", "S", 1 }, "fp32"),
    inv_variance = T({ "B", "S", 1 }, "fp32") }, {}, { DSCALE = { { "B", 1, 1024 }, "bf16" } })
expect_err("rmsnorm: no epsilon", "rmsnorm", { input = X2, scale = W1 }, {}, "E_ATTR", "no default")
expect_err("rmsnorm: epsilon twice", "rmsnorm", { input = X2, scale = W1, epsilon = T({ 1 }, "fp32") }, { epsilon = 1e-6 },
  "E_ATTR")
expect_err("layernorm: negative epsilon", "layernorm", { input = X2, scale = W1, bias = W1 }, { epsilon = -1.0 }, "E_ATTR")
expect_err("layernorm: phase train", "layernorm", { input = X2, scale = W1, bias = W1 }, { epsilon = 1e-5, phase = "train" },
  "E_ATTR")
expect_err("rmsnorm: scale [2048] on [T, 4096]", "rmsnorm", { input = X2, scale = T { 2048 } }, { epsilon = 1e-6 }, "E_SHAPE")
expect_err("rmsnorm: a number in bias's position", "rmsnorm",
  { input = X2, scale = W1, bias = T({ 1 }, "fp32", "constant") }, { epsilon = 1e-6 }, "E_SHAPE", "epsilon")
expect_err("rmsnorm: epsilon input not a scalar", "rmsnorm", { input = X2, scale = W1, epsilon = T({ 2 }, "fp32") }, {},
  "E_SHAPE")
expect_err("rmsnorm: int32 input", "rmsnorm", { input = T({ "T", 4096 }, "int32"), scale = W1 }, { epsilon = 1e-6 }, "E_DTYPE")
expect_err("layernorm_backward: mean of the wrong shape", "layernorm_backward",
  { grad = X2, input = X2, scale = W1, mean = T({ "T", 4096 }, "fp32"), inv_variance = T({ "T", 1 }, "fp32") }, {},
  "E_SHAPE")
expect_err("layernorm_backward: bf16 mean", "layernorm_backward",
  { grad = X2, input = X2, scale = W1, mean = T { "T", 1 }, inv_variance = T({ "T", 1 }, "fp32") }, {}, "E_DTYPE")
expect_err("layernorm_backward: grad of other dims", "layernorm_backward",
  { grad = T { "T", 1024 }, input = X2, scale = W1, mean = T({ "T", 1 }, "fp32"), inv_variance = T({ "T", 1 }, "fp32") },
  {}, "E_SHAPE")
expect_err("batchnorm: rank-1 scale", "batchnorm", { input = NCHW, scale = T({ 64 }, "fp32"), bias = C1 },
  { epsilon = 1e-5 }, "E_SHAPE")
expect_err("batchnorm: running mean without running var", "batchnorm",
  { input = NCHW, scale = C1, bias = C1, in_running_mean = C1 }, { epsilon = 1e-5, momentum = 0.1 }, "E_PORT")
expect_err("batchnorm: momentum 1.5", "batchnorm",
  { input = NCHW, scale = C1, bias = C1, in_running_mean = C1, in_running_var = C1 }, { epsilon = 1e-5, momentum = 1.5 },
  "E_ATTR")
expect_err("instancenorm: rank 2 input", "instancenorm", { input = T { "N", 64 }, scale = T { 1, 64 }, bias = T { 1, 64 } },
  { epsilon = 1e-5 }, "E_SHAPE")
expect_err("adalayernorm: scale rank 2", "adalayernorm", { input = XA, scale = T { "B", 1024 } }, { epsilon = 1e-6 }, "E_SHAPE")
expect_err("batchnorm_inference: bf16 mean", "batchnorm_inference",
  { input = NCHW, mean = T { 1, 64, 1, 1 }, inv_variance = C1, scale = C1, bias = C1 }, {}, "E_DTYPE")

-- Softmax --------------------------------------------------------------------------------

local P4 = T { "B", 16, "S", "S" }
expect_ok("softmax: last axis, no stats", "softmax", { P = P4 }, {},
  { S = { { "B", 16, "S", "S" }, false }, Stats = "absent" })
expect_ok("softmax: Stats/Max/Sum_exp are fp32 rows", "softmax", { P = P4 },
  { generate_stats = true, generate_max = true, generate_sum_exp = true },
  { Stats = { { "B", 16, "S", 1 }, "fp32" }, Max = { { "B", 16, "S", 1 }, "fp32" }, Sum_exp = { { "B", 16, "S", 1 }, "fp32" } })
expect_ok("log_softmax: axis 1", "log_softmax", { P = T { 4, 10 } }, { axis = 0, generate_stats = true },
  { S = { { 4, 10 }, false }, Stats = { { 1, 10 }, "fp32" } })
expect_ok("softmax: a sink per head", "softmax", { P = P4, SINK = T({ 1, 16, 1, 1 }, "fp32") }, {},
  { S = { { "B", 16, "S", "S" }, false } })
expect_ok("softmax_backward", "softmax_backward", { grad = P4, output = P4 }, {}, { DX = { { "B", 16, "S", "S" }, false } })
expect_ok("log_softmax_backward", "log_softmax_backward", { grad = P4, output = P4 }, { axis = 2 },
  { DX = { { "B", 16, "S", "S" }, false } })
expect_err("softmax: axis 4 on rank 4", "softmax", { P = P4 }, { axis = 4 }, "E_ATTR")
expect_err("softmax: int32 input", "softmax", { P = T({ 8, 8 }, "int32") }, {}, "E_DTYPE")
expect_err("softmax: sink spanning the softmax axis", "softmax", { P = P4, SINK = T({ 1, 16, 1, "S" }, "fp32") }, {},
  "E_SHAPE")
expect_err("softmax_backward: grad of other dims", "softmax_backward", { grad = T { 8, 4 }, output = T { 8, 8 } }, {},
  "E_SHAPE")
expect_err("softmax: stats_use_log2 without stats", "softmax", { P = P4 }, { stats_use_log2 = true }, "E_ATTR")
expect_err("softmax: axis not an integer", "softmax", { P = P4 }, { axis = 1.5 }, "E_ATTR")

-- Matmul ---------------------------------------------------------------------------------

expect_ok("matmul: [T, 4096] x [4096, 1024]", "matmul", { A = T { "T", 4096 }, B = T { 4096, 1024 } }, {},
  { C = { { "T", 1024 }, false } })
expect_ok("matmul: batch broadcast [2, 1, M, K] x [3, K, N]", "matmul", { A = T { 2, 1, 64, 32 }, B = T { 3, 32, 16 } }, {},
  { C = { { 2, 3, 64, 16 }, false } })
expect_ok("matmul: fp8 e4m3 x e5m2 with fp32 compute", "matmul",
  { A = T({ 128, 256 }, "fp8_e4m3"), B = T({ 256, 64 }, "fp8_e5m2") }, {}, { C = { { 128, 64 }, false } })
expect_ok("matmul: per-batch M override", "matmul",
  { A = T { 4, 64, 32 }, B = T { 4, 32, 16 }, M_override = T({ 4, 1, 1 }, "int32") }, {}, { C = { { 4, 64, 16 }, false } })
expect_err("matmul: K mismatch", "matmul", { A = T { "T", 4096 }, B = T { 1024, 512 } }, {}, "E_SHAPE",
  "K mismatch: A is [T, 4096] but B is [1024, 512] (A's last dim must equal B's second-to-last)")
expect_err("matmul: rank-1 operand", "matmul", { A = T { 4096 }, B = T { 4096, 8 } }, {}, "E_SHAPE")
expect_err("matmul: batch 2 vs 3", "matmul", { A = T { 2, 64, 32 }, B = T { 3, 32, 16 } }, {}, "E_SHAPE", "batch")
expect_err("matmul: fp16 x bf16", "matmul", { A = T({ 8, 8 }, "fp16"), B = T({ 8, 8 }, "bf16") }, {}, "E_DTYPE")
expect_err("matmul: fp8 with fp16 compute", "matmul",
  { A = T({ 16, 16 }, "fp8_e4m3"), B = T({ 16, 16 }, "fp8_e4m3") }, {}, "E_DTYPE", "fp32", { compute_dtype = "fp16" })
expect_err("matmul: fp8 x bf16", "matmul", { A = T({ 16, 16 }, "fp8_e4m3"), B = T({ 16, 16 }, "bf16") }, {}, "E_DTYPE")
expect_err("matmul: bool operand", "matmul", { A = T({ 8, 8 }, "bool"), B = T({ 8, 8 }, "bool") }, {}, "E_DTYPE")
expect_err("matmul: padding not a number", "matmul", { A = T { 8, 8 }, B = T { 8, 8 } }, { padding = "zero" }, "E_ATTR")
expect_ok("moe_grouped_matmul: [T, 4096] tokens x [8, 4096, 1536] experts", "moe_grouped_matmul",
  { token = T { "T", 4096 }, weight = T { 8, 4096, 1536 }, first_token_offset = T({ 8 }, "int32") }, {},
  { Y = { { "T", 1536 }, false } })
expect_err("moe_grouped_matmul: gather mode", "moe_grouped_matmul",
  { token = T { "T", 64 }, weight = T { 4, 64, 32 }, first_token_offset = T({ 4 }, "int32") }, { mode = "gather" }, "E_ATTR",
  "gather and scatter")
expect_err("moe_grouped_matmul: an offset per expert", "moe_grouped_matmul",
  { token = T { "T", 64 }, weight = T { 4, 64, 32 }, first_token_offset = T({ 5 }, "int32") }, {}, "E_SHAPE")
expect_err("moe_grouped_matmul: K mismatch", "moe_grouped_matmul",
  { token = T { "T", 64 }, weight = T { 4, 32, 32 }, first_token_offset = T({ 4 }, "int32") }, {}, "E_SHAPE", "K mismatch")
expect_err("moe_grouped_matmul: fp32 offsets", "moe_grouped_matmul",
  { token = T { "T", 64 }, weight = T { 4, 64, 32 }, first_token_offset = T({ 4 }, "fp32") }, {}, "E_DTYPE")
expect_err("matmul: float M override", "matmul",
  { A = T { 4, 64, 32 }, B = T { 4, 32, 16 }, M_override = T({ 4, 1, 1 }, "fp32") }, {}, "E_DTYPE")

-- SDPA -----------------------------------------------------------------------------------

local function bhsd(b, h, s, d, dt) return T({ b, h, s, d }, dt or "bf16") end
local Q, K, V = bhsd("B", 32, "S", 128), bhsd("B", 32, "S", 128), bhsd("B", 32, "S", 128)
local function qkv(extra)
  local t = { q = Q, k = K, v = V }
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end
local SEQ = T({ "B", 1, 1, 1 }, "int32")
expect_ok("sdpa: BHSD with stats", "sdpa", qkv(), { generate_stats = true, attn_scale = 0.088 },
  { O = { { "B", 32, "S", 128 }, false }, Stats = { { "B", 32, "S", 1 }, "fp32" } })
expect_ok("sdpa: inference (is_inference), no stats", "sdpa", qkv(), { is_inference = true }, { Stats = "absent" })
expect_ok("sdpa: GQA 32 q heads over 8 kv heads, causal", "sdpa",
  qkv { k = bhsd("B", 8, "S", 128), v = bhsd("B", 8, "S", 128) }, { generate_stats = true, use_causal_mask = true },
  { O = { { "B", 32, "S", 128 }, false } })
expect_ok("sdpa: d_qk 192, d_v 128, cross attention", "sdpa",
  { q = bhsd(2, 16, 100, 192), k = bhsd(2, 16, 300, 192), v = bhsd(2, 16, 300, 128) },
  { generate_stats = true, use_causal_mask_bottom_right = true, sliding_window_length = 64 },
  { O = { { 2, 16, 100, 128 }, false }, Stats = { { 2, 16, 100, 1 }, "fp32" } })
expect_ok("sdpa: padding mask, bias, Philox dropout, rng_dump, score stats", "sdpa",
  qkv { bias = T { 1, 32, "S", "S" }, seq_len_q = SEQ, seq_len_kv = SEQ, seed = T({ 1, 1, 1, 1 }, "int64"),
        offset = T({ 1, 1, 1, 1 }, "int64"), attn_scale = T({ 1, 1, 1, 1 }, "fp32") },
  { generate_stats = true, use_padding_mask = true, dropout_probability = 0.1, rng_dump = true, score_max = true,
    score_sum_exp = true },
  { RNG_DUMP = { { "B", 32, "S", "S" }, false }, Max = { { "B", 32, "S", 1 }, "fp32" },
    Sum_exp = { { "B", 32, "S", 1 }, "fp32" } })
expect_ok("sdpa: ragged (cu_seq_len) and a sink", "sdpa",
  { q = bhsd(4, 8, 512, 64), k = bhsd(4, 8, 512, 64), v = bhsd(4, 8, 512, 64), seq_len_q = T({ 4, 1, 1, 1 }, "int32"),
    seq_len_kv = T({ 4, 1, 1, 1 }, "int32"), cu_seq_len_q = T({ 5 }, "int32"), cu_seq_len_kv = T({ 5 }, "int32"),
    sink_token = T({ 1, 8, 1, 1 }, "fp32") },
  { generate_stats = false, use_padding_mask = true }, { O = { { 4, 8, 512, 64 }, false } })
expect_ok("sdpa: paged K/V", "sdpa",
  { q = bhsd(4, 8, 1, 128), k = bhsd(1000, 8, 64, 128), v = bhsd(1000, 8, 64, 128),
    seq_len_q = T({ 4, 1, 1, 1 }, "int32"), seq_len_kv = T({ 4, 1, 1, 1 }, "int32"),
    paged_attention_k_table = T({ 4, 1, 32, 1 }, "int32"), paged_attention_v_table = T({ 4, 1, 32, 1 }, "int32") },
  { is_inference = true, use_padding_mask = true, paged_attention_max_seq_len_kv = 2048 },
  { O = { { 4, 8, 1, 128 }, false } })
expect_ok("sdpa_fp8: scales and amax outputs", "sdpa_fp8",
  { q = bhsd("B", 16, "S", 128, "fp8_e4m3"), k = bhsd("B", 16, "S", 128, "fp8_e4m3"),
    v = bhsd("B", 16, "S", 128, "fp8_e4m3"), descale_q = T({ 1, 1, 1, 1 }, "fp32"), descale_k = T({ 1, 1, 1, 1 }, "fp32"),
    descale_v = T({ 1, 1, 1, 1 }, "fp32"), descale_s = T({ 1, 1, 1, 1 }, "fp32"), scale_s = T({ 1, 1, 1, 1 }, "fp32"),
    scale_o = T({ 1, 1, 1, 1 }, "fp32") }, { generate_stats = true },
  { O = { { "B", 16, "S", 128 }, false }, Amax_S = { { 1, 1, 1, 1 }, "fp32" }, Amax_O = { { 1, 1, 1, 1 }, "fp32" } })
local BWD = { q = Q, k = K, v = V, o = Q, dO = Q, stats = T({ "B", 32, "S", 1 }, "fp32") }
local function bwd(extra)
  local t = {}
  for k, v in pairs(BWD) do t[k] = v end
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end
expect_ok("sdpa_backward: dQ dK dV dBias", "sdpa_backward", bwd { bias = T { 1, 32, "S", "S" } },
  { dBias = true, use_causal_mask = true, attn_scale = 0.088 },
  { dQ = { { "B", 32, "S", 128 }, false }, dK = { { "B", 32, "S", 128 }, false }, dBias = { { 1, 32, "S", "S" }, false } })
expect_ok("sdpa_backward: sink gradient and custom dropout", "sdpa_backward",
  bwd { sink_token = T({ 1, 32, 1, 1 }, "fp32"), dropout_mask = T { "B", 32, "S", "S" },
        dropout_scale = T({ 1, 1, 1, 1 }, "fp32"), dropout_scale_inv = T({ 1, 1, 1, 1 }, "fp32") },
  { dSink_token = true }, { DSINK_TOKEN = { { 1, 32, 1, 1 }, "fp32" } })
expect_err("sdpa: neither generate_stats nor is_inference", "sdpa", qkv(), {}, "E_ATTR", "generate_stats")
expect_err("sdpa: both generate_stats and is_inference", "sdpa", qkv(), { generate_stats = true, is_inference = false },
  "E_ATTR")
expect_err("sdpa: both causal masks", "sdpa", qkv(),
  { generate_stats = true, use_causal_mask = true, use_causal_mask_bottom_right = true }, "E_ATTR")
expect_err("sdpa: causal with a right bound", "sdpa", qkv(),
  { generate_stats = true, use_causal_mask = true, diagonal_band_right_bound = 0 }, "E_ATTR")
expect_err("sdpa: top-left causal with bottom_right alignment", "sdpa", qkv(),
  { generate_stats = true, use_causal_mask = true, diagonal_alignment = "bottom_right" }, "E_ATTR")
expect_err("sdpa: sliding window and left bound", "sdpa", qkv(),
  { generate_stats = true, sliding_window_length = 8, diagonal_band_left_bound = 8 }, "E_ATTR")
expect_err("sdpa: left bound 0", "sdpa", qkv(), { generate_stats = true, diagonal_band_left_bound = 0 }, "E_ATTR")
expect_err("sdpa: right bound -1", "sdpa", qkv(), { generate_stats = true, diagonal_band_right_bound = -1 }, "E_ATTR")
expect_err("sdpa: ALiBi without causal", "sdpa", qkv(), { generate_stats = true, use_alibi_mask = true }, "E_ATTR")
expect_err("sdpa: attn_scale as attribute and input", "sdpa", qkv { attn_scale = T({ 1, 1, 1, 1 }, "fp32") },
  { generate_stats = true, attn_scale = 0.1 }, "E_ATTR")
expect_err("sdpa: bool bias", "sdpa", qkv { bias = T({ 1, 32, "S", "S" }, "bool") }, { generate_stats = true }, "E_DTYPE")
expect_err("sdpa: padding mask without seq_len_kv", "sdpa", qkv { seq_len_q = SEQ },
  { generate_stats = true, use_padding_mask = true }, "E_PORT")
expect_err("sdpa: seq lens without padding mask", "sdpa", qkv { seq_len_q = SEQ, seq_len_kv = SEQ },
  { generate_stats = true }, "E_ATTR")
expect_err("sdpa: float seq_len_q", "sdpa", qkv { seq_len_q = T({ "B", 1, 1, 1 }, "fp32"), seq_len_kv = SEQ },
  { generate_stats = true, use_padding_mask = true }, "E_DTYPE")
expect_err("sdpa: dropout without seed/offset", "sdpa", qkv(), { generate_stats = true, dropout_probability = 0.1 }, "E_PORT")
expect_err("sdpa: dropout probability 1", "sdpa",
  qkv { seed = T({ 1, 1, 1, 1 }, "int64"), offset = T({ 1, 1, 1, 1 }, "int64") },
  { generate_stats = true, dropout_probability = 1.0 }, "E_ATTR")
expect_err("sdpa: Philox and custom dropout together", "sdpa",
  qkv { seed = T({ 1, 1, 1, 1 }, "int64"), offset = T({ 1, 1, 1, 1 }, "int64"), dropout_mask = T { "B", 32, "S", "S" },
        dropout_scale = T({ 1, 1, 1, 1 }, "fp32") },
  { generate_stats = true, dropout_probability = 0.1 }, "E_PORT")
expect_err("sdpa: head dim 100", "sdpa", { q = bhsd(1, 8, 64, 100), k = bhsd(1, 8, 64, 100), v = bhsd(1, 8, 64, 100) },
  { generate_stats = true }, "E_SHAPE", "multiple of 8")
expect_err("sdpa: 32 q heads over 6 k heads", "sdpa", qkv { k = bhsd("B", 6, "S", 128), v = bhsd("B", 6, "S", 128) },
  { generate_stats = true }, "E_SHAPE", "heads")
expect_err("sdpa: q of rank 3", "sdpa", qkv { q = T { "B", "S", 128 } }, { generate_stats = true }, "E_SHAPE", "BHSD")
expect_err("sdpa: k and v of different S_kv", "sdpa", qkv { v = bhsd("B", 32, 77, 128) }, { generate_stats = true }, "E_SHAPE")
expect_err("sdpa: batch mismatch", "sdpa", qkv { k = bhsd(2, 32, "S", 128) }, { generate_stats = true }, "E_SHAPE", "batch")
expect_err("sdpa: bias [1, H, S, S+1]", "sdpa", { q = bhsd(1, 8, 64, 64), k = bhsd(1, 8, 64, 64), v = bhsd(1, 8, 64, 64),
  bias = T { 1, 8, 64, 65 } }, { generate_stats = true }, "E_SHAPE", "bias")
expect_err("sdpa: sink of the wrong shape", "sdpa", qkv { sink_token = T({ 1, 32, "S", 1 }, "fp32") },
  { generate_stats = true }, "E_SHAPE")
expect_err("sdpa: fp8 q", "sdpa", qkv { q = bhsd("B", 32, "S", 128, "fp8_e4m3") }, { generate_stats = true }, "E_DTYPE",
  "sdpa_fp8")
expect_err("sdpa: q bf16, k fp16", "sdpa", qkv { k = bhsd("B", 32, "S", 128, "fp16") }, { generate_stats = true }, "E_DTYPE")
expect_err("sdpa: diagonal_alignment enum", "sdpa", qkv(), { generate_stats = true, diagonal_alignment = "TOP" }, "E_ATTR")
expect_err("sdpa: paged without max_seq_len_kv", "sdpa",
  { q = bhsd(4, 8, 1, 128), k = bhsd(1000, 8, 64, 128), v = bhsd(1000, 8, 64, 128),
    seq_len_q = T({ 4, 1, 1, 1 }, "int32"), seq_len_kv = T({ 4, 1, 1, 1 }, "int32"),
    paged_attention_k_table = T({ 4, 1, 32, 1 }, "int32"), paged_attention_v_table = T({ 4, 1, 32, 1 }, "int32") },
  { is_inference = true, use_padding_mask = true }, "E_ATTR")
expect_err("sdpa_fp8: head dim 72 is not a multiple of 16", "sdpa_fp8",
  { q = bhsd(1, 8, 64, 72, "fp8_e4m3"), k = bhsd(1, 8, 64, 72, "fp8_e4m3"), v = bhsd(1, 8, 64, 72, "fp8_e4m3"),
    descale_q = T({ 1, 1, 1, 1 }, "fp32"), descale_k = T({ 1, 1, 1, 1 }, "fp32"), descale_v = T({ 1, 1, 1, 1 }, "fp32"),
    descale_s = T({ 1, 1, 1, 1 }, "fp32"), scale_s = T({ 1, 1, 1, 1 }, "fp32"), scale_o = T({ 1, 1, 1, 1 }, "fp32") },
  { generate_stats = true }, "E_SHAPE", "multiple of 16")
expect_err("sdpa_backward: stats of the wrong shape", "sdpa_backward", bwd { stats = T({ "B", 32, "S", 128 }, "fp32") }, {},
  "E_SHAPE", "stats")
expect_err("sdpa_backward: bf16 stats", "sdpa_backward", bwd { stats = T { "B", 32, "S", 1 } }, {}, "E_DTYPE")
expect_err("sdpa_backward: dBias without bias", "sdpa_backward", bwd(), { dBias = true }, "E_ATTR")
expect_err("sdpa_backward: custom dropout without scale_inv", "sdpa_backward",
  bwd { dropout_mask = T { "B", 32, "S", "S" }, dropout_scale = T({ 1, 1, 1, 1 }, "fp32") }, {}, "E_PORT")

-- GDN ------------------------------------------------------------------------------------

local function gdn_ins(H, HK, HV, extra)
  local t = { q = T { "T", H, 128 }, k = T { "T", HK, 128 }, v = T { "T", HV, 128 },
              g = T({ "T", math.max(H, HV) }, "fp32"), beta = T({ "T", math.max(H, HV) }, "fp32"),
              cu_seqlens = T({ 9 }, "int32") }
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end
expect_ok("gdn: GVA (H 16, HV 32) with final state", "gdn", gdn_ins(16, 16, 32), { output_final_state = true },
  { O = { { "T", 32, 128 }, false }, final_state = { { 8, 32, 128, 128 }, "fp32" } })
expect_ok("gdn: GQA (H 32, HV 16, HK 16)", "gdn", gdn_ins(32, 16, 16), {}, { O = { { "T", 32, 128 }, false },
  final_state = "absent" })
expect_ok("gdn: bf16 initial state gives a bf16 final state; pool rows with state_indices", "gdn",
  gdn_ins(16, 16, 16, { initial_state = T({ 100, 16, 128, 128 }, "bf16"), state_indices = T({ 8 }, "int32") }),
  { output_final_state = true, overwrite_initial_state = true }, { final_state = { { 8, 16, 128, 128 }, "bf16" } })
expect_ok("gdn: safe gate, checkpoints every 64 tokens", "gdn",
  { q = T { 4096, 16, 128 }, k = T { 4096, 16, 128 }, v = T { 4096, 16, 128 }, g = T({ 4096, 16 }, "fp32"),
    beta = T { 4096, 16 }, cu_seqlens = T({ 5 }, "int64"), a_log = T({ 16 }, "fp32"), dt_bias = T({ 16 }, "fp32") },
  { safe_gate = true, use_beta_sigmoid = true, allow_neg_eigval = true, checkpoint_every_n_tokens = 64, scale = 0.088 },
  { state_checkpoints = { { 68, 16, 128, 128 }, false } })
expect_ok("gdn_bwd: gradients with initial state and safe gate", "gdn_bwd",
  gdn_ins(16, 16, 32, { dO = T { "T", 32, 128 }, initial_state = T({ 8, 32, 128, 128 }, "fp32"),
                        d_final_state = T({ 8, 32, 128, 128 }, "fp32"), a_log = T({ 32 }, "fp32") }),
  { safe_gate = true },
  { dQ = { { "T", 16, 128 }, false }, dV = { { "T", 32, 128 }, false }, dG = { { "T", 32 }, "fp32" },
    dBeta = { { "T", 32 }, "fp32" }, d_initial_state = { { 8, 32, 128, 128 }, "fp32" }, d_a_log = { { 32 }, "fp32" },
    d_dt_bias = "absent" })
expect_err("gdn: k heads neither H nor HV", "gdn", gdn_ins(16, 8, 32), {}, "E_SHAPE", "k has 8 heads")
expect_err("gdn: H 3, HV 4 do not divide", "gdn", gdn_ins(3, 3, 4), {}, "E_SHAPE", "multiple")
expect_err("gdn: g at H heads instead of HO", "gdn", gdn_ins(16, 16, 32, { g = T({ "T", 16 }, "fp32") }), {}, "E_SHAPE", "g")
expect_err("gdn: q and k key dims differ", "gdn", gdn_ins(16, 16, 16, { k = T { "T", 16, 64 } }), {}, "E_SHAPE")
expect_err("gdn: fp32 q", "gdn", gdn_ins(16, 16, 16, { q = T({ "T", 16, 128 }, "fp32") }), {}, "E_DTYPE")
expect_err("gdn: fp16 k with bf16 q", "gdn", gdn_ins(16, 16, 16, { k = T({ "T", 16, 128 }, "fp16") }), {}, "E_DTYPE")
expect_err("gdn: fp16 beta with bf16 q", "gdn", gdn_ins(16, 16, 16, { beta = T({ "T", 16 }, "fp16") }), {}, "E_DTYPE")
expect_err("gdn: fp32 cu_seqlens", "gdn", gdn_ins(16, 16, 16, { cu_seqlens = T({ 9 }, "fp32") }), {}, "E_DTYPE")
expect_err("gdn: allow_neg_eigval without use_beta_sigmoid", "gdn", gdn_ins(16, 16, 16), { allow_neg_eigval = true }, "E_ATTR")
expect_err("gdn: safe gate in the linear domain", "gdn", gdn_ins(16, 16, 16), { safe_gate = true, gate_domain = "linear" },
  "E_ATTR")
expect_err("gdn: a_log without safe_gate", "gdn", gdn_ins(16, 16, 16, { a_log = T({ 16 }, "fp32") }), {}, "E_ATTR")
expect_err("gdn: gate_domain exp", "gdn", gdn_ins(16, 16, 16), { gate_domain = "exp" }, "E_ATTR")
expect_err("gdn: state_indices without initial_state", "gdn", gdn_ins(16, 16, 16, { state_indices = T({ 8 }, "int32") }), {},
  "E_PORT")
expect_err("gdn: final state with a dynamic sequence count", "gdn", gdn_ins(16, 16, 16, { cu_seqlens = T({ "N1" }, "int32") }),
  { output_final_state = true }, "E_SHAPE")
expect_err("gdn: initial state rows differ from N", "gdn",
  gdn_ins(16, 16, 16, { initial_state = T({ 4, 16, 128, 128 }, "fp32") }), {}, "E_SHAPE", "initial_state")
expect_err("gdn_bwd: dO at H heads", "gdn_bwd", gdn_ins(16, 16, 32, { dO = T { "T", 16, 128 } }), {}, "E_SHAPE", "dO")

-- Causal conv1d --------------------------------------------------------------------------

local XC = T { "B", 1024, "L" }
expect_ok("causal_conv1d: width 4, bias, silu, final states", "causal_conv1d",
  { x = XC, weight = T { 1024, 4 }, bias = T { 1024 } }, { activation = "silu", return_final_states = true },
  { y = { { "B", 1024, "L" }, "bf16" }, final_states = { { "B", 1024, 3 }, "bf16" } })
expect_ok("causal_conv1d: initial states; width 256 and fp32 weight", "causal_conv1d",
  { x = XC, weight = T({ 1024, 256 }, "fp32"), initial_states = T { "B", 1024, 255 } }, {},
  { y = { { "B", 1024, "L" }, "bf16" }, final_states = "absent" })
expect_ok("causal_conv1d: seq_idx packing", "causal_conv1d",
  { x = XC, weight = T { 1024, 2 }, seq_idx = T({ "B", "L" }, "int32") }, { activation = "swish" },
  { y = { { "B", 1024, "L" }, "bf16" } })
expect_ok("causal_conv1d_backward", "causal_conv1d_backward",
  { x = XC, weight = T { 1024, 4 }, dout = XC, bias = T { 1024 }, initial_states = T { "B", 1024, 3 } },
  { return_dinitial_states = true },
  { dx = { { "B", 1024, "L" }, "bf16" }, dweight = { { 1024, 4 }, "bf16" }, dbias = { { 1024 }, "bf16" },
    dinitial_states = { { "B", 1024, 3 }, "bf16" } })
expect_err("causal_conv1d: width 1", "causal_conv1d", { x = XC, weight = T { 1024, 1 } }, {}, "E_SHAPE", "2..256")
expect_err("causal_conv1d: width 257", "causal_conv1d", { x = XC, weight = T { 1024, 257 } }, {}, "E_SHAPE")
expect_err("causal_conv1d: weight channels differ", "causal_conv1d", { x = XC, weight = T { 512, 4 } }, {}, "E_SHAPE")
expect_err("causal_conv1d: x of rank 2", "causal_conv1d", { x = T { 1024, "L" }, weight = T { 1024, 4 } }, {}, "E_SHAPE")
expect_err("causal_conv1d: initial states of width W", "causal_conv1d",
  { x = XC, weight = T { 1024, 4 }, initial_states = T { "B", 1024, 4 } }, {}, "E_SHAPE", "W-1")
expect_err("causal_conv1d: int32 x", "causal_conv1d", { x = T({ 2, 8, 16 }, "int32"), weight = T { 8, 4 } }, {}, "E_DTYPE")
expect_err("causal_conv1d: fp16 weight with bf16 x", "causal_conv1d", { x = XC, weight = T({ 1024, 4 }, "fp16") }, {}, "E_DTYPE")
expect_err("causal_conv1d: activation gelu", "causal_conv1d", { x = XC, weight = T { 1024, 4 } }, { activation = "gelu" }, "E_ATTR")
expect_err("causal_conv1d: seq_idx with initial states", "causal_conv1d",
  { x = XC, weight = T { 1024, 4 }, seq_idx = T({ "B", "L" }, "int32"), initial_states = T { "B", 1024, 3 } }, {}, "E_PORT")
expect_err("causal_conv1d: seq_idx with return_final_states", "causal_conv1d",
  { x = XC, weight = T { 1024, 4 }, seq_idx = T({ "B", "L" }, "int32") }, { return_final_states = true }, "E_ATTR")

-- Block-scale quantize -------------------------------------------------------------------

expect_ok("block_scale_quantize: MXFP8 along K", "block_scale_quantize", { input = T { "M", 4096 } }, { block_size = 32 },
  { Y = { { "M", 4096 }, "fp8_e4m3" }, scale = { { "M", 128 }, "fp8_e8m0" } })
expect_ok("block_scale_quantize: axis 0, transposed", "block_scale_quantize", { input = T { 4096, "N" } },
  { block_size = 32, axis = 0, transpose = true },
  { Y = { { 4096, "N" }, "fp8_e4m3", strides = { 1, 4096 } }, scale = { { 128, "N" }, "fp8_e8m0" } })
expect_ok("block_scale_dequantize: [M, K] with [1, 32] blocks", "block_scale_dequantize",
  { input = T({ "M", 4096 }, "fp8_e4m3"), descale = T({ "M", 128 }, "fp8_e8m0") }, { block_size = { 1, 32 } },
  { Y = { { "M", 4096 }, false } })
expect_ok("block_scale_dequantize: B [K, N] with [32, 1] blocks", "block_scale_dequantize",
  { input = T({ 4096, 1024 }, "fp8_e5m2"), descale = T({ 128, 1024 }, "fp8_e8m0") }, { block_size = { 32, 1 } },
  { Y = { { 4096, 1024 }, false } })
expect_err("block_scale_quantize: K 100 not a multiple of 32", "block_scale_quantize", { input = T { "M", 100 } },
  { block_size = 32 }, "E_SHAPE", "multiple")
expect_err("block_scale_quantize: dynamic blocked axis", "block_scale_quantize", { input = T { 64, "K" } },
  { block_size = 32 }, "E_SHAPE")
expect_err("block_scale_quantize: block_size 0", "block_scale_quantize", { input = T { 64, 64 } }, { block_size = 0 }, "E_ATTR")
expect_err("block_scale_quantize: no block_size", "block_scale_quantize", { input = T { 64, 64 } }, {}, "E_ATTR")
expect_err("block_scale_quantize: axis 2 on rank 2", "block_scale_quantize", { input = T { 64, 64 } },
  { block_size = 32, axis = 2 }, "E_ATTR")
expect_err("block_scale_quantize: int32 input", "block_scale_quantize", { input = T({ 64, 64 }, "int32") },
  { block_size = 32 }, "E_DTYPE")
test("block_scale_quantize: scale may be fp32 (1x128 / 128x128 recipes), e8m0 or e4m3, not fp16", function()
  local allowed = {}
  for _, d in ipairs(by_name["block_scale_quantize"].out_dtypes.scale) do allowed[d] = true end
  if not (allowed.fp32 and allowed.fp8_e8m0 and allowed.fp8_e4m3) or allowed.fp16 then return false, "scale dtypes wrong" end
  return true
end)
expect_err("block_scale_dequantize: descale of the wrong shape", "block_scale_dequantize",
  { input = T({ "M", 4096 }, "fp8_e4m3"), descale = T({ "M", 64 }, "fp8_e8m0") }, { block_size = { 1, 32 } }, "E_SHAPE",
  "descale")
expect_err("block_scale_dequantize: bf16 input", "block_scale_dequantize",
  { input = T({ "M", 4096 }, "bf16"), descale = T({ "M", 128 }, "fp8_e8m0") }, { block_size = { 1, 32 } }, "E_DTYPE")
expect_err("block_scale_dequantize: empty block_size", "block_scale_dequantize",
  { input = T({ "M", 4096 }, "fp8_e4m3"), descale = T({ "M", 128 }, "fp8_e8m0") }, { block_size = {} }, "E_ATTR")

-- The registry loader (compiler/kiln/ops.lua, another module) takes every definition ------

do
  local ok, ops = pcall(require, "kiln.ops")
  if not ok then
    record(true, "kiln.ops loads every family # SKIP kiln.ops not loadable here: " .. tostring(ops):sub(1, 80))
  else
    test("kiln.ops loads every family", function()
      for _, d in ipairs(all) do
        if ops.by_name[d.name] ~= d then return false, "kiln.ops lacks " .. d.name end
        for _, a in ipairs(d.aliases) do if ops.by_name[a] ~= d then return false, "kiln.ops lacks alias " .. a end end
      end
      return true
    end)
  end
end

-- Determinism: the same call twice gives the same answer ----------------------------------

test("infer is deterministic (same outputs and errors twice)", function()
  local function snapshot(op, ins, attrs)
    local ok, r = call(op, ins, attrs)
    if not ok then return "err " .. tostring(r) end
    local keys = {}
    for k in pairs(r) do keys[#keys + 1] = k end
    table.sort(keys)
    local parts = {}
    for _, k in ipairs(keys) do parts[#parts + 1] = k .. util.fmt(r[k].dims) .. tostring(r[k].dtype) end
    return table.concat(parts, ";")
  end
  local cases = {
    { "sdpa", qkv(), { generate_stats = true } },
    { "reduction", { input = T { 8, 8 } }, { mode = "add", dims = { 8, 1 }, axes = { 1 } } },
    { "gdn", gdn_ins(16, 16, 32), { output_final_state = true } },
  }
  for _, c in ipairs(cases) do
    if snapshot(c[1], c[2], c[3]) ~= snapshot(c[1], c[2], c[3]) then return false, c[1] end
  end
  return true
end)

-- Output ---------------------------------------------------------------------------------

io.write("1..", #results, "\n")
local failed = 0
for i, r in ipairs(results) do
  if r.ok then
    io.write("ok ", i, " - ", r.name, "\n")
    if r.diag then io.write("#   ", (tostring(r.diag):gsub("\n", "\n#   ")), "\n") end
  else
    failed = failed + 1
    io.write("not ok ", i, " - ", r.name, "\n")
    if r.diag then io.write("#   ", (tostring(r.diag):gsub("\n", "\n#   ")), "\n") end
  end
end
os.exit(failed == 0 and 0 or 1)
