-- y = rmsnorm(x) * w over the hidden dim: inference (y only) and training (also the saved
-- 1/rms per row, fp32), one kernel each.
local k = require "kiln"
local dims = { T = k.dynamic, H = { 2048, 4096, 8192 } }
return {
  k.graph "rmsnorm" {
    doc = "RMSNorm forward, inference: y = x / sqrt(mean(x^2) + eps) * w",
    dims = dims,
    dtype = "bf16",
    inputs = { x = { "T", "H" }, w = { "H" } },
    body = function(g, x, w)
      return { y = g:rmsnorm(x, w, { epsilon = 1e-6 }) }
    end,
  },
  k.graph "rmsnorm_train" {
    doc = "RMSNorm forward, training: y and inv_rms = 1 / sqrt(mean(x^2) + eps) per row",
    dims = dims,
    dtype = "bf16",
    inputs = { x = { "T", "H" }, w = { "H" } },
    body = function(g, x, w)
      local y, inv_rms = g:rmsnorm(x, w, { epsilon = 1e-6, phase = "training" })
      return { y = y, inv_rms = inv_rms }
    end,
  },
}
