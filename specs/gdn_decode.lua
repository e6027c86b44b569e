-- Gated DeltaNet decode step: 256 sequences of one new token each, 16 q/k heads, 32 v heads,
-- K = V = 128, bf16, states in a pool of P rows [P, 32, 128, 128] fp32 picked by
-- state_indices and written back in place (overwrite_initial_state), L2 norm of q and k, safe
-- gate, beta sigmoid. The state is read and written once a step: 2 x 64 KB a (sequence,
-- head), bound by memory. The batch is static (cu_seqlens has B + 1 entries).
local kiln = require "kiln"
return {
  kiln.graph "gdn_decode" {
    doc = "GDN decode step over a state pool, 256 sequences, 16/32 heads, d128, in-place state update",
    dims = { P = kiln.dynamic },
    dtype = "bf16",
    inputs = { q = { 256, 16, 128 }, k = { 256, 16, 128 }, v = { 256, 32, 128 },
               g = { 256, 32, dtype = "fp32" }, b = { 256, 32 }, cu = { 257, dtype = "int32" },
               pool = { "P", 32, 128, 128, dtype = "fp32" }, idx = { 256, dtype = "int32" },
               a_log = { 32, dtype = "fp32" }, dt_bias = { 32, dtype = "fp32" } },
    body = function(gr, q, k, v, g, b, cu, pool, idx, a_log, dt_bias)
      local o = gr:gdn(q, k, v, g, b, cu, { initial_state = pool, state_indices = idx, a_log = a_log,
        dt_bias = dt_bias, use_qk_l2norm = true, safe_gate = true, use_beta_sigmoid = true,
        overwrite_initial_state = true })
      return { o = o }
    end,
  },
}
