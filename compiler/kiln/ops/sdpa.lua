-- kiln.ops.sdpa: scaled dot-product attention — sdpa, sdpa_fp8, sdpa_backward (OPS.md §7).
--
-- Logical dims are BHSD: q [B, Hq, Sq, Dqk], k [B, Hk, Skv, Dqk], v [B, Hv, Skv, Dv];
-- layouts (BSHD, interleaved, ragged) are strides. Python's tuple arguments are flattened:
-- dropout = attribute dropout_probability + inputs seed, offset (Philox), or inputs
-- dropout_mask, dropout_scale (+ dropout_scale_inv backward). Outputs that Python fills
-- through a keyword tensor are asked for with a boolean attribute of that keyword's name
-- (score_max -> Max, score_sum_exp -> Sum_exp, rng_dump -> RNG_DUMP, dBias -> dBias,
-- dSink_token -> DSINK_TOKEN). attn_scale is the attribute (a number) or the scalar input.
-- score_mod callbacks are the spec layer's business; `softcap = c` is the built-in one.
local util = require "kiln.ops.util"

local IO16 = { "fp16", "bf16" }
local FP8 = { "fp8_e4m3", "fp8_e5m2" }

local function flag(default) return { type = "boolean", default = default } end

local function mask_attrs()
  return {
    attn_scale = { type = "number" },
    softcap = { type = "number" },
    use_alibi_mask = flag(false),
    use_padding_mask = flag(false),
    use_causal_mask = flag(false),
    use_causal_mask_bottom_right = flag(false),
    sliding_window_length = { type = "integer" },
    diagonal_alignment = { type = "string", enum = { "top_left", "bottom_right" }, default = "top_left" },
    diagonal_band_left_bound = { type = "integer" },
    diagonal_band_right_bound = { type = "integer" },
    dropout_probability = { type = "number" },
    rng_dump = flag(false),
    max_total_seq_len_q = { type = "integer" },
    max_total_seq_len_kv = { type = "integer" },
  }
end

local function forward_attrs(paged)
  local a = mask_attrs()
  a.generate_stats = { type = "boolean" }   -- exactly one of generate_stats / is_inference
  a.is_inference = { type = "boolean" }     -- (deprecated: generate_stats = not is_inference)
  a.stats_use_log2 = flag(false)
  a.implementation = { type = "string", enum = { "auto", "composite", "unified" }, default = "auto" }
  a.unfuse_fma = flag(false)
  if paged then
    a.paged_attention_max_seq_len_kv = { type = "integer" }
    a.score_max = flag(false)
    a.score_sum_exp = flag(false)
  end
  return a
end

local function backward_attrs()
  local a = mask_attrs()
  a.dBias = flag(false)
  a.dSink_token = flag(false)
  a.use_deterministic_algorithm = flag(false)
  return a
end

-- Shapes -------------------------------------------------------------------------------

local function head_dim(ctx, port, d, mult)
  if not util.is_static(d) or d % mult ~= 0 then
    ctx:fail("E_SHAPE", "head dim of %s is %s; it must be a static multiple of %d", port, tostring(d), mult)
  end
end

local function heads_divide(ctx, hq, port, h)
  if not util.divisible(ctx, hq, h) then
    ctx:fail("E_SHAPE", "q has %s heads but %s has %s: the q heads must be a multiple of %s's (GQA/MQA groups)",
      tostring(hq), port, tostring(h), port)
  end
end

-- q, k, v; returns the problem {B, Hq, Sq, Skv, Dqk, Dv}.
local function qkv(ctx, ins, attrs, mult)
  local q, k, v = ins.q, ins.k, ins.v
  util.rank_is(ctx, "q", q, 4, "BHSD: [B, H, S_q, D]")
  local kv_layout = ins.paged_attention_k_table and "paged: [num_blocks, H, block, D]" or "BHSD: [B, H, S_kv, D]"
  util.rank_is(ctx, "k", k, 4, kv_layout)
  util.rank_is(ctx, "v", v, 4, kv_layout)
  local P = { B = q.dims[1], Hq = q.dims[2], Sq = q.dims[3], Dqk = q.dims[4], Dv = v.dims[4],
              Hk = k.dims[2], Hv = v.dims[2] }
  if not ctx:same_dim(k.dims[4], P.Dqk) then
    ctx:fail("E_SHAPE", "head dim mismatch: q is %s but k is %s (q's and k's last dims must be equal)",
      util.fmt(q.dims), util.fmt(k.dims))
  end
  local kt, vt = ins.paged_attention_k_table, ins.paged_attention_v_table
  if kt or vt then
    if not (kt and vt) then
      ctx:fail("E_PORT", "paged attention needs both paged_attention_k_table and paged_attention_v_table")
    end
    local s = attrs.paged_attention_max_seq_len_kv
    if s == nil or s < 1 then
      ctx:fail("E_ATTR", "paged attention needs paged_attention_max_seq_len_kv >= 1 (it gives S_kv)")
    end
    if not attrs.use_padding_mask then
      ctx:fail("E_ATTR", "paged attention needs use_padding_mask with seq_len_q and seq_len_kv")
    end
    P.Skv = s
    for _, p in ipairs { { "paged_attention_k_table", kt, k }, { "paged_attention_v_table", vt, v } } do
      local name, t, cont = p[1], p[2], p[3]
      util.dtype_in(ctx, name, t, { "int32" })
      util.dims_are(ctx, name, t, { P.B, 1, util.ANY, 1 }, "[B, 1, blocks per sequence, 1]")
      local nblk, bs = t.dims[3], cont.dims[3]
      if util.is_static(nblk) and util.is_static(bs) and nblk * bs < s then
        ctx:fail("E_SHAPE", "%s has %d blocks of %d tokens, fewer than paged_attention_max_seq_len_kv = %d",
          name, nblk, bs, s)
      end
    end
  else
    if attrs.paged_attention_max_seq_len_kv ~= nil then
      ctx:fail("E_ATTR", "paged_attention_max_seq_len_kv is given but there are no page tables")
    end
    for _, p in ipairs { { "k", k }, { "v", v } } do
      if not ctx:same_dim(p[2].dims[1], P.B) then
        ctx:fail("E_SHAPE", "batch mismatch: q is %s but %s is %s (dim 0 is B)",
          util.fmt(q.dims), p[1], util.fmt(p[2].dims))
      end
    end
    if not ctx:same_dim(k.dims[3], v.dims[3]) then
      ctx:fail("E_SHAPE", "sequence mismatch: k is %s but v is %s (dim 2 is S_kv for both)",
        util.fmt(k.dims), util.fmt(v.dims))
    end
    P.Skv = k.dims[3]
  end
  heads_divide(ctx, P.Hq, "k", P.Hk)
  heads_divide(ctx, P.Hq, "v", P.Hv)
  head_dim(ctx, "q", P.Dqk, mult)
  head_dim(ctx, "v", P.Dv, mult)
  return P
end

-- [1|B, 1|Hq, Sq, Skv]: bias, dropout_mask.
local function score_shaped(ctx, port, t, P)
  util.rank_is(ctx, port, t, 4, "[1|B, 1|H_q, S_q, S_kv]")
  local want = { P.B, P.Hq, P.Sq, P.Skv }
  for i = 1, 4 do
    local d = t.dims[i]
    if not (ctx:same_dim(d, want[i]) or (i <= 2 and d == 1)) then
      ctx:fail("E_SHAPE", "%s must be [1|%s, 1|%s, %s, %s], got %s", port, tostring(P.B), tostring(P.Hq),
        tostring(P.Sq), tostring(P.Skv), util.fmt(t.dims))
    end
  end
end

local function scalar_float(ctx, port, t)
  if not t then return end
  util.scalar(ctx, port, t)
  util.dtype_in(ctx, port, t, { "fp32", "fp16", "bf16" })
end

-- Argument rules (OPS.md §7.1) ---------------------------------------------------------

local function check_attn_scale(ctx, ins, attrs)
  if ins.attn_scale and attrs.attn_scale ~= nil then
    ctx:fail("E_ATTR", "attn_scale is given twice, as the attribute and as the input; give one")
  end
  scalar_float(ctx, "attn_scale", ins.attn_scale)
  if attrs.softcap ~= nil and not (attrs.softcap > 0) then
    ctx:fail("E_ATTR", "softcap = %s must be > 0", tostring(attrs.softcap))
  end
end

local function check_masks(ctx, ins, attrs, P)
  local causal, causal_br = attrs.use_causal_mask, attrs.use_causal_mask_bottom_right
  local left, right = attrs.diagonal_band_left_bound, attrs.diagonal_band_right_bound
  if causal and causal_br then
    ctx:fail("E_ATTR", "use_causal_mask and use_causal_mask_bottom_right cannot both be set")
  end
  if causal or causal_br then
    local which = causal and "use_causal_mask" or "use_causal_mask_bottom_right"
    if right ~= nil then
      ctx:fail("E_ATTR", "%s sets diagonal_band_right_bound = 0; do not also give diagonal_band_right_bound", which)
    end
    if causal and attrs.diagonal_alignment == "bottom_right" then
      ctx:fail("E_ATTR", "use_causal_mask is top-left aligned; use use_causal_mask_bottom_right instead of "
        .. "diagonal_alignment = bottom_right")
    end
    right = 0
  end
  if attrs.sliding_window_length ~= nil then
    if left ~= nil then
      ctx:fail("E_ATTR", "sliding_window_length and diagonal_band_left_bound cannot both be set "
        .. "(the first sets the second)")
    end
    left = attrs.sliding_window_length
    if left < 1 then ctx:fail("E_ATTR", "sliding_window_length = %d must be >= 1", left) end
  end
  if left ~= nil and left < 1 then ctx:fail("E_ATTR", "diagonal_band_left_bound = %d must be >= 1", left) end
  if right ~= nil and right < 0 then ctx:fail("E_ATTR", "diagonal_band_right_bound = %d must be >= 0", right) end
  if attrs.use_alibi_mask and right ~= 0 then
    ctx:fail("E_ATTR", "use_alibi_mask requires a causal mask (diagonal_band_right_bound = 0)")
  end

  local sq, skv = ins.seq_len_q, ins.seq_len_kv
  if attrs.use_padding_mask then
    if not (sq and skv) then
      ctx:fail("E_PORT", "use_padding_mask requires both seq_len_q and seq_len_kv (missing %s)",
        sq and "seq_len_kv" or "seq_len_q")
    end
  elseif sq or skv then
    ctx:fail("E_ATTR", "%s is given but use_padding_mask is false", sq and "seq_len_q" or "seq_len_kv")
  end
  for _, p in ipairs { "seq_len_q", "seq_len_kv" } do
    local t = ins[p]
    if t then
      util.dtype_in(ctx, p, t, util.INTS)
      util.dims_are(ctx, p, t, { P.B, 1, 1, 1 }, "one length per batch entry")
    end
  end
  for _, p in ipairs { "cu_seq_len_q", "cu_seq_len_kv" } do
    local t = ins[p]
    if t then
      if not attrs.use_padding_mask then
        ctx:fail("E_ATTR", "%s (ragged layout) requires use_padding_mask with seq_len_q and seq_len_kv", p)
      end
      util.dtype_in(ctx, p, t, util.INTS)
      local n = util.is_static(P.B) and P.B + 1 or nil
      local ok = (#t.dims == 1 or #t.dims == 4) and (n == nil or t.dims[1] == n)
      for i = 2, #t.dims do ok = ok and t.dims[i] == 1 end
      if not ok then
        ctx:fail("E_SHAPE", "%s must be [B+1] or [B+1, 1, 1, 1] (prefix sums, B = %s), got %s", p, tostring(P.B),
          util.fmt(t.dims))
      end
    end
  end
  for _, a in ipairs { "max_total_seq_len_q", "max_total_seq_len_kv" } do
    if attrs[a] ~= nil and attrs[a] < 1 then ctx:fail("E_ATTR", "%s = %d must be >= 1", a, attrs[a]) end
  end

  if ins.bias then
    local b = ins.bias
    if b.dtype == "bool" then
      ctx:fail("E_DTYPE", "bias must not be bool (it is added to the scores; use a mask or binary_select)")
    end
    util.dtype_in(ctx, "bias", b, { "fp32", "fp16", "bf16" })
    score_shaped(ctx, "bias", b, P)
  end
  if ins.block_mask then
    if attrs.implementation == "composite" then
      ctx:fail("E_ATTR", "block_mask needs implementation = unified (or auto), not composite")
    end
    util.rank_is(ctx, "block_mask", ins.block_mask, 4, "[1|B, 1|H_q, S_q tiles of 128, bytes of 8 S_kv tiles]")
  end
  if ins.sink_token then
    util.dtype_in(ctx, "sink_token", ins.sink_token, { "fp32" })
    util.dims_are(ctx, "sink_token", ins.sink_token, { 1, P.Hq, 1, 1 }, "one logit per q head")
  end
end

local function check_dropout(ctx, ins, attrs, P, backward)
  local p = attrs.dropout_probability
  local philox = ins.seed or ins.offset
  local custom = ins.dropout_mask or ins.dropout_scale or ins.dropout_scale_inv
  if philox and custom then
    ctx:fail("E_PORT", "dropout is (dropout_probability, seed, offset) or (dropout_mask, dropout_scale%s), not both",
      backward and ", dropout_scale_inv" or "")
  end
  if p ~= nil then
    if custom then ctx:fail("E_ATTR", "dropout_probability is for Philox dropout; a custom dropout_mask takes none") end
    if not (p >= 0 and p < 1) then ctx:fail("E_ATTR", "dropout_probability = %s must be in [0, 1)", tostring(p)) end
    if not (ins.seed and ins.offset) then
      ctx:fail("E_PORT", "Philox dropout (dropout_probability) needs the inputs seed and offset")
    end
    for _, port in ipairs { "seed", "offset" } do
      util.dtype_in(ctx, port, ins[port], util.INTS)
      util.scalar(ctx, port, ins[port])
    end
  elseif philox then
    ctx:fail("E_ATTR", "seed/offset are given but dropout_probability is not")
  end
  if custom then
    local need = { "dropout_mask", "dropout_scale", backward and "dropout_scale_inv" or nil }
    for _, port in ipairs(need) do
      if not ins[port] then ctx:fail("E_PORT", "custom dropout needs %s", table.concat(need, ", ")) end
    end
    score_shaped(ctx, "dropout_mask", ins.dropout_mask, P)
    scalar_float(ctx, "dropout_scale", ins.dropout_scale)
    scalar_float(ctx, "dropout_scale_inv", ins.dropout_scale_inv)
  end
  if attrs.rng_dump and p == nil then
    ctx:fail("E_ATTR", "rng_dump needs Philox dropout (dropout_probability, seed, offset)")
  end
end

local function generate_stats(ctx, attrs)
  local gs, inf = attrs.generate_stats, attrs.is_inference
  if (gs == nil) == (inf == nil) then
    ctx:fail("E_ATTR", "give exactly one of generate_stats or is_inference (deprecated)")
  end
  local stats
  if gs ~= nil then stats = gs else stats = not inf end
  if attrs.stats_use_log2 and not stats then ctx:fail("E_ATTR", "stats_use_log2 needs generate_stats = true") end
  return stats
end

local function check_io_dtypes(ctx, ins, allowed, what)
  for _, p in ipairs { "q", "k", "v" } do
    local t = ins[p]
    if t.dtype ~= nil then
      local ok = false
      for _, d in ipairs(allowed) do if t.dtype == d then ok = true end end
      if not ok then
        ctx:fail("E_DTYPE", "%s has dtype %s; %s takes %s", p, t.dtype, what, table.concat(allowed, ", "))
      end
    end
  end
  util.same_dtype(ctx, "k", ins.k, "q", ins.q)
  util.same_dtype(ctx, "v", ins.v, "q", ins.q)
end

local function stats_dims(P) return { P.B, P.Hq, P.Sq, 1 } end

local function forward_outputs(attrs, P, stats)
  local out = { O = { dims = { P.B, P.Hq, P.Sq, P.Dv } } }
  if stats then out.Stats = { dims = stats_dims(P), dtype = "fp32" } end
  if attrs.score_max then out.Max = { dims = stats_dims(P), dtype = "fp32" } end
  if attrs.score_sum_exp then out.Sum_exp = { dims = stats_dims(P), dtype = "fp32" } end
  if attrs.rng_dump then out.RNG_DUMP = { dims = { P.B, P.Hq, P.Sq, P.Skv } } end
  return out
end

-- Ops ----------------------------------------------------------------------------------

local function opt(name) return { name, optional = true } end

local sdpa = {
  name = "sdpa", family = "sdpa", mode = "SDPA",
  inputs = { "q", "k", "v", opt "attn_scale", opt "bias", opt "block_mask", opt "seq_len_q", opt "seq_len_kv",
             opt "cu_seq_len_q", opt "cu_seq_len_kv", opt "seed", opt "offset", opt "dropout_mask",
             opt "dropout_scale", opt "paged_attention_k_table", opt "paged_attention_v_table", opt "sink_token" },
  outputs = { "O", opt "Stats", opt "Max", opt "Sum_exp", opt "RNG_DUMP" },
  aliases = {},
  attrs = forward_attrs(true),
  infer = function(ctx, ins, attrs)
    check_io_dtypes(ctx, ins, IO16, "sdpa (fp8 goes through sdpa_fp8)")
    local stats = generate_stats(ctx, attrs)
    local P = qkv(ctx, ins, attrs, 8)
    check_attn_scale(ctx, ins, attrs)
    check_masks(ctx, ins, attrs, P)
    check_dropout(ctx, ins, attrs, P, false)
    return forward_outputs(attrs, P, stats)
  end,
}

local FP8_SCALES = { "descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o" }

local sdpa_fp8 = {
  name = "sdpa_fp8", family = "sdpa", mode = "SDPA_FP8",
  inputs = { "q", "k", "v", "descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o",
             opt "attn_scale", opt "seq_len_q", opt "seq_len_kv", opt "cu_seq_len_q", opt "cu_seq_len_kv",
             opt "seed", opt "offset", opt "dropout_mask", opt "dropout_scale" },
  outputs = { "O", opt "Stats", "Amax_S", "Amax_O", opt "RNG_DUMP" },
  aliases = {},
  attrs = forward_attrs(false),
  infer = function(ctx, ins, attrs)
    check_io_dtypes(ctx, ins, FP8, "sdpa_fp8")
    if ctx.compute_dtype ~= "fp32" then
      ctx:fail("E_DTYPE", "fp8 attention needs compute_data_type fp32, got %s", tostring(ctx.compute_dtype))
    end
    local stats = generate_stats(ctx, attrs)
    local P = qkv(ctx, ins, attrs, 16)
    for _, p in ipairs(FP8_SCALES) do
      util.scalar(ctx, p, ins[p])
      util.dtype_in(ctx, p, ins[p], { "fp32" })
    end
    check_attn_scale(ctx, ins, attrs)
    check_masks(ctx, ins, attrs, P)
    check_dropout(ctx, ins, attrs, P, false)
    local out = forward_outputs(attrs, P, stats)
    out.Amax_S = { dims = { 1, 1, 1, 1 }, dtype = "fp32" }
    out.Amax_O = { dims = { 1, 1, 1, 1 }, dtype = "fp32" }
    return out
  end,
}

local sdpa_backward = {
  name = "sdpa_backward", family = "sdpa", mode = "SDPA_BWD",
  inputs = { "q", "k", "v", "o", "dO", "stats", opt "attn_scale", opt "bias", opt "seq_len_q", opt "seq_len_kv",
             opt "cu_seq_len_q", opt "cu_seq_len_kv", opt "seed", opt "offset", opt "dropout_mask",
             opt "dropout_scale", opt "dropout_scale_inv", opt "sink_token" },
  outputs = { "dQ", "dK", "dV", opt "dBias", opt "DSINK_TOKEN", opt "RNG_DUMP" },
  aliases = {},
  attrs = backward_attrs(),
  infer = function(ctx, ins, attrs)
    check_io_dtypes(ctx, ins, IO16, "sdpa_backward")
    local P = qkv(ctx, ins, attrs, 8)
    local o_dims = { P.B, P.Hq, P.Sq, P.Dv }
    util.dims_are(ctx, "o", ins.o, o_dims, "[B, H_q, S_q, D_v]")
    util.dims_are(ctx, "dO", ins.dO, o_dims, "o's dims")
    util.dtype_in(ctx, "o", ins.o, IO16)
    util.dtype_in(ctx, "dO", ins.dO, IO16)
    util.dims_are(ctx, "stats", ins.stats, stats_dims(P), "[B, H_q, S_q, 1], the forward's Stats")
    util.dtype_in(ctx, "stats", ins.stats, { "fp32" })
    check_attn_scale(ctx, ins, attrs)
    check_masks(ctx, ins, attrs, P)
    check_dropout(ctx, ins, attrs, P, true)
    local out = {
      dQ = { dims = util.copy(ins.q.dims) },
      dK = { dims = util.copy(ins.k.dims) },
      dV = { dims = util.copy(ins.v.dims) },
    }
    if attrs.dBias then
      if not ins.bias then ctx:fail("E_ATTR", "dBias asks for the bias gradient but there is no bias input") end
      out.dBias = { dims = util.copy(ins.bias.dims) }
    end
    if attrs.dSink_token then
      if not ins.sink_token then
        ctx:fail("E_ATTR", "dSink_token asks for the sink gradient but there is no sink_token")
      end
      out.DSINK_TOKEN = { dims = util.copy(ins.sink_token.dims), dtype = "fp32" }
    end
    if attrs.rng_dump then out.RNG_DUMP = { dims = { P.B, P.Hq, P.Sq, P.Skv } } end
    return out
  end,
}

return { sdpa, sdpa_fp8, sdpa_backward }
