-- gdn at decode shapes (one token a sequence: T = N = 4 static), the recurrent kernel's decode
-- plans, checked on the GPU against the fp64 reference: states from a pool by state_indices
-- (fp32 and bf16), the final state out; GVA 2, K = V = 128 and 64.
local kiln = require "kiln"

local function case(name, o)
  local d, st = o.d or 128, o.state or "fp32"
  return kiln.graph(name) {
    dims = { P = kiln.dynamic }, dtype = "bf16",
    inputs = { q = { 4, 2, d }, k = { 4, 2, d }, v = { 4, 4, d }, g = { 4, 4, dtype = "fp32" }, b = { 4, 4 },
               cu = { 5, dtype = "int32" }, pool = { "P", 4, d, d, dtype = st }, idx = { 4, dtype = "int32" },
               a_log = { 4, dtype = "fp32" }, dt_bias = { 4, dtype = "fp32" } },
    body = function(gr, q, k, v, g, b, cu, pool, idx, a_log, dt_bias)
      local out, ht = gr:gdn(q, k, v, g, b, cu, { initial_state = pool, state_indices = idx, a_log = a_log,
        dt_bias = dt_bias, use_qk_l2norm = true, safe_gate = true, use_beta_sigmoid = true, output_final_state = true })
      return { o = out, final_state = ht }
    end,
  }
end

return {
  case("gdn_decode_pool_d128", {}),
  case("gdn_decode_pool_bf16_d64", { d = 64, state = "bf16" }),
}
