-- kiln.engines.gdn.chunk: the chunked GDN forward (docs/GDN.md "Chunked forward"): chunks of
-- 64 tokens in the WY form, one fused kernel a CTA per (sequence, state head, tile of BV rows
-- of the V x K state), serial over the chunks with the state in registers (templates/gdn_chunk.cuh).
-- The engine ranks these plans above its recurrent plan where T is dynamic or long.
local render = require "kiln.render"
local rowgen = require "kiln.engines.rowgen"
local pw = require "kiln.engines.pwexpr"
local problem = require "kiln.engines.gdn.problem"

local M = {}

M.C = 64
-- Tiles of the state's V rows, best first: 64 (4 warps) leaves twice the CTAs of 128 (8 warps),
-- which shares the chunk's KK^T, QK^T and inverse over twice the rows.
M.BV = { 64, 128 }
-- Head dims the kernel is built for (the state's K x BV in registers, the chunk in shared memory).
M.DIMS = { [64] = true, [128] = true }
-- Static T from which the chunked kernel goes before the recurrent one (dynamic T always).
M.T_LONG = 256
-- Dynamic shared memory a block may have, by SM (sm_86 and sm_89: 99 KB; sm_80: 163 KB).
M.SMEM_MAX = { [80] = 166912, [86] = 101376, [87] = 166912, [89] = 101376 }
M.SMEM_DEFAULT = 232448
-- ptxas reports registers and spills into the NVRTC log (kept by KILN_DUMP_DIR).
M.OPTIONS = { "--std=c++17", "--ptxas-options=-v" }

-- Shared memory (bytes; the template's SMEM): two stages of Q, K (rows of K + 8) and the V tile
-- (rows of BV + 8), A/T in fp32, the block solve's scratch, T and P in the io dtype, W (then the
-- decayed V_new) and V_new, the per-token G, b, rq, rk.
function M.smem(P, bv)
  local C, qp, vp, tp = M.C, (P.K + 8) * 2, (bv + 8) * 2, (M.C + 8) * 2
  return 2 * (2 * C * qp + C * vp) + C * (C + 4) * 4 + 16 * 48 * 4 + 2 * C * tp + 2 * C * vp + 4 * C * 4
end

-- Why `what` (the chunked kernels) cannot take problem P on target, or nil.
function M.unfit(P, target, what)
  if target.sm < 80 then return what .. ": sm_80 or later only (mma.sync, cp.async)" end
  if not (M.DIMS[P.K] and M.DIMS[P.V]) then
    return string.format("%s: built for K and V of 64 and 128 (K %d, V %d)", what, P.K, P.V)
  end
end

-- Plans for problem P on target, or {} and why none.
function M.propose(P, target)
  local why = M.unfit(P, target, "the chunked kernel")
  if why then return {}, why end
  local long = type(P.T) ~= "number" or P.T >= M.T_LONG
  local limit = M.SMEM_MAX[target.sm] or M.SMEM_DEFAULT
  local plans = {}
  for i, bv in ipairs(M.BV) do
    local smem = M.smem(P, bv)
    if P.V % bv == 0 and smem <= limit then
      -- a CTA per (cu_seqlens entry, head, V tile): the last entry's CTAs exit
      local seqs = P.cu.dims[1]
      plans[#plans + 1] = {
        id = string.format("gdn:v1:chunk:c%d:bv%d", M.C, bv),
        knobs = { path = "chunk", bv = bv }, rank = (long and 150 or 90) - i, P = P,
        launch = { block = { 2 * bv, 1, 1 }, grid = { { mul = rowgen.with_const({ seqs }, P.HO * (P.V // bv)) }, 1, 1 },
                   smem = smem, cluster = { 1, 1, 1 } },
      }
    end
  end
  if #plans == 0 then return {}, string.format("the chunked kernel's shared memory (%d bytes) exceeds sm_%d's %d",
    M.smem(P, M.BV[1]), target.sm, limit) end
  return plans
end

local GATE = { log = "KILN_GDN_GATE_LOG", linear = "KILN_GDN_GATE_LINEAR", safe = "KILN_GDN_GATE_SAFE" }

-- Element pointer `name` of tensor t (io dtype tensors as kiln_u16) and its load pattern.
local function tensor(K, L, name, t, writable)
  local p = K:ptr(t.uid, writable)
  local st = pw.storage(K.src, t.dtype)
  L[#L + 1] = string.format("  %s%s *__restrict__ %s = %s;", writable and "" or "const ", st.ctype, name, p)
  return st
end

-- The state's pair (a, b) at element `off` of pointer p (fp32: float2; 16-bit: one word).
local function state_pair(st, dtype, p, load)
  if dtype == "fp32" then
    return load and string.format("{ const float2 x = *reinterpret_cast<const float2 *>(%s + off); a = x.x; b = x.y; }", p)
      or string.format("*reinterpret_cast<float2 *>(%s + off) = make_float2(a, b);", p)
  end
  if load then
    return string.format("{ const kiln_u32 w = *reinterpret_cast<const kiln_u32 *>(%s + off); a = %s; b = %s; }", p,
      pw.fmt(st.load, "(kiln_u16)(w & 0xffffu)"), pw.fmt(st.load, "(kiln_u16)(w >> 16)"))
  end
  return string.format("*reinterpret_cast<kiln_u32 *>(%s + off) = (kiln_u32)%s | ((kiln_u32)%s << 16);", p,
    pw.fmt(st.store, "a"), pw.fmt(st.store, "b"))
end

-- The kernel's prologue (the template's ${setup}): sizes, pointers and the per-token, per-head
-- and state accessors the template calls.
local function setup(K, P)
  local cdim, L = pw.cdim, {}
  L[#L + 1] = string.format("  constexpr int H = %d, HK = %d, HV = %d, HO = %d;", P.H, P.HK, P.HV, P.HO)
  for _, x in ipairs { { "gq", P.q }, { "gk", P.k }, { "gv", P.v } } do
    tensor(K, L, x[1], x[2])
    K:need_align(x[2].uid, 16)
  end
  tensor(K, L, "go", P.O, true)
  K:need_align(P.O.uid, 4)
  -- sequences: cu_seqlens' entries less one, and no more than state_indices, the initial states
  -- (without indices) and the final states have rows (a length that disagrees reads no further)
  L[#L + 1] = string.format("  const kiln_i64 T = %s;", cdim(P.T))
  L[#L + 1] = string.format("  kiln_i64 NSEQ = %s - 1;", cdim(P.cu.dims[1]))
  for _, t in ipairs { P.idx or P.h0 or false, P.final or false } do
    if t then L[#L + 1] = string.format("  if (%s < NSEQ) NSEQ = %s;", cdim(t.dims[1]), cdim(t.dims[1])) end
  end
  tensor(K, L, "cu", P.cu)
  local gst, bst = tensor(K, L, "gg", P.g), tensor(K, L, "gb", P.beta)
  L[#L + 1] = string.format("  auto gate_raw = [&](kiln_i64 t, int h) -> float { return %s; };", pw.fmt(gst.load, "gg[t * HO + h]"))
  L[#L + 1] = string.format("  auto beta_raw = [&](kiln_i64 t, int h) -> float { return %s; };", pw.fmt(bst.load, "gb[t * HO + h]"))
  local mode = P.safe_gate and "safe" or P.linear_gate and "linear" or "log"
  local amp, bias = "1.0f", "0.0f"
  if P.alog then amp = "expf(" .. pw.fmt(tensor(K, L, "alog", P.alog).load, "alog[h]") .. ")" end
  if P.dtb then bias = pw.fmt(tensor(K, L, "dtb", P.dtb).load, "dtb[h]") end
  L[#L + 1] = "  // log2 of the decay of a raw gate of head h"
  L[#L + 1] = "  auto gate_log2 = [&](float g, int h) -> float {"
  L[#L + 1] = "    (void)h;"
  if mode == "linear" then
    L[#L + 1] = "    return log2f(kiln_gdn_alpha<KILN_GDN_GATE_LINEAR>(g, 1.0f, 0.0f));"
  else
    L[#L + 1] = string.format("    return kiln_gdn_log_gate<%s>(g, %s, %s) * 1.4426950408889634f;", GATE[mode], amp, bias)
  end
  L[#L + 1] = "  };"
  L[#L + 1] = string.format("  auto beta_of = [&](float b) -> float { return kiln_gdn_beta<%s>(b); };",
    not P.beta_sigmoid and "KILN_GDN_BETA_RAW" or P.neg_eigval and "KILN_GDN_BETA_2SIGMOID" or "KILN_GDN_BETA_SIGMOID")
  L[#L + 1] = string.format("  constexpr bool L2 = %s;", P.l2 and "true" or "false")
  L[#L + 1] = string.format("  const float scale = %s;", render.float_literal(P.scale))
  -- states: [rows, HO, V, K]; the pool row of a sequence (-1: skipped), the initial pair, the final pairs
  L[#L + 1] = "  auto at = [&](kiln_i64 r, int h, int v, int kc) -> kiln_i64 { return ((r * HO + h) * VD + v) * KD + kc; };"
  local hst
  if P.h0 then
    hst = tensor(K, L, "h0", P.h0, P.overwrite)
    K:need_align(P.h0.uid, P.state_dtype == "fp32" and 8 or 4)
  end
  if P.idx then
    tensor(K, L, "sidx", P.idx)
    L[#L + 1] = string.format("  auto pool_row = [&](kiln_i64 s) -> kiln_i64 { return kiln_gdn_pool_row(sidx, s, %s); };",
      cdim(P.h0.dims[1]))
  else
    L[#L + 1] = "  auto pool_row = [&](kiln_i64 s) -> kiln_i64 { return s; };"
  end
  L[#L + 1] = "  auto state_load = [&](kiln_i64 r, int h, int v, int kc, float &a, float &b) {"
  if P.h0 then
    L[#L + 1] = "    const kiln_i64 off = at(r, h, v, kc);"
    L[#L + 1] = "    " .. state_pair(hst, P.state_dtype, "h0", true)
  else
    L[#L + 1] = "    (void)r; (void)h; (void)v; (void)kc;"
    L[#L + 1] = "    a = b = 0.0f;"
  end
  L[#L + 1] = "  };"
  local fst
  if P.final then
    fst = tensor(K, L, "fin", P.final, true)
    K:need_align(P.final.uid, P.final.dtype == "fp32" and 8 or 4)
  end
  L[#L + 1] = "  auto state_store = [&](kiln_i64 s, kiln_i64 r, int h, int v, int kc, float a, float b) {"
  L[#L + 1] = "    kiln_i64 off;"
  L[#L + 1] = "    (void)s; (void)r; (void)h; (void)v; (void)kc; (void)a; (void)b; (void)off;"
  if P.final then
    L[#L + 1] = "    off = at(s, h, v, kc);"
    L[#L + 1] = "    " .. state_pair(fst, P.final.dtype, "fin", false)
  end
  if P.overwrite and P.h0 then
    L[#L + 1] = "    off = at(r, h, v, kc);"
    L[#L + 1] = "    " .. state_pair(hst, P.state_dtype, "h0", false)
  end
  L[#L + 1] = "  };"
  return table.concat(L, "\n")
end

M.setup = setup  -- the split plan's kernels share this prologue (kiln.engines.gdn.chunk_split)

-- The kernel of a chunk plan.
-- What every chunked kernel (fused and split) needs in kernel K's source, and the template
-- variables they share.
function M.common(K, P, symbol)
  local src = K.src
  src:need(P.dtype == "bf16" and "common/bf16.cuh" or "common/fp16.cuh")
  src:need("common/exp2.cuh")
  src:need("common/cp_async.cuh")
  src:need("common/mma_sm80.cuh")
  src:need("gdn_common.cuh")
  return {
    what = problem.describe(P), symbol = symbol, K = P.K, V = P.V,
    MMA_T = P.dtype == "bf16" and "bf16" or "f16", BF16 = P.dtype == "bf16" and "true" or "false",
    PACK = P.dtype == "bf16" and "kiln_f32x2_to_bf16x2" or "kiln_f32x2_to_fp16x2",
    TO_F32 = P.dtype == "bf16" and "kiln_bf16_to_f32" or "kiln_fp16_to_f32",
  }
end

function M.build(plan, g, symbol)
  local P, bv = plan.P, plan.knobs.bv
  local K = rowgen.kernel(g, symbol)
  local src = K.src
  local vars = M.common(K, P, symbol)
  vars.THREADS, vars.BV, vars.SMEM = 2 * bv, bv, M.smem(P, bv)
  vars.setup = setup(K, P)
  vars.params = K:finish_params()
  src:add(render.fill(render.template("gdn_chunk.cuh"), vars, "gdn_chunk.cuh"))
  local l = plan.launch
  return {
    symbol = symbol, engine = "gdn", plan_id = plan.id, options = M.OPTIONS, source = src:text(),
    block = l.block, grid = l.grid, smem = l.smem, cluster = l.cluster, params = K.mparams, align = K.align,
  }
end

return M
