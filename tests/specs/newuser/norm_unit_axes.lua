-- Norms over the one axis past extent 1, in the layouts of the cuDNN frontend's norm tests:
-- [N, C, 1, 1] channels-last with scale [1, C, 1, 1], [N, 1, 1, C] with scale [1, 1, 1, C],
-- and [N, C, 1, 1] row-major with a right-aligned scale [C, 1, 1]. norm_flat.lua is the same
-- graphs over [N, C]: each must build as the same kernel.
local k = require "kiln"
return {
  k.graph "rms_nc11" { dims = { N = k.dynamic, C = 1024 }, dtype = "bf16",
    inputs = { x = { "N", "C", 1, 1, strides = { "C", 1, "C", "C" } }, w = { 1, "C", 1, 1 } },
    body = function(g, x, w)
      local y, inv = g:rmsnorm(x, w, { epsilon = 1e-6, phase = "training" })
      return { y = y, inv = inv }
    end },
  k.graph "ln_n11c" { dims = { N = k.dynamic, C = 768 }, dtype = "bf16",
    inputs = { x = { "N", 1, 1, "C" }, w = { 1, 1, 1, "C" }, b = { 1, 1, 1, "C" } },
    body = function(g, x, w, b) return { y = g:layernorm(x, w, b, { epsilon = 1e-5 }) } end },
  k.graph "rms_nc11_rowmajor" { dims = { N = k.dynamic, C = 4096 }, dtype = "fp16",
    inputs = { x = { "N", "C", 1, 1 }, w = { "C", 1, 1, dtype = "fp32" } },
    body = function(g, x, w) return { y = g:rmsnorm(x, w, { epsilon = 1e-6 }) } end },
}
