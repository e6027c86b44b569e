-- Rows whose threads hold or re-read 5, 6 or 7 vectors (1024 threads a row): fp32 at H = 20480,
-- 24576, 28672 and 16-bit at 40960 and 57344. The PTX forms hold up to 8 vectors and re-read
-- in trips of the largest divisor of the thread's vectors (rowptx.trip).
local k = require "kiln"
local fp32 = { T = k.dynamic, H = { 20480, 24576, 28672 } }
local half = { T = k.dynamic, H = { 40960, 57344 } }
return {
  k.graph "odd_rmsnorm_fp32" {
    dims = fp32, dtype = "fp32", inputs = { x = { "T", "H" }, w = { "H" } },
    body = function(g, x, w) return { y = g:rmsnorm(x, w, { epsilon = 1e-6 }) } end,
  },
  k.graph "odd_softmax_fp32" {
    dims = fp32, dtype = "fp32", inputs = { x = { "T", "H" } },
    body = function(g, x) return { y = g:softmax(x) } end,
  },
  k.graph "odd_layernorm_residual_fp32" {
    dims = fp32, dtype = "fp32", inputs = { x = { "T", "H" }, r = { "T", "H" }, w = { "H" }, b = { "H" } },
    body = function(g, x, r, w, b)
      local y, mean, inv_std = g:layernorm(x + r, w, b, { epsilon = 1e-5, phase = "training" })
      return { y = y, mean = mean, inv_std = inv_std }
    end,
  },
  k.graph "odd_layernorm_fp16" {
    dims = half, dtype = "fp16", inputs = { x = { "T", "H" }, w = { "H" }, b = { "H" } },
    body = function(g, x, w, b) return { y = g:layernorm(x, w, b, { epsilon = 1e-5 }) } end,
  },
  k.graph "odd_log_softmax_bf16" {
    dims = half, dtype = "bf16", inputs = { x = { "T", "H" } },
    body = function(g, x) return { y = g:log_softmax(x) } end,
  },
  k.graph "odd_rmsnorm_bf16" {
    dims = half, dtype = "bf16", inputs = { x = { "T", "H" }, w = { "H" } },
    body = function(g, x, w) return { y = g:rmsnorm(x, w, { epsilon = 1e-6 }) } end,
  },
}
