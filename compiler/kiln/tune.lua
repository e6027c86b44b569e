-- kiln.tune: `kiln tune SPEC --set DIM=N ...` — on this machine's GPU, every candidate plan of
-- every kernel group (each engine's plans, and its top plan under each other value of each of
-- its settings), distinct kernels only, built through the cache, checked against the reference
-- executor and timed on the same inputs; every one that passes, fastest first (the default
-- among them), goes to plans.lock (kiln.lock), one entry per graph instance and shape class.
local c = require "kiln.c"
local errors = require "kiln.errors"
local engines = require "kiln.engines"
local lock = require "kiln.lock"
local plan = require "kiln.plan"
local settings = require "kiln.settings"

local M = {}

local function usage(fmt, ...) errors.raise_at(nil, nil, "E_USAGE", fmt, ...) end

-- Setting names in order, so that candidates come in the same order every run.
local function sorted_keys(t)
  local keys = {}
  for k in pairs(t or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

-- The settings of `set` that differ from engine's defaults: NAME -> value (what a lock entry
-- keeps), and as "NAME=value" items in name order (for labels).
local function changed(engine, set)
  local map, items = {}, {}
  for _, name in ipairs(sorted_keys(engine.settings)) do
    if set[name] ~= engine.settings[name][1] then map[name] = set[name]; items[#items + 1] = name .. "=" .. set[name] end
  end
  return map, items
end

-- The candidates of group grp: { engine =, id =, settings = (full), label = }, the router's
-- default first.
local function candidates(grp, g, target)
  local out, seen = {}, {}
  local function add(engine, set, p)
    local map, diff = changed(engine, set or {})
    local key = engine.id .. " " .. p.id .. " " .. table.concat(diff, ",")
    if seen[key] then return end
    seen[key] = true
    out[#out + 1] = { engine = engine.id, id = p.id, settings = set or {}, changed = map,
                      label = p.id .. (#diff > 0 and (" [" .. table.concat(diff, " ") .. "]") or "") }
  end
  local function propose(engine, set)
    local ok, plans = pcall(settings.during, set, engine.propose, grp, g, target)
    if not ok or not plans then return {} end
    table.sort(plans, function(a, b) return (a.rank or 0) > (b.rank or 0) end)
    return plans
  end
  add(grp.plan.engine, grp.plan.settings, grp.plan)
  for _, engine in ipairs(engines.list) do
    local defaults = engines.settings_of(engine, { ids = {}, knobs = {} })
    local plans = propose(engine, defaults)
    for _, p in ipairs(plans) do add(engine, defaults, p) end
    if #plans > 0 then
      for _, name in ipairs(sorted_keys(engine.settings)) do
        local values = engine.settings[name]
        for _, v in ipairs(values.tune or values) do
          if v ~= values[1] then
            local set = {}
            for k, x in pairs(defaults) do set[k] = x end
            set[name] = v
            local top = propose(engine, set)[1]
            if top then add(engine, set, top) end
          end
        end
      end
    end
  end
  return out
end

-- The manifest of g on target with group gi pinned to candidate cand (nil: the default), and
-- a key of its kernels' code; nil and the error where it cannot be built.
local function manifest_with(g, target, gi, cand)
  g.pins = {}
  if cand then g.pins[gi] = { engine = cand.engine, id = cand.id, settings = cand.settings, source = "kiln tune" } end
  local ok, m = pcall(plan.manifest, g, target)
  g.pins = nil
  if not ok then return nil, tostring(type(m) == "table" and m.msg or m) end
  local parts = {}
  for _, k in ipairs(m.kernels) do
    parts[#parts + 1] = k.symbol .. "\0" .. k.source .. "\0" .. table.concat(k.options, " ")
  end
  return m, c.hash(table.concat(parts, "\0"))
end

-- Compiles the manifests' kernels at once (in parallel, through the cache); a pack per manifest.
local function packs_of(manifests, target)
  local jobs, at = {}, {}
  for mi, m in ipairs(manifests) do
    for ki, k in ipairs(m.kernels) do
      jobs[#jobs + 1] = { name = k.symbol .. "_" .. target.arch, symbol = k.symbol, source = k.source,
                          arch = target.arch, options = k.options }
      at[#jobs] = { mi, ki }
    end
  end
  local results = c.compile(jobs)
  local images = {}
  for j, r in ipairs(results) do
    local mi, ki = at[j][1], at[j][2]
    images[mi] = images[mi] or {}
    images[mi][ki] = r.cubin
  end
  local packs = {}
  for mi, m in ipairs(manifests) do
    for _, k in ipairs(m.kernels) do k.source, k.cuda = nil, nil end
    packs[mi] = c.pack_build { { manifest = c.json_encode(m), archs = { target.arch }, images = { images[mi] or {} } } }
  end
  return packs
end

-- Every candidate of every group of graph instance g, distinct kernels only: { {gi =, cand =,
-- manifest =}, ... } with the default (gi nil) first, and the groups routed by default.
local function trials_of(g, target, verbose)
  g.pins = {}
  local groups, dg = plan.route(g, target)
  g.pins = nil
  local base, base_key = manifest_with(g, target, nil, nil)
  if not base then errors.raise_at(nil, nil, "E_NO_ENGINE", "graph '%s': %s", g.name, base_key) end
  local trials, seen = { { manifest = base } }, { [base_key] = true }
  for _, grp in ipairs(groups) do
    local gi = grp.index - 1
    for _, cand in ipairs(candidates(grp, dg, target)) do
      local m, key = manifest_with(g, target, gi, cand)
      if not m then
        if verbose then io.write(string.format("  group %d: %s: cannot be built: %s\n", gi, cand.label, key)) end
      elseif not seen[key] then
        seen[key] = true
        trials[#trials + 1] = { gi = gi, cand = cand, manifest = m }
      end
    end
  end
  return trials, groups
end

-- The lock entry of one measured instance.
local function entry_of(g, target, dims, trials, results, groups)
  local env = lock.environment()
  local e = { schema = lock.SCHEMA, version = 1, graph = g.name, instance = g:instance_key(),
              spec_hash = lock.spec_hash(g), shape_class = lock.shape_class(g, dims),
              environment = { gpu = env.gpu, sm = target.arch, sm_count = env.sm_count, driver = env.driver,
                              nvrtc = env.nvrtc, cudnn = env.cudnn, kiln = env.kiln },
              timing = "median per launch over CUDA graph replays of the plan, L2 warm (the same inputs each launch)",
              groups = c.json_array() }
  for _, grp in ipairs(groups) do
    local gi, ops = grp.index - 1, {}
    for _, n in ipairs(grp.nodes) do ops[#ops + 1] = n.op end
    local default = { id = grp.plan.id, engine = grp.plan.engine.id, settings = {}, median_us = results[1].median_ms * 1e3,
                      samples = results[1].samples, default = true }
    local list = { default }
    for t, trial in ipairs(trials) do
      local r = results[t]
      if trial.gi == gi and r.mismatched_outputs == 0 then
        list[#list + 1] = { id = trial.cand.id, engine = trial.cand.engine, settings = trial.cand.changed, median_us = r.median_ms * 1e3,
                            samples = r.samples }
      end
    end
    table.sort(list, function(a, b) return a.median_us < b.median_us end)
    for _, p in ipairs(list) do
      p.median_us = math.floor(p.median_us * 1000 + 0.5) / 1000
      p.default = nil
    end
    e.groups[#e.groups + 1] = { group = gi, ops = table.concat(ops, " "), default = default.id, plans = c.json_array(list) }
  end
  return e
end

-- Tunes one graph instance at dims; returns the lock file written.
local function tune_instance(g, target, dims, args)
  local trials, groups = trials_of(g, target, args.v)
  local manifests = {}
  for i, t in ipairs(trials) do manifests[i] = t.manifest end
  io.write(string.format("tune %s%s at %s on %s: %d distinct plans\n", g.name,
    g:instance_key() ~= "" and (" [" .. g:instance_key() .. "]") or "", lock.shape_class(g, dims), target.arch, #trials))
  local results = c.run { packs = packs_of(manifests, target), graph = g.name, instance = g:instance_key(), dims = dims,
                          check = true, bench = true, quiet = not args.v, iters = tonumber(args.iters or "0") or 0,
                          ranges = require("kiln.run").index_ranges(g, dims) }
  if results[1].mismatched_outputs > 0 then
    errors.raise_at(nil, nil, "E_NUMERIC", "graph '%s': the default plan differs from the reference executor", g.name)
  end
  local base = results[1].median_ms
  for t, trial in ipairs(trials) do
    local r = results[t]
    io.write(string.format("  %-8s %9.2f us  %5.3fx  %s%s\n", trial.gi and ("group " .. trial.gi) or "default", r.median_ms * 1e3,
      base / r.median_ms, trial.cand and trial.cand.label or "(every group's ranked plan)",
      r.mismatched_outputs > 0 and "  FAILS THE CHECK: left out" or ""))
  end
  local e = entry_of(g, target, dims, trials, results, groups)
  for _, grp in ipairs(e.groups) do
    io.write(string.format("  group %d winner: %s, %.2f us (default %s)\n", grp.group, grp.plans[1].id, grp.plans[1].median_us, grp.default))
  end
  local path = lock.write(args.plans_lock or lock.DEFAULT, g, target.arch, e)
  io.write(string.format("  written: %s\n", path))
  return path
end

-- `kiln tune --list`: the distinct candidates tune would measure, without a GPU.
local function list_instance(g, target, args_lock)
  local trials = trials_of(g, target, true)
  io.write(string.format("graph %s%s for %s: %d distinct plans; spec hash %s; lock entries %s\n", g.name,
    g:instance_key() ~= "" and (" [" .. g:instance_key() .. "]") or "", target.arch, #trials, lock.spec_hash(g),
    lock.path(args_lock, g, target.arch, "CLASS")))
  for _, t in ipairs(trials) do
    io.write(string.format("  %-8s %s\n", t.gi and ("group " .. t.gi) or "default", t.cand and t.cand.label or "(every group's ranked plan)"))
  end
end

function M.run(args)
  if #args.positional == 0 then usage("tune needs a SPEC") end
  if (c.getenv("KILN_PLAN") or "") ~= "" then usage("tune measures every candidate itself: unset KILN_PLAN") end
  local target
  if args.list then
    target = plan.target(args.sm[1] or "sm_90a")
  else
    local arch = c.device_arch()
    target = plan.target(args.sm[1] or arch)
    if target.arch ~= arch then usage("tune measures on this machine's GPU (%s), not %s", arch, target.arch) end
  end
  local runs = 0
  for _, g in ipairs(require("kiln.build").load_all(args, { keep_dynamic = true })) do
    if require("kiln.run").matches(g:instance_key(), args.instance) then
      local dims = {}
      for _, name in ipairs(g:dynamic_dims()) do
        dims[name] = args.set[name] or args.list and 0 or
          usage("tune: graph '%s' has the dynamic dim %s: give the value to tune at, --set %s=N", g.name, name, name)
      end
      if args.list then list_instance(g, target, args.plans_lock or lock.DEFAULT) else tune_instance(g, target, dims, args) end
      runs = runs + 1
    end
  end
  if runs == 0 then usage("no instance matches --instance %s", tostring(args.instance)) end
  return 0
end

return M
