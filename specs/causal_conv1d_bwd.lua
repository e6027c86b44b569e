-- Causal depthwise conv1d backward: dx, dweight, dbias of y = silu(causal_conv1d(x, w) + b) from
-- dy, x channel-last (a [B, T, D] buffer), width 4, bf16 (dweight and dbias in w's and b's
-- dtype, summed in fp32 in a fixed order).
local kiln = require "kiln"
return kiln.graph "causal_conv1d_bwd" {
  doc = "dx, dw, db of y = silu(causal_conv1d(x, w) + b), x channel-last [B, T, D], width 4",
  dims = { B = { 1, 4 }, T = kiln.dynamic, D = { 4096, 8192 } },
  dtype = "bf16",
  inputs = { x = { "B", "D", "T", strides = { "T*D", 1, "D" } }, w = { "D", 4 }, b = { "D" },
             dy = { "B", "D", "T" } },
  body = function(g, x, w, dy, b)
    local dx, dw, db = g:causal_conv1d_backward(x, w, dy, b, { activation = "silu" })
    return { dx = dx, dw = dw, db = db }
  end,
}
