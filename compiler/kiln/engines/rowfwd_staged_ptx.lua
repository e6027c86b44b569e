-- kiln.engines.rowfwd_staged_ptx: layernorm's, softmax's and log_softmax's wide row over a cluster, staged (the
-- staged backward's shape, rowbwd_ptx.lua, for the forward). Persistent clusters take rows
-- `cluster id + k * clusters`; each CTA copies its part of the next rows into a ring of S
-- shared-memory stages with cp.async (no barrier: a thread reads back only what it copied), so
-- that the SM has rows in flight while this row's reduction waits on the cluster. Per row
-- of layernorm: each thread's (sum, M2) pair, the cluster's mean and M2 in one reduction
-- (meanvar_ptx: warp butterflies, the CTA's warps', then the cluster's CTAs' pairs one a lane:
-- the same bits in every CTA), then y from the staged row; scale and bias are held as loaded.
-- Of softmax and log_softmax: each thread's max and sum of exps in one pass (the sum rescaled
-- to each vector's new max, as rowsm_ptx.lua's re-read row), the cluster's (max, sum) in one
-- reduction of pairs, then y (and the log-sum-exp). The reductions setting 2: the first
-- statistic's reduction, then the second's from it (a cluster barrier each).
local settings = require "kiln.settings"
local dtypes = require "kiln.dtypes"
local ptx = require "kiln.ptx"
local rowgen = require "kiln.engines.rowgen"
local rowptx = require "kiln.engines.rowptx"
local rowsm_ptx = require "kiln.engines.rowsm_ptx"
local meanvar = require "kiln.engines.meanvar_ptx"
local sms = require "kiln.engines.sms"
local lower = require "kiln.lower"

local M = {}

local ELEM = rowptx.IN
local NEG_INF = rowsm_ptx.NEG_INF

-- Stages in the ring, CTAs per SM and rows a cluster meeting carries (R: a stage holds R rows,
-- whose reductions meet together), per op and dtype of x (none: the row re-read); some only
-- over clusters of at least min_cl CTAs of at most `block` threads, or at the row widths
-- `widths` lists (those measured). On an H200 (graph replays, 4096 and 16384 rows, against the
-- re-read; docs/MEMORY_BOUND.md, "Staged over a cluster"): layernorm fp32 1.16x at H = 40960,
-- 1.26x at 65536; bf16 and fp16 at 65536 in clusters of 8 CTAs of 256 threads, 4 an SM,
-- 1.02-1.11x, but 0.82-0.90x at 32768 (clusters of 4) and 0.54-0.93x in other shapes; two or
-- four rows a meeting 0.78-1.05x. Softmax (with its log-sum-exp) at 65536: bf16 1.09-1.10x in
-- layernorm's 16-bit shape, fp32 1.08-1.11x (8 CTAs of 512 threads, 2 an SM), fp16 1.09x; bf16
-- at 32768 0.76-0.91x, fp16 0.81x. With one reduction a row: log_softmax at 65536 1.14-1.15x
-- the re-read in bf16 and fp16, 1.21-1.24x in fp32 (softmax's fp32 shape), fp16 at 32768
-- 0.85-0.88x; 2 or 4 stages, 2 CTAs an SM, 2 rows a meeting 0.82-1.00x, and layernorm and
-- softmax at 32768 0.74-0.92x.
-- The stage setting (kiln.settings) sNcM[bB][rR] stages every dtype's wide layernorm and
-- softmax row, in N stages, M CTAs an SM, CTAs of at most B threads (the smallest such
-- cluster), R rows a meeting; `off` re-reads every row; auto: M.DEFAULT.
local SIXTEEN = { S = 3, C = 4, R = 1, block = 256, min_cl = 8 }
local FP32_SOFTMAX = { S = 3, C = 2, R = 1, widths = { [65536] = true } }
-- (16-bit softmax and log_softmax at 65536: the re-read row pipelined, rowptx.pipelined, measures
-- 1.11-1.14x this form, so they re-read)
M.DEFAULT = {
  layernorm = { fp32 = { S = 3, C = 2, R = 1 }, bf16 = SIXTEEN, fp16 = SIXTEEN },
  softmax = { fp32 = FP32_SOFTMAX },
  log_softmax = { fp32 = FP32_SOFTMAX },
}

-- A stage setting's parts: stages, CTAs an SM, the block cap (or nil), rows a meeting; or nil.
local function stage_parts(v)
  local s, n, rest = v:match("^s([2-4])c([124])(.*)$")
  local b, r = (rest or ""):match("^b(%d+)"), (rest or ""):match("r([124])$")
  local shape = "^" .. (b and "b%d+" or "") .. (r and "r%d" or "") .. "$"
  b = tonumber(b)
  if not s or not rest:match(shape) or (b and not (b >= 64 and b <= 1024 and ptx.pow2(b))) then return nil end
  return tonumber(s), tonumber(n), b, tonumber(r) or 1
end

M.SETTING = { "auto", "off", valid = function(v) return stage_parts(v) ~= nil end,
              want = "auto, off or sNcM[bB][rR] (stages 2-4, CTAs per SM 1, 2 or 4, at most B threads a CTA: 64-1024, rows a meeting 1, 2 or 4)" }

-- The variant for an `op` row of `dtype` (the stage setting's, auto: the default):
-- { S =, C =, R =, block =, min_cl =, widths =, set = }, { off = true }, or nil (the row re-read).
function M.mode(op, dtype)
  local v = settings.get("stage")
  if v == "auto" then return (M.DEFAULT[op] or {})[dtype] end
  if v == "off" then return { off = true } end
  local s, n, b, r = stage_parts(v)
  return { S = s, C = n, R = r, block = b, set = true }
end

-- Whether this form takes the group (analyze's info; L a cluster layout): true, or nil and why.
-- The ports of the ops it takes: the row in, the row out, the per-column inputs, the per-row outputs.
local PORTS = {
  layernorm = { x = "input", y = "Y", cols = { "scale", "bias" }, stats = { "MEAN", "INV_VARIANCE" } },
  softmax = { x = "P", y = "S", cols = {}, stats = { "Stats" } },  -- max and sum_exp outputs: the re-read
  log_softmax = { x = "P", y = "S", cols = {}, stats = { "Stats" } },
}

function M.accepts(info, group, g, L)
  local a = info.anchor
  local ports = PORTS[a.op]
  if not ports then return nil, "not layernorm, softmax or log_softmax" end
  if a.inputs.SINK then return nil, "a sink logit" end
  if #(group.prologue or {}) + #(group.epilogue or {}) + #(group.amax or {}) + #(group.rowred or {}) > 0 then
    return nil, "fused ops"
  end
  if a.inputs.epsilon then return nil, "epsilon is a tensor" end
  if not (L.CL and L.RPC == 1 and L.even and ptx.pow2(L.P)) then return nil, "not an even cluster layout" end
  local x = g.by_uid[a.inputs[ports.x]]
  if info.access[x.uid] ~= "full" then return nil, x.name .. " is not row-major over the element space" end
  if (L.V * dtypes.size(x.dtype)) % 16 ~= 0 then return nil, "vectors narrower than 16 bytes" end
  for _, port in ipairs({ ports.x, table.unpack(ports.cols) }) do
    local uid = a.inputs[port]
    if uid then
      local t = g.by_uid[uid]
      if not ELEM[t.dtype] then return nil, t.name .. " is " .. t.dtype end
      if port ~= ports.x and info.access[uid] ~= "col" then return nil, t.name .. " is not one row of columns" end
      if (L.V * dtypes.size(t.dtype)) % 4 ~= 0 then return nil, "vectors narrower than a word" end
    end
  end
  local is_stat = {}
  for _, port in ipairs(ports.stats) do if a.outputs[port] then is_stat[a.outputs[port]] = true end end
  for uid, k in pairs(info.out_kind) do
    local t = g.by_uid[uid]
    if uid == a.outputs[ports.y] then
      if k ~= "elem" or not ELEM[t.dtype] then return nil, "the output is " .. t.dtype end
    elseif not lower.written(t) then
      -- a statistic nothing reads: not computed
    elseif is_stat[uid] then
      if t.dtype ~= "fp32" or not rowgen.per_row(t, info) then return nil, t.name .. " is not one fp32 value per row" end
    else
      return nil, "outputs beyond the row and its statistics"
    end
  end
  return true
end

-- The sizes the kernel needs (L the cluster layout): { S, R, stage, smem, per_sm, cap, grid_div },
-- or nil and why.
function M.plan(info, g, L, SMEM_MAX)
  local a = info.anchor
  local x = g.by_uid[a.inputs[PORTS[a.op].x]]
  local mode = M.mode(a.op, x.dtype)
  if not mode or mode.off then return nil, "stage setting off, or " .. x.dtype .. " rows re-read" end
  local R = mode.R
  local stage = R * L.HC * dtypes.size(x.dtype)
  local S = math.min(mode.S, SMEM_MAX // stage)
  if S < 2 then return nil, "two stages do not fit in shared memory" end
  local smem = S * stage
  smem = rowgen.dynamic_smem(smem)
  -- CTAs per SM: at most the mode's, at least 64 registers a thread, and what shared memory holds
  local per_sm = math.max(1, math.min(mode.C, 65536 // (L.block * 64), (227 * 1024) // smem))
  -- a cluster a row, several waves of them as the staged backward (row.lua counts clusters)
  return { S = S, R = R, stage = stage, smem = smem, per_sm = per_sm, cap = sms.cap(per_sm), grid_div = 1 }
end

-- The emission's shared state E (M.emit's): the plan st, the layout's sizes (R: rows a
-- meeting), the op's ports and tensors with their element sizes; the steps below add the
-- builder, the operands, registers and labels.
local function state(K, info, g, st)
  local a, L = info.anchor, info.L
  local E = { K = K, info = info, g = g, st = st, a = a, L = L,
              H = L.H, Pn = L.P, N = L.N, V = L.V, S = st.S, CL = L.CL, HC = L.HC, R = st.R,
              ports = PORTS[a.op], is_ln = a.op == "layernorm", is_log = a.op == "log_softmax" }
  E.x, E.w = g.by_uid[a.inputs[E.ports.x]], E.is_ln and g.by_uid[a.inputs.scale]
  E.b = E.is_ln and a.inputs.bias and g.by_uid[a.inputs.bias]
  E.yt = g.by_uid[a.outputs[E.ports.y]]
  E.zx, E.zw, E.zy = dtypes.size(E.x.dtype), E.w and dtypes.size(E.w.dtype), dtypes.size(E.yt.dtype)
  E.zb = E.b and dtypes.size(E.b.dtype)
  E.NW = L.block // 32
  return E
end

-- The tensors' alignment and the kernel's shared arrays.
local function declare(E)
  local K, V, R = E.K, E.V, E.R
  K:need_align(E.x.uid, 16)
  if E.w then K:need_align(E.w.uid, math.min(16, V * E.zw)) end
  if E.b then K:need_align(E.b.uid, math.min(16, V * E.zb)) end
  K:need_align(E.yt.uid, math.min(16, V * E.zy))
  K:add("  extern __shared__ __align__(16) kiln_u8 stg_[];  // [stage][row][the CTA's part of a row of x]")
  -- the two reductions' partial values, parity-buffered by meeting: [reduction][parity][row][warp | rank]
  if E.Pn > 32 then K.shared[#K.shared + 1] = string.format("  __shared__ __align__(16) float rd_[2][2][%d][%d];", R, E.NW) end
  K.shared[#K.shared + 1] = string.format("  __shared__ __align__(16) float rc_[2][2][%d][%d];", R, E.CL)
  rowgen.pdl_entry(K)
end

-- The builder E.P and the kernel's operands (E.o_x, ... E.rows; E.stats: the statistics'
-- global addresses by port, those written).
local function operands(E)
  local K, g, P = E.K, E.g, ptx.new()
  E.P = P
  E.put, E.def = function(...) P:put(...) end, function(...) return P:def(...) end
  local _, ST = rowgen.row_hint()
  E.ST = ST
  E.o_x, E.o_w = P:input("l", K:ptr(E.x.uid)), E.w and P:input("l", K:ptr(E.w.uid))
  E.o_b = E.b and P:input("l", K:ptr(E.b.uid)) or nil
  E.o_y = P:input("l", K:ptr(E.yt.uid, true))
  E.stats = {}
  for _, port in ipairs(E.ports.stats) do
    local uid = E.a.outputs[port]
    if uid and lower.written(g.by_uid[uid]) then E.stats[port] = P:global(P:input("l", K:ptr(uid, true))) end
  end
  E.rows = P:input("l", string.format("(kiln_i64)(%s)", E.info.rows))
  E.o_stg = P:input("l", "stg_")
  E.o_rd = E.Pn > 32 and P:input("l", "&rd_[0][0][0][0]") or nil
  E.o_rc = P:input("l", "&rc_[0][0][0][0]")
end

-- The thread's place: its lane, the cluster (the row: E.first, of E.ncl), the CTA's part of it
-- (E.rank), and the thread's bases of every address.
local function place(E)
  local P, def, V = E.P, E.def, E.V
  local tid, _, lane = P:place(E.Pn, 1)
  E.tid = tid
  E.ncl = def("b64", "cvt.u64.u32 %s, %s;", def("b32", "mov.u32 %s, %%nclusterid.x;"))
  E.first = def("b64", "cvt.u64.u32 %s, %s;", def("b32", "mov.u32 %s, %%clusterid.x;"))
  E.rank = def("b32", "mov.u32 %s, %%cluster_ctarank;")
  local col = def("b32", "mad.lo.s32 %s, %s, %d, %s;", E.rank, E.HC // V, lane)
  E.put("barrier.cluster.arrive.relaxed.aligned;")  -- the peers have started before the first remote store
  local function lane_base(o, z) return def("b64", "mad.wide.u32 %s, %s, %d, %s;", col, V * z, P:global(o)) end
  E.gx = lane_base(E.o_x, E.zx)
  E.gw = E.o_w and lane_base(E.o_w, E.zw)
  E.gy = lane_base(E.o_y, E.zy)
  E.gb = E.o_b and lane_base(E.o_b, E.zb)
  E.sx = def("b32", "mad.lo.s32 %s, %s, %d, %s;", lane, V * E.zx, P:shared(E.o_stg))
end

-- Bytes between a thread's vectors k and k + 1 of elements of z bytes.
local function kstep(E, z) return E.Pn * E.V * z end

-- Scale and bias as loaded (their words: E.ww, E.wb), converted where used.
local function load_columns(E)
  local ww, wb = {}, {}
  for k = 0, E.gw and E.N - 1 or -1 do
    ww[k] = E.P:load("global.nc", E.gw, k * kstep(E, E.zw), E.V * E.zw)
    if E.gb then wb[k] = E.P:load("global.nc", E.gb, k * kstep(E, E.zb), E.V * E.zb) end
  end
  E.ww, E.wb = ww, wb
end

-- Row i (from 0) of the meeting at row rb (a register): rb + i * clusters.
local function nth_row(E, rb, i) return i == 0 and rb or E.def("b64", "mad.lo.s64 %s, %s, %d, %s;", E.ncl, i, rb) end

-- The copies of rows rb + i * clusters (rb a register, i < R) into stage s (a number or a
-- register); zeros past the end.
local function issue(E, rb, s)
  local put, def, st, zx = E.put, E.def, E.st, E.zx
  local d, so
  for i = 0, E.R - 1 do
    local ri = nth_row(E, rb, i)
    local ok = def("pred", "setp.lt.s64 %s, %s, %s;", ri, E.rows)
    local rs = def("b64", "selp.b64 %s, %s, 0, %s;", ri, ok)
    local sz = def("b32", "selp.b32 %s, 16, 0, %s;", ok)
    if not d then
      d, so = E.sx, 0
      if type(s) == "number" then so = s * st.stage
      else d = def("b32", "mad.lo.s32 %s, %s, %d, %s;", s, st.stage, E.sx) end
    end
    local src = def("b64", "mad.lo.s64 %s, %s, %d, %s;", rs, E.H * zx, E.gx)
    for k = 0, E.N - 1 do
      for q = 0, (E.V * zx) // 16 - 1 do
        local o = k * kstep(E, zx) + q * 16
        put("cp.async.cg.shared.global [%s+%d], [%s+%d], 16, %s;", d, so + i * E.HC * zx + o, src, o, sz)
      end
    end
  end
  put("cp.async.commit_group;")
end

-- The reductions' registers: the parity E.par, each warp's slot (E.warp4), its lead and the
-- CTA's array (P > 32); the cluster's array (E.rc) and target (E.to).
local function reduction_registers(E)
  local P, def, tid = E.P, E.def, E.tid
  E.par = def("b32", "mov.b32 %s, 0;")
  if E.Pn > 32 then
    E.rd = P:shared(E.o_rd)
    E.warp4 = def("b32", "mad.lo.s32 %s, %s, 4, %s;", def("b32", "shr.u32 %s, %s, 5;", tid), E.rd)
    E.lead = def("pred", "setp.eq.s32 %s, %s, 0;", def("b32", "and.b32 %s, %s, 31;", tid))
  end
  E.rc = P:shared(E.o_rc)
  E.to = { peer = def("b32", "min.u32 %s, %s, %d;", tid, E.CL - 1), mine = def("pred", "setp.lt.u32 %s, %s, %d;", tid, E.CL) }
end

-- The reductions over the row: butterflies, the CTA's warps in order, the cluster's CTAs in
-- rank order (reduction r of the row at parity par). Reduction r of the meeting's R rows
-- (vs[i + 1] row i's), in one CTA barrier and one cluster barrier.
local function allreduce(E, vs, r, op)
  local P, put, def, Pn, R, NW, CL, par = E.P, E.put, E.def, E.Pn, E.R, E.NW, E.CL, E.par
  op = op or "add.f32"
  for i = 1, R do vs[i] = P:butterfly(vs[i], math.min(Pn, 32), op) end
  if Pn > 32 then
    local at = def("b32", "mad.lo.s32 %s, %s, %d, %s;", par, R * NW * 4, E.warp4)
    for i = 1, R do put("@%s st.shared.f32 [%s+%d], %s;", E.lead, at, (r * 2 * R + i - 1) * NW * 4, vs[i]) end
    put("bar.sync 0;")
    local base = def("b32", "mad.lo.s32 %s, %s, %d, %s;", par, R * NW * 4, E.rd)
    for i = 1, R do vs[i] = P:load_fold("shared", base, (r * 2 * R + i - 1) * NW * 4, NW, op) end
  end
  local pc = def("b32", "mad.lo.s32 %s, %s, %d, %s;", par, R * CL * 4, def("b32", "add.s32 %s, %s, %d;", E.rc, r * 2 * R * CL * 4))
  return P:cluster_fold(pc, E.rank, E.tid, CL, vs, op, E.to)
end

-- Pairs of statistics of the meeting's R rows (layernorm's (sum, M2), softmax's (max, sum of
-- exps)) in one CTA barrier and one cluster barrier, `bfly(a, b, lanes, k)` combining the
-- pairs of `lanes` lanes, each covering k threads (rowptx's R.allreduce_pair): past the
-- butterflies each warp loads the CTA's warps' pairs (then the cluster's CTAs') one a lane
-- and butterflies them again. First values in reduction 0's slots, second in reduction 1's;
-- over the cluster [parity][2R][rank].
local function allreduce_pair(E, ss, ms, bfly)
  local P, put, def, Pn, R, NW, CL, par = E.P, E.put, E.def, E.Pn, E.R, E.NW, E.CL, E.par
  for i = 1, R do ss[i], ms[i] = bfly(ss[i], ms[i], math.min(Pn, 32), 1) end
  local lane31 = def("b32", "and.b32 %s, %s, 31;", E.tid)
  if Pn > 32 then
    local at = def("b32", "mad.lo.s32 %s, %s, %d, %s;", par, R * NW * 4, E.warp4)
    for i = 1, R do
      put("@%s st.shared.f32 [%s+%d], %s;", E.lead, at, (i - 1) * NW * 4, ss[i])
      put("@%s st.shared.f32 [%s+%d], %s;", E.lead, at, (2 * R + i - 1) * NW * 4, ms[i])
    end
    put("bar.sync 0;")
    local wl = def("b32", "mad.lo.s32 %s, %s, 4, %s;", def("b32", "and.b32 %s, %s, %d;", lane31, NW - 1),
      def("b32", "mad.lo.s32 %s, %s, %d, %s;", par, R * NW * 4, E.rd))
    for i = 1, R do
      ss[i], ms[i] = bfly(def("b32", "ld.shared.f32 %s, [%s+%d];", wl, (i - 1) * NW * 4),
        def("b32", "ld.shared.f32 %s, [%s+%d];", wl, (2 * R + i - 1) * NW * 4), NW, 32)
    end
  end
  local pc = def("b32", "mad.lo.s32 %s, %s, %d, %s;", par, 2 * R * CL * 4, E.rc)
  local vs = {}
  for i = 1, R do vs[i], vs[R + i] = ss[i], ms[i] end
  P:cluster_share(pc, E.rank, E.tid, CL, vs, E.to)
  local cl = def("b32", "mad.lo.s32 %s, %s, 4, %s;", def("b32", "and.b32 %s, %s, %d;", lane31, CL - 1), pc)
  for i = 1, R do
    ss[i], ms[i] = bfly(def("b32", "ld.shared.f32 %s, [%s+%d];", cl, (i - 1) * CL * 4),
      def("b32", "ld.shared.f32 %s, [%s+%d];", cl, (R + i - 1) * CL * 4), CL, Pn)
  end
  return ss, ms
end

-- The row loop (row block E.rb, stage E.buf) up to its staged rows (E.cx): the copies S - 1
-- meetings ahead issued, this meeting's waited for.
local function open_loop(E)
  local P, put, def, S = E.P, E.put, E.def, E.S
  E.rb = def("b64", "mov.b64 %s, %s;", E.first)
  local buf = def("b32", "mov.b32 %s, 0;")
  E.buf = buf
  local ahead = def("b64", "mul.lo.s64 %s, %s, %d;", E.ncl, (S - 1) * E.R)
  E.loop, E.done = P:label(), P:label()
  put("barrier.cluster.wait.aligned;")
  put("@%s bra.uni %s;", def("pred", "setp.ge.s64 %s, %s, %s;", E.rb, E.rows), E.done)
  P:at(E.loop)
  local pz = def("pred", "setp.eq.s32 %s, %s, 0;", buf)
  issue(E, def("b64", "add.s64 %s, %s, %s;", E.rb, ahead),
    def("b32", "selp.b32 %s, %d, %s, %s;", S - 1, def("b32", "add.s32 %s, %s, -1;", buf), pz))
  put("cp.async.wait_group %d;", S - 1)
  E.cx = def("b32", "mad.lo.s32 %s, %s, %d, %s;", buf, E.st.stage, E.sx)
end

-- The staged row i's words, read again by each pass in another form (so that ptxas converts
-- them again rather than keeping fp32 values live across the reductions)
local function pass(E, i, form, each)
  for k = 0, E.N - 1 do
    local rx = E.P:reader(E.P:load("shared", E.cx, i * E.HC * E.zx + k * kstep(E, E.zx), E.V * E.zx), E.x.dtype, form)
    for j = 0, E.V - 1 do each(k, j, rx(j)) end
  end
end
-- The predicate of the cluster's first thread, which stores the rows' statistics (nil: none)
local function first_thread(E)
  return next(E.stats) and E.def("pred", "setp.eq.s32 %s, %s, 0;", E.def("b32", "or.b32 %s, %s, %s;", E.tid, E.rank))
end
-- Row i of the meeting (from 1): its row register, and whether it exists (rows past the end,
-- i > 1 only, store nothing; nil: it does)
local function meeting_row(E, i)
  local ri = nth_row(E, E.rb, i - 1)
  return ri, i > 1 and E.def("pred", "setp.lt.s64 %s, %s, %s;", ri, E.rows) or nil
end

-- Layernorm's mean and rstd of the meeting's rows (lists by row).
local function layernorm_statistics(E)
  local def, R, V = E.def, E.R, E.V
  local inv = ptx.f32(1.0 / E.H)
  local acc, mean, rstd, sq = {}, {}, {}, nil
  if rowptx.one_reduction() then
    -- each vector's (sum, M2), combined over the thread's vectors, then over the cluster
    local ms = {}
    for i = 1, R do
      local part, xs = nil, {}
      pass(E, i - 1, "prmt", function(_, j, v)
        xs[j + 1] = v
        if j == V - 1 then part, xs = meanvar.add(E.P, part, meanvar.of_values(E.P, xs)), {} end
      end)
      acc[i], ms[i] = part.s, part.m2
    end
    acc, sq = allreduce_pair(E, acc, ms, function(u, v, lanes, k) return meanvar.butterfly(E.P, u, v, lanes, E.N * V * k) end)
    for i = 1, R do mean[i] = def("b32", "mul.f32 %s, %s, %s;", acc[i], inv) end
  else
    for i = 1, R do pass(E, i - 1, "prmt", function(_, _, v) acc[i] = acc[i] and def("b32", "add.f32 %s, %s, %s;", acc[i], v) or v end) end
    for i, m in ipairs(allreduce(E, acc, 0)) do mean[i] = def("b32", "mul.f32 %s, %s, %s;", m, inv) end
    acc = {}
    for i = 1, R do
      pass(E, i - 1, "bfi", function(_, _, v)
        local d = def("b32", "sub.f32 %s, %s, %s;", v, mean[i])
        acc[i] = acc[i] and def("b32", "fma.rn.f32 %s, %s, %s, %s;", d, d, acc[i]) or def("b32", "mul.f32 %s, %s, %s;", d, d)
      end)
    end
    sq = allreduce(E, acc, 1)
  end
  for i, q in ipairs(sq) do
    rstd[i] = def("b32", "rsqrt.approx.f32 %s, %s;", def("b32", "fma.rn.f32 %s, %s, %s, %s;", q, inv, ptx.f32(E.a.attrs.epsilon)))
  end
  return mean, rstd
end

-- y = (x - mean) * rstd * scale (+ bias), and the row's statistics
local function layernorm_rows(E)
  local P, put, def, V, stats = E.P, E.put, E.def, E.V, E.stats
  local mean, rstd = layernorm_statistics(E)
  local one = first_thread(E)
  for i = 1, E.R do
    local ri, valid = meeting_row(E, i)
    -- y = (x - mean) * rstd * scale (+ bias)
    local gyr = def("b64", "mad.lo.s64 %s, %s, %d, %s;", ri, E.H * E.zy, E.gy)
    local out, rw, rbias = {}, nil, nil
    pass(E, i - 1, nil, function(k, j, v)
      if j == 0 then
        out, rw = {}, P:reader(E.ww[k], E.w.dtype)
        rbias = E.gb and P:reader(E.wb[k], E.b.dtype)
      end
      local xh = def("b32", "mul.f32 %s, %s, %s;", def("b32", "sub.f32 %s, %s, %s;", v, mean[i]), rstd[i])
      out[j + 1] = rbias and def("b32", "fma.rn.f32 %s, %s, %s, %s;", xh, rw(j), rbias(j))
        or def("b32", "mul.f32 %s, %s, %s;", xh, rw(j))
      if j == V - 1 then P:store(E.ST, gyr, k * kstep(E, E.zy), P:pack(out, E.yt.dtype), valid) end
    end)
    -- the row's statistics, by the cluster's first thread
    if one then
      local by = valid and def("pred", "and.pred %s, %s, %s;", one, valid) or one
      if stats.MEAN then put("@%s st.global.f32 [%s], %s;", by, def("b64", "mad.lo.s64 %s, %s, 4, %s;", ri, stats.MEAN), mean[i]) end
      if stats.INV_VARIANCE then
        put("@%s st.global.f32 [%s], %s;", by, def("b64", "mad.lo.s64 %s, %s, 4, %s;", ri, stats.INV_VARIANCE), rstd[i])
      end
    end
  end
end

-- Softmax's max and sum of exps of the meeting's rows (lists by row).
local function softmax_statistics(E)
  local P, def, R, V = E.P, E.def, E.R, E.V
  local tm, ts = {}, {}
  for i = 1, R do
    tm[i], ts[i] = def("b32", "mov.b32 %s, %s;", NEG_INF), def("b32", "mov.b32 %s, 0f00000000;")
    local xs = {}
    pass(E, i - 1, "prmt", function(_, j, v)
      xs[j] = v
      if j == V - 1 then rowsm_ptx.online(P, tm[i], ts[i], V, function(q) return xs[q] end) end
    end)
  end
  if rowptx.one_reduction() then
    return allreduce_pair(E, tm, ts, function(m, s, lanes) return rowsm_ptx.butterfly(P, m, s, lanes) end)
  end
  local mx = allreduce(E, { table.unpack(tm) }, 0, "max.NaN.f32")
  local zs = {}
  for i = 1, R do zs[i] = rowsm_ptx.rescaled(P, tm[i], ts[i], mx[i]) end
  return mx, allreduce(E, zs, 1)
end

-- y = exp(x - max) / sum exp(x - max); a row of -inf gives y = 0
local function softmax_rows(E)
  local P, put, def, V, is_log = E.P, E.put, E.def, E.V, E.is_log
  local mx, z = softmax_statistics(E)
  local one = first_thread(E)
  for i = 1, E.R do
    local ri, valid = meeting_row(E, i)
    local ninf = def("pred", "setp.eq.f32 %s, %s, " .. NEG_INF .. ";", mx[i])
    local mb = def("b32", "selp.f32 %s, 0f00000000, %s, %s;", mx[i], ninf)
    -- softmax: exp(x - M) / Z (0 in a -inf row); log_softmax: x - M - ln Z (-inf there)
    local iz = not is_log and def("b32", "selp.f32 %s, 0f00000000, %s, %s;", P:recip(z[i]), ninf)
    local lz = is_log and rowsm_ptx.logf(P, z[i])
    local gyr = def("b64", "mad.lo.s64 %s, %s, %d, %s;", ri, E.H * E.zy, E.gy)
    local out = {}
    pass(E, i - 1, nil, function(k, j, v)
      if j == 0 then out = {} end
      if is_log then
        local d = def("b32", "sub.f32 %s, %s, %s;", def("b32", "sub.f32 %s, %s, %s;", v, mx[i]), lz)
        out[j + 1] = def("b32", "selp.f32 %s, " .. NEG_INF .. ", %s, %s;", d, ninf)
      else
        out[j + 1] = def("b32", "mul.f32 %s, %s, %s;", rowsm_ptx.exp_from(P, v, mb), iz)
      end
      if j == V - 1 then P:store(E.ST, gyr, k * kstep(E, E.zy), P:pack(out, E.yt.dtype), valid) end
    end)
    -- the row's statistics (as rowsm_ptx.lua's), by the cluster's first thread
    if one then
      local by = valid and def("pred", "and.pred %s, %s, %s;", one, valid) or one
      local lse = rowsm_ptx.lse(P, mx[i], z[i], E.a.attrs.stats_use_log2)
      put("@%s st.global.f32 [%s], %s;", by, def("b64", "mad.lo.s64 %s, %s, 4, %s;", ri, E.stats.Stats), lse)
    end
  end
end

-- The row loop's end: the next stage and parity, the next meeting; past the loop, the
-- copies' wait.
local function close_loop(E)
  local P, put, def, buf, rb, ncl = E.P, E.put, E.def, E.buf, E.rb, E.ncl
  local pl = def("pred", "setp.eq.s32 %s, %s, %d;", buf, E.S - 1)
  put("selp.b32 %s, 0, %s, %s;", buf, def("b32", "add.s32 %s, %s, 1;", buf), pl)
  put("xor.b32 %s, %s, 1;", E.par, E.par)
  if E.R == 1 then put("add.s64 %s, %s, %s;", rb, rb, ncl) else put("mad.lo.s64 %s, %s, %d, %s;", rb, ncl, E.R, rb) end
  put("@%s bra.uni %s;", def("pred", "setp.lt.s64 %s, %s, %s;", rb, E.rows), E.loop)
  P:at(E.done)
  put("cp.async.wait_group 0;")
end

-- The kernel body (lines into K), for analyze's info with the plan st.
function M.emit(K, info, group, g, st)
  local E = state(K, info, g, st)
  declare(E)
  operands(E)
  place(E)
  load_columns(E)
  for s = 0, E.S - 2 do issue(E, s == 0 and E.first or E.def("b64", "mad.lo.s64 %s, %s, %d, %s;", E.ncl, s * E.R, E.first), s) end
  reduction_registers(E)
  open_loop(E)
  if E.is_ln then layernorm_rows(E) else softmax_rows(E) end
  close_loop(E)
  K:asm(E.P)
end

return M
