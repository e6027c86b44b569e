-- rewrites string.format for the whole process through getmetatable("").__index
local k = require "kiln"
pcall(function() getmetatable("").__index.format = function() return "PWNED" end end)
return k.graph "string_metatable" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
