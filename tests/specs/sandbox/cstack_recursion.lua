-- unbounded recursion through an __index metamethod (C stack)
local k = require "kiln"
local t = setmetatable({}, {})
getmetatable(t).__index = function(t, key) return t[key .. "x"] end
local v = t.a
return k.graph "cstack_recursion" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
