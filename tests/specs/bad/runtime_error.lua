local k = require "kiln"
return k.graph "runtime_error" {
  inputs = { x = { 4 } },
  body = function(g, x) return { y = g:relu(x) + nil } end,
}
