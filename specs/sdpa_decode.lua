-- Decode attention, GQA (32 q heads over 8 k/v heads, as Llama-3 8B), head dim 128, BHSD bf16,
-- the scale 1/sqrt(128): one new token a sequence (and four, for speculative decoding) against
-- a KV cache of per-sequence length (seq_len_q and seq_len_kv; the queries are the cache's last positions:
-- a bottom-right causal mask). The q heads of a k/v head share one tile, the cache is split
-- over CTAs and the splits combined.
local kiln = require "kiln"
return {
  kiln.graph "sdpa_decode" {
    doc = "decode attention over a KV cache, 32/8 heads, d128, 1 or 4 new tokens",
    dims = { B = kiln.dynamic, S = { 1, 4 }, SK = kiln.dynamic },
    dtype = "bf16",
    inputs = { q = { "B", 32, "S", 128 }, k = { "B", 8, "SK", 128 }, v = { "B", 8, "SK", 128 },
               len_q = { "B", 1, 1, 1, dtype = "int32" }, len_kv = { "B", 1, 1, 1, dtype = "int32" } },
    body = function(g, q, k, v, len_q, len_kv)
      local o = g:sdpa(q, k, v, nil, nil, nil, len_q, len_kv, { attn_scale = 1 / math.sqrt(128), use_padding_mask = true,
                                                             use_causal_mask_bottom_right = true, generate_stats = false })
      return { o = o }
    end,
  },
}
