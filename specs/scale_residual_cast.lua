-- y = bf16(x * scale + residual): scale an fp32 branch, add the residual stream, cast.
local k = require "kiln"
return k.graph "scale_residual_cast" {
  doc = "fp32 branch scaled by a runtime scalar, plus a bf16 residual, written as bf16",
  dims = { T = k.dynamic, H = 4096 },
  dtype = "bf16",
  inputs = {
    x = { "T", "H", dtype = "fp32" },
    residual = { "T", "H" },
    scale = { scalar = true, dtype = "fp32" },
  },
  body = function(g, x, residual, scale)
    return { y = g:add(g:mul(x, scale), residual) }
  end,
}
