-- Per-row reductions inside a forward norm's epilogue (lower.lua, rowred/rowpw): values the
-- epilogue makes, reduced over each row, per-row ops on the results, and element ops that read
-- them again; fp16 and fp32 rows, a ragged row, a per-row input, two reductions in one kernel,
-- a sum, an l2 norm and a mean, per-row outputs of every dtype.
local k = require "kiln"
return {
  k.graph "layernorm_fp8_rowwise_fp16" {
    dims = { T = k.dynamic, H = { 1024, 4096 } }, dtype = "fp16",
    inputs = { x = { "T", "H" }, w = { "H" }, b = { "H" }, cap = { "T", 1, dtype = "fp32" } },
    body = function(g, x, w, b, cap)
      local t = g:layernorm(x, w, b, { epsilon = 1e-5 })
      local am = g:reduction(g:swish(t), { mode = "amax", dims = { "T", 1 }, dtype = "fp32" })
      local s = g:cast(g:min(g:max(am, 1e-6), cap) * (1.0 / 448.0), "fp32")
      return { y = g:cast(g:swish(t) / s, "fp8_e4m3"), scale = s }
    end,
  },
  k.graph "rmsnorm_row_stats_fp32" {
    dims = { T = k.dynamic, H = { 1000, 2048 } }, dtype = "fp32",
    inputs = { x = { "T", "H" }, w = { "H" } },
    body = function(g, x, w)
      local t = g:rmsnorm(x, w, { epsilon = 1e-6 })
      local sum = g:reduction(t * 0.5, { mode = "add", dims = { "T", 1 }, dtype = "fp32" })
      local l2 = g:reduction(t, { mode = "norm2", dims = { "T", 1 }, dtype = "fp32" })
      local c = g:cast(sum / l2, "fp32")
      return { y = t - c, sum = sum, l2 = l2, c = c }
    end,
  },
  k.graph "rmsnorm_centered_bf16" {
    dims = { T = k.dynamic, H = { 8192 } }, dtype = "bf16",
    inputs = { x = { "T", "H" }, r = { "T", "H" }, w = { "H" } },
    body = function(g, x, r, w)
      local h = x + r
      local t = g:rmsnorm(h, w, { epsilon = 1e-6 })
      local m = g:reduction(t, { mode = "avg", dims = { "T", 1 }, dtype = "fp32" })
      return { y = t - m, h = h, m = g:cast(m, "bf16") }
    end,
  },
}
