-- Element ops after row reductions, in the reductions' kernel (lower.lua's reduction epilogue,
-- the row engine holding or re-reading the row): a per-row scale of its own row, layer norm
-- from primitives in one pass (sibling means, per-row ops, a per-row output), a prologue with a
-- max and exp after it over a row held and one re-read, sibling reductions of two inputs each
-- read again per element, a per-sample scale read as a block per row; ragged rows, bf16, fp16
-- and fp32.
local k = require "kiln"
return {
  k.graph "rowscale_bf16" {
    dims = { T = k.dynamic, H = { 1000, 4096 } }, dtype = "bf16",
    inputs = { x = { "T", "H" } },
    body = function(g, x)
      local m = g:reduction(x, { mode = "amax", dims = { "T", 1 }, dtype = "fp32" })
      return { y = x / (m + 1.0), m = m }
    end,
  },
  k.graph "layernorm_onepass_fp32" {
    dims = { T = k.dynamic, H = { 768, 2048 } }, dtype = "fp32",
    inputs = { x = { "T", "H" }, w = { "H" } },
    body = function(g, x, w)
      local mean = g:reduction(x, { mode = "avg", dims = { "T", 1 } })
      local ms = g:reduction(x * x, { mode = "avg", dims = { "T", 1 } })
      local r = g:rsqrt(ms - mean * mean + 1e-5)
      return { y = (x - mean) * r * w, r = r }
    end,
  },
  k.graph "residual_expmax_fp16" {
    dims = { T = k.dynamic, H = { 2048 } }, dtype = "fp16",
    inputs = { x = { "T", "H" }, r = { "T", "H" } },
    body = function(g, x, r)
      local h = x + r
      local m = g:reduction(h, { mode = "max", dims = { "T", 1 }, dtype = "fp32" })
      return { e = g:exp(h - m), h = h }
    end,
  },
  k.graph "residual_expmax_wide_fp32" {
    dims = { T = k.dynamic, H = { 32768 } }, dtype = "fp32",
    inputs = { x = { "T", "H" }, r = { "T", "H" } },
    body = function(g, x, r)
      local h = x + r
      local m = g:reduction(h, { mode = "max", dims = { "T", 1 } })
      return { e = g:exp(h - m) }
    end,
  },
  k.graph "two_inputs_bf16" {
    dims = { T = k.dynamic, H = { 2048 } }, dtype = "bf16",
    inputs = { a = { "T", "H" }, b = { "T", "H" } },
    body = function(g, a, b)
      local sa = g:reduction(a, { mode = "avg", dims = { "T", 1 }, dtype = "fp32" })
      local sb = g:reduction(b, { mode = "avg", dims = { "T", 1 }, dtype = "fp32" })
      return { y = a * sb + b * sa, sa = sa }
    end,
  },
  k.graph "per_sample_scale_bf16" {
    dims = { B = k.dynamic, S = 64, D = 1152 }, dtype = "bf16",
    inputs = { x = { "B", "S", "D" }, s = { "B", 1, "D", dtype = "fp32" } },
    body = function(g, x, s)
      local xs = x * s
      local m = g:reduction(xs, { mode = "avg", dims = { "B", "S", 1 } })
      return { y = xs - m }
    end,
  },
}
