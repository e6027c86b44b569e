-- Batch norm in training (the `batchnorm` op): kernels from its decomposition (decompose.lua:
-- two per-channel reductions, the per-channel 1 / sqrt(var + eps), the element output),
-- checked against the reference executor's batchnorm itself.
local k = require "kiln"
return {
  -- NCHW activations in bf16 with fp32 parameters, every statistic written
  k.graph "batchnorm_train" {
    dims = { B = k.dynamic, C = 24, H = 14, W = 14 },
    dtype = "bf16",
    inputs = { x = { "B", "C", "H", "W" }, scale = { 1, "C", 1, 1, dtype = "fp32" }, bias = { 1, "C", 1, 1, dtype = "fp32" } },
    body = function(g, x, scale, bias)
      local y, mean, inv_var = g:batchnorm(x, scale, bias, { epsilon = 1e-5 })
      return { y = y, mean = mean, inv_var = inv_var }
    end,
  },
  -- fp16 [B, C, L] with epsilon as a runtime scalar, only y written
  k.graph "batchnorm_fp16_scalar_eps" {
    dims = { B = k.dynamic, C = 40, L = 250 },
    dtype = "fp16",
    inputs = { x = { "B", "C", "L" }, scale = { 1, "C", 1 }, bias = { 1, "C", 1 }, eps = { scalar = true, dtype = "fp32" } },
    body = function(g, x, scale, bias, eps)
      local y = g:batchnorm(x, scale, bias, { epsilon = eps })
      return { y = y }
    end,
  },
  -- running statistics (the batch fixed at build time: the variance's n / (n - 1) needs n)
  k.graph "batchnorm_running" {
    dims = { B = 6, C = 16, HW = 300 },
    dtype = "fp32",
    inputs = { x = { "B", "C", "HW" }, scale = { 1, "C", 1 }, bias = { 1, "C", 1 },
               rm = { 1, "C", 1 }, rv = { 1, "C", 1 } },
    body = function(g, x, scale, bias, rm, rv)
      local y, mean, inv_var, next_mean, next_var = g:batchnorm(x, scale, bias, rm, rv, { epsilon = 1e-3, momentum = 0.1 })
      return { y = y, next_mean = next_mean, next_var = next_var }
    end,
  },
}
