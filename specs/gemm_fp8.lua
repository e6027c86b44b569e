-- y = bf16((A · B) * descale_a * descale_b); amax = max |y|: the per-tensor-scaled fp8 GEMM
-- (cuDNN's matmul_fp8 pattern, bf16 out), e4m3 x e4m3 with B the transposed [N, K] weight
-- (K-major, as the fp8 tensor cores want it), and an e5m2 x e4m3 variant (gradient x weight).
-- The amax is taken of the stored bf16 values: the fp8 tensor cores accumulate with about 13
-- mantissa bits inside each k-block, so an fp32 amax of the unrounded product would differ from
-- the fp64 reference by ~1e-4 relative, far outside `kiln run --check`'s fp32 tolerance.
local k = require "kiln"

local function fp8(name, N, K, adt, bdt)
  return k.graph(name) {
    doc = "fp8 GEMM with per-tensor descales, bf16 out and the amax of the result",
    dims = { M = k.dynamic, N = N, K = K },
    dtype = "bf16",
    inputs = { a = { "M", "K", dtype = adt }, b = { "K", "N", dtype = bdt, strides = { 1, "K" } },
               descale_a = { 1, dtype = "fp32" }, descale_b = { 1, dtype = "fp32" } },
    body = function(g, a, b, descale_a, descale_b)
      local y = g:cast(g:matmul(a, b) * descale_a * descale_b, "bf16")
      return { y = y, amax = g:reduction(y, { mode = "amax", dims = { 1, 1 }, dtype = "fp32" }) }
    end,
  }
end

return {
  fp8("gemm_fp8", 8192, 8192, "fp8_e4m3", "fp8_e4m3"), fp8("gemm_fp8", 1032, 1056, "fp8_e4m3", "fp8_e4m3"),
  fp8("gemm_fp8_e5m2", 1032, 1056, "fp8_e5m2", "fp8_e4m3"),
}
