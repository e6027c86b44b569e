-- ("x"):rep(1e9): a gigabyte string through the string metatable
local k = require "kiln"
local s = ("x"):rep(1e9)
return k.graph "rep_bomb" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
