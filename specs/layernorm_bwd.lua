-- LayerNorm backward: dx per row, and dw / db summed over rows deterministically (per-CTA
-- partial sums in the workspace, added in a fixed order by a second kernel).
local k = require "kiln"
return k.graph "layernorm_bwd" {
  doc = "dx, dw, db of y = (x - mean) * inv_std * w + b, from dy, x, w and the saved mean, inv_std",
  dims = { T = k.dynamic, H = { 2048, 4096, 8192 } },
  dtype = "bf16",
  inputs = { dy = { "T", "H" }, x = { "T", "H" }, w = { "H" },
             mean = { "T", 1, dtype = "fp32" }, inv_std = { "T", 1, dtype = "fp32" } },
  body = function(g, dy, x, w, mean, inv_std)
    local dx, dw, db = g:layernorm_backward(dy, x, w, mean, inv_std)
    return { dx = dx, dw = dw, db = db }
  end,
}
