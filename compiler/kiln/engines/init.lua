-- kiln.engines: the engine registry and router. An engine is one template family:
--   propose(group, g, target) -> { plan, ... } | nil, reason
--   build(plan, group, g, target, symbol) -> kernel (symbol, source, launch rule), or
--     { kernels = {kernel, ...}, workspace = {rule = launch-rule bytes, bytes_max = N} }
-- Plans carry stable ids "engine:vVERSION:knobs"; the router ranks them (heuristic first).
local c = require "kiln.c"
local errors = require "kiln.errors"

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
-- the arguments: the lowering asks before it merges groups into one kernel.
local function some_engine(rule, ...)
  for _, engine in ipairs(M.list) do
    if engine[rule] and engine[rule](...) then return true end
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

-- KILN_PLAN forces candidates, for measuring: a comma-separated list of items, each a plan id
-- or ENGINE.KNOB=VALUE (the best-ranked candidate of that engine whose knobs have every such
-- value given for it), bare (any group offered one takes it) or "G=item" (group G only,
-- counted from 0, as `kiln explain` numbers them). A group offered none keeps its ranking.
local function forced(group)
  local v = c.getenv("KILN_PLAN") or ""
  local want = { ids = {}, knobs = {} }
  for item in v:gmatch("[^,]+") do
    local gi, rest = item:match("^(%d+)=(.+)$")
    if not gi or tonumber(gi) == group.index - 1 then
      rest = rest or item
      local engine, knob, value = rest:match("^([%w_]+)%.([%w_]+)=(.+)$")
      if engine then
        want.knobs[engine] = want.knobs[engine] or {}
        want.knobs[engine][knob] = value
      else
        want.ids[rest] = true
      end
    end
  end
  for engine in pairs(want.knobs) do
    local known = false
    for _, e in ipairs(M.list) do known = known or e.id == engine end
    if not known then errors.raise_at(nil, nil, "E_USAGE", "KILN_PLAN: no engine '%s'", engine) end
  end
  return want
end

-- Whether plan p (of engine id `engine`) is one KILN_PLAN asks for.
local function wanted(want, engine, p)
  if want.ids[p.id] then return true end
  local knobs = want.knobs[engine]
  if not knobs then return false end
  for k, value in pairs(knobs) do
    if tostring((p.knobs or {})[k]) ~= value then return false end
  end
  return true
end

-- Returns the chosen plan (or nil) and a report: one row per engine, accepted or declined and why.
function M.route(group, g, target)
  local report, best = {}, nil
  local want, chosen = forced(group), nil
  for _, engine in ipairs(M.list) do
    local plans, reason = engine.propose(group, g, target)
    if plans and #plans > 0 then
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
  return best, report
end

return M
