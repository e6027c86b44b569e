-- Norms over the one axis of extent past 1 in the layouts of the cuDNN frontend's own norm
-- tests: [N, C, 1, 1] with channels-last strides and a [1, C, 1, 1] scale, and [N, 1, 1, C]
-- with a [1, 1, 1, C] scale; forward (training and inference, with a residual and a GELU) and
-- backward; N is the dynamic T (tests/gpu/run sets it). The row engine reads them without their
-- extent-1 axes: one contiguous row of C.
local k = require "kiln"
local function nc11(dtype) return { "T", "C", 1, 1, dtype = dtype, strides = { "C", 1, "C", "C" } } end
local function n11c(dtype) return { "T", 1, 1, "C", dtype = dtype } end
local stats = { "T", 1, 1, 1, dtype = "fp32" }
return {
  k.graph "layernorm_nc11_channels_last" {
    dims = { T = k.dynamic, C = 1024 }, dtype = "bf16",
    inputs = { x = nc11(), w = { 1, "C", 1, 1 }, b = { 1, "C", 1, 1 } },
    body = function(g, x, w, b)
      local y, m, v = g:layernorm(x, w, b, { epsilon = 1e-5, phase = "training" })
      return { y = y, mean = m, inv_var = v }
    end,
  },
  k.graph "rmsnorm_nc11_channels_last" {
    dims = { T = k.dynamic, C = 4096 }, dtype = "fp16",
    inputs = { x = nc11(), w = { 1, "C", 1, 1, dtype = "fp32" } },
    body = function(g, x, w)
      local y, v = g:rmsnorm(x, w, { epsilon = 1e-6, phase = "training" })
      return { y = y, inv_var = v }
    end,
  },
  k.graph "rmsnorm_n11c_residual" {
    dims = { T = k.dynamic, C = 768 }, dtype = "bf16",
    inputs = { x = n11c(), r = n11c(), w = { 1, 1, 1, "C" } },
    body = function(g, x, r, w)
      local h = g:add(x, r)
      return { y = g:rmsnorm(h, w, { epsilon = 1e-6 }), h = h }
    end,
  },
  k.graph "layernorm_n11c_fp32_gelu" {
    dims = { T = k.dynamic, C = 1000 }, dtype = "fp32",
    inputs = { x = n11c(), w = { 1, 1, 1, "C" }, b = { 1, 1, 1, "C" } },
    body = function(g, x, w, b)
      return { y = g:gelu(g:layernorm(x, w, b, { epsilon = 1e-5 })) }
    end,
  },
  k.graph "layernorm_bwd_n11c" {
    dims = { T = k.dynamic, C = 2048 }, dtype = "bf16",
    inputs = { dy = n11c(), x = n11c(), w = { 1, 1, 1, "C" }, mean = stats, rstd = stats },
    body = function(g, dy, x, w, mean, rstd)
      local dx, dw, db = g:layernorm_backward(dy, x, w, mean, rstd)
      return { dx = dx, dw = dw, db = db }
    end,
  },
  k.graph "rmsnorm_bwd_nc11_channels_last" {
    dims = { T = k.dynamic, C = 4096 }, dtype = "bf16",
    inputs = { dy = nc11(), x = nc11(), w = { 1, "C", 1, 1 }, rstd = stats },
    body = function(g, dy, x, w, rstd)
      local dx, dw = g:rmsnorm_backward(dy, x, w, rstd)
      return { dx = dx, dw = dw }
    end,
  },
}
