-- kiln.engines.rowfwd_ptx: the forward norm kernel (rmsnorm / layernorm, inference or
-- training, the row held in registers or re-read from L2) with its body written as PTX
-- (kiln.ptx): the same passes as row.lua's CUDA form, with the fused prologue and epilogue ops
-- that have a PTX form here (add, sub, mul, div, neg, abs, max, min, add_square, identity,
-- exp, sigmoid, swish: residual adds, scales, casts, gates; fp8 outputs on sm_89+), amax
-- outputs, and per-row reductions of epilogue values with per-row ops on their results.
-- NVRTC then spends ptxas's time only (docs/MEMORY_BOUND.md). The code setting cuda keeps the
-- CUDA form (for measuring; rowgen.ptx_wanted).
local pw = require "kiln.engines.pwexpr"
local ptx = require "kiln.ptx"
local rowgen = require "kiln.engines.rowgen"
local rowptx = require "kiln.engines.rowptx"
local ptxops = require "kiln.engines.ptxops"
local meanvar = require "kiln.engines.meanvar_ptx"
local lower = require "kiln.lower"

local M = {}


local RED, red_update = rowptx.RED, rowptx.red_update
local EXP_FAMILY = { exp = true, sigmoid = true, swish = true }

-- The row tensors the group reads (x, a residual, ...), constants aside.
local function rows_read(info, group, g)
  local n = 0
  for _, uid in ipairs(group.inputs) do
    if info.access[uid] == "full" and g.by_uid[uid].role ~= "constant" then n = n + 1 end
  end
  return n
end

-- Whether this form takes the forward norm (analyze's info with its layout): true, or nil
-- and why (then row.lua writes the CUDA form).
function M.accepts(info, group, g, target)
  if info.kind ~= "norm" then return nil, "not a forward norm" end
  for _, r in ipairs(group.rowred or {}) do
    if not RED[r.attrs.mode] then return nil, "a per-row " .. r.attrs.mode .. " reduction" end
  end
  -- re-read rows the CUDA form reads faster (H200, graph replays, 1024-16384 rows, clusters
  -- off): layer norm over x + r at 32768 0.83-0.91x in every trip and reduction order
  -- tried, fp32 at 28672 0.86-0.90x; RMSNorm of x + r gated by silu(gate) 0.85-0.87x at 32768,
  -- 0.92-1.00x at 65536 (in trips of 2 or 4); RMSNorm in trips of one vector 0.94-0.99x
  if info.strategy == "reread" and rows_read(info, group, g) > 1 then
    if info.op == "layernorm" then return nil, "layer norm re-reading more than one row tensor (slower in PTX)" end
    if rowgen.fuses_any(group, EXP_FAMILY) then
      return nil, "exp, sigmoid or swish on a re-read row of more than one row tensor (slower in PTX)"
    end
  end
  if info.strategy == "reread" and info.op == "rmsnorm" and rowptx.odd_trips(info.L.N) then
    return nil, "RMSNorm re-read in trips of one vector (slower in PTX)"
  end
  local why = rowptx.declines(info, group, g) or rowptx.group_declines(info, group, g, target, { amax = true })
  if why then return nil, why end
  return true
end

-- The emission's shared state E (M.emit's): the group's parts, the row builder R (rowptx.new)
-- and its registers; the steps below add the statistics, the per-row values and amax's maxima.
local function state(K, info, group, g, target, amax_out)
  local a = info.anchor
  local E = { K = K, info = info, group = group, g = g, target = target, amax_out = amax_out, a = a, L = info.L,
              is_ln = info.op == "layernorm",
              prologue = group.prologue or {}, epilogue = group.epilogue or {}, amax = group.amax or {},
              read_later = pw.read_set(group.nodes),
              recip = {},  -- per-row divisors' reciprocals (rowgen.row_divisors)
              -- the anchor's element input x, its output y, and the columns
              xin = a.inputs.input, y = a.outputs.Y, scale = a.inputs.scale, bias = a.inputs.bias }
  E.xt = g.by_uid[E.xin]
  return E
end

-- The ops `nodes` on the values `value` (ptxops.run_nodes).
local function run_nodes(E, nodes, value) ptxops.run_nodes(E.P, nodes, value, E.g, E.read_later, E.recip) end

-- Sums over the row's elements: a chain of fresh registers when unrolled (regs), one register
-- updated in place when a loop carries it (reread). acc_add(a, x) = a + x, acc_sq(a, x) = a + x * x
local function acc_start(E) return E.reread and E.def("b32", "mov.b32 %s, %s;", ptx.f32(0)) or nil end
local function acc_add(E, acc, x)
  if E.reread then E.put("add.f32 %s, %s, %s;", acc, acc, x); return acc end
  return acc and E.def("b32", "add.f32 %s, %s, %s;", acc, x) or x
end
local function acc_sq(E, acc, x)
  if E.reread then E.put("fma.rn.f32 %s, %s, %s, %s;", acc, x, x, acc); return acc end
  return acc and E.def("b32", "fma.rn.f32 %s, %s, %s, %s;", x, x, acc) or E.def("b32", "mul.f32 %s, %s, %s;", x, x)
end

-- x of the held row (regs: E.held[k], the words of x's vector k), or of the row read again and
-- its prologue again (reread)
local function x_values(E, uids_extra, outs, form, body)
  local P, R, xin = E.P, E.R, E.xin
  if not E.reread then
    R.vectors(uids_extra, outs, function(q, value_at, store, words)
      local rx = P:reader(E.held[q], E.xt.dtype, form)
      body(q, function(j)
        local value = value_at(j)
        value[xin] = rx(j)
        return value
      end, store, words)
    end)
    return
  end
  local srcs = R.sources(E.prologue, { xin, table.unpack(uids_extra) })
  R.vectors(srcs, outs, function(q, value_at, store, words)
    body(q, function(j)
      local value = value_at(j)
      run_nodes(E, E.prologue, value)
      return value
    end, store, words)
  end, form)
end

-- Pass 1: loads, prologue, its outputs stored, the row's sum (layernorm) or sum of squares
-- (E.acc), or layernorm's mean and variance in one reduction (meanvar_ptx; E.one) where
-- every thread holds as many elements: each vector's (sum, M2) from its values, combined
-- over the thread's vectors (of a re-read row: over a trip's, and the trips merged when
-- several; E.part the thread's, or the trip's, pair so far, E.run the running merge)
local function first_pass(E)
  local P, R, V, xin = E.P, E.R, E.L.V, E.xin
  E.one = E.is_ln and rowptx.one_reduction() and (E.reread or R.uniform)
  local one, run, part = E.one, nil, nil
  if one and E.reread and E.L.N > R.U then
    run = { mean = E.def("b32", "mov.b32 %s, 0f00000000;"), m2 = E.def("b32", "mov.b32 %s, 0f00000000;"),
            k = E.def("b32", "mov.b32 %s, 0f00000000;") }
  end
  local acc = acc_start(E)
  local pro_out = rowptx.element_outputs(E.info, E.g, E.prologue)
  R.vectors(R.sources(E.prologue, { xin }), pro_out, function(q, value_at, store, words)
    local outs = {}
    for _, uid in ipairs(pro_out) do outs[uid] = {} end
    local xs = {}
    for j = 0, V - 1 do
      local value = value_at(j)
      run_nodes(E, E.prologue, value)
      local x = value[xin]
      xs[j + 1] = x
      for _, uid in ipairs(pro_out) do outs[uid][j + 1] = value[uid] end
      x = R.masked(q, x)
      if not one then acc = E.is_ln and acc_add(E, acc, x) or acc_sq(E, acc, x) end
    end
    if one then part = meanvar.add(P, part, meanvar.of_values(P, xs)) end
    if run and q == R.U - 1 then  -- the trip's pair into the running one
      acc = acc_add(E, acc, part.s)
      meanvar.merge(P, run, part.s, part.m2, part.n)
      part = nil
    end
    if not E.reread then E.held[q] = words[xin] and words[xin][q] or P:pack(xs, E.xt.dtype) end
    for _, uid in ipairs(pro_out) do store(uid, outs[uid]) end
  end, "prmt")  -- the output pass shifts: converted again there
  E.acc, E.part, E.run = acc, part, run
end

-- The row's mean (layernorm) and rstd (E.mean, E.rstd) from pass 1's sums; layernorm in two
-- reductions reads x again for the sum of squared deviations.
local function statistics(E)
  local P, R, def, a, V = E.P, E.R, E.def, E.a, E.L.V
  local inv = ptx.f32(1.0 / E.L.H)
  local eps = a.inputs.epsilon and R.base[a.inputs.epsilon] or ptx.f32(a.attrs.epsilon)
  local sum, mean
  if E.one then
    local n = E.L.N * V
    local run, part = E.run, E.part
    local s, m2 = R.allreduce_pair(run and E.acc or part.s, run and run.m2 or part.m2,
      function(x, y, lanes, k) return meanvar.butterfly(P, x, y, lanes, n * k) end, "red0_")
    mean, sum = def("b32", "mul.f32 %s, %s, %s;", s, inv), m2
  else
    sum = R.allreduce(E.acc, "red0_")
  end
  if E.is_ln and not E.one then
    mean = def("b32", "mul.f32 %s, %s, %s;", sum, inv)
    local acc1 = acc_start(E)
    x_values(E, {}, {}, "bfi", function(q, value_at)
      for j = 0, V - 1 do acc1 = acc_sq(E, acc1, R.masked(q, def("b32", "sub.f32 %s, %s, %s;", value_at(j)[E.xin], mean))) end
    end)
    sum = R.allreduce(acc1, "red1_")
  end
  E.mean = mean
  E.rstd = def("b32", "rsqrt.approx.f32 %s, %s;", def("b32", "fma.rn.f32 %s, %s, %s, %s;", sum, inv, eps))
end

-- y = xhat * scale (+ bias) of element j into value
local function y_value(E, value)
  local def = E.def
  local x = value[E.xin]
  local xh = E.is_ln and def("b32", "mul.f32 %s, %s, %s;", def("b32", "sub.f32 %s, %s, %s;", x, E.mean), E.rstd)
    or def("b32", "mul.f32 %s, %s, %s;", x, E.rstd)
  local v = E.bias and def("b32", "fma.rn.f32 %s, %s, %s, %s;", xh, value[E.scale], value[E.bias])
    or def("b32", "mul.f32 %s, %s, %s;", xh, value[E.scale])
  local yt = E.g.by_uid[E.y]
  if yt.dtype ~= "fp32" and E.read_later[E.y] then v = E.P:round(v, yt.dtype) end
  value[E.y] = v
end

-- The per-row reductions (group.rowred): a pass making the epilogue values they read, the
-- reductions over the row, then the per-row ops (group.rowpw) on their results, which the
-- output pass reads as per-row values (E.rowv)
local function row_reductions(E)
  local P, R, V, group = E.P, E.R, E.L.V, E.group
  local rowred, rowpw, rowv = group.rowred or {}, group.rowpw or {}, {}
  E.rowv = rowv
  if #rowred == 0 then return end
  local accs = {}
  for i, r in ipairs(rowred) do accs[i] = E.def("b32", "mov.b32 %s, %s;", RED[r.attrs.mode].init) end
  x_values(E, R.sources(E.early, { E.scale, E.bias }), {}, "bfi", function(q, value_at)
    for j = 0, V - 1 do
      local value = value_at(j)
      y_value(E, value)
      run_nodes(E, E.early, value)
      for i, r in ipairs(rowred) do
        local m = RED[r.attrs.mode]
        red_update(P, m, accs[i], R.masked(q, value[r.inputs.input], m.other))
      end
    end
  end)
  for i, r in ipairs(rowred) do
    local m = RED[r.attrs.mode]
    local v = R.allreduce(accs[i], string.format("redr%d_", i - 1), m.op)
    rowv[r.outputs.Y] = m.fin and m.fin(P, v, E.L.H) or v
  end
  for uid, v in pairs(R.base) do if rowv[uid] == nil then rowv[uid] = v end end
  run_nodes(E, rowpw, rowv)
  for _, uid in ipairs(rowgen.row_divisors(group)) do E.recip[uid] = P:recip(rowv[uid]) end
end

-- The output pass: y, the epilogue, amax (E.am: each amax output's running max), the stores.
local function output_pass(E)
  local R, g, y = E.R, E.g, E.y
  local outs = {}
  if y and lower.written(g.by_uid[y]) then outs[#outs + 1] = y end
  for _, uid in ipairs(rowptx.element_outputs(E.info, g, E.epilogue)) do outs[#outs + 1] = uid end
  local am = {}
  for i in ipairs(E.amax) do am[i] = E.def("b32", "mov.b32 %s, 0;") end
  E.am = am
  x_values(E, R.sources(E.epilogue, { E.scale, E.bias }), outs, nil, function(q, value_at, store)
    local vals = {}
    for _, uid in ipairs(outs) do vals[uid] = {} end
    for j = 0, E.L.V - 1 do
      local value = value_at(j)
      for uid, v in pairs(E.rowv) do value[uid] = v end
      y_value(E, value)
      run_nodes(E, E.epilogue, value)
      for i, r in ipairs(E.amax) do
        -- the bits of |v|: their unsigned order is the float order (docs/INTERNALS.md)
        E.put("max.u32 %s, %s, %s;", am[i], am[i], R.masked(q, E.def("b32", "abs.f32 %s, %s;", value[r.inputs.input])))
      end
      for _, uid in ipairs(outs) do vals[uid][j + 1] = value[uid] end
    end
    for _, uid in ipairs(outs) do store(uid, vals[uid]) end
  end)
end

-- Per-row statistics, written by the row's first thread.
local function row_statistics(E)
  local a, g = E.a, E.g
  local stats = {}
  if a.outputs.MEAN and lower.written(g.by_uid[a.outputs.MEAN]) then stats[#stats + 1] = { a.outputs.MEAN, E.mean } end
  if a.outputs.INV_VARIANCE and lower.written(g.by_uid[a.outputs.INV_VARIANCE]) then
    stats[#stats + 1] = { a.outputs.INV_VARIANCE, E.rstd }
  end
  local per_row = {}
  for uid in pairs(E.late) do if E.info.out_kind[uid] == "row" then per_row[#per_row + 1] = uid end end
  table.sort(per_row)
  for _, uid in ipairs(per_row) do stats[#stats + 1] = { uid, E.rowv[uid] } end
  E.R.row_outputs(stats)
end

-- amax: max over the CTA (redux per warp, then warp 0's thread 0 over the warps), one
-- atomic per CTA after the init kernel's zeros (pdl: waited for here)
local function publish_amax(E)
  local K, P, put, def, tid = E.K, E.P, E.put, E.def, E.R.tid
  local NW = E.L.block // 32
  local lead = def("pred", "setp.eq.s32 %s, %s, 0;", def("b32", "and.b32 %s, %s, 31;", tid))
  local wid4 = def("b32", "shl.b32 %s, %s, 2;", def("b32", "shr.u32 %s, %s, 5;", tid))
  local arrs = {}
  for i in ipairs(E.amax) do
    local name = string.format("amr%d_", i - 1)
    K.shared[#K.shared + 1] = string.format("  __shared__ __align__(16) kiln_u32 %s[%d];", name, NW)
    arrs[i] = P:shared(P:input("l", name))
    local r = def("b32", "redux.sync.max.u32 %s, %s, -1;", E.am[i])
    put("@%s st.shared.u32 [%s], %s;", lead, def("b32", "add.s32 %s, %s, %s;", arrs[i], wid4), r)
  end
  put("bar.sync 0;")
  local SKIP = P:label()
  put("@%s bra %s;", def("pred", "setp.ne.s32 %s, %s, 0;", tid), SKIP)
  if E.target.sm >= 90 then put("griddepcontrol.wait;") end
  for i, uid in ipairs(E.amax_out) do
    local m = P:load_fold("shared", arrs[i], 0, NW, "max.u32")
    local out = E.R.gptr(uid, true)
    local cur = def("b32", "ld.volatile.global.u32 %s, [%s];", out)
    local more = def("pred", "setp.gt.u32 %s, %s, %s;", m, cur)
    put("@%s red.global.max.u32 [%s], %s;", more, out, m)
  end
  P:at(SKIP)
end

-- The kernel body (lines into K) and its amax outputs' publication; `amax_out` lists the amax
-- output uids in order (their init kernel is row.lua's).
function M.emit(K, info, group, g, target, amax_out)
  local E = state(K, info, group, g, target, amax_out)
  if #E.amax == 0 then rowgen.pdl_entry(K) end  -- the plan's only kernel: pdl at entry
  -- a re-read row with exp, sigmoid or swish ops, or reading more than one row tensor (a
  -- residual): 2 vectors a trip, not 4. On an H200: add_rmsnorm_silu_gate at 4096 x 65536
  -- level, compiling in 51 ms, not 70; rmsnorm_residual_fp8_rowwise at 65536 1.20-1.22x at 4096
  -- and 16384 rows, 52 ms, not 73 (the plain re-read rows of layernorm and softmax measure
  -- 0.84-1.00x at 2 and 0.87-0.97x at 1: docs/MEMORY_BOUND.md)
  if rows_read(info, group, g) > 1 or rowgen.fuses_any(group, EXP_FAMILY) then info.reread_u = 2 end
  local R = rowptx.new(K, info, g, group.inputs, rowgen.made(group))
  E.R, E.P, E.put, E.def, E.reread = R, R.P, R.put, R.def, R.reread
  -- x held in registers (regs): E.held[k] the words of its vector k, as loaded or, when the
  -- prologue computes it, as words of its dtype
  E.held = {}
  first_pass(E)
  statistics(E)
  E.early, E.late = rowgen.rowred_split(group)
  row_reductions(E)
  output_pass(E)
  row_statistics(E)
  if #E.amax > 0 then publish_amax(E) end
  K:asm(E.P)
end

return M
