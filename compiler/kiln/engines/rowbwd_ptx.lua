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

-- The kernel body (lines into K), as rowbwd.emit's.
function M.emit(K, info, g, st)
  local a, L = info.anchor, info.L
  local H, Pn, N, V, RPC, S = L.H, L.P, L.N, L.V, L.RPC, st.S
  -- a row split over a cluster (row.lua): this CTA stages and sums columns rank * HC ... of
  -- each row, the cluster's rows are the cluster id's; HC = H otherwise
  local CL, HC = L.CL or 1, L.HC or L.H
  local is_ln = a.op == "layernorm_backward"
  local dy, x, w = g.by_uid[a.inputs.grad], g.by_uid[a.inputs.input], g.by_uid[a.inputs.scale]
  local dxt = g.by_uid[a.outputs.DX]
  local zdy, zx, zw, zdx = dtypes.size(dy.dtype), dtypes.size(x.dtype), dtypes.size(w.dtype), dtypes.size(dxt.dtype)
  for _, uid in ipairs({ dy.uid, x.uid }) do K:need_align(uid, 16) end
  K:need_align(w.uid, math.min(16, V * zw))
  K:need_align(dxt.uid, math.min(16, V * zdx))
  local nsums = #info.colsum
  local vars = is_ln and 2 or 1
  local NW, W = L.block // 32, Pn // 32
  K:add("  extern __shared__ __align__(16) kiln_u8 stg_[];  // [stage][slot][dy row, x row]")
  if Pn > 32 then K.shared[#K.shared + 1] = string.format("  __shared__ __align__(16) float rd_[2][%d][%d];", vars, NW) end
  if CL > 1 then K.shared[#K.shared + 1] = string.format("  __shared__ __align__(16) float rc_[2][%d][%d];", vars, CL) end
  rowgen.pdl_entry(K)  -- the finalize kernel also takes SMs as this grid's CTAs free them
  local P = ptx.new()
  local _, ST = rowgen.row_hint()
  local o_dy, o_x, o_w = P:input("l", K:ptr(dy.uid)), P:input("l", K:ptr(x.uid)), P:input("l", K:ptr(w.uid))
  local o_mean = is_ln and P:input("l", K:ptr(a.inputs.mean)) or nil
  local o_rstd = P:input("l", K:ptr(a.inputs.inv_variance))
  local o_dx = P:input("l", K:ptr(a.outputs.DX, true))
  local o_ws = nsums > 0 and P:input("l", K:workspace(0)) or nil
  local rows = P:input("l", string.format("(kiln_i64)(%s)", info.rows))
  local o_stg = P:input("l", "stg_")
  local o_rd = Pn > 32 and P:input("l", "&rd_[0][0][0]") or nil
  local o_rc = CL > 1 and P:input("l", "&rc_[0][0][0]") or nil
  local put, def = function(...) P:put(...) end, function(...) return P:def(...) end

  -- the thread's place: lane, slot, CTA, and the per-thread bases of every address
  local tid, cta, lane, slot = P:place(Pn, RPC)
  local nct = def("b32", "mov.u32 %s, %%nctaid.x;")
  local rank, col = nil, lane  -- col: the thread's first vector in the row
  if CL > 1 then
    cta = def("b32", "mov.u32 %s, %%clusterid.x;")
    nct = def("b32", "mov.u32 %s, %%nclusterid.x;")
    rank = def("b32", "mov.u32 %s, %%cluster_ctarank;")
    col = def("b32", "mad.lo.s32 %s, %s, %d, %s;", rank, HC // V, lane)
    put("barrier.cluster.arrive.relaxed.aligned;")  -- the peers have started before the first remote store
  end
  local cta64 = def("b64", "cvt.u64.u32 %s, %s;", cta)
  local nct64 = def("b64", "cvt.u64.u32 %s, %s;", nct)
  local slot64 = slot and def("b64", "cvt.u64.u32 %s, %s;", slot)
  local nrb = rows
  if RPC > 1 then
    local t = def("b64", "add.s64 %s, %s, %d;", rows, RPC - 1)
    nrb = def("b64", "shr.s64 %s, %s, %d;", t, log2(RPC))
  end
  -- a global base plus this thread's first column (bytes per element z)
  local function lane_base(base, z) return def("b64", "mad.wide.u32 %s, %s, %d, %s;", col, V * z, base) end
  local gdy, gx = lane_base(P:global(o_dy), zdy), lane_base(P:global(o_x), zx)
  local gw, gdx = lane_base(P:global(o_w), zw), lane_base(P:global(o_dx), zdx)
  local grstd = P:global(o_rstd)
  local gmean = o_mean and P:global(o_mean)
  local stg = P:shared(o_stg)
  local sb = slot and def("b32", "mad.lo.s32 %s, %s, %d, %s;", slot, st.rowb, stg) or stg
  local sdy = def("b32", "mad.lo.s32 %s, %s, %d, %s;", lane, V * zdy, sb)
  local sx = def("b32", "mad.lo.s32 %s, %s, %d, %s;", lane, V * zx, sb)
  local KSTEP = function(z) return Pn * V * z end  -- bytes between a thread's vectors k and k + 1
  -- a ragged row: vector k of lanes past the row's last vector copies, loads and stores nothing
  -- (its dy and x read as zeros: no term in any sum); inrow(k) is its predicate, nil when every
  -- lane's vector k is in the row
  local inrow = P:in_row(lane, Pn, V, HC)

  -- the scale in fp32 and the column sums (zero), per vector k
  local wv, cs = {}, {}
  local zero = ptx.f32(0)
  for k = 0, N - 1 do
    local rd = P:reader(P:load("global.nc", gw, k * KSTEP(zw), V * zw, inrow(k)), w.dtype)
    wv[k] = {}
    for j = 0, V - 1 do wv[k][j] = rd(j) end
  end
  for i = 1, nsums do
    cs[i] = {}
    for k = 0, N - 1 do
      cs[i][k] = {}
      for j = 0, V - 1 do cs[i][k][j] = def("b32", "mov.b32 %s, %s;", zero) end
    end
  end

  -- the copies of row block rb (a register) into stage b (a number or a register); zero past the end
  local function issue(rb, b)
    local ri = slot and def("b64", "mad.lo.s64 %s, %s, %d, %s;", rb, RPC, slot64) or rb
    local ok = def("pred", "setp.lt.s64 %s, %s, %s;", ri, rows)
    if RPC > 1 then
      local ok2 = def("pred", "setp.lt.s64 %s, %s, %s;", rb, nrb)
      ok = def("pred", "and.pred %s, %s, %s;", ok, ok2)
    end
    local rs = def("b64", "selp.b64 %s, %s, 0, %s;", ri, ok)
    local sz = def("b32", "selp.b32 %s, 16, 0, %s;", ok)
    local so = type(b) == "number" and b * st.stage or 0
    local ddy, dx_ = sdy, sx
    if type(b) ~= "number" then
      local off = def("b32", "mul.lo.s32 %s, %s, %d;", b, st.stage)
      ddy = def("b32", "add.s32 %s, %s, %s;", sdy, off)
      dx_ = def("b32", "add.s32 %s, %s, %s;", sx, off)
    end
    for _, t in ipairs({ { g = gdy, d = ddy, z = zdy, off = 0 }, { g = gx, d = dx_, z = zx, off = HC * zdy } }) do
      local src = def("b64", "mad.lo.s64 %s, %s, %d, %s;", rs, H * t.z, t.g)
      for k = 0, N - 1 do
        local p = inrow(k)
        for q = 0, (V * t.z) // 16 - 1 do
          local o = k * KSTEP(t.z) + q * 16
          put("%scp.async.cg.shared.global [%s+%d], [%s+%d], 16, %s;", p and ("@" .. p .. " ") or "", t.d, so + t.off + o, src, o, sz)
        end
      end
    end
    put("cp.async.commit_group;")
  end
  for s = 0, S - 2 do
    local rb = s == 0 and cta64 or def("b64", "mad.lo.s64 %s, %s, %d, %s;", nct64, s, cta64)
    issue(rb, s)
  end

  -- the statistics of a row (of the last row past the end: unpredicated loads, which ptxas
  -- issues early, a row ahead of their use)
  local last = def("b64", "add.s64 %s, %s, -1;", rows)
  local nm, nr
  local function stats_load(row)
    local rc = def("b64", "min.s64 %s, %s, %s;", row, last)
    if gmean then nm = def("b32", "ld.global.nc.f32 %s, [%s];", def("b64", "mad.lo.s64 %s, %s, 4, %s;", rc, gmean)) end
    nr = def("b32", "ld.global.nc.f32 %s, [%s];", def("b64", "mad.lo.s64 %s, %s, 4, %s;", rc, grstd))
  end

  -- the row loop
  local rb = def("b64", "mov.b64 %s, %s;", cta64)
  local buf, par = def("b32", "mov.b32 %s, 0;"), def("b32", "mov.b32 %s, 0;")
  local ahead = def("b64", "mul.lo.s64 %s, %s, %d;", nct64, S - 1)
  local step = RPC > 1 and def("b64", "mul.lo.s64 %s, %s, %d;", nct64, RPC) or nct64
  local warp4, lead, bar, mine
  if Pn > 32 then
    local rd = P:shared(o_rd)
    local wid = def("b32", "shr.u32 %s, %s, 5;", tid)
    warp4 = def("b32", "mad.lo.s32 %s, %s, 4, %s;", wid, rd)
    local ln = def("b32", "and.b32 %s, %s, 31;", tid)
    lead = def("pred", "setp.eq.s32 %s, %s, 0;", ln)
    bar = slot and def("b32", "add.s32 %s, %s, 1;", slot)
    mine = slot and def("b32", "mad.lo.s32 %s, %s, %d, %s;", slot, W * 4, rd) or rd
  end
  local LOOP, DONE = P:label(), P:label()
  local rc, to
  if CL > 1 then
    -- the cluster's exchange of the row's sums through rc_[parity] (P:cluster_fold), its target
    -- rank and store predicate made once
    rc = P:shared(o_rc)
    to = { peer = def("b32", "min.u32 %s, %s, %d;", tid, CL - 1), mine = def("pred", "setp.lt.u32 %s, %s, %d;", tid, CL) }
    put("barrier.cluster.wait.aligned;")
  end
  local p0 = def("pred", "setp.ge.s64 %s, %s, %s;", rb, nrb)
  put("@%s bra.uni %s;", p0, DONE)
  stats_load(slot and def("b64", "mad.lo.s64 %s, %s, %d, %s;", cta64, RPC, slot64) or cta64)  -- rows >= 1 here
  P:at(LOOP)
  do
    local nb = def("b64", "add.s64 %s, %s, %s;", rb, ahead)
    local pz = def("pred", "setp.eq.s32 %s, %s, 0;", buf)
    local bm = def("b32", "add.s32 %s, %s, -1;", buf)
    issue(nb, def("b32", "selp.b32 %s, %d, %s, %s;", S - 1, bm, pz))
  end
  local row = slot and def("b64", "mad.lo.s64 %s, %s, %d, %s;", rb, RPC, slot64) or rb
  local valid = slot and def("pred", "setp.lt.s64 %s, %s, %s;", row, rows) or nil
  local mean, rstd = nm, nr
  stats_load(def("b64", "add.s64 %s, %s, %s;", row, step))
  -- the loop carries the next row's statistics in the registers of the first
  local carry = {}
  if gmean then carry[#carry + 1] = { mean, nm } end
  carry[#carry + 1] = { rstd, nr }
  put("cp.async.wait_group %d;", S - 1)
  local cur = def("b32", "mul.lo.s32 %s, %s, %d;", buf, st.stage)
  local cdy = def("b32", "add.s32 %s, %s, %s;", sdy, cur)
  local cx = def("b32", "add.s32 %s, %s, %s;", sx, cur)
  local vg = valid and ("@" .. valid .. " ") or ""
  -- the element values of vector k of the staged row: dy, xh, gg (fp32 registers)
  local function values(k, ty, tx)
    local rdy, rx = P:reader(ty, dy.dtype), P:reader(tx, x.dtype)
    local e = {}
    for j = 0, V - 1 do
      local d, xv = rdy(j), rx(j)
      local xh
      if mean then
        local t = def("b32", "sub.f32 %s, %s, %s;", xv, mean)
        xh = def("b32", "mul.f32 %s, %s, %s;", t, rstd)
      else
        xh = def("b32", "mul.f32 %s, %s, %s;", xv, rstd)
      end
      e[j] = { dy = d, xh = xh, gg = def("b32", "mul.f32 %s, %s, %s;", d, wv[k][j]) }
    end
    return e
  end
  local function staged(k)
    return P:load("shared", cdy, k * KSTEP(zdy), V * zdy, inrow(k)), P:load("shared", cx, HC * zdy + k * KSTEP(zx), V * zx, inrow(k))
  end
  -- the column sums take this row's values (only a row that exists)
  local function add_sums(k, e)
    for i, uid in ipairs(info.colsum) do
      for j = 0, V - 1 do
        local r = cs[i][k][j]
        if uid == a.outputs.DSCALE then
          put("%sfma.rn.f32 %s, %s, %s, %s;", vg, r, e[j].xh, e[j].dy, r)
        else
          put("%sadd.f32 %s, %s, %s;", vg, r, r, e[j].dy)
        end
      end
    end
  end
  -- pass 1: the row's sums (a0 = sum gg, a1 = sum gg * xh), in element order
  local acc, held = {}, {}
  for k = 0, N - 1 do
    local ty, tx = staged(k)
    local e = values(k, ty, tx)
    for j = 0, V - 1 do
      if is_ln then acc[1] = acc[1] and def("b32", "add.f32 %s, %s, %s;", acc[1], e[j].gg) or e[j].gg end
      local a1 = acc[vars]
      acc[vars] = a1 and def("b32", "fma.rn.f32 %s, %s, %s, %s;", e[j].gg, e[j].xh, a1)
        or def("b32", "mul.f32 %s, %s, %s;", e[j].gg, e[j].xh)
    end
    if st.hold then
      add_sums(k, e)
      held[k] = { ty = ty, e = e }  -- dy as loaded (its words) and xh
    end
  end
  -- the row's sums over its threads: warp butterflies, then its warps in order
  local o = math.min(Pn, 32) // 2
  while o > 0 do
    for i = 1, vars do
      local t = def("b32", "shfl.sync.bfly.b32 %s, %s, %d, 31, -1;", acc[i], o)
      acc[i] = def("b32", "add.f32 %s, %s, %s;", acc[i], t)
    end
    o = o // 2
  end
  if Pn > 32 then
    local pb = def("b32", "mad.lo.s32 %s, %s, %d, %s;", par, vars * NW * 4, warp4)
    for i = 1, vars do put("@%s st.shared.f32 [%s+%d], %s;", lead, pb, (i - 1) * NW * 4, acc[i]) end
    -- the slots meet at their own barriers (1 + slot): one slot's row can wait on memory while another computes
    if bar then put("bar.sync %s, %d;", bar, Pn) else put("bar.sync 0;") end
    local base = def("b32", "mad.lo.s32 %s, %s, %d, %s;", par, vars * NW * 4, mine)
    for i = 1, vars do acc[i] = P:load_fold("shared", base, (i - 1) * NW * 4, W, "add.f32") end
  end
  if CL > 1 then
    local pc = def("b32", "mad.lo.s32 %s, %s, %d, %s;", par, vars * CL * 4, rc)
    acc = P:cluster_fold(pc, rank, tid, CL, acc, "add.f32", to)
  end
  local inv = ptx.f32(1.0 / H)
  local c1 = is_ln and def("b32", "mul.f32 %s, %s, %s;", acc[1], inv)
  local c2 = def("b32", "mul.f32 %s, %s, %s;", acc[vars], inv)
  local nc2 = def("b32", "neg.f32 %s, %s;", c2)
  -- pass 2: dx = rstd * (gg - c1 - xh * c2), stored when the row exists
  local gdxr = def("b64", "mad.lo.s64 %s, %s, %d, %s;", row, H * zdx, gdx)
  for k = 0, N - 1 do
    local e
    if held[k] then
      -- gg again from the held dy words: fewer registers live across the reduction than gg itself
      local rdy = P:reader(held[k].ty, dy.dtype)
      e = {}
      for j = 0, V - 1 do e[j] = { xh = held[k].e[j].xh, gg = def("b32", "mul.f32 %s, %s, %s;", rdy(j), wv[k][j]) } end
    else
      local ty, tx = staged(k)
      e = values(k, ty, tx)
      add_sums(k, e)
    end
    local out = {}
    for j = 0, V - 1 do
      local t = c1 and def("b32", "sub.f32 %s, %s, %s;", e[j].gg, c1) or e[j].gg
      local u = def("b32", "fma.rn.f32 %s, %s, %s, %s;", e[j].xh, nc2, t)
      out[j + 1] = def("b32", "mul.f32 %s, %s, %s;", rstd, u)
    end
    P:store(ST, gdxr, k * KSTEP(zdx), P:pack(out, dxt.dtype), P:both(inrow(k), valid))
  end
  do
    local pl = def("pred", "setp.eq.s32 %s, %s, %d;", buf, S - 1)
    local b1 = def("b32", "add.s32 %s, %s, 1;", buf)
    put("selp.b32 %s, 0, %s, %s;", buf, b1, pl)
    put("xor.b32 %s, %s, 1;", par, par)
    for _, c in ipairs(carry) do put("mov.b32 %s, %s;", c[1], c[2]) end
    put("add.s64 %s, %s, %s;", rb, rb, nct64)
    local more = def("pred", "setp.lt.s64 %s, %s, %s;", rb, nrb)
    put("@%s bra.uni %s;", more, LOOP)
  end
  P:at(DONE)
  put("cp.async.wait_group 0;")

  -- this CTA's partial row ws[blockIdx.x][nsums * H]: the slots' sums in slot order
  if nsums > 0 then
    local ncols = nsums * H
    local gws = def("b64", "mad.wide.u32 %s, %s, %d, %s;", cta, ncols * 4, P:global(o_ws))
    if RPC == 1 then
      local base = def("b64", "mad.wide.u32 %s, %s, %d, %s;", col, V * 4, gws)
      for i = 1, nsums do
        for k = 0, N - 1 do
          local vals = {}
          for j = 0, V - 1 do vals[j + 1] = cs[i][k][j] end
          P:store("global", base, ((i - 1) * H + k * Pn * V) * 4, vals, inrow(k))
        end
      end
    else
      put("bar.sync 0;")  -- the stages are free: the slots' sums go there, [sum][slot][column]
      local sl = def("b32", "mad.lo.s32 %s, %s, %d, %s;", slot, H * 4, stg)
      local base = def("b32", "mad.lo.s32 %s, %s, %d, %s;", lane, V * 4, sl)
      for i = 1, nsums do
        for k = 0, N - 1 do
          local vals = {}
          for j = 0, V - 1 do vals[j + 1] = cs[i][k][j] end
          P:store("shared", base, ((i - 1) * RPC * H + k * Pn * V) * 4, vals, inrow(k))
        end
      end
      put("bar.sync 0;")
      -- once per CTA, a loop: column i of sum s adds its slots in order
      local i = def("b32", "mov.b32 %s, %s;", tid)
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
      put("add.s32 %s, %s, %d;", i, i, L.block)
      local more = def("pred", "setp.lt.s32 %s, %s, %d;", i, ncols)
      put("@%s bra %s;", more, TOP)
      P:at(END)
    end
  end
  K:asm(P)
end

return M
