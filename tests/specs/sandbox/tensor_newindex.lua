-- assigns a tensor field (its name)
local k = require "kiln"
return k.graph "tensor_newindex" { inputs = { x = { 4 } },
  body = function(g, x)
      x.name = "PWNED"
      return { y = g:relu(x) }
  end }
