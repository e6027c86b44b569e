local k = require "kiln"
return k.graph "undeclared_dim" {
  dims = { T = k.dynamic },
  inputs = { x = { "T", "H" } },
  body = function(g, x) return { y = g:relu(x) } end,
}
