-- Graphs whose virtual tensors cross kernels (scratch tensors in the workspace), for
-- bench/scratch.py: a norm feeding a GEMM, one residual sum read by two anchors, and batch norm
-- in training written from primitives (per-channel statistics read back per element).
local k = require "kiln"
return {
  k.graph "norm_gemm" {
    dims = { T = k.dynamic, H = 4096, N = 4096 }, dtype = "bf16",
    inputs = { x = { "T", "H" }, w = { "H" }, W = { "H", "N" } },
    body = function(g, x, w, W)
      return { z = g:matmul(g:cast(g:rmsnorm(x, w, { epsilon = 1e-6 }), "bf16"), W) }
    end,
  },
  k.graph "two_anchors" {
    dims = { T = k.dynamic, H = 4096 }, dtype = "bf16",
    inputs = { x = { "T", "H" }, r = { "T", "H" }, w = { "H" } },
    body = function(g, x, r, w)
      local h = x + r
      return { y = g:rmsnorm(h, w, { epsilon = 1e-6 }), s = g:softmax(h) }
    end,
  },
  k.graph "bn_train" {
    dims = { B = k.dynamic, C = 64, HW = 3136 }, dtype = "bf16",
    inputs = { x = { "B", "C", "HW" }, gamma = { 1, "C", 1, dtype = "fp32" }, beta = { 1, "C", 1, dtype = "fp32" } },
    body = function(g, x, gamma, beta)
      local mean = g:reduction(x, { mode = "avg", dims = { 1, "C", 1 } })
      local d = x - mean
      local var = g:reduction(d * d, { mode = "avg", dims = { 1, "C", 1 } })
      return { y = d * g:rsqrt(var + 1e-5) * gamma + beta }
    end,
  },
}
