-- A plain stream of two rows in and one out (y = a * b), at the backward norms' H: what a
-- kernel moving the backward's tensors and nothing else reaches (bench/stream_bound.py).
local k = require "kiln"
return k.graph "stream" {
  doc = "y = a * b: two rows in, one out",
  dims = { T = k.dynamic, H = { 2048, 4096, 8192 } },
  dtype = "bf16",
  inputs = { a = { "T", "H" }, b = { "T", "H" } },
  body = function(g, a, b) return { y = g:mul(a, b) } end,
}
