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
  if target.sm < 80 then return {}, "the split chunked kernels need sm_80 or later (mma.sync, cp.async)" end
  if not (chunk.DIMS[P.K] and chunk.DIMS[P.V]) then
    return {}, string.format("the split chunked kernels are built for K and V of 64 and 128 (K %d, V %d)", P.K, P.V)
  end
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

-- The kernels' prologue: chunk.lua's setup (the same sizes, pointers and accessors), kept in step with it.
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

-- One line for the kernels' comments.
local function describe(P, what)
  local parts = { string.format("%s, %s %s, heads q %d k %d v %d state %d, K %d, V %d", what, P.node.name, P.dtype,
    P.H, P.HK, P.HV, P.HO, P.K, P.V) }
  if P.l2 then parts[#parts + 1] = "l2norm" end
  if P.safe_gate then parts[#parts + 1] = "safe gate" elseif P.linear_gate then parts[#parts + 1] = "linear gate" end
  if P.beta_sigmoid then parts[#parts + 1] = P.neg_eigval and "beta 2 sigmoid" or "beta sigmoid" end
  if P.h0 then parts[#parts + 1] = (P.idx and "pooled " or "") .. P.state_dtype .. " initial state" end
  if P.final then parts[#parts + 1] = "final state" end
  if P.overwrite then parts[#parts + 1] = "overwrite" end
  return table.concat(parts, ", ")
end

-- The three kernels of a split plan and their workspace.
function M.build(plan, g, symbol)
  local P, bv = plan.P, plan.knobs.bv
  local function kernel(sym, template, what, threads, smem, grid, extra)
    local K = rowgen.kernel(g, sym)
    local src = K.src
    src:need(P.dtype == "bf16" and "common/bf16.cuh" or "common/fp16.cuh")
    src:need("common/exp2.cuh")
    src:need("common/cp_async.cuh")
    src:need("common/mma_sm80.cuh")
    src:need("gdn_common.cuh")
    src:need("gdn_split_common.cuh")
    local vars = {
      what = describe(P, what), symbol = sym, THREADS = threads, K = P.K, V = P.V, SMEM = smem,
      MMA_T = P.dtype == "bf16" and "bf16" or "f16",
      PACK = P.dtype == "bf16" and "kiln_f32x2_to_bf16x2" or "kiln_f32x2_to_fp16x2",
      TO_F32 = P.dtype == "bf16" and "kiln_bf16_to_f32" or "kiln_fp16_to_f32",
    }
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
      kernel(symbol .. "_prep", "gdn_split_prep.cuh", "pre-pass", 128, M.smem_prep(P), per_slot, {}),
      kernel(symbol, "gdn_split_state.cuh", "state pass", 2 * bv, M.smem_state(P, bv), { mul = seqs }, { BV = bv }),
      kernel(symbol .. "_out", "gdn_split_out.cuh", "output", 128, M.smem_out(P), per_slot, {}),
    },
    workspace = { rule = M.slots_rule(P, M.slot_bytes(P)) },
  }
end

return M
