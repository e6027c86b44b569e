-- The forward sdpa at the benchmark's shapes (bench/bench_sdpa.py): BHSD bf16, inference
-- (no Stats), the scale 1/sqrt(D); full attention at D = 64, 128, 256, causal at 128, and a
-- causal GQA of 64 q heads over 8 k/v heads and of 32 over 8 (Llama-3 8B); decode (1 or 4 new
-- tokens against a cache of SK keys, no mask) at 32 over 8, 64 over 8 and 16 over 16 heads, and
-- through page tables (pages of 16 keys, at most 8192 a sequence) at 32 over 8; for training,
-- the forward with its Stats and the backward (default and deterministic) at D = 64 and 128,
-- full and causal, 16 over 16 and 64 over 8 heads.
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
local function decode(name, o)
  return k.graph(name) {
    dims = { B = k.dynamic, S = { 1, 4 }, SK = k.dynamic, H = o.h, HK = o.hk }, dtype = "bf16",
    inputs = { q = { "B", "H", "S", 128 }, kk = { "B", "HK", "SK", 128 }, v = { "B", "HK", "SK", 128 } },
    body = function(g, q, kk, v)
      return { o = g:sdpa(q, kk, v, { attn_scale = 1 / math.sqrt(128), generate_stats = false }) }
    end,
  }
end
local function decode_paged(name)
  local i32 = { "B", 1, 1, 1, dtype = "int32" }
  return k.graph(name) {
    dims = { B = k.dynamic, NB = k.dynamic, NP = k.dynamic }, dtype = "bf16",
    inputs = { q = { "B", 32, 1, 128 }, kk = { "NB", 8, 16, 128 }, v = { "NB", 8, 16, 128 }, lq = i32, lk = i32,
               kt = { "B", 1, "NP", 1, dtype = "int32" }, vt = { "B", 1, "NP", 1, dtype = "int32" } },
    body = function(g, q, kk, v, lq, lk, kt, vt)
      return { o = g:sdpa(q, kk, v, { seq_len_q = lq, seq_len_kv = lk, paged_attention_k_table = kt, paged_attention_v_table = vt,
        paged_attention_max_seq_len_kv = 8192, use_padding_mask = true, attn_scale = 1 / math.sqrt(128), generate_stats = false }) }
    end,
  }
end
local function train(name, opt)
  local dims = { B = k.dynamic, S = k.dynamic, H = opt.h, HK = opt.hk, D = opt.d }
  local qkv = { q = { "B", "H", "S", "D" }, kk = { "B", "HK", "S", "D" }, v = { "B", "HK", "S", "D" } }
  local function attrs(d, extra)
    local a = { attn_scale = 1 / math.sqrt(d), use_causal_mask = opt.causal }
    for n, x in pairs(extra) do a[n] = x end
    return a
  end
  local bwd_inputs = { o = { "B", "H", "S", "D" }, dO = { "B", "H", "S", "D" }, stats = { "B", "H", "S", 1, dtype = "fp32" } }
  for n, t in pairs(qkv) do bwd_inputs[n] = t end
  local function bwd(suffix, det)
    return k.graph(name .. suffix) {
      dims = dims, dtype = "bf16", inputs = bwd_inputs,
      body = function(g, q, kk, v, o, dO, stats)
        local d = math.tointeger(q.dims[4])
        local dq, dk, dv = g:sdpa_backward(q, kk, v, o, dO, stats, attrs(d, { use_deterministic_algorithm = det }))
        return { dq = dq, dk = dk, dv = dv }
      end,
    }
  end
  return k.graph(name .. "_fwd") {
    dims = dims, dtype = "bf16", inputs = qkv,
    body = function(g, q, kk, v)
      local d = math.tointeger(q.dims[4])
      local o, stats = g:sdpa(q, kk, v, attrs(d, { generate_stats = true }))
      return { o = o, stats = stats }
    end,
  }, bwd("_bwd", false), bwd("_bwd_det", true)
end
local graphs = {
  decode_paged("sdpa_decode_paged_32_8"),
  decode("sdpa_decode_32_8", { h = 32, hk = 8 }),
  decode("sdpa_decode_64_8", { h = 64, hk = 8 }),
  decode("sdpa_decode_16_16", { h = 16, hk = 16 }),
  attn("sdpa_full", { h = 16, hk = 16, d = { 64, 128, 256 }, causal = false }),
  attn("sdpa_causal", { h = 16, hk = 16, d = 128, causal = true }),
  attn("sdpa_gqa_causal", { h = 64, hk = 8, d = 128, causal = true }),
  attn("sdpa_gqa32_causal", { h = 32, hk = 8, d = 128, causal = true }),
}
for _, t in ipairs {
  { "sdpa_train_full", { h = 16, hk = 16, d = { 64, 128 }, causal = false } },
  { "sdpa_train_causal", { h = 16, hk = 16, d = 128, causal = true } },
  { "sdpa_train_gqa_causal", { h = 64, hk = 8, d = 128, causal = true } },
} do
  for _, gr in ipairs { train(t[1], t[2]) } do graphs[#graphs + 1] = gr end
end
return graphs
