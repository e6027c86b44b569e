-- load a chunk (bytecode or text) outside the sandbox
local k = require "kiln"
local f = load("return 1")
return k.graph "load" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
