-- a function as an op attribute (spec code the compiler would call later)
local k = require "kiln"
return k.graph "function_attr" { inputs = { x = { 4 } },
  body = function(g, x)
      return { y = g:relu(x, { negative_slope = function() while true do end end }) }
  end }
