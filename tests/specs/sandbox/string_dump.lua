-- dumps a function's bytecode with string.dump through a string literal
local k = require "kiln"
local b = ("").dump(function() end)
return k.graph "string_dump" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
