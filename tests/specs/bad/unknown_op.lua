local k = require "kiln"
return k.graph "unknown_op" {
  inputs = { x = { 4 } },
  body = function(g, x) return { y = g:frobnicate(x) } end,
}
