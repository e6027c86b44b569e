-- kiln.engines.attention.backward: sdpa_backward (docs/OPS.md §7.6) as three kernels over one
-- fp32 workspace: a pre-pass a query row (Dsum = rowsum(dO o O), the Stats in log2 units, the
-- sink's per-row terms, dQ's sums zeroed: templates/sdpa_bwd_prep.cuh), the main kernel a
-- block of keys of one (batch, k/v head) with dK and dV in registers over every query block and
-- q head that sees it, dQ added into the workspace (templates/sdpa_bwd.cuh), and a post-pass
-- writing dQ and the sink's gradient (templates/sdpa_bwd_post.cuh). mma.sync, so one form for
-- sm_80 and later.
local render = require "kiln.render"
local rowgen = require "kiln.engines.rowgen"
local pw = require "kiln.engines.pwexpr"
local tile = require "kiln.engines.attention.tile"

local M = {}

-- Candidates by head dim, best first: BN keys a CTA (16 a warp), BM query rows a step (the dQ
-- product's D / (BN / BM) columns a warp must be a multiple of 16). Past D 64 a step of 64
-- rows holds more scores than the registers take beside dK and dV (ptxas spills at D 128).
M.TILES = {
  [64] = { { bn = 128, bm = 64 }, { bn = 128, bm = 32 }, { bn = 64, bm = 64 } },
  [96] = { { bn = 128, bm = 64 }, { bn = 64, bm = 64 } },
  [128] = { { bn = 128, bm = 32 }, { bn = 128, bm = 64 }, { bn = 64, bm = 32 } },
}

local cdim = pw.cdim
local LOG2E = 1.4426950408889634

-- K, V, two buffers of Q and dO, dS^T, two buffers of L2 and Dsum.
function M.smem(P, t)
  local row = (P.D + 8) * 2
  return 2 * t.bn * row + 4 * t.bm * row + t.bn * (t.bm + 8) * 2 + 4 * t.bm * 4
end

-- The workspace: per query row D fp32 dQ sums, L2, Dsum, the sink's term and a counter slot.
local function workspace_rule(P)
  return { mul = rowgen.with_const({ P.B, P.Sq }, P.Hq * (P.D + 4) * 4), div = 1 }
end

-- smem_max: the shared memory a block may have on every target (the engine's)
function M.propose(P, target, smem_max)
  local det = P.deterministic and ":det" or ""
  local plans = {}
  for i, t in ipairs(M.TILES[P.D]) do
    local smem = M.smem(P, t)
    if smem <= smem_max then
      plans[#plans + 1] = {
        id = string.format("attention:v1:bwd:%dx%d%s", t.bn, t.bm, det),
        knobs = { path = "bwd", bn = t.bn, bm = t.bm }, rank = 100 - i, P = P,
        launch = { block = { 2 * t.bn, 1, 1 }, smem = smem, cluster = { 1, 1, 1 },
                   grid = { { mul = { P.Skv }, div = t.bn }, { mul = rowgen.with_const({ P.B }, P.Hk) }, 1 } },
      }
    end
  end
  if #plans == 0 then return nil, "no backward tile fits the shared memory of sm_" .. target.sm end
  return plans
end

-- An element pointer and its strides: g<name> and <name>_{sb,sh,ss}.
local function tensor(K, L, name, t, writable)
  K:need_align(t.uid, 16)
  L[#L + 1] = string.format("  %skiln_u16 *__restrict__ g%s = %s;", writable and "" or "const ", name, K:ptr(t.uid, writable))
  L[#L + 1] = tile.strides(name, t)
  L[#L + 1] = string.format("  (void)g%s; (void)%s_sb; (void)%s_sh; (void)%s_ss;", name, name, name, name)
end

-- A [*, Hq, ...] fp32 tensor's element of head hq (the sink and its gradient).
local function head_at(K, t, writable)
  return string.format("%s[(kiln_i64)hq * %s]", K:ptr(t.uid, writable), cdim(t.strides[2]))
end

-- The lines every kernel of the plan starts with: sizes, the tensors it names, the lengths.
local function head(K, P, names)
  local L = {}
  L[#L + 1] = string.format("  constexpr int HQ = %d, HK = %d, HV = %d;", P.Hq, P.Hk, P.Hv)
  L[#L + 1] = string.format("  const kiln_i64 B = %s, SQ = %s, SKV = %s;", cdim(P.B), cdim(P.Sq), cdim(P.Skv))
  L[#L + 1] = "  (void)SKV;"
  K:note_dyn({ P.B, P.Sq, P.Skv })
  for _, n in ipairs(names) do tensor(K, L, n[1], P[n[2]], n[3]) end
  K:workspace(0)
  if P.band.bottom_right then L[#L + 1] = string.format("  constexpr kiln_i64 BAND_MAX = %d;", tile.BAND_MAX) end
  tile.length_lines(K, P, L)
  return L
end

local function prep_setup(K, P)
  local L = head(K, P, { { "o", "o" }, { "do", "dO" } })
  local s = P.stats
  L[#L + 1] = string.format("  auto stats_at = [&](int b, int hq, int i) -> float { return %s[(kiln_i64)b * %s + (kiln_i64)hq * %s + (kiln_i64)i * %s]; };",
    K:ptr(s.uid), cdim(s.strides[1]), cdim(s.strides[2]), cdim(s.strides[3]))
  L[#L + 1] = string.format("  auto sink_term = [&](int hq, float L, float dsum) -> float { %s };",
    P.sink and string.format("return -expf(%s - L) * dsum;", head_at(K, P.sink)) or "(void)hq; (void)L; (void)dsum; return 0.0f;")
  return table.concat(L, "\n")
end

local function main_setup(K, P)
  local L = head(K, P, { { "q", "q" }, { "k", "k" }, { "v", "v" }, { "do", "dO" }, { "dk", "dk", true }, { "dv", "dv", true } })
  tile.scale_lines(K, P, L)
  L[#L + 1] = string.format("  constexpr bool SOFTCAP = %s;", P.softcap and "true" or "false")
  L[#L + 1] = string.format("  const float cap_inv = %s;  // d/dx c tanh(x / c) = 1 - (y / c)^2",
    P.softcap and render.float_literal(1 / P.softcap) or "0.0f")
  L[#L + 1] = "  (void)cap_inv;"
  tile.band_lines(P, L)
  return table.concat(L, "\n")
end

local function post_setup(K, P)
  local L = head(K, P, { { "dq", "dq", true } })
  tile.scale_lines(K, P, L)
  if P.dsink then L[#L + 1] = string.format("  auto dsink_at = [&](int hq) -> float & { return %s; };", head_at(K, P.dsink, true)) end
  return table.concat(L, "\n")
end

-- The pre-pass, main and post kernels of a backward plan (NVRTC options: the engine's), and
-- their workspace.
function M.build(plan, g, symbol, what, need, options)
  local P, kn = plan.P, plan.knobs
  local mma = P.dtype == "bf16" and "bf16" or "f16"
  local vars = { what = what, BM = kn.bm, BN = kn.bn, THREADS = 2 * kn.bn, D = P.D, MMA_T = mma, DETERMINISTIC = tostring(P.deterministic),
                 PACK = "kiln_f32x2_to_" .. (P.dtype == "bf16" and "bf16x2" or "fp16x2"),
                 TO_F32 = "kiln_" .. P.dtype .. "_to_f32", LOG2E = render.float_literal(LOG2E), SINK = P.dsink and 1 or 0 }
  local function kernel(sym, template, setup, extra, launch, suffix)
    local K = rowgen.kernel(g, sym)
    need(K.src)
    for _, f in ipairs(extra) do K.src:need(f) end
    local v = {}
    for key, x in pairs(vars) do v[key] = x end
    v.symbol, v.setup = sym, setup(K, P)
    v.params = K:finish_params()
    K.src:add(render.fill(render.template(template), v, template))
    return { symbol = sym, engine = "attention", plan_id = plan.id .. suffix, options = options, source = K.src:text(),
             block = launch.block, grid = launch.grid, smem = launch.smem, cluster = { 1, 1, 1 }, params = K.mparams,
             align = K.align }
  end
  local rows = rowgen.with_const({ P.B, P.Sq }, P.Hq)
  local prep = kernel(symbol .. "_prep", "sdpa_bwd_prep.cuh", prep_setup, {},
    { block = { 256, 1, 1 }, grid = { { mul = rows, div = 16 }, 1, 1 }, smem = 0 }, ":prep")
  local main = kernel(symbol, "sdpa_bwd.cuh", main_setup, { "common/mma_sm80.cuh", "common/sdpa_rows.cuh", "common/red.cuh" }, plan.launch, "")
  local post = kernel(symbol .. "_dq", "sdpa_bwd_post.cuh", post_setup, {},
    { block = { 256, 1, 1 }, smem = 0,
      grid = { { mul = rowgen.with_const({ P.B, P.Sq }, P.Hq * P.D // 8), div = 256, add = P.dsink and P.Hq or nil }, 1, 1 } },
    ":dq")
  return { kernels = { prep, main, post }, workspace = { rule = workspace_rule(P) } }
end

return M
