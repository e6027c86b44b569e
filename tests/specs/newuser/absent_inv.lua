-- rmsnorm without phase = "training" does not generate INV_VARIANCE: returning it is an error
local k = require "kiln"
return k.graph "absent_inv" {
  dims = { T = k.dynamic, H = 2048 }, dtype = "bf16",
  inputs = { x = { "T", "H" }, w = { "H" } },
  body = function(g, x, w)
    local y, inv = g:rmsnorm(x, w, { epsilon = 1e-6 })
    return { y = y, inv = inv }
  end,
}
