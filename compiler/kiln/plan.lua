-- kiln.plan: turns a graph instance into a plan manifest (docs/INTERNALS.md): the kernel
-- groups, each routed to an engine and built into CUDA source plus a launch rule.
local errors = require "kiln.errors"
local engines = require "kiln.engines"
local lower = require "kiln.lower"
local decompose = require "kiln.decompose"
local shape = require "kiln.shape"
local c = require "kiln.c"
local settings = require "kiln.settings"

local M = {}

-- target: { arch = "sm_90a", sm = 90 } (kiln build adds pack_sm, the least SM of the pack)
function M.target(arch)
  local kind, num, suffix = arch:match("^(%a+)_(%d+)(a?)$")
  if not num or (kind ~= "sm" and kind ~= "compute") then
    errors.raise("E_USAGE", "bad SM '%s' (want e.g. 80, 90a, 100a, compute_90)", arch)
  end
  return { arch = arch, sm = tonumber(num), arch_specific = suffix == "a", ptx = kind == "compute" }
end

local function route_groups(g, target, opts)
  local fused = not opts.strict
  local groups, all = lower.lower(g, { strict = opts.strict, fuse_reductions = fused and engines.fuse_reductions,
    reduction_epilogue = fused and not opts.no_reduction_epilogue and engines.reduction_epilogue,
    quantize_epilogue = fused and not opts.no_reduction_epilogue and engines.quantize_epilogue,
    fuse_matmuls = fused and function(a, b) return engines.fuse_matmuls(a, b, g, target) end,
    fuse_dequant = fused and function(m, qs) return engines.fuse_dequant(m, qs, g, target) end }), true
  for _, grp in ipairs(groups) do
    grp.plan, grp.report = engines.route(grp, g, target, opts.pins and opts.pins[grp.index - 1])
    all = all and grp.plan ~= nil
  end
  return groups, all
end

-- Routes every group of the graph the kernels are made from (decompose.graph: g, or g with
-- its decomposable ops replaced); returns the groups annotated with .plan and .report, and
-- that graph. Where the default fusion leaves a group without an engine (a prologue from
-- memory an engine cannot read), the default without element ops after row reductions (nor
-- block quantizes in norms' epilogues) is taken, else the conservative one, if every group has an engine there; else the default's
-- reasons stand. The graph setting fuse (KILN_PLAN=*.fuse=..., for measuring): strict takes the
-- conservative fusion always, rowsplit the default without element ops after row reductions.
-- A group's pinned plan (kiln.engines.route) comes from spec_graph.pins where set (kiln tune),
-- else from plans.lock (kiln.lock).
function M.route(spec_graph, target)
  local g = decompose.graph(spec_graph)
  local pins = rawget(spec_graph, "pins") or require("kiln.lock").pins(spec_graph, target.arch)
  local fuse = engines.graph_setting("fuse")
  if fuse == "strict" then return (route_groups(g, target, { strict = true, pins = pins })), g end
  if fuse == "rowsplit" then return (route_groups(g, target, { no_reduction_epilogue = true, pins = pins })), g end
  local groups, all = route_groups(g, target, { pins = pins })
  if all then return groups, g end
  local plain, plain_all = route_groups(g, target, { no_reduction_epilogue = true, pins = pins })
  if plain_all then return plain, g end
  local strict, strict_all = route_groups(g, target, { strict = true, pins = pins })
  if strict_all then return strict, g end
  return (route_groups(g, target, { pins = pins })), g
end

-- Whether an engine declined a group only for its kind ("group is a norm op (rmsnorm), not
-- pointwise"): a reason that says nothing about what to change in the spec.
local function other_kind(reason) return reason:find("^group is an? .- op %(.-%), not ") ~= nil end

-- "row: scale 'w' ... (the other 8 engines build other kinds of group)": the reasons of the
-- engines that build this kind of group, else every engine's.
local function reasons(report)
  local why, others = {}, 0
  for _, r in ipairs(report) do
    if other_kind(r.reason) then others = others + 1 else why[#why + 1] = r.engine .. ": " .. r.reason end
  end
  if #why == 0 then
    for _, r in ipairs(report) do why[#why + 1] = r.engine .. ": " .. r.reason end
  elseif others > 0 then
    why[#why] = string.format("%s (the other %d engine%s build other kinds of group)", why[#why], others,
      others == 1 and "" or "s")
  end
  return table.concat(why, "; ")
end

-- Groups are numbered from 0, as `kiln explain` and KILN_PLAN number them.
local function no_engine(g, grp, target)
  local ops = {}
  for _, n in ipairs(grp.nodes) do ops[#ops + 1] = n.op end
  errors.raise("E_NO_ENGINE", "graph '%s'%s: no engine for kernel group %d (%s) on %s: %s", g.name,
    g:instance_key() ~= "" and (" [" .. g:instance_key() .. "]") or "", grp.index - 1, table.concat(ops, ", "),
    target.arch, reasons(grp.report))
end

-- Raises E_NO_ENGINE for the first kernel group of the graph that no engine takes on target
-- (engine selection alone: no kernel is generated).
function M.check_engines(spec_graph, target)
  local groups, g = M.route(spec_graph, target)
  for _, grp in ipairs(groups) do
    if not grp.plan then no_engine(g, grp, target) end
  end
end

-- The manifest of one instance for one target; kernels carry their CUDA source.
function M.manifest(spec_graph, target)
  local groups, g = M.route(spec_graph, target)
  local kernels, align = c.json_array(), {}
  local workspaces = {}
  for _, grp in ipairs(groups) do
    if not grp.plan then no_engine(g, grp, target) end
    local symbol = string.format("kiln_%s_k%d", g.name, grp.index - 1)
    -- an engine builds one kernel, or { kernels = {...}, workspace = {rule =, bytes_max =} }
    -- (under the settings the plan was proposed under)
    local built = settings.during(grp.plan.settings, grp.plan.engine.build, grp.plan, grp, g, target, symbol)
    local list = built.kernels or { built }
    if built.workspace then workspaces[#workspaces + 1] = built.workspace end
    for _, k in ipairs(list) do
      for uid, a in pairs(k.align or {}) do align[uid] = math.max(align[uid] or 1, a) end
      k.align = nil
      k.params = c.json_array(k.params)
      k.options = c.json_array(k.options)
      kernels[#kernels + 1] = k
    end
  end
  -- Groups run one after another, so they share the workspace from offset 0: one group's
  -- rule as it is, several groups' largest size (on the largest device) as a constant, or one unbounded rule (a
  -- split backward norm's row sums: bytes_max nil) with the others' largest as its constant.
  local workspace
  if #workspaces == 1 then
    workspace = workspaces[1].rule
  elseif #workspaces > 1 then
    local bytes, open = 0, nil
    for _, w in ipairs(workspaces) do
      if w.bytes_max then bytes = math.max(bytes, w.bytes_max)
      elseif open then
        errors.raise("E_NO_ENGINE", "graph '%s': two kernel groups need a workspace that grows with the rows (split backward norms); make them separate graphs", g.name)
      else open = w.rule end
    end
    workspace = open and { mul = open.mul, div = open.div, max = open.max, sm_mul = open.sm_mul, sm_div = open.sm_div,
                           add = math.max(open.add or 0, bytes) }
      or { mul = c.json_array({ bytes }), div = 1, max = 0 }
  end
  if workspace then workspace.mul = c.json_array(workspace.mul) end
  local tensors, scratch = c.json_array(), false
  for _, t in ipairs(g.tensors) do
    scratch = scratch or t.role == "scratch"
    if t.role ~= "virtual" and t.role ~= "constant" then
      tensors[#tensors + 1] = { uid = t.uid, name = t.name, dtype = t.dtype, dims = c.json_array(shape.copy(t.dims)),
                                strides = c.json_array(shape.copy(t.strides)), role = t.role,
                                align = align[t.uid] or require("kiln.dtypes").size(t.dtype) }
    end
  end
  -- scratch tensors lie in the workspace after the kernels' own bytes (the runtime places them)
  if scratch and not workspace then workspace = 0 end
  return { schema = "kiln.plan", version = 1, graph = g.name, instance = g:instance_key(),
           dynamic = c.json_array(g:dynamic_dims()), tensors = tensors, kernels = kernels,
           workspace = workspace, graph_json = spec_graph:to_json() }
end

return M
