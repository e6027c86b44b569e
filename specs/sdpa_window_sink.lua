-- Sliding-window attention with learnable sinks, as gpt-oss's local layers: 64 q heads over 8
-- k/v heads, head dim 64, a causal window of 128 keys, one sink logit per q head (fp32) that
-- takes its share of each row's softmax and attends to nothing. BHSD bf16, with Stats.
local kiln = require "kiln"
return kiln.graph "sdpa_window_sink" {
  doc = "causal sliding-window (128) GQA attention with sinks, 64/8 heads, d64",
  dims = { B = kiln.dynamic, S = kiln.dynamic },
  dtype = "bf16",
  inputs = { q = { "B", 64, "S", 64 }, k = { "B", 8, "S", 64 }, v = { "B", 8, "S", 64 },
             sinks = { 1, 64, 1, 1, dtype = "fp32" } },
  body = function(g, q, k, v, sinks)
    local o, stats = g:sdpa(q, k, v, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, sinks,
      { attn_scale = 0.125, use_causal_mask = true, sliding_window_length = 128, generate_stats = true })
    return { o = o, stats = stats }
  end,
}
