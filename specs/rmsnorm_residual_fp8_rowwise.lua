-- h = x + r; t = rmsnorm(h) * w; per row: s = max(amax |t|, 1e-12) / 448; y = fp8_e4m3(t / s):
-- residual add, RMSNorm and dynamic per-row (per-token) fp8 quantize in one kernel, which
-- writes the row's scale s (fp32) beside y.
local k = require "kiln"
return k.graph "rmsnorm_residual_fp8_rowwise" {
  doc = "residual add, RMSNorm, fp8 e4m3 quantize with a per-row scale from the row's amax; also h and the scales",
  dims = { T = k.dynamic, H = { 2048, 4096, 8192 } },
  dtype = "bf16",
  inputs = { x = { "T", "H" }, r = { "T", "H" }, w = { "H" } },
  body = function(g, x, r, w)
    local h = x + r
    local t = g:rmsnorm(h, w, { epsilon = 1e-6 })
    local am = g:reduction(t, { mode = "amax", dims = { "T", 1 }, dtype = "fp32" })
    local s = g:cast(g:max(am, 1e-12) * (1.0 / 448.0), "fp32")
    return { y = g:cast(t / s, "fp8_e4m3"), h = h, scale = s }
  end,
}
