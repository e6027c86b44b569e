-- y = moe_grouped_matmul(x, w, first_token_offset): a mixture-of-experts layer's expert GEMMs in
-- one persistent launch (cuDNN's MoE grouped matmul, mode none): tokens sorted by expert, expert
-- e's rows from first_token_offset[e] to the next expert's (a device tensor: no host sync), each
-- times its weight w[e] stored [E, N, K] (K-major), bf16 out; and an fp8 form with a descale.
local k = require "kiln"

local function moe(E, N, K, dt)
  return k.graph(dt == "bf16" and "gemm_moe" or "gemm_moe_fp8") {
    doc = "grouped GEMM of " .. E .. " experts, tokens sorted by expert (offsets on the device)",
    dims = { T = k.dynamic, E = E, N = N, K = K },
    dtype = "bf16",
    inputs = { x = { "T", "K", dtype = dt }, w = { "E", "K", "N", dtype = dt, strides = { "N*K", 1, "K" } },
               offsets = { "E", dtype = "int32" }, descale = dt ~= "bf16" and { 1, dtype = "fp32" } or nil },
    body = dt == "bf16" and function(g, x, w, offsets) return { y = g:moe_grouped_matmul(x, w, offsets) } end
      or function(g, x, w, offsets, descale) return { y = g:cast(g:moe_grouped_matmul(x, w, offsets) * descale, "bf16") } end,
  }
end

-- Mixtral-style (8 experts, 4096 -> 14336 split: N 1536 a shard) and DeepSeek-style (64 experts,
-- 7168 -> 4096), and an instance the GPU check takes
return {
  moe(8, 1536, 4096, "bf16"), moe(8, 4096, 7168, "bf16"), moe(64, 1536, 4096, "bf16"), moe(64, 4096, 7168, "bf16"),
  moe(8, 1536, 4096, "fp8_e4m3"), moe(64, 4096, 7168, "fp8_e4m3"), moe(9, 264, 1056, "bf16"), moe(9, 264, 1056, "fp8_e4m3"),
}
