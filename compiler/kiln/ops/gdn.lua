-- kiln.ops.gdn: Gated DeltaNet linear attention, gdn and gdn_bwd (OPS.md §8.3). THD only:
-- tokens of N sequences packed along T, boundaries in cu_seqlens [N+1].
-- Heads: H (q), HK (k, one of H or HV), HV (v); gates, output and state live at
-- HO = max(H, HV) heads, and HO must be a multiple of both. States are V-major [., HO, V, K].
local util = require "kiln.ops.util"

local IO = { "bf16", "fp16" }
local GATE = { "fp32", "bf16", "fp16" }
local STATE = { "fp32", "bf16" }

local function flag() return { type = "boolean", default = false } end

local function common_attrs()
  return {
    scale = { type = "number" },              -- absent: 1/sqrt(K)
    use_qk_l2norm = flag(),
    batch_invariant = flag(),
    use_beta_sigmoid = flag(),
    allow_neg_eigval = flag(),
    safe_gate = flag(),
    gate_domain = { type = "string", enum = { "log", "linear" }, default = "log" },
    checkpoint_every_n_tokens = { type = "integer", default = 0 },
  }
end

local function check_attrs(ctx, ins, attrs)
  if attrs.scale ~= nil and not (attrs.scale > 0) then
    ctx:fail("E_ATTR", "scale = %s must be > 0", tostring(attrs.scale))
  end
  if attrs.allow_neg_eigval and not attrs.use_beta_sigmoid then
    ctx:fail("E_ATTR", "allow_neg_eigval (beta = 2 sigmoid(beta)) needs use_beta_sigmoid = true")
  end
  if attrs.safe_gate and attrs.gate_domain == "linear" then
    ctx:fail("E_ATTR", "safe_gate computes a log-space gate; it cannot be combined with gate_domain = linear")
  end
  for _, p in ipairs { "a_log", "dt_bias" } do
    if ins[p] and not attrs.safe_gate then
      ctx:fail("E_ATTR", "%s is only used by the safe gate; set safe_gate = true or drop %s", p, p)
    end
  end
  if attrs.checkpoint_every_n_tokens < 0 then
    ctx:fail("E_ATTR", "checkpoint_every_n_tokens = %d must be >= 0 (0 = off)", attrs.checkpoint_every_n_tokens)
  end
end

-- Shapes and dtypes of q, k, v, g, beta, cu_seqlens, a_log, dt_bias; returns the problem.
local function problem(ctx, ins)
  local q, k, v = ins.q, ins.k, ins.v
  util.dtype_in(ctx, "q", q, IO)
  util.same_dtype(ctx, "k", k, "q", q)
  util.same_dtype(ctx, "v", v, "q", q)
  util.rank_is(ctx, "q", q, 3, "THD: [T, H, K]")
  util.rank_is(ctx, "k", k, 3, "THD: [T, HK, K]")
  util.rank_is(ctx, "v", v, 3, "THD: [T, HV, V]")
  local T, H, K = q.dims[1], q.dims[2], q.dims[3]
  local HK, HV, V = k.dims[2], v.dims[2], v.dims[3]
  for _, p in ipairs { { "k", k }, { "v", v } } do
    if not ctx:same_dim(p[2].dims[1], T) then
      ctx:fail("E_SHAPE", "token mismatch: q is %s but %s is %s (dim 0 is the packed T)", util.fmt(q.dims), p[1],
        util.fmt(p[2].dims))
    end
  end
  if not ctx:same_dim(k.dims[3], K) then
    ctx:fail("E_SHAPE", "key dim mismatch: q is %s but k is %s (last dims must be equal)",
      util.fmt(q.dims), util.fmt(k.dims))
  end
  local HO
  if ctx:same_dim(H, HV) then HO = H
  elseif util.is_static(H) and util.is_static(HV) then HO = math.max(H, HV)
  else
    ctx:fail("E_SHAPE", "q has %s heads and v has %s: head counts must be equal or both static",
      tostring(H), tostring(HV))
  end
  if not (util.divisible(ctx, HO, H) and util.divisible(ctx, HO, HV)) then
    ctx:fail("E_SHAPE", "q has %s heads and v has %s: the larger must be a multiple of the smaller", tostring(H),
      tostring(HV))
  end
  if not (ctx:same_dim(HK, H) or ctx:same_dim(HK, HV)) then
    ctx:fail("E_SHAPE", "k has %s heads; it must have q's (%s) or v's (%s)", tostring(HK), tostring(H), tostring(HV))
  end
  for _, p in ipairs { "g", "beta" } do
    util.dims_are(ctx, p, ins[p], { T, HO }, "[T, HO], HO = max(H, HV)")
  end
  util.dtype_in(ctx, "g", ins.g, GATE)
  local beta = ins.beta
  if beta.dtype ~= nil and beta.dtype ~= "fp32" and q.dtype ~= nil and beta.dtype ~= q.dtype then
    ctx:fail("E_DTYPE", "beta has dtype %s; it must be fp32 or q's dtype %s", beta.dtype, q.dtype)
  end
  local cu = ins.cu_seqlens
  util.dtype_in(ctx, "cu_seqlens", cu, util.INTS)
  util.rank_is(ctx, "cu_seqlens", cu, 1, "[N+1] sequence boundaries")
  local N
  if util.is_static(cu.dims[1]) then
    if cu.dims[1] < 2 then
      ctx:fail("E_SHAPE", "cu_seqlens %s needs at least 2 entries (N+1, N >= 1)", util.fmt(cu.dims))
    end
    N = cu.dims[1] - 1
  end
  for _, p in ipairs { "a_log", "dt_bias" } do
    if ins[p] then
      util.dtype_in(ctx, p, ins[p], GATE)
      util.dims_are(ctx, p, ins[p], { HO }, "one per head")
    end
  end
  return { T = T, H = H, HK = HK, HV = HV, HO = HO, K = K, V = V, N = N }
end

-- A state tensor [rows, HO, V, K]; returns rows.
local function state(ctx, port, t, P, rows, what)
  util.dtype_in(ctx, port, t, STATE)
  util.dims_are(ctx, port, t, { rows or util.ANY, P.HO, P.V, P.K }, what)
  return t.dims[1]
end

local gdn = {
  name = "gdn", family = "gdn", mode = "GDN",
  inputs = { "q", "k", "v", "g", "beta", "cu_seqlens", { "initial_state", optional = true },
             { "state_indices", optional = true }, { "a_log", optional = true }, { "dt_bias", optional = true } },
  outputs = { "O", { "final_state", optional = true }, { "state_checkpoints", optional = true } },
  aliases = {},
  attrs = (function()
    local a = common_attrs()
    a.output_final_state = flag()
    a.overwrite_initial_state = flag()
    return a
  end)(),
  infer = function(ctx, ins, attrs)
    local P = problem(ctx, ins)
    check_attrs(ctx, ins, attrs)
    local N, init, idx = P.N, ins.initial_state, ins.state_indices
    if idx then
      if not init then ctx:fail("E_PORT", "state_indices picks rows of initial_state, which is missing") end
      util.dtype_in(ctx, "state_indices", idx, { "int32" })
      util.dims_are(ctx, "state_indices", idx, { N or util.ANY }, "one pool row per sequence: [N]")
      N = N or idx.dims[1]
      state(ctx, "initial_state", init, P, nil, "[pool rows, HO, V, K]")
    elseif init then
      N = N or init.dims[1]
      state(ctx, "initial_state", init, P, N, "[N, HO, V, K], V-major")
    end
    if attrs.overwrite_initial_state and not init then
      ctx:fail("E_ATTR", "overwrite_initial_state needs an initial_state to write into")
    end
    local out = { O = { dims = { P.T, P.HO, P.V } } }
    if attrs.output_final_state then
      if N == nil then
        ctx:fail("E_SHAPE", "final_state needs the number of sequences: cu_seqlens is %s (dynamic); give a static "
          .. "length or an initial_state / state_indices that names N", util.fmt(ins.cu_seqlens.dims))
      end
      out.final_state = { dims = { N, P.HO, P.V, P.K }, dtype = init and init.dtype or "fp32" }
    end
    local n = attrs.checkpoint_every_n_tokens
    if n > 0 then
      if not (util.is_static(P.T) and P.N) then
        ctx:fail("E_SHAPE", "state_checkpoints (every %d tokens) need a static T and cu_seqlens length to be sized "
          .. "(T/n + N rows); T is %s, cu_seqlens is %s", n, tostring(P.T), util.fmt(ins.cu_seqlens.dims))
      end
      out.state_checkpoints = { dims = { P.T // n + P.N, P.HO, P.V, P.K } }
    end
    return out
  end,
}

local gdn_bwd = {
  name = "gdn_bwd", family = "gdn", mode = "GDN_BWD",
  inputs = { "q", "k", "v", "g", "beta", "cu_seqlens", "dO", { "state_checkpoints", optional = true },
             { "initial_state", optional = true }, { "d_final_state", optional = true },
             { "a_log", optional = true }, { "dt_bias", optional = true } },
  outputs = { "dQ", "dK", "dV", "dG", "dBeta", { "d_initial_state", optional = true },
              { "d_a_log", optional = true }, { "d_dt_bias", optional = true } },
  aliases = {},
  attrs = common_attrs(),
  infer = function(ctx, ins, attrs)
    local P = problem(ctx, ins)
    check_attrs(ctx, ins, attrs)
    util.same_dtype(ctx, "dO", ins.dO, "q", ins.q)
    util.dims_are(ctx, "dO", ins.dO, { P.T, P.HO, P.V }, "[T, HO, V], the output's dims")
    local N = P.N
    if ins.initial_state then N = state(ctx, "initial_state", ins.initial_state, P, N, "[N, HO, V, K], V-major") end
    if ins.d_final_state then state(ctx, "d_final_state", ins.d_final_state, P, N, "[N, HO, V, K], V-major") end
    if ins.state_checkpoints then
      if attrs.checkpoint_every_n_tokens == 0 then
        ctx:fail("E_ATTR", "state_checkpoints are given but checkpoint_every_n_tokens is 0; give the forward's value")
      end
      util.dims_are(ctx, "state_checkpoints", ins.state_checkpoints, { util.ANY, P.HO, P.V, P.K }, "[n_ckpt, HO, V, K]")
    end
    local out = {
      dQ = { dims = util.copy(ins.q.dims) },
      dK = { dims = util.copy(ins.k.dims) },
      dV = { dims = util.copy(ins.v.dims) },
      dG = { dims = util.copy(ins.g.dims), dtype = ins.g.dtype },
      dBeta = { dims = util.copy(ins.beta.dims), dtype = ins.beta.dtype },
    }
    for _, p in ipairs { { "initial_state", "d_initial_state" }, { "a_log", "d_a_log" }, { "dt_bias", "d_dt_bias" } } do
      local t = ins[p[1]]
      if t then out[p[2]] = { dims = util.copy(t.dims), dtype = t.dtype } end
    end
    return out
  end,
}

return { gdn, gdn_bwd }
