-- t = rmsnorm(x) * w; per 1x128 block of each row: s = amax |t| / 448 (fp32), y = fp8_e4m3(t * (448 / amax)):
-- RMSNorm and the blockwise fp8 quantize of DeepSeek-V3 / Transformer Engine activations in one
-- kernel, which writes the scales [T, H / 128] beside y.
local k = require "kiln"
return k.graph "rmsnorm_fp8_block" {
  doc = "RMSNorm, fp8 e4m3 quantize with an fp32 scale per 1x128 block of each row; also the scales",
  dims = { T = k.dynamic, H = { 4096, 7168, 8192 } },
  dtype = "bf16",
  inputs = { x = { "T", "H" }, w = { "H" } },
  body = function(g, x, w)
    local t = g:rmsnorm(x, w, { epsilon = 1e-6 })
    local y, scale = g:block_scale_quantize(t, { block_size = 128, dtypes = { Y = "fp8_e4m3", scale = "fp32" } })
    return { y = y, scale = scale }
  end,
}
