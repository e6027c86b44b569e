-- y = alpha * (x · W) + r: a projection whose scaled output lands on the residual stream,
-- the scale and the residual add fused into the GEMM's epilogue.
local k = require "kiln"

local function residual(N, K)
  return k.graph "gemm_residual" {
    doc = "GEMM, scale by a constant, add a residual input, in the epilogue; bf16",
    dims = { M = k.dynamic, N = N, K = K },
    dtype = "bf16",
    inputs = { x = { "M", "K" }, w = { "K", "N" }, r = { "M", "N" } },
    body = function(g, x, w, r)
      return { y = g:add(g:mul(g:matmul(x, w), 0.5), r) }
    end,
  }
end

return { residual(4096, 4096), residual(1032, 1056) }
