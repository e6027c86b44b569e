-- The forward sdpa at decode shapes (1 to 16 query positions, many keys) on kiln's decode
-- kernels: the q heads of a k/v head packed into one tile, the keys split over CTAs and
-- combined. Each graph is checked against the fp64 reference (tests/gpu/run) at key lengths
-- within one split and across many; head dims 64, 96, 128, 192 with Dv 128, 256; GQA, MQA
-- and MHA; causal masks of both alignments, a sliding window; softcap; a runtime scale;
-- ragged lengths with a sink; the Stats, Max and Sum_exp outputs; fp16; paged K/V (pages of
-- 16, 64 and 1 keys, random page tables over NB blocks, NP pages a sequence).
local k = require "kiln"

local function bhsd(h, s, d, dtype) return { "B", h, s, d, dtype = dtype } end

-- one graph: q positions s (a list), q heads hq, k/v heads hk, head dims d and dv, attributes
local function case(name, o)
  local hq, hk, d, dv = o.hq or 4, o.hk or o.hq or 4, o.d or 128, o.dv or o.d or 128
  local inputs = { q = bhsd(hq, "S", d, o.dtype), kk = bhsd(hk, "SK", d, o.dtype), v = bhsd(hk, "SK", dv, o.dtype) }
  return k.graph(name) {
    dims = { B = k.dynamic, S = o.s, SK = k.dynamic }, dtype = o.dtype or "bf16",
    inputs = inputs,
    body = function(g, q, kk, v)
      local attrs = { attn_scale = o.scale or 1 / math.sqrt(d), generate_stats = true }
      for a, x in pairs(o.attrs or {}) do attrs[a] = x end
      local outs = { g:sdpa(q, kk, v, attrs) }
      local r = { o = outs[1], stats = outs[2] }
      if attrs.score_max then r.mx = outs[3]; r.se = outs[4] end
      return r
    end,
  }
end

-- paged K/V: block containers [NB, hk, page, d], page tables [B, 1, NP, 1], lengths (bottom-right
-- causal for more than one query position), at most max_kv keys
local function paged(name, page, o)
  local hq, hk, d = o.hq or 4, o.hk or 4, o.d or 128
  local i32 = { "B", 1, 1, 1, dtype = "int32" }
  return k.graph(name) {
    dims = { B = k.dynamic, S = { o.s or 1 }, NB = k.dynamic, NP = k.dynamic }, dtype = "bf16",
    inputs = { q = bhsd(hq, "S", d), kk = { "NB", hk, page, d }, v = { "NB", hk, page, d }, lq = i32, lk = i32,
               kt = { "B", 1, "NP", 1, dtype = "int32" }, vt = { "B", 1, "NP", 1, dtype = "int32" } },
    body = function(g, q, kk, v, lq, lk, kt, vt)
      local o_, stats = g:sdpa(q, kk, v, { seq_len_q = lq, seq_len_kv = lk, paged_attention_k_table = kt,
        paged_attention_v_table = vt, paged_attention_max_seq_len_kv = o.max_kv or 4000, use_padding_mask = true,
        use_causal_mask_bottom_right = (o.s or 1) > 1, attn_scale = 1 / math.sqrt(d), generate_stats = true })
      return { o = o_, stats = stats }
    end,
  }
end

return {
  case("gqa_d128", { s = { 1, 4 }, hq = 8, hk = 2 }),
  case("mha_d128_causal_br", { s = { 16 }, attrs = { use_causal_mask_bottom_right = true } }),
  case("gqa8_d64_causal_br", { s = { 4 }, d = 64, hq = 16, hk = 2, attrs = { use_causal_mask_bottom_right = true } }),
  case("mqa_d256", { s = { 1 }, d = 256, hq = 4, hk = 1 }),
  case("d192_dv128", { s = { 2 }, d = 192, dv = 128, hq = 8, hk = 1, attrs = { use_causal_mask_bottom_right = true } }),
  case("d96", { s = { 1 }, d = 96, hq = 2 }),
  case("softcap_window", { s = { 3 }, hq = 4, hk = 2, attrs = { softcap = 5.0, sliding_window_length = 700,
    use_causal_mask_bottom_right = true } }),
  case("fp16_stats", { s = { 1 }, dtype = "fp16", hq = 8, hk = 1, attrs = { score_max = true, score_sum_exp = true } }),
  case("top_left_causal", { s = { 2 }, hq = 2, attrs = { use_causal_mask = true } }),
  k.graph "ragged_sink" {
    dims = { B = k.dynamic, S = { 5 }, SK = k.dynamic }, dtype = "bf16",
    inputs = { q = bhsd(4, "S", 128), kk = bhsd(2, "SK", 128), v = bhsd(2, "SK", 128),
               lq = { "B", 1, 1, 1, dtype = "int32" }, lk = { "B", 1, 1, 1, dtype = "int32" },
               sink = { 1, 4, 1, 1, dtype = "fp32" } },
    body = function(g, q, kk, v, lq, lk, sink)
      local o, stats = g:sdpa(q, kk, v, nil, nil, nil, lq, lk, nil, nil, nil, nil, nil, nil, nil, nil, sink,
        { attn_scale = 0.088, generate_stats = true, use_padding_mask = true, use_causal_mask_bottom_right = true })
      return { o = o, stats = stats }
    end,
  },
  k.graph "runtime_scale" {
    dims = { B = k.dynamic, S = { 1 }, SK = k.dynamic }, dtype = "bf16",
    inputs = { q = bhsd(4, "S", 128), kk = bhsd(4, "SK", 128), v = bhsd(4, "SK", 128), scale = { 1, 1, 1, 1, scalar = true, dtype = "fp32" } },
    body = function(g, q, kk, v, scale)
      return { o = g:sdpa(q, kk, v, scale, { generate_stats = false }) }
    end,
  },
  paged("paged_p16", 16, { hq = 8, hk = 2 }),
  paged("paged_p64_gqa8_d64", 64, { s = 4, hq = 8, hk = 1, d = 64 }),
  paged("paged_p1", 1, { max_kv = 700 }),
}
