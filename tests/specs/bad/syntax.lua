local k = require "kiln"
return k.graph "broken" {
  inputs = { x = { 4 } }
  body = function(g, x) return { y = g:relu(x) } end,
}
