-- kiln.lower: splits a graph instance into kernel groups. Pointwise nodes fuse into the
-- group of their latest pointwise producer; every other node is a group of its own. Then
-- the fusion rules (kiln.lower.rules, over the state of kiln.lower.context) merge groups:
-- sibling matmuls and sibling reductions an engine builds in one kernel, pointwise groups over
-- one element space, and each anchor (a norm, softmax, reduction or matmul node) absorbs the
-- pointwise groups around it, each node in one role:
--   prologue  elementwise ops that compute the anchor's element-space inputs from graph
--             inputs (h = x + r before rmsnorm; h may also be a graph output) and from what
--             anchored kernels leave in memory (x - mean, the mean a reduction's result)
--   epilogue  elementwise ops that consume the anchor's element-space output (SiLU gate,
--             scale, cast), with side chains of graph inputs (silu(gate)); `amax`: per-tensor
--             amax reductions of such values (fp8 quantize)
--   rowred    (forward norms) reductions of such values over each row (a per-token amax), the
--             per-row pointwise ops on their results (rowpw: a per-row fp8 scale), and
--             epilogue ops that read those per-row values again per element (t / scale)
--   quant     (forward norms) a block_scale_quantize of such a value along the row, where an
--             engine builds it there (opts.quantize_epilogue): 1x128 fp8 with its scales
--   dequant   (matmuls) the block_scale_dequantize making an operand from fp8 data and block
--             scales, where an engine applies the scales as it multiplies (opts.fuse_dequant)
-- A merge happens only where it keeps the group graph acyclic and every value the fused
-- kernel needs exists per element; anything else stays a group of its own. A prologue that
-- several anchors read is copied into each where that moves fewer bytes than exchanging it;
-- a virtual tensor still crossing groups is written to the workspace (role "scratch").
local context = require "kiln.lower.context"
local rules = require "kiln.lower.rules"

local same_dims, copy_node = context.same_dims, context.copy_node

local M = {}

-- Per anchor op: `ins` are the input ports read per element of the anchor's element space,
-- `outs` the outputs written per element (an epilogue reads these). `no_prologue`: the
-- inputs are not read per output element (matmul's A and B), so nothing fuses before them.
M.ANCHORS = {
  matmul = { ins = { "A", "B" }, outs = { "C" }, no_prologue = true },
  moe_grouped_matmul = { ins = { "token", "weight" }, outs = { "Y" }, no_prologue = true },
  rmsnorm = { ins = { "input" }, outs = { "Y" } },
  layernorm = { ins = { "input" }, outs = { "Y" } },
  instancenorm = { ins = { "input" }, outs = { "Y" } },
  adalayernorm = { ins = { "input" }, outs = { "Y" } },
  rmsnorm_backward = { ins = { "grad", "input" }, outs = { "DX" } },
  layernorm_backward = { ins = { "grad", "input" }, outs = { "DX" } },
  softmax = { ins = { "P" }, outs = { "S" } },
  log_softmax = { ins = { "P" }, outs = { "S" } },
  softmax_backward = { ins = { "grad", "output" }, outs = { "DX" } },
  log_softmax_backward = { ins = { "grad", "output" }, outs = { "DX" } },
  reduction = { ins = { "input" }, outs = {} },
  block_scale_quantize = { ins = { "input" }, outs = {} },
  block_scale_dequantize = { ins = { "input" }, outs = { "Y" } },
}

-- Anchors whose epilogue may hold per-row reductions (rowred) and per-row ops (rowpw).
M.ROWRED = { rmsnorm = true, layernorm = true, instancenorm = true, adalayernorm = true }

-- A pointwise group that writes outputs of several shapes (batch norm's per-channel 1 /
-- sqrt(var + eps) beside its element output, or a value of that shape another kernel reads:
-- `read_outside`): the nodes over fewer elements than the group's element space go to a group
-- of their own, which writes their outputs, and the group keeps copies of them to compute
-- those values again per element. Such nodes read only values as small as theirs, so none
-- depends on an element node. Returns the new group or nil.
-- (the larger of two shapes a pointwise group holds: the higher rank, then fewer axes of 1)
local function larger(a, b)
  local function ones(dims)
    local n = 0
    for _, d in ipairs(dims) do if d == 1 then n = n + 1 end end
    return n
  end
  if #a ~= #b then return #a > #b end
  return ones(a) < ones(b)
end
local function split_small_outputs(g, grp, read_outside)
  if grp.family ~= "pointwise" or grp.anchor then return nil end
  local space
  for _, n in ipairs(grp.nodes) do
    for _, uid in pairs(n.outputs) do
      local d = g.by_uid[uid].dims
      if not space or larger(d, space) then space = d end
    end
  end
  local small, writes = {}, false
  for _, n in ipairs(grp.nodes) do
    local _, uid = next(n.outputs)
    if not same_dims(g.by_uid[uid].dims, space) and not n.copy_of then
      small[#small + 1] = n
      writes = writes or g.by_uid[uid].role == "output" or read_outside[uid]
    end
  end
  if not writes then return nil end
  local S = { family = "pointwise", nodes = small, index = grp.index }
  local keep, is_small = {}, {}
  for _, n in ipairs(small) do is_small[n] = true end
  for _, n in ipairs(grp.nodes) do
    keep[#keep + 1] = is_small[n] and copy_node(n) or n
  end
  grp.nodes = keep
  return S
end

-- Groups in dependency order; among ready groups the one whose first node comes first.
local function ordered(g, groups)
  local order, gof = {}, {}
  for i, n in ipairs(g.nodes) do order[n] = i end
  for _, grp in ipairs(groups) do
    for _, n in ipairs(grp.nodes) do gof[n], order[n] = grp, order[n.copy_of or n] end
  end
  local indeg, users = {}, {}
  for _, grp in ipairs(groups) do
    -- a group's place: its first own node (prologue copies come before it in every reader)
    for _, n in ipairs(grp.nodes) do
      if not n.copy_of then grp.first = order[n]; break end
    end
    grp.first = grp.first or order[grp.nodes[1]]
    indeg[grp], users[grp] = 0, {}
  end
  for _, grp in ipairs(groups) do
    local seen = {}
    for _, n in ipairs(grp.nodes) do
      for _, uid in pairs(n.inputs) do
        local p = g.producers[uid]
        local pg = p and gof[p]
        if pg and pg ~= grp and not seen[pg] then
          seen[pg] = true
          indeg[grp] = indeg[grp] + 1
          table.insert(users[pg], grp)
        end
      end
    end
  end
  local out, ready = {}, {}
  for _, grp in ipairs(groups) do if indeg[grp] == 0 then ready[#ready + 1] = grp end end
  while #ready > 0 do
    table.sort(ready, function(a, b) return a.first > b.first end)
    local grp = table.remove(ready)
    out[#out + 1] = grp
    for _, u in ipairs(users[grp]) do
      indeg[u] = indeg[u] - 1
      if indeg[u] == 0 then ready[#ready + 1] = u end
    end
  end
  assert(#out == #groups, "kiln.lower: kernel groups form a cycle")
  return out
end

-- The family a node's kernel group takes: an `elementwise` op of another family (batch norm
-- in inference) fuses as a pointwise op.
function M.family(def) return def.elementwise and "pointwise" or def.family end

-- The values some group reads but does not compute itself (a prologue copy computes its own).
local function values_read_outside(groups)
  local read_outside = {}
  for _, grp in ipairs(groups) do
    local makes = {}
    for _, node in ipairs(grp.nodes) do
      for _, uid in pairs(node.outputs) do makes[uid] = true end
    end
    for _, node in ipairs(grp.nodes) do
      for _, uid in pairs(node.inputs) do if not makes[uid] then read_outside[uid] = true end end
    end
  end
  return read_outside
end

-- opts.strict: the conservative fusion (prologues from graph inputs only, no copies), which
-- plan.route falls back to when the default leaves a group without an engine.
-- opts.fuse_reductions(list, b, g): whether reduction b joins the kernel of the reductions
-- `list` (an engine's rule, engines.fuse_reductions); none merge without it.
-- opts.reduction_epilogue(list, g): whether the kernel of the reductions `list` takes element
-- ops after them (engines.reduction_epilogue); none do without it.
-- opts.quantize_epilogue(norm, q, g): whether the kernel of a forward norm takes the block
-- quantize q of its epilogue (engines.quantize_epilogue); none do without it.
function M.lower(g, opts)
  -- a graph routed before (another target) had its crossing tensors made scratch: start over
  for _, t in ipairs(g.tensors) do if t.role == "scratch" then t.role = "virtual" end end
  local groups, group_of_tensor = {}, {}
  for _, node in ipairs(g.nodes) do
    local latest = 0
    for _, uid in pairs(node.inputs) do
      latest = math.max(latest, group_of_tensor[uid] or 0)
    end
    local grp
    local family = M.family(node.def)
    if family == "pointwise" and latest > 0 and groups[latest].family == "pointwise" then
      grp = groups[latest]
    else
      grp = { index = #groups + 1, family = family, nodes = {} }
      if family ~= "pointwise" then grp.anchor = node end
      groups[#groups + 1] = grp
    end
    grp.nodes[#grp.nodes + 1] = node
    for _, uid in pairs(node.outputs) do group_of_tensor[uid] = grp.index end
  end
  rules.fuse(g, groups, opts or {}, M.ANCHORS, M.ROWRED)
  local live = {}
  for _, grp in ipairs(groups) do if not grp.dead then live[#live + 1] = grp end end
  local read_outside = values_read_outside(live)
  for i = 1, #live do live[#live + 1] = split_small_outputs(g, live[i], read_outside) end
  groups = ordered(g, live)
  for i, grp in ipairs(groups) do grp.index, grp.first = i, nil end
  read_outside = values_read_outside(groups)
  for _, grp in ipairs(groups) do
    local produced, inputs, outputs, spills = {}, {}, {}, {}
    for _, node in ipairs(grp.nodes) do
      for _, uid in pairs(node.outputs) do produced[uid] = true end
    end
    local seen = {}
    for _, node in ipairs(grp.nodes) do
      for _, uid in pairs(node.inputs) do
        if not produced[uid] and not seen[uid] then seen[uid] = true; inputs[#inputs + 1] = uid end
      end
      for _, uid in pairs(node.outputs) do
        local t = g.by_uid[uid]
        if t.role == "output" then
          -- (a copy computes a value again; the original's group writes it)
          if not node.copy_of then outputs[#outputs + 1] = uid end
        elseif read_outside[uid] and not node.copy_of then spills[#spills + 1] = uid end
      end
    end
    -- a virtual tensor another group reads is written to the plan's workspace (scratch)
    for _, uid in ipairs(spills) do
      g.by_uid[uid].role = "scratch"
      outputs[#outputs + 1] = uid
    end
    table.sort(inputs)
    table.sort(outputs)
    grp.inputs, grp.outputs = inputs, outputs
  end
  return groups
end

-- Whether a kernel writes t to memory: a graph output, or a scratch tensor a later kernel
-- group reads from the workspace.
function M.written(t) return t.role == "output" or t.role == "scratch" end

function M.in_group(grp, node)
  for _, n in ipairs(grp.nodes) do if n == node then return true end end
  return false
end

return M
