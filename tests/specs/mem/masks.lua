-- Comparisons into bool outputs and pow by small integer constants, in the PTX forms: pointwise
-- chains (bf16, fp16, fp32) and a norm (a cube in its prologue, a mask of its output in its
-- epilogue); and pow by 0.5, which keeps the CUDA form.
local k = require "kiln"
local function chain(dtype)
  return k.graph("mask_chain_" .. dtype) {
    dims = { T = k.dynamic, H = 1024 }, dtype = dtype,
    inputs = { x = { "T", "H" }, y = { "T", "H" } },
    body = function(g, x, y)
      return {
        gt = g:cmp_gt(x, y), le = g:cmp_le(x, 0.25), ne = g:cmp_neq(x * 2.0, y),
        p = x ^ 2.0 + y ^ 3.0 - x ^ 4.0 * 0.125,
        q = (x * x + 1.5) ^ -1.0 + (y * y + 2.0) ^ -2.0 + x ^ 1.0 + y ^ 0.0,
      }
    end,
  }
end
return {
  chain "bf16", chain "fp16", chain "fp32",
  k.graph "mask_rmsnorm" {
    dims = { T = k.dynamic, H = { 2048, 65536 } }, dtype = "bf16",
    inputs = { x = { "T", "H" }, w = { "H" } },
    body = function(g, x, w)
      -- (pow in the prologue: x^3 of a bf16 x is exact in fp32; a pow of the rounded y would
      -- double y's one-ulp differences from the reference)
      local y = g:rmsnorm(x ^ 3.0, w, { epsilon = 1e-6 })
      return { y = y, positive = g:cmp_gt(y, 0.0) }
    end,
  },
  k.graph "mask_sqrt_pow" {
    dims = { T = k.dynamic, H = 1024 }, dtype = "fp32",
    inputs = { x = { "T", "H" } },
    body = function(g, x) return { y = g:abs(x) ^ 0.5 } end,
  },
}
