-- kiln.engines: the engine registry and router. An engine is one template family:
--   propose(group, g, target) -> { plan, ... } | nil, reason
--   build(plan, group, g, target, symbol) -> kernel (symbol, source, launch rule), or
--     { kernels = {kernel, ...}, workspace = {rule = launch-rule bytes, bytes_max = N} }
-- Plans carry stable ids "engine:vVERSION:knobs"; the router ranks them (heuristic first).
-- An engine whose candidates are all built under settings (E.settings, kiln.settings) proposes
-- and builds under KILN_PLAN's choices of them or their defaults; each plan keeps its own.
local c = require "kiln.c"
local errors = require "kiln.errors"
local settings = require "kiln.settings"

local M = {}

M.list = {
  (require "kiln.engines.pointwise"),
  (require "kiln.engines.row"),        -- rms/layer norm fwd+bwd, softmax fwd+bwd, row reductions
  (require "kiln.engines.colreduce"),  -- reductions over the leading axes or over everything
  (require "kiln.engines.gemm"),       -- matmul with a fused epilogue (wgmma on sm_90a, mma.sync elsewhere)
  (require "kiln.engines.axisreduce"), -- reductions over a middle block of axes, or a leading and a trailing one
  (require "kiln.engines.axissoftmax"), -- softmax, log_softmax and their backwards over a non-last axis
  (require "kiln.engines.attention.engine"), -- sdpa forward (wgmma on sm_90a, mma.sync elsewhere)
  (require "kiln.engines.conv1d.engine"), -- causal depthwise conv1d forward and backward
  (require "kiln.engines.gdn.engine"),    -- Gated DeltaNet forward (recurrent and chunked)
}

-- Whether some engine's fusion rule `rule` (a field of the engine: fuses, pairs, ...) accepts
-- the arguments, under the settings KILN_PLAN gives every group: the lowering asks before it
-- merges groups into one kernel.
local function some_engine(rule, ...)
  local want = M.forced(nil)
  for _, engine in ipairs(M.list) do
    if engine[rule] and settings.during(M.settings_of(engine, want), engine[rule], ...) then return true end
  end
  return false
end

-- Whether reduction b joins the kernel of the reductions `list` (lower's sibling merge): an
-- engine that builds several reductions in one kernel says so (E.fuses).
function M.fuse_reductions(list, b, g) return some_engine("fuses", list, b, g) end

-- Whether matmuls a and b become one kernel (lower's sibling matmuls) on target: an engine
-- that builds both products in one kernel, on every SM it serves, says so (E.pairs).
function M.fuse_matmuls(a, b, g, target) return some_engine("pairs", a, b, g, target) end

-- Whether matmul m scales its operands from the block_scale_dequantize nodes qs ({A =, B =},
-- one or both) inside its kernel on target (lower's block-scaled operands): an engine that
-- builds that on every SM it serves says so (E.dequantizes).
function M.fuse_dequant(m, qs, g, target) return some_engine("dequantizes", m, qs, g, target) end

-- Whether the kernel of the reductions `list` takes element ops after them (lower's
-- reduction epilogue): an engine that holds their rows says so (E.maps).
function M.reduction_epilogue(list, g) return some_engine("maps", list, g) end

-- Whether the kernel of forward norm `norm` writes the block quantize q of its epilogue
-- (lower's quantize epilogue): an engine that builds it there says so (E.quantizes).
function M.quantize_epilogue(norm, q, g) return some_engine("quantizes", norm, q, g) end

-- The graph's own settings (NAME -> its values, the default first): choices made before any
-- engine is asked, for every kernel group at once, so set by bare *.NAME=VALUE items only.
-- fuse: the fusion plan.route takes (auto: the default, falling back where a group has no
-- engine; strict: the conservative one; rowsplit: no element ops after row reductions).
M.GRAPH_SETTINGS = { fuse = { "auto", "strict", "rowsplit" } }

-- A graph setting given for one group ("G=*.fuse=strict") is E_USAGE: it decides the groups.
local function check_graph_item(item, gi, rest)
  local engine, name = rest:match("^([%w_*]+)%.([%w_]+)=")
  if gi and engine == "*" and M.GRAPH_SETTINGS[name] then
    errors.raise_at(nil, nil, "E_USAGE", "KILN_PLAN: %s: *.%s is the whole graph's setting (it decides the kernel groups): give it without a group", item, name)
  end
end

-- KILN_PLAN forces candidates, for measuring: a comma-separated list of items, each a plan id,
-- ENGINE.KNOB=VALUE (the best-ranked candidate of that engine whose knobs or settings have
-- every such value given for it) or *.SETTING=VALUE (every engine with that setting, or the
-- graph setting), bare (any group offered one takes it) or "G=item" (group G only,
-- counted from 0, as `kiln explain` numbers them; group nil: the bare items only). A group
-- offered none keeps its ranking.
function M.forced(group)
  local v = c.getenv("KILN_PLAN") or ""
  local want = { ids = {}, knobs = {} }
  for item in v:gmatch("[^,]+") do
    local gi, rest = item:match("^(%d+)=(.+)$")
    check_graph_item(item, gi, rest or item)
    if not gi or (group and tonumber(gi) == group.index - 1) then
      rest = rest or item
      local engine, knob, value = rest:match("^([%w_*]+)%.([%w_]+)=(.+)$")
      if engine then
        want.knobs[engine] = want.knobs[engine] or {}
        want.knobs[engine][knob] = value
      else
        want.ids[rest] = true
      end
    end
  end
  for engine, knobs in pairs(want.knobs) do
    local known = false
    for _, e in ipairs(M.list) do known = known or e.id == engine end
    if engine == "*" then
      for name, value in pairs(knobs) do
        local any = M.GRAPH_SETTINGS[name] ~= nil
        for _, e in ipairs(M.list) do any = any or (e.settings or {})[name] ~= nil end
        if not any then errors.raise_at(nil, nil, "E_USAGE", "KILN_PLAN: *.%s=%s: no engine has the setting '%s'", name, value, name) end
      end
    elseif not known then
      errors.raise_at(nil, nil, "E_USAGE", "KILN_PLAN: no engine '%s'", engine)
    end
  end
  return want
end

-- Graph setting `name`'s value as KILN_PLAN's bare items give it, else its default; a value
-- outside its list is E_USAGE.
function M.graph_setting(name)
  local values = M.GRAPH_SETTINGS[name]
  local v = (M.forced(nil).knobs["*"] or {})[name] or values[1]
  if not settings.accepts(values, v) then
    errors.raise_at(nil, nil, "E_USAGE", "KILN_PLAN: *.%s=%s: want %s", name, v, settings.describe(values))
  end
  return v
end

-- The settings engine builds under (nil: it has none) as KILN_PLAN's forced knobs `want` give
-- them (ENGINE.NAME, or *.NAME for every engine with that setting), the others at their
-- defaults; a value outside a setting's values is E_USAGE.
-- Engine's settings with the values of `own` (NAME -> value), else of `all`, else the defaults;
-- nil and the first name and value outside its setting's values where there is one.
local function settings_with(engine, own, all)
  local set = {}
  for name, values in pairs(engine.settings) do
    local v = own[name] or all[name]
    v = v ~= nil and tostring(v) or values[1]
    if not settings.accepts(values, v) then return nil, name, v end
    set[name] = v
  end
  return set
end

function M.settings_of(engine, want)
  if not engine.settings then return nil end
  local all, own = want.knobs["*"] or {}, want.knobs[engine.id] or {}
  local set, name, v = settings_with(engine, own, all)
  if not set then
    errors.raise_at(nil, nil, "E_USAGE", "KILN_PLAN: %s.%s=%s: want %s", own[name] and engine.id or "*", name, v,
      settings.describe(engine.settings[name]))
  end
  return set
end

-- A knob of plan p: its own, or a setting it was built under.
local function knob(p, k)
  local v = (p.knobs or {})[k]
  if v == nil and p.settings then v = p.settings[k] end
  return v
end

-- KILN_PLAN's knob filters for engine must each name a knob of some candidate it offered, so
-- that a misspelt one cannot quietly leave the ranking as it was.
local function check_knobs(want, engine, plans)
  for k, value in pairs(want.knobs[engine.id] or {}) do
    local seen = false
    for _, p in ipairs(plans) do seen = seen or knob(p, k) ~= nil end
    if not seen then errors.raise_at(nil, nil, "E_USAGE", "KILN_PLAN: %s.%s=%s: no candidate of %s has the knob '%s'", engine.id, k, value, engine.id, k) end
  end
end

-- Whether plan p (of engine id `engine`) is one KILN_PLAN asks for.
local function wanted(want, engine, p)
  if want.ids[p.id] then return true end
  local knobs = want.knobs[engine]
  if not knobs then return false end
  for k, value in pairs(knobs) do
    if tostring(knob(p, k)) ~= value then return false end
  end
  return true
end

-- The plan pinned for a group ({ engine =, id =, settings =, source = }: plans.lock's or kiln
-- tune's): its engine's candidate of that id proposed under those settings (the others at
-- their defaults), or nil and why not.
local function pinned(pin, group, g, target)
  local engine
  for _, e in ipairs(M.list) do if e.id == pin.engine then engine = e end end
  if not engine then return nil, "no engine '" .. tostring(pin.engine) .. "'" end
  local set, name, v = nil, nil, nil
  if engine.settings then
    set, name, v = settings_with(engine, pin.settings, {})
    if not set then return nil, string.format("%s.%s=%s is not a value of the setting", engine.id, name, v) end
  end
  local plans, reason = settings.during(set, engine.propose, group, g, target)
  for _, p in ipairs(plans or {}) do
    if p.id == pin.id then p.settings, p.engine = set, engine; return p end
  end
  return nil, plans and ("engine " .. engine.id .. " no longer offers it") or ("engine " .. engine.id .. " declines the group: " .. tostring(reason))
end

-- Returns the chosen plan (or nil) and a report: one row per engine, accepted or declined and
-- why. KILN_PLAN's choice comes first, then the pinned plan `pin` (optional), then the ranking.
function M.route(group, g, target, pin)
  local report, best = {}, nil
  local want, chosen = M.forced(group), nil
  for _, engine in ipairs(M.list) do
    local set = M.settings_of(engine, want)
    local plans, reason = settings.during(set, engine.propose, group, g, target)
    if plans and #plans > 0 then
      for _, p in ipairs(plans) do p.settings = set end
      check_knobs(want, engine, plans)
      table.sort(plans, function(a, b) return (a.rank or 0) > (b.rank or 0) end)
      local ids = {}
      for i, p in ipairs(plans) do
        p.engine = engine; ids[i] = p.id
        if not chosen and wanted(want, engine.id, p) then chosen = p end
      end
      report[#report + 1] = { engine = engine.id, accepted = true, plans = ids }
      best = best or plans[1]
    else
      report[#report + 1] = { engine = engine.id, accepted = false, reason = reason or "declined" }
    end
  end
  if chosen then
    report[#report + 1] = { engine = "KILN_PLAN", accepted = true, plans = { chosen.id } }
    return chosen, report
  end
  if pin then
    local p, why = pinned(pin, group, g, target)
    if p then
      report[#report + 1] = { engine = "pinned", accepted = true, plans = { p.id }, source = pin.source }
      return p, report
    end
    report[#report + 1] = { engine = "pinned", accepted = false, reason = string.format("%s from %s not taken: %s", pin.id, pin.source, why) }
    if pin.source:match("^plans%.lock") then
      require("kiln.lock").note("%s: group %d: %s not taken (%s); the ranked plan is used", pin.source, group.index - 1, pin.id, why)
    end
  end
  return best, report
end

return M
