-- kiln.ops.util: helpers shared by the op families (dims, axes, ports, dtypes, math).
-- Pure Lua: no io/os, deterministic. Messages never repeat the op name: ctx:fail adds it.
local shape = require "kiln.shape"

local M = {}

local FLOAT = { fp32 = true, fp16 = true, bf16 = true, fp8_e4m3 = true, fp8_e5m2 = true, fp8_e8m0 = true }
local FP8 = { fp8_e4m3 = true, fp8_e5m2 = true, fp8_e8m0 = true }
local INT = { int32 = true, int64 = true }

M.FLOATS = { "fp32", "fp16", "bf16" }                       -- the usual activation dtypes
M.FLOATS_FP8 = { "fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2" }
M.INTS = { "int32", "int64" }
M.FLT_MAX = 3.4028234663852886e38

-- dtype classes; nil (context default, not resolved yet) is none of them.
function M.is_float(dt) return FLOAT[dt] == true end
function M.is_fp8(dt) return FP8[dt] == true end
function M.is_int(dt) return INT[dt] == true end

-- "[T, 4096]" and a dims copy: the graph's own helpers
M.fmt = shape.format
M.copy = shape.copy

-- A dim is an integer >= 1 or a dynamic dim's name.
function M.is_dim(d)
  return (math.type(d) == "integer" and d >= 1) or (type(d) == "string" and d ~= "")
end

function M.is_static(d) return math.type(d) == "integer" end

-- Equal dims lists (ctx:same_dim per entry).
function M.same_dims(ctx, a, b)
  if #a ~= #b then return false end
  for i = 1, #a do
    if not ctx:same_dim(a[i], b[i]) then return false end
  end
  return true
end

-- a is a whole multiple of b, provably: same dim, b == 1, or both static and divisible.
function M.divisible(ctx, a, b)
  if b == 1 or ctx:same_dim(a, b) then return true end
  return M.is_static(a) and M.is_static(b) and a % b == 0
end

-- Numpy broadcast of several {port, dims} pairs, right-aligned (OPS.md §1.5).
function M.broadcast(ctx, list)
  local n = 0
  for _, p in ipairs(list) do n = math.max(n, #p[2]) end
  local out = {}
  for i = 1, n do
    local d, from = 1, nil
    for _, p in ipairs(list) do
      local dims = p[2]
      local x = dims[#dims - n + i] or 1
      if x ~= 1 then
        if d == 1 then d, from = x, p
        elseif not ctx:same_dim(d, x) then
          local what = (type(d) == "string" or type(x) == "string")
            and "a dynamic dim cannot be proven equal to another extent"
            or "extents must be equal or 1"
          ctx:fail("E_SHAPE", "cannot broadcast %s %s with %s %s: axis %d (from the right) is %s vs %s (%s)",
            from[1], M.fmt(from[2]), p[1], M.fmt(dims), n - i, tostring(d), tostring(x), what)
        end
      end
    end
    out[i] = d
  end
  return out
end

-- Axis (0-based, negative counts from the end) -> 1-based index; E_ATTR when out of range.
function M.axis(ctx, attr, axis, rank, port)
  axis = math.tointeger(axis) or axis
  if math.type(axis) ~= "integer" then
    ctx:fail("E_ATTR", "attribute '%s' must be an integer axis, got %s", attr, tostring(axis))
  end
  if axis < -rank or axis >= rank then
    ctx:fail("E_ATTR", "attribute '%s' = %d is out of range for %s of rank %d (allowed %d..%d)",
      attr, axis, port or "the input", rank, -rank, rank - 1)
  end
  return axis < 0 and rank + axis + 1 or axis + 1
end

-- Port checks ------------------------------------------------------------------------

function M.rank_is(ctx, port, t, want, what)
  if #t.dims ~= want then
    ctx:fail("E_SHAPE", "%s must have rank %d%s, got %s (rank %d)", port, want,
      what and (" (" .. what .. ")") or "", M.fmt(t.dims), #t.dims)
  end
end

function M.rank_at_least(ctx, port, t, min, what)
  if #t.dims < min then
    ctx:fail("E_SHAPE", "%s must have rank >= %d%s, got %s", port, min,
      what and (" (" .. what .. ")") or "", M.fmt(t.dims))
  end
end

-- Matches any extent in M.dims_are.
M.ANY = setmetatable({}, { __tostring = function() return "*" end })

-- Exact dims: entries of want are dims or M.ANY.
function M.dims_are(ctx, port, t, want, what)
  local ok = #t.dims == #want
  for i = 1, #want do
    if not ok then break end
    if want[i] ~= M.ANY and not ctx:same_dim(t.dims[i], want[i]) then ok = false end
  end
  if not ok then
    ctx:fail("E_SHAPE", "%s must be %s%s, got %s", port, M.fmt(want),
      what and (" (" .. what .. ")") or "", M.fmt(t.dims))
  end
end

-- A scalar tensor: every extent 1.
function M.scalar(ctx, port, t)
  for _, d in ipairs(t.dims) do
    if d ~= 1 then ctx:fail("E_SHAPE", "%s must be a scalar (all extents 1), got %s", port, M.fmt(t.dims)) end
  end
end

-- Dtype checks that skip unresolved (nil) dtypes.
function M.dtype_in(ctx, port, t, allowed)
  if t.dtype ~= nil then ctx:check_dtype(port, t, allowed) end
end

function M.same_dtype(ctx, port, t, other_port, other)
  if t.dtype ~= nil and other.dtype ~= nil and t.dtype ~= other.dtype then
    ctx:fail("E_DTYPE", "%s has dtype %s but %s has %s (they must match)", port, t.dtype, other_port, other.dtype)
  end
end

-- Strides with `axis` (1-based) innermost and the other axes row-major around it; entries
-- are integers or product strings ("T*64") as in graph JSON.
function M.strides_axis_innermost(dims, axis)
  local order = {}
  for i = 1, #dims do if i ~= axis then order[#order + 1] = i end end
  order[#order + 1] = axis
  local strides, names, const = {}, {}, 1
  for k = #order, 1, -1 do
    local i = order[k]
    if #names == 0 then strides[i] = const
    else
      local parts = {}
      for j, n in ipairs(names) do parts[j] = n end
      if const ~= 1 then parts[#parts + 1] = tostring(const) end
      strides[i] = table.concat(parts, "*")
    end
    local d = dims[i]
    if type(d) == "string" then names[#names + 1] = d else const = const * d end
  end
  return strides
end

-- Registry helpers ---------------------------------------------------------------------

-- Port lists hold names or {name, optional = true}.
function M.port_name(p) return type(p) == "string" and p or p[1] end
function M.port_optional(p) return type(p) == "table" and p.optional == true end

-- Math for the pointwise references (Lua 5.4 has no erf/tanh/expm1/log1p) ----------------

function M.expm1(x)
  if x ~= x then return x end
  if math.abs(x) < 1e-5 then return x + 0.5 * x * x + x * x * x / 6 end
  local u = math.exp(x)
  if u == math.huge then return u end
  if u == 1.0 then return x end
  if u - 1.0 == -1.0 then return -1.0 end
  return (u - 1.0) * x / math.log(u)  -- Kahan's trick: exact to a few ulps
end

function M.log1p(x)
  if x ~= x then return x end
  local u = 1.0 + x
  if u == 1.0 then return x end
  if u == math.huge then return u end
  return math.log(u) * x / (u - 1.0)
end

function M.tanh(x)
  if x ~= x then return x end
  if x > 20 then return 1.0 elseif x < -20 then return -1.0 end
  local e = M.expm1(2 * x)
  return e / (e + 2.0)
end

-- erf: Maclaurin series below 2.5, erfc continued fraction (modified Lentz) above.
local TWO_OVER_SQRT_PI = 1.1283791670955126

local function erfc_cf(x)  -- x >= 2.5
  local tiny = 1e-300
  -- erfc(x) = exp(-x^2)/sqrt(pi) * 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + ...)))))
  local f = x
  local C, D = f, 0.0
  for n = 1, 500 do
    local an = n * 0.5
    D = x + an * D
    if D == 0 then D = tiny end
    C = x + an / C
    if C == 0 then C = tiny end
    D = 1.0 / D
    local delta = C * D
    f = f * delta
    if math.abs(delta - 1.0) < 1e-16 then break end
  end
  return math.exp(-x * x) / (f * 1.7724538509055160)
end

function M.erf(x)
  if x ~= x then return x end
  local ax = math.abs(x)
  local r
  if ax < 2.5 then
    local x2 = ax * ax
    local term, sum, n = ax, ax, 0
    repeat
      n = n + 1
      term = -term * x2 / n
      local add = term / (2 * n + 1)
      sum = sum + add
    until math.abs(add) <= 1e-17 * math.abs(sum)
    r = TWO_OVER_SQRT_PI * sum
  elseif ax > 6 then
    r = 1.0
  else
    r = 1.0 - erfc_cf(ax)
  end
  return x < 0 and -r or r
end

function M.sigmoid(x) return 1.0 / (1.0 + math.exp(-x)) end

return M
