-- RMSNorm backward: dx and dw from dy, x, w and the saved inv_rms of the forward.
local k = require "kiln"
return k.graph "rmsnorm_bwd" {
  doc = "dx, dw of y = x * inv_rms * w, from dy, x, w and the saved inv_rms = 1 / sqrt(mean(x^2) + eps)",
  dims = { T = k.dynamic, H = { 2048, 4096, 8192 } },
  dtype = "bf16",
  inputs = { dy = { "T", "H" }, x = { "T", "H" }, w = { "H" }, inv_rms = { "T", 1, dtype = "fp32" } },
  body = function(g, dy, x, w, inv_rms)
    local dx, dw = g:rmsnorm_backward(dy, x, w, inv_rms)
    return { dx = dx, dw = dw }
  end,
}
