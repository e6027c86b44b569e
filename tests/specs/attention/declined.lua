-- sdpa graphs kiln's attention kernels decline, each by name in `kiln explain` (tests/attention.t):
-- an additive bias, ALiBi, a head dim that is not built, a head dim that is not contiguous,
-- Philox dropout, the backward at a head dim it is not built for, O in another dtype than q,
-- and paged K/V for a prefill (S dynamic: the decode kernels take paged K/V).
local kiln = require "kiln"
local dims = { B = kiln.dynamic, S = kiln.dynamic }
local function graph(name, inputs, body)
  return kiln.graph(name) { dims = dims, dtype = "bf16", inputs = inputs, body = body }
end
local qkv = { q = { "B", 4, "S", 128 }, k = { "B", 4, "S", 128 }, v = { "B", 4, "S", 128 } }
local function with(extra)
  local t = {}
  for n, x in pairs(qkv) do t[n] = x end
  for n, x in pairs(extra) do t[n] = x end
  return t
end
local attrs = { attn_scale = 0.088, generate_stats = false }
return {
  graph("bias", with { bias = { 1, 4, "S", "S" } }, function(g, q, k, v, bias)
    return { o = g:sdpa(q, k, v, nil, bias, attrs) }
  end),
  graph("alibi", qkv, function(g, q, k, v)
    return { o = g:sdpa(q, k, v, { attn_scale = 0.088, generate_stats = false, use_alibi_mask = true, use_causal_mask = true }) }
  end),
  graph("head_dim_80", { q = { "B", 4, "S", 80 }, k = { "B", 4, "S", 80 }, v = { "B", 4, "S", 80 } }, function(g, q, k, v)
    return { o = g:sdpa(q, k, v, attrs) }
  end),
  graph("strided_head_dim", { q = { "B", 4, "S", 128, strides = { "S*1024", "S*256", 256, 2 } }, k = qkv.k, v = qkv.v },
    function(g, q, k, v) return { o = g:sdpa(q, k, v, attrs) } end),
  graph("dropout", with { seed = { 1, 1, 1, 1, dtype = "int64" }, offset = { 1, 1, 1, 1, dtype = "int64" } },
    function(g, q, k, v, seed, offset)
      return { o = g:sdpa(q, k, v, nil, nil, nil, nil, nil, nil, nil, seed, offset,
        { attn_scale = 0.088, generate_stats = false, dropout_probability = 0.1 }) }
    end),
  graph("backward_d256", { q = { "B", 4, "S", 256 }, k = { "B", 4, "S", 256 }, v = { "B", 4, "S", 256 },
                          o = { "B", 4, "S", 256 }, dO = { "B", 4, "S", 256 }, stats = { "B", 4, "S", 1, dtype = "fp32" } },
    function(g, q, k, v, o, dO, stats)
      local dq, dk, dv = g:sdpa_backward(q, k, v, o, dO, stats, { attn_scale = 0.088 })
      return { dq = dq, dk = dk, dv = dv }
    end),
  kiln.graph "o_fp32" {
    dims = dims, dtype = "bf16", inputs = qkv,
    body = function(g, q, k, v) return { o = g:sdpa(q, k, v, { attn_scale = 0.088, generate_stats = false, dtype = "fp32" }) } end,
  },
  kiln.graph "paged_prefill" {
    dims = { B = kiln.dynamic, S = kiln.dynamic, NB = kiln.dynamic, NP = kiln.dynamic }, dtype = "bf16",
    inputs = { q = { "B", 4, "S", 128 }, k = { "NB", 4, 16, 128 }, v = { "NB", 4, 16, 128 },
               lq = { "B", 1, 1, 1, dtype = "int32" }, lk = { "B", 1, 1, 1, dtype = "int32" },
               kt = { "B", 1, "NP", 1, dtype = "int32" }, vt = { "B", 1, "NP", 1, dtype = "int32" } },
    body = function(g, q, k, v, lq, lk, kt, vt)
      return { o = g:sdpa(q, k, v, { seq_len_q = lq, seq_len_kv = lk, paged_attention_k_table = kt, paged_attention_v_table = vt,
        paged_attention_max_seq_len_kv = 4096, use_padding_mask = true, attn_scale = 0.088, generate_stats = false }) }
    end,
  },
}
