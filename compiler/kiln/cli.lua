-- kiln.cli: the `kiln` command line. main(argv) returns the exit status; errors are typed
-- ({code, msg}) and printed by the C host as "kiln: error: ..." (E_USAGE exits 2).
local c = require "kiln.c"
local errors = require "kiln.errors"

local M = {}

local USAGE = [[
usage: kiln <command> [options]

commands:
  check SPEC... [--sm SM]  load and validate specs (.lua or graph .json), check that an
                           engine takes every kernel group (on sm_90a unless --sm), print the graph
                           (exit 1, E_NO_ENGINE with each engine's reason, when none takes one)
        [--json]           print graph JSON instead
        [--no-engines]     validate the graph alone, without engine selection
  source SPEC [--sm SM]    print the generated CUDA of every kernel
        [--ptx]            the PTX modules instead, for the kernels compiled from one
  explain SPEC [--sm SM]   per kernel group and engine: accepted (plans) or declined, and why
                           (exit 1 when a group has no engine)
  build SPEC... --sm SM [--sm SM ...] [-o PACK] [--emit-c DIR] [-v] [-j N]
                           compile every kernel through the cache (and write a pack); a graph
                           that fails is reported and left out, the pack holds the others, and
                           "kiln: incomplete: PACK lacks ..." on stderr with exit 1 says so
  build --from FILE [-o PACK] [--sm SM ...]
                           build again what KILN_RECORD=FILE recorded (every build's
                           specs, dims, graphs and SMs) into one pack
  run SPEC --check [--bench] [--set DIM=N] [--instance K=V,...]
                           run on the GPU against the reference executor (only the
                           instances whose key has every K=V given, with --instance)
  tune SPEC --set DIM=N [--instance K=V,...] [--plans-lock DIR] [--iters N] [-v]
                           on this machine's GPU: every candidate plan of every kernel group
                           built, checked against the reference executor and timed at the dims
                           given (every dynamic dim); the fastest, the runners-up and the
                           default written to the lock (default ./plans.lock), one file per
                           graph instance, SM and shape class
        [--list] [--sm SM]  list the distinct candidates instead (no GPU needed)
  pack inspect|verify PACK list or check what a pack holds
  cache path|stat|verify|clear|gc
                           look after the kernel cache
  cache why SPEC [--sm SM] per kernel: cached, or which key parts differ from what is
  env [--json]             kiln, Lua, NVRTC, driver, cuDNN, GPUs, cache

common options:
  --set DIM=N              fix a dim (specialized or dynamic) to N
  --plans-lock DIR         the plans.lock that build, run, source, explain and check follow
                           and tune writes (default ./plans.lock where it exists)
  --graph NAME             only the graph NAME of a spec with several (again for more)
  -h, --help               this text;  --version  the version

environment: KILN_CACHE_DIR, KILN_CACHE_MAXSIZE, KILN_JIT=on|off|strict, KILN_DUMP_DIR,
             KILN_LUA_PATH, KILN_TEMPLATE_PATH, KILN_SPEC_MAX_INSTR, KILN_SPEC_MAX_MEM,
             KILN_PTXAS=exe|nvjitlink, KILN_PTXC_PATH,
             KILN_PLAN (forced plans, engine settings: *.module=off, *.ptxas_opt=1, ...),
             KILN_RECORD=FILE (every build appends what it built);
             all of them with their defaults: docs/ENV.md
]]

local function usage(fmt, ...) errors.raise_at(nil, nil, "E_USAGE", fmt, ...) end

-- Options each command accepts: name -> "flag" | "value" | "list".
local OPTIONS = {
  ["--json"] = "flag", ["--no-engines"] = "flag", ["--ptx"] = "flag", ["-v"] = "flag", ["--verbose"] = "flag", ["--check"] = "flag", ["--list"] = "flag", ["--bench"] = "flag",
  ["--sm"] = "list", ["--set"] = "list", ["-o"] = "value", ["--emit-c"] = "value", ["--graph"] = "list",
  ["-j"] = "value", ["--from"] = "value", ["--iters"] = "value", ["--instance"] = "value", ["--csv"] = "value", ["--pack"] = "value", ["--plans-lock"] = "value",
}

local function parse(argv)
  local args = { positional = {}, sm = {}, set = {}, graph = {} }
  local i = 1
  while i <= #argv do
    local a = argv[i]
    local name, inline = a:match("^(%-%-?[%w%-]+)=(.*)$")
    name = name or a
    local kind = OPTIONS[name]
    if a:sub(1, 1) == "-" and a ~= "-" then
      if not kind then usage("unknown option '%s'", a) end
      local key = name:gsub("^%-+", ""):gsub("%-", "_")
      if key == "verbose" then key = "v" end
      if kind == "flag" then
        if inline then usage("option %s takes no value", name) end
        args[key] = true
      else
        local v = inline
        if not v then
          i = i + 1
          v = argv[i]
          if v == nil then usage("option %s needs a value", name) end
        end
        if kind == "list" then table.insert(args[key], v) else args[key] = v end
      end
    else
      args.positional[#args.positional + 1] = a
    end
    i = i + 1
  end
  local sets = {}
  for _, s in ipairs(args.set) do
    local k, v = s:match("^([%a_][%w_]*)=(%d+)$")
    if not k or tonumber(v) <= 0 then usage("--set wants DIM=N with N a positive integer, got '%s'", s) end
    sets[k] = math.tointeger(tonumber(v))
  end
  args.set = sets
  local archs = {}
  for _, s in ipairs(args.sm) do
    if s:match("^compute_%d%d%d?a?$") then
      archs[#archs + 1] = s  -- PTX, the runtime's fallback for SMs without a cubin
    else
      local n = s:gsub("^sm_", "")
      if not n:match("^%d%d%d?a?$") then usage("bad --sm '%s' (want e.g. 80, 90a, 100a, or compute_90 for PTX)", s) end
      archs[#archs + 1] = "sm_" .. n
    end
  end
  args.sm = archs
  return args
end

-- The graph instances of every SPEC given (only those --graph names, where given).
local function load_graphs(args) return require("kiln.build").load_all(args) end

-- The SM that check, source, explain and cache why take without --sm.
local DEFAULT_ARCH = "sm_90a"

local function need_specs(args, cmd)
  if #args.positional == 0 then usage("%s needs at least one SPEC", cmd) end
end

local commands = {}

function commands.check(args)
  need_specs(args, "check")
  local shape = require "kiln.shape"
  local plan = require "kiln.plan"
  local all = load_graphs(args)
  if args.no_engines and #args.sm > 0 then usage("check --no-engines selects no engine, so it takes no --sm") end
  for _, arch in ipairs(args.no_engines and {} or #args.sm > 0 and args.sm or { DEFAULT_ARCH }) do
    local target = plan.target(arch)
    for _, g in ipairs(all) do plan.check_engines(g, target) end
  end
  if args.json then
    if #all == 1 then io.write(all[1]:to_json(2), "\n")
    else
      local list = c.json_array()
      for i, g in ipairs(all) do list[i] = g:to_data() end
      io.write(c.json_encode(list, 2), "\n")
    end
    return 0
  end
  for _, g in ipairs(all) do
    local key = g:instance_key()
    io.write(string.format("graph %s%s: io %s, %d tensors, %d nodes", g.name, key ~= "" and (" [" .. key .. "]") or "",
      g.io_dtype, #g.tensors, #g.nodes))
    local dyn = g:dynamic_dims()
    if #dyn > 0 then io.write(", dynamic ", table.concat(dyn, " ")) end
    io.write("\n")
    for _, t in ipairs(g.tensors) do
      if t.role ~= "virtual" then
        io.write(string.format("  %-8s %3d %-16s %-8s %s%s\n", t.role, t.uid, t.name, t.dtype, shape.format(t.dims),
          t.value and (" = " .. tostring(t.value)) or ""))
      end
    end
    for _, n in ipairs(g.nodes) do
      local ins, outs = {}, {}
      for _, p in ipairs(n.def.input_ports) do
        if n.inputs[p.name] then ins[#ins + 1] = p.name .. "=" .. n.inputs[p.name] end
      end
      for _, p in ipairs(n.def.output_ports) do
        if n.outputs[p.name] then outs[#outs + 1] = p.name .. "=" .. n.outputs[p.name] end
      end
      io.write(string.format("  node %-20s %-12s (%s) -> (%s)\n", n.name, n.op, table.concat(ins, " "), table.concat(outs, " ")))
    end
  end
  io.write(string.format("ok: %d graph instance%s valid\n", #all, #all == 1 and "" or "s"))
  return 0
end

local function first_arch(args) return args.sm[1] or DEFAULT_ARCH end

function commands.source(args)
  need_specs(args, "source")
  local plan = require "kiln.plan"
  local target = plan.target(first_arch(args))
  for _, g in ipairs(load_graphs(args)) do
    local m = plan.manifest(g, target)
    for _, k in ipairs(m.kernels) do
      -- ptxas's level where not its default: the module's -ON, or NVRTC's --ptxas-options=-ON
      local level
      for _, o in ipairs(k.options or {}) do level = level or o:match("^%-O(%d)$") or o:match("^%-%-ptxas%-options=%-O(%d)$") end
      io.write(string.format("// ---- %s [%s] kernel %s, plan %s, %s%s%s\n", g.name, m.instance, k.symbol, k.plan_id,
        target.arch, k.cuda and ", compiled as a PTX module by " .. k.options[1]:match("=(.*)") or "",
        level and (k.cuda and " at -O" or ", ptxas at -O") .. level or ""))
      -- the CUDA form, readable; --ptx: the PTX module that is compiled where there is one
      io.write(args.ptx and k.source or k.cuda or k.source, "\n")
    end
  end
  return 0
end

-- The kernels of one group among a manifest's kernels (plan.lua's symbols kiln_NAME_kG[_*]).
local function group_kernels(kernels, g, grp)
  local base, out = string.format("kiln_%s_k%d", g.name, grp.index - 1), {}
  for _, k in ipairs(kernels) do
    if k.symbol == base or k.symbol:sub(1, #base + 1) == base .. "_" then out[#out + 1] = k end
  end
  return out
end

-- Prints one group of `kiln explain`: its ops and plan, each engine's answer, its kernels.
local function explain_group(grp, kernels)
  local ops = {}
  for _, n in ipairs(grp.nodes) do ops[#ops + 1] = n.op end
  io.write(string.format("  group %d (%s): %s\n", grp.index - 1, table.concat(ops, " "),
    grp.plan and ("plan " .. grp.plan.id) or "NO ENGINE"))
  for _, r in ipairs(grp.report) do
    if r.source then io.write(string.format("    %-10s %s, from %s\n", "chosen", r.plans[1], r.source))
    elseif r.accepted then io.write(string.format("    %-10s accepted: %s\n", r.engine, table.concat(r.plans, ", ")))
    else io.write(string.format("    %-10s declined: %s\n", r.engine, r.reason)) end
  end
  for _, k in ipairs(kernels) do
    io.write(string.format("    kernel %s: %s\n", k.symbol, k.cuda and "a PTX module (ptxas alone)"
      or "CUDA through NVRTC, " .. (k.cuda_why or "its engine's only form")))
  end
end

-- Explains one graph instance; returns whether an engine takes every group and its kernels generate.
local function explain_graph(g, target)
  local plan = require "kiln.plan"
  local key = g:instance_key()
  io.write(string.format("graph %s%s for %s\n", g.name, key ~= "" and (" [" .. key .. "]") or "", target.arch))
  local groups = plan.route(g, target)
  -- the kernels each group's plan builds (generated, not compiled) and how each compiles
  local kernels, planned = {}, #groups > 0
  for _, grp in ipairs(groups) do planned = planned and grp.plan ~= nil end
  local made, m = false, nil
  if planned then made, m = pcall(plan.manifest, g, target) end
  if made then kernels = m.kernels end
  for _, grp in ipairs(groups) do explain_group(grp, group_kernels(kernels, g, grp)) end
  if planned and not made then
    io.write(string.format("  kernels not generated: %s\n", tostring(m)))
  end
  return made
end

function commands.explain(args)
  need_specs(args, "explain")
  local target = require("kiln.plan").target(first_arch(args))
  local status = 0
  for _, g in ipairs(load_graphs(args)) do
    if not explain_graph(g, target) then status = 1 end
  end
  return status
end

function commands.build(args)
  return require("kiln.build").run(args)
end

function commands.tune(args)
  return require("kiln.tune").run(args)
end

function commands.run(args)
  return require("kiln.run").run(args)
end

function commands.cache(args)
  local sub = args.positional[1]
  if not sub then usage("cache needs a subcommand: path, stat, verify, clear, gc, why") end
  if sub == "why" then
    -- kiln cache why SPEC --sm SM: per kernel, cached or why not
    table.remove(args.positional, 1)
    need_specs(args, "cache why")
    local plan = require "kiln.plan"
    local archs = #args.sm > 0 and args.sm or { DEFAULT_ARCH }
    for _, g in ipairs(load_graphs(args)) do
      for _, arch in ipairs(archs) do
        local m = plan.manifest(g, plan.target(arch))
        for _, k in ipairs(m.kernels) do
          io.write(string.format("%s [%s] %s %s:\n", g.name, m.instance, k.symbol, arch))
          local report = c.cache_why { symbol = k.symbol, source = k.source, arch = arch, options = k.options }
          io.write((report:gsub("[^\n]+", "  %0")), report:sub(-1) == "\n" and "" or "\n")
        end
      end
    end
    return 0
  end
  return c.cache_command(sub, args.json or false)
end

function commands.env(args)
  return c.env_report(args.json or false)
end

function commands.pack(args)
  local sub, file = args.positional[1], args.positional[2]
  if (sub ~= "inspect" and sub ~= "verify") or not file then usage("pack inspect|verify PACK") end
  return c.pack_command(sub, file)
end

function M.main(argv)
  if #argv == 0 then io.stderr:write(USAGE); return 2 end
  local cmd = argv[1]
  if cmd == "-h" or cmd == "--help" or cmd == "help" then io.write(USAGE); return 0 end
  if cmd == "--version" or cmd == "version" then
    io.write(string.format("kiln %s (%s)\n", c.version, c.lua_version)); return 0
  end
  local fn = commands[cmd]
  if not fn then usage("unknown command '%s'", cmd) end
  local rest = {}
  for i = 2, #argv do rest[#rest + 1] = argv[i] end
  for _, a in ipairs(rest) do
    if a == "-h" or a == "--help" then io.write(USAGE); return 0 end
  end
  local args = parse(rest)
  require("kiln.lock").use(args.plans_lock)
  return fn(args)
end

return M
