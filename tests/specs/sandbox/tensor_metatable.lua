-- rewrites the shared Tensor metatable (__add) through a tensor
local k = require "kiln"
return k.graph "tensor_metatable" { inputs = { x = { 4 } },
  body = function(g, x)
      pcall(function() getmetatable(x).__add = function() return "PWNED" end end)
      return { y = g:relu(x + x) }
  end }
