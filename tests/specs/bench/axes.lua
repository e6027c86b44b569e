-- Reductions over other axes for bench/axes.py: per-channel sums of an NCHW activation (the
-- statistics of a batch norm), the sum over the middle axis of [B, S, H] (a sequence pool),
-- column sums of [T, H] (a bias gradient; colreduce), the amax of everything (a per-tensor
-- fp8 scale) and each row's sum and amax (the row engine).
local k = require "kiln"
local function per_channel(name, dtype, C, HW)
  return k.graph(name) {
    dims = { N = k.dynamic, C = { C }, HW = { HW } }, dtype = dtype,
    inputs = { x = { "N", "C", "HW" } },
    body = function(g, x) return { y = g:reduction(x, { mode = "add", dims = { 1, "C", 1 }, dtype = "fp32" }) } end,
  }
end
local function column(name, mode, H, out)
  return k.graph(name) {
    dims = { T = k.dynamic, H = { H } }, dtype = "bf16",
    inputs = { x = { "T", "H" } },
    body = function(g, x) return { y = g:reduction(x, { mode = mode, dims = out, dtype = "fp32" }) } end,
  }
end
return {
  per_channel("chan_fp32_64", "fp32", 64, 3136),
  per_channel("chan_bf16_256", "bf16", 256, 784),
  k.graph "mid_bf16" {
    dims = { B = k.dynamic, S = { 512 }, H = { 1024 } }, dtype = "bf16",
    inputs = { x = { "B", "S", "H" } },
    body = function(g, x) return { y = g:reduction(x, { mode = "add", dims = { "B", 1, "H" }, dtype = "fp32" }) } end,
  },
  column("col_bf16_4096", "add", 4096, { 1, "H" }),
  column("col_bf16_64", "add", 64, { 1, "H" }),
  column("all_amax_bf16", "amax", 4096, { 1, 1 }),
  column("row_sum_bf16", "add", 4096, { "T", 1 }),
  column("row_amax_bf16", "amax", 4096, { "T", 1 }),
}
