-- unbounded Lua recursion (stack overflow)
local k = require "kiln"
local function f(n) return 1 + f(n + 1) end
f(1)
return k.graph "deep_recursion" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
