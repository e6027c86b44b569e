-- kiln.engines.partials_ptx: the column sums' finalize (templates/partials.cuh) with its body
-- in PTX, so that it compiles as a PTX module (kiln.ptxmodule): the same adds in the same
-- order (8 strided slices per column, the first `per` partial rows of a slice loaded at once,
-- any more one at a time, then the slices in order), so the same bits. Taken for plain sums
-- into fp32/fp16/bf16 columns (the backward norms' dscale and dbias); anything else keeps the
-- CUDA template.
local ptx = require "kiln.ptx"

local M = {}

local CVT = { bf16 = "cvt.rn.bf16.f32", fp16 = "cvt.rn.f16.f32" }

-- Whether the finalize of opts (rowgen.finalize) has this form.
function M.accepts(g, opts)
  if opts.fold or opts.fin or opts.comb ~= "add" or opts.init ~= "0.0f" then return false end
  for _, o in ipairs(opts.outs) do if o.fin then return false end end
  for _, o in ipairs(opts.outs) do
    local dt = g.by_uid[o.uid].dtype
    if dt ~= "fp32" and not CVT[dt] then return false end
  end
  return true
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
  local rows = P:input("l", string.format("(kiln_i64)(%s)", opts.rows))
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
  local a = def("b32", "mov.b32 %s, 0f00000000;")
  local inside = def("pred", "setp.lt.u32 %s, %s, %d;", col, C)
  local done = P:label()
  put("@!%s bra %s;", inside, done)
  local base = def("b64", "mad.wide.u32 %s, %s, 4, %s;", col, ws)
  -- the slice's first `per` rows: every load issued before the first add (rows past G read 0),
  -- at offsets from the first one's address while they fit an immediate; the rows were
  -- complete before this kernel's wait, so they are read-only here (.nc)
  local left = def("b32", "sub.s32 %s, %s, %s;", G, sl)
  local at = def("b64", "mad.wide.u32 %s, %s, %d, %s;", sl, C * 4, base)
  local v = {}
  for i = 1, per do
    local off = 8 * (i - 1) * C * 4
    local addr = off < 2 ^ 31 and string.format("%s+%d", at, off) or def("b64", "add.s64 %s, %s, %d;", at, off)
    local ok = def("pred", "setp.gt.s32 %s, %s, %d;", left, 8 * (i - 1))
    v[i] = def("b32", "mov.b32 %s, 0f00000000;")
    put("@%s ld.global.nc.f32 %s, [%s];", ok, v[i], addr)
  end
  for i = 1, per do put("add.f32 %s, %s, %s;", a, a, v[i]) end
  -- a larger GPU's further rows, one at a time
  local r = def("b32", "add.s32 %s, %s, %d;", sl, 8 * per)
  local loop = P:label()
  P:at(loop)
  local more = def("pred", "setp.lt.s32 %s, %s, %s;", r, G)
  put("@!%s bra %s;", more, done)
  put("add.f32 %s, %s, %s;", a, a, def("b32", "ld.global.nc.f32 %s, [%s];", def("b64", "mad.wide.u32 %s, %s, %d, %s;", r, C * 4, base)))
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
  for s = 1, 7 do put("add.f32 %s, %s, %s;", a, a, def("b32", "ld.shared.f32 %s, [%s+%d];", lane4, s * 128)) end
  for i, o in ipairs(opts.outs) do
    local dt = g.by_uid[o.uid].dtype
    local skip = P:label()
    if not (o.first == 0 and o.count == C) then
      local lo = def("pred", "setp.lt.u32 %s, %s, %d;", col, o.first)
      local hi = def("pred", "setp.ge.u32 %s, %s, %d;", col, o.first + o.count)
      put("@%s bra %s;", def("pred", "or.pred %s, %s, %s;", lo, hi), skip)
    end
    local k = def("b32", "sub.s32 %s, %s, %d;", col, o.first)
    if dt == "fp32" then
      put("st.global.f32 [%s], %s;", def("b64", "mad.wide.u32 %s, %s, 4, %s;", k, outs[i]), a)
    else
      local h = def("b16", CVT[dt] .. " %s, %s;", a)
      put("st.global.b16 [%s], %s;", def("b64", "mad.wide.u32 %s, %s, 2, %s;", k, outs[i]), h)
    end
    P:at(skip)
  end
  P:at(last)
  K:add("  kiln_pdl_entry();  // launched early (pdl): the partial rows are complete past this point")
  K:asm(P)
end

return M
