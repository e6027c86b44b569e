local k = require "kiln"
return k.graph "leaky_without_slope" {
  inputs = { x = { 4 } },
  body = function(g, x) return { y = g:leaky_relu(x) } end,
}
