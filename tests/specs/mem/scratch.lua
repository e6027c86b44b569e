-- Virtual tensors that cross kernel groups: each is written to the plan's workspace (a
-- scratch tensor) by the kernel that makes it and read from there by the later ones.
local k = require "kiln"

return {
  -- the norm's output feeds a GEMM (TMA loads from the workspace)
  k.graph "scratch_norm_gemm" {
    dims = { T = k.dynamic, H = 1024, N = 384 },
    dtype = "bf16",
    inputs = { x = { "T", "H" }, w = { "H" }, W = { "H", "N" } },
    body = function(g, x, w, W)
      local y = g:cast(g:rmsnorm(x, w, { epsilon = 1e-6 }), "bf16")
      return { z = g:matmul(y, W) }
    end,
  },
  -- a GEMM's product is normalized by a softmax over its rows
  k.graph "scratch_gemm_softmax" {
    dims = { T = k.dynamic, K = 256, N = 1000 },
    dtype = "bf16",
    inputs = { q = { "T", "K" }, kt = { "K", "N" } },
    body = function(g, q, kt)
      local s = g:cast(g:matmul(q, kt), "bf16")
      return { p = g:softmax(s * 0.0625) }
    end,
  },
  -- one residual sum read by two anchors (a pointwise kernel writes it)
  k.graph "scratch_two_anchors" {
    dims = { T = k.dynamic, H = 1000 },
    dtype = "bf16",
    inputs = { x = { "T", "H" }, r = { "T", "H" }, w = { "H" } },
    body = function(g, x, r, w)
      local h = x + r
      return { y = g:rmsnorm(h, w, { epsilon = 1e-6 }), s = g:softmax(h) }
    end,
  },
  -- a row's softmax (fp32 scratch) reduced over the rows, and a per-row max used again
  k.graph "scratch_reductions" {
    dims = { T = k.dynamic, H = 768 },
    dtype = "fp16",
    inputs = { x = { "T", "H" } },
    body = function(g, x)
      local p = g:softmax(x)
      local colmax = g:reduction(p, { mode = "max", dims = { 1, "H" } })
      local m = g:reduction(x, { mode = "amax", dims = { "T", 1 } })
      return { colmax = g:cast(colmax, "fp32"), y = x / (m + 1.0) }
    end,
  },
  -- batch norm in training from primitives: per-channel statistics (axis reductions) read
  -- back by the pointwise kernels that center and normalize
  k.graph "scratch_batchnorm_train" {
    dims = { N = k.dynamic, C = 24, HW = 196 },
    dtype = "bf16",
    inputs = { x = { "N", "C", "HW" }, gamma = { 1, "C", 1, dtype = "fp32" }, beta = { 1, "C", 1, dtype = "fp32" } },
    body = function(g, x, gamma, beta)
      local mean = g:reduction(x, { mode = "avg", dims = { 1, "C", 1 } })
      local d = x - mean
      local var = g:reduction(d * d, { mode = "avg", dims = { 1, "C", 1 } })
      local y = d * g:rsqrt(var + 1e-5) * gamma + beta
      return { y = y, mean = mean, var = var }
    end,
  },
}
