-- C = A · B in bf16 with fp32 accumulation: the plain GEMM, in the two layouts a linear layer
-- uses (B row-major [K, N], and B as the transposed [N, K] weight: strides {1, K}), plus a
-- strided-batched product. M is the runtime dim; N and K are specialized to the benchmark
-- sizes and to an odd pair that is no multiple of any tile (the tails are checked).
local k = require "kiln"

local function gemm(name, N, K, b_strides)
  return k.graph(name) {
    doc = "C = A B, bf16 operands, fp32 accumulation, bf16 out",
    dims = { M = k.dynamic, N = N, K = K },
    dtype = "bf16",
    inputs = { a = { "M", "K" }, b = { "K", "N", strides = b_strides } },
    body = function(g, a, b) return { c = g:matmul(a, b) } end,
  }
end

return {
  gemm("gemm", 4096, 4096), gemm("gemm", 8192, 8192), gemm("gemm", 1032, 1056),
  gemm("gemm_nt", 4096, 4096, { 1, "K" }), gemm("gemm_nt", 1032, 1056, { 1, "K" }),
  k.graph "gemm_batched" {
    doc = "C[b] = A[b] B[b] over 4 batches, bf16",
    dims = { M = k.dynamic, Bt = 4, N = 1032, K = 1056 },
    dtype = "bf16",
    inputs = { a = { "Bt", "M", "K" }, b = { "Bt", "K", "N" } },
    body = function(g, a, b) return { c = g:matmul(a, b) } end,
  },
}
