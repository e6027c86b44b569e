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

-- The emitter's shared state: the PTX under construction (P, with put and def), the layout's
-- constants, the accumulators' modes and the thread's place.
local function state(K, group, g, info)
  local P = ptx.new()
  local L = info.L
  local accs = accumulators(info)
  local S = { K = K, group = group, g = g, info = info, P = P, L = L, C = info.C,
              V = L.V, N = L.N, TP = L.P, RPC = L.RPC, B = L.block, accs = accs, NR = #accs,
              put = function(...) P:put(...) end, def = function(...) return P:def(...) end }
  S.tid, S.cta, S.lane, S.slot = P:place(S.TP, S.RPC)
  S.rows = partials_ptx.product(P, info.row_factors)
  return S
end

-- The sources: per-kernel values (S.base), one value per row (S.per_row), vectors of a row or
-- of every row (S.vecs).
local function sources(S)
  local P, K, def, V = S.P, S.K, S.def, S.V
  local base, vecs, per_row = {}, {}, {}
  for _, uid in ipairs(S.group.inputs) do
    local t = S.g.by_uid[uid]
    if t.role == "constant" or t.role == "scalar" then base[uid] = reduce_ptx.kernel_value(P, K, t)
    else
      local z = dtypes.size(t.dtype)
      local ptr = P:global(P:input("l", K:ptr(uid)))
      if S.info.access[uid] == "row" then
        per_row[#per_row + 1] = { uid = uid, ptr = ptr, dtype = t.dtype, z = z, terms = row_terms(t, S.info) }
      else
        K:need_align(uid, math.min(16, V * z))
        -- (the thread's first vector of the row; a column tensor's row is every row's)
        local at = def("b64", "mad.wide.u32 %s, %s, %d, %s;", S.lane, V * z, ptr)
        vecs[#vecs + 1] = { uid = uid, at = at, dtype = t.dtype, z = z, full = S.info.access[uid] == "full" }
      end
    end
  end
  S.base, S.vecs, S.per_row = base, vecs, per_row
end

-- Each reduction's accumulators acc[r][k][j] (vector k, element j) at its identity.
local function initial_accumulators(S)
  local acc = {}
  for r, a in ipairs(S.accs) do
    local init = ptx.f32(partials_ptx.INIT[a.mode.init])
    acc[r] = {}
    for k = 1, S.N do
      acc[r][k] = {}
      for j = 1, S.V do acc[r][k][j] = S.def("b32", "mov.b32 %s, %s;", init) end
    end
  end
  return acc
end

-- Row `row`'s loads: each vector source's N vectors (readers, words[k][uid]) and each per-row
-- source's value.
local function row_loads(S, row)
  local P, def, V, TP = S.P, S.def, S.V, S.TP
  -- (every vector's loads first: ptxas keeps their order, and all N are then in flight)
  local at, words = {}, {}
  for _, v in ipairs(S.vecs) do at[v.uid] = v.full and def("b64", "mad.lo.s64 %s, %s, %d, %s;", row, S.C * v.z, v.at) or v.at end
  for k = 0, S.N - 1 do
    words[k] = {}
    for _, v in ipairs(S.vecs) do
      words[k][v.uid] = P:reader(P:load("global.nc", at[v.uid], k * TP * V * v.z, V * v.z, S.in_row(k)), v.dtype)
    end
  end
  local row_value = {}
  for _, s in ipairs(S.per_row) do
    row_value[s.uid] = reduce_ptx.load_value(P, rowptx.at_row_offset(P, row, s.terms, s.z, s.ptr), s.dtype)
  end
  return words, row_value
end

-- The thread's rows folded into its accumulators: its CTA's row blocks, its slot's row of each.
local function fold_rows(S)
  local P, put, def, RPC = S.P, S.put, S.def, S.RPC
  local read_later = pw.read_set(S.group.nodes)
  local row = def("b64", "cvt.u64.u32 %s, %s;", S.cta)
  if RPC > 1 then row = def("b64", "mad.wide.u32 %s, %s, %d, %s;", S.cta, RPC, def("b64", "cvt.u64.u32 %s, %s;", S.slot)) end
  local step = def("b64", "mul.wide.u32 %s, %s, %d;", def("b32", "mov.u32 %s, %%nctaid.x;"), RPC)
  local LOOP, DONE = P:label(), P:label()
  P:at(LOOP)
  put("@%s bra %s;", def("pred", "setp.ge.s64 %s, %s, %s;", row, S.rows), DONE)
  local words, row_value = row_loads(S, row)
  for k = 0, S.N - 1 do
    local SKIP = S.in_row(k) and P:label()
    if SKIP then put("@!%s bra %s;", S.in_row(k), SKIP) end
    local one = {}
    for uid, rd in pairs(row_value) do one[uid] = function() return rd end end
    reduce_ptx.fold(P, S.group, S.g, S.accs, read_later, S.V, S.base, { one, words[k] }, function(r, j) return S.acc[r][k + 1][j + 1] end)
    if SKIP then P:at(SKIP) end
  end
  put("add.s64 %s, %s, %s;", row, row, step)
  put("bra.uni %s;", LOOP)
  P:at(DONE)
end

-- Several rows a warp: the slots' values scattered over the warp's lanes (scatter), a piece
-- per kept value; the groups are the warps, `lead` (or nil) the lanes that hold no copies.
local function warp_pieces(S, cs)
  local P, def, V, TP, C, lane = S.P, S.def, S.V, S.TP, S.C, S.lane
  local pieces = {}
  local lane32 = def("b32", "and.b32 %s, %s, 31;", S.tid)
  local kept, base, unhalved = {}, nil, 0
  for r, a in ipairs(S.accs) do
    local vals = {}
    for k = 1, S.N do for j = 1, V do vals[#vals + 1] = S.acc[r][k][j] end end
    kept[r], base, unhalved = scatter(P, vals, TP, lane32, partials_ptx.COMB[a.mode.comb])
  end
  -- kept value q of reduction r is element base + q of the thread's N vectors
  local first_of = def("b32", "mad.lo.s32 %s, %s, %d, %s;", lane, V * 4, cs)
  for r in ipairs(S.accs) do
    for q, v in ipairs(kept[r]) do
      local e = def("b32", "add.u32 %s, %s, %d;", base, q - 1)
      local k = def("b32", "shr.u32 %s, %s, %d;", e, ptx.log2(V))
      local col = def("b32", "mad.lo.s32 %s, %s, %d, %s;", k, TP * V, def("b32", "and.b32 %s, %s, %d;", e, V - 1))
      local pred = not S.L.even and def("pred", "setp.lt.u32 %s, %s, %d;", def("b32", "mad.lo.s32 %s, %s, %d, %s;", lane, V, col), C) or nil
      pieces[#pieces + 1] = { r = r, vals = { v }, at = def("b32", "mad.lo.s32 %s, %s, 4, %s;", col, first_of),
                              off = (r - 1) * C * 4, pred = pred }
    end
  end
  local groups, group_of = S.B // 32, def("b32", "shr.u32 %s, %s, 5;", S.tid)
  -- (rounds that could not halve the values left copies in the lanes their bits name)
  local lead
  if unhalved ~= 0 then lead = def("pred", "setp.eq.u32 %s, %s, 0;", def("b32", "and.b32 %s, %s, %d;", lane32, unhalved)) end
  return pieces, groups, group_of, lead
end

-- A row a warp or a warp a slot: each thread's accumulators as they are, a piece per vector
-- and reduction; the groups are the slots.
local function slot_pieces(S, cs)
  local pieces = {}
  local mine_at = S.def("b32", "mad.lo.s32 %s, %s, %d, %s;", S.lane, S.V * 4, cs)
  for k = 1, S.N do
    for r in ipairs(S.accs) do
      pieces[#pieces + 1] = { r = r, vals = S.acc[r][k], at = mine_at, off = ((r - 1) * S.C + (k - 1) * S.TP * S.V) * 4,
                              pred = S.in_row(k - 1) }
    end
  end
  return pieces, S.RPC, S.slot, nil
end

-- The pieces into cs_: stored (`first` true), or combined with what is there (a predicate:
-- stored where it holds).
local function into_shared(S, pieces, first)
  local P, put, def = S.P, S.put, S.def
  for _, pc in ipairs(pieces) do
    local SKIP = pc.pred and P:label()
    if SKIP then put("@!%s bra %s;", pc.pred, SKIP) end
    local vals = pc.vals
    if first ~= true then
      local op = partials_ptx.COMB[S.accs[pc.r].mode.comb]
      local old = P:load("shared", pc.at, pc.off, #vals * 4, def("pred", "not.pred %s, %s;", first))
      local new = {}
      for j, v in ipairs(vals) do new[j] = def("b32", "selp.b32 %s, %s, %s, %s;", v, def("b32", op .. " %s, %s, %s;", old[j], v), first) end
      vals = new
    end
    P:store("shared", pc.at, pc.off, vals)
    if SKIP then P:at(SKIP) end
  end
end

-- The groups' pieces into cs_ one group after another (the first stores, the next combine).
local function combine_groups(S, pieces, groups, group_of, lead)
  local P, put, def = S.P, S.put, S.def
  if groups == 1 then
    into_shared(S, pieces, true)
    put("bar.sync 0;")
    return
  end
  local s = def("b32", "mov.u32 %s, 0;")
  local GROUP, NEXT = P:label(), P:label()
  P:at(GROUP)
  local mine = def("pred", "setp.eq.u32 %s, %s, %s;", group_of, s)
  put("@!%s bra %s;", lead and P:both(mine, lead) or mine, NEXT)
  into_shared(S, pieces, def("pred", "setp.eq.u32 %s, %s, 0;", s))
  P:at(NEXT)
  put("bar.sync 0;")
  put("add.u32 %s, %s, 1;", s, s)
  put("@%s bra %s;", def("pred", "setp.lt.u32 %s, %s, %d;", s, groups), GROUP)
end

-- The CTA's partial row (cs_) to the workspace, in the widest pieces that divide it.
local function copy_out(S, cs)
  local P, put, def = S.P, S.put, S.def
  local CN = S.C * S.NR
  local w = CN % 4 == 0 and 4 or (CN % 2 == 0 and 2 or 1)
  local ws = P:global(P:input("l", "ws"))
  local out = def("b64", "mad.wide.u32 %s, %s, %d, %s;", S.cta, CN * 4, ws)
  local i = def("b32", "mul.lo.u32 %s, %s, %d;", S.tid, w)
  local COPY, COPIED = P:label(), P:label()
  P:at(COPY)
  put("@%s bra %s;", def("pred", "setp.ge.u32 %s, %s, %d;", i, CN), COPIED)
  local part = P:load("shared", def("b32", "mad.lo.s32 %s, %s, 4, %s;", i, cs), 0, w * 4)
  P:store("global", def("b64", "mad.wide.u32 %s, %s, 4, %s;", i, out), 0, part)
  put("add.u32 %s, %s, %d;", i, i, S.B * w)
  put("bra.uni %s;", COPY)
  P:at(COPIED)
end

-- The body into K (colreduce's main kernel; its params those of the CUDA form: K:ptr of every
-- input and the workspace `ws` already named); the shared array cs_ (C * NR floats) declared.
function M.emit(K, group, g, info)
  local S = state(K, group, g, info)
  sources(S)
  S.acc = initial_accumulators(S)
  -- vector k of the thread lies in the row (a ragged row's last ones: a predicate)
  S.in_row = S.P:in_row(S.lane, S.TP, S.V, S.C)
  for k = 0, S.N - 1 do S.in_row(k) end
  fold_rows(S)
  -- the slots combine in a fixed order: within a warp (several rows a warp) by xor shuffles,
  -- then group by group into cs_ (the first group stores, the next ones combine); a piece is
  -- { r = reduction, vals = registers, at = shared address, off = bytes, pred = in the row }
  local cs = S.P:shared(S.P:input("l", "cs_"))
  local pieces, groups, group_of, lead
  if S.TP < 32 and S.RPC > 1 then pieces, groups, group_of, lead = warp_pieces(S, cs)
  else pieces, groups, group_of, lead = slot_pieces(S, cs) end
  combine_groups(S, pieces, groups, group_of, lead)
  copy_out(S, cs)
  K:asm(S.P)
end

return M
