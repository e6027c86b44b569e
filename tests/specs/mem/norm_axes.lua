-- Norms whose scale and bias are not one row of columns, run as layer norms by the row engine:
-- instance norm (statistics per sample and channel over the spatial axes, scale and bias per
-- channel) and adaptive layer norm (scale and bias per sample, [B, 1, D]), in every dtype, at
-- odd sizes, training and inference, with a fused epilogue, a dynamic sequence length (the
-- sample's row offset not compile-time: the CUDA form's gather) and a row too wide to hold; and
-- batch norm in inference, an elementwise op fused with its ReLU by the pointwise engine.
local k = require "kiln"
return {
  k.graph "instancenorm_bf16" {
    dims = { T = k.dynamic, C = 8, HW = 4096 }, dtype = "bf16",
    inputs = { x = { "T", "C", "HW" }, g = { 1, "C", 1 }, b = { 1, "C", 1 } },
    body = function(G, x, g, b)
      local y, m, v = G:instancenorm(x, g, b, { epsilon = 1e-5, phase = "training" })
      return { y = y, mean = m, inv_var = v }
    end,
  },
  k.graph "instancenorm_odd_fp32" {
    dims = { T = k.dynamic, C = 3, H = 7, W = 143 }, dtype = "fp32",
    inputs = { x = { "T", "C", "H", "W" }, g = { 1, "C", 1, 1 }, b = { 1, "C", 1, 1 } },
    body = function(G, x, g, b)
      return { y = G:instancenorm(x, g, b, { epsilon = 1e-5 }) }
    end,
  },
  k.graph "adaln_bf16" {
    dims = { T = k.dynamic, S = 5, D = 2048 }, dtype = "bf16",
    inputs = { x = { "T", "S", "D" }, g = { "T", 1, "D" }, b = { "T", 1, "D" } },
    body = function(G, x, g, b)
      local y, m, v = G:adalayernorm(x, g, b, { epsilon = 1e-6, phase = "training" })
      return { y = y, mean = m, inv_var = v }
    end,
  },
  k.graph "adaln_fp16_ragged_residual" {
    dims = { T = k.dynamic, S = 3, D = 1000 }, dtype = "fp16",
    inputs = { x = { "T", "S", "D" }, g = { "T", 1, "D", dtype = "fp32" }, b = { "T", 1, "D", dtype = "fp32" },
               r = { "T", "S", "D" } },
    body = function(G, x, g, b, r)
      return { y = G:add(G:adalayernorm(x, g, b, { epsilon = 1e-5 }), r) }
    end,
  },
  k.graph "adaln_dynamic_seq" {
    dims = { B = 3, T = k.dynamic, D = 1024 }, dtype = "bf16",
    inputs = { x = { "B", "T", "D" }, g = { "B", 1, "D" }, b = { "B", 1, "D" } },
    body = function(G, x, g, b)
      return { y = G:adalayernorm(x, g, b, { epsilon = 1e-6 }) }
    end,
  },
  k.graph "batchnorm_inference_relu" {
    dims = { T = k.dynamic, C = 64, H = 14, W = 14 }, dtype = "bf16",
    inputs = { x = { "T", "C", "H", "W" }, mean = { 1, "C", 1, 1, dtype = "fp32" },
               inv_var = { 1, "C", 1, 1, dtype = "fp32" }, g = { 1, "C", 1, 1 }, b = { 1, "C", 1, 1 } },
    body = function(G, x, mean, inv_var, g, b)
      return { y = G:relu(G:batchnorm_inference(x, mean, inv_var, g, b)) }
    end,
  },
  k.graph "adaln_wide_bf16" {
    dims = { T = k.dynamic, S = 2, D = 32768 }, dtype = "bf16",
    inputs = { x = { "T", "S", "D" }, g = { "T", 1, "D" }, b = { "T", 1, "D" } },
    body = function(G, x, g, b)
      return { y = G:adalayernorm(x, g, b, { epsilon = 1e-6 }) }
    end,
  },
}
