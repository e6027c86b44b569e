-- norm_unit_axes.lua's graphs over [N, C]: the kernels those must build as.
local k = require "kiln"
return {
  k.graph "rms_nc11" { dims = { N = k.dynamic, C = 1024 }, dtype = "bf16",
    inputs = { x = { "N", "C" }, w = { "C" } },
    body = function(g, x, w)
      local y, inv = g:rmsnorm(x, w, { epsilon = 1e-6, phase = "training" })
      return { y = y, inv = inv }
    end },
  k.graph "ln_n11c" { dims = { N = k.dynamic, C = 768 }, dtype = "bf16",
    inputs = { x = { "N", "C" }, w = { "C" }, b = { "C" } },
    body = function(g, x, w, b) return { y = g:layernorm(x, w, b, { epsilon = 1e-5 }) } end },
  k.graph "rms_nc11_rowmajor" { dims = { N = k.dynamic, C = 4096 }, dtype = "fp16",
    inputs = { x = { "N", "C" }, w = { "C", dtype = "fp32" } },
    body = function(g, x, w) return { y = g:rmsnorm(x, w, { epsilon = 1e-6 }) } end },
}
