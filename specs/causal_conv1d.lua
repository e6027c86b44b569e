-- Causal depthwise conv1d (Mamba's short convolution): x channel-last (a [B, T, D] buffer seen
-- as [B, D, T] by its strides), width 4, bias, silu, bf16. y is [B, D, T] row-major (the IR's
-- output layout).
local kiln = require "kiln"
return kiln.graph "causal_conv1d" {
  doc = "y = silu(causal_conv1d(x, w) + b), x channel-last [B, T, D], width 4",
  dims = { B = { 1, 4 }, T = kiln.dynamic, D = { 4096, 8192 } },
  dtype = "bf16",
  inputs = { x = { "B", "D", "T", strides = { "T*D", 1, "D" } }, w = { "D", 4 }, b = { "D" } },
  body = function(g, x, w, b)
    return { y = g:causal_conv1d(x, w, b, { activation = "silu" }) }
  end,
}
