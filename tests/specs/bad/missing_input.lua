local k = require "kiln"
return k.graph "missing_input" {
  inputs = { x = { 4 } },
  body = function(g, x) return { y = g:add(x) } end,
}
