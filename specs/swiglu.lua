-- y = silu(gate) * up: the SwiGLU gate of a gated MLP, one kernel.
local k = require "kiln"
return k.graph "swiglu" {
  doc = "SiLU-gated product of two projections",
  dims = { T = k.dynamic, H = { 4096, 11008 } },
  dtype = "bf16",
  inputs = { gate = { "T", "H" }, up = { "T", "H" } },
  body = function(g, gate, up)
    return { y = g:mul(g:swish(gate), up) }
  end,
}
