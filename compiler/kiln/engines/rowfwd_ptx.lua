-- kiln.engines.rowfwd_ptx: the forward norm kernel (rmsnorm / layernorm, inference or
-- training, the row held in registers or re-read from L2) with its body written as PTX
-- (kiln.ptx): the same passes as row.lua's CUDA form, with the fused prologue and epilogue ops
-- that have a PTX form here (add, sub, mul, div, neg, abs, max, min, add_square, identity,
-- exp, sigmoid, swish: residual adds, scales, casts, gates; fp8 outputs on sm_89+) and amax
-- outputs. NVRTC then spends ptxas's time only (docs/MEMORY_BOUND.md). KILN_ROW_CODE=cuda
-- keeps the CUDA form (for measuring; rowgen.ptx_wanted).
local dtypes = require "kiln.dtypes"
local shape = require "kiln.shape"
local pw = require "kiln.engines.pwexpr"
local ptx = require "kiln.ptx"
local rowgen = require "kiln.engines.rowgen"

local M = {}

local IN = { fp32 = true, fp16 = true, bf16 = true }
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
local OPS = {
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

local pow2 = ptx.pow2

-- A tensor of one value per row (row-major), or of one value in all.
local per_row = rowgen.per_row
local function one_value(t)
  for _, d in ipairs(t.dims) do if d ~= 1 then return false end end
  return true
end

-- Whether this form takes the forward norm (analyze's info with its layout): true, or nil
-- and why (then row.lua writes the CUDA form).
function M.accepts(info, group, g, target)
  local L = info.L
  if info.kind ~= "norm" then return nil, "not a forward norm" end
  if info.strategy ~= "regs" and info.strategy ~= "reread" then return nil, "strategy " .. info.strategy end
  if not L.even and info.strategy ~= "regs" then return nil, "a ragged row re-read (H not a multiple of the threads' vectors)" end
  if not pow2(L.P) or not pow2(L.RPC) then return nil, "threads per row or rows per CTA not a power of two" end
  if info.strategy == "regs" and L.N > 4 then return nil, "more than 4 vectors per thread held" end
  if info.strategy == "reread" and L.N % math.min(L.N, 4) ~= 0 then return nil, "vectors per thread not a multiple of 4" end
  for _, uid in ipairs(group.inputs) do
    local t = g.by_uid[uid]
    if t.role ~= "constant" and t.role ~= "scalar" then
      local how = info.access[uid]
      if not IN[t.dtype] then return nil, t.name .. " is " .. t.dtype end
      if how == "row" then
        if not per_row(t, info) and not one_value(t) then return nil, t.name .. " is not one value per row, row-major" end
      elseif how ~= "full" and how ~= "col" then
        return nil, t.name .. " is gathered"
      elseif (L.V * dtypes.size(t.dtype)) % 4 ~= 0 then
        return nil, "vectors narrower than a word"
      end
    end
  end
  local read_later = pw.read_set(group.nodes)
  for _, list in ipairs({ group.prologue or {}, group.epilogue or {} }) do
    for _, node in ipairs(list) do
      if not OPS[node.def.name] then return nil, "op " .. node.op .. " has no PTX form here" end
    end
  end
  for _, uid in ipairs(group.outputs) do
    local t = g.by_uid[uid]
    local kind = info.out_kind[uid]
    if kind == "elem" then
      if FP8[t.dtype] then
        if target.sm < 89 then return nil, "fp8 outputs before sm_89" end
        if read_later[uid] then return nil, "an fp8 value read again" end
      elseif not IN[t.dtype] then
        return nil, "output " .. t.name .. " is " .. t.dtype
      end
      if (L.V * dtypes.size(t.dtype)) % 4 ~= 0 then return nil, "output vectors narrower than a word" end
    elseif kind == "row" then
      if not IN[t.dtype] or not shape.is_row_major(t.dims, t.strides) then return nil, "row output " .. t.name end
    elseif kind ~= "amax" then
      return nil, "output " .. t.name .. " is " .. tostring(kind)
    end
  end
  -- values computed inside the kernel and read again: their dtypes round in registers
  for _, node in ipairs(group.nodes) do
    for _, uid in pairs(node.outputs) do
      local t = g.by_uid[uid]
      if read_later[uid] and t.dtype ~= "fp32" and not IN[t.dtype] then return nil, "a " .. t.dtype .. " value read again" end
    end
  end
  return true
end

-- The kernel body (lines into K) and its amax outputs' publication; `amax_out` lists the amax
-- output uids in order (their init kernel is row.lua's).
function M.emit(K, info, group, g, target, amax_out)
  local a, L = info.anchor, info.L
  local H, Pn, N, V, RPC = L.H, L.P, L.N, L.V, L.RPC
  local is_ln = a.op == "layernorm"
  local prologue, epilogue, amax = group.prologue or {}, group.epilogue or {}, group.amax or {}
  local read_later = pw.read_set(group.nodes)
  local made = rowgen.made(group)
  if #amax == 0 then rowgen.pdl_entry(K) end  -- the plan's only kernel: pdl at entry
  local P = ptx.new()
  local put, def = function(...) P:put(...) end, function(...) return P:def(...) end
  local LD, ST = rowgen.row_hint()
  local rows = P:input("l", string.format("(kiln_i64)(%s)", info.rows))

  -- the thread's place; a row past the end (RPC > 1) computes the last row and stores nothing
  local tid, cta, lane, slot = P:place(Pn, RPC)
  local row = def("b64", "cvt.u64.u32 %s, %s;", cta)
  local valid
  if slot then
    local r0 = def("b64", "mad.wide.u32 %s, %s, %d, %s;", cta, RPC, def("b64", "cvt.u64.u32 %s, %s;", slot))
    valid = def("pred", "setp.lt.s64 %s, %s, %s;", r0, rows)
    row = def("b64", "min.s64 %s, %s, %s;", r0, def("b64", "add.s64 %s, %s, -1;", rows))
  end

  -- every source: a register per element (vectors), per row or per kernel (scalars, constants)
  local base, ptr = {}, {}
  local function gptr(uid, writable)
    if not ptr[uid] then ptr[uid] = P:global(P:input("l", K:ptr(uid, writable))) end
    return ptr[uid]
  end
  for _, uid in ipairs(group.inputs) do
    local t = g.by_uid[uid]
    if t.role == "constant" then
      base[uid] = ptx.f32(t.value)
    elseif t.role == "scalar" then
      base[uid] = P:input("f", K:scalar(uid))
    elseif info.access[uid] == "row" then
      local addr = one_value(t) and gptr(uid) or def("b64", "mad.lo.s64 %s, %s, %d, %s;", row, dtypes.size(t.dtype), gptr(uid))
      if t.dtype == "fp32" then base[uid] = def("b32", "ld.global.nc.f32 %s, [%s];", addr)
      else
        local h = def("b16", "ld.global.nc.b16 %s, [%s];", addr)
        base[uid] = t.dtype == "bf16" and def("b32", "mov.b32 %s, {0, %s};", h) or def("b32", "cvt.f32.f16 %s, %s;", h)
      end
    end
  end
  -- a thread's first vector of tensor uid (row-major per element, or the one row of a column
  -- tensor): the address register; vector k is KSTEP(z) * k bytes on
  local KSTEP = function(z) return Pn * V * z end
  local vbase = {}
  local function vaddr(uid)
    if vbase[uid] then return vbase[uid] end
    local t = g.by_uid[uid]
    local z = dtypes.size(t.dtype)
    local writable = t.role == "output"
    K:need_align(uid, math.min(16, V * z))
    local b = def("b64", "mad.wide.u32 %s, %s, %d, %s;", lane, V * z, gptr(uid, writable))
    if writable or info.access[uid] == "full" then b = def("b64", "mad.lo.s64 %s, %s, %d, %s;", row, H * z, b) end
    vbase[uid] = b
    return b
  end
  local function sources(nodes, extra) return rowgen.sources(nodes, extra, made, base) end
  -- the nodes' values into `value` (element j), a 16-bit value read again rounded to its dtype
  local function run_nodes(nodes, value)
    for _, node in ipairs(nodes) do
      local args = {}
      for i, p in ipairs(node.def.input_ports) do args[i] = value[node.inputs[p.name]] or ptx.f32(0) end
      local out = node.outputs.OUT_0 or select(2, next(node.outputs))
      local v = OPS[node.def.name](P, args[1], args[2], node.attrs or {})
      local t = g.by_uid[out]
      if t.dtype ~= "fp32" and read_later[out] then v = P:round(v, t.dtype) end
      value[out] = v
    end
  end
  local function element_outputs(nodes)
    local list = {}
    for _, n in ipairs(nodes) do
      for _, uid in pairs(n.outputs) do
        if info.out_kind[uid] == "elem" and g.by_uid[uid].role == "output" then list[#list + 1] = uid end
      end
    end
    table.sort(list)
    return list
  end
  -- Every vector of the row, as `body(q, value_at, store)`: value_at(j) gives element j's
  -- values (the loaded sources, the per-kernel and per-row ones), store(uid, vals) writes
  -- vector q of an element output. "regs": all N vectors' loads first, then the vectors
  -- unrolled (k = q). "reread": a loop over groups of U vectors, the sources read again from
  -- L2 in each pass; addresses advance by U vectors a trip.
  local reread = info.strategy == "reread"
  local U = reread and math.min(N, 4) or N
  -- a ragged row (regs only): vector q of lanes past the row's last vector loads and stores
  -- nothing; inrow(q) is its predicate (nil: every lane's vector q is in the row)
  local inrows = {}
  local function inrow(q)
    if (q + 1) * Pn * V <= H then return nil end
    inrows[q] = inrows[q] or def("pred", "setp.lt.u32 %s, %s, %d;", lane, H // V - q * Pn)
    return inrows[q]
  end
  -- x where vector q is in the row, else 0 (what sums and amax see of a lane past the row)
  local function masked(q, x)
    local p = inrow(q)
    return p and def("b32", "selp.b32 %s, %s, 0, %s;", x, p) or x
  end
  local function vectors(uids, outs, body, form)
    local cur = setmetatable({}, { __index = function(_, uid) return vaddr(uid) end })  -- unrolled: bases
    local TOP, trips
    if reread then
      for _, uid in ipairs(uids) do cur[uid] = def("b64", "mov.b64 %s, %s;", vaddr(uid)) end
      for _, uid in ipairs(outs) do cur[uid] = def("b64", "mov.b64 %s, %s;", vaddr(uid)) end
      trips = def("b32", "mov.b32 %s, 0;")
      TOP = P:label()
      P:at(TOP)
    end
    local words = {}
    for _, uid in ipairs(uids) do
      local t = g.by_uid[uid]
      local z = dtypes.size(t.dtype)
      local space = info.access[uid] == "full" and LD or "global.nc"  -- a column tensor is read by every row
      words[uid] = {}
      for q = 0, U - 1 do words[uid][q] = P:load(space, cur[uid], q * KSTEP(z), V * z, inrow(q)) end
    end
    for q = 0, U - 1 do
      local rd = {}
      for uid, w in pairs(words) do rd[uid] = P:reader(w[q], g.by_uid[uid].dtype, form) end
      body(q, function(j)
        local value = {}
        for uid, v in pairs(base) do value[uid] = v end
        for uid, r in pairs(rd) do value[uid] = r(j) end
        return value
      end, function(uid, vals)
        local t = g.by_uid[uid]
        local pred = inrow(q)
        if pred and valid then pred = def("pred", "and.pred %s, %s, %s;", pred, valid) end
        P:store(ST, cur[uid], q * KSTEP(dtypes.size(t.dtype)), P:pack(vals, t.dtype), pred or valid)
      end, words)
    end
    if reread then
      for uid, r in pairs(cur) do put("add.s64 %s, %s, %d;", r, r, U * KSTEP(dtypes.size(g.by_uid[uid].dtype))) end
      put("add.s32 %s, %s, 1;", trips, trips)
      put("@%s bra.uni %s;", def("pred", "setp.lt.s32 %s, %s, %d;", trips, N // U), TOP)
    end
  end
  -- sums over the row's elements: a chain of fresh registers when unrolled (regs), one register
  -- updated in place when a loop carries it (reread). acc_add(a, x) = a + x, acc_sq(a, x) = a + x * x
  local function acc_start() return reread and def("b32", "mov.b32 %s, %s;", ptx.f32(0)) or nil end
  local function acc_add(acc, x)
    if reread then put("add.f32 %s, %s, %s;", acc, acc, x); return acc end
    return acc and def("b32", "add.f32 %s, %s, %s;", acc, x) or x
  end
  local function acc_sq(acc, x)
    if reread then put("fma.rn.f32 %s, %s, %s, %s;", acc, x, x, acc); return acc end
    return acc and def("b32", "fma.rn.f32 %s, %s, %s, %s;", x, x, acc) or def("b32", "mul.f32 %s, %s, %s;", x, x)
  end

  -- the anchor's element input x, held in registers (regs) as loaded words or, when the
  -- prologue computes it, as words of its dtype
  local xin = a.inputs.input
  local xt = g.by_uid[xin]
  local held = {}       -- held[k]: the words of x's vector k
  local pro_out = element_outputs(prologue)
  -- x of the held row (regs), or of the row read again and its prologue again (reread)
  local function x_values(uids_extra, outs, form, body)
    if not reread then
      vectors(uids_extra, outs, function(q, value_at, store, words)
        local rx = P:reader(held[q], xt.dtype, form)
        body(q, function(j)
          local value = value_at(j)
          value[xin] = rx(j)
          return value
        end, store, words)
      end)
      return
    end
    local srcs = sources(prologue, { xin, table.unpack(uids_extra) })
    vectors(srcs, outs, function(q, value_at, store, words)
      body(q, function(j)
        local value = value_at(j)
        run_nodes(prologue, value)
        return value
      end, store, words)
    end, form)
  end

  -- pass 1: loads, prologue, its outputs stored, the row's sum (layernorm) or sum of squares
  local acc = acc_start()
  vectors(sources(prologue, { xin }), pro_out, function(q, value_at, store, words)
    local outs = {}
    for _, uid in ipairs(pro_out) do outs[uid] = {} end
    local xs = {}
    for j = 0, V - 1 do
      local value = value_at(j)
      run_nodes(prologue, value)
      local x = value[xin]
      xs[j + 1] = x
      for _, uid in ipairs(pro_out) do outs[uid][j + 1] = value[uid] end
      x = masked(q, x)
      if is_ln then acc = acc_add(acc, x) else acc = acc_sq(acc, x) end
    end
    if not reread then held[q] = words[xin] and words[xin][q] or P:pack(xs, xt.dtype) end
    for _, uid in ipairs(pro_out) do store(uid, outs[uid]) end
  end, "prmt")  -- the output pass shifts: converted again there

  -- a row's sum over its P threads: butterflies, then (P > 32) its warps in order through
  -- shared memory (array `tag`)
  local function allreduce(v, tag)
    local o = math.min(Pn, 32) // 2
    while o > 0 do
      v = def("b32", "add.f32 %s, %s, %s;", v, def("b32", "shfl.sync.bfly.b32 %s, %s, %d, 31, -1;", v, o))
      o = o // 2
    end
    if Pn <= 32 then return v end
    local W, NW = Pn // 32, L.block // 32
    K.shared[#K.shared + 1] = string.format("  __shared__ __align__(16) float %s[%d];", tag, NW)
    local arr = P:shared(P:input("l", tag))
    local lead = def("pred", "setp.eq.s32 %s, %s, 0;", def("b32", "and.b32 %s, %s, 31;", tid))
    local mine = def("b32", "mad.lo.s32 %s, %s, 4, %s;", def("b32", "shr.u32 %s, %s, 5;", tid), arr)
    put("@%s st.shared.f32 [%s], %s;", lead, mine, v)
    put("bar.sync 0;")
    local first = slot and def("b32", "mad.lo.s32 %s, %s, %d, %s;", slot, W * 4, arr) or arr
    local ws = P:load("shared", first, 0, W * 4)
    local s = ws[1]
    for q = 2, W do s = def("b32", "add.f32 %s, %s, %s;", s, ws[q]) end
    return s
  end
  local inv = ptx.f32(1.0 / H)
  local eps = a.inputs.epsilon and base[a.inputs.epsilon] or ptx.f32(a.attrs.epsilon)
  local sum = allreduce(acc, "red0_")
  local mean, rstd
  if is_ln then
    mean = def("b32", "mul.f32 %s, %s, %s;", sum, inv)
    local acc1 = acc_start()
    x_values({}, {}, "bfi", function(q, value_at)
      for j = 0, V - 1 do acc1 = acc_sq(acc1, masked(q, def("b32", "sub.f32 %s, %s, %s;", value_at(j)[xin], mean))) end
    end)
    sum = allreduce(acc1, "red1_")
  end
  rstd = def("b32", "rsqrt.approx.f32 %s, %s;", def("b32", "fma.rn.f32 %s, %s, %s, %s;", sum, inv, eps))

  -- the output pass: y = xhat * scale (+ bias), the epilogue, amax, the stores
  local y, scale, bias = a.outputs.Y, a.inputs.scale, a.inputs.bias
  local outs = {}
  if y and g.by_uid[y].role == "output" then outs[#outs + 1] = y end
  for _, uid in ipairs(element_outputs(epilogue)) do outs[#outs + 1] = uid end
  local am = {}
  for i in ipairs(amax) do am[i] = def("b32", "mov.b32 %s, 0;") end
  x_values(sources(epilogue, { scale, bias }), outs, nil, function(q, value_at, store)
    local vals = {}
    for _, uid in ipairs(outs) do vals[uid] = {} end
    for j = 0, V - 1 do
      local value = value_at(j)
      local x = value[xin]
      local xh = is_ln and def("b32", "mul.f32 %s, %s, %s;", def("b32", "sub.f32 %s, %s, %s;", x, mean), rstd)
        or def("b32", "mul.f32 %s, %s, %s;", x, rstd)
      local v = bias and def("b32", "fma.rn.f32 %s, %s, %s, %s;", xh, value[scale], value[bias])
        or def("b32", "mul.f32 %s, %s, %s;", xh, value[scale])
      local yt = g.by_uid[y]
      if yt.dtype ~= "fp32" and read_later[y] then v = P:round(v, yt.dtype) end
      value[y] = v
      run_nodes(epilogue, value)
      for i, r in ipairs(amax) do
        -- the bits of |v|: their unsigned order is the float order (docs/INTERNALS.md)
        put("max.u32 %s, %s, %s;", am[i], am[i], masked(q, def("b32", "abs.f32 %s, %s;", value[r.inputs.input])))
      end
      for _, uid in ipairs(outs) do vals[uid][j + 1] = value[uid] end
    end
    for _, uid in ipairs(outs) do store(uid, vals[uid]) end
  end)

  -- per-row statistics, written by the row's first thread
  local stats = {}
  if a.outputs.MEAN and g.by_uid[a.outputs.MEAN].role == "output" then stats[#stats + 1] = { a.outputs.MEAN, mean } end
  if a.outputs.INV_VARIANCE and g.by_uid[a.outputs.INV_VARIANCE].role == "output" then
    stats[#stats + 1] = { a.outputs.INV_VARIANCE, rstd }
  end
  if #stats > 0 then
    local first = def("pred", "setp.eq.s32 %s, %s, 0;", lane)
    if valid then first = def("pred", "and.pred %s, %s, %s;", first, valid) end
    for _, s in ipairs(stats) do
      local t = g.by_uid[s[1]]
      local addr = def("b64", "mad.lo.s64 %s, %s, %d, %s;", row, dtypes.size(t.dtype), gptr(s[1], true))
      if t.dtype == "fp32" then put("@%s st.global.f32 [%s], %s;", first, addr, s[2])
      else
        local cvt = t.dtype == "bf16" and "cvt.rn.bf16.f32" or "cvt.rn.f16.f32"
        put("@%s st.global.b16 [%s], %s;", first, addr, def("b16", cvt .. " %s, %s;", s[2]))
      end
    end
  end

  -- amax: max over the CTA (redux per warp, then warp 0's thread 0 over the warps), one
  -- atomic per CTA after the init kernel's zeros (pdl: waited for here)
  if #amax > 0 then
    local NW = L.block // 32
    local lead = def("pred", "setp.eq.s32 %s, %s, 0;", def("b32", "and.b32 %s, %s, 31;", tid))
    local wid4 = def("b32", "shl.b32 %s, %s, 2;", def("b32", "shr.u32 %s, %s, 5;", tid))
    local arrs = {}
    for i in ipairs(amax) do
      local name = string.format("amr%d_", i - 1)
      K.shared[#K.shared + 1] = string.format("  __shared__ __align__(16) kiln_u32 %s[%d];", name, NW)
      arrs[i] = P:shared(P:input("l", name))
      local r = def("b32", "redux.sync.max.u32 %s, %s, -1;", am[i])
      put("@%s st.shared.u32 [%s], %s;", lead, def("b32", "add.s32 %s, %s, %s;", arrs[i], wid4), r)
    end
    put("bar.sync 0;")
    local SKIP = P:label()
    put("@%s bra %s;", def("pred", "setp.ne.s32 %s, %s, 0;", tid), SKIP)
    if target.sm >= 90 then put("griddepcontrol.wait;") end
    for i, uid in ipairs(amax_out) do
      local ws = P:load("shared", arrs[i], 0, NW * 4)
      local m = ws[1]
      for q = 2, NW do m = def("b32", "max.u32 %s, %s, %s;", m, ws[q]) end
      local out = gptr(uid, true)
      local cur = def("b32", "ld.volatile.global.u32 %s, [%s];", out)
      local more = def("pred", "setp.gt.u32 %s, %s, %s;", m, cur)
      put("@%s red.global.max.u32 [%s], %s;", more, out, m)
    end
    P:at(SKIP)
  end
  K:add(P:statement("  "))
end

return M
