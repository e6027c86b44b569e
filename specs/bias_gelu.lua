-- y = gelu(x + b): the bias + exact (erf) GELU epilogue of a linear layer, one kernel.
local k = require "kiln"
return k.graph "bias_gelu" {
  doc = "bias add then exact GELU, bf16 in and out, fp32 math",
  dims = { T = k.dynamic, H = { 4096, 8192 } },
  dtype = "bf16",
  inputs = { x = { "T", "H" }, b = { "H" } },
  body = function(g, x, b)
    return { y = g:gelu(g:add(x, b)) }
  end,
}
