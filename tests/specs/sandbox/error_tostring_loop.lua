-- throws an error object whose __tostring never returns
local k = require "kiln"
error(setmetatable({}, { __tostring = function() while true do end end }))
return k.graph "error_tostring_loop" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
