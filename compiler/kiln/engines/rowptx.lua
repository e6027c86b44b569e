-- kiln.engines.rowptx: what the row kernels with their bodies in PTX share (rowfwd_ptx: the
-- forward norms; rowsm_ptx: softmax and its backward): the thread's place and row, the
-- sources' registers and addresses, the passes over a row's vectors (held in registers or
-- re-read from L2, a ragged row's last vector predicated), the reductions over a row's
-- threads and the per-row outputs.
local dtypes = require "kiln.dtypes"
local shape = require "kiln.shape"
local ptx = require "kiln.ptx"
local rowgen = require "kiln.engines.rowgen"
local settings = require "kiln.settings"
local lower = require "kiln.lower"
local partials_ptx = require "kiln.engines.partials_ptx"
local ptxops = require "kiln.engines.ptxops"
local pw = require "kiln.engines.pwexpr"

local M = {}

M.IN = ptxops.IN

-- Reductions over a row by mode (rowred_ptx: a row reduction; rowfwd_ptx: per-row reductions of
-- a norm's epilogue values): the start value, the combine `op` (also the in-place update of acc
-- by an element, of |x| with `abs`, of x * x with `sq`), what a lane past a ragged row counts
-- as, and the final map.
local NEG_INF, POS_INF, ZERO, ONE = "0fFF800000", "0f7F800000", ptx.f32(0), ptx.f32(1)
M.RED = {
  mul = { init = ONE, other = ONE, op = "mul.f32" },
  -- (zeros count as ones; NaN is not zero: neu is C's !=)
  mul_no_zeros = { init = ONE, other = ONE, op = "mul.f32", nonzero = true },
  -- |x|'s bits: their unsigned order is the float order, NaN above all (redux.sync per warp)
  amax = { init = ZERO, op = "max.u32", abs = true },
  max = { init = NEG_INF, other = NEG_INF, op = "max.NaN.f32" },
  min = { init = POS_INF, other = POS_INF, op = "min.NaN.f32" },
  add = { init = ZERO, op = "add.f32" },
  avg = { init = ZERO, op = "add.f32", fin = function(P, v, H) return P:def("b32", "mul.f32 %s, %s, %s;", v, ptx.f32(1.0 / H)) end },
  norm1 = { init = ZERO, op = "add.f32", abs = true },
  norm2 = { init = ZERO, op = "add.f32", sq = true, fin = function(P, v) return P:def("b32", "sqrt.rn.f32 %s, %s;", v) end },
}
function M.red_update(P, m, acc, x)
  if m.sq then P:put("fma.rn.f32 %s, %s, %s, %s;", acc, x, x, acc) return end
  if m.abs then x = P:def("b32", "abs.f32 %s, %s;", x) end
  if m.nonzero then x = P:def("b32", "selp.f32 %s, %s, %s, %s;", x, ONE, P:def("pred", "setp.neu.f32 %s, %s, 0f00000000;", x)) end
  P:put("%s %s, %s, %s;", m.op, acc, acc, x)
end

-- A tensor of one value in all.
function M.one_value(t)
  for _, d in ipairs(t.dims) do if d ~= 1 then return false end end
  return true
end

-- base + z * (rowgen.row_offset's element offset of the row in b64 `row`): 32-bit coordinates
-- (a row index is below 2^31), divided by compile-time divisors.
function M.at_row_offset(P, row, terms, z, base)
  local r32 = P:def("b32", "cvt.u32.u64 %s, %s;", row)
  for _, tm in ipairs(terms) do
    -- (a divisor of dynamic dims: the kernel's operand, a 32-bit division once a row)
    local div = type(tm.div) == "number" and tm.div
      or P:def("b32", "cvt.u32.u64 %s, %s;", P:input("l", string.format("(kiln_i64)(%s)", tm.div)))
    local c = tm.div == 1 and r32 or P:def("b32", "div.u32 %s, %s, %s;", r32, div)
    if tm.mod then c = P:def("b32", "rem.u32 %s, %s, %d;", c, tm.mod) end
    base = P:def("b64", "mad.wide.u32 %s, %s, %d, %s;", c, tm.stride * z, base)
  end
  return base
end

-- The settings of the PTX forms' passes (kiln.settings), each list led by its default: trip
-- (M.trip), pipe (M.pipelined), back (M.backward), reductions (M.one_reduction).
M.SETTINGS = {
  trip = { "auto", "1", "2", "4", "8" }, pipe = { "auto", "0", "1" }, back = { "1", "0" }, reductions = { "1", "2" },
}

-- Vectors a trip of a re-read row: the most that divide the thread's N and are at most
-- the trip setting (1, 2, 4 or 8), else info.reread_u, else 4; but a
-- pass that is not pipelined over N vectors not a multiple of 4 takes trips of up to 8 (layer
-- norm at N = 5 and 7 in one trip: 1.06-1.13x trips of one on an H200; the pipelined
-- passes keep small trips: softmax's 5-7 in one trip 0.93x).
function M.trip(info)
  local v = settings.get("trip")
  local N = info.L.N
  local most = tonumber(v) or info.reread_u or 4
  if v == "auto" and N % 4 ~= 0 and not M.pipelined(info) then most = 8 end
  local U = math.min(N, most)
  while N % U ~= 0 do U = U - 1 end
  return U
end

-- Whether a row of N vectors a thread is re-read in trips of one (no divisor 2 to 4: 5, 7, 11, ...).
function M.odd_trips(N)
  return N > 1 and N % 2 ~= 0 and N % 3 ~= 0
end

-- Whether the loop over trips of a pass loads the next trip's vectors before this trip's work
-- (software pipelined: one trip's loads in flight while the other's fold): the re-read rows of
-- softmax, log_softmax and rmsnorm. On an H200 (graph replays, 4096 and 16384 rows of 65536,
-- against the loop without): softmax with its statistics 1.19-1.21x, with
-- a sink 1.18-1.20x, rmsnorm_residual_fp8_rowwise 1.05-1.06x, rmsnorm with a residual 1.09-1.11x
-- (where the cluster forms decline); and bf16 and fp16 softmax and log_softmax 1.11-1.14x their
-- staged cluster form (rowfwd_staged_ptx). Not layer norm (64 registers and 416 bytes of
-- spills: 0.24x; with a residual at 32768 0.48x), nor a trip of more than 24 words (M.new),
-- nor a row reduction's one pass at 1024 threads (0.92-0.95x the CUDA form at 512 rows,
-- 0.99-1.00x at 4096: rowred_ptx keeps the CUDA form). The pipe setting 0 or 1: no loop, every
-- loop.
local PIPELINED = { softmax = true, log_softmax = true, rmsnorm = true }
function M.pipelined(info)
  local v = settings.get("pipe")
  if v ~= "auto" then return v == "1" and M.loops(info) end
  return info.strategy == "reread" and PIPELINED[info.op] == true and M.loops(info)
end

-- Whether a re-read row's second pass walks it from its end (the default); the back setting 0
-- walks every pass from the start.
function M.backward() return settings.get("back") ~= "0" end

-- Whether a forward row takes its two statistics in one reduction of pairs (layernorm's mean
-- and M2, softmax's max and sum of exps): the default; the reductions setting 2 reduces the
-- first, then the second from it.
function M.one_reduction() return settings.get("reductions") ~= "2" end

-- Whether a pass over the row is a loop over trips of vectors (a row re-read from L2, or a
-- row reduction's one pass of more than 8 vectors a thread), not unrolled.
function M.loops(info)
  return info.strategy == "reread" or info.strategy == "stream" and info.L.N > 8
end

-- Whether the layout and the inputs suit these forms: nil, or why not.
function M.declines(info, group, g)
  local L = info.L
  if info.strategy ~= "regs" and info.strategy ~= "reread" and info.strategy ~= "stream" then return "strategy " .. info.strategy end
  if not L.even and M.loops(info) then return "a ragged row re-read (H not a multiple of the threads' vectors)" end
  if not ptx.pow2(L.P) or not ptx.pow2(L.RPC) then return "threads per row or rows per CTA not a power of two" end
  if info.strategy == "regs" and L.N > 8 then return "more than 8 vectors per thread held" end
  -- (re-read rows take any N, measured; a row reduction's looped pass keeps trips of 4)
  if info.strategy == "stream" and M.loops(info) and L.N % 4 ~= 0 then return "vectors per thread not a multiple of 4" end
  for _, uid in ipairs(group.inputs) do
    local t = g.by_uid[uid]
    if t.role ~= "constant" and t.role ~= "scalar" then
      local how = info.access[uid]
      if not M.IN[t.dtype] then return t.name .. " is " .. t.dtype end
      if how == "row" then
        if not rowgen.per_row(t, info) and not M.one_value(t) and not rowgen.row_offset(t, info) then
          return t.name .. " is not one value per row at a compile-time place"
        end
      elseif how == "gather" and not (rowgen.col_block(t, info) and rowgen.row_offset(t, info)) then
        return t.name .. " is gathered"
      elseif (L.V * dtypes.size(t.dtype)) % 4 ~= 0 then
        return "vectors narrower than a word"
      end
    end
  end
  return nil
end

-- The L2 policy of the row reads (rowgen.l2_policy), from `rows` (a b64 register) and the
-- widest row input: before the row loop of a persistent kernel (M.new's `at`).
function M.l2_policy(P, info, g, inputs, rows)
  local _, _, mode = rowgen.row_hint()
  if not mode then return end
  local z = 1
  for _, uid in ipairs(inputs) do
    if info.access[uid] == "full" then z = math.max(z, dtypes.size(g.by_uid[uid].dtype)) end
  end
  rowgen.l2_policy(P, mode, rows, -(-rowgen.L2_LAST_BYTES // (info.L.H * z)))
end

-- The thread's place, into R (M.new's): R.tid, R.lane, R.slot, R.row, R.valid; a row past the
-- end (RPC > 1) computes the last row and stores nothing. A wide row split over a cluster of
-- R.CL CTAs (row.lua): the cluster's row, this CTA's part of it (R.rank), and the thread's
-- first vector in the row (R.col); peers' shared memory is written only after the barrier
-- that this arrive opens (their CTAs have started)
local function place(R, inputs, at)
  if at then
    R.tid, R.lane, R.slot, R.row, R.valid = at.tid, at.lane, at.slot, at.row, at.valid
    return
  end
  local P, def, info, L = R.P, R.def, R.info, R.info.L
  -- (a product of dims multiplied here: a PTX module takes one dim an operand)
  local f = info.row_factors
  local rows = (#f == 1 and type(f[1]) == "string") and P:input("l", string.format("(kiln_i64)(%s)", info.rows))
    or partials_ptx.product(P, f)
  local tid, cta, lane, slot = P:place(L.P, L.RPC)
  if R.CL > 1 then
    cta = def("b32", "mov.u32 %s, %%clusterid.x;")
    R.rank = def("b32", "mov.u32 %s, %%cluster_ctarank;")
    R.col = def("b32", "mad.lo.s32 %s, %s, %d, %s;", R.rank, L.HC // L.V, lane)
    R.put("barrier.cluster.arrive.relaxed.aligned;")
  end
  local row = def("b64", "cvt.u64.u32 %s, %s;", cta)
  local valid
  if slot then
    local r0 = def("b64", "mad.wide.u32 %s, %s, %d, %s;", cta, L.RPC, def("b64", "cvt.u64.u32 %s, %s;", slot))
    valid = def("pred", "setp.lt.s64 %s, %s, %s;", r0, rows)
    row = def("b64", "min.s64 %s, %s, %s;", r0, def("b64", "add.s64 %s, %s, -1;", rows))
  end
  M.l2_policy(P, info, R.g, inputs, rows)
  R.tid, R.lane, R.slot, R.row, R.valid = tid, lane, slot, row, valid
end

-- The global address register of tensor uid (made once a kernel).
local function gptr(R, uid, writable)
  if not R.ptrs[uid] then R.ptrs[uid] = R.P:global(R.P:input("l", R.K:ptr(uid, writable))) end
  return R.ptrs[uid]
end

-- R.base: every source's register per row or per kernel (scalars, constants; the vectors'
-- elements have a register each, M.vectors)
local function load_bases(R, inputs)
  local P, def, g, info, row = R.P, R.def, R.g, R.info, R.row
  for _, uid in ipairs(inputs) do
    local t = g.by_uid[uid]
    if t.role == "constant" then
      R.base[uid] = ptx.f32(t.value)
    elseif t.role == "scalar" then
      R.base[uid] = P:input("f", R.K:scalar(uid))
    elseif info.access[uid] == "row" then
      local addr = M.one_value(t) and gptr(R, uid)
        or rowgen.per_row(t, info) and def("b64", "mad.lo.s64 %s, %s, %d, %s;", row, dtypes.size(t.dtype), gptr(R, uid))
        or M.at_row_offset(P, row, rowgen.row_offset(t, info), dtypes.size(t.dtype), gptr(R, uid))
      if t.dtype == "fp32" then R.base[uid] = def("b32", "ld.global.nc.f32 %s, [%s];", addr)
      else
        local h = def("b16", "ld.global.nc.b16 %s, [%s];", addr)
        R.base[uid] = t.dtype == "bf16" and def("b32", "mov.b32 %s, {0, %s};", h) or def("b32", "cvt.f32.f16 %s, %s;", h)
      end
    end
  end
end

-- Bytes from a thread's vector k of elements of z bytes to its vector k + 1.
local function kstep(R, z) return R.info.L.P * R.info.L.V * z end

-- A thread's first vector of tensor uid (row-major per element, or the one row of a column
-- tensor): the address register; vector k is kstep(z) * k bytes on
local function vaddr(R, uid)
  if R.vbase[uid] then return R.vbase[uid] end
  local info, L, def = R.info, R.info.L, R.def
  local t = R.g.by_uid[uid]
  local z = dtypes.size(t.dtype)
  -- (an element output of the kernel; a tensor another kernel wrote, scratch, is read as its access says)
  local writable = info.access[uid] == nil and lower.written(t)
  R.K:need_align(uid, math.min(16, L.V * z))
  local b = def("b64", "mad.wide.u32 %s, %s, %d, %s;", R.col or R.lane, L.V * z, gptr(R, uid, writable))
  if writable or info.access[uid] == "full" then b = def("b64", "mad.lo.s64 %s, %s, %d, %s;", R.row, L.H * z, b)
  elseif info.access[uid] == "gather" then b = M.at_row_offset(R.P, R.row, rowgen.row_offset(t, info), z, b) end
  R.vbase[uid] = b
  return b
end

-- The graph sources of `nodes` and `extra` (what the group does not compute itself).
local function sources(R, nodes, extra) return rowgen.sources(nodes, extra, R.made, R.base) end

-- How the passes walk the row, into R: R.reread (a loop over trips of R.U vectors, the
-- sources read again from L2 in each pass; addresses advance by U vectors a trip) or all N
-- vectors unrolled (U = N), and R.pipe (M.pipelined)
local function plan_trips(R, inputs)
  local info, L = R.info, R.info.L
  local reread = M.loops(info)
  local U = reread and M.trip(info) or L.N
  R.reread, R.U = reread, U
  -- every pass's trips pipelined when the kernel's row and column inputs come to at most 24
  -- words a thread a trip (the next trip's beside them in 64 registers: 32 spilled 140-208
  -- bytes, rmsnorm's x and w 0.72x the loop without; a pass alone pipelined leaves the
  -- others at 64 registers too)
  local words_a_trip = 0
  for _, uid in ipairs(inputs) do
    local how = info.access[uid]
    if how == "full" or how == "col" then words_a_trip = words_a_trip + U * L.V * dtypes.size(R.g.by_uid[uid].dtype) // 4 end
  end
  R.pipe = reread and L.N // U > 1 and words_a_trip <= 24 and M.pipelined(info)
end

-- x where vector q is in the row, else `other` (default 0): what a reduction sees of a lane
-- past the row
local function masked(R, q, x, other)
  local p = R.inrow(q)
  return p and R.def("b32", "selp.b32 %s, %s, %s, %s;", x, other or 0, p) or x
end

-- A re-read row's walk (M.vectors's `walk`) before its loop: each tensor's address at the
-- walk's first trip (walk.cur), the trip counter and the loop's label
local function start_walk(R, walk, outs)
  local def, N, U = R.def, R.info.L.N, R.U
  -- (every second pass walks the row from its end: what it reads first, the previous pass
  -- read last, still in L2; 1.06-1.09x on rows of 65536, level elsewhere)
  R.passes = R.passes + 1
  walk.back = R.passes % 2 == 0 and M.backward()
  local function start(uid)
    if not walk.back then return def("b64", "mov.b64 %s, %s;", vaddr(R, uid)) end
    return def("b64", "add.s64 %s, %s, %d;", vaddr(R, uid), (N // U - 1) * U * kstep(R, dtypes.size(R.g.by_uid[uid].dtype)))
  end
  for _, uid in ipairs(walk.uids) do walk.cur[uid] = start(uid) end
  for _, uid in ipairs(outs) do walk.cur[uid] = start(uid) end
  walk.trips = def("b32", "mov.b32 %s, 0;")
  walk.top = R.P:label()
end

-- The words of the walk's trip `ahead` trips on (0: this one), under predicate `pred` (unfilled)
local function load_trip(R, walk, ahead, pred)
  local P, U, V = R.P, R.U, R.info.L.V
  local ws = {}
  for _, uid in ipairs(walk.uids) do
    local t = R.g.by_uid[uid]
    local z = dtypes.size(t.dtype)
    -- (a column tensor is read by every row)
    local space = R.info.access[uid] == "full" and R.LD or (walk.again and "global" or "global.nc")
    local at = ahead * (walk.back and -U or U) * kstep(R, z)
    ws[uid] = {}
    for q = 0, U - 1 do
      ws[uid][q] = P:load(space, walk.cur[uid], at + q * kstep(R, z), V * z, P:both(R.inrow(q), pred), pred ~= nil)
    end
  end
  return ws
end

-- The trip's vectors, each as M.vectors's `body` sees it.
local function each_vector(R, walk, words, body, form)
  local P, g = R.P, R.g
  for q = 0, R.U - 1 do
    local rd = {}
    for uid, w in pairs(words) do rd[uid] = P:reader(w[q], g.by_uid[uid].dtype, form) end
    body(q, function(j)
      local value = {}
      for uid, v in pairs(R.base) do value[uid] = v end
      for uid, r in pairs(rd) do value[uid] = r(j) end
      return value
    end, function(uid, vals)
      local t = g.by_uid[uid]
      local pred = P:both(R.inrow(q), R.valid)
      P:store(R.ST, walk.cur[uid], q * kstep(R, dtypes.size(t.dtype)), P:pack(vals, t.dtype), pred)
    end, words)
  end
end

-- A re-read row's trip's end: the next trip's words (pipelined, `nextw`) into this one's
-- registers, the addresses on a trip, the loop's branch
local function end_trip(R, walk, words, nextw)
  local put, def, N, U = R.put, R.def, R.info.L.N, R.U
  if nextw then
    for _, uid in ipairs(walk.uids) do
      for q = 0, U - 1 do
        for i, w in ipairs(words[uid][q]) do put("mov.b32 %s, %s;", w, nextw[uid][q][i]) end
      end
    end
  end
  for uid, r in pairs(walk.cur) do
    put("add.s64 %s, %s, %d;", r, r, (walk.back and -U or U) * kstep(R, dtypes.size(R.g.by_uid[uid].dtype)))
  end
  put("add.s32 %s, %s, 1;", walk.trips, walk.trips)
  put("@%s bra.uni %s;", def("pred", "setp.lt.s32 %s, %s, %d;", walk.trips, N // U), walk.top)
end

-- Every vector of the row, as `body(q, value_at, store, words)`: value_at(j) gives element
-- j's values (the loaded sources, the per-kernel and per-row ones), store(uid, vals) writes
-- vector q of an element output. Held in registers: all N vectors' loads first, then the
-- vectors unrolled (k = q); re-read: a loop over trips of U vectors (plan_trips). `again`:
-- column tensors read with plain loads, not .nc (ptxas then keeps no register alive between
-- a first read and this one: it loads the values again)
local function vectors(R, uids, outs, body, form, again)
  local walk = { uids = uids, again = again, back = false,
                 cur = setmetatable({}, { __index = function(_, uid) return vaddr(R, uid) end }) }  -- unrolled: bases
  if R.reread then start_walk(R, walk, outs) end
  local words, nextw
  if R.pipe then
    -- the first trip's words before the loop; each trip then loads the next one's first
    words = load_trip(R, walk, 0)
    R.P:at(walk.top)
    nextw = load_trip(R, walk, 1, R.def("pred", "setp.lt.s32 %s, %s, %d;", walk.trips, R.info.L.N // R.U - 1))
  else
    if walk.top then R.P:at(walk.top) end
    words = load_trip(R, walk, 0)
  end
  each_vector(R, walk, words, body, form)
  if R.reread then end_trip(R, walk, words, nextw) end
end

-- A pass over the row's vectors of `uids` storing `outs`, as `body(q, value_at, store)`:
-- the first pass loads them (and, held in registers, keeps their words: R.held[uid][q]);
-- later passes of a held row read those words, of a re-read row load them again. `fresh`
-- lists column tensors a held row's later pass loads again rather than holding them
-- (fewer registers live across the reduction).
local function pass(R, uids, outs, form, body, fresh)
  local held = R.held
  local first = false
  for _, uid in ipairs(uids) do if not held[uid] then first = true end end
  if R.reread or first then
    local all = { table.unpack(uids) }
    for _, uid in ipairs(fresh or {}) do all[#all + 1] = uid end
    vectors(R, all, outs, function(q, value_at, store, words)
      for _, uid in ipairs(uids) do
        held[uid] = held[uid] or {}
        held[uid][q] = words[uid][q]
      end
      body(q, value_at, store)
    end, form)
    return
  end
  vectors(R, fresh or {}, outs, function(q, value_at, store)
    local rd = {}
    for _, uid in ipairs(uids) do rd[uid] = R.P:reader(held[uid][q], R.g.by_uid[uid].dtype, form) end
    body(q, function(j)
      local value = value_at(j)
      for uid, r in pairs(rd) do value[uid] = r(j) end
      return value
    end, store)
  end, nil, true)
end

-- A shared float array `tag` of n (declared in the kernel): its address.
local function shared_array(R, tag, n)
  R.K.shared[#R.K.shared + 1] = string.format("  __shared__ __align__(16) float %s[%d];", tag, n)
  return R.P:shared(R.P:input("l", tag))
end
-- The warp's part of allreduce: v combined over the row's lanes of a warp.
local function warp_reduce(R, v, op)
  local Pn = R.info.L.P
  if op == "max.u32" and Pn >= 32 then return R.def("b32", "redux.sync.max.u32 %s, %s, -1;", v) end
  return R.P:butterfly(v, math.min(Pn, 32), op)
end
-- The shared array `tag` of a value a warp (declared there): its address.
local function warp_array(R, tag) return shared_array(R, tag, R.info.L.block // 32) end
-- Whether the thread is its warp's first lane (the one that stores the warp's value).
local function warp_lead(R) return R.def("pred", "setp.eq.s32 %s, %s, 0;", R.def("b32", "and.b32 %s, %s, 31;", R.tid)) end
-- The row's warps' values in array `arr` folded in warp order (after the barrier).
local function fold_warps(R, arr, op)
  local W = R.info.L.P // 32
  local first = R.slot and R.def("b32", "mad.lo.s32 %s, %s, %d, %s;", R.slot, W * 4, arr) or arr
  return R.P:load_fold("shared", first, 0, W, op)
end
-- The cluster's shared array `tag`c of n (P:cluster_fold, P:cluster_share): its address; the
-- first one waits for the peers' CTAs to have started
local function cluster_array(R, tag, n)
  local carr = shared_array(R, tag .. "c", n)
  if R.cluster_opened == nil then
    R.put("barrier.cluster.wait.aligned;")
    R.cluster_opened = true
  end
  return carr
end

-- A row's reduction of v over its P threads (`op`: add.f32, max.NaN.f32, or max.u32 with one
-- redux.sync a warp): butterflies, then (P > 32) its warps in order through shared memory
-- (array `tag`)
local function allreduce(R, v, tag, op)
  op = op or "add.f32"
  v = warp_reduce(R, v, op)
  if R.info.L.P <= 32 then return v end
  local arr = warp_array(R, tag)
  local lead = warp_lead(R)
  local mine = R.def("b32", "mad.lo.s32 %s, %s, 4, %s;", R.def("b32", "shr.u32 %s, %s, 5;", R.tid), arr)
  R.put("@%s st.shared.f32 [%s], %s;", lead, mine, v)
  R.put("bar.sync 0;")
  local s = fold_warps(R, arr, op)
  if R.CL == 1 then return s end
  -- the cluster's CTAs: through each other's shared arrays (P:cluster_fold)
  local carr = cluster_array(R, tag, R.CL)
  return R.P:cluster_fold(carr, R.rank, R.tid, R.CL, { s }, op)[1]
end

-- Several values over the row's threads in one meeting (list of { v, tag, op }): each warp's
-- lead stores them all before one barrier, then each is folded as allreduce folds it (the
-- same bits); one value, or over a cluster, one allreduce each.
local function allreduce_all(R, list)
  local out = {}
  if R.info.L.P <= 32 or R.CL > 1 or #list == 1 then
    for i, a in ipairs(list) do out[i] = allreduce(R, a[1], a[2], a[3]) end
    return out
  end
  local lead, warp = warp_lead(R), R.def("b32", "shr.u32 %s, %s, 5;", R.tid)
  local arrs = {}
  for i, a in ipairs(list) do
    local v = warp_reduce(R, a[1], a[3] or "add.f32")
    arrs[i] = warp_array(R, a[2])
    R.put("@%s st.shared.f32 [%s], %s;", lead, R.def("b32", "mad.lo.s32 %s, %s, 4, %s;", warp, arrs[i]), v)
  end
  R.put("bar.sync 0;")
  for i, a in ipairs(list) do out[i] = fold_warps(R, arrs[i], a[3] or "add.f32") end
  return out
end

-- A row's pair of statistics over its P threads in allreduce's one meeting: `bfly(a, b,
-- lanes, k)` combines the pairs of `lanes` lanes, each pair covering k threads (1, 32, P), by
-- butterflies (meanvar_ptx's (sum, M2), rowsm_ptx's (max, sum of exps)). Past the warps'
-- butterflies each warp loads the W warps' pairs one a lane through shared memory (array
-- `tag`) and butterflies them again, as then the cluster's CTAs' pairs: a few registers and
-- log2 W steps, not W pairs held and folded in a chain.
local function allreduce_pair(R, x, y, bfly, tag)
  local P, put, def, Pn, CL = R.P, R.put, R.def, R.info.L.P, R.CL
  x, y = bfly(x, y, math.min(Pn, 32), 1)
  if Pn <= 32 then return x, y end
  local W, NW = Pn // 32, R.info.L.block // 32
  local arr = shared_array(R, tag, 2 * NW)
  local lane31 = def("b32", "and.b32 %s, %s, 31;", R.tid)
  local lead = def("pred", "setp.eq.s32 %s, %s, 0;", lane31)
  local mine = def("b32", "mad.lo.s32 %s, %s, 4, %s;", def("b32", "shr.u32 %s, %s, 5;", R.tid), arr)
  put("@%s st.shared.f32 [%s], %s;", lead, mine, x)
  put("@%s st.shared.f32 [%s+%d], %s;", lead, mine, NW * 4, y)
  put("bar.sync 0;")
  local first = R.slot and def("b32", "mad.lo.s32 %s, %s, %d, %s;", R.slot, W * 4, arr) or arr
  local at = def("b32", "mad.lo.s32 %s, %s, 4, %s;", def("b32", "and.b32 %s, %s, %d;", lane31, W - 1), first)
  x, y = bfly(def("b32", "ld.shared.f32 %s, [%s];", at), def("b32", "ld.shared.f32 %s, [%s+%d];", at, NW * 4), W, 32)
  if CL == 1 then return x, y end
  local carr = cluster_array(R, tag, 2 * CL)
  P:cluster_share(carr, R.rank, R.tid, CL, { x, y })
  local cat = def("b32", "mad.lo.s32 %s, %s, 4, %s;", def("b32", "and.b32 %s, %s, %d;", lane31, CL - 1), carr)
  return bfly(def("b32", "ld.shared.f32 %s, [%s];", cat), def("b32", "ld.shared.f32 %s, [%s+%d];", cat, CL * 4), CL, Pn)
end

-- Per-row outputs { {uid, register}, ... }, written by the row's first thread.
local function row_outputs(R, list)
  if #list == 0 then return end
  local def = R.def
  local first = def("pred", "setp.eq.s32 %s, %s, 0;", R.col or R.lane)
  if R.valid then first = def("pred", "and.pred %s, %s, %s;", first, R.valid) end
  for _, s in ipairs(list) do
    local t = R.g.by_uid[s[1]]
    local addr = def("b64", "mad.lo.s64 %s, %s, %d, %s;", R.row, dtypes.size(t.dtype), gptr(R, s[1], true))
    if t.dtype == "fp32" then R.put("@%s st.global.f32 [%s], %s;", first, addr, s[2])
    else
      local cvt = t.dtype == "bf16" and "cvt.rn.bf16.f32" or "cvt.rn.f16.f32"
      R.put("@%s st.global.b16 [%s], %s;", first, addr, def("b16", cvt .. " %s, %s;", s[2]))
    end
  end
end

-- R's operations, which the engines call as R.name(...)
local OPERATIONS = {
  gptr = gptr, sources = sources, masked = masked, vectors = vectors, pass = pass, allreduce = allreduce,
  allreduce_all = allreduce_all, allreduce_pair = allreduce_pair, row_outputs = row_outputs,
}

-- The kernel's PTX builder R for the group (its inputs; `made`: what the group computes).
-- R.P is the ptx builder; R.base[uid] the register of a constant, scalar or per-row source;
-- R.lane, R.row (b64), R.valid (a row past the end: nil when RPC is 1), R.tid. A persistent
-- kernel passes `at` = { P, tid, lane, slot, row, valid } from inside its row loop (row
-- clamped to the last row), and R's loads and addresses are emitted there. R's operations
-- (OPERATIONS) keep their state in R too: made, CL, the pointers (ptrs) and vector bases
-- (vbase) made, the row hints LD and ST, over a cluster rank and col (place).
function M.new(K, info, g, inputs, made, at)
  local L = info.L
  local P = at and at.P or ptx.new()
  local R = { P = P, K = K, info = info, g = g, made = made, CL = L.CL or 1, base = {}, ptrs = {}, vbase = {} }
  R.put, R.def = function(...) P:put(...) end, function(...) return P:def(...) end
  R.LD, R.ST = rowgen.row_hint()
  place(R, inputs, at)
  load_bases(R, inputs)
  plan_trips(R, inputs)
  -- a ragged row (regs only): vector q of lanes past the row's last vector loads and stores
  -- nothing; inrow(q) is its predicate (nil: every lane's vector q is in the row)
  R.inrow = P:in_row(R.lane, L.P, L.V, L.HC or L.H)
  R.passes, R.held = 0, {}
  R.uniform = L.N * L.P * L.V == (L.HC or L.H)  -- every thread holds N * V elements of the row
  for name, f in pairs(OPERATIONS) do R[name] = function(...) return f(R, ...) end end
  return R
end

-- Why the fused ops or the outputs of a row kernel's group are beyond its PTX form (nil when
-- they are not): the prologue's, epilogue's and per-row ops each with a PTX form (ptxops),
-- element outputs ptxops can write, per-row outputs row_outputs can, other output kinds only
-- those `kinds` names (a set), and the values read again rounded in registers.
function M.group_declines(info, group, g, target, kinds)
  local read_later = pw.read_set(group.nodes)
  for _, list in ipairs({ group.prologue or {}, group.epilogue or {}, group.rowpw or {} }) do
    local bad = ptxops.op_declines(list, g)
    if bad then return bad end
  end
  for _, uid in ipairs(group.outputs) do
    local t = g.by_uid[uid]
    local kind = info.out_kind[uid]
    local bad
    if kind == "elem" then bad = ptxops.output_declines(t, info.L.V, read_later, target)
    elseif kind == "row" then bad = M.row_output_declines(t)
    elseif not (kinds and kinds[kind]) then bad = "output " .. t.name .. " is " .. tostring(kind) end
    if bad then return bad end
  end
  return ptxops.read_again_declines(group.nodes, g, read_later)
end

-- The element outputs the kernel writes among the outputs of `nodes`, by uid.
function M.element_outputs(info, g, nodes)
  local list = {}
  for _, n in ipairs(nodes) do
    for _, uid in pairs(n.outputs) do
      if info.out_kind[uid] == "elem" and lower.written(g.by_uid[uid]) then list[#list + 1] = uid end
    end
  end
  table.sort(list)
  return list
end

-- A per-row output row_outputs can write: nil, or why not.
function M.row_output_declines(t)
  if not M.IN[t.dtype] or not shape.is_row_major(t.dims, t.strides) then return "row output " .. t.name end
  return nil
end

return M
