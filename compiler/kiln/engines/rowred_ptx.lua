-- kiln.engines.rowred_ptx: the row engine's reductions over the trailing axes (sum, mean, norms,
-- maxima, minima, amax, products of each row, sibling reductions sharing the pass) with the
-- kernel body written as PTX (kiln.ptx), so that it compiles as a PTX module by ptxas alone:
-- one pass over the row (all of a thread's vectors loaded before they fold; past 8 vectors,
-- trips of 4), the prologue's ops with PTX forms here (ptxops) and its element outputs stored,
-- each reduction's accumulator over its row's threads (rowptx.allreduce) and its final map, one
-- value a row written by the row's first thread. With a reduction's epilogue (lower's: element
-- ops after the reductions, per-row ops between) the memory rows the prologue reads are held in
-- registers (or read again from L2), and a second pass computes the prologue again and the
-- epilogue from the results rounded to their dtypes, as row.lua's CUDA form does. amax outputs,
-- rows of 1024 threads and ragged rows held by 128 threads for an epilogue (both measured
-- slower) and the code setting cuda keep the CUDA form.
local pw = require "kiln.engines.pwexpr"
local rowgen = require "kiln.engines.rowgen"
local rowptx = require "kiln.engines.rowptx"
local ptxops = require "kiln.engines.ptxops"
local lower = require "kiln.lower"

local M = {}

local RED = rowptx.RED

-- The group's reductions: the anchor and its siblings.
local function reductions(info, group) return group.reductions or { info.anchor } end

-- Whether this form takes the row reduction (analyze's info with its layout): true, or nil and
-- why (then row.lua writes the CUDA form).
function M.accepts(info, group, g, target)
  if info.kind ~= "reduce" then return nil, "not a row reduction" end
  if info.L.CL then return nil, "a row over a cluster" end
  -- (rows of 1024 threads measure 0.83-0.99x the CUDA form on an H200: H = 32768 and 65536,
  -- fp32 and fp16, one pass and re-read; with the siblings' one meeting 0.91-0.93x at 512 rows,
  -- and the re-read row at 2 CTAs an SM misses L2 twice as often as the CUDA form at 1)
  -- (pipelined, the pipe setting 1: 0.92-0.95x at 512 rows of 65536 fp32, 0.99-1.00x at 4096; unrolled
  -- with 4, 6 or 8 loads ahead, NVVM's schedule: 0.92x; that with plain .nc reads instead of the
  -- L2 policy: one sum 0.99x, four sibling reductions 0.92x / 0.96x at 512 / 4096 rows)
  if info.L.P >= 1024 and not rowptx.pipelined(info) then return nil, "a row of 1024 threads" end
  -- (a ragged row held by 128 threads or fewer for the epilogue measures 0.92-0.97x: adaptive
  -- layer norm's backward and a per-sample scale at 1152 columns, layer norm at 768; by 256
  -- threads 1.00-1.09x: instance norm's backward at 3136, adaptive layer norm's at 3072)
  if info.maps and not info.L.even and info.L.P <= 128 then return nil, "a ragged row held by 128 threads for the epilogue" end
  if #(group.amax or {}) + #(group.rowred or {}) > 0 then return nil, "amax or per-row reductions after the reduction" end
  for _, r in ipairs(reductions(info, group)) do
    if not RED[r.attrs.mode] then return nil, "a " .. r.attrs.mode .. " reduction" end
  end
  local why = rowptx.declines(info, group, g) or rowptx.group_declines(info, group, g, target)
  if why then return nil, why end
  return true
end

local element_outputs = rowptx.element_outputs

-- The uids of `list` not in `set`.
local function besides(list, set)
  local out = {}
  for _, uid in ipairs(list) do if not set[uid] then out[#out + 1] = uid end end
  return out
end

-- The kernel body (lines into K): a pdl entry (the plan's only kernel) and one PTX statement.
function M.emit(K, info, group, g)
  local L = info.L
  local prologue, epilogue, rowpw = group.prologue or {}, group.epilogue or {}, group.rowpw or {}
  local read_later = pw.read_set(group.nodes)
  local made = rowgen.made(group)
  local list = reductions(info, group)
  rowgen.pdl_entry(K)
  local R = rowptx.new(K, info, g, group.inputs, made)
  local P, def = R.P, R.def
  local pro_out = element_outputs(info, g, prologue)
  local ein = {}
  for _, r in ipairs(list) do ein[#ein + 1] = r.inputs.input end
  -- the rows held for the epilogue's pass (info.held: what the prologue reads from memory)
  local held = {}
  if info.maps then
    for uid in pairs(info.held) do held[#held + 1] = uid end
    table.sort(held)
  end
  local held_set = {}
  for _, uid in ipairs(held) do held_set[uid] = true end
  -- one accumulator for reductions of the same input with the same update (a sum and a mean)
  local accs, acc_of, updates, entries = {}, {}, {}, {}
  for i, r in ipairs(list) do
    local m = RED[r.attrs.mode]
    local key = table.concat({ r.inputs.input, m.op, m.init, tostring(m.other), tostring(m.abs), tostring(m.sq), tostring(m.nonzero) }, ":")
    if not acc_of[key] then
      acc_of[key] = #accs + 1
      accs[#accs + 1] = def("b32", "mov.b32 %s, %s;", m.init)
      updates[#accs] = { mode = m, input = r.inputs.input }
    end
    entries[i] = { node = r, acc = acc_of[key] }
  end
  local function first_pass(q, value_at, store)
    local outs = {}
    for _, uid in ipairs(pro_out) do outs[uid] = {} end
    for j = 0, L.V - 1 do
      local value = value_at(j)
      ptxops.run_nodes(P, prologue, value, g, read_later)
      for _, uid in ipairs(pro_out) do outs[uid][j + 1] = value[uid] end
      for i, a in ipairs(updates) do
        rowptx.red_update(P, a.mode, accs[i], R.masked(q, value[a.input], a.mode.other))
      end
    end
    for _, uid in ipairs(pro_out) do store(uid, outs[uid]) end
  end
  -- (one pass: every source loaded; else the held rows kept, the rest loaded)
  if #held == 0 then R.vectors(R.sources(prologue, ein), pro_out, first_pass)
  else R.pass(held, pro_out, "prmt", first_pass, besides(R.sources(prologue, ein), held_set)) end
  -- each result over the row; the epilogue reads it as its dtype holds it (as the reference)
  local rowv, stats = {}, {}
  local meet = {}
  for i, a in ipairs(updates) do meet[i] = { accs[i], string.format("red%d_", i - 1), a.mode.op } end
  local met = R.allreduce_all(meet)
  for _, e in ipairs(entries) do
    local r = e.node
    local m = RED[r.attrs.mode]
    local v = met[e.acc]
    if m.fin then v = m.fin(P, v, L.H) end
    local dt = g.by_uid[r.outputs.Y].dtype
    if info.maps and dt ~= "fp32" then v = P:round(v, dt) end
    rowv[r.outputs.Y] = v
    if lower.written(g.by_uid[r.outputs.Y]) then stats[#stats + 1] = { r.outputs.Y, v } end
  end
  if info.maps then
    -- the per-row ops once a row, the per-row divisors' reciprocals, then the epilogue's pass
    for uid, v in pairs(R.base) do if rowv[uid] == nil then rowv[uid] = v end end
    ptxops.run_nodes(P, rowpw, rowv, g, read_later)
    local recip = {}
    for _, uid in ipairs(rowgen.row_divisors(group)) do recip[uid] = P:recip(rowv[uid]) end
    for _, n in ipairs(rowpw) do
      for _, uid in pairs(n.outputs) do
        if info.out_kind[uid] == "row" and lower.written(g.by_uid[uid]) then stats[#stats + 1] = { uid, rowv[uid] } end
      end
    end
    local outs = element_outputs(info, g, epilogue)
    local srcs = {}
    for _, uid in ipairs(R.sources(prologue, ein)) do srcs[#srcs + 1] = uid end
    for _, uid in ipairs(R.sources(epilogue, {})) do srcs[#srcs + 1] = uid end
    local again, seen = {}, {}
    for _, uid in ipairs(besides(srcs, held_set)) do
      if not seen[uid] and not rowv[uid] then again[#again + 1] = uid; seen[uid] = true end
    end
    R.pass(held, outs, nil, function(q, value_at, store)
      local vals = {}
      for _, uid in ipairs(outs) do vals[uid] = {} end
      for j = 0, L.V - 1 do
        local value = value_at(j)
        ptxops.run_nodes(P, prologue, value, g, read_later)
        for uid, v in pairs(rowv) do value[uid] = v end
        ptxops.run_nodes(P, epilogue, value, g, read_later, recip)
        for _, uid in ipairs(outs) do vals[uid][j + 1] = value[uid] end
      end
      for _, uid in ipairs(outs) do store(uid, vals[uid]) end
    end, again)
  end
  table.sort(stats, function(x, y) return x[1] < y[1] end)
  R.row_outputs(stats)
  K:asm(P)
end

return M
