-- Ten plans of one kernel each (y = relu(x) * x), for the start-up benchmark
-- (bench/startup.c): a pack of 10 kernels.
local k = require "kiln"
return k.graph "ten" {
  dims = { T = k.dynamic, H = { 128, 256, 384, 512, 640, 768, 896, 1024, 1152, 1280 } },
  dtype = "bf16",
  inputs = { x = { "T", "H" } },
  body = function(g, x) return { y = g:relu(x) * x } end,
}
