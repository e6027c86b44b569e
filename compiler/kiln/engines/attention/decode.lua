-- kiln.engines.attention.decode: the forward sdpa for few query positions (1 to 16 a
-- sequence) against many keys: the q heads of a k/v head packed into one tile of G x Sq rows,
-- the keys split over CTAs as the device's SM count and the sizes ask, and a combine kernel
-- over the splits (templates/sdpa_decode.cuh, templates/sdpa_combine.cuh). The engine
-- proposes these plans above the prefill kernels where the problem fits.
local render = require "kiln.render"
local rowgen = require "kiln.engines.rowgen"
local sms = require "kiln.engines.sms"
local tile = require "kiln.engines.attention.tile"
local pw = require "kiln.engines.pwexpr"

local M = {}

M.WARPS, M.THREADS = 4, 128
M.MAX_SQ = 16
-- O's accumulators a thread: MT m16 tiles of Dv / 2 floats; more spills, and past ACC_WIDE
-- only blocks of 16 keys leave S and P room.
M.MAX_ACC, M.ACC_WIDE = 256, 128
-- The fewest keys a split takes: below it a split's fixed costs (Q, its partials, the meeting
-- of the warps) outweigh its keys.
M.KEYS_MIN = 256
-- Dynamic shared memory a block may have, by SM (sm_86 and sm_89: 99 KB; sm_80: 163 KB).
local SMEM_MAX = { [80] = 166912, [86] = 101376, [87] = 166912, [89] = 101376 }
M.SMEM_DEFAULT = 232448
-- CTAs an SM the grid is sized for: one pack plan has one grid on every SM it is built for.
M.W = 2
-- Candidates, best first: keys a block (BN) and the depth of each warp's ring. H200, d128, 32/8
-- heads: dense caches within 2% across the first three (3.5-4.0 TB/s), blocks of 16 in rings of 2
-- 5-15% behind; through page tables of 16 keys the order turns (blocks of 16 in rings of 2, three
-- CTAs an SM: 3.1-3.5 TB/s against 2.1-2.2).
M.CANDIDATES = { { bn = 32, stages = 3 }, { bn = 16, stages = 4 }, { bn = 32, stages = 2 }, { bn = 16, stages = 2 } }
M.CANDIDATES_PAGED = { { bn = 16, stages = 2 }, { bn = 16, stages = 4 }, { bn = 32, stages = 3 }, { bn = 32, stages = 2 } }

local function pitch(d) return (d + 8) * 2 end

-- Rows of the packed tile in m16 tiles, or nil where O's accumulators would not fit.
local function tiles_of(P)
  local mt = (P.Hq // P.Hk * P.Sq + 15) // 16
  if mt * P.Dv > M.MAX_ACC then return nil end
  return mt
end

-- Shared memory: Q's tile and each warp's ring of BN keys of K and V.
function M.smem(P, mt, c)
  return mt * 16 * pitch(P.D) + M.WARPS * c.stages * c.bn * (pitch(P.D) + pitch(P.Dv))
end

-- The warps' partials (max, sum, O in rows of Dv + 4 floats) meet in the rings.
local function partials_fit(P, mt, c)
  local rows = mt * 16
  return 4 * (2 * M.WARPS * rows + 2 * rows + M.WARPS * rows * (P.Dv + 4)) <= M.WARPS * c.stages * c.bn * (pitch(P.D) + pitch(P.Dv))
end

-- Bytes of one work item's partials: its rows of O, max and sum in fp32.
local function item_bytes(P) return P.Hq // P.Hk * P.Sq * (P.Dv + 2) * 4 end

-- The decode plans of a problem on target (none where it is not a decode problem), ranked
-- from `top` down.
function M.propose(P, target, top)
  if math.type(P.Sq) ~= "integer" or P.Sq > M.MAX_SQ or P.Hk ~= P.Hv then return {} end
  local mt = tiles_of(P)
  if not mt then return {} end
  local limit = SMEM_MAX[target.sm] or M.SMEM_DEFAULT
  local plans = {}
  for i, c in ipairs(P.paged and M.CANDIDATES_PAGED or M.CANDIDATES) do
    local smem = M.smem(P, mt, c)
    if smem <= limit and partials_fit(P, mt, c) and (mt * P.Dv <= M.ACC_WIDE or c.bn == 16) then
      -- work items of KEYS_MIN keys, at most W CTAs an SM (the kernel loops past them), one more
      -- so that an empty cache still launches
      local grid = { mul = rowgen.with_const({ P.B, P.Skv }, P.Hk), div = M.KEYS_MIN, sm_mul = M.W, sm_div = 1, add = 1 }
      plans[#plans + 1] = {
        id = string.format("attention:v1:decode:k%d:s%d%s", c.bn, c.stages, P.stats and ":lse" or ""),
        knobs = { path = "decode", bn = c.bn, stages = c.stages, mt = mt }, rank = top - i, P = P,
        launch = { block = { M.THREADS, 1, 1 }, grid = { grid, 1, 1 }, smem = smem, cluster = { 1, 1, 1 } },
      }
    end
  end
  return plans
end

-- The splits of a (batch, k/v head) from the split kernel's grid, and a batch entry's key
-- blocks dealt over them, as both kernels compute them.
local function splits_code(P, kn)
  return string.format([[
// Splits a (batch, k/v head): as many as fill the split kernel's grid of min(ceil(B HK SKV /
// %d), %d SMs) CTAs (its launch rule, less the spare CTA), within ceil(SKV / %d).
__device__ __forceinline__ kiln_i64 kiln_decode_splits(kiln_i64 B, kiln_i64 SKV, kiln_i64 sms) {
  const kiln_i64 items = B * %d, cap = %d * sms;
  if (items <= 0) return 1;
  kiln_i64 grid = (items * SKV + %d - 1) / %d;
  if (grid > cap) grid = cap;
  const kiln_i64 ns = grid / items, most = (SKV + %d - 1) / %d;
  return ns < 1 ? 1 : ns > most ? most : ns;
}
// A batch entry's key blocks over ns splits: per split (%d at least), and the splits that get any.
__device__ __forceinline__ void kiln_decode_deal(int blocks, kiln_i64 ns, int &per, int &n) {
  per = (int)((blocks + ns - 1) / ns);
  if (per < %d) per = %d;
  n = blocks > per ? (blocks + per - 1) / per : 1;
}]], M.KEYS_MIN, M.W, M.KEYS_MIN, P.Hk, M.W, M.KEYS_MIN, M.KEYS_MIN, M.KEYS_MIN, M.KEYS_MIN,
    M.KEYS_MIN // kn.bn, M.KEYS_MIN // kn.bn, M.KEYS_MIN // kn.bn)
end

-- k_row(b, h, r) and v_row(b, h, r): the first element of key (value) row r of head h of batch
-- entry b, directly or through the page tables into the block containers.
local function rows_code(K, P)
  local cdim = pw.cdim
  if not P.paged then
    return [[
  auto k_row = [&](int b, int h, int r) { return gk + (kiln_i64)b * k_sb + (kiln_i64)h * k_sh + (kiln_i64)r * k_ss; };
  auto v_row = [&](int b, int h, int r) { return gv + (kiln_i64)b * v_sb + (kiln_i64)h * v_sh + (kiln_i64)r * v_ss; };]]
  end
  local L = { string.format("  constexpr int PAGE = %d;  // keys a page", P.paged.page) }
  for _, x in ipairs { { "k", P.paged.k }, { "v", P.paged.v } } do
    local n, t = x[1], x[2]
    L[#L + 1] = string.format(
      "  auto %s_row = [&](int b, int h, int r) { return g%s + (kiln_i64)%s[(kiln_i64)b * %s + (kiln_i64)(r / PAGE) * %s] * %s_sb + (kiln_i64)h * %s_sh + (kiln_i64)(r %% PAGE) * %s_ss; };",
      n, n, K:ptr(t.uid), cdim(t.strides[1]), cdim(t.strides[3]), n, n, n)
  end
  return table.concat(L, "\n")
end

-- The split kernel and the combine kernel of a decode plan, and their workspace: an item's
-- partials for each of at most min(ceil(B HK SKV / KEYS_MIN), W SMs) items that hold splits.
function M.build(plan, g, symbol, vars, need)
  local P, kn = plan.P, plan.knobs
  vars.BN, vars.STAGES, vars.SQ, vars.MT, vars.splits = kn.bn, kn.stages, P.Sq, kn.mt, splits_code(P, kn)
  local function kernel(sym, template, extra)
    local K = rowgen.kernel(g, sym)
    need(K.src)
    for _, f in ipairs(extra) do K.src:need(f) end
    local v = {}
    for key, x in pairs(vars) do v[key] = x end
    v.symbol, v.setup = sym, tile.setup(K, P, false)
    if template == "sdpa_decode.cuh" then v.kv_rows = rows_code(K, P) end
    K:workspace(0)
    K.params[#K.params + 1] = "const kiln_i64 sms"
    K.mparams[#K.mparams + 1] = { kind = "sms" }
    v.params = K:finish_params()
    K.src:add(render.fill(render.template(template), v, template))
    return K
  end
  local S = kernel(symbol, "sdpa_decode.cuh", { "common/mma_sm80.cuh" })
  local C = kernel(symbol .. "_combine", "sdpa_combine.cuh", { "common/pdl.cuh" })
  local l = plan.launch
  local split = {
    symbol = symbol, engine = "attention", plan_id = plan.id, options = vars.options, source = S.src:text(),
    block = l.block, grid = l.grid, smem = l.smem, cluster = l.cluster, params = S.mparams, align = S.align,
  }
  local combine = {
    symbol = symbol .. "_combine", engine = "attention", plan_id = plan.id .. ":combine", options = vars.options,
    source = C.src:text(), block = { M.THREADS, 1, 1 },
    grid = { { mul = rowgen.with_const({ P.B }, P.Hq * P.Sq), div = M.WARPS }, 1, 1 },
    smem = 0, cluster = { 1, 1, 1 }, params = C.mparams, align = C.align, pdl = true,
  }
  -- ceil(B HK SKV X / KEYS_MIN) + X >= X ceil(B HK SKV / KEYS_MIN): the rule rounds before the cap
  local x = item_bytes(P)
  local cap = sms.cap(M.W * x)
  local workspace = { rule = sms.rule(rowgen.with_const({ P.B, P.Skv }, P.Hk * x), M.KEYS_MIN, cap, x) }
  return { kernels = { split, combine }, workspace = workspace }
end

return M
