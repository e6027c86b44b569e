-- sdpa_backward's options on kiln's backward kernels, each graph the forward and its backward
-- (O and the Stats the forward wrote, a random dO), checked against the fp64 reference
-- (tests/gpu/run, at odd lengths: S and SK not multiples of a tile, S != SK): head dims 64,
-- 96, 128; causal masks of both alignments, a sliding window, a band; GQA and MQA; softcap; a
-- runtime scale; padding masks with per-batch lengths; a sink and its gradient; fp16; BSHD
-- layouts; the deterministic mode.
local k = require "kiln"

local function bhsd(h, s, d, dtype) return { "B", h, s, d, dtype = dtype } end

-- one graph: q heads hq, k/v heads hk, head dim d, the attributes both ops take, bwd-only ones
local function case(name, o)
  local hq, hk, d = o.hq or 4, o.hk or o.hq or 4, o.d or 128
  local inputs = { q = bhsd(hq, "S", d, o.dtype), kk = bhsd(hk, "SK", d, o.dtype), v = bhsd(hk, "SK", d, o.dtype),
                   dO = bhsd(hq, "S", d, o.dtype) }
  return k.graph(name) {
    dims = { B = k.dynamic, S = k.dynamic, SK = k.dynamic }, dtype = o.dtype or "bf16",
    inputs = inputs,
    body = function(g, q, kk, v, dO)
      local attrs = { attn_scale = o.scale or 1 / math.sqrt(d) }
      for a, x in pairs(o.attrs or {}) do attrs[a] = x end
      local fa = { generate_stats = true, dtype = o.dtype or "bf16" }
      for a, x in pairs(attrs) do fa[a] = x end
      local out, stats = g:sdpa(q, kk, v, fa)
      local ba = { use_deterministic_algorithm = o.deterministic }
      for a, x in pairs(attrs) do ba[a] = x end
      local dq, dk, dv = g:sdpa_backward(q, kk, v, out, dO, stats, ba)
      return { o = out, stats = stats, dq = dq, dk = dk, dv = dv }
    end,
  }
end

return {
  case("d128", {}),
  case("d128_causal", { attrs = { use_causal_mask = true } }),
  case("d64_causal_det", { d = 64, attrs = { use_causal_mask = true }, deterministic = true }),
  case("d96_causal_br", { d = 96, attrs = { use_causal_mask_bottom_right = true } }),
  case("d128_gqa_causal", { hq = 8, hk = 2, attrs = { use_causal_mask = true } }),
  case("d128_gqa_det", { hq = 8, hk = 2, attrs = { use_causal_mask = true }, deterministic = true }),
  case("d64_mqa_band", { d = 64, hq = 4, hk = 1, attrs = { diagonal_band_left_bound = 70, diagonal_band_right_bound = 33,
    diagonal_alignment = "bottom_right" } }),
  case("d128_window", { attrs = { sliding_window_length = 100, use_causal_mask = true } }),
  case("d128_softcap", { attrs = { softcap = 5.0, use_causal_mask = true } }),
  case("d64_fp16", { d = 64, dtype = "fp16", attrs = { use_causal_mask = true } }),
  k.graph "d128_runtime_scale" {
    dims = { B = k.dynamic, S = k.dynamic, SK = k.dynamic }, dtype = "bf16",
    inputs = { q = bhsd(2, "S", 128), kk = bhsd(2, "SK", 128), v = bhsd(2, "SK", 128), dO = bhsd(2, "S", 128),
               scale = { 1, 1, 1, 1, scalar = true, dtype = "fp32" } },
    body = function(g, q, kk, v, dO, scale)
      local o, stats = g:sdpa(q, kk, v, scale, { generate_stats = true, use_causal_mask = true, dtype = "bf16" })
      local dq, dk, dv = g:sdpa_backward(q, kk, v, o, dO, stats, scale, { use_causal_mask = true })
      return { o = o, dq = dq, dk = dk, dv = dv }
    end,
  },
  k.graph "d128_padding_sink" {
    dims = { B = k.dynamic, S = k.dynamic, SK = k.dynamic }, dtype = "bf16",
    inputs = { q = bhsd(4, "S", 128), kk = bhsd(2, "SK", 128), v = bhsd(2, "SK", 128), dO = bhsd(4, "S", 128),
               lq = { "B", 1, 1, 1, dtype = "int32" }, lk = { "B", 1, 1, 1, dtype = "int32" },
               sink = { 1, 4, 1, 1, dtype = "fp32" } },
    body = function(g, q, kk, v, dO, lq, lk, sink)
      local attrs = { attn_scale = 0.088, use_padding_mask = true, use_causal_mask_bottom_right = true }
      local o, stats = g:sdpa(q, kk, v, nil, nil, nil, lq, lk, nil, nil, nil, nil, nil, nil, nil, nil, sink,
        { attn_scale = 0.088, generate_stats = true, use_padding_mask = true, use_causal_mask_bottom_right = true,
          dtype = "bf16" })
      attrs.dSink_token = true
      local dq, dk, dv, dsink = g:sdpa_backward(q, kk, v, o, dO, stats, nil, nil, lq, lk, nil, nil, nil, nil, nil, nil,
        nil, sink, attrs)
      return { o = o, dq = dq, dk = dk, dv = dv, dsink = dsink }
    end,
  },
  -- BSHD tensors (strides S*H*D, D, H*D, 1) for every operand and gradient
  k.graph "d128_bshd" {
    dims = { B = k.dynamic, S = k.dynamic }, dtype = "bf16",
    inputs = { q = { "B", 4, "S", 128, strides = { "S*512", 128, 512, 1 } },
               kk = { "B", 4, "S", 128, strides = { "S*512", 128, 512, 1 } },
               v = { "B", 4, "S", 128, strides = { "S*512", 128, 512, 1 } },
               dO = { "B", 4, "S", 128, strides = { "S*512", 128, 512, 1 } } },
    body = function(g, q, kk, v, dO)
      local o, stats = g:sdpa(q, kk, v, { attn_scale = 0.088, generate_stats = true, use_causal_mask = true, dtype = "bf16" })
      local dq, dk, dv = g:sdpa_backward(q, kk, v, o, dO, stats, { attn_scale = 0.088, use_causal_mask = true })
      return { o = o, dq = dq, dk = dk, dv = dv }
    end,
  },
}
