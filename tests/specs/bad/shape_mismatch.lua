local k = require "kiln"
return k.graph "shape_mismatch" {
  inputs = { a = { 4, 8 }, b = { 4, 6 } },
  body = function(g, a, b) return { y = g:add(a, b) } end,
}
