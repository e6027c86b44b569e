-- kiln.lower: splits a graph instance into kernel groups. Pointwise nodes fuse into the
-- group of their latest pointwise producer; every other node is a group of its own. Then
-- each anchor (a norm, softmax, reduction or matmul node) absorbs the pointwise groups around it:
--   prologue  elementwise ops that compute the anchor's element-space inputs from graph
--             inputs (h = x + r before rmsnorm; h may also be a graph output) and from what
--             anchored kernels leave in memory (x - mean, the mean a reduction's result)
--   epilogue  elementwise ops that consume the anchor's element-space output (SiLU gate,
--             scale, cast), with side chains of graph inputs (silu(gate)), and per-tensor
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
local shape = require "kiln.shape"

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

local function same_dims(a, b) return shape.format(a) == shape.format(b) end

local function all_ones(dims)
  for _, d in ipairs(dims) do if d ~= 1 then return false end end
  return true
end

-- Anchors whose epilogue may hold per-row reductions (rowred) and per-row ops (rowpw).
M.ROWRED = { rmsnorm = true, layernorm = true, instancenorm = true, adalayernorm = true }

-- Whether dims are one value per row of the element space `space`: the same rank, a trailing
-- block of ones (the last axis among them), the leading axes equal.
local function per_row(dims, space)
  if #dims ~= #space or dims[#dims] ~= 1 then return false end
  local ones = true
  for i = #dims, 1, -1 do
    if ones and dims[i] ~= 1 then ones = false end
    if not ones and shape.format({ dims[i] }) ~= shape.format({ space[i] }) then return false end
  end
  return true
end

local split_small_outputs

-- Whether the anchor node c reads uid only at its element ports (the inputs a prologue makes).
local function read_per_element(c, uid)
  local spec = M.ANCHORS[c.op]
  for port, v in pairs(c.inputs) do
    if v == uid then
      local element = false
      for _, ep in ipairs(spec.ins) do element = element or ep == port end
      if not element then return false end
    end
  end
  return true
end

-- A node computed again in another group: a copy that names its original (a copy's copy, the
-- same original).
local function copy_node(nd)
  local copy = {}
  for k, v in pairs(nd) do copy[k] = v end
  copy.copy_of = nd.copy_of or nd
  return copy
end

-- The nodes of `nodes` the group grp does not compute already (itself or a copy of it).
local function not_in(grp, nodes)
  local have, list = {}, {}
  for _, nd in ipairs(grp.nodes) do have[nd.copy_of or nd] = true end
  for _, nd in ipairs(nodes) do
    if not have[nd.copy_of or nd] then have[nd.copy_of or nd] = true; list[#list + 1] = nd end
  end
  return list
end

-- The fusion pass over the initial groups (each with .nodes, .family).
local function fuse(g, groups, opts)
  local order, gof = {}, {}
  for i, n in ipairs(g.nodes) do order[n] = i end
  local function by_order(a, b) return order[a] < order[b] end
  local function refresh()
    for _, grp in ipairs(groups) do
      if not grp.dead then for _, n in ipairs(grp.nodes) do gof[n] = grp end end
    end
  end
  refresh()
  local consumers = g:consumers()
  local function producer_group(uid)
    local p = g.producers[uid]
    return p and gof[p]
  end
  local function is_source(uid) return g.producers[uid] == nil end
  -- uids a group reads that it does not produce, in a stable order
  local function ext_inputs(grp)
    local produced, list, seen = {}, {}, {}
    for _, n in ipairs(grp.nodes) do for _, uid in pairs(n.outputs) do produced[uid] = true end end
    for _, n in ipairs(grp.nodes) do
      for _, p in ipairs(n.def.input_ports) do
        local uid = n.inputs[p.name]
        if uid and not produced[uid] and not seen[uid] then seen[uid] = true; list[#list + 1] = uid end
      end
    end
    return list
  end
  local function deps(grp)
    local d = {}
    for _, uid in ipairs(ext_inputs(grp)) do
      local pg = producer_group(uid)
      if pg and pg ~= grp then d[pg] = true end
    end
    return d
  end
  -- Merging the set S is legal when no group outside S lies on a path between two members:
  -- walk up from S through other groups; none of them may depend on a member of S.
  local function legal(S)
    local inS = {}
    for _, grp in ipairs(S) do inS[grp] = true end
    local up, stack = {}, {}
    for _, grp in ipairs(S) do for d in pairs(deps(grp)) do stack[#stack + 1] = d end end
    while #stack > 0 do
      local x = table.remove(stack)
      if not inS[x] and not up[x] then
        up[x] = true
        for d in pairs(deps(x)) do stack[#stack + 1] = d end
      end
    end
    for _, grp in ipairs(groups) do
      if not grp.dead and up[grp] then
        for d in pairs(deps(grp)) do if inS[d] then return false end end
      end
    end
    return true
  end
  local function nodes_have_dims(grp, dims)
    for _, n in ipairs(grp.nodes) do
      for _, uid in pairs(n.outputs) do
        if not same_dims(g.by_uid[uid].dims, dims) then return false end
      end
    end
    return true
  end
  local function only_sources(grp)
    for _, uid in ipairs(ext_inputs(grp)) do if not is_source(uid) then return false end end
    return true
  end
  -- graph inputs, or what anchored kernels make (a reduction's result: in memory anyway); a
  -- pointwise group's values are better fused with it (the sibling merge below)
  -- (or a value smaller than the element space `space` a pointwise kernel makes: it is written
  -- by a small kernel of its own, split_small_outputs; batch norm's r read by its backward)
  local function sources_or_anchored(grp, space)
    for _, uid in ipairs(ext_inputs(grp)) do
      local pg = producer_group(uid)
      if not is_source(uid) and not (pg and pg.anchor)
        and not (pg and pg.family == "pointwise" and space and not same_dims(g.by_uid[uid].dims, space)) then
        return false
      end
    end
    return true
  end
  -- every virtual tensor grp produces is read only by nodes `allowed(node, uid)` accepts
  local function virtuals_stay(grp, allowed)
    for _, n in ipairs(grp.nodes) do
      for _, uid in pairs(n.outputs) do
        if g.by_uid[uid].role == "virtual" then
          for _, c in ipairs(consumers[uid] or {}) do
            if gof[c] ~= grp and not allowed(c, uid) then return false end
          end
        end
      end
    end
    return true
  end
  -- Whether a pointwise group P whose values several kernels read (one sum feeding a norm and a
  -- softmax; batch norm's x - mean feeding the variance and the output) is better computed
  -- again in each of them than written to scratch once: its values are read only by anchors at
  -- their element ports and by pointwise groups over the same elements, none is a graph output,
  -- and n readers reading P's inputs again move fewer bytes than one write and n + 1 reads of
  -- its values. Returns the reading groups in group order.
  local dtypes = require "kiln.dtypes"
  local copied = {}  -- nodes of a group copied into its readers (each copy computes its own)
  local function recompute(P, space)
    if opts.strict then return nil end
    local seen, readers, src, out = {}, {}, 0, 0
    for _, nd in ipairs(P.nodes) do
      for _, uid in pairs(nd.outputs) do
        if g.by_uid[uid].role ~= "virtual" then return nil end  -- one kernel writes an output
        local read = false
        for _, c in ipairs(consumers[uid] or {}) do
          local R = gof[c]
          if R ~= P and not copied[c] then
            if not R then return nil end
            if R.family == "pointwise" and not R.anchor then
              -- (its per-channel or per-row ops may stay smaller: the pointwise engine broadcasts)
              local over = false
              for _, rn in ipairs(R.nodes) do
                for _, o in pairs(rn.outputs) do over = over or same_dims(g.by_uid[o].dims, space) end
              end
              if not over then return nil end
            else
              local spec = R.anchor == c and M.ANCHORS[c.op]
              if not spec or spec.no_prologue or not read_per_element(c, uid) then return nil end
            end
            if not seen[R] then seen[R] = true; readers[#readers + 1] = R end
            read = true
          end
        end
        if read then out = out + dtypes.size(g.by_uid[uid].dtype) end
      end
    end
    for _, uid in ipairs(ext_inputs(P)) do
      local t = g.by_uid[uid]
      if same_dims(t.dims, space) then src = src + dtypes.size(t.dtype) end
    end
    local n = #readers
    if n < 2 or n * src > src + (n + 1) * out then return nil end
    table.sort(readers, function(x, y) return x.index < y.index end)
    return readers
  end
  -- Copies of P's nodes join every reader (an anchor's prologue, a pointwise group's nodes) and
  -- P goes. Always acyclic: a reader now depends on what P depended on, none of which can
  -- depend on a reader of P without a cycle through P already.
  local function merge_copies(P, readers)
    for _, R in ipairs(readers) do
      for _, nd in ipairs(not_in(R, P.nodes)) do
        local copy = copy_node(nd)
        order[copy] = order[nd]
        R.nodes[#R.nodes + 1] = copy
        if R.anchor then R.prologue[#R.prologue + 1] = copy end
      end
      table.sort(R.nodes, by_order)
      if R.anchor then table.sort(R.prologue, by_order) end
    end
    P.dead = true
    for _, nd in ipairs(P.nodes) do gof[nd], copied[nd] = nil, true end
    refresh()
  end
  -- role: a role for every node, or a function of the node
  local function merge(A, list, role)
    for _, grp in ipairs(list) do
      for _, n in ipairs(not_in(A, grp.nodes)) do
        A.nodes[#A.nodes + 1] = n
        local r = type(role) == "function" and role(n) or role
        local into = ({ epilogue = A.epilogue, amax = A.amax, rowred = A.rowred, rowpw = A.rowpw, quant = A.quant })[r]
          or A.prologue
        into[#into + 1] = n
      end
      grp.dead = true
    end
    table.sort(A.nodes, by_order)
    table.sort(A.prologue, by_order)
    table.sort(A.epilogue, by_order)
    table.sort(A.amax, by_order)
    table.sort(A.rowred, by_order)
    table.sort(A.rowpw, by_order)
    table.sort(A.quant, by_order)
    refresh()
  end

  -- a sibling B joins A: B's nodes A lacks (role(n) true: also to A's prologue), B's group goes
  local function absorb(A, B, role)
    for _, n in ipairs(not_in(A, B.nodes)) do
      A.nodes[#A.nodes + 1] = n
      if role and role(n) then A.prologue[#A.prologue + 1] = n end
    end
    table.sort(A.nodes, by_order)
    if A.prologue then table.sort(A.prologue, by_order) end
    B.dead = true
    refresh()
  end

  for _, A in ipairs(groups) do
    if A.anchor and M.ANCHORS[A.anchor.op] then A.prologue, A.epilogue, A.amax, A.rowred, A.rowpw, A.quant = {}, {}, {}, {}, {}, {} end
  end
  -- prologue: pointwise groups computing the anchor's element-space inputs from graph inputs
  -- (strict), or also from what anchored kernels leave in memory; whether any was taken
  local function take_prologue(A)
    local a, taken = A.anchor, false
    local spec = M.ANCHORS[a.op]
    local space = a.inputs[spec.ins[1]] and g.by_uid[a.inputs[spec.ins[1]]].dims
    for _, port in ipairs(spec.no_prologue and {} or spec.ins) do
      local uid = a.inputs[port]
      local P = uid and producer_group(uid)
      if P and P ~= A and P.family == "pointwise" and (opts.strict and only_sources(P) or not opts.strict and sources_or_anchored(P, space))
        and nodes_have_dims(P, space) then
        if virtuals_stay(P, function(c, v) return c == a and read_per_element(a, v) end) and legal({ A, P }) then
          merge(A, { P }, "prologue")
          taken = true
        else
          local readers = recompute(P, space)
          if readers then merge_copies(P, readers); taken = true end
        end
      end
    end
    return taken
  end
  local function anchored(A) return A.anchor and M.ANCHORS[A.anchor.op] and not A.dead end
  -- epilogue: pointwise groups over the element space `out_dims` that read only `readable`
  -- values of A (per element, or per row: `row_dims`, the per-row dims of a row reduction's
  -- result or of the group's first rowred, which the row engine checks), graph inputs and
  -- side chains of them
  local function take_epilogue(A, out_dims, readable, row_dims)
    local a = A.anchor
    local changed = out_dims ~= nil
    while changed do
      changed = false
      for _, Q in ipairs(groups) do
        if not Q.dead and Q ~= A then
          local from_A, others, ok = 0, {}, true
          for _, uid in ipairs(ext_inputs(Q)) do
            local pg = producer_group(uid)
            if pg == A then
              if readable[uid] then from_A = from_A + 1 else ok = false end
            elseif pg then
              others[#others + 1] = pg
            end
          end
          if ok and from_A > 0 and Q.family == "pointwise" and nodes_have_dims(Q, out_dims) then
            local set, S = { [Q] = true, [A] = true }, { A, Q }
            for _, side in ipairs(others) do
              if not set[side] then
                set[side] = true
                S[#S + 1] = side
                if side.family ~= "pointwise" or not only_sources(side) or not nodes_have_dims(side, out_dims) then ok = false end
              end
            end
            for i = 3, #S do
              if ok and not virtuals_stay(S[i], function(c) return set[gof[c]] end) then ok = false end
            end
            if ok and legal(S) then
              local list = {}
              for i = 2, #S do list[#list + 1] = S[i] end
              merge(A, list, "epilogue")
              for _, grp in ipairs(list) do
                for _, n in ipairs(grp.nodes) do
                  for _, uid in pairs(n.outputs) do readable[uid] = true end
                end
              end
              changed = true
            end
          elseif ok and from_A == 1 and #others == 0 and Q.family == "reduction" and #Q.nodes == 1 then
            local r = Q.nodes[1]
            local y = g.by_uid[r.outputs.Y]
            if r.attrs.mode == "amax" and all_ones(y.dims) and y.role == "output" and y.dtype == "fp32"
              and same_dims(g.by_uid[r.inputs.input].dims, out_dims) and legal({ A, Q }) then
              merge(A, { Q }, "amax")
              changed = true
            elseif M.ROWRED[a.op] and per_row(y.dims, out_dims) and (not row_dims or same_dims(y.dims, row_dims))
              and same_dims(g.by_uid[r.inputs.input].dims, out_dims) and legal({ A, Q }) then
              merge(A, { Q }, "rowred")
              row_dims = y.dims
              readable[r.outputs.Y] = true
              changed = true
            end
          elseif ok and from_A == 1 and #others == 0 and Q.family == "quantize" and #Q.nodes == 1 and M.ROWRED[a.op]
            and Q.anchor.op == "block_scale_quantize" and same_dims(g.by_uid[Q.anchor.inputs.input].dims, out_dims)
            and opts.quantize_epilogue and opts.quantize_epilogue(a, Q.anchor, g) and legal({ A, Q }) then
            -- a block quantize of a norm's epilogue value along its row: written by the norm's kernel
            merge(A, { Q }, "quant")
            changed = true
          elseif ok and from_A > 0 and #others == 0 and Q.family == "pointwise" and row_dims then
            -- per-row ops on the per-row results (rowpw), and element ops after them
            -- (epilogue), one group as pointwise chains come: no per-row op may read an
            -- element op's value
            local role, elem = {}, {}
            for _, n in ipairs(Q.nodes) do
              local _, uid = next(n.outputs)
              local d = g.by_uid[uid].dims
              if same_dims(d, row_dims) then
                role[n] = "rowpw"
                for _, p in ipairs(n.def.input_ports) do
                  if elem[n.inputs[p.name]] then role[n] = nil end
                end
              elseif same_dims(d, out_dims) then
                role[n] = "epilogue"
                for _, o in pairs(n.outputs) do elem[o] = true end
              end
              if not role[n] then ok = false end
            end
            if ok and legal({ A, Q }) then
              merge(A, { Q }, function(n) return role[n] end)
              for _, n in ipairs(Q.nodes) do
                for _, uid in pairs(n.outputs) do readable[uid] = true end
              end
              changed = true
            end
          end
        end
      end
    end
  end
  -- block-scaled operands: a matmul's A or B that a block_scale_dequantize makes from fp8 data
  -- and its scales, read by nothing else, is scaled inside the matmul's kernel where an engine
  -- applies the scales there (opts.fuse_dequant(matmul, {A = node, B = node}): both or one);
  -- the group keeps the dequantize nodes (A.dequant[port])
  for _, A in ipairs(opts.fuse_dequant and groups or {}) do
    if anchored(A) and A.anchor.op == "matmul" and #A.nodes == 1 then
      local found, Qs = nil, {}
      for _, port in ipairs({ "A", "B" }) do
        local uid = A.anchor.inputs[port]
        local Q = producer_group(uid)
        if Q and not Q.dead and #Q.nodes == 1 and Q.anchor and Q.anchor.op == "block_scale_dequantize" and g.by_uid[uid].role == "virtual"
          and #(consumers[uid] or {}) == 1 and A.anchor.inputs.A ~= A.anchor.inputs.B then
          found = found or {}
          found[port], Qs[#Qs + 1] = Q.anchor, Q
        end
      end
      if found and opts.fuse_dequant(A.anchor, found, g) and legal({ A, table.unpack(Qs) }) then
        A.dequant = found
        for _, Q in ipairs(Qs) do absorb(A, Q) end
      end
    end
  end
  -- sibling matmuls: two products of one A (the gate and up projections of a gated MLP) that
  -- an engine builds in one kernel (opts.fuse_matmuls: A's tiles loaded once, two
  -- accumulators) join before the epilogues, so an epilogue may read both
  for ai, A in ipairs(opts.fuse_matmuls and groups or {}) do
    for bi = ai + 1, #groups do
      local B = groups[bi]
      if anchored(A) and not A.matmuls and A.anchor.op == "matmul" and anchored(B) and B.anchor.op == "matmul"
        and #A.nodes == 1 and #B.nodes == 1 and not deps(A)[B] and not deps(B)[A]
        and opts.fuse_matmuls(A.anchor, B.anchor, g) and legal({ A, B }) then
        A.matmuls = { A.anchor, B.anchor }
        absorb(A, B)
      end
    end
  end
  for _, A in ipairs(groups) do
    local a = A.anchor
    local spec = a and M.ANCHORS[a.op]
    if anchored(A) then
      take_prologue(A)
      -- values an epilogue may read from the fused group, per element
      local out_dims = #spec.outs > 0 and a.outputs[spec.outs[1]] and g.by_uid[a.outputs[spec.outs[1]]].dims
      local readable = {}
      for _, m in ipairs(A.matmuls or { a }) do
        for _, p in ipairs(spec.outs) do if m.outputs[p] then readable[m.outputs[p]] = true end end
      end
      for _, p in ipairs(spec.no_prologue and {} or spec.ins) do if a.inputs[p] then readable[a.inputs[p]] = true end end
      take_epilogue(A, out_dims, readable)
    end
  end
  -- a prologue whose own inputs were values of another pointwise group, since copied into it
  -- (x_hat computed in the group making dy * scale): the anchors visited before take it now
  local more = not opts.strict
  while more do
    more = false
    for _, A in ipairs(groups) do
      if anchored(A) and take_prologue(A) then more = true end
    end
  end
  -- sibling reductions: reductions of one input shape to one output shape that an engine
  -- builds in one kernel (opts.fuse_reductions: batch norm's backward sums dy and dy * x_hat)
  -- share the loads, when neither reads the other and no group lies between them; a node
  -- both prologues copied is computed once
  local function lone_reduction(grp)
    return not grp.dead and grp.anchor and grp.anchor.op == "reduction" and #(grp.epilogue or {}) == 0 and #(grp.amax or {}) == 0
      and #(grp.rowred or {}) == 0 and #(grp.rowpw or {}) == 0
  end
  for ai, A in ipairs(opts.fuse_reductions and groups or {}) do
    for bi = ai + 1, #groups do
      local B = groups[bi]
      if lone_reduction(A) and lone_reduction(B) and not deps(A)[B] and not deps(B)[A]
        and opts.fuse_reductions(A.reductions or { A.anchor }, B.anchor, g) and legal({ A, B }) then
        A.reductions = A.reductions or { A.anchor }
        A.reductions[#A.reductions + 1] = B.anchor
        absorb(A, B, function(n) return n ~= B.anchor end)
      end
    end
  end
  -- a row reduction's epilogue (opts.reduction_epilogue: an engine holds the row): element ops
  -- reading its per-row result and its prologue's values (dx from the per-row means of adaptive
  -- layer norm's backward) run in its kernel, which reads the row once, not twice
  for _, A in ipairs(opts.reduction_epilogue and groups or {}) do
    local list = A.reductions or { A.anchor }
    if lone_reduction(A) and opts.reduction_epilogue(list, g) then
      local readable = {}
      for _, r in ipairs(list) do readable[r.outputs.Y] = true end
      for _, n in ipairs(A.prologue) do for _, uid in pairs(n.outputs) do readable[uid] = true end end
      take_epilogue(A, g.by_uid[list[1].inputs.input].dims, readable, g.by_uid[list[1].outputs.Y].dims)
    end
  end
  -- siblings: pointwise groups over the same element space merge into one kernel when no
  -- group lies between them (independent chains reading the same inputs read them once)
  for ai, A in ipairs(groups) do
    if not A.dead and A.family == "pointwise" and not A.anchor then
      local space = g.by_uid[select(2, next(A.nodes[1].outputs))].dims
      for bi = ai + 1, #groups do
        local B = groups[bi]
        if not B.dead and B.family == "pointwise" and not B.anchor and nodes_have_dims(A, space)
          and nodes_have_dims(B, space) and legal({ A, B }) then
          absorb(A, B)
        end
      end
    end
  end
end

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
function split_small_outputs(g, grp, read_outside)
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
  fuse(g, groups, opts or {})
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
