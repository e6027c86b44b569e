-- y = layernorm(x) * w + b over the hidden dim: inference (y only) and training (also the
-- per-row mean and 1/std, fp32, as layernorm_bwd takes them).
local k = require "kiln"
local dims = { T = k.dynamic, H = { 2048, 4096, 8192 } }
return {
  k.graph "layernorm" {
    doc = "LayerNorm forward, inference: y = (x - mean) / sqrt(var + eps) * w + b",
    dims = dims,
    dtype = "bf16",
    inputs = { x = { "T", "H" }, w = { "H" }, b = { "H" } },
    body = function(g, x, w, b)
      return { y = g:layernorm(x, w, b, { epsilon = 1e-5 }) }
    end,
  },
  k.graph "layernorm_train" {
    doc = "LayerNorm forward, training: y, mean and inv_std = 1 / sqrt(var + eps) per row",
    dims = dims,
    dtype = "bf16",
    inputs = { x = { "T", "H" }, w = { "H" }, b = { "H" } },
    body = function(g, x, w, b)
      local y, mean, inv_std = g:layernorm(x, w, b, { epsilon = 1e-5, phase = "training" })
      return { y = y, mean = mean, inv_std = inv_std }
    end,
  },
}
