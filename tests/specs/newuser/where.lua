-- g:where(mask, a, b), as torch and numpy call it: kiln's op is g:binary_select
local k = require "kiln"
return k.graph "where" { dims = { T = k.dynamic, H = 256 }, dtype = "fp32", inputs = { x = { "T", "H" } },
  body = function(g, x) return { y = g:where(g:cmp_gt(x, 0), x, 0) } end }
