local k = require "kiln"
local f = io.open("/etc/passwd")
return k.graph "io_open" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
