-- y = silu(x · Wgᵀ) * (x · Wuᵀ): a gated MLP's up projection written as models write it, two
-- linear layers of one x. The two matmuls share a kernel (a dual GEMM: x's tiles loaded once,
-- two accumulators, SwiGLU in the epilogue). Wg and Wu are [N, K] weights, given as B = Wᵀ
-- (strides {1, K}).
-- N, K: LLaMA-2 7B (11008, 4096), LLaMA-3 8B / Mixtral (14336, 4096), and an odd pair that is
-- no multiple of any tile.
local k = require "kiln"

local function gated(N, K)
  return k.graph "gemm_gated_mlp" {
    doc = "SwiGLU of two linear layers of one x, bf16 in and out, fp32 accumulation",
    dims = { M = k.dynamic, N = N, K = K },
    dtype = "bf16",
    inputs = { x = { "M", "K" }, wg = { "K", "N", strides = { 1, "K" } }, wu = { "K", "N", strides = { 1, "K" } } },
    body = function(g, x, wg, wu)
      return { y = g:swish(g:matmul(x, wg)) * g:matmul(x, wu) }
    end,
  }
end

return { gated(11008, 4096), gated(14336, 4096), gated(1032, 1056) }
