-- kiln.engines.conv1d.engine: causal depthwise conv1d forward and backward (docs/OPS.md §9,
-- docs/CONV1D.md). Kernels (templates/conv1d_*.cuh, shared parts in conv1d_common.cuh):
--   fwd tile  a CTA per TC channels x TT steps x batch entry, the W - 1 steps before the tile read
--             as its halo: long single sequences fill the GPU (the grid splits L);
--   fwd dec   a thread per (batch entry, channel) over a short static L (<= 16), the history and
--             the new steps in registers: the decode update (initial_states -> final_states);
--   bwd tile  NCH CTAs per channel tile walk the (batch entry, time tile) items, dx directly and
--             dweight / dbias as per-CTA sums in the workspace, then a reduce kernel adds them in
--             a fixed order (deterministic, no atomics).
-- Candidates ranked after those (for measuring; the fast widths only):
--   fwd pipe  a CTA walks K time tiles (conv1d_fwdp.cuh), the next tile's loads in flight during
--             the current one's math and stores (:kK);
--   fwd decv  the decode update a thread per V channels, 16-byte accesses (conv1d_decv.cuh, :vV);
--   bwd pf    the backward tile with the next item's loads in flight (conv1d_bwd.cuh PF, :pf).
-- Widths 2..4 keep their sums in registers (the fast kernels); wider ones (to 256) take a loop
-- and smaller channel tiles so shared memory holds the halo.
local render = require "kiln.render"
local rowgen = require "kiln.engines.rowgen"
local problem = require "kiln.engines.conv1d.problem"
local code = require "kiln.engines.conv1d.code"

local E = { id = "conv1d", version = 1 }

E.THREADS = 256
-- Steps of L at most for the short-sequence kernel (a thread holds them all).
E.DEC_MAX_L = 16
-- Floats a thread of the vector short-sequence kernel may hold (V channels x (history, steps,
-- outputs)): bf16 takes L <= 4 at width 4.
E.DECV_REGS = 96
-- Static shared memory a block may have (48 KB, less the compiler's own).
E.SMEM_MAX = 46 * 1024
-- Forward tiles of the fast widths, best first: TC channels x TT steps; those whose loads take
-- more than UNITS_MAX vectors a thread are left out (fp32's 4-element vectors: registers).
E.UNITS_MAX = 5
E.FWD_TILES = { { tc = 64, tt = 128 }, { tc = 64, tt = 64 }, { tc = 32, tt = 128 } }
-- Pipelined forward candidates (conv1d_fwdp.cuh, the fast widths): a CTA walks K time tiles of
-- TC x TT, the next tile's x loads in flight during the current one's math and stores, built for
-- at most minb CTAs an SM (64 x 128: 5 vectors a thread held across the stores take 2 CTAs' registers;
-- 64 x 64: 3 vectors, 3 CTAs); ranked after the plain tiles (RANK_PIPE and down) until measured.
E.FWD_PIPE = { { tc = 64, tt = 128, k = 4, minb = 2 }, { tc = 64, tt = 64, k = 8, minb = 3 } }
E.RANK_PIPE = 90
-- Backward: steps a tile, the SMs its grid is sized for (an H100's 132; NCH chunks a channel
-- tile = the CTAs of those SMs over the channel tiles), and the most chunks.
E.BWD_TT, E.SMS, E.NCH_MAX = 64, 132, 256
-- CTAs an SM the plain problem's tile kernels are built for (__launch_bounds__: 85 registers a
-- thread, what the loads in flight take; 4 CTAs' 64 spill).
E.MIN_BLOCKS = 3
-- ptxas reports registers and spills into the NVRTC log (kept by KILN_DUMP_DIR).
E.OPTIONS = { "--std=c++17", "--ptxas-options=-v" }

local function round_up(x, m) return (x + m - 1) // m * m end

local function vec(P) return code.VEC[P.dtype][2] end

-- Halo rows: W - 1 rounded up to whole vectors (a time-contiguous tile's loads stay aligned).
local function halo(P) return round_up(P.H, vec(P)) end

function E.fwd_smem(P, tc, tt)
  local rows = tt + halo(P)
  return rows * (tc + 1) * 4 + (P.W <= 16 and P.W or 1) * tc * 4 + tc * 4 + (P.seq and rows * 4 or 4)
end

function E.bwd_smem(P, tc, tt)
  local hp = halo(P)
  local xr, zr = tt + 2 * hp, tt + hp
  return (xr + zr) * (tc + 1) * 4 + (P.W <= 16 and P.W or 1) * tc * 4 + tc * 4 + (P.W <= 4 and 4 or tc * (P.W + 1) * 4)
    + (P.seq and xr * 4 or 4)
end

-- The widest channel tile (64 down to one vector) whose shared memory fits (and `ok`).
local function fit_tc(P, smem, tt, ok)
  for _, tc in ipairs { 64, 32, 16, 8 } do
    if tc >= vec(P) and smem(P, tc, tt) <= E.SMEM_MAX and (not ok or ok(tc)) then return tc end
  end
  return nil
end

-- Vectors a thread loads for a tile of `rows` x tc of tensor `port` (default x; templates/
-- conv1d_common.cuh: kiln_cv_units).
function E.units(P, tc, rows, port)
  local V = vec(P)
  local n = P.layouts[port or "x"] == "cl" and rows * (tc // V) or ((rows // V + 3) // 4 * 4) * tc
  return (n + E.THREADS - 1) // E.THREADS
end

-- A grid axis of ceil(d / div) (d an integer or a dynamic dim), at most `max` (0: no cap).
local function axis(d, div, max)
  if math.type(d) == "integer" then
    local n = (d + div - 1) // div
    return (max and max > 0 and n > max) and max or math.max(n, 1)
  end
  return { mul = { d }, div = div, max = max or 0 }
end

-- CTAs an SM a tile kernel is built for: MIN_BLOCKS for the plain problem (a fast width, no
-- states, no seq_idx, the backward's x and dout alike); the options' code takes more registers
-- (2 there, no spills).
local function blocks(P)
  local plain = P.W <= 4 and not (P.init or P.fin or P.dfin or P.seq) and (not P.bwd or P.layouts.x == P.layouts.dout)
  return plain and E.MIN_BLOCKS or 2
end

-- Chunks a backward channel tile is walked by: the device's CTAs (minb an SM) over the channel tiles.
local function chunks(P, tc, minb)
  local n_cb = math.type(P.D) == "integer" and (P.D + tc - 1) // tc or 64
  local nch = math.max(1, math.min(E.NCH_MAX, minb * E.SMS // n_cb))
  if math.type(P.B) == "integer" and math.type(P.L) == "integer" then
    nch = math.max(1, math.min(nch, P.B * ((P.L + E.BWD_TT - 1) // E.BWD_TT)))
  end
  return nch
end

local function plan_id(P, rest) return string.format("conv1d:v%d:%s:%s:w%d:%s", E.version, P.bwd and "bwd" or "fwd",
  P.layouts.x, P.W, rest) end

function E.propose(group, g, target)
  if group.family ~= "conv1d" then
    return nil, string.format("group is a %s op (%s), not conv1d", group.family, (group.anchor or group.nodes[1]).op)
  end
  if target.sm < 80 then return nil, "needs sm_80 or later" end
  local P, why = problem.of(group, g)
  if not P then return nil, why end
  local plans = {}
  local function add(id, knobs, rank) plans[#plans + 1] = { id = id, knobs = knobs, rank = rank, P = P } end
  if P.bwd then
    local hp = halo(P)
    local tc = fit_tc(P, E.bwd_smem, E.BWD_TT, function(tc)
      -- the fast widths' slices meet in the x tile; x's and dout's vectors a thread
      return P.W > 4 or (E.THREADS // tc * (P.W + 1) <= E.BWD_TT + 2 * hp
        and E.units(P, tc, E.BWD_TT + 2 * hp, "x") + E.units(P, tc, E.BWD_TT + hp, "dout") <= 2 * E.UNITS_MAX - 2)
    end)
    if not tc then return nil, string.format("width %d leaves no channel tile room in shared memory", P.W) end
    -- the plain problem also as 2 CTAs an SM (more registers: the next candidate, for measuring)
    local seen = {}
    for i, minb in ipairs { blocks(P), 2 } do
      local nch = chunks(P, tc, minb)
      local id = plan_id(P, string.format("c%d:t%d:n%d", tc, E.BWD_TT, nch))
      if not seen[id] then
        seen[id] = true
        add(id, { path = "bwd", tc = tc, tt = E.BWD_TT, nch = nch, minb = P.W <= 4 and minb or 1 }, 100 - i)
      end
    end
    -- the fast widths also with the next item's loads in flight during the current one's math
    -- (its x and dout vectors held across it: built for 2 CTAs an SM)
    if P.W <= 4 then
      local nch = chunks(P, tc, 2)
      add(plan_id(P, string.format("c%d:t%d:n%d:pf", tc, E.BWD_TT, nch)),
        { path = "bwd", tc = tc, tt = E.BWD_TT, nch = nch, minb = 2, pf = true }, E.RANK_PIPE)
    end
    return plans
  end
  if math.type(P.L) == "integer" and P.L <= E.DEC_MAX_L and P.W <= 4 then
    add(plan_id(P, string.format("dec%d", P.L)), { path = "dec" }, 200)
    -- a thread a vector of channels where its history, steps and outputs fit in registers
    if vec(P) * (P.H + 2 * P.L) <= E.DECV_REGS then
      add(plan_id(P, string.format("dec%d:v%d", P.L, vec(P))), { path = "decv" }, 199)
    end
  end
  if P.W <= 4 then
    for i, t in ipairs(E.FWD_TILES) do
      if E.fwd_smem(P, t.tc, t.tt) <= E.SMEM_MAX and E.units(P, t.tc, t.tt + halo(P)) <= E.UNITS_MAX then
        add(plan_id(P, string.format("c%d:t%d", t.tc, t.tt)), { path = "tile", tc = t.tc, tt = t.tt }, 100 - i)
      end
    end
    for i, t in ipairs(E.FWD_PIPE) do
      if E.fwd_smem(P, t.tc, t.tt) <= E.SMEM_MAX and E.units(P, t.tc, t.tt + halo(P)) <= E.UNITS_MAX then
        add(plan_id(P, string.format("c%d:t%d:k%d", t.tc, t.tt, t.k)), { path = "tilep", tc = t.tc, tt = t.tt, k = t.k, minb = math.min(t.minb, blocks(P)) },
          E.RANK_PIPE + 1 - i)
      end
    end
  else
    local tc = fit_tc(P, E.fwd_smem, 64)
    if not tc then return nil, string.format("width %d leaves no channel tile room in shared memory", P.W) end
    add(plan_id(P, string.format("c%d:t64", tc)), { path = "tile", tc = tc, tt = 64 }, 100)
  end
  return plans
end

-- One line for the kernel's comment.
local function describe(P)
  local parts = { string.format("%s %s, W %d, x %s", P.node.name, P.dtype, P.W, P.layouts.x) }
  if P.silu then parts[#parts + 1] = "silu" end
  for _, o in ipairs { { "bias", "bias" }, { "seq", "seq_idx" }, { "init", "initial_states" }, { "fin", "final_states" },
                       { "dfin", "dfinal_states" }, { "dinit", "dinitial_states" } } do
    if P[o[1]] then parts[#parts + 1] = o[2] end
  end
  return table.concat(parts, ", ")
end

local function kernel(g, P, symbol, template, vars, setup_fn)
  local K = rowgen.kernel(g, symbol)
  K.src:need("common/bf16.cuh")
  K.src:need("common/fp16.cuh")
  K.src:need("conv1d_common.cuh")
  vars.setup = setup_fn(K)
  vars.symbol, vars.what = symbol, describe(P)
  vars.params = K:finish_params()
  K.src:add(render.fill(render.template(template), vars, template))
  return K
end

local function entry(K, plan, symbol, id, grid, block)
  return { symbol = symbol, engine = E.id, plan_id = id, options = E.OPTIONS, source = K.src:text(),
           block = { block, 1, 1 }, grid = grid, smem = 0, cluster = { 1, 1, 1 }, params = K.mparams, align = K.align }
end

function E.build(plan, group, g, target, symbol)
  local _, _ = group, target
  local P, kn = plan.P, plan.knobs
  local V, NT = vec(P), E.THREADS
  if kn.path == "dec" then
    local K = kernel(g, P, symbol, "conv1d_dec.cuh", { NT = NT, W = P.W, LS = P.L }, function(K)
      return code.setup(K, P, { { "x", P.x, P.layouts.x }, { "y", P.y, P.layouts.y, true } },
        { "w", "bias", "init", "fin", "seq" })
    end)
    local grid = { { mul = rowgen.with_const({ P.B, P.D }, 1), div = NT }, 1, 1 }
    return entry(K, plan, symbol, plan.id, grid, NT)
  end
  if kn.path == "decv" then
    local K = kernel(g, P, symbol, "conv1d_decv.cuh", { NT = NT, W = P.W, LS = P.L, V = V }, function(K)
      return code.setup(K, P, { { "x", P.x, P.layouts.x }, { "y", P.y, P.layouts.y, true } },
        { "w", "bias", "init", "fin", "seq" }) .. "\n" .. code.block(K, P, "init", P.init, P.H) .. "\n"
        .. code.block(K, P, "fin", P.fin, P.H, true) .. "\n" .. code.block(K, P, "y", P.y, P.L, true)
    end)
    local grid = { { mul = rowgen.with_const({ P.B, P.D }, 1), div = NT * V }, 1, 1 }
    return entry(K, plan, symbol, plan.id, grid, NT)
  end
  if kn.path == "tile" then
    local K = kernel(g, P, symbol, "conv1d_fwd.cuh", { NT = NT, TC = kn.tc, TT = kn.tt, W = P.W, HP = halo(P), V = V, MINB = blocks(P) },
      function(K)
        return code.setup(K, P, { { "x", P.x, P.layouts.x }, { "y", P.y, P.layouts.y, true } },
          { "w", "bias", "init", "fin", "seq" })
      end)
    local grid = { axis(P.L, kn.tt), axis(P.D, kn.tc), axis(P.B, 1, 65535) }
    return entry(K, plan, symbol, plan.id, grid, NT)
  end
  if kn.path == "tilep" then
    local K = kernel(g, P, symbol, "conv1d_fwdp.cuh",
      { NT = NT, TC = kn.tc, TT = kn.tt, W = P.W, HP = halo(P), V = V, K = kn.k, MINB = kn.minb }, function(K)
        return code.setup(K, P, { { "x", P.x, P.layouts.x }, { "y", P.y, P.layouts.y, true } },
          { "w", "bias", "init", "fin", "seq" })
      end)
    local grid = { axis(P.L, kn.tt * kn.k), axis(P.D, kn.tc), axis(P.B, 1, 65535) }
    return entry(K, plan, symbol, plan.id, grid, NT)
  end
  -- backward: the tile kernel (sums into the workspace) and the reduce kernel
  local vars = { NT = NT, TC = kn.tc, TT = kn.tt, W = P.W, HP = halo(P), V = V, NCH = kn.nch, MINB = kn.minb,
    PF = kn.pf and "true" or "false" }
  local main = kernel(g, P, symbol, "conv1d_bwd.cuh", vars, function(K)
    local s = code.setup(K, P, { { "x", P.x, P.layouts.x }, { "dy", P.dy, P.layouts.dout }, { "dx", P.dx, P.layouts.dx, true } },
      { "w", "bias", "init", "seq", "dfin", "dinit" })
    K:workspace(0)
    return s
  end)
  local red_symbol = symbol .. "_reduce"
  local red = kernel(g, P, red_symbol, "conv1d_reduce.cuh", { W = P.W, NCH = kn.nch }, function(K)
    local s = code.setup(K, P, {}, { "dw", "dbias" })
    K.params[#K.params + 1] = "const float *__restrict__ ws"
    K.mparams[#K.mparams + 1] = { kind = "workspace", offset = 0 }
    return s
  end)
  local k1 = entry(main, plan, symbol, plan.id, { kn.nch, axis(P.D, kn.tc), 1 }, NT)
  local k2 = entry(red, plan, red_symbol, plan.id .. ":reduce", { { mul = rowgen.with_const({ P.D }, P.W + 1), div = 256 }, 1, 1 }, 256)
  local bytes = kn.nch * (P.W + 1) * 4
  local ws = { rule = { mul = rowgen.with_const({ P.D }, bytes), div = 1 },
               bytes_max = math.type(P.D) == "integer" and P.D * bytes or nil }
  return { kernels = { k1, k2 }, workspace = ws }
end

return E
