-- y = gelu(x · W^T + b): a linear layer with its bias and exact (erf) GELU fused into the
-- GEMM's epilogue. W is the [N, K] weight, given as B = W^T ([K, N], strides {1, K}).
local k = require "kiln"

local function linear_gelu(N, K)
  return k.graph "gemm_bias_gelu" {
    doc = "GEMM + bias + GELU epilogue, bf16 in and out, fp32 accumulation and math",
    dims = { M = k.dynamic, N = N, K = K },
    dtype = "bf16",
    inputs = { x = { "M", "K" }, w = { "K", "N", strides = { 1, "K" } }, b = { "N" } },
    body = function(g, x, w, b)
      return { y = g:gelu(g:add(g:matmul(x, w), b)) }
    end,
  }
end

return { linear_gelu(8192, 8192), linear_gelu(1032, 1056) }
