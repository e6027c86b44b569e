-- throws a table whose __index (read for .code) never returns
local k = require "kiln"
error(setmetatable({}, { __index = function() while true do end end }))
return k.graph "error_index_loop" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
