-- kiln.engines.rowbwd_ptx: the staged backward kernel (rowbwd.lua) with its body written as
-- PTX (kiln.ptx), the same algorithm instruction for instruction: the persistent row loop, the
-- cp.async ring, the column sums in registers, the parity-buffered row reduction and the
-- slot combine. NVRTC then spends ptxas's time only: layernorm_backward compiles in about
-- half the time of the CUDA form (docs/MEMORY_BOUND.md). The code setting cuda keeps the CUDA
-- form (for measuring; rowgen.ptx_wanted).
local dtypes = require "kiln.dtypes"
local ptx = require "kiln.ptx"
local rowgen = require "kiln.engines.rowgen"

local M = {}

local ELEM = { fp32 = true, fp16 = true, bf16 = true }

local pow2, log2 = ptx.pow2, ptx.log2

-- Whether this form takes the backward (analyze's info, layout L, plan st): true, or nil and why.
function M.accepts(info, g, L, st)
  local a = info.anchor
  if not pow2(L.P) or not pow2(L.RPC) then return nil, "threads per row or rows per CTA not a power of two" end
  for _, port in ipairs({ "grad", "input", "scale" }) do
    local t = g.by_uid[a.inputs[port]]
    if not ELEM[t.dtype] then return nil, t.name .. " is " .. t.dtype end
    if (L.V * dtypes.size(t.dtype)) % 4 ~= 0 then return nil, "vectors narrower than a word" end
  end
  local dx = g.by_uid[a.outputs.DX]
  if not ELEM[dx.dtype] or (L.V * dtypes.size(dx.dtype)) % 4 ~= 0 then return nil, "dx is " .. dx.dtype end
  for _, port in ipairs({ "mean", "inv_variance" }) do
    local uid = a.inputs[port]
    if uid and (a.op == "layernorm_backward" or port == "inv_variance") then
      local t = g.by_uid[uid]
      if t.dtype ~= "fp32" or not rowgen.per_row(t, info) then
        return nil, t.name .. " is not one fp32 value per row"
      end
    end
  end
  if st.S < 2 then return nil, "fewer than two stages" end
  if L.CL and L.RPC ~= 1 then return nil, "a cluster's CTA holding several rows" end
  return true
end

-- The emission's shared state E (M.emit's): the plan st, the layout's sizes, the tensors and
-- their element sizes; the steps below add the builder, the operands, registers and labels.
local function state(K, info, g, st)
  local a, L = info.anchor, info.L
  local E = { K = K, info = info, g = g, st = st, a = a, L = L,
              H = L.H, Pn = L.P, N = L.N, V = L.V, RPC = L.RPC, S = st.S,
              -- a row split over a cluster (row.lua): this CTA stages and sums columns rank * HC ... of
              -- each row, the cluster's rows are the cluster id's; HC = H otherwise
              CL = L.CL or 1, HC = L.HC or L.H,
              is_ln = a.op == "layernorm_backward",
              dy = g.by_uid[a.inputs.grad], x = g.by_uid[a.inputs.input], w = g.by_uid[a.inputs.scale],
              dxt = g.by_uid[a.outputs.DX] }
  E.zdy, E.zx, E.zw, E.zdx = dtypes.size(E.dy.dtype), dtypes.size(E.x.dtype), dtypes.size(E.w.dtype), dtypes.size(E.dxt.dtype)
  E.nsums = #info.colsum
  E.vars = E.is_ln and 2 or 1
  E.NW, E.W = L.block // 32, L.P // 32
  return E
end

-- The tensors' alignment and the kernel's shared arrays.
local function declare(E)
  local K, V = E.K, E.V
  for _, uid in ipairs({ E.dy.uid, E.x.uid }) do K:need_align(uid, 16) end
  K:need_align(E.w.uid, math.min(16, V * E.zw))
  K:need_align(E.dxt.uid, math.min(16, V * E.zdx))
  K:add("  extern __shared__ __align__(16) kiln_u8 stg_[];  // [stage][slot][dy row, x row]")
  if E.Pn > 32 then K.shared[#K.shared + 1] = string.format("  __shared__ __align__(16) float rd_[2][%d][%d];", E.vars, E.NW) end
  if E.CL > 1 then K.shared[#K.shared + 1] = string.format("  __shared__ __align__(16) float rc_[2][%d][%d];", E.vars, E.CL) end
  rowgen.pdl_entry(K)  -- the finalize kernel also takes SMs as this grid's CTAs free them
end

-- The builder E.P and the kernel's operands (E.o_dy, ... E.rows).
local function operands(E)
  local K, a = E.K, E.a
  local P = ptx.new()
  E.P = P
  local _, ST = rowgen.row_hint()
  E.ST = ST
  E.o_dy, E.o_x, E.o_w = P:input("l", K:ptr(E.dy.uid)), P:input("l", K:ptr(E.x.uid)), P:input("l", K:ptr(E.w.uid))
  E.o_mean = E.is_ln and P:input("l", K:ptr(a.inputs.mean)) or nil
  E.o_rstd = P:input("l", K:ptr(a.inputs.inv_variance))
  E.o_dx = P:input("l", K:ptr(a.outputs.DX, true))
  E.o_ws = E.nsums > 0 and P:input("l", K:workspace(0)) or nil
  E.rows = P:input("l", string.format("(kiln_i64)(%s)", E.info.rows))
  E.o_stg = P:input("l", "stg_")
  E.o_rd = E.Pn > 32 and P:input("l", "&rd_[0][0][0]") or nil
  E.o_rc = E.CL > 1 and P:input("l", "&rc_[0][0][0]") or nil
  E.put, E.def = function(...) P:put(...) end, function(...) return P:def(...) end
end

-- The thread's place: lane, slot, CTA (E.cta64), the CTAs (E.nct64) and the row blocks (E.nrb).
local function place(E)
  local P, put, def, V, RPC = E.P, E.put, E.def, E.V, E.RPC
  local tid, cta, lane, slot = P:place(E.Pn, RPC)
  local nct = def("b32", "mov.u32 %s, %%nctaid.x;")
  local rank, col = nil, lane  -- col: the thread's first vector in the row
  if E.CL > 1 then
    cta = def("b32", "mov.u32 %s, %%clusterid.x;")
    nct = def("b32", "mov.u32 %s, %%nclusterid.x;")
    rank = def("b32", "mov.u32 %s, %%cluster_ctarank;")
    col = def("b32", "mad.lo.s32 %s, %s, %d, %s;", rank, E.HC // V, lane)
    put("barrier.cluster.arrive.relaxed.aligned;")  -- the peers have started before the first remote store
  end
  E.tid, E.cta, E.lane, E.slot, E.rank, E.col = tid, cta, lane, slot, rank, col
  E.cta64 = def("b64", "cvt.u64.u32 %s, %s;", cta)
  E.nct64 = def("b64", "cvt.u64.u32 %s, %s;", nct)
  E.slot64 = slot and def("b64", "cvt.u64.u32 %s, %s;", slot)
  E.nrb = E.rows
  if RPC > 1 then
    local t = def("b64", "add.s64 %s, %s, %d;", E.rows, RPC - 1)
    E.nrb = def("b64", "shr.s64 %s, %s, %d;", t, log2(RPC))
  end
end

-- Bytes between a thread's vectors k and k + 1 of elements of z bytes.
local function kstep(E, z) return E.Pn * E.V * z end

-- The per-thread bases of every address, and E.inrow.
local function addresses(E)
  local P, def, V, lane = E.P, E.def, E.V, E.lane
  -- a global base plus this thread's first column (bytes per element z)
  local function lane_base(base, z) return def("b64", "mad.wide.u32 %s, %s, %d, %s;", E.col, V * z, base) end
  E.gdy, E.gx = lane_base(P:global(E.o_dy), E.zdy), lane_base(P:global(E.o_x), E.zx)
  E.gw, E.gdx = lane_base(P:global(E.o_w), E.zw), lane_base(P:global(E.o_dx), E.zdx)
  E.grstd = P:global(E.o_rstd)
  E.gmean = E.o_mean and P:global(E.o_mean)
  E.stg = P:shared(E.o_stg)
  local sb = E.slot and def("b32", "mad.lo.s32 %s, %s, %d, %s;", E.slot, E.st.rowb, E.stg) or E.stg
  E.sdy = def("b32", "mad.lo.s32 %s, %s, %d, %s;", lane, V * E.zdy, sb)
  E.sx = def("b32", "mad.lo.s32 %s, %s, %d, %s;", lane, V * E.zx, sb)
  -- a ragged row: vector k of lanes past the row's last vector copies, loads and stores nothing
  -- (its dy and x read as zeros: no term in any sum); inrow(k) is its predicate, nil when every
  -- lane's vector k is in the row
  E.inrow = P:in_row(lane, E.Pn, V, E.HC)
end

-- The scale in fp32 (E.wv) and the column sums (E.cs, zero), per vector k.
local function columns(E)
  local P, def, N, V = E.P, E.def, E.N, E.V
  local wv, cs = {}, {}
  local zero = ptx.f32(0)
  for k = 0, N - 1 do
    local rd = P:reader(P:load("global.nc", E.gw, k * kstep(E, E.zw), V * E.zw, E.inrow(k)), E.w.dtype)
    wv[k] = {}
    for j = 0, V - 1 do wv[k][j] = rd(j) end
  end
  for i = 1, E.nsums do
    cs[i] = {}
    for k = 0, N - 1 do
      cs[i][k] = {}
      for j = 0, V - 1 do cs[i][k][j] = def("b32", "mov.b32 %s, %s;", zero) end
    end
  end
  E.wv, E.cs = wv, cs
end

-- The copies of row block rb (a register) into stage b (a number or a register); zero past the end.
local function issue(E, rb, b)
  local put, def, RPC, st = E.put, E.def, E.RPC, E.st
  local ri = E.slot and def("b64", "mad.lo.s64 %s, %s, %d, %s;", rb, RPC, E.slot64) or rb
  local ok = def("pred", "setp.lt.s64 %s, %s, %s;", ri, E.rows)
  if RPC > 1 then
    local ok2 = def("pred", "setp.lt.s64 %s, %s, %s;", rb, E.nrb)
    ok = def("pred", "and.pred %s, %s, %s;", ok, ok2)
  end
  local rs = def("b64", "selp.b64 %s, %s, 0, %s;", ri, ok)
  local sz = def("b32", "selp.b32 %s, 16, 0, %s;", ok)
  local so = type(b) == "number" and b * st.stage or 0
  local ddy, dx_ = E.sdy, E.sx
  if type(b) ~= "number" then
    local off = def("b32", "mul.lo.s32 %s, %s, %d;", b, st.stage)
    ddy = def("b32", "add.s32 %s, %s, %s;", E.sdy, off)
    dx_ = def("b32", "add.s32 %s, %s, %s;", E.sx, off)
  end
  for _, t in ipairs({ { g = E.gdy, d = ddy, z = E.zdy, off = 0 }, { g = E.gx, d = dx_, z = E.zx, off = E.HC * E.zdy } }) do
    local src = def("b64", "mad.lo.s64 %s, %s, %d, %s;", rs, E.H * t.z, t.g)
    for k = 0, E.N - 1 do
      local p = E.inrow(k)
      for q = 0, (E.V * t.z) // 16 - 1 do
        local o = k * kstep(E, t.z) + q * 16
        put("%scp.async.cg.shared.global [%s+%d], [%s+%d], 16, %s;", p and ("@" .. p .. " ") or "", t.d, so + t.off + o, src, o, sz)
      end
    end
  end
  put("cp.async.commit_group;")
end

-- The statistics of a row into E.nm, E.nr (of the last row past the end: unpredicated loads,
-- which ptxas issues early, a row ahead of their use)
local function stats_load(E, row)
  local def = E.def
  local rc = def("b64", "min.s64 %s, %s, %s;", row, E.last)
  if E.gmean then E.nm = def("b32", "ld.global.nc.f32 %s, [%s];", def("b64", "mad.lo.s64 %s, %s, 4, %s;", rc, E.gmean)) end
  E.nr = def("b32", "ld.global.nc.f32 %s, [%s];", def("b64", "mad.lo.s64 %s, %s, 4, %s;", rc, E.grstd))
end

-- The row reduction's registers: each warp's slot (E.warp4) and lead, the slot's barrier and
-- first warp (P > 32); over a cluster the exchange's array (E.rc) and target (E.to)
local function reduction_registers(E)
  local P, put, def, tid, slot = E.P, E.put, E.def, E.tid, E.slot
  if E.Pn > 32 then
    local rd = P:shared(E.o_rd)
    local wid = def("b32", "shr.u32 %s, %s, 5;", tid)
    E.warp4 = def("b32", "mad.lo.s32 %s, %s, 4, %s;", wid, rd)
    local ln = def("b32", "and.b32 %s, %s, 31;", tid)
    E.lead = def("pred", "setp.eq.s32 %s, %s, 0;", ln)
    E.bar = slot and def("b32", "add.s32 %s, %s, 1;", slot)
    E.mine = slot and def("b32", "mad.lo.s32 %s, %s, %d, %s;", slot, E.W * 4, rd) or rd
  end
  E.loop, E.done = P:label(), P:label()
  if E.CL > 1 then
    -- the cluster's exchange of the row's sums through rc_[parity] (P:cluster_fold), its target
    -- rank and store predicate made once
    E.rc = P:shared(E.o_rc)
    E.to = { peer = def("b32", "min.u32 %s, %s, %d;", tid, E.CL - 1), mine = def("pred", "setp.lt.u32 %s, %s, %d;", tid, E.CL) }
    put("barrier.cluster.wait.aligned;")
  end
end

-- The row loop's registers (row block E.rb, stage E.buf, parity E.par) up to its first row.
local function open_loop(E)
  local P, put, def, nct64, S, RPC = E.P, E.put, E.def, E.nct64, E.S, E.RPC
  E.rb = def("b64", "mov.b64 %s, %s;", E.cta64)
  E.buf, E.par = def("b32", "mov.b32 %s, 0;"), def("b32", "mov.b32 %s, 0;")
  E.ahead = def("b64", "mul.lo.s64 %s, %s, %d;", nct64, S - 1)
  E.step = RPC > 1 and def("b64", "mul.lo.s64 %s, %s, %d;", nct64, RPC) or nct64
  reduction_registers(E)
  local p0 = def("pred", "setp.ge.s64 %s, %s, %s;", E.rb, E.nrb)
  put("@%s bra.uni %s;", p0, E.done)
  stats_load(E, E.slot and def("b64", "mad.lo.s64 %s, %s, %d, %s;", E.cta64, RPC, E.slot64) or E.cta64)  -- rows >= 1 here
  P:at(E.loop)
end

-- A row's start: the copies S - 1 blocks ahead, the row (E.row, E.valid), its statistics
-- (E.mean, E.rstd; the next row's loaded) and its staged rows (E.cdy, E.cx)
local function start_row(E)
  local put, def, RPC, S = E.put, E.def, E.RPC, E.S
  local nb = def("b64", "add.s64 %s, %s, %s;", E.rb, E.ahead)
  local pz = def("pred", "setp.eq.s32 %s, %s, 0;", E.buf)
  local bm = def("b32", "add.s32 %s, %s, -1;", E.buf)
  issue(E, nb, def("b32", "selp.b32 %s, %d, %s, %s;", S - 1, bm, pz))
  local row = E.slot and def("b64", "mad.lo.s64 %s, %s, %d, %s;", E.rb, RPC, E.slot64) or E.rb
  E.row = row
  E.valid = E.slot and def("pred", "setp.lt.s64 %s, %s, %s;", row, E.rows) or nil
  E.mean, E.rstd = E.nm, E.nr
  stats_load(E, def("b64", "add.s64 %s, %s, %s;", row, E.step))
  -- the loop carries the next row's statistics in the registers of the first
  E.carry = {}
  if E.gmean then E.carry[#E.carry + 1] = { E.mean, E.nm } end
  E.carry[#E.carry + 1] = { E.rstd, E.nr }
  put("cp.async.wait_group %d;", S - 1)
  local cur = def("b32", "mul.lo.s32 %s, %s, %d;", E.buf, E.st.stage)
  E.cdy = def("b32", "add.s32 %s, %s, %s;", E.sdy, cur)
  E.cx = def("b32", "add.s32 %s, %s, %s;", E.sx, cur)
  E.vg = E.valid and ("@" .. E.valid .. " ") or ""
end

-- The element values of vector k of the staged row: dy, xh, gg (fp32 registers)
local function values(E, k, ty, tx)
  local P, def = E.P, E.def
  local rdy, rx = P:reader(ty, E.dy.dtype), P:reader(tx, E.x.dtype)
  local e = {}
  for j = 0, E.V - 1 do
    local d, xv = rdy(j), rx(j)
    local xh
    if E.mean then
      local t = def("b32", "sub.f32 %s, %s, %s;", xv, E.mean)
      xh = def("b32", "mul.f32 %s, %s, %s;", t, E.rstd)
    else
      xh = def("b32", "mul.f32 %s, %s, %s;", xv, E.rstd)
    end
    e[j] = { dy = d, xh = xh, gg = def("b32", "mul.f32 %s, %s, %s;", d, E.wv[k][j]) }
  end
  return e
end
-- Vector k of the staged row's dy and x: their words.
local function staged(E, k)
  local P, V, inrow = E.P, E.V, E.inrow
  return P:load("shared", E.cdy, k * kstep(E, E.zdy), V * E.zdy, inrow(k)),
    P:load("shared", E.cx, E.HC * E.zdy + k * kstep(E, E.zx), V * E.zx, inrow(k))
end
-- The column sums take this row's values (only a row that exists).
local function add_sums(E, k, e)
  for i, uid in ipairs(E.info.colsum) do
    for j = 0, E.V - 1 do
      local r = E.cs[i][k][j]
      if uid == E.a.outputs.DSCALE then
        E.put("%sfma.rn.f32 %s, %s, %s, %s;", E.vg, r, e[j].xh, e[j].dy, r)
      else
        E.put("%sadd.f32 %s, %s, %s;", E.vg, r, r, e[j].dy)
      end
    end
  end
end

-- Pass 1: the thread's part of the row's sums (a0 = sum gg, a1 = sum gg * xh), in element
-- order; held rows keep dy's words and xh for pass 2. The sums and the held values.
local function row_sums(E)
  local def, vars = E.def, E.vars
  local acc, held = {}, {}
  for k = 0, E.N - 1 do
    local ty, tx = staged(E, k)
    local e = values(E, k, ty, tx)
    for j = 0, E.V - 1 do
      if E.is_ln then acc[1] = acc[1] and def("b32", "add.f32 %s, %s, %s;", acc[1], e[j].gg) or e[j].gg end
      local a1 = acc[vars]
      acc[vars] = a1 and def("b32", "fma.rn.f32 %s, %s, %s, %s;", e[j].gg, e[j].xh, a1)
        or def("b32", "mul.f32 %s, %s, %s;", e[j].gg, e[j].xh)
    end
    if E.st.hold then
      add_sums(E, k, e)
      held[k] = { ty = ty, e = e }  -- dy as loaded (its words) and xh
    end
  end
  return acc, held
end

-- The row's sums over its threads: warp butterflies, then its warps in order (then the
-- cluster's CTAs).
local function reduce_sums(E, acc)
  local P, put, def, Pn, vars, NW, par = E.P, E.put, E.def, E.Pn, E.vars, E.NW, E.par
  local o = math.min(Pn, 32) // 2
  while o > 0 do
    for i = 1, vars do
      local t = def("b32", "shfl.sync.bfly.b32 %s, %s, %d, 31, -1;", acc[i], o)
      acc[i] = def("b32", "add.f32 %s, %s, %s;", acc[i], t)
    end
    o = o // 2
  end
  if Pn > 32 then
    local pb = def("b32", "mad.lo.s32 %s, %s, %d, %s;", par, vars * NW * 4, E.warp4)
    for i = 1, vars do put("@%s st.shared.f32 [%s+%d], %s;", E.lead, pb, (i - 1) * NW * 4, acc[i]) end
    -- the slots meet at their own barriers (1 + slot): one slot's row can wait on memory while another computes
    if E.bar then put("bar.sync %s, %d;", E.bar, Pn) else put("bar.sync 0;") end
    local base = def("b32", "mad.lo.s32 %s, %s, %d, %s;", par, vars * NW * 4, E.mine)
    for i = 1, vars do acc[i] = P:load_fold("shared", base, (i - 1) * NW * 4, E.W, "add.f32") end
  end
  if E.CL > 1 then
    local pc = def("b32", "mad.lo.s32 %s, %s, %d, %s;", par, vars * E.CL * 4, E.rc)
    acc = P:cluster_fold(pc, E.rank, E.tid, E.CL, acc, "add.f32", E.to)
  end
  return acc
end

-- Pass 2: dx = rstd * (gg - c1 - xh * c2) from the row's sums `acc`, stored when the row
-- exists; the values of vector k from `held`, else the staged row again.
local function dx_pass(E, acc, held)
  local P, def, V = E.P, E.def, E.V
  local inv = ptx.f32(1.0 / E.H)
  local c1 = E.is_ln and def("b32", "mul.f32 %s, %s, %s;", acc[1], inv)
  local c2 = def("b32", "mul.f32 %s, %s, %s;", acc[E.vars], inv)
  local nc2 = def("b32", "neg.f32 %s, %s;", c2)
  local gdxr = def("b64", "mad.lo.s64 %s, %s, %d, %s;", E.row, E.H * E.zdx, E.gdx)
  for k = 0, E.N - 1 do
    local e
    if held[k] then
      -- gg again from the held dy words: fewer registers live across the reduction than gg itself
      local rdy = P:reader(held[k].ty, E.dy.dtype)
      e = {}
      for j = 0, V - 1 do e[j] = { xh = held[k].e[j].xh, gg = def("b32", "mul.f32 %s, %s, %s;", rdy(j), E.wv[k][j]) } end
    else
      local ty, tx = staged(E, k)
      e = values(E, k, ty, tx)
      add_sums(E, k, e)
    end
    local out = {}
    for j = 0, V - 1 do
      local t = c1 and def("b32", "sub.f32 %s, %s, %s;", e[j].gg, c1) or e[j].gg
      local u = def("b32", "fma.rn.f32 %s, %s, %s, %s;", e[j].xh, nc2, t)
      out[j + 1] = def("b32", "mul.f32 %s, %s, %s;", E.rstd, u)
    end
    P:store(E.ST, gdxr, k * kstep(E, E.zdx), P:pack(out, E.dxt.dtype), P:both(E.inrow(k), E.valid))
  end
end

-- The row loop's end: the next stage and parity, the carried statistics, the next row block;
-- past the loop, the copies' wait.
local function close_loop(E)
  local P, put, def, buf, par, rb = E.P, E.put, E.def, E.buf, E.par, E.rb
  local pl = def("pred", "setp.eq.s32 %s, %s, %d;", buf, E.S - 1)
  local b1 = def("b32", "add.s32 %s, %s, 1;", buf)
  put("selp.b32 %s, 0, %s, %s;", buf, b1, pl)
  put("xor.b32 %s, %s, 1;", par, par)
  for _, c in ipairs(E.carry) do put("mov.b32 %s, %s;", c[1], c[2]) end
  put("add.s64 %s, %s, %s;", rb, rb, E.nct64)
  local more = def("pred", "setp.lt.s64 %s, %s, %s;", rb, E.nrb)
  put("@%s bra.uni %s;", more, E.loop)
  P:at(E.done)
  put("cp.async.wait_group 0;")
end

-- The column sums of vector k of sum i: their registers in order.
local function sum_vector(E, i, k)
  local vals = {}
  for j = 0, E.V - 1 do vals[j + 1] = E.cs[i][k][j] end
  return vals
end

-- A CTA of one slot: its column sums straight into its partial row at gws.
local function store_sums(E, gws)
  local base = E.def("b64", "mad.wide.u32 %s, %s, %d, %s;", E.col, E.V * 4, gws)
  for i = 1, E.nsums do
    for k = 0, E.N - 1 do E.P:store("global", base, ((i - 1) * E.H + k * E.Pn * E.V) * 4, sum_vector(E, i, k), E.inrow(k)) end
  end
end

-- A CTA of several slots: their column sums through the free stages, [sum][slot][column],
-- then each column's slots added in order into the partial row at gws (ncols columns)
local function combine_slots(E, gws, ncols)
  local P, put, def, H, RPC, stg = E.P, E.put, E.def, E.H, E.RPC, E.stg
  put("bar.sync 0;")  -- the stages are free: the slots' sums go there, [sum][slot][column]
  local sl = def("b32", "mad.lo.s32 %s, %s, %d, %s;", E.slot, H * 4, stg)
  local base = def("b32", "mad.lo.s32 %s, %s, %d, %s;", E.lane, E.V * 4, sl)
  for i = 1, E.nsums do
    for k = 0, E.N - 1 do P:store("shared", base, ((i - 1) * RPC * H + k * E.Pn * E.V) * 4, sum_vector(E, i, k), E.inrow(k)) end
  end
  put("bar.sync 0;")
  -- once per CTA, a loop: column i of sum s adds its slots in order
  local i = def("b32", "mov.b32 %s, %s;", E.tid)
  local TOP, END = P:label(), P:label()
  put("@%s bra %s;", def("pred", "setp.ge.s32 %s, %s, %d;", i, ncols), END)  -- divergent: plain branches
  P:at(TOP)
  put('.pragma "nounroll";')  -- once per CTA: ptxas's unrolled copies cost compile time only
  local s = pow2(H) and def("b32", "shr.u32 %s, %s, %d;", i, log2(H)) or def("b32", "div.u32 %s, %s, %d;", i, H)
  local col = def("b32", "mad.lo.s32 %s, %s, %d, %s;", s, -H, i)
  local sc = def("b32", "mad.lo.s32 %s, %s, %d, %s;", s, RPC * H, col)
  local ad = def("b32", "mad.lo.s32 %s, %s, 4, %s;", sc, stg)
  local t = def("b32", "ld.shared.f32 %s, [%s];", ad)
  for q = 1, RPC - 1 do
    local u = def("b32", "ld.shared.f32 %s, [%s+%d];", ad, q * H * 4)
    t = def("b32", "add.f32 %s, %s, %s;", t, u)
  end
  local gd = def("b64", "mad.wide.u32 %s, %s, 4, %s;", i, gws)
  put("st.global.f32 [%s], %s;", gd, t)
  put("add.s32 %s, %s, %d;", i, i, E.L.block)
  local more = def("pred", "setp.lt.s32 %s, %s, %d;", i, ncols)
  put("@%s bra %s;", more, TOP)
  P:at(END)
end

-- This CTA's partial row ws[blockIdx.x][nsums * H]: the slots' sums in slot order.
local function partial_row(E)
  if E.nsums == 0 then return end
  local ncols = E.nsums * E.H
  local gws = E.def("b64", "mad.wide.u32 %s, %s, %d, %s;", E.cta, ncols * 4, E.P:global(E.o_ws))
  if E.RPC == 1 then store_sums(E, gws) else combine_slots(E, gws, ncols) end
end

-- The kernel body (lines into K), as rowbwd.emit's.
function M.emit(K, info, g, st)
  local E = state(K, info, g, st)
  declare(E)
  operands(E)
  place(E)
  addresses(E)
  columns(E)
  for s = 0, E.S - 2 do
    local rb = s == 0 and E.cta64 or E.def("b64", "mad.lo.s64 %s, %s, %d, %s;", E.nct64, s, E.cta64)
    issue(E, rb, s)
  end
  E.last = E.def("b64", "add.s64 %s, %s, -1;", E.rows)
  open_loop(E)
  start_row(E)
  local acc, held = row_sums(E)
  dx_pass(E, reduce_sums(E, acc), held)
  close_loop(E)
  partial_row(E)
  K:asm(E.P)
end

return M
