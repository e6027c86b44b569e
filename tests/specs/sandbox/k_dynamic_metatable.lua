-- rewrites __tostring of k.dynamic's metatable
local k = require "kiln"
getmetatable(k.dynamic).__tostring = function() return "PWNED" end
return k.graph "k_dynamic_metatable" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
