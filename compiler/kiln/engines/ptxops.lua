-- kiln.engines.ptxops: the fused pointwise ops written as PTX (kiln.ptx), for the kernels with
-- their bodies in PTX (rowfwd_ptx: the forward norms' prologues and epilogues; pointwise_ptx:
-- the pointwise kernels): add, sub, mul, div, max, min, neg, abs, identity (casts),
-- add_square, exp, sigmoid, swish, sqrt, rsqrt, relu (with its clips and slope), the comparisons,
-- pow by a small integer constant, and GELU into a 16-bit or fp8 value; outputs of fp32, fp16,
-- bf16, fp8 (from sm_89) and bool. An op without a form here keeps its kernel's CUDA form.
local dtypes = require "kiln.dtypes"
local ptx = require "kiln.ptx"

local M = {}

-- The tensor dtypes these forms read and round to (fp8 only written, from sm_89).
M.IN = { fp32 = true, fp16 = true, bf16 = true }
local FP8 = { fp8_e4m3 = true, fp8_e5m2 = true }

-- The fused ops' PTX: op name -> function(P, a, b) giving the result's register, with the
-- rounding of the CUDA form (IEEE division; a + b * b contracted to one fma, as NVVM does).
local function bin(ins) return function(P, a, b) return P:def("b32", ins .. " %s, %s, %s;", a, b) end end
local function un(ins) return function(P, a) return P:def("b32", ins .. " %s, %s;", a) end end
-- e^z as CUDA's expf computes it (its instruction sequence, about 2 ulp): the mantissa part
-- and the power of two, whose product is the value
local function expf_parts(P, z)
  local t = P:def("b32", "cvt.sat.f32.f32 %s, %s;", P:def("b32", "fma.rn.f32 %s, %s, 0f3BBB989D, 0f3F000000;", z))
  local j = P:def("b32", "fma.rm.f32 %s, %s, 0f437C0000, 0f4B400001;", t)
  local u = P:def("b32", "neg.f32 %s, %s;", P:def("b32", "add.f32 %s, %s, 0fCB40007F;", j))
  local r = P:def("b32", "fma.rn.f32 %s, %s, 0f3FB8AA3B, %s;", z, u)
  r = P:def("b32", "fma.rn.f32 %s, %s, 0f32A57060, %s;", z, r)
  return P:def("b32", "ex2.approx.ftz.f32 %s, %s;", r), P:def("b32", "shl.b32 %s, %s, 23;", j)
end
-- x / (1 + e^z) with __fdividef's division (the sigmoid and swish of pointwise.lua)
local function over_one_plus_exp(P, x, z)
  local e, s = expf_parts(P, z)
  return P:def("b32", "div.approx.f32 %s, %s, %s;", x, P:def("b32", "fma.rn.f32 %s, %s, %s, 0f3F800000;", e, s))
end
local function attr(attrs, name)
  local v = attrs[name]
  if type(v) == "boolean" then v = v and 1 or 0 end
  return tonumber(v) or 0
end
-- a comparison's 0/1 (C's == and the ordered <, <=, >, >=: false with a NaN; != true: neu)
local function cmp(test) return function(P, a, b)
  return P:def("b32", "selp.f32 %s, 0f3F800000, 0f00000000, %s;", P:def("pred", "setp." .. test .. ".f32 %s, %s, %s;", a, b))
end end
M.OPS = {
  exp = function(P, a)
    local e, s = expf_parts(P, a)
    return P:def("b32", "mul.f32 %s, %s, %s;", e, s)
  end,
  sigmoid = function(P, a) return over_one_plus_exp(P, ptx.f32(1), P:def("b32", "neg.f32 %s, %s;", a)) end,
  swish = function(P, a, _, attrs)
    local beta = attr(attrs, "swish_beta")
    local z = beta == 1 and P:def("b32", "neg.f32 %s, %s;", a) or P:def("b32", "mul.f32 %s, %s, %s;", a, ptx.f32(-beta))
    return over_one_plus_exp(P, a, z)
  end,
  add = bin("add.f32"), sub = bin("sub.f32"), mul = bin("mul.f32"), div = bin("div.rn.f32"),
  max = bin("max.f32"), min = bin("min.f32"), neg = un("neg.f32"), abs = un("abs.f32"),
  -- (rsqrtf and sqrtf as NVVM writes them without fast math)
  rsqrt = un("rsqrt.approx.f32"), sqrt = un("sqrt.rn.f32"),
  identity = function(_, a) return a end,
  cmp_eq = cmp("eq"), cmp_neq = cmp("neu"), cmp_gt = cmp("gt"), cmp_ge = cmp("ge"), cmp_lt = cmp("lt"), cmp_le = cmp("le"),
  -- a <= lower ? lower + slope (a - lower) : (a >= upper ? upper : a), the sum contracted as NVVM
  -- does; a NaN passes through
  relu = function(P, a, _, attrs)
    local lo, up = ptx.f32(attr(attrs, "lower_clip")), ptx.f32(math.min(attr(attrs, "upper_clip"), 3.4028234663852886e38))
    local leak = P:def("b32", "fma.rn.f32 %s, %s, %s, %s;", ptx.f32(attr(attrs, "negative_slope")), P:def("b32", "sub.f32 %s, %s, %s;", a, lo), lo)
    local high = P:def("b32", "selp.f32 %s, %s, %s, %s;", up, a, P:def("pred", "setp.ge.f32 %s, %s, %s;", a, up))
    return P:def("b32", "selp.f32 %s, %s, %s, %s;", leak, high, P:def("pred", "setp.le.f32 %s, %s, %s;", a, lo))
  end,
  add_square = function(P, a, b) return P:def("b32", "fma.rn.f32 %s, %s, %s, %s;", b, b, a) end,
}


-- Why an element output t, written in vectors of v, is beyond these forms (nil when it is not):
-- `read_later` as pwexpr.read_set.
function M.output_declines(t, v, read_later, target)
  if FP8[t.dtype] then
    if target.sm < 89 then return "fp8 outputs before sm_89" end
    if read_later[t.uid] then return "an fp8 value read again" end
  elseif not M.IN[t.dtype] and t.dtype ~= "bool" then
    return "output " .. t.name .. " is " .. t.dtype
  end
  if (v * dtypes.size(t.dtype)) % 4 ~= 0 then return "output vectors narrower than a word" end
  return nil
end

-- Ops whose PTX here holds only for a value stored in 16 bits or fewer (the CUDA form's
-- `narrow` expressions, pwexpr): GELU as kiln_gelu_narrow computes it (templates/common/gelu.cuh:
-- x (1 - q) or x q, q = 2^(a R(min(a, 9)) - 1) the lower tail, a = |x|).
local GELU_R = { 7.347970410e-08, -3.615636615e-06, 7.886790991e-05, -1.015811344e-03, 8.733196184e-03,
                 -5.426368862e-02, -4.582904875e-01, -1.151269794e+00 }
M.NARROW_OPS = {
  gelu = function(P, x)
    local a = P:def("b32", "abs.f32 %s, %s;", x)
    local c = P:def("b32", "min.f32 %s, %s, %s;", a, ptx.f32(9))
    local r = ptx.f32(GELU_R[1])
    for i = 2, #GELU_R do r = P:def("b32", "fma.rn.f32 %s, %s, %s, %s;", r, c, ptx.f32(GELU_R[i])) end
    local q = P:def("b32", "ex2.approx.ftz.f32 %s, %s;", P:def("b32", "fma.rn.f32 %s, %s, %s, 0fBF800000;", a, r))
    local up = P:def("pred", "setp.ge.f32 %s, %s, 0f00000000;", x)
    local s = P:def("b32", "selp.f32 %s, %s, %s, %s;", P:def("b32", "sub.f32 %s, 0f3F800000, %s;", q), q, up)
    return P:def("b32", "mul.f32 %s, %s, %s;", x, s)
  end,
}
local NARROW = require("kiln.engines.pwexpr").NARROW

-- x^n for a small integer constant n (the CUDA form's powf within its 2 ulp: products and one
-- IEEE division; x^0 is 1 even for a NaN, as powf); other exponents keep the CUDA form.
local mul, div, ONE = M.OPS.mul, M.OPS.div, ptx.f32(1)
local POW_BY = {
  [0] = function() return ONE end,
  [1] = function(_, x) return x end,
  [2] = function(P, x) return mul(P, x, x) end,
  [3] = function(P, x) return mul(P, mul(P, x, x), x) end,
  [4] = function(P, x) local s = mul(P, x, x) return mul(P, s, s) end,
  [-1] = function(P, x) return div(P, ONE, x) end,
  [-2] = function(P, x) return div(P, ONE, mul(P, x, x)) end,
}
local function pow_of(node, g)
  local e = g.by_uid[node.inputs.input1]
  return e and e.role == "constant" and POW_BY[e.value] or nil
end

-- The PTX of node (its output stored in g's dtype), or nil.
local function op_of(node, g)
  if node.def.special then return nil end
  if node.def.name == "pow" then return pow_of(node, g) end
  local out = g.by_uid[node.outputs.OUT_0 or select(2, next(node.outputs))]
  return M.OPS[node.def.name] or (NARROW[out.dtype] and M.NARROW_OPS[node.def.name]) or nil
end

-- Why a node of the list has no PTX form here (nil when each has one).
function M.op_declines(nodes, g)
  for _, node in ipairs(nodes) do
    if not op_of(node, g) then return "op " .. node.op .. " has no PTX form here" end
  end
  return nil
end

-- Why the nodes' values read again cannot round to their dtypes in registers (nil when they can:
-- fp32, fp16, bf16 and bool).
function M.read_again_declines(nodes, g, read_later)
  for _, node in ipairs(nodes) do
    for _, uid in pairs(node.outputs) do
      local t = g.by_uid[uid]
      if read_later[uid] and t.dtype ~= "fp32" and t.dtype ~= "bool" and not M.IN[t.dtype] then return "a " .. t.dtype .. " value read again" end
    end
  end
  return nil
end

-- The nodes' values into `value` (registers by uid) by P, a 16-bit value read again rounded to
-- its dtype; recip[uid], where given, makes a division by uid a multiply by it.
function M.run_nodes(P, nodes, value, g, read_later, recip)
  for _, node in ipairs(nodes) do
    local args = {}
    for i, p in ipairs(node.def.input_ports) do args[i] = value[node.inputs[p.name]] or ptx.f32(0) end
    local out = node.outputs.OUT_0 or select(2, next(node.outputs))
    local r = recip and node.def.name == "div" and recip[node.inputs.b]
    local v = r and P:def("b32", "mul.f32 %s, %s, %s;", args[1], r) or op_of(node, g)(P, args[1], args[2], node.attrs or {})
    local t = g.by_uid[out]
    if t.dtype == "bool" and read_later[out] then
      -- (as the CUDA form's store and load: 1 where the value is not 0)
      v = P:def("b32", "selp.f32 %s, 0f3F800000, 0f00000000, %s;", P:def("pred", "setp.neu.f32 %s, %s, 0f00000000;", v))
    elseif t.dtype ~= "fp32" and read_later[out] then v = P:round(v, t.dtype) end
    value[out] = v
  end
end

return M
