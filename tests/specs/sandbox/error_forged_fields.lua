-- throws a forged kiln error whose msg is a table with a looping __concat
local k = require "kiln"
error({ code = "E_SHAPE", msg = setmetatable({}, { __concat = function() while true do end end, __tostring = function() while true do end end }) })
return k.graph "error_forged_fields" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
