-- debug, to read host upvalues
local k = require "kiln"
local up = debug.getupvalue(k.graph, 1)
return k.graph "debug_library" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
