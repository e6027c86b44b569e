-- a backtracking pattern match that runs for hours in C, where the count hook never fires
local k = require "kiln"
local found = ("a"):rep(20000):find(".-.-.-b")
return k.graph "pattern_bomb" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
