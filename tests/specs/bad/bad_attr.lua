local k = require "kiln"
return k.graph "bad_attr" {
  inputs = { x = { 4 } },
  body = function(g, x) return { y = g:relu(x, { slope_of_doom = 3 }) } end,
}
