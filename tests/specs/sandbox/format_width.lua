-- string.format with a huge field width
local k = require "kiln"
local s = string.format("%099999d", 1)
return k.graph "format_width" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
