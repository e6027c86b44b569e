-- a to-be-closed variable whose __close loops forever while an error unwinds it
local k = require "kiln"
do local x <close> = setmetatable({}, { __close = function() while true do end end }); error("unwind") end
return k.graph "close_on_error" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
