-- y = silu(x · W^T + b) * gate: a gated MLP's projection with the bias and the SiLU gate
-- fused into the GEMM's epilogue (gate is an input of C's shape).
local k = require "kiln"

local function swiglu(N, K)
  return k.graph "gemm_swiglu" {
    doc = "GEMM + bias, then SiLU times a gate input, in the epilogue; bf16",
    dims = { M = k.dynamic, N = N, K = K },
    dtype = "bf16",
    inputs = { x = { "M", "K" }, w = { "K", "N", strides = { 1, "K" } }, b = { "N" }, gate = { "M", "N" } },
    body = function(g, x, w, b, gate)
      return { y = g:mul(g:swish(g:add(g:matmul(x, w), b)), gate) }
    end,
  }
end

return { swiglu(4096, 4096), swiglu(1032, 1056) }
