local k = require "kiln"
return k.graph "no_outputs" {
  inputs = { x = { 4 } },
  body = function(g, x) g:relu(x); return {} end,
}
