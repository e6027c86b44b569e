local k = require "kiln"
local t = {}
for i = 1, 1e9 do t[i] = string.rep("x", 1000) .. i end
return k.graph "memory_bomb" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
