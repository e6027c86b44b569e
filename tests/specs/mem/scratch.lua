-- Virtual tensors that cross kernel groups: each is written to the plan's workspace (a
-- scratch tensor) by the kernel that makes it and read from there by the later ones.
local k = require "kiln"

local function batchnorm(name, stats_out)
  return k.graph(name) {
    dims = { B = k.dynamic, C = 24, HW = 196 },
    dtype = "bf16",
    inputs = { x = { "B", "C", "HW" }, gamma = { 1, "C", 1, dtype = "fp32" }, beta = { 1, "C", 1, dtype = "fp32" } },
    body = function(g, x, gamma, beta)
      local mean = g:reduction(x, { mode = "avg", dims = { 1, "C", 1 } })
      local d = x - mean
      local var = g:reduction(d * d, { mode = "avg", dims = { 1, "C", 1 } })
      local y = d * g:rsqrt(var + 1e-5) * gamma + beta
      if stats_out then return { y = y, mean = mean, var = var } end
      return { y = y }
    end,
  }
end

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
  -- one residual sum read by a norm and a GEMM: a pointwise kernel writes it, and its bf16
  -- cast for the GEMM
  k.graph "scratch_shared_sum" {
    dims = { T = k.dynamic, H = 512, N = 256 },
    dtype = "bf16",
    inputs = { x = { "T", "H" }, r = { "T", "H" }, w = { "H" }, W = { "H", "N" } },
    body = function(g, x, r, w, W)
      local h = x + r
      return { y = g:rmsnorm(h, w, { epsilon = 1e-6 }), z = g:matmul(g:cast(h, "bf16"), W) }
    end,
  },
  -- one residual sum read by two anchors: each computes it again (no scratch)
  k.graph "scratch_two_anchors" {
    dims = { T = k.dynamic, H = 1000 },
    dtype = "bf16",
    inputs = { x = { "T", "H" }, r = { "T", "H" }, w = { "H" } },
    body = function(g, x, r, w)
      local h = x + r
      return { y = g:rmsnorm(h, w, { epsilon = 1e-6 }), s = g:softmax(h) }
    end,
  },
  -- a row's softmax (fp32 scratch) reduced over the rows, and a per-row max used again over
  -- other rows (z's: not the reduction's own, which its kernel would take as its epilogue)
  k.graph "scratch_reductions" {
    dims = { T = k.dynamic, H = 768, N = 256 },
    dtype = "fp16",
    inputs = { x = { "T", "H" }, z = { "T", "N" } },
    body = function(g, x, z)
      local p = g:softmax(x)
      local colmax = g:reduction(p, { mode = "max", dims = { 1, "H" } })
      local m = g:reduction(x, { mode = "amax", dims = { "T", 1 } })
      return { colmax = g:cast(colmax, "fp32"), y = z / (m + 1.0) }
    end,
  },
  -- a chain of three scratch tensors: the softmax's fp32 probabilities take the bytes of the
  -- norm's output once the GEMM has read it (the logits scaled to O(1) and kept in fp32: a
  -- bf16 rounding of logits near 32 is 0.25, which exp makes a 25% change of a probability)
  k.graph "scratch_chain" {
    dims = { T = k.dynamic, H = 1024, N = 256 },
    dtype = "bf16",
    inputs = { x = { "T", "H" }, w = { "H" }, W = { "H", "N" } },
    body = function(g, x, w, W)
      local a = g:cast(g:rmsnorm(x, w, { epsilon = 1e-6 }), "bf16")
      local p = g:softmax(g:matmul(a, W) * 0.03125)
      return { s = g:cast(p, "bf16"), m = g:reduction(p, { mode = "max", dims = { 1, "N" } }) }
    end,
  },
  -- row kernels whose prologues read a per-row and a per-column statistic from scratch
  k.graph "scratch_prologue_stats" {
    dims = { T = k.dynamic, H = 1024 },
    dtype = "bf16",
    inputs = { x = { "T", "H" }, w = { "H" } },
    body = function(g, x, w)
      local m = g:reduction(x, { mode = "max", dims = { "T", 1 } })
      local c = g:reduction(x, { mode = "max", dims = { 1, "H" } })
      return { y = g:rmsnorm(x - m, w, { epsilon = 1e-6 }), z = g:softmax(x - c) }
    end,
  },
  -- prologues of the other engines reading statistics from scratch: softmax over channels
  -- (axissoftmax) after a per-(sample, position) max, instance norm after a per-channel mean,
  -- a row sum of x scaled by its column maxima
  k.graph "scratch_prologue_axes" {
    dims = { B = k.dynamic, C = 21, HW = 520 },
    dtype = "bf16",
    inputs = { x = { "B", "C", "HW" }, g1 = { 1, "C", 1 }, b1 = { 1, "C", 1 } },
    body = function(g, x, g1, b1)
      local m = g:reduction(x, { mode = "max", dims = { "B", 1, "HW" } })
      local c = g:reduction(x, { mode = "avg", dims = { 1, "C", 1 } })
      return { p = g:softmax(x - m, { axis = 1 }), y = g:instancenorm(x - c, g1, b1, { epsilon = 1e-5 }) }
    end,
  },
  k.graph "scratch_prologue_rowsum" {
    dims = { T = k.dynamic, H = 512 },
    dtype = "bf16",
    inputs = { x = { "T", "H" } },
    body = function(g, x)
      local c = g:reduction(x, { mode = "max", dims = { 1, "H" } })
      return { y = g:reduction(x * c, { mode = "add", dims = { "T", 1 } }) }
    end,
  },
  -- a pointwise group with outputs of two shapes: the [H] one is written by a kernel of its
  -- own, the [T, H] kernel computes c again (lower's split; no scratch)
  k.graph "scratch_two_shapes" {
    dims = { T = k.dynamic, H = 1000 },
    dtype = "bf16",
    inputs = { x = { "T", "H" }, b = { "H" } },
    body = function(g, x, b)
      local c = b * 2.0
      return { y = x + c, c2 = c + 1.0 }
    end,
  },
  -- batch norm in training from primitives: per-channel statistics (axis reductions) read back
  -- by the variance's prologue and the pointwise output kernel, which both compute x - mean
  -- again (copies of one pointwise group)
  batchnorm("scratch_batchnorm_train", true),
  -- the same with the statistics virtual: they cross kernels as scratch tensors
  batchnorm("scratch_batchnorm_stats", false),
}
