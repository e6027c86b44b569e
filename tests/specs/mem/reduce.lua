-- Reductions for the memory-bound engines' tests: per row, per column, over everything.
local k = require "kiln"
local dims = { T = k.dynamic, H = { 4096 } }
local function graph(name, mode, out_dims, axes)
  return k.graph(name) {
    dims = dims,
    dtype = "bf16",
    inputs = { x = { "T", "H" } },
    body = function(g, x)
      return { y = g:reduction(x, { mode = mode, dims = out_dims, axes = axes, dtype = "fp32" }) }
    end,
  }
end
return {
  graph("row_add", "add", { "T", 1 }),
  graph("row_max", "max", { "T", 1 }),
  graph("row_norm2", "norm2", { "T", 1 }),
  graph("col_avg", "avg", nil, { 0 }),
  graph("col_amax", "amax", nil, { 0 }),
  graph("col_mul", "mul", nil, { 0 }),
  graph("all_amax", "amax", { 1, 1 }),
  graph("all_norm1", "norm1", { 1, 1 }),
  -- partial rows too wide for shared memory: column tiles, the last one partial
  k.graph "col_add_wide" {
    dims = { T = k.dynamic, H = { 45000, 65536 } },
    dtype = "fp16",
    inputs = { x = { "T", "H" }, s = { "T", 1, dtype = "fp32" } },
    body = function(g, x, s)
      return { y = g:reduction(x * s, { mode = "add", axes = { 0 }, dtype = "fp32" }) }
    end,
  },
  k.graph "row_sumsq_prologue" {
    dims = dims,
    dtype = "bf16",
    inputs = { x = { "T", "H" }, b = { "H" } },
    body = function(g, x, b)
      local d = x - b
      return { y = g:reduction(d * d, { mode = "add", dims = { "T", 1 }, dtype = "fp32" }) }
    end,
  },
}
