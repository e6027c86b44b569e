-- g:where, as other frameworks call it: kiln's op is binary_select
local k = require "kiln"
return k.graph "where" { dims = { T = k.dynamic }, inputs = { x = { "T", 8 }, m = { "T", 8 } },
  body = function(g, x, m) return { y = g:where(m, x, 0) } end }
