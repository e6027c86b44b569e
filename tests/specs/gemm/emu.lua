-- Small GEMM graphs for the CPU emulator (tests/gemm.t): every layout, a batch, the epilogue
-- kinds (column and row vectors, a residual, a runtime scalar, GELU, fp8 descales and amax).
-- N and K are no multiple of any tile; M is dynamic (tn_static: a column-major A whose
-- leading dimension is provably 16-byte aligned, for the wgmma path). The *_sk graphs have
-- 12 k-blocks (K tails included) so that a partial last wave takes stream-K.
local k = require "kiln"
local N, K = 264, 200

local function g(name, def) def.dims = def.dims or { M = k.dynamic, N = N, K = K }; def.dtype = def.dtype or "bf16"; return k.graph(name)(def) end

-- a bias, a row vector, a scalar, GELU and a residual, C stored too
local function epilogue(K_)
  return { dims = { M = k.dynamic, N = N, K = K_ or K },
           inputs = { a = { "M", "K" }, b = { "K", "N", strides = { 1, "K" } }, bias = { "N" },
                      rb = { "M", 1 }, r = { "M", "N" }, s = { 1, dtype = "fp32", scalar = true } },
           body = function(g, a, b, bias, rb, r, s)
             local c = g:matmul(a, b)
             return { c = c, y = g:gelu(c * s + bias + rb) + r }
           end }
end

-- e4m3 x e5m2 with descales, a bf16 output and its amax
local function fp8(K_)
  return { dims = { M = k.dynamic, N = N, K = K_ },
           inputs = { a = { "M", "K", dtype = "fp8_e4m3" }, b = { "K", "N", dtype = "fp8_e5m2", strides = { 1, "K" } },
                      da = { 1, dtype = "fp32" }, db = { 1, dtype = "fp32" } },
           body = function(g, a, b, da, db)
             local y = g:cast(g:matmul(a, b) * da * db, "bf16")
             return { y = y, amax = g:reduction(y, { mode = "amax", dims = { 1, 1 }, dtype = "fp32" }) }
           end }
end

-- an amax whose largest candidates lie past M and N: there the accumulators are zero and
-- y = bias (1 + 100 [c == 0]) = 101 bias, larger than at any element of C (whose sums of 200
-- random products are never exactly 0) — the staged loop computes those pairs at clamped
-- indices; only live pairs may count
local function amax_tail()
  return { inputs = { a = { "M", "K" }, b = { "K", "N" }, bias = { "N" } },
           body = function(g, a, b, bias)
             local c = g:matmul(a, b)
             local z = g:cast(g:cmp_eq(c, 0.0), "fp32")
             local y = g:cast(g:mul(bias, g:add(g:mul(z, 100.0), 1.0)), "bf16")
             return { y = y, amax = g:reduction(y, { mode = "amax", dims = { 1, 1 }, dtype = "fp32" }) }
           end }
end

-- block-scaled fp8 (dequantize nodes on both operands, their scales applied in the GEMM):
-- fp32 scales per 1 x 128 block of A and per 128 x 128 block of B (N = 384: a 192-column tile
-- meets two of B's blocks), or MXFP8's e8m0 scales per 32 along K (the mma kernel on every SM)
local function fp8_block(K_, N_)
  return { dims = { M = k.dynamic, N = N_ or 384, K = K_ },
           inputs = { a = { "M", "K", dtype = "fp8_e4m3" }, b = { "K", "N", dtype = "fp8_e4m3", strides = { 1, "K" } },
                      sa = { "M", K_ // 128, dtype = "fp32" }, sb = { K_ // 128, (N_ or 384) // 128, dtype = "fp32" } },
           body = function(g, a, b, sa, sb)
             local x = g:block_scale_dequantize(a, sa, { block_size = { 1, 128 } })
             local w = g:block_scale_dequantize(b, sb, { block_size = { 128, 128 } })
             return { y = g:cast(g:matmul(x, w), "bf16") }
           end }
end
local function fp8_mx()
  return { dims = { M = k.dynamic, N = N, K = 256 },
           inputs = { a = { "M", "K", dtype = "fp8_e4m3" }, b = { "K", "N", dtype = "fp8_e5m2", strides = { 1, "K" } },
                      sa = { "M", 8, dtype = "fp8_e8m0" }, sb = { 8, "N", dtype = "fp8_e8m0" } },
           body = function(g, a, b, sa, sb)
             local x = g:block_scale_dequantize(a, sa, { block_size = { 1, 32 } })
             local w = g:block_scale_dequantize(b, sb, { block_size = { 32, 1 } })
             return { y = g:matmul(x, w) }
           end }
end

-- grouped GEMMs (moe_grouped_matmul): 9 experts' rows of T tokens (random sorted offsets, some
-- experts empty) against their weights, K-major [E, N, K] storage, and row-major with an
-- epilogue (the bias broadcast over all rows, GELU); else times 0.5; fp8 too
local function grouped(E, N_, K_, wt, dt, epi)
  local inputs = { x = { "T", "K", dtype = dt }, off = { E, dtype = "int32" },
                   w = { E, "K", "N", dtype = dt, strides = wt and { N_ * K_, 1, "K" } or nil } }
  if epi then inputs.bias = { "N" } end
  local body = epi and function(g, x, off, w, bias) return { y = g:cast(g:gelu(g:moe_grouped_matmul(x, w, off) + bias), "bf16") } end
    or function(g, x, off, w) return { y = g:cast(g:moe_grouped_matmul(x, w, off) * 0.5, "bf16") } end
  return { dims = { T = k.dynamic, N = N_, K = K_ }, inputs = inputs, body = body }
end

return {
  g("nn", { inputs = { a = { "M", "K" }, b = { "K", "N" } },
            body = function(g, a, b) return { c = g:matmul(a, b) } end }),
  g("nt", { inputs = { a = { "M", "K" }, b = { "K", "N", strides = { 1, "K" } } },
            body = function(g, a, b) return { c = g:matmul(a, b) } end }),
  g("tn", { dtype = "fp16", inputs = { a = { "M", "K", strides = { 1, "M" } }, b = { "K", "N" } },
            body = function(g, a, b) return { c = g:matmul(a, b) } end }),
  g("tt", { inputs = { a = { "M", "K", strides = { 1, "M" } }, b = { "K", "N", strides = { 1, "K" } } },
            body = function(g, a, b) return { c = g:matmul(a, b) } end }),
  g("tn_static", { dims = { M = 304, N = N, K = K }, inputs = { a = { "M", "K", strides = { 1, "M" } }, b = { "K", "N" } },
                   body = function(g, a, b) return { c = g:matmul(a, b) } end }),
  g("batched", { dtype = "fp16", dims = { M = k.dynamic, Bt = 2, N = N, K = K },
                 inputs = { a = { "Bt", "M", "K" }, b = { "K", "N" } },
                 body = function(g, a, b) return { c = g:matmul(a, b) } end }),
  g("epilogue", epilogue()),
  -- an fp32 output (staged through shared memory in 32-column chunks)
  g("f32out", { inputs = { a = { "M", "K" }, b = { "K", "N" } },
                body = function(g, a, b) return { c = g:cast(g:matmul(a, b), "fp32") } end }),
  g("fp8", fp8(208)),
  g("amax_tail", amax_tail()),
  g("nn_sk", { dims = { M = k.dynamic, N = N, K = 712 }, inputs = { a = { "M", "K" }, b = { "K", "N" } },
               body = function(g, a, b) return { c = g:matmul(a, b) } end }),
  g("epilogue_sk", epilogue(712)),
  g("fp8_sk", fp8(1424)),
  g("fp8_block", fp8_block(1024)),
  g("fp8_block_sk", fp8_block(1536, 256)),
  g("fp8_mx", fp8_mx()),
  g("grouped", grouped(9, 264, 200, true, "bf16")),
  g("grouped_nn", grouped(5, 264, 200, false, "bf16", true)),
  g("grouped_fp8", grouped(9, 264, 256, true, "fp8_e4m3")),
  -- dual GEMMs (one kernel, two products of a): a gated MLP with transposed weights, and
  -- row-major weights whose products are both stored beside a combination (12 k-blocks: the
  -- stream-K cases too)
  g("dual", { inputs = { x = { "M", "K" }, wg = { "K", "N", strides = { 1, "K" } }, wu = { "K", "N", strides = { 1, "K" } } },
              body = function(g, x, wg, wu) return { y = g:swish(g:matmul(x, wg)) * g:matmul(x, wu) } end }),
  g("dual_nn", { dims = { M = k.dynamic, N = N, K = 712 }, inputs = { x = { "M", "K" }, b1 = { "K", "N" }, b2 = { "K", "N" } },
                 body = function(g, x, b1, b2)
                   local p, q = g:matmul(x, b1), g:matmul(x, b2)
                   return { p = p, q = q, y = g:gelu(p) - q * 0.5 }
                 end }),
}
