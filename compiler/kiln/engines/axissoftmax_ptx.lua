-- kiln.engines.axissoftmax_ptx: the softmax over a non-last axis (axissoftmax.lua) with its body
-- written as PTX, so that it compiles as a PTX module (kiln.ptxmodule) by ptxas alone, without
-- NVRTC's front end and NVVM: the same work and order as the CUDA form (the rows split RS ways,
-- each column's statistics folded over the splits in split order through shared memory, the
-- staged values or x read again), its loads issued a trip ahead of their arithmetic. Taken where
-- every tensor is read as the input's layout or broadcast along runs of it
-- (axisreduce_ptx.strided_access; with columns after the axis of a dynamic count and no axes
-- before it, read whole) by
-- vectors of whole words and the fused ops have PTX forms (ptxops), but for a staged forward over
-- many row splits (slower); anything else keeps the CUDA form, as does the code setting cuda.
local dtypes = require "kiln.dtypes"
local shape = require "kiln.shape"
local ptx = require "kiln.ptx"
local pw = require "kiln.engines.pwexpr"
local rowgen = require "kiln.engines.rowgen"
local ptxops = require "kiln.engines.ptxops"
local partials_ptx = require "kiln.engines.partials_ptx"
local reduce_ptx = require "kiln.engines.reduce_ptx"
local axisreduce_ptx = require "kiln.engines.axisreduce_ptx"
local rowsm_ptx = require "kiln.engines.rowsm_ptx"

local M = {}

local NEG_INF, LOG2E = rowsm_ptx.NEG_INF, rowsm_ptx.LOG2E
M.STAGED_FWD_SPLITS = 4  -- the most row splits of a staged forward this form takes

-- The runs of info's axes as axisreduce_ptx.strided_access reads them: the axes before the
-- softmax axis (when any), the axis, the axes after it.
local function runs(info)
  local n, ax = #info.E, info.axis
  local r = {}
  if ax > 1 then r[#r + 1] = { from = 1, to = ax - 1 } end
  r[#r + 1] = { from = ax, to = ax }
  r[#r + 1] = { from = ax + 1, to = n }
  return { E = info.E, runs = r }
end

-- Whether the columns after the axis are of a dynamic count (or past a multiply-high's reach).
local function dynamic_columns(info) return type(info.Ki_c) ~= "number" or info.Ki_c >= 1 << 24 end

-- Whether every axis before the softmax axis is of size 1 (column o is then element o of a row).
local function leading_one(info)
  for _, f in ipairs(info.Ko_f) do if f ~= 1 then return false end end
  return true
end

-- The group's fused ops, the prologue's then the epilogue's.
local function fused_nodes(group)
  local nodes = {}
  for _, n in ipairs(group.prologue or {}) do nodes[#nodes + 1] = n end
  for _, n in ipairs(group.epilogue or {}) do nodes[#nodes + 1] = n end
  return nodes
end

-- Whether tensor t is read whole: the input's shape, row-major.
local function whole(t, info) return pw.dims_equal(t.dims, info.E) and shape.is_row_major(t.dims, t.strides) end

-- Whether this form takes the group (axissoftmax's info): true, or nil and why not.
function M.accepts(group, g, info, target)
  if not rowgen.ptx_wanted() then return nil, "code setting cuda" end
  -- on an H200 against the CUDA form: 1.04-1.48x everywhere but the staged forward over 32
  -- splits (rows of 300 and 512: 0.71-0.99x)
  if info.staged and info.kind == "fwd" and info.RS > M.STAGED_FWD_SPLITS then
    return nil, "a staged forward over more than " .. M.STAGED_FWD_SPLITS .. " row splits (slower in PTX)"
  end
  -- columns after the axis of a dynamic count: every tensor read whole (its row stride that count)
  local dynamic = dynamic_columns(info)
  -- (with axes before the softmax axis too, the column's block would take a 64-bit division a
  -- thread: written, not yet checked on a GPU)
  if dynamic and not leading_one(info) then return nil, "columns of a dynamic count after leading axes" end
  local nodes = fused_nodes(group)
  local bad = ptxops.op_declines(nodes, g)
  if bad then return nil, bad end
  local read_later = pw.read_set(group.nodes)
  bad = ptxops.read_again_declines(nodes, g, read_later)
  if bad then return nil, bad end
  local from_prologue = rowgen.made({ nodes = group.prologue or {} })
  local V, layout = info.V, runs(info)
  for _, uid in ipairs(info.elem) do
    local t = g.by_uid[uid]
    bad = ptxops.output_declines(t, V, read_later, target)
    if bad then return nil, bad end
    if info.staged and from_prologue[uid] then return nil, "a prologue value stored from staged values" end
  end
  for _, uid in ipairs(info.stats) do
    if not partials_ptx.output_ok(g.by_uid[uid].dtype) then return nil, "statistics output " .. g.by_uid[uid].name end
  end
  for _, uid in ipairs(group.inputs) do
    local t = g.by_uid[uid]
    if t.role ~= "constant" and t.role ~= "scalar" then
      if not ptxops.IN[t.dtype] then return nil, t.name .. " is " .. t.dtype end
      if dynamic and not whole(t, info) then return nil, t.name .. " broadcast beside columns of a dynamic count" end
      local at = dynamic and { I = 1, K = 0, R = 0 } or axisreduce_ptx.strided_access(t, layout)
      if not at or type(at.R) ~= "number" or type(at.I) ~= "number" then return nil, t.name .. " is gathered" end
      if at.I ~= 0 and (at.I ~= 1 or pw.const_factor(at.K) % V ~= 0 or at.R % V ~= 0
          or (V * dtypes.size(t.dtype)) % 4 ~= 0) then
        return nil, t.name .. " is not read by vectors of whole words"
      end
    end
  end
  return true
end

-- The emitter's shared state: the PTX under construction (P, with put and def), the kernel's
-- shape and what the passes share (fixed: load_fixed's values).
local function state(K, group, g, info, B, U)
  local P = ptx.new()
  local S = { K = K, group = group, g = g, info = info, U = U, P = P,
              put = function(...) P:put(...) end, def = function(...) return P:def(...) end,
              a = info.anchor, V = info.V, RS = info.RS, Ki = info.Ki_c, staged = info.staged, is_fwd = info.kind == "fwd",
              ins = info.ins, out_uid = info.out_uid, read_later = pw.read_set(group.nodes), layout = runs(info), fixed = {} }
  S.LO = B // S.RS
  S.TW = S.LO * S.V
  return S
end

-- The thread's place: its split srow and lane, its columns from o (dead: past the columns),
-- the extents (S.Ki, S.R) and its columns' element e0 of row 0.
local function place(S)
  local P, def, info, LO = S.P, S.def, S.info, S.LO
  local tid = def("b32", "mov.u32 %s, %%tid.x;")
  S.srow = def("b32", "shr.u32 %s, %s, %d;", tid, ptx.log2(LO))
  S.lane = def("b32", "and.b32 %s, %s, %d;", tid, LO - 1)
  local cta = def("b64", "cvt.u64.u32 %s, %s;", def("b32", "mov.u32 %s, %%ctaid.x;"))
  local o = def("b64", "mad.lo.s64 %s, %s, %d, %s;", cta, S.TW, def("b64", "mul.wide.u32 %s, %s, %d;", S.lane, S.V))
  S.o = o
  -- Ki: the columns after the axis, a constant or (dynamic) a register
  S.dynamic = dynamic_columns(info)
  if S.dynamic then S.Ki = partials_ptx.product(P, info.Ki_f) end
  local Ki = S.Ki
  local n_out = def("b64", "mul.lo.s64 %s, %s, %s;", partials_ptx.product(P, info.Ko_f), Ki)
  S.R = partials_ptx.product(P, info.R_f)
  S.dead = def("pred", "setp.ge.s64 %s, %s, %s;", o, n_out)
  S.one = leading_one(info)
  S.ko, S.col, S.e0 = nil, o, o
  if not S.one then
    S.ko = P:quotient(o, Ki)  -- (columns of a dynamic count come with no leading axes: accepts)
    S.col = def("b64", "sub.s64 %s, %s, %s;", o, def("b64", "mul.lo.s64 %s, %s, %s;", S.ko, Ki))
    -- element (r, column o) of a tensor of the input's layout: e0 + r * Ki
    S.e0 = def("b64", "mad.lo.s64 %s, %s, %s, %s;", def("b64", "mul.lo.s64 %s, %s, %s;", S.ko, S.R), Ki, S.col)
  end
end

-- The sources: per-kernel values (S.base), then each tensor's address at row 0 and its bytes
-- a row (S.srcs).
local function sources_of(S)
  local P, K, def, V, dynamic = S.P, S.K, S.def, S.V, S.dynamic
  local base, srcs = {}, {}
  for _, uid in ipairs(S.group.inputs) do
    local t = S.g.by_uid[uid]
    if t.role == "constant" or t.role == "scalar" then base[uid] = reduce_ptx.kernel_value(P, K, t)
    else
      local at = dynamic and { I = 1, K = 0, R = 0 } or axisreduce_ptx.strided_access(t, S.layout)
      local z = dtypes.size(t.dtype)
      if at.I ~= 0 then K:need_align(uid, V * z) end
      local ptr = P:global(P:input("l", K:ptr(uid)))
      local a0
      if dynamic then
        -- (read whole: element e0 + r * Ki, a row Ki * z bytes on)
        a0 = def("b64", "mad.lo.s64 %s, %s, %d, %s;", S.e0, z, ptr)
        at = { I = 1, K = 0, R = def("b64", "mul.lo.s64 %s, %s, %d;", S.Ki, z), bytes = true }
      else
        if S.one then at.K = 0 end  -- (ko is 0)
        a0 = axisreduce_ptx.row0_address(P, ptr, at, z, S.ko, S.col)
      end
      srcs[uid] = { uid = uid, dtype = t.dtype, z = z, at = at, a0 = a0 }
    end
  end
  S.base, S.srcs = base, srcs
end

-- The memory sources a pass over `nodes` reads (the anchor's inputs among them).
local function sources(S, nodes)
  local need, list = {}, {}
  for _, uid in ipairs(S.ins) do need[uid] = true end
  for _, n in ipairs(nodes) do for _, uid in pairs(n.inputs) do need[uid] = true end end
  for _, uid in ipairs(S.group.inputs) do
    if need[uid] and S.srcs[uid] then list[#list + 1] = S.srcs[uid] end
  end
  return list
end

-- A source's V values at `addr` + off: reader(j) and the words loaded (a vector), or one
-- value for all j.
local function read(S, src, addr, off, pred)
  local P = S.P
  if src.at.I ~= 0 then
    local words = P:load("global.nc", addr, off or 0, S.V * src.z, pred, true)
    return P:reader(words, src.dtype), words
  end
  local v = reduce_ptx.load_value(P, addr, src.dtype, off, pred)
  return function() return v end
end

-- The values fixed along the rows (S.fixed), loaded once by the first pass that reads them
-- (before its rows; the later passes run on the same live threads).
local function load_fixed(S, list)
  for _, src in ipairs(list) do
    if src.at.R == 0 and not S.fixed[src.uid] then
      local r = read(S, src, src.a0)
      local vals = {}
      for j = 0, S.V - 1 do vals[j] = r(j) end
      S.fixed[src.uid] = function(j) return vals[j] end
    end
  end
end

-- Staged values: input i's vector of row r at stg[i] + r * LO * its bytes (as loaded or fp32).
local function staging(S)
  local P, def, info = S.P, S.def, S.info
  local stg = {}
  if S.staged then
    local dsm = P:shared(P:input("l", "dsm_"))
    local off = 0
    for i, st in ipairs(info.stage) do
      local bytes = S.V * st.size
      stg[i] = { bytes = bytes, fp32 = st.fp32, dtype = S.g.by_uid[S.ins[i]].dtype,
                 at = def("b32", "mad.lo.s32 %s, %s, %d, %s;", S.lane, bytes, def("b32", "add.u32 %s, %s, %d;", dsm, off)) }
      off = off + info.R_c * S.TW * st.size
    end
  end
  S.stg = stg
end

local function stage_addr(S, i, r)
  local def, stg = S.def, S.stg
  return def("b32", "mad.lo.s32 %s, %s, %d, %s;", def("b32", "cvt.u32.u64 %s, %s;", r), S.LO * stg[i].bytes, stg[i].at)
end

-- The rows r = srow, srow + RS, ... < R of the live threads, n a trip: load(r, k, pred)
-- issues row r + k * RS's loads (under pred, that the row exists, from the second) and gives
-- a handle, body(handle, r, k) its work, every load of a trip before its work; the last
-- trip's missing rows skipped, as the CUDA form's guards (no remainder loop: a copy of the
-- body fewer); pre() first, on the live threads.
-- trip(hs, has), where given, takes the trip's rows at once instead (has[k]: row k exists).
local function rows(S, n, load, body, pre, trip)
  local P, put, def, RS, R = S.P, S.put, S.def, S.RS, S.R
  local MAIN, DONE = P:label(), P:label()
  put("@%s bra %s;", S.dead, DONE)
  if pre then pre() end
  local r = def("b64", "cvt.u64.u32 %s, %s;", S.srow)
  P:at(MAIN)
  put("@%s bra %s;", def("pred", "setp.ge.s64 %s, %s, %s;", r, R), DONE)
  local has = {}
  for k = 1, n - 1 do has[k] = def("pred", "setp.lt.s64 %s, %s, %s;", def("b64", "add.s64 %s, %s, %d;", r, k * RS), R) end
  local hs = {}
  for k = 0, n - 1 do hs[k] = load(r, k, has[k]) end
  if trip then trip(hs, has) end
  for k = 0, trip and -1 or n - 1 do
    if k > 0 then put("@!%s bra %s;", has[k], DONE) end
    body(hs[k], r, k)
  end
  put("add.s64 %s, %s, %d;", r, r, n * RS)
  put("bra.uni %s;", MAIN)
  P:at(DONE)
end

-- The loads of row r + k * RS from memory: each source's reader and (vectors) words.
local function memory_load(S, list)
  local def, RS = S.def, S.RS
  local row_addr = {}  -- (each source's address at row r, once a trip)
  return function(r, k, pred)
    local reads, words = {}, {}
    for _, src in ipairs(list) do
      if src.at.R == 0 then reads[src.uid] = S.fixed[src.uid]
      elseif src.at.bytes then
        -- (a row stride in a register: the trip's rows RS strides apart)
        if k == 0 then row_addr[src.uid] = def("b64", "mad.lo.s64 %s, %s, %s, %s;", r, src.at.R, src.a0)
        else row_addr[src.uid] = def("b64", "mad.lo.s64 %s, %s, %d, %s;", src.at.R, RS, row_addr[src.uid]) end
        reads[src.uid], words[src.uid] = read(S, src, row_addr[src.uid], 0, pred)
      else
        if k == 0 then row_addr[src.uid] = def("b64", "mad.lo.s64 %s, %s, %d, %s;", r, src.at.R * src.z, src.a0) end
        local addr = row_addr[src.uid]
        local off = k * RS * src.at.R * src.z
        if off >= 2 ^ 31 then addr, off = def("b64", "add.s64 %s, %s, %d;", addr, off), 0 end
        reads[src.uid], words[src.uid] = read(S, src, addr, off, pred)
      end
    end
    return { reads = reads, words = words }
  end
end

-- Element j's values: the kernel's, the row's reads, then the prologue's (`nodes`).
local function values(S, reads, j, nodes)
  local value = {}
  for uid, v in pairs(S.base) do value[uid] = v end
  for uid, rd in pairs(reads) do value[uid] = rd(j) end
  ptxops.run_nodes(S.P, nodes, value, S.g, S.read_later)
  return value
end

-- Row r + k * RS's anchor inputs into their staged places: as loaded (h.words) or as the fp32
-- values of vj (vj[j]: element j's values).
local function stage_row(S, h, r, k, vj)
  for i, st in ipairs(S.stg) do
    if k == 0 then st.trip = stage_addr(S, i, r) end
    local words
    if st.fp32 then
      words = {}
      for j = 0, S.V - 1 do words[j + 1] = vj[j][S.ins[i]] end
    else
      words = h.words[S.ins[i]]
    end
    S.P:store("shared", st.trip, k * S.RS * S.LO * st.bytes, words)
  end
end

-- A pass reading memory: the prologue, then fn(vals, j, value) per element (vals[i]: anchor
-- input i), after(r, k, value_of_j) at each row's end, the anchor inputs staged with `stage`;
-- it loads what the anchor and `nodes` read.
local function memory_pass(S, nodes, fn, after, stage)
  local list = sources(S, nodes)
  rows(S, S.U, memory_load(S, list), function(h, r, k)
    local vj = {}
    for j = 0, S.V - 1 do
      local value = values(S, h.reads, j, S.group.prologue or {})
      local vals = {}
      for i, uid in ipairs(S.ins) do vals[i] = value[uid] end
      fn(vals, j, value)
      vj[j] = value
    end
    if stage then stage_row(S, h, r, k, vj) end
    if after then after(r, k, vj) end
  end, function() load_fixed(S, list) end)
end

-- A pass over the staged values, a row a trip: fn(vals, j, value) per element.
local function staged_pass(S, fn, after)
  local P, V = S.P, S.V
  rows(S, 1, function(r)
    local rd = {}
    for i, st in ipairs(S.stg) do
      local w = P:load("shared", stage_addr(S, i, r), 0, st.bytes)
      rd[i] = P:reader(w, st.fp32 and "fp32" or st.dtype)
    end
    return rd
  end, function(rd, r, k)
    local vj = {}
    for j = 0, V - 1 do
      local value, vals = {}, {}
      for uid, v in pairs(S.base) do value[uid] = v end
      for i, uid in ipairs(S.ins) do vals[i] = rd[i](j); value[uid] = vals[i] end
      fn(vals, j, value)
      vj[j] = value
    end
    if after then after(r, k, vj) end
  end)
end

-- The places of the splits' values in red_ (RS > 1): the thread's (S.mine) and its
-- columns' in split 0 (S.col_at).
local function split_slots(S)
  local P, def, V, TW = S.P, S.def, S.V, S.TW
  local red = S.RS > 1 and P:shared(P:input("l", "red_")) or nil
  S.mine = red and def("b32", "mad.lo.s32 %s, %s, %d, %s;", S.srow, TW * 4, def("b32", "mad.lo.s32 %s, %s, %d, %s;", S.lane, V * 4, red))
  S.col_at = red and def("b32", "mad.lo.s32 %s, %s, %d, %s;", S.lane, V * 4, red)
end

-- V registers set to x.
local function fill(S, x)
  local r = {}
  for j = 1, S.V do r[j] = S.def("b32", "mov.b32 %s, %s;", x) end
  return r
end

local IDENTITY = { ["max.NaN.f32"] = NEG_INF, ["add.f32"] = "0f00000000" }

-- Each column's values `acc` (V registers) folded over the splits in split order with `op`.
local function combine(S, acc, op)
  if S.RS == 1 then return acc end
  local P, put, def, V, TW = S.P, S.put, S.def, S.V, S.TW
  P:store("shared", S.mine, 0, acc)
  put("bar.sync 0;")
  -- a loop over the splits, one a trip, from the fold's identity (the same bits as from split
  -- 0): 1, 2 or 4 splits a trip and all unrolled measure alike on an H200 (rows of 300 and
  -- 512 in 32 splits), and one a trip is the least ptxas time (unrolled, the splits are a
  -- third of the kernel's PTX)
  local out = fill(S, IDENTITY[op])
  local at = def("b32", "mov.b32 %s, %s;", S.col_at)
  local stop = def("b32", "add.u32 %s, %s, %d;", S.col_at, S.RS * TW * 4)
  local LOOP = P:label()
  P:at(LOOP)
  local w = P:load("shared", at, 0, V * 4)
  for j = 1, V do put(op .. " %s, %s, %s;", out[j], out[j], w[j]) end
  put("add.u32 %s, %s, %d;", at, at, TW * 4)
  put("@%s bra %s;", def("pred", "setp.lt.u32 %s, %s, %s;", at, stop), LOOP)
  put("bar.sync 0;")
  return out
end

local function ex2(S, x) return S.def("b32", "ex2.approx.ftz.f32 %s, %s;", S.def("b32", "mul.f32 %s, %s, %s;", x, LOG2E)) end
local function exp_from(S, x, b) return rowsm_ptx.exp_from(S.P, x, b) end  -- 2^((x - b) log2 e)
local function minus_inf(S, x) return S.def("pred", "setp.eq.f32 %s, %s, " .. NEG_INF .. ";", x) end
-- a column's exps taken from its max, or from 0 where the max is -inf (no terms)
local function exp_base(S, m)
  local b = {}
  for j = 1, S.V do b[j] = S.def("b32", "selp.f32 %s, 0f00000000, %s, %s;", m[j], minus_inf(S, m[j])) end
  return b
end

-- The forward's max and sum of exps with the values staged (m and z: V registers each): pass
-- 1 the max, the values staged; pass 2 the sum of exps from shared memory. Returns the
-- columns' max and exp bases.
local function staged_max_sum(S, m, z)
  local put = S.put
  memory_pass(S, S.group.prologue or {}, function(vals, j) put("max.NaN.f32 %s, %s, %s;", m[j + 1], m[j + 1], vals[1]) end, nil, true)
  m = combine(S, m, "max.NaN.f32")
  local mb = exp_base(S, m)
  staged_pass(S, function(vals, j)
    put("add.f32 %s, %s, %s;", z[j + 1], z[j + 1], exp_from(S, vals[1], mb[j + 1]))
  end)
  return m, mb
end

-- A trip of U rows into each column's running max m and sum z, the sum rescaled once to the
-- trip's max; a missing row of the last trip counts as -inf.
local function running_trip(S, m, z, hs, has)
  local put, def, U = S.put, S.def, S.U
  for j = 0, S.V - 1 do
    local xs = {}
    for k = 0, U - 1 do
      xs[k] = values(S, hs[k].reads, j, S.group.prologue or {})[S.ins[1]]
      if k > 0 then xs[k] = def("b32", "selp.f32 %s, %s, " .. NEG_INF .. ", %s;", xs[k], has[k]) end
    end
    local mo, zo = m[j + 1], z[j + 1]
    local mn = mo
    for k = 0, U - 1 do mn = def("b32", "max.NaN.f32 %s, %s, %s;", mn, xs[k]) end
    local b = def("b32", "selp.f32 %s, 0f00000000, %s, %s;", mn, minus_inf(S, mn))
    local sc = def("b32", "selp.f32 %s, 0f3F800000, %s, %s;", exp_from(S, mo, mn),
      def("pred", "setp.eq.f32 %s, %s, %s;", mo, mn))
    put("mul.f32 %s, %s, %s;", zo, zo, sc)
    for k = 0, U - 1 do put("add.f32 %s, %s, %s;", zo, zo, exp_from(S, xs[k], b)) end
    put("mov.b32 %s, %s;", mo, mn)
  end
end

-- The forward's max and sum of exps in one pass: each column's running max and sum of exps,
-- the sum rescaled once a trip of U rows to the trip's max (the CUDA form rescales a row at a
-- time: twice the exps, and the exps bound the pass). Returns the columns' max and exp bases
-- (z's registers rescaled in place).
local function running_max_sum(S, m, z)
  local def = S.def
  local list = sources(S, S.group.prologue or {})
  rows(S, S.U, memory_load(S, list), nil, function() load_fixed(S, list) end,
    function(hs, has) running_trip(S, m, z, hs, has) end)
  -- the splits' pairs: the max first, then each split's sum rescaled to it
  local tm = m
  m = combine(S, m, "max.NaN.f32")
  for j = 1, S.V do
    local zs = def("b32", "mul.f32 %s, %s, %s;", z[j], exp_from(S, tm[j], m[j]))
    z[j] = def("b32", "selp.f32 %s, %s, %s, %s;", z[j], zs, def("pred", "setp.eq.f32 %s, %s, %s;", tm[j], m[j]))
  end
  return m, exp_base(S, m)
end

-- The forward: each column's max m and sum of exps z over the splits, then value_of(vals, j)
-- (the output's element j) and stat_of[uid](j) (each statistics output's column j).
local function forward(S)
  local def, a, V = S.def, S.a, S.V
  local is_log = a.op == "log_softmax"
  local m, z = fill(S, NEG_INF), fill(S, "0f00000000")
  local mb
  if S.staged then m, mb = staged_max_sum(S, m, z) else m, mb = running_max_sum(S, m, z) end
  z = combine(S, z, "add.f32")
  local lz, iz = {}, {}
  for j = 1, V do
    if is_log then lz[j] = rowsm_ptx.logf(S.P, z[j])
    else iz[j] = def("b32", "selp.f32 %s, 0f00000000, %s, %s;", S.P:recip(z[j]), minus_inf(S, m[j])) end
  end
  local function value_of(vals, j)
    if is_log then
      local v = def("b32", "sub.f32 %s, %s, %s;", def("b32", "sub.f32 %s, %s, %s;", vals[1], m[j + 1]), lz[j + 1])
      return def("b32", "selp.f32 %s, " .. NEG_INF .. ", %s, %s;", v, minus_inf(S, m[j + 1]))
    end
    return def("b32", "mul.f32 %s, %s, %s;", exp_from(S, vals[1], mb[j + 1]), iz[j + 1])
  end
  local stat_of, o_ = {}, a.outputs
  if o_.Stats then
    stat_of[o_.Stats] = function(j)
      local s = def("b32", "add.f32 %s, %s, %s;", m[j], lz[j] or rowsm_ptx.logf(S.P, z[j]))
      return a.attrs.stats_use_log2 and def("b32", "mul.f32 %s, %s, %s;", s, LOG2E) or s
    end
  end
  if o_.Max then stat_of[o_.Max] = function(j) return m[j] end end
  if o_.Sum_exp then stat_of[o_.Sum_exp] = function(j) return z[j] end end
  return value_of, stat_of
end

-- The backward: each column's sum c (of dy * y, or of dy) over the splits, then
-- value_of(vals, j) (the output's element j).
local function backward(S)
  local put, def = S.put, S.def
  local is_log = S.a.op == "log_softmax_backward"
  local c = fill(S, "0f00000000")
  memory_pass(S, S.group.prologue or {}, function(vals, j)
    if is_log then put("add.f32 %s, %s, %s;", c[j + 1], c[j + 1], vals[1])
    else put("fma.rn.f32 %s, %s, %s, %s;", c[j + 1], vals[1], vals[2], c[j + 1]) end
  end, nil, S.staged)
  c = combine(S, c, "add.f32")
  return function(vals, j)
    if is_log then
      return def("b32", "fma.rn.f32 %s, %s, %s, %s;", def("b32", "neg.f32 %s, %s;", ex2(S, vals[2])), c[j + 1], vals[1])
    end
    return def("b32", "mul.f32 %s, %s, %s;", vals[2], def("b32", "sub.f32 %s, %s, %s;", vals[1], c[j + 1]))
  end
end

-- The output pass: y (rounded to its dtype where the epilogue reads it), the epilogue, each
-- element output's vector stored a row.
local function output_pass(S, value_of)
  local P, K, g, def, V, out_uid = S.P, S.K, S.g, S.def, S.V, S.out_uid
  local yt = g.by_uid[out_uid]
  local outs = {}
  for _, uid in ipairs(S.info.elem) do
    local t = g.by_uid[uid]
    K:need_align(uid, V * dtypes.size(t.dtype))
    outs[#outs + 1] = { uid = uid, dtype = t.dtype, z = dtypes.size(t.dtype), ptr = P:global(P:input("l", K:ptr(uid, true))) }
  end
  local function output(vals, j, value)
    local v = value_of(vals, j)
    value[out_uid] = yt.dtype ~= "fp32" and S.read_later[out_uid] and P:round(v, yt.dtype) or v
    ptxops.run_nodes(P, S.group.epilogue or {}, value, g, S.read_later)
  end
  local function store_row(r, k, vj)
    local e = def("b64", "mad.lo.s64 %s, %s, %s, %s;", k == 0 and r or def("b64", "add.s64 %s, %s, %d;", r, k * S.RS), S.Ki, S.e0)
    for _, ot in ipairs(outs) do
      local xs = {}
      for j = 0, V - 1 do xs[j + 1] = vj[j][ot.uid] end
      P:store("global", def("b64", "mad.lo.s64 %s, %s, %d, %s;", e, ot.z, ot.ptr), 0, P:pack(xs, ot.dtype))
    end
  end
  if S.staged then staged_pass(S, output, store_row) else memory_pass(S, fused_nodes(S.group), output, store_row) end
end

-- Statistics, one per column: the first split's live threads.
local function store_stats(S, stat_of)
  local P, def, info = S.P, S.def, S.info
  if #info.stats == 0 then return end
  local SKIP = P:label()
  S.put("@%s bra %s;", def("pred", "or.pred %s, %s, %s;", S.dead, def("pred", "setp.ne.u32 %s, %s, 0;", S.srow)), SKIP)
  for _, uid in ipairs(info.stats) do
    local out = P:global(P:input("l", S.K:ptr(uid, true)))
    for j = 1, S.V do
      partials_ptx.store(P, out, def("b64", "add.s64 %s, %s, %d;", S.o, j - 1), stat_of[uid](j), S.g.by_uid[uid].dtype)
    end
  end
  P:at(SKIP)
end

-- The body into K (axissoftmax's kernel, its params those of the CUDA form): B threads a CTA,
-- U rows in flight a trip of a pass reading memory; the shared arrays red_ (RS > 1) and dsm_
-- (staged) declared by the caller.
function M.emit(K, group, g, info, B, U)
  local S = state(K, group, g, info, B, U)
  place(S)
  sources_of(S)
  staging(S)
  split_slots(S)
  local value_of, stat_of
  if S.is_fwd then value_of, stat_of = forward(S)
  else value_of, stat_of = backward(S), {} end
  output_pass(S, value_of)
  store_stats(S, stat_of)
  K:asm(S.P)
end

return M
