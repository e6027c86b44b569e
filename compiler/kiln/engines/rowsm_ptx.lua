-- kiln.engines.rowsm_ptx: softmax, log_softmax and their backward with the kernel body written
-- as PTX (kiln.ptx, rowptx.lua): the same passes and instructions as row.lua's CUDA form (the
-- row held in registers or re-read from L2 with an online max and sum; the sink logit; the
-- statistics outputs; expf's ex2.approx and logf's sequence), so NVRTC spends ptxas's time
-- only. A fused prologue (its element outputs stored by the first pass; a held row keeps the
-- anchor's inputs as their dtypes round them, a re-read row computes them again) and an
-- epilogue over the anchor's output take the ops of ptxops. The code setting cuda keeps the CUDA
-- form everywhere (for measuring; rowgen.ptx_wanted).
local ptx = require "kiln.ptx"
local pw = require "kiln.engines.pwexpr"
local rowgen = require "kiln.engines.rowgen"
local rowptx = require "kiln.engines.rowptx"
local ptxops = require "kiln.engines.ptxops"
local lower = require "kiln.lower"

local M = {}

local NEG_INF, POS_INF, LOG2E = "0fFF800000", "0f7F800000", ptx.f32(1.4426950408889634)

-- Whether this form takes the softmax group (analyze's info with its layout): true, or nil
-- and why (then row.lua writes the CUDA form).
function M.accepts(info, group, g, target)
  if info.kind ~= "softmax" and info.kind ~= "softmax_bwd" then return nil, "not a softmax" end
  if #(group.amax or {}) + #(group.rowred or {}) + #(group.rowpw or {}) > 0 then return nil, "amax or per-row ops after the softmax" end
  -- (the output pass computes the epilogue from the anchor's output, the graph's tensors and its own values)
  local from_prologue = rowgen.made(group)
  for _, n in ipairs(group.epilogue or {}) do for _, uid in pairs(n.outputs) do from_prologue[uid] = nil end end
  local a = info.anchor
  local y = a.outputs.S or a.outputs.DX
  for _, n in ipairs(group.epilogue or {}) do
    for _, uid in pairs(n.inputs) do
      if from_prologue[uid] and uid ~= y then return nil, "the epilogue reads a value of the prologue or a statistic" end
    end
  end
  -- fused ops: on an H200 (against the CUDA form) 1.00-1.04x on held
  -- forward rows, but 0.85-0.87x re-read (H = 32768) and 0.94-0.99x for the backward
  if #(group.prologue or {}) + #(group.epilogue or {}) > 0 then
    if info.kind == "softmax_bwd" then return nil, "fused ops on the softmax backward (slower in PTX)" end
    if rowptx.loops(info) then return nil, "fused ops on a re-read row (slower in PTX)" end
  end
  local why = rowptx.declines(info, group, g) or rowptx.group_declines(info, group, g, target)
  if why then return nil, why end
  return true
end

-- CUDA's logf(x) (its instruction sequence: the mantissa's polynomial, the exponent times
-- ln 2; subnormals scaled, 0 -> -inf, negatives, inf and NaN through x * inf + inf); also the
-- staged softmax's (rowfwd_staged_ptx.lua)
local function logf(P, x)
  local def = function(...) return P:def(...) end
  local small = def("pred", "setp.lt.f32 %s, %s, 0f00800000;", x)
  local f1 = def("b32", "selp.f32 %s, %s, %s, %s;", def("b32", "mul.f32 %s, %s, 0f4B000000;", x), x, small)
  local e0 = def("b32", "selp.f32 %s, 0fC1B80000, 0f00000000, %s;", small)
  local ex = def("b32", "and.b32 %s, %s, -8388608;", def("b32", "add.s32 %s, %s, -1059760811;", f1))
  local m = def("b32", "sub.s32 %s, %s, %s;", f1, ex)
  local e = def("b32", "fma.rn.f32 %s, %s, 0f34000000, %s;", def("b32", "cvt.rn.f32.s32 %s, %s;", ex), e0)
  local t = def("b32", "add.f32 %s, %s, 0fBF800000;", m)
  local p = def("b32", "fma.rn.f32 %s, 0fBE055027, %s, 0f3E1039F6;", t)
  for _, c in ipairs({ "0fBDF8CDCC", "0f3E0F2955", "0fBE2AD8B9", "0f3E4CED0B", "0fBE7FFF22", "0f3EAAAA78", "0fBF000000" }) do
    p = def("b32", "fma.rn.f32 %s, %s, %s, " .. c .. ";", p, t)
  end
  local r = def("b32", "fma.rn.f32 %s, %s, %s, %s;", def("b32", "mul.f32 %s, %s, %s;", t, p), t, t)
  r = def("b32", "fma.rn.f32 %s, %s, 0f3F317218, %s;", e, r)
  local finite = def("pred", "setp.lt.u32 %s, %s, 2139095040;", f1)
  r = def("b32", "selp.f32 %s, %s, %s, %s;", r, def("b32", "fma.rn.f32 %s, %s, " .. POS_INF .. ", " .. POS_INF .. ";", f1), finite)
  return def("b32", "selp.f32 %s, " .. NEG_INF .. ", %s, %s;", r, def("pred", "setp.eq.f32 %s, %s, 0f00000000;", f1))
end

-- 2^((x - b) * log2 e), as kiln_exp2((x - b) * LOG2E); also the staged softmax's
local function exp_from(P, x, b)
  return P:def("b32", "ex2.approx.ftz.f32 %s, %s;", P:def("b32", "mul.f32 %s, %s, %s;", P:def("b32", "sub.f32 %s, %s, %s;", x, b), LOG2E))
end
M.exp_from, M.logf, M.NEG_INF, M.LOG2E = exp_from, logf, NEG_INF, LOG2E

-- One vector's step of the online max and sum (value(j) its n fp32 values, taken in order):
-- the running max tm and sum ts (registers, updated), the sum rescaled once to the new max.
function M.online(P, tm, ts, n, value)
  local def = function(...) return P:def(...) end
  local xs, vm = {}, nil
  for j = 0, n - 1 do
    xs[j] = value(j)
    vm = vm and def("b32", "max.NaN.f32 %s, %s, %s;", vm, xs[j]) or xs[j]
  end
  local mn = def("b32", "max.NaN.f32 %s, %s, %s;", tm, vm)
  local mb = def("b32", "selp.f32 %s, 0f00000000, %s, %s;", mn, def("pred", "setp.eq.f32 %s, %s, " .. NEG_INF .. ";", mn))
  local same = def("pred", "setp.eq.f32 %s, %s, %s;", tm, mn)
  P:put("selp.f32 %s, %s, %s, %s;", ts, ts, def("b32", "mul.f32 %s, %s, %s;", ts, exp_from(P, tm, mn)), same)
  for j = 0, n - 1 do P:put("add.f32 %s, %s, %s;", ts, ts, exp_from(P, xs[j], mb)) end
  P:put("mov.b32 %s, %s;", tm, mn)
end

-- A thread's online sum ts (at its max tm) rescaled to the row's max mx.
function M.rescaled(P, tm, ts, mx)
  return P:def("b32", "selp.f32 %s, %s, %s, %s;", ts, P:def("b32", "mul.f32 %s, %s, %s;", ts, exp_from(P, tm, mx)),
    P:def("pred", "setp.eq.f32 %s, %s, %s;", tm, mx))
end

-- Pairs (max, sum of exps from that max) combined: the larger max, each sum rescaled to it
-- (M.rescaled: a sum already there unscaled, so rows of -inf add no NaN).
function M.combine(P, ma, za, mb, zb)
  local m = P:def("b32", "max.NaN.f32 %s, %s, %s;", ma, mb)
  return m, P:def("b32", "add.f32 %s, %s, %s;", M.rescaled(P, ma, za, m), M.rescaled(P, mb, zb, m))
end

-- (m, z) pairs of `lanes` lanes combined by butterflies (max and + commute: both partners get
-- the same bits).
function M.butterfly(P, m, z, lanes)
  return P:butterfly_pair(m, z, lanes, function(ma, za, mb, zb) return M.combine(P, ma, za, mb, zb) end)
end

-- The row's log-sum-exp from its max and sum (in log2 units when asked).
function M.lse(P, mx, z, log2)
  local lse = P:def("b32", "add.f32 %s, %s, %s;", mx, logf(P, z))
  return log2 and P:def("b32", "mul.f32 %s, %s, %s;", lse, LOG2E) or lse
end

-- The passes over the row with the group's fused ops (R.pass's contract: pass(uids, outs, form,
-- body) with body(q, value_at, store)): the first loads the prologue's sources, computes it,
-- stores its element outputs and (a held row) keeps the anchor inputs `uids` as their dtypes
-- hold them; later passes read those, or a re-read row loads and computes them again. Each
-- pass loads the epilogue's sources too; value_at(j) is made once per element. Returns pass
-- and finish(value_at, store, y, ys): the anchor's output y (values ys) through the epilogue
-- into the element outputs. Without fused ops: R.pass and a store of y.
local function fused_passes(R, info, group, g)
  local P, V = R.P, info.L.V
  local prologue, epilogue = group.prologue or {}, group.epilogue or {}
  local written = function(uid) return uid and lower.written(g.by_uid[uid]) end
  if #prologue + #epilogue == 0 then
    return R.pass, function(_, store, y, ys) if written(y) then store(y, ys) end end
  end
  local read_later = pw.read_set(group.nodes)
  local pro_out = rowptx.element_outputs(info, g, prologue)
  local epi_out = rowptx.element_outputs(info, g, epilogue)
  local epi_src = R.sources(epilogue, {})
  local held, first = {}, true
  local function pass(uids, outs, form, body)
    local load = R.reread or first
    local is_first = first
    first = false
    local srcs = load and R.sources(prologue, uids) or {}
    local seen = {}
    for _, uid in ipairs(srcs) do seen[uid] = true end
    for _, uid in ipairs(epi_src) do if not seen[uid] then srcs[#srcs + 1] = uid end end
    local all = { table.unpack(outs) }
    if is_first then for _, uid in ipairs(pro_out) do all[#all + 1] = uid end end
    R.vectors(srcs, all, function(q, value_at, store, words)
      local rd = {}
      if not load then
        for _, uid in ipairs(uids) do rd[uid] = P:reader(held[q][uid], g.by_uid[uid].dtype, form) end
      end
      local memo = {}
      local function at(j)
        if memo[j] then return memo[j] end
        local value = value_at(j)
        if load then ptxops.run_nodes(P, prologue, value, g, read_later)
        else for uid, r in pairs(rd) do value[uid] = r(j) end end
        memo[j] = value
        return value
      end
      if is_first then
        local vals = {}
        for _, uid in ipairs(pro_out) do vals[uid] = {} end
        for j = 0, V - 1 do for _, uid in ipairs(pro_out) do vals[uid][j + 1] = at(j)[uid] end end
        for _, uid in ipairs(pro_out) do store(uid, vals[uid]) end
        if not R.reread then
          held[q] = {}
          for _, uid in ipairs(uids) do
            local xs = {}
            for j = 0, V - 1 do xs[j + 1] = at(j)[uid] end
            held[q][uid] = words[uid] and words[uid][q] or P:pack(xs, g.by_uid[uid].dtype)
          end
        end
      end
      body(q, at, store)
    end, load and form or nil)
  end
  local function finish(value_at, store, y, ys)
    local outs = written(y) and { y } or {}
    for _, uid in ipairs(epi_out) do outs[#outs + 1] = uid end
    local vals = {}
    for _, uid in ipairs(outs) do vals[uid] = {} end
    local yt = g.by_uid[y]
    for j = 0, V - 1 do
      local value = value_at(j)
      -- (the epilogue reads y as its dtype holds it, as the CUDA form does)
      value[y] = yt.dtype ~= "fp32" and read_later[y] and P:round(ys[j + 1], yt.dtype) or ys[j + 1]
      ptxops.run_nodes(P, epilogue, value, g, read_later)
      for _, uid in ipairs(outs) do vals[uid][j + 1] = value[uid] end
    end
    for _, uid in ipairs(outs) do store(uid, vals[uid]) end
  end
  return pass, finish, function(y) return written(y) and { y, table.unpack(epi_out) } or epi_out end
end

-- The kernel body (lines into K).
function M.emit(K, info, group, g)
  local a = info.anchor
  rowgen.pdl_entry(K)  -- the plan's only kernel: pdl at entry
  local R = rowptx.new(K, info, g, group.inputs, rowgen.made(group))
  local P, put, def, V = R.P, R.put, R.def, info.L.V
  local pass, finish, out_list = fused_passes(R, info, group, g)
  out_list = out_list or function(y) return { y } end

  if info.kind == "softmax_bwd" then
    -- dx = y (dy - sum dy y); log_softmax: dx = dy - exp(y) sum dy (a lane past the row reads zeros)
    local is_log = a.op == "log_softmax_backward"
    local dy, y, dx = a.inputs.grad, a.inputs.output, a.outputs.DX
    local acc = def("b32", "mov.b32 %s, 0f00000000;")
    pass({ dy, y }, {}, "prmt", function(_, value_at)
      for j = 0, V - 1 do
        local v = value_at(j)
        if is_log then put("add.f32 %s, %s, %s;", acc, acc, v[dy])
        else put("fma.rn.f32 %s, %s, %s, %s;", acc, v[dy], v[y], acc) end
      end
    end)
    local s = R.allreduce(acc, "red0_")
    pass({ dy, y }, out_list(dx), nil, function(_, value_at, store)
      local out = {}
      for j = 0, V - 1 do
        local v = value_at(j)
        if is_log then
          local e = def("b32", "ex2.approx.ftz.f32 %s, %s;", def("b32", "mul.f32 %s, %s, %s;", v[y], LOG2E))
          out[j + 1] = def("b32", "fma.rn.f32 %s, %s, %s, %s;", def("b32", "neg.f32 %s, %s;", e), s, v[dy])
        else
          out[j + 1] = def("b32", "mul.f32 %s, %s, %s;", v[y], def("b32", "sub.f32 %s, %s, %s;", v[dy], s))
        end
      end
      finish(value_at, store, dx, out)
    end)
    K:asm(P)
    return
  end

  -- forward: the row's max M (NaN-propagating; a sink logit joins), Z = sum exp(x - M); a row
  -- of -inf (and no sink) gives y = 0, log y = -inf
  local is_log = a.op == "log_softmax"
  local x, s_out = a.inputs.P, a.outputs.S
  local sink = a.inputs.SINK and R.base[a.inputs.SINK]
  local tm = def("b32", "mov.b32 %s, %s;", NEG_INF)
  local ts = R.reread and def("b32", "mov.b32 %s, 0f00000000;") or nil
  pass({ x }, {}, "prmt", function(q, value_at)
    if not R.reread then
      for j = 0, V - 1 do put("max.NaN.f32 %s, %s, %s;", tm, tm, R.masked(q, value_at(j)[x], "0xFF800000")) end
      return
    end
    M.online(P, tm, ts, V, function(j) return value_at(j)[x] end)
  end)
  local Mx, Z, ninf, mb
  local e = {}  -- regs, softmax: exp(x - M) per vector and element (one reduction: from the thread's max)
  local scale   -- regs, one reduction: exp(thread's max - M), taking e to the row's max
  local function exponent_base()
    ninf = def("pred", "setp.eq.f32 %s, %s, " .. NEG_INF .. ";", Mx)
    mb = def("b32", "selp.f32 %s, 0f00000000, %s, %s;", Mx, ninf)  -- (a -inf row has no terms)
  end
  -- a held row's exps from `base` (the row's max, or with one meeting the thread's own), their
  -- sum into ts
  local function exps(base)
    ts = def("b32", "mov.b32 %s, 0f00000000;")
    pass({ x }, {}, "bfi", function(q, value_at)
      e[q] = {}
      for j = 0, V - 1 do
        e[q][j] = exp_from(P, value_at(j)[x], base)
        put("add.f32 %s, %s, %s;", ts, ts, R.masked(q, e[q][j]))
      end
    end)
  end
  -- one meeting on (max, sum of exps) pairs where a row spans 1024 threads or is re-read (the
  -- sink joins as the pair (sink, 1)). On an H200 (against two meetings): held by
  -- 1024 threads (H = 16384) 1.03-1.13x, re-read 0.96-1.06x; held by 128-512 threads
  -- 0.86-1.00x, which keep two meetings
  local L = info.L
  if rowptx.one_reduction() and (R.reread or L.P * (L.CL or 1) >= 1024) then
    if not R.reread then exps(def("b32", "selp.f32 %s, 0f00000000, %s, %s;", tm, def("pred", "setp.eq.f32 %s, %s, " .. NEG_INF .. ";", tm))) end
    Mx, Z = R.allreduce_pair(tm, ts, function(m, z, lanes) return M.butterfly(P, m, z, lanes) end, "red0_")
    if sink then Mx, Z = M.combine(P, Mx, Z, sink, "0f3F800000") end
    exponent_base()
    if not R.reread and not is_log then scale = M.rescaled(P, tm, "0f3F800000", Mx) end
  else
    Mx = R.allreduce(tm, "red0_", "max.NaN.f32")
    if sink then Mx = def("b32", "max.NaN.f32 %s, %s, %s;", Mx, sink) end
    exponent_base()
    if R.reread then Z = M.rescaled(P, tm, ts, Mx)
    else
      exps(mb)
      Z = ts
    end
    Z = R.allreduce(Z, "red1_")
    if sink then Z = def("b32", "add.f32 %s, %s, %s;", Z, exp_from(P, sink, mb)) end
  end
  if is_log then
    local lz = logf(P, Z)
    pass({ x }, out_list(s_out), nil, function(_, value_at, store)
      local out = {}
      for j = 0, V - 1 do
        local v = def("b32", "sub.f32 %s, %s, %s;", def("b32", "sub.f32 %s, %s, %s;", value_at(j)[x], Mx), lz)
        out[j + 1] = def("b32", "selp.f32 %s, " .. NEG_INF .. ", %s, %s;", v, ninf)
      end
      finish(value_at, store, s_out, out)
    end)
  else
    local iz = def("b32", "selp.f32 %s, 0f00000000, %s, %s;", P:recip(Z), ninf)
    if scale then iz = def("b32", "mul.f32 %s, %s, %s;", iz, scale) end
    pass(R.reread and { x } or {}, out_list(s_out), nil, function(q, value_at, store)
      local out = {}
      for j = 0, V - 1 do
        local ev = R.reread and exp_from(P, value_at(j)[x], mb) or e[q][j]
        out[j + 1] = def("b32", "mul.f32 %s, %s, %s;", ev, iz)
      end
      finish(value_at, store, s_out, out)
    end)
  end
  -- per-row statistics
  local o, stats = a.outputs, {}
  local function out(uid) return uid and lower.written(g.by_uid[uid]) end
  if out(o.Stats) then
    stats[#stats + 1] = { o.Stats, M.lse(P, Mx, Z, a.attrs.stats_use_log2) }
  end
  if out(o.Max) then stats[#stats + 1] = { o.Max, Mx } end
  if out(o.Sum_exp) then stats[#stats + 1] = { o.Sum_exp, Z } end
  table.sort(stats, function(p, q) return p[1] < q[1] end)
  R.row_outputs(stats)
  K:asm(P)
end

return M
