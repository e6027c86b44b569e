-- y = bf16(dequantize(a, sa) · dequantize(b, sb)): the block-scaled fp8 GEMM of the DeepSeek-V3 /
-- Transformer Engine recipe: e4m3 data, fp32 scales per 1x128 block of the activations (sa
-- [M, K/128]) and per 128x128 block of the weight (sb [K/128, N/128]), B the transposed [N, K]
-- weight (K-major, as the fp8 tensor cores want it), bf16 out. The dequantize nodes fuse into the
-- GEMM: each 128-deep k-block's sums are added in fp32 times their scales.
local k = require "kiln"

local function block_fp8(N, K)
  return k.graph "gemm_fp8_block" {
    doc = "fp8 GEMM with fp32 scales per 1x128 block of A and per 128x128 block of B, bf16 out",
    dims = { M = k.dynamic, N = N, K = K },
    dtype = "bf16",
    inputs = { a = { "M", "K", dtype = "fp8_e4m3" }, b = { "K", "N", dtype = "fp8_e4m3", strides = { 1, "K" } },
               sa = { "M", K // 128, dtype = "fp32" }, sb = { K // 128, N // 128, dtype = "fp32" } },
    body = function(g, a, b, sa, sb)
      local x = g:block_scale_dequantize(a, sa, { block_size = { 1, 128 } })
      local w = g:block_scale_dequantize(b, sb, { block_size = { 128, 128 } })
      return { y = g:cast(g:matmul(x, w), "bf16") }
    end,
  }
end

-- 8192^3, DeepSeek-V3-style projections (7168 <-> 2048), and an instance the GPU check takes
return { block_fp8(8192, 8192), block_fp8(7168, 2048), block_fp8(2048, 7168), block_fp8(1152, 1280) }
