-- replaces the graph builder's metatable
local k = require "kiln"
return k.graph "graph_setmetatable" { inputs = { x = { 4 } },
  body = function(g, x)
      setmetatable(g, {})
      return { y = g:relu(x) }
  end }
