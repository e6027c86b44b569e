local k = require "kiln"
local n = 0
while true do n = n + 1 end
return k.graph "infinite_loop" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
