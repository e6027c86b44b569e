-- Block quantize and dequantize along the row (the row engine, rowquant.lua): standalone in
-- bf16, fp16 and fp32, blocks of 32 and 128, e4m3 and e5m2 data, fp32, e8m0 and e4m3 scales, a
-- prologue fused, rows of one block (several rows a CTA) and rows whose vectors do not fill
-- the last trip (7168); dequantize with fp32 and e8m0 scales and an epilogue; fused into
-- RMSNorm's and layer norm's epilogues, with a residual add before the norm.
local k = require "kiln"
local function quant(g, t, block, y, s)
  return g:block_scale_quantize(t, { block_size = block, dtypes = { Y = y, scale = s } })
end
return {
  k.graph "quant_bf16_b128_fp32" {
    dims = { T = k.dynamic, H = { 4096, 7168 } }, dtype = "bf16",
    inputs = { x = { "T", "H" } },
    body = function(g, x)
      local y, s = quant(g, x, 128, "fp8_e4m3", "fp32")
      return { y = y, s = s }
    end,
  },
  k.graph "quant_fp16_b32_e8m0" {
    dims = { T = k.dynamic, H = { 2048 } }, dtype = "fp16",
    inputs = { x = { "T", "H" } },
    body = function(g, x)
      local y, s = quant(g, x, 32, "fp8_e4m3", "fp8_e8m0")
      return { y = y, s = s }
    end,
  },
  k.graph "quant_fp32_b32_e5m2_e8m0" {
    dims = { T = k.dynamic, H = { 1024 } }, dtype = "fp32",
    inputs = { x = { "T", "H" } },
    body = function(g, x)
      local y, s = quant(g, x, 32, "fp8_e5m2", "fp8_e8m0")
      return { y = y, s = s }
    end,
  },
  k.graph "quant_fp32_b128_e5m2_fp32" {
    dims = { T = k.dynamic, H = { 4096 } }, dtype = "fp32",
    inputs = { x = { "T", "H" } },
    body = function(g, x)
      local y, s = quant(g, x, 128, "fp8_e5m2", "fp32")
      return { y = y, s = s }
    end,
  },
  k.graph "quant_bf16_b32_e4m3scale" {
    dims = { T = k.dynamic, H = { 2048 } }, dtype = "bf16",
    inputs = { x = { "T", "H" } },
    body = function(g, x)
      local y, s = quant(g, x, 32, "fp8_e4m3", "fp8_e4m3")
      return { y = y, s = s }
    end,
  },
  k.graph "quant_bf16_short_rows" {
    dims = { T = k.dynamic, H = { 128, 256 } }, dtype = "bf16",
    inputs = { x = { "T", "H" } },
    body = function(g, x)
      local y, s = quant(g, x, 128, "fp8_e4m3", "fp32")
      return { y = y, s = s }
    end,
  },
  k.graph "quant_bf16_prologue" {
    dims = { T = k.dynamic, H = { 4096 } }, dtype = "bf16",
    inputs = { x = { "T", "H" }, b = { "H" } },
    body = function(g, x, b)
      local y, s = quant(g, g:gelu(x + b), 128, "fp8_e4m3", "fp32")
      return { y = y, s = s }
    end,
  },
  k.graph "dequant_e4m3_fp32" {
    dims = { T = k.dynamic }, dtype = "bf16",
    inputs = { x = { "T", 4096, dtype = "fp8_e4m3" }, s = { "T", 32, dtype = "fp32" } },
    body = function(g, x, s)
      return { y = g:block_scale_dequantize(x, s, { block_size = { 1, 128 }, dtype = "bf16" }) }
    end,
  },
  k.graph "dequant_e5m2_e8m0_epilogue" {
    dims = { T = k.dynamic }, dtype = "fp32",
    inputs = { x = { "T", 1024, dtype = "fp8_e5m2" }, s = { "T", 32, dtype = "fp8_e8m0" } },
    body = function(g, x, s)
      local d = g:block_scale_dequantize(x, s, { block_size = { 32 }, dtype = "fp32" })
      return { y = g:cast(d * 0.5, "bf16") }
    end,
  },
  k.graph "rmsnorm_fp8_mx" {
    dims = { T = k.dynamic, H = { 2048, 4096 } }, dtype = "bf16",
    inputs = { x = { "T", "H" }, w = { "H" } },
    body = function(g, x, w)
      local y, s = quant(g, g:rmsnorm(x, w, { epsilon = 1e-6 }), 32, "fp8_e4m3", "fp8_e8m0")
      return { y = y, s = s }
    end,
  },
  k.graph "rmsnorm_residual_fp8_block" {
    dims = { T = k.dynamic, H = { 4096, 7168 } }, dtype = "bf16",
    inputs = { x = { "T", "H" }, r = { "T", "H" }, w = { "H" } },
    body = function(g, x, r, w)
      local h = x + r
      local y, s = quant(g, g:rmsnorm(h, w, { epsilon = 1e-6 }), 128, "fp8_e4m3", "fp32")
      return { y = y, s = s, h = h }
    end,
  },
  k.graph "layernorm_fp8_block" {
    dims = { T = k.dynamic, H = { 1024, 8192 } }, dtype = "bf16",
    inputs = { x = { "T", "H" }, w = { "H" }, b = { "H" } },
    body = function(g, x, w, b)
      local y, s = quant(g, g:layernorm(x, w, b, { epsilon = 1e-5 }), 128, "fp8_e4m3", "fp32")
      return { y = y, s = s }
    end,
  },
  k.graph "rmsnorm_gate_fp8_block_fp32" {
    dims = { T = k.dynamic, H = { 2048 } }, dtype = "fp32",
    inputs = { x = { "T", "H" }, w = { "H" }, gate = { "T", "H" } },
    body = function(g, x, w, gate)
      local y, s = quant(g, g:rmsnorm(x, w, { epsilon = 1e-6 }) * g:swish(gate), 128, "fp8_e4m3", "fp32")
      return { y = y, s = s }
    end,
  },
  k.graph "rmsnorm_fp8_block_wide" {
    dims = { T = k.dynamic, H = { 32768 } }, dtype = "bf16",
    inputs = { x = { "T", "H" }, w = { "H" } },
    body = function(g, x, w)
      local y, s = quant(g, g:rmsnorm(x, w, { epsilon = 1e-6 }), 128, "fp8_e4m3", "fp32")
      return { y = y, s = s }
    end,
  },
}
