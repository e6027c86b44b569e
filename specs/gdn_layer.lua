-- Gated DeltaNet layer forward, Qwen3-Next style: 16 q/k heads, 32 v heads (GVA), K = V = 128,
-- bf16, THD (4 sequences packed along T, boundaries in cu_seqlens), the L2 norm of q and k in
-- the kernel, the safe gate -exp(a_log) softplus(g + dt_bias) (raw g fp32), beta = sigmoid(b)
-- (raw b bf16), an fp32 initial state per sequence and the final state out (prefill of a batch
-- of chat turns). The sequence count is static: cu_seqlens has N + 1 entries and the states N
-- rows, which one dynamic dim cannot name both.
local kiln = require "kiln"
return {
  kiln.graph "gdn_layer" {
    doc = "GDN prefill, 4 sequences, 16/32 heads, d128, l2norm, safe gate, initial and final state",
    dims = { T = kiln.dynamic },
    dtype = "bf16",
    inputs = { q = { "T", 16, 128 }, k = { "T", 16, 128 }, v = { "T", 32, 128 },
               g = { "T", 32, dtype = "fp32" }, b = { "T", 32 }, cu = { 5, dtype = "int32" },
               h0 = { 4, 32, 128, 128, dtype = "fp32" }, a_log = { 32, dtype = "fp32" },
               dt_bias = { 32, dtype = "fp32" } },
    body = function(gr, q, k, v, g, b, cu, h0, a_log, dt_bias)
      local o, ht = gr:gdn(q, k, v, g, b, cu, { initial_state = h0, a_log = a_log, dt_bias = dt_bias,
        use_qk_l2norm = true, safe_gate = true, use_beta_sigmoid = true, output_final_state = true })
      return { o = o, final_state = ht }
    end,
  },
}
