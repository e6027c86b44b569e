-- kiln.engines.ptxops: the fused pointwise ops written as PTX (kiln.ptx), for the kernels with
-- their bodies in PTX (rowfwd_ptx: the forward norms' prologues and epilogues; pointwise_ptx:
-- the pointwise kernels): add, sub, mul, div, max, min, neg, abs, identity (casts),
-- add_square, exp, sigmoid, swish. An op without a form here keeps its kernel's CUDA form.
local ptx = require "kiln.ptx"

local M = {}

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
  identity = function(_, a) return a end,
  add_square = function(P, a, b) return P:def("b32", "fma.rn.f32 %s, %s, %s, %s;", b, b, a) end,
}

return M
