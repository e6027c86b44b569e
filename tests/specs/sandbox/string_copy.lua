-- replaces format in the spec's own string table (a per-spec copy)
local k = require "kiln"
string.format = function() return "PWNED" end
string.rep = function() return "PWNED" end
return k.graph "string_copy" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
