-- Two graphs: "fine" builds, "strided_scale" (an rmsnorm whose scale is every second element) no engine takes.
-- check, explain and build must name the second; build still packs the first.
local k = require "kiln"
return {
  k.graph "fine" { dims = { T = k.dynamic, H = 1024 }, dtype = "bf16",
    inputs = { x = { "T", "H" }, w = { "H" } },
    body = function(g, x, w) return { y = g:rmsnorm(x, w, { epsilon = 1e-6 }) } end },
  k.graph "strided_scale" { dims = { T = k.dynamic, H = 1024 }, dtype = "bf16",
    inputs = { x = { "T", "H" }, w = { "H", strides = { 2 } } },
    body = function(g, x, w) return { y = g:rmsnorm(x, w, { epsilon = 1e-6 }) } end },
}
