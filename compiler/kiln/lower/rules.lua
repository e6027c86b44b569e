-- kiln.lower.rules: the fusion rules lower.lower runs over the initial kernel groups, in the
-- order of M.PASSES. A pass is a table with a `name`, `enabled(opts)` when an option gates
-- it, and one of:
--   applies(ctx, A) / apply(ctx, A, match)        for each group A in order
--   applies(ctx, A, B) / apply(ctx, A, B, match)  with `pairwise`: for each pair, A before B
--   run(ctx)                                      a loop of its own
-- `applies` returns a truthy match (what `apply` needs) where the pass merges. The roles an
-- anchor's epilogue takes (EPILOGUE_RULES) and its prologue's two forms (PROLOGUE_RULES) are
-- tables of the same shape: the first rule that applies to a candidate group takes it.
local context = require "kiln.lower.context"

local same_dims, all_ones, per_row = context.same_dims, context.all_ones, context.per_row

local M = {}

-- Prologue: a pointwise group P computing an element-space input of A's anchor (over the
-- element space `space`) from graph inputs (opts.strict), or also from what anchored kernels
-- leave in memory; joins A, or is copied into each of its readers.
M.PROLOGUE_RULES = {
  { role = "prologue",
    applies = function(ctx, A, P)
      local a = A.anchor
      return ctx:virtuals_stay(P, function(c, v) return c == a and ctx:read_per_element(a, v) end) and ctx:legal({ A, P })
    end,
    apply = function(ctx, A, P) ctx:merge(A, { P }, "prologue") end },
  -- its values read by several kernels, cheaper to compute again in each than to exchange
  { role = "prologue copies",
    applies = function(ctx, A, P, space) return ctx:recompute(P, space) end,
    apply = function(ctx, A, P, readers) ctx:merge_copies(P, readers) end },
}

-- Whether P may be a prologue of A's anchor over `space` at all (before either rule).
local function prologue_candidate(ctx, A, P, space)
  local opts = ctx.opts
  return P and P ~= A and P.family == "pointwise"
    and (opts.strict and ctx:only_sources(P) or not opts.strict and ctx:sources_or_anchored(P, space))
    and ctx:nodes_have_dims(P, space)
end

-- The first rule of `rules` that applies to the candidate X takes it; whether one did.
local function take_first(rules, ctx, A, X, ...)
  for _, rule in ipairs(rules) do
    local match = rule.applies(ctx, A, X, ...)
    if match then rule.apply(ctx, A, X, match); return true end
  end
  return false
end

-- A's prologues, one per element input port of its anchor; whether any was taken.
local function take_prologue(ctx, A)
  local a, taken = A.anchor, false
  local spec = ctx.anchors[a.op]
  local space = a.inputs[spec.ins[1]] and ctx:dims(a.inputs[spec.ins[1]])
  for _, port in ipairs(spec.no_prologue and {} or spec.ins) do
    local uid = a.inputs[port]
    local P = uid and ctx:producer_group(uid)
    if prologue_candidate(ctx, A, P, space) and take_first(M.PROLOGUE_RULES, ctx, A, P, space) then
      taken = true
    end
  end
  return taken
end

-- How candidate Q reads the anchored group A: `from_A` values of A (all of them `readable`:
-- `ok`), and `others`, the other groups it reads (with repeats).
local function reads_of(ctx, A, Q, readable)
  local r = { from_A = 0, others = {}, ok = true }
  for _, uid in ipairs(ctx:ext_inputs(Q)) do
    local pg = ctx:producer_group(uid)
    if pg == A then
      if readable[uid] then r.from_A = r.from_A + 1 else r.ok = false end
    elseif pg then
      r.others[#r.others + 1] = pg
    end
  end
  return r
end

-- The groups an epilogue Q brings along with it: Q and the side groups it reads (pointwise
-- chains of graph inputs over out_dims whose virtual values stay in the merged set), or nil.
local function epilogue_with_sides(ctx, ep, Q, others)
  local set, S = { [Q] = true, [ep.A] = true }, { ep.A, Q }
  for _, side in ipairs(others) do
    if not set[side] then
      set[side] = true
      S[#S + 1] = side
      if side.family ~= "pointwise" or not ctx:only_sources(side) or not ctx:nodes_have_dims(side, ep.out_dims) then return nil end
    end
  end
  for i = 3, #S do
    if not ctx:virtuals_stay(S[i], function(c) return set[ctx.gof[c]] end) then return nil end
  end
  if not ctx:legal(S) then return nil end
  local list = {}
  for i = 2, #S do list[#list + 1] = S[i] end
  return list
end

-- the values of merged groups: later epilogue ops may read them
local function mark_readable(ep, groups)
  for _, grp in ipairs(groups) do
    for _, n in ipairs(grp.nodes) do
      for _, uid in pairs(n.outputs) do ep.readable[uid] = true end
    end
  end
end

-- A reduction Q of one value of A over out_dims (rd: Q's reads of A): its node and result.
local function single_reduction(ctx, ep, Q, rd)
  if rd.from_A == 1 and #rd.others == 0 and Q.family == "reduction" and #Q.nodes == 1 then
    local r = Q.nodes[1]
    if same_dims(ctx:dims(r.inputs.input), ep.out_dims) then return r, ctx.g.by_uid[r.outputs.Y] end
  end
end

-- The roles a candidate group Q takes in the epilogue of A (ep: A, its anchor `a`, the
-- element space `out_dims`, the `readable` values, the per-row dims `row_dims` once known;
-- rd: Q's reads of A). applies(ctx, ep, Q, rd) -> match; apply(ctx, ep, Q, match).
M.EPILOGUE_RULES = {
  -- element ops over out_dims, with side chains of graph inputs (silu(gate))
  { role = "epilogue",
    applies = function(ctx, ep, Q, rd)
      return rd.from_A > 0 and Q.family == "pointwise" and ctx:nodes_have_dims(Q, ep.out_dims)
        and epilogue_with_sides(ctx, ep, Q, rd.others)
    end,
    apply = function(ctx, ep, Q, list)
      ctx:merge(ep.A, list, "epilogue")
      mark_readable(ep, list)
    end },
  -- a per-tensor amax into one fp32 output (fp8 quantize)
  { role = "amax",
    applies = function(ctx, ep, Q, rd)
      local _, y = single_reduction(ctx, ep, Q, rd)
      return y and Q.nodes[1].attrs.mode == "amax" and all_ones(y.dims) and y.role == "output" and y.dtype == "fp32"
        and ctx:legal({ ep.A, Q })
    end,
    apply = function(ctx, ep, Q) ctx:merge(ep.A, { Q }, "amax") end },
  -- (forward norms) a reduction over each row (a per-token amax), all of one per-row shape
  { role = "rowred",
    applies = function(ctx, ep, Q, rd)
      local r, y = single_reduction(ctx, ep, Q, rd)
      return y and ctx.rowred_anchors[ep.a.op] and per_row(y.dims, ep.out_dims)
        and (not ep.row_dims or same_dims(y.dims, ep.row_dims)) and ctx:legal({ ep.A, Q }) and r
    end,
    apply = function(ctx, ep, Q, r)
      ctx:merge(ep.A, { Q }, "rowred")
      ep.row_dims = ctx:dims(r.outputs.Y)
      ep.readable[r.outputs.Y] = true
    end },
  -- (forward norms) a block quantize along the row, written by the norm's kernel where an
  -- engine builds it there (opts.quantize_epilogue)
  { role = "quant",
    applies = function(ctx, ep, Q, rd)
      local opts = ctx.opts
      return rd.from_A == 1 and #rd.others == 0 and Q.family == "quantize" and #Q.nodes == 1 and ctx.rowred_anchors[ep.a.op]
        and Q.anchor.op == "block_scale_quantize" and same_dims(ctx:dims(Q.anchor.inputs.input), ep.out_dims)
        and opts.quantize_epilogue and opts.quantize_epilogue(ep.a, Q.anchor, ctx.g) and ctx:legal({ ep.A, Q })
    end,
    apply = function(ctx, ep, Q) ctx:merge(ep.A, { Q }, "quant") end },
  -- per-row ops on the per-row results (rowpw) and element ops after them (epilogue), one
  -- group as pointwise chains come: no per-row op may read an element op's value
  { role = "rowpw",
    applies = function(ctx, ep, Q, rd)
      if not (rd.from_A > 0 and #rd.others == 0 and Q.family == "pointwise" and ep.row_dims) then return nil end
      local role, elem = {}, {}
      for _, n in ipairs(Q.nodes) do
        local _, uid = next(n.outputs)
        local d = ctx:dims(uid)
        if same_dims(d, ep.row_dims) then
          role[n] = "rowpw"
          for _, p in ipairs(n.def.input_ports) do
            if elem[n.inputs[p.name]] then role[n] = nil end
          end
        elseif same_dims(d, ep.out_dims) then
          role[n] = "epilogue"
          for _, o in pairs(n.outputs) do elem[o] = true end
        end
        if not role[n] then return nil end
      end
      return ctx:legal({ ep.A, Q }) and role
    end,
    apply = function(ctx, ep, Q, role)
      ctx:merge(ep.A, { Q }, function(n) return role[n] end)
      mark_readable(ep, { Q })
    end },
}

-- Epilogue: groups that read only `readable` values of A over the element space `out_dims`
-- (per element, or per row: `row_dims`, the per-row dims of a row reduction's result or of
-- the group's first rowred, which the row engine checks), graph inputs and side chains of
-- them, taken until none is left.
local function take_epilogue(ctx, A, out_dims, readable, row_dims)
  local ep = { A = A, a = A.anchor, out_dims = out_dims, readable = readable, row_dims = row_dims }
  local changed = out_dims ~= nil
  while changed do
    changed = false
    for _, Q in ipairs(ctx.groups) do
      if not Q.dead and Q ~= A then
        local rd = reads_of(ctx, A, Q, readable)
        if rd.ok and take_first(M.EPILOGUE_RULES, ctx, ep, Q, rd) then changed = true end
      end
    end
  end
end

-- The values an epilogue of the anchored group A may read per element: its anchor's (or
-- sibling matmuls') element outputs and, with a prologue, its element inputs.
local function anchor_readable(ctx, A)
  local a = A.anchor
  local spec = ctx.anchors[a.op]
  local readable = {}
  for _, m in ipairs(A.matmuls or { a }) do
    for _, p in ipairs(spec.outs) do if m.outputs[p] then readable[m.outputs[p]] = true end end
  end
  for _, p in ipairs(spec.no_prologue and {} or spec.ins) do if a.inputs[p] then readable[a.inputs[p]] = true end end
  return readable
end

-- Whether two groups are independent: neither reads the other.
local function apart(ctx, A, B) return not ctx:deps(A)[B] and not ctx:deps(B)[A] end

M.PASSES = {
  -- block-scaled operands: a matmul's A or B that a block_scale_dequantize makes from fp8 data
  -- and its scales, read by nothing else, is scaled inside the matmul's kernel where an engine
  -- applies the scales there (opts.fuse_dequant(matmul, {A = node, B = node}): both or one);
  -- the group keeps the dequantize nodes (A.dequant[port])
  { name = "dequant",
    enabled = function(opts) return opts.fuse_dequant end,
    applies = function(ctx, A)
      if not (ctx:anchored(A) and A.anchor.op == "matmul" and #A.nodes == 1) then return nil end
      local found, Qs = nil, {}
      for _, port in ipairs({ "A", "B" }) do
        local uid = A.anchor.inputs[port]
        local Q = ctx:producer_group(uid)
        if Q and not Q.dead and #Q.nodes == 1 and Q.anchor and Q.anchor.op == "block_scale_dequantize" and ctx.g.by_uid[uid].role == "virtual"
          and #(ctx.consumers[uid] or {}) == 1 and A.anchor.inputs.A ~= A.anchor.inputs.B then
          found = found or {}
          found[port], Qs[#Qs + 1] = Q.anchor, Q
        end
      end
      return found and ctx.opts.fuse_dequant(A.anchor, found, ctx.g) and ctx:legal({ A, table.unpack(Qs) })
        and { found = found, groups = Qs }
    end,
    apply = function(ctx, A, match)
      A.dequant = match.found
      for _, Q in ipairs(match.groups) do ctx:absorb(A, Q) end
    end },
  -- sibling matmuls: two products of one A (the gate and up projections of a gated MLP) that
  -- an engine builds in one kernel (opts.fuse_matmuls: A's tiles loaded once, two
  -- accumulators) join before the epilogues, so an epilogue may read both
  { name = "sibling matmuls", pairwise = true,
    enabled = function(opts) return opts.fuse_matmuls end,
    applies = function(ctx, A, B)
      return ctx:anchored(A) and not A.matmuls and A.anchor.op == "matmul" and ctx:anchored(B) and B.anchor.op == "matmul"
        and #A.nodes == 1 and #B.nodes == 1 and apart(ctx, A, B)
        and ctx.opts.fuse_matmuls(A.anchor, B.anchor, ctx.g) and ctx:legal({ A, B })
    end,
    apply = function(ctx, A, B)
      A.matmuls = { A.anchor, B.anchor }
      ctx:absorb(A, B)
    end },
  -- each anchor's prologue, then its epilogue over its first output's element space
  { name = "prologue and epilogue",
    applies = function(ctx, A) return ctx:anchored(A) end,
    apply = function(ctx, A)
      local a = A.anchor
      local spec = ctx.anchors[a.op]
      take_prologue(ctx, A)
      local out_dims = #spec.outs > 0 and a.outputs[spec.outs[1]] and ctx:dims(a.outputs[spec.outs[1]])
      take_epilogue(ctx, A, out_dims, anchor_readable(ctx, A))
    end },
  -- a prologue whose own inputs were values of another pointwise group, since copied into it
  -- (x_hat computed in the group making dy * scale): the anchors visited before take it now
  { name = "late prologues",
    enabled = function(opts) return not opts.strict end,
    run = function(ctx)
      local more = true
      while more do
        more = false
        for _, A in ipairs(ctx.groups) do
          if ctx:anchored(A) and take_prologue(ctx, A) then more = true end
        end
      end
    end },
  -- sibling reductions: reductions of one input shape to one output shape that an engine
  -- builds in one kernel (opts.fuse_reductions: batch norm's backward sums dy and dy * x_hat)
  -- share the loads, when neither reads the other and no group lies between them; a node
  -- both prologues copied is computed once
  { name = "sibling reductions", pairwise = true,
    enabled = function(opts) return opts.fuse_reductions end,
    applies = function(ctx, A, B)
      return ctx:lone_reduction(A) and ctx:lone_reduction(B) and apart(ctx, A, B)
        and ctx.opts.fuse_reductions(A.reductions or { A.anchor }, B.anchor, ctx.g) and ctx:legal({ A, B })
    end,
    apply = function(ctx, A, B)
      A.reductions = A.reductions or { A.anchor }
      A.reductions[#A.reductions + 1] = B.anchor
      ctx:absorb(A, B, function(n) return n ~= B.anchor end)
    end },
  -- a row reduction's epilogue (opts.reduction_epilogue: an engine holds the row): element ops
  -- reading its per-row result and its prologue's values (dx from the per-row means of adaptive
  -- layer norm's backward) run in its kernel, which reads the row once, not twice
  { name = "reduction epilogue",
    enabled = function(opts) return opts.reduction_epilogue end,
    applies = function(ctx, A)
      local list = A.reductions or { A.anchor }
      return ctx:lone_reduction(A) and ctx.opts.reduction_epilogue(list, ctx.g) and list
    end,
    apply = function(ctx, A, list)
      local readable = {}
      for _, r in ipairs(list) do readable[r.outputs.Y] = true end
      for _, n in ipairs(A.prologue) do for _, uid in pairs(n.outputs) do readable[uid] = true end end
      take_epilogue(ctx, A, ctx:dims(list[1].inputs.input), readable, ctx:dims(list[1].outputs.Y))
    end },
  -- siblings: pointwise groups over the same element space merge into one kernel when no
  -- group lies between them (independent chains reading the same inputs read them once)
  { name = "sibling pointwise",
    run = function(ctx)
      local groups = ctx.groups
      for ai, A in ipairs(groups) do
        if not A.dead and A.family == "pointwise" and not A.anchor then
          -- the space of A's first node before any sibling joins
          local space = ctx:dims(select(2, next(A.nodes[1].outputs)))
          for bi = ai + 1, #groups do
            local B = groups[bi]
            if not B.dead and B.family == "pointwise" and not B.anchor and ctx:nodes_have_dims(A, space)
              and ctx:nodes_have_dims(B, space) and ctx:legal({ A, B }) then
              ctx:absorb(A, B)
            end
          end
        end
      end
    end },
}

-- Runs one pass over ctx's groups.
local function run_pass(ctx, pass)
  if pass.run then return pass.run(ctx) end
  local groups = ctx.groups
  for ai, A in ipairs(groups) do
    if pass.pairwise then
      for bi = ai + 1, #groups do
        local match = pass.applies(ctx, A, groups[bi])
        if match then pass.apply(ctx, A, groups[bi], match) end
      end
    else
      local match = pass.applies(ctx, A)
      if match then pass.apply(ctx, A, match) end
    end
  end
end

-- The fusion of the initial groups (each with .nodes, .family): merged groups are marked dead.
function M.fuse(g, groups, opts, anchors, rowred_anchors)
  local ctx = context.new(g, groups, opts, anchors, rowred_anchors)
  for _, pass in ipairs(M.PASSES) do
    if not pass.enabled or pass.enabled(opts) then run_pass(ctx, pass) end
  end
end

return M
