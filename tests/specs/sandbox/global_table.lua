-- _G, to reach the real globals
local k = require "kiln"
local x = _G.string
return k.graph "global_table" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
