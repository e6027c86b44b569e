-- kiln.build: `kiln build` — every kernel of every spec instance for every SM, compiled
-- in parallel through the cache, optionally written to a pack (and C source embedding it).
local c = require "kiln.c"
local errors = require "kiln.errors"
local plan = require "kiln.plan"
local record = require "kiln.record"

local M = {}

-- Whether e is spec.load's error for a spec without the graph `name`.
local function lacks_graph(e, name)
  return errors.is(e) and e.code == "E_SPEC" and e.msg == string.format("no graph named '%s' in this spec", name)
end

-- The graphs of one file named in `names` (a list; found[name] set for each one it has).
local function load_named(path, args, names, found, keep_dynamic)
  local spec, out = require "kiln.spec", {}
  local opts = { set = args.set, keep_dynamic = keep_dynamic }
  if path:match("%.json$") then  -- graph JSON: the names of its graphs, read all at once
    local want = {}
    for _, n in ipairs(names) do want[n] = true end
    for _, g in ipairs(spec.load_graphs(path, opts)) do
      if want[g.name] then found[g.name] = true; out[#out + 1] = g end
    end
    return out
  end
  for _, name in ipairs(names) do
    opts.graph = name
    local ok, graphs = pcall(spec.load, path, opts)
    if ok then
      found[name] = true
      for _, g in ipairs(graphs) do out[#out + 1] = g end
    elseif not lacks_graph(graphs, name) then error(graphs, 0) end
  end
  return out
end

-- Every graph instance of the files in args.positional, only those named by --graph where
-- given (each name in at least one file). opts.keep_dynamic: as spec.load; opts.failures: a
-- list that collects each file's error ({what =, err =}) instead of raising it.
function M.load_all(args, opts)
  opts = opts or {}
  local spec, out, found = require "kiln.spec", {}, {}
  local names = {}
  for _, n in ipairs(args.graph or {}) do
    if found[n] == nil then found[n] = false; names[#names + 1] = n end
  end
  for _, path in ipairs(args.positional) do
    local ok, graphs = pcall(function()
      if #names == 0 then return spec.load_graphs(path, { set = args.set, keep_dynamic = opts.keep_dynamic }) end
      return load_named(path, args, names, found, opts.keep_dynamic)
    end)
    if ok then for _, g in ipairs(graphs) do out[#out + 1] = g end
    elseif opts.failures then table.insert(opts.failures, { what = path, err = errors.from_lua(graphs, "E_SPEC") })
    else error(graphs, 0) end
  end
  for _, n in ipairs(names) do
    if found[n] == false and not (opts.failures and #opts.failures > 0) then
      errors.raise_at(nil, nil, "E_SPEC", "no graph named '%s' in %s", n, table.concat(args.positional, ", "))
    end
  end
  return out
end

-- Launch metadata must agree across SMs: one kernel list per plan in the pack. Only the
-- dynamic shared memory and the cluster may differ (kept per image: an SM with more shared
-- memory runs a deeper pipeline, one with clusters shares tiles).
local function launch_signature(m)
  local parts = {}
  for _, k in ipairs(m.kernels) do
    parts[#parts + 1] = c.json_encode({ k.symbol, k.block, k.grid, k.params })
  end
  return table.concat(parts, "|")
end

-- Every SM's plan sees the pack's least SM (pack_sm): a plan only newer SMs can build (a
-- cluster layout) would break the one kernel list.
local function targets_of(archs)
  local targets, least = {}, math.huge
  for a, arch in ipairs(archs) do
    targets[a] = plan.target(arch)
    least = math.min(least, targets[a].sm)
  end
  for _, t in ipairs(targets) do t.pack_sm = least end
  return targets
end

-- One graph's plan: its manifest for every SM, one kernel list across them.
local function plan_graph(g, archs, targets)
  local p = { graph = g, manifests = {}, images = {} }
  for a, arch in ipairs(archs) do
    local m = plan.manifest(g, targets[a])
    if a > 1 and launch_signature(m) ~= launch_signature(p.manifests[1]) then
      errors.raise_at(nil, nil, "E_PACK", "graph '%s' [%s]: kernels differ between %s and %s (one pack plan needs one kernel list)",
        g.name, m.instance, archs[1], arch)
    end
    p.manifests[a] = m
  end
  return p
end

-- The compile jobs of plans: one per SM and distinct kernel source, shared by its users.
local function jobs_of(plans, archs)
  local jobs, by_source = {}, {}
  for _, p in ipairs(plans) do
    for a, arch in ipairs(archs) do
      local m = p.manifests[a]
      for ki, k in ipairs(m.kernels) do
        local id = arch .. "\0" .. k.symbol .. "\0" .. k.source
        local job = by_source[id]
        if not job then
          job = { name = string.format("%s%s_%s", k.symbol, m.instance ~= "" and ("_" .. m.instance:gsub("[^%w]", "_")) or "", arch),
                  symbol = k.symbol, source = k.source, arch = arch, options = k.options, users = {} }
          by_source[id] = job
          jobs[#jobs + 1] = job
        end
        table.insert(job.users, { plan = p, arch_index = a, kernel = ki })
      end
    end
  end
  return jobs
end

-- "graph 'name' [H=4096]", as errors and summaries name an instance.
local function graph_label(g)
  local key = g:instance_key()
  return string.format("graph '%s'%s", g.name, key ~= "" and (" [" .. key .. "]") or "")
end

-- The plans and compile jobs of every graph. failures (a list) collects each file or graph
-- that cannot be planned ({what =, err =}) instead of raising its error.
function M.plans(args, failures)
  if #args.positional == 0 then errors.raise_at(nil, nil, "E_USAGE", "build needs at least one SPEC") end
  if #args.sm == 0 then errors.raise_at(nil, nil, "E_USAGE", "build needs --sm (e.g. --sm 90a)") end
  local targets, plans = targets_of(args.sm), {}
  for _, g in ipairs(M.load_all(args, { failures = failures })) do
    if failures then
      local ok, p = pcall(plan_graph, g, args.sm, targets)
      if ok then plans[#plans + 1] = p
      else failures[#failures + 1] = { what = graph_label(g), err = errors.from_lua(p, "E_INTERNAL") } end
    else
      plans[#plans + 1] = plan_graph(g, args.sm, targets)
    end
  end
  return plans, jobs_of(plans, args.sm)
end

-- The plans and compile jobs of a record file's builds (kiln.record, --from FILE), each graph
-- instance once, for the SMs of --sm and of every recorded build.
local function replay(args, failures)
  local builds = record.read(args.from)
  local sms, seen = {}, {}
  local function add(sm) if not seen[sm] then seen[sm], sms[#sms + 1] = true, sm end end
  for _, sm in ipairs(args.sm) do add(sm) end
  for _, b in ipairs(builds) do for _, sm in ipairs(b.sm) do add(sm) end end
  args.sm = sms
  local plans, have = {}, {}
  for _, b in ipairs(builds) do
    local ps = M.plans({ positional = b.positional, set = b.set, graph = b.graph, sm = sms }, failures)
    for _, p in ipairs(ps) do
      local key = p.manifests[1].graph .. "\0" .. p.manifests[1].instance
      if not have[key] then have[key], plans[#plans + 1] = true, p end
    end
  end
  return plans, jobs_of(plans, sms)
end

-- Compiles every job through the cache; fills each plan's images. Returns the results.
function M.compile(plans, jobs, threads)
  local results = c.compile(jobs, threads or 0)
  for i, job in ipairs(jobs) do
    for _, u in ipairs(job.users) do
      u.plan.images[u.arch_index] = u.plan.images[u.arch_index] or {}
      u.plan.images[u.arch_index][u.kernel] = results[i].cubin
    end
  end
  return results
end

-- The pack holding every plan, for the SMs in archs.
function M.pack_bytes(plans, archs)
  local list = {}
  for _, p in ipairs(plans) do
    local m = p.manifests[1]
    for ki, k in ipairs(m.kernels) do
      k.source, k.cuda = nil, nil
      k.by_arch = {}
      for a, arch in ipairs(archs) do
        local ka = p.manifests[a].kernels[ki]
        k.by_arch[arch] = { smem = ka.smem, cluster = ka.cluster }
      end
    end
    list[#list + 1] = { manifest = c.json_encode(m), archs = archs, images = p.images }
  end
  return c.pack_build(list)
end

-- A failure as "kiln: error: ..." prints it, naming its graph where the error does not.
local function failure_text(f)
  local text = tostring(f.err)
  if f.what:match("^graph ") and not text:find(f.what:match("^graph '[^']*'"), 1, true) then text = f.what .. ": " .. text end
  return text
end

-- Writes the pack (-o) and its C source (--emit-c) of plans.
local function write_outputs(args, plans)
  local pack_bytes = M.pack_bytes(plans, args.sm)
  if args.o then c.write_file(args.o, pack_bytes) end
  if args.emit_c then
    local name = args.o and args.o:match("([^/]+)$"):gsub("%..*$", ""):gsub("[^%w_]", "_") or "kiln_pack"
    c.mkdir(args.emit_c)
    c.emit_c(args.emit_c, name, pack_bytes)
  end
end

-- Builds every graph it can; a graph or file that fails is reported, the pack holds the
-- others and the exit status is 1.
function M.run(args)
  local t0 = c.clock_ms()
  local failures = {}
  if args.from and #args.positional > 0 then errors.raise_at(nil, nil, "E_USAGE", "build takes SPECs or --from FILE, not both") end
  if args.from and (#args.graph > 0 or next(args.set)) then
    errors.raise_at(nil, nil, "E_USAGE", "build --from FILE takes no --graph or --set: the record names each build's graphs and dims")
  end
  local plans, jobs
  if args.from then plans, jobs = replay(args, failures) else plans, jobs = M.plans(args, failures) end
  if #plans == 0 and #failures == 1 then error(failures[1].err, 0) end
  for _, f in ipairs(failures) do io.stderr:write("kiln: error: ", failure_text(f), "\n") end
  if #plans == 0 then errors.raise_at(nil, nil, failures[1].err.code, "nothing to build: every graph failed (above)") end
  local results = M.compile(plans, jobs, tonumber(args.j or "0") or 0)
  local compiled, cached = 0, 0
  for i, job in ipairs(jobs) do
    local r = results[i]
    if r.cache_hit then cached = cached + 1 else compiled = compiled + 1 end
    if args.v then
      io.write(string.format("  %-8s %-40s %s\n", job.arch, job.name,
        r.cache_hit and "cached" or string.format("compiled in %.1f ms", r.compile_ms)))
    end
  end
  if args.o or args.emit_c then write_outputs(args, plans) end
  if not args.from then record.note(args) end
  io.write(string.format("built %d kernel%s for %s: %d compiled, %d cached, %.0f ms%s\n", #jobs, #jobs == 1 and "" or "s",
    table.concat(args.sm, " "), compiled, cached, c.clock_ms() - t0, args.o and (" -> " .. args.o) or ""))
  if #failures == 0 then return 0 end
  local lacks = {}
  for _, f in ipairs(failures) do lacks[#lacks + 1] = f.what:match("^graph ") and f.what or ("every graph of " .. f.what) end
  io.stderr:write(string.format("kiln: incomplete: %s lacks %s\n", args.o or args.emit_c or "the build",
    table.concat(lacks, ", ")))
  return 1
end

return M
