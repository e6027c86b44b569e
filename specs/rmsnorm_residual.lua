-- h = x + r; y = rmsnorm(h) * w: the residual add fused into the norm, h written too.
local k = require "kiln"
return k.graph "rmsnorm_residual" {
  doc = "residual add then RMSNorm; returns the normalized y and the new residual stream h",
  dims = { T = k.dynamic, H = { 2048, 4096, 8192 } },
  dtype = "bf16",
  inputs = { x = { "T", "H" }, r = { "T", "H" }, w = { "H" } },
  body = function(g, x, r, w)
    local h = x + r
    return { y = g:rmsnorm(h, w, { epsilon = 1e-6 }), h = h }
  end,
}
