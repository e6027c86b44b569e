-- reaches the op registry through g.nodes[1].def
local k = require "kiln"
return k.graph "graph_internals" { inputs = { x = { 4 } },
  body = function(g, x)
      local y = g:relu(x)
      g.nodes[1].def.infer = nil
      return { y = y }
  end }
