-- kiln.engines.gdn.chunk_split: the split chunked GDN forward (docs/GDN.md "Split chunked
-- forward"): the fused chunk kernel's work in three kernels, so that only the state update stays
-- serial over the chunks:
--   prep   a CTA per (slot, state head): gates, A = KK^T, T = (I + A)^-1, W and U (gdn_split_prep.cuh);
--   state  a CTA per (sequence, state head, BV rows of the state): V_new = U - W S^T and the
--          state update, the chunk's starting state to the workspace (gdn_split_state.cuh);
--   out    a CTA per (slot, state head): O from Q, K, the starting state and V_new (gdn_split_out.cuh).
-- A slot is a chunk's place in the workspace (templates/gdn_split_common.cuh): slots = T / 64 + N + 1.
local render = require "kiln.render"
local rowgen = require "kiln.engines.rowgen"
local pw = require "kiln.engines.pwexpr"
local chunk = require "kiln.engines.gdn.chunk"

local M = {}

M.C = chunk.C
-- Tiles of the state's V rows for the state pass (a warp per 16 rows): the pass is serial over the
-- chunks, so where sequences x heads are few, smaller tiles make more CTAs; larger tiles read W
-- and K fewer times. The lead: the largest tile that still makes FEW CTAs (N static), else the
-- smallest; 32 where N is dynamic.
M.BV = { 16, 32, 64 }
M.FEW = 128
M.OPTIONS = chunk.OPTIONS

-- Shared memory (bytes; each template's SMEM).
function M.smem_prep(P)
  local C = M.C
  return C * (P.K + 8) * 2 + C * (P.V + 8) * 2 + C * (C + 4) * 4 + 16 * 48 * 4 + C * (C + 8) * 2 + 3 * C * 4
end
function M.smem_state(P, bv)
  local C = M.C
  return 2 * (2 * C * (P.K + 8) * 2 + C * (bv + 8) * 2 + 2 * C * 4) + C * (bv + 8) * 2
end
function M.smem_out(P)
  local C = M.C
  return 2 * C * (P.K + 8) * 2 + P.V * (P.K + 8) * 2 + C * (P.V + 8) * 2 + C * (C + 8) * 2 + 3 * C * 4
end

-- Workspace bytes a slot holds: per state head the starting state, W, U / V_new (io dtype), G and rk (fp32).
function M.slot_bytes(P)
  return P.HO * (P.V * P.K * 2 + M.C * (P.K + P.V) * 2 + 2 * M.C * 4)
end

-- A launch rule of `per` a slot (slots = T / C + cu_seqlens entries): a product of T or of the
-- entries, the other term a constant; nil where both are dynamic.
function M.slots_rule(P, per)
  local T, ncu = P.T, P.cu.dims[1]
  local st, sn = math.type(T) == "integer", math.type(ncu) == "integer"
  if st and sn then return { mul = { (T // M.C + ncu) * per }, div = 1, max = 0 } end
  if sn then return { mul = rowgen.with_const({ T }, per), div = M.C, max = 0, add = ncu * per } end
  if st then return { mul = rowgen.with_const({ ncu }, per), div = 1, max = 0, add = (T // M.C) * per } end
  return nil
end

-- Plans for problem P on target, or {} and why none.
function M.propose(P, target)
  local why = chunk.unfit(P, target, "the split chunked kernels")
  if why then return {}, why end
  if not M.slots_rule(P, 1) then
    return {}, "the split chunked kernels' workspace needs T or the cu_seqlens length static (both are dynamic)"
  end
  local limit = chunk.SMEM_MAX[target.sm] or chunk.SMEM_DEFAULT
  local big = math.max(M.smem_prep(P), M.smem_out(P))
  if big > limit then
    return {}, string.format("the split chunked kernels' shared memory (%d bytes) exceeds sm_%d's %d", big, target.sm, limit)
  end
  local lead = 32
  if P.N then
    lead = M.BV[1]
    for _, bv in ipairs(M.BV) do if P.N * P.HO * (P.V // bv) >= M.FEW then lead = bv end end
  end
  local plans, order = {}, { lead }
  for _, bv in ipairs(M.BV) do if bv ~= lead then order[#order + 1] = bv end end
  for _, bv in ipairs(order) do
    if P.V % bv == 0 and M.smem_state(P, bv) <= limit then
      plans[#plans + 1] = { id = string.format("gdn:v1:chunk:split:c%d:bv%d", M.C, bv),
                            knobs = { path = "split", bv = bv }, P = P }
    end
  end
  return plans
end

-- The kernels' prologue (sizes, pointers, accessors): the fused chunked kernel's own.
local setup = chunk.setup

-- The three kernels of a split plan and their workspace.
function M.build(plan, g, symbol)
  local P, bv = plan.P, plan.knobs.bv
  local function kernel(sym, template, threads, smem, grid, extra)
    local K = rowgen.kernel(g, sym)
    local src = K.src
    local vars = chunk.common(K, P, sym)
    src:need("gdn_split_common.cuh")
    vars.THREADS, vars.SMEM = threads, smem
    for key, x in pairs(extra) do vars[key] = x end
    vars.setup = setup(K, P) .. string.format("\n  const kiln_i64 NCU = %s;", pw.cdim(P.cu.dims[1]))
    K:workspace(0, "wsp")
    vars.params = K:finish_params()
    src:add(render.fill(render.template(template), vars, template))
    return { symbol = sym, engine = "gdn", plan_id = plan.id, options = M.OPTIONS, source = src:text(),
             block = { threads, 1, 1 }, grid = { grid, 1, 1 }, smem = smem, cluster = { 1, 1, 1 },
             params = K.mparams, align = K.align }
  end
  local per_slot = M.slots_rule(P, P.HO)
  local seqs = rowgen.with_const({ P.cu.dims[1] }, P.HO * (P.V // bv))
  return {
    kernels = {
      kernel(symbol .. "_prep", "gdn_split_prep.cuh", 128, M.smem_prep(P), per_slot, {}),
      kernel(symbol, "gdn_split_state.cuh", 2 * bv, M.smem_state(P, bv), { mul = seqs }, { BV = bv }),
      kernel(symbol .. "_out", "gdn_split_out.cuh", 128, M.smem_out(P), per_slot, {}),
    },
    workspace = { rule = M.slots_rule(P, M.slot_bytes(P)) },
  }
end

return M
