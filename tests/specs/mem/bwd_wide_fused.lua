-- A backward norm over rows of 32768 with an op fused after dx: the split backward declines
-- (it stores dx as it is) and the re-read row kernel takes it.
local k = require "kiln"
return { k.graph "rmsnorm_bwd_wide_residual" {
  dims = { T = k.dynamic, H = { 32768 } }, dtype = "bf16",
  inputs = { dy = { "T", "H" }, x = { "T", "H" }, w = { "H" }, rstd = { "T", 1, dtype = "fp32" }, r = { "T", "H" } },
  body = function(g, dy, x, w, rstd, r)
    local dx, dw = g:rmsnorm_backward(dy, x, w, rstd)
    return { dx = dx + r, dw = dw }
  end } }
