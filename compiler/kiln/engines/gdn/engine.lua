-- kiln.engines.gdn.engine: the Gated DeltaNet forward (docs/OPS.md §8, docs/GDN.md). Two
-- kernels of one problem (kiln.engines.gdn.problem):
--   recurrent  the token loop, state tile in registers: right for every length, and the
--              decode kernel (kiln.engines.gdn.recurrent, templates/gdn_recurrent.cuh);
--   chunk      chunks of 64 tokens in the WY form, for long sequences (kiln.engines.gdn.chunk);
--   split      the chunk form in three kernels, only the state update serial (kiln.engines.gdn.chunk_split).
-- Ranking: where sequences are short (decode) the recurrent plans lead, else the split chunked
-- plans (where T or the cu_seqlens length is static), then the fused chunk plans.
local problem = require "kiln.engines.gdn.problem"
local recurrent = require "kiln.engines.gdn.recurrent"
local chunk = require "kiln.engines.gdn.chunk"
local chunk_split = require "kiln.engines.gdn.chunk_split"

local E = { id = "gdn", version = 1 }

-- Tokens a sequence at most (on average) for which the recurrent kernel leads: a state is read
-- and written once a sequence either way, and below a chunk's quarter the chunked form's
-- matrix products run mostly on padding.
E.SHORT = 16

-- Whether the problem's sequences are short: T and N static with T <= SHORT N, or T the same
-- dim as the sequence count that state_indices / initial_state name (one token a sequence).
function E.short(P)
  if math.type(P.T) == "integer" and P.N then return P.T <= E.SHORT * P.N end
  local rows = P.idx and P.idx.dims[1] or (P.h0 and P.h0.dims[1])
  return rows ~= nil and rows == P.T
end

function E.propose(group, g, target)
  if group.family ~= "gdn" then
    return nil, string.format("group is a %s op (%s), not gdn", group.family, (group.anchor or group.nodes[1]).op)
  end
  if target.sm < 80 then return nil, "needs sm_80 or later (cp.async)" end
  local P, why = problem.of(group, g)
  if not P then return nil, why end
  local short = E.short(P)
  local plans = {}
  -- the split plan (the serial pass holds only the state's two products) ahead of the fused
  -- one: 1.6-3.5x faster on an H100 at T = 32768 (tests/gpu/steps/gdn.sh's gdn_bench times both)
  for i, p in ipairs(chunk_split.propose(P, target) or {}) do
    p.rank = 110 - i
    plans[#plans + 1] = p
  end
  for i, p in ipairs(chunk.propose(P, target) or {}) do
    p.rank = 100 - i
    p.P = p.P or P
    plans[#plans + 1] = p
  end
  for i, p in ipairs(recurrent.propose(P, target, short)) do
    p.rank = (short and 200 or 10) - i
    plans[#plans + 1] = p
  end
  if #plans == 0 then return nil, "no GDN kernel takes this problem" end
  return plans
end

function E.build(plan, group, g, target, symbol)
  local _ = group
  if plan.knobs.path == "split" then return chunk_split.build(plan, g, symbol, target) end
  if plan.knobs.path == "chunk" then return chunk.build(plan, g, symbol, target) end
  return recurrent.build(plan, g, symbol, target)
end

return E
