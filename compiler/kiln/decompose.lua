-- kiln.decompose: the graph the kernels are made from. An op whose definition has
-- `decompose(G, ins, attrs)` (batch norm in training, the backwards of batch, instance and
-- adaptive layer norm) is replaced by the ops it builds on G (reductions and pointwise ops the
-- engines fuse), their results bound to the op's own output tensors; every other node stays as
-- it is, and nodes whose values nothing reads or binds go. A plan still carries the spec's graph JSON, so
-- `kiln run --check` compares the decomposed kernels with the reference executor's op itself.
local errors = require "kiln.errors"
local graph = require "kiln.graph"

local M = {}

-- Removes tensor uid from G (its maker and its entries).
local function drop(G, uid)
  local t = G.by_uid[uid]
  G.producers[uid], G.by_uid[uid] = nil, nil
  for i, x in ipairs(G.tensors) do
    if x == t then table.remove(G.tensors, i); break end
  end
end

-- Makes U (a tensor of the op being replaced) the result t of its decomposition: the node that
-- made t makes U (through a cast where the dtypes differ), and the decomposition's later nodes
-- read U.
local function bind(G, first, t, U)
  local p = G.producers[t.uid]
  local made_here = false
  for i = first, #G.nodes do made_here = made_here or G.nodes[i] == p end
  if t.dtype ~= U.dtype or not made_here then
    t = G:cast(t, U.dtype)
    p = G.producers[t.uid]
  end
  for port, uid in pairs(p.outputs) do if uid == t.uid then p.outputs[port] = U.uid end end
  G.producers[U.uid] = p
  for i = first, #G.nodes do
    for port, uid in pairs(G.nodes[i].inputs) do
      if uid == t.uid then G.nodes[i].inputs[port] = U.uid end
    end
  end
  drop(G, t.uid)
end

-- Whether node n of g computes anything: a value some node reads (`read`) or the graph binds.
local function live(g, n, read)
  for _, uid in pairs(n.outputs) do
    if read[uid] or g.by_uid[uid].role ~= "virtual" then return true end
  end
  return false
end

local function reads(g)
  local read = {}
  for _, n in ipairs(g.nodes) do for _, uid in pairs(n.inputs) do read[uid] = true end end
  return read
end

-- Removes the nodes of G that compute nothing, and what only they read, until none is left
-- (a decomposition's output the graph does not use: batch norm's dscale when only dx is
-- returned; a value the spec computes and drops).
local function prune(G)
  repeat
    local read, gone = reads(G), false
    for i = #G.nodes, 1, -1 do
      local n = G.nodes[i]
      if not live(G, n, read) then
        table.remove(G.nodes, i)
        for _, uid in pairs(n.outputs) do drop(G, uid) end
        gone = true
      end
    end
  until not gone
end

-- g itself when no node decomposes, else a new graph with the same tensors (uids, names,
-- roles) and the decomposed nodes.
function M.graph(g)
  local any = false
  local read = reads(g)
  for _, n in ipairs(g.nodes) do any = any or n.def.decompose ~= nil or not live(g, n, read) end
  if not any then return g end
  local G = graph.new { name = g.name, io_dtype = g.io_dtype, intermediate_dtype = g.intermediate_dtype,
                        compute_dtype = g.compute_dtype, dims = g.dims }
  for name in pairs(g.used_names) do G.used_names[name] = true end
  G.output_names = g.output_names
  for _, t in ipairs(g.tensors) do
    local copy = {}
    for k, v in pairs(t) do copy[k] = v end
    G:add_tensor(copy)
  end
  for _, n in ipairs(g.nodes) do
    if n.def.decompose then
      local ins = {}
      for port, uid in pairs(n.inputs) do ins[port] = G.by_uid[uid] end
      local first = #G.nodes + 1
      local outs, why = n.def.decompose(G, ins, n.attrs)
      if not outs then errors.raise("E_NO_ENGINE", "graph '%s': %s '%s': %s", g.name, n.op, n.name, why) end
      for _, p in ipairs(n.def.output_ports) do
        local uid = n.outputs[p.name]
        if uid and not outs[p.name] then
          errors.raise("E_NO_ENGINE", "graph '%s': %s '%s': its decomposition makes no %s", g.name, n.op, n.name, p.name)
        end
        if uid then bind(G, first, outs[p.name], G.by_uid[uid]) end
      end
    else
      local copy = {}
      for k, v in pairs(n) do copy[k] = v end
      G.nodes[#G.nodes + 1] = copy
      for _, uid in pairs(n.outputs) do G.producers[uid] = copy end
    end
  end
  prune(G)
  return G
end

return M
