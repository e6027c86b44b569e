-- kiln.engines.reduce_ptx: what the reductions' PTX forms share (axisreduce_ptx: over other
-- axes; colreduce_ptx: over the leading axes): each update of an accumulator by an element,
-- the fold of a vector's elements through the prologue into the accumulators, a kernel's
-- constants and scalars, one value loaded and widened, and their common checks.
local ptx = require "kiln.ptx"
local pw = require "kiln.engines.pwexpr"
local rowgen = require "kiln.engines.rowgen"
local ptxops = require "kiln.engines.ptxops"
local partials_ptx = require "kiln.engines.partials_ptx"

local M = {}

-- A reduction's update of accumulator a by element value v (rowgen.REDUCE's upd) in PTX.
M.UPD = {
  ["%a += %v;"] = function(P, a, v) P:put("add.f32 %s, %s, %s;", a, a, v) end,
  ["%a += fabsf(%v);"] = function(P, a, v) P:put("add.f32 %s, %s, %s;", a, a, P:def("b32", "abs.f32 %s, %s;", v)) end,
  ["%a = fmaf(%v, %v, %a);"] = function(P, a, v) P:put("fma.rn.f32 %s, %s, %s, %s;", a, v, v, a) end,
  ["%a *= %v;"] = function(P, a, v) P:put("mul.f32 %s, %s, %s;", a, a, v) end,
  ["%a = kiln_fmin_nan(%a, %v);"] = function(P, a, v) P:put("min.NaN.f32 %s, %s, %s;", a, a, v) end,
  ["%a = kiln_fmax_nan(%a, %v);"] = function(P, a, v) P:put("max.NaN.f32 %s, %s, %s;", a, a, v) end,
  ["%a = kiln_fmax_nan(%a, fabsf(%v));"] = function(P, a, v)
    P:put("max.NaN.f32 %s, %s, %s;", a, a, P:def("b32", "abs.f32 %s, %s;", v))
  end,
}

-- What every reduction's PTX form asks: PTX forms wanted, updates and combines of the
-- accumulators `accs` ({ mode = rowgen.REDUCE's }, ...) and the prologue's ops with PTX forms
-- here. true, or nil and why not.
function M.accepts(group, g, accs)
  if not rowgen.ptx_wanted() then return nil, "code setting cuda" end
  for _, a in ipairs(accs) do
    if not M.UPD[a.mode.upd] or not partials_ptx.COMB[a.mode.comb] then return nil, "update " .. a.mode.upd end
  end
  local bad = ptxops.op_declines(group.prologue or {}, g)
  if bad then return nil, bad end
  bad = ptxops.read_again_declines(group.prologue or {}, g, pw.read_set(group.nodes))
  if bad then return nil, bad end
  return true
end

-- V elements into the accumulators `accs` ({ input = uid, mode }, ...): element j's sources
-- (`base`, by uid, then each table of `readers`: uid -> reader(j)), the prologue over them,
-- then each accumulator's update (register acc_of(r, j)).
function M.fold(P, group, g, accs, read_later, V, base, readers, acc_of)
  for j = 0, V - 1 do
    local value = {}
    for uid, v in pairs(base) do value[uid] = v end
    for _, t in ipairs(readers) do
      for uid, rd in pairs(t) do value[uid] = rd(j) end
    end
    ptxops.run_nodes(P, group.prologue or {}, value, g, read_later)
    for r, a in ipairs(accs) do M.UPD[a.mode.upd](P, acc_of(r, j), value[a.input]) end
  end
end

-- A constant's or a runtime scalar's fp32 value (an immediate or an operand).
function M.kernel_value(P, K, t)
  return t.role == "constant" and ptx.f32(t.value) or P:input("f", K:scalar(t.uid))
end

-- An fp32 register of the 32- or 16-bit value at address `addr` (read-only), under predicate
-- `pred` where given (0 where it is false).
function M.load_value(P, addr, dtype, off, pred)
  off = off and off ~= 0 and "+" .. off or ""
  local g = pred and ("@" .. pred .. " ") or ""
  if dtype == "fp32" then
    if not pred then return P:def("b32", "ld.global.nc.f32 %s, [%s%s];", addr, off) end
    local v = P:def("b32", "mov.b32 %s, 0;")
    P:put("%sld.global.nc.f32 %s, [%s%s];", g, v, addr, off)
    return v
  end
  local h
  if pred then
    h = P:def("b16", "mov.b16 %s, 0;")
    P:put("%sld.global.nc.b16 %s, [%s%s];", g, h, addr, off)
  else
    h = P:def("b16", "ld.global.nc.b16 %s, [%s%s];", addr, off)
  end
  return dtype == "bf16" and P:def("b32", "mov.b32 %s, {0, %s};", h) or P:def("b32", "cvt.f32.f16 %s, %s;", h)
end

return M
