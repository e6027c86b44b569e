-- The pointwise kernels with their bodies in PTX (pointwise_ptx.lua): every op with a PTX form,
-- fp32/fp16/bf16 tensors mixed, a runtime scalar, constants, a single fp32 value, casts, an fp8
-- output, several outputs, a narrow value read again, GELU into bf16, rows repeating along T (a
-- bias, a [1, H] scale: the CUDA form under KILN_PLAN=pointwise.repeat=cuda), and one the PTX form declines
-- (GELU into fp32: erff); relu with clips and the comparisons read as 0/1.
local k = require "kiln"
local dims = { T = k.dynamic, H = { 1000, 4096 } }
return {
  k.graph "pw_ops_bf16" {
    dims = dims, dtype = "bf16",
    inputs = { a = { "T", "H" }, b = { "T", "H" }, s = { scalar = true, dtype = "fp32" } },
    body = function(g, a, b, s)
      local t = g:max(a, b) - g:min(a, b) * s
      return { y = g:sigmoid(t) + g:exp(g:neg(g:abs(b))) / (g:abs(a) + 1.5), z = g:swish(t) }
    end,
  },
  k.graph "pw_mixed" {
    dims = dims, dtype = "fp16",
    inputs = { x = { "T", "H", dtype = "fp32" }, r = { "T", "H" }, c = { 1, 1, dtype = "fp32" } },
    -- y is read from h rounded to bf16: its tolerance is a 16-bit one (the reference rounds
    -- x + r from float64, the kernel from its fp32 sum: a rare one-ulp difference in h), and a
    -- product, so that ulp stays one relative to y (h * 0.5 - r cancelled it into a mismatch,
    -- 2 of 1052672 elements, on the H200 on 2026-12-02)
    body = function(g, x, r, c)
      local h = g:cast(x + r, "bf16")
      return { h = h, y = g:cast(h * 0.5 * r, "bf16"), z = x * c }
    end,
  },
  k.graph "pw_relu_cmp" {
    dims = dims, dtype = "bf16",
    inputs = { a = { "T", "H" }, b = { "T", "H" } },
    -- relu with its clips and slope, and comparisons whose 0/1 later ops read
    body = function(g, a, b)
      local r = g:relu(a, { lower_clip = -0.5, upper_clip = 1.25, negative_slope = 0.125 })
      local m = g:cmp_gt(a, b) + g:cmp_le(b, 0.25) * 2.0 + g:cmp_neq(a, a) * 4.0
      return { y = r * m + g:relu(b), z = g:cmp_lt(a, -0.75) - g:cmp_ge(b, 1.0) + g:cmp_eq(a, a) }
    end,
  },
  k.graph "pw_fp8" {
    dims = dims, dtype = "bf16",
    inputs = { x = { "T", "H" }, s = { scalar = true, dtype = "fp32" } },
    body = function(g, x, s) return { q = g:cast(x * s, "fp8_e4m3") } end,
  },
  k.graph "pw_row_broadcast" {
    dims = dims, dtype = "bf16",
    inputs = { x = { "T", "H" }, bias = { "H" }, g2 = { 1, "H", dtype = "fp32" } },
    body = function(g, x, bias, g2) return { y = g:gelu(x + bias), z = x * g2 } end,
  },
  k.graph "pw_gelu_fp32" {
    dims = dims, dtype = "fp32",
    inputs = { x = { "T", "H" } },
    body = function(g, x) return { y = g:gelu(x) } end,
  },
}
