-- The GDN forward on kiln's chunked kernel (chunks of 64 tokens, the WY form): dynamic T, several
-- sequences of odd lengths packed along it (cu_seqlens drawn by `kiln run`), K = V = 128 and 64
-- and K != V, GVA (2 v heads a q head) and GQA (2 q heads a v head), initial states fp32 per
-- sequence and bf16 through state_indices, the final state, the in-kernel L2 norm, the safe,
-- linear and log gates, beta raw, sigmoid and 2 sigmoid, fp16. Random normal inputs make
-- a log or linear gate above 1 and a raw beta outside (0, 2), where the recurrence grows without
-- bound: those graphs take their gate and beta through a sigmoid op first. Each graph is checked
-- against the fp64 reference (tests/gpu/steps/gdn.sh).
local k = require "kiln"

return {
  -- Qwen3-Next's options at few heads: GVA 2, l2norm, safe gate (raw g bf16), sigmoid beta, fp32 states
  k.graph "gva_d128_safe" {
    dims = { T = k.dynamic }, dtype = "bf16",
    inputs = { q = { "T", 2, 128 }, kk = { "T", 2, 128 }, v = { "T", 4, 128 }, g = { "T", 4 },
               b = { "T", 4 }, cu = { 4, dtype = "int32" }, h0 = { 3, 4, 128, 128, dtype = "fp32" },
               a_log = { 4, dtype = "fp32" }, dt_bias = { 4, dtype = "fp32" } },
    body = function(gr, q, kk, v, g, b, cu, h0, a_log, dt_bias)
      local o, ht = gr:gdn(q, kk, v, g, b, cu, { initial_state = h0, a_log = a_log, dt_bias = dt_bias,
        use_qk_l2norm = true, safe_gate = true, use_beta_sigmoid = true, output_final_state = true })
      return { o = o, final_state = ht }
    end,
  },
  -- fp16, K = V = 64, no L2 norm (k scaled by 1/sqrt(64) first), the linear gate (sigmoid(g) in
  -- fp16), raw beta (sigmoid(b) in fp32), int64 cu_seqlens of dynamic length, no states
  k.graph "d64_fp16_linear" {
    dims = { T = k.dynamic, N1 = k.dynamic }, dtype = "fp16",
    inputs = { q = { "T", 2, 64 }, kk = { "T", 2, 64 }, v = { "T", 2, 64 }, g = { "T", 2, dtype = "fp32" },
               b = { "T", 2, dtype = "fp32" }, cu = { "N1", dtype = "int64" } },
    body = function(gr, q, kk, v, g, b, cu)
      local ks = gr:mul(kk, 0.125, { dtype = "fp16" })
      return { o = gr:gdn(q, ks, v, gr:sigmoid(g, { dtype = "fp16" }), gr:sigmoid(b, { dtype = "fp32" }), cu,
        { gate_domain = "linear" }) }
    end,
  },
  -- GQA (4 q heads, 2 k/v heads), a bf16 state pool of 11 rows through state_indices, 2 sigmoid
  -- beta, the log gate (-softplus(g) in bf16), the final state in bf16
  k.graph "gqa_pool_bf16" {
    dims = { T = k.dynamic }, dtype = "bf16",
    inputs = { q = { "T", 4, 128 }, kk = { "T", 2, 128 }, v = { "T", 2, 128 }, g = { "T", 4, dtype = "fp32" },
               b = { "T", 4 }, cu = { 4, dtype = "int32" }, pool = { 11, 4, 128, 128 }, idx = { 3, dtype = "int32" } },
    body = function(gr, q, kk, v, g, b, cu, pool, idx)
      local o, ht = gr:gdn(q, kk, v, gr:neg(gr:softplus(g), { dtype = "bf16" }), b, cu, { initial_state = pool,
        state_indices = idx, use_qk_l2norm = true, use_beta_sigmoid = true, allow_neg_eigval = true,
        output_final_state = true })
      return { o = o, final_state = ht }
    end,
  },
  -- K 64 against V 128 (two V tiles of 64), a given scale, the safe gate without a_log / dt_bias,
  -- fp32 beta
  k.graph "k64_v128_scale" {
    dims = { T = k.dynamic }, dtype = "bf16",
    inputs = { q = { "T", 2, 64 }, kk = { "T", 2, 64 }, v = { "T", 2, 128 }, g = { "T", 2, dtype = "fp32" },
               b = { "T", 2, dtype = "fp32" }, cu = { 3, dtype = "int32" }, h0 = { 2, 2, 128, 64, dtype = "fp32" } },
    body = function(gr, q, kk, v, g, b, cu, h0)
      local o, ht = gr:gdn(q, kk, v, g, b, cu, { initial_state = h0, scale = 0.2, use_beta_sigmoid = true,
        safe_gate = true, use_qk_l2norm = true, output_final_state = true })
      return { o = o, final_state = ht }
    end,
  },
}
