-- kiln.engines.colreduce_ptx: colreduce's main kernel (reductions over the leading axes, or
-- over everything) with its body written as PTX, so that it compiles as a PTX module
-- (kiln.ptxmodule) by ptxas alone: the same work and order as the CUDA form (CTA g the row
-- blocks g, g + G, ..., each thread its N vectors of a row loaded before they fold, the row
-- slots combined within a warp by butterflies and then group by group into shared memory, one
-- partial row a CTA), without NVRTC's front end and NVVM. Taken where every input is read by
-- vectors (the reduced tensor's shape or one row broadcast over the rows), one value per row
-- at compile-time strides, a scalar or a constant, the prologue's ops have PTX forms (ptxops)
-- and the partial row fits shared memory; the column tiles (partial rows wider than shared
-- memory), gathered inputs and the code setting cuda keep the CUDA form.
local dtypes = require "kiln.dtypes"
local ptx = require "kiln.ptx"
local pw = require "kiln.engines.pwexpr"
local rowgen = require "kiln.engines.rowgen"
local ptxops = require "kiln.engines.ptxops"
local rowptx = require "kiln.engines.rowptx"
local partials_ptx = require "kiln.engines.partials_ptx"
local reduce_ptx = require "kiln.engines.reduce_ptx"

local M = {}

-- Each reduction of info its own accumulators ({ input, mode }, reduce_ptx's).
local function accumulators(info)
  local accs = {}
  for r, red in ipairs(info.list) do accs[r] = { input = red.anchor.inputs.input, mode = red.mode } end
  return accs
end

-- The offset terms of a per-row input (rowgen.row_offset's), where every stride is known.
local function row_terms(t, info)
  local terms = rowgen.row_offset(t, info)
  if not rowgen.static_offset(terms) then return nil end
  for _, tm in ipairs(terms) do
    if type(tm.stride) ~= "number" then return nil end
  end
  return terms
end

-- Whether colreduce's main kernel of info takes this form: true, or nil and why not.
function M.accepts(group, g, info)
  local ok, why = reduce_ptx.accepts(group, g, accumulators(info))
  if not ok then return nil, why end
  if info.tiles then return nil, "column tiles" end
  local L = info.L
  if not ptx.pow2(L.P) or not ptx.pow2(L.RPC) then return nil, "threads per row or rows a pass not a power of two" end
  for _, uid in ipairs(group.inputs) do
    local t = g.by_uid[uid]
    if t.role ~= "constant" and t.role ~= "scalar" then
      if not ptxops.IN[t.dtype] then return nil, t.name .. " is " .. t.dtype end
      local how = info.access[uid]
      if how == "full" or how == "col" then
        if (L.V * dtypes.size(t.dtype)) % 4 ~= 0 then return nil, "vectors narrower than a word" end
      elseif how ~= "row" or not row_terms(t, info) then
        return nil, t.name .. " is gathered"
      end
    end
  end
  return true
end

-- The values `vals` of the rows a warp holds (lanes tp apart hold the same columns) combined
-- over those lanes with `op` by xor shuffles at offsets tp, 2 tp, ..., 16: each round halves
-- the values a lane keeps (the half its offset's bit picks) while they halve evenly, so the
-- warp ends with each value in one lane (a reduce-scatter: the same pairs in the same order as
-- butterflies on every value, so the same bits, with a fraction of the shuffles); a round that
-- cannot halve shuffles every value. Returns the kept values, the index (b32) of the first in
-- vals (0-based) and the mask of lane bits whose rounds did not halve (lanes with any of them
-- set hold copies).
local function scatter(P, vals, tp, lane32, op)
  local def = function(...) return P:def(...) end
  local base, unhalved, o = def("b32", "mov.u32 %s, 0;"), 0, tp
  while o < 32 do
    local h = #vals // 2
    if #vals % 2 == 0 and h >= 1 then
      local bit = def("b32", "and.b32 %s, %s, %d;", lane32, o)
      local up = def("pred", "setp.ne.u32 %s, %s, 0;", bit)
      local kept = {}
      for i = 1, h do
        local send = def("b32", "selp.b32 %s, %s, %s, %s;", vals[i], vals[i + h], up)
        local mine = def("b32", "selp.b32 %s, %s, %s, %s;", vals[i + h], vals[i], up)
        kept[i] = def("b32", op .. " %s, %s, %s;", mine, def("b32", "shfl.sync.bfly.b32 %s, %s, %d, 31, -1;", send, o))
      end
      base = def("b32", "add.u32 %s, %s, %s;", base, def("b32", "selp.b32 %s, %d, 0, %s;", h, up))
      vals = kept
    else
      for i, v in ipairs(vals) do vals[i] = def("b32", op .. " %s, %s, %s;", v, def("b32", "shfl.sync.bfly.b32 %s, %s, %d, 31, -1;", v, o)) end
      unhalved = unhalved | o
    end
    o = o * 2
  end
  return vals, base, unhalved
end

-- The body into K (colreduce's main kernel; its params those of the CUDA form: K:ptr of every
-- input and the workspace `ws` already named); the shared array cs_ (C * NR floats) declared.
function M.emit(K, group, g, info)
  local P = ptx.new()
  local put, def = function(...) P:put(...) end, function(...) return P:def(...) end
  local L, C = info.L, info.C
  local V, N, TP, RPC, B = L.V, L.N, L.P, L.RPC, L.block
  local accs = accumulators(info)
  local NR = #accs
  local tid, cta, lane, slot = P:place(TP, RPC)
  local rows = partials_ptx.product(P, info.row_factors)
  -- the sources: per-kernel values, one value per row, vectors of a row or of every row
  local base, vecs, per_row = {}, {}, {}
  for _, uid in ipairs(group.inputs) do
    local t = g.by_uid[uid]
    if t.role == "constant" or t.role == "scalar" then base[uid] = reduce_ptx.kernel_value(P, K, t)
    else
      local z = dtypes.size(t.dtype)
      local ptr = P:global(P:input("l", K:ptr(uid)))
      if info.access[uid] == "row" then
        per_row[#per_row + 1] = { uid = uid, ptr = ptr, dtype = t.dtype, z = z, terms = row_terms(t, info) }
      else
        K:need_align(uid, math.min(16, V * z))
        -- (the thread's first vector of the row; a column tensor's row is every row's)
        local at = def("b64", "mad.wide.u32 %s, %s, %d, %s;", lane, V * z, ptr)
        vecs[#vecs + 1] = { uid = uid, at = at, dtype = t.dtype, z = z, full = info.access[uid] == "full" }
      end
    end
  end
  local acc = {}
  for r, a in ipairs(accs) do
    local init = ptx.f32(partials_ptx.INIT[a.mode.init])
    acc[r] = {}
    for k = 1, N do
      acc[r][k] = {}
      for j = 1, V do acc[r][k][j] = def("b32", "mov.b32 %s, %s;", init) end
    end
  end
  -- vector k of the thread lies in the row (a ragged row's last ones: a predicate)
  local in_row = P:in_row(lane, TP, V, C)
  for k = 0, N - 1 do in_row(k) end
  local read_later = pw.read_set(group.nodes)
  -- the thread's rows: its CTA's row blocks, its slot's row of each
  local row = def("b64", "cvt.u64.u32 %s, %s;", cta)
  if RPC > 1 then row = def("b64", "mad.wide.u32 %s, %s, %d, %s;", cta, RPC, def("b64", "cvt.u64.u32 %s, %s;", slot)) end
  local step = def("b64", "mul.wide.u32 %s, %s, %d;", def("b32", "mov.u32 %s, %%nctaid.x;"), RPC)
  local LOOP, DONE = P:label(), P:label()
  P:at(LOOP)
  put("@%s bra %s;", def("pred", "setp.ge.s64 %s, %s, %s;", row, rows), DONE)
  -- (every vector's loads first: ptxas keeps their order, and all N are then in flight)
  local at, words = {}, {}
  for _, v in ipairs(vecs) do at[v.uid] = v.full and def("b64", "mad.lo.s64 %s, %s, %d, %s;", row, C * v.z, v.at) or v.at end
  for k = 0, N - 1 do
    words[k] = {}
    for _, v in ipairs(vecs) do
      words[k][v.uid] = P:reader(P:load("global.nc", at[v.uid], k * TP * V * v.z, V * v.z, in_row(k)), v.dtype)
    end
  end
  local row_value = {}
  for _, s in ipairs(per_row) do
    row_value[s.uid] = reduce_ptx.load_value(P, rowptx.at_row_offset(P, row, s.terms, s.z, s.ptr), s.dtype)
  end
  for k = 0, N - 1 do
    local SKIP = in_row(k) and P:label()
    if SKIP then put("@!%s bra %s;", in_row(k), SKIP) end
    local one = {}
    for uid, rd in pairs(row_value) do one[uid] = function() return rd end end
    reduce_ptx.fold(P, group, g, accs, read_later, V, base, { one, words[k] }, function(r, j) return acc[r][k + 1][j + 1] end)
    if SKIP then P:at(SKIP) end
  end
  put("add.s64 %s, %s, %s;", row, row, step)
  put("bra.uni %s;", LOOP)
  P:at(DONE)
  -- the slots combine in a fixed order: within a warp (several rows a warp) by xor shuffles,
  -- then group by group into cs_ (the first group stores, the next ones combine); a piece is
  -- { r = reduction, vals = registers, at = shared address, off = bytes, pred = in the row }
  local cs = P:shared(P:input("l", "cs_"))
  local pieces, groups, group_of, lead = {}, RPC, slot, nil
  if TP < 32 and RPC > 1 then
    local lane32 = def("b32", "and.b32 %s, %s, 31;", tid)
    local kept, base, unhalved = {}, nil, 0
    for r, a in ipairs(accs) do
      local vals = {}
      for k = 1, N do for j = 1, V do vals[#vals + 1] = acc[r][k][j] end end
      kept[r], base, unhalved = scatter(P, vals, TP, lane32, partials_ptx.COMB[a.mode.comb])
    end
    -- kept value q of reduction r is element base + q of the thread's N vectors
    local first_of = def("b32", "mad.lo.s32 %s, %s, %d, %s;", lane, V * 4, cs)
    for r in ipairs(accs) do
      for q, v in ipairs(kept[r]) do
        local e = def("b32", "add.u32 %s, %s, %d;", base, q - 1)
        local k = def("b32", "shr.u32 %s, %s, %d;", e, ptx.log2(V))
        local col = def("b32", "mad.lo.s32 %s, %s, %d, %s;", k, TP * V, def("b32", "and.b32 %s, %s, %d;", e, V - 1))
        local pred = not L.even and def("pred", "setp.lt.u32 %s, %s, %d;", def("b32", "mad.lo.s32 %s, %s, %d, %s;", lane, V, col), C) or nil
        pieces[#pieces + 1] = { r = r, vals = { v }, at = def("b32", "mad.lo.s32 %s, %s, 4, %s;", col, first_of),
                                off = (r - 1) * C * 4, pred = pred }
      end
    end
    groups, group_of = B // 32, def("b32", "shr.u32 %s, %s, 5;", tid)
    -- (rounds that could not halve the values left copies in the lanes their bits name)
    if unhalved ~= 0 then lead = def("pred", "setp.eq.u32 %s, %s, 0;", def("b32", "and.b32 %s, %s, %d;", lane32, unhalved)) end
  else
    local mine_at = def("b32", "mad.lo.s32 %s, %s, %d, %s;", lane, V * 4, cs)
    for k = 1, N do
      for r in ipairs(accs) do
        pieces[#pieces + 1] = { r = r, vals = acc[r][k], at = mine_at, off = ((r - 1) * C + (k - 1) * TP * V) * 4, pred = in_row(k - 1) }
      end
    end
  end
  -- the pieces into cs_: stored (`first` true), or combined with what is there (a predicate:
  -- stored where it holds)
  local function into_shared(first)
    for _, pc in ipairs(pieces) do
      local SKIP = pc.pred and P:label()
      if SKIP then put("@!%s bra %s;", pc.pred, SKIP) end
      local vals = pc.vals
      if first ~= true then
        local op = partials_ptx.COMB[accs[pc.r].mode.comb]
        local old = P:load("shared", pc.at, pc.off, #vals * 4, def("pred", "not.pred %s, %s;", first))
        local new = {}
        for j, v in ipairs(vals) do new[j] = def("b32", "selp.b32 %s, %s, %s, %s;", v, def("b32", op .. " %s, %s, %s;", old[j], v), first) end
        vals = new
      end
      P:store("shared", pc.at, pc.off, vals)
      if SKIP then P:at(SKIP) end
    end
  end
  if groups == 1 then
    into_shared(true)
    put("bar.sync 0;")
  else
    local s = def("b32", "mov.u32 %s, 0;")
    local GROUP, NEXT = P:label(), P:label()
    P:at(GROUP)
    local mine = def("pred", "setp.eq.u32 %s, %s, %s;", group_of, s)
    put("@!%s bra %s;", lead and P:both(mine, lead) or mine, NEXT)
    into_shared(def("pred", "setp.eq.u32 %s, %s, 0;", s))
    P:at(NEXT)
    put("bar.sync 0;")
    put("add.u32 %s, %s, 1;", s, s)
    put("@%s bra %s;", def("pred", "setp.lt.u32 %s, %s, %d;", s, groups), GROUP)
  end
  -- the CTA's partial row to the workspace, in the widest pieces that divide it
  local CN = C * NR
  local w = CN % 4 == 0 and 4 or (CN % 2 == 0 and 2 or 1)
  local ws = P:global(P:input("l", "ws"))
  local out = def("b64", "mad.wide.u32 %s, %s, %d, %s;", cta, CN * 4, ws)
  local i = def("b32", "mul.lo.u32 %s, %s, %d;", tid, w)
  local COPY, COPIED = P:label(), P:label()
  P:at(COPY)
  put("@%s bra %s;", def("pred", "setp.ge.u32 %s, %s, %d;", i, CN), COPIED)
  local part = P:load("shared", def("b32", "mad.lo.s32 %s, %s, 4, %s;", i, cs), 0, w * 4)
  P:store("global", def("b64", "mad.wide.u32 %s, %s, 4, %s;", i, out), 0, part)
  put("add.u32 %s, %s, %d;", i, i, B * w)
  put("bra.uni %s;", COPY)
  P:at(COPIED)
  K:asm(P)
end

return M
