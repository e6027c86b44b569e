-- a to-be-closed variable whose __close loops forever
local k = require "kiln"
do local x <close> = setmetatable({}, { __close = function() while true do end end }) end
return k.graph "close_loop" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
