-- sdpa_backward alone (o, dO and the Stats as inputs) for the CPU emulator (tests/attention.t):
-- small shapes off the tiles, each plan form: GQA under a causal mask (D 64, 128 keys by 64 rows),
-- the deterministic ordered dQ sums (D 64), a bottom-right band with softcap and a sink with its
-- gradient (D 128, 128 keys by 32 rows), fp16 (D 96).
local k = require "kiln"
local function bhsd(h, s, d, dtype) return { "B", h, s, d, dtype = dtype } end
local function case(name, opt)
  local hq, hk, d, dt = opt.hq or 2, opt.hk or 1, opt.d or 64, opt.dtype
  local inputs = { q = bhsd(hq, "S", d, dt), kk = bhsd(hk, "SK", d, dt), v = bhsd(hk, "SK", d, dt),
                   o = bhsd(hq, "S", d, dt), dO = bhsd(hq, "S", d, dt), stats = { "B", hq, "S", 1, dtype = "fp32" } }
  local attrs = { attn_scale = 1 / math.sqrt(d), use_deterministic_algorithm = opt.det }
  for a, x in pairs(opt.attrs or {}) do attrs[a] = x end
  local body = function(g, q, kk, v, o, dO, stats)
    local dq, dk, dv = g:sdpa_backward(q, kk, v, o, dO, stats, attrs)
    return { dq = dq, dk = dk, dv = dv }
  end
  if opt.sink then
    inputs.sink = { 1, hq, 1, 1, dtype = "fp32" }
    attrs.dSink_token = true
    body = function(g, q, kk, v, o, dO, stats, sink)
      local dq, dk, dv, dsink = g:sdpa_backward(q, kk, v, o, dO, stats, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil,
        nil, sink, attrs)
      return { dq = dq, dk = dk, dv = dv, dsink = dsink }
    end
  end
  return k.graph(name) { dims = { B = k.dynamic, S = k.dynamic, SK = k.dynamic }, dtype = dt or "bf16", inputs = inputs, body = body }
end
return {
  case("gqa_causal", { hq = 4, hk = 2, attrs = { use_causal_mask = true } }),
  case("det_causal", { det = true, attrs = { use_causal_mask = true } }),
  case("band_softcap_sink", { d = 128, sink = true, attrs = { softcap = 4.0, diagonal_band_left_bound = 40,
    diagonal_band_right_bound = 9, diagonal_alignment = "bottom_right" } }),
  case("fp16_d96", { d = 96, dtype = "fp16", hq = 2, hk = 2 }),
}
