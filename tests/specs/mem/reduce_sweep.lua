-- Every reduction mode over the last axis in every input dtype, at the widths the row engine
-- specializes for (128, a ragged 1000, 4096, and 65536: a row wider than a CTA holds), with fp32
-- and 16-bit outputs; and reductions over other axes: the middle one of [B, S, H] (per-row
-- sums of a [B, H] result), the leading two to a [1, 1, H] row, and per-channel [1, C, 1, 1]
-- of an [N, C, H, W] tensor, as cuDNN's reduction shape rule writes them (../shared/OPS.md).
local k = require "kiln"
local MODES = { "add", "mul", "min", "max", "amax", "avg", "norm1", "norm2", "mul_no_zeros" }
local graphs = {}
local function row(dtype, H, out)
  graphs[#graphs + 1] = k.graph("row_" .. dtype .. "_" .. out) {
    dims = { T = k.dynamic, H = H }, dtype = dtype,
    inputs = { x = { "T", "H" } },
    body = function(g, x)
      local ys = {}
      for _, m in ipairs(MODES) do
        ys[m] = g:reduction(x, { mode = m, dims = { "T", 1 }, dtype = out })
      end
      return ys
    end,
  }
end
row("fp32", { 128, 1000, 65536 }, "fp32")
row("fp16", { 128, 4096, 65536 }, "fp32")
row("bf16", { 1000, 4096 }, "bf16")
graphs[#graphs + 1] = k.graph "middle_axis" {
  dims = { B = k.dynamic, S = { 7, 512 }, H = { 256 } }, dtype = "bf16",
  inputs = { x = { "B", "S", "H" }, bias = { "H" } },
  body = function(g, x, bias)
    return { sum = g:reduction(x, { mode = "add", dims = { "B", 1, "H" }, dtype = "fp32" }),
             mx = g:reduction(x + bias, { mode = "max", dims = { "B", 1, "H" }, dtype = "fp32" }) }
  end,
}
-- outputs that do not fill a CTA's 256 (200 a row: tiles straddle rows), 300 rows over a cluster
graphs[#graphs + 1] = k.graph "middle_ragged" {
  dims = { B = k.dynamic, S = { 300 }, H = { 200 } }, dtype = "fp16",
  inputs = { x = { "B", "S", "H" } },
  body = function(g, x)
    return { n1 = g:reduction(x, { mode = "norm1", dims = { "B", 1, "H" }, dtype = "fp16" }),
             mn = g:reduction(x, { mode = "min", dims = { "B", 1, "H" }, dtype = "fp32" }) }
  end,
}
-- rows not compile-time and few outputs: the rows split over CTAs (slices), a second kernel
-- adding their partials in slice order; ragged rows of 200
graphs[#graphs + 1] = k.graph "middle_slices" {
  dims = { B = { 3 }, S = k.dynamic, H = { 200 } }, dtype = "fp16",
  inputs = { x = { "B", "S", "H" } },
  body = function(g, x)
    return { sum = g:reduction(x, { mode = "add", dims = { "B", 1, "H" }, dtype = "fp32" }),
             mx = g:reduction(x, { mode = "max", dims = { "B", 1, "H" }, dtype = "fp32" }) }
  end,
}
graphs[#graphs + 1] = k.graph "leading_axes" {
  dims = { B = k.dynamic, S = { 33 }, H = { 1000 } }, dtype = "fp16",
  inputs = { x = { "B", "S", "H" } },
  body = function(g, x)
    return { avg = g:reduction(x, { mode = "avg", dims = { 1, 1, "H" }, dtype = "fp32" }) }
  end,
}
graphs[#graphs + 1] = k.graph "per_channel" {
  dims = { N = k.dynamic, C = { 64 }, H = { 28 }, W = { 28 } }, dtype = "fp32",
  inputs = { x = { "N", "C", "H", "W" }, gamma = { 1, "C", 1, 1 } },
  body = function(g, x, gamma)
    return { norm2 = g:reduction(x, { mode = "norm2", dims = { 1, "C", 1, 1 }, dtype = "fp32" }),
             mean = g:reduction(x * gamma, { mode = "avg", dims = { 1, "C", 1, 1 }, dtype = "fp32" }),
             amax = g:reduction(x, { mode = "amax", dims = { 1, "C", 1, 1 }, dtype = "bf16" }) }
  end,
}
-- a middle block with its kept axes dynamic (colreduce wants them compile-time)
graphs[#graphs + 1] = k.graph "leading_dynamic" {
  dims = { S = { 3 }, T = k.dynamic }, dtype = "fp16",
  inputs = { x = { "S", "T" } },
  body = function(g, x) return { y = g:reduction(x, { mode = "min", dims = { 1, "T" }, dtype = "fp32" }) } end,
}
return graphs
