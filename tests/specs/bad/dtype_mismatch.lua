local k = require "kiln"
return k.graph "dtype_mismatch" {
  inputs = { a = { 4, 8, dtype = "bool" }, b = { 4, 8, dtype = "fp32" } },
  body = function(g, a, b) return { y = g:logical_and(a, b) } end,
}
