-- kiln.engines.gemm: matmul groups, C[b] = A[b] · B[b] with fp32 accumulation and the fused
-- pointwise epilogue the lowering attached (bias, scale, activation, residual, cast, amax),
-- applied to the accumulator in registers (docs/GEMM.md has the design).
--
-- Two template families share one operand layout in shared memory (lines of 128 bytes along
-- the operand's contiguous axis, 16-byte chunks swizzled by line % 8, which is wgmma's
-- 128-byte swizzle) and one epilogue:
--   sm90  (sm_90a) warp-specialized and persistent: one producer thread fills a ring of
--         stages with the tensor copy engine (TMA, tensor maps the runtime encodes per launch);
--         two consumer warpgroups run wgmma (HGMMA; QGMMA for fp8) on a 128 x BN tile, then
--         the epilogue straight from the accumulators. The schedule setting pingpong (opt-in)
--         builds the ping-pong variant instead: each consumer warpgroup owns whole 128 x 128
--         tiles and they take turns on the tensor cores, one's epilogue under the other's
--         mainloop (templates/gemm_sm90_pingpong.cuh).
--   mma   (sm_80 and later: the fallback for sm_80, sm_100a and shapes sm90 does not take)
--         mma.sync m16n8k16 with ldmatrix over a cp.async multistage ring; fp8 operands and
--         layouts without 16-byte alignment are loaded element by element (converted to fp16).
-- Dims: N and K compile-time; M and the batch (rank 3, broadcast allowed) may be dynamic.
local render = require "kiln.render"
local shape = require "kiln.shape"
local dtypes = require "kiln.dtypes"
local pw = require "kiln.engines.pwexpr"
local rowgen = require "kiln.engines.rowgen"
local sms = require "kiln.engines.sms"
local lower = require "kiln.lower"
local settings = require "kiln.settings"

local E = { id = "gemm", version = 1 }

-- Persistent grids: a CTA per SM (the runtime's SM count), at most SLOTS of them: the
-- workspace holds a partial tile per CTA.
E.SLOTS = sms.LARGE
-- Consumer / producer registers after setmaxnreg (3 warpgroups: 2 * 232 + 40 = 3 * 168;
-- one producer thread issues TMA copies).
E.REG_CONSUMER, E.REG_PRODUCER = 232, 40
-- Tiles of the sm90 path: BN, stages (each stage (128 + BN) * 128 bytes), within the 227 KB of
-- shared memory an sm_90 block may have. The shared memory is kept per image in the pack: the
-- mma kernel built for other SMs launches with its own.
E.SM90_TILES = { { bn = 256, stages = 4 }, { bn = 192, stages = 5 }, { bn = 128, stages = 6 } }
E.SMEM_MAX_SM90, E.SMEM_MAX = 232448, 166912
-- The cooperative sm90 kernel stages one 2- or 4-byte output through shared memory and stores
-- it with the tensor copy engine: per consumer warpgroup two buffers of 64 rows x 128 bytes
-- (a tile's columns go out in chunks of 128 bytes). A tile keeps the stages that still fit.
-- The epilogue setting `direct` stores from the registers instead.
E.EPI_BYTES = 2 * 2 * 64 * 128
-- Epilogue warps (a staged output of a bf16/fp16 GEMM): warps 1-3 of the producer warpgroup run
-- the epilogue on the sums the consumers leave in a per-CTA workspace buffer (128 x BN fp32),
-- under the consumers' next mainloop. Correct (GPU check, racecheck, emulator) but 3-4% slower
-- than the consumers' own epilogue on an H200 (bias+GELU 8192^3 1.710 against 1.659 ms, plain
-- 1.683 against 1.635, SwiGLU and residual at 8192x4096x4096 likewise),
-- so `auto` (E.EWG.auto) leaves it off; the epilogue setting `warpgroup` turns it on (taken then
-- for any K). With auto on it would be taken from min_kb k-blocks (below that three
-- warps cannot keep up with a tile's mainloop). Registers: 2 * 176 + 152 = 504. A fourth
-- warpgroup cannot be had: 512 threads leave 128 registers at launch, fewer than one wgmma
-- m64n256 needs, and ptxas compiles the whole kernel within that.
E.EWG = { auto = false, min_kb = 32, reg_consumer = 176, reg_producer = 152 }
-- setmaxnreg only moves registers between warpgroups: the three must stay within the 168 each
-- the launch gave (65536 / 384, in steps of 8), or a consumer's increase waits forever.
for _, r in ipairs({ { E.REG_CONSUMER, E.REG_PRODUCER }, { E.EWG.reg_consumer, E.EWG.reg_producer } }) do
  assert(2 * r[1] + r[2] <= 3 * 168 and r[1] % 8 == 0 and r[2] % 8 == 0, "kiln.engines.gemm: setmaxnreg budget")
end
-- The ping-pong sm90 kernel (the schedule setting `pingpong`): one tile, 128 x 128 (a consumer
-- warpgroup holds the whole tile: 128 fp32 accumulators per thread), 7 stages of 32 KB.
E.SM90_PP_TILE = { bn = 128, stages = 7 }
-- sm90 clusters: CM CTAs along M share each B tile (each copies 1/CM of it, multicast), which
-- cuts the operand traffic from L2 by a third at 128 x 256. Correct, but slower on an H200
-- (0.85x vs 0.97x cuBLAS at 8192^3), so off by default (the cluster setting, E.settings).
-- The sm90 kernels take tiles in groups of GROUP_M m tiles per column of n tiles, so one
-- wave's tiles share few operand panels in L2 (a wave of 132 128 x 256 tiles reads the fewest
-- bytes of A and B at about 16 x 8). Measured on the H200 against 8 (bench/ab.py, same
-- tensors): bf16 8192^3 1.3% faster, bias+GELU 1.5%, 16384x4096x4096 2.5%, 4096^3 and the
-- 8192x4096x4096 epilogues level; 32 level with 8, 4 3% slower (the group setting).
-- L2 eviction hints on the operand copies: none by default (the l2hint setting).
-- Stream-K for the last partial wave of the sm90 kernel (docs/GEMM.md): its tiles are split
-- along K over the CTAs, partial sums meet in the workspace. Taken at run time when the last
-- wave is at most FILL_PCT % full (else the saving does not pay for the fixup), a tile splits
-- into at most about PIECES ranges (an owner adds at most about PIECES partial tiles) and each
-- CTA saves at least MIN_SAVED k-blocks (about one partial tile's round trip through L2).
-- The streamk setting 0 turns it off; clusters of 2 turn it off.
-- fp8 takes it only when all its tiles are one partial wave (small M: a few n tiles would
-- leave most SMs idle): a last wave split after full ones measured 0.91x at 8192^3 (H200).
E.STREAMK = { fill_pct = 85, pieces = 4, min_saved = 4, fp8 = "first" }
-- Flags per CTA (one per consumer warp), rounded to 256 bytes ahead of the partial tiles.
E.SK_FLAG_WORDS = (E.SLOTS * 8 + 63) // 64 * 64
-- fp8 on sm_90a: the tensor cores keep about 13 mantissa bits when they add into the
-- accumulator, so each k-block (128 deep) is summed into fresh registers and added to the fp32
-- accumulator by the consumer (twice the accumulator registers: BN at most 192).
E.FP8_BN_MAX = 192
-- The mma path: 128 x 192 tiles (12 warps of 64 x 32), stages of 40 KB.
E.MMA_BN, E.MMA_STAGES = 192, 3
-- ptxas reports registers, shared memory and spills into the NVRTC log (kept by KILN_DUMP_DIR).
E.OPTIONS = { "--std=c++17", "--ptxas-options=-v" }

-- The settings every candidate plan is built under (kiln.settings), each list led by its
-- default; KILN_PLAN's gemm.NAME=VALUE items choose others.
-- tile: the sm90 tile ranked first (auto: the one that wastes the least of N); cluster: CTAs
-- along M sharing B; schedule: the sm90 kernel's (pingpong: bf16/fp16 only); epilogue (auto:
-- E.EWG's rule; tma: the staged store; direct: from registers); streamk (auto: on, for fp8 a
-- grid's one partial wave only; 0 off; 1 any partial last wave, fp8 too); fill: stream-K's
-- last-wave limit in percent; group: m tiles per group of the tile order; l2hint: eviction
-- hints on the operand copies (alast: A evict_last, bfirst: B evict_first).
E.settings = {
  tile = { "auto", "256", "192", "128" }, cluster = { "1", "2" }, schedule = { "cooperative", "pingpong" },
  epilogue = { "auto", "warpgroup", "tma", "direct" }, streamk = { "auto", "0", "1" },
  fill = { tostring(E.STREAMK.fill_pct) }, group = { "16", "4", "8", "32" },
  l2hint = { "none", "alast", "bfirst", "both" },
}
for p = 0, 100 do
  if p ~= E.STREAMK.fill_pct then E.settings.fill[#E.settings.fill + 1] = tostring(p) end
end
-- the values of fill that `kiln tune` measures (a setting's `tune` list; all its values without)
E.settings.fill.tune = { "50", "70", "100" }

local fmt, cdim = pw.fmt, pw.cdim

local function fail(f, ...) return nil, string.format(f, ...) end

local SIXTEEN = { bf16 = "bf16", fp16 = "f16" }

-- Operand layout from strides: the matrix axes (r, c) = (M, K) for A, (K, N) for B.
-- Returns { kmajor =, ld = stride of the other axis (elements), sr =, sc =, bs = batch stride }.
local function operand(t, which)
  local R = #t.dims
  local sr, sc = t.strides[R - 1], t.strides[R]
  local dr, dc = t.dims[R - 1], t.dims[R]
  local o = { t = t, sr = sr, sc = sc, rank = R }
  if R == 3 and t.dims[1] ~= 1 then o.bs = t.strides[1] end
  -- contiguous axis: c (row-major) or r (column-major)
  local contig = sc == 1 and "c" or (sr == 1 and "r" or nil)
  if not contig then return nil end
  -- K-major: A row-major (c = K), B column-major (r = K)
  o.kmajor = (which == "A") == (contig == "c")
  o.contig = contig
  o.ld = contig == "c" and sr or sc
  o.ext = contig == "c" and dc or dr     -- extent of the contiguous axis
  return o
end

-- Whether 16-byte chunks of operand o are aligned and never straddle its edge.
local function chunks_aligned(o, esz)
  local per = 16 // esz
  if type(o.ext) ~= "number" or o.ext % per ~= 0 then return false end
  if pw.const_factor(o.ld) * esz % 16 ~= 0 then return false end
  if o.bs and pw.const_factor(o.bs) * esz % 16 ~= 0 then return false end
  return true
end

-- How an epilogue input is read per output element of C's element space Ed:
-- "full" (same dims, row-major: pairs at i0), "col" (one row vector [N]: pairs at col),
-- "row" (one value per row of C: [M, 1]), "once" (one value), "gather" (anything else).
local function classify(t, Ed)
  if pw.dims_equal(t.dims, Ed) and shape.is_row_major(t.dims, t.strides) then return "full" end
  local R, pad = #Ed, #Ed - #t.dims
  local vary = {}
  local nv = 0
  for k = 1, R do
    local d = t.dims[k - pad]
    if d ~= nil and not (d == 1 and Ed[k] ~= 1) and Ed[k] ~= 1 then vary[k] = true; nv = nv + 1 end
  end
  if nv == 0 then return "once" end
  if nv == 1 and vary[R] and t.strides[#t.dims] == 1 then return "col" end
  if nv == 1 and vary[R - 1] then return "row" end
  return "gather"
end

-- The block scales of operand `port` (A [M, K] or B [K, N]) that dequantize node q applies:
-- { t = the scale tensor, mn = block rows of A / columns of B, k = block depth }.
local function block_scales(q, port, g)
  local bl = q.attrs.block_size
  local outer, inner = bl[#bl - 1] or 1, bl[#bl]
  local t = g.by_uid[q.inputs.descale]
  if port == "A" then return { t = t, mn = outer, k = inner } end
  return { t = t, mn = inner, k = outer }
end

-- Scale dtypes the kernels read: fp32 (1x128 / 128x128 recipes), e8m0 (MXFP8), e4m3.
local SCALE_DTYPES = { fp32 = true, fp8_e8m0 = true, fp8_e4m3 = true }

-- Whether matmul m applies the block scales of the dequantize nodes qs ({A =, B =}) in its
-- kernel (lower's block-scaled operands), on every SM: fp8 data in a rank-2 operand, scales
-- of a dtype the kernels read, blocks of whole k16 steps along K, the other operand fp8 too.
-- Both paths add the products of each range of k one scale covers into fp32 with their scales:
-- the sm90 kernel takes 1 x 128k / 128k x 128j blocks (sm90_blocker), the mma kernel any.
function E.dequantizes(m, qs, g, target)
  if target.sm < 80 or m.op ~= "matmul" then return false end
  for _, p in ipairs({ "M_override", "N_override", "K_override" }) do if m.inputs[p] then return false end end
  for _, port in ipairs({ "A", "B" }) do
    local q = qs[port]
    local t = g.by_uid[q and q.inputs.input or m.inputs[port]]
    if not dtypes.info[t.dtype].fp8 then return false end
    if q then
      local sc = g.by_uid[q.inputs.descale]
      local bs = block_scales(q, port, g)
      if #t.dims ~= 2 or q.attrs.is_negative_scale or not SCALE_DTYPES[sc.dtype] or bs.k % 16 ~= 0 then return false end
    end
  end
  return true
end

-- Everything propose learns about a group, reused by build.
-- The ports of a matmul or moe_grouped_matmul node: A, B, C.
local PORTS = { matmul = { "A", "B", "C" }, moe_grouped_matmul = { "token", "weight", "Y" } }

local function analyze(group, g, target)
  local a = group.anchor
  if not a or not PORTS[a.op] then
    return fail("group is a %s op (%s), not a matmul", group.family, (group.anchor or group.nodes[1]).op)
  end
  local pa, pb, pc = table.unpack(PORTS[a.op])
  for _, p in ipairs({ "M_override", "N_override", "K_override" }) do
    if a.inputs[p] then return fail("%s is not supported (per-batch sizes)", p) end
  end
  local epilogue, amax = group.epilogue or {}, group.amax or {}
  local ok, why = pw.supported(epilogue, g)
  if not ok then return nil, why end
  -- a block-scaled operand (lower's dequant): the fp8 data the dequantize reads, its scales
  local dq = group.dequant or {}
  local function operand_tensor(port)
    return g.by_uid[dq[port] and dq[port].inputs.input or a.inputs[port]]
  end
  local A, B, C = operand_tensor(pa), operand_tensor(pb), g.by_uid[a.outputs[pc]]
  local info = { anchor = a, A = A, B = B, C = C, scales = {} }
  for port, q in pairs(dq) do info.scales[port] = block_scales(q, port, g) end
  -- a grouped GEMM (moe_grouped_matmul): row groups of A and C, B [experts, K, N]
  if a.op == "moe_grouped_matmul" then
    local off = g.by_uid[a.inputs.first_token_offset]
    info.grouped = { offsets = off, groups = B.dims[1] + 1 }
    if type(B.dims[1]) ~= "number" then return fail("the expert count (%s) must be specialized", tostring(B.dims[1])) end
  end
  local fp8 = dtypes.info[A.dtype].fp8
  if fp8 then
    if not (A.dtype == "fp8_e4m3" or A.dtype == "fp8_e5m2") or not (B.dtype == "fp8_e4m3" or B.dtype == "fp8_e5m2") then
      return fail("fp8 operands must be e4m3 or e5m2 (A %s, B %s)", A.dtype, B.dtype)
    end
  elseif not SIXTEEN[A.dtype] or A.dtype ~= B.dtype then
    return fail("operands %s x %s: the tensor-core paths take bf16 x bf16, fp16 x fp16 or fp8 x fp8", A.dtype, B.dtype)
  end
  info.fp8, info.esz = fp8, dtypes.size(A.dtype)
  local Rc = #C.dims
  if #A.dims > 3 or #B.dims > 3 or Rc > 3 then return fail("rank %d: at most one batch dim (rank 3)", math.max(#A.dims, #B.dims, Rc)) end
  local N, Kd = C.dims[Rc], A.dims[#A.dims]
  if type(N) ~= "number" then return fail("N (%s) must be specialized (compile-time)", tostring(N)) end
  if type(Kd) ~= "number" then return fail("K (%s) must be specialized (compile-time)", tostring(Kd)) end
  if N % 2 ~= 0 then return fail("N = %d must be even (the epilogue writes column pairs)", N) end
  info.N, info.K, info.Md = N, Kd, C.dims[Rc - 1]
  info.batch = Rc == 3 and C.dims[1] or 1
  info.oa, info.ob = operand(A, "A"), operand(B, "B")
  if not info.oa then return fail("A %s strides %s: neither row- nor column-major", shape.format(A.dims), shape.format(A.strides)) end
  if not info.ob then return fail("B %s strides %s: neither row- nor column-major", shape.format(B.dims), shape.format(B.strides)) end
  info.aligned = chunks_aligned(info.oa, info.esz) and chunks_aligned(info.ob, info.esz)
  -- the second product of a dual GEMM (lower's sibling matmuls, E.pairs): its B2 and C2
  local m2 = group.matmuls and group.matmuls[2]
  if m2 then
    info.B2, info.C2 = g.by_uid[m2.inputs.B], g.by_uid[m2.outputs.C]
    info.ob2 = operand(info.B2, "B")
  end
  -- the tensors the mainloop reads (operands, block scales); the other inputs are the epilogue's
  info.operand = { [A.uid] = true, [B.uid] = true }
  if info.grouped then info.operand[info.grouped.offsets.uid] = true end
  if info.B2 then info.operand[info.B2.uid] = true end
  for _, sc in pairs(info.scales) do info.operand[sc.t.uid] = true end
  -- epilogue tensors
  local Ed = C.dims
  info.Ed = Ed
  info.access = {}
  for _, uid in ipairs(group.inputs) do
    local t = g.by_uid[uid]
    if not info.operand[uid] and t.role ~= "constant" and t.role ~= "scalar" then
      if not pw.STORAGE[t.dtype] then return fail("dtype %s of '%s' is not supported", t.dtype, t.name) end
      local b = shape.broadcast(t.dims, Ed)
      if not b or not pw.dims_equal(b, Ed) then
        return fail("epilogue input '%s' %s does not broadcast to C %s", t.name, shape.format(t.dims), shape.format(Ed))
      end
      info.access[uid] = classify(t, Ed)
    end
  end
  info.amax_of = {}
  for _, r in ipairs(amax) do info.amax_of[r.outputs.Y] = r end
  for _, uid in ipairs(group.outputs) do
    local t = g.by_uid[uid]
    if not info.amax_of[uid] then
      if not pw.STORAGE[t.dtype] then return fail("dtype %s of output '%s' is not supported", t.dtype, t.name) end
      if not pw.dims_equal(t.dims, Ed) or not shape.is_row_major(t.dims, t.strides) then
        return fail("output '%s' %s is not a row-major tensor of C's shape %s", t.name, shape.format(t.dims), shape.format(Ed))
      end
    end
  end
  return info
end

-- The sm90 tiles for N, best first: the one that wastes the least of N (ties: the wider one);
-- the tile setting (BN, e.g. "192") puts that tile first.
local function sm90_order(N, fp8, tile)
  local best = {}
  for _, t in ipairs(E.SM90_TILES) do
    if not (fp8 and t.bn > E.FP8_BN_MAX) then
    local nt = (N + t.bn - 1) // t.bn
    best[#best + 1] = { tile = t, eff = N / (nt * t.bn) }
    end
  end
  local want = tonumber(tile)
  table.sort(best, function(x, y)
    if want and (x.tile.bn == want) ~= (y.tile.bn == want) then return x.tile.bn == want end
    if math.abs(x.eff - y.eff) > 0.05 then return x.eff > y.eff end
    return x.tile.bn > y.tile.bn
  end)
  return best
end

-- Why the group cannot take the sm90 path (on any SM), or nil.
local function sm90_blocker(info)
  if not info.aligned then return "operand rows are not provably 16-byte aligned (the wgmma path copies 16-byte chunks)" end
  if info.fp8 and not (info.oa.kmajor and info.ob.kmajor) then return "fp8 wgmma needs K-major A and B" end
  if info.N < 64 then return "N < 64" end
  for _, port in ipairs({ "A", "B" }) do
    local sc = info.scales[port]
    if sc and sc.k % 128 ~= 0 then
      return string.format("%s's scale blocks are %d deep along K (the wgmma kernel scales whole k-blocks of 128)", port, sc.k)
    end
    if sc and port == "B" and sc.mn % 128 ~= 0 then
      return string.format("B's scale blocks are %d columns wide (the wgmma kernel takes multiples of 128)", sc.mn)
    end
  end
end

-- The persistent grid (units of cm CTAs): a CTA per unit of tiles when M and the batch are
-- static; else SMs / cm (at most E.SLOTS): the tile count, ceil(M / (128 cm)) * n tiles *
-- batch, is no product of dims over a divisor, and a CTA past the last tile finds none and
-- ends. With stream-K a CTA per SM either way: the kernel splits a partial wave over them (the
-- only wave of a small M too).
local function grid_rule(info, bn, cm, sk)
  local M, batch = info.Md, info.batch
  local rule
  if sk or info.grouped or type(M) == "string" or type(batch) == "string" then
    rule = sms.rule({ E.SLOTS // cm }, 1, sms.cap(1, cm))
  else
    rule = sms.rule({ (M + 128 * cm - 1) // (128 * cm) * ((info.N + bn - 1) // bn) * batch }, 1, sms.cap(1, cm))
  end
  rule.max = E.SLOTS // cm
  return rule
end

-- A pack plan has one launch (threads, grid, parameters) for all SMs, so the kernels for
-- every SM launch like the sm90 plan the group would get on sm_90a (or, when it takes none,
-- like the mma kernel alone): 384 threads, the same persistent grid (from `grid_tile`) and
-- parameters; the shared memory is the kernel's own (`tile` nil: the mma kernel).
local function cluster_m(set) return tonumber(set.cluster) end

-- The output the cooperative sm90 kernel stages through shared memory: the first element
-- output of 2 or 4 bytes whose rows are 16-byte multiples (a tensor map's line stride).
local function staged_output(info, group, g)
  for _, uid in ipairs(group.outputs) do
    local t = g.by_uid[uid]
    local size = dtypes.size(t.dtype)
    if not info.amax_of[uid] and (size == 2 or size == 4) and info.N * size % 16 == 0 then return uid end
  end
end

-- The dynamic shared memory of an sm90 tile: its stages (A and B lines, two barriers each),
-- 1024 bytes of alignment slack, the staging buffers of a staged output and the epilogue
-- warps' two barriers.
-- (extra: bytes past the barriers, a grouped GEMM's table: group_bytes)
local function sm90_smem(bn, stages, staged, ewg, extra)
  return stages * ((128 + bn) * 128 + 16) + 1024 + (staged and E.EPI_BYTES or 0) + (ewg and 16 or 0) + (extra or 0)
end

-- The stages of an sm90 tile: its own, or as many as still fit beside the staging buffers.
local function sm90_stages(t, staged, ewg, extra)
  local s = t.stages
  while s > 1 and sm90_smem(t.bn, s, staged, ewg, extra) > E.SMEM_MAX_SM90 do s = s - 1 end
  return s
end

-- Shared memory of a grouped GEMM's group table (templates/common/gemm_groups.cuh: the groups'
-- first rows and first tiles, GROUPS + 1 ints each; on sm90 past the epilogue warps' two
-- barriers), 0 for any other GEMM.
local function group_bytes(info)
  return info.grouped and 16 + 8 * (info.grouped.groups + 1) or 0
end

-- Stream-K (without clusters): nil (off), "all" (any partial last wave) or "first" (only a
-- grid's one partial wave: fp8 by default, E.STREAMK.fp8), as the streamk setting says.
local function streamk_mode(fp8, set)
  if set.streamk == "0" or cluster_m(set) ~= 1 then return nil end
  return (fp8 and set.streamk ~= "1") and E.STREAMK.fp8 or "all"
end
-- The l2hint setting as hints on the sm90 kernel's operand copies (without clusters): alast (A
-- evict_last: a group's m panels are read again by its later waves), bfirst (B evict_first),
-- both. Returns { A = "last"|nil, B = "first"|nil }.
local function l2_hints(v)
  return { A = (v == "alast" or v == "both") and "last" or nil, B = (v == "bfirst" or v == "both") and "first" or nil }
end

-- The stream-K workspace: the flags, then one fp32 128 x BN partial tile per CTA.
local function streamk_bytes(bn) return E.SK_FLAG_WORDS * 4 + E.SLOTS * 128 * bn * 4 end
-- The epilogue warps' buffers (after stream-K's, when both): one 128 x BN fp32 tile per CTA.
local function ewg_bytes(bn) return E.SLOTS * 128 * bn * 4 end

local function launch(info, tile, grid_tile, cm, staged, ewg, sk)
  -- (ewg: the epilogue warps' two barriers)
  local l = { block = { 384, 1, 1 } }
  -- CTAs come in clusters of cm along grid y (no cluster on the mma kernel: it only reads
  -- the CTA's linear index)
  cm = grid_tile and cm or 1
  l.cluster = { 1, tile and cm or 1, 1 }
  if tile then
    l.smem = sm90_smem(tile.bn, tile.stages, staged, ewg, group_bytes(info))
    assert(l.smem <= E.SMEM_MAX_SM90, "kiln.engines.gemm: a tile needs more shared memory than sm_90 gives a block")
  else
    l.smem = E.MMA_STAGES * (128 + E.MMA_BN) * 128 + group_bytes(info)
    assert(l.smem <= E.SMEM_MAX, "kiln.engines.gemm: the mma kernel needs more shared memory than sm_80 gives a block")
  end
  l.grid = { grid_rule(info, grid_tile and grid_tile.bn or E.MMA_BN, cm, sk), cm, 1 }
  return l
end

-- Dual GEMM (two matmuls of one A: lower's sibling matmuls): the sm90 kernel's 128 x 256
-- tile holds both products, columns n0 .. n0 + 127 of B in its first 128 lines and of B2 in
-- the other 128 (two copies per stage, A's once); the mma kernel's 128 x 192 tile holds 96
-- columns of each, interleaved in groups of 16; the epilogue gets each element of both.
E.DUAL_TILE = { bn = 256, stages = 4 }

-- Whether matmuls a and b of g become one dual GEMM kernel on target (both paths build it,
-- so every SM of a pack agrees): one A, Bs and Cs alike (dims, strides, dtype), 16-bit
-- operands in layouts copied in 16-byte chunks, rank 2, the cooperative schedule without
-- clusters.
function E.pairs(a, b, g, target)
  local set = settings.current()
  if target.sm < 80 or a.op ~= "matmul" or b.op ~= "matmul" or a.inputs.A ~= b.inputs.A then return false end
  if cluster_m(set) ~= 1 or set.schedule == "pingpong" then return false end
  for _, m in ipairs({ a, b }) do
    for _, p in ipairs({ "M_override", "N_override", "K_override" }) do if m.inputs[p] then return false end end
  end
  local A, B1, B2 = g.by_uid[a.inputs.A], g.by_uid[a.inputs.B], g.by_uid[b.inputs.B]
  local C1, C2 = g.by_uid[a.outputs.C], g.by_uid[b.outputs.C]
  local function same(x, y)
    return x.dtype == y.dtype and shape.format(x.dims) == shape.format(y.dims) and shape.format(x.strides) == shape.format(y.strides)
  end
  if not SIXTEEN[A.dtype] or B1.dtype ~= A.dtype or not same(B1, B2) or not same(C1, C2) or #C1.dims ~= 2 then return false end
  local N = C1.dims[2]
  local oa, ob = operand(A, "A"), operand(B1, "B")
  local esz = dtypes.size(A.dtype)
  return type(N) == "number" and N >= 64 and N % 2 == 0 and type(A.dims[#A.dims]) == "number"
    and oa ~= nil and ob ~= nil and chunks_aligned(oa, esz) and chunks_aligned(ob, esz)
end

-- The id suffix of the settings that a plan id shows nowhere else, where not their defaults.
local function settings_suffix(set)
  local out = {}
  for _, k in ipairs({ "cluster", "group", "fill", "l2hint" }) do
    if set[k] ~= E.settings[k][1] then out[#out + 1] = ":" .. k .. set[k] end
  end
  return table.concat(out)
end

function E.propose(group, g, target)
  if target.sm < 80 then return nil, "needs sm_80 or later (mma.sync bf16, cp.async)" end
  local set = settings.current()
  local sched, epi_how = set.schedule, set.epilogue
  local info, why = analyze(group, g, target)
  if not info then return nil, why end
  local plans = {}
  local blocker = sm90_blocker(info)
  -- ping-pong: one 128 x 128 tile, no stream-K, no clusters; fp8 keeps the cooperative kernel
  -- (its per-k-block promotion needs a second set of BN accumulators: 256 registers of a 128-row
  -- tile), and the generated source says so
  -- a grouped GEMM: the cooperative kernel's plain schedule (its tiles end at their group's last
  -- row: direct stores, no stream-K, no clusters)
  local grouped = info.grouped ~= nil
  local pp = not blocker and sched == "pingpong" and not info.fp8 and not grouped
  local note = not blocker and sched == "pingpong" and info.fp8 and
    "// gemm.schedule=pingpong declined: fp8 (its promotion needs 2 x 128 accumulators per thread); the cooperative kernel" or ""
  local order = not blocker and (pp and { { tile = E.SM90_PP_TILE } } or sm90_order(info.N, info.fp8, set.tile)) or nil
  local dual = info.B2 ~= nil
  if dual then
    -- (E.pairs merges only what both paths build: no clusters, no ping-pong)
    if blocker or pp or cluster_m(set) ~= 1 then
      return fail("a dual GEMM needs the cooperative schedule without clusters and 16-byte aligned operands (%s)",
        blocker or "the schedule or cluster setting")
    end
    order = { { tile = E.DUAL_TILE } }
  end
  -- stream-K: the workspace and the flags' init kernel are in every SM's plan (one kernel list)
  local sk_mode = order ~= nil and not pp and not grouped and streamk_mode(info.fp8, set) or nil
  local sk = sk_mode ~= nil
  local cm = (pp or grouped) and 1 or cluster_m(set)
  -- the staged output (the cooperative kernel's; the mma kernel takes its tensor map too)
  local staged = order ~= nil and not pp and not grouped and epi_how ~= "direct" and staged_output(info, group, g) or nil
  -- the epilogue warps: the sm90 kernel's; the mma kernel takes their workspace too (one
  -- parameter list and workspace rule for every SM's kernel)
  local kblocks = (info.K + 128 // info.esz - 1) // (128 // info.esz)
  local ewg = staged ~= nil and not info.fp8 and not dual and
    (epi_how == "warpgroup" or (epi_how == "auto" and E.EWG.auto and kblocks >= E.EWG.min_kb))
  local suffix = (dual and ":dual" or "") .. (grouped and ":grouped" or "") .. (sk and (sk_mode == "first" and ":sk1" or ":sk") or "") .. (pp and ":pp" or "") .. (staged and ":ts" or "") .. (ewg and ":ewg" or "") .. settings_suffix(set)
  -- the tile whose B box the tensor maps describe (every SM's kernel takes the same maps)
  -- (a dual tile's B boxes, and its output tile, are half its lines)
  local tma_bn = order and order[1].tile.bn // (dual and 2 or 1)
  if order and target.sm == 90 and target.arch_specific then
    -- each tile with stream-K twice: its pieces per tile fixed at E.STREAMK.pieces (":p4",
    -- first: 1.06x the other at M <= 128 over the shape sweep's 45 small-M GEMMs on an H100,
    -- 1.09x at M = 1 and 16, slower only at K of 14336 and more) and grown for a tile of few
    -- live rows (ranked below every tile: a candidate); they differ only where M < 128
    for _, fixed in ipairs(sk and { false, true } or { false }) do
      for i, b in ipairs(order) do
        local t = { bn = b.tile.bn, stages = sm90_stages(b.tile, staged, ewg, group_bytes(info)) }
        local bno = t.bn // (dual and 2 or 1)
        local sfx = fixed and suffix:gsub(":sk1?", "%0p" .. E.STREAMK.pieces, 1) or suffix
        plans[#plans + 1] = { id = string.format("gemm:v%d:sm90:128x%dx%d:s%d%s", E.version, t.bn, 128 // info.esz, t.stages, sfx),
                              knobs = { path = pp and "sm90pp" or "sm90", bn = t.bn, stages = t.stages, promote = info.fp8,
                                        tma = true, sk = sk, sk_mode = sk_mode, sk_fixed = fixed, sk_bn = t.bn, cm = cm, tma_bn = bno,
                                        note = note, staged = staged, ewg = ewg, dual = dual },
                                rank = (fixed and 100 or 50) - i, info = info, launch = launch(info, t, { bn = bno }, cm, staged, ewg, sk) }
      end
    end
  end
  local loader = (info.aligned and not info.fp8) and "async" or "elem"
  -- (the stream-K workspace and the grid as the sm90 plan's: one launch for every SM)
  plans[#plans + 1] = { id = string.format("gemm:v%d:mma:128x%dx64:s%d:%s%s", E.version, E.MMA_BN, E.MMA_STAGES, loader, suffix),
                        knobs = { path = "mma", loader = loader, stages = E.MMA_STAGES, tma = order ~= nil, sk = sk,
                                  sk_bn = order and order[1].tile.bn, cm = cm, tma_bn = tma_bn, note = "", staged = staged,
                                  ewg = ewg, dual = dual },
                        rank = 10, info = info, launch = launch(info, nil, tma_bn and { bn = tma_bn }, cm, nil, nil, sk) }
  return plans
end

-- ---------------------------------------------------------------------------------------
-- build

-- PTX type names of the operand dtypes
local PTX_T = { bf16 = "bf16", fp16 = "f16", fp8_e4m3 = "e4m3", fp8_e5m2 = "e5m2" }

-- The wgmma calls for one m64 x BN x k tile: d += A * B (kiln_wgmma_tile) and d = A * B
-- (kiln_wgmma_tile_first), d being BN/2 fp32 registers per thread; the operands' types and
-- majorness from info.
local function wgmma_fn(bn, info)
  local atype, btype = PTX_T[info.A.dtype], PTX_T[info.B.dtype]
  local ta, tb = info.oa.kmajor and 0 or 1, info.ob.kmajor and 0 or 1
  local k = (atype == "e4m3" or atype == "e5m2") and 32 or 16
  local n = bn // 2
  local regs, outs = {}, {}
  for i = 0, n - 1 do regs[#regs + 1] = "%" .. i; outs[#outs + 1] = string.format("\"+f\"(d[%d])", i) end
  local trans = k == 16 and string.format(", %d, %d", ta, tb) or ""
  local out = {}
  for _, v in ipairs({ { "tile", 1, "d += A * B" }, { "tile_first", 0, "d = A * B" } }) do
    out[#out + 1] = string.format([[
// %s: one wgmma.mma_async m64n%dk%d (%s x %s -> f32) on shared-memory descriptors.
__device__ __forceinline__ void kiln_wgmma_%s(float (&d)[%d], kiln_u64 da, kiln_u64 db) {
  asm volatile(
    "{ .reg .pred p; setp.ne.b32 p, %d, 0;\n"
    "wgmma.mma_async.sync.aligned.m64n%dk%d.f32.%s.%s {%s}, %%%d, %%%d, p, 1, 1%s; }"
    : %s
    : "l"(da), "l"(db) : "memory");
}]], v[3], bn, k, atype, btype, v[1], n, v[2], bn, k, atype, btype, table.concat(regs, ", "), n, n + 1, trans,
      table.concat(outs, ", "))
  end
  return table.concat(out, "\n")
end

-- The epilogue's steps share one table `e`: the kernel K and its source, the plan's info, the
-- group and graph, and the lines they make: setup (once), pre (per pair), body (per element of
-- the pair), post (per pair, after it), full (the inputs read per element of C: pointer,
-- element size), value (each uid's value as an expression).

-- One input's read: a scalar parameter, once, per pair (a full or column input), per row, or
-- per element.
local function epilogue_input(e, uid)
  local K, t = e.K, e.g.by_uid[uid]
  if t.role == "constant" or t.role == "scalar" then
    e.value[uid] = K:scalar(uid)
    return
  end
  local st = pw.storage(e.src, t.dtype)
  local size = dtypes.size(t.dtype)
  local p = K:ptr(uid)
  local how = e.info.access[uid]
  local pre, body = e.pre, e.body
  if how == "once" then
    e.setup[#e.setup + 1] = string.format("  const float q%d = %s;", uid, fmt(st.load, p .. "[0]"))
    e.value[uid] = "q" .. uid
  elseif how == "full" or how == "col" then
    if how == "full" then e.full[#e.full + 1] = { p = p, size = size } end
    pre[#pre + 1] = string.format("    alignas(%d) %s r%d[2];", 2 * size, st.ctype, uid)
    pre[#pre + 1] = pw.vector_copy("r" .. uid, string.format("%s + %s", p, how == "full" and "i0" or "col"), st.ctype, 2, size, "    ")
    body[#body + 1] = string.format("      const float v%d = %s;", uid, fmt(st.load, string.format("r%d[j]", uid)))
    K:need_align(uid, 2 * size)
    e.value[uid] = "v" .. uid
  elseif how == "row" then
    local off = pw.offset_expr(t, e.info.Ed, "(i0 - col)")
    pre[#pre + 1] = string.format("    const float v%d = %s;", uid, fmt(st.load, string.format("%s[%s]", p, off)))
    e.value[uid] = "v" .. uid
  else
    local off = pw.offset_expr(t, e.info.Ed, "(i0 + j)")
    body[#body + 1] = string.format("      const float v%d = %s;", uid, fmt(st.load, string.format("%s[%s]", p, off)))
    e.value[uid] = "v" .. uid
  end
end

-- the accumulators (C, and a dual GEMM's C2 from d0, d1), each rounded to its dtype first
-- if it is stored narrower and read again
local function epilogue_accumulators(e)
  local info, body = e.info, e.body
  for _, acc in ipairs({ { info.C, "c" }, info.C2 and { info.C2, "d" } or nil }) do
    local t, v = acc[1], acc[2]
    body[#body + 1] = string.format("      float v%d = j ? %s1 : %s0;", t.uid, v, v)
    if t.dtype ~= "fp32" and lower.written(t) and e.read_later[t.uid] then
      local st = pw.storage(e.src, t.dtype)
      body[#body + 1] = string.format("      v%d = %s;", t.uid, fmt(st.load, fmt(st.store, "v" .. t.uid)))
    end
    e.value[t.uid] = "v" .. t.uid
  end
end

-- An element output's store: its pair packed, then written to shared memory at sd (the
-- staged output) or to its memory.
local function epilogue_store(e, uid, staged)
  local K, t, pre, post = e.K, e.g.by_uid[uid], e.pre, e.post
  local st = pw.storage(e.src, t.dtype)
  local size = dtypes.size(t.dtype)
  local p = K:ptr(uid, true)
  local o = pw.out_regs(st, 2, "w" .. uid, 2 * size)
  pre[#pre + 1] = "    " .. o.decl
  e.body[#e.body + 1] = "      " .. o.set(e.value[uid])
  if o.pack then post[#post + 1] = "    " .. o.pack end
  local words = string.format("reinterpret_cast<const kiln_u32 *>(w%d)", uid)
  if uid == staged and size == 2 then
    post[#post + 1] = string.format("    kiln_st_shared_b32(sd, %s[0]);", words)
  elseif uid == staged then
    post[#post + 1] = string.format("    kiln_st_shared_v2(sd, %s[0], %s[1]);", words, words)
  else
    post[#post + 1] = "    if (live)"
    post[#post + 1] = pw.vector_copy(string.format("%s + i0", p), "w" .. uid, st.ctype, 2, size, "    ")
  end
  K:need_align(uid, 2 * size)
end

-- outputs: element outputs as pairs, amax outputs as a running max of |value| bits (the amax
-- accumulators, as a list)
local function epilogue_outputs(e, staged)
  local amax, body = {}, e.body
  for _, uid in ipairs(e.group.outputs) do
    local r = e.info.amax_of[uid]
    if r then
      local var = "am" .. #amax
      amax[#amax + 1] = { var = var, out = uid }
      body[#body + 1] = string.format("      if (live) %s = max(%s, __float_as_uint(fabsf(%s)));", var, var, e.value[r.inputs.input])
    else
      epilogue_store(e, uid, staged)
    end
  end
  return amax
end

-- The epilogue lambda's lines, from the pre, body and post lines.
local function epilogue_lambda(e, lines, staged)
  lines[#lines + 1] = "  // the fused epilogue of columns col, col + 1 of one row of C (fp32 accumulators c0, c1)"
  -- sd: where the staged output's pair goes in shared memory (the sm90 kernel names it either way);
  -- live: the pair is inside C (the staged loop computes the pairs past M and N too, at clamped
  -- indices, and stores or counts only the live ones)
  lines[#lines + 1] = "  auto kiln_epilogue = [&](float c0, float c1, kiln_i64 bt, kiln_i64 row, kiln_i64 col, kiln_u32 sd = 0u, bool live = true"
    .. ", float d0 = 0.0f, float d1 = 0.0f) {"
  if not staged then lines[#lines + 1] = "    (void)sd;" end
  lines[#lines + 1] = "    (void)live, (void)d0, (void)d1;"
  lines[#lines + 1] = string.format("    const kiln_i64 i0 = (bt * M + row) * %dLL + col;  // flat index in C", e.info.N)
  for _, l in ipairs(e.pre) do lines[#lines + 1] = l end
  lines[#lines + 1] = "#pragma unroll"
  lines[#lines + 1] = "    for (int j = 0; j < 2; j++) {"
  for _, l in ipairs(e.body) do lines[#lines + 1] = l end
  lines[#lines + 1] = "    }"
  for _, l in ipairs(e.post) do lines[#lines + 1] = l end
  lines[#lines + 1] = "  };"
end

-- the tile's rows of the per-element inputs go to L2 while its mainloop runs: the epilogue's
-- loads then wait on L2, not DRAM (thread t < 64 of a consumer warpgroup: row t of its half;
-- a hint, so a row that is not 16-byte aligned is skipped and a ragged end left out)
local function epilogue_prefetch(e, lines)
  lines[#lines + 1] = "  auto kiln_epilogue_prefetch = [&](kiln_i64 bt, kiln_i64 m0, kiln_i64 n0) {"
  if #e.full == 0 then
    lines[#lines + 1] = "    (void)bt, (void)m0, (void)n0;"
  else
    lines[#lines + 1] = "    const kiln_i64 row = m0 + half * 64 + t;"
    lines[#lines + 1] = "    if (t >= 64 || row >= M) return;"
    lines[#lines + 1] = "    const kiln_i64 cols = N - n0 < BNO ? N - n0 : BNO;"
    for _, f in ipairs(e.full) do
      lines[#lines + 1] = string.format("    { const auto r_ = %s + ((bt * M + row) * %dLL + n0); const kiln_u32 b_ = (kiln_u32)(cols * %d) & ~15u;",
        f.p, e.info.N, f.size)
      lines[#lines + 1] = "      if (b_ && !(reinterpret_cast<kiln_u64>(r_) & 15)) kiln_prefetch_l2_bulk(r_, b_); }"
    end
  end
  lines[#lines + 1] = "  };"
end

-- The epilogue: a lambda over a pair of accumulator values (columns col, col + 1 of one row;
-- d0, d1: a dual GEMM's second product there), plus what the kernel sets up for it. Returns { setup = lines, lambda = text, amax = {..} }.
-- Output `staged` (a uid, or nil) is written to shared memory at sd instead of to C's memory.
local function epilogue(K, info, group, g, staged, sm90)
  local e = { K = K, src = K.src, info = info, group = group, g = g, setup = {}, body = {}, pre = {}, post = {},
              full = {}, value = {}, read_later = pw.read_set(group.nodes) }
  for _, uid in ipairs(group.inputs) do
    if not info.operand[uid] then epilogue_input(e, uid) end
  end
  epilogue_accumulators(e)
  pw.emit_nodes(group.epilogue or {}, e.value, e.body, { g = g, src = e.src, space = info.Ed, index = "(i0 + j)", indent = "      ",
                                                         read_later = e.read_later })
  local amax = epilogue_outputs(e, staged)
  local lines = {}
  epilogue_lambda(e, lines, staged)
  if sm90 then epilogue_prefetch(e, lines) end
  return { setup = e.setup, lambda = table.concat(lines, "\n"), amax = amax }
end

-- Runtime sizes and operand addressing (bytes), as kernel-body lines.
local function setup_lines(K, info)
  local A, B = info.A, info.B
  local oa, ob = info.oa, info.ob
  local esz = info.esz
  K:note_dyn(info.C.dims); K:note_dyn(A.dims); K:note_dyn(B.dims); K:note_dyn(A.strides); K:note_dyn(B.strides)
  local pa, pb = K:ptr(A.uid), K:ptr(B.uid)
  local l = {}
  l[#l + 1] = string.format("  const kiln_i64 M = %s;", cdim(info.Md))
  l[#l + 1] = string.format("  const kiln_i64 batches = %s;", cdim(info.batch))
  l[#l + 1] = string.format("  const kiln_u8 *__restrict__ gA = reinterpret_cast<const kiln_u8 *>(%s);", pa)
  l[#l + 1] = string.format("  const kiln_u8 *__restrict__ gB = reinterpret_cast<const kiln_u8 *>(%s);", pb)
  -- a dual GEMM's B2 (the same layout as B), B itself otherwise
  l[#l + 1] = string.format("  const kiln_u8 *__restrict__ gB2 = %s;  (void)gB2;",
    info.B2 and string.format("reinterpret_cast<const kiln_u8 *>(%s)", K:ptr(info.B2.uid)) or "gB")
  l[#l + 1] = string.format("  const kiln_i64 a_bs = %s, b_bs = %s;  // batch strides (bytes)",
    oa.bs and string.format("%s * %d", cdim(oa.bs), esz) or "0", ob.bs and string.format("%s * %d", cdim(ob.bs), esz) or "0")
  l[#l + 1] = string.format("  const kiln_i64 lda = %s * %d, ldb = %s * %d;  // operand line strides (bytes)", cdim(oa.ld), esz,
    cdim(ob.ld), esz)
  -- element strides (mn, k) for the element loader
  l[#l + 1] = string.format("  const kiln_i64 a_smn = %s, a_sk = %s, b_smn = %s, b_sk = %s;  // element strides",
    cdim(oa.sr), cdim(oa.sc), cdim(ob.sc), cdim(ob.sr))
  l[#l + 1] = "  (void)lda; (void)ldb; (void)a_smn; (void)a_sk; (void)b_smn; (void)b_sk;"
  -- a grouped GEMM's expert offsets (kiln_gemm_groups)
  l[#l + 1] = string.format("  const int *const g_offsets = %s;  (void)g_offsets;",
    info.grouped and K:ptr(info.grouped.offsets.uid) or "nullptr")
  -- block scales (kiln_gemm_scale_a/b): the tensor's bytes and its strides along the operand's
  -- (mn, k) axes, in elements; none where the operand is not block-scaled
  for _, port in ipairs({ "A", "B" }) do
    local sc, x = info.scales[port], port:lower()
    if sc then
      K:note_dyn(sc.t.dims); K:note_dyn(sc.t.strides)
      local st = sc.t.strides
      local smn, sk = port == "A" and st[1] or st[2], port == "A" and st[2] or st[1]
      l[#l + 1] = string.format("  const kiln_u8 *const %s_sc = reinterpret_cast<const kiln_u8 *>(%s);", x, K:ptr(sc.t.uid))
      l[#l + 1] = string.format("  const kiln_i64 %s_sc_mn = %s, %s_sc_k = %s;", x, cdim(smn), x, cdim(sk))
    else
      l[#l + 1] = string.format("  const kiln_u8 *const %s_sc = nullptr;\n  const kiln_i64 %s_sc_mn = 0, %s_sc_k = 0;", x, x, x)
    end
    l[#l + 1] = string.format("  (void)%s_sc; (void)%s_sc_mn; (void)%s_sc_k;", x, x, x)
  end
  return l
end

-- The block scale of element (mn, k) of each operand: kiln_gemm_scale_a/b(scales, mn, k,
-- stride mn, stride k), 1 where the operand has none.
local function scale_fns(src, info)
  local out = {}
  for _, port in ipairs({ "A", "B" }) do
    local sc = info.scales[port]
    local body = "(void)sc, (void)mn, (void)k, (void)s_mn, (void)s_k;\n  return 1.0f;"
    if sc then
      local st = pw.scale_storage(src, sc.t.dtype)
      body = "return " .. fmt(st.load, string.format("reinterpret_cast<const %s *>(sc)[(mn / %d) * s_mn + (k / %d) * s_k]",
        st.ctype, sc.mn, sc.k)) .. ";"
    end
    out[#out + 1] = string.format("__device__ __forceinline__ float kiln_gemm_scale_%s(const kiln_u8 *sc, kiln_i64 mn, kiln_i64 k, "
      .. "kiln_i64 s_mn, kiln_i64 s_k) {\n  %s\n}", port:lower(), body)
  end
  return table.concat(out, "\n")
end

-- Tensor maps of A and B for the TMA producer: parameters `tm<uid>` (the manifest's "tmap"
-- params: map dim 0 is the operand's contiguous axis, 128-byte boxes, 128-byte swizzle, then
-- the other matrix axis, then the batch axis when the operand has one) and the copy lines of
-- one k-block (k0) into the stage at sa (A) and sb (B). K-major: one box of LINES lines;
-- MN-major: LINES/64 boxes of 64 k-rows, 8 KB apart (the layout the wgmma descriptors read).
local function tma_operands(K, info, bn, cm, l2hint)
  local decl, load, prefetch = {}, {}, {}
  local hint = cm == 1 and l2_hints(l2hint) or {}
  -- (a dual GEMM's B2 goes to the stage's B lines bn on: bn is the B box, half the tile)
  for _, which in ipairs(info.B2 and { "A", "B", "B2" } or { "A", "B" }) do
    local o = ({ A = info.oa, B = info.ob, B2 = info.ob2 })[which]
    local t, R = o.t, o.rank
    local lines, mn0 = which == "A" and 128 or bn, which == "A" and "m0" or "n0"
    local dst = ({ A = "sa", B = "sb", B2 = string.format("(sb + %du)", bn * 128) })[which]
    local contig = o.contig == "c" and R - 1 or R - 2          -- 0-based tensor axes
    local other = o.contig == "c" and R - 2 or R - 1
    local per_line = 128 // info.esz
    -- B is copied in cm parts (multicast to the cluster): K-major, cm boxes of lines/cm lines;
    -- MN-major, the 64-line boxes j = rank, rank + cm, ...
    local split = which ~= "A" and cm or 1
    local dims = { { axis = contig, box = per_line }, { axis = other, box = o.kmajor and lines // split or per_line } }
    if o.bs then dims[3] = { axis = 0, box = 1 } end
    local name = "tm" .. t.uid
    K.params[#K.params + 1] = "const __grid_constant__ kiln_tmap " .. name
    K.mparams[#K.mparams + 1] = { kind = "tmap", uid = t.uid, dims = dims, swizzle = 3 }
    local axes, boxes = {}, {}
    for i, d in ipairs(dims) do axes[i], boxes[i] = d.axis, d.box end
    decl[#decl + 1] = string.format("// kiln tmap %s: %s axes %s box %s", name, which, table.concat(axes, ","), table.concat(boxes, ","))
    prefetch[#prefetch + 1] = string.format("      kiln_tma_prefetch(&%s);", name)
    -- (B's batch coordinate is eb: the expert of a grouped GEMM's tile, else the batch)
    local batch = o.bs and (which == "A" and ", (int)bt" or ", (int)eb") or ""
    local fn = (o.bs and "kiln_tma_load_3d" or "kiln_tma_load_2d") .. (split > 1 and "_mc" or "")
    local mc = split > 1 and string.format(", (kiln_u16)%d", (1 << cm) - 1) or ""
    if hint[which:sub(1, 1)] then
      -- the policy rides where the multicast mask would: the last argument
      fn, mc = fn .. "_hint", ", pol_" .. which:sub(1, 1)
      if which ~= "B2" then
        prefetch[#prefetch + 1] = string.format("      const kiln_u64 pol_%s = kiln_l2_evict_%s();", which, hint[which])
      end
    end
    if o.kmajor and split == 1 then
      load[#load + 1] = string.format("          %s(%s, &%s, k0, (int)%s%s, full%s);", fn, dst, name, mn0, batch, mc)
    elseif o.kmajor then
      load[#load + 1] = string.format("          %s(%s + rank * %du, &%s, k0, (int)%s + (int)rank * %d%s, full%s);", fn, dst,
        lines // split * 128, name, mn0, lines // split, batch, mc)
    elseif split == 1 then
      for j = 0, lines // 64 - 1 do
        load[#load + 1] = string.format("          %s(%s + %du, &%s, (int)%s + %d, k0%s, full%s);", fn, dst, j * 8192, name, mn0,
          j * 64, batch, mc)
      end
    else
      load[#load + 1] = string.format("          for (int j = (int)rank; j < %d; j += %d) %s(%s + j * 8192u, &%s, (int)%s + 64 * j, k0%s, full%s);",
        lines // 64, split, fn, dst, name, mn0, batch, mc)
    end
  end
  return table.concat(decl, "\n"), table.concat(load, "\n"), table.concat(prefetch, "\n")
end

-- The tensor map of the staged output (parameter `tm<uid>`: 128-byte rows of 64 lines, 16 with
-- epilogue warps, then the batch axis when C has one) and the store of one chunk: shared memory
-- at buf to columns c0.., rows c1.. of batch bt.
local function tma_output(K, info, uid, g, ewg)
  local t, R = g.by_uid[uid], #info.Ed
  local dims = { { axis = R - 1, box = 128 // dtypes.size(t.dtype) }, { axis = R - 2, box = ewg and 16 or 64 } }
  if R == 3 then dims[3] = { axis = 0, box = 1 } end
  local name = "tm" .. uid
  K.params[#K.params + 1] = "const __grid_constant__ kiln_tmap " .. name
  K.mparams[#K.mparams + 1] = { kind = "tmap", uid = uid, dims = dims, swizzle = 3 }
  K:need_align(uid, 16)
  local axes, boxes = {}, {}
  for i, d in ipairs(dims) do axes[i], boxes[i] = d.axis, d.box end
  local decl = string.format("// kiln tmap %s: C axes %s box %s", name, table.concat(axes, ","), table.concat(boxes, ","))
  local store = R == 3 and string.format("kiln_tma_store_3d(&%s, buf, c0, c1, (int)bt);", name)
    or string.format("kiln_tma_store_2d(&%s, buf, c0, c1);", name)
  return decl, store
end

-- The k between the mma kernel's promotions of block-scaled products: the largest range within
-- one scale block of each operand (the gcd of their depths, whole k16 steps: E.dequantizes).
local function scale_k(info)
  local function gcd(a, b) if b == 0 then return a end return gcd(b, a % b) end
  local k = 0
  for _, sc in pairs(info.scales) do k = gcd(sc.k, k) end
  return k
end

-- The element loader's element read: one element of A or B converted to the 16-bit smem type.
local function elem_fns(src, info, smem_t)
  local out = {}
  for _, which in ipairs({ "a", "b" }) do
    local t = which == "a" and info.A or info.B
    local st = pw.storage(src, t.dtype)
    local expr
    if dtypes.size(t.dtype) == 2 then
      expr = string.format("reinterpret_cast<const kiln_u16 *>(p)[0]")
    else
      src:need("common/fp16.cuh")
      expr = string.format("kiln_f32_to_fp16(%s)", fmt(st.load, "p[0]"))
    end
    out[#out + 1] = string.format("__device__ __forceinline__ kiln_u16 kiln_gemm_elem_%s(const kiln_u8 *p) { return %s; }", which, expr)
  end
  return table.concat(out, "\n")
end

-- E.build's steps share one table `b`: the plan, its info and knobs, the group, graph and
-- symbol, the kernel K and its source, and what the steps before made.

-- parameters in a readable order: inputs by uid, then outputs by uid
local function pointer_params(b)
  for _, uid in ipairs(b.group.inputs) do
    local t = b.g.by_uid[uid]
    if t.role ~= "constant" and t.role ~= "scalar" then b.K:ptr(uid) end
  end
  for _, uid in ipairs(b.group.outputs) do
    if not b.info.amax_of[uid] then b.K:ptr(uid, true) end
  end
end

-- tensor maps for the sm90 kernel; every SM's kernel takes them (one parameter list per plan):
-- b.tmaps, b.tma_load, b.tma_prefetch, and b.store_chunk, the staged output's store
local function tensor_maps(b)
  local K, info, knobs = b.K, b.info, b.knobs
  if knobs.tma then
    b.src:need("common/tma.cuh")
    b.tmaps, b.tma_load, b.tma_prefetch = tma_operands(K, info, knobs.tma_bn, knobs.cm, settings.get("l2hint"))
  end
  b.store_chunk = "(void)c0, (void)c1;  // nothing is staged"
  if knobs.staged then
    local decl
    decl, b.store_chunk = tma_output(K, info, knobs.staged, b.g, knobs.ewg)
    b.tmaps = b.tmaps .. "\n" .. decl
  end
end

-- The amax accumulators' declaration and the lines that publish them ("" without amax outputs).
local function amax_lines(b)
  local amax = b.epi.amax
  if #amax == 0 then return "", "" end
  local vars, publish = {}, {}
  for _, acc in ipairs(amax) do vars[#vars + 1] = acc.var .. " = 0u" end
  b.src:need("common/amax.cuh")
  b.src:need("common/pdl.cuh")
  publish[1] = "  kiln_pdl_wait();  // launched early (pdl): the init kernel's zeros are in place past this point"
  for _, acc in ipairs(amax) do
    publish[#publish + 1] = string.format("  %s = kiln_warp_max_u32(%s);", acc.var, acc.var)
    publish[#publish + 1] = string.format("  if ((threadIdx.x & 31) == 0) kiln_amax_publish(%s, %s);",
      b.K:ptr(acc.out, true), acc.var)
  end
  return "  kiln_u32 " .. table.concat(vars, ", ") .. ";", table.concat(publish, "\n")
end

-- The kernel's one-line description in its source.
local function description(info, group)
  return string.format("%s %s x %s -> %s, N %d, K %d, A %s-major, B %s-major%s%s", info.anchor.name, info.A.dtype,
    info.B.dtype, info.C.dtype, info.N, info.K, info.oa.kmajor and "K" or "M", info.ob.kmajor and "K" or "N",
    next(info.scales) and ", block-scaled" or "", #(group.epilogue or {}) > 0 and string.format(", epilogue of %d op%s", #group.epilogue, #group.epilogue == 1 and "" or "s") or "")
end

-- what both sm90 templates take
local function sm90_vars(b, bn, stages)
  local info, knobs = b.info, b.knobs
  return {
    what = b.what, symbol = b.symbol, params = b.K:finish_params(), BN = bn, STAGES = stages, ESZ = info.esz,
    N = info.N, K = info.K, A_KMAJOR = info.oa.kmajor and "true" or "false", B_KMAJOR = info.ob.kmajor and "true" or "false",
    REG_CONSUMER = knobs.ewg and E.EWG.reg_consumer or E.REG_CONSUMER,
    REG_PRODUCER = knobs.ewg and E.EWG.reg_producer or E.REG_PRODUCER,
    tmaps = b.tmaps or "", load = b.tma_load, prefetch = b.tma_prefetch,
    setup = table.concat(b.setup, "\n"), epilogue = b.epi.lambda, amax_decl = b.amax_decl,
    amax_publish = b.amax_publish,
    GROUPED = info.grouped and "true" or "false", GROUPS = info.grouped and info.grouped.groups or 1,
  }
end

-- The sm90 kernel's stream-K flags and partial sums and its epilogue warps' sums, in the
-- workspace (null pointers where the plan has none).
local function sm90_workspace_decl(b)
  local sk, ws, knobs = b.sk, b.ws, b.knobs
  local decl = { sk and string.format("  kiln_u32 *const sk_flags = reinterpret_cast<kiln_u32 *>(%s);\n"
    .. "  float *const sk_part = %s + %d;  // slot b: 128 x BN floats", ws, ws, E.SK_FLAG_WORDS)
    or "  kiln_u32 *const sk_flags = nullptr;\n  float *const sk_part = nullptr;" }
  decl[2] = knobs.ewg and string.format("  float *const ewg_buf = %s + %d + (kiln_i64)blockIdx.x * (128 * BN);  // this CTA's sums",
    ws, sk and streamk_bytes(knobs.sk_bn) // 4 or 0) or "  float *const ewg_buf = nullptr;"
  return table.concat(decl, "\n")
end

-- The sm90 template's variables beyond sm90_vars: block scales, promotion, cluster, staged
-- epilogue, stream-K and the epilogue warps.
local function sm90_only_vars(b, vars)
  local info, knobs, sk = b.info, b.knobs, b.sk
  vars.BSCALE, vars.SCALE_BN = next(info.scales) and "true" or "false", info.scales.B and info.scales.B.mn or 0
  vars.PROMOTE, vars.CM = knobs.promote and "true" or "false", b.plan.launch.cluster[2]
  vars.EPI, vars.OSZ = knobs.staged and "true" or "false", knobs.staged and dtypes.size(b.g.by_uid[knobs.staged].dtype) or 2
  vars.EPI_BYTES = knobs.staged and E.EPI_BYTES or 0
  vars.store_chunk = b.store_chunk
  vars.SK, vars.SK_SLOTS, vars.SK_PIECES = sk and "true" or "false", E.SLOTS, E.STREAMK.pieces
  vars.SK_FILL_PCT, vars.SK_MIN_SAVED = tonumber(settings.get("fill")), E.STREAMK.min_saved
  vars.SK_ONE_WAVE = knobs.sk_mode == "first" and "true" or "false"
  vars.SK_ADAPT = knobs.sk_fixed and "false" or "true"
  vars.DUAL = knobs.dual and "true" or "false"
  vars.EWG = knobs.ewg and "true" or "false"
  vars.GROUP_M = tonumber(settings.get("group"))
  vars.sk_decl = sm90_workspace_decl(b)
end

-- The sm90 kernel (warp-specialized: a producer warp group, consumer warp groups): its source.
local function sm90_source(b)
  local src, info, knobs = b.src, b.info, b.knobs
  src:need("common/mbarrier.cuh")
  src:need("common/wgmma.cuh")
  src:need("common/cluster.cuh")
  src:need("common/flag.cuh")
  src:need("common/pdl.cuh")
  src:need("common/named_barrier.cuh")
  local bn, stages = knobs.bn, knobs.stages
  src:add(wgmma_fn(bn, info))
  src:add(scale_fns(src, info))
  local vars = sm90_vars(b, bn, stages)
  if knobs.note ~= "" then src:add(knobs.note) end
  sm90_only_vars(b, vars)
  src:add(render.fill(render.template("gemm_sm90.cuh"), vars, "gemm_sm90.cuh"))
  return src:text()
end

-- The sm90 ping-pong kernel: its source.
local function sm90pp_source(b)
  local src, info, knobs = b.src, b.info, b.knobs
  src:need("common/mbarrier.cuh")
  src:need("common/wgmma.cuh")
  src:need("common/named_barrier.cuh")
  local bn, stages = knobs.bn, knobs.stages
  src:add(wgmma_fn(bn, info))
  local vars = sm90_vars(b, bn, stages)
  vars.GROUP_M = tonumber(settings.get("group"))
  src:add(render.fill(render.template("gemm_sm90_pingpong.cuh"), vars, "gemm_sm90_pingpong.cuh"))
  return src:text()
end

-- The mma (sm80) kernel: its source.
local function sm80_source(b)
  local src, info, knobs = b.src, b.info, b.knobs
  src:need("common/gemm_tile.cuh")
  src:need("common/mma_sm80.cuh")
  local smem_t = info.fp8 and "f16" or SIXTEEN[info.A.dtype]
  src:add(scale_fns(src, info))
  src:add(elem_fns(src, info, smem_t))
  local params = b.K:finish_params()
  -- the element loader stores both operands K-major (its reads need no alignment anyway)
  local elem = knobs.loader == "elem"
  src:add(render.fill(render.template("gemm_sm80.cuh"), {
    A_KMAJOR = (elem or info.oa.kmajor) and "true" or "false", B_KMAJOR = (elem or info.ob.kmajor) and "true" or "false",
    what = b.what, symbol = b.symbol, params = params, STAGES = knobs.stages, ESZ = info.esz, tmaps = b.tmaps or "",
    N = info.N, K = info.K, ASYNC = knobs.loader == "async" and "true" or "false", MMA_T = smem_t,
    BSCALE = next(info.scales) and "true" or "false", SCALE_K = next(info.scales) and scale_k(info) or 16,
    GROUPED = info.grouped and "true" or "false", GROUPS = info.grouped and info.grouped.groups or 1,
    DUAL = knobs.dual and "true" or "false",
    setup = table.concat(b.setup, "\n"), epilogue = b.epi.lambda, amax_decl = b.amax_decl,
    amax_publish = b.amax_publish,
  }, "gemm_sm80.cuh"))
  return src:text()
end

-- the kernel source of each plan path (any other: the mma kernel)
local SOURCE_OF_PATH = { sm90 = sm90_source, sm90pp = sm90pp_source }

-- The GEMM kernel's entry in the kernels list: its source, launch and parameters.
local function gemm_kernel(b)
  local K, info, plan = b.K, b.info, b.plan
  local kernel = { source = (SOURCE_OF_PATH[b.knobs.path] or sm80_source)(b) }
  -- 16-byte aligned operands whenever some SM's plan copies 16-byte chunks (one pack, all SMs)
  if info.aligned then
    K:need_align(info.A.uid, 16)
    K:need_align(info.B.uid, 16)
  end
  local l = plan.launch
  kernel.symbol, kernel.engine, kernel.plan_id, kernel.options = b.symbol, E.id, plan.id, E.OPTIONS
  kernel.block, kernel.grid, kernel.smem, kernel.cluster = l.block, l.grid, l.smem, l.cluster
  kernel.params, kernel.align = K.mparams, K.align
  return kernel
end

-- The stream-K and epilogue-warp workspace's size rule (nil without one).
local function workspace_rule(b)
  local knobs = b.knobs
  local bytes = b.ws and (b.sk and streamk_bytes(knobs.sk_bn) or 0) + (knobs.ewg and ewg_bytes(knobs.tma_bn) or 0)
  return b.ws and { rule = { mul = { bytes }, div = 1, max = 0 }, bytes_max = bytes } or nil
end

-- amax outputs are raised with atomicMax and stream-K flags are set once: a one-CTA kernel
-- zeroes them first (this kernel's entry)
local function init_kernel(b)
  local symbol, amax = b.symbol .. "_init", b.epi.amax
  local init, threads = rowgen.kernel(b.g, symbol), b.sk and 256 or 32
  init.src:need("common/pdl.cuh")
  if #amax > 0 then
    local stores = {}
    for _, acc in ipairs(amax) do stores[#stores + 1] = string.format("%s[0] = 0.0f;", init:ptr(acc.out, true)) end
    init:add("  if (threadIdx.x == 0) { %s }", table.concat(stores, " "))
  end
  if b.sk then
    init:add("  for (int i = threadIdx.x; i < %d; i += %d) reinterpret_cast<kiln_u32 *>(%s)[i] = 0u;", E.SK_FLAG_WORDS, threads,
      init:workspace(0))
  end
  init.src:add(render.fill(render.template("gemm_init.cuh"), { symbol = symbol, params = init:finish_params(),
    THREADS = threads, body = table.concat(init.lines, "\n") }, "gemm_init.cuh"))
  return { symbol = symbol, engine = E.id, plan_id = b.plan.id .. ":init", source = init.src:text(), options = {},
    block = { threads, 1, 1 }, grid = { 1, 1, 1 }, smem = 0, cluster = { 1, 1, 1 }, params = init.mparams, align = init.align,
    pdl_entry = true }
end

function E.build(plan, group, g, target, symbol)
  local K = rowgen.kernel(g, symbol)
  local b = { plan = plan, info = plan.info, knobs = plan.knobs, group = group, g = g, symbol = symbol, K = K, src = K.src }
  local info, knobs = b.info, b.knobs
  b.src:need("common/cp_async.cuh")
  b.src:need("common/gemm_groups.cuh")
  pointer_params(b)
  tensor_maps(b)
  b.setup = setup_lines(K, info)
  b.epi = epilogue(K, info, group, g, knobs.path == "sm90" and knobs.staged or nil, knobs.path == "sm90")
  for _, l in ipairs(b.epi.setup) do b.setup[#b.setup + 1] = l end
  b.amax_decl, b.amax_publish = amax_lines(b)
  -- the stream-K and epilogue-warp workspace (the mma kernel takes it too and ignores it:
  -- one parameter list)
  b.sk = knobs.sk
  b.ws = (b.sk or knobs.ewg) and K:workspace(0)
  b.what = description(info, group)
  local kernel = gemm_kernel(b)
  local workspace = workspace_rule(b)
  if #b.epi.amax == 0 and not b.sk then return { kernels = { kernel }, workspace = workspace } end
  -- the GEMM launches at once (pdl) and waits for the init kernel only before the amax
  -- publication and the stream-K flags
  kernel.pdl = true
  return { kernels = { init_kernel(b), kernel }, workspace = workspace }
end

return E
