-- kiln.engines.attention.problem: what an sdpa group asks of the attention kernels, or the
-- reason they decline it. The problem is the sdpa node's math (docs/OPS.md §7.3) with its
-- layouts: q [B, Hq, Sq, D], k [B, Hk, Skv, D], v [B, Hv, Skv, Dv], o [B, Hq, Sq, Dv] by
-- strides (BHSD, BSHD or interleaved views), the mask as a diagonal band, and the outputs.
local dtypes = require "kiln.dtypes"
local pw = require "kiln.engines.pwexpr"

local M = {}

-- Head dims (D, Dv) the kernels are built for: FlashAttention-3's set on Hopper.
M.HEAD_DIMS = { ["64,64"] = true, ["96,96"] = true, ["128,128"] = true, ["192,128"] = true, ["256,256"] = true }

local SIXTEEN = { bf16 = true, fp16 = true }

local function fail(f, ...) return nil, string.format(f, ...) end

-- Ports and attributes no attention kernel of kiln takes yet, with the reason's words.
local UNTAKEN_PORTS = {
  { "bias", "an additive bias" }, { "block_mask", "a block mask" },
  { "cu_seq_len_q", "ragged (THD) q" }, { "cu_seq_len_kv", "ragged (THD) k/v" },
  { "seed", "dropout" }, { "dropout_mask", "dropout" },
}

-- A memory tensor's layout over its 4 logical axes: the last stride 1 and the others whole
-- 16-byte multiples (the tensor copies and 16-byte loads), or the reason it is not.
local function layout(t, port)
  local s = t.strides
  if s[4] ~= 1 then return fail("%s's head dim is not contiguous (stride %s)", port, tostring(s[4])) end
  local per = 16 // dtypes.size(t.dtype)
  for i = 1, 3 do
    if pw.const_factor(s[i]) % per ~= 0 then
      return fail("%s's stride %s over axis %d is not a multiple of 16 bytes", port, tostring(s[i]), i - 1)
    end
  end
  return true
end

-- The diagonal band of OPS.md §7.5: { right = R|nil, left = W|nil, bottom_right = bool }.
local function band(a)
  local right, left = a.diagonal_band_right_bound, a.diagonal_band_left_bound
  local br = a.diagonal_alignment == "bottom_right"
  if a.use_causal_mask then right = 0; br = false end
  if a.use_causal_mask_bottom_right then right = 0; br = true end
  if a.sliding_window_length ~= nil then left = a.sliding_window_length end
  return { right = right, left = left, bottom_right = br }
end

-- The options forward and backward share: the band, softcap, the scale (a constant, or a
-- runtime scalar or 1-element tensor: scale_uid, scale_mem), the padding mask's lengths, the sink.
local function options(P, ins, at, by)
  P.band = band(at)
  P.softcap = at.softcap
  P.scale = at.attn_scale
  if ins.attn_scale then
    local s = by[ins.attn_scale]
    P.scale_uid = s.uid
    P.scale_mem = s.role ~= "constant" and s.role ~= "scalar"
    if s.role == "constant" then P.scale, P.scale_uid = s.value, nil end
  end
  P.scale = P.scale_uid and nil or (P.scale or 1.0)
  P.padding = at.use_padding_mask
  P.seq_len_q, P.seq_len_kv = ins.seq_len_q and by[ins.seq_len_q], ins.seq_len_kv and by[ins.seq_len_kv]
  P.sink = ins.sink_token and by[ins.sink_token]
end

-- Returns the problem of an sdpa group, or nil and why it is declined.
function M.of(group, g)
  local a = group.anchor
  if not a or group.family ~= "sdpa" then
    return fail("group is a %s op (%s), not attention", group.family, (group.anchor or group.nodes[1]).op)
  end
  if a.op == "sdpa_backward" then return M.backward(group, g) end
  if a.op ~= "sdpa" then return fail("%s has no kiln kernel yet (sdpa and sdpa_backward have)", a.op) end
  if #group.nodes ~= 1 then return fail("ops fused around sdpa are not taken yet (%d nodes in the group)", #group.nodes) end
  local ins, at, by = a.inputs, a.attrs, g.by_uid
  for _, p in ipairs(UNTAKEN_PORTS) do
    if ins[p[1]] then return fail("%s ('%s') is not supported by kiln's attention kernels", p[2], p[1]) end
  end
  if at.use_alibi_mask then return fail("ALiBi ('use_alibi_mask') is not supported by kiln's attention kernels") end
  if at.dropout_probability ~= nil then return fail("dropout is not supported by kiln's attention kernels") end
  local q, k, v = by[ins.q], by[ins.k], by[ins.v]
  local o = by[a.outputs.O]
  if not SIXTEEN[q.dtype] then return fail("q is %s: the kernels take bf16 or fp16", q.dtype) end
  if o.dtype ~= q.dtype then return fail("O is %s but q is %s: O must have q's dtype", o.dtype, q.dtype) end
  local P = { dtype = q.dtype, q = q, k = k, v = v, o = o, node = a }
  P.B, P.Hq, P.Sq, P.D = q.dims[1], q.dims[2], q.dims[3], q.dims[4]
  P.Hk, P.Hv, P.Skv, P.Dv = k.dims[2], v.dims[2], k.dims[3], v.dims[4]
  if ins.paged_attention_k_table then
    -- k and v are block containers [blocks, H, page, D]; the tables [B, 1, pages, 1] int32
    P.paged = { k = by[ins.paged_attention_k_table], v = by[ins.paged_attention_v_table], page = k.dims[3] }
    P.Skv = at.paged_attention_max_seq_len_kv
    if math.type(P.paged.page) ~= "integer" or P.paged.page ~= v.dims[3] then
      return fail("paged K/V needs one page size (the containers' dim 2) known at compile time")
    end
  end
  for _, n in ipairs { "Hq", "Hk", "Hv", "D", "Dv" } do
    if math.type(P[n]) ~= "integer" then return fail("%s (%s) must be specialized (compile-time)", n, tostring(P[n])) end
  end
  if not M.HEAD_DIMS[P.D .. "," .. P.Dv] then
    return fail("head dims (D %d, Dv %d) are not built: the kernels take 64, 96, 128, 256, and 192 with Dv 128", P.D, P.Dv)
  end
  for _, p in ipairs { { "q", q }, { "k", k }, { "v", v }, { "O", o } } do
    local ok, why = layout(p[2], p[1])
    if not ok then return nil, why end
  end
  options(P, ins, at, by)
  P.stats = a.outputs.Stats and by[a.outputs.Stats]
  P.max = a.outputs.Max and by[a.outputs.Max]
  P.sum_exp = a.outputs.Sum_exp and by[a.outputs.Sum_exp]
  P.stats_log2 = at.stats_use_log2
  return P
end

-- Head dims (D = Dv) the backward kernels are built for: dK and dV of a warp's 16 keys stay in
-- registers beside the score tiles.
M.BWD_HEAD_DIMS = { [64] = true, [96] = true, [128] = true }

-- Backward ports and attributes no kernel of kiln takes yet, with the reason's words.
local UNTAKEN_BWD = {
  { "bias", "an additive bias (and dBias)" }, { "cu_seq_len_q", "ragged (THD) q" },
  { "cu_seq_len_kv", "ragged (THD) k/v" }, { "seed", "dropout" }, { "dropout_mask", "dropout" },
}

-- The problem of an sdpa_backward group (OPS.md §7.6), or nil and why it is declined: the
-- forward's operands and mask, o, dO, the forward's Stats (natural log), the gradients dQ, dK,
-- dV (q's, k's and v's dims), DSINK_TOKEN, and whether the sums must be bitwise reproducible.
function M.backward(group, g)
  local a = group.anchor
  if #group.nodes ~= 1 then return fail("ops fused around sdpa_backward are not taken yet (%d nodes in the group)", #group.nodes) end
  local ins, at, by = a.inputs, a.attrs, g.by_uid
  for _, p in ipairs(UNTAKEN_BWD) do
    if ins[p[1]] then return fail("%s ('%s') is not supported by kiln's attention backward", p[2], p[1]) end
  end
  if at.use_alibi_mask then return fail("ALiBi ('use_alibi_mask') is not supported by kiln's attention backward") end
  if at.dropout_probability ~= nil then return fail("dropout is not supported by kiln's attention backward") end
  local P = { backward = true, node = a, deterministic = at.use_deterministic_algorithm and true or false }
  for _, n in ipairs { "q", "k", "v", "o", "dO", "stats" } do P[n] = by[ins[n]] end
  P.dq, P.dk, P.dv = by[a.outputs.dQ], by[a.outputs.dK], by[a.outputs.dV]
  P.dsink = a.outputs.DSINK_TOKEN and by[a.outputs.DSINK_TOKEN]
  P.dtype = P.q.dtype
  if not SIXTEEN[P.dtype] then return fail("q is %s: the kernels take bf16 or fp16", P.dtype) end
  for _, n in ipairs { "k", "v", "o", "dO", "dq", "dk", "dv" } do
    if P[n].dtype ~= P.dtype then return fail("%s is %s but q is %s: the backward takes one dtype", n, P[n].dtype, P.dtype) end
  end
  P.B, P.Hq, P.Sq, P.D = P.q.dims[1], P.q.dims[2], P.q.dims[3], P.q.dims[4]
  P.Hk, P.Hv, P.Skv, P.Dv = P.k.dims[2], P.v.dims[2], P.k.dims[3], P.v.dims[4]
  for _, n in ipairs { "Hq", "Hk", "Hv", "D", "Dv" } do
    if math.type(P[n]) ~= "integer" then return fail("%s (%s) must be specialized (compile-time)", n, tostring(P[n])) end
  end
  if P.D ~= P.Dv or not M.BWD_HEAD_DIMS[P.D] then
    return fail("head dims (D %d, Dv %d) are not built for the backward: it takes D = Dv = 64, 96 or 128", P.D, P.Dv)
  end
  if P.Hk ~= P.Hv then return fail("k heads %d and v heads %d differ: the backward takes one k/v head count", P.Hk, P.Hv) end
  for _, n in ipairs { "q", "k", "v", "o", "dO", "dq", "dk", "dv" } do
    local ok, why = layout(P[n], n)
    if not ok then return nil, why end
  end
  options(P, ins, at, by)
  return P
end

return M
