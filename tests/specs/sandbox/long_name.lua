-- a 16 MB node name handed to the compiler
local k = require "kiln"
return k.graph "long_name" { inputs = { x = { 4 } },
  body = function(g, x)
      return { y = g:relu(x, { name = ("n"):rep(16 * 1024 * 1024) }) }
  end }
