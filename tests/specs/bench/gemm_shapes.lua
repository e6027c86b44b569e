-- The GEMMs of real layers, for bench/bench_gemm_shapes.py: linear layers y = x · Wᵀ (W the
-- [N, K] weight, B = Wᵀ with strides {1, K}) with M (tokens) at run time, N and K from
-- LLaMA-3 8B and Mixtral 8x7B (hidden 4096: qkv 6144, o 4096, gate/up 14336, down, the 32000
-- vocabulary head), Qwen2.5 7B (hidden 3584: qkv 4608, o, up 18944, down), GPT-2 small and XL
-- with bias (768 -> 3072, 1600 -> 6400), fp8 e4m3 with per-tensor descales and bf16 out
-- (5120 x 8192, the 4096 / 14336 MLP pair), and a batched product with fp32 out (16 heads'
-- worth of [M, 1024] x [1024, 1024]).
local k = require "kiln"

-- (the body's parameters are the inputs by name)
local BODY = {
  plain = function(g, x, w) return { y = g:matmul(x, w) } end,
  bias = function(g, x, w, b) return { y = g:add(g:matmul(x, w), b) } end,
  fp8 = function(g, x, w, da, db) return { y = g:cast(g:matmul(x, w) * da * db, "bf16") } end,
}

local function linear(name, N, K, kind)
  kind = kind or "plain"
  local adt = kind == "fp8" and "fp8_e4m3" or "bf16"
  local inputs = { x = { "M", "K", dtype = adt }, w = { "K", "N", strides = { 1, "K" }, dtype = adt } }
  if kind == "bias" then inputs.b = { "N" } end
  if kind == "fp8" then inputs.da, inputs.db = { 1, dtype = "fp32" }, { 1, dtype = "fp32" } end
  return k.graph(name) { dims = { M = k.dynamic, N = N, K = K }, dtype = "bf16", inputs = inputs, body = BODY[kind] }
end

local graphs = {}
for _, nk in ipairs({ { 6144, 4096 }, { 4096, 4096 }, { 14336, 4096 }, { 4096, 14336 }, { 32000, 4096 },
                      { 4608, 3584 }, { 3584, 3584 }, { 18944, 3584 }, { 3584, 18944 } }) do
  graphs[#graphs + 1] = linear("linear", nk[1], nk[2])
end
graphs[#graphs + 1] = linear("linear_bias", 3072, 768, "bias")
graphs[#graphs + 1] = linear("linear_bias", 6400, 1600, "bias")
for _, nk in ipairs({ { 5120, 8192 }, { 14336, 4096 }, { 4096, 14336 } }) do
  graphs[#graphs + 1] = linear("linear_fp8", nk[1], nk[2], "fp8")
end
graphs[#graphs + 1] = k.graph "bmm_f32" {
  dims = { M = k.dynamic, Bt = 16, N = 1024, K = 1024 },
  dtype = "bf16",
  inputs = { a = { "Bt", "M", "K" }, b = { "Bt", "K", "N" } },
  body = function(g, a, b) return { c = g:cast(g:matmul(a, b), "fp32") } end,
}
return graphs
