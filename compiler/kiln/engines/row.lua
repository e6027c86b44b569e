-- kiln.engines.row: the row-wise memory-bound ops — rmsnorm / layernorm forward and
-- backward, softmax / log_softmax forward and backward, reductions over the trailing axes —
-- with the pointwise prologue and epilogue the lowering fused around them
-- (docs/MEMORY_BOUND.md has the design and the bytes each kernel moves).
--
-- A group of P threads owns a row of H (compile-time) elements; the row is loaded once with
-- 16-byte vectors and stays in registers between the statistics pass and the output pass
-- (strategy "regs"); rows too large for that are re-read, from L2 (strategy "reread").
-- Statistics accumulate in fp32 and reduce with warp shuffles plus one shared-memory round
-- in a fixed order, so every result is deterministic. The backward norms are persistent:
-- each CTA sums dscale/dbias over its rows in shared memory, writes one partial row to the
-- workspace, and a second kernel adds the partial rows in a fixed order.
local render = require "kiln.render"
local shape = require "kiln.shape"
local dtypes = require "kiln.dtypes"
local pw = require "kiln.engines.pwexpr"
local rowgen = require "kiln.engines.rowgen"
local rowptx = require "kiln.engines.rowptx"
local sms = require "kiln.engines.sms"
local rowbwd = require "kiln.engines.rowbwd"
local rowbwd_colsum = require "kiln.engines.rowbwd_colsum"
local rowfwd_ptx = require "kiln.engines.rowfwd_ptx"
local rowfwd_staged_ptx = require "kiln.engines.rowfwd_staged_ptx"
local rowsm_ptx = require "kiln.engines.rowsm_ptx"
local rowred_ptx = require "kiln.engines.rowred_ptx"
local rowbwd_smem_ptx = require "kiln.engines.rowbwd_smem_ptx"
local rowquant = require "kiln.engines.rowquant"
local lower = require "kiln.lower"
local settings = require "kiln.settings"
local ptx = require "kiln.ptx"

local E = { id = "row", version = 1 }

local KIND = {
  rmsnorm = "norm", layernorm = "norm", instancenorm = "norm", adalayernorm = "norm",
  rmsnorm_backward = "norm_bwd", layernorm_backward = "norm_bwd",
  softmax = "softmax", log_softmax = "softmax",
  softmax_backward = "softmax_bwd", log_softmax_backward = "softmax_bwd",
  reduction = "reduce",
  block_scale_quantize = "quant", block_scale_dequantize = "dequant",
}

-- The op whose kernel a norm runs: instance norm and adaptive layer norm are layer norms over
-- their own normalized axes whose scale and bias are read per channel or per sample.
local AS_OP = { instancenorm = "layernorm", adalayernorm = "layernorm" }

local LOG2E = "1.4426950408889634f"
local NEG_INF = "__int_as_float(0xff800000)"

-- Rows each slot of a persistent CTA takes at least (fewer, fatter CTAs for small T).
E.MIN_ROWS = 8
-- Dynamic shared memory a kernel may use on every target (sm_80 allows 163 KB per block).
E.SMEM_MAX = 160 * 1024
-- Threads per CTA of the backward norms (several rows per CTA).
E.BWD_BLOCK = 512
-- Rows wider than this that the staged backward does not take build the split backward
-- (rowbwd_colsum.lua) rather than the legacy kernel. On an H200 (graph timing, split against
-- legacy): 0.95x (layernorm) and 0.70x (rmsnorm) at 16384 x 16384, 1.11x and 1.15x at
-- 8192 x 20480.
E.LEGACY_MAX_H = 16384
-- Vectors per thread per pass (N): the row-held passes are fully unrolled, so N trades
-- loads in flight per thread against code size (NVRTC time); the backward's work per element
-- and fused pointwise ops get the smaller N (measured on the H200: no bandwidth lost).
E.MAX_N = 4
E.MAX_N_FUSED = 2
-- Full occupancy (2048 threads per SM: at most 32 registers) for the forward kernels that hold
-- little, softmax / log-softmax and RMSNorm without fused ops, at N = 2 vectors per thread:
-- on an H200 softmax 16384x8192 4.18 TB/s against 3.90 without it, rmsnorm 32768x2048 4.19
-- against 4.07; layernorm (the mean) spills at 32 registers.
E.FULL_OCCUPANCY_N = 2
-- Ops whose plain 16-bit rows re-read from L2 rather than hold a row in 1024 threads at one CTA
-- an SM (analyze): on the H200 layernorm 1.13-1.32x, log_softmax 1.27-1.46x, log_softmax_backward
-- 1.16x at H = 24576 / 32768; at 32 registers instead they spill. docs/MEMORY_BOUND.md, "Rows
-- held by 1024 threads", has every variant measured (fp32, fused, the softmax backward).
E.ONE_CTA_REREAD = { layernorm = true, log_softmax = true, log_softmax_backward = true }
E.FULL_OCCUPANCY_OPS = { softmax = true, log_softmax = true, rmsnorm = true }
-- ptxas's level for a forward norm's PTX body, nil for its default -O3. Rows held in registers
-- compile at -O1 for layernorm (one CTA's, no fused ops), whose stores -O1 leaves after each
-- vector's values instead of sinking all four to the kernel's end, and RMSNorm's wide rows (in
-- 1024 threads or over a cluster) with a fused prologue (a residual add) and nothing else fused.
-- On an H200 (graph replays, bf16, ptxas_opt=1 against the default): layernorm 1.02-1.06x
-- at 4096 rows of 1024-16384, 1.00-1.04x at 16384 rows; rmsnorm_residual 1.04-1.07x at
-- H = 24576, 32768 and 65536 (level at 2048-16384). Not plain
-- RMSNorm (0.94-1.03x), the re-read or staged layernorm (0.73-0.77x, 0.99x), fused rows that spill
-- (add_rmsnorm_silu_gate 0.86-0.95x at 4096-8192), softmax (0.98-1.03x) nor the backward norms.
-- The softmax backwards' rows held by one CTA compile at -O1 too (H = 2048-8192):
-- log_softmax_backward 1.02-1.05x at 4096 rows, 0.995-1.002x at 16384 and 32768; softmax_backward
-- 1.05x at 4096 x 2048, 1.000-1.004x elsewhere.
function E.ptxas_level(info, group)
  local op, L = info.op, info.L
  local pro, epi = #(group.prologue or {}), #(group.epilogue or {})
  if info.strategy ~= "regs" or #(group.amax or {}) + #(group.rowred or {}) > 0 then return nil end
  if (op == "layernorm" or info.kind == "softmax_bwd") and not L.CL and pro + epi == 0 then return 1 end
  if op == "rmsnorm" and (L.CL or L.block >= 1024) and pro > 0 and epi == 0 and
    not rowgen.fuses_any(group, E.CLUSTER_OCCUPANCY_DECLINES) then
    return 1
  end
  return nil
end
-- RMSNorm's wide row over a cluster runs at full occupancy too (8 CTAs of 256 threads an SM,
-- 32 registers: more row parts in flight while others wait at the cluster barrier), unless it
-- fuses these ops, whose code spills there (layernorm's, under a forced cluster setting, spills too).
-- On an H200 (graph timing, bf16, 1024-16384 rows of 65536, against ptxas's 44-45
-- registers): rmsnorm 1.14x (3.76-3.80 TB/s), rmsnorm_train 1.10x,
-- rmsnorm_residual 1.04-1.05x, its fp8 form 1.07x; add_rmsnorm_silu_gate 0.53x and the softmax
-- backwards 0.51-0.56x (spilling) keep theirs.
E.CLUSTER_OCCUPANCY_DECLINES = { exp = true, sigmoid = true, swish = true, gelu = true }
-- The most CTAs a wide row's cluster may take (8: the portable cluster size), and its CTAs'
-- shape: vectors a thread, most threads (on an H200 at 4096 and 16384 rows of 65536 bf16:
-- rmsnorm 8 CTAs of 256 threads 1.07x the re-read row, 4 of 1024 threads 1.00x,
-- 4 of 512 0.96x; softmax backward 4 of 512 and 8 of 256 both 1.33x)
E.MAX_CLUSTER = 8
-- The most a forced cluster (the cluster setting 16) may take: the H200's non-portable size.
E.MAX_FORCED_CLUSTER = 16
E.CLUSTER_N = 4
E.CLUSTER_BLOCK = 256

local REDUCE, COMBINE, subst = rowgen.REDUCE, rowgen.COMBINE, rowgen.subst

local function fail(fmt_, ...) return nil, string.format(fmt_, ...) end

-- The settings (kiln.settings), each list led by its default: the row code's (rowgen, rowptx),
-- the staged forms' (rowfwd_staged_ptx: stage; rowbwd: bwd), cluster (a row too wide for one
-- CTA split over a cluster: 0 re-reads it from L2, 2-16 the least cluster size to take), n
-- (vectors per thread of the forward kernels) and minb (a one-wave kernel's CTAs per SM held to
-- at least this many, which caps its registers at 65536 / (minb * block)).
E.settings = rowgen.settings(rowgen.SETTINGS, rowptx.SETTINGS, {
  stage = rowfwd_staged_ptx.SETTING, bwd = rowbwd.SETTING, cluster = { "1", "0", "2", "4", "8", "16" },
  n = { "auto", "1", "2", "4", "8", "16" }, minb = { "auto", "2", "4", "6", "8", "10", "12", "16" },
})

-- The trailing block of axes a norm normalizes, or nil: instancenorm's spatial axes (past the
-- channel), else those where scale's extent is not 1 (adalayernorm's past its sample axis).
local function norm_suffix(op, x, scale)
  local n, pad = #x.dims, #x.dims - #scale.dims
  if op == "instancenorm" then return n > 2 and n - 2 or nil end
  local first
  for i = op == "adalayernorm" and 2 or 1, n do
    local d = scale.dims[i - pad] or 1
    if d ~= 1 then first = first or i elseif first then return nil end
  end
  return first and (n - first + 1) or nil
end

-- The reduced axes of a reduction as a trailing block: their count, or nil and why.
local function reduce_suffix(x, y)
  local n = #x.dims
  local first, last_kept
  for i = 1, n do
    local reduced = y.dims[i] == 1 and x.dims[i] ~= 1
    if reduced then first = first or i
    elseif x.dims[i] ~= 1 then last_kept = i end
  end
  if not first then return nil, "reduces no axis" end
  if not last_kept then return nil, "reduces every axis (a full reduction, not one per row)" end
  if last_kept > first then return nil, "the reduced axes are not the trailing ones (a column reduction)" end
  return n - first + 1
end

-- Whether the wide-row cluster layout is taken for a forward kernel of `kind` (analyze): where
-- it measured faster than the row re-read from L2 (docs/MEMORY_BOUND.md, "Wide rows"): rmsnorm
-- without per-row reductions and the softmax backwards. Layernorm and softmax over a cluster
-- measure 0.89x and 0.93x the re-read row at 16384 x 65536 (H200); exchanging one
-- pair a CTA (its mean and squared deviations, its max and sum of exps) instead of meeting the
-- cluster twice measures slower still (0.95x the two meetings).
local function cluster_pays(op, kind, rowred)
  if kind == "norm" then return op == "rmsnorm" and #rowred == 0 end
  return kind == "softmax_bwd"
end

-- The cluster layout of a row of H (vectors of V) too wide for one CTA: from CL = `start` up,
-- E.CLUSTER_N vectors a thread (else `target`), the first cluster whose CTAs have at most
-- `most` threads (default E.CLUSTER_BLOCK; `forced`: the first that fits at all). `accept(Lc)`
-- says whether a layout fits (a value, or nil). Returns the layout and that value, or nil.
local function cluster_layout(H, V, target, start, forced, accept, most)
  local best, got
  local CL = start
  while CL <= (forced and E.MAX_FORCED_CLUSTER or E.MAX_CLUSTER) do
    for _, n in ipairs(H % (CL * V) == 0 and { math.max(target, E.CLUSTER_N), target } or {}) do
      local Lc = rowgen.layout(H // CL, V, n)
      if Lc.even and Lc.RPC == 1 and Lc.P > 32 then
        Lc.HC, Lc.H, Lc.CL = Lc.H, H, CL
        local v = accept(Lc)
        if v then best, got = Lc, v; break end
      end
    end
    if best and (best.CL == CL and best.P <= (most or E.CLUSTER_BLOCK) or forced) then break end
    CL = CL * 2
  end
  return best, got
end

-- The kind of kernel the group's anchor runs (KIND), or nil and why.
local function anchor_kind(group)
  local a = group.anchor
  local kind = a and KIND[a.op]
  if not kind and a and a.def.family == "norm" then
    return fail("%s has no kernel yet (the row engine takes rmsnorm, layernorm, instancenorm, adalayernorm and the rmsnorm and layernorm backwards)", a.op)
  end
  if not kind then
    return fail("group is a %s op (%s), not a norm, softmax, row reduction or block quantize", group.family, (group.anchor or group.nodes[1]).op)
  end
  return kind
end

-- Whether the kernel takes the ops fused around the anchor (block quantizes, the prologue, the
-- epilogue, the per-row reductions and ops): true, or nil and why. Counts them (ctx.nfused).
local function fused_ops_fit(ctx)
  local info, kind, g = ctx.info, ctx.kind, ctx.g
  for _, q in ipairs(ctx.quant) do
    local why = rowquant.declines(q, g)
    if why then return nil, why end
  end
  ctx.nfused = #ctx.prologue + #ctx.epilogue + #ctx.amax + #ctx.rowred + (kind == "quant" and 0 or #ctx.quant)
  local ok, why = pw.supported(ctx.prologue, g)
  if ok then ok, why = pw.supported(ctx.epilogue, g) end
  if ok then ok, why = pw.supported(ctx.rowpw, g) end
  if not ok then return nil, why end
  if #ctx.rowred > 0 and kind ~= "norm" then return fail("per-row reductions in the epilogue are built for the forward norms only") end
  -- element ops after a row reduction (lower's reduction epilogue): the row held or re-read
  info.maps = kind == "reduce" and #ctx.epilogue + #ctx.rowpw + #ctx.amax > 0 or nil
  for _, r in ipairs(ctx.rowred) do
    if not REDUCE[r.attrs.mode] then return fail("reduction mode %s is not supported", r.attrs.mode) end
  end
  return true
end

-- How many trailing axes of the anchor's input x make its row, or nil and why.
local function row_axes(ctx, x)
  local a, kind, g = ctx.a, ctx.kind, ctx.g
  if kind == "norm" or kind == "norm_bwd" then
    local nsuffix = norm_suffix(a.op, x, g.by_uid[a.inputs.scale])
    if not nsuffix then return fail("the normalized axes of %s are not its trailing axes", shape.format(x.dims)) end
    return nsuffix
  elseif kind == "quant" or kind == "dequant" then
    if kind == "dequant" then
      local why = rowquant.dequant_declines(a, g)
      if why then return nil, why end
    end
    return 1
  elseif kind == "reduce" then
    local y = g.by_uid[a.outputs.Y]
    local nsuffix, why = reduce_suffix(x, y)
    if not nsuffix then return nil, why end
    -- (sibling reductions lower merged: E.fuses made sure they fit)
    for _, r in ipairs(ctx.group.reductions or { a }) do
      if not REDUCE[r.attrs.mode] then return fail("reduction mode %s is not supported", r.attrs.mode) end
    end
    return nsuffix
  end
  local axis = a.attrs.axis or -1
  if axis < 0 then axis = axis + #x.dims end
  if axis ~= #x.dims - 1 then return fail("%s over axis %d, not the last axis", a.op, axis) end
  return 1
end

-- The row (info.E, nsuffix, H: compile-time), the rows (rows, row_factors) and the shape of a
-- per-row value (stats_dims), the anchor's inputs all of one shape: true, or nil and why.
local function row_shape(ctx)
  local info, a, g, spec = ctx.info, ctx.a, ctx.g, ctx.spec
  local x = g.by_uid[a.inputs[spec.ins[1]]]
  local Edims = x.dims
  local nsuffix, why = row_axes(ctx, x)
  if not nsuffix then return nil, why end
  local H = rowgen.suffix(Edims, nsuffix)
  if not H then return fail("the row length of %s is not compile-time (specialize it)", shape.format(Edims)) end
  for _, p in ipairs(spec.ins) do
    local t = g.by_uid[a.inputs[p]]
    if not pw.dims_equal(t.dims, Edims) then return fail("%s %s and %s differ in shape", p, shape.format(t.dims), shape.format(Edims)) end
  end
  info.E, info.nsuffix, info.H = Edims, nsuffix, H
  info.rows, info.row_factors = rowgen.rows(Edims, nsuffix)
  info.stats_dims = {}
  for i, d in ipairs(Edims) do info.stats_dims[i] = i > #Edims - nsuffix and 1 or d end
  return true
end

-- per-row reductions: one value per row; the per-row ops read only per-row values
local function per_row_ops_fit(ctx)
  local info, a, g = ctx.info, ctx.a, ctx.g
  local per_row_made = {}
  if ctx.kind == "reduce" then for _, r in ipairs(ctx.group.reductions or { a }) do per_row_made[r.outputs.Y] = true end end
  for _, r in ipairs(ctx.rowred) do
    local y = g.by_uid[r.outputs.Y]
    if not pw.dims_equal(y.dims, info.stats_dims) then
      return fail("reduction '%s' %s is not one value per row %s", y.name, shape.format(y.dims), shape.format(info.stats_dims))
    end
    per_row_made[r.outputs.Y] = true
  end
  for _, n in ipairs(ctx.rowpw) do
    for _, p in ipairs(n.def.input_ports) do
      local uid = n.inputs[p.name]
      local t = uid and g.by_uid[uid]
      if t and not per_row_made[uid] and t.role ~= "constant" and t.role ~= "scalar"
        and not pw.dims_equal(t.dims, info.stats_dims) then
        return fail("per-row op %s reads '%s' %s, not one value per row", n.op, t.name, shape.format(t.dims))
      end
    end
    for _, uid in pairs(n.outputs) do per_row_made[uid] = true end
  end
  return true
end

-- every memory source: how it is read (info.access); those read as vectors join ctx.vec_tensors
local function classify_inputs(ctx)
  local info, a, g = ctx.info, ctx.a, ctx.g
  info.access = {}
  ctx.vec_tensors = {}
  for _, uid in ipairs(ctx.group.inputs) do
    local t = g.by_uid[uid]
    if ctx.kind == "dequant" and uid == a.inputs.descale then
      info.access[uid] = "qscale"   -- one value a block, read once a vector (rowquant.descale_line)
    elseif t.role ~= "constant" and t.role ~= "scalar" then
      local bad = rowgen.source_declines(t, info.E)
      if bad then return nil, bad end
      local how = rowgen.classify(t, info.E, info.nsuffix)
      info.access[uid] = how
      if how == "full" or how == "col" or (how == "gather" and rowgen.col_block(t, info)) then
        ctx.vec_tensors[#ctx.vec_tensors + 1] = t
      end
    end
  end
  return true
end

-- A norm's scale and bias read as one contiguous row, a sink logit and a backward's statistics
-- as one value per row: true, or nil and why.
local function anchor_params_fit(ctx)
  local info, a, g, kind = ctx.info, ctx.a, ctx.g, ctx.kind
  if (kind == "norm" or kind == "norm_bwd") and not AS_OP[a.op] then
    for _, p in ipairs({ "scale", "bias" }) do
      local uid = a.inputs[p]
      if uid and info.access[uid] ~= "col" then
        return fail("%s '%s' %s is not one contiguous row of %s", p, g.by_uid[uid].name, shape.format(g.by_uid[uid].dims), shape.format(info.E))
      end
    end
  end
  for _, p in ipairs({ "SINK", "mean", "inv_variance" }) do
    local uid = a.inputs[p]
    if uid and info.access[uid] ~= "row" then return fail("%s must hold one value per row", p) end
  end
  return true
end

-- outputs: per element (E dims, row-major), per row (statistics), per column (dscale)
local function classify_outputs(ctx)
  local info, a, g, kind = ctx.info, ctx.a, ctx.g, ctx.kind
  info.out_kind = {}
  info.colsum = {}
  for _, uid in ipairs(ctx.group.outputs) do
    local t = g.by_uid[uid]
    local kind_of
    for _, q in ipairs(ctx.quant) do if q.outputs.scale == uid then kind_of = "qscale" end end
    if not pw.STORAGE[t.dtype] and kind_of ~= "qscale" then return fail("dtype %s of output '%s' is not supported", t.dtype, t.name) end
    for _, r in ipairs(ctx.amax) do if r.outputs.Y == uid then kind_of = "amax" end end
    if kind == "norm_bwd" and (uid == a.outputs.DSCALE or uid == a.outputs.DBIAS) then
      if not shape.is_row_major(t.dims, t.strides) then return fail("output '%s' is not row-major", t.name) end
      kind_of = "colsum"
      info.colsum[#info.colsum + 1] = uid
    end
    if not kind_of then
      if pw.dims_equal(t.dims, info.E) and shape.is_row_major(t.dims, t.strides) then
        kind_of = "elem"
        ctx.vec_tensors[#ctx.vec_tensors + 1] = t
      elseif pw.dims_equal(t.dims, info.stats_dims) then
        kind_of = "row"
      else
        return fail("output '%s' %s is neither per element nor per row", t.name, shape.format(t.dims))
      end
    end
    info.out_kind[uid] = kind_of
  end
  return true
end

-- bytes each thread keeps per vector (of V elements) between passes; the tensors held (info.held)
local function held_bytes(ctx, V)
  local info, a, g = ctx.info, ctx.a, ctx.g
  local hold, held = 0, {}
  if ctx.kind ~= "reduce" then
    for _, p in ipairs(ctx.spec.ins) do
      local uid = a.inputs[p]
      if not held[uid] then
        held[uid] = true
        hold = hold + V * dtypes.size(g.by_uid[uid].dtype)
      end
    end
    if info.op == "softmax" then hold = hold + 4 * V end
  elseif info.maps then
    -- the memory rows the prologue and the reductions read: the epilogue's pass computes the
    -- prologue again from them
    local ein = {}
    for _, r in ipairs(ctx.group.reductions or { a }) do ein[#ein + 1] = r.inputs.input end
    for _, uid in ipairs(rowgen.sources(ctx.prologue, ein, rowgen.made(ctx.group), {})) do
      if info.access[uid] == "full" then
        held[uid] = true
        hold = hold + V * dtypes.size(g.by_uid[uid].dtype)
      end
    end
  end
  info.held = held
  return hold
end

-- The vectors per thread (N) a layout aims at, for `hold` bytes held per vector.
local function target_n(ctx, hold)
  local kind = ctx.kind
  local max_n = E.MAX_N
  if kind == "norm_bwd" or ctx.nfused > 0 then max_n = E.MAX_N_FUSED end
  local target = hold > 0 and math.max(1, math.min(max_n, 128 // hold)) or max_n
  -- a block's vectors in one k of the thread group (rowquant.fits): N at most the blocks a row
  for _, q in ipairs(ctx.quant) do target = math.max(1, math.min(target, ctx.info.H // rowquant.block(q))) end
  if ctx.lean then target = math.min(target, E.FULL_OCCUPANCY_N) end
  local want_n = tonumber(settings.get("n"))
  if want_n and kind ~= "norm_bwd" then target = want_n end
  return target
end

-- The row's layout in one CTA (ctx.L; its vector V, bytes held hold, N aimed at target) and
-- how the row is read (info.strategy: one pass, held in registers or re-read).
local function row_layout(ctx)
  local info, kind, H = ctx.info, ctx.kind, ctx.info.H
  local V = rowquant.vector(rowgen.vector_width(H, ctx.vec_tensors), kind == "dequant" and { ctx.a } or ctx.quant)
  local hold = held_bytes(ctx, V)
  ctx.lean = E.FULL_OCCUPANCY_OPS[info.op] and ctx.nfused == 0
  local target = target_n(ctx, hold)
  local L = rowgen.layout(H, V, target)
  if kind == "norm_bwd" and L.block < E.BWD_BLOCK then
    -- a few large CTAs: fewer partial rows for the second kernel to add
    L.RPC = math.max(1, E.BWD_BLOCK // L.P)
    L.block = L.P * L.RPC
  end
  -- what a thread may hold: its share of the register file less 40 registers for addresses
  -- and temporaries (a 1024-thread CTA has 64 registers per thread: 96 bytes)
  local hold_max = math.min(160, ((65536 // L.block) - 40) * 4)
  info.strategy = (kind == "reduce" and not info.maps or kind == "quant" or kind == "dequant") and "stream"
    or (L.N * hold <= hold_max and "regs" or "reread")
  ctx.L, ctx.V, ctx.hold, ctx.target = L, V, hold, target
end

-- A 16-bit row held by 1024 threads over 32 registers a thread runs one CTA an SM, which
-- loads, reduces and stores one row at a time (H = 24576, 32768: 62-75% of copy). Plain
-- bf16 RMSNorm is held to 32 registers instead, two CTAs an SM (fp16's conversions spill
-- 88-196 bytes there); layernorm and the log-softmaxes re-read the row (E.ONE_CTA_REREAD);
-- the softmax backward keeps its held row. fp32 rows keep theirs (each thread has twice the
-- bytes in flight: measured faster held).
local function one_cta_rows(ctx)
  local info, L, g = ctx.info, ctx.L, ctx.g
  local narrow, bf16 = true, true
  for uid in pairs(info.held) do
    narrow = narrow and dtypes.size(g.by_uid[uid].dtype) == 2
    bf16 = bf16 and g.by_uid[uid].dtype == "bf16"
  end
  if info.strategy == "regs" and L.block >= 1024 and narrow and ctx.nfused == 0
     and not (ctx.lean and L.N <= E.FULL_OCCUPANCY_N) then
    if info.op == "rmsnorm" and bf16 then info.full_occupancy = 2048 // L.block
    elseif E.ONE_CTA_REREAD[info.op] then info.strategy = "reread" end
  end
end

-- a row too wide to hold: 2, 4 or 8 CTAs of a cluster each hold an equal part in registers
-- and meet in distributed shared memory for the reduction, so the row is read once, not
-- again from L2. Taken where the kernel reduces the row once (rmsnorm, the softmax backward):
-- each reduction costs a cluster barrier, and with two (layernorm, softmax) the re-read row
-- measured faster (docs/MEMORY_BOUND.md, "Wide rows"). Its CTAs hold 4 vectors a thread in
-- at most 256 threads where 8 CTAs allow it; `cluster` a number: that size at least, for any
-- kind (for measuring).
local function take_cluster(ctx)
  local info, cluster, forced = ctx.info, ctx.cluster, ctx.forced
  if info.strategy == "reread" and cluster and #ctx.quant == 0 and (forced or cluster_pays(info.op, ctx.kind, ctx.rowred)) then
    local Lc = cluster_layout(info.H, ctx.V, ctx.target, forced and cluster or 2, forced, function(Lc)
      return Lc.N * ctx.hold <= math.min(160, ((65536 // Lc.block) - 40) * 4)
    end)
    if Lc then ctx.L, info.strategy = Lc, "regs" end
  end
end

-- layernorm's, softmax's and log_softmax's wide row staged over a cluster (rowfwd_staged_ptx.lua):
-- persistent clusters whose CTAs copy their part of the next rows into a cp.async ring while
-- this row's reduction waits on the cluster, instead of the row re-read from L2; in the
-- shapes rowfwd_staged_ptx.DEFAULT gives each op and dtype (measured there).
local function take_staged_fwd(ctx)
  local info, group, g, a, kind = ctx.info, ctx.group, ctx.g, ctx.a, ctx.kind
  local stage_mode = (kind == "norm" or kind == "softmax")
    and rowfwd_staged_ptx.mode(info.op, g.by_uid[a.inputs.input or a.inputs.P].dtype)
  if info.strategy == "reread" and ctx.cluster and not ctx.forced and stage_mode and not stage_mode.off and #ctx.quant == 0
     and (not stage_mode.widths or stage_mode.widths[info.H]) then
    local Lc, st = cluster_layout(info.H, ctx.V, ctx.target, 2, false, function(Lc)
      return rowfwd_staged_ptx.accepts(info, group, g, Lc) and rowfwd_staged_ptx.plan(info, g, Lc, E.SMEM_MAX) or nil
    end, stage_mode.block)
    -- a default shape is taken as measured: a cluster at least min_cl CTAs of at most `block` threads
    local shaped = stage_mode.set or ((Lc and Lc.CL >= (stage_mode.min_cl or 2)) and Lc.P <= (stage_mode.block or Lc.P))
    if Lc and shaped then
      ctx.L, info.fstaged, info.strategy = Lc, st, "staged-fwd"
      info.smem, info.per_sm, info.cap, info.grid_div = st.smem, st.per_sm, st.cap, st.grid_div
    end
  end
end

-- The staged backward's plan (rowbwd.lua), over a cluster for a row too wide for it (taking
-- that layout: ctx.L); false or nil where none.
local function staged_bwd(ctx)
  local info, group, g, kind, cluster, forced = ctx.info, ctx.group, ctx.g, ctx.kind, ctx.cluster, ctx.forced
  local staged = kind == "norm_bwd" and rowbwd.plan(info, group, g, ctx.L, E.SMEM_MAX, E.MIN_ROWS)
  -- a backward row too wide for the staged kernel: the staged kernel over a cluster, each CTA
  -- staging and holding the column sums of its part of the row (rowbwd_ptx.lua). Taken past
  -- the legacy kernel's reach, 2 CTAs per SM (`twocta`: one waits out the row's cluster barrier
  -- while the other computes): rmsnorm_backward 1.40x the split backward at 4096 x 65536,
  -- layernorm_backward 1.11-1.26x at 65536 (its 64 column sums a thread fit 128 registers);
  -- rows the legacy kernel takes (0.69-0.81x at H = 16384) keep theirs. The cluster setting 2|4|8|16
  -- takes it for any backward, in the bwd setting's variant (docs/MEMORY_BOUND.md, "Wide rows").
  local bwd_mode = forced and rowbwd.mode() or rowbwd.named_mode("twocta")
  local bwd_cluster = forced or (cluster and info.H > E.LEGACY_MAX_H and rowbwd.mode().default)
  -- Its CTAs as the forward's: E.CLUSTER_N vectors a thread in at most E.CLUSTER_BLOCK threads
  -- where a cluster of 8 allows it (4096 x 65536: 8 CTAs of 256 threads 1.40x the split
  -- backward, 4 of 512 1.31x, 8 of 512 with 2 vectors 0.86x).
  if kind == "norm_bwd" and not (staged and staged.ptx) and bwd_cluster then
    -- a cluster a row, at most SMs * CTAs per SM of them (several waves; a partial row per
    -- cluster). One wave of clusters (8 GPCs of 16 SMs: 128 * CTAs per SM / CL) measured 0.83x
    -- that at 4096 x 65536.
    local Lc, st = cluster_layout(info.H, ctx.V, ctx.target, forced and cluster or 2, forced, function(Lc)
      local st = rowbwd.plan(info, group, g, Lc, E.SMEM_MAX, E.MIN_ROWS, bwd_mode)
      return st and st.ptx and st or nil
    end)
    if Lc then ctx.L, staged = Lc, st end
  end
  return staged
end

-- dy and x staged through shared memory by cp.async, column sums in registers (rowbwd.lua)
local function take_staged_bwd(ctx, staged)
  local info = ctx.info
  info.staged, info.strategy = staged, "staged-" .. staged.name
  info.smem, info.per_sm, info.cap, info.grid_div = staged.smem, staged.per_sm, staged.cap, staged.grid_div
  -- over a cluster: a cluster a row (the grid T * CL then stays a multiple of CL)
  if (ctx.L.CL or 1) > 1 then info.grid_div = 1 end
end

-- The backward of the generic passes (build_passes): dscale/dbias sums per slot in shared memory,
-- then a partial row per CTA; its shared memory and CTAs per SM. True, or nil and why.
local function take_generic_bwd(ctx)
  local info, L, H = ctx.info, ctx.L, ctx.info.H
  local smem = #info.colsum * L.RPC * H * 4
  if #info.colsum > 0 and (smem > E.SMEM_MAX or H > E.LEGACY_MAX_H or rowbwd.mode().split) then
    -- a wide row: the split backward (this kernel the row sums; dx and the column sums in
    -- kernels of their own), or the legacy kernel where the split form declines and it fits
    local ok, why = rowbwd_colsum.accepts(info, ctx.g)
    if ok then info.split, smem = true, 0
    elseif smem > E.SMEM_MAX then
      return fail("the column sums of a %d-wide row need %d KB of shared memory (at most %d KB), and %s", H,
        smem // 1024, E.SMEM_MAX // 1024, why)
    end
  end
  smem = rowgen.dynamic_smem(smem)
  info.smem = smem
  -- CTAs per SM: the grid is sized for them and __launch_bounds__ holds the compiler to it
  local per_sm = math.min(2048 // L.block, 65536 // (L.block * 64))
  if smem > 0 then per_sm = math.min(per_sm, (227 * 1024) // smem) end
  info.per_sm = math.max(1, per_sm)
  info.cap = sms.cap(info.per_sm)
  info.grid_div = L.RPC * E.MIN_ROWS
  return true
end

-- The CTAs an SM whose share of the registers the kernel is held to (info.full_occupancy): the
-- lean kernels, RMSNorm over a cluster, or the minb setting's.
local function full_occupancy(ctx)
  local info, L = ctx.info, ctx.L
  if ctx.lean and info.strategy == "regs" and L.N <= E.FULL_OCCUPANCY_N then info.full_occupancy = 2048 // L.block end
  if info.op == "rmsnorm" and L.CL and info.strategy == "regs" and not rowgen.fuses_any(ctx.group, E.CLUSTER_OCCUPANCY_DECLINES) then
    info.full_occupancy = 2048 // L.block
  end
  -- (the minb setting)
  local minb = settings.get("minb")
  if minb ~= "auto" and not info.per_sm then info.full_occupancy = tonumber(minb) end
end

-- The plan's id: the op (and its sibling reductions), the layout, the strategy and its variants.
local function plan_id(info, group)
  local a, L, quant = info.anchor, info.L, info.quant
  local nred = group.reductions and #group.reductions or 1
  return string.format("row:v%d:%s:p%dn%dv%dr%d:%s%s%s%s%s", E.version, nred > 1 and (a.op .. "x" .. nred) or a.op,
    L.P, L.N, L.V, L.RPC, info.strategy,
    info.split and "+colsum" or "", info.full_occupancy and ":occ" or "", L.CL and (":cluster" .. L.CL) or "",
    info.kind == "norm" and #quant > 0 and (":bq" .. rowquant.block(quant[1])) or "")
end

-- Everything propose learns about a group, reused by build. `cluster`: a row too wide for
-- one CTA's registers may be split over a cluster of CTAs (sm_90+, the PTX forms).
local function analyze(group, g, cluster)
  local kind, why = anchor_kind(group)
  if not kind then return nil, why end
  local a = group.anchor
  local info = { kind = kind, anchor = a, op = AS_OP[a.op] or a.op }
  -- block quantizes along the row: a forward norm's epilogue (lower's quant), or the anchor
  info.quant = kind == "quant" and { a } or group.quant or {}
  -- what the steps below share; what build reads goes in info
  local ctx = {
    group = group, g = g, a = a, kind = kind, info = info, spec = lower.ANCHORS[a.op], quant = info.quant,
    prologue = group.prologue or {}, epilogue = group.epilogue or {}, amax = group.amax or {},
    rowred = group.rowred or {}, rowpw = group.rowpw or {}, cluster = cluster, forced = type(cluster) == "number",
  }
  -- the checks in order, each filling in its part of info
  for _, fits in ipairs({ fused_ops_fit, row_shape, per_row_ops_fit, classify_inputs, anchor_params_fit, classify_outputs }) do
    local ok, why_not = fits(ctx)
    if not ok then return nil, why_not end
  end
  row_layout(ctx)
  one_cta_rows(ctx)
  take_cluster(ctx)
  take_staged_fwd(ctx)
  local staged = staged_bwd(ctx)
  if staged then
    take_staged_bwd(ctx, staged)
  elseif kind == "norm_bwd" then
    local ok, why_not = take_generic_bwd(ctx)
    if not ok then return nil, why_not end
  end
  full_occupancy(ctx)
  local unfit = kind ~= "dequant" and rowquant.fits(ctx.L, info.quant)
  if unfit then return nil, unfit end
  info.L = ctx.L
  info.id = plan_id(info, group)
  return info
end

-- Whether reduction b joins the kernel of the reductions `list` (lower's sibling merge): the
-- same rows reduced to the same per-row shape (one accumulator each, one meeting).
function E.fuses(list, b, g)
  local x, y = rowgen.siblings_alike(list, b, g)
  local nsuffix = x and reduce_suffix(x, y)
  -- (a row length this engine builds: compile-time)
  return nsuffix ~= nil and rowgen.suffix(x.dims, nsuffix) ~= nil
end

-- Whether the kernel of the reductions `list` takes element ops after them (lower's reduction
-- epilogue): rows this engine reduces, their length compile-time.
function E.maps(list, g)
  local a = list[1]
  local x, y = g.by_uid[a.inputs.input], g.by_uid[a.outputs.Y]
  local nsuffix = REDUCE[a.attrs.mode] and reduce_suffix(x, y)
  return nsuffix ~= nil and rowgen.suffix(x.dims, nsuffix) ~= nil
end

-- Whether forward norm `norm`'s kernel takes block quantize q of its epilogue (lower's quantize
-- epilogue): along the row, compile-time (rowquant.fuses); analyze checks the layout.
function E.quantizes(norm, q, g)
  return KIND[norm.op] == "norm" and rowquant.fuses(norm, q, g)
end

-- The norms whose rows are read without their input's extent-1 axes (rowgen.unit_axes_dropped):
-- one view per group and graph, the same for propose and build.
local SQUEEZED = { rmsnorm = true, layernorm = true, rmsnorm_backward = true, layernorm_backward = true }
local function row_view(group, g)
  local a = group.anchor
  if not (a and SQUEEZED[a.op]) then return g end
  if group.row_view_of ~= g then
    local x = g.by_uid[a.inputs[lower.ANCHORS[a.op].ins[1]]]
    group.row_view, group.row_view_of = rowgen.unit_axes_dropped(g, x), g
  end
  return group.row_view
end

function E.propose(group, g, target)
  g = row_view(group, g)
  if target.sm < 80 then return nil, "needs sm_80 or later (max.NaN, redux.sync)" end
  local ptx_wanted = rowgen.ptx_wanted()
  local function forms(cluster)
    local info, why = analyze(group, g, cluster)
    if not info then return nil, why end
    -- the forward norm's body in PTX (rowfwd_ptx.lua) unless the code setting is cuda or that form declines
    if info.kind == "norm" and ptx_wanted then
      if #info.quant > 0 then info.why_cuda = "a block quantize in the epilogue (rowquant.lua: CUDA form only)"
      else info.fwd_ptx, info.why_cuda = rowfwd_ptx.accepts(info, group, g, target) end
    end
    if (info.kind == "quant" or info.kind == "dequant") and ptx_wanted then info.why_cuda = "block quantize (rowquant.lua: CUDA form only)" end
    -- softmax's likewise (rowsm_ptx.lua)
    if (info.kind == "softmax" or info.kind == "softmax_bwd") and ptx_wanted then
      info.sm_ptx, info.why_cuda = rowsm_ptx.accepts(info, group, g, target)
    end
    -- a row reduction's likewise (rowred_ptx.lua)
    if info.kind == "reduce" and ptx_wanted then info.red_ptx, info.why_cuda = rowred_ptx.accepts(info, group, g, target) end
    return info
  end
  local info, why = forms(math.min(target.sm, target.pack_sm or target.sm) >= 90 and ptx_wanted and rowgen.cluster_setting())
  -- a cluster layout only the PTX forms build: else the row re-read
  if info and info.L.CL and not (info.fwd_ptx or info.sm_ptx or info.staged or info.fstaged) then info, why = forms(false) end
  if not info then return nil, why end
  -- and the persistent backward's where the staged kernel does not take it (rowbwd_smem_ptx.lua)
  if info.kind == "norm_bwd" and not info.staged and rowgen.ptx_wanted() then
    info.bwd_ptx, info.why_cuda = rowbwd_smem_ptx.accepts(info, group, g)
  end
  return { { id = info.id, knobs = { P = info.L.P, N = info.L.N, V = info.L.V, RPC = info.L.RPC, strategy = info.strategy },
             rank = 1, info = info } }
end

-- ---------------------------------------------------------------------------------------
-- build

-- The column sums' second kernel (the fixed-order sum of the CTAs' partial rows) and the
-- workspace rule for those rows, shared by both backward kernels.
-- G: the partial rows' kernel grid (div, cap: per SM; default the row kernel's).
local function colsum_finalize(plan, g, symbol, target, G)
  local info = plan.info
  local H, ncols = info.L.H, #info.colsum * info.L.H
  G = G or { div = info.grid_div, cap = info.cap }
  local outs = {}
  for i, uid in ipairs(info.colsum) do outs[i] = { uid = uid, first = (i - 1) * H, count = H } end
  local final = rowgen.finalize(g, symbol .. "_final", plan.id .. ":final", E.id, {
    C = ncols, outs = outs, rows = info.rows, row_factors = info.row_factors, dims = info.E,
    G = G, comb = "add", init = "0.0f", target = target,
  })
  return final, rowgen.partials_workspace(info.row_factors, G.cap, ncols)
end

-- The kernels after a persistent backward and the workspace: the finalize of its partial
-- rows, or the split backward's dx kernel (rowbwd_colsum.lua) and the finalize of its
-- partial rows (the workspace: those rows, then the row sums).
local function bwd_after(plan, g, symbol, target)
  local info = plan.info
  if info.split then
    local gr = rowbwd_colsum.grid(info)
    return { rowbwd_colsum.build(info, g, symbol .. "_dx", plan.id .. ":dx", E.id),
             (colsum_finalize(plan, g, symbol, target, { div = gr.div, cap = gr.cap })) }, rowbwd_colsum.workspace(info)
  end
  if #info.colsum == 0 then return {}, nil end
  local final, workspace = colsum_finalize(plan, g, symbol, target)
  return { final }, workspace
end

-- A staged kernel's own kernel (persistent CTAs, or clusters, `what` in its comment).
local function staged_kernel(plan, symbol, K, what)
  local info, L = plan.info, plan.info.L
  local params = K:finish_params()
  local CL = L.CL or 1
  if CL > 1 then
    what = what .. string.format(", a cluster of %d CTAs per row (%d columns each)", CL, L.HC)
  end
  K.src:add(render.fill(render.template("row.cuh"), {
    what = what, block = L.block, symbol = symbol, params = params, min_blocks = string.format(", %d", info.per_sm),
    shared = table.concat(K.shared, "\n"), body = table.concat(K.lines, "\n"),
  }, "row.cuh"))
  -- a cluster grid: CL CTAs for each of min(T, cap) clusters (info.cap counts clusters)
  local grid = sms.rule(CL > 1 and rowgen.with_const(info.row_factors, CL) or info.row_factors, info.grid_div,
                        sms.cap(info.cap.sm_mul * CL, info.cap.sm_div))
  return rowgen.with_source({
    symbol = symbol, engine = E.id, plan_id = plan.id, options = rowgen.options(),
    block = { L.block, 1, 1 }, grid = { grid, 1, 1 },
    smem = info.smem, cluster = { CL, 1, 1 }, params = K.mparams, align = K.align, pdl_entry = true,
  }, K, K.src:text(), info.per_sm)
end

-- The staged backward (rowbwd.lua): the kernel, its finalize kernel and the workspace.
local function build_staged(plan, group, g, symbol, K)
  local info, L = plan.info, plan.info.L
  rowbwd.emit(K, info, g, info.staged)
  local ncols = #info.colsum * L.H
  local what = string.format("%s; %d thread%s per row of %d, %d row%s per CTA (persistent), %d vector%s of %d per thread, " ..
    "dy and x staged by cp.async in %d stages, column sums in registers%s", info.anchor.op, L.P, L.P == 1 and "" or "s", L.H,
    L.RPC, L.RPC == 1 and "" or "s", L.N, L.N == 1 and "" or "s", L.V, info.staged.S, info.staged.ptx and ", body in PTX" or "")
  local kernels = { staged_kernel(plan, symbol, K, what) }
  if ncols == 0 then return { kernels = kernels } end
  local workspace
  kernels[2], workspace = colsum_finalize(plan, g, symbol, K.target)
  return { kernels = kernels, workspace = workspace }
end

-- A forward's wide row staged over a cluster (rowfwd_staged_ptx.lua): one kernel.
local function build_fwd_staged(plan, group, g, symbol, K)
  local info, L = plan.info, plan.info.L
  rowfwd_staged_ptx.emit(K, info, group, g, info.fstaged)
  return staged_kernel(plan, symbol, K, string.format("%s; %d threads per row part of %d (persistent clusters), " ..
    "%d vectors of %d per thread, x staged by cp.async in %d stages, body in PTX", info.anchor.op, L.P, L.H, L.N, L.V, info.fstaged.S))
end

-- The kernel zeroing a plan's amax outputs (`amax`: the group's amax nodes), launched first.
local function amax_init(plan, g, symbol, amax, target)
  local init = rowgen.kernel(g, symbol .. "_init")
  local stores = {}
  for _, r in ipairs(amax) do stores[#stores + 1] = string.format("%s[0] = 0.0f;", init:ptr(r.outputs.Y, true)) end
  init:add("    %s", table.concat(stores, " "))
  init.src:need("common/pdl.cuh")
  init.src:add(render.fill(render.template("amax_init.cuh"), { symbol = symbol .. "_init", params = init:finish_params(),
    body = table.concat(init.lines, "\n") }, "amax_init.cuh"))
  -- the same in PTX, for its PTX module: thread 0 stores the zeros
  local cuda = init.src:text()
  init.lines, init.target = {}, target
  local P = ptx.new()
  local zero = P:def("pred", "setp.eq.u32 %s, %s, 0;", P:def("b32", "mov.u32 %s, %%tid.x;"))
  for _, r in ipairs(amax) do
    P:put("@%s st.global.f32 [%s], 0f00000000;", zero, P:global(P:input("l", init:ptr(r.outputs.Y, true))))
  end
  init:add("  kiln_pdl_entry();")
  init:asm(P)
  return rowgen.with_source({
    symbol = symbol .. "_init", engine = E.id, plan_id = plan.id .. ":init", options = rowgen.options(),
    block = { 32, 1, 1 }, grid = { 1, 1, 1 }, smem = 0, cluster = { 1, 1, 1 }, params = init.mparams, align = init.align,
    pdl_entry = true,
  }, init, cuda, nil, true)
end

-- The plan's kernels: those before (`kernels`: an amax init), the row kernel K, then those after
-- it (kernels.after: the column sums' finalize, with the split sums' own kernel before it).
-- o: strategy (words), persistent, pdl, entry.
local function assemble(plan, symbol, K, kernels, workspace, o)
  local info, src = plan.info, K.src
  local a, L, H = info.anchor, info.L, info.L.H
  local params = K:finish_params()
  local CL = L.CL or 1
  local what = string.format("%s; %d thread%s per row of %d, %d row%s per CTA%s, %d vector%s of %d per thread, %s", a.op,
    L.P, L.P == 1 and "" or "s", H, L.RPC, L.RPC == 1 and "" or "s", o.persistent and " (persistent)" or "",
    L.N, L.N == 1 and "" or "s", L.V, o.strategy)
  if CL > 1 then
    what = string.format("%s; %d thread%s per row of %d, a cluster of %d CTAs per row (%d columns each), %d vector%s of %d per thread, %s",
      a.op, L.P, L.P == 1 and "" or "s", H, CL, L.HC, L.N, L.N == 1 and "" or "s", L.V, o.strategy)
  end
  local min_blocks = o.persistent and info.per_sm or info.full_occupancy
  src:add(render.fill(render.template("row.cuh"), {
    what = what, block = L.block, symbol = symbol, params = params,
    min_blocks = min_blocks and string.format(", %d", min_blocks) or "",
    shared = table.concat(K.shared, "\n"), body = table.concat(K.lines, "\n"),
  }, "row.cuh"))
  local grid = o.persistent and sms.rule(info.row_factors, info.grid_div, info.cap)
    or { mul = CL > 1 and rowgen.with_const(info.row_factors, CL) or info.row_factors, div = L.RPC, max = 0 }
  kernels[#kernels + 1] = rowgen.with_source({
    symbol = symbol, engine = E.id, plan_id = plan.id, options = rowgen.options(),
    block = { L.block, 1, 1 }, grid = { grid, 1, 1 }, smem = o.persistent and info.smem or 0, cluster = { CL, 1, 1 },
    params = K.mparams, align = K.align, pdl = o.pdl, pdl_entry = o.entry,
  }, K, src:text(), min_blocks)
  for _, k in ipairs(kernels.after or {}) do kernels[#kernels + 1] = k end
  kernels.after = nil
  if #kernels == 1 and not workspace then return kernels[1] end
  return { kernels = kernels, workspace = workspace }
end

-- How a kernel with its body in PTX holds its row (the kernel's comment).
local function ptx_strategy(info)
  return (info.strategy == "reread" and "row re-read (L2)" or info.strategy == "stream" and "one pass"
    or info.L.CL and "row held in the cluster's registers, reductions through distributed shared memory"
    or "row held in registers") .. ", body in PTX"
end

-- The persistent backward of the generic passes with its body in PTX (rowbwd_smem_ptx.lua).
local function build_bwd_ptx(plan, group, g, symbol, K)
  rowbwd_smem_ptx.emit(K, plan.info, group, g)
  local after, workspace = bwd_after(plan, g, symbol, K.target)
  return assemble(plan, symbol, K, { after = after }, workspace, { persistent = true, strategy = ptx_strategy(plan.info) })
end

-- The forward norm with its body in PTX (rowfwd_ptx.lua).
local function build_fwd_ptx(plan, group, g, target, symbol, K)
  K.ptxas_level = E.ptxas_level(plan.info, group)
  local amax = group.amax or {}
  local amax_out = {}
  for i, r in ipairs(amax) do amax_out[i] = r.outputs.Y end
  rowfwd_ptx.emit(K, plan.info, group, g, target, amax_out)
  local kernels = {}
  if #amax > 0 then kernels[1] = amax_init(plan, g, symbol, amax, target) end
  return assemble(plan, symbol, K, kernels, nil, { strategy = ptx_strategy(plan.info),
    pdl = #amax > 0 or nil, entry = #amax == 0 or nil })
end

-- Softmax and the softmax backwards with their body in PTX (rowsm_ptx.lua).
local function build_sm_ptx(plan, group, g, symbol, K)
  K.ptxas_level = E.ptxas_level(plan.info, group)
  rowsm_ptx.emit(K, plan.info, group, g)
  return assemble(plan, symbol, K, {}, nil, { entry = true, strategy = ptx_strategy(plan.info) })
end

-- A row reduction with its body in PTX (rowred_ptx.lua).
local function build_red_ptx(plan, group, g, symbol, K)
  rowred_ptx.emit(K, plan.info, group, g)
  return assemble(plan, symbol, K, {}, nil, { entry = true, strategy = ptx_strategy(plan.info) })
end

-- ---------------------------------------------------------------------------------------
-- the generic kernel (CUDA): passes over the row, each a loop over its vectors (rowgen.pass)

-- What the generic kernel's parts share (`c`): the plan, the kernel K, the row's layout and its
-- guards, the per-row values (base), the held row, and the per-row results (stats_out).
local function pass_context(plan, group, g, target, symbol, K)
  local info = plan.info
  local a, L = info.anchor, info.L
  local spec = lower.ANCHORS[a.op]
  local persistent = info.kind == "norm_bwd"
  local valid = L.RPC > 1 and "valid" or nil
  -- A row past the end (RPC > 1) computes the last row again and stores nothing: no guard around
  -- its loads and arithmetic (shorter code, less NVRTC time), and its amax terms repeat values
  -- already counted. The persistent backward keeps the guard (its column sums would count twice).
  local clamp = valid ~= nil and not persistent
  return {
    plan = plan, group = group, g = g, target = target, symbol = symbol, K = K, src = K.src,
    info = info, a = a, kind = info.kind, spec = spec, L = L, H = L.H, xin = a.inputs[spec.ins[1]],
    prologue = group.prologue or {}, epilogue = group.epilogue or {}, amax = group.amax or {},
    read_later = pw.read_set(group.nodes), made = rowgen.made(group), regs = info.strategy == "regs",
    persistent = persistent, valid = valid, clamp = clamp, pass_valid = not clamp and valid or nil,
    index = string.format("(row * %dLL + c + j)", L.H), slot = L.RPC > 1 and string.format("threadIdx.x / %d", L.P) or "0",
    base = {}, starts = {}, pass_no = 0,
    reciprocal = {},  -- per-row divisors' reciprocals (rowred_pass)
    stats_out = {},   -- output uid -> C expression written once per row
  }
end

-- The row a thread works on (and `valid`): the persistent loop's head (c.loop_start: the first
-- line of its body), or the CTA's row(s), those past the end clamped to the last.
local function row_prelude(c)
  local K, L, info = c.K, c.L, c.info
  -- the plan's only kernel starts while the stream's previous kernel ends (pdl at entry)
  c.entry = not c.persistent and #c.amax == 0
  if c.entry then rowgen.pdl_entry(K) end
  K:add("  const int lane = %s;", L.RPC > 1 and string.format("threadIdx.x %% %d", L.P) or "threadIdx.x")
  if c.persistent then
    if #info.colsum > 0 and not info.split then
      K:add("  extern __shared__ float acc_[];  // [sum][slot][column]")
      K:add("  for (int i = threadIdx.x; i < %d; i += %d) acc_[i] = 0.0f;", #info.colsum * L.RPC * c.H, L.block)
      K:add("  __syncthreads();")
    end
    K:add("  for (kiln_i64 rb_ = blockIdx.x; rb_ * %d < %s; rb_ += gridDim.x) {", L.RPC, info.rows)
    c.loop_start = #K.lines + 1
    K:add("  const kiln_i64 row = rb_%s;", L.RPC > 1 and string.format(" * %d + %s", L.RPC, c.slot) or "")
  elseif c.clamp then
    K:add("  const kiln_i64 row_ = (kiln_i64)blockIdx.x * %d + %s;", L.RPC, c.slot)
    K:add("  const bool valid = row_ < %s;", info.rows)
    K:add("  const kiln_i64 row = valid ? row_ : %s - 1;", info.rows)
  else
    K:add("  const kiln_i64 row = (kiln_i64)blockIdx.x%s;", L.RPC > 1 and string.format(" * %d + %s", L.RPC, c.slot) or "")
  end
  if c.valid and not c.clamp then K:add("  const bool valid = row < %s;", info.rows) end
end

-- sources outside the element loops: constants, runtime scalars, per-row values
local function per_row_sources(c)
  local K, g, info = c.K, c.g, c.info
  for _, uid in ipairs(c.group.inputs) do
    local t = g.by_uid[uid]
    if t.role == "constant" or t.role == "scalar" then
      c.base[uid] = K:scalar(uid)
    elseif info.access[uid] == "row" then
      local st = pw.storage(c.src, t.dtype)
      local off = rowgen.per_row(t, info) and "row"
        or pw.offset_expr(t, info.E, string.format("(row * %dLL)", c.H))
      local load = pw.fmt(st.load, string.format("%s[%s]", K:ptr(uid), off))
      K:add("  const float q%d = %s;", uid, c.pass_valid and string.format("valid ? %s : 0.0f", load) or load)
      c.base[uid] = "q" .. uid
    end
  end
end

-- a tensor whose row is a contiguous block read per sample or channel (adaptive layer norm's
-- scale [B, 1, D]): its row's start once per row, then vector loads like a column tensor's
local function gather_starts(c)
  for _, uid in ipairs(c.group.inputs) do
    local start = c.info.access[uid] == "gather" and rowgen.row_start(c.g.by_uid[uid], c.info, c.L.V)
    if start then
      c.K:add("  const kiln_i64 s%d_ = %s;", uid, start)
      c.starts[uid] = string.format("s%d_", uid)
    end
  end
end

-- K.value afresh for a pass: the per-row values only.
local function reset_values(c)
  c.K.value = {}
  for uid, v in pairs(c.base) do c.K.value[uid] = v end
end

-- element-loop reads of memory sources: vector loads ("full", "col") or gathers
local function sources_of(c, nodes, extra)
  local loads, gathers = {}, {}
  for _, uid in ipairs(rowgen.sources(nodes, extra, c.made, c.base)) do
    if c.info.access[uid] == "full" or c.info.access[uid] == "col" or c.starts[uid] then loads[#loads + 1] = uid
    else gathers[#gathers + 1] = uid end
  end
  return loads, gathers
end

-- The gathered sources' loads, an element at a time.
local function gather_lines(c, lines, gathers)
  for _, uid in ipairs(gathers) do
    local t = c.g.by_uid[uid]
    local st = pw.storage(c.src, t.dtype)
    local off = pw.offset_expr(t, c.info.E, c.index)
    lines[#lines + 1] = string.format("        const float v%d = %s;", uid, pw.fmt(st.load, string.format("%s[%s]", c.K:ptr(uid), off)))
    c.K.value[uid] = "v" .. uid
  end
end

-- The element ops `nodes` on the values in K.value.
local function emit_nodes(c, lines, nodes)
  pw.emit_nodes(nodes, c.K.value, lines, { g = c.g, src = c.src, space = c.info.E, index = c.index, indent = "        ",
                                           read_later = c.read_later, reciprocal = c.reciprocal })
end

-- per-vector output staging and stores of the element outputs among `uids`
local function stager(c, uids, ptag)
  local K, L, g = c.K, c.L, c.g
  local outs = {}
  for _, uid in ipairs(uids) do if c.info.out_kind[uid] == "elem" then outs[#outs + 1] = uid end end
  table.sort(outs)
  local pre = function(lines)
    for _, uid in ipairs(outs) do
      local st = pw.storage(c.src, g.by_uid[uid].dtype)
      lines[#lines + 1] = "      " .. pw.out_regs(st, L.V, string.format("w%s_%d", ptag, uid)).decl
    end
  end
  local body = function(lines)
    for _, uid in ipairs(outs) do
      local st = pw.STORAGE[g.by_uid[uid].dtype]
      lines[#lines + 1] = "        " .. pw.out_regs(st, L.V, string.format("w%s_%d", ptag, uid)).set(K.value[uid])
    end
  end
  local post = function(lines)
    for _, uid in ipairs(outs) do
      local t = g.by_uid[uid]
      local size = dtypes.size(t.dtype)
      local pack = pw.out_regs(pw.STORAGE[t.dtype], L.V, string.format("w%s_%d", ptag, uid)).pack
      if pack then lines[#lines + 1] = "#pragma unroll\n      " .. pack end
      if c.clamp then lines[#lines + 1] = "      if (valid)" end
      lines[#lines + 1] = pw.vector_copy(string.format("%s + row * %dLL + c", K:ptr(uid, true), c.H),
        string.format("w%s_%d", ptag, uid), pw.STORAGE[t.dtype].ctype, L.V, size, "      ")
      K:need_align(uid, math.min(16, L.V * size))
    end
  end
  return pre, body, post
end

-- The outputs of `nodes` written to memory, by uid.
local function outputs_of(g, nodes)
  local list = {}
  for _, n in ipairs(nodes) do
    for _, uid in pairs(n.outputs) do if lower.written(g.by_uid[uid]) then list[#list + 1] = uid end end
  end
  table.sort(list)
  return list
end

-- The anchor's element-space inputs: memory tensors or prologue values. In "regs" they
-- stay in registers: the first pass's load arrays, or h_<uid> for computed ones.
-- (a reduction's: every sibling's input)
local function anchor_inputs(c)
  local ein = {}
  local function add_ein(uid)
    for _, e in ipairs(ein) do if e == uid then return end end
    ein[#ein + 1] = uid
  end
  for _, p in ipairs(c.spec.ins) do add_ein(c.a.inputs[p]) end
  if c.kind == "reduce" then for _, r in ipairs(c.group.reductions or { c.a }) do add_ein(r.inputs.input) end end
  return ein
end

-- What a thread holds between passes: the anchor's element inputs, or (a reduction's
-- epilogue, info.maps) the memory rows its prologue reads, from which the output pass
-- computes the prologue again (`replay`; the re-read row always does).
local function hold_row(c)
  local K, L, info = c.K, c.L, c.info
  c.ein = anchor_inputs(c)
  c.replay = not c.regs or info.maps
  c.hold_list = c.ein
  if info.maps then
    c.hold_list = {}
    for uid in pairs(info.held) do c.hold_list[#c.hold_list + 1] = uid end
    table.sort(c.hold_list)
  end
  c.p1_fused = info.strategy == "reread" or L.N > 8
  c.p2_fused = info.strategy == "reread" or L.N > 4
  c.unroll = (info.strategy == "reread" and L.N > 4) and "4" or nil
  c.hold_expr = {}
  if not c.regs then return end
  for _, uid in ipairs(c.hold_list) do
    local st = pw.storage(c.src, c.g.by_uid[uid].dtype)
    if c.made[uid] or info.access[uid] ~= "full" or c.p1_fused then
      K:add("  alignas(16) %s h_%d[%d][%d];", st.ctype, uid, L.N, L.V)
      c.hold_expr[uid] = { arr = "h_" .. uid, st = st, store = true }
    else
      c.hold_expr[uid] = { arr = "r1_" .. uid, st = st }   -- the first pass's load array
    end
  end
end

-- The amax outputs' accumulators (c.amax_acc), declared before the persistent loop.
local function amax_accumulators(c)
  local K = c.K
  c.amax_acc = {}
  for i, r in ipairs(c.amax) do c.amax_acc[i] = { var = "am" .. (i - 1), input = r.inputs.input, out = r.outputs.Y } end
  if #c.amax_acc == 0 then return end
  local decl = {}
  for _, acc in ipairs(c.amax_acc) do decl[#decl + 1] = acc.var .. " = 0u" end
  table.insert(K.lines, c.loop_start and (c.loop_start - 1) or (#K.lines + 1), "  kiln_u32 " .. table.concat(decl, ", ") .. ";")
  if c.loop_start then c.loop_start = c.loop_start + 1 end
end

-- The value of the anchor's first input in the pass being emitted.
local function x_value(c) return c.K.value[c.xin] end

-- Both hooks (either may be nil), f1 first.
local function both(f1, f2) return function(lines, kx) if f1 then f1(lines, kx) end; if f2 then f2(lines, kx) end end end

-- The pass that makes the anchor's element inputs: loads (plus `extra_loads`), prologue,
-- hold, prologue outputs, and `o.extra` per element.
local function input_pass(c, o)
  local K = c.K
  c.pass_no = c.pass_no + 1
  local ptag = tostring(c.pass_no)
  reset_values(c)
  local want = {}
  for _, uid in ipairs(c.ein) do want[#want + 1] = uid end
  for _, uid in ipairs(o.extra_loads or {}) do want[#want + 1] = uid end
  local loads, gathers = sources_of(c, c.prologue, want)
  local pre, stage, post = stager(c, outputs_of(c.g, c.prologue), ptag)
  rowgen.pass(K, c.L, {
    tag = ptag, loads = loads, access = c.info.access, starts = c.starts, valid = c.pass_valid, fused = c.p1_fused,
    unroll = c.unroll,
    pre = function(lines, kx) pre(lines); if o.pre then o.pre(lines, kx) end end,
    body = function(lines, kx)
      gather_lines(c, lines, gathers)
      emit_nodes(c, lines, c.prologue)
      for _, uid in ipairs(c.hold_list) do
        local h = c.hold_expr[uid]
        if h and h.store then lines[#lines + 1] = string.format("        %s[k][j] = %s;", h.arr, pw.fmt(h.st.store, K.value[uid])) end
      end
      stage(lines)
      o.extra(lines, kx)
    end,
    post = function(lines, kx) post(lines); if o.post then o.post(lines, kx) end end,
  })
end

-- a second read of a tensor the first pass read: through an opaque copy of the pointer,
-- so the compiler reloads it instead of holding the first pass's values
local function fresh_pointers(c, loads, ptag)
  local fresh = {}
  for _, uid in ipairs(loads) do
    local st = pw.STORAGE[c.g.by_uid[uid].dtype]
    c.K:add("  const %s *p%d_%s = %s; asm volatile(\"\" : \"+l\"(p%d_%s));", st.ctype, uid, ptag, c.K:ptr(uid), uid, ptag)
    fresh[uid] = string.format("p%d_%s", uid, ptag)
  end
  return function(uid) return fresh[uid] end
end

-- The loads and gathers of a pass over the held or re-read row: the prologue's sources where
-- it is computed again, those of `o.nodes` and `o.extra_loads`; not the rows held.
local function held_pass_sources(c, o)
  local loads, gathers, seen = {}, {}, {}
  local function want(list, into)
    for _, uid in ipairs(list) do
      if not seen[uid] and not (c.regs and c.info.held[uid]) then into[#into + 1] = uid; seen[uid] = true end
    end
  end
  local function want_both(l, gt) want(l, loads); want(gt, gathers) end
  if c.replay then want_both(sources_of(c, c.prologue, c.ein)) end
  want_both(sources_of(c, o.nodes or {}, o.extra_loads))
  table.sort(loads)
  table.sort(gathers)
  return loads, gathers
end

-- A pass over the held row (regs) or a re-read of it (reread): the anchor's inputs in
-- K.value, loads of what `o.nodes` and `o.extra_loads` read, `o.extra` per element, and the
-- element outputs among `o.outs` stored.
local function held_pass(c, o)
  local K = c.K
  c.pass_no = c.pass_no + 1
  local ptag = tostring(c.pass_no)
  reset_values(c)
  local loads, gathers = held_pass_sources(c, o)
  local pre, stage, post = stager(c, o.outs or {}, ptag)
  local ptr_of = o.fresh and fresh_pointers(c, loads, ptag) or nil
  rowgen.pass(K, c.L, {
    tag = ptag, loads = loads, access = c.info.access, starts = c.starts, valid = c.pass_valid, fused = c.p2_fused,
    unroll = c.unroll, ptr_of = ptr_of,
    pre = function(lines, kx) pre(lines); if o.pre then o.pre(lines, kx) end end,
    body = function(lines, kx)
      if c.regs then
        for _, uid in ipairs(c.hold_list) do
          local h = c.hold_expr[uid]
          lines[#lines + 1] = string.format("        const float v%d = %s;", uid, pw.fmt(h.st.load, h.arr .. "[k][j]"))
          K.value[uid] = "v" .. uid
        end
      end
      gather_lines(c, lines, gathers)
      if c.replay then emit_nodes(c, lines, c.prologue) end
      o.extra(lines, kx, stage)
    end,
    post = function(lines, kx) post(lines); if o.post then o.post(lines, kx) end end,
  })
end

-- The anchor's output value(s) from `anchor_lines`, rounded to their dtype where the
-- epilogue reads them (as the reference does)
local function anchor_values(c, lines, kx, anchor_lines)
  anchor_lines(lines, kx)
  for _, p in ipairs(c.spec.outs) do
    local uid = c.a.outputs[p]
    local t = uid and c.g.by_uid[uid]
    if t and t.dtype ~= "fp32" and c.read_later[uid] then
      local st = pw.storage(c.src, t.dtype)
      lines[#lines + 1] = string.format("        v%d = %s;", uid, pw.fmt(st.load, pw.fmt(st.store, "v" .. uid)))
    end
  end
end

-- The per-row ops (group.rowpw) once per row on the per-row results in `base`, which their
-- values join; the reciprocals of the per-row divisors; the per-row outputs among `late`.
local function row_ops(c, late)
  local K, group, base = c.K, c.group, c.base
  reset_values(c)
  local lines = {}
  pw.emit_nodes(group.rowpw or {}, K.value, lines, { g = c.g, src = c.src, space = c.info.E, index = "(row * " .. c.H .. "LL)",
                                                    indent = "  ", read_later = c.read_later })
  for _, line in ipairs(lines) do K:add("%s", line) end
  for _, n in ipairs(group.rowpw or {}) do for _, uid in pairs(n.outputs) do base[uid] = K.value[uid] end end
  for _, uid in ipairs(rowgen.row_divisors(group)) do
    K:add("  const float rcp%d = __frcp_rn(%s);", uid, base[uid])
    c.reciprocal[uid] = "rcp" .. uid
  end
  for uid in pairs(late) do
    if c.info.out_kind[uid] == "row" then c.stats_out[uid] = base[uid] end
  end
end

-- The per-row reductions of epilogue values (group.rowred): a pass over the row that makes
-- the epilogue values they read, the reductions over the row, then the per-row ops
-- (group.rowpw) once per row. Their results become per-row values (base) of the passes after.
local function rowred_pass(c, anchor_lines, o)
  local K, rowred = c.K, c.group.rowred or {}
  if #rowred == 0 then return end
  c.src:need("common/nanmax.cuh")
  local early, late = rowgen.rowred_split(c.group)
  local vars = {}
  for i, r in ipairs(rowred) do
    vars[i] = "rr" .. (i - 1)
    K:add("  float %s = %s;", vars[i], REDUCE[r.attrs.mode].init)
  end
  held_pass(c, { nodes = early, extra_loads = o.extra_loads, extra = function(lines, kx)
    anchor_values(c, lines, kx, anchor_lines)
    emit_nodes(c, lines, early)
    for i, r in ipairs(rowred) do
      lines[#lines + 1] = "        " .. subst(REDUCE[r.attrs.mode].upd, { a = vars[i], v = K.value[r.inputs.input] })
    end
  end })
  for i, r in ipairs(rowred) do
    local mode = REDUCE[r.attrs.mode]
    rowgen.allreduce(K, c.L, { vars[i] }, COMBINE[mode.comb], "redr" .. (i - 1))
    if mode.fin then K:add("  %s = %s;", vars[i], subst(mode.fin, { a = vars[i], n = render.float_literal(c.H) })) end
    c.base[r.outputs.Y] = vars[i]
  end
  row_ops(c, late)
end

-- The per-element output pass: the anchor's output value(s) from `anchor_lines`, then the
-- epilogue, the amax updates and the stores.
local function output_pass(c, anchor_lines, o)
  local K, g, info = c.K, c.g, c.info
  local outs = {}
  for _, p in ipairs(c.spec.outs) do
    local uid = c.a.outputs[p]
    if uid and lower.written(g.by_uid[uid]) then outs[#outs + 1] = uid end
  end
  for _, uid in ipairs(outputs_of(g, c.epilogue)) do outs[#outs + 1] = uid end
  -- block quantizes: each vector's values kept, then the block scales and stores after it
  local qh = #info.quant > 0 and rowquant.hooks(K, info, info.quant, g, c.clamp)
  held_pass(c, { nodes = c.epilogue, extra_loads = o.extra_loads, outs = outs, fresh = o.fresh,
    pre = both(o.pre, qh and qh.pre), post = both(o.post, qh and qh.post),
    extra = function(lines, kx, stage)
      anchor_values(c, lines, kx, anchor_lines)
      emit_nodes(c, lines, c.epilogue)
      for _, acc in ipairs(c.amax_acc) do
        lines[#lines + 1] = string.format("        %s = max(%s, __float_as_uint(fabsf(%s)));", acc.var, acc.var, K.value[acc.input])
      end
      if qh then qh.body(lines, K.value) end
      stage(lines)
    end })
end

-- The forward norm: the row's sum of squares (layernorm: its mean, then the squared
-- deviations from it), the per-row reductions, then the output pass.
local function norm_passes(c)
  local K, L, H, a = c.K, c.L, c.H, c.a
  local is_ln = c.info.op == "layernorm"
  local eps = a.inputs.epsilon and c.base[a.inputs.epsilon] or render.float_literal(a.attrs.epsilon)
  K:add("  float a0 = 0.0f;")
  input_pass(c, { extra = function(lines)
    if is_ln then lines[#lines + 1] = string.format("        a0 += %s;", x_value(c))
    else lines[#lines + 1] = string.format("        a0 = fmaf(%s, %s, a0);", x_value(c), x_value(c)) end
  end })
  rowgen.allreduce(K, L, { "a0" }, rowgen.combine_add, "red0")
  if is_ln then
    K:add("  const float mean = a0 * (1.0f / %d);", H)
    K:add("  float a1 = 0.0f;")
    held_pass(c, { extra = function(lines)
      lines[#lines + 1] = string.format("        const float d_ = %s - mean;", x_value(c))
      lines[#lines + 1] = "        a1 = fmaf(d_, d_, a1);"
    end })
    rowgen.allreduce(K, L, { "a1" }, rowgen.combine_add, "red1")
    K:add("  const float rstd = rsqrtf(a1 * (1.0f / %d) + %s);", H, eps)
  else
    K:add("  const float rstd = rsqrtf(a0 * (1.0f / %d) + %s);", H, eps)
  end
  local y, scale, bias = a.outputs.Y, a.inputs.scale, a.inputs.bias
  local function norm_y(lines)
    local xhat = is_ln and string.format("(%s - mean) * rstd", x_value(c)) or string.format("%s * rstd", x_value(c))
    local expr = bias and string.format("fmaf(%s, %s, %s)", xhat, K.value[scale], K.value[bias])
      or string.format("%s * %s", xhat, K.value[scale])
    lines[#lines + 1] = string.format("        float v%d = %s;", y, expr)
    K.value[y] = "v" .. y
  end
  rowred_pass(c, norm_y, { extra_loads = { scale, bias } })
  output_pass(c, norm_y, { extra_loads = { scale, bias } })
  if a.outputs.MEAN then c.stats_out[a.outputs.MEAN] = "mean" end
  if a.outputs.INV_VARIANCE then c.stats_out[a.outputs.INV_VARIANCE] = "rstd" end
end

-- the held rows as opaque bits: the output pass converts them again rather than the
-- compiler keeping fp32 copies live across the reduction (registers decide occupancy)
local function opaque_held_rows(c)
  local K, L = c.K, c.L
  for _, uid in ipairs(c.ein) do
    local h = c.hold_expr[uid]
    local bytes = L.N * L.V * dtypes.size(c.g.by_uid[uid].dtype)
    if bytes % 4 == 0 then
      K:add("  { kiln_u32 *w_ = reinterpret_cast<kiln_u32 *>(&%s[0][0]);", h.arr)
      K:add("#pragma unroll\n    for (int i_ = 0; i_ < %d; i_++) asm volatile(\"\" : \"+r\"(w_[i_])); }", bytes // 4)
    end
  end
end

-- this slot's column sums (cs<i>_ of `nsums` sums) added to acc_[sum][slot][column], its own
-- columns, no races
local function add_column_sums(c, lines, nsums)
  local L, H, slot = c.L, c.H, c.slot
  for i = 1, nsums do
    local base_off = string.format("%s + c", (i - 1) * L.RPC * H == 0 and (L.RPC > 1 and string.format("(%s) * %d", slot, H) or "0")
      or string.format("%d + (%s) * %d", (i - 1) * L.RPC * H, slot, H))
    if L.V % 4 == 0 then
      lines[#lines + 1] = string.format("      { float4 *q_ = reinterpret_cast<float4 *>(acc_ + %s);", base_off)
      lines[#lines + 1] = string.format("#pragma unroll\n        for (int c4 = 0; c4 < %d; c4++) { float4 t_ = q_[c4]; t_.x += cs%d_[4 * c4]; " ..
        "t_.y += cs%d_[4 * c4 + 1]; t_.z += cs%d_[4 * c4 + 2]; t_.w += cs%d_[4 * c4 + 3]; q_[c4] = t_; } }",
        L.V // 4, i - 1, i - 1, i - 1, i - 1)
    else
      lines[#lines + 1] = string.format("#pragma unroll\n      for (int j = 0; j < %d; j++) acc_[%s + j] += cs%d_[j];", L.V, base_off, i - 1)
    end
  end
end

-- The backward norm: the row's sums of dy * scale (layernorm) and of that times xhat, then
-- dx and the column sums' terms per element (the split backward: the row's sums only).
local function norm_bwd_passes(c)
  local K, L, H, a, info = c.K, c.L, c.H, c.a, c.info
  local is_ln = a.op == "layernorm_backward"
  local dy, xv, gam = a.inputs.grad, a.inputs.input, a.inputs.scale
  local rstd = c.base[a.inputs.inv_variance]
  local mean = is_ln and c.base[a.inputs.mean] or nil
  local function xhat_line(lines)
    lines[#lines + 1] = string.format("        const float xh_ = %s * %s;",
      mean and string.format("(%s - %s)", K.value[xv], mean) or K.value[xv], rstd)
    lines[#lines + 1] = string.format("        const float gg_ = %s * %s;", K.value[dy], K.value[gam])
  end
  K:add("  float a0 = 0.0f, a1 = 0.0f;")
  input_pass(c, { extra_loads = { gam }, extra = function(lines)
    xhat_line(lines)
    if is_ln then lines[#lines + 1] = "        a0 += gg_;" end
    lines[#lines + 1] = "        a1 = fmaf(gg_, xh_, a1);"
  end })
  rowgen.allreduce(K, L, is_ln and { "a0", "a1" } or { "a1" }, rowgen.combine_add, "red0")
  K:add("  const float c1_ = a0 * (1.0f / %d), c2_ = a1 * (1.0f / %d);", H, H)
  if info.split then
    -- the split backward: this kernel's part ends with the row's two sums, for rowbwd_colsum's
    K:add("  if (%slane == 0) { float2 *s_ = reinterpret_cast<float2 *>(%s); s_[row] = make_float2(c1_, c2_); }",
      c.valid and "valid && " or "", K:workspace(rowbwd_colsum.rows_offset(info)))
    return
  end
  if c.regs then opaque_held_rows(c) end
  local dx = a.outputs.DX
  local sums = {}   -- colsum outputs: expression per element
  for i, uid in ipairs(info.colsum) do
    sums[i] = { uid = uid, expr = uid == a.outputs.DSCALE and "xh_ * " .. "%dy" or "%dy" }
  end
  output_pass(c, function(lines)
    xhat_line(lines)
    lines[#lines + 1] = string.format("        float v%d = %s * (gg_ - %sxh_ * c2_);", dx, rstd, is_ln and "c1_ - " or "")
    K.value[dx] = "v" .. dx
    for i, s in ipairs(sums) do
      lines[#lines + 1] = string.format("        cs%d_[j] = %s;", i - 1, (s.expr:gsub("%%dy", K.value[dy])))
    end
  end, {
    extra_loads = { gam }, fresh = true,
    pre = function(lines)
      for i in ipairs(sums) do lines[#lines + 1] = string.format("      float cs%d_[%d];", i - 1, L.V) end
    end,
    post = function(lines) add_column_sums(c, lines, #sums) end,
  })
end

-- softmax's first pass: each thread's max, and (the re-read row) its sum of exps
local function softmax_max_pass(c)
  local K, L = c.K, c.L
  if c.regs then
    K:add("  float tm_ = %s;  // this thread's max", NEG_INF)
    input_pass(c, { extra = function(lines)
      lines[#lines + 1] = string.format("        tm_ = kiln_fmax_nan(tm_, %s);", x_value(c))
    end })
    return
  end
  K:add("  float tm_ = %s, ts_ = 0.0f;  // this thread's max and its sum of exp(x - tm_)", NEG_INF)
  -- online: per vector, rescale the running sum once to the vector's new max
  input_pass(c, {
    pre = function(lines) lines[#lines + 1] = string.format("      float xs_[%d];", L.V) end,
    extra = function(lines) lines[#lines + 1] = string.format("        xs_[j] = %s;", x_value(c)) end,
    post = function(lines)
      lines[#lines + 1] = "      float vm_ = xs_[0];"
      lines[#lines + 1] = string.format("#pragma unroll\n      for (int j = 1; j < %d; j++) vm_ = kiln_fmax_nan(vm_, xs_[j]);", L.V)
      lines[#lines + 1] = "      const float mn_ = kiln_fmax_nan(tm_, vm_);"
      lines[#lines + 1] = string.format("      const float mb_ = mn_ == %s ? 0.0f : mn_;", NEG_INF)
      lines[#lines + 1] = string.format("      ts_ = tm_ == mn_ ? ts_ : ts_ * kiln_exp2((tm_ - mn_) * %s);", LOG2E)
      lines[#lines + 1] = string.format("#pragma unroll\n      for (int j = 0; j < %d; j++) ts_ += kiln_exp2((xs_[j] - mb_) * %s);", L.V, LOG2E)
      lines[#lines + 1] = "      tm_ = mn_;"
    end,
  })
end

-- softmax's sum of exp(x - max) over the row: a pass over the held row (keeping each exp:
-- `keep_e`), or the re-read row's running sums rescaled to the row's max
local function softmax_sum(c, keep_e)
  local K, L = c.K, c.L
  if not c.regs then
    K:add("  float Z_ = tm_ == M_ ? ts_ : ts_ * kiln_exp2((tm_ - M_) * %s);", LOG2E)
    return
  end
  if keep_e then K:add("  float e_[%d][%d];", L.N, L.V) end
  K:add("  float Z_ = 0.0f;")
  held_pass(c, { extra = function(lines)
    lines[#lines + 1] = string.format("        const float e = kiln_exp2((%s - mb_) * %s);", x_value(c), LOG2E)
    if keep_e then lines[#lines + 1] = "        e_[k][j] = e;" end
    lines[#lines + 1] = "        Z_ += e;"
  end })
end

-- softmax's output pass: log y, or y from the kept exps (`keep_e`) or computed again
local function softmax_output(c, is_log, keep_e)
  local K, s_out = c.K, c.a.outputs.S
  if is_log then
    K:add("  const float lz_ = logf(Z_);")
    output_pass(c, function(lines)
      lines[#lines + 1] = string.format("        float v%d = M_ == %s ? %s : (%s - M_) - lz_;", s_out, NEG_INF, NEG_INF, x_value(c))
      K.value[s_out] = "v" .. s_out
    end, {})
    return
  end
  K:add("  const float iz_ = M_ == %s ? 0.0f : 1.0f / Z_;", NEG_INF)
  output_pass(c, function(lines)
    if keep_e then
      lines[#lines + 1] = string.format("        float v%d = e_[k][j] * iz_;", s_out)
    else
      lines[#lines + 1] = string.format("        float v%d = kiln_exp2((%s - mb_) * %s) * iz_;", s_out, x_value(c), LOG2E)
    end
    K.value[s_out] = "v" .. s_out
  end, {})
end

-- max over the row, then sum of exp(x - max): two reductions. A sink logit joins the max
-- and the sum; a row of -inf (and no sink) gives y = 0, log y = -inf, like the reference.
local function softmax_passes(c)
  local K, L, a = c.K, c.L, c.a
  c.src:need("common/nanmax.cuh")
  c.src:need("common/exp2.cuh")
  local is_log = a.op == "log_softmax"
  local keep_e = c.regs and not is_log
  local sink = a.inputs.SINK and c.base[a.inputs.SINK]
  softmax_max_pass(c)
  K:add("  float M_ = tm_;")
  rowgen.allreduce(K, L, { "M_" }, COMBINE.max, "red0")
  if sink then K:add("  M_ = kiln_fmax_nan(M_, %s);", sink) end
  K:add("  const float mb_ = M_ == %s ? 0.0f : M_;  // exponent base (a -inf row has no terms)", NEG_INF)
  softmax_sum(c, keep_e)
  rowgen.allreduce(K, L, { "Z_" }, rowgen.combine_add, "red1")
  if sink then K:add("  Z_ += kiln_exp2((%s - mb_) * %s);", sink, LOG2E) end
  softmax_output(c, is_log, keep_e)
  local o = a.outputs
  if o.Stats then
    c.stats_out[o.Stats] = a.attrs.stats_use_log2 and string.format("(M_ + logf(Z_)) * %s", LOG2E) or "M_ + logf(Z_)"
  end
  if o.Max then c.stats_out[o.Max] = "M_" end
  if o.Sum_exp then c.stats_out[o.Sum_exp] = "Z_" end
end

-- The softmax backwards: the row's sum of dy (log_softmax) or of dy * y, then dx.
local function softmax_bwd_passes(c)
  local K, a = c.K, c.a
  local is_log = a.op == "log_softmax_backward"
  local dy, yv = a.inputs.grad, a.inputs.output
  if is_log then c.src:need("common/exp2.cuh") end
  K:add("  float a0 = 0.0f;")
  input_pass(c, { extra = function(lines)
    if is_log then lines[#lines + 1] = string.format("        a0 += %s;", K.value[dy])
    else lines[#lines + 1] = string.format("        a0 = fmaf(%s, %s, a0);", K.value[dy], K.value[yv]) end
  end })
  rowgen.allreduce(K, c.L, { "a0" }, rowgen.combine_add, "red0")
  local dx = a.outputs.DX
  output_pass(c, function(lines)
    if is_log then
      lines[#lines + 1] = string.format("        float v%d = %s - kiln_exp2(%s * %s) * a0;", dx, K.value[dy], K.value[yv], LOG2E)
    else
      lines[#lines + 1] = string.format("        float v%d = %s * (%s - a0);", dx, K.value[yv], K.value[dy])
    end
    K.value[dx] = "v" .. dx
  end, {})
end

-- one pass: the row's blocks quantized as loaded (rowquant.hooks)
local function quant_passes(c)
  output_pass(c, function() end, {})
end

-- one pass: each vector times its block's descale
local function dequant_passes(c)
  local K, a, y = c.K, c.a, c.a.outputs.Y
  output_pass(c, function(lines)
    lines[#lines + 1] = string.format("        float v%d = %s * qd_;", y, x_value(c))
    K.value[y] = "v" .. y
  end, { pre = function(lines) lines[#lines + 1] = rowquant.descale_line(K, c.info, a, c.g) end })
end

-- The element ops after the reductions `list` (info.maps): the per-row ops, then a pass over
-- the row.
local function reduce_epilogue(c, list)
  local K, g, stats_out = c.K, c.g, c.stats_out
  -- the element ops after them read each result as its dtype holds it (as the reference does)
  local late = {}
  for _, r in ipairs(list) do
    local y = r.outputs.Y
    local st = pw.storage(c.src, g.by_uid[y].dtype)
    local v = g.by_uid[y].dtype == "fp32" and stats_out[y] or pw.fmt(st.load, pw.fmt(st.store, stats_out[y]))
    K:add("  const float y%d_ = %s;", y, v)
    c.base[y], stats_out[y] = "y" .. y .. "_", "y" .. y .. "_"
  end
  for _, n in ipairs(c.group.rowpw or {}) do for _, uid in pairs(n.outputs) do late[uid] = true end end
  row_ops(c, late)
  output_pass(c, function() end, {})
end

-- reduce: the anchor and its sibling reductions, one accumulator each, one meeting
local function reduce_passes(c)
  local K, a = c.K, c.a
  c.src:need("common/nanmax.cuh")
  local list, vars = c.group.reductions or { a }, {}
  for i in ipairs(list) do vars[i] = "a" .. (i - 1) end
  K:add("  float %s;", table.concat(vars, " = " .. REDUCE[a.attrs.mode].init .. ", ") .. " = " .. REDUCE[a.attrs.mode].init)
  input_pass(c, { extra = function(lines)
    for i, r in ipairs(list) do
      lines[#lines + 1] = "        " .. subst(REDUCE[r.attrs.mode].upd, { a = vars[i], v = K.value[r.inputs.input] })
    end
  end })
  rowgen.allreduce(K, c.L, vars, COMBINE[REDUCE[a.attrs.mode].comb], "red0")
  for i, r in ipairs(list) do
    local mode = REDUCE[r.attrs.mode]
    c.stats_out[r.outputs.Y] = mode.fin and subst(mode.fin, { a = vars[i], n = render.float_literal(c.H) }) or vars[i]
  end
  if c.info.maps then reduce_epilogue(c, list) end
end

-- The passes over the row of each kind of kernel.
local KIND_PASSES = {
  norm = norm_passes, norm_bwd = norm_bwd_passes, softmax = softmax_passes, softmax_bwd = softmax_bwd_passes,
  quant = quant_passes, dequant = dequant_passes, reduce = reduce_passes,
}

-- per-row results, written by the row's first thread
local function store_row_results(c)
  local K, g = c.K, c.g
  local w = {}
  local uids = {}
  for uid in pairs(c.stats_out) do if lower.written(g.by_uid[uid]) then uids[#uids + 1] = uid end end
  table.sort(uids)
  for _, uid in ipairs(uids) do
    local t = g.by_uid[uid]
    local st = pw.storage(c.src, t.dtype)
    local off = shape.is_row_major(t.dims, t.strides) and "row" or pw.offset_expr(t, c.info.E, string.format("(row * %dLL)", c.H))
    w[#w + 1] = string.format("%s[%s] = %s;", K:ptr(uid, true), off, pw.fmt(st.store, c.stats_out[uid]))
  end
  if #w > 0 then K:add("  if (%slane == 0) { %s }", c.valid and "valid && " or "", table.concat(w, " ")) end
end

-- this CTA's partial row of the `ncols` column sums: the slots' sums added in slot order
local function store_partial_row(c, ncols)
  local K, L, H = c.K, c.L, c.H
  local ws = K:workspace(0)
  K:add("  __syncthreads();")
  K:add("  for (int i = threadIdx.x; i < %d; i += %d) {", ncols, L.block)
  if L.RPC > 1 then
    K:add("    const int s_ = i / %d, col = i - s_ * %d;", H, H)
    K:add("    float t_ = acc_[s_ * %d + col];", L.RPC * H)
    K:add("    for (int sl = 1; sl < %d; sl++) t_ += acc_[(s_ * %d + sl) * %d + col];", L.RPC, L.RPC, H)
    K:add("    %s[(kiln_i64)blockIdx.x * %d + i] = t_;", ws, ncols)
  else
    K:add("    %s[(kiln_i64)blockIdx.x * %d + i] = acc_[i];", ws, ncols)
  end
  K:add("  }")
end

-- The persistent loop's end and the CTA's partial row; the kernels after this one and the
-- workspace (bwd_after).
local function end_persistent_loop(c)
  local K, L, info = c.K, c.L, c.info
  -- the shared reduction arrays are rewritten by the next row
  if L.P > 32 then K:add("  __syncthreads();") end
  for i = c.loop_start, #K.lines do K.lines[i] = "  " .. K.lines[i]:gsub("\n", "\n  ") end
  K:add("  }")
  local ncols = #info.colsum * c.H
  if ncols > 0 and not info.split then store_partial_row(c, ncols) end
  return bwd_after(c.plan, c.g, c.symbol, c.target)
end

-- amax outputs: max over the CTA, then one atomic per CTA (zeroed by the init kernel, which
-- joins `kernels`)
local function publish_amax(c, kernels)
  local K, L = c.K, c.L
  c.src:need("common/amax.cuh")
  kernels[#kernels + 1] = amax_init(c.plan, c.g, c.symbol, c.amax, c.target)
  for i, acc in ipairs(c.amax_acc) do
    K.shared[#K.shared + 1] = string.format("  __shared__ kiln_u32 amr%d_[%d];", i - 1, L.block // 32)
    K:add("  %s = kiln_warp_max_u32(%s);", acc.var, acc.var)
    K:add("  if ((threadIdx.x & 31) == 0) amr%d_[threadIdx.x >> 5] = %s;", i - 1, acc.var)
  end
  K:add("  __syncthreads();")
  K:add("  if (threadIdx.x == 0) {")
  c.src:need("common/pdl.cuh")
  K:add("    kiln_pdl_wait();  // launched early (pdl): the init kernel's zeros are in place past this point")
  for i, acc in ipairs(c.amax_acc) do
    K:add("    kiln_u32 m%d_ = amr%d_[0];", i - 1, i - 1)
    K:add("    for (int w_ = 1; w_ < %d; w_++) m%d_ = max(m%d_, amr%d_[w_]);", L.block // 32, i - 1, i - 1, i - 1)
    K:add("    kiln_amax_publish(%s, m%d_);", K:ptr(acc.out, true), i - 1)
  end
  K:add("  }")
end

-- The generic kernel: the row's head, its sources and held row, the kind's passes, the
-- per-row results, the persistent loop's end and the amax outputs; with the kernels around it.
local function build_passes(plan, group, g, target, symbol, K)
  local c = pass_context(plan, group, g, target, symbol, K)
  row_prelude(c)
  per_row_sources(c)
  gather_starts(c)
  hold_row(c)
  amax_accumulators(c)
  KIND_PASSES[c.kind](c)
  store_row_results(c)
  local kernels, workspace = {}, nil
  if c.persistent then kernels.after, workspace = end_persistent_loop(c) end
  if #c.amax_acc > 0 then publish_amax(c, kernels) end
  return assemble(plan, symbol, K, kernels, workspace, {
    strategy = ({ regs = "row held in registers", reread = "row re-read (L2)", stream = "one pass" })[c.info.strategy],
    persistent = c.persistent, pdl = #c.amax_acc > 0 or nil, entry = c.entry or nil })
end

-- The kernel's pointer parameters in a readable order: inputs by uid, then outputs by uid.
local function declare_params(K, group, g)
  for _, uid in ipairs(group.inputs) do
    local t = g.by_uid[uid]
    if t.role ~= "constant" and t.role ~= "scalar" then K:ptr(uid) end
  end
  for _, uid in ipairs(group.outputs) do K:ptr(uid, true) end
end

function E.build(plan, group, g, target, symbol)
  g = row_view(group, g)
  local info = plan.info
  local K = rowgen.kernel(g, symbol)
  K.target = target
  K.why_cuda = info.why_cuda or (info.staged and info.staged.why_cuda)
  K:note_dyn(info.E)
  declare_params(K, group, g)
  if info.staged then return build_staged(plan, group, g, symbol, K) end
  if info.fstaged then return build_fwd_staged(plan, group, g, symbol, K) end
  if info.fwd_ptx then return build_fwd_ptx(plan, group, g, target, symbol, K) end
  if info.bwd_ptx then return build_bwd_ptx(plan, group, g, symbol, K) end
  if info.sm_ptx then return build_sm_ptx(plan, group, g, symbol, K) end
  if info.red_ptx then return build_red_ptx(plan, group, g, symbol, K) end
  return build_passes(plan, group, g, target, symbol, K)
end

return E
