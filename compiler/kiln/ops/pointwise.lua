-- kiln.ops.pointwise: the 50 cuDNN frontend pointwise modes + atan2 (OPS.md §2).
--
-- Beyond the registry fields of docs/INTERNALS.md each op has:
--   arity    number of inputs (1, 2 or 3)
--   cexpr    fp32 CUDA expression over the operands a, b, c (inputs in port order, whole
--            words) and attributes as @name@ placeholders; each placeholder and operand is
--            parenthesized, so a float literal (0.0f, -0.1f: never a bare "0") may be pasted
--            in as is. Only header-free NVRTC math builtins (expf, expm1f, log1pf, erff, __fdividef, ...).
--   special  "gen_index" for the one op without a cexpr (the value is the coordinate)
--   narrow   { cexpr, snippets }: a cheaper expression for an output stored in 16 bits or
--            fewer (its error far under that dtype's half-ulp), with the template snippets
--            it calls
--   ref      function(a, b, c, attrs) -> number: the same math in Lua doubles (attrs may be
--            nil or partial: defaults apply); bool operands are 0/1. For gen_index, a is the
--            coordinate along the axis.
--   out_dtypes  { OUT_0 = {...} }: the dtypes the output may be declared with (absent = any);
--            compare/logical results are bool (or integer), gen_index is int32/int64.
local util = require "kiln.ops.util"

local SQRT1_2 = "0.70710678118654752f"        -- 1/sqrt(2)
local INV_SQRT_2PI = "0.39894228040143268f"   -- 1/sqrt(2*pi)
local SQRT_2_PI = "0.79788456080286536f"      -- sqrt(2/pi)
local K_SQRT_2_PI = 0.79788456080286536
local K_INV_SQRT_2PI = 0.39894228040143268

local erf, tanh, expm1, log1p, sigmoid = util.erf, util.tanh, util.expm1, util.log1p, util.sigmoid

local RELU_ATTRS = {
  negative_slope = { type = "number", default = 0.0 },
  lower_clip = { type = "number", default = 0.0 },
  upper_clip = { type = "number", default = util.FLT_MAX },  -- +max, clamped to float (fp32 compute)
}
local ELU_ATTRS = { elu_alpha = { type = "number", default = 1.0 } }
local SOFTPLUS_ATTRS = { softplus_beta = { type = "number", default = 1.0 } }
local SWISH_ATTRS = { swish_beta = { type = "number", default = 1.0 } }
local GEN_INDEX_ATTRS = { axis = { type = "integer", required = true } }

local BOOL_OUT = { "bool", "int32", "int64" }
local LOGICAL_IN = { "bool", "int32", "int64" }

local function fmax(x, y)  -- C fmaxf: a NaN operand loses
  if x ~= x then return y elseif y ~= y then return x end
  return x >= y and x or y
end
local function fmin(x, y)
  if x ~= x then return y elseif y ~= y then return x end
  return x <= y and x or y
end
local function b2f(v) return v and 1.0 or 0.0 end
local function gelu_tanh_u(x) return K_SQRT_2_PI * (x + 0.044715 * x * x * x) end

-- name, FE mode, ports, cexpr, ref, extra fields (attrs, aliases, out dtype rule)
local MODES = {
  -- arithmetic
  { "add", "ADD", { "a", "b" }, "((a) + (b))", function(a, b) return a + b end,
    { aliases = { "bias" }, alias_ports = { bias = { input = "a", bias = "b" } } } },
  { "sub", "SUB", { "a", "b" }, "((a) - (b))", function(a, b) return a - b end },
  { "mul", "MUL", { "a", "b" }, "((a) * (b))", function(a, b) return a * b end,
    { aliases = { "scale" }, alias_ports = { scale = { input = "a", scale = "b" } } } },
  { "div", "DIV", { "a", "b" }, "((a) / (b))", function(a, b) return a / b end },
  { "add_square", "ADD_SQUARE", { "a", "b" }, "((a) + (b) * (b))", function(a, b) return a + b * b end },
  { "max", "MAX", { "input0", "input1" }, "fmaxf((a), (b))", function(a, b) return fmax(a, b) end },
  { "min", "MIN", { "input0", "input1" }, "fminf((a), (b))", function(a, b) return fmin(a, b) end },
  { "mod", "MOD", { "input0", "input1" }, "fmodf((a), (b))", function(a, b) return math.fmod(a, b) end },
  { "pow", "POW", { "input0", "input1" }, "powf((a), (b))", function(a, b) return a ^ b end },
  { "atan2", "ATAN2", { "a", "b" }, "atan2f((a), (b))", function(a, b) return math.atan(a, b) end },
  -- unary math
  { "sqrt", "SQRT", { "input" }, "sqrtf(a)", function(a) return math.sqrt(a) end },
  { "rsqrt", "RSQRT", { "input" }, "rsqrtf(a)", function(a) return 1.0 / math.sqrt(a) end },
  { "reciprocal", "RECIPROCAL", { "input" }, "(1.0f / (a))", function(a) return 1.0 / a end },
  { "exp", "EXP", { "input" }, "expf(a)", function(a) return math.exp(a) end },
  { "log", "LOG", { "input" }, "logf(a)", function(a) return math.log(a) end },
  { "neg", "NEG", { "input" }, "(-(a))", function(a) return -a end },
  { "abs", "ABS", { "input" }, "fabsf(a)", function(a) return math.abs(a) end },
  { "ceil", "CEIL", { "input" }, "ceilf(a)", function(a) return math.ceil(a) + 0.0 end },
  { "floor", "FLOOR", { "input" }, "floorf(a)", function(a) return math.floor(a) + 0.0 end },
  { "sin", "SIN", { "input" }, "sinf(a)", function(a) return math.sin(a) end },
  { "cos", "COS", { "input" }, "cosf(a)", function(a) return math.cos(a) end },
  { "tan", "TAN", { "input" }, "tanf(a)", function(a) return math.tan(a) end },
  { "erf", "ERF", { "input" }, "erff(a)", function(a) return erf(a) end },
  { "identity", "IDENTITY", { "input" }, "(a)", function(a) return a end },
  -- activations, forward
  { "relu", "RELU_FWD", { "input" },
    "((a) <= (@lower_clip@) ? (@lower_clip@) + (@negative_slope@) * ((a) - (@lower_clip@))"
      .. " : ((a) >= (@upper_clip@) ? (@upper_clip@) : (a)))",
    function(a, _, _, p)
      if a <= p.lower_clip then return p.lower_clip + p.negative_slope * (a - p.lower_clip) end
      if a >= p.upper_clip then return p.upper_clip end
      return a
    end,
    { attrs = RELU_ATTRS, aliases = { "leaky_relu" }, alias_requires = { leaky_relu = { "negative_slope" } } } },
  { "tanh", "TANH_FWD", { "input" }, "tanhf(a)", function(a) return tanh(a) end },
  -- sigmoid and swish divide by 1 + e^-x >= 1 with __fdividef (2 ulp; 0 past 2^126, the limit):
  -- an IEEE division there cost 10 ms of NVRTC time per fused row kernel and its slow path
  { "sigmoid", "SIGMOID_FWD", { "input" }, "__fdividef(1.0f, 1.0f + expf(-(a)))", function(a) return sigmoid(a) end },
  { "elu", "ELU_FWD", { "input" }, "((a) > 0.0f ? (a) : (@elu_alpha@) * expm1f(a))",
    function(a, _, _, p) return a > 0 and a or p.elu_alpha * expm1(a) end, { attrs = ELU_ATTRS } },
  { "gelu", "GELU_FWD", { "input" }, "(0.5f * (a) * (1.0f + erff((a) * " .. SQRT1_2 .. ")))",
    function(a) return 0.5 * a * (1.0 + erf(a * 0.70710678118654752)) end,
    { narrow = { cexpr = "kiln_gelu_narrow(a)", snippets = { "common/exp2.cuh", "common/gelu.cuh" } } } },
  { "gelu_approx_tanh", "GELU_APPROX_TANH_FWD", { "input" },
    "(0.5f * (a) * (1.0f + tanhf(" .. SQRT_2_PI .. " * ((a) + 0.044715f * (a) * (a) * (a)))))",
    function(a) return 0.5 * a * (1.0 + tanh(gelu_tanh_u(a))) end },
  -- (1/beta) ln(1 + e^(beta x)) in the overflow-free form max(bx, 0) + ln(1 + e^-|bx|)
  { "softplus", "SOFTPLUS_FWD", { "input" },
    "((fmaxf((@softplus_beta@) * (a), 0.0f) + log1pf(expf(-fabsf((@softplus_beta@) * (a)))))"
      .. " / (@softplus_beta@))",
    function(a, _, _, p)
      local z = p.softplus_beta * a
      return (math.max(z, 0.0) + log1p(math.exp(-math.abs(z)))) / p.softplus_beta
    end, { attrs = SOFTPLUS_ATTRS } },
  { "swish", "SWISH_FWD", { "input" }, "__fdividef((a), 1.0f + expf(-(@swish_beta@) * (a)))",
    function(a, _, _, p) return a * sigmoid(p.swish_beta * a) end, { attrs = SWISH_ATTRS } },
  -- activations, backward: a = dy (loss), b = x (the forward input)
  { "relu_backward", "RELU_BWD", { "loss", "input" },
    "((b) <= (@lower_clip@) ? (a) * (@negative_slope@) : ((b) >= (@upper_clip@) ? 0.0f : (a)))",
    function(a, b, _, p)
      if b <= p.lower_clip then return a * p.negative_slope end
      if b >= p.upper_clip then return 0.0 end
      return a
    end,
    { attrs = RELU_ATTRS, aliases = { "leaky_relu_backward" },
      alias_requires = { leaky_relu_backward = { "negative_slope" } } } },
  { "tanh_backward", "TANH_BWD", { "loss", "input" }, "((a) * (1.0f - tanhf(b) * tanhf(b)))",
    function(a, b) local t = tanh(b); return a * (1.0 - t * t) end },
  { "sigmoid_backward", "SIGMOID_BWD", { "loss", "input" },
    "((a) * (1.0f / (1.0f + expf(-(b)))) * (1.0f - 1.0f / (1.0f + expf(-(b)))))",
    function(a, b) local s = sigmoid(b); return a * s * (1.0 - s) end },
  { "elu_backward", "ELU_BWD", { "loss", "input" }, "((b) > 0.0f ? (a) : (a) * (@elu_alpha@) * expf(b))",
    function(a, b, _, p) return b > 0 and a or a * p.elu_alpha * math.exp(b) end, { attrs = ELU_ATTRS } },
  { "gelu_backward", "GELU_BWD", { "loss", "input" },
    "((a) * (0.5f * (1.0f + erff((b) * " .. SQRT1_2 .. ")) + (b) * " .. INV_SQRT_2PI
      .. " * expf(-0.5f * (b) * (b))))",
    function(a, b)
      return a * (0.5 * (1.0 + erf(b * 0.70710678118654752)) + b * K_INV_SQRT_2PI * math.exp(-0.5 * b * b))
    end },
  { "gelu_approx_tanh_backward", "GELU_APPROX_TANH_BWD", { "loss", "input" },
    "((a) * (0.5f * (1.0f + tanhf(" .. SQRT_2_PI .. " * ((b) + 0.044715f * (b) * (b) * (b))))"
      .. " + 0.5f * (b) * (1.0f - tanhf(" .. SQRT_2_PI .. " * ((b) + 0.044715f * (b) * (b) * (b)))"
      .. " * tanhf(" .. SQRT_2_PI .. " * ((b) + 0.044715f * (b) * (b) * (b))))"
      .. " * " .. SQRT_2_PI .. " * (1.0f + 0.134145f * (b) * (b))))",
    function(a, b)
      local t = tanh(gelu_tanh_u(b))
      return a * (0.5 * (1.0 + t) + 0.5 * b * (1.0 - t * t) * K_SQRT_2_PI * (1.0 + 0.134145 * b * b))
    end },
  { "softplus_backward", "SOFTPLUS_BWD", { "loss", "input" },
    "((a) / (1.0f + expf(-(@softplus_beta@) * (b))))",
    function(a, b, _, p) return a * sigmoid(p.softplus_beta * b) end, { attrs = SOFTPLUS_ATTRS } },
  { "swish_backward", "SWISH_BWD", { "loss", "input" },
    "((a) * (1.0f / (1.0f + expf(-(@swish_beta@) * (b))))"
      .. " * (1.0f + (@swish_beta@) * (b) * (1.0f - 1.0f / (1.0f + expf(-(@swish_beta@) * (b))))))",
    function(a, b, _, p)
      local s = sigmoid(p.swish_beta * b)
      return a * s * (1.0 + p.swish_beta * b * (1.0 - s))
    end, { attrs = SWISH_ATTRS } },
  -- comparisons and logic: 0/1 results, declared bool
  { "cmp_eq", "CMP_EQ", { "input", "comparison" }, "((a) == (b) ? 1.0f : 0.0f)",
    function(a, b) return b2f(a == b) end, { out = "bool" } },
  { "cmp_neq", "CMP_NEQ", { "input", "comparison" }, "((a) != (b) ? 1.0f : 0.0f)",
    function(a, b) return b2f(a ~= b) end, { out = "bool" } },
  { "cmp_gt", "CMP_GT", { "input", "comparison" }, "((a) > (b) ? 1.0f : 0.0f)",
    function(a, b) return b2f(a > b) end, { out = "bool" } },
  { "cmp_ge", "CMP_GE", { "input", "comparison" }, "((a) >= (b) ? 1.0f : 0.0f)",
    function(a, b) return b2f(a >= b) end, { out = "bool" } },
  { "cmp_lt", "CMP_LT", { "input", "comparison" }, "((a) < (b) ? 1.0f : 0.0f)",
    function(a, b) return b2f(a < b) end, { out = "bool" } },
  { "cmp_le", "CMP_LE", { "input", "comparison" }, "((a) <= (b) ? 1.0f : 0.0f)",
    function(a, b) return b2f(a <= b) end, { out = "bool" } },
  { "logical_and", "LOGICAL_AND", { "a", "b" }, "(((a) != 0.0f && (b) != 0.0f) ? 1.0f : 0.0f)",
    function(a, b) return b2f(a ~= 0 and b ~= 0) end, { out = "bool", logical = true } },
  { "logical_or", "LOGICAL_OR", { "a", "b" }, "(((a) != 0.0f || (b) != 0.0f) ? 1.0f : 0.0f)",
    function(a, b) return b2f(a ~= 0 or b ~= 0) end, { out = "bool", logical = true } },
  { "logical_not", "LOGICAL_NOT", { "input" }, "((a) == 0.0f ? 1.0f : 0.0f)",
    function(a) return b2f(a == 0) end, { out = "bool", logical = true } },
  -- index and select
  { "gen_index", "GEN_INDEX", { "input" }, nil, function(a) return a end,
    { attrs = GEN_INDEX_ATTRS, out = "int32", special = "gen_index" } },
  { "binary_select", "BINARY_SELECT", { "input0", "input1", "mask" }, "((c) != 0.0f ? (a) : (b))",
    function(a, b, c) if c ~= 0 then return a end return b end, { select = true } },
}

-- Operands as float doubles (bools as 0/1), attributes with their defaults.
local function wrap_ref(fn, attrs_schema)
  local function num(v)
    if v == nil then return nil end
    if type(v) == "boolean" then return v and 1.0 or 0.0 end
    return v + 0.0
  end
  return function(a, b, c, attrs)
    local p = {}
    for k, s in pairs(attrs_schema) do
      local v = attrs and attrs[k]
      if v == nil then v = s.default end
      p[k] = v
    end
    return fn(num(a), num(b), num(c), p)
  end
end

local function make_infer(ports, extra)
  return function(ctx, ins, attrs)
    local list = {}
    for _, p in ipairs(ports) do list[#list + 1] = { p, ins[p].dims } end
    if extra.logical then
      for _, p in ipairs(ports) do util.dtype_in(ctx, p, ins[p], LOGICAL_IN) end
    end
    if extra.select then util.dtype_in(ctx, "mask", ins.mask, LOGICAL_IN) end
    local dims = util.broadcast(ctx, list)
    if extra.special == "gen_index" then util.axis(ctx, "axis", attrs.axis, #dims, "input") end
    return { OUT_0 = { dims = dims, dtype = extra.out } }
  end
end

local defs = {}
for _, m in ipairs(MODES) do
  local name, mode, ports, cexpr, ref, extra = m[1], m[2], m[3], m[4], m[5], m[6] or {}
  local attrs = extra.attrs or {}
  local out_dtypes
  if extra.out == "bool" then out_dtypes = { OUT_0 = BOOL_OUT }
  elseif extra.out == "int32" then out_dtypes = { OUT_0 = util.INTS } end
  defs[#defs + 1] = {
    name = name, family = "pointwise", mode = mode,
    inputs = ports, outputs = { "OUT_0" },
    aliases = extra.aliases or {},
    alias_ports = extra.alias_ports,        -- alias -> {alias port = port}: the Python names
    alias_requires = extra.alias_requires,  -- alias -> attributes the alias must be given
    attrs = attrs,
    arity = #ports, cexpr = cexpr, special = extra.special, narrow = extra.narrow,
    ref = wrap_ref(ref, attrs),
    out_dtypes = out_dtypes,
    infer = make_infer(ports, extra),
  }
end

return defs
