-- 'x == w' on tensors: Lua cannot make it a tensor
local k = require "kiln"
return k.graph "compare_eq" { dims = { T = k.dynamic }, inputs = { x = { "T", 8 }, w = { "T", 8 } },
  body = function(g, x, w) return { y = g:mul(x, x == w) } end }
