-- kiln.build: `kiln build` — every kernel of every spec instance for every SM, compiled
-- in parallel through the cache, optionally written to a pack (and C source embedding it).
local c = require "kiln.c"
local errors = require "kiln.errors"
local plan = require "kiln.plan"

local M = {}

local function load_all(args)
  local spec, out = require "kiln.spec", {}
  for _, path in ipairs(args.positional) do
    for _, g in ipairs(spec.load_graphs(path, { set = args.set, graph = args.graph })) do out[#out + 1] = g end
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

function M.plans(args)
  if #args.positional == 0 then errors.raise_at(nil, nil, "E_USAGE", "build needs at least one SPEC") end
  if #args.sm == 0 then errors.raise_at(nil, nil, "E_USAGE", "build needs --sm (e.g. --sm 90a)") end
  local plans, jobs, by_source = {}, {}, {}
  -- every SM's plan sees the pack's least SM (pack_sm): a plan only newer SMs can build (a
  -- cluster layout) would break the one kernel list
  local targets, least = {}, math.huge
  for a, arch in ipairs(args.sm) do
    targets[a] = plan.target(arch)
    least = math.min(least, targets[a].sm)
  end
  for _, t in ipairs(targets) do t.pack_sm = least end
  for _, g in ipairs(load_all(args)) do
    local p = { graph = g, manifests = {}, images = {} }
    for a, arch in ipairs(args.sm) do
      local m = plan.manifest(g, targets[a])
      if a > 1 and launch_signature(m) ~= launch_signature(p.manifests[1]) then
        errors.raise_at(nil, nil, "E_PACK", "graph '%s' [%s]: kernels differ between %s and %s (one pack plan needs one kernel list)",
          g.name, m.instance, args.sm[1], arch)
      end
      p.manifests[a] = m
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
    plans[#plans + 1] = p
  end
  return plans, jobs
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

function M.run(args)
  local t0 = c.clock_ms()
  local plans, jobs = M.plans(args)
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
  if args.o or args.emit_c then
    local pack_bytes = M.pack_bytes(plans, args.sm)
    if args.o then c.write_file(args.o, pack_bytes) end
    if args.emit_c then
      local name = args.o and args.o:match("([^/]+)$"):gsub("%..*$", ""):gsub("[^%w_]", "_") or "kiln_pack"
      c.mkdir(args.emit_c)
      c.emit_c(args.emit_c, name, pack_bytes)
    end
  end
  io.write(string.format("built %d kernel%s for %s: %d compiled, %d cached, %.0f ms%s\n", #jobs, #jobs == 1 and "" or "s",
    table.concat(args.sm, " "), compiled, cached, c.clock_ms() - t0, args.o and (" -> " .. args.o) or ""))
  return 0
end

return M
