-- y = rmsnorm(x + r) * w * silu(gate): residual add, RMSNorm and a SiLU gate, one kernel.
local k = require "kiln"
return k.graph "add_rmsnorm_silu_gate" {
  doc = "gated RMSNorm of a residual sum (Mamba-2 / GDN output norm)",
  dims = { T = k.dynamic, H = { 2048, 4096, 8192 } },
  dtype = "bf16",
  inputs = { x = { "T", "H" }, r = { "T", "H" }, w = { "H" }, gate = { "T", "H" } },
  body = function(g, x, r, w, gate)
    return { y = g:rmsnorm(x + r, w, { epsilon = 1e-6 }) * g:swish(gate) }
  end,
}
