-- The forward sdpa's options on kiln's attention kernels, each checked against the fp64
-- reference (tests/gpu/run, at odd lengths: S and SK not multiples of a tile, S != SK): head
-- dims 64, 96, 128, 192 with Dv 128, 256; causal masks of both alignments, a sliding window, a
-- band; GQA and MQA; softcap; a runtime scale; padding masks with per-batch lengths; a sink;
-- the Stats, Max and Sum_exp outputs; fp16; BSHD layouts.
local k = require "kiln"

local function bhsd(h, s, d, dtype) return { "B", h, s, d, dtype = dtype } end

-- one graph: q heads hq, k/v heads hk, head dims d (q, k) and dv, sdpa attributes, extra inputs
local function case(name, o)
  local hq, hk, d, dv = o.hq or 4, o.hk or o.hq or 4, o.d or 128, o.dv or o.d or 128
  local inputs = { q = bhsd(hq, "S", d, o.dtype), kk = bhsd(hk, "SK", d, o.dtype), v = bhsd(hk, "SK", dv, o.dtype) }
  for n, t in pairs(o.inputs or {}) do inputs[n] = t end
  return k.graph(name) {
    dims = { B = k.dynamic, S = k.dynamic, SK = k.dynamic }, dtype = o.dtype or "bf16",
    inputs = inputs,
    body = function(g, q, kk, v, ...)
      local attrs = { attn_scale = o.scale or 1 / math.sqrt(d), generate_stats = true }
      for a, x in pairs(o.attrs or {}) do attrs[a] = x end
      local extra = o.extra and o.extra(...) or {}
      local outs = { g:sdpa(q, kk, v, extra.scale, nil, nil, extra.seq_len_q, extra.seq_len_kv, nil, nil, nil, nil, nil, nil,
        nil, nil, extra.sink, attrs) }
      local r = { o = outs[1], stats = outs[2] }
      if attrs.score_max then r.mx = outs[3]; r.se = outs[4] end
      return r
    end,
  }
end

return {
  case("d128", {}),
  case("d64_causal", { d = 64, attrs = { use_causal_mask = true } }),
  case("d96", { d = 96 }),
  case("d192_dv128_causal_br", { d = 192, dv = 128, attrs = { use_causal_mask_bottom_right = true } }),
  case("d256_window", { d = 256, attrs = { sliding_window_length = 100, use_causal_mask = true } }),
  case("d128_gqa_causal", { hq = 8, hk = 2, attrs = { use_causal_mask = true } }),
  case("d128_mqa_band", { hq = 4, hk = 1, attrs = { diagonal_band_left_bound = 70, diagonal_band_right_bound = 33,
    diagonal_alignment = "bottom_right" } }),
  case("d128_softcap", { attrs = { softcap = 5.0, use_causal_mask = true } }),
  case("d64_fp16_stats", { d = 64, dtype = "fp16", attrs = { score_max = true, score_sum_exp = true, use_causal_mask = true } }),
  case("d128_log2_stats", { attrs = { stats_use_log2 = true } }),
  k.graph "d128_runtime_scale" {
    dims = { B = k.dynamic, S = k.dynamic, SK = k.dynamic }, dtype = "bf16",
    inputs = { q = bhsd(2, "S", 128), kk = bhsd(2, "SK", 128), v = bhsd(2, "SK", 128), scale = { 1, 1, 1, 1, scalar = true, dtype = "fp32" } },
    body = function(g, q, kk, v, scale)
      local o = g:sdpa(q, kk, v, scale, { generate_stats = false, use_causal_mask = true })
      return { o = o }
    end,
  },
  k.graph "d128_padding_sink" {
    dims = { B = k.dynamic, S = k.dynamic, SK = k.dynamic }, dtype = "bf16",
    inputs = { q = bhsd(4, "S", 128), kk = bhsd(2, "SK", 128), v = bhsd(2, "SK", 128),
               lq = { "B", 1, 1, 1, dtype = "int32" }, lk = { "B", 1, 1, 1, dtype = "int32" },
               sink = { 1, 4, 1, 1, dtype = "fp32" } },
    body = function(g, q, kk, v, lq, lk, sink)
      local o, stats = g:sdpa(q, kk, v, nil, nil, nil, lq, lk, nil, nil, nil, nil, nil, nil, nil, nil, sink,
        { attn_scale = 0.088, generate_stats = true, use_padding_mask = true, use_causal_mask_bottom_right = true })
      return { o = o, stats = stats }
    end,
  },
  -- BSHD tensors (strides S*H*D, D, H*D, 1) for q, k, v and O
  k.graph "d128_bshd" {
    dims = { B = k.dynamic, S = k.dynamic }, dtype = "bf16",
    inputs = { q = { "B", 4, "S", 128, strides = { "S*512", 128, 512, 1 } },
               kk = { "B", 4, "S", 128, strides = { "S*512", 128, 512, 1 } },
               v = { "B", 4, "S", 128, strides = { "S*512", 128, 512, 1 } } },
    body = function(g, q, kk, v)
      local o = g:sdpa(q, kk, v, { attn_scale = 0.088, generate_stats = false, use_causal_mask = true })
      return { o = o }
    end,
  },
}
