-- The backwards of batch norm, instance norm and adaptive layer norm: kernels from their
-- decompositions (ops/norm.lua: x_hat from the saved statistics, the means of dy and dy *
-- x_hat per statistic, the sums of dy * x_hat and dy to the scale's dims, dx per element),
-- checked against the reference executor's backward ops themselves. Sibling reductions over
-- the same axes share one kernel where the axisreduce engine takes them.
local k = require "kiln"
return {
  -- NCHW bf16 with fp32 parameters and a dynamic batch: the four per-channel reductions in one kernel
  k.graph "batchnorm_bwd_bf16" {
    dims = { T = k.dynamic, C = 24, H = 14, W = 14 }, dtype = "bf16",
    inputs = { dy = { "T", "C", "H", "W" }, x = { "T", "C", "H", "W" }, g = { 1, "C", 1, 1, dtype = "fp32" },
               mean = { 1, "C", 1, 1, dtype = "fp32" }, inv_var = { 1, "C", 1, 1, dtype = "fp32" } },
    body = function(G, dy, x, g, mean, inv_var)
      local dx, dg, db = G:batchnorm_backward(dy, x, g, mean, inv_var)
      return { dx = dx, dg = dg, db = db }
    end,
  },
  -- fp16 [B, C, L] with fp16 parameters (dscale and dbias written as fp16)
  k.graph "batchnorm_bwd_fp16_1d" {
    dims = { T = k.dynamic, C = 40, L = 250 }, dtype = "fp16",
    inputs = { dy = { "T", "C", "L" }, x = { "T", "C", "L" }, g = { 1, "C", 1 },
               mean = { 1, "C", 1, dtype = "fp32" }, inv_var = { 1, "C", 1, dtype = "fp32" } },
    body = function(G, dy, x, g, mean, inv_var)
      local dx, dg, db = G:batchnorm_backward(dy, x, g, mean, inv_var)
      return { dx = dx, dg = dg, db = db }
    end,
  },
  -- fp32 [B, C] (the channel reductions over the leading axis: one column reduction each)
  k.graph "batchnorm_bwd_fp32_2d" {
    dims = { T = k.dynamic, C = 96 }, dtype = "fp32",
    inputs = { dy = { "T", "C" }, x = { "T", "C" }, g = { 1, "C" }, mean = { 1, "C" }, inv_var = { 1, "C" } },
    body = function(G, dy, x, g, mean, inv_var)
      local dx, dg, db = G:batchnorm_backward(dy, x, g, mean, inv_var)
      return { dx = dx, dg = dg, db = db }
    end,
  },
  -- a training step's batch norm: the forward's statistics read by the backward in one plan
  k.graph "batchnorm_fwd_bwd" {
    dims = { T = k.dynamic, C = 16, HW = 300 }, dtype = "bf16",
    inputs = { x = { "T", "C", "HW" }, g = { 1, "C", 1, dtype = "fp32" }, b = { 1, "C", 1, dtype = "fp32" },
               dy = { "T", "C", "HW" } },
    body = function(G, x, g, b, dy)
      local y, mean, inv_var = G:batchnorm(x, g, b, { epsilon = 1e-5 })
      local dx, dg, db = G:batchnorm_backward(dy, x, g, mean, inv_var)
      return { y = y, dx = dx, dg = dg, db = db }
    end,
  },
  -- instance norm: rows of 1001 spatial elements, fp32 per-channel scale
  k.graph "instancenorm_bwd_bf16" {
    dims = { T = k.dynamic, C = 3, H = 7, W = 143 }, dtype = "bf16",
    inputs = { dy = { "T", "C", "H", "W" }, x = { "T", "C", "H", "W" }, g = { 1, "C", 1, 1, dtype = "fp32" },
               mean = { "T", "C", 1, 1, dtype = "fp32" }, inv_var = { "T", "C", 1, 1, dtype = "fp32" } },
    body = function(G, dy, x, g, mean, inv_var)
      local dx, dg, db = G:instancenorm_backward(dy, x, g, mean, inv_var)
      return { dx = dx, dg = dg, db = db }
    end,
  },
  -- instance norm in fp32 over 4096 spatial elements, 8 channels
  k.graph "instancenorm_bwd_fp32" {
    dims = { T = k.dynamic, C = 8, HW = 4096 }, dtype = "fp32",
    inputs = { dy = { "T", "C", "HW" }, x = { "T", "C", "HW" }, g = { 1, "C", 1 },
               mean = { "T", "C", 1 }, inv_var = { "T", "C", 1 } },
    body = function(G, dy, x, g, mean, inv_var)
      local dx, dg, db = G:instancenorm_backward(dy, x, g, mean, inv_var)
      return { dx = dx, dg = dg, db = db }
    end,
  },
  -- instance norm over a dynamic spatial axis: the channel sums read x and dy again (the rows'
  -- element count is not fixed, so they cannot come from the rows' means)
  k.graph "instancenorm_bwd_dynamic_spatial" {
    dims = { B = 2, C = 5, T = k.dynamic }, dtype = "bf16",
    inputs = { dy = { "B", "C", "T" }, x = { "B", "C", "T" }, g = { 1, "C", 1, dtype = "fp32" },
               mean = { "B", "C", 1, dtype = "fp32" }, inv_var = { "B", "C", 1, dtype = "fp32" } },
    body = function(G, dy, x, g, mean, inv_var)
      local dx, dg, db = G:instancenorm_backward(dy, x, g, mean, inv_var)
      return { dx = dx, dg = dg, db = db }
    end,
  },
  -- adaptive layer norm: scale per sample [B, 1, D], a dynamic sequence length
  k.graph "adaln_bwd_bf16" {
    dims = { B = 3, T = k.dynamic, D = 1000 }, dtype = "bf16",
    inputs = { dy = { "B", "T", "D" }, x = { "B", "T", "D" }, g = { "B", 1, "D", dtype = "fp32" },
               mean = { "B", "T", 1, dtype = "fp32" }, inv_var = { "B", "T", 1, dtype = "fp32" } },
    body = function(G, dy, x, g, mean, inv_var)
      local dx, dg, db = G:adalayernorm_backward(dy, x, g, mean, inv_var)
      return { dx = dx, dg = dg, db = db }
    end,
  },
  -- adaptive layer norm in fp16 with fp16 parameters, a dynamic batch
  k.graph "adaln_bwd_fp16" {
    dims = { T = k.dynamic, S = 5, D = 2048 }, dtype = "fp16",
    inputs = { dy = { "T", "S", "D" }, x = { "T", "S", "D" }, g = { "T", 1, "D" },
               mean = { "T", "S", 1, dtype = "fp32" }, inv_var = { "T", "S", 1, dtype = "fp32" } },
    body = function(G, dy, x, g, mean, inv_var)
      local dx, dg, db = G:adalayernorm_backward(dy, x, g, mean, inv_var)
      return { dx = dx, dg = dg, db = db }
    end,
  },
  -- only some gradients wanted: the kernels of the others are not built (decompose.lua prunes
  -- what nothing reads): batch norm's dx alone (its two means, dx), adaptive layer norm's dscale
  k.graph "batchnorm_bwd_dx_only" {
    dims = { T = k.dynamic, C = 24, HW = 196 }, dtype = "bf16",
    inputs = { dy = { "T", "C", "HW" }, x = { "T", "C", "HW" }, g = { 1, "C", 1, dtype = "fp32" },
               mean = { 1, "C", 1, dtype = "fp32" }, inv_var = { 1, "C", 1, dtype = "fp32" } },
    body = function(G, dy, x, g, mean, inv_var)
      return { dx = G:batchnorm_backward(dy, x, g, mean, inv_var) }
    end,
  },
  k.graph "adaln_bwd_dscale_only" {
    dims = { B = 2, T = k.dynamic, D = 512 }, dtype = "bf16",
    inputs = { dy = { "B", "T", "D" }, x = { "B", "T", "D" }, g = { "B", 1, "D", dtype = "fp32" },
               mean = { "B", "T", 1, dtype = "fp32" }, inv_var = { "B", "T", 1, dtype = "fp32" } },
    body = function(G, dy, x, g, mean, inv_var)
      local _, dg = G:adalayernorm_backward(dy, x, g, mean, inv_var)
      return { dg = dg }
    end,
  },
  -- sibling reductions a user writes: the sum, mean and L2 norm of x per channel (one kernel),
  -- the sums of two products over a middle axis (the strided form, one kernel), and a row's
  -- sum of x * w beside its L2 norm (the row engine, one kernel; its max is a kernel of its own)
  k.graph "sibling_reductions" {
    dims = { T = k.dynamic, C = 12, HW = 999 }, dtype = "bf16",
    inputs = { x = { "T", "C", "HW" }, w = { "T", "C", "HW" } },
    body = function(G, x, w)
      local s = G:reduction(x, { mode = "add", dims = { 1, "C", 1 } })
      local m = G:reduction(x * w, { mode = "avg", dims = { 1, "C", 1 } })
      local n = G:reduction(x, { mode = "norm2", dims = { 1, "C", 1 } })
      local a = G:reduction(x * w, { mode = "add", dims = { "T", 1, "HW" } })
      local b = G:reduction(G:exp(w), { mode = "avg", dims = { "T", 1, "HW" } })
      local rs = G:reduction(x * w, { mode = "add", dims = { "T", "C", 1 } })
      local rn = G:reduction(x, { mode = "norm2", dims = { "T", "C", 1 } })
      local rm = G:reduction(w, { mode = "max", dims = { "T", "C", 1 } })
      return { s = s, m = m, n = n, a = a, b = b, rs = rs, rn = rn, rm = rm }
    end,
  },
}
