-- y = a + b in fp32: the launch-path test's plan (tests/gpu/launch.t).
local k = require "kiln"
return k.graph "add_fp32" {
  dims = { T = k.dynamic, H = 1024 },
  dtype = "fp32",
  inputs = { a = { "T", "H" }, b = { "T", "H" } },
  body = function(g, a, b) return { y = g:add(a, b) } end,
}
