-- kiln.lower.context: the state the fusion rules (kiln.lower.rules) share while they merge
-- kernel groups, and the questions and moves they are made of: which groups a group reads
-- (deps), whether merging a set keeps the group graph acyclic (legal), merging groups into an
-- anchor's roles (merge), a sibling into a group (absorb), and copying a pointwise group into
-- every reader (recompute, merge_copies). A group is dead once merged; `gof` maps each node to
-- the live group that computes it.
local shape = require "kiln.shape"
local dtypes = require "kiln.dtypes"

local C = {}
C.__index = C

function C.same_dims(a, b) return shape.format(a) == shape.format(b) end
local same_dims = C.same_dims

function C.all_ones(dims)
  for _, d in ipairs(dims) do if d ~= 1 then return false end end
  return true
end

-- Whether dims are one value per row of the element space `space`: the same rank, a trailing
-- block of ones (the last axis among them), the leading axes equal.
function C.per_row(dims, space)
  if #dims ~= #space or dims[#dims] ~= 1 then return false end
  local ones = true
  for i = #dims, 1, -1 do
    if ones and dims[i] ~= 1 then ones = false end
    if not ones and shape.format({ dims[i] }) ~= shape.format({ space[i] }) then return false end
  end
  return true
end

-- A node computed again in another group: a copy that names its original (a copy's copy, the
-- same original).
function C.copy_node(nd)
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

-- The lists an anchored group keeps its fused nodes in, one per role.
C.ROLES = { "prologue", "epilogue", "amax", "rowred", "rowpw", "quant" }

-- The context of one fusion run over `groups` (each with .nodes, .family, .anchor): `anchors`
-- is lower.ANCHORS, `rowred_anchors` lower.ROWRED, `opts` lower.lower's options.
function C.new(g, groups, opts, anchors, rowred_anchors)
  local ctx = setmetatable({
    g = g, groups = groups, opts = opts, anchors = anchors, rowred_anchors = rowred_anchors,
    order = {}, gof = {}, consumers = g:consumers(),
    copied = {},  -- nodes of a group copied into its readers (each copy computes its own)
  }, C)
  for i, n in ipairs(g.nodes) do ctx.order[n] = i end
  -- a closure, for table.sort, over the order that copies extend
  ctx.by_order = function(a, b) return ctx.order[a] < ctx.order[b] end
  ctx:refresh()
  for _, A in ipairs(groups) do
    if A.anchor and anchors[A.anchor.op] then
      for _, role in ipairs(C.ROLES) do A[role] = {} end
    end
  end
  return ctx
end

function C:refresh()
  for _, grp in ipairs(self.groups) do
    if not grp.dead then for _, n in ipairs(grp.nodes) do self.gof[n] = grp end end
  end
end

function C:producer_group(uid)
  local p = self.g.producers[uid]
  return p and self.gof[p]
end

function C:is_source(uid) return self.g.producers[uid] == nil end

function C:dims(uid) return self.g.by_uid[uid].dims end

-- A live group whose anchor is one the fusion knows.
function C:anchored(A) return A.anchor and self.anchors[A.anchor.op] and not A.dead end

-- A live reduction group with nothing fused after it (its siblings and prologue allowed).
function C:lone_reduction(grp)
  return not grp.dead and grp.anchor and grp.anchor.op == "reduction" and #(grp.epilogue or {}) == 0 and #(grp.amax or {}) == 0
    and #(grp.rowred or {}) == 0 and #(grp.rowpw or {}) == 0
end

-- Whether the anchor node c reads uid only at its element ports (the inputs a prologue makes).
function C:read_per_element(c, uid)
  local spec = self.anchors[c.op]
  for port, v in pairs(c.inputs) do
    if v == uid then
      local element = false
      for _, ep in ipairs(spec.ins) do element = element or ep == port end
      if not element then return false end
    end
  end
  return true
end

-- uids a group reads that it does not produce, in a stable order
function C:ext_inputs(grp)
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

-- The set of other groups grp reads from.
function C:deps(grp)
  local d = {}
  for _, uid in ipairs(self:ext_inputs(grp)) do
    local pg = self:producer_group(uid)
    if pg and pg ~= grp then d[pg] = true end
  end
  return d
end

-- Merging the set S is legal when no group outside S lies on a path between two members:
-- walk up from S through other groups; none of them may depend on a member of S.
function C:legal(S)
  local inS = {}
  for _, grp in ipairs(S) do inS[grp] = true end
  local up, stack = {}, {}
  for _, grp in ipairs(S) do for d in pairs(self:deps(grp)) do stack[#stack + 1] = d end end
  while #stack > 0 do
    local x = table.remove(stack)
    if not inS[x] and not up[x] then
      up[x] = true
      for d in pairs(self:deps(x)) do stack[#stack + 1] = d end
    end
  end
  for _, grp in ipairs(self.groups) do
    if not grp.dead and up[grp] then
      for d in pairs(self:deps(grp)) do if inS[d] then return false end end
    end
  end
  return true
end

function C:nodes_have_dims(grp, dims)
  for _, n in ipairs(grp.nodes) do
    for _, uid in pairs(n.outputs) do
      if not same_dims(self:dims(uid), dims) then return false end
    end
  end
  return true
end

function C:only_sources(grp)
  for _, uid in ipairs(self:ext_inputs(grp)) do if not self:is_source(uid) then return false end end
  return true
end

-- graph inputs, or what anchored kernels make (a reduction's result: in memory anyway); a
-- pointwise group's values are better fused with it (the sibling merge)
-- (or a value smaller than the element space `space` a pointwise kernel makes: it is written
-- by a small kernel of its own, lower's split_small_outputs; batch norm's r read by its backward)
function C:sources_or_anchored(grp, space)
  for _, uid in ipairs(self:ext_inputs(grp)) do
    local pg = self:producer_group(uid)
    if not self:is_source(uid) and not (pg and pg.anchor)
      and not (pg and pg.family == "pointwise" and space and not same_dims(self:dims(uid), space)) then
      return false
    end
  end
  return true
end

-- every virtual tensor grp produces is read only by nodes `allowed(node, uid)` accepts
function C:virtuals_stay(grp, allowed)
  for _, n in ipairs(grp.nodes) do
    for _, uid in pairs(n.outputs) do
      if self.g.by_uid[uid].role == "virtual" then
        for _, c in ipairs(self.consumers[uid] or {}) do
          if self.gof[c] ~= grp and not allowed(c, uid) then return false end
        end
      end
    end
  end
  return true
end

-- Whether a group R reading P's value uid (at node c) can compute P again itself: a pointwise
-- group with some value over the element space `space` (its per-channel or per-row ops may
-- stay smaller: the pointwise engine broadcasts), or an anchor reading uid per element.
function C:can_recompute_in(R, c, uid, space)
  if R.family == "pointwise" and not R.anchor then
    for _, rn in ipairs(R.nodes) do
      for _, o in pairs(rn.outputs) do if same_dims(self:dims(o), space) then return true end end
    end
    return false
  end
  local spec = R.anchor == c and self.anchors[c.op]
  return spec and not spec.no_prologue and self:read_per_element(c, uid)
end

-- Whether a pointwise group P whose values several kernels read (one sum feeding a norm and a
-- softmax; batch norm's x - mean feeding the variance and the output) is better computed
-- again in each of them than written to scratch once: its values are read only by anchors at
-- their element ports and by pointwise groups over the same elements, none is a graph output,
-- and n readers reading P's inputs again move fewer bytes than one write and n + 1 reads of
-- its values. Returns the reading groups in group order.
function C:recompute(P, space)
  if self.opts.strict then return nil end
  local seen, readers, src, out = {}, {}, 0, 0
  for _, nd in ipairs(P.nodes) do
    for _, uid in pairs(nd.outputs) do
      if self.g.by_uid[uid].role ~= "virtual" then return nil end  -- one kernel writes an output
      local read = false
      for _, c in ipairs(self.consumers[uid] or {}) do
        local R = self.gof[c]
        if R ~= P and not self.copied[c] then
          if not R or not self:can_recompute_in(R, c, uid, space) then return nil end
          if not seen[R] then seen[R] = true; readers[#readers + 1] = R end
          read = true
        end
      end
      if read then out = out + dtypes.size(self.g.by_uid[uid].dtype) end
    end
  end
  for _, uid in ipairs(self:ext_inputs(P)) do
    local t = self.g.by_uid[uid]
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
function C:merge_copies(P, readers)
  for _, R in ipairs(readers) do
    for _, nd in ipairs(not_in(R, P.nodes)) do
      local copy = C.copy_node(nd)
      self.order[copy] = self.order[nd]
      R.nodes[#R.nodes + 1] = copy
      if R.anchor then R.prologue[#R.prologue + 1] = copy end
    end
    table.sort(R.nodes, self.by_order)
    if R.anchor then table.sort(R.prologue, self.by_order) end
  end
  P.dead = true
  for _, nd in ipairs(P.nodes) do self.gof[nd], self.copied[nd] = nil, true end
  self:refresh()
end

-- The groups of `list` join the anchored group A, each node in A's list of its role: `role`,
-- a name of C.ROLES or a function of the node that gives one.
function C:merge(A, list, role)
  for _, grp in ipairs(list) do
    for _, n in ipairs(not_in(A, grp.nodes)) do
      A.nodes[#A.nodes + 1] = n
      local r = type(role) == "function" and role(n) or role
      local into = A[r] or A.prologue
      into[#into + 1] = n
    end
    grp.dead = true
  end
  table.sort(A.nodes, self.by_order)
  for _, r in ipairs(C.ROLES) do table.sort(A[r], self.by_order) end
  self:refresh()
end

-- a sibling B joins A: B's nodes A lacks (in_prologue(n) true: also to A's prologue), B's group goes
function C:absorb(A, B, in_prologue)
  for _, n in ipairs(not_in(A, B.nodes)) do
    A.nodes[#A.nodes + 1] = n
    if in_prologue and in_prologue(n) then A.prologue[#A.prologue + 1] = n end
  end
  table.sort(A.nodes, self.by_order)
  if A.prologue then table.sort(A.prologue, self.by_order) end
  B.dead = true
  self:refresh()
end

return C
