-- kiln.engines.rowbwd_smem_ptx: the persistent backward norm of row.lua's generic passes (the
-- "legacy" kernel: rows too wide for the staged one) with its body in PTX (rowptx.lua): CTA g
-- takes row blocks g, g + G, ...; per row the sums of dy w and dy w xh over the row, then dx
-- and each slot's dscale / dbias columns added into its own shared-memory row (no races); at
-- the end the slots add in slot order into the CTA's partial row of the workspace. For the
-- split backward (rowbwd_colsum.lua) the kernel stops at the row's two sums and writes them.
local ptx = require "kiln.ptx"
local rowgen = require "kiln.engines.rowgen"
local rowptx = require "kiln.engines.rowptx"
local rowbwd_colsum = require "kiln.engines.rowbwd_colsum"

local M = {}

-- Whether this form takes the backward: true, or nil and why (then the CUDA form).
function M.accepts(info, group, g)
  local a = info.anchor
  if #(group.prologue or {}) + #(group.epilogue or {}) + #(group.amax or {}) > 0 then return nil, "fused pointwise ops" end
  local why = rowptx.declines(info, group, g)
  if why then return nil, why end
  local dx = g.by_uid[a.outputs.DX]
  if not rowptx.IN[dx.dtype] then return nil, "dx is " .. dx.dtype end
  for uid, k in pairs(info.out_kind) do
    if k ~= "colsum" and uid ~= a.outputs.DX then return nil, "outputs beyond dx, dscale, dbias" end
  end
  return true
end

-- The kernel body (lines into K).
function M.emit(K, info, group, g)
  local a, L = info.anchor, info.L
  local H, Pn, V, RPC = L.H, L.P, L.V, L.RPC
  local is_ln = a.op == "layernorm_backward"
  local dy, x, w, dxu = a.inputs.grad, a.inputs.input, a.inputs.scale, a.outputs.DX
  local nsums = info.split and 0 or #info.colsum
  if nsums > 0 then K:add("  extern __shared__ __align__(16) float acc_[];  // [sum][slot][column]") end
  local P = ptx.new()
  local put, def = function(...) P:put(...) end, function(...) return P:def(...) end
  local rows = P:input("l", string.format("(kiln_i64)(%s)", info.rows))
  local tid, cta, lane, slot = P:place(Pn, RPC)
  local acc = nsums > 0 and P:shared(P:input("l", "acc_")) or nil

  -- a loop of i = tid, tid + block, ... < n: body(i) (divergent: plain branches)
  local function strided(n, body)
    local i = def("b32", "mov.b32 %s, %s;", tid)
    local TOP, END = P:label(), P:label()
    put("@%s bra %s;", def("pred", "setp.ge.s32 %s, %s, %d;", i, n), END)
    P:at(TOP)
    put('.pragma "nounroll";')  -- once per CTA: unrolled copies cost compile time only
    body(i)
    put("add.s32 %s, %s, %d;", i, i, L.block)
    put("@%s bra %s;", def("pred", "setp.lt.s32 %s, %s, %d;", i, n), TOP)
    P:at(END)
  end
  if nsums > 0 then
    strided(nsums * RPC * H, function(i) put("st.shared.f32 [%s], 0f00000000;", def("b32", "mad.lo.s32 %s, %s, 4, %s;", i, acc)) end)
    put("bar.sync 0;")
  end

  -- the row loop
  local nrb = rows
  if RPC > 1 then nrb = def("b64", "shr.s64 %s, %s, %d;", def("b64", "add.s64 %s, %s, %d;", rows, RPC - 1), ptx.log2(RPC)) end
  local rb = def("b64", "cvt.u64.u32 %s, %s;", cta)
  local nct = def("b64", "cvt.u64.u32 %s, %s;", def("b32", "mov.u32 %s, %%nctaid.x;"))
  local slot64 = slot and def("b64", "cvt.u64.u32 %s, %s;", slot)
  local last = def("b64", "add.s64 %s, %s, -1;", rows)
  rowptx.l2_policy(P, info, g, group.inputs, rows)
  local LOOP, DONE = P:label(), P:label()
  put("@%s bra.uni %s;", def("pred", "setp.ge.s64 %s, %s, %s;", rb, nrb), DONE)
  P:at(LOOP)
  local row, valid = rb, nil
  if slot then
    local r0 = def("b64", "mad.lo.s64 %s, %s, %d, %s;", rb, RPC, slot64)
    valid = def("pred", "setp.lt.s64 %s, %s, %s;", r0, rows)
    row = def("b64", "min.s64 %s, %s, %s;", r0, last)
  end
  local R = rowptx.new(K, info, g, group.inputs, rowgen.made(group),
    { P = P, tid = tid, lane = lane, slot = slot, row = row, valid = valid })
  local base = R.base
  local rstd, mean = base[a.inputs.inv_variance], is_ln and base[a.inputs.mean] or nil
  -- xh and gg = dy w of element j
  local function terms(v)
    local xh = mean and def("b32", "mul.f32 %s, %s, %s;", def("b32", "sub.f32 %s, %s, %s;", v[x], mean), rstd)
      or def("b32", "mul.f32 %s, %s, %s;", v[x], rstd)
    return xh, def("b32", "mul.f32 %s, %s, %s;", v[dy], v[w])
  end
  local a0 = is_ln and def("b32", "mov.b32 %s, 0f00000000;") or nil
  local a1 = def("b32", "mov.b32 %s, 0f00000000;")
  -- the scale's words held between the passes (layernorm) or loaded again (rmsnorm): each the
  -- form ptxas fits in 64 registers without spilling at H = 16384 (the other spills 22 words)
  local held = is_ln and { dy, x, w } or { dy, x }
  local fresh = not is_ln and { w } or nil
  R.pass(held, {}, "prmt", function(_, value_at)
    for j = 0, V - 1 do
      local xh, gg = terms(value_at(j))
      if a0 then put("add.f32 %s, %s, %s;", a0, a0, gg) end
      put("fma.rn.f32 %s, %s, %s, %s;", a1, gg, xh, a1)
    end
  end, fresh)
  local s0 = a0 and R.allreduce(a0, "red0_", nil, true)
  local s1 = R.allreduce(a1, "red1_", nil, true)
  local inv = ptx.f32(1.0 / H)
  local c1 = s0 and def("b32", "mul.f32 %s, %s, %s;", s0, inv) or def("b32", "mov.b32 %s, 0f00000000;")
  local c2 = def("b32", "mul.f32 %s, %s, %s;", s1, inv)
  if info.split then
    -- the split backward's row sums (c1, c2), for its dx kernel
    local rs = P:global(P:input("l", K:workspace(rowbwd_colsum.rows_offset(info))))
    local first = def("pred", "setp.eq.s32 %s, %s, 0;", lane)
    if valid then first = def("pred", "and.pred %s, %s, %s;", first, valid) end
    put("@%s st.global.v2.f32 [%s], {%s, %s};", first, def("b64", "mad.lo.s64 %s, %s, 8, %s;", row, rs), c1, c2)
  else
    local nc2 = def("b32", "neg.f32 %s, %s;", c2)
    local lane_c = def("b32", "mul.lo.s32 %s, %s, %d;", lane, V * 4)
    local own = {}  -- the thread's first column of each sum in its slot's shared row
    for i = 1, nsums do
      local off = ((i - 1) * RPC) * H * 4
      local sb = slot and def("b32", "mad.lo.s32 %s, %s, %d, %s;", slot, H * 4, acc) or acc
      own[i] = def("b32", "add.s32 %s, %s, %s;", def("b32", "add.s32 %s, %s, %d;", sb, off), lane_c)
    end
    R.pass(held, { dxu }, nil, function(q, value_at, store)
      local out, sums = {}, {}
      for i = 1, nsums do sums[i] = {} end
      for j = 0, V - 1 do
        local v = value_at(j)
        local xh, gg = terms(v)
        local t = a0 and def("b32", "sub.f32 %s, %s, %s;", gg, c1) or gg
        out[j + 1] = def("b32", "mul.f32 %s, %s, %s;", rstd, def("b32", "fma.rn.f32 %s, %s, %s, %s;", xh, nc2, t))
        for i, uid in ipairs(info.colsum) do
          sums[i][j + 1] = uid == a.outputs.DSCALE and def("b32", "mul.f32 %s, %s, %s;", xh, v[dy]) or v[dy]
        end
      end
      store(dxu, out)
      -- this slot's column sums: its own columns, no races (a row past the end adds nothing)
      local pred = P:both(R.inrow(q), valid)
      for i = 1, nsums do
        local off = q * Pn * V * 4
        local cur = P:load("shared", own[i], off, V * 4, pred)
        local new = {}
        for j = 1, V do new[j] = def("b32", "add.f32 %s, %s, %s;", cur[j], sums[i][j]) end
        P:store("shared", own[i], off, new, pred)
      end
    end, fresh)
  end
  if Pn > 32 then put("bar.sync 0;") end  -- the reduction arrays are written again by the next row
  put("add.s64 %s, %s, %s;", rb, rb, nct)
  put("@%s bra.uni %s;", def("pred", "setp.lt.s64 %s, %s, %s;", rb, nrb), LOOP)
  P:at(DONE)

  -- this CTA's partial row ws[blockIdx.x][nsums * H]: the slots' sums added in slot order
  if nsums > 0 then
    local ncols = nsums * H
    put("bar.sync 0;")
    local gws = def("b64", "mad.wide.u32 %s, %s, %d, %s;", cta, ncols * 4, P:global(P:input("l", K:workspace(0))))
    strided(ncols, function(i)
      local s = ptx.pow2(H) and def("b32", "shr.u32 %s, %s, %d;", i, ptx.log2(H)) or def("b32", "div.u32 %s, %s, %d;", i, H)
      local col = def("b32", "mad.lo.s32 %s, %s, %d, %s;", s, -H, i)
      local ad = def("b32", "mad.lo.s32 %s, %s, 4, %s;", def("b32", "mad.lo.s32 %s, %s, %d, %s;", s, RPC * H, col), acc)
      local t = def("b32", "ld.shared.f32 %s, [%s];", ad)
      for sl = 1, RPC - 1 do t = def("b32", "add.f32 %s, %s, %s;", t, def("b32", "ld.shared.f32 %s, [%s+%d];", ad, sl * H * 4)) end
      put("st.global.f32 [%s], %s;", def("b64", "mad.wide.u32 %s, %s, 4, %s;", i, gws), t)
    end)
  end
  K:asm(P)
end

return M
