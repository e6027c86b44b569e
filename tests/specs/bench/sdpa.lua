-- The forward sdpa at the benchmark's shapes (bench/bench_sdpa.py): BHSD bf16, inference
-- (no Stats), the scale 1/sqrt(D); full attention at D = 64, 128, 256, causal at 128, and a
-- causal GQA of 64 q heads over 8 k/v heads and of 32 over 8 (Llama-3 8B).
local k = require "kiln"
local function attn(name, o)
  return k.graph(name) {
    dims = { B = k.dynamic, S = k.dynamic, H = o.h, HK = o.hk, D = o.d }, dtype = "bf16",
    inputs = { q = { "B", "H", "S", "D" }, kk = { "B", "HK", "S", "D" }, v = { "B", "HK", "S", "D" } },
    body = function(g, q, kk, v)
      local d = math.tointeger(q.dims[4])
      local o_ = g:sdpa(q, kk, v, { attn_scale = 1 / math.sqrt(d), generate_stats = false, use_causal_mask = o.causal })
      return { o = o_ }
    end,
  }
end
return {
  attn("sdpa_full", { h = 16, hk = 16, d = { 64, 128, 256 }, causal = false }),
  attn("sdpa_causal", { h = 16, hk = 16, d = 128, causal = true }),
  attn("sdpa_gqa_causal", { h = 64, hk = 8, d = 128, causal = true }),
  attn("sdpa_gqa32_causal", { h = 32, hk = 8, d = 128, causal = true }),
}
