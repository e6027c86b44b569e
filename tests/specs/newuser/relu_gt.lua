-- 'x > 0' on a tensor, as in numpy or torch: kiln's op is g:cmp_gt
local k = require "kiln"
return k.graph "relu_gt" { dims = { T = k.dynamic, H = 256 }, dtype = "fp32", inputs = { x = { "T", "H" } },
  body = function(g, x) return { y = g:mul(x, x > 0) } end }
