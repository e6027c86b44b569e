-- h = x + r; t = rmsnorm(h) * w; y = fp8_e4m3(t * scale); amax = max |t|: residual add,
-- RMSNorm and per-tensor fp8 quantize in one pass (amax across CTAs with atomicMax).
local k = require "kiln"
return k.graph "rmsnorm_residual_fp8" {
  doc = "residual add, RMSNorm, fp8 e4m3 quantize with a per-tensor scale; also h and amax(t)",
  dims = { T = k.dynamic, H = { 2048, 4096, 8192 } },
  dtype = "bf16",
  inputs = { x = { "T", "H" }, r = { "T", "H" }, w = { "H" }, scale = { 1, dtype = "fp32" } },
  body = function(g, x, r, w, scale)
    local h = x + r
    local t = g:rmsnorm(h, w, { epsilon = 1e-6 })
    return {
      y = g:cast(t * scale, "fp8_e4m3"),
      h = h,
      amax = g:reduction(t, { mode = "amax", dims = { 1, 1 }, dtype = "fp32" }),
    }
  end,
}
