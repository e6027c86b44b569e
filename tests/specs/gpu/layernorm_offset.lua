-- LayerNorm's statistics on rows far from zero (tests/gpu/layernorm_stats.t): every form of the
-- forward row: ragged (H = 1000), held (4096), re-read (24576, 32768), staged over a cluster
-- (65536), in bf16 and fp32, and with a fused residual add.
local k = require "kiln"
local dims = { T = k.dynamic, H = { 1000, 4096, 24576, 32768, 65536 } }
local function train(dtype)
  return k.graph("layernorm_" .. dtype) {
    dims = dims, dtype = dtype,
    inputs = { x = { "T", "H" }, w = { "H" }, b = { "H" } },
    body = function(g, x, w, b)
      local y, mean, inv_std = g:layernorm(x, w, b, { epsilon = 1e-5, phase = "training" })
      return { y = y, mean = mean, inv_std = inv_std }
    end,
  }
end
return {
  train "bf16",
  train "fp32",
  k.graph "layernorm_residual" {
    dims = { T = k.dynamic, H = { 4096, 32768 } }, dtype = "bf16",
    inputs = { x = { "T", "H" }, r = { "T", "H" }, w = { "H" }, b = { "H" } },
    body = function(g, x, r, w, b)
      local y, mean, inv_std = g:layernorm(x + r, w, b, { epsilon = 1e-5, phase = "training" })
      return { y = y, mean = mean, inv_std = inv_std }
    end,
  },
}
