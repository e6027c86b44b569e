-- rewrites the metatable of the object k.graph returns
local k = require "kiln"
local s = k.graph "graph_spec_handle" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
getmetatable(s).__index = { def = {} }
return s
