-- an xpcall message handler that loops forever
local k = require "kiln"
xpcall(function() error("x") end, function() while true do end end)
return k.graph "xpcall_handler_loop" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
