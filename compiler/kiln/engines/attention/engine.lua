-- kiln.engines.attention.engine: the forward sdpa (docs/OPS.md §7.3) as one persistent
-- kernel of 384 threads a CTA, tiles of 128 query rows of one (batch, q head), walked over
-- the key/value blocks the diagonal band lets the tile see, with the online softmax in fp32
-- (exp2, the scale folded in). Two code forms of that one algorithm, one per SM family:
--   sm90 (sm_90a) warp-specialized: one TMA producer thread fills a ring of K and V stages;
--        two consumer warpgroups (64 rows each) run QK^T and P.V by wgmma (P from
--        registers), the next QK^T issued before the current softmax, and take turns on the
--        tensor cores (ping-pong) so one's exps run under the other's matrix products
--        (templates/sdpa_sm90.cuh).
--   mma  (sm_80 and later, the fallback for sm_80 and sm_100a) mma.sync m16n8k16 over a
--        cp.async ring of K and V (templates/sdpa_sm80.cuh).
-- Both take the same parameters, grid and per-tile code (kiln.engines.attention.tile).
local render = require "kiln.render"
local dtypes = require "kiln.dtypes"
local rowgen = require "kiln.engines.rowgen"
local sms = require "kiln.engines.sms"
local pw = require "kiln.engines.pwexpr"
local problem = require "kiln.engines.attention.problem"
local tile = require "kiln.engines.attention.tile"
local decode = require "kiln.engines.attention.decode"
local backward = require "kiln.engines.attention.backward"

local E = { id = "attention", version = 1 }

E.THREADS = 384
E.BM = 128
-- Shared memory a block may have: sm_90 (227 KB) and the least of the other targets (sm_80's 163 KB).
E.SMEM_MAX_SM90, E.SMEM_MAX = 232448, 166912
-- Registers after setmaxnreg: 2 consumer warpgroups and the producer within 3 x 168.
E.REG_CONSUMER, E.REG_PRODUCER = 240, 24
assert(2 * E.REG_CONSUMER + E.REG_PRODUCER <= 3 * 168, "kiln.engines.attention: setmaxnreg budget")
-- sm90 key/value tiles by head dim, best first: { bn = keys a block, stages = ring depth }.
-- FlashAttention-3's sizes where the ring of two fits (d256: 80 keys, shared memory bound).
E.SM90_TILES = {
  [64] = { { bn = 128, stages = 3 }, { bn = 192, stages = 2 }, { bn = 192, stages = 4 } },
  [96] = { { bn = 128, stages = 2 } },
  [128] = { { bn = 128, stages = 2 }, { bn = 128, stages = 3 }, { bn = 176, stages = 2 } },
  [192] = { { bn = 112, stages = 2 }, { bn = 96, stages = 2 } },
  [256] = { { bn = 80, stages = 2 }, { bn = 64, stages = 2 } },
}
-- The mma path: 64 keys a block (32 past Dv 128: O's registers leave S room for no more),
-- double-buffered where the ring fits.
E.MMA_BN = 64
-- ptxas reports registers and spills into the NVRTC log (kept by KILN_DUMP_DIR).
E.OPTIONS = { "--std=c++17", "--ptxas-options=-v" }

local function boxes(d) return (d + 63) // 64 end

-- Dynamic shared memory of the sm90 kernel: Q, the K and V stages, 8-byte barriers, slack to
-- align to 1024 bytes.
function E.sm90_smem(P, bn, stages)
  return E.BM * 128 * boxes(P.D) + stages * bn * 128 * (boxes(P.D) + boxes(P.Dv)) + 8 * (2 + 4 * stages) + 1024
end

-- Dynamic shared memory of the mma kernel: Q and the K and V stages in rows padded by 16 bytes;
-- a stage holds 32 keys where Dv > 128 (O's registers leave no room for S of 64: the template's
-- KB), else MMA_BN.
function E.mma_keys(P) return P.Dv > 128 and 32 or E.MMA_BN end

function E.mma_smem(P, stages)
  local row_q, row_v = (P.D + 8) * 2, (P.Dv + 8) * 2
  return E.BM * row_q + stages * E.mma_keys(P) * (row_q + row_v)
end

local function mma_stages(P)
  return E.mma_smem(P, 2) <= E.SMEM_MAX and 2 or 1
end

-- The persistent grid: a CTA per SM at most, never more than the tiles (B * Hq * Sq / 128 of
-- them, a partial last tile per (batch, head) aside: the kernel's loop takes every tile).
local function grid(P)
  local f, const = {}, P.Hq
  for _, d in ipairs { P.B, P.Sq } do
    if type(d) == "string" then f[#f + 1] = d else const = const * d end
  end
  f[#f + 1] = const
  return { sms.rule(f, E.BM, sms.cap(1)), 1, 1 }
end

function E.propose(group, g, target)
  if group.family ~= "sdpa" then return nil, string.format("group is a %s op (%s), not attention", group.family,
    (group.anchor or group.nodes[1]).op) end
  if target.sm < 80 then return nil, "needs sm_80 or later (mma.sync bf16, cp.async)" end
  local P, why = problem.of(group, g)
  if not P then return nil, why end
  if P.backward then return backward.propose(P, target, E.SMEM_MAX) end
  -- few query positions against many keys: the decode kernels first where they fit
  local plans = decode.propose(P, target, 200)
  if P.paged then
    if #plans == 0 then
      return nil, "paged K/V is taken by the decode kernels only (S_q known and <= 16, k and v heads equal)"
    end
    return plans
  end
  local stats = P.stats and ":lse" or ""
  if target.sm == 90 and target.arch_specific then
    -- each tile, ranked: alone on the tensor cores, taking turns with the other warpgroup
    -- (ping-pong), and alone with every (batch, head) in one group of the tile order (no L2
    -- grouping). H100, 2026-12-06, against ping-pong: d128 1.02-1.05x, d256 1.07x, d64 level.
    local variants = { { pp = false, group = true }, { pp = true, group = true }, { pp = false, group = false } }
    for pass, v in ipairs(variants) do
      for i, t in ipairs(E.SM90_TILES[P.D]) do
        local smem = E.sm90_smem(P, t.bn, t.stages)
        if smem <= E.SMEM_MAX_SM90 then
          plans[#plans + 1] = {
            id = string.format("attention:v%d:sm90:128x%d:s%d%s%s%s", E.version, t.bn, t.stages, v.pp and ":pp" or "",
              v.group and "" or ":nogroup", stats),
            knobs = { path = "sm90", bn = t.bn, stages = t.stages, pingpong = v.pp, group = v.group },
            rank = 100 - 10 * pass - i, P = P,
            launch = { block = { E.THREADS, 1, 1 }, grid = grid(P), smem = smem, cluster = { 1, 1, 1 } },
          }
        end
      end
    end
  end
  local stages = mma_stages(P)
  plans[#plans + 1] = {
    id = string.format("attention:v%d:mma:128x%d:s%d%s", E.version, E.mma_keys(P), stages, stats),
    knobs = { path = "mma", bn = E.mma_keys(P), stages = stages },
    rank = 10, P = P,
    launch = { block = { E.THREADS, 1, 1 }, grid = grid(P), smem = E.mma_smem(P, stages), cluster = { 1, 1, 1 } },
  }
  return plans
end

local PTX_T = { bf16 = "bf16", fp16 = "f16" }

-- The wgmma calls of the sm90 kernel: S = Q K^T over one 16-deep k step (both operands in
-- shared memory, K-major: kiln_wgmma_qk, and kiln_wgmma_qk_first which starts from zero), and
-- O += P V over 16 keys (P from registers, V MN-major: kiln_wgmma_pv).
local function wgmma_fns(P, bn)
  local t = PTX_T[P.dtype]
  local function regs(n, first)
    local r, o = {}, {}
    for i = 0, n - 1 do r[#r + 1] = "%" .. (first + i) end
    return table.concat(r, ", ")
  end
  local function outs(n)
    local o = {}
    for i = 0, n - 1 do o[#o + 1] = string.format("\"+f\"(d[%d])", i) end
    return table.concat(o, ", ")
  end
  local ns, no = bn // 2, P.Dv // 2
  local out = {}
  for _, v in ipairs { { "qk", 1 }, { "qk_first", 0 } } do
    out[#out + 1] = string.format([[
__device__ __forceinline__ void kiln_wgmma_%s(float (&d)[%d], kiln_u64 da, kiln_u64 db) {
  asm volatile(
    "{ .reg .pred p; setp.ne.b32 p, %d, 0;\n"
    "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s {%s}, %%%d, %%%d, p, 1, 1, 0, 0; }"
    : %s
    : "l"(da), "l"(db) : "memory");
}]], v[1], ns, v[2], bn, t, t, regs(ns, 0), ns, ns + 1, outs(ns))
  end
  out[#out + 1] = string.format([[
__device__ __forceinline__ void kiln_wgmma_pv(float (&d)[%d], const kiln_u32 (&a)[4], kiln_u64 db) {
  asm volatile(
    "{ .reg .pred p; setp.ne.b32 p, 1, 0;\n"
    "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s {%s}, {%%%d, %%%d, %%%d, %%%d}, %%%d, p, 1, 1, 1; }"
    : %s
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db) : "memory");
}]], no, P.Dv, t, t, regs(no, 0), no, no + 1, no + 2, no + 3, no + 4, outs(no))
  return table.concat(out, "\n")
end

-- Tensor maps of q, k and v (parameters tm<uid>): map dims (head dim in 64-element boxes of
-- 128 bytes, sequence in boxes of `rows`, head, batch), 128-byte swizzle.
local function tmaps(K, P, bn)
  local decl = {}
  for _, p in ipairs { { P.q, E.BM }, { P.k, bn }, { P.v, bn } } do
    local t, rows = p[1], p[2]
    local name = "tm" .. t.uid
    K.params[#K.params + 1] = "const __grid_constant__ kiln_tmap " .. name
    K.mparams[#K.mparams + 1] = { kind = "tmap", uid = t.uid, swizzle = 3,
                                  dims = { { axis = 3, box = 64 }, { axis = 2, box = rows }, { axis = 1, box = 1 }, { axis = 0, box = 1 } } }
    K:need_align(t.uid, 16)
    decl[#decl + 1] = string.format("// kiln tmap %s: %s boxes of 64 x %d", name, t.name, rows)
  end
  return table.concat(decl, "\n")
end

-- The headers every attention kernel needs.
local function need_common(src, P)
  src:need(P.dtype == "bf16" and "common/bf16.cuh" or "common/fp16.cuh")
  src:need("common/exp2.cuh")
  src:need("common/cp_async.cuh")
end

function E.build(plan, group, g, target, symbol)
  local P, knobs = plan.P, plan.knobs
  if knobs.path == "bwd" then
    local what = string.format("%s %s, k/v heads %d, D %d%s%s", P.node.name, P.dtype, P.Hk, P.D, tile.describe(P),
      P.deterministic and ", deterministic" or "")
    return backward.build(plan, g, symbol, what, function(src) need_common(src, P) end, E.OPTIONS)
  end
  if knobs.path == "decode" then
    local vars = { what = "", BM = E.BM, D = P.D, DV = P.Dv, options = E.OPTIONS,
                   MMA_T = P.dtype == "bf16" and "bf16" or "f16",
                   PACK = P.dtype == "bf16" and "kiln_f32x2_to_bf16x2" or "kiln_f32x2_to_fp16x2" }
    vars.what = string.format("%s %s, %d q positions, k/v heads %d, D %d, Dv %d%s", P.node.name, P.dtype, P.Sq, P.Hk,
      P.D, P.Dv, tile.describe(P))
    return decode.build(plan, g, symbol, vars, function(src) need_common(src, P) end)
  end
  local K = rowgen.kernel(g, symbol)
  local src = K.src
  need_common(src, P)
  src:need("common/tma.cuh")
  -- parameters: the tensors (inputs by uid, then outputs), the tensor maps, scalars, dims
  local setup = tile.setup(K, P, knobs.group ~= false)
  local maps = tmaps(K, P, knobs.path == "sm90" and knobs.bn or (E.SM90_TILES[P.D][1].bn))
  local what = string.format("%s %s, q [%s], k/v heads %d/%d, D %d, Dv %d%s", P.node.name, P.dtype,
    table.concat((function() local d = {} for i, x in ipairs(P.q.dims) do d[i] = tostring(x) end return d end)(), ", "),
    P.Hk, P.Hv, P.D, P.Dv, tile.describe(P))
  local vars = {
    what = what, symbol = symbol, tmaps = maps, BM = E.BM, BN = knobs.bn, STAGES = knobs.stages, D = P.D, DV = P.Dv,
    setup = setup, PACK = P.dtype == "bf16" and "kiln_f32x2_to_bf16x2" or "kiln_f32x2_to_fp16x2",
  }
  vars.params = K:finish_params()
  if knobs.path == "sm90" then
    src:need("common/mbarrier.cuh")
    src:need("common/wgmma.cuh")
    src:need("common/named_barrier.cuh")
    src:add(wgmma_fns(P, knobs.bn))
    vars.PINGPONG = knobs.pingpong and "true" or "false"
    vars.TM_Q, vars.TM_K, vars.TM_V = "tm" .. P.q.uid, "tm" .. P.k.uid, "tm" .. P.v.uid
    vars.REG_CONSUMER, vars.REG_PRODUCER = E.REG_CONSUMER, E.REG_PRODUCER
    src:add(render.fill(render.template("sdpa_sm90.cuh"), vars, "sdpa_sm90.cuh"))
  else
    src:need("common/mma_sm80.cuh")
    src:need("common/sdpa_rows.cuh")
    src:need("common/named_barrier.cuh")
    vars.MMA_T = P.dtype == "bf16" and "bf16" or "f16"
    src:add(render.fill(render.template("sdpa_sm80.cuh"), vars, "sdpa_sm80.cuh"))
  end
  local l = plan.launch
  return {
    symbol = symbol, engine = E.id, plan_id = plan.id, options = E.OPTIONS, source = src:text(),
    block = l.block, grid = l.grid, smem = l.smem, cluster = l.cluster, params = K.mparams, align = K.align,
  }
end

return E
