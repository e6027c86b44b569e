local k = require "kiln"
return k.graph "compare_to_float" {
  inputs = { a = { 4 }, b = { 4 } },
  body = function(g, a, b) return { y = g:cmp_gt(a, b, { dtype = "fp32" }) } end,
}
