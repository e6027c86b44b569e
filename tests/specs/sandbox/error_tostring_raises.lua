-- throws an error object whose __tostring raises
local k = require "kiln"
error(setmetatable({}, { __tostring = function() error("again") end }))
return k.graph "error_tostring_raises" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
