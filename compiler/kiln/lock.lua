-- kiln.lock: plans.lock, a folder of the plans `kiln tune` measured best, one JSON file per
-- graph instance, SM and shape class (the values of its dynamic dims it was timed at), each
-- with the environment it was measured in. Builds take its winners where the entry's
-- environment matches this machine; a stale, foreign or unreadable entry is passed over with
-- a note on stderr, never an error.
local c = require "kiln.c"

local M = {}

M.DEFAULT = "plans.lock"
M.SCHEMA = "kiln.plans.lock"

local chosen = nil   -- --plans-lock's folder; nil: KILN_PLANS_LOCK's, else M.DEFAULT where it exists
local implicit = true -- whether ./plans.lock counts without being named (the kiln command)
local noted = {}     -- notes already printed (one per entry and reason)
local machine = nil  -- this machine's environment, read once
local memo = {}      -- the pins of each graph hash and SM read

-- Builds read the lock at `path` (nil: KILN_PLANS_LOCK's, else M.DEFAULT where it exists and
-- `cwd` is not false: the JIT library reads only a lock it is given).
function M.use(path, cwd) chosen = path; implicit = cwd ~= false; memo = {} end

-- The folder builds read, or nil.
function M.folder()
  if chosen then return chosen end
  local env = c.getenv("KILN_PLANS_LOCK") or ""
  if env ~= "" then return env end
  return implicit and c.list_dir(M.DEFAULT) and M.DEFAULT or nil
end

function M.note(fmt, ...)
  local text = string.format(fmt, ...)
  if not noted[text] then noted[text] = true; io.stderr:write("kiln: note: ", text, "\n") end
end

-- The graph instance's identity in the lock: the XXH3 hash of its graph JSON (dynamic dims
-- as dims, so one entry per shape class serves the build of the dynamic graph).
function M.spec_hash(g) return c.hash(g:to_json()) end

-- The shape class of dims (NAME -> value of each dynamic dim): "T=1024,B=2", "static" without.
function M.shape_class(g, dims)
  local parts = {}
  for _, name in ipairs(g:dynamic_dims()) do parts[#parts + 1] = name .. "=" .. tostring(dims[name]) end
  return #parts > 0 and table.concat(parts, ",") or "static"
end

local function prefix(g, arch) return string.format("%s-%s-%s-", g.name, M.spec_hash(g):sub(1, 16), arch) end

-- The file of one entry in folder.
function M.path(folder, g, arch, class) return string.format("%s/%s%s.json", folder, prefix(g, arch), class) end

-- This machine's environment as the lock records it: the GPU fields only with a GPU.
function M.environment()
  if machine then return machine end
  local ok, env = pcall(function() return c.json_decode(c.env_json()) end)
  env = ok and env or {}
  local gpu = (env.gpus or {})[1]
  machine = { kiln = c.version, nvrtc = env.nvrtc_version, driver = env.driver_cuda_version, cudnn = env.cudnn_version,
              gpu = gpu and gpu.name, sm = gpu and gpu.kiln_target, sm_count = gpu and gpu.sm_count }
  return machine
end

-- Why an entry recorded in environment `rec` does not hold for a build for arch here, or nil.
-- The GPU's name and SM count count only where this machine has a GPU of that SM.
local function mismatch(rec, arch)
  local here = M.environment()
  if rec.sm ~= arch then return string.format("measured on %s, the build is for %s", tostring(rec.sm), arch) end
  if rec.kiln ~= here.kiln then return string.format("measured with kiln %s, this is kiln %s", tostring(rec.kiln), here.kiln) end
  if here.nvrtc and rec.nvrtc ~= here.nvrtc then
    return string.format("measured with NVRTC %s, this is NVRTC %s", tostring(rec.nvrtc), here.nvrtc)
  end
  if here.sm == arch then
    for _, k in ipairs({ "gpu", "sm_count", "driver" }) do
      if rec[k] ~= here[k] then
        return string.format("measured with %s %s, this machine has %s", k, tostring(rec[k]), tostring(here[k]))
      end
    end
  end
end

-- An entry's text decoded and checked, or nil and why not.
local function decode(text, g, arch)
  local ok, e = pcall(c.json_decode, text)
  if not ok then return nil, "not valid JSON (" .. tostring(type(e) == "table" and e.msg or e) .. ")" end
  if type(e) ~= "table" or e.schema ~= M.SCHEMA or e.version ~= 1 then return nil, "not a kiln.plans.lock entry of version 1" end
  if type(e.environment) ~= "table" or type(e.groups) ~= "table" then return nil, "no environment or groups" end
  if e.spec_hash ~= M.spec_hash(g) then return nil, "for another graph (spec hash differs)" end
  for _, grp in ipairs(e.groups) do
    if math.type(grp.group) ~= "integer" or type(grp.plans) ~= "table" or #grp.plans == 0 then return nil, "a group without plans" end
    for _, p in ipairs(grp.plans) do
      if type(p.id) ~= "string" or type(p.engine) ~= "string" or type(p.median_us) ~= "number" then
        return nil, "a plan without id, engine or median_us"
      end
    end
  end
  local why = mismatch(e.environment, arch)
  if why then return nil, why end
  return e
end

-- The entries of graph g for arch in the lock folder that hold here (notes for the others).
local function entries(folder, g, arch)
  local names = c.list_dir(folder)
  if not names then M.note("plans.lock %s cannot be read; plans are ranked without it", folder); return {} end
  local want, out = prefix(g, arch), {}
  for _, name in ipairs(names) do
    if name:sub(1, #want) == want and name:sub(-5) == ".json" then
      local path = folder .. "/" .. name
      local text, err = c.read_file(path)
      local e, why = nil, err
      if text then e, why = decode(text, g, arch) end
      if e then e.file = path; out[#out + 1] = e
      else M.note("%s ignored: %s", path, why) end
    end
  end
  return out
end

-- A plan's identity within an entry: its id and the settings it was built under (a row plan's
-- id does not show them).
local function plan_key(p)
  local parts = { p.id }
  local names = {}
  for k in pairs(p.settings or {}) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do parts[#parts + 1] = k .. "=" .. tostring(p.settings[k]) end
  return table.concat(parts, " ")
end

-- A plan's speed over the entries: the geometric mean of its median over each entry's default
-- plan's (1: as fast), or nil where some entry lacks it.
local function relative(list, gi, key)
  local logsum = 0
  for _, e in ipairs(list) do
    local grp
    for _, x in ipairs(e.groups) do if x.group == gi then grp = x end end
    if not grp then return nil end
    local mine, base
    for _, p in ipairs(grp.plans) do
      if plan_key(p) == key then mine = p.median_us end
      if p.id == grp.default and next(p.settings or {}) == nil then base = p.median_us end
    end
    if not mine or not base or base <= 0 then return nil end
    logsum = logsum + math.log(mine / base)
  end
  return math.exp(logsum / #list)
end

-- The pins of graph g for arch: group number (from 0) -> { engine =, id =, settings =, source = }:
-- per group the plan fastest over every shape class measured (one class: its winner).
function M.pins(g, arch)
  local folder = M.folder()
  if not folder then return nil end
  local key = folder .. "/" .. prefix(g, arch)
  if memo[key] == nil then memo[key] = M.read_pins(folder, g, arch) or false end
  return memo[key] or nil
end

-- M.pins, read afresh from folder.
function M.read_pins(folder, g, arch)
  local list = entries(folder, g, arch)
  if #list == 0 then return nil end
  local pins, classes = {}, {}
  for _, e in ipairs(list) do classes[#classes + 1] = e.shape_class end
  for _, grp in ipairs(list[1].groups) do
    local best, best_r
    for _, p in ipairs(grp.plans) do
      local r = relative(list, grp.group, plan_key(p))
      if r and (not best_r or r < best_r) then best, best_r = p, r end
    end
    if best then
      pins[grp.group] = { engine = best.engine, id = best.id, settings = best.settings or {},
                          source = string.format("plans.lock %s (%s)", folder, table.concat(classes, "; ")) }
    end
  end
  return pins
end

-- Writes entry e (a table of the form decode checks) to its file in folder, atomically.
function M.write(folder, g, arch, e)
  c.mkdir(folder)
  local path = M.path(folder, g, arch, e.shape_class)
  c.write_file(path, c.json_encode(e, 2) .. "\n")
  return path
end

return M
