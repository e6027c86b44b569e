-- Causal prefill attention, GQA (32 q heads over 8 k/v heads, as Llama-3 8B), head dim 128,
-- BHSD bf16, the scale 1/sqrt(128): for inference (O) and for training (O and the Stats the
-- backward takes). One persistent kernel on sm_90a (wgmma, TMA), mma.sync elsewhere.
local kiln = require "kiln"
local function prefill(name, training)
  return kiln.graph(name) {
    doc = "causal GQA attention, 32/8 heads, d128" .. (training and ", with Stats" or ""),
    dims = { B = kiln.dynamic, S = kiln.dynamic },
    dtype = "bf16",
    inputs = { q = { "B", 32, "S", 128 }, k = { "B", 8, "S", 128 }, v = { "B", 8, "S", 128 } },
    body = function(g, q, k, v)
      local o, stats = g:sdpa(q, k, v, { attn_scale = 1 / math.sqrt(128), use_causal_mask = true,
                                          generate_stats = training })
      return training and { o = o, stats = stats } or { o = o }
    end,
  }
end
return { prefill("sdpa_prefill", false), prefill("sdpa_prefill_training", true) }
