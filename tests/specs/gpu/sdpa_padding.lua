-- sdpa under a padding mask whose lengths end inside the tensors (tests/gpu/sdpa_padding.py
-- fills the K and V rows past each length with NaN): no key past seq_len_kv may reach O.
local k = require "kiln"

local function bhsd(h, s, d) return { "B", h, s, d } end

return {
  k.graph "padding" {
    dims = { B = k.dynamic, S = k.dynamic, SK = k.dynamic }, dtype = "bf16",
    inputs = { q = bhsd(4, "S", 128), kk = bhsd(2, "SK", 128), v = bhsd(2, "SK", 128),
               lq = { "B", 1, 1, 1, dtype = "int32" }, lk = { "B", 1, 1, 1, dtype = "int32" } },
    body = function(g, q, kk, v, lq, lk)
      return { o = g:sdpa(q, kk, v, { attn_scale = 0.088, generate_stats = false, seq_len_q = lq, seq_len_kv = lk, use_padding_mask = true }) }
    end,
  },
}
