-- kiln.engines.partials_ptx: the finalize of per-CTA partial rows (templates/partials.cuh)
-- with its body in PTX, so that it compiles as a PTX module (kiln.ptxmodule) without NVRTC:
-- the same combines in the same order (8 strided slices per column, the first `per` partial
-- rows of a slice loaded at once, any more one at a time, then the slices in order), the same
-- final maps (a mean's reciprocal of the count, a norm's square root) and roundings, so the same
-- bits. Takes sums, products, maxima and minima into fp32/fp16/bf16 outputs, a fold of the
-- columns into one value (colreduce over everything) and rows and counts that are products of
-- dims; anything else keeps the CUDA template.
local ptx = require "kiln.ptx"

local M = {}

local CVT = { bf16 = "cvt.rn.bf16.f32", fp16 = "cvt.rn.f16.f32" }

-- The combines (rowgen.COMBINE) and neutral values (rowgen.REDUCE's init) in PTX.
local COMB = { add = "add.f32", mul = "mul.f32", max = "max.NaN.f32", min = "min.NaN.f32" }
local INIT = { ["0.0f"] = 0, ["1.0f"] = 1, ["__int_as_float(0x7f800000)"] = math.huge,
               ["__int_as_float(0xff800000)"] = -math.huge }
M.COMB, M.INIT = COMB, INIT
-- The final maps (rowgen.REDUCE's fin over %a and the count %n): a mean's and a norm's.
local FIN = { ["%a * (1.0f / %n)"] = "mean", ["sqrtf(%a)"] = "sqrt" }

-- An output's final map (rowgen.finalize's rule: its own, false for none, nil the finalize's).
local function fin_of(o, opts)
  local map = o.fin
  if map == nil then map = opts.fin end
  return map or nil
end

-- Whether the finalize of opts (rowgen.finalize) has this form.
function M.accepts(g, opts)
  if not COMB[opts.comb] or INIT[opts.init] == nil or not opts.row_factors then return false end
  if opts.fold and (opts.C > 32 or #opts.outs ~= 1) then return false end
  for _, o in ipairs(opts.outs) do
    local map = fin_of(o, opts)
    if map and (not FIN[map] or FIN[map] == "mean" and not opts.n_factors) then return false end
    local dt = g.by_uid[o.uid].dtype
    if dt ~= "fp32" and not CVT[dt] then return false end
  end
  return true
end

-- The product of launch factors (dim names and constants) as a b64 register.
function M.product(P, factors)
  local x
  for _, f in ipairs(factors) do
    local v = type(f) == "number" and string.format("%d", f) or P:input("l", string.format("(kiln_i64)(dim_%s)", f))
    x = x and P:def("b64", "mul.lo.s64 %s, %s, %s;", x, v) or type(f) ~= "number" and v or P:def("b64", "mov.b64 %s, %s;", v)
  end
  return x or P:def("b64", "mov.b64 %s, 1;")
end
local product = M.product

-- The count of a mean as the CUDA form computes it: each factor list's integer product as
-- fp32, multiplied in order.
local function count(P, n_factors)
  local n
  for _, factors in ipairs(n_factors) do
    local k = #factors == 1 and type(factors[1]) == "number" and factors[1] < 2 ^ 24 and factors[1]
    local f = k and ptx.f32(k) or P:def("b32", "cvt.rn.f32.s64 %s, %s;", product(P, factors))
    n = n and P:def("b32", "mul.f32 %s, %s, %s;", n, f) or f
  end
  return n
end

-- The body into K (rowgen.kernel whose params hold ws, the outputs and sms): a pdl entry and
-- one PTX statement over the shared array part_[8][32]. per: partial rows a slice loads at once.
function M.emit(K, g, opts, per)
  local P = ptx.new()
  local put, def = function(...) P:put(...) end, function(...) return P:def(...) end
  local C = opts.C
  K.shared[#K.shared + 1] = "  __shared__ float part_[8][32];"
  local ws = P:global(P:input("l", "ws"))
  local outs = {}
  for i, o in ipairs(opts.outs) do outs[i] = P:global(P:input("l", K:ptr(o.uid, true))) end
  local rows = product(P, opts.row_factors)
  local nsms = P:input("l", "sms")
  local part = P:shared(P:input("l", "part_"))
  local tid = def("b32", "mov.u32 %s, %%tid.x;")
  local lane = def("b32", "and.b32 %s, %s, 31;", tid)
  local sl = def("b32", "shr.u32 %s, %s, 5;", tid)
  local col = def("b32", "mad.lo.s32 %s, %s, 32, %s;", def("b32", "mov.u32 %s, %%ctaid.x;"), lane)
  -- the previous kernel's grid: ceil(rows / div), at most max(1, floor(sms * mul / div'))
  -- (a power of two divides by a shift: ptxas calls a routine for a 64-bit division)
  local function over(x, d)
    if d == 1 then return x end
    if ptx.pow2(d) then return def("b64", "shr.s64 %s, %s, %d;", x, ptx.log2(d)) end
    return def("b64", "div.s64 %s, %s, %d;", x, d)
  end
  local div, cap = opts.G.div, opts.G.cap
  local G = div > 1 and over(def("b64", "add.s64 %s, %s, %d;", rows, div - 1), div) or rows
  local most = over(def("b64", "mul.lo.s64 %s, %s, %d;", nsms, cap.sm_mul), cap.sm_div)
  G = def("b64", "min.s64 %s, %s, %s;", G, def("b64", "max.s64 %s, %s, 1;", most))
  -- (at most 256 SMs' CTAs: 32 bits from here)
  G = def("b32", "cvt.u32.u64 %s, %s;", G)
  local comb, init = COMB[opts.comb], ptx.f32(INIT[opts.init])
  local a = def("b32", "mov.b32 %s, %s;", init)
  local inside = def("pred", "setp.lt.u32 %s, %s, %d;", col, C)
  local done = P:label()
  put("@!%s bra %s;", inside, done)
  local base = def("b64", "mad.wide.u32 %s, %s, 4, %s;", col, ws)
  -- the slice's first `per` rows: every load issued before the first combine (rows past G read
  -- the neutral value),
  -- at offsets from the first one's address while they fit an immediate; the rows were
  -- complete before this kernel's wait, so they are read-only here (.nc)
  local left = def("b32", "sub.s32 %s, %s, %s;", G, sl)
  local at = def("b64", "mad.wide.u32 %s, %s, %d, %s;", sl, C * 4, base)
  local v = {}
  for i = 1, per do
    local off = 8 * (i - 1) * C * 4
    local addr = off < 2 ^ 31 and string.format("%s+%d", at, off) or def("b64", "add.s64 %s, %s, %d;", at, off)
    local ok = def("pred", "setp.gt.s32 %s, %s, %d;", left, 8 * (i - 1))
    v[i] = def("b32", "mov.b32 %s, %s;", init)
    put("@%s ld.global.nc.f32 %s, [%s];", ok, v[i], addr)
  end
  for i = 1, per do put("%s %s, %s, %s;", comb, a, a, v[i]) end
  -- a larger GPU's further rows, one at a time
  local r = def("b32", "add.s32 %s, %s, %d;", sl, 8 * per)
  local loop = P:label()
  P:at(loop)
  local more = def("pred", "setp.lt.s32 %s, %s, %s;", r, G)
  put("@!%s bra %s;", more, done)
  put("%s %s, %s, %s;", comb, a, a, def("b32", "ld.global.nc.f32 %s, [%s];", def("b64", "mad.wide.u32 %s, %s, %d, %s;", r, C * 4, base)))
  put("add.s32 %s, %s, 8;", r, r)
  put("bra.uni %s;", loop)
  P:at(done)
  put("st.shared.f32 [%s], %s;", def("b32", "mad.lo.s32 %s, %s, 4, %s;", tid, part), a)
  put("bar.sync 0;")
  -- slice 0 adds the other slices in order and stores each output's columns
  local first = def("pred", "setp.lt.u32 %s, %s, %d;", tid, 32)
  local last = P:label()
  put("@!%s bra %s;", def("pred", "and.pred %s, %s, %s;", first, inside), last)
  local lane4 = def("b32", "mad.lo.s32 %s, %s, 4, %s;", lane, part)
  for s = 1, 7 do put("%s %s, %s, %s;", comb, a, a, def("b32", "ld.shared.f32 %s, [%s+%d];", lane4, s * 128)) end
  -- an output's value: its final map of a (a mean: a * (1 / n), rounded as the CUDA form's)
  local recip
  for _, o in ipairs(opts.outs) do
    if FIN[fin_of(o, opts) or ""] == "mean" and not recip then recip = def("b32", "rcp.rn.f32 %s, %s;", count(P, opts.n_factors)) end
  end
  local function final(x, o) return M.final(P, x, fin_of(o, opts), recip) end
  local function store(o, i, index, x) M.store(P, outs[i], index, x, g.by_uid[o.uid].dtype, true) end
  if opts.fold then
    -- the columns fold into one value, in column order, by thread 0
    put("st.shared.f32 [%s], %s;", lane4, a)
    P:at(last)
    put("bar.sync 0;")
    local skip = P:label()
    put("@%s bra %s;", def("pred", "setp.ne.u32 %s, %s, 0;", tid), skip)
    local f = def("b32", "ld.shared.f32 %s, [%s];", part)
    for c = 1, C - 1 do put("%s %s, %s, %s;", comb, f, f, def("b32", "ld.shared.f32 %s, [%s+%d];", part, c * 4)) end
    store(opts.outs[1], 1, def("b32", "mov.u32 %s, 0;"), final(f, opts.outs[1]))
    P:at(skip)
  else
    for i, o in ipairs(opts.outs) do
      local skip = P:label()
      if not (o.first == 0 and o.count == C) then
        local lo = def("pred", "setp.lt.u32 %s, %s, %d;", col, o.first)
        local hi = def("pred", "setp.ge.u32 %s, %s, %d;", col, o.first + o.count)
        put("@%s bra %s;", def("pred", "or.pred %s, %s, %s;", lo, hi), skip)
      end
      store(o, i, def("b32", "sub.s32 %s, %s, %d;", col, o.first), final(a, o))
      P:at(skip)
    end
    P:at(last)
  end
  K:add("  kiln_pdl_entry();  // launched early (pdl): the partial rows are complete past this point")
  K:asm(P)
end

-- The strided reduction's slice count G (b32) as its kernels compute it (axisreduce's
-- slices_expr): min(sms * per_sm / column blocks, R / rsu, most), at least 1. opts: TW (outputs a
-- column block), rsu, per_sm, most.
function M.slice_count(P, nsms, n_out, R, opts)
  local def = function(...) return P:def(...) end
  -- (column blocks past 2^31 fill any device: one slice; rows past `most` slices' count as that)
  local cb = def("b64", "add.s64 %s, %s, %d;", n_out, opts.TW - 1)
  cb = ptx.pow2(opts.TW) and def("b64", "shr.u64 %s, %s, %d;", cb, ptx.log2(opts.TW)) or def("b64", "div.u64 %s, %s, %d;", cb, opts.TW)
  cb = def("b32", "cvt.u32.u64 %s, %s;", def("b64", "min.u64 %s, %s, 2147483647;", cb))
  local G = def("b32", "div.u32 %s, %s, %s;", def("b32", "cvt.u32.u64 %s, %s;", def("b64", "mul.lo.s64 %s, %s, %d;", nsms, opts.per_sm)), cb)
  local Rs = def("b32", "cvt.u32.u64 %s, %s;", def("b64", "min.u64 %s, %s, %d;", R, opts.most * opts.rsu))
  G = def("b32", "min.u32 %s, %s, %s;", G, def("b32", "div.u32 %s, %s, %d;", Rs, opts.rsu))
  return def("b32", "max.u32 %s, %s, 1;", def("b32", "min.u32 %s, %s, %d;", G, opts.most))
end

-- A reduction output's value: its final map of a (FIN: a mean times `recip`, the reciprocal of
-- its count), or a.
function M.final(P, a, fin, recip)
  local map = FIN[fin or ""]
  if map == "sqrt" then return P:def("b32", "sqrt.rn.f32 %s, %s;", a) end
  if map == "mean" then return P:def("b32", "mul.f32 %s, %s, %s;", a, recip) end
  return a
end

-- Whether a reduction output of dtype dt with final map fin has a PTX form here.
function M.output_ok(dt, fin) return (dt == "fp32" or CVT[dt] ~= nil) and (not fin or FIN[fin] ~= nil) end

-- Stores fp32 value x as element `index` of the output at global address `out` (index b64, or
-- b32 with `wide`: a column of the finalize).
function M.store(P, out, index, x, dt, wide)
  local mad = wide and "mad.wide.u32" or "mad.lo.s64"
  if dt == "fp32" then
    P:put("st.global.f32 [%s], %s;", P:def("b64", mad .. " %s, %s, 4, %s;", index, out), x)
  else
    local h = P:def("b16", CVT[dt] .. " %s, %s;", x)
    P:put("st.global.b16 [%s], %s;", P:def("b64", mad .. " %s, %s, 2, %s;", index, out), h)
  end
end

-- Whether the strided reduction's second kernel (axisreduce, its row slices) with opts (as
-- M.emit_slices) has this form.
function M.slices_accept(g, opts)
  if not COMB[opts.comb] or INIT[opts.init] == nil then return false end
  for _, acc in ipairs(opts.accs) do
    for _, o in ipairs(acc) do
      if not M.output_ok(g.by_uid[o.uid].dtype, o.fin) then return false end
    end
  end
  return true
end

-- The body of axisreduce's second kernel into K (whose params hold ws, sms and the outputs):
-- the slices' partials ws[(k * NR + r) * n_out + q] of accumulator r added in slice order k =
-- 0, 1, ... G - 1 (8 loads at once, the rest reading the neutral value), each output of the
-- accumulator its final map (a mean's count: the rows R) and dtype. The slice count G as the
-- main kernel computes it: min(sms * per_sm / column blocks, R / rsu, most), at least 1;
-- nothing to do where it is 1. opts: n_out and rows (factor lists), TW (outputs a column block),
-- rsu, per_sm, most, comb, init, accs = { { { uid, fin }, ... } per accumulator }.
function M.emit_slices(K, g, opts)
  local P = ptx.new()
  local put, def = function(...) P:put(...) end, function(...) return P:def(...) end
  local ws = P:global(P:input("l", "ws"))
  local nsms = P:input("l", "sms")
  local outs = {}
  for r, acc in ipairs(opts.accs) do
    outs[r] = {}
    for i, o in ipairs(acc) do outs[r][i] = P:global(P:input("l", K:ptr(o.uid, true))) end
  end
  local n_out, R = product(P, opts.n_out), product(P, opts.rows)
  local G = M.slice_count(P, nsms, n_out, R, opts)
  local DONE = P:label()
  put("@%s bra %s;", def("pred", "setp.eq.u32 %s, %s, 1;", G), DONE)
  local comb, init = COMB[opts.comb], ptx.f32(INIT[opts.init])
  local NR = #opts.accs
  local recip
  for _, acc in ipairs(opts.accs) do
    for _, o in ipairs(acc) do
      if FIN[o.fin or ""] == "mean" and not recip then recip = def("b32", "rcp.rn.f32 %s, %s;", count(P, { opts.rows })) end
    end
  end
  -- q: the thread's outputs, grid-strided
  local q = def("b64", "mad.wide.u32 %s, %s, 256, %s;", def("b32", "mov.u32 %s, %%ctaid.x;"),
    def("b64", "cvt.u64.u32 %s, %s;", def("b32", "mov.u32 %s, %%tid.x;")))
  local step = def("b64", "mul.wide.u32 %s, %s, 256;", def("b32", "mov.u32 %s, %%nctaid.x;"))
  local slice = def("b64", "mul.lo.s64 %s, %s, %d;", n_out, NR * 4)  -- bytes from one slice's partial to the next's
  local LOOP = P:label()
  P:at(LOOP)
  put("@%s bra %s;", def("pred", "setp.ge.s64 %s, %s, %s;", q, n_out), DONE)
  for r, acc in ipairs(opts.accs) do
    local first = def("b64", "mad.lo.s64 %s, %s, 4, %s;", def("b64", "mad.lo.s64 %s, %s, %d, %s;", n_out, r - 1, q), ws)
    local a = def("b32", "ld.global.nc.f32 %s, [%s];", first)
    -- slices 1, 2, ...: 8 loads issued, then added in order
    local k, at = def("b32", "mov.u32 %s, 1;"), def("b64", "add.s64 %s, %s, %s;", first, slice)
    local MORE, NEXT = P:label(), P:label()
    P:at(MORE)
    put("@%s bra %s;", def("pred", "setp.ge.u32 %s, %s, %s;", k, G), NEXT)
    local v, addr = {}, at
    for i = 1, 8 do
      v[i] = def("b32", "mov.b32 %s, %s;", init)
      put("@%s ld.global.nc.f32 %s, [%s];", def("pred", "setp.lt.u32 %s, %s, %s;", def("b32", "add.u32 %s, %s, %d;", k, i - 1), G), v[i], addr)
      if i < 8 then addr = def("b64", "add.s64 %s, %s, %s;", addr, slice) end
    end
    for i = 1, 8 do put("%s %s, %s, %s;", comb, a, a, v[i]) end
    put("add.u32 %s, %s, 8;", k, k)
    put("add.s64 %s, %s, %s;", at, addr, slice)
    put("bra.uni %s;", MORE)
    P:at(NEXT)
    for i, o in ipairs(acc) do M.store(P, outs[r][i], q, M.final(P, a, o.fin, recip), g.by_uid[o.uid].dtype) end
  end
  put("add.s64 %s, %s, %s;", q, q, step)
  put("bra.uni %s;", LOOP)
  P:at(DONE)
  K:add("  kiln_pdl_entry();  // launched early (pdl): the partials are complete past this point")
  K:asm(P)
end

return M
